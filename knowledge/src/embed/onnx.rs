//! The local embedder: an ONNX encoder model and its `tokenizer.json`, run through ONNX Runtime.
//!
//! Texts are tokenized without the tokenizer file's own padding/truncation, cut to the model's
//! maximum (keeping `[SEP]`), sorted by token length and grouped into batches of
//! `embeddings.document_batch_size`, each padded to its longest member; the output is pooled
//! (CLS or masked mean), L2-normalised and put back in input order. Queries get the model's
//! prefix and run alone (a batch of one: with dynamic int8 quantisation a vector depends
//! slightly on its batch-mates).
//!
//! Sessions: queries run on one session of `embeddings.threads` intra-op threads (one text, so
//! threads are what cut its latency). Documents run on a pool of their own, one session per
//! `embeddings.document_threads` cores: on a small machine independent single-thread sessions
//! keep every core busy where one multi-threaded session waits at each operator's barrier. With
//! `document_threads` equal to `threads`, documents share the query session. Each pool loads
//! when it is first needed (a process that runs crews warms the query session at start, see
//! [`Embedder::prepare_for_queries`]): `orkeon rag ingest` never loads the query session, and a
//! server that only answers queries never holds the document sessions.
//!
//! Model parameters: when the folder's name is a catalogue entry, pooling, query prefix and
//! maximum length come from the catalogue. Otherwise pooling comes from `pooling_config.json`
//! (or `1_Pooling/config.json`): `pooling_mode_mean_tokens` → mean, `pooling_mode_cls_token` →
//! CLS; without such a file, CLS. The maximum length is `sentence_bert_config.json`'s
//! `max_seq_length`, else `tokenizer_config.json`'s `model_max_length`, else `config.json`'s
//! `max_position_embeddings`, capped at 512 (and 512 when none says). No query prefix.
//! Dimensions: a catalogue model's come from the catalogue (and are checked against the graph's
//! declared output when a pool loads); any other folder's come from the graph's output (or a
//! probe run when it is dynamic), so its query session loads at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::models::{self, ModelKind, Pooling};
use super::onnx_proto::{GraphEdits, ParsedModel};
use super::session_pool::{
    BatchOutput, ModelGraph, PaddedBatch, SessionPool, length_sorted_batches,
};
use super::tokenizer::{HfTokenCounter, TokenSequence};
use super::{EmbedError, EmbedStats, Embedder, TokenCounter};
use crate::settings::EmbeddingSettings;
use crate::types::EmbeddingProfile;

/// Longest input any BERT-style model here accepts.
const POSITION_LIMIT: usize = 512;

/// Pooling, prefix and length of a model folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingModelConfig {
    pub pooling: Pooling,
    pub query_prefix: Option<String>,
    pub max_tokens: usize,
    /// Vector size, when known without loading the graph (catalogue models).
    pub dimensions: Option<usize>,
}

impl EmbeddingModelConfig {
    /// Applies the rule of the module documentation to `dir`.
    pub fn for_folder(dir: &Path) -> Result<Self, EmbedError> {
        let name = folder_name(dir);
        if let Some(spec) = models::find_spec(&name) {
            return match spec.kind {
                ModelKind::Embedding {
                    pooling,
                    query_prefix,
                    max_tokens,
                    dimensions,
                } => Ok(Self {
                    pooling,
                    query_prefix: query_prefix.map(str::to_string),
                    max_tokens,
                    dimensions: Some(dimensions),
                }),
                ModelKind::CrossEncoder { .. } => Err(EmbedError::Setup(format!(
                    "{name} is a cross-encoder (a reranker), not an embedding model; set \
                     embeddings.model to bge-small-en-v1.5 or all-MiniLM-L6-v2"
                ))),
            };
        }
        Ok(Self {
            pooling: pooling_from_files(dir)?,
            query_prefix: None,
            max_tokens: max_tokens_from_files(dir)?,
            dimensions: None,
        })
    }
}

fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>, EmbedError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| EmbedError::Setup(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EmbedError::Setup(format!("{} is not valid JSON: {e}", path.display())))
}

