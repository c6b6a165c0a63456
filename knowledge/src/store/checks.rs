//! The checks every [`DocumentStore`](super::DocumentStore) implementation applies to its
//! inputs before touching its data, written once so the implementations refuse the same
//! batches and requests with the same errors: a `replace_source` batch against its record and
//! collection, a multi-source batch against itself, and a search request against its mode and
//! the collection's profile. Re-exported from `store` so providers in other crates
//! (`orkeon-store-postgres`) apply the same checks.

use std::collections::{BTreeSet, HashSet};

use super::exact_vectors::normalise;
use super::{SearchMode, SearchRequest, SourceBatch, SourceRecord, StoreError};
use crate::types::{EmbeddingProfile, StoredChunk};

/// Checks a `replace_source` batch for collection `collection` recording `profile`: the
/// record's profile is the collection's, every chunk belongs to the record's source and has a
/// vector of the collection's dimension, ids are unique and are exactly the record's
/// `chunk_ids`.
pub fn check_batch(
    collection: &str,
    profile: &EmbeddingProfile,
    record: &SourceRecord,
    chunks: &[StoredChunk],
) -> Result<(), StoreError> {
    let invalid = |reason: String| StoreError::InvalidBatch {
        collection: collection.to_string(),
        source_id: record.source_id.clone(),
        reason,
    };
    let active = profile.to_string();
    if record.embedding_profile != active {
        return Err(StoreError::ProfileMismatch {
            collection: collection.to_string(),
            recorded: active,
            active: record.embedding_profile.clone(),
        });
    }
    let mut ids = HashSet::with_capacity(chunks.len());
    for chunk in chunks {
        if chunk.source_id != record.source_id {
            return Err(invalid(format!(
                "chunk '{}' belongs to source '{}'",
                chunk.id, chunk.source_id
            )));
        }
        if chunk.vector.len() != profile.dimensions {
            return Err(invalid(format!(
                "chunk '{}' has a vector of {} dimensions, but the collection holds {}",
                chunk.id,
                chunk.vector.len(),
                profile
            )));
        }
        if !ids.insert(chunk.id.as_str()) {
            return Err(invalid(format!("chunk id '{}' appears twice", chunk.id)));
        }
    }
    let recorded: BTreeSet<&str> = record.chunk_ids.iter().map(String::as_str).collect();
    if recorded.len() != record.chunk_ids.len() || recorded != ids.into_iter().collect() {
        return Err(invalid(
            "the manifest entry's chunk_ids differ from the ids of the chunks given".into(),
        ));
    }
    Ok(())
}

/// Checks a [`SourceBatch`] for `collection` recording `profile`: every write passes
/// [`check_batch`], no source is named twice (among writes and deletes alike) and no chunk id
/// is used by two writes.
pub fn check_source_batch(
    collection: &str,
    profile: &EmbeddingProfile,
    batch: &SourceBatch,
) -> Result<(), StoreError> {
    let mut sources = HashSet::with_capacity(batch.writes.len() + batch.deletes.len());
    let mut chunk_ids = HashSet::new();
    let named = batch
        .writes
        .iter()
        .map(|w| w.record.source_id.as_str())
        .chain(batch.deletes.iter().map(String::as_str));
    for source_id in named {
        if !sources.insert(source_id) {
            return Err(StoreError::InvalidBatch {
                collection: collection.to_string(),
                source_id: source_id.to_string(),
                reason: "the batch names this source twice; write or delete it once".into(),
            });
        }
    }
    for write in &batch.writes {
        check_batch(collection, profile, &write.record, &write.chunks)?;
        for chunk in &write.chunks {
            if !chunk_ids.insert(chunk.id.as_str()) {
                return Err(StoreError::InvalidBatch {
                    collection: collection.to_string(),
                    source_id: write.record.source_id.clone(),
                    reason: format!(
                        "chunk id '{}' is also written by another source of the batch",
                        chunk.id
                    ),
                });
            }
        }
    }
    Ok(())
}

/// A search request that passed [`check_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedSearch<'a> {
    /// What to search with, per mode.
    pub query: CheckedQuery<'a>,
    /// Results wanted (never 0).
    pub k: usize,
    /// The request's RRF constant, or the store's default when the request's is not positive.
    pub rrf_k: f32,
}

/// What each mode searches with; query vectors are L2-normalised, query texts non-blank.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckedQuery<'a> {
    Vector(Vec<f32>),
    Bm25(&'a str),
    /// Without text, the hybrid search is the vector search.
    Hybrid(Vec<f32>, Option<&'a str>),
}

/// Checks a search of `collection` (recording `profile`): `None` when nothing is wanted
/// (`k == 0`); an [`StoreError::InvalidRequest`] when the mode lacks what it needs (a query
/// vector for vector and hybrid, query text for BM25) or the vector has the wrong dimension.
pub fn check_search<'a>(
    collection: &str,
    profile: &EmbeddingProfile,
    request: &'a SearchRequest,
    default_rrf_k: f32,
) -> Result<Option<CheckedSearch<'a>>, StoreError> {
    let invalid = |reason: String| StoreError::InvalidRequest {
        collection: collection.to_string(),
        reason,
    };
    if request.k == 0 {
        return Ok(None);
    }
    if request.mode == SearchMode::Hybrid {
        request
            .fusion
            .check()
            .map_err(|reason| invalid(format!("hybrid fusion: {reason}")))?;
    }
    let vector = match (&request.vector, request.mode) {
        (_, SearchMode::Bm25) => None,
        (None, mode) => {
            return Err(invalid(format!(
                "{} search needs a query vector",
                match mode {
                    SearchMode::Vector => "vector",
                    _ => "hybrid",
                }
            )));
        }
        (Some(vector), _) if vector.len() != profile.dimensions => {
            return Err(invalid(format!(
                "the query vector has {} dimensions, but the collection holds {}; embed the query with the collection's model",
                vector.len(),
                profile
            )));
        }
        (Some(vector), _) => {
            let mut unit = vector.clone();
            normalise(&mut unit);
            Some(unit)
        }
    };
    let text = request.text.as_deref().filter(|t| !t.trim().is_empty());
    let query = match (request.mode, vector) {
        (SearchMode::Bm25, _) => {
            CheckedQuery::Bm25(text.ok_or_else(|| invalid("BM25 search needs query text".into()))?)
        }
        (SearchMode::Vector, Some(vector)) => CheckedQuery::Vector(vector),
        (SearchMode::Hybrid, Some(vector)) => CheckedQuery::Hybrid(vector, text),
        (_, None) => return Err(invalid("a query vector is required".into())),
    };
    let rrf_k = if request.rrf_k.is_finite() && request.rrf_k > 0.0 {
        request.rrf_k
    } else {
        default_rrf_k
    };
    Ok(Some(CheckedSearch {
        query,
        k: request.k,
        rrf_k,
    }))
}
