//! Ingestion pipeline tests: real files, the deterministic hash embedder (two of its profiles
//! stand for two models) and the real embedded store in temporary folders.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::embed::HashEmbedder;
use crate::settings::StoreSettings;
use crate::store::EmbeddedStore;
use crate::types::{EmbeddingProfile, StoredChunk};

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
    pipeline_with(f, embedder, IngestionSettings::default())
}

fn pipeline_with(
    f: &Fixture,
    embedder: Arc<dyn Embedder>,
    settings: IngestionSettings,
) -> Arc<IngestionPipeline> {
    let quarantine = f.store.quarantine().expect("quarantine");
    Arc::new(IngestionPipeline::new(
        f.store.clone() as Arc<dyn DocumentStore>,
        embedder,
        quarantine,
        settings,
    ))
}

/// Settings embedding each source alone (a window of one chunk).
fn one_source_per_call() -> IngestionSettings {
    IngestionSettings {
        embed_window: 1,
        ..IngestionSettings::default()
    }
}

fn request(f: &Fixture, reindex: bool) -> IngestRequest {
    IngestRequest {
        collection: "kb".into(),
        base_dir: f.corpus.clone(),
        sources: vec!["*".into()],
        chunking: None,
        reindex,
        mode: IngestMode::Replace,
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

fn named(f: &Fixture, sources: &[&str], mode: IngestMode) -> IngestRequest {
    IngestRequest {
        collection: "kb".into(),
        base_dir: f.corpus.clone(),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        chunking: None,
        reindex: false,
        mode,
    }
}

fn source_ids(f: &Fixture) -> Vec<String> {
    f.store
        .manifest("kb")
        .expect("manifest")
        .sources
        .into_iter()
        .map(|s| s.source_id)
        .collect()
}

#[tokio::test]
async fn additive_requests_keep_other_sources_and_replace_purges_them() {
    let f = fixture();
    std::fs::write(
        f.corpus.join("warranty.md"),
        "The warranty lasts two years.\n",
    )
    .unwrap();
    let p = pipeline(&f, embedder("hash-a"));
    p.ingest(
        &named(&f, &["refunds.md", "stores.csv"], IngestMode::Replace),
        None,
    )
    .await
    .expect("ingest");

    // Additive: the named source is upserted, the others stay.
    let report = p
        .ingest(&named(&f, &["warranty.md"], IngestMode::Additive), None)
        .await
        .expect("additive");
    assert_eq!((report.sources_ingested, report.sources_removed), (1, 0));
    assert_eq!(
        source_ids(&f),
        [
            "refunds.md",
            "stores.csv#row=1",
            "stores.csv#row=2",
            "warranty.md"
        ]
    );
    // A missing file named additively removes nothing either.
    let report = p
        .ingest(&named(&f, &["gone.md"], IngestMode::Additive), None)
        .await
        .expect("additive");
    assert_eq!(report.sources_removed, 0);
    assert!(
        report.warnings.iter().any(|w| w.contains("are kept")),
        "{report:?}"
    );
    assert_eq!(source_ids(&f).len(), 4);

    // Replace: the named set becomes the whole collection, purged in one go.
    let report = p
        .ingest(&named(&f, &["warranty.md"], IngestMode::Replace), None)
        .await
        .expect("replace");
    assert_eq!(report.sources_removed, 3, "{report:?}");
    assert_eq!(report.sources_skipped, 1, "warranty.md is unchanged");
    assert_eq!(source_ids(&f), ["warranty.md"]);
}

#[tokio::test]
async fn an_additive_reindex_refuses_to_drop_sources_it_does_not_name() {
    let f = fixture();
    let p = pipeline(&f, embedder("hash-a"));
    p.ingest(&request(&f, false), None).await.expect("ingest");
    let mut reindex = named(&f, &["refunds.md"], IngestMode::Additive);
    reindex.reindex = true;
    let error = p
        .ingest(&reindex, None)
        .await
        .expect_err("would purge stores.csv")
        .to_string();
    assert!(
        error.contains("'kb'") && error.contains("stores.csv") && error.contains("--replace"),
        "{error}"
    );
    assert_eq!(source_ids(&f).len(), 3, "nothing was dropped");
    // Naming every source, an additive reindex is allowed.
    let mut all = named(&f, &["refunds.md", "stores.csv"], IngestMode::Additive);
    all.reindex = true;
    let report = p.ingest(&all, None).await.expect("reindex");
    assert_eq!(report.sources_ingested, 2);
}

/// The pipeline's view of a PDF of the example corpus (two pages).
fn example_pdf() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/rag/eval/corpus/reports/aquaprobe-s2-datasheet.pdf");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn a_source_that_fails_to_load_keeps_its_last_good_content_marked_stale() {
    let f = fixture();
    let pdf = f.corpus.join("datasheet.pdf");
    std::fs::write(&pdf, example_pdf()).unwrap();
    let p = pipeline(&f, embedder("hash-a"));
    p.ingest(&request(&f, false), None).await.expect("ingest");
    let pages: Vec<String> = source_ids(&f)
        .into_iter()
        .filter(|id| id.starts_with("datasheet.pdf#page="))
        .collect();
    assert!(!pages.is_empty());
    let chunks_before: Vec<StoredChunk> = pages
        .iter()
        .flat_map(|id| f.store.chunks_of_source("kb", id).unwrap())
        .collect();

    // The file is overwritten by something that starts like a PDF but cannot be parsed.
    std::fs::write(&pdf, b"%PDF-1.7\ncut short by a crashed writer").unwrap();
    let report = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert_eq!(report.stale.len(), 1, "{report:?}");
    assert_eq!(report.stale[0].source, "datasheet.pdf");
    assert!(report.stale[0].error.contains("could not be parsed"));
    assert!(report.quarantined.is_empty(), "{report:?}");
    assert_eq!(report.sources_removed, 0);
    let manifest = f.store.manifest("kb").expect("manifest");
    for page in &pages {
        let record = manifest
            .sources
            .iter()
            .find(|r| &r.source_id == page)
            .expect("the page is still in the manifest");
        assert!(
            record
                .stale
                .as_deref()
                .is_some_and(|e| e.contains("could not be parsed")),
            "{record:?}"
        );
    }
    let chunks_after: Vec<StoredChunk> = pages
        .iter()
        .flat_map(|id| f.store.chunks_of_source("kb", id).unwrap())
        .collect();
    assert_eq!(chunks_after, chunks_before, "the last good chunks are kept");
    let hits = f
        .store
        .search(
            "kb",
            &crate::store::SearchRequest {
                mode: crate::store::SearchMode::Bm25,
                text: Some(chunks_before[0].text.clone()),
                vector: None,
                k: 50,
                rrf_k: 60.0,
                fusion: Default::default(),
            },
        )
        .expect("search");
    assert!(
        hits.iter()
            .any(|h| h.chunk.source_id.starts_with("datasheet.pdf")),
        "the stale pages stay searchable"
    );

    // The same failure again: still reported, still kept.
    let again = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert_eq!(again.stale.len(), 1);
    assert_eq!(
        source_ids(&f),
        manifest
            .sources
            .iter()
            .map(|r| r.source_id.clone())
            .collect::<Vec<_>>()
    );

    // The file is repaired: the mark goes, and no chunk is embedded again.
    std::fs::write(&pdf, example_pdf()).unwrap();
    let repaired = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert!(repaired.stale.is_empty(), "{repaired:?}");
    assert_eq!(repaired.sources_ingested, 1);
    assert_eq!(repaired.chunks_embedded, 0, "vectors are reused");
    let manifest = f.store.manifest("kb").expect("manifest");
    assert!(manifest.sources.iter().all(|r| r.stale.is_none()));
}

#[tokio::test]
async fn a_source_never_ingested_that_fails_to_load_is_quarantined() {
    let f = fixture();
    std::fs::write(f.corpus.join("broken.pdf"), b"%PDF-1.7\nnot really").unwrap();
    let p = pipeline(&f, embedder("hash-a"));
    let report = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert!(report.stale.is_empty());
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].source, "broken.pdf");
}

