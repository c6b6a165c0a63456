//! Packing measured pieces into chunks: adjacent pieces merge greedily while the sum of their
//! counts fits the bound, each merged candidate is verified with one real count (and shrunk if
//! the tokenizer disagrees with the sum), and the previous chunk's tail is repeated at the next
//! chunk's head as overlap, starting on a piece boundary. Where the tokenizer's counts add up
//! across the pieces' joints (`Measurer::count_joined`), the sum is the count and nothing is
//! counted again.

use super::ChunkBounds;
use super::span::Span;
use super::split::{CHARACTER_LEVEL, Measurer, Piece, cut_points};

/// Where overlap may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverlapBoundary {
    /// Only at the pieces' own boundaries (whole sentences for the sentence strategy).
    WholePieces,
    /// Also inside the last piece, at the coarsest finer separator that yields a tail within
    /// the budget (never between characters of a word).
    WithinLastPiece,
}

/// Overlap carried into the next chunk: where it starts and its real token count.
#[derive(Debug, Clone, Copy)]
struct Head {
    start: usize,
    tokens: usize,
}

pub(crate) struct Packer<'a> {
    measurer: &'a Measurer<'a>,
    text: &'a str,
    bounds: ChunkBounds,
    boundary: OverlapBoundary,
}

impl<'a> Packer<'a> {
    pub fn new(
        measurer: &'a Measurer<'a>,
        text: &'a str,
        bounds: ChunkBounds,
        boundary: OverlapBoundary,
    ) -> Self {
        Self {
            measurer,
            text,
            bounds,
            boundary,
        }
    }

    /// Trimmed, non-empty chunk spans in document order. `pieces` must tile a range of the
    /// text in order, each within the bound.
    pub fn pack(&self, pieces: &[Piece]) -> Vec<Span> {
        let max = self.bounds.max_tokens;
        let mut spans: Vec<Span> = Vec::new();
        let mut head: Option<Head> = None;
        let mut first = 0;
        while first < pieces.len() {
            let mut estimate = head.map_or(0, |h| h.tokens);
            let mut end = first;
            while end < pieces.len() && (end == first || estimate + pieces[end].tokens <= max) {
                estimate += pieces[end].tokens;
                end += 1;
            }
            let mut start = head.map_or(pieces[first].start, |h| h.start);
            let mut with_head = head.is_some();
            let chunk = loop {
                let Some(span) = Span::new(start, pieces[end - 1].end).trimmed(self.text) else {
                    break None;
                };
                // A lone piece was counted when it was measured.
                if end == first + 1 && !with_head {
                    break Some(span);
                }
                let joined = &pieces[first..end];
                if self.joined_count(span, head.filter(|_| with_head), joined) <= max {
                    break Some(span);
                }
                if end > first + 1 {
                    end -= 1;
                } else {
                    with_head = false;
                    start = pieces[first].start;
                }
            };
            head = None;
            if let Some(span) = chunk
                && spans.last().is_none_or(|last| span.end > last.end)
            {
                spans.push(span);
                if end < pieces.len() && self.bounds.overlap > 0 {
                    let budget = self
                        .bounds
                        .overlap
                        .min(max.saturating_sub(pieces[end].tokens));
                    head = self.tail(&pieces[first..end], span, with_head, budget);
                }
            }
            first = end;
        }
        spans
    }

    /// The overlap for the chunk after `chunk` (made of `pieces`, preceded by a head of its own
    /// when `chunk_has_head`): the longest tail within `budget` tokens that starts on a
    /// boundary strictly after the chunk's start.
    fn tail(
        &self,
        pieces: &[Piece],
        chunk: Span,
        chunk_has_head: bool,
        budget: usize,
    ) -> Option<Head> {
        // Whitespace-only pieces trimmed off the chunk's end have nothing to repeat.
        let content = pieces.iter().rposition(|p| p.start < chunk.end)?;
        let pieces = &pieces[..=content];
        if budget == 0 {
            return None;
        }
        // Whole pieces from the back; without a head the first piece would make the tail the
        // whole chunk, which is no progress.
        let lowest = usize::from(!chunk_has_head);
        let mut first = pieces.len();
        let mut sum = 0;
        while first > lowest && sum + pieces[first - 1].tokens <= budget {
            sum += pieces[first - 1].tokens;
            first -= 1;
        }
        // Each candidate with the summed count of the parts from it to the chunk's end.
        let mut whole: Vec<(usize, usize)> = pieces[first..]
            .iter()
            .rev()
            .scan(0, |sum, p| {
                *sum += p.tokens;
                Some((p.start, *sum))
            })
            .collect();
        whole.reverse();
        self.confirm_tail(&whole, chunk, budget).or_else(|| {
            if self.boundary == OverlapBoundary::WithinLastPiece {
                let within = self.starts_within(pieces[pieces.len() - 1], budget);
                self.confirm_tail(&within, chunk, budget)
            } else {
                None
            }
        })
    }

    /// Tokens of `span`, made of `head` (when given) followed by `pieces`: the sum of their
    /// counts when the counter adds up across every joint, otherwise one real count.
    fn joined_count(&self, span: Span, head: Option<Head>, pieces: &[Piece]) -> usize {
        let sum = head.map_or(0, |h| h.tokens) + pieces.iter().map(|p| p.tokens).sum::<usize>();
        let joints = pieces
            .iter()
            .skip(usize::from(head.is_none()))
            .map(|p| p.start);
        self.measurer.count_joined(span, sum, joints)
    }

    /// The first candidate (longest tail first) whose count fits `budget`. Candidates are
    /// `(start, summed count from there to the chunk's end)`, ascending, the parts between them
    /// tiling the tail. Sums are estimates unless the counter adds up across the candidates
    /// after it, so one real count confirms them where it must.
    fn confirm_tail(
        &self,
        candidates: &[(usize, usize)],
        chunk: Span,
        budget: usize,
    ) -> Option<Head> {
        candidates.iter().enumerate().find_map(|(i, &(at, sum))| {
            if at <= chunk.start || at >= chunk.end {
                return None;
            }
            let tail = Span::new(at, chunk.end).trimmed(self.text)?;
            let joints = candidates[i + 1..].iter().map(|&(start, _)| start);
            let tokens = self.measurer.count_joined(tail, sum, joints);
            (tokens <= budget).then_some(Head {
                start: tail.start,
                tokens,
            })
        })
    }

    /// Tail starts inside `piece`, ascending, each with the summed count from there to the
    /// piece's end, at the coarsest finer level where at least one sub-piece (never the first)
    /// fits `budget`. Only the sub-pieces walked from the back are counted; when the last one
    /// alone is too large, the search narrows to it.
    fn starts_within(&self, piece: Piece, budget: usize) -> Vec<(usize, usize)> {
        let mut range = piece.span();
        for level in piece.finer_level..CHARACTER_LEVEL {
            let cuts = cut_points(range.slice(self.text), level);
            if cuts.is_empty() {
                continue;
            }
            let starts: Vec<usize> = std::iter::once(range.start)
                .chain(cuts.iter().map(|at| range.start + at))
                .collect();
            let mut fitting = Vec::new();
            let mut sum = 0;
            let mut end = range.end;
            for &start in starts[1..].iter().rev() {
                sum += self.measurer.count(Span::new(start, end));
                if sum > budget {
                    break;
                }
                fitting.push((start, sum));
                end = start;
            }
            if !fitting.is_empty() {
                fitting.reverse();
                return fitting;
            }
            if let Some(&last_start) = starts.last() {
                range = Span::new(last_start, range.end);
            }
        }
        Vec::new()
    }
}
