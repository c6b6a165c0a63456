//! The quarantine: rejected (and dropped suspicious) content, kept for inspection and never
//! indexed. This module owns the entry type and the [`QuarantineStore`] port; the storage
//! implementations live in `crate::store` (the embedded store's sled tree, and an in-memory
//! one). One entry per (collection, source id); the latest verdict wins.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ValidateError;
use crate::load::truncate_chars;

/// Longest excerpt kept by [`QuarantineEntry::new`], in characters.
pub const EXCERPT_MAX_CHARS: usize = 300;

/// One quarantined source (or part of a source, e.g. `manual.pdf#page=3`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineEntry {
    pub collection: String,
    pub source_id: String,
    /// Why it was quarantined (the validator's reasons, joined).
    pub reason: String,
    /// sha256 (hex) of the rejected content.
    pub content_hash: String,
    /// RFC 3339, UTC.
    pub quarantined_at: String,
    /// The beginning of the content, for a human to look at.
    pub excerpt: String,
}

impl QuarantineEntry {
    /// An entry for `content` quarantined now: hashes it and keeps an excerpt.
    pub fn new(
        collection: impl Into<String>,
        source_id: impl Into<String>,
        reason: impl Into<String>,
        content: &[u8],
    ) -> Self {
        let quarantined_at = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| time::OffsetDateTime::now_utc().unix_timestamp().to_string());
        let excerpt = truncate_chars(
            &String::from_utf8_lossy(&content[..content.len().min(EXCERPT_MAX_CHARS * 4)]),
            EXCERPT_MAX_CHARS,
        );
        Self {
            collection: collection.into(),
            source_id: source_id.into(),
            reason: reason.into(),
            content_hash: hex::encode(Sha256::digest(content)),
            quarantined_at,
            excerpt,
        }
    }
}

/// The quarantine port: where rejected sources are kept. One entry per (collection, source
/// id); the latest verdict wins. Implementations: the embedded store's (a tree of its sled
/// database, from `EmbeddedStore::quarantine`) and `InMemoryQuarantineStore`. Writes need not
/// be durable on return: the caller flushes with the rest of its ingestion batch.
pub trait QuarantineStore: Send + Sync {
    /// Records `entry`, replacing an earlier entry for the same collection and source id.
    fn put(&self, entry: &QuarantineEntry) -> Result<(), ValidateError>;

    /// The entry of one source, if quarantined.
    fn get(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Option<QuarantineEntry>, ValidateError>;

    /// All entries (of one collection, or of all), sorted by collection then source id.
    fn list(&self, collection: Option<&str>) -> Result<Vec<QuarantineEntry>, ValidateError>;

    /// Forgets a source that became clean again: its own entry and those of its parts
    /// (`{source_id}#row=…`, `{source_id}#page=…`). Removing what is not there is fine.
    fn remove(&self, collection: &str, source_id: &str) -> Result<(), ValidateError>;
}

/// Whether `candidate` is `source_id` itself or one of its parts (`{source_id}#…`): what
/// [`QuarantineStore::remove`] forgets.
pub fn is_source_or_part(candidate: &str, source_id: &str) -> bool {
    candidate
        .strip_prefix(source_id)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
}

/// Logs a quarantine decision (every implementation's `put` calls it).
pub fn log_quarantined(entry: &QuarantineEntry) {
    tracing::info!(
        collection = %entry.collection,
        source_id = %entry.source_id,
        reason = %entry.reason,
        content_hash = %entry.content_hash,
        "quarantined"
    );
}