/// A store that counts the batches committed through it (and their writes).
struct CountingStore {
    inner: Arc<dyn DocumentStore>,
    batches: std::sync::Mutex<Vec<usize>>,
}

impl DocumentStore for CountingStore {
    fn collections(&self) -> Result<Vec<crate::store::CollectionInfo>, StoreError> {
        self.inner.collections()
    }
    fn ensure_collection(&self, c: &str, p: &EmbeddingProfile) -> Result<(), StoreError> {
        self.inner.ensure_collection(c, p)
    }
    fn manifest(&self, c: &str) -> Result<crate::store::Manifest, StoreError> {
        self.inner.manifest(c)
    }
    fn commit_sources(
        &self,
        c: &str,
        batch: SourceBatch,
    ) -> Result<crate::store::BatchOutcome, StoreError> {
        self.batches.lock().unwrap().push(batch.writes.len());
        self.inner.commit_sources(c, batch)
    }
    fn drop_collection(&self, c: &str) -> Result<(), StoreError> {
        self.inner.drop_collection(c)
    }
    fn begin_rebuild(&self, c: &str, p: &EmbeddingProfile) -> Result<Rebuild, StoreError> {
        self.inner.begin_rebuild(c, p)
    }
    fn commit_rebuild(
        &self,
        r: &Rebuild,
        batch: SourceBatch,
    ) -> Result<crate::store::BatchOutcome, StoreError> {
        self.batches.lock().unwrap().push(batch.writes.len());
        self.inner.commit_rebuild(r, batch)
    }
    fn publish_rebuild(&self, r: &Rebuild) -> Result<(), StoreError> {
        self.inner.publish_rebuild(r)
    }
    fn abort_rebuild(&self, r: &Rebuild) -> Result<(), StoreError> {
        self.inner.abort_rebuild(r)
    }
    fn chunks_of_source(&self, c: &str, s: &str) -> Result<Vec<StoredChunk>, StoreError> {
        self.inner.chunks_of_source(c, s)
    }
    fn get_chunk(&self, c: &str, id: &str) -> Result<Option<StoredChunk>, StoreError> {
        self.inner.get_chunk(c, id)
    }
    fn search(
        &self,
        c: &str,
        r: &crate::store::SearchRequest,
    ) -> Result<Vec<crate::types::ScoredChunk>, StoreError> {
        self.inner.search(c, r)
    }
}

