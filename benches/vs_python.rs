//! Orkeon against a plain Python onnxruntime loop (a bench binary printing JSON): issue 15's
//! side-by-side measurements, run back to back in one invocation so that the machine's load
//! (other builds on the same two cores) hits both alike; compare the ratios, not the absolutes.
//!
//! Parts (`ORKEON_BENCH_PARTS`, default `ingest,retrieve`; `scale` and `memory` are opt-in, slow):
//! - `ingest`: a deterministic generated corpus of `ORKEON_BENCH_DOCS` (400) pseudo-scientific
//!   abstracts of ≈ 300 tokens, written as `.txt` files. THE PEER (`benches/peer/embed_peer.py`,
//!   clearly labelled in the output) embeds them whole with onnxruntime from the same wheel and
//!   the same model file (2 intra-op threads, batches sorted by length, best of batch 2 and 32;
//!   its embedding time, session creation excluded). Orkeon: the wall time of a cold
//!   `orkeon rag ingest` (the real binary, a fresh data dir: start, load the model, validate,
//!   chunk, embed, index, commit, exit). Ratio = peer seconds / Orkeon seconds (≥ 1.2 is the goal).
//! - `retrieve`: the real daemon on that data dir; `fast` `Retrieve` calls one at a time over
//!   gRPC on loopback with a real tonic client (TCP_NODELAY), client-side p50/p95, and the
//!   per-stage p50 of the answers' own traces; against the peer's query encode + exact scan
//!   p50 over its document vectors. Ratio = Orkeon p50 / peer p50 (≤ 1.2 is the goal).
//! - `scale`: the daemon with a second collection of 100,000 chunks written straight into its
//!   store (texts, token counts and vectors derived from the real ingested chunks: each vector a
//!   normalised mixture of two real chunk vectors plus noise), the same `fast` Retrieve p50/p95
//!   there (goal ≤ 8 ms), and the daemon's resident memory (VmRSS, VmHWM) with it loaded.
//! - `memory`: peak RSS (VmHWM, sampled every 20 ms) of a cold `orkeon rag ingest` of about
//!   `ORKEON_BENCH_MEMORY_CHUNKS` (10,000) chunks of the same generator.
//!
//! The Orkeon side is the real `orkeon` binary that `cargo bench` builds for this bench
//! (`CARGO_BIN_EXE_orkeon`: `<target>/release/orkeon`, bench profile = release); nothing needs
//! building beforehand. Without the model, ONNX Runtime or the peer's Python packages it prints
//! `{"skipped": true, "reason": ...}` and measures nothing. Not part of `cargo test`.
//!
//! Run: `flock /tmp/orkeon-build.lock cargo bench -p orkeon --bench vs_python` with
//! `ORKEON_MODELS_DIR` (default `../shared/models`) and `ORT_DYLIB_PATH` or the onnxruntime
//! wheel installed; the peer needs `python3 -m pip install onnxruntime==1.31.1 tokenizers`.
//! `ORKEON_BENCH_QUERIES` (50) queries. `ORKEON_BENCH_ROUNDS` (1): the peer and the cold ingest
//! run this many times, alternating; the ingest ratio is the median of the rounds' ratios (the
//! retrieve part uses the last round's data and peer). Extra environment (e.g. `ORKEON_EMBEDDINGS__THREADS=2`)
//! reaches the Orkeon processes unchanged, which is how the levers in the README were compared.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::knowledge_service_client::KnowledgeServiceClient;
use orkeon_knowledge::settings::StoreSettings;
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore, SourceRecord};
use orkeon_knowledge::types::StoredChunk;

use common::{Rng, env_usize, load_average, percentile, round1, round3};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const COLLECTION: &str = "abstracts";
const SCALE_COLLECTION: &str = "scale";
const SCALE_CHUNKS: usize = 100_000;
const SCALE_CHUNKS_PER_SOURCE: usize = 500;
const WARMUP_QUERIES: usize = 5;

fn models_dir() -> PathBuf {
    std::env::var_os("ORKEON_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models")))
}

