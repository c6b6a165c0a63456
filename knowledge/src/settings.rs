//! Configuration of the RAG subsystem: the `embeddings:` section, the `rag:` section
//! ([`RagSettings`]) with its ingestion half (`rag.ingestion` / `rag.store`) here and its
//! query-side keys in [`query`]. Every struct rejects unknown keys so that a typo is an error,
//! not a silent default. Nothing here depends on the modules that use it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod query;

/// `embeddings:` — which embedder computes vectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingSettings {
    /// `onnx` (local, default) or `openai` (an OpenAI-compatible `/v1/embeddings` endpoint).
    pub provider: String,
    /// For `onnx`: a model folder name (`bge-small-en-v1.5`, `all-MiniLM-L6-v2`) or a path.
    /// For `openai`: the remote model name.
    pub model: String,
    /// Folder holding model folders; `ORKEON_MODELS_DIR` is consulted when unset.
    pub models_dir: Option<PathBuf>,
    /// Cache for downloaded models and the ONNX Runtime library (default: the user cache dir).
    pub cache_dir: Option<PathBuf>,
    /// Query–passage pairs per ONNX Runtime call of the cross-encoder (reranker).
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads of the session that embeds queries (one text at a time,
    /// so its latency is what threads buy) and of the cross-encoder. The query session loads
    /// at the first query (a process that runs crews, such as the daemon, loads it at start).
    pub threads: usize,
    /// Intra-op threads of each session that embeds documents (ingestion). The document pool
    /// holds one session per `document_threads` cores, loaded when an ingestion meets its first
    /// source with chunks to embed;
    /// equal to `threads`, documents share the query session instead (less memory, slower
    /// ingestion on small machines: see README, Performance).
    pub document_threads: usize,
    /// Texts per ONNX Runtime call when embedding documents (length-sorted, so they pad little).
    pub document_batch_size: usize,
    /// With `[CLS]` pooling, run the last encoder layer for the `[CLS]` row alone (the other
    /// rows are dropped by the pooling anyway): 6–9 % less work per text, the same vector to
    /// within int8 noise (cosine ≥ 0.9999). Graphs it does not recognise load unchanged.
    pub cls_only_last_layer: bool,
    /// Sessions that run one text per call (queries; documents with `document_batch_size` 1)
    /// load the graph without its attention-mask additions, which add only zeros to a text
    /// without padding: the same vectors, about 5 % less work at 256 tokens. Graphs it does not
    /// recognise load unchanged.
    pub unmasked_single_text: bool,
    /// OpenAI-compatible endpoint settings (used when `provider: openai`).
    pub openai: OpenAiEmbeddingSettings,
}

impl Default for EmbeddingSettings {
    fn default() -> Self {
        Self {
            provider: "onnx".into(),
            model: "bge-small-en-v1.5".into(),
            models_dir: None,
            cache_dir: None,
            batch_size: 2,
            threads: 2,
            document_threads: 1,
            document_batch_size: 1,
            cls_only_last_layer: true,
            unmasked_single_text: true,
            openai: OpenAiEmbeddingSettings::default(),
        }
    }
}

/// `embeddings.openai:`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiEmbeddingSettings {
    pub base_url: String,
    /// Name of the environment variable holding the API key (never the key itself).
    pub api_key_env: String,
    /// Expected vector size (checked against the first answer).
    pub dimensions: Option<usize>,
    pub timeout_ms: u64,
    pub max_retries: u32,
    pub batch_size: usize,
}

impl Default for OpenAiEmbeddingSettings {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            dimensions: None,
            timeout_ms: 30_000,
            max_retries: 3,
            batch_size: 64,
        }
    }
}

/// What to do with a document the prompt-injection validator finds suspicious.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SuspiciousAction {
    /// Ingest it, with `flagged=suspicious` and the reasons in chunk metadata.
    #[default]
    Flag,
    /// Do not ingest it (it is quarantined like a rejected document).
    Drop,
}

