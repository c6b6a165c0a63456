//! One collection's sled tree, the source of truth: reads of chunks, manifest entries and meta
//! keys, and the atomic, flushed batches that write and delete sources (each bumping the
//! collection's generation).
//!
//! Callers serialise mutations of one collection (the embedded store holds the collection's
//! write lock), so reading the generation and writing it back in the batch cannot race.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::warn;

use super::layout::{
    CHUNK_PREFIX, GENERATION_KEY, INCARNATION_KEY, PROFILE_KEY, SOURCE_PREFIX, chunk_key,
    decode_chunk, decode_chunk_vector, decode_u64, encode_chunk, encode_u64, id_of_key, source_key,
};
use crate::store::{SourceRecord, SourceWrite, StoreError};
use crate::types::{EmbeddingProfile, StoredChunk};

/// A manifest entry as read from sled: a record, or the reason it could not be decoded.
pub type ManifestEntry = Result<SourceRecord, String>;

/// A chunk as stored: the chunk, or why its value cannot be decoded.
pub type ChunkEntry = Result<StoredChunk, String>;

/// What a committed mutation did.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitOutcome {
    /// The collection's generation after the batch.
    pub generation: u64,
    /// Chunk ids the batch removed.
    pub removed: Vec<String>,
    /// Deleted sources that existed.
    pub sources_deleted: usize,
}

/// A collection's sled tree.
#[derive(Clone)]
pub struct CollectionTree {
    name: String,
    tree: sled::Tree,
    /// The last [`counts`](Self::counts), with the generation they were taken at: counting
    /// scans every key (tens of milliseconds at 100k chunks), and listings come far more often
    /// than commits.
    counted: Arc<Mutex<Option<Counted>>>,
}

#[derive(Clone, Copy)]
struct Counted {
    generation: u64,
    sources: usize,
    chunks: usize,
}

impl CollectionTree {
    pub fn new(name: &str, tree: sled::Tree) -> Self {
        Self {
            name: name.to_string(),
            tree,
            counted: Arc::default(),
        }
    }

    fn io(&self, context: &str, error: sled::Error) -> StoreError {
        StoreError::Io(format!("collection '{}': {context}: {error}", self.name))
    }

    fn corrupt(&self, key: &str, reason: &str) -> StoreError {
        StoreError::Corrupt(format!(
            "collection '{}': key '{key}' is unreadable ({reason}); drop the collection and re-ingest it",
            self.name
        ))
    }

    fn get(&self, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        self.tree
            .get(key)
            .map_err(|e| self.io(&format!("reading '{}'", String::from_utf8_lossy(key)), e))
    }

    fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        match self.get(key)? {
            None => Ok(None),
            Some(bytes) => decode_u64(&bytes)
                .map(Some)
                .map_err(|reason| self.corrupt(&String::from_utf8_lossy(key), &reason)),
        }
    }

    /// The generation of the last committed batch (0 for a new collection).
    pub fn generation(&self) -> Result<u64, StoreError> {
        Ok(self.meta_u64(GENERATION_KEY)?.unwrap_or(0))
    }

    /// The incarnation recorded at creation (`None` when the tree was never initialised or is
    /// being dropped).
    pub fn incarnation(&self) -> Result<Option<u64>, StoreError> {
        self.meta_u64(INCARNATION_KEY)
    }

    /// The recorded embedding profile (`None` when the tree was never initialised or is being
    /// dropped).
    pub fn profile(&self) -> Result<Option<EmbeddingProfile>, StoreError> {
        match self.get(PROFILE_KEY)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.corrupt("m/profile", &e.to_string())),
        }
    }

    /// Records profile, incarnation and generation 0 in one flushed batch.
    pub fn initialise(
        &self,
        profile: &EmbeddingProfile,
        incarnation: u64,
    ) -> Result<(), StoreError> {
        let profile_json = serde_json::to_vec(profile)
            .map_err(|e| StoreError::Io(format!("cannot encode profile {profile}: {e}")))?;
        let mut batch = sled::Batch::default();
        batch.insert(PROFILE_KEY, profile_json);
        batch.insert(INCARNATION_KEY, &encode_u64(incarnation));
        batch.insert(GENERATION_KEY, &encode_u64(0));
        self.tree
            .apply_batch(batch)
            .map_err(|e| self.io("initialising", e))?;
        self.flush()
    }

    /// Flushes the database to disk.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.tree
            .flush()
            .map(|_| ())
            .map_err(|e| self.io("flushing", e))
    }

    /// One source's manifest entry.
    pub fn source_entry(&self, source_id: &str) -> Result<Option<ManifestEntry>, StoreError> {
        Ok(self
            .get(&source_key(source_id))?
            .map(|bytes| decode_record(source_id, &bytes)))
    }

    /// Every manifest entry, in source id order; undecodable ones as `Err(reason)`.
    pub fn manifest_entries(&self) -> Result<Vec<(String, ManifestEntry)>, StoreError> {
        let mut entries = Vec::new();
        for item in self.tree.scan_prefix(SOURCE_PREFIX) {
            let (key, value) = item.map_err(|e| self.io("scanning the manifest", e))?;
            let Some(source_id) = id_of_key(SOURCE_PREFIX, &key) else {
                entries.push((
                    String::from_utf8_lossy(&key[SOURCE_PREFIX.len()..]).into_owned(),
                    Err("source id is not UTF-8".to_string()),
                ));
                continue;
            };
            let entry = decode_record(source_id, &value);
            entries.push((source_id.to_string(), entry));
        }
        Ok(entries)
    }

    /// Numbers of manifest entries and of chunks, counted again only after a commit moved
    /// the generation. The generation is read before the scan, so a commit landing during the
    /// scan leaves a stale stamp and the next call counts again.
    pub fn counts(&self) -> (usize, usize) {
        let Ok(generation) = self.generation() else {
            return (self.source_count(), self.chunk_count());
        };
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = *counted
            && c.generation == generation
        {
            return (c.sources, c.chunks);
        }
        let (sources, chunks) = (self.source_count(), self.chunk_count());
        *counted = Some(Counted {
            generation,
            sources,
            chunks,
        });
        (sources, chunks)
    }

    /// Number of manifest entries.
    pub fn source_count(&self) -> usize {
        self.tree.scan_prefix(SOURCE_PREFIX).keys().count()
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.tree.scan_prefix(CHUNK_PREFIX).keys().count()
    }

    /// One chunk; `Some(Err(reason))` when its value cannot be decoded.
    pub fn chunk(&self, chunk_id: &str) -> Result<Option<Result<StoredChunk, String>>, StoreError> {
        Ok(self
            .get(&chunk_key(chunk_id))?
            .map(|bytes| decode_chunk(chunk_id, &bytes)))
    }

    /// Every decodable chunk, in id order (undecodable ones are logged and skipped).
    pub fn all_chunks(&self) -> Result<Vec<StoredChunk>, StoreError> {
        let mut chunks = Vec::new();
        for item in self.tree.scan_prefix(CHUNK_PREFIX) {
            let (key, value) = item.map_err(|e| self.io("scanning chunks", e))?;
            let Some(chunk_id) = id_of_key(CHUNK_PREFIX, &key) else {
                warn!(collection = %self.name, "skipping a chunk whose id is not UTF-8");
                continue;
            };
            match decode_chunk(chunk_id, &value) {
                Ok(chunk) => chunks.push(chunk),
                Err(reason) => {
                    warn!(collection = %self.name, chunk_id, %reason, "skipping an unreadable chunk")
                }
            }
        }
        Ok(chunks)
    }

    /// Every chunk in id order, undecodable ones as `Err(reason)` (a key that is not UTF-8 is
    /// reported by its lossy form).
    pub fn chunk_entries(&self) -> Result<Vec<(String, ChunkEntry)>, StoreError> {
        let mut entries = Vec::new();
        for item in self.tree.scan_prefix(CHUNK_PREFIX) {
            let (key, value) = item.map_err(|e| self.io("scanning chunks", e))?;
            let entry = match id_of_key(CHUNK_PREFIX, &key) {
                Some(chunk_id) => (chunk_id.to_string(), decode_chunk(chunk_id, &value)),
                None => (
                    String::from_utf8_lossy(&key[CHUNK_PREFIX.len()..]).into_owned(),
                    Err("chunk id is not UTF-8".to_string()),
                ),
            };
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Every chunk's id and vector, decoded without parsing the chunk headers; undecodable
    /// values and vectors of the wrong dimension are logged and skipped.
    pub fn all_vectors(&self, dimensions: usize) -> Result<Vec<(String, Vec<f32>)>, StoreError> {
        let mut vectors = Vec::new();
        for item in self.tree.scan_prefix(CHUNK_PREFIX) {
            let (key, value) = item.map_err(|e| self.io("scanning chunk vectors", e))?;
            let Some(chunk_id) = id_of_key(CHUNK_PREFIX, &key) else {
                warn!(collection = %self.name, "skipping a chunk whose id is not UTF-8");
                continue;
            };
            match decode_chunk_vector(&value) {
                Ok(vector) if vector.len() == dimensions => {
                    vectors.push((chunk_id.to_string(), vector))
                }
                Ok(vector) => warn!(
                    collection = %self.name, chunk_id, found = vector.len(), expected = dimensions,
                    "skipping a chunk vector of the wrong dimension"
                ),
                Err(reason) => {
                    warn!(collection = %self.name, chunk_id, %reason, "skipping an unreadable chunk")
                }
            }
        }
        Ok(vectors)
    }

    /// Ids of the chunks whose header names `source_id` (a full scan: used when the source's
    /// manifest entry is unreadable and cannot say which chunks it owns).
    pub fn chunk_ids_of_source_by_scan(&self, source_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .all_chunks()?
            .into_iter()
            .filter(|chunk| chunk.source_id == source_id)
            .map(|chunk| chunk.id)
            .collect())
    }

    /// The chunk ids a source currently owns according to sled: its manifest entry's list, or a
    /// scan when that entry is unreadable.
    pub fn owned_chunk_ids(&self, source_id: &str) -> Result<Vec<String>, StoreError> {
        match self.source_entry(source_id)? {
            None => Ok(Vec::new()),
            Some(Ok(record)) => Ok(record.chunk_ids),
            Some(Err(reason)) => {
                warn!(
                    collection = %self.name, source_id, %reason,
                    "manifest entry unreadable; finding the source's chunks by a scan"
                );
                self.chunk_ids_of_source_by_scan(source_id)
            }
        }
    }

    /// Commits several sources in ONE flushed batch: each write's chunks and record are
    /// written, the chunks the written and deleted sources owned before that are not among the
    /// batch's chunks are removed, deleted sources lose their manifest entries, and the
    /// generation bumps. `None` (nothing written) when there is no write and none of the
    /// deleted sources exists.
    pub fn commit(
        &self,
        writes: &[SourceWrite],
        deletes: &[String],
    ) -> Result<Option<CommitOutcome>, StoreError> {
        let new_ids: HashSet<&str> = writes
            .iter()
            .flat_map(|w| w.chunks.iter().map(|c| c.id.as_str()))
            .collect();
        let mut removed: Vec<String> = Vec::new();
        for write in writes {
            removed.extend(
                self.owned_chunk_ids(&write.record.source_id)?
                    .into_iter()
                    .filter(|id| !new_ids.contains(id.as_str())),
            );
        }
        let mut deleted: Vec<&str> = Vec::new();
        for source_id in deletes {
            let has_entry = self.source_entry(source_id)?.is_some();
            let owned = self.owned_chunk_ids(source_id)?;
            if !has_entry && owned.is_empty() {
                continue;
            }
            deleted.push(source_id);
            removed.extend(
                owned
                    .into_iter()
                    .filter(|id| !new_ids.contains(id.as_str())),
            );
        }
        if writes.is_empty() && deleted.is_empty() {
            return Ok(None);
        }
        let generation = self.generation()? + 1;
        let mut batch = sled::Batch::default();
        for write in writes {
            for chunk in &write.chunks {
                let value = encode_chunk(chunk).map_err(|reason| {
                    StoreError::Io(format!("collection '{}': {reason}", self.name))
                })?;
                batch.insert(chunk_key(&chunk.id), value);
            }
            let record_json = serde_json::to_vec(&write.record).map_err(|e| {
                StoreError::Io(format!(
                    "collection '{}': cannot encode the manifest entry of '{}': {e}",
                    self.name, write.record.source_id
                ))
            })?;
            batch.insert(source_key(&write.record.source_id), record_json);
        }
        for id in &removed {
            batch.remove(chunk_key(id));
        }
        for source_id in &deleted {
            batch.remove(source_key(source_id));
        }
        batch.insert(GENERATION_KEY, &encode_u64(generation));
        let what = match (writes.first(), deleted.first()) {
            (Some(write), _) if writes.len() + deleted.len() == 1 => {
                format!("committing source '{}'", write.record.source_id)
            }
            (None, Some(source_id)) if deleted.len() == 1 => {
                format!("deleting source '{source_id}'")
            }
            _ => format!(
                "committing a batch of {} written and {} deleted sources",
                writes.len(),
                deleted.len()
            ),
        };
        self.tree
            .apply_batch(batch)
            .map_err(|e| self.io(&what, e))?;
        self.flush()?;
        Ok(Some(CommitOutcome {
            generation,
            removed,
            sources_deleted: deleted.len(),
        }))
    }

    /// Replaces one source in ONE flushed batch (see [`commit`](Self::commit)).
    #[cfg(test)]
    pub fn replace_source(
        &self,
        record: &SourceRecord,
        chunks: &[StoredChunk],
    ) -> Result<CommitOutcome, StoreError> {
        let write = SourceWrite {
            record: record.clone(),
            chunks: chunks.to_vec(),
        };
        Ok(self.commit(&[write], &[])?.expect("a write always commits"))
    }

    /// Removes a source's chunks and manifest entry in ONE flushed batch (the generation bumps).
    /// `None` when the source is not in the manifest and owns no chunk.
    #[cfg(test)]
    pub fn delete_source(&self, source_id: &str) -> Result<Option<CommitOutcome>, StoreError> {
        self.commit(&[], &[source_id.to_string()])
    }

    /// Writes a raw value (tests use it to damage entries).
    #[cfg(test)]
    pub fn insert_raw(&self, key: &[u8], value: &[u8]) {
        self.tree.insert(key, value).unwrap();
    }
}

