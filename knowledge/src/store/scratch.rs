//! Throwaway collections: [`ScratchStore`] is a [`DocumentStore`] over another one that keeps
//! the collections named in its [`ScratchNames`] in an [`InMemoryStore`] instead — same
//! pipeline, same searches, same citations, nothing written where the other store writes (the
//! data folder, the database). Every other collection goes through to the store underneath
//! unchanged. [`ScratchQuarantine`] does the same for the quarantine, so a source refused
//! while building a throwaway collection leaves no record behind either.
//!
//! A scratch name shadows a persistent collection of the same name for whoever reads through
//! this store (a crew run with `ephemeral: true`, a script's `rag.scratch`); the persistent one
//! is never touched. Dropping the store (or [`ScratchStore::discard`]) frees the memory.
//!
//! The in-memory collections together hold at most `max_chunks` chunks: a batch that would
//! pass the bound is refused whole, naming `limits.max_ephemeral_chunks`.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

use super::{
    BatchOutcome, CollectionInfo, DocumentStore, InMemoryQuarantineStore, InMemoryStore, Manifest,
    Rebuild, SearchRequest, SourceBatch, StoreError, WriterLock, validate_collection_name,
};
use crate::types::{EmbeddingProfile, ScoredChunk, StoredChunk};
use crate::validate::{QuarantineEntry, QuarantineStore, ValidateError};

/// The names of the throwaway collections, shared by a [`ScratchStore`] and its
/// [`ScratchQuarantine`].
#[derive(Debug, Default)]
pub struct ScratchNames(RwLock<BTreeSet<String>>);

impl ScratchNames {
    /// These names, throwaway from the start.
    pub fn of<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self(RwLock::new(names.into_iter().map(Into::into).collect()))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    /// Sorted.
    pub fn list(&self) -> Vec<String> {
        let names = self.0.read().unwrap_or_else(PoisonError::into_inner);
        names.iter().cloned().collect()
    }

    fn insert(&self, name: &str) -> bool {
        let mut names = self.0.write().unwrap_or_else(PoisonError::into_inner);
        names.insert(name.to_string())
    }

    fn remove(&self, name: &str) -> bool {
        let mut names = self.0.write().unwrap_or_else(PoisonError::into_inner);
        names.remove(name)
    }
}

/// See the module docs.
pub struct ScratchStore {
    base: Arc<dyn DocumentStore>,
    memory: InMemoryStore,
    names: Arc<ScratchNames>,
    max_chunks: usize,
}

impl ScratchStore {
    /// Over `base`, with `names` kept in memory (at most `max_chunks` chunks in all).
    pub fn new(base: Arc<dyn DocumentStore>, names: Arc<ScratchNames>, max_chunks: usize) -> Self {
        Self {
            base,
            memory: InMemoryStore::new(),
            names,
            max_chunks,
        }
    }

    /// The names this store keeps in memory.
    pub fn names(&self) -> &Arc<ScratchNames> {
        &self.names
    }

    /// Makes `name` a throwaway collection from now on (an empty one until something is
    /// ingested into it); true when it was not one already.
    pub fn add(&self, name: &str) -> Result<bool, StoreError> {
        validate_collection_name(name)?;
        Ok(self.names.insert(name))
    }

    /// Drops the throwaway collection `name` and its chunks; false when it was none.
    pub fn discard(&self, name: &str) -> bool {
        if !self.names.remove(name) {
            return false;
        }
        match self.memory.drop_collection(name) {
            Ok(()) | Err(StoreError::UnknownCollection(_)) => {}
            Err(error) => {
                tracing::warn!(collection = name, %error, "cannot drop a scratch collection")
            }
        }
        true
    }

    fn route(&self, collection: &str) -> &dyn DocumentStore {
        if self.names.contains(collection) {
            &self.memory
        } else {
            self.base.as_ref()
        }
    }

    /// Refuses a batch that would take the in-memory collections past `max_chunks`.
    fn check_room(&self, collection: &str, batch: &SourceBatch) -> Result<(), StoreError> {
        let held: usize = self.memory.collections()?.iter().map(|c| c.chunks).sum();
        let adding: usize = batch.writes.iter().map(|w| w.chunks.len()).sum();
        if held.saturating_add(adding) > self.max_chunks {
            let source_id = batch
                .writes
                .first()
                .map(|w| w.record.source_id.clone())
                .unwrap_or_default();
            return Err(StoreError::InvalidBatch {
                collection: collection.to_string(),
                source_id,
                reason: format!(
                    "throwaway collections hold at most {} chunks in memory ({held} held, {adding} more in this batch); raise limits.max_ephemeral_chunks or ingest less",
                    self.max_chunks
                ),
            });
        }
        Ok(())
    }
}