fn pooling_from_files(dir: &Path) -> Result<Pooling, EmbedError> {
    for candidate in ["pooling_config.json", "1_Pooling/config.json"] {
        let path = dir.join(candidate);
        if let Some(config) = read_json(&path)? {
            let flag =
                |key: &str| config.get(key).and_then(serde_json::Value::as_bool) == Some(true);
            if flag("pooling_mode_mean_tokens") {
                return Ok(Pooling::Mean);
            }
            if flag("pooling_mode_cls_token") {
                return Ok(Pooling::Cls);
            }
            return Err(EmbedError::Setup(format!(
                "{} asks for a pooling this program does not implement (supported: \
                 pooling_mode_cls_token, pooling_mode_mean_tokens)",
                path.display()
            )));
        }
    }
    Ok(Pooling::Cls)
}

fn max_tokens_from_files(dir: &Path) -> Result<usize, EmbedError> {
    let sources = [
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
        ("config.json", "max_position_embeddings"),
    ];
    for (file, key) in sources {
        if let Some(config) = read_json(&dir.join(file))?
            && let Some(value) = config.get(key).and_then(serde_json::Value::as_u64)
        {
            let value = usize::try_from(value).unwrap_or(POSITION_LIMIT);
            return Ok(value.clamp(2, POSITION_LIMIT));
        }
    }
    Ok(POSITION_LIMIT)
}

/// Normalises `vector` to unit length in place (a zero vector stays zero).
pub(crate) fn l2_normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in vector.iter_mut() {
            *x /= norm;
        }
    }
}

/// The `rows` vectors of `dims` values in `output`, each L2-normalised.
fn normalised_rows(output: &BatchOutput, rows: usize, dims: usize) -> Vec<Vec<f32>> {
    (0..rows)
        .map(|r| {
            let mut v = output.data[r * dims..(r + 1) * dims].to_vec();
            l2_normalise(&mut v);
            v
        })
        .collect()
}

/// Turns one batch's output into pooled, normalised vectors, one per row.
fn pool_batch(
    output: &BatchOutput,
    batch_mask: &[i64],
    pooling: Pooling,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    match output.shape.as_slice() {
        // Already one vector per row (a graph with pooling built in).
        [rows, dims] => Ok(normalised_rows(output, *rows, *dims)),
        // A graph whose last layer computes [CLS] alone (`cls_graph`): one row per input.
        [rows, 1, dims] if pooling == Pooling::Cls => Ok(normalised_rows(output, *rows, *dims)),
        [rows, seq, dims] => {
            let (rows, seq, dims) = (*rows, *seq, *dims);
            if batch_mask.len() != rows * seq {
                return Err(EmbedError::Inference(format!(
                    "model output is [{rows}, {seq}, {dims}] but the batch was {} tokens",
                    batch_mask.len()
                )));
            }
            let mut vectors = Vec::with_capacity(rows);
            for r in 0..rows {
                let row = &output.data[r * seq * dims..(r + 1) * seq * dims];
                let mut v = match pooling {
                    Pooling::Cls => row[..dims].to_vec(),
                    Pooling::Mean => {
                        let mut sum = vec![0f32; dims];
                        let mut count = 0f32;
                        for t in 0..seq {
                            if batch_mask[r * seq + t] != 0 {
                                count += 1.0;
                                for (s, x) in sum.iter_mut().zip(&row[t * dims..(t + 1) * dims]) {
                                    *s += x;
                                }
                            }
                        }
                        let count = count.max(1.0);
                        sum.iter_mut().for_each(|s| *s /= count);
                        sum
                    }
                };
                l2_normalise(&mut v);
                vectors.push(v);
            }
            Ok(vectors)
        }
        other => Err(EmbedError::Inference(format!(
            "unexpected model output shape {other:?} (expected [batch, seq, dims] or [batch, dims])"
        ))),
    }
}

/// Output names an embedding graph may use (first match wins).
const EMBEDDING_OUTPUTS: &[&str] = &[
    "last_hidden_state",
    "token_embeddings",
    "sentence_embedding",
];

/// Where documents are embedded.
enum DocumentSessions {
    /// On the query session (`embeddings.document_threads` equal to `threads`).
    Queries,
    /// On sessions of their own, loaded on first use (`prepare_for_documents` or the first
    /// document batch).
    Own(tokio::sync::OnceCell<SessionPool>),
}

/// ONNX Runtime graph optimisations the embedder's sessions leave out. `SkipLayerNormFusion`
/// fuses a residual `Add` with the `LayerNormalization` after it. In bge-small's graph the mask
/// additions keep it from applying; once `unmasked_graph` removes them it fuses all 24 pairs,
/// and ONNX Runtime 1.31's CPU kernel for the fused node is much slower on this project's 2-core
/// Xeon (AVX-512) than the two apart: 15.7 ms against 2.7 ms of a 258-token text on one thread.
/// Unfused, the vectors equal the unmodified graph's (the removed additions added zeros).
/// all-MiniLM-L6-v2's graph (fp32) fuses as exported: leaving the fusion out there was 11 %
/// faster at 120–200 tokens, vectors within 3e-6.
pub(crate) const EMBEDDER_DISABLED_OPTIMIZERS: &str = "SkipLayerNormFusion";

