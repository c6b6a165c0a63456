//! [`EmbeddedStore::check_consistency`]: a read-only audit of every collection — the manifest
//! against the chunks in sled, the parts of multi-part sources against each other, and the
//! derived indexes (BM25, vectors) against sled — and of the storages: the registry points
//! every name at the version that serves it, and no storage (sled tree or index folder) is
//! left that nothing points at. The crash tests and the daemon kill loop run it
//! after every kill; an operator-facing command can print its report.

use std::collections::{BTreeMap, BTreeSet};

use super::layout::TREE_PREFIX;
use super::{Collection, EmbeddedStore, lock, read};
use crate::ingest::plan::file_of;
use crate::store::{SourceRecord, StoreError};

/// What [`EmbeddedStore::check_consistency`] found in one collection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CollectionConsistency {
    pub collection: String,
    /// Manifest entries (readable or not).
    pub sources: usize,
    /// Chunks in sled.
    pub chunks: usize,
    /// One sentence per inconsistency; empty when the collection is consistent.
    pub problems: Vec<String>,
}

/// The audit of every collection of a store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsistencyReport {
    pub collections: Vec<CollectionConsistency>,
    /// Problems of the registry and the storages (a name pointing elsewhere than the version
    /// that serves it, storages nothing points at), one sentence each.
    pub storage_problems: Vec<String>,
}

impl ConsistencyReport {
    /// True when no collection and no storage has a problem.
    pub fn is_consistent(&self) -> bool {
        self.storage_problems.is_empty() && self.collections.iter().all(|c| c.problems.is_empty())
    }

    /// Every problem, prefixed with its collection (storage problems first).
    pub fn problems(&self) -> Vec<String> {
        self.storage_problems
            .iter()
            .cloned()
            .chain(self.collections.iter().flat_map(|c| {
                c.problems
                    .iter()
                    .map(move |p| format!("collection '{}': {p}", c.collection))
            }))
            .collect()
    }
}

impl EmbeddedStore {
    /// Audits every collection without changing anything: every manifest entry is readable and
    /// names chunks that exist, decode and belong to it; no chunk is owned twice or by no entry;
    /// the parts of a multi-part source (`file#row=N`, `file#page=N`) all come from one version
    /// of the file (one content hash, chunking and embedding profile); the BM25 index holds
    /// exactly sled's chunk ids at sled's generation, and the vector index holds every chunk.
    /// Each collection is read under its index lock, so a concurrent commit is seen whole or
    /// not at all. The storages: the registry points each name at the storage of the version
    /// serving it, and every sled tree and index folder of a storage belongs to a live
    /// collection or a rebuild in progress (a version swapped out moments ago is removed once
    /// its last in-flight reader is done, so an audit racing a publish may see it). `Err`
    /// only when sled or the BM25 index cannot be read.
    pub fn check_consistency(&self) -> Result<ConsistencyReport, StoreError> {
        let collections: Vec<_> = read(&self.collections).values().cloned().collect();
        let mut report = ConsistencyReport {
            storage_problems: self.check_storages()?,
            ..ConsistencyReport::default()
        };
        for collection in collections {
            report.collections.push(check_collection(&collection)?);
        }
        Ok(report)
    }

    fn check_storages(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        let live: BTreeMap<String, String> = read(&self.collections)
            .iter()
            .map(|(name, collection)| (name.clone(), collection.storage.clone()))
            .collect();
        let rebuilding: BTreeSet<String> = lock(&self.rebuilds).keys().cloned().collect();
        let registered = self.registered()?;
        for (name, storage) in &live {
            match registered.get(name) {
                Some(pointed) if pointed == storage => {}
                Some(pointed) => problems.push(format!(
                    "collection '{name}' is served from storage '{storage}' but the registry points at '{pointed}'"
                )),
                None => problems.push(format!(
                    "collection '{name}' is served from storage '{storage}' but is not in the registry"
                )),
            }
        }
        for (name, storage) in &registered {
            if !live.contains_key(name) {
                problems.push(format!(
                    "the registry names collection '{name}' (storage '{storage}'), which is not open"
                ));
            }
        }
        let known: BTreeSet<&str> = live
            .values()
            .map(String::as_str)
            .chain(rebuilding.iter().map(String::as_str))
            .collect();
        for tree in self.db.tree_names() {
            let tree = String::from_utf8_lossy(&tree).into_owned();
            if let Some(storage) = tree.strip_prefix(TREE_PREFIX)
                && !known.contains(storage)
            {
                problems.push(format!(
                    "sled tree '{tree}' belongs to no collection and no rebuild in progress (a leftover)"
                ));
            }
        }
        if let Ok(entries) = std::fs::read_dir(&self.index_root) {
            for entry in entries.flatten() {
                let folder = entry.file_name().to_string_lossy().into_owned();
                if !known.contains(folder.as_str()) {
                    problems.push(format!(
                        "index folder {} belongs to no collection and no rebuild in progress (a leftover)",
                        entry.path().display()
                    ));
                }
            }
        }
        Ok(problems)
    }
}

