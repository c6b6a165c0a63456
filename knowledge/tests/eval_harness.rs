//! The evaluation harness end to end on real components: the embedded store (sled + tantivy +
//! vector index in a temp folder), the bge-small ONNX embedder, the incremental ingestion
//! pipeline and the `fast` profile's staged pipeline. A golden dataset written to a temp folder
//! and the shipped BEIR fixture (`examples/rag/eval/beir-mini`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use orkeon_knowledge::embed::build_embedder;
use orkeon_knowledge::eval::{
    EvalError, EvalHarness, EvalOptions, EvalProgress, Floors, Metric, RetrievalPath, check_gate,
    load_dataset, metrics, render_markdown,
};
use orkeon_knowledge::ingest::IngestionPipeline;
use orkeon_knowledge::query::{PipelineDeps, ProfileResolver, RerankerFactory, TransformerFactory};
use orkeon_knowledge::settings::{
    EmbeddingSettings, IngestionSettings, RagSettings, StoreSettings,
};
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore};

mod common;

use common::models_dir;

struct Rig {
    store: Arc<EmbeddedStore>,
    harness: EvalHarness,
}

fn rig(data_dir: &Path) -> Rig {
    let store =
        Arc::new(EmbeddedStore::open(&data_dir.join("store"), StoreSettings::default()).unwrap());
    let embedding = EmbeddingSettings {
        models_dir: Some(models_dir()),
        ..EmbeddingSettings::default()
    };
    let embedder = build_embedder(&embedding).unwrap();
    let quarantine = store.quarantine().unwrap();
    let ingestion = Arc::new(IngestionPipeline::new(
        store.clone(),
        embedder.clone(),
        quarantine,
        IngestionSettings::default(),
    ));
    let deps = PipelineDeps {
        store: store.clone(),
        embedder,
        chat: None,
        rerankers: Arc::new(RerankerFactory::without_models()),
        transformers: Arc::new(TransformerFactory::builtin()),
        groundedness: None,
    };
    let mut settings = RagSettings::default();
    // Room for every retrieved passage: the rankings are not cut by the context budget.
    settings.context.max_tokens = Some(50_000);
    let resolver = Arc::new(ProfileResolver::new(settings, deps, None));
    Rig {
        store,
        harness: EvalHarness::new(ingestion, resolver, None),
    }
}

