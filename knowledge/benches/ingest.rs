//! Ingestion benchmark (a bench binary printing JSON): ingests a generated corpus of ≥ 2,000
//! chunks with the real ONNX embedder into a real store, then re-ingests it unchanged.
//!
//! Reports chunks/s, embeddings/s, the share of wall time spent inside ONNX Runtime, and the
//! unchanged re-ingest time relative to the first ingest. ONNX Runtime time is summed over the
//! document sessions, which run side by side: with several, its share of wall time passes 1.
//!
//! Run: `cargo bench -p orkeon-knowledge --bench ingest` (env: `ORKEON_BENCH_DOCS`,
//! `ORKEON_MODELS_DIR`, `ORKEON_EMBEDDINGS__BATCH_SIZE`-style overrides are not read here;
//! use `ORKEON_BENCH_BATCH` (documents per call), `ORKEON_BENCH_THREADS` (query session) and
//! `ORKEON_BENCH_DOCUMENT_THREADS` (per document session)).

use std::sync::Arc;
use std::time::Instant;

use orkeon_knowledge::embed::build_embedder;
use orkeon_knowledge::ingest::{IngestRequest, IngestionPipeline};
use orkeon_knowledge::settings::{
    ChunkingSettings, EmbeddingSettings, IngestionSettings, StoreSettings,
};
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore};
use orkeon_knowledge::testing::models_dir;

const WORDS: &[&str] = &[
    "battery",
    "charge",
    "cycle",
    "warranty",
    "refund",
    "shipping",
    "courier",
    "invoice",
    "account",
    "password",
    "firmware",
    "update",
    "sensor",
    "thermostat",
    "schedule",
    "heating",
    "cooling",
    "energy",
    "report",
    "customer",
    "support",
    "replacement",
    "order",
    "delivery",
    "address",
    "frame",
    "wheel",
    "brake",
    "gear",
    "chain",
    "tyre",
    "pressure",
    "voltage",
    "current",
    "module",
    "network",
    "router",
    "signal",
    "latency",
    "backup",
    "restore",
    "storage",
    "capacity",
    "policy",
    "contract",
    "renewal",
    "discount",
    "subscription",
    "payment",
    "receipt",
    "manual",
    "install",
    "calibrate",
    "measure",
    "temperature",
    "humidity",
    "efficient",
    "reliable",
    "quickly",
    "daily",
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A deterministic pseudo-random corpus: paragraphs of plain sentences.
fn write_corpus(dir: &std::path::Path, docs: usize) -> std::io::Result<()> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for d in 0..docs {
        let mut text = format!("# Document {d}\n\n");
        for _p in 0..8 {
            for _s in 0..6 {
                let len = 8 + (next() % 14) as usize;
                let words: Vec<&str> = (0..len)
                    .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
                    .collect();
                let mut sentence = words.join(" ");
                if let Some(first) = sentence.get_mut(0..1) {
                    first.make_ascii_uppercase();
                }
                text.push_str(&sentence);
                text.push_str(&format!(" (ref {}). ", next() % 10_000));
            }
            text.push_str("\n\n");
        }
        std::fs::write(dir.join(format!("doc-{d:04}.md")), text)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs = env_usize("ORKEON_BENCH_DOCS", 500);
    let work = tempfile::tempdir()?;
    let corpus = work.path().join("corpus");
    std::fs::create_dir_all(&corpus)?;
    write_corpus(&corpus, docs)?;

    let models_dir = models_dir();
    let settings = EmbeddingSettings {
        models_dir: Some(models_dir),
        document_batch_size: env_usize("ORKEON_BENCH_BATCH", 1),
        threads: env_usize("ORKEON_BENCH_THREADS", 2),
        document_threads: env_usize("ORKEON_BENCH_DOCUMENT_THREADS", 1),
        ..EmbeddingSettings::default()
    };
    let embedder = build_embedder(&settings)?;
    let store = Arc::new(EmbeddedStore::open(
        &work.path().join("data"),
        StoreSettings::default(),
    )?);
    let quarantine = store.quarantine()?;
    let pipeline = IngestionPipeline::new(
        store.clone() as Arc<dyn DocumentStore>,
        embedder.clone(),
        quarantine,
        IngestionSettings::default(),
    );
    let request = IngestRequest {
        collection: "bench".into(),
        base_dir: corpus.clone(),
        sources: vec!["**/*.md".into()],
        chunking: Some(ChunkingSettings::default()),
        reindex: false,
        mode: orkeon_knowledge::ingest::IngestMode::Replace,
    };

    let before = embedder.stats();
    let started = Instant::now();
    let first = pipeline.ingest(&request, None).await?;
    let first_s = started.elapsed().as_secs_f64();
    let after = embedder.stats();
    let inference_s = (after.inference_ns - before.inference_ns) as f64 / 1e9;

    let started = Instant::now();
    let second = pipeline.ingest(&request, None).await?;
    let second_s = started.elapsed().as_secs_f64();

    let report = serde_json::json!({
        "bench": "ingest",
        "model": embedder.profile().to_string(),
        "document_batch_size": settings.document_batch_size,
        "threads": settings.threads,
        "document_threads": settings.document_threads,
        "documents": docs,
        "chunks": first.chunks_upserted,
        "first_ingest": {
            "wall_s": first_s,
            "chunks_per_s": first.chunks_upserted as f64 / first_s,
            "embeddings_per_s": first.chunks_embedded as f64 / first_s,
            "onnx_runtime_s": inference_s,
            "onnx_share": inference_s / first_s,
            "pipeline_overhead_vs_inference": (first_s - inference_s) / inference_s,
        },
        "unchanged_reingest": {
            "wall_s": second_s,
            "chunks_embedded": second.chunks_embedded,
            "sources_skipped": second.sources_skipped,
            "ratio_to_first": second_s / first_s,
        },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
