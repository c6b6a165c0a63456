//! Test support (`cfg(test)` or the `testing` feature): the contract every chunking strategy
//! must keep, as assertions — truthful offsets, trimmed and non-empty chunks, the token bound,
//! document order, and coverage of every non-whitespace character.

use crate::embed::TokenCounter;
use crate::types::{Chunk, Document, Metadata};

/// A document `test.txt` holding `text`, produced by `loader`.
pub fn document(text: &str, loader: &str) -> Document {
    Document {
        source_id: "test.txt".to_string(),
        text: text.to_string(),
        loader: loader.to_string(),
        metadata: Metadata::new(),
    }
}

/// Offsets truthful, trimmed, non-empty, within the bound, strictly in document order.
pub fn assert_contract(
    doc: &Document,
    chunks: &[Chunk],
    counter: &dyn TokenCounter,
    max_tokens: usize,
) {
    for (i, chunk) in chunks.iter().enumerate() {
        let slice = doc.text.get(chunk.start..chunk.end).unwrap_or_else(|| {
            panic!(
                "chunk {i} offsets {}..{} are not on char boundaries",
                chunk.start, chunk.end
            )
        });
        assert_eq!(chunk.text, slice, "chunk {i} text differs from its offsets");
        assert!(!chunk.text.trim().is_empty(), "chunk {i} is empty");
        assert_eq!(chunk.text.trim(), chunk.text, "chunk {i} is not trimmed");
        let tokens = counter.count_tokens(&chunk.text);
        assert!(
            tokens <= max_tokens,
            "chunk {i} has {tokens} > {max_tokens} tokens: {:?}",
            chunk.text
        );
        if i > 0 {
            let previous = &chunks[i - 1];
            assert!(
                chunk.start > previous.start && chunk.end > previous.end,
                "chunk {i} ({}..{}) is not after chunk {} ({}..{})",
                chunk.start,
                chunk.end,
                i - 1,
                previous.start,
                previous.end
            );
        }
    }
}

/// Every non-whitespace character of the document lies in some chunk.
pub fn assert_covers_all_content(doc: &Document, chunks: &[Chunk]) {
    let mut covered = vec![false; doc.text.len()];
    for chunk in chunks {
        covered[chunk.start..chunk.end]
            .iter_mut()
            .for_each(|c| *c = true);
    }
    for (at, c) in doc.text.char_indices() {
        assert!(
            c.is_whitespace() || covered[at],
            "{c:?} at byte {at} is in no chunk"
        );
    }
}