impl DocumentStore for ScratchStore {
    fn writer_lock(&self, collection: &str) -> Result<WriterLock, StoreError> {
        self.route(collection).writer_lock(collection)
    }

    fn collections(&self) -> Result<Vec<CollectionInfo>, StoreError> {
        let mut all: Vec<CollectionInfo> = self
            .base
            .collections()?
            .into_iter()
            .filter(|c| !self.names.contains(&c.name))
            .collect();
        all.extend(self.memory.collections()?);
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    fn ensure_collection(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<(), StoreError> {
        self.route(collection)
            .ensure_collection(collection, profile)
    }

    fn manifest(&self, collection: &str) -> Result<Manifest, StoreError> {
        self.route(collection).manifest(collection)
    }

    fn commit_sources(
        &self,
        collection: &str,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        if self.names.contains(collection) {
            self.check_room(collection, &batch)?;
        }
        self.route(collection).commit_sources(collection, batch)
    }

    fn drop_collection(&self, collection: &str) -> Result<(), StoreError> {
        self.route(collection).drop_collection(collection)
    }

    fn begin_rebuild(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<Rebuild, StoreError> {
        self.route(collection).begin_rebuild(collection, profile)
    }

    fn commit_rebuild(
        &self,
        rebuild: &Rebuild,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        if self.names.contains(rebuild.collection()) {
            self.check_room(rebuild.collection(), &batch)?;
        }
        self.route(rebuild.collection())
            .commit_rebuild(rebuild, batch)
    }

    fn publish_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        self.route(rebuild.collection()).publish_rebuild(rebuild)
    }

    fn abort_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        self.route(rebuild.collection()).abort_rebuild(rebuild)
    }

    fn chunks_of_source(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Vec<StoredChunk>, StoreError> {
        self.route(collection)
            .chunks_of_source(collection, source_id)
    }

    fn get_chunk(
        &self,
        collection: &str,
        chunk_id: &str,
    ) -> Result<Option<StoredChunk>, StoreError> {
        self.route(collection).get_chunk(collection, chunk_id)
    }

    fn search(
        &self,
        collection: &str,
        request: &SearchRequest,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        self.route(collection).search(collection, request)
    }
}

/// A [`ScratchStore`] and its [`ScratchQuarantine`] over one process's stores, sharing one
/// set of names: what an ingestion pipeline and the query pipelines are built over.
#[derive(Clone)]
pub struct ScratchLayer {
    pub store: Arc<ScratchStore>,
    pub quarantine: Arc<ScratchQuarantine>,
    /// The quarantine underneath (for listings that must not see throwaway entries).
    pub base_quarantine: Arc<dyn QuarantineStore>,
}

impl ScratchLayer {
    /// Over `documents` and `quarantine`, with `names` throwaway (at most `max_chunks` chunks).
    pub fn over(
        documents: Arc<dyn DocumentStore>,
        quarantine: Arc<dyn QuarantineStore>,
        names: Arc<ScratchNames>,
        max_chunks: usize,
    ) -> Self {
        Self {
            store: Arc::new(ScratchStore::new(documents, names.clone(), max_chunks)),
            quarantine: Arc::new(ScratchQuarantine::new(quarantine.clone(), names)),
            base_quarantine: quarantine,
        }
    }
}

/// The quarantine beside a [`ScratchStore`]: entries of its throwaway collections stay in
/// memory, every other one goes to `base`.
pub struct ScratchQuarantine {
    base: Arc<dyn QuarantineStore>,
    memory: InMemoryQuarantineStore,
    names: Arc<ScratchNames>,
}

impl ScratchQuarantine {
    pub fn new(base: Arc<dyn QuarantineStore>, names: Arc<ScratchNames>) -> Self {
        Self {
            base,
            memory: InMemoryQuarantineStore::new(),
            names,
        }
    }

    fn route(&self, collection: &str) -> &dyn QuarantineStore {
        if self.names.contains(collection) {
            &self.memory
        } else {
            self.base.as_ref()
        }
    }
}

impl QuarantineStore for ScratchQuarantine {
    fn put(&self, entry: &QuarantineEntry) -> Result<(), ValidateError> {
        self.route(&entry.collection).put(entry)
    }

    fn get(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Option<QuarantineEntry>, ValidateError> {
        self.route(collection).get(collection, source_id)
    }

    fn list(&self, collection: Option<&str>) -> Result<Vec<QuarantineEntry>, ValidateError> {
        match collection {
            Some(name) => self.route(name).list(Some(name)),
            None => {
                let mut all: Vec<QuarantineEntry> = self
                    .base
                    .list(None)?
                    .into_iter()
                    .filter(|e| !self.names.contains(&e.collection))
                    .collect();
                all.extend(self.memory.list(None)?);
                Ok(all)
            }
        }
    }

    fn remove(&self, collection: &str, source_id: &str) -> Result<(), ValidateError> {
        self.route(collection).remove(collection, source_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::{axis_vector, chunk, profile, record};
    use crate::store::{SearchMode, SourceWrite};

    fn batch(source: &str, text: &str) -> SourceBatch {
        let chunks = vec![chunk(
            source,
            &format!("{source}#0"),
            0,
            text,
            axis_vector(0, 0.1),
        )];
        SourceBatch {
            writes: vec![SourceWrite {
                record: record(source, &chunks),
                chunks,
            }],
            deletes: Vec::new(),
        }
    }

    fn layer(max_chunks: usize) -> (Arc<InMemoryStore>, ScratchLayer) {
        let base = Arc::new(InMemoryStore::new());
        let quarantine: Arc<dyn QuarantineStore> = Arc::new(InMemoryQuarantineStore::new());
        let layer = ScratchLayer::over(base.clone(), quarantine, Arc::default(), max_chunks);
        (base, layer)
    }

    fn bm25(text: &str) -> SearchRequest {
        SearchRequest {
            mode: SearchMode::Bm25,
            text: Some(text.into()),
            vector: None,
            k: 5,
            rrf_k: 60.0,
            fusion: Default::default(),
        }
    }

    #[test]
    fn a_scratch_collection_lives_in_memory_and_never_reaches_the_store_underneath() {
        let (base, layer) = layer(100);
        let store = &layer.store;
        store.ensure_collection("kept", &profile()).unwrap();
        store
            .commit_sources("kept", batch("a.md", "kept text"))
            .unwrap();
        assert!(store.add("tmp").unwrap());
        store.ensure_collection("tmp", &profile()).unwrap();
        store
            .commit_sources("tmp", batch("b.md", "throwaway text"))
            .unwrap();

        let below: Vec<String> = base
            .collections()
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            below,
            ["kept"],
            "the scratch collection reached the store underneath"
        );
        let seen: Vec<(String, String)> = store
            .collections()
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.provider))
            .collect();
        assert_eq!(
            seen,
            [
                ("kept".into(), "memory".into()),
                ("tmp".into(), "memory".into())
            ]
        );
        let hits = store.search("tmp", &bm25("throwaway")).unwrap();
        assert_eq!(hits[0].chunk.source_id, "b.md");

        assert!(store.discard("tmp"));
        assert!(!store.discard("tmp"));
        let left: Vec<String> = store
            .collections()
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(left, ["kept"]);
    }

    #[test]
    fn a_scratch_name_shadows_a_persistent_collection_without_touching_it() {
        let (base, layer) = layer(100);
        base.ensure_collection("kb", &profile()).unwrap();
        base.commit_sources("kb", batch("old.md", "persistent words"))
            .unwrap();
        layer.store.add("kb").unwrap();
        layer.store.ensure_collection("kb", &profile()).unwrap();
        layer
            .store
            .commit_sources("kb", batch("new.md", "scratch words"))
            .unwrap();

        let listed = layer.store.collections().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].provider, "memory");
        assert_eq!(
            layer.store.manifest("kb").unwrap().sources[0].source_id,
            "new.md"
        );
        assert_eq!(base.manifest("kb").unwrap().sources[0].source_id, "old.md");
        layer.store.discard("kb");
        assert_eq!(
            layer.store.manifest("kb").unwrap().sources[0].source_id,
            "old.md"
        );
    }

