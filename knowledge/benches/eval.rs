//! Benchmark of the evaluation harness on a synthetic BEIR corpus: where does the time go?
//!
//! Generates `DOCS` documents in topical clusters and `QUERIES` queries (each aimed at one
//! document, grade 2, with two same-topic documents at grade 1), writes them in BEIR format,
//! loads them with the real loader and runs [`EvalHarness`] on real components (embedded store,
//! bge-small ONNX embedder, the cross-encoder for profiles that rerank). Prints one JSON object:
//! ingestion time (and the embedder's inference time inside it), then per profile its wall
//! time, median per-query time, and the total of every pipeline stage over all queries, split
//! into model inference (query embedding, rerank), index search, and everything else.
//!
//! No judge runs here (generation needs a chat model, which lives outside this crate); the
//! heuristic judge is a string scan and an LLM judge is bound by its endpoint.
//!
//! Environment (defaults in brackets):
//! `ORKEON_EVAL_BENCH_DOCS` [300], `ORKEON_EVAL_BENCH_QUERIES` [30],
//! `ORKEON_EVAL_BENCH_PROFILES` [fast], `ORKEON_EVAL_BENCH_CONCURRENCY` [4],
//! `ORKEON_EVAL_BENCH_RETRIEVE_K` [100], `ORKEON_EVAL_BENCH_SEED` [7],
//! `ORKEON_EVAL_BENCH_DATA_DIR` [a temp folder; set it to keep the ingested store between runs],
//! `ORKEON_MODELS_DIR` [../../shared/models].
//!
//! `cargo bench -p orkeon-knowledge --bench eval` (add `--profile dev` for a quick debug run).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use orkeon_knowledge::embed::build_embedder;
use orkeon_knowledge::eval::{EvalHarness, EvalOptions, load_dataset};
use orkeon_knowledge::ingest::IngestionPipeline;
use orkeon_knowledge::query::{PipelineDeps, ProfileResolver, RerankerFactory, TransformerFactory};
use orkeon_knowledge::settings::{
    EmbeddingSettings, IngestionSettings, RagSettings, StoreSettings,
};
use orkeon_knowledge::store::EmbeddedStore;
use orkeon_knowledge::testing::models_dir;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn env_usize(name: &str, default: usize) -> BenchResult<usize> {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .map_err(|e| format!("{name}={value:?} is not a whole number: {e}").into()),
        Err(_) => Ok(default),
    }
}

/// A pronounceable pseudo-word per index (distinct for distinct indexes).
fn word(index: usize) -> String {
    const ONSETS: [&str; 16] = [
        "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st",
    ];
    const VOWELS: [&str; 8] = ["a", "e", "i", "o", "u", "ai", "ou", "ei"];
    let mut out = String::new();
    let mut n = index + 1;
    while n > 0 {
        let syllable = n % (ONSETS.len() * VOWELS.len());
        out.push_str(ONSETS[syllable % ONSETS.len()]);
        out.push_str(VOWELS[syllable / ONSETS.len()]);
        n /= ONSETS.len() * VOWELS.len();
    }
    out
}

/// Writes a synthetic BEIR dataset into `dir`.
fn write_corpus(dir: &Path, docs: usize, queries: usize, seed: u64) -> BenchResult<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let topics = (docs / 10).max(1);
    let general: Vec<String> = (0..1500).map(word).collect();
    // Topic vocabularies and per-document key words come after the general vocabulary.
    let topic_word = |t: usize, i: usize| word(1500 + t * 25 + i);
    let key_word = |d: usize, i: usize| word(1500 + topics * 25 + d * 6 + i);

    let mut corpus = String::new();
    for d in 0..docs {
        let topic = d % topics;
        let mut words = Vec::new();
        let length = rng.random_range(80..140);
        for _ in 0..length {
            let roll: f64 = rng.random();
            words.push(if roll < 0.35 {
                topic_word(topic, rng.random_range(0..25))
            } else if roll < 0.45 {
                key_word(d, rng.random_range(0..6))
            } else {
                general[rng.random_range(0..general.len())].clone()
            });
        }
        let title = format!("{} {}", topic_word(topic, 0), key_word(d, 0));
        let line = json!({"_id": format!("doc{d}"), "title": title, "text": words.join(" ")});
        writeln!(corpus, "{line}")?;
    }
    let mut query_lines = String::new();
    let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
    for q in 0..queries {
        let target = rng.random_range(0..docs);
        let topic = target % topics;
        let mut words: Vec<String> = (0..3)
            .map(|_| key_word(target, rng.random_range(0..6)))
            .collect();
        words.extend((0..3).map(|_| topic_word(topic, rng.random_range(0..25))));
        writeln!(
            query_lines,
            "{}",
            json!({"_id": format!("q{q}"), "text": words.join(" ")})
        )?;
        writeln!(qrels, "q{q}\tdoc{target}\t2")?;
        for sibling in [target + topics, target + 2 * topics] {
            if sibling < docs {
                writeln!(qrels, "q{q}\tdoc{sibling}\t1")?;
            }
        }
    }
    std::fs::create_dir_all(dir.join("qrels"))?;
    std::fs::write(dir.join("corpus.jsonl"), corpus)?;
    std::fs::write(dir.join("queries.jsonl"), query_lines)?;
    std::fs::write(dir.join("qrels/test.tsv"), qrels)?;
    Ok(())
}

fn sum(stages: &BTreeMap<String, f64>, names: &[&str]) -> f64 {
    names.iter().filter_map(|n| stages.get(*n)).sum()
}

