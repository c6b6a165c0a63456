//! The document store: collections of embedded chunks plus each collection's incremental
//! manifest.
//!
//! [`DocumentStore`] is the port; the embedded implementation keeps sled as the source of truth
//! with a persisted tantivy BM25 index and a persisted vector index (exact scan, HNSW above a
//! threshold) derived from it.

use serde::{Deserialize, Serialize};

mod checks;
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
mod embedded;
mod exact_vectors;
mod hybrid;
mod memory;
mod scratch;

pub use checks::{CheckedQuery, CheckedSearch, check_batch, check_search, check_source_batch};
pub use embedded::runs::SledRunStore;
pub use embedded::{CollectionConsistency, ConsistencyReport, EmbeddedStore};
pub use hybrid::{fuse_hybrid, hybrid_depths, reciprocal_rank_fusion};
pub use memory::{InMemoryQuarantineStore, InMemoryStore};
pub use scratch::{ScratchLayer, ScratchNames, ScratchQuarantine, ScratchStore};

pub use crate::fusion::HybridFusion;
use crate::types::{EmbeddingProfile, ScoredChunk, StoredChunk};

/// Checks a collection name: letters, digits, `-`, `_`, `.`, at most 128 bytes, not starting
/// with a dot (names become folder names).
pub fn validate_collection_name(name: &str) -> Result<(), StoreError> {
    let valid = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::InvalidName(name.to_string()))
    }
}

/// One source's entry in a collection's incremental manifest (also its provenance record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// Source id (relative path or URL, part suffix included).
    pub source_id: String,
    /// sha256 (hex) of the raw bytes the source was loaded from.
    pub content_hash: String,
    /// Loader that produced the document.
    pub loader: String,
    /// `ChunkingSettings::fingerprint()` used for its chunks.
    pub chunking: String,
    /// Embedding profile of its vectors, as `EmbeddingProfile`'s Display.
    pub embedding_profile: String,
    /// Ids of its chunks, in order.
    pub chunk_ids: Vec<String>,
    /// RFC 3339 time of ingestion.
    pub ingested_at: String,
    /// `clean` or `suspicious: <reasons>`.
    pub validation: String,
    /// Set when the source's last load failed: the error, and the chunks kept are the last
    /// good content (from `ingested_at`). Cleared by the next successful load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// One source written by [`DocumentStore::commit_sources`]: its manifest entry and its chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceWrite {
    pub record: SourceRecord,
    pub chunks: Vec<StoredChunk>,
}

/// A change of several sources of one collection, committed as a whole by
/// [`DocumentStore::commit_sources`] (e.g. every page of a PDF, every row of a CSV, and the
/// parts the file no longer has).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceBatch {
    /// Sources written, each replacing that source's previous chunks.
    pub writes: Vec<SourceWrite>,
    /// Sources removed with their chunks; ids the collection does not hold are ignored.
    pub deletes: Vec<String>,
}

impl SourceBatch {
    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.deletes.is_empty()
    }
}

/// What a committed [`SourceBatch`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Sources of `deletes` that existed and are gone.
    pub sources_deleted: usize,
    /// Chunks removed (of deleted sources, and of written sources that no longer have them).
    pub chunks_removed: usize,
}

/// A collection being rebuilt beside its live version: started by
/// [`DocumentStore::begin_rebuild`], written by [`DocumentStore::commit_rebuild`], and either
/// swapped in whole by [`DocumentStore::publish_rebuild`] or discarded by
/// [`DocumentStore::abort_rebuild`]. Its id is chosen by the store and lies outside the names
/// users may give collections, so no user request can reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    collection: String,
    id: String,
}

impl Rebuild {
    /// For store implementations: the rebuild of `collection` that the store knows as `id`.
    pub fn new(collection: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            collection: collection.into(),
            id: id.into(),
        }
    }

    /// The collection it will replace.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The store's id of the staging build (not a valid collection name).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The error of a rebuild the store does not hold (published, aborted, or never begun).
    pub fn not_in_progress(&self) -> StoreError {
        StoreError::InvalidRequest {
            collection: self.collection.clone(),
            reason: format!(
                "rebuild '{}' is not in progress (already published or aborted); begin a new one",
                self.id
            ),
        }
    }
}

