//! Tests of [`EmbeddedStore`] on real sled, tantivy and HNSW files in temporary directories.

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::layout::source_key;
use super::*;
use crate::store::exact_vectors::normalise;
use crate::store::{SearchMode, SourceRecord};
use crate::validate::QuarantineEntry;

pub(crate) fn profile(dimensions: usize) -> EmbeddingProfile {
    EmbeddingProfile {
        provider: "onnx".into(),
        model: "synthetic".into(),
        dimensions,
    }
}

/// A deterministic pseudo-random unit vector per seed.
pub(crate) fn vector_for(seed: &str, dimensions: usize) -> Vec<f32> {
    let hash = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = StdRng::seed_from_u64(hash);
    let mut v: Vec<f32> = (0..dimensions)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    normalise(&mut v);
    v
}

pub(crate) fn chunk(
    source: &str,
    id: &str,
    ordinal: u32,
    text: &str,
    dimensions: usize,
) -> StoredChunk {
    StoredChunk {
        id: id.into(),
        source_id: source.into(),
        ordinal,
        text: text.into(),
        start: 0,
        end: text.len(),
        metadata: Default::default(),
        content_hash: format!("hash-{id}"),
        vector: vector_for(id, dimensions),
    }
}

pub(crate) fn record(source: &str, chunks: &[StoredChunk], dimensions: usize) -> SourceRecord {
    SourceRecord {
        source_id: source.into(),
        content_hash: format!("content-{source}"),
        loader: "text".into(),
        chunking: "recursive:max_tokens=256".into(),
        embedding_profile: profile(dimensions).to_string(),
        chunk_ids: chunks.iter().map(|c| c.id.clone()).collect(),
        ingested_at: "2025-01-01T00:00:00Z".into(),
        validation: "clean".into(),
        stale: None,
    }
}

fn replace(
    store: &EmbeddedStore,
    collection: &str,
    source: &str,
    chunks: Vec<StoredChunk>,
    dims: usize,
) {
    let rec = record(source, &chunks, dims);
    store.replace_source(collection, rec, chunks).unwrap();
}

fn vector_request(vector: Vec<f32>, k: usize) -> SearchRequest {
    SearchRequest {
        mode: SearchMode::Vector,
        text: None,
        vector: Some(vector),
        k,
        rrf_k: 60.0,
        fusion: Default::default(),
    }
}

fn text_request(text: &str, k: usize) -> SearchRequest {
    SearchRequest {
        mode: SearchMode::Bm25,
        text: Some(text.into()),
        vector: None,
        k,
        rrf_k: 60.0,
        fusion: Default::default(),
    }
}

fn ids(results: &[ScoredChunk]) -> Vec<&str> {
    results.iter().map(|r| r.chunk.id.as_str()).collect()
}

const D: usize = 8;

fn garden_store(dir: &Path) -> EmbeddedStore {
    let store = EmbeddedStore::open(dir, StoreSettings::default()).unwrap();
    store.ensure_collection("docs", &profile(D)).unwrap();
    replace(
        &store,
        "docs",
        "garden.md",
        vec![
            chunk(
                "garden.md",
                "g0",
                0,
                "Tomatoes need full sun and regular watering",
                D,
            ),
            chunk("garden.md", "g1", 1, "Prune roses in early spring", D),
        ],
        D,
    );
    replace(
        &store,
        "docs",
        "kitchen.md",
        vec![chunk(
            "kitchen.md",
            "k0",
            0,
            "Roast tomatoes with garlic and olive oil",
            D,
        )],
        D,
    );
    store
}

