//! [`InMemoryStore`]: a [`DocumentStore`] held in memory, for throwaway collections and tests —
//! the same contract as the embedded store (the conformance suite in `store::conformance`
//! runs against both), nothing persisted.
//!
//! Each collection keeps its chunks, its manifest, the exact vector set (cosine over
//! L2-normalised vectors, the embedded store's exact scan) and a BM25 index analysed and scored
//! like the embedded store's (see [`lexical`]); hybrid search fuses both with the store's RRF
//! ([`fuse_hybrid`]) and labels results the same way. All state sits behind one lock, so a
//! `commit_sources` batch is atomic: a search sees its sources either before or after it.
//!
//! Also here: [`InMemoryQuarantineStore`], the in-memory [`QuarantineStore`].

mod lexical;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::checks::{CheckedQuery, check_search, check_source_batch};
use super::exact_vectors::ExactVectors;
use super::hybrid::{fuse_hybrid, hybrid_depths};
use super::{
    BatchOutcome, CollectionInfo, DocumentStore, Manifest, Rebuild, SearchRequest, SourceBatch,
    SourceRecord, SourceWrite, StoreError, VectorIndexStatus, validate_collection_name,
};
use crate::settings::StoreSettings;
use crate::types::{EmbeddingProfile, ScoreOrigin, ScoredChunk, StoredChunk};
use crate::validate::quarantine::{is_source_or_part, log_quarantined};
use crate::validate::{QuarantineEntry, QuarantineStore, ValidateError};
use lexical::LexicalIndex;

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One collection.
struct MemoryCollection {
    profile: EmbeddingProfile,
    /// Manifest entries by source id.
    sources: BTreeMap<String, SourceRecord>,
    /// Chunks by id.
    chunks: BTreeMap<String, StoredChunk>,
    vectors: ExactVectors,
    lexical: LexicalIndex,
}

impl MemoryCollection {
    fn new(profile: EmbeddingProfile) -> Self {
        Self {
            vectors: ExactVectors::new(profile.dimensions),
            profile,
            sources: BTreeMap::new(),
            chunks: BTreeMap::new(),
            lexical: LexicalIndex::default(),
        }
    }

    fn remove_chunk(&mut self, id: &str) {
        self.chunks.remove(id);
        self.vectors.remove(id);
        self.lexical.remove(id);
    }

    /// Commits a checked batch: the whole batch or nothing (the caller holds the lock).
    fn commit(&mut self, collection: &str, batch: SourceBatch) -> Result<BatchOutcome, StoreError> {
        check_source_batch(collection, &self.profile, &batch)?;
        let new_ids: HashSet<&str> = batch
            .writes
            .iter()
            .flat_map(|w| w.chunks.iter().map(|c| c.id.as_str()))
            .collect();
        let mut outcome = BatchOutcome::default();
        let mut stale: Vec<String> = Vec::new();
        for write in &batch.writes {
            if let Some(previous) = self.sources.get(&write.record.source_id) {
                stale.extend(
                    previous
                        .chunk_ids
                        .iter()
                        .filter(|id| !new_ids.contains(id.as_str()))
                        .cloned(),
                );
            }
        }
        for source_id in &batch.deletes {
            if let Some(record) = self.sources.remove(source_id) {
                outcome.sources_deleted += 1;
                stale.extend(
                    record
                        .chunk_ids
                        .into_iter()
                        .filter(|id| !new_ids.contains(id.as_str())),
                );
            }
        }
        outcome.chunks_removed = stale.len();
        for id in &stale {
            self.remove_chunk(id);
        }
        for SourceWrite { record, chunks } in batch.writes {
            for chunk in chunks {
                self.vectors.upsert(&chunk.id, &chunk.vector);
                self.lexical.insert(&chunk.id, &chunk.text);
                self.chunks.insert(chunk.id.clone(), chunk);
            }
            self.sources.insert(record.source_id.clone(), record);
        }
        Ok(outcome)
    }

