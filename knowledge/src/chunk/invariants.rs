//! Test support: the in-code test tokenizer as the chunkers' token counter, the chunk contract
//! (re-exported from [`super::contract`]) and arbitrary text for property tests.

use std::sync::Arc;

use proptest::prelude::*;

use super::Chunker;
pub use super::contract::{assert_contract, assert_covers_all_content, document};
use crate::embed::TokenCounter;
use crate::embed::test_tokenizer::test_tokenizer;
use crate::types::{Chunk, Document};

/// The token counter of the chunker tests: the in-code WordPiece test tokenizer (built once).
pub fn test_counter() -> Arc<dyn TokenCounter> {
    test_tokenizer()
}

/// The test tokenizer behind a counter that claims no additivity, counting every range it is
/// asked about, and reporting how many tokens it counted in all.
pub struct CountEverySpan {
    inner: Arc<dyn TokenCounter>,
    additive: bool,
    counted: std::sync::atomic::AtomicUsize,
}

impl CountEverySpan {
    /// `additive`: whether it passes on the test tokenizer's additivity (else it denies it).
    pub fn new(additive: bool) -> Self {
        Self {
            inner: test_counter(),
            additive,
            counted: Default::default(),
        }
    }

    /// Tokens counted so far, over every call.
    pub fn counted(&self) -> usize {
        self.counted.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl TokenCounter for CountEverySpan {
    fn count_tokens(&self, text: &str) -> usize {
        let tokens = self.inner.count_tokens(text);
        self.counted
            .fetch_add(tokens, std::sync::atomic::Ordering::Relaxed);
        tokens
    }

    fn splits_at_whitespace_and_punctuation(&self) -> bool {
        self.additive && self.inner.splits_at_whitespace_and_punctuation()
    }
}

/// `doc` chunked by the chunker `make` builds on a counter that recounts every range (no sums
/// of counts): what summing additive counts must reproduce exactly.
pub fn chunks_recounting<C: Chunker>(
    make: impl FnOnce(Arc<dyn TokenCounter>) -> C,
    doc: &Document,
) -> Vec<Chunk> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime
        .block_on(make(Arc::new(CountEverySpan::new(false))).chunk(doc))
        .expect("chunking does not fail")
}

/// Text mixing prose, separators, multi-byte characters, emoji, unspaced CJK runs, long words
/// and arbitrary characters.
pub fn arbitrary_text() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        6 => prop::sample::select(vec![
            "the", "knowledge", "store", "retrieval", "embedding", "chunk", "tokens", "Orkeon",
            "incrementally", "re-ingestion", "don't", "e.g.", "v1.5", "42", "3.14159",
        ])
        .prop_map(str::to_string),
        5 => prop::sample::select(vec![
            " ", " ", " ", "\n", "\n\n", "\n\n\n", ". ", "? ", "! ", "; ", ", ", "\t", "  ", ".",
        ])
        .prop_map(str::to_string),
        2 => prop::sample::select(vec![
            "Grüße", "Zürich", "ça", "naïve", "Ελληνικά", "русский", "日本語", "数据", "😀", "🚀🚀",
            "👩‍💻", "e\u{301}", "\u{200b}", "ﬁ",
        ])
        .prop_map(str::to_string),
        1 => "[一-龥]{10,120}",
        1 => "[a-z]{20,60}",
        1 => "[-/_.a-z0-9]{10,80}",
        1 => any::<char>().prop_map(|c| c.to_string()),
    ];
    prop::collection::vec(fragment, 0..160).prop_map(|fragments| fragments.concat())
}