/// `rag.ingestion:`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestionSettings {
    /// Chunking used when a request names none.
    pub default_chunking: ChunkingSettings,
    /// Whether http(s) sources may be fetched.
    pub allow_urls: bool,
    /// Directories sources may come from besides the request's base directory (which is always
    /// allowed); relative entries resolve against the base directory. The daemon fills this
    /// (see its `rag.ingestion.roots`) and resolves remote requests against the first.
    pub roots: Vec<PathBuf>,
    /// Largest document accepted, in bytes.
    pub max_document_bytes: usize,
    /// URL fetch limits.
    pub url_timeout_ms: u64,
    pub url_max_bytes: usize,
    pub url_max_redirects: usize,
    pub suspicious_action: SuspiciousAction,
    /// Chunks prepared (across sources) before their new ones are embedded in one call, so the
    /// embedder's length-sorted batches mix sources; bounds the chunks an ingestion holds in
    /// memory besides one oversized source. 1 to [`MAX_EMBED_WINDOW`].
    pub embed_window: usize,
    /// What the loaders may expand a document to. Not a `rag.ingestion` key: the daemon
    /// carries these over from its `limits:` section.
    #[serde(skip)]
    pub load_limits: LoadLimits,
    /// Socket addresses the URL loader may reach although they are not public. Never read from
    /// configuration (tests point it at their loopback servers); empty: public addresses only.
    #[serde(skip)]
    pub url_exempt_addrs: Vec<std::net::SocketAddr>,
}

/// Bounds on what one source may expand to once loaded (configured under `limits:` of the
/// daemon; the keys named here are those). Exceeding one refuses the source with
/// [`crate::load::LoadError::OverLimit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadLimits {
    /// Pages of one PDF (`limits.max_pdf_pages`).
    pub max_pdf_pages: usize,
    /// Decompressed bytes of one PDF stream (`limits.max_pdf_stream_bytes`).
    pub max_pdf_stream_bytes: usize,
    /// Decompressed bytes of all the streams of one PDF (`limits.max_pdf_document_bytes`).
    pub max_pdf_document_bytes: usize,
    /// Data rows of one CSV file (`limits.max_csv_rows`).
    pub max_csv_rows: usize,
    /// Bytes of one text, Markdown or HTML document (`limits.max_text_bytes`).
    pub max_text_bytes: usize,
}

impl Default for LoadLimits {
    fn default() -> Self {
        Self {
            max_pdf_pages: 2_000,
            max_pdf_stream_bytes: 64 * 1024 * 1024,
            max_pdf_document_bytes: 256 * 1024 * 1024,
            max_csv_rows: 100_000,
            max_text_bytes: 10 * 1024 * 1024,
        }
    }
}

impl Default for IngestionSettings {
    fn default() -> Self {
        Self {
            default_chunking: ChunkingSettings::default(),
            allow_urls: false,
            roots: Vec::new(),
            max_document_bytes: 20 * 1024 * 1024,
            url_timeout_ms: 15_000,
            url_max_bytes: 5 * 1024 * 1024,
            url_max_redirects: 5,
            suspicious_action: SuspiciousAction::Flag,
            embed_window: 64,
            load_limits: LoadLimits::default(),
            url_exempt_addrs: Vec::new(),
        }
    }
}

/// Largest `rag.ingestion.embed_window`.
pub const MAX_EMBED_WINDOW: usize = 4096;

impl IngestionSettings {
    /// The first out-of-range value, as (key under `rag.ingestion`, what is wrong).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=MAX_EMBED_WINDOW).contains(&self.embed_window) {
            return Err((
                "embed_window",
                format!(
                    "must be between 1 and {MAX_EMBED_WINDOW} chunks, found {}",
                    self.embed_window
                ),
            ));
        }
        Ok(())
    }
}

