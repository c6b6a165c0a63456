//! The embedded store's [`QuarantineStore`]: entries as JSON in the sled tree `quarantine` of
//! the store's database, keyed `collection` NUL `source_id` (unambiguous whatever the names
//! contain, and prefix-scannable per collection). Writes are not flushed here: the caller
//! flushes the store with the rest of its ingestion batch (`EmbeddedStore::flush`).

use crate::validate::quarantine::log_quarantined;
use crate::validate::{QuarantineEntry, QuarantineStore, ValidateError};

/// Name of the sled tree.
pub(super) const QUARANTINE_TREE: &str = "quarantine";

/// Quarantined entries in the embedded store's sled database (see the module docs).
#[derive(Debug, Clone)]
pub struct SledQuarantineStore {
    tree: sled::Tree,
}

fn key(collection: &str, source_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(collection.len() + 1 + source_id.len());
    key.extend_from_slice(collection.as_bytes());
    key.push(0);
    key.extend_from_slice(source_id.as_bytes());
    key
}

fn store_error(action: &'static str) -> impl Fn(sled::Error) -> ValidateError {
    move |source| ValidateError::Store {
        action,
        source: Box::new(source),
    }
}

fn decode(key: &[u8], value: &[u8]) -> Result<QuarantineEntry, ValidateError> {
    serde_json::from_slice(value).map_err(|e| ValidateError::Corrupt {
        key: String::from_utf8_lossy(key).replace('\0', "/"),
        reason: e.to_string(),
    })
}

impl SledQuarantineStore {
    /// Opens (creating if needed) the `quarantine` tree of `db`.
    pub(super) fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self {
            tree: db.open_tree(QUARANTINE_TREE)?,
        })
    }
}

impl QuarantineStore for SledQuarantineStore {
    fn put(&self, entry: &QuarantineEntry) -> Result<(), ValidateError> {
        let value = serde_json::to_vec(entry).map_err(|e| ValidateError::Corrupt {
            key: format!("{}/{}", entry.collection, entry.source_id),
            reason: e.to_string(),
        })?;
        self.tree
            .insert(key(&entry.collection, &entry.source_id), value)
            .map_err(store_error("writing an entry"))?;
        log_quarantined(entry);
        Ok(())
    }

    fn get(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Option<QuarantineEntry>, ValidateError> {
        let key = key(collection, source_id);
        self.tree
            .get(&key)
            .map_err(store_error("reading an entry"))?
            .map(|value| decode(&key, &value))
            .transpose()
    }

    fn list(&self, collection: Option<&str>) -> Result<Vec<QuarantineEntry>, ValidateError> {
        let iter = match collection {
            Some(collection) => {
                let mut prefix = collection.as_bytes().to_vec();
                prefix.push(0);
                self.tree.scan_prefix(prefix)
            }
            None => self.tree.iter(),
        };
        iter.map(|item| {
            let (key, value) = item.map_err(store_error("listing entries"))?;
            decode(&key, &value)
        })
        .collect()
    }

    fn remove(&self, collection: &str, source_id: &str) -> Result<(), ValidateError> {
        let exact = key(collection, source_id);
        let mut parts = exact.clone();
        parts.push(b'#');
        let mut batch = sled::Batch::default();
        batch.remove(exact);
        for item in self.tree.scan_prefix(&parts).keys() {
            batch.remove(item.map_err(store_error("removing entries"))?);
        }
        self.tree
            .apply_batch(batch)
            .map_err(store_error("removing entries"))
    }
}