/// Topic families of the generated abstracts: (subjects, contexts).
const TOPICS: &[(&[&str], &[&str])] = &[
    (
        &[
            "protein folding",
            "enzyme kinetics",
            "membrane transport",
            "gene expression",
            "ribosome assembly",
            "cell signalling",
        ],
        &[
            "yeast cultures",
            "human fibroblasts",
            "bacterial biofilms",
            "plant roots",
        ],
    ),
    (
        &[
            "glacier retreat",
            "ocean acidification",
            "soil carbon",
            "monsoon rainfall",
            "permafrost thaw",
            "coastal erosion",
        ],
        &[
            "the Arctic shelf",
            "tropical catchments",
            "alpine valleys",
            "semi-arid grasslands",
        ],
    ),
    (
        &[
            "graph neural networks",
            "sparse attention",
            "federated learning",
            "reinforcement learning",
            "contrastive pretraining",
            "model compression",
        ],
        &[
            "edge devices",
            "large image corpora",
            "clinical records",
            "speech benchmarks",
        ],
    ),
    (
        &[
            "perovskite solar cells",
            "lithium anodes",
            "solid electrolytes",
            "thermoelectric alloys",
            "catalyst surfaces",
            "graphene membranes",
        ],
        &[
            "ambient humidity",
            "high current density",
            "repeated thermal cycling",
            "acidic media",
        ],
    ),
    (
        &[
            "exoplanet atmospheres",
            "galaxy mergers",
            "stellar flares",
            "dark matter halos",
            "pulsar timing",
            "cosmic dust",
        ],
        &[
            "infrared surveys",
            "radio observations",
            "numerical simulations",
            "spectroscopic archives",
        ],
    ),
    (
        &[
            "sleep deprivation",
            "working memory",
            "language acquisition",
            "decision fatigue",
            "motor learning",
            "attention control",
        ],
        &[
            "older adults",
            "school children",
            "shift workers",
            "bilingual speakers",
        ],
    ),
    (
        &[
            "antibiotic resistance",
            "vaccine uptake",
            "influenza transmission",
            "malaria control",
            "air pollution exposure",
            "hospital readmission",
        ],
        &[
            "rural clinics",
            "urban neighbourhoods",
            "intensive care units",
            "national registries",
        ],
    ),
    (
        &[
            "bridge fatigue",
            "concrete curing",
            "wind turbine loads",
            "pipeline corrosion",
            "traffic flow",
            "seismic retrofitting",
        ],
        &[
            "coastal cities",
            "mountain highways",
            "offshore platforms",
            "dense rail networks",
        ],
    ),
];
const METHODS: &[&str] = &[
    "a randomised controlled design",
    "high-resolution imaging",
    "a mixed-effects model",
    "Bayesian inference",
    "a longitudinal survey",
    "finite element analysis",
    "mass spectrometry",
    "a multi-site field campaign",
    "Monte Carlo simulation",
    "a systematic review of prior studies",
    "time-resolved spectroscopy",
    "an ablation study",
];
const MEASURES: &[&str] = &[
    "the response rate",
    "the energy efficiency",
    "the error variance",
    "the growth rate",
    "the mean lifetime",
    "the detection threshold",
    "the overall stability",
    "the recovery time",
    "the spatial resolution",
    "the relative risk",
    "the conversion yield",
    "the signal strength",
];
const ADJECTIVES: &[&str] = &[
    "robust",
    "unexpected",
    "nonlinear",
    "persistent",
    "modest",
    "substantial",
    "seasonal",
    "scalable",
    "heterogeneous",
    "reproducible",
    "transient",
    "systematic",
];
const VERBS: &[&str] = &[
    "increases",
    "reduces",
    "stabilises",
    "modulates",
    "predicts",
    "limits",
    "accelerates",
    "suppresses",
];
const LINKS: &[&str] = &[
    "Moreover",
    "However",
    "In contrast",
    "Notably",
    "Taken together",
    "Importantly",
    "Furthermore",
    "As expected",
];