/// Which rewrites the graph a pool loaded went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct GraphRewrites {
    /// `cls_graph`: the last layer computes `[CLS]` alone.
    cls_only: bool,
    /// `unmasked_graph`: no attention-mask additions (the pool runs one text per call).
    unmasked: bool,
}

/// The graph a pool loads: `model.onnx`, with a `[CLS]`-only last layer when the pooling is CLS
/// and `embeddings.cls_only_last_layer` is on (see `cls_graph`), and without its attention-mask
/// additions when the pool runs one text per call and `embeddings.unmasked_single_text` is on
/// (see `unmasked_graph`). Read again for each pool, so no copy of the model stays in memory
/// after its sessions are built.
fn embedding_graph(
    model: &Path,
    pooling: Pooling,
    settings: &EmbeddingSettings,
    one_text_per_call: bool,
) -> Result<(ModelGraph, GraphRewrites), EmbedError> {
    let want_cls = pooling == Pooling::Cls && settings.cls_only_last_layer;
    let want_unmasked = one_text_per_call && settings.unmasked_single_text;
    let mut done = GraphRewrites::default();
    let unchanged = || ModelGraph::File(model.to_path_buf());
    if !want_cls && !want_unmasked {
        return Ok((unchanged(), done));
    }
    let bytes = std::fs::read(model).map_err(|e| {
        EmbedError::Setup(format!("cannot read ONNX model {}: {e}", model.display()))
    })?;
    let kept = |reason: String| {
        tracing::info!(model = %model.display(), %reason, "graph loaded unchanged");
    };
    let parsed = match ParsedModel::parse(&bytes) {
        Ok(parsed) => parsed,
        Err(reason) => {
            kept(reason);
            return Ok((unchanged(), done));
        }
    };
    let mut edits = GraphEdits::default();
    // Merges a rewrite's plan, or logs why the graph keeps what it would change.
    let mut plan = |planned: Result<GraphEdits, String>, refused: &str| match planned {
        Ok(planned) => {
            edits.merge(planned);
            true
        }
        Err(reason) => {
            kept(format!("{refused}: {reason}"));
            false
        }
    };
    done.unmasked = want_unmasked
        && plan(
            super::unmasked_graph::edits(&parsed),
            "attention-mask additions kept",
        );
    done.cls_only = want_cls && plan(super::cls_graph::edits(&parsed), "no [CLS]-only last layer");
    if done == GraphRewrites::default() {
        return Ok((unchanged(), done));
    }
    match parsed.apply(&edits) {
        Ok(rewritten) => Ok((
            ModelGraph::Rewritten {
                from: model.to_path_buf(),
                bytes: rewritten,
            },
            done,
        )),
        Err(reason) => {
            kept(reason);
            Ok((unchanged(), GraphRewrites::default()))
        }
    }
}

/// Loads the embedding graph into a pool of `threads`-thread sessions, checking its declared
/// vector size against `expected` (the catalogue's). Returns the pool and the rewrites its
/// graph went through.
fn load_pool(
    model: &Path,
    pooling: Pooling,
    settings: &EmbeddingSettings,
    threads: usize,
    one_text_per_call: bool,
    expected: Option<usize>,
) -> Result<(SessionPool, GraphRewrites), EmbedError> {
    let (graph, rewrites) = embedding_graph(model, pooling, settings, one_text_per_call)?;
    let pool = SessionPool::load(
        &graph,
        settings,
        threads,
        EMBEDDING_OUTPUTS,
        EMBEDDER_DISABLED_OPTIMIZERS,
    )?;
    if let (Some(expected), Some(declared)) = (expected, declared_dimensions(&pool))
        && expected != declared
    {
        return Err(EmbedError::Setup(format!(
            "ONNX model {} declares {declared}-dimensional vectors, but its catalogue entry \
             says {expected}; the folder holds another model than its name says (run `orkeon \
             models fetch` to restore it, or rename the folder)",
            model.display()
        )));
    }
    Ok((pool, rewrites))
}