/// Search mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    Vector,
    Bm25,
    Hybrid,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("collection '{0}' does not exist")]
    UnknownCollection(String),
    #[error(
        "collection '{collection}' holds vectors of {recorded}, but the active embedder is {active}; re-ingest with --reindex to rebuild it"
    )]
    ProfileMismatch {
        collection: String,
        recorded: String,
        active: String,
    },
    #[error("invalid collection name '{0}': use letters, digits, '-', '_' and '.' (max 128)")]
    InvalidName(String),
    /// A `replace_source` call whose chunks do not fit its record or the collection (wrong
    /// source, wrong vector dimension, duplicated id, chunk ids not matching the record).
    #[error("collection '{collection}', source '{source_id}': {reason}")]
    InvalidBatch {
        collection: String,
        source_id: String,
        reason: String,
    },
    /// A search lacking what its mode needs, or with a query vector of the wrong dimension;
    /// or a [`Rebuild`] that is no longer in progress.
    #[error("search in collection '{collection}': {reason}")]
    InvalidRequest { collection: String, reason: String },
    #[error("store I/O failed: {0}")]
    Io(String),
    /// A `rag.store` setting out of range.
    #[error("rag.store.{key}: {reason}")]
    InvalidSetting { key: &'static str, reason: String },
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
}

/// A collection's manifest: its embedding profile and one record per source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub collection: String,
    pub profile: Option<EmbeddingProfile>,
    pub sources: Vec<SourceRecord>,
    /// Manifest entries that could not be decoded (their sources are re-ingested in full).
    pub corrupt_entries: Vec<String>,
}

/// Summary of one collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionInfo {
    pub name: String,
    pub sources: usize,
    pub chunks: usize,
    pub profile: Option<EmbeddingProfile>,
    /// Which index answers its vector searches.
    pub vector_index: VectorIndexStatus,
    /// The storage provider holding it: `embedded`, `postgres`, `memory`.
    #[serde(default)]
    pub provider: String,
}

/// Which index answers a collection's vector searches, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorIndexStatus {
    /// `hnsw` or `exact`.
    pub serving: String,
    /// Why, in a few words.
    pub reason: String,
    /// The current HNSW graph's recall@10 against the exact scan, measured when it was built.
    pub hnsw_recall_at_10: Option<f64>,
}

/// A search over one collection.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    pub mode: SearchMode,
    /// Query text (BM25 and hybrid).
    pub text: Option<String>,
    /// Query vector (vector and hybrid).
    pub vector: Option<Vec<f32>>,
    /// Results wanted.
    pub k: usize,
    /// Reciprocal Rank Fusion constant (hybrid, RRF fusion).
    pub rrf_k: f32,
    /// How a hybrid search combines its vector and BM25 legs (default: RRF).
    pub fusion: HybridFusion,
}

/// Held while this process writes one collection (see [`DocumentStore::writer_lock`]); dropping
/// it releases the collection to the next writer.
pub struct WriterLock {
    _held: Option<Box<dyn Send>>,
}

impl WriterLock {
    /// Nothing to hold: no other process can write this store (its files are locked to one
    /// process).
    pub fn not_needed() -> Self {
        Self { _held: None }
    }

    /// Holds `resource` (e.g. the connection owning a database lock) until dropped.
    pub fn holding(resource: impl Send + 'static) -> Self {
        Self {
            _held: Some(Box::new(resource)),
        }
    }
}

/// The store port. Calls are blocking (sled and tantivy are synchronous): call them from
/// `spawn_blocking` in async code when they may take long (replace, rebuild).
pub trait DocumentStore: Send + Sync {
    /// Waits until no other process writes `collection`, then holds it until the guard is
    /// dropped: ingestion (bootstrap, re-ingest, reindex) of a collection is serialised across
    /// the processes sharing this store, so a second daemon waits for the first one's ingestion
    /// and then finds its sources unchanged. Stores one process owns need nothing here (the
    /// ingestion pipeline already serialises its own writers): the default holds nothing.
    fn writer_lock(&self, collection: &str) -> Result<WriterLock, StoreError> {
        let _ = collection;
        Ok(WriterLock::not_needed())
    }