    /// Hits as chunks, labelled with `origin`.
    fn resolve<I: AsRef<str>>(&self, hits: Vec<(I, f32)>, origin: ScoreOrigin) -> Vec<ScoredChunk> {
        hits.into_iter()
            .filter_map(|(id, score)| {
                self.chunks.get(id.as_ref()).map(|chunk| ScoredChunk {
                    chunk: chunk.clone(),
                    score,
                    origin,
                })
            })
            .collect()
    }
}

/// The in-memory document store (see the module docs). Cheap to share (`Send + Sync`).
pub struct InMemoryStore {
    collections: RwLock<BTreeMap<String, MemoryCollection>>,
    /// Collections being rebuilt, by rebuild id (`<name>@<n>`, outside the names users give).
    rebuilds: Mutex<BTreeMap<String, MemoryCollection>>,
    /// Numbers the rebuild ids.
    next_rebuild: AtomicU64,
    /// RRF constant of hybrid searches whose request gives none (`rag.store.rrf_k`'s default).
    rrf_k: f32,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            collections: RwLock::new(BTreeMap::new()),
            rebuilds: Mutex::new(BTreeMap::new()),
            next_rebuild: AtomicU64::new(1),
            rrf_k: StoreSettings::default().rrf_k,
        }
    }
}

fn unknown(collection: &str) -> StoreError {
    StoreError::UnknownCollection(collection.to_string())
}

impl DocumentStore for InMemoryStore {
    fn collections(&self) -> Result<Vec<CollectionInfo>, StoreError> {
        Ok(read(&self.collections)
            .iter()
            .map(|(name, collection)| CollectionInfo {
                name: name.clone(),
                sources: collection.sources.len(),
                chunks: collection.chunks.len(),
                profile: Some(collection.profile.clone()),
                vector_index: VectorIndexStatus {
                    serving: "exact".to_string(),
                    reason: format!("{} chunks, held in memory", collection.chunks.len()),
                    hnsw_recall_at_10: None,
                },
                provider: "memory".into(),
            })
            .collect())
    }

    fn ensure_collection(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<(), StoreError> {
        validate_collection_name(collection)?;
        let mut collections = write(&self.collections);
        match collections.get(collection) {
            Some(existing) if &existing.profile != profile => Err(StoreError::ProfileMismatch {
                collection: collection.to_string(),
                recorded: existing.profile.to_string(),
                active: profile.to_string(),
            }),
            Some(_) => Ok(()),
            None => {
                collections.insert(
                    collection.to_string(),
                    MemoryCollection::new(profile.clone()),
                );
                Ok(())
            }
        }
    }

    fn manifest(&self, collection: &str) -> Result<Manifest, StoreError> {
        validate_collection_name(collection)?;
        let collections = read(&self.collections);
        Ok(match collections.get(collection) {
            None => Manifest {
                collection: collection.to_string(),
                ..Manifest::default()
            },
            Some(handle) => Manifest {
                collection: collection.to_string(),
                profile: Some(handle.profile.clone()),
                sources: handle.sources.values().cloned().collect(),
                corrupt_entries: Vec::new(),
            },
        })
    }

    fn commit_sources(
        &self,
        collection: &str,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        validate_collection_name(collection)?;
        let mut collections = write(&self.collections);
        let handle = collections
            .get_mut(collection)
            .ok_or_else(|| unknown(collection))?;
        handle.commit(collection, batch)
    }

    fn drop_collection(&self, collection: &str) -> Result<(), StoreError> {
        validate_collection_name(collection)?;
        write(&self.collections)
            .remove(collection)
            .map(|_| ())
            .ok_or_else(|| unknown(collection))
    }

    fn begin_rebuild(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<Rebuild, StoreError> {
        validate_collection_name(collection)?;
        let number = self.next_rebuild.fetch_add(1, Ordering::Relaxed);
        let rebuild = Rebuild::new(collection, format!("{collection}@{number}"));
        lock(&self.rebuilds).insert(
            rebuild.id().to_string(),
            MemoryCollection::new(profile.clone()),
        );
        Ok(rebuild)
    }

    fn commit_rebuild(
        &self,
        rebuild: &Rebuild,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        let mut rebuilds = lock(&self.rebuilds);
        let staged = rebuilds
            .get_mut(rebuild.id())
            .ok_or_else(|| rebuild.not_in_progress())?;
        staged.commit(rebuild.collection(), batch)
    }

    fn publish_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        let staged = lock(&self.rebuilds)
            .remove(rebuild.id())
            .ok_or_else(|| rebuild.not_in_progress())?;
        write(&self.collections).insert(rebuild.collection().to_string(), staged);
        Ok(())
    }

    fn abort_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        lock(&self.rebuilds)
            .remove(rebuild.id())
            .map(|_| ())
            .ok_or_else(|| rebuild.not_in_progress())
    }

