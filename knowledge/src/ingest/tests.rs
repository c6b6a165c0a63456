//! Ingestion pipeline tests: real files, the deterministic hash embedder (two of its profiles
//! stand for two models) and the real embedded store in temporary folders.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::embed::HashEmbedder;
use crate::settings::StoreSettings;
use crate::store::EmbeddedStore;

fn embedder(model: &str) -> Arc<dyn Embedder> {
    Arc::new(HashEmbedder::named(model, 128))
}

struct Fixture {
    _dir: tempfile::TempDir,
    corpus: PathBuf,
    store: Arc<EmbeddedStore>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).expect("mkdir");
    std::fs::write(
        corpus.join("refunds.md"),
        "# Refunds\n\nCustomers can request a refund within 30 days of delivery.\n\n# Exchanges\n\nExchanges are free within 60 days.\n",
    )
    .expect("write");
    std::fs::write(
        corpus.join("stores.csv"),
        "city,opening hours\nLyon,9-18\nNantes,10-19\n",
    )
    .expect("write");
    let store = Arc::new(
        EmbeddedStore::open(&dir.path().join("data"), StoreSettings::default()).expect("store"),
    );
    Fixture {
        _dir: dir,
        corpus,
        store,
    }
}

fn pipeline(f: &Fixture, embedder: Arc<dyn Embedder>) -> Arc<IngestionPipeline> {
    let quarantine = f.store.quarantine().expect("quarantine");
    Arc::new(IngestionPipeline::new(
        f.store.clone() as Arc<dyn DocumentStore>,
        embedder,
        quarantine,
        IngestionSettings::default(),
    ))
}

fn request(f: &Fixture, reindex: bool) -> IngestRequest {
    IngestRequest {
        collection: "kb".into(),
        base_dir: f.corpus.clone(),
        sources: vec!["*".into()],
        chunking: None,
        reindex,
    }
}

#[tokio::test]
async fn concurrent_requests_for_one_collection_ingest_it_once() {
    let f = fixture();
    let p = pipeline(&f, embedder("hash-a"));
    let r = request(&f, false);
    let (a, b) = tokio::join!(p.ingest(&r, None), p.ingest(&r, None));
    let (a, b) = (a.expect("first"), b.expect("second"));
    let embedded = [a.chunks_embedded, b.chunks_embedded];
    assert!(
        embedded.contains(&0),
        "one of the two must find a fresh manifest: {embedded:?}"
    );
    assert!(embedded.iter().any(|n| *n > 0));
    // CSV rows are parts of their file: one manifest entry per row.
    let manifest = f.store.manifest("kb").expect("manifest");
    let ids: Vec<&str> = manifest
        .sources
        .iter()
        .map(|s| s.source_id.as_str())
        .collect();
    assert_eq!(
        ids,
        vec!["refunds.md", "stores.csv#row=1", "stores.csv#row=2"]
    );
}

#[tokio::test]
async fn a_changed_source_reembeds_only_its_changed_chunks() {
    let f = fixture();
    let p = pipeline(&f, embedder("hash-a"));
    let first = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert_eq!(first.sources_ingested, 2);
    // Change one CSV row: only that row's chunk is new.
    std::fs::write(
        f.corpus.join("stores.csv"),
        "city,opening hours\nLyon,9-18\nNantes,11-20\n",
    )
    .expect("write");
    let second = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert_eq!(second.sources_ingested, 1);
    assert_eq!(second.sources_skipped, 1);
    assert_eq!(second.chunks_embedded, 1, "{second:?}");
    // Remove a row: its part is purged.
    std::fs::write(
        f.corpus.join("stores.csv"),
        "city,opening hours\nLyon,9-18\n",
    )
    .expect("write");
    let third = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert_eq!(third.chunks_embedded, 0, "{third:?}");
    assert_eq!(third.sources_removed, 1, "{third:?}");
}

#[tokio::test]
async fn another_embedding_profile_fails_loudly_unless_reindex() {
    let f = fixture();
    pipeline(&f, embedder("hash-a"))
        .ingest(&request(&f, false), None)
        .await
        .expect("ingest");
    let minilm = pipeline(&f, embedder("hash-b"));
    let error = minilm
        .ingest(&request(&f, false), None)
        .await
        .expect_err("profile drift is an error")
        .to_string();
    assert!(
        error.contains("--reindex") && error.contains("hash:hash-a (128 dims)"),
        "{error}"
    );
    let rebuilt = minilm
        .ingest(&request(&f, true), None)
        .await
        .expect("reindex");
    assert_eq!(rebuilt.sources_ingested, 2);
    let profile = f
        .store
        .manifest("kb")
        .expect("manifest")
        .profile
        .expect("profile");
    assert_eq!(profile.model, "hash-b");
}

#[tokio::test]
async fn a_corrupt_manifest_entry_degrades_to_full_ingestion_with_a_warning() {
    let f = fixture();
    let p = pipeline(&f, embedder("hash-a"));
    p.ingest(&request(&f, false), None).await.expect("ingest");
    f.store
        .damage_manifest_entry("kb", "refunds.md", b"{ not json");
    let report = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert!(
        report.warnings.iter().any(|w| w.contains("corrupt")),
        "{report:?}"
    );
    assert_eq!(report.sources_ingested, 1, "{report:?}");
    let manifest = f.store.manifest("kb").expect("manifest");
    assert!(manifest.corrupt_entries.is_empty(), "{manifest:?}");
    assert!(manifest.sources.iter().any(|s| s.source_id == "refunds.md"));
}
