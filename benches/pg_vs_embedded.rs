//! PostgreSQL + pgvector against the embedded store (a bench binary printing JSON): issue 17's
//! ingest and retrieval-only measurements at 10,000 and 100,000 chunks, both providers driven
//! through the real `DocumentStore` trait, on the same generated data, in one invocation on one
//! machine (the PostgreSQL server shares its cores), so compare the ratios, not the absolutes.
//!
//! Data (model-free and deterministic, seeded splitmix64): 384-dimensional unit vectors with
//! topic structure. 300 topic centroids, 8 sub-topic directions per topic; a chunk's vector is
//! normalise(topic + 0.5·sub-topic + w·second topic + noise), w ∈ [0, 0.4), Gaussian noise of
//! norm ≈ 0.35. Its text has 150–250 pseudo-words: 35 % from its topic's 24 words, 10 % from its
//! sub-topic's 8, 10 % from the second topic's, the rest from 600 common words (Zipf), so lexical
//! search is meaningful. 500 chunks per source, one `replace_source` (one transaction) per
//! source; chunk n does not depend on the size (the 10k set is the first 10k of the 100k one).
//! Queries: 3 words (2 of a topic, 1 of one of its sub-topics) and a noisy vector of that
//! sub-topic; `ORKEON_BENCH_QUERIES` (200) measured, after 10 warm-up queries.
//!
//! - ingest: wall time of all `replace_source` calls, p50/p95 per source (500 chunks), chunks/s,
//!   then the time until the vector index is ready. The embedded store is filled with HNSW off
//!   and reopened with the default settings, which builds (and calibrates) one HNSW graph for a
//!   collection at or above `hnsw_threshold` (20,000), as `vs_python` and the knowledge benches
//!   bulk-load; PostgreSQL maintains its HNSW index inside each insert (nothing extra). The
//!   `ANALYZE` run on PostgreSQL afterwards (what autovacuum does within a minute) is reported
//!   apart.
//! - retrieval-only: `search` one call at a time, k = 10, modes vector, hybrid (RRF) and bm25,
//!   the providers alternating first/second per query; p50/p95 ms, recall@10 of the vector mode
//!   against an exact brute-force search over the generated vectors, each mode's topic
//!   precision, the two providers' top-10 agreement, and the postgres / embedded ratios. When
//!   the embedded store's graph misses `hnsw_min_recall` (so it scans exactly), the same saved
//!   graph is reopened with `hnsw_min_recall = 0` and measured in a pass of its own
//!   (`embedded_hnsw_forced`), so that both HNSW implementations are compared too.
//!
//! Needs a PostgreSQL server with pgvector: `ORKEON_TEST_PG_URL`, the password in the variable
//! `ORKEON_TEST_PG_PASSWORD` (`scripts/test-postgres start` starts one and prints both); without
//! the URL it prints `{"skipped": true, "reason": ...}`. Each size gets a fresh schema, dropped
//! at the end with `psql` (`$ORKEON_TEST_PG_BIN/psql`, else the PATH's), which also runs the
//! `ANALYZE`, the query plan and the index-usage checks; without psql those are skipped and the
//! emptied schema stays (named on stderr). Not part of `cargo test`.
//!
//! Run: `flock /tmp/orkeon-build.lock cargo bench -p orkeon --bench pg_vs_embedded`, with
//! `ORKEON_BENCH_SIZES` (`10000,100000`), `ORKEON_BENCH_QUERIES` (200) and
//! `ORKEON_BENCH_PROVIDERS` (`embedded,postgres`).

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use orkeon_knowledge::embed::CHUNK_TOKENS_KEY;
use orkeon_knowledge::settings::{PostgresSettings, StoreProvider, StoreSettings};
use orkeon_knowledge::store::{
    DocumentStore, EmbeddedStore, HybridFusion, SearchMode, SearchRequest, SourceRecord,
};
use orkeon_knowledge::types::{EmbeddingProfile, Metadata, StoredChunk};
use orkeon_store_postgres::PostgresStore;

use common::{Rng, env_usize, load_average, percentile, round1, round3};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const DIMENSIONS: usize = 384;
const TOPICS: usize = 300;
const SUBTOPICS: usize = 8;
const TOPIC_WORDS: usize = 24;
const SUBTOPIC_WORDS: usize = 8;
const COMMON_WORDS: usize = 600;
const MIN_WORDS: usize = 150;
const MAX_WORDS: usize = 250;
/// Shares of a chunk's words: its topic's, its sub-topic's, its second topic's (the rest common).
const TOPIC_SHARE: f64 = 0.35;
const SUBTOPIC_SHARE: f64 = 0.10;
const SECOND_SHARE: f64 = 0.10;
const SUBTOPIC_WEIGHT: f32 = 0.5;
const SECOND_TOPIC_MAX_WEIGHT: f64 = 0.4;
const NOISE_NORM: f32 = 0.35;
const CHUNKS_PER_SOURCE: usize = 500;
const WARMUP_QUERIES: usize = 10;
const K: usize = 10;
const COLLECTION: &str = "bench";
const PASSWORD_VAR: &str = "ORKEON_TEST_PG_PASSWORD";
/// The statement timeout of the bench's PostgreSQL store (a 500-chunk insert must never hit it).
const PG_STATEMENT_TIMEOUT_MS: u64 = 300_000;
const SEED: u64 = 0x0017_D0C5_5EED;
const QUERY_SEED: u64 = 0x0017_0E41_E500;
const WARMUP_SEED: u64 = 0x0017_3A43_0000;
const CONSONANTS: &[u8] = b"bdfgklmnprstvz";
const VOWELS: &[u8] = b"aiou";
const MODES: [(SearchMode, &str); 3] = [
    (SearchMode::Vector, "vector"),
    (SearchMode::Hybrid, "hybrid"),
    (SearchMode::Bm25, "bm25"),
];