    fn chunks_of_source(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Vec<StoredChunk>, StoreError> {
        validate_collection_name(collection)?;
        let collections = read(&self.collections);
        let handle = collections
            .get(collection)
            .ok_or_else(|| unknown(collection))?;
        let mut chunks: Vec<StoredChunk> = handle
            .sources
            .get(source_id)
            .map(|record| {
                record
                    .chunk_ids
                    .iter()
                    .filter_map(|id| handle.chunks.get(id).cloned())
                    .collect()
            })
            .unwrap_or_default();
        chunks.sort_by_key(|chunk| chunk.ordinal);
        Ok(chunks)
    }

    fn get_chunk(
        &self,
        collection: &str,
        chunk_id: &str,
    ) -> Result<Option<StoredChunk>, StoreError> {
        validate_collection_name(collection)?;
        let collections = read(&self.collections);
        let handle = collections
            .get(collection)
            .ok_or_else(|| unknown(collection))?;
        Ok(handle.chunks.get(chunk_id).cloned())
    }

    fn search(
        &self,
        collection: &str,
        request: &SearchRequest,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        validate_collection_name(collection)?;
        let collections = read(&self.collections);
        let handle = collections
            .get(collection)
            .ok_or_else(|| unknown(collection))?;
        let Some(search) = check_search(collection, &handle.profile, request, self.rrf_k)? else {
            return Ok(Vec::new());
        };
        let k = search.k;
        Ok(match search.query {
            CheckedQuery::Bm25(text) => {
                handle.resolve(handle.lexical.search(text, k), ScoreOrigin::Bm25)
            }
            CheckedQuery::Vector(query) => {
                handle.resolve(handle.vectors.search(&query, k), ScoreOrigin::Vector)
            }
            CheckedQuery::Hybrid(query, text) => {
                let (vector_depth, depth) = hybrid_depths(k, None);
                let vector_hits = handle.resolve(
                    handle.vectors.search(&query, vector_depth),
                    ScoreOrigin::Vector,
                );
                let lexical_hits = text
                    .map(|text| {
                        handle.resolve(handle.lexical.search(text, depth), ScoreOrigin::Bm25)
                    })
                    .unwrap_or_default();
                fuse_hybrid(vector_hits, lexical_hits, search.rrf_k, &request.fusion, k)
            }
        })
    }
}

/// The in-memory [`QuarantineStore`]: entries by (collection, source id), so listings come
/// sorted by collection then source id, as the embedded store's do.
#[derive(Debug, Default)]
pub struct InMemoryQuarantineStore {
    entries: RwLock<BTreeMap<(String, String), QuarantineEntry>>,
}

impl InMemoryQuarantineStore {
    /// An empty quarantine.
    pub fn new() -> Self {
        Self::default()
    }
}

impl QuarantineStore for InMemoryQuarantineStore {
    fn put(&self, entry: &QuarantineEntry) -> Result<(), ValidateError> {
        write(&self.entries).insert(
            (entry.collection.clone(), entry.source_id.clone()),
            entry.clone(),
        );
        log_quarantined(entry);
        Ok(())
    }