#[test]
fn replace_manifest_and_all_three_search_modes_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());

    let infos = store.collections().unwrap();
    assert_eq!(infos.len(), 1);
    assert_eq!(
        (infos[0].name.as_str(), infos[0].sources, infos[0].chunks),
        ("docs", 2, 3)
    );
    assert_eq!(infos[0].profile, Some(profile(D)));

    let manifest = store.manifest("docs").unwrap();
    assert_eq!(manifest.profile, Some(profile(D)));
    assert!(manifest.corrupt_entries.is_empty());
    let sources: Vec<&str> = manifest
        .sources
        .iter()
        .map(|s| s.source_id.as_str())
        .collect();
    assert_eq!(sources, vec!["garden.md", "kitchen.md"]);
    assert_eq!(manifest.sources[0].chunk_ids, vec!["g0", "g1"]);

    let garden = store.chunks_of_source("docs", "garden.md").unwrap();
    let garden_ids: Vec<&str> = garden.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(garden_ids, vec!["g0", "g1"]);
    assert_eq!(
        store.get_chunk("docs", "g1").unwrap().unwrap().text,
        "Prune roses in early spring"
    );
    assert!(store.get_chunk("docs", "nope").unwrap().is_none());

    // Vector: the chunk's own vector finds it first, with cosine 1.
    let hits = store
        .search("docs", &vector_request(vector_for("g1", D), 2))
        .unwrap();
    assert_eq!(hits[0].chunk.id, "g1");
    assert!((hits[0].score - 1.0).abs() < 1e-5);
    assert!(hits.iter().all(|h| h.origin == ScoreOrigin::Vector));
    assert_eq!(hits.len(), 2);

    // BM25 with stemming: "tomato" matches "Tomatoes"/"tomatoes".
    let hits = store.search("docs", &text_request("tomato", 5)).unwrap();
    let found: BTreeSet<&str> = ids(&hits).into_iter().collect();
    assert_eq!(found, BTreeSet::from(["g0", "k0"]));
    assert!(
        hits.iter()
            .all(|h| h.origin == ScoreOrigin::Bm25 && h.score > 0.0)
    );

    // Hybrid: fused and labelled RRF; k0 ranks first on both sides with this query vector.
    let hybrid = SearchRequest {
        mode: SearchMode::Hybrid,
        text: Some("garlic".into()),
        vector: Some(vector_for("k0", D)),
        k: 3,
        rrf_k: 60.0,
        fusion: Default::default(),
    };
    let hits = store.search("docs", &hybrid).unwrap();
    assert_eq!(hits[0].chunk.id, "k0");
    assert!((hits[0].score - 2.0 / 61.0).abs() < 1e-6);
    assert!(hits.iter().all(|h| h.origin == ScoreOrigin::Rrf));
    assert_eq!(hits.len(), 3);

    // Hybrid whose lexical side finds nothing passes the vector results through.
    let passthrough = SearchRequest {
        text: Some("zzzunknownword".into()),
        ..hybrid.clone()
    };
    let hits = store.search("docs", &passthrough).unwrap();
    assert!(hits.iter().all(|h| h.origin == ScoreOrigin::Vector));
    assert_eq!(hits[0].chunk.id, "k0");
}

#[test]
fn replace_keeps_unchanged_chunk_ids_and_removes_stale_ones_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    let kept = store.get_chunk("docs", "g0").unwrap().unwrap();
    replace(
        &store,
        "docs",
        "garden.md",
        vec![
            kept.clone(),
            chunk("garden.md", "g2", 1, "Mulch keeps the soil moist", D),
        ],
        D,
    );
    assert_eq!(store.get_chunk("docs", "g0").unwrap().unwrap(), kept);
    assert!(store.get_chunk("docs", "g1").unwrap().is_none());
    assert!(
        store
            .search("docs", &text_request("roses prune", 5))
            .unwrap()
            .is_empty()
    );
    let hits = store
        .search("docs", &vector_request(vector_for("g1", D), 10))
        .unwrap();
    assert!(!ids(&hits).contains(&"g1"));
    assert_eq!(hits.len(), 3);
    assert_eq!(
        store.search("docs", &text_request("mulch", 5)).unwrap()[0]
            .chunk
            .id,
        "g2"
    );

    let state = store.index_state("docs");
    assert_eq!(state.bm25_stamp, Some(state.sled_stamp));
    assert_eq!(state.bm25_ids, vec!["g0", "g2", "k0"]);
    assert_eq!(state.vector_len, 3);

    assert_eq!(store.delete_source("docs", "garden.md").unwrap(), 2);
    assert_eq!(store.delete_source("docs", "garden.md").unwrap(), 0);
    let state = store.index_state("docs");
    assert_eq!(state.bm25_ids, vec!["k0"]);
    assert_eq!(state.vector_ids, vec!["k0"]);
    assert_eq!(state.bm25_stamp, Some(state.sled_stamp));
    assert!(
        store
            .chunks_of_source("docs", "garden.md")
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.manifest("docs").unwrap().sources.len(), 1);
}

