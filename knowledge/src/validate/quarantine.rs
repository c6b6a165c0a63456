//! The quarantine: rejected (and dropped suspicious) content, kept in the sled tree
//! `quarantine` for inspection and never indexed. One entry per (collection, source id); the
//! latest verdict wins. The store does not flush: the caller flushes the database with the rest
//! of its ingestion batch.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ValidateError;
use crate::load::truncate_chars;

/// Name of the sled tree.
pub const QUARANTINE_TREE: &str = "quarantine";
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

/// Quarantined entries in one sled database.
#[derive(Debug, Clone)]
pub struct QuarantineStore {
    tree: sled::Tree,
}

/// `collection` NUL `source_id`: unambiguous whatever the names contain, and prefix-scannable
/// per collection.
fn key(collection: &str, source_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(collection.len() + 1 + source_id.len());
    key.extend_from_slice(collection.as_bytes());
    key.push(0);
    key.extend_from_slice(source_id.as_bytes());
    key
}

impl QuarantineStore {
    /// Opens (creating if needed) the `quarantine` tree of `db`.
    pub fn open(db: &sled::Db) -> Result<Self, ValidateError> {
        let tree = db
            .open_tree(QUARANTINE_TREE)
            .map_err(|source| ValidateError::Store {
                action: "opening the quarantine tree",
                source,
            })?;
        Ok(Self { tree })
    }

    /// Records `entry`, replacing an earlier entry for the same collection and source id.
    pub fn put(&self, entry: &QuarantineEntry) -> Result<(), ValidateError> {
        let value = serde_json::to_vec(entry).map_err(|e| ValidateError::Corrupt {
            key: format!("{}/{}", entry.collection, entry.source_id),
            reason: e.to_string(),
        })?;
        self.tree
            .insert(key(&entry.collection, &entry.source_id), value)
            .map_err(|source| ValidateError::Store {
                action: "writing an entry",
                source,
            })?;
        tracing::info!(
            collection = %entry.collection,
            source_id = %entry.source_id,
            reason = %entry.reason,
            content_hash = %entry.content_hash,
            "quarantined"
        );
        Ok(())
    }

    /// The entry of one source, if quarantined.
    pub fn get(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Option<QuarantineEntry>, ValidateError> {
        let key = key(collection, source_id);
        self.tree
            .get(&key)
            .map_err(|source| ValidateError::Store {
                action: "reading an entry",
                source,
            })?
            .map(|value| decode(&key, &value))
            .transpose()
    }

    /// All entries (of one collection, or of all), sorted by collection then source id.
    pub fn list(&self, collection: Option<&str>) -> Result<Vec<QuarantineEntry>, ValidateError> {
        let iter = match collection {
            Some(collection) => {
                let mut prefix = collection.as_bytes().to_vec();
                prefix.push(0);
                self.tree.scan_prefix(prefix)
            }
            None => self.tree.iter(),
        };
        iter.map(|item| {
            let (key, value) = item.map_err(|source| ValidateError::Store {
                action: "listing entries",
                source,
            })?;
            decode(&key, &value)
        })
        .collect()
    }

    /// Forgets a source that became clean again: its own entry and those of its parts
    /// (`{source_id}#row=…`, `{source_id}#page=…`).
    pub fn remove(&self, collection: &str, source_id: &str) -> Result<(), ValidateError> {
        let store_error = |source| ValidateError::Store {
            action: "removing entries",
            source,
        };
        let exact = key(collection, source_id);
        let mut parts = exact.clone();
        parts.push(b'#');
        let mut batch = sled::Batch::default();
        batch.remove(exact);
        for item in self.tree.scan_prefix(&parts).keys() {
            batch.remove(item.map_err(store_error)?);
        }
        self.tree.apply_batch(batch).map_err(store_error)
    }
}

fn decode(key: &[u8], value: &[u8]) -> Result<QuarantineEntry, ValidateError> {
    serde_json::from_slice(value).map_err(|e| ValidateError::Corrupt {
        key: String::from_utf8_lossy(key).replace('\0', "/"),
        reason: e.to_string(),
    })
}
