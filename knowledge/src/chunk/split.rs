//! The separator hierarchy: cutting a byte range of a text into measured pieces that each fit
//! the token bound — paragraphs first, then lines, sentence ends, clauses, words, and
//! characters as the last resort. Each piece is counted once; a piece is cut finer only when it
//! is too large.

use crate::embed::TokenCounter;

use super::span::Span;

/// One level of the hierarchy. A cut falls right after each separator occurrence, so the
/// separator stays at the end of the piece before it and pieces tile the range without gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Separator {
    /// Any of these literal strings.
    Literal(&'static [&'static str]),
    /// A run of Unicode whitespace (word boundaries).
    Whitespace,
    /// Character boundaries, packed greedily up to the bound.
    Characters,
}

/// Coarsest first.
pub(crate) const HIERARCHY: &[Separator] = &[
    Separator::Literal(&["\n\n"]),
    Separator::Literal(&["\n"]),
    Separator::Literal(&[". ", "? ", "! "]),
    Separator::Literal(&["; "]),
    Separator::Literal(&[", "]),
    Separator::Whitespace,
    Separator::Characters,
];

/// Index of [`Separator::Characters`] in [`HIERARCHY`].
pub(crate) const CHARACTER_LEVEL: usize = HIERARCHY.len() - 1;

/// Ranges longer than this many bytes per allowed token are cut before being counted whole:
/// they almost never fit, and a cut range is counted piece by piece anyway.
const BYTES_PER_TOKEN_BEFORE_CUTTING: usize = 16;

/// A contiguous byte range with its token count (≤ the bound it was measured against).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub start: usize,
    pub end: usize,
    pub tokens: usize,
    /// First hierarchy level that may cut this piece further (overlap refinement).
    pub finer_level: usize,
}

impl Piece {
    pub fn span(self) -> Span {
        Span::new(self.start, self.end)
    }
}

/// Cut positions of `slice` at hierarchy `level`, relative to the slice, strictly inside it and
/// ascending. Always empty for [`Separator::Characters`].
pub(crate) fn cut_points(slice: &str, level: usize) -> Vec<usize> {
    let mut cuts = Vec::new();
    match HIERARCHY.get(level) {
        Some(Separator::Literal(separators)) => {
            for separator in *separators {
                cuts.extend(
                    slice
                        .match_indices(separator)
                        .map(|(at, _)| at + separator.len()),
                );
            }
            if separators.len() > 1 {
                cuts.sort_unstable();
                cuts.dedup();
            }
        }
        Some(Separator::Whitespace) => {
            let mut previous_was_space = false;
            for (at, c) in slice.char_indices() {
                let is_space = c.is_whitespace();
                if previous_was_space && !is_space {
                    cuts.push(at);
                }
                previous_was_space = is_space;
            }
        }
        Some(Separator::Characters) | None => {}
    }
    cuts.retain(|&at| at > 0 && at < slice.len());
    cuts
}

/// Measures ranges of one text against one token bound.
pub(crate) struct Measurer<'a> {
    text: &'a str,
    counter: &'a dyn TokenCounter,
    max_tokens: usize,
}

impl<'a> Measurer<'a> {
    pub fn new(text: &'a str, counter: &'a dyn TokenCounter, max_tokens: usize) -> Self {
        Self {
            text,
            counter,
            max_tokens,
        }
    }

    /// Tokens of a span (whitespace-only spans count zero without asking the tokenizer).
    pub fn count(&self, span: Span) -> usize {
        let slice = span.slice(self.text);
        if slice.trim().is_empty() {
            0
        } else {
            self.counter.count_tokens(slice)
        }
    }

    /// Appends pieces tiling `span`, each within the bound: the whole span if it fits,
    /// otherwise cut along the hierarchy.
    pub fn measure(&self, span: Span, out: &mut Vec<Piece>) {
        if span.start == span.end {
            return;
        }
        if span.end - span.start <= self.max_tokens * BYTES_PER_TOKEN_BEFORE_CUTTING {
            let tokens = self.count(span);
            if tokens <= self.max_tokens {
                out.push(Piece {
                    start: span.start,
                    end: span.end,
                    tokens,
                    finer_level: 0,
                });
                return;
            }
        }
        self.cut(span, 0, out);
    }