#[test]
fn profile_mismatch_is_refused_for_the_collection_and_for_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    store.ensure_collection("docs", &profile(D)).unwrap();
    let other = EmbeddingProfile {
        model: "all-MiniLM-L6-v2".into(),
        ..profile(D)
    };
    let error = store.ensure_collection("docs", &other).unwrap_err();
    assert!(
        matches!(error, StoreError::ProfileMismatch { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("--reindex"), "{error}");

    let chunks = vec![chunk("new.md", "n0", 0, "text", D)];
    let mut rec = record("new.md", &chunks, D);
    rec.embedding_profile = other.to_string();
    let error = store.replace_source("docs", rec, chunks).unwrap_err();
    assert!(
        matches!(error, StoreError::ProfileMismatch { .. }),
        "{error}"
    );
}

#[test]
fn malformed_batches_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    let cases: Vec<(Vec<StoredChunk>, Vec<String>, &str)> = vec![
        (
            vec![chunk("other.md", "x0", 0, "t", D)],
            vec!["x0".into()],
            "belongs to source 'other.md'",
        ),
        (
            vec![chunk("new.md", "x0", 0, "t", D + 1)],
            vec!["x0".into()],
            "dimensions",
        ),
        (
            vec![
                chunk("new.md", "x0", 0, "t", D),
                chunk("new.md", "x0", 1, "u", D),
            ],
            vec!["x0".into(), "x0".into()],
            "appears twice",
        ),
        (
            vec![chunk("new.md", "x0", 0, "t", D)],
            vec!["x1".into()],
            "chunk_ids differ",
        ),
    ];
    for (chunks, chunk_ids, expected) in cases {
        let mut rec = record("new.md", &chunks, D);
        rec.chunk_ids = chunk_ids;
        let error = store.replace_source("docs", rec, chunks).unwrap_err();
        assert!(matches!(error, StoreError::InvalidBatch { .. }), "{error}");
        assert!(
            error.to_string().contains(expected),
            "{error} lacks {expected}"
        );
    }
    assert_eq!(store.manifest("docs").unwrap().sources.len(), 2);
}

#[test]
fn corrupt_manifest_entry_is_reported_not_fatal_and_replacing_it_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    let tree = store.sled_tree_of("docs");
    tree.insert(source_key("garden.md"), b"{\"source_id\": 42".as_slice())
        .unwrap();

    let manifest = store.manifest("docs").unwrap();
    assert_eq!(manifest.corrupt_entries, vec!["garden.md"]);
    assert_eq!(manifest.sources.len(), 1);
    assert_eq!(manifest.sources[0].source_id, "kitchen.md");
    // Its chunks are still found by a scan.
    assert_eq!(
        store.chunks_of_source("docs", "garden.md").unwrap().len(),
        2
    );

    replace(
        &store,
        "docs",
        "garden.md",
        vec![chunk("garden.md", "g9", 0, "Fresh basil", D)],
        D,
    );
    let manifest = store.manifest("docs").unwrap();
    assert!(manifest.corrupt_entries.is_empty());
    assert!(store.get_chunk("docs", "g0").unwrap().is_none());
    assert!(store.get_chunk("docs", "g1").unwrap().is_none());
    assert_eq!(store.index_state("docs").bm25_ids, vec!["g9", "k0"]);
}