    #[test]
    fn scratch_collections_are_bounded_in_chunks_and_an_oversized_batch_changes_nothing() {
        let (_, layer) = layer(1);
        layer.store.add("tmp").unwrap();
        layer.store.ensure_collection("tmp", &profile()).unwrap();
        layer
            .store
            .commit_sources("tmp", batch("a.md", "one"))
            .unwrap();
        let error = layer
            .store
            .commit_sources("tmp", batch("b.md", "two"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("limits.max_ephemeral_chunks"), "{error}");
        assert_eq!(layer.store.manifest("tmp").unwrap().sources.len(), 1);
        assert!(
            layer.store.add("bad name!").is_err(),
            "names are checked like any collection's"
        );
    }

    #[test]
    fn quarantine_entries_of_scratch_collections_stay_in_memory() {
        let (_, layer) = layer(10);
        layer.store.add("tmp").unwrap();
        let entry = |collection: &str| QuarantineEntry::new(collection, "x.md", "injection", b"x");
        layer.quarantine.put(&entry("tmp")).unwrap();
        layer.quarantine.put(&entry("kept")).unwrap();
        assert_eq!(layer.base_quarantine.list(None).unwrap().len(), 1);
        assert_eq!(layer.quarantine.list(None).unwrap().len(), 2);
        assert_eq!(layer.quarantine.list(Some("tmp")).unwrap().len(), 1);
    }
}