#[tokio::test]
async fn every_row_of_a_csv_lands_in_one_batch() {
    let f = fixture();
    let rows: String = (0..500)
        .map(|i| format!("Town{i},{}-{}\n", 8 + i % 3, 17 + i % 4))
        .collect();
    std::fs::write(
        f.corpus.join("stores.csv"),
        format!("city,opening hours\n{rows}"),
    )
    .unwrap();
    let counting = Arc::new(CountingStore {
        inner: f.store.clone(),
        batches: Default::default(),
    });
    let p = IngestionPipeline::new(
        counting.clone(),
        embedder("hash-a"),
        Arc::new(crate::store::InMemoryQuarantineStore::new()),
        IngestionSettings::default(),
    );
    let report = p
        .ingest(&named(&f, &["stores.csv"], IngestMode::Additive), None)
        .await
        .expect("ingest");
    assert_eq!(report.sources_ingested, 1);
    assert_eq!(
        *counting.batches.lock().unwrap(),
        [500],
        "one batch, 500 rows"
    );

    // Changing two rows and dropping the last 100 is again one batch.
    let rows: String = (0..400)
        .map(|i| {
            let hours = if i < 2 {
                "0-24".to_string()
            } else {
                format!("{}-{}", 8 + i % 3, 17 + i % 4)
            };
            format!("Town{i},{hours}\n")
        })
        .collect();
    std::fs::write(
        f.corpus.join("stores.csv"),
        format!("city,opening hours\n{rows}"),
    )
    .unwrap();
    counting.batches.lock().unwrap().clear();
    let report = p
        .ingest(&named(&f, &["stores.csv"], IngestMode::Additive), None)
        .await
        .expect("ingest");
    assert_eq!(*counting.batches.lock().unwrap(), [400]);
    assert_eq!(report.sources_removed, 100, "{report:?}");
    assert_eq!(report.chunks_embedded, 2, "{report:?}");
}

/// A hash embedder that records how many texts each `embed_documents` call carried, and
/// fails from its `fail_from`-th call on (counting from 0): e.g. an embedding endpoint going
/// down half-way through a reindex.
struct WatchedEmbedder {
    inner: HashEmbedder,
    calls: std::sync::Mutex<Vec<usize>>,
    fail_from: usize,
}

impl WatchedEmbedder {
    fn new(model: &str, fail_from: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: HashEmbedder::named(model, 128),
            calls: Default::default(),
            fail_from,
        })
    }

    /// Texts per call so far.
    fn calls(&self) -> Vec<usize> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Embedder for WatchedEmbedder {
    fn profile(&self) -> EmbeddingProfile {
        self.inner.profile()
    }
    fn token_counter(&self) -> Arc<dyn crate::embed::TokenCounter> {
        self.inner.token_counter()
    }
    async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(texts.len());
            calls.len() - 1
        };
        if call >= self.fail_from {
            return Err(EmbedError::Remote("connection refused".into()));
        }
        self.inner.embed_documents(texts).await
    }
    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.inner.embed_query(text).await
    }
}