/// A chunker and its settings (`chunking:` in requests and crew files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkingSettings {
    /// `recursive` (default), `sentence`, `structural`, `semantic`.
    pub strategy: String,
    /// Upper bound of a chunk, in embedding-model tokens.
    pub max_tokens: usize,
    /// Chunk size relative to the embedding model: this percentage (1–100) of the model's
    /// maximum sequence length, special tokens excluded (bge-small-en-v1.5 reads 512: 94 →
    /// 479 tokens). Set, it replaces `max_tokens`; the model must be one of the catalogue's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens_percent: Option<u8>,
    /// Tokens repeated between neighbouring chunks (recursive, sentence).
    pub overlap: usize,
    /// Semantic chunker: split where adjacent sentences' cosine similarity falls below the
    /// given percentile of all adjacent similarities (0–100).
    pub breakpoint_percentile: u8,
}

impl Default for ChunkingSettings {
    fn default() -> Self {
        Self {
            strategy: "recursive".into(),
            max_tokens: 256,
            max_tokens_percent: None,
            overlap: 32,
            breakpoint_percentile: 10,
        }
    }
}

impl ChunkingSettings {
    /// A stable text form, part of every chunk's content hash.
    pub fn fingerprint(&self) -> String {
        let max = match self.max_tokens_percent {
            None => self.max_tokens.to_string(),
            Some(percent) => format!("{percent}%"),
        };
        format!(
            "{}:max={max}:overlap={}:bp={}",
            self.strategy.to_ascii_lowercase(),
            self.overlap,
            self.breakpoint_percentile
        )
    }
}

/// `rag.store:` — the storage provider (documents, quarantine, runs) and the document store's
/// search settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// Where documents, the quarantine and runs live: `embedded` (sled + tantivy in `data_dir`)
    /// or `postgres` (PostgreSQL + pgvector, `rag.store.postgres`).
    pub provider: StoreProvider,
    /// The PostgreSQL provider's connection (used when `provider: postgres`).
    pub postgres: PostgresSettings,
    /// Collections with at least this many chunks search an HNSW graph; smaller ones are
    /// scanned exactly.
    pub hnsw_threshold: usize,
    /// HNSW build/search breadth.
    pub hnsw_ef_construction: usize,
    pub hnsw_ef_search: usize,
    /// Each HNSW graph's recall@10 is measured against the exact scan when it is built; below
    /// this the collection keeps scanning exactly (0 serves every graph).
    pub hnsw_min_recall: f64,
    /// Probe queries for that measurement.
    pub hnsw_calibration_queries: usize,
    /// Rebuild the HNSW snapshot once this many chunks were added after it.
    pub hnsw_rebuild_after: usize,
    /// Reciprocal Rank Fusion constant for hybrid search.
    pub rrf_k: f32,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            provider: StoreProvider::Embedded,
            postgres: PostgresSettings::default(),
            hnsw_threshold: 20_000,
            hnsw_ef_construction: 100,
            hnsw_ef_search: 100,
            hnsw_min_recall: 0.98,
            hnsw_calibration_queries: 200,
            hnsw_rebuild_after: 5_000,
            rrf_k: 60.0,
        }
    }
}

impl StoreSettings {
    /// The first out-of-range value, as (key under `rag.store`, what is wrong).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(0.0..=1.0).contains(&self.hnsw_min_recall) {
            return Err((
                "hnsw_min_recall",
                format!(
                    "must be between 0 and 1 (a recall@10), found {}",
                    self.hnsw_min_recall
                ),
            ));
        }
        for (key, value) in [
            ("hnsw_ef_construction", self.hnsw_ef_construction),
            ("hnsw_ef_search", self.hnsw_ef_search),
        ] {
            if value == 0 {
                return Err((key, "must be at least 1".to_string()));
            }
        }
        if !(self.rrf_k.is_finite() && self.rrf_k > 0.0) {
            return Err((
                "rrf_k",
                format!("must be a positive number, found {}", self.rrf_k),
            ));
        }
        if self.provider == StoreProvider::Postgres {
            self.postgres.check()?;
        }
        Ok(())
    }
}

