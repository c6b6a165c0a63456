//! Test support shared by the unit tests, the integration tests and the benches (`cfg(test)` or
//! the `testing` feature): where the real model files are, the small support corpus the query
//! tests search, and seeding it into any [`DocumentStore`] with any [`Embedder`] (the hash
//! embedder in unit tests, bge-small in the real-model tests).

use std::path::PathBuf;

use crate::embed::Embedder;
use crate::store::{DocumentStore, SourceRecord, StoreError};
use crate::types::StoredChunk;

/// The folder of the real models for integration tests and benches: `$ORKEON_MODELS_DIR`,
/// else the shared copies beside the repository (`../shared/models`). Unit tests use none.
pub fn models_dir() -> PathBuf {
    std::env::var_os("ORKEON_MODELS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models"))
        })
}

/// Each source's chunks: refunds (two near-duplicate sources), shipping, Berlin, New York,
/// warranty and support — ten chunks in seven sources.
pub const SUPPORT_CORPUS: &[(&str, &[&str])] = &[
    (
        "kb/refunds.md",
        &[
            "Customers can request a refund within 30 days of delivery.",
            "Refunds are paid back to the original payment method within five business days.",
        ],
    ),
    (
        "kb/refund-faq.md",
        &["A refund can be requested by customers within 30 days after the delivery date."],
    ),
    (
        "kb/shipping.md",
        &[
            "Standard shipping within Europe takes three to five business days.",
            "Express shipping arrives the next business day for orders placed before noon.",
        ],
    ),
    (
        "kb/berlin.md",
        &[
            "Berlin has a population of 3,520,031 registered inhabitants in an area of 891.82 square kilometers.",
        ],
    ),
    (
        "kb/new-york.md",
        &["New York City is famous for the Metropolitan Museum of Art."],
    ),
    (
        "kb/warranty.md",
        &[
            "All devices carry a two-year warranty covering manufacturing defects.",
            "The warranty does not cover accidental damage or water damage.",
        ],
    ),
    (
        "kb/support.md",
        &[
            "Support is available by email around the clock and by phone on weekdays from 9:00 to 17:00.",
        ],
    ),
];

/// Why seeding failed.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
}

/// Creates `collection` for `embedder`'s profile and stores [`SUPPORT_CORPUS`] in it, embedded
/// by `embedder`. Chunk ids are `<source>#<ordinal>`.
pub async fn seed_support_corpus(
    store: &dyn DocumentStore,
    embedder: &dyn Embedder,
    collection: &str,
) -> Result<(), SeedError> {
    let profile = embedder.profile();
    store.ensure_collection(collection, &profile)?;
    for (source, texts) in SUPPORT_CORPUS {
        let vectors = embedder
            .embed_documents(texts.iter().map(|t| t.to_string()).collect())
            .await?;
        let mut offset = 0;
        let chunks: Vec<StoredChunk> = texts
            .iter()
            .zip(vectors)
            .enumerate()
            .map(|(i, (text, vector))| {
                let start = offset;
                offset += text.len() + 1;
                StoredChunk {
                    id: format!("{source}#{i}"),
                    source_id: source.to_string(),
                    ordinal: i as u32,
                    text: text.to_string(),
                    start,
                    end: start + text.len(),
                    metadata: Default::default(),
                    content_hash: format!("hash-{source}-{i}"),
                    vector,
                }
            })
            .collect();
        let record = SourceRecord {
            source_id: source.to_string(),
            content_hash: format!("hash-{source}"),
            loader: "markdown".into(),
            chunking: "test".into(),
            embedding_profile: profile.to_string(),
            chunk_ids: chunks.iter().map(|c| c.id.clone()).collect(),
            ingested_at: "2026-01-01T00:00:00Z".into(),
            validation: "clean".into(),
            stale: None,
        };
        store.replace_source(collection, record, chunks)?;
    }
    Ok(())
}