/// What readers of `kb` see: its listing entry, its manifest and a BM25 search.
fn view(
    store: &EmbeddedStore,
) -> (
    Vec<(String, usize, usize)>,
    crate::store::Manifest,
    Vec<String>,
) {
    let listed = store
        .collections()
        .expect("collections")
        .into_iter()
        .map(|c| (c.name, c.sources, c.chunks))
        .collect();
    let found = store
        .search(
            "kb",
            &crate::store::SearchRequest {
                mode: crate::store::SearchMode::Bm25,
                text: Some("refund exchanges Lyon Nantes".into()),
                vector: None,
                k: 50,
                rrf_k: 60.0,
                fusion: Default::default(),
            },
        )
        .expect("search")
        .into_iter()
        .map(|hit| hit.chunk.id)
        .collect();
    (listed, store.manifest("kb").expect("manifest"), found)
}

#[tokio::test]
async fn a_reindex_builds_beside_the_live_collection_and_a_failed_one_changes_nothing() {
    let f = fixture();
    std::fs::write(
        f.corpus.join("warranty.md"),
        "The warranty lasts two years.\n",
    )
    .unwrap();
    pipeline(&f, embedder("hash-a"))
        .ingest(&request(&f, false), None)
        .await
        .expect("ingest");
    let before = view(&f.store);
    assert_eq!(before.1.sources.len(), 4, "{:?}", before.1);

    // The embedder of the new profile fails on the third file: the reindex fails, saying the
    // collection is unchanged — and it is, for every reader, during and after the attempt.
    let during = Arc::new(std::sync::Mutex::new(Vec::new()));
    let progress = {
        let (store, during) = (f.store.clone(), during.clone());
        move |_: IngestProgress| during.lock().unwrap().push(view(&store))
    };
    let failing = pipeline_with(&f, WatchedEmbedder::new("hash-b", 2), one_source_per_call());
    let error = failing
        .ingest(&request(&f, true), Some(&progress))
        .await
        .expect_err("the embedder fails half-way");
    assert!(
        matches!(&error, IngestError::ReindexAborted { source, .. } if matches!(**source, IngestError::Embed(_))),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("'kb'")
            && message.contains("unchanged")
            && message.contains("connection refused"),
        "{message}"
    );
    let during = std::mem::take(&mut *during.lock().unwrap());
    assert_eq!(during.len(), 2, "two files were written into the rebuild");
    for seen in during.iter() {
        assert_eq!(
            seen, &before,
            "readers see the live collection during a reindex"
        );
    }
    assert_eq!(view(&f.store), before, "a failed reindex changes nothing");
    let report = f.store.check_consistency().expect("audit");
    assert!(report.is_consistent(), "{:?}", report.problems());

    // A reindex that goes through swaps the whole collection to the new profile.
    let rebuilt = pipeline(&f, embedder("hash-b"))
        .ingest(&request(&f, true), None)
        .await
        .expect("reindex");
    assert_eq!(rebuilt.sources_ingested, 3);
    let after = view(&f.store);
    assert_eq!(
        after.1.profile.as_ref().map(|p| p.model.as_str()),
        Some("hash-b")
    );
    assert_eq!(after.0, before.0, "the same sources and chunks");
    assert!(
        after
            .1
            .sources
            .iter()
            .all(|s| s.embedding_profile.contains("hash-b"))
    );
    let report = f.store.check_consistency().expect("audit");
    assert!(report.is_consistent(), "{:?}", report.problems());
}

#[tokio::test]
async fn a_reindex_fails_rather_than_drop_a_source_that_cannot_be_loaded() {
    let f = fixture();
    let pdf = f.corpus.join("datasheet.pdf");
    std::fs::write(&pdf, example_pdf()).unwrap();
    let p = pipeline(&f, embedder("hash-a"));
    p.ingest(&request(&f, false), None).await.expect("ingest");
    let before = view(&f.store);
    assert!(
        before
            .1
            .sources
            .iter()
            .any(|s| s.source_id.starts_with("datasheet.pdf#page="))
    );

    std::fs::write(&pdf, b"%PDF-1.7\ncut short by a crashed writer").unwrap();
    let error = p
        .ingest(&request(&f, true), None)
        .await
        .expect_err("its pages would be lost");
    let message = error.to_string();
    assert!(
        matches!(&error, IngestError::ReindexAborted { .. })
            && message.contains("datasheet.pdf")
            && message.contains("unchanged"),
        "{message}"
    );
    assert_eq!(view(&f.store), before);
    assert!(
        p.quarantine().list(Some("kb")).unwrap().is_empty(),
        "an aborted reindex records no quarantine entry"
    );
    let report = f.store.check_consistency().expect("audit");
    assert!(report.is_consistent(), "{:?}", report.problems());

    // A plain (incremental) ingestion keeps the pages, marked stale, as before.
    let report = p.ingest(&request(&f, false), None).await.expect("ingest");
    assert_eq!(report.stale.len(), 1);
}