/// `rag.store.provider`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreProvider {
    /// sled + tantivy + vector snapshots in `data_dir` (one process).
    #[default]
    Embedded,
    /// PostgreSQL with pgvector (`rag.store.postgres`).
    Postgres,
}

/// `rag.store.postgres:` — the PostgreSQL provider's connection. The password comes from the
/// URL or from the environment variable named by `password_env`; it is never logged, and
/// `orkeon config` shows the URL without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresSettings {
    /// `postgres://user[:password]@host[:port]/database` (or a `key=value` connection string).
    pub url: Option<String>,
    /// Name of the environment variable holding the password (wins over one in the URL).
    pub password_env: Option<String>,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Longest one SQL statement may run, in milliseconds (0: no limit).
    pub statement_timeout_ms: u64,
    /// The schema holding Orkeon's tables (created when missing), so several deployments can
    /// share one database.
    pub schema: String,
    /// How long a run stays claimed by the daemon running it without a renewal, in seconds.
    /// Each daemon renews its runs' leases every third of this; a run whose lease has run out
    /// (its daemon died or stalled) is ended as interrupted by any daemon on the same schema.
    pub lease_secs: u64,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            url: None,
            password_env: None,
            pool_size: 8,
            statement_timeout_ms: 30_000,
            schema: "orkeon".into(),
            lease_secs: 30,
        }
    }
}

impl PostgresSettings {
    /// The first invalid value, as (key under `rag.store`, what is wrong).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.url.as_deref().is_none_or(|url| url.trim().is_empty()) {
            return Err((
                "postgres.url",
                "is required with `rag.store.provider: postgres` (postgres://user@host:port/database)".into(),
            ));
        }
        if self.pool_size == 0 {
            return Err(("postgres.pool_size", "must be at least 1".into()));
        }
        if !(1..=3600).contains(&self.lease_secs) {
            return Err((
                "postgres.lease_secs",
                format!("is {}; use 1 to 3600 seconds", self.lease_secs),
            ));
        }
        if !valid_schema_name(&self.schema) {
            return Err((
                "postgres.schema",
                format!(
                    "'{}' is not a valid schema name: use lowercase letters, digits and '_', starting with a letter or '_' (max 63)",
                    self.schema
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `name` is a plain PostgreSQL identifier Orkeon accepts as a schema name
/// (`[a-z_][a-z0-9_]*`, at most 63 bytes): safe to write unquoted in SQL.
pub fn valid_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The `rag:` section of the configuration (mirrors the reference's `Orkeon:Rag` table).
/// Query-side keys are in [`query`]; the query pipeline resolves them against a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RagSettings {
    /// Preset: fast / balanced / quality / adaptive / corrective.
    pub profile: String,
    /// Default collection when a call names none.
    pub collection: Option<String>,
    pub ingestion: IngestionSettings,
    pub store: StoreSettings,
    // Query-side keys (unset = the profile preset's value).
    pub retrieval: query::RetrievalSettings,
    pub query_transform: query::QueryTransformSettings,
    pub rerank: query::RerankSettings,
    pub context: query::ContextSettings,
    pub groundedness: query::GroundednessSettings,
    pub generation: query::GenerationSettings,
    pub query_routing: query::QueryRoutingSettings,
    pub corrective: query::CorrectiveSettings,
    pub web_fallback: query::WebFallbackSettings,
}

impl Default for RagSettings {
    fn default() -> Self {
        Self {
            profile: "fast".into(),
            collection: None,
            ingestion: IngestionSettings::default(),
            store: StoreSettings::default(),
            retrieval: Default::default(),
            query_transform: Default::default(),
            rerank: Default::default(),
            context: Default::default(),
            groundedness: Default::default(),
            generation: Default::default(),
            query_routing: Default::default(),
            corrective: Default::default(),
            web_fallback: Default::default(),
        }
    }
}
