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
    /// `span`, counted `tokens`, cut finer from hierarchy level `finer_level` on if need be.
    fn of(span: Span, tokens: usize, finer_level: usize) -> Self {
        Self {
            start: span.start,
            end: span.end,
            tokens,
            finer_level,
        }
    }

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

/// Whitespace that a BERT tokenizer keeps as a word break. Its normaliser deletes control
/// characters other than tab, line feed and carriage return, so `a\u{b}b` is one word there
/// although Rust counts U+000B as whitespace.
fn separates_words(c: char) -> bool {
    c.is_whitespace() && (!c.is_control() || matches!(c, '\t' | '\n' | '\r'))
}

/// Measures ranges of one text against one token bound.
///
/// With a counter whose tokens never cross whitespace
/// ([`TokenCounter::splits_at_whitespace_and_punctuation`], every BERT-style tokenizer), the
/// count of a range made of parts that meet at whitespace is the sum of the parts' counts, so a
/// range already counted part by part is never counted again (see [`Self::count_joined`]).
/// Every cut of the hierarchy above characters falls right after whitespace.
pub(crate) struct Measurer<'a> {
    text: &'a str,
    counter: &'a dyn TokenCounter,
    max_tokens: usize,
    /// The counter's counts add up across whitespace.
    additive: bool,
}

impl<'a> Measurer<'a> {
    pub fn new(text: &'a str, counter: &'a dyn TokenCounter, max_tokens: usize) -> Self {
        Self {
            text,
            counter,
            max_tokens,
            additive: counter.splits_at_whitespace_and_punctuation(),
        }
    }

    /// Whether counts add up across byte `at` (a char boundary): the counter's tokens never
    /// cross whitespace and `at` touches whitespace (or an end of the text).
    pub fn adds_at(&self, at: usize) -> bool {
        self.additive
            && (at == 0
                || at >= self.text.len()
                || self.text[..at].ends_with(separates_words)
                || self.text[at..].starts_with(separates_words))
    }

    /// Tokens of `span`, whose parts counted `sum` together and meet at the byte offsets
    /// `joints`: `sum` when counts add up across every joint, otherwise one real count.
    pub fn count_joined(
        &self,
        span: Span,
        sum: usize,
        mut joints: impl Iterator<Item = usize>,
    ) -> usize {
        if self.additive && joints.all(|at| self.adds_at(at)) {
            sum
        } else {
            self.count(span)
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
        // Counts that add up: the parts of the first cut are counted once, and their sum tells
        // whether the span fits whole.
        if let Some((level, parts)) = self.cuts_from(span, 0)
            && parts[1..].iter().all(|part| self.adds_at(part.start))
        {
            let counts: Vec<usize> = parts.iter().map(|&part| self.count(part)).collect();
            let tokens: usize = counts.iter().sum();
            if tokens <= self.max_tokens {
                out.push(Piece::of(span, tokens, 0));
            } else {
                for (part, tokens) in parts.into_iter().zip(counts) {
                    self.place(part, tokens, level, out);
                }
            }
            return;
        }
        if span.end - span.start <= self.max_tokens * BYTES_PER_TOKEN_BEFORE_CUTTING {
            let tokens = self.count(span);
            if tokens <= self.max_tokens {
                out.push(Piece::of(span, tokens, 0));
                return;
            }
        }
        self.cut(span, 0, out);
    }

    /// Cuts a span known (or assumed) not to fit, starting at hierarchy `level`.
    fn cut(&self, span: Span, level: usize, out: &mut Vec<Piece>) {
        match self.cuts_from(span, level) {
            Some((level, parts)) => {
                for part in parts {
                    let tokens = self.count(part);
                    self.place(part, tokens, level, out);
                }
            }
            None => self.cut_characters(span, out),
        }
    }

    /// The first hierarchy level from `level` on, above characters, with cuts inside `span`,
    /// and the parts it cuts `span` into; `None` when only characters are left.
    fn cuts_from(&self, span: Span, level: usize) -> Option<(usize, Vec<Span>)> {
        (level..CHARACTER_LEVEL).find_map(|level| {
            let cuts = cut_points(span.slice(self.text), level);
            if cuts.is_empty() {
                return None;
            }
            let ends = cuts
                .into_iter()
                .map(|at| span.start + at)
                .chain(std::iter::once(span.end));
            let mut start = span.start;
            let parts = ends
                .map(|end| {
                    let part = Span::new(start, end);
                    start = end;
                    part
                })
                .collect();
            Some((level, parts))
        })
    }

    /// A part of a level-`level` cut, counted `tokens`: a piece when it fits, cut finer
    /// otherwise.
    fn place(&self, part: Span, tokens: usize, level: usize, out: &mut Vec<Piece>) {
        if tokens <= self.max_tokens {
            out.push(Piece::of(part, tokens, level + 1));
        } else {
            self.cut(part, level + 1, out);
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
            let piece = Span::new(bounds[first], bounds[good]);
            out.push(Piece::of(piece, good_tokens, CHARACTER_LEVEL));
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

    /// Counts add up across whitespace the tokenizer keeps, never across a control character
    /// it deletes (a proptest found `a\u{b}a` counted as two words).
    #[test]
    fn counts_add_up_only_across_whitespace_the_tokenizer_keeps() {
        let counter = test_counter();
        let text = "alpha beta\u{b}gamma\u{a0}delta\u{85}epsilon\tzeta";
        let measurer = Measurer::new(text, counter.as_ref(), 64);
        let at = |needle: &str| text.find(needle).unwrap();
        assert!(measurer.adds_at(at("beta")));
        assert!(
            !measurer.adds_at(at("gamma")),
            "U+000B is deleted, not a break"
        );
        assert!(measurer.adds_at(at("delta")), "U+00A0 is a break");
        assert!(
            !measurer.adds_at(at("epsilon")),
            "U+0085 is deleted, not a break"
        );
        assert!(measurer.adds_at(at("zeta")));
        assert!(!measurer.adds_at(at("pha")), "inside a word");
        let whole = Span::new(0, text.len());
        let parts = [at("beta"), at("gamma"), at("delta")];
        // Across U+000B the pieces' counts are not trusted: one real count.
        assert_eq!(
            measurer.count_joined(whole, 0, parts.into_iter()),
            counter.count_tokens(text)
        );
        assert_eq!(measurer.count_joined(whole, 7, [at("beta")].into_iter()), 7);
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
