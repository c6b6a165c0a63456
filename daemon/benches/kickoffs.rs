//! Kickoff concurrency benchmark (a bench binary printing JSON): wall time of N concurrent
//! kickoffs of one crew whose agent retrieves through a chosen profile (default `balanced`)
//! from two collections, with the daemon's run and retrieval limits at `concurrency` versus
//! both at 1 — the same process, models, store and crew, measured back to back.
//!
//! Everything is real: the daemon's `Services` (ONNX embedder and cross-encoder, sled +
//! tantivy store, the bounded `Augmenter`, the crew engine), the example knowledge of
//! `examples/crews/knowledge/{support,onboarding}` and the offline extractive model. A warm-up
//! kickoff ingests both collections and loads the models first, so the measured runs do
//! retrieval, generation and bookkeeping only (their bootstraps are no-ops: nothing changed).
//!
//! Run: `cargo bench -p orkeon-daemon --bench kickoffs`. Env: `ORKEON_BENCH_KICKOFFS` (50),
//! `ORKEON_BENCH_CONCURRENCY` (8), `ORKEON_BENCH_PROFILE` (balanced), `ORKEON_MODELS_DIR`
//! (default `../shared/models`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use orkeon_crews::run::RunStatus;
use orkeon_crews::spec::{CrewSpec, parse_crew_file};
use orkeon_daemon::config::Config;
use orkeon_daemon::services::Services;
use serde_json::json;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the daemon crate sits in the workspace")
        .to_path_buf()
}

fn crew_file(dir: &Path, profile: &str) -> BenchResult<PathBuf> {
    let crews = dir.join("crews");
    for kb in ["support", "onboarding"] {
        let to = crews.join("knowledge").join(kb);
        std::fs::create_dir_all(&to)?;
        for entry in std::fs::read_dir(repo().join("examples/crews/knowledge").join(kb))? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), to.join(entry.file_name()))?;
            }
        }
    }
    let file = crews.join("bench.yaml");
    std::fs::write(
        &file,
        format!(
            r#"name: bench
llm: {{ provider: extractive }}
profile: {profile}
rag:
  collections:
    support-kb: {{ sources: ["knowledge/support/*.md"] }}
    onboarding: {{ sources: ["knowledge/onboarding/*.md"] }}
agents:
  helper:
    role: Support agent
    goal: Answer from the knowledge bases
    knowledge: [support-kb, onboarding]
    max_passages: 6
tasks:
  - name: answer
    agent: helper
    description: "{{{{ inputs.question }}}}"
    expected_output: A short answer with [n] citations
    citations: optional
"#
        ),
    )?;
    Ok(file)
}

const QUESTIONS: &[&str] = &[
    "How long do customers have to return a product?",
    "What does the warranty cover and for how long?",
    "How do I set up my laptop in the first week?",
    "Who do I ask about payroll and benefits?",
    "How long does shipping take abroad?",
];

/// Starts `kickoffs` runs at once and waits for all; the wall time in seconds.
async fn burst(services: &Services, spec: &Arc<CrewSpec>, kickoffs: usize) -> BenchResult<f64> {
    let started = Instant::now();
    let mut ids = Vec::with_capacity(kickoffs);
    for i in 0..kickoffs {
        let inputs = BTreeMap::from([(
            "question".to_string(),
            QUESTIONS[i % QUESTIONS.len()].to_string(),
        )]);
        ids.push(services.engine.start(spec.clone(), inputs, None)?.run_id);
    }
    for id in ids {
        let run = services.engine.wait(&id).await?;
        if run.state != RunStatus::Finished {
            return Err(format!("run {id} ended {}: {:?}", run.state, run.reason).into());
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

async fn measure(
    dir: &Path,
    spec: &Arc<CrewSpec>,
    kickoffs: usize,
    concurrency: usize,
) -> BenchResult<serde_json::Value> {
    let mut config = Config {
        data_dir: dir.join("data"),
        crews_dir: dir.join("crews"),
        ..Config::default()
    };
    config.limits.max_concurrent_runs = concurrency;
    config.limits.max_concurrent_retrievals = concurrency;
    config.limits.max_queued_runs = kickoffs.max(256);
    let services = Services::start(config).await?;
    let warm_up = burst(&services, spec, 1).await?;
    let wall = burst(&services, spec, kickoffs).await?;
    services.shutdown().await;
    Ok(json!({
        "concurrency": concurrency,
        "warm_up_s": warm_up,
        "wall_s": wall,
        "runs_per_s": kickoffs as f64 / wall,
    }))
}

fn main() -> BenchResult<()> {
    if std::env::var_os("ORKEON_MODELS_DIR").is_none() {
        // SAFETY: set before any thread is started.
        unsafe { std::env::set_var("ORKEON_MODELS_DIR", repo().join("../shared/models")) };
    }
    let kickoffs = env_usize("ORKEON_BENCH_KICKOFFS", 50);
    let concurrency = env_usize("ORKEON_BENCH_CONCURRENCY", 8);
    let profile = std::env::var("ORKEON_BENCH_PROFILE").unwrap_or_else(|_| "balanced".into());
    let dir = tempfile::tempdir()?;
    let spec = Arc::new(parse_crew_file(&crew_file(dir.path(), &profile)?)?);
    let runtime = tokio::runtime::Runtime::new()?;
    let (serial, concurrent) = runtime.block_on(async {
        // One data folder for both: the second configuration finds the collections ingested.
        let serial = measure(dir.path(), &spec, kickoffs, 1).await?;
        let concurrent = measure(dir.path(), &spec, kickoffs, concurrency).await?;
        BenchResult::Ok((serial, concurrent))
    })?;
    let ratio = serial["wall_s"].as_f64().unwrap_or(0.0)
        / concurrent["wall_s"].as_f64().unwrap_or(f64::INFINITY);
    let report = json!({
        "bench": "kickoffs",
        "what": "wall time of N concurrent kickoffs of one crew (one agent, two collections, retrieval through the profile, extractive model), daemon limits max_concurrent_runs = max_concurrent_retrievals = concurrency, versus both = 1",
        "kickoffs": kickoffs,
        "profile": profile,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "serial": serial,
        "concurrent": concurrent,
        "speedup": ratio,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