/// A pseudo-word of `syllables` consonant-vowel syllables spelling `index` in base 56: distinct
/// indices give distinct words, and no word ends in `e`, `s` or `y` (stemmers leave them be).
fn pseudo_word(mut index: usize, syllables: usize) -> String {
    let base = CONSONANTS.len() * VOWELS.len();
    let mut word = String::with_capacity(2 * syllables);
    for _ in 0..syllables {
        let syllable = index % base;
        index /= base;
        word.push(CONSONANTS[syllable / VOWELS.len()] as char);
        word.push(VOWELS[syllable % VOWELS.len()] as char);
    }
    word
}

fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

fn random_unit(rng: &mut Rng) -> Vec<f32> {
    let mut vector: Vec<f32> = (0..DIMENSIONS).map(|_| rng.gaussian() as f32).collect();
    normalise(&mut vector);
    vector
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A generated query: its text, its (unit) vector and its topic.
struct Query {
    text: String,
    vector: Vec<f32>,
    topic: usize,
}

/// The deterministic topic model every chunk and query is drawn from.
struct Generator {
    topics: Vec<Vec<f32>>,
    subtopics: Vec<Vec<f32>>,
    topic_words: Vec<Vec<String>>,
    subtopic_words: Vec<Vec<String>>,
    common: Vec<String>,
    common_cdf: Vec<f64>,
}

impl Generator {
    fn new() -> Self {
        let mut rng = Rng(SEED);
        let topics = (0..TOPICS).map(|_| random_unit(&mut rng)).collect();
        let subtopics = (0..TOPICS * SUBTOPICS)
            .map(|_| random_unit(&mut rng))
            .collect();
        let topic_words = (0..TOPICS)
            .map(|t| {
                (0..TOPIC_WORDS)
                    .map(|j| pseudo_word(t * TOPIC_WORDS + j, 3))
                    .collect()
            })
            .collect();
        let subtopic_words = (0..TOPICS * SUBTOPICS)
            .map(|s| {
                (0..SUBTOPIC_WORDS)
                    .map(|j| pseudo_word(TOPICS * TOPIC_WORDS + s * SUBTOPIC_WORDS + j, 3))
                    .collect()
            })
            .collect();
        let common = (0..COMMON_WORDS).map(|i| pseudo_word(i, 2)).collect();
        let total: f64 = (1..=COMMON_WORDS).map(|r| 1.0 / r as f64).sum();
        let common_cdf = (1..=COMMON_WORDS)
            .scan(0.0, |acc, r| {
                *acc += 1.0 / r as f64 / total;
                Some(*acc)
            })
            .collect();
        Self {
            topics,
            subtopics,
            topic_words,
            subtopic_words,
            common,
            common_cdf,
        }
    }

    fn common_word(&self, rng: &mut Rng) -> &str {
        let u = rng.unit();
        let index = self.common_cdf.partition_point(|&c| c < u);
        &self.common[index.min(COMMON_WORDS - 1)]
    }

    /// normalise(topic + 0.5·sub-topic + w·second + noise).
    fn vector(
        &self,
        rng: &mut Rng,
        topic: usize,
        subtopic: usize,
        second: Option<(usize, f32)>,
    ) -> Vec<f32> {
        let sigma = NOISE_NORM / (DIMENSIONS as f32).sqrt();
        let t = &self.topics[topic];
        let s = &self.subtopics[topic * SUBTOPICS + subtopic];
        let mut vector: Vec<f32> = (0..DIMENSIONS)
            .map(|d| {
                let mut x = t[d] + SUBTOPIC_WEIGHT * s[d] + sigma * rng.gaussian() as f32;
                if let Some((other, weight)) = second {
                    x += weight * self.topics[other][d];
                }
                x
            })
            .collect();
        normalise(&mut vector);
        vector
    }

    /// Chunk `n` of every size: (topic, sub-topic, text, vector, words).
    fn chunk(&self, n: usize) -> (usize, usize, String, Vec<f32>, usize) {
        let mut rng = Rng(Rng(SEED ^ (n as u64).wrapping_mul(0xA24B_AED4_963E_E407)).next_u64());
        let topic = rng.below(TOPICS);
        let subtopic = rng.below(SUBTOPICS);
        let second = rng.below(TOPICS);
        let weight = (SECOND_TOPIC_MAX_WEIGHT * rng.unit()) as f32;
        let words = MIN_WORDS + rng.below(MAX_WORDS - MIN_WORDS + 1);
        let mut text = String::with_capacity(words * 7);
        let mut sentence_left = 0usize;
        for w in 0..words {
            let u = rng.unit();
            let word: &str = if u < TOPIC_SHARE {
                &self.topic_words[topic][rng.below(TOPIC_WORDS)]
            } else if u < TOPIC_SHARE + SUBTOPIC_SHARE {
                &self.subtopic_words[topic * SUBTOPICS + subtopic][rng.below(SUBTOPIC_WORDS)]
            } else if u < TOPIC_SHARE + SUBTOPIC_SHARE + SECOND_SHARE {
                &self.topic_words[second][rng.below(TOPIC_WORDS)]
            } else {
                self.common_word(&mut rng)
            };
            if sentence_left == 0 {
                if w > 0 {
                    text.push_str(". ");
                }
                sentence_left = 8 + rng.below(9);
                text.push(word.as_bytes()[0].to_ascii_uppercase() as char);
                text.push_str(&word[1..]);
            } else {
                text.push(' ');
                text.push_str(word);
            }
            sentence_left -= 1;
        }
        text.push('.');
        let vector = self.vector(&mut rng, topic, subtopic, Some((second, weight)));
        (topic, subtopic, text, vector, words)
    }

    fn query(&self, rng: &mut Rng) -> Query {
        let topic = rng.below(TOPICS);
        let subtopic = rng.below(SUBTOPICS);
        let words = &self.topic_words[topic];
        let first = rng.below(TOPIC_WORDS);
        let second = (first + 1 + rng.below(TOPIC_WORDS - 1)) % TOPIC_WORDS;
        let text = format!(
            "{} {} {}",
            words[first],
            words[second],
            self.subtopic_words[topic * SUBTOPICS + subtopic][rng.below(SUBTOPIC_WORDS)]
        );
        let vector = self.vector(rng, topic, subtopic, None);
        Query {
            text,
            vector,
            topic,
        }
    }

    /// The first `size` chunks, 500 per source, each source with its manifest entry.
    fn sources(
        &self,
        size: usize,
        profile: &EmbeddingProfile,
    ) -> Vec<(SourceRecord, Vec<StoredChunk>)> {
        (0..size)
            .step_by(CHUNKS_PER_SOURCE)
            .enumerate()
            .map(|(index, first)| {
                let source_id = format!("generated/source-{index:04}.txt");
                let count = CHUNKS_PER_SOURCE.min(size - first);
                let mut hasher = Sha256::new();
                let mut offset = 0;
                let chunks: Vec<StoredChunk> = (0..count)
                    .map(|ordinal| {
                        let n = first + ordinal;
                        let (topic, subtopic, text, vector, words) = self.chunk(n);
                        hasher.update(text.as_bytes());
                        let mut metadata = Metadata::new();
                        // An estimate: a pseudo-word is about two word pieces.
                        metadata.insert(CHUNK_TOKENS_KEY.into(), (2 * words).to_string());
                        metadata.insert("topic".into(), topic.to_string());
                        metadata.insert("subtopic".into(), subtopic.to_string());
                        let start = offset;
                        offset += text.len() + 2;
                        StoredChunk {
                            id: format!("g-{n:07}"),
                            source_id: source_id.clone(),
                            ordinal: ordinal as u32,
                            content_hash: hex::encode(Sha256::digest(text.as_bytes())),
                            start,
                            end: start + text.len(),
                            text,
                            metadata,
                            vector,
                        }
                    })
                    .collect();
                let record = SourceRecord {
                    source_id,
                    content_hash: hex::encode(hasher.finalize()),
                    loader: "generated".into(),
                    chunking: "generated:500-chunks-per-source".into(),
                    embedding_profile: profile.to_string(),
                    chunk_ids: chunks.iter().map(|c| c.id.clone()).collect(),
                    ingested_at: "2026-12-06T00:00:00Z".into(),
                    validation: "clean".into(),
                    stale: None,
                };
                (record, chunks)
            })
            .collect()
    }
}

/// The exact top-k chunk ids of every query (brute force over the generated vectors, chunks in
/// the outer loop so each vector is read once), and the mean top-1 and k-th cosines.
fn exact_top_k(
    sources: &[(SourceRecord, Vec<StoredChunk>)],
    queries: &[Query],
) -> (Vec<HashSet<String>>, f64, f64) {
    let mut best: Vec<Vec<(f32, &str)>> = vec![Vec::with_capacity(K + 1); queries.len()];
    for chunk in sources.iter().flat_map(|(_, chunks)| chunks) {
        for (query, top) in queries.iter().zip(best.iter_mut()) {
            let score = dot(&chunk.vector, &query.vector);
            if top.len() == K && top[K - 1].0 >= score {
                continue;
            }
            let at = top.partition_point(|&(s, _)| s >= score);
            top.insert(at, (score, chunk.id.as_str()));
            top.truncate(K);
        }
    }
    let mean = |f: fn(&[(f32, &str)]) -> f32| {
        best.iter().map(|t| f64::from(f(t))).sum::<f64>() / best.len().max(1) as f64
    };
    let top1 = mean(|t| t.first().map_or(f32::NAN, |x| x.0));
    let topk = mean(|t| t.last().map_or(f32::NAN, |x| x.0));
    let ids = best
        .iter()
        .map(|t| t.iter().map(|(_, id)| id.to_string()).collect())
        .collect();
    (ids, top1, topk)
}

/// `psql` against the bench's server (the password from `ORKEON_TEST_PG_PASSWORD`, passed in
/// the child's environment only).
struct Psql {
    bin: PathBuf,
    url: String,
}

impl Psql {
    fn find(url: &str) -> Option<Self> {
        let from_env =
            std::env::var_os("ORKEON_TEST_PG_BIN").map(|d| PathBuf::from(d).join("psql"));
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("psql"))
                .find(|p| p.is_file())
        });
        let bin = from_env.filter(|p| p.is_file()).or(on_path)?;
        Some(Self {
            bin,
            url: url.to_string(),
        })
    }

    /// Runs `statements` in one session; their unaligned, tuples-only output.
    fn run(&self, statements: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg(&self.url)
            .args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1"]);
        for statement in statements {
            cmd.arg("-c").arg(statement);
        }
        if let Ok(password) = std::env::var(PASSWORD_VAR) {
            cmd.env("PGPASSWORD", password);
        }
        let output = cmd.output().map_err(|e| format!("cannot run psql: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
        }
    }
}

