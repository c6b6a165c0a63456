//! Test support: the chunk contract every strategy must keep (truthful offsets, token bound,
//! no empty chunks, document order, coverage), the real bge-small tokenizer, and arbitrary text
//! for property tests.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;

use crate::embed::TokenCounter;
use crate::embed::tokenizer::HfTokenCounter;
use crate::types::{Chunk, Document, Metadata};

/// The models folder: `$ORKEON_MODELS_DIR`, else the shared test copies.
pub fn models_dir() -> PathBuf {
    std::env::var_os("ORKEON_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models"))
        })
}

/// bge-small-en-v1.5's real tokenizer, loaded once per test binary.
pub fn bge_counter() -> Arc<dyn TokenCounter> {
    static COUNTER: OnceLock<Arc<HfTokenCounter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            let path = models_dir().join("bge-small-en-v1.5/tokenizer.json");
            Arc::new(HfTokenCounter::from_file(&path).expect("bge-small-en-v1.5 tokenizer loads"))
        })
        .clone()
}

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