fn decode_record(source_id: &str, bytes: &[u8]) -> ManifestEntry {
    let record: SourceRecord = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if record.source_id != source_id {
        return Err(format!(
            "entry names source '{}' under key '{source_id}'",
            record.source_id
        ));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> EmbeddingProfile {
        EmbeddingProfile {
            provider: "onnx".into(),
            model: "test".into(),
            dimensions: 2,
        }
    }

    fn chunk(source: &str, id: &str, ordinal: u32) -> StoredChunk {
        StoredChunk {
            id: id.into(),
            source_id: source.into(),
            ordinal,
            text: format!("text of {id}"),
            start: 0,
            end: 1,
            metadata: Default::default(),
            content_hash: id.into(),
            vector: vec![1.0, ordinal as f32],
        }
    }

    fn record(source: &str, chunks: &[StoredChunk]) -> SourceRecord {
        SourceRecord {
            source_id: source.into(),
            content_hash: "h".into(),
            loader: "text".into(),
            chunking: "recursive".into(),
            embedding_profile: profile().to_string(),
            chunk_ids: chunks.iter().map(|c| c.id.clone()).collect(),
            ingested_at: "2025-01-01T00:00:00Z".into(),
            validation: "clean".into(),
            stale: None,
        }
    }

    fn tree() -> (tempfile::TempDir, CollectionTree) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path().join("sled")).unwrap();
        let tree = CollectionTree::new("docs", db.open_tree("col/docs").unwrap());
        tree.initialise(&profile(), 7).unwrap();
        (dir, tree)
    }

    #[test]
    fn replace_writes_chunks_record_and_generation_in_one_batch() {
        let (_dir, tree) = tree();
        assert_eq!(tree.generation().unwrap(), 0);
        assert_eq!(tree.incarnation().unwrap(), Some(7));
        assert_eq!(tree.profile().unwrap(), Some(profile()));

        let v1 = vec![chunk("a", "a0", 0), chunk("a", "a1", 1)];
        assert_eq!(tree.counts(), (0, 0));
        let outcome = tree.replace_source(&record("a", &v1), &v1).unwrap();
        // The cached counts follow every commit (the generation moved).
        assert_eq!(tree.counts(), (1, 2));
        assert_eq!(tree.counts(), (1, 2), "served from the cache");
        assert_eq!(
            outcome,
            CommitOutcome {
                generation: 1,
                removed: vec![],
                sources_deleted: 0,
            }
        );

        let v2 = vec![chunk("a", "a0", 0), chunk("a", "a2", 1)];
        let outcome = tree.replace_source(&record("a", &v2), &v2).unwrap();
        assert_eq!(outcome.generation, 2);
        assert_eq!(outcome.removed, vec!["a1".to_string()]);
        assert!(tree.chunk("a1").unwrap().is_none());
        assert_eq!(tree.chunk("a2").unwrap().unwrap().unwrap(), v2[1]);
        assert_eq!(tree.chunk_count(), 2);

        let entries = tree.manifest_entries().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].1.as_ref().unwrap().chunk_ids, vec!["a0", "a2"]);

        let deleted = tree.delete_source("a").unwrap().unwrap();
        assert_eq!(deleted.generation, 3);
        assert_eq!(deleted.removed, vec!["a0".to_string(), "a2".to_string()]);
        assert_eq!(tree.chunk_count(), 0);
        assert_eq!(tree.source_count(), 0);
        assert_eq!(tree.counts(), (0, 0));
        assert!(tree.delete_source("a").unwrap().is_none());
        assert_eq!(tree.generation().unwrap(), 3);
    }

    #[test]
    fn unreadable_manifest_entry_falls_back_to_a_chunk_scan() {
        let (_dir, tree) = tree();
        let v1 = vec![chunk("a", "a0", 0), chunk("a", "a1", 1)];
        tree.replace_source(&record("a", &v1), &v1).unwrap();
        let b = vec![chunk("b", "b0", 0)];
        tree.replace_source(&record("b", &b), &b).unwrap();
        tree.insert_raw(&source_key("a"), b"{not json");

        let entries = tree.manifest_entries().unwrap();
        assert!(entries[0].1.is_err(), "{entries:?}");
        assert!(entries[1].1.is_ok());

        let v2 = vec![chunk("a", "a5", 0)];
        let outcome = tree.replace_source(&record("a", &v2), &v2).unwrap();
        assert_eq!(outcome.removed, vec!["a0".to_string(), "a1".to_string()]);
        assert_eq!(tree.chunk_count(), 2);
    }

    #[test]
    fn vectors_load_without_headers_and_skip_wrong_dimensions() {
        let (_dir, tree) = tree();
        let mut v = vec![chunk("a", "a0", 0), chunk("a", "a1", 1)];
        v[1].vector = vec![1.0, 2.0, 3.0];
        tree.replace_source(&record("a", &v), &v).unwrap();
        let vectors = tree.all_vectors(2).unwrap();
        assert_eq!(vectors, vec![("a0".to_string(), vec![1.0, 0.0])]);
    }
}
