//! Byte spans of a document's text: trimming whitespace by moving offsets, and turning a span
//! into a [`Chunk`] whose text is exactly the spanned slice.

use crate::types::{Chunk, Metadata};

/// A byte range `start..end` of a text, on char boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        debug_assert!(start <= end, "span {start}..{end} is reversed");
        Self { start, end }
    }

    /// The spanned slice of `text`.
    pub fn slice(self, text: &str) -> &str {
        &text[self.start..self.end]
    }

    /// The same span without leading and trailing whitespace; `None` when nothing else is left.
    pub fn trimmed(self, text: &str) -> Option<Span> {
        let slice = self.slice(text);
        let without_leading = slice.trim_start();
        let trimmed = without_leading.trim_end();
        if trimmed.is_empty() {
            return None;
        }
        let start = self.start + (slice.len() - without_leading.len());
        Some(Span::new(start, start + trimmed.len()))
    }

    /// A chunk of `text` covering exactly this span.
    pub fn to_chunk(self, text: &str, metadata: Metadata) -> Chunk {
        Chunk {
            text: self.slice(text).to_string(),
            start: self.start,
            end: self.end,
            metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_moves_offsets_and_keeps_the_slice() {
        let text = "  \n héllo wörld \t\n";
        let span = Span::new(0, text.len()).trimmed(text).expect("has content");
        assert_eq!(span.slice(text), "héllo wörld");
        assert_eq!(&text[span.start..span.end], "héllo wörld");
        assert_eq!(Span::new(0, 4).trimmed(text), None);
        let chunk = span.to_chunk(text, Metadata::new());
        assert_eq!(chunk.text, &text[chunk.start..chunk.end]);
    }
}