#[tokio::test]
async fn every_chunk_records_its_token_count_for_assembly() {
    let f = fixture();
    let embedder = embedder("hash-a");
    let p = pipeline(&f, embedder.clone());
    p.ingest(&request(&f, false), None).await.expect("ingest");
    // A changed source: its unchanged chunks reuse their vectors and still carry the count.
    std::fs::write(
        f.corpus.join("stores.csv"),
        "city,opening hours\nLyon,9-18\nNantes,11-20\n",
    )
    .expect("write");
    p.ingest(&request(&f, false), None).await.expect("ingest");
    let counter = embedder.token_counter();
    let mut seen = 0;
    for record in f.store.manifest("kb").expect("manifest").sources {
        for chunk in f
            .store
            .chunks_of_source("kb", &record.source_id)
            .expect("chunks")
        {
            let recorded = chunk
                .metadata
                .get(crate::embed::CHUNK_TOKENS_KEY)
                .unwrap_or_else(|| panic!("no token count on {}", chunk.id));
            assert_eq!(*recorded, counter.count_tokens(&chunk.text).to_string());
            assert_ne!(recorded, "0", "{}", chunk.id);
            seen += 1;
        }
    }
    assert_eq!(seen, 3, "refunds.md and two CSV rows");
}

/// Twelve one-chunk Markdown files beside the fixture's two.
fn many_small_sources(f: &Fixture) {
    for i in 0..12 {
        std::fs::write(
            f.corpus.join(format!("note-{i:02}.md")),
            format!(
                "Note {i}: the depot in town {i} opens at {} o'clock.\n",
                7 + i % 3
            ),
        )
        .unwrap();
    }
}

#[tokio::test]
async fn new_chunks_of_many_sources_are_embedded_together_within_the_window() {
    let f = fixture();
    many_small_sources(&f);
    let recording = WatchedEmbedder::new("hash-a", usize::MAX);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let progress = {
        let seen = seen.clone();
        move |p: IngestProgress| seen.lock().unwrap().push((p.done, p.total, p.source))
    };
    let report = pipeline(&f, recording.clone())
        .ingest(&request(&f, false), Some(&progress))
        .await
        .expect("ingest");
    assert_eq!(report.sources_total, 14, "{report:?}");
    assert_eq!(report.sources_ingested, 14, "{report:?}");
    let calls = recording.calls();
    assert_eq!(
        calls,
        [report.chunks_embedded],
        "one call for all: {calls:?}"
    );
    assert_eq!(report.chunks_upserted, report.chunks_embedded);
    // Progress: every source once, in request order, although they were embedded together.
    let seen = seen.lock().unwrap().clone();
    let done: Vec<usize> = seen.iter().map(|(done, _, _)| *done).collect();
    assert_eq!(done, (1..=14).collect::<Vec<_>>(), "{seen:?}");
    assert!(seen.iter().all(|(_, total, _)| *total == 14));

    // Searchable like sources embedded one by one: same chunks, same vectors (the hash
    // embedder's vectors do not depend on their batch-mates).
    let g = fixture();
    many_small_sources(&g);
    let alone = WatchedEmbedder::new("hash-a", usize::MAX);
    let report_alone = pipeline_with(&g, alone.clone(), one_source_per_call())
        .ingest(&request(&g, false), None)
        .await
        .expect("ingest");
    assert_eq!(alone.calls().len(), 14, "one call per source");
    assert_eq!(report_alone.chunks_embedded, report.chunks_embedded);
    for id in source_ids(&f) {
        let together = f.store.chunks_of_source("kb", &id).unwrap();
        let one_by_one = g.store.chunks_of_source("kb", &id).unwrap();
        assert_eq!(together, one_by_one, "{id}");
    }

    // Unchanged, nothing is embedded; one edited source is embedded alone.
    recording.calls.lock().unwrap().clear();
    std::fs::write(
        f.corpus.join("note-03.md"),
        "Note 3 moved to the harbour.\n",
    )
    .unwrap();
    let again = pipeline(&f, recording.clone())
        .ingest(&request(&f, false), None)
        .await
        .expect("re-ingest");
    assert_eq!(again.sources_skipped, 13, "{again:?}");
    assert_eq!(again.sources_ingested, 1, "{again:?}");
    assert_eq!(recording.calls(), [1]);
}