    /// All collections, sorted by name.
    fn collections(&self) -> Result<Vec<CollectionInfo>, StoreError>;

    /// Creates the collection when missing and records `profile`; fails with
    /// [`StoreError::ProfileMismatch`] when the collection records another profile.
    fn ensure_collection(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<(), StoreError>;

    /// The collection's manifest (empty when the collection does not exist).
    fn manifest(&self, collection: &str) -> Result<Manifest, StoreError>;

    /// Commits several sources of one collection atomically: every write (a source's chunks
    /// and manifest entry, replacing its previous chunks) and every delete land in ONE commit,
    /// durable (flushed) when this returns. A search sees the collection before or after the
    /// whole batch, never between two of its sources, and a crash leaves it before or after.
    /// An invalid batch (a write failing the checks of `replace_source`, a source named twice,
    /// a chunk id used twice) is refused whole and changes nothing. An empty batch is a no-op.
    fn commit_sources(
        &self,
        collection: &str,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError>;

    /// Atomically replaces one source: `chunks` and `record` are committed in one batch, and
    /// the source's previous chunks that are not in `chunks` are removed in that same batch.
    /// Durable (flushed) when this returns; the derived indexes are updated afterwards.
    fn replace_source(
        &self,
        collection: &str,
        record: SourceRecord,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        self.commit_sources(
            collection,
            SourceBatch {
                writes: vec![SourceWrite { record, chunks }],
                deletes: Vec::new(),
            },
        )
        .map(|_| ())
    }

    /// Removes a source's chunks and manifest entry; returns the number of chunks removed.
    fn delete_source(&self, collection: &str, source_id: &str) -> Result<usize, StoreError> {
        self.commit_sources(
            collection,
            SourceBatch {
                writes: Vec::new(),
                deletes: vec![source_id.to_string()],
            },
        )
        .map(|outcome| outcome.chunks_removed)
    }

    /// Removes a whole collection with its indexes.
    fn drop_collection(&self, collection: &str) -> Result<(), StoreError>;

    /// Starts building a new version of `collection` beside the live one (which need not
    /// exist), recording `profile`. Until [`publish_rebuild`](Self::publish_rebuild), every
    /// reader (`collections`, `manifest`, `get_chunk`, `chunks_of_source`, `search`) and
    /// writer of `collection` sees the live version only; the build appears in no listing and
    /// under no name a user can give. A crash before the publish leaves the live version as it
    /// was, and the build's data is removed when the store is next opened.
    fn begin_rebuild(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<Rebuild, StoreError>;

    /// [`commit_sources`](Self::commit_sources) into a rebuild: the same checks against the
    /// rebuild's profile, the same atomicity; invisible to readers until published.
    fn commit_rebuild(
        &self,
        rebuild: &Rebuild,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError>;

    /// Makes the rebuild the collection, in one durable step: a reader sees the whole old
    /// version before and the whole new one after, never a mix and never nothing (a crash
    /// leaves one or the other). The old version's data is removed afterwards; writes made to
    /// it during the rebuild are superseded. The rebuild is then no longer in progress.
    fn publish_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError>;

    /// Discards a rebuild and its data; the live collection is untouched.
    fn abort_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError>;

    /// The source's chunks, in ordinal order.
    fn chunks_of_source(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Vec<StoredChunk>, StoreError>;

    /// One chunk by id.
    fn get_chunk(
        &self,
        collection: &str,
        chunk_id: &str,
    ) -> Result<Option<StoredChunk>, StoreError>;

    /// Vector, BM25 or hybrid (RRF or convex fusion) search; every result labelled with its
    /// score origin.
    fn search(
        &self,
        collection: &str,
        request: &SearchRequest,
    ) -> Result<Vec<ScoredChunk>, StoreError>;
}