fn check_collection(collection: &Collection) -> Result<CollectionConsistency, StoreError> {
    let indexes = read(&collection.indexes);
    let mut problems = Vec::new();

    // Every chunk in sled, by id; undecodable ones are problems.
    let mut sled_chunks = BTreeMap::new();
    for (id, entry) in collection.tree.chunk_entries()? {
        match entry {
            Ok(chunk) => {
                sled_chunks.insert(id, chunk);
            }
            Err(reason) => problems.push(format!("chunk '{id}' is unreadable ({reason})")),
        }
    }

    // The manifest against the chunks.
    let entries = collection.tree.manifest_entries()?;
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let mut records: Vec<&SourceRecord> = Vec::new();
    for (source_id, entry) in &entries {
        match entry {
            Ok(record) => records.push(record),
            Err(reason) => problems.push(format!(
                "manifest entry of '{source_id}' is unreadable ({reason})"
            )),
        }
    }
    for record in &records {
        let source = record.source_id.as_str();
        let mut ordinals = BTreeSet::new();
        for id in &record.chunk_ids {
            if let Some(first) = owner.insert(id, source) {
                problems.push(format!(
                    "chunk '{id}' is listed by two manifest entries ('{first}' and '{source}')"
                ));
            }
            match sled_chunks.get(id) {
                None => problems.push(format!(
                    "source '{source}' lists chunk '{id}', which is not in sled"
                )),
                Some(chunk) if chunk.source_id != source => problems.push(format!(
                    "source '{source}' lists chunk '{id}', which belongs to '{}'",
                    chunk.source_id
                )),
                Some(chunk) => {
                    if !ordinals.insert(chunk.ordinal) {
                        problems.push(format!(
                            "source '{source}' has two chunks at ordinal {}",
                            chunk.ordinal
                        ));
                    }
                }
            }
        }
    }
    for (id, chunk) in &sled_chunks {
        if !owner.contains_key(id.as_str()) {
            problems.push(format!(
                "chunk '{id}' (of '{}') is in sled but in no manifest entry",
                chunk.source_id
            ));
        }
    }

    // The parts of one file come from one version of it.
    let mut files: BTreeMap<&str, Vec<&SourceRecord>> = BTreeMap::new();
    for record in &records {
        files
            .entry(file_of(&record.source_id))
            .or_default()
            .push(record);
    }
    for (file, parts) in &files {
        let versions: BTreeSet<(&str, &str, &str)> = parts
            .iter()
            .map(|r| {
                (
                    r.content_hash.as_str(),
                    r.chunking.as_str(),
                    r.embedding_profile.as_str(),
                )
            })
            .collect();
        if versions.len() > 1 {
            problems.push(format!(
                "the {} parts of '{file}' come from {} versions of it (content hash, chunking, profile): {versions:?}",
                parts.len(),
                versions.len()
            ));
        }
    }

    // The derived indexes against sled.
    let sled_stamp = collection.stamp(collection.tree.generation()?);
    if indexes.generation != sled_stamp.generation {
        problems.push(format!(
            "the indexes reflect generation {} but sled is at {}",
            indexes.generation, sled_stamp.generation
        ));
    }
    if indexes.bm25_stale {
        problems.push("the BM25 index missed an update (rebuilt at the next change)".into());
    } else {
        let bm25_stamp = indexes.bm25.stamp()?;
        if bm25_stamp != Some(sled_stamp) {
            problems.push(format!(
                "the BM25 index is stamped {bm25_stamp:?}, sled is at {sled_stamp:?}"
            ));
        }
        let mut bm25_ids = indexes.bm25.all_ids()?;
        bm25_ids.sort();
        let distinct: BTreeSet<&String> = bm25_ids.iter().collect();
        if distinct.len() != bm25_ids.len() {
            problems.push(format!(
                "the BM25 index holds {} documents for {} chunk ids",
                bm25_ids.len(),
                distinct.len()
            ));
        }
        let sled_ids: BTreeSet<&String> = sled_chunks.keys().collect();
        for id in sled_ids.difference(&distinct).take(5) {
            problems.push(format!("chunk '{id}' is missing from the BM25 index"));
        }
        for id in distinct.difference(&sled_ids).take(5) {
            problems.push(format!("the BM25 index holds '{id}', which is not in sled"));
        }
    }
    let missing_vectors: Vec<&String> = sled_chunks
        .keys()
        .filter(|id| !indexes.vectors.contains(id))
        .collect();
    if !missing_vectors.is_empty() {
        problems.push(format!(
            "{} chunks are missing from the vector index (first: '{}')",
            missing_vectors.len(),
            missing_vectors[0]
        ));
    }
    if indexes.vectors.len() != sled_chunks.len() {
        problems.push(format!(
            "the vector index holds {} chunks, sled {}",
            indexes.vectors.len(),
            sled_chunks.len()
        ));
    }

    Ok(CollectionConsistency {
        collection: collection.name.clone(),
        sources: entries.len(),
        chunks: sled_chunks.len(),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::super::layout::{chunk_key, encode_chunk};
    use super::super::tests::{chunk, profile, record};
    use super::*;
    use crate::settings::StoreSettings;
    use crate::store::DocumentStore;

    const DIMS: usize = 8;

    fn store_with_parts() -> (tempfile::TempDir, EmbeddedStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
        store.ensure_collection("kb", &profile(DIMS)).unwrap();
        for part in ["t.csv#row=1", "t.csv#row=2"] {
            let chunks = vec![chunk(part, &format!("{part}-c0"), 0, "row text", DIMS)];
            let mut rec = record(part, &chunks, DIMS);
            rec.content_hash = "v1".into();
            store.replace_source("kb", rec, chunks).unwrap();
        }
        let chunks = vec![chunk("a.md", "a-c0", 0, "alpha", DIMS)];
        store
            .replace_source("kb", record("a.md", &chunks, DIMS), chunks)
            .unwrap();
        (dir, store)
    }

    #[test]
    fn a_store_written_through_its_api_is_consistent() {
        let (_dir, store) = store_with_parts();
        let report = store.check_consistency().unwrap();
        assert!(report.is_consistent(), "{:?}", report.problems());
        assert_eq!(report.collections.len(), 1);
        assert_eq!(report.collections[0].sources, 3);
        assert_eq!(report.collections[0].chunks, 3);
    }

    #[test]
    fn orphan_chunks_missing_chunks_and_mixed_versions_are_reported() {
        let (dir, store) = store_with_parts();
        // A part of another version of t.csv, and a chunk nobody owns.
        let chunks = vec![chunk("t.csv#row=3", "row3-c0", 0, "row three", DIMS)];
        let mut rec = record("t.csv#row=3", &chunks, DIMS);
        rec.content_hash = "v2".into();
        store.replace_source("kb", rec, chunks).unwrap();
        let orphan = chunk("gone.md", "orphan", 0, "orphan", DIMS);
        store
            .collection("kb")
            .unwrap()
            .tree
            .insert_raw(&chunk_key("orphan"), &encode_chunk(&orphan).unwrap());
        // A manifest entry naming a chunk that is not there.
        let mut rec = record("b.md", &[chunk("b.md", "b-c0", 0, "b", DIMS)], DIMS);
        rec.chunk_ids.push("b-missing".into());
        let bytes = serde_json::to_vec(&rec).unwrap();
        store.damage_manifest_entry("kb", "b.md", &bytes);
        drop(store);
        let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
        let problems = store.check_consistency().unwrap().problems();
        let has = |needle: &str| problems.iter().any(|p| p.contains(needle));
        assert!(has("'t.csv' come from 2 versions"), "{problems:?}");
        assert!(
            has("chunk 'orphan' (of 'gone.md') is in sled but in no manifest entry"),
            "{problems:?}"
        );
        assert!(
            has("lists chunk 'b-missing', which is not in sled"),
            "{problems:?}"
        );
    }
}