/// A size's schema, dropped (with everything in it) when this goes out of scope, also on an
/// error; declared before the store so that the store's pool is closed first.
struct SchemaGuard<'a> {
    psql: Option<&'a Psql>,
    schema: String,
}

impl Drop for SchemaGuard<'_> {
    fn drop(&mut self) {
        let schema = &self.schema;
        match self.psql {
            // The name is ours (letters, digits, '_'): safe unquoted.
            Some(psql) => match psql.run(&[&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")]) {
                Ok(_) => eprintln!("postgres: dropped schema {schema}"),
                Err(e) => eprintln!("*** WARNING: could not drop schema {schema}: {e} ***"),
            },
            None => eprintln!(
                "*** WARNING: no psql found: schema {schema} is left in the database (its collection was dropped if the run got that far) ***"
            ),
        }
    }
}

fn pg_settings(url: &str, schema: &str) -> StoreSettings {
    StoreSettings {
        provider: StoreProvider::Postgres,
        postgres: PostgresSettings {
            url: Some(url.to_string()),
            password_env: std::env::var(PASSWORD_VAR)
                .is_ok()
                .then(|| PASSWORD_VAR.to_string()),
            statement_timeout_ms: PG_STATEMENT_TIMEOUT_MS,
            schema: schema.to_string(),
            ..PostgresSettings::default()
        },
        ..StoreSettings::default()
    }
}