/// The vector size a pool's graph declares, when it is static.
fn declared_dimensions(pool: &SessionPool) -> Option<usize> {
    pool.output_shape
        .last()
        .and_then(|&d| usize::try_from(d).ok())
        .filter(|&d| d > 0)
}

struct Shared {
    /// Queries run here, one text at a time, on `embeddings.threads` intra-op threads.
    queries: tokio::sync::OnceCell<SessionPool>,
    documents: DocumentSessions,
    tokenizer: Arc<HfTokenCounter>,
    config: EmbeddingModelConfig,
    /// `model.onnx`, read again by each pool as it loads.
    model: PathBuf,
    /// The embedder's settings, `document_batch_size` at least 1.
    settings: EmbeddingSettings,
    /// The rewrites of the query pool's graph and of the document pool's, set as each loads.
    query_graph: std::sync::OnceLock<GraphRewrites>,
    document_graph: std::sync::OnceLock<GraphRewrites>,
}

impl Shared {
    /// [`load_pool`] on a blocking thread.
    async fn spawn_load(
        &self,
        threads: usize,
        one_text_per_call: bool,
    ) -> Result<(SessionPool, GraphRewrites), EmbedError> {
        let (model, pooling, settings) = (
            self.model.clone(),
            self.config.pooling,
            self.settings.clone(),
        );
        let expected = self.config.dimensions;
        tokio::task::spawn_blocking(move || {
            load_pool(
                &model,
                pooling,
                &settings,
                threads,
                one_text_per_call,
                expected,
            )
        })
        .await
        .map_err(|e| EmbedError::Setup(format!("loading the ONNX sessions failed: {e}")))?
    }

    /// Whether every call on the query pool is one text: queries always are; documents too
    /// when they share it with `document_batch_size` 1.
    fn queries_one_text_per_call(&self) -> bool {
        match self.documents {
            DocumentSessions::Queries => self.settings.document_batch_size == 1,
            DocumentSessions::Own(_) => true,
        }
    }

    /// The query session, loading it on first use.
    async fn query_pool(&self) -> Result<&SessionPool, EmbedError> {
        self.queries
            .get_or_try_init(|| async {
                let (pool, rewrites) = self
                    .spawn_load(self.settings.threads, self.queries_one_text_per_call())
                    .await?;
                let _ = self.query_graph.set(rewrites);
                Ok(pool)
            })
            .await
    }

    /// The sessions that embed documents, loading them on first use.
    async fn document_pool(&self) -> Result<&SessionPool, EmbedError> {
        match &self.documents {
            DocumentSessions::Queries => self.query_pool().await,
            DocumentSessions::Own(pool) => {
                pool.get_or_try_init(|| async {
                    let one_text = self.settings.document_batch_size == 1;
                    let (pool, rewrites) = self
                        .spawn_load(self.settings.document_threads, one_text)
                        .await?;
                    let _ = self.document_graph.set(rewrites);
                    Ok(pool)
                })
                .await
            }
        }
    }

    fn encode_all(&self, texts: &[String]) -> Result<Vec<TokenSequence>, EmbedError> {
        texts
            .iter()
            .map(|t| self.tokenizer.encode_single(t, self.config.max_tokens))
            .collect()
    }

    /// Embeds already tokenized inputs on `pool` in length-sorted batches of `batch_size`;
    /// output in input order.
    async fn embed_sequences(
        &self,
        pool: &SessionPool,
        batch_size: usize,
        sequences: &[TokenSequence],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let lengths: Vec<usize> = sequences.iter().map(TokenSequence::len).collect();
        let plan = length_sorted_batches(&lengths, batch_size);
        let mut pending = Vec::with_capacity(plan.len());
        for indices in &plan {
            let members: Vec<&TokenSequence> = indices.iter().map(|&i| &sequences[i]).collect();
            let batch = PaddedBatch::pad(&members);
            let mask = batch.mask.clone();
            pending.push((mask, pool.submit(batch)?));
        }
        let mut results: Vec<Option<Vec<f32>>> = vec![None; sequences.len()];
        for ((mask, future), indices) in pending.into_iter().zip(&plan) {
            let output = future.await?;
            let vectors = pool_batch(&output, &mask, self.config.pooling)?;
            if vectors.len() != indices.len() {
                return Err(EmbedError::Inference(format!(
                    "the model returned {} vectors for a batch of {}",
                    vectors.len(),
                    indices.len()
                )));
            }
            for (&index, vector) in indices.iter().zip(vectors) {
                results[index] = Some(vector);
            }
        }
        results
            .into_iter()
            .map(|v| v.ok_or_else(|| EmbedError::Inference("an input got no vector".into())))
            .collect()
    }
}