#[tokio::test]
async fn a_small_window_splits_the_embedding_calls_and_commits_every_source() {
    let f = fixture();
    many_small_sources(&f);
    let recording = WatchedEmbedder::new("hash-a", usize::MAX);
    let settings = IngestionSettings {
        embed_window: 5,
        ..IngestionSettings::default()
    };
    let report = pipeline_with(&f, recording.clone(), settings)
        .ingest(&request(&f, false), None)
        .await
        .expect("ingest");
    let calls = recording.calls();
    assert!(calls.len() >= 3, "a window of 5 chunks: {calls:?}");
    assert_eq!(calls.iter().sum::<usize>(), report.chunks_embedded);
    assert_eq!(report.sources_ingested, 14, "{report:?}");
    assert_eq!(
        source_ids(&f).len(),
        15,
        "every part committed: {:?}",
        source_ids(&f)
    );
}

#[tokio::test]
async fn a_window_is_committed_whole_or_not_at_all_and_earlier_windows_stay() {
    let f = fixture();
    many_small_sources(&f);
    // Windows of 5 one-chunk notes: note-00..04, note-05..09, then the rest. The third
    // embedding call fails: the first two windows are committed, nothing of the third.
    let failing = WatchedEmbedder::new("hash-a", 2);
    let settings = IngestionSettings {
        embed_window: 5,
        ..IngestionSettings::default()
    };
    let error = pipeline_with(&f, failing.clone(), settings.clone())
        .ingest(&request(&f, false), None)
        .await
        .expect_err("the third window cannot be embedded");
    assert!(error.to_string().contains("connection refused"), "{error}");
    let committed = source_ids(&f);
    let expected: Vec<String> = (0..10).map(|i| format!("note-{i:02}.md")).collect();
    assert_eq!(committed, expected, "the first two windows, whole");

    // The next ingestion finds those ten unchanged and embeds only the rest.
    let working = WatchedEmbedder::new("hash-a", usize::MAX);
    let report = pipeline_with(&f, working.clone(), settings)
        .ingest(&request(&f, false), None)
        .await
        .expect("ingest");
    assert_eq!(report.sources_skipped, 10, "{report:?}");
    assert_eq!(report.sources_ingested, 4, "{report:?}");
    assert_eq!(source_ids(&f).len(), 15, "{:?}", source_ids(&f));
}

/// A hash embedder whose first call returns only once a second call has started: the
/// ingestion must prepare and submit the next window while the previous one is embedding.
struct OverlapEmbedder {
    inner: HashEmbedder,
    calls: std::sync::atomic::AtomicUsize,
    second_started: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Embedder for OverlapEmbedder {
    fn profile(&self) -> EmbeddingProfile {
        self.inner.profile()
    }
    fn token_counter(&self) -> Arc<dyn crate::embed::TokenCounter> {
        self.inner.token_counter()
    }
    async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => tokio::time::timeout(
                std::time::Duration::from_secs(20),
                self.second_started.notified(),
            )
            .await
            .map_err(|_| {
                EmbedError::Inference(
                    "the second window was not submitted while the first was embedding".into(),
                )
            })?,
            1 => self.second_started.notify_one(),
            _ => {}
        }
        self.inner.embed_documents(texts).await
    }
    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.inner.embed_query(text).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_window_is_prepared_and_submitted_while_the_previous_one_embeds() {
    let f = fixture();
    many_small_sources(&f);
    let embedder = Arc::new(OverlapEmbedder {
        inner: HashEmbedder::named("hash-a", 128),
        calls: Default::default(),
        second_started: tokio::sync::Notify::new(),
    });
    let settings = IngestionSettings {
        embed_window: 5,
        ..IngestionSettings::default()
    };
    let report = pipeline_with(&f, embedder.clone(), settings)
        .ingest(&request(&f, false), None)
        .await
        .expect("the windows overlap");
    assert_eq!(report.sources_ingested, 14, "{report:?}");
    assert!(embedder.calls.load(std::sync::atomic::Ordering::SeqCst) >= 3);
    assert_eq!(source_ids(&f).len(), 15);
}