/// A small golden dataset: five documents on distinct topics (one CSV) and four cases.
fn golden_fixture(dir: &Path) -> PathBuf {
    let corpus = dir.join("eval/corpus");
    fs::create_dir_all(corpus.join("policies")).unwrap();
    fs::create_dir_all(corpus.join("ops")).unwrap();
    fs::create_dir_all(corpus.join("data")).unwrap();
    fs::write(
        corpus.join("policies/refunds.md"),
        "# Refund policy\n\nCustomers may request a refund within 30 days of delivery. Probes returned with a broken calibration seal are refunded minus a 15% restocking fee.\n",
    )
    .unwrap();
    fs::write(
        corpus.join("policies/travel.md"),
        "# Travel policy\n\nEmployees book trains for trips under four hours. Hotel nights are reimbursed up to 140 euros in large cities.\n",
    )
    .unwrap();
    fs::write(
        corpus.join("ops/backups.md"),
        "# Database backups\n\nThe production database is snapshotted every six hours and snapshots are kept for 35 days in a second region.\n",
    )
    .unwrap();
    fs::write(
        corpus.join("ops/oncall.md"),
        "# On-call rota\n\nThe on-call engineer acknowledges a page within 15 minutes. Rotations last one week and hand over on Mondays at 10:00.\n",
    )
    .unwrap();
    fs::write(
        corpus.join("data/offices.csv"),
        "city,opened,staff\nLisbon,2019,42\nOslo,2021,17\nMontreal,2023,9\n",
    )
    .unwrap();
    let path = dir.join("eval/golden.yaml");
    fs::write(
        &path,
        r#"name: harness-test
corpus: corpus
collection: harness-test
chunking: { strategy: recursive, max_tokens: 128, overlap: 16 }
cases:
  - id: refund-window
    question: "How many days after delivery can customers request a refund?"
    relevant: [policies/refunds.md]
    expected_substrings: ["30 days"]
    tags: [lexical]
  - id: backup-retention
    question: "How long are production database snapshots kept?"
    relevant: [ops/backups.md]
    tags: [lexical]
  - id: oslo-staff
    question: "How many staff work at the Oslo office?"
    relevant: [data/offices.csv#row=2]
    tags: [csv]
  - id: seeded-gap
    question: "What does the page-acknowledgement SLO say?"
    relevant: [ops/oncall.md, policies/travel.md]
    tags: [correctif, multi-doc]
"#,
    )
    .unwrap();
    path
}

fn options(profiles: &[&str]) -> EvalOptions {
    EvalOptions {
        profiles: profiles.iter().map(|p| p.to_string()).collect(),
        retrieve_k: 10,
        concurrency: 2,
        ..EvalOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_dataset_on_the_fast_profile_with_real_components() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = load_dataset(&golden_fixture(dir.path()), "test").unwrap();
    let rig = rig(dir.path());

    let events = Mutex::new(Vec::new());
    let record = |event: EvalProgress| events.lock().unwrap().push(event);
    let report = rig
        .harness
        .run(&dataset, &options(&["fast"]), Some(&record))
        .await
        .unwrap();

    // One ingestion of the five files (the CSV yields one source per row).
    assert_eq!(report.ingestion.collection, "harness-test");
    assert_eq!(report.ingestion.sources_total, 5);
    assert!(
        report.ingestion.chunks_embedded >= 7,
        "{:?}",
        report.ingestion
    );
    assert!(report.ingestion.quarantined.is_empty());

    assert_eq!(report.queries, 4);
    let fast = &report.profiles[0];
    assert_eq!(fast.profile, "fast");
    assert_eq!(fast.retrieval_path, RetrievalPath::RetrieveOnly);
    assert_eq!((fast.gated_cases, fast.excluded_cases), (3, 1));
    assert_eq!(fast.judge, "none: generation not run");
    let ks: Vec<&str> = fast.recall_at.keys().map(String::as_str).collect();
    assert_eq!(
        ks,
        vec!["1", "10", "3", "5"],
        "recall@100 needs retrieve_k ≥ 100"
    );

    // The lexical cases find their document first; the CSV row is ranked as its own document.
    let case = |id: &str| fast.per_case.iter().find(|c| c.id == id).unwrap();
    assert_eq!(
        case("refund-window").first_relevant_rank,
        Some(1),
        "{:?}",
        case("refund-window")
    );
    assert_eq!(case("refund-window").ranked[0], "policies/refunds.md");
    assert_eq!(case("backup-retention").first_relevant_rank, Some(1));
    let oslo = case("oslo-staff");
    assert!(
        oslo.ranked.iter().any(|k| k == "data/offices.csv#row=2"),
        "{oslo:?}"
    );
    assert!(
        oslo.ranked.iter().any(|k| k == "data/offices.csv#row=1"),
        "rows are separate documents: {oslo:?}"
    );
    // Every document of the tiny corpus is ranked (7 sources: 4 Markdown files, 3 CSV rows).
    assert_eq!(case("seeded-gap").depth, 7);
    assert_eq!(case("seeded-gap").recall_at["10"], 1.0);
    assert!(!case("seeded-gap").gated);

    // Per-case metrics agree with the ranking they were computed from, and the flat
    // aggregate is the mean over gated cases only.
    for c in &fast.per_case {
        let relevant = dataset
            .cases
            .iter()
            .find(|d| d.id == c.id)
            .unwrap()
            .relevant
            .clone();
        let keys: std::collections::BTreeSet<String> = relevant.keys().cloned().collect();
        assert_eq!(c.mrr_at_10, metrics::mrr_at_k(&c.ranked, &keys, 10));
        assert_eq!(c.ndcg_at_10, metrics::ndcg_at_k(&c.ranked, &relevant, 10));
    }
    let gated_mrr: f64 = fast
        .per_case
        .iter()
        .filter(|c| c.gated)
        .map(|c| c.mrr_at_10)
        .sum::<f64>()
        / 3.0;
    assert!((fast.mrr_at_10 - gated_mrr).abs() < 1e-12);
    assert_eq!(fast.all_cases.cases, 4);

    // Where the time went: the retrieve stage split into query embedding and search.
    for stage in [
        "transform",
        "retrieve",
        "retrieve.embed",
        "retrieve.search",
        "fuse",
        "rerank",
        "assemble",
    ] {
        assert!(
            fast.stage_ms.contains_key(stage),
            "missing {stage}: {:?}",
            fast.stage_ms
        );
    }
    assert!(fast.per_query_ms_p50 > 0.0);
    assert!(
        !fast
            .stage_ms
            .keys()
            .any(|k| k.starts_with("deep_retrieval.")),
        "retrieve_k 10: no deep retrieval"
    );

    // A deeper retrieve_k adds a separate deep retrieval for recall above 10; the metrics at
    // 10 and below still come from the profile asked for 10 passages, so they do not move.
    let deeper = rig
        .harness
        .run(
            &dataset,
            &EvalOptions {
                retrieve_k: 20,
                ..options(&["fast"])
            },
            None,
        )
        .await
        .unwrap();
    let deep_fast = &deeper.profiles[0];
    assert!(
        deep_fast.stage_ms.contains_key("deep_retrieval.retrieve"),
        "{:?}",
        deep_fast.stage_ms
    );
    assert_eq!(deep_fast.ndcg_at_10, fast.ndcg_at_10);
    assert_eq!(deep_fast.recall_at["10"], fast.recall_at["10"]);
    assert_eq!(
        deep_fast.recall_at.keys().collect::<Vec<_>>(),
        fast.recall_at.keys().collect::<Vec<_>>(),
        "recall@100 still needs retrieve_k ≥ 100"
    );

    // Progress: every source, every case, then the profile.
    let events = events.into_inner().unwrap();
    let ingested = events
        .iter()
        .filter(|e| matches!(e, EvalProgress::Ingest { .. }))
        .count();
    let cases = events
        .iter()
        .filter(|e| matches!(e, EvalProgress::Case { .. }))
        .count();
    assert_eq!((ingested, cases), (5, 4));
    assert!(
        matches!(events.last(), Some(EvalProgress::ProfileDone { profile, .. }) if profile == "fast")
    );

    let markdown = render_markdown(&report);
    assert!(markdown.contains("| fast | retrieve-only |"), "{markdown}");
    assert!(markdown.contains("| correctif | 1 |"), "{markdown}");

    // The gate reads the gated aggregate.
    let floors = |recall: f64, mrr: f64| {
        Floors::single(
            "fast",
            &[(Metric::RecallAt5, recall), (Metric::MrrAt10, mrr)],
            "2025-06-01",
        )
    };
    assert_eq!(check_gate(&report, &floors(0.0, 0.0)), Ok(()));
    let failures = check_gate(&report, &floors(1.01, 1.01)).unwrap_err();
    assert_eq!(failures.len(), 2, "{failures:?}");

    // A second run is incremental: nothing re-embedded, same scores.
    let again = rig
        .harness
        .run(&dataset, &options(&["fast"]), None)
        .await
        .unwrap();
    assert_eq!(again.ingestion.sources_skipped, 5);
    assert_eq!(again.ingestion.chunks_embedded, 0);
    assert_eq!(again.profiles[0].mrr_at_10, fast.mrr_at_10);
    assert_eq!(again.profiles[0].ndcg_at_10, fast.ndcg_at_10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beir_fixture_is_ingested_from_cached_files_and_judged_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let beir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/rag/eval/beir-mini"
    ));
    let dataset = load_dataset(&beir, "test").unwrap();
    let orkeon_knowledge::eval::CorpusSource::Beir { documents } = &dataset.corpus else {
        panic!("not BEIR");
    };
    let rig = rig(dir.path());
    let cache = dir.path().join("eval-cache");

    // Without a cache folder a BEIR run is refused, before anything is ingested.
    let err = rig
        .harness
        .run(&dataset, &options(&["fast"]), None)
        .await
        .unwrap_err();
    assert!(matches!(err, EvalError::InvalidOptions(_)), "{err}");
    assert!(err.to_string().contains("cache_dir"), "{err}");

    let opts = EvalOptions {
        cache_dir: Some(cache.clone()),
        ..options(&["fast"])
    };
    let report = rig.harness.run(&dataset, &opts, None).await.unwrap();
    let files = fs::read_dir(cache.join(&dataset.collection))
        .unwrap()
        .count();
    assert_eq!(files, documents.len());
    assert_eq!(report.ingestion.sources_total, documents.len());

    let fast = &report.profiles[0];
    assert_eq!(fast.per_case.len(), dataset.cases.len());
    let ids: std::collections::BTreeSet<&str> = documents.iter().map(|d| d.id.as_str()).collect();
    for case in &fast.per_case {
        assert!(
            case.ranked.iter().all(|k| ids.contains(k.as_str())),
            "ranked by _id: {case:?}"
        );
    }
    assert!(
        fast.per_case
            .iter()
            .any(|c| c.first_relevant_rank == Some(1)),
        "{:?}",
        fast.per_case
    );
    assert!(fast.ndcg_at_10 > 0.0 && fast.ndcg_at_10 <= 1.0);

    // The collection holds one source per document.
    let info = rig.store.collections().unwrap();
    let collection = info.iter().find(|c| c.name == dataset.collection).unwrap();
    assert_eq!(collection.sources, documents.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_profile_fails_before_ingestion() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = load_dataset(&golden_fixture(dir.path()), "test").unwrap();
    let rig = rig(dir.path());
    let err = rig
        .harness
        .run(&dataset, &options(&["fast", "fastest"]), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EvalError::Profile { profile, .. } if profile == "fastest"),
        "{err}"
    );
    assert!(
        err.to_string().contains("balanced"),
        "lists the known profiles: {err}"
    );
    assert!(rig.store.collections().unwrap().is_empty());

    let err = rig
        .harness
        .run(
            &dataset,
            &EvalOptions {
                retrieve_k: 5,
                ..options(&["fast"])
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at least 10"), "{err}");
}

/// The shipped golden dataset (68 documents: Markdown, HTML, PDF, CSV) under `fast` and
/// `balanced` (cross-encoder rerank). Slow: ingests the whole corpus and reranks every case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow (minutes): ingests examples/rag/eval/corpus and runs fast + balanced; run with --ignored"]
async fn shipped_golden_dataset_fast_and_balanced() {
    let dir = tempfile::tempdir().unwrap();
    let golden = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/rag/eval/golden.yaml"
    ));
    let dataset = load_dataset(&golden, "test").unwrap();
    let store =
        Arc::new(EmbeddedStore::open(&dir.path().join("store"), StoreSettings::default()).unwrap());
    let embedding = EmbeddingSettings {
        models_dir: Some(models_dir()),
        ..EmbeddingSettings::default()
    };
    let embedder = build_embedder(&embedding).unwrap();
    let quarantine = store.quarantine().unwrap();
    let ingestion = Arc::new(IngestionPipeline::new(
        store.clone(),
        embedder.clone(),
        quarantine,
        IngestionSettings::default(),
    ));
    let deps = PipelineDeps {
        store: store.clone(),
        embedder,
        chat: None,
        rerankers: Arc::new(RerankerFactory::builtin(embedding)),
        transformers: Arc::new(TransformerFactory::builtin()),
        groundedness: None,
    };
    let mut settings = RagSettings::default();
    settings.context.max_tokens = Some(100_000);
    let harness = EvalHarness::new(
        ingestion,
        Arc::new(ProfileResolver::new(settings, deps, None)),
        None,
    );
    let opts = EvalOptions {
        retrieve_k: 20,
        ..options(&["fast", "balanced"])
    };
    let report = harness.run(&dataset, &opts, None).await.unwrap();
    println!("{}", render_markdown(&report));
    assert!(
        report.ingestion.quarantined.is_empty(),
        "{:?}",
        report.ingestion.quarantined
    );
    assert_eq!(report.queries, dataset.cases.len());
    for p in &report.profiles {
        assert_eq!(p.per_case.len(), dataset.cases.len());
        assert!(p.excluded_cases >= 5);
    }
}