/// One abstract of about `target_words` words on `topic`.
fn abstract_text(topic: usize, target_words: usize, rng: &mut Rng) -> String {
    let (subjects, contexts) = TOPICS[topic];
    let mut text = String::new();
    let title_subject = rng.pick(subjects);
    text.push_str(&format!(
        "{} {} in {}\n\n",
        capitalise(rng.pick(ADJECTIVES)),
        title_subject,
        rng.pick(contexts)
    ));
    while text.split_whitespace().count() < target_words {
        let s = rng.pick(subjects);
        let s2 = rng.pick(subjects);
        let c = rng.pick(contexts);
        let m = rng.pick(METHODS);
        let q = rng.pick(MEASURES);
        let a = rng.pick(ADJECTIVES);
        let v = rng.pick(VERBS);
        let l = rng.pick(LINKS);
        let n = 12 + rng.below(900);
        let pct = 3 + rng.below(60);
        let sentence = match rng.below(10) {
            0 => format!("We investigate how {s} shapes {q} in {c}."),
            1 => format!("Using {m}, we measured {q} across {n} samples drawn from {c}."),
            2 => format!(
                "The results show that {s} {v} {q} by {pct} percent compared with the baseline."
            ),
            3 => format!("{l}, the effect of {s} on {s2} was {a} and depended on the season."),
            4 => format!(
                "These findings suggest that {a} changes in {s} may explain earlier reports on {s2}."
            ),
            5 => {
                format!("A second experiment with {m} confirmed that {q} remains {a} under stress.")
            }
            6 => format!("{l}, {s} was associated with {q} in {pct} of the {n} cases we examined."),
            7 => format!("We propose a {a} framework that links {s} to {s2} through {q}."),
            8 => format!(
                "Limitations include the small number of sites in {c} and the short follow-up."
            ),
            _ => format!("Future work should test whether {s} also {v} {q} in other settings."),
        };
        text.push_str(&sentence);
        text.push(' ');
    }
    text.trim_end().to_string()
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn question(i: usize, rng: &mut Rng) -> String {
    let (subjects, contexts) = TOPICS[i % TOPICS.len()];
    let s = rng.pick(subjects);
    let q = rng.pick(MEASURES);
    let c = rng.pick(contexts);
    match rng.below(3) {
        0 => format!("How does {s} affect {q} in {c}?"),
        1 => format!("What methods were used to measure {q} of {s}?"),
        _ => format!("Why does {s} change {q}?"),
    }
}

/// Writes `count` abstracts as `corpus/doc-NNNNN.txt` under `dir`.
fn write_corpus(dir: &Path, count: usize, seed: u64) -> BenchResult<()> {
    std::fs::create_dir_all(dir)?;
    let mut rng = Rng(seed);
    for i in 0..count {
        let words = 200 + rng.below(50);
        let text = abstract_text(i % TOPICS.len(), words, &mut rng);
        std::fs::write(dir.join(format!("doc-{i:05}.txt")), text)?;
    }
    Ok(())
}

fn orkeon(cwd: &Path, data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orkeon"));
    cmd.current_dir(cwd)
        .env("ORKEON_MODELS_DIR", models_dir())
        .env_remove("RUST_LOG")
        .arg("--data-dir")
        .arg(data_dir);
    // The bench's own ORKEON_BENCH_* knobs are not Orkeon configuration (the CLI rejects
    // unknown ORKEON_* keys).
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ORKEON_BENCH_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// VmRSS and VmHWM of a live process, in MiB.
fn memory_of(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Runs a child to completion, sampling its VmHWM every 20 ms; returns (wall s, stdout, peak MiB).
fn run_sampled(mut cmd: Command) -> BenchResult<(f64, String, f64)> {
    let started = Instant::now();
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let peak_kib = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak_kib) = (done.clone(), peak_kib.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some((_, hwm)) = memory_of(pid) {
                    peak_kib.fetch_max((hwm * 1024.0) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let output = child.wait_with_output()?;
    let wall = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    if !output.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok((
        wall,
        String::from_utf8(output.stdout)?,
        peak_kib.load(Ordering::Relaxed) as f64 / 1024.0,
    ))
}

/// A cold `orkeon rag ingest` of every `.txt` under `cwd/corpus`.
fn ingest(cwd: &Path, data_dir: &Path) -> BenchResult<(f64, Value, f64)> {
    let mut cmd = orkeon(cwd, data_dir);
    cmd.args([
        "--json",
        "rag",
        "ingest",
        "--collection",
        COLLECTION,
        "--source",
        "corpus/*.txt",
    ]);
    let (wall, stdout, peak) = run_sampled(cmd)?;
    let report: Value = serde_json::from_str(&stdout)
        .map_err(|e| format!("rag ingest printed no JSON ({e}): {stdout}"))?;
    Ok((wall, report, peak))
}

struct Daemon {
    child: Child,
    url: String,
}

impl Daemon {
    fn start(cwd: &Path, data_dir: &Path) -> BenchResult<Self> {
        let crews = cwd.join("crews");
        std::fs::create_dir_all(&crews)?;
        let log = std::fs::File::create(data_dir.with_extension("daemon.log"))?;
        let mut child = orkeon(cwd, data_dir)
            .args(["daemon", "--listen", "127.0.0.1:0", "--crews"])
            .arg(&crews)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("daemon stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("orkeon listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(addr) => Ok(Self {
                child,
                url: format!("http://{addr}"),
            }),
            Err(_) => {
                let _ = child.kill();
                Err(format!(
                    "the daemon did not start; see {}",
                    data_dir.with_extension("daemon.log").display()
                )
                .into())
            }
        }
    }

    fn memory(&self) -> Value {
        match memory_of(self.child.id()) {
            Some((rss, hwm)) => json!({"vm_rss_mib": round1(rss), "vm_hwm_mib": round1(hwm)}),
            None => Value::Null,
        }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fast` Retrieve calls one at a time; client-side p50/p95 and per-stage trace p50s.
async fn retrieve_series(url: &str, collection: &str, queries: &[String]) -> BenchResult<Value> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut client = KnowledgeServiceClient::new(channel);
    let mut latencies = Vec::new();
    let mut stages: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut citations = 0usize;
    let mut list_ms = Vec::new();
    for (round, query) in queries[..WARMUP_QUERIES.min(queries.len())]
        .iter()
        .chain(queries)
        .enumerate()
    {
        let started = Instant::now();
        let answer = client
            .retrieve(pb::QueryRequest {
                collection: collection.to_string(),
                query: query.clone(),
                profile: "fast".into(),
                top_n: 0,
                mode: 0,
            })
            .await?
            .into_inner();
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        let started = Instant::now();
        client
            .list_collections(pb::ListCollectionsRequest {})
            .await?;
        let list = started.elapsed().as_secs_f64() * 1e3;
        if round < WARMUP_QUERIES.min(queries.len()) {
            continue;
        }
        latencies.push(elapsed);
        list_ms.push(list);
        citations += answer.citations.len();
        let mut traced = 0.0;
        for step in &answer.trace {
            stages
                .entry(step.stage.clone())
                .or_default()
                .push(step.duration_ms);
            traced += step.duration_ms;
            if step.stage == "retrieve" {
                let detail: Value = serde_json::from_str(&step.detail_json).unwrap_or_default();
                for key in ["embed_ms", "search_ms"] {
                    if let Some(ms) = detail.get(key).and_then(Value::as_f64) {
                        stages
                            .entry(format!("retrieve.{key}"))
                            .or_default()
                            .push(ms);
                    }
                }
            }
        }
        stages.entry("trace_total".into()).or_default().push(traced);
        stages
            .entry("outside_trace (gRPC, conversion, scheduling)".into())
            .or_default()
            .push(elapsed - traced);
    }
    let breakdown: serde_json::Map<String, Value> = stages
        .iter()
        .map(|(k, v)| (k.clone(), json!(round3(percentile(v, 0.5)))))
        .collect();
    Ok(json!({
        "queries": latencies.len(),
        "client_p50_ms": round3(percentile(&latencies, 0.5)),
        "client_p95_ms": round3(percentile(&latencies, 0.95)),
        "list_collections_p50_ms": round3(percentile(&list_ms, 0.5)),
        "citations_per_answer": citations as f64 / latencies.len().max(1) as f64,
        "stage_p50_ms": breakdown,
    }))
}

/// Writes `SCALE_CHUNKS` chunks derived from the real ingested chunks of `COLLECTION`.
fn populate_scale(data_dir: &Path) -> BenchResult<Value> {
    let started = Instant::now();
    {
        let no_hnsw = StoreSettings {
            hnsw_threshold: usize::MAX,
            ..StoreSettings::default()
        };
        let store = EmbeddedStore::open(data_dir, no_hnsw)?;
        let manifest = store.manifest(COLLECTION)?;
        let profile = manifest
            .profile
            .clone()
            .ok_or("the ingested collection has no profile")?;
        let mut base: Vec<StoredChunk> = Vec::new();
        for record in &manifest.sources {
            base.extend(store.chunks_of_source(COLLECTION, &record.source_id)?);
        }
        if base.len() < 2 {
            return Err("the ingested collection has fewer than 2 chunks".into());
        }
        store.ensure_collection(SCALE_COLLECTION, &profile)?;
        let dims = profile.dimensions;
        let sigma = 0.35 / (dims as f32).sqrt();
        let mut rng = Rng(0x5CA1_E000);
        for (source_index, first) in (0..SCALE_CHUNKS)
            .step_by(SCALE_CHUNKS_PER_SOURCE)
            .enumerate()
        {
            let source_id = format!("scale/source-{source_index:04}.txt");
            let count = SCALE_CHUNKS_PER_SOURCE.min(SCALE_CHUNKS - first);
            let mut chunks = Vec::with_capacity(count);
            let mut hasher = Sha256::new();
            for ordinal in 0..count {
                let n = first + ordinal;
                let parent = &base[rng.below(base.len())];
                let other = &base[rng.below(base.len())];
                let weight = 0.5 * rng.unit() as f32;
                let mut vector: Vec<f32> = (0..dims)
                    .map(|d| {
                        parent.vector[d] + weight * other.vector[d] + sigma * rng.gaussian() as f32
                    })
                    .collect();
                let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
                vector.iter_mut().for_each(|x| *x /= norm);
                hasher.update(parent.text.as_bytes());
                chunks.push(StoredChunk {
                    id: format!("{SCALE_COLLECTION}-{n:07}"),
                    source_id: source_id.clone(),
                    ordinal: ordinal as u32,
                    content_hash: format!("{}-{n}", parent.content_hash),
                    start: parent.start,
                    end: parent.end,
                    text: parent.text.clone(),
                    metadata: parent.metadata.clone(),
                    vector,
                });
            }
            let record = SourceRecord {
                source_id,
                content_hash: hex::encode(hasher.finalize()),
                loader: "generated".into(),
                chunking: manifest.sources[0].chunking.clone(),
                embedding_profile: profile.to_string(),
                chunk_ids: chunks.iter().map(|c| c.id.clone()).collect(),
                ingested_at: manifest.sources[0].ingested_at.clone(),
                validation: "clean".into(),
                stale: None,
            };
            store.replace_source(SCALE_COLLECTION, record, chunks)?;
        }
        store.flush()?;
    }
    let populate_s = started.elapsed().as_secs_f64();
    // Reopen with the defaults: one HNSW build (and its recall calibration) for the collection.
    let started = Instant::now();
    let status = {
        let store = EmbeddedStore::open(data_dir, StoreSettings::default())?;
        store.wait_for_index_builds();
        store.flush()?;
        store
            .collections()?
            .into_iter()
            .find(|c| c.name == SCALE_COLLECTION)
            .map(|c| serde_json::to_value(&c).unwrap_or_default())
    };
    Ok(json!({
        "chunks": SCALE_CHUNKS,
        "populate_s": round1(populate_s),
        "index_build_s": round1(started.elapsed().as_secs_f64()),
        "collection": status,
        "how": "texts, metadata (token counts) and vectors from the real ingested chunks: each vector = parent + w·other (w ∈ [0, 0.5)) + Gaussian noise (norm ≈ 0.35), normalised",
    }))
}

fn run_peer(cwd: &Path, queries_file: &Path) -> BenchResult<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer/embed_peer.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg("--model-dir")
        .arg(models_dir().join("bge-small-en-v1.5"))
        .arg("--corpus")
        .arg(cwd.join("corpus"))
        .arg("--queries")
        .arg(queries_file)
        .args(["--threads", "2", "--batches", "2,32"])
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "the peer {} failed ({}); it needs `python3 -m pip install onnxruntime==1.31.1 tokenizers`",
            script.display(),
            output.status
        )
        .into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn orkeon_environment() -> Value {
    let vars: serde_json::Map<String, Value> = std::env::vars()
        .filter(|(k, _)| k.starts_with("ORKEON_EMBEDDINGS__") || k.starts_with("ORKEON_RAG__"))
        .map(|(k, v)| (k, json!(v)))
        .collect();
    Value::Object(vars)
}

/// Why the bench cannot run here (the model, the ONNX Runtime library or the peer's Python
/// packages missing), or `None`.
fn missing_prerequisite() -> Option<String> {
    let model = models_dir().join("bge-small-en-v1.5").join("model.onnx");
    if !model.is_file() {
        return Some(format!(
            "SKIPPED: {} not found; set ORKEON_MODELS_DIR to the shared models folder",
            model.display()
        ));
    }
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH").filter(|v| !v.is_empty())
        && !Path::new(&path).is_file()
    {
        return Some(format!(
            "SKIPPED: ORT_DYLIB_PATH={} is not a file",
            Path::new(&path).display()
        ));
    }
    let peer = Command::new("python3")
        .args(["-c", "import onnxruntime, tokenizers, numpy"])
        .output();
    match peer {
        Ok(out) if out.status.success() => None,
        _ => Some(
            "SKIPPED: the Python peer needs python3 with onnxruntime, tokenizers and numpy \
             (python3 -m pip install onnxruntime==1.31.1 tokenizers numpy)"
                .into(),
        ),
    }
}

fn main() -> BenchResult<()> {
    let parts: Vec<String> = std::env::var("ORKEON_BENCH_PARTS")
        .unwrap_or_else(|_| "ingest,retrieve".into())
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let wants = |part: &str| parts.iter().any(|p| p == part);
    if let Some(reason) = missing_prerequisite() {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bench": "vs_python",
                "skipped": true,
                "reason": reason,
                "measured": "nothing",
            }))?
        );
        return Ok(());
    }
    let docs = env_usize("ORKEON_BENCH_DOCS", 400).max(10);
    let query_count = env_usize("ORKEON_BENCH_QUERIES", 50).max(1);
    let work = tempfile::tempdir()?;
    let cwd = work.path();
    write_corpus(&cwd.join("corpus"), docs, 0xAB57_2AC7)?;
    let mut rng = Rng(0x0051_E510);
    let queries: Vec<String> = (0..query_count).map(|i| question(i, &mut rng)).collect();
    let queries_file = cwd.join("queries.txt");
    std::fs::write(&queries_file, queries.join("\n"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let mut out = serde_json::Map::new();
    out.insert("bench".into(), json!("vs_python"));
    out.insert(
        "note".into(),
        json!("peer and Orkeon run back to back in this one invocation on a machine shared with other agents' builds: compare ratios, not absolute times"),
    );
    out.insert("load_average_at_start".into(), load_average());
    out.insert("orkeon_environment".into(), orkeon_environment());
    out.insert("documents".into(), json!(docs));
    out.insert("orkeon_binary".into(), json!(env!("CARGO_BIN_EXE_orkeon")));

    let rounds = env_usize("ORKEON_BENCH_ROUNDS", 1).max(1);
    let data = cwd.join("data");
    let mut peer = Value::Null;
    if wants("ingest") || wants("retrieve") || wants("scale") {
        // Each round runs the peer, then a cold ingest into a fresh data dir: the ratio of a
        // round compares runs seconds apart, and the median of the rounds resists a noisy machine.
        let mut per_round = Vec::with_capacity(rounds);
        let (mut peer_times, mut orkeon_times) = (Vec::new(), Vec::new());
        let mut last = (Value::Null, 0.0);
        for round in 1..=rounds {
            eprintln!(
                "round {round}/{rounds}: peer embedding {docs} documents (batch 2, then 32) and {query_count} queries"
            );
            peer = run_peer(cwd, &queries_file)?;
            eprintln!("round {round}/{rounds}: orkeon cold rag ingest");
            if data.exists() {
                std::fs::remove_dir_all(&data)?;
            }
            let (wall, report, peak) = ingest(cwd, &data)?;
            let peer_s = peer["embed_best_s"].as_f64().unwrap_or(f64::NAN);
            peer_times.push(peer_s);
            orkeon_times.push(wall);
            per_round.push(json!({
                "peer_embed_s": peer_s,
                "peer_embed_runs": peer["embed_runs"],
                "orkeon_cold_ingest_s": round3(wall),
                "ratio_peer_over_orkeon": round3(peer_s / wall),
            }));
            last = (report, peak);
        }
        let (report, peak) = last;
        let ratios: Vec<f64> = peer_times
            .iter()
            .zip(&orkeon_times)
            .map(|(peer, orkeon)| peer / orkeon)
            .collect();
        let ratio = percentile(&ratios, 0.5);
        let (peer_median, orkeon_median) =
            (percentile(&peer_times, 0.5), percentile(&orkeon_times, 0.5));
        out.insert(
            "ingest".into(),
            json!({
                "ratio_peer_over_orkeon": round3(ratio),
                "ratio_is": if rounds > 1 { "the median of the rounds' ratios" } else { "one round" },
                "rounds": per_round,
                "peer_median_s": round3(peer_median),
                "orkeon_median_s": round3(orkeon_median),
                "ratio_of_medians": round3(peer_median / orkeon_median),
                "goal": "ratio >= 1.2",
                "orkeon_chunks_embedded": report["chunks_embedded"],
                "orkeon_report_duration_ms": report["duration_ms"],
                "orkeon_peak_rss_mib": round1(peak),
                "peer_tokens": peer["tokens"],
            }),
        );
        out.insert("peer".into(), peer.clone());
    }
    if wants("retrieve") {
        let daemon = Daemon::start(cwd, &data)?;
        let series = runtime.block_on(retrieve_series(&daemon.url, COLLECTION, &queries))?;
        let peer_p50 = peer["query_p50_ms"].as_f64().unwrap_or(f64::NAN);
        let p50 = series["client_p50_ms"].as_f64().unwrap_or(f64::NAN);
        out.insert(
            "retrieve_fast".into(),
            json!({
                "orkeon": series,
                "peer_encode_and_exact_search_p50_ms": peer_p50,
                "peer_encode_p50_ms": peer["query_encode_p50_ms"],
                "ratio_orkeon_over_peer": round3(p50 / peer_p50),
                "goal": "ratio <= 1.2",
                "daemon_memory": daemon.memory(),
            }),
        );
        daemon.stop();
    }
    if wants("scale") {
        eprintln!("scale: writing {SCALE_CHUNKS} chunks and building the HNSW index");
        let populated = populate_scale(&data)?;
        let daemon = Daemon::start(cwd, &data)?;
        let series = runtime.block_on(retrieve_series(&daemon.url, SCALE_COLLECTION, &queries))?;
        out.insert(
            "scale_100k".into(),
            json!({
                "store": populated,
                "retrieve_fast": series,
                "goal": "client p50 <= 8 ms",
                "daemon_memory_with_100k_chunks": daemon.memory(),
            }),
        );
        daemon.stop();
    }
    if wants("memory") {
        let target_chunks = env_usize("ORKEON_BENCH_MEMORY_CHUNKS", 10_000);
        // ≈ 2 chunks per abstract with the default chunking.
        let memory_docs = target_chunks.div_ceil(2);
        let dir = cwd.join("memory");
        write_corpus(&dir.join("corpus"), memory_docs, 0x3E30_0000)?;
        eprintln!("memory: cold rag ingest of {memory_docs} documents");
        let (wall, report, peak) = ingest(&dir, &dir.join("data"))?;
        out.insert(
            "ingest_memory".into(),
            json!({
                "documents": memory_docs,
                "chunks_embedded": report["chunks_embedded"],
                "wall_s": round1(wall),
                "peak_rss_mib": round1(peak),
                "how": "VmHWM of the orkeon process sampled every 20 ms",
            }),
        );
    }
    out.insert("load_average_at_end".into(), load_average());
    println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    Ok(())
}