#[test]
fn reopening_persists_everything_and_rebuilds_a_missing_index() {
    let dir = tempfile::tempdir().unwrap();
    let before_vector;
    let before_text;
    let index_dir;
    {
        let store = garden_store(dir.path());
        index_dir = store.index_dir_of("docs");
        before_vector = store
            .search("docs", &vector_request(vector_for("g0", D), 3))
            .unwrap();
        before_text = store.search("docs", &text_request("tomatoes", 3)).unwrap();
    }
    {
        let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
        assert_eq!(store.manifest("docs").unwrap().sources.len(), 2);
        assert_eq!(
            store
                .search("docs", &vector_request(vector_for("g0", D), 3))
                .unwrap(),
            before_vector
        );
        assert_eq!(
            store.search("docs", &text_request("tomatoes", 3)).unwrap(),
            before_text
        );
        let state = store.index_state("docs");
        assert_eq!(state.bm25_stamp, Some(state.sled_stamp));
    }
    std::fs::remove_dir_all(index_dir.join("bm25")).unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    let state = store.index_state("docs");
    assert_eq!(state.bm25_stamp, Some(state.sled_stamp));
    assert_eq!(state.bm25_ids, vec!["g0", "g1", "k0"]);
    assert_eq!(
        store.search("docs", &text_request("tomatoes", 3)).unwrap(),
        before_text
    );
}

#[test]
fn unknown_collections_and_bad_names_and_requests_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    let error = store.search("nowhere", &text_request("x", 3)).unwrap_err();
    assert!(
        matches!(error, StoreError::UnknownCollection(ref n) if n == "nowhere"),
        "{error}"
    );
    assert_eq!(store.manifest("nowhere").unwrap().sources.len(), 0);
    for bad in [
        "",
        "../escape",
        ".hidden",
        "a/b",
        "sp ace",
        &"x".repeat(129),
    ] {
        assert!(
            matches!(
                store.ensure_collection(bad, &profile(D)),
                Err(StoreError::InvalidName(_))
            ),
            "{bad}"
        );
    }
    let error = store
        .search("docs", &vector_request(vec![1.0; D + 2], 3))
        .unwrap_err();
    assert!(
        matches!(error, StoreError::InvalidRequest { .. })
            && error.to_string().contains("dimensions"),
        "{error}"
    );
    let no_vector = SearchRequest {
        vector: None,
        mode: SearchMode::Hybrid,
        ..text_request("x", 3)
    };
    assert!(matches!(
        store.search("docs", &no_vector),
        Err(StoreError::InvalidRequest { .. })
    ));
    let no_text = SearchRequest {
        text: None,
        ..text_request("x", 3)
    };
    assert!(matches!(
        store.search("docs", &no_text),
        Err(StoreError::InvalidRequest { .. })
    ));
    assert!(
        store
            .search("docs", &text_request("tomato", 0))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn dropping_a_collection_removes_it_and_a_new_one_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    let index_dir = store.index_dir_of("docs");
    assert!(index_dir.exists());
    store.drop_collection("docs").unwrap();
    assert!(matches!(
        store.search("docs", &text_request("tomato", 3)),
        Err(StoreError::UnknownCollection(_))
    ));
    assert!(store.collections().unwrap().is_empty());
    assert!(!index_dir.exists());
    assert!(matches!(
        store.drop_collection("docs"),
        Err(StoreError::UnknownCollection(_))
    ));

    store.ensure_collection("docs", &profile(4)).unwrap();
    assert!(
        store
            .search("docs", &text_request("tomato", 3))
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.collections().unwrap()[0].chunks, 0);
    drop(store);
    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    assert_eq!(store.collections().unwrap()[0].profile, Some(profile(4)));
}