/// Local ONNX embedder (see the module documentation).
pub struct OnnxEmbedder {
    shared: Arc<Shared>,
    profile: EmbeddingProfile,
}

/// `model.onnx` and `tokenizer.json` of the model folder `dir`, or an error naming the missing
/// one (`what`: "model" or "reranker", as the message names the folder).
pub(crate) fn model_files(dir: &Path, what: &str) -> Result<(PathBuf, PathBuf), EmbedError> {
    let files = (dir.join("model.onnx"), dir.join("tokenizer.json"));
    for required in [&files.0, &files.1] {
        if !required.is_file() {
            return Err(EmbedError::Setup(format!(
                "{what} folder {} has no {}; a model folder holds model.onnx and tokenizer.json",
                dir.display(),
                required
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default()
            )));
        }
    }
    Ok(files)
}

impl OnnxEmbedder {
    /// Loads `model.onnx` and `tokenizer.json` from `dir` and starts its worker sessions.
    pub fn load(dir: &Path, settings: &EmbeddingSettings) -> Result<Self, EmbedError> {
        let (model, tokenizer_path) = model_files(dir, "model")?;
        let config = EmbeddingModelConfig::for_folder(dir)?;
        let tokenizer = Arc::new(HfTokenCounter::from_file(&tokenizer_path)?);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let documents =
            if settings.document_threads.clamp(1, cores) == settings.threads.clamp(1, cores) {
                DocumentSessions::Queries
            } else {
                DocumentSessions::Own(tokio::sync::OnceCell::new())
            };
        let shared = Shared {
            queries: tokio::sync::OnceCell::new(),
            documents,
            tokenizer,
            config,
            model,
            settings: EmbeddingSettings {
                document_batch_size: settings.document_batch_size.max(1),
                ..settings.clone()
            },
            query_graph: std::sync::OnceLock::new(),
            document_graph: std::sync::OnceLock::new(),
        };
        // Without the catalogue's size, the graph tells it: the query session loads now.
        let mut declared = None;
        if shared.config.dimensions.is_none() {
            let (pool, rewrites) = load_pool(
                &shared.model,
                shared.config.pooling,
                &shared.settings,
                shared.settings.threads,
                shared.queries_one_text_per_call(),
                None,
            )?;
            declared = declared_dimensions(&pool);
            let _ = shared.query_graph.set(rewrites);
            let _ = shared.queries.set(pool);
        }
        let shared = Arc::new(shared);
        let dimensions = match shared.config.dimensions.or(declared) {
            Some(d) => d,
            None => probe_dimensions(&shared)?,
        };
        let model_name = folder_name(dir);
        tracing::info!(model = %model_name, dimensions, pooling = ?shared.config.pooling, max_tokens = shared.config.max_tokens, "ONNX embedder loaded");
        Ok(Self {
            shared,
            profile: EmbeddingProfile {
                provider: "onnx".into(),
                model: model_name,
                dimensions,
            },
        })
    }

    /// Maximum tokens per input (special tokens included).
    pub fn max_tokens(&self) -> usize {
        self.shared.config.max_tokens
    }

    /// Pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.shared.config.pooling
    }

    /// Whether the sessions run a graph whose last layer computes `[CLS]` alone (see
    /// `embeddings.cls_only_last_layer`); `None` until a first pool of sessions has loaded.
    pub fn cls_only_last_layer(&self) -> Option<bool> {
        self.loaded_graph().map(|g| g.cls_only)
    }

    /// Whether the query session and the document sessions run a graph without its
    /// attention-mask additions (see `embeddings.unmasked_single_text`); `None` for a pool not
    /// loaded yet. Documents on the query session report the query session's.
    pub fn unmasked_sessions(&self) -> (Option<bool>, Option<bool>) {
        let queries = self.shared.query_graph.get().map(|g| g.unmasked);
        let documents = match self.shared.documents {
            DocumentSessions::Queries => queries,
            DocumentSessions::Own(_) => self.shared.document_graph.get().map(|g| g.unmasked),
        };
        (queries, documents)
    }

    /// The rewrites of the first pool that loaded.
    fn loaded_graph(&self) -> Option<GraphRewrites> {
        let shared = &self.shared;
        shared
            .query_graph
            .get()
            .or_else(|| shared.document_graph.get())
            .copied()
    }
}