    /// Cuts a span known (or assumed) not to fit, starting at hierarchy `level`.
    fn cut(&self, span: Span, level: usize, out: &mut Vec<Piece>) {
        for level in level..HIERARCHY.len() {
            if level == CHARACTER_LEVEL {
                self.cut_characters(span, out);
                return;
            }
            let cuts = cut_points(span.slice(self.text), level);
            if cuts.is_empty() {
                continue;
            }
            let mut start = span.start;
            for end in cuts
                .into_iter()
                .map(|at| span.start + at)
                .chain(std::iter::once(span.end))
            {
                let piece = Span::new(start, end);
                let tokens = self.count(piece);
                if tokens <= self.max_tokens {
                    out.push(Piece {
                        start,
                        end,
                        tokens,
                        finer_level: level + 1,
                    });
                } else {
                    self.cut(piece, level + 1, out);
                }
                start = end;
            }
            return;
        }
    }

    /// Last resort for a run without separators: the longest prefixes (on char boundaries)
    /// that fit, found by galloping then bisecting, so each probe costs at most about twice
    /// the piece it finds.
    fn cut_characters(&self, span: Span, out: &mut Vec<Piece>) {
        let bounds: Vec<usize> = span
            .slice(self.text)
            .char_indices()
            .map(|(at, _)| span.start + at)
            .chain(std::iter::once(span.end))
            .collect();
        let last = bounds.len() - 1;
        let mut first = 0;
        while first < last {
            let count_to = |end: usize| self.count(Span::new(bounds[first], bounds[end]));
            // One character always makes progress; with max_tokens ≥ 8 it also fits.
            let mut good = first + 1;
            let mut good_tokens = count_to(good);
            let mut bad = None;
            let mut probe = (first + self.max_tokens.max(2)).min(last);
            while probe > good {
                let tokens = count_to(probe);
                if tokens <= self.max_tokens {
                    good = probe;
                    good_tokens = tokens;
                    if probe == last {
                        break;
                    }
                    probe = (first + 2 * (probe - first)).min(last);
                } else {
                    bad = Some(probe);
                    break;
                }
            }
            if let Some(mut bad) = bad {
                while bad - good > 1 {
                    let middle = good + (bad - good) / 2;
                    let tokens = count_to(middle);
                    if tokens <= self.max_tokens {
                        good = middle;
                        good_tokens = tokens;
                    } else {
                        bad = middle;
                    }
                }
            }
            out.push(Piece {
                start: bounds[first],
                end: bounds[good],
                tokens: good_tokens,
                finer_level: CHARACTER_LEVEL,
            });
            first = good;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::invariants::test_counter;

    #[test]
    fn cut_points_keep_separators_with_the_piece_before() {
        let text = "One. Two? Three! Four.";
        let cuts = cut_points(text, 2);
        let pieces: Vec<&str> = std::iter::once(0)
            .chain(cuts.iter().copied())
            .zip(cuts.iter().copied().chain(std::iter::once(text.len())))
            .map(|(a, b)| &text[a..b])
            .collect();
        assert_eq!(pieces, ["One. ", "Two? ", "Three! ", "Four."]);
        assert_eq!(cut_points("a  b\tc", 5), [3, 5]);
        assert!(cut_points("no separator here", 0).is_empty());
        assert!(cut_points("abc", CHARACTER_LEVEL).is_empty());
    }

    #[test]
    fn pieces_tile_the_range_and_fit_the_bound() {
        let counter = test_counter();
        let text = "Paragraph one has a few words.\n\nParagraph two, which is longer, has \
                    clauses; and more clauses, and still more words to split. Another sentence \
                    follows here!\n\n数据数据数据数据数据数据数据数据数据数据数据数据数据数据😀😀";
        let measurer = Measurer::new(text, counter.as_ref(), 8);
        let mut pieces = Vec::new();
        measurer.measure(Span::new(0, text.len()), &mut pieces);
        let mut at = 0;
        for piece in &pieces {
            assert_eq!(piece.start, at, "pieces tile the text");
            assert!(piece.tokens <= 8, "{piece:?}");
            assert_eq!(
                piece.tokens,
                counter.count_tokens(&text[piece.start..piece.end])
            );
            at = piece.end;
        }
        assert_eq!(at, text.len());
        assert!(pieces.iter().any(|p| p.finer_level == CHARACTER_LEVEL));
    }
}