#[test]
fn large_collections_search_an_hnsw_snapshot_that_persists_and_tracks_changes() {
    let dir = tempfile::tempdir().unwrap();
    let settings = StoreSettings {
        hnsw_threshold: 300,
        hnsw_rebuild_after: 1_000,
        hnsw_ef_construction: 40,
        hnsw_ef_search: 40,
        ..StoreSettings::default()
    };
    let dims = 16;
    {
        let store = EmbeddedStore::open(dir.path(), settings.clone()).unwrap();
        store.ensure_collection("big", &profile(dims)).unwrap();
        for s in 0..20 {
            let source = format!("s{s}");
            let chunks: Vec<StoredChunk> = (0..16)
                .map(|j| {
                    chunk(
                        &source,
                        &format!("s{s}-{j}"),
                        j,
                        &format!("chunk {j} of source {s}"),
                        dims,
                    )
                })
                .collect();
            replace(&store, "big", &source, chunks, dims);
        }
        store.wait_for_index_builds();
        let state = store.index_state("big");
        // The 19th source took the collection to 304 >= 300 chunks: the snapshot is of that
        // generation, and the 20th source's 16 chunks are scanned exactly next to it.
        let header = state.snapshot.expect("a snapshot above the threshold");
        assert_eq!(header.stamp.generation, 19);
        assert_eq!(state.sled_stamp.generation, 20);
        assert_eq!(state.pending, 16);
        assert!(store.index_dir_of("big").join("vectors.bin").exists());
    }
    let store = EmbeddedStore::open(dir.path(), settings).unwrap();
    let state = store.index_state("big");
    assert_eq!(
        state.snapshot.map(|h| h.stamp.generation),
        Some(19),
        "loaded from vectors.bin"
    );
    assert_eq!(state.pending, 16);
    let newest = vector_for("s19-4", dims);
    assert_eq!(
        store.search("big", &vector_request(newest, 1)).unwrap()[0]
            .chunk
            .id,
        "s19-4"
    );

    // Added after the snapshot: found by the exact scan next to the graph.
    let fresh: Vec<StoredChunk> = (0..5)
        .map(|j| chunk("late", &format!("late-{j}"), j, "late", dims))
        .collect();
    replace(&store, "big", "late", fresh.clone(), dims);
    assert_eq!(store.index_state("big").pending, 21);
    for c in &fresh {
        let hits = store
            .search("big", &vector_request(c.vector.clone(), 5))
            .unwrap();
        assert_eq!(hits[0].chunk.id, c.id);
    }
    // Deleted after the snapshot: never returned.
    for s in 0..10 {
        store.delete_source("big", &format!("s{s}")).unwrap();
    }
    for s in 0..10 {
        let hits = store
            .search(
                "big",
                &vector_request(vector_for(&format!("s{s}-3"), dims), 10),
            )
            .unwrap();
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| h.chunk.source_id != format!("s{s}")));
    }
    let survivor = vector_for("s15-7", dims);
    assert_eq!(
        store.search("big", &vector_request(survivor, 1)).unwrap()[0]
            .chunk
            .id,
        "s15-7"
    );
}

#[test]
fn the_embedded_store_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut opened = 0;
    crate::store::conformance::document_store_suite(&mut || {
        opened += 1;
        Arc::new(
            EmbeddedStore::open(
                &dir.path().join(opened.to_string()),
                StoreSettings::default(),
            )
            .unwrap(),
        )
    });
}

#[test]
fn the_embedded_quarantine_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = Vec::new();
    crate::store::conformance::quarantine_store_suite(&mut || {
        let store = EmbeddedStore::open(
            &dir.path().join(stores.len().to_string()),
            StoreSettings::default(),
        )
        .unwrap();
        let quarantine = store.quarantine().unwrap();
        stores.push(store);
        quarantine
    });
}