/// Every source through `replace_source`, one call at a time; each call's wall time (s).
fn ingest(
    store: &dyn DocumentStore,
    sources: &[(SourceRecord, Vec<StoredChunk>)],
    label: &str,
) -> BenchResult<Vec<f64>> {
    let mut times = Vec::with_capacity(sources.len());
    let started = Instant::now();
    for (index, (record, chunks)) in sources.iter().enumerate() {
        let (record, chunks) = (record.clone(), chunks.clone());
        let call = Instant::now();
        store.replace_source(COLLECTION, record, chunks)?;
        times.push(call.elapsed().as_secs_f64());
        if (index + 1) % 20 == 0 || index + 1 == sources.len() {
            eprintln!(
                "{label}: {}/{} sources written ({:.1} s)",
                index + 1,
                sources.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(times)
}

fn ingest_summary(times: &[f64], chunks: usize) -> Map<String, Value> {
    let total: f64 = times.iter().sum();
    let ms: Vec<f64> = times.iter().map(|t| t * 1e3).collect();
    let mut out = Map::new();
    out.insert("replace_source_calls".into(), json!(times.len()));
    out.insert("total_s".into(), json!(round3(total)));
    out.insert(
        "per_source_p50_ms".into(),
        json!(round1(percentile(&ms, 0.5))),
    );
    out.insert(
        "per_source_p95_ms".into(),
        json!(round1(percentile(&ms, 0.95))),
    );
    out.insert(
        "per_source_max_ms".into(),
        json!(round1(ms.iter().copied().fold(0.0, f64::max))),
    );
    out.insert(
        "chunks_per_s".into(),
        json!((chunks as f64 / total).round()),
    );
    out
}

fn collection_status(store: &dyn DocumentStore) -> BenchResult<Value> {
    Ok(store
        .collections()?
        .into_iter()
        .find(|c| c.name == COLLECTION)
        .map(|c| serde_json::to_value(&c).unwrap_or_default())
        .unwrap_or(Value::Null))
}

fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_size(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

fn mib(bytes: u64) -> f64 {
    round1(bytes as f64 / (1024.0 * 1024.0))
}

/// Fills a fresh embedded store with HNSW off, closes it, and reopens it with the defaults
/// (one HNSW build at or above the threshold); the reopened store and the figures.
fn embedded_ingest(
    dir: &Path,
    sources: &[(SourceRecord, Vec<StoredChunk>)],
    profile: &EmbeddingProfile,
    chunks: usize,
) -> BenchResult<(EmbeddedStore, Value)> {
    let bulk = StoreSettings {
        hnsw_threshold: usize::MAX,
        ..StoreSettings::default()
    };
    let store = EmbeddedStore::open(dir, bulk)?;
    store.ensure_collection(COLLECTION, profile)?;
    let times = ingest(&store, sources, "embedded")?;
    let started = Instant::now();
    store.flush()?;
    drop(store);
    let close_s = started.elapsed().as_secs_f64();
    eprintln!("embedded: reopening with the default settings (vector index build)");
    let started = Instant::now();
    let store = EmbeddedStore::open(dir, StoreSettings::default())?;
    store.wait_for_index_builds();
    let ready_s = started.elapsed().as_secs_f64();
    let mut out = ingest_summary(&times, chunks);
    let total = out["total_s"].as_f64().unwrap_or(f64::NAN);
    out.insert("close_s".into(), json!(round3(close_s)));
    out.insert("index_ready_s".into(), json!(round3(ready_s)));
    out.insert(
        "ingest_plus_index_ready_s".into(),
        json!(round3(total + close_s + ready_s)),
    );
    out.insert("vector_index".into(), collection_status(&store)?);
    out.insert("data_dir_mib".into(), json!(mib(dir_size(dir))));
    out.insert(
        "how".into(),
        json!("replace_source into a fresh data dir opened with hnsw_threshold = ∞ (sled commit + flush and a tantivy commit per call; no HNSW work during the writes); close_s = flush + close; index_ready_s = reopen with the default settings (sled read back into the exact vector set, tantivy opened) + wait_for_index_builds (one HNSW build with its recall calibration, only at or above hnsw_threshold)"),
    );
    Ok((store, Value::Object(out)))
}

/// Fills a fresh PostgreSQL schema; the store and the figures.
fn postgres_ingest(
    settings: &StoreSettings,
    sources: &[(SourceRecord, Vec<StoredChunk>)],
    profile: &EmbeddingProfile,
    chunks: usize,
    psql: Option<&Psql>,
) -> BenchResult<(PostgresStore, Value)> {
    let store = PostgresStore::open(settings)?;
    store.ensure_collection(COLLECTION, profile)?;
    let times = ingest(&store, sources, "postgres")?;
    let mut out = ingest_summary(&times, chunks);
    let total = out["total_s"].as_f64().unwrap_or(f64::NAN);
    out.insert("index_ready_s".into(), json!(0.0));
    out.insert("ingest_plus_index_ready_s".into(), json!(round3(total)));
    let schema = &settings.postgres.schema;
    if let Some(psql) = psql {
        let started = Instant::now();
        match psql.run(&[&format!("ANALYZE {schema}.chunks, {schema}.sources")]) {
            Ok(_) => out.insert(
                "analyze_s".into(),
                json!(round3(started.elapsed().as_secs_f64())),
            ),
            Err(e) => out.insert("analyze_error".into(), json!(e)),
        };
        let size = psql
            .run(&[&format!(
                "SELECT pg_total_relation_size('{schema}.chunks') + pg_total_relation_size('{schema}.sources')"
            )])
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        out.insert("tables_mib".into(), json!(size.map(mib)));
    }
    out.insert("vector_index".into(), collection_status(&store)?);
    out.insert(
        "how".into(),
        json!("replace_source into a fresh schema (one transaction per call: the manifest, 500 chunks in one INSERT ... SELECT unnest, the counts); the collection's HNSW index (m 16, ef_construction 100) exists from ensure_collection and is maintained inside every insert, with the generated tsvector and its GIN index, so nothing is left to build: index_ready_s = 0 (whether searches use the graph depends on hnsw_threshold, as for the embedded store); analyze_s = ANALYZE of the tables afterwards (as autovacuum would), not counted in the ingest; tables_mib includes their indexes and TOAST"),
    );
    Ok((store, Value::Object(out)))
}

fn request(mode: SearchMode, query: &Query) -> SearchRequest {
    SearchRequest {
        mode,
        text: (mode != SearchMode::Vector).then(|| query.text.clone()),
        vector: (mode != SearchMode::Bm25).then(|| query.vector.clone()),
        k: K,
        rrf_k: StoreSettings::default().rrf_k,
        fusion: HybridFusion::default(),
    }
}

/// One provider's measurements of one mode.
#[derive(Default)]
struct Series {
    ms: Vec<f64>,
    recall: Vec<f64>,
    topic_precision: Vec<f64>,
    results: Vec<Vec<String>>,
}

/// Every query in every mode on every store, one call at a time (the stores alternating first
/// per query); per store and mode, the series.
fn retrieval(
    stores: &[(&str, &dyn DocumentStore)],
    warmup: &[Query],
    queries: &[Query],
    exact: &[HashSet<String>],
) -> BenchResult<Vec<Vec<Series>>> {
    let mut series: Vec<Vec<Series>> = stores
        .iter()
        .map(|_| MODES.iter().map(|_| Series::default()).collect())
        .collect();
    for query in warmup {
        for (mode, _) in MODES {
            let request = request(mode, query);
            for (_, store) in stores {
                store.search(COLLECTION, &request)?;
            }
        }
    }
    for (q, query) in queries.iter().enumerate() {
        for (m, (mode, _)) in MODES.iter().enumerate() {
            let request = request(*mode, query);
            let mut order: Vec<usize> = (0..stores.len()).collect();
            if q % 2 == 1 {
                order.reverse();
            }
            for s in order {
                let started = Instant::now();
                let hits = stores[s].1.search(COLLECTION, &request)?;
                let elapsed = started.elapsed().as_secs_f64() * 1e3;
                let entry = &mut series[s][m];
                entry.ms.push(elapsed);
                let on_topic = hits
                    .iter()
                    .filter(|h| h.chunk.metadata.get("topic") == Some(&query.topic.to_string()))
                    .count();
                entry
                    .topic_precision
                    .push(on_topic as f64 / hits.len().max(1) as f64);
                if *mode == SearchMode::Vector {
                    let found = hits
                        .iter()
                        .filter(|h| exact[q].contains(&h.chunk.id))
                        .count();
                    entry.recall.push(found as f64 / K as f64);
                }
                entry
                    .results
                    .push(hits.into_iter().map(|h| h.chunk.id).collect());
            }
        }
        if (q + 1) % 50 == 0 {
            eprintln!("retrieval: {}/{} queries", q + 1, queries.len());
        }
    }
    Ok(series)
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn series_json(series: &Series) -> Value {
    let mut out = Map::new();
    out.insert("queries".into(), json!(series.ms.len()));
    out.insert("p50_ms".into(), json!(round3(percentile(&series.ms, 0.5))));
    out.insert("p95_ms".into(), json!(round3(percentile(&series.ms, 0.95))));
    out.insert("mean_ms".into(), json!(round3(mean(&series.ms))));
    if !series.recall.is_empty() {
        let recall = mean(&series.recall);
        out.insert(
            "recall_at_10".into(),
            json!((recall * 10_000.0).round() / 10_000.0),
        );
        out.insert(
            "recall_at_10_min".into(),
            json!(round3(series.recall.iter().copied().fold(1.0, f64::min))),
        );
    }
    out.insert(
        "topic_precision_at_10".into(),
        json!(round3(mean(&series.topic_precision))),
    );
    out.insert(
        "results_per_query".into(),
        json!(round3(
            series.results.iter().map(|r| r.len() as f64).sum::<f64>()
                / series.results.len().max(1) as f64
        )),
    );
    Value::Object(out)
}

/// The plan PostgreSQL chooses for the store's vector leg (the same SQL as `documents.rs`, the
/// query vector as a literal), and which of the schema's indexes the measured searches used.
fn postgres_plan(psql: &Psql, schema: &str, hnsw: bool, query: &Query) -> Value {
    let lookup = psql.run(&[
        &format!("SELECT id FROM {schema}.collections WHERE name = '{COLLECTION}'"),
        "SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'vector'",
    ]);
    let (id, extension_schema) = match lookup {
        Ok(out) => {
            let mut lines = out.lines();
            (
                lines.next().unwrap_or_default().trim().to_string(),
                lines.next().unwrap_or("public").trim().to_string(),
            )
        }
        Err(e) => return json!({"error": e}),
    };
    let literal = format!(
        "'[{}]'::vector",
        query
            .vector
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let sql = if hnsw {
        format!(
            "SELECT c.id, c.embedding::vector({DIMENSIONS}) <=> {literal} AS distance
             FROM chunks c WHERE c.collection_id = {id}
             ORDER BY c.embedding::vector({DIMENSIONS}) <=> {literal} LIMIT {K}"
        )
    } else {
        format!(
            "SELECT c.id, c.embedding <=> {literal} AS distance
             FROM chunks c WHERE c.collection_id = {id}
             ORDER BY distance, c.id LIMIT {K}"
        )
    };
    let plan = psql.run(&[
        &format!("SET search_path = {schema}, {extension_schema}"),
        &format!(
            "SET hnsw.ef_search = {}",
            StoreSettings::default().hnsw_ef_search
        ),
        "SET hnsw.iterative_scan = strict_order",
        &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) {sql}"),
    ]);
    // A backend reports its index scans within ~10 s of going idle.
    std::thread::sleep(Duration::from_secs(11));
    let usage = psql.run(&[&format!(
        "SELECT indexrelname || '=' || idx_scan FROM pg_stat_user_indexes
         WHERE schemaname = '{schema}' AND relname = 'chunks' ORDER BY indexrelname"
    )]);
    let index = format!("chunks_embedding_{id}");
    match plan {
        Ok(plan) => json!({
            "vector_leg_sql": if hnsw { "hnsw (index expression + predicate repeated)" } else { "exact (ORDER BY distance, id)" },
            "plan": plan.lines().map(without_vector_literals).collect::<Vec<_>>(),
            "uses_hnsw_index": plan.contains(&index),
            "index_scans_after_retrieval": usage
                .map(|u| u.lines().map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_default(),
        }),
        Err(e) => json!({"error": e}),
    }
}

/// A plan line with each `'[…]'` vector literal shortened.
fn without_vector_literals(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line.trim_end();
    while let Some(start) = rest.find("'[") {
        let Some(len) = rest[start..].find("]'") else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(&format!("'[{DIMENSIONS} floats]'"));
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

fn ratio(a: &Value, b: &Value) -> Value {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => json!(round3(a / b)),
        _ => Value::Null,
    }
}

/// Mean share of the top-10 two stores' results have in common, per query.
fn agreement(a: &Series, b: &Series) -> f64 {
    let shares: Vec<f64> = a
        .results
        .iter()
        .zip(&b.results)
        .map(|(x, y)| {
            let x: HashSet<&String> = x.iter().collect();
            y.iter().filter(|id| x.contains(id)).count() as f64 / K as f64
        })
        .collect();
    mean(&shares)
}

struct Context<'a> {
    generator: &'a Generator,
    profile: EmbeddingProfile,
    warmup: Vec<Query>,
    queries: Vec<Query>,
    embedded: bool,
    postgres: Option<&'a str>,
    psql: Option<&'a Psql>,
}

fn run_size(ctx: &Context<'_>, size: usize) -> BenchResult<Value> {
    eprintln!("== {size} chunks: generating");
    let started = Instant::now();
    let sources = ctx.generator.sources(size, &ctx.profile);
    let mut out = Map::new();
    out.insert("chunks".into(), json!(size));
    out.insert("sources".into(), json!(sources.len()));
    out.insert(
        "text_mib".into(),
        json!(mib(sources
            .iter()
            .flat_map(|(_, c)| c)
            .map(|c| c.text.len() as u64)
            .sum())),
    );
    out.insert(
        "generate_s".into(),
        json!(round1(started.elapsed().as_secs_f64())),
    );
    let mut ingest_out = Map::new();
    out.insert("load_average_before_ingest".into(), load_average());

    let work = tempfile::tempdir()?;
    let mut embedded = if ctx.embedded {
        eprintln!("embedded: ingesting {size} chunks");
        let (store, summary) = embedded_ingest(work.path(), &sources, &ctx.profile, size)?;
        ingest_out.insert("embedded".into(), summary);
        Some(store)
    } else {
        None
    };

    let schema = format!("bench_pg_vs_embedded_{}_{size}", std::process::id());
    let _guard = ctx.postgres.map(|_| SchemaGuard {
        psql: ctx.psql,
        schema: schema.clone(),
    });
    let postgres = match ctx.postgres {
        Some(url) => {
            eprintln!("postgres: ingesting {size} chunks into schema {schema}");
            let settings = pg_settings(url, &schema);
            let (store, summary) =
                postgres_ingest(&settings, &sources, &ctx.profile, size, ctx.psql)?;
            ingest_out.insert("postgres".into(), summary);
            Some(store)
        }
        None => None,
    };
    out.insert("load_average_after_ingest".into(), load_average());

    eprintln!("exact search of {} queries", ctx.queries.len());
    let started = Instant::now();
    let (exact, top1, top10) = exact_top_k(&sources, &ctx.queries);
    out.insert(
        "exact_search".into(),
        json!({
            "brute_force_s": round1(started.elapsed().as_secs_f64()),
            "mean_top1_cosine": round3(top1),
            "mean_10th_cosine": round3(top10),
        }),
    );
    drop(sources);

    let mut stores: Vec<(&str, &dyn DocumentStore)> = Vec::new();
    if let Some(store) = &embedded {
        stores.push(("embedded", store));
    }
    if let Some(store) = &postgres {
        stores.push(("postgres", store));
    }
    eprintln!(
        "retrieval: {} queries x {} modes x {} providers",
        ctx.queries.len(),
        MODES.len(),
        stores.len()
    );
    let series = retrieval(&stores, &ctx.warmup, &ctx.queries, &exact)?;
    let mut retrieval_out = Map::new();
    for ((name, _), per_mode) in stores.iter().zip(&series) {
        let modes: Map<String, Value> = MODES
            .iter()
            .zip(per_mode)
            .map(|((_, mode), s)| (mode.to_string(), series_json(s)))
            .collect();
        retrieval_out.insert(name.to_string(), Value::Object(modes));
    }
    if series.len() == 2 {
        let shares: Map<String, Value> = MODES
            .iter()
            .enumerate()
            .map(|(m, (_, mode))| {
                (
                    mode.to_string(),
                    json!(round3(agreement(&series[0][m], &series[1][m]))),
                )
            })
            .collect();
        retrieval_out.insert(
            "top10_agreement_postgres_embedded".into(),
            Value::Object(shares),
        );
    }
    drop(stores);
    out.insert("load_average_after_retrieval".into(), load_average());

    // The embedded store keeps scanning exactly when its graph's calibrated recall falls short
    // of hnsw_min_recall: then the same graph once more, served anyway, in a pass of its own.
    let serving = ingest_out
        .get("embedded")
        .map(|e| e["vector_index"]["vector_index"]["serving"].clone());
    if size >= StoreSettings::default().hnsw_threshold
        && serving.is_some_and(|s| s != "hnsw")
        && let Some(store) = embedded.take()
    {
        drop(store);
        eprintln!("embedded: reopening with hnsw_min_recall = 0 (the saved graph, served anyway)");
        let forced_settings = StoreSettings {
            hnsw_min_recall: 0.0,
            ..StoreSettings::default()
        };
        let started = Instant::now();
        let forced = EmbeddedStore::open(work.path(), forced_settings)?;
        forced.wait_for_index_builds();
        let reopen_s = started.elapsed().as_secs_f64();
        let status = collection_status(&forced)?;
        let series = retrieval(
            &[("embedded_hnsw_forced", &forced)],
            &ctx.warmup,
            &ctx.queries,
            &exact,
        )?;
        let mut modes: Map<String, Value> = MODES
            .iter()
            .zip(&series[0])
            .map(|((_, mode), s)| (mode.to_string(), series_json(s)))
            .collect();
        modes.insert("reopen_s".into(), json!(round3(reopen_s)));
        modes.insert("vector_index".into(), status["vector_index"].clone());
        modes.insert(
            "note".into(),
            json!("the default embedded store serves this collection by exact scan (its HNSW graph's calibrated recall@10 is below hnsw_min_recall); this is the same saved graph reopened with hnsw_min_recall = 0, measured in a separate pass right after the main one (not interleaved)"),
        );
        retrieval_out.insert("embedded_hnsw_forced".into(), Value::Object(modes));
        embedded = Some(forced);
    }

    if let (Some(store), Some(psql)) = (&postgres, ctx.psql) {
        let hnsw = collection_status(store)?["vector_index"]["serving"] == "hnsw";
        out.insert(
            "postgres_plan".into(),
            postgres_plan(psql, &schema, hnsw, &ctx.queries[0]),
        );
    }

    if let (Some(e), Some(p)) = (ingest_out.get("embedded"), ingest_out.get("postgres")) {
        let mut ratios = Map::new();
        for (key, name) in [
            ("total_s", "ingest_total_s"),
            ("ingest_plus_index_ready_s", "ingest_plus_index_ready_s"),
            ("per_source_p50_ms", "ingest_per_source_p50_ms"),
            ("per_source_p95_ms", "ingest_per_source_p95_ms"),
        ] {
            ratios.insert(name.into(), ratio(&p[key], &e[key]));
        }
        for (_, mode) in MODES {
            for key in ["p50_ms", "p95_ms"] {
                ratios.insert(
                    format!("{mode}_{key}"),
                    ratio(
                        &retrieval_out["postgres"][mode][key],
                        &retrieval_out["embedded"][mode][key],
                    ),
                );
            }
        }
        if retrieval_out.contains_key("embedded_hnsw_forced") {
            for (_, mode) in MODES {
                ratios.insert(
                    format!("{mode}_p50_ms_vs_embedded_hnsw_forced"),
                    ratio(
                        &retrieval_out["postgres"][mode]["p50_ms"],
                        &retrieval_out["embedded_hnsw_forced"][mode]["p50_ms"],
                    ),
                );
            }
        }
        out.insert(
            "ratios_postgres_over_embedded".into(),
            Value::Object(ratios),
        );
    }
    out.insert("ingest".into(), Value::Object(ingest_out));
    out.insert("retrieval".into(), Value::Object(retrieval_out));

    if let Some(store) = &postgres
        && let Err(e) = store.drop_collection(COLLECTION)
    {
        eprintln!("postgres: dropping the collection failed: {e}");
    }
    drop(postgres);
    drop(embedded);
    Ok(Value::Object(out))
}

/// Now in UTC, RFC 3339 (days to civil date: Howard Hinnant's algorithm).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

fn cpu_model() -> Value {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| json!(v.trim()))
        })
        .unwrap_or(Value::Null)
}

fn postgres_environment(url: &str, psql: Option<&Psql>) -> Value {
    let mut out = Map::new();
    out.insert(
        "server".into(),
        json!(orkeon_store_postgres::redact_url(url)),
    );
    match psql {
        Some(psql) => {
            let settings = psql.run(&[
                "SHOW server_version",
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
                "SHOW shared_buffers",
                "SHOW work_mem",
                "SHOW maintenance_work_mem",
                "SHOW synchronous_commit",
                "SHOW max_parallel_workers_per_gather",
            ]);
            match settings {
                Ok(lines) => {
                    let keys = [
                        "server_version",
                        "pgvector",
                        "shared_buffers",
                        "work_mem",
                        "maintenance_work_mem",
                        "synchronous_commit",
                        "max_parallel_workers_per_gather",
                    ];
                    for (key, value) in keys.iter().zip(lines.lines()) {
                        out.insert(key.to_string(), json!(value.trim()));
                    }
                }
                Err(e) => {
                    out.insert("psql_error".into(), json!(e));
                }
            }
        }
        None => {
            out.insert(
                "psql".into(),
                json!("not found: no ANALYZE, plan or version checks, schemas not dropped"),
            );
        }
    }
    Value::Object(out)
}

/// One row per size and provider with the headline figures (the details are under `sizes`).
fn summary(sizes: &[Value]) -> Value {
    let mut rows = Vec::new();
    for size in sizes {
        for provider in ["embedded", "embedded_hnsw_forced", "postgres"] {
            let forced = provider == "embedded_hnsw_forced";
            let ingest = &size["ingest"][if forced { "embedded" } else { provider }];
            let retrieval = &size["retrieval"][provider];
            if ingest.is_null() || retrieval.is_null() {
                continue;
            }
            let serving = if forced {
                &retrieval["vector_index"]["serving"]
            } else {
                &ingest["vector_index"]["vector_index"]["serving"]
            };
            rows.push(json!({
                "chunks": size["chunks"],
                "provider": provider,
                "ingest_total_s": ingest["total_s"],
                "ingest_per_source_p50_ms": ingest["per_source_p50_ms"],
                "ingest_per_source_p95_ms": ingest["per_source_p95_ms"],
                "chunks_per_s": ingest["chunks_per_s"],
                "index_ready_s": ingest["index_ready_s"],
                "ingest_plus_index_ready_s": ingest["ingest_plus_index_ready_s"],
                "vector_serving": serving,
                "vector_p50_ms": retrieval["vector"]["p50_ms"],
                "vector_p95_ms": retrieval["vector"]["p95_ms"],
                "hybrid_p50_ms": retrieval["hybrid"]["p50_ms"],
                "hybrid_p95_ms": retrieval["hybrid"]["p95_ms"],
                "bm25_p50_ms": retrieval["bm25"]["p50_ms"],
                "bm25_p95_ms": retrieval["bm25"]["p95_ms"],
                "recall_at_10": retrieval["vector"]["recall_at_10"],
            }));
        }
    }
    Value::Array(rows)
}

fn skip(reason: &str) -> BenchResult<()> {
    eprintln!("\n*** SKIPPED pg_vs_embedded: {reason} ***\n");
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "bench": "pg_vs_embedded",
            "skipped": true,
            "reason": reason,
            "measured": "nothing",
        }))?
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    let list = |name: &str, default: &str| -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| default.into())
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    };
    let providers = list("ORKEON_BENCH_PROVIDERS", "embedded,postgres");
    let mut sizes = Vec::new();
    for size in list("ORKEON_BENCH_SIZES", "10000,100000") {
        match size.parse::<usize>() {
            Ok(n) if n > 0 => sizes.push(n),
            _ => {
                return Err(
                    format!("ORKEON_BENCH_SIZES: '{size}' is not a positive number").into(),
                );
            }
        }
    }
    let query_count = env_usize("ORKEON_BENCH_QUERIES", 200).max(1);
    let wants_postgres = providers.iter().any(|p| p == "postgres");
    let wants_embedded = providers.iter().any(|p| p == "embedded");
    let url = std::env::var("ORKEON_TEST_PG_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    if wants_postgres && url.is_none() {
        return skip(
            "ORKEON_TEST_PG_URL is not set (eval \"$(scripts/test-postgres start)\" starts a PostgreSQL server with pgvector and prints it)",
        );
    }
    let url = url.filter(|_| wants_postgres);
    let psql = url.as_deref().and_then(Psql::find);
    if url.is_some() && psql.is_none() {
        eprintln!(
            "*** WARNING: no psql (ORKEON_TEST_PG_BIN or PATH): no ANALYZE or plan check, and the bench schemas stay in the database ***"
        );
    }

    let started = Instant::now();
    let generator = Generator::new();
    let mut rng = Rng(WARMUP_SEED);
    let warmup = (0..WARMUP_QUERIES)
        .map(|_| generator.query(&mut rng))
        .collect();
    let mut rng = Rng(QUERY_SEED);
    let queries = (0..query_count)
        .map(|_| generator.query(&mut rng))
        .collect();
    let defaults = StoreSettings::default();
    let ctx = Context {
        generator: &generator,
        profile: EmbeddingProfile {
            provider: "generated".into(),
            model: "topic-mixture".into(),
            dimensions: DIMENSIONS,
        },
        warmup,
        queries,
        embedded: wants_embedded,
        postgres: url.as_deref(),
        psql: psql.as_ref(),
    };

    let mut out = Map::new();
    out.insert("bench".into(), json!("pg_vs_embedded"));
    out.insert("issue".into(), json!(17));
    out.insert(
        "environment".into(),
        json!({
            "date": utc_now(),
            "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "cpu": cpu_model(),
            "load_average_at_start": load_average(),
            "postgres": url.as_deref().map(|u| postgres_environment(u, psql.as_ref())),
            "note": "one process drives both providers one call at a time; the PostgreSQL server runs on the same machine and shares its cores (and other agents' builds may too): compare the ratios, not the absolute times",
        }),
    );
    out.insert(
        "how".into(),
        json!({
            "data": format!(
                "model-free and deterministic (splitmix64): {DIMENSIONS}-dimensional unit vectors, {TOPICS} random topic centroids with {SUBTOPICS} sub-topic directions each; chunk = normalise(topic + {SUBTOPIC_WEIGHT}·sub-topic + w·second topic (w uniform in [0, {SECOND_TOPIC_MAX_WEIGHT})) + Gaussian noise of norm ≈ {NOISE_NORM}); text = {MIN_WORDS}-{MAX_WORDS} pseudo-words (sentences of 8-16), {}% from the topic's {TOPIC_WORDS} words, {}% from the sub-topic's {SUBTOPIC_WORDS}, {}% from the second topic's, the rest from {COMMON_WORDS} common words with Zipf frequencies; metadata: tokens (an estimate: 2 per word), topic, sub-topic; {CHUNKS_PER_SOURCE} chunks per source; chunk n is the same at every size",
                TOPIC_SHARE * 100.0, SUBTOPIC_SHARE * 100.0, SECOND_SHARE * 100.0
            ),
            "queries": format!(
                "{WARMUP_QUERIES} warm-up (not measured) + {query_count} measured, the same at every size: text = 2 words of a random topic and 1 of one of its sub-topics; vector = normalise(topic + {SUBTOPIC_WEIGHT}·sub-topic + noise of norm ≈ {NOISE_NORM})"
            ),
            "ingest": "each provider on its own: replace_source per source (one transaction each), timed call by call; see each provider's own how",
            "retrieval": format!(
                "DocumentStore::search, k = {K}, one call at a time from one thread, each query in modes vector, hybrid (RRF, rrf_k {}) and bm25, the providers alternating first/second per query; p50/p95 over the measured queries; recall_at_10 = share of the exact top-10 (brute force over the generated vectors, cosine) in the vector mode's results; topic_precision_at_10 = share of results of the query's topic; top10_agreement = share of the top-10 both providers return",
                defaults.rrf_k
            ),
        }),
    );
    out.insert(
        "settings".into(),
        json!({
            "store": "StoreSettings::default() for both (embedded: after the bulk fill)",
            "hnsw_threshold": defaults.hnsw_threshold,
            "hnsw_ef_construction": defaults.hnsw_ef_construction,
            "hnsw_ef_search": defaults.hnsw_ef_search,
            "hnsw_min_recall": defaults.hnsw_min_recall,
            "hnsw_calibration_queries": defaults.hnsw_calibration_queries,
            "rrf_k": defaults.rrf_k,
            "postgres_pool_size": PostgresSettings::default().pool_size,
            "postgres_statement_timeout_ms": PG_STATEMENT_TIMEOUT_MS,
            "providers": providers,
        }),
    );

    let mut results = Vec::new();
    for &size in &sizes {
        results.push(run_size(&ctx, size)?);
    }
    out.insert("summary".into(), summary(&results));
    out.insert("sizes".into(), Value::Array(results));
    out.insert("load_average_at_end".into(), load_average());
    out.insert(
        "bench_wall_s".into(),
        json!(round1(started.elapsed().as_secs_f64())),
    );
    println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    Ok(())
}