/// Runs one tiny input to learn the vector size of a graph whose output size is dynamic.
fn probe_dimensions(shared: &Arc<Shared>) -> Result<usize, EmbedError> {
    let shared = Arc::clone(shared);
    let probe = move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| EmbedError::Setup(format!("cannot start a probe runtime: {e}")))?;
        runtime.block_on(async {
            let sequences = shared.encode_all(&["probe".to_string()])?;
            let vectors = shared
                .embed_sequences(shared.query_pool().await?, 1, &sequences)
                .await?;
            vectors
                .first()
                .map(Vec::len)
                .ok_or_else(|| EmbedError::Setup("the probe run returned no vector".into()))
        })
    };
    std::thread::spawn(probe)
        .join()
        .unwrap_or_else(|_| Err(EmbedError::Setup("the probe run panicked".into())))
}

#[async_trait]
impl Embedder for OnnxEmbedder {
    fn profile(&self) -> EmbeddingProfile {
        self.profile.clone()
    }

    fn token_counter(&self) -> Arc<dyn TokenCounter> {
        self.shared.tokenizer.clone()
    }

    async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let shared = Arc::clone(&self.shared);
        let sequences = tokio::task::spawn_blocking(move || shared.encode_all(&texts))
            .await
            .map_err(|e| EmbedError::Inference(format!("tokenizing task failed: {e}")))??;
        let pool = self.shared.document_pool().await?;
        self.shared
            .embed_sequences(pool, self.shared.settings.document_batch_size, &sequences)
            .await
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let text = match &self.shared.config.query_prefix {
            Some(prefix) => format!("{prefix}{text}"),
            None => text.to_string(),
        };
        let sequence = self
            .shared
            .tokenizer
            .encode_single(&text, self.shared.config.max_tokens)?;
        let pool = self.shared.query_pool().await?;
        let mut vectors = self
            .shared
            .embed_sequences(pool, 1, std::slice::from_ref(&sequence))
            .await?;
        vectors
            .pop()
            .ok_or_else(|| EmbedError::Inference("the query got no vector".into()))
    }

    async fn prepare_for_queries(&self) -> Result<(), EmbedError> {
        self.shared.query_pool().await.map(|_| ())
    }

    async fn prepare_for_documents(&self) -> Result<(), EmbedError> {
        self.shared.document_pool().await.map(|_| ())
    }

    fn stats(&self) -> EmbedStats {
        let queries = self
            .shared
            .queries
            .get()
            .map(SessionPool::stats)
            .unwrap_or_default();
        match &self.shared.documents {
            DocumentSessions::Own(pool) => match pool.get() {
                Some(documents) => queries.plus(documents.stats()),
                None => queries,
            },
            DocumentSessions::Queries => queries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The real models' vectors (bge-small's README cosines, MiniLM's mean pooling and batch
    // order) are tested in `tests/models_embedding.rs`.

    #[test]
    fn folder_rule_reads_pooling_and_length_from_files_for_unknown_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let model = dir.path().join("my-encoder");
        std::fs::create_dir_all(&model).expect("mkdir");
        std::fs::write(
            model.join("pooling_config.json"),
            r#"{"pooling_mode_mean_tokens": true}"#,
        )
        .expect("write");
        std::fs::write(
            model.join("sentence_bert_config.json"),
            r#"{"max_seq_length": 128}"#,
        )
        .expect("write");
        let config = EmbeddingModelConfig::for_folder(&model).expect("config");
        assert_eq!(
            config,
            EmbeddingModelConfig {
                pooling: Pooling::Mean,
                query_prefix: None,
                max_tokens: 128,
                dimensions: None,
            }
        );
        let bare = dir.path().join("bare");
        std::fs::create_dir_all(&bare).expect("mkdir");
        std::fs::write(
            bare.join("config.json"),
            r#"{"max_position_embeddings": 2048}"#,
        )
        .expect("write");
        let config = EmbeddingModelConfig::for_folder(&bare).expect("config");
        assert_eq!(
            config,
            EmbeddingModelConfig {
                pooling: Pooling::Cls,
                query_prefix: None,
                max_tokens: 512,
                dimensions: None,
            }
        );
        let reranker = dir.path().join("ms-marco-MiniLM-L-12-v2");
        let err =
            EmbeddingModelConfig::for_folder(&reranker).expect_err("a reranker is no embedder");
        assert!(err.to_string().contains("cross-encoder"));
    }
}