#[test]
fn quarantine_entries_persist_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let entry = QuarantineEntry::new("kb", "evil.md", "fake role marker", b"<|im_start|>system");
    {
        let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
        let quarantine = store.quarantine().unwrap();
        quarantine.put(&entry).unwrap();
        quarantine
            .put(&QuarantineEntry::new(
                "kb",
                "manual.pdf#page=2",
                "hidden text",
                b"two",
            ))
            .unwrap();
        quarantine.remove("kb", "manual.pdf").unwrap();
        store.flush().unwrap();
    }
    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    let quarantine = store.quarantine().unwrap();
    assert_eq!(quarantine.list(None).unwrap(), vec![entry.clone()]);
    assert_eq!(quarantine.get("kb", "evil.md").unwrap(), Some(entry));
    // The quarantine tree is not a collection.
    assert!(store.collections().unwrap().is_empty());
}

/// A data folder another open store holds is refused, after a bounded wait, with an error that
/// names the folder; once that store is closed, the folder opens again at once.
#[test]
fn a_data_folder_in_use_is_refused_and_reopens_once_released() {
    let dir = tempfile::tempdir().unwrap();
    let first = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    let started = std::time::Instant::now();
    let refused = EmbeddedStore::open(dir.path(), StoreSettings::default())
        .err()
        .expect("a second open of a held data folder must fail");
    let message = refused.to_string();
    assert!(message.contains("could not acquire lock"), "{message}");
    assert!(message.contains("another Orkeon process"), "{message}");
    assert!(
        started.elapsed() >= super::SLED_LOCK_WAIT,
        "gave up before the wait"
    );
    drop(first);
    for _ in 0..20 {
        let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
        store.flush().unwrap();
    }
}

fn tree_names(store: &EmbeddedStore) -> Vec<String> {
    let mut names: Vec<String> = store
        .db()
        .tree_names()
        .iter()
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .filter(|name| name.starts_with(layout::TREE_PREFIX))
        .collect();
    names.sort();
    names
}

fn index_folders(dir: &Path) -> Vec<String> {
    let mut folders: Vec<String> = std::fs::read_dir(dir.join("indexes"))
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    folders.sort();
    folders
}