async fn run() -> BenchResult<serde_json::Value> {
    let docs = env_usize("ORKEON_EVAL_BENCH_DOCS", 300)?;
    let queries = env_usize("ORKEON_EVAL_BENCH_QUERIES", 30)?;
    let concurrency = env_usize("ORKEON_EVAL_BENCH_CONCURRENCY", 4)?;
    let retrieve_k = env_usize("ORKEON_EVAL_BENCH_RETRIEVE_K", 100)?;
    let seed = env_usize("ORKEON_EVAL_BENCH_SEED", 7)? as u64;
    let profiles: Vec<String> = std::env::var("ORKEON_EVAL_BENCH_PROFILES")
        .unwrap_or_else(|_| "fast".into())
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let temp = tempfile::tempdir()?;
    let data_dir = std::env::var_os("ORKEON_EVAL_BENCH_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());

    let dataset_dir = data_dir.join(format!("synthetic-beir-{docs}-{queries}-{seed}"));
    write_corpus(&dataset_dir, docs, queries, seed)?;
    let dataset = load_dataset(&dataset_dir, "test")?;

    let store = Arc::new(EmbeddedStore::open(
        &data_dir.join("store"),
        StoreSettings::default(),
    )?);
    let embedding = EmbeddingSettings {
        models_dir: Some(models_dir()),
        ..EmbeddingSettings::default()
    };
    let embedder = build_embedder(&embedding)?;
    let quarantine = store.quarantine()?;
    let ingestion = Arc::new(IngestionPipeline::new(
        store.clone(),
        embedder.clone(),
        quarantine,
        IngestionSettings::default(),
    ));
    let deps = PipelineDeps {
        store: store.clone(),
        embedder: embedder.clone(),
        chat: None,
        rerankers: Arc::new(RerankerFactory::builtin(embedding.clone())),
        transformers: Arc::new(TransformerFactory::builtin()),
        groundedness: None,
    };
    let mut settings = RagSettings::default();
    // Rankings of retrieve_k passages must not be cut by the context budget.
    settings.context.max_tokens = Some(retrieve_k * 600);
    let resolver = Arc::new(ProfileResolver::new(settings, deps, None));
    let harness = EvalHarness::new(ingestion, resolver, None);

    let options = EvalOptions {
        profiles,
        retrieve_k,
        concurrency,
        cache_dir: Some(data_dir.join("eval-cache")),
        ..EvalOptions::default()
    };
    let before = embedder.stats();
    let started = Instant::now();
    let report = harness.run(&dataset, &options, None).await?;
    let total_ms = started.elapsed().as_secs_f64() * 1000.0;
    let after = embedder.stats();
    store.wait_for_index_builds();

    let mut profile_rows = Vec::new();
    let mut profiles_ms = 0.0;
    for p in &report.profiles {
        let s = &p.stage_ms;
        let stages_ms = sum(
            s,
            &[
                "transform",
                "retrieve",
                "fuse",
                "rerank",
                "assemble",
                "generate",
                "groundedness",
            ],
        );
        let model_ms = sum(s, &["retrieve.embed", "rerank"]) + sum(s, &["transform"]);
        let search_ms = sum(s, &["retrieve.search"]);
        let cases_ms: f64 = p.per_case.iter().map(|c| c.retrieval_ms).sum();
        profiles_ms += p.duration_ms as f64;
        profile_rows.push(json!({
            "profile": p.profile,
            "duration_ms": p.duration_ms,
            "per_query_ms_p50": p.per_query_ms_p50,
            "ndcg_at_10": p.ndcg_at_10,
            "mrr_at_10": p.mrr_at_10,
            "recall_at": p.recall_at,
            "stage_ms": s,
            "where_the_time_goes_ms": {
                "query_embedding": sum(s, &["retrieve.embed"]),
                "index_search": search_ms,
                "rerank": sum(s, &["rerank"]),
                "fuse_assemble_transform": sum(s, &["fuse", "assemble", "transform"]),
                "judge": serde_json::Value::Null,
                "case_calls_total": cases_ms,
                "outside_pipeline_stages": (cases_ms - stages_ms).max(0.0),
            },
            "model_and_search_share_of_stages": if stages_ms > 0.0 { (model_ms + search_ms) / stages_ms } else { 0.0 },
            "notes": p.notes,
        }));
    }
    Ok(json!({
        "bench": "eval",
        "docs": docs,
        "queries": report.queries,
        "concurrency": concurrency,
        "retrieve_k": retrieve_k,
        "embedder": embedder.profile().model,
        "ingest": {
            "duration_ms": report.ingestion.duration_ms,
            "sources_ingested": report.ingestion.sources_ingested,
            "sources_skipped": report.ingestion.sources_skipped,
            "chunks_embedded": report.ingestion.chunks_embedded,
            "embedder_inference_ms": (after.inference_ns.saturating_sub(before.inference_ns)) as f64 / 1e6,
        },
        "profiles": profile_rows,
        "total_ms": total_ms,
        "harness_outside_ingest_and_profiles_ms": (total_ms - report.ingestion.duration_ms as f64 - profiles_ms).max(0.0),
        "judge": "not run: generation needs a chat model (the heuristic judge is a string scan; an LLM judge is bound by its endpoint)",
    }))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("eval bench: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run()) {
        Ok(value) => println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        ),
        Err(e) => {
            eprintln!("eval bench failed: {e}");
            std::process::exit(1);
        }
    }
}