    fn get(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Option<QuarantineEntry>, ValidateError> {
        Ok(read(&self.entries)
            .get(&(collection.to_string(), source_id.to_string()))
            .cloned())
    }

    fn list(&self, collection: Option<&str>) -> Result<Vec<QuarantineEntry>, ValidateError> {
        Ok(read(&self.entries)
            .values()
            .filter(|entry| collection.is_none_or(|c| entry.collection == c))
            .cloned()
            .collect())
    }

    fn remove(&self, collection: &str, source_id: &str) -> Result<(), ValidateError> {
        write(&self.entries).retain(|(entry_collection, entry_source), _| {
            !(entry_collection == collection && is_source_or_part(entry_source, source_id))
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::conformance;

    #[test]
    fn the_in_memory_store_passes_the_conformance_suite() {
        conformance::document_store_suite(&mut || Arc::new(InMemoryStore::new()));
    }

    #[test]
    fn the_in_memory_quarantine_passes_the_conformance_suite() {
        conformance::quarantine_store_suite(&mut || Arc::new(InMemoryQuarantineStore::new()));
    }
}

/// The in-memory store against the embedded one, operation by operation.
#[cfg(test)]
mod agreement_tests {
    use std::sync::Arc;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::store::conformance::{DIMENSIONS, axis_vector, chunk, profile, record};
    use crate::store::{EmbeddedStore, SearchMode};

    const WORDS: &[&str] = &[
        "refund", "refunds", "delivery", "shipping", "warranty", "battery", "screen", "order",
        "return", "days", "express", "support", "garden", "tomato", "roses", "kitchen",
    ];

    fn random_text(rng: &mut StdRng) -> String {
        (0..rng.random_range(3..12))
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn random_vector(rng: &mut StdRng) -> Vec<f32> {
        let mut vector = axis_vector(rng.random_range(0..DIMENSIONS), rng.random_range(0.0..1.0));
        vector[rng.random_range(0..DIMENSIONS)] += rng.random_range(-0.5..0.5);
        vector
    }

    fn summary(hits: &[ScoredChunk]) -> Vec<(String, ScoreOrigin)> {
        hits.iter()
            .map(|h| (h.chunk.id.clone(), h.origin))
            .collect()
    }

    /// Random replaces and deletes applied to both stores leave the same manifest, the same
    /// chunks, and the same vector, BM25 and hybrid results: ids, order, origins and scores.
    /// Both compute tantivy's BM25, so scores agree to float rounding, and hits whose scores are
    /// equal only up to that rounding may come out in either order (the hybrid comparison is
    /// then skipped for that step, the fused ranks inheriting the order).
    #[test]
    fn both_stores_agree_after_the_same_operations() {
        for seed in [12, 7, 2026] {
            agree_after_random_operations(seed);
        }
    }

    fn agree_after_random_operations(seed: u64) {
        let dir = tempfile::tempdir().unwrap();
        let embedded: Arc<dyn DocumentStore> =
            Arc::new(EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap());
        let memory: Arc<dyn DocumentStore> = Arc::new(InMemoryStore::new());
        let mut rng = StdRng::seed_from_u64(seed);
        for store in [&embedded, &memory] {
            store.ensure_collection("docs", &profile()).unwrap();
        }
        let mut next_id = 0;
        let mut hybrid_compared = 0;
        for step in 0..60 {
            let source = format!("s{}.md", rng.random_range(0..6));
            if rng.random_range(0..5) == 0 {
                let removed: Vec<usize> = [&embedded, &memory]
                    .iter()
                    .map(|store| store.delete_source("docs", &source).unwrap())
                    .collect();
                assert_eq!(removed[0], removed[1], "step {step}: delete {source}");
            } else {
                let previous = memory.chunks_of_source("docs", &source).unwrap();
                let mut chunks: Vec<StoredChunk> = previous
                    .into_iter()
                    .filter(|_| rng.random_bool(0.5))
                    .collect();
                for _ in 0..rng.random_range(0..4) {
                    next_id += 1;
                    let text = random_text(&mut rng);
                    let vector = random_vector(&mut rng);
                    chunks.push(chunk(&source, &format!("c{next_id:03}"), 0, &text, vector));
                }
                for (ordinal, chunk) in chunks.iter_mut().enumerate() {
                    chunk.ordinal = ordinal as u32;
                }
                for store in [&embedded, &memory] {
                    store
                        .replace_source("docs", record(&source, &chunks), chunks.clone())
                        .unwrap();
                }
            }

            assert_eq!(
                embedded.manifest("docs").unwrap(),
                memory.manifest("docs").unwrap(),
                "step {step}"
            );
            let (a, b) = (
                &embedded.collections().unwrap()[0],
                &memory.collections().unwrap()[0],
            );
            assert_eq!((a.sources, a.chunks), (b.sources, b.chunks), "step {step}");
            for source in (0..6).map(|s| format!("s{s}.md")) {
                assert_eq!(
                    embedded.chunks_of_source("docs", &source).unwrap(),
                    memory.chunks_of_source("docs", &source).unwrap(),
                    "step {step}: {source}"
                );
            }

            let query = random_vector(&mut rng);
            let text = random_text(&mut rng);
            let vector = SearchRequest {
                mode: SearchMode::Vector,
                text: None,
                vector: Some(query.clone()),
                k: 8,
                rrf_k: 60.0,
                fusion: Default::default(),
            };
            let (a, b) = (
                embedded.search("docs", &vector).unwrap(),
                memory.search("docs", &vector).unwrap(),
            );
            assert_eq!(summary(&a), summary(&b), "step {step}: vector");
            for (x, y) in a.iter().zip(&b) {
                assert!((x.score - y.score).abs() < 1e-6, "step {step}: cosines");
            }
            let lexical = SearchRequest {
                mode: SearchMode::Bm25,
                text: Some(text.clone()),
                vector: None,
                k: 100,
                rrf_k: 60.0,
                fusion: Default::default(),
            };
            let near = |x: f32, y: f32| (x - y).abs() <= 1e-5 * x.abs().max(1.0);
            let (a, b) = (
                embedded.search("docs", &lexical).unwrap(),
                memory.search("docs", &lexical).unwrap(),
            );
            let context = format!("seed {seed}, step {step}: BM25 for {text:?}");
            assert_eq!(a.len(), b.len(), "{context}");
            let score_of = |hits: &[ScoredChunk], id: &str| {
                hits.iter()
                    .find(|h| h.chunk.id == id)
                    .map(|h| h.score)
                    .unwrap_or_else(|| panic!("{context}: {id} missing"))
            };
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    near(x.score, y.score),
                    "{context}: {} vs {}",
                    x.score,
                    y.score
                );
                assert!(near(x.score, score_of(&b, &x.chunk.id)), "{context}");
                assert_eq!((x.origin, y.origin), (ScoreOrigin::Bm25, ScoreOrigin::Bm25));
            }
            if summary(&a) != summary(&b) {
                // Two scores equal up to float rounding came out in another order; the hybrid
                // fusion would inherit it.
                continue;
            }
            let hybrid = SearchRequest {
                mode: SearchMode::Hybrid,
                text: Some(text.clone()),
                vector: Some(query),
                k: 6,
                rrf_k: 60.0,
                fusion: Default::default(),
            };
            let (a, b) = (
                embedded.search("docs", &hybrid).unwrap(),
                memory.search("docs", &hybrid).unwrap(),
            );
            hybrid_compared += 1;
            assert_eq!(summary(&a), summary(&b), "seed {seed}, step {step}: hybrid");
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.score, y.score, "seed {seed}, step {step}: RRF scores");
            }
        }
        assert!(
            hybrid_compared >= 50,
            "seed {seed}: {hybrid_compared} hybrid comparisons"
        );
    }
}