/// A data folder written before rebuilds existed (the registry maps names to empty values,
/// each collection living in `col/<name>` and `indexes/<name>/`) opens unchanged, with the
/// half-states the old protocol could leave cleaned up; a rebuild then moves the collection
/// to a fresh storage and removes the old one.
#[test]
fn a_data_folder_from_before_rebuilds_opens_unchanged_and_moves_on_its_first_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let garden = vec![
        chunk("garden.md", "g0", 0, "Tomatoes need full sun", D),
        chunk("garden.md", "g1", 1, "Prune roses in early spring", D),
    ];
    let stray = "docs@00000000000000aa";
    {
        let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
        let db = store.db();
        let legacy = CollectionTree::new("docs", db.open_tree("col/docs").unwrap());
        legacy.initialise(&profile(D), 7).unwrap();
        let write = crate::store::SourceWrite {
            record: record("garden.md", &garden, D),
            chunks: garden.clone(),
        };
        legacy.commit(&[write], &[]).unwrap();
        let registry = db.open_tree(REGISTRY_TREE).unwrap();
        registry.insert("docs", b"".as_slice()).unwrap();
        // A drop cut short (registered, meta keys gone) and a creation cut short (initialised,
        // never registered), as the old protocol could leave them.
        let half_dropped = db.open_tree("col/halfdropped").unwrap();
        half_dropped.insert(b"c/x", b"junk".as_slice()).unwrap();
        registry.insert("halfdropped", b"".as_slice()).unwrap();
        CollectionTree::new("halfcreated", db.open_tree("col/halfcreated").unwrap())
            .initialise(&profile(D), 8)
            .unwrap();
        // And what an interrupted rebuild leaves: a storage nothing points at.
        CollectionTree::new("docs", db.open_tree(format!("col/{stray}")).unwrap())
            .initialise(&profile(D), 9)
            .unwrap();
        std::fs::create_dir_all(dir.path().join("indexes").join(stray).join("bm25")).unwrap();
        db.flush().unwrap();
        // The audit of the open store sees what the registry and the storages disagree on.
        let problems = store.check_consistency().unwrap().problems();
        let has = |needle: &str| problems.iter().any(|p| p.contains(needle));
        assert!(has("the registry names collection 'docs'"), "{problems:?}");
        assert!(has(&format!("sled tree 'col/{stray}'")), "{problems:?}");
        assert!(has("index folder"), "{problems:?}");
    }

    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    let names: Vec<String> = store
        .collections()
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["docs"]);
    assert_eq!(
        store.storage_of("docs"),
        "docs",
        "the legacy storage is kept"
    );
    assert_eq!(tree_names(&store), ["col/docs"], "half-states are gone");
    assert_eq!(index_folders(dir.path()), ["docs"]);
    let manifest = store.manifest("docs").unwrap();
    assert_eq!(manifest.sources, vec![record("garden.md", &garden, D)]);
    assert_eq!(
        ids(&store.search("docs", &text_request("tomatoes", 3)).unwrap()),
        ["g0"]
    );
    let report = store.check_consistency().unwrap();
    assert!(report.is_consistent(), "{:?}", report.problems());
    drop(store);

    // Reopened again: the same.
    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    assert_eq!(store.storage_of("docs"), "docs");
    assert_eq!(store.manifest("docs").unwrap(), manifest);

    // A rebuild moves it to a fresh storage and removes the legacy one.
    let rebuild = store.begin_rebuild("docs", &profile(D)).unwrap();
    let kitchen = vec![chunk("kitchen.md", "k0", 0, "Roast tomatoes", D)];
    store
        .commit_rebuild(
            &rebuild,
            SourceBatch {
                writes: vec![crate::store::SourceWrite {
                    record: record("kitchen.md", &kitchen, D),
                    chunks: kitchen,
                }],
                deletes: Vec::new(),
            },
        )
        .unwrap();
    assert!(store.check_consistency().unwrap().is_consistent());
    store.publish_rebuild(&rebuild).unwrap();
    let storage = store.storage_of("docs");
    assert_eq!(storage, rebuild.id());
    assert!(layout::is_storage_id(&storage) && storage.starts_with("docs@"));
    assert_eq!(tree_names(&store), [format!("col/{storage}")]);
    assert_eq!(index_folders(dir.path()), std::slice::from_ref(&storage));
    assert!(store.check_consistency().unwrap().is_consistent());
    drop(store);
    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    assert_eq!(store.storage_of("docs"), storage);
    assert_eq!(
        ids(&store.search("docs", &text_request("tomatoes", 3)).unwrap()),
        ["k0"]
    );
}

/// A rebuild in progress is no leftover; closing the store discards it, and an aborted or
/// published one leaves exactly one storage behind.
#[test]
fn rebuilds_leave_no_storage_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = garden_store(dir.path());
    let live = store.storage_of("docs");
    let aborted = store.begin_rebuild("docs", &profile(D)).unwrap();
    let unfinished = store.begin_rebuild("docs", &profile(D)).unwrap();
    assert_eq!(tree_names(&store).len(), 3);
    let report = store.check_consistency().unwrap();
    assert!(report.is_consistent(), "{:?}", report.problems());
    store.abort_rebuild(&aborted).unwrap();
    assert_eq!(tree_names(&store).len(), 2);
    drop(store);
    let store = EmbeddedStore::open(dir.path(), StoreSettings::default()).unwrap();
    assert_eq!(tree_names(&store), [format!("col/{live}")]);
    assert_eq!(index_folders(dir.path()), std::slice::from_ref(&live));
    assert!(matches!(
        store.publish_rebuild(&unfinished),
        Err(StoreError::InvalidRequest { .. })
    ));
    assert_eq!(store.manifest("docs").unwrap().sources.len(), 2);
}
