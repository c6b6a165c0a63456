//! Orkeon as a library: a small facade over the application layer (`orkeon_daemon::service`),
//! for Rust programs that want Orkeon's knowledge without running the daemon.
//!
//! [`Knowledge`] opens a data folder and runs the same operations as `orkeon rag …` — the same
//! request types, checks, root confinement and answers ([`RagAnswer`], [`IngestReport`]) —
//! because it calls the same [`KnowledgeApi`] implementation; it holds no logic of its own.
//!
//! ```
//! # #[tokio::main] async fn main() -> anyhow::Result<()> {
//! let data = tempfile::tempdir()?;
//! let docs = tempfile::tempdir()?;
//! std::fs::write(docs.path().join("returns.md"),
//!     "# Returns\n\nHeadphones may be returned within 30 days of delivery.\n")?;
//!
//! let kb = orkeon::Knowledge::open(data.path())?;
//! let report = kb.ingest_from(docs.path(), "kb", ["*.md"]).await?;
//! assert_eq!(report.sources_ingested, 1);
//!
//! let answer = kb.retrieve("kb", "How long do I have to return headphones?").await?;
//! assert!(answer.citations[0].snippet.contains("30 days"));
//! kb.flush()?;
//! # Ok(()) }
//! ```

//!
//! [`Builder`] adds the program's own components (a custom reranker, query transformer or chat
//! model, selected by name in the configuration like the built-ins), and [`Host`] runs crews
//! and Rhai scripts in process over the same knowledge. The runnable demos are in `examples/rust/` (README, "Use it from
//! Rust").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Implementing [`Reranker`] needs `#[orkeon::async_trait]` on the impl block.
pub use async_trait::async_trait;
pub use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse};
pub use orkeon_crews::run::store::{RunRecord, StoredEvent, TaskSummary};
pub use orkeon_crews::run::{RunEvent, RunStatus};
pub use orkeon_daemon::chat_models::LlmSettings;
pub use orkeon_daemon::config::Config;
pub use orkeon_daemon::knowledge_host::Components;
pub use orkeon_daemon::service::{
    ChunkingOverrides, CrewApi, CrewApp, IngestParams, KnowledgeApi, KnowledgeApp, QueryParams,
    ServiceError,
};
pub use orkeon_daemon::services::CrewRun;
pub use orkeon_knowledge::ingest::IngestReport;
pub use orkeon_knowledge::query::QueryError;
pub use orkeon_knowledge::query::rerank::{Reranker, RerankerContext};
pub use orkeon_knowledge::query::transform::{QueryTransformer, TransformKind, TransformOutput};
pub use orkeon_knowledge::store::SearchMode;
pub use orkeon_knowledge::types::{Citation, RagAnswer, ScoreOrigin, ScoredChunk};

use orkeon_daemon::script::{ScriptHost, ScriptLimits};
use orkeon_daemon::services::Services;

/// One data folder's knowledge: ingest sources into collections, retrieve and query them.
///
/// The embedder loads on the first operation that needs it (models resolve as for the CLI:
/// `embeddings.models_dir`, `ORKEON_MODELS_DIR`, the cache, then a pinned download).
pub struct Knowledge {
    app: KnowledgeApp,
}

impl Knowledge {
    /// A [`Builder`] over `config`, to register the program's own components before opening.
    pub fn builder(config: Config) -> Builder {
        Builder::new(config)
    }

    /// Opens (creating it if needed) the store in `data_dir`, with the built-in defaults for
    /// everything else.
    ///
    /// ```
    /// let data = tempfile::tempdir().unwrap();
    /// let kb = orkeon::Knowledge::open(data.path()).unwrap();
    /// kb.flush().unwrap();
    /// ```
    pub fn open(data_dir: impl Into<PathBuf>) -> anyhow::Result<Self> {
        Self::with_config(Config {
            data_dir: data_dir.into(),
            ..Config::default()
        })
    }

    /// Opens the store of a full [`Config`] (e.g. one loaded with [`Config::load`], so
    /// profiles, limits and the LLM are the ones of `config/orkeon.yaml`).
    ///
    /// ```
    /// let data = tempfile::tempdir().unwrap();
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// config.rag.profile = "balanced".into();
    /// let kb = orkeon::Knowledge::with_config(config).unwrap();
    /// # kb.flush().unwrap();
    /// ```
    pub fn with_config(config: Config) -> anyhow::Result<Self> {
        Ok(Self {
            app: KnowledgeApp::open(config)?,
        })
    }

    /// Ingests `sources` (paths or globs relative to `base_dir`, which is also the one folder
    /// they may read from besides `rag.ingestion.roots`) into `collection`, additively and
    /// incrementally (unchanged sources are skipped).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("a.md"), "# Shipping\n\nOrders ship in two days.\n")?;
    /// let kb = orkeon::Knowledge::open(data.path())?;
    /// assert_eq!(kb.ingest_from(docs.path(), "kb", ["a.md"]).await?.sources_ingested, 1);
    /// // unchanged: skipped the second time
    /// assert_eq!(kb.ingest_from(docs.path(), "kb", ["a.md"]).await?.sources_skipped, 1);
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub async fn ingest_from<S: Into<String>>(
        &self,
        base_dir: impl AsRef<Path>,
        collection: &str,
        sources: impl IntoIterator<Item = S>,
    ) -> Result<IngestReport, ServiceError> {
        self.ingest(IngestParams {
            collection: collection.to_string(),
            sources: sources.into_iter().map(Into::into).collect(),
            base_dir: Some(base_dir.as_ref().to_path_buf()),
            ..IngestParams::default()
        })
        .await
    }

    /// Ingests with every option of [`IngestParams`] (chunking overrides, reindex, replace).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("a.md"), "# Shipping\n\nOrders ship in two days.\n")?;
    /// let kb = orkeon::Knowledge::open(data.path())?;
    /// let report = kb.ingest(orkeon::IngestParams {
    ///     collection: "kb".into(),
    ///     sources: vec!["*.md".into()],
    ///     chunking: orkeon::ChunkingOverrides { max_tokens: Some(128), ..Default::default() },
    ///     base_dir: Some(docs.path().to_path_buf()),
    ///     ..Default::default()
    /// }).await?;
    /// assert!(report.chunks_upserted >= 1);
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub async fn ingest(&self, params: IngestParams) -> Result<IngestReport, ServiceError> {
        self.app.ingest(params, None).await
    }

    /// Retrieval only (the configured profile's stages up to assembly, no LLM call): the
    /// numbered passages and citations for `question` in `collection`.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("w.md"), "# Warranty\n\nThe Pebble S has a two-year warranty.\n")?;
    /// let kb = orkeon::Knowledge::open(data.path())?;
    /// kb.ingest_from(docs.path(), "kb", ["w.md"]).await?;
    /// let answer = kb.retrieve("kb", "warranty of the Pebble S").await?;
    /// assert_eq!(answer.citations[0].source_id, "w.md");
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub async fn retrieve(
        &self,
        collection: &str,
        question: &str,
    ) -> Result<RagAnswer, ServiceError> {
        self.retrieve_with(QueryParams {
            collection: Some(collection.to_string()),
            query: question.to_string(),
            ..QueryParams::default()
        })
        .await
    }

    /// Retrieval with every option of [`QueryParams`] (profile, top_n, mode).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("w.md"), "# Warranty\n\nThe Pebble S has a two-year warranty.\n")?;
    /// let kb = orkeon::Knowledge::open(data.path())?;
    /// kb.ingest_from(docs.path(), "kb", ["w.md"]).await?;
    /// let answer = kb.retrieve_with(orkeon::QueryParams {
    ///     collection: Some("kb".into()),
    ///     query: "Pebble warranty".into(),
    ///     profile: Some("balanced".into()),
    ///     top_n: Some(3),
    ///     ..Default::default()
    /// }).await?;
    /// assert!(!answer.citations.is_empty());
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub async fn retrieve_with(&self, params: QueryParams) -> Result<RagAnswer, ServiceError> {
        self.app.retrieve(params).await
    }

    /// A full query with cited generation by the configured chat model (`llm:`; the default
    /// `extractive` model answers offline by quoting the retrieved passages with `[n]`).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("w.md"), "# Warranty\n\nThe Pebble S has a two-year warranty.\n")?;
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// config.llm.provider = Some("extractive".into());
    /// let kb = orkeon::Knowledge::with_config(config)?;
    /// kb.ingest_from(docs.path(), "kb", ["w.md"]).await?;
    /// let answer = kb.query(orkeon::QueryParams {
    ///     collection: Some("kb".into()),
    ///     query: "How long is the Pebble S warranty?".into(),
    ///     ..Default::default()
    /// }).await?;
    /// assert!(answer.text.contains("[1]"), "{}", answer.text);
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub async fn query(&self, params: QueryParams) -> Result<RagAnswer, ServiceError> {
        self.app.query(params).await
    }

    /// Makes `collection` a throwaway collection: ingested, retrieved and queried like any
    /// other, but held in memory (`limits.max_ephemeral_chunks`), never written to the data
    /// folder, and gone when this `Knowledge` is dropped (or deleted with
    /// [`KnowledgeApi::delete`]). A stored collection of the same name is shadowed, never
    /// touched.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// use orkeon::KnowledgeApi;
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("a.md"), "# Shipping\n\nOrders ship in two days.\n")?;
    /// let kb = orkeon::Knowledge::open(data.path())?;
    /// kb.scratch("trial").await?;
    /// kb.ingest_from(docs.path(), "trial", ["a.md"]).await?;
    /// let answer = kb.retrieve("trial", "When do orders ship?").await?;
    /// assert_eq!(answer.citations[0].source_id, "a.md");
    /// assert_eq!(kb.api().collections().await?[0].provider, "memory");
    /// kb.flush()?;
    /// drop(kb);
    /// let reopened = orkeon::Knowledge::open(data.path())?;
    /// assert!(reopened.api().collections().await?.is_empty(), "nothing was stored");
    /// # Ok(()) }
    /// ```
    pub async fn scratch(&self, collection: &str) -> Result<(), ServiceError> {
        self.app.scratch(collection).await
    }

    /// The application layer underneath, for every other operation (collections, manifest,
    /// delete, quarantine, evaluate).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// use orkeon::KnowledgeApi;
    /// let data = tempfile::tempdir()?;
    /// let kb = orkeon::Knowledge::open(data.path())?;
    /// assert!(kb.api().collections().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn api(&self) -> &KnowledgeApp {
        &self.app
    }

    /// Writes everything to disk (call before the program exits).
    pub fn flush(&self) -> Result<(), ServiceError> {
        self.app.flush()
    }
}

/// Opens [`Knowledge`] or starts a [`Host`] with the program's own components registered
/// next to the built-ins.
pub struct Builder {
    config: Config,
    components: Components,
}

impl Builder {
    /// The built-in components over `config`.
    pub fn new(config: Config) -> Self {
        let components = Components::builtin(&config.embeddings);
        Self { config, components }
    }

    /// Registers a reranker under `name` (matched case-insensitively; a built-in's name
    /// replaces the built-in). A profile runs it when the configuration selects it:
    /// `rag.rerank.kind: <name>` with the rerank stage enabled (`rag.rerank.enabled: true`, or
    /// a profile that reranks: `balanced`, `quality`). `build` is called whenever a pipeline
    /// that uses it is built (once per profile, memoised; evaluations build their own), with
    /// the resolved rerank options and the configured chat model. Register before the first
    /// query: a profile already built keeps its reranker.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// use std::sync::Arc;
    /// use orkeon::{QueryError, Reranker, ScoredChunk};
    ///
    /// /// Shortest passages first.
    /// struct Shortest;
    /// #[orkeon::async_trait]
    /// impl Reranker for Shortest {
    ///     fn name(&self) -> &str { "shortest" }
    ///     async fn rerank(&self, _query: &str, mut candidates: Vec<ScoredChunk>, top_n: usize)
    ///         -> Result<Vec<ScoredChunk>, QueryError> {
    ///         candidates.sort_by_key(|c| c.chunk.text.len());
    ///         candidates.truncate(top_n);
    ///         Ok(candidates)
    ///     }
    /// }
    ///
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("long.md"),
    ///     "# Warranty\n\nThe Pebble S warranty lasts two years from the date of delivery, \
    ///      covers manufacturing defects and is honoured in every country we ship to.\n")?;
    /// std::fs::write(docs.path().join("short.md"), "# Pebble S\n\nPebble S: two-year warranty.\n")?;
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// config.rag.rerank.enabled = Some(true);
    /// config.rag.rerank.kind = Some("shortest".into()); // selected by configuration
    /// let kb = orkeon::Knowledge::builder(config)
    ///     .reranker("shortest", |_ctx| Ok(Arc::new(Shortest) as Arc<dyn Reranker>))
    ///     .open()?;
    /// kb.ingest_from(docs.path(), "kb", ["*.md"]).await?;
    /// let answer = kb.retrieve("kb", "Pebble S warranty").await?;
    /// assert_eq!(answer.citations[0].source_id, "short.md");
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub fn reranker<F>(self, name: &str, build: F) -> Self
    where
        F: Fn(&RerankerContext<'_>) -> Result<Arc<dyn Reranker>, QueryError>
            + Send
            + Sync
            + 'static,
    {
        self.components
            .rerankers
            .register(name, &[], Arc::new(build));
        self
    }

    /// Registers a query transformer under `name` (matched case-insensitively; a built-in's
    /// name replaces the built-in). Pipelines run it when the configuration selects it:
    /// `rag.query_transform.mode: <name>`. `build` gets the configured chat model (`None`
    /// when there is none), is called whenever a pipeline that uses it is built, and its
    /// [`TransformKind`] says how its texts combine (`union`, `fusion`, `replacement`).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// use std::sync::Arc;
    /// use orkeon::{QueryError, QueryTransformer, TransformKind, TransformOutput};
    ///
    /// /// Spells out the shop's part codes before retrieval.
    /// struct PartCodes;
    /// #[orkeon::async_trait]
    /// impl QueryTransformer for PartCodes {
    ///     fn name(&self) -> &str { "part-codes" }
    ///     fn kind(&self) -> TransformKind { TransformKind::Union }
    ///     async fn transform(&self, q: &str, _n: usize) -> Result<TransformOutput, QueryError> {
    ///         let mut out = TransformOutput::original(q);
    ///         out.texts.push(q.replace("PS-2", "Pebble S"));
    ///         out.generated = 1;
    ///         Ok(out)
    ///     }
    /// }
    ///
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("w.md"), "# Warranty\n\nThe Pebble S has a two-year warranty.\n")?;
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// config.rag.query_transform.mode = Some("part-codes".into()); // selected by configuration
    /// let kb = orkeon::Knowledge::builder(config)
    ///     .transformer("part-codes", |_chat| Ok(Arc::new(PartCodes) as Arc<dyn QueryTransformer>))
    ///     .open()?;
    /// kb.ingest_from(docs.path(), "kb", ["w.md"]).await?;
    /// let answer = kb.retrieve("kb", "PS-2 warranty").await?;
    /// assert_eq!(answer.trace.query_variants, ["PS-2 warranty", "Pebble S warranty"]);
    /// assert_eq!(answer.citations[0].source_id, "w.md");
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub fn transformer<F>(self, name: &str, build: F) -> Self
    where
        F: Fn(Option<Arc<dyn ChatModel>>) -> Result<Arc<dyn QueryTransformer>, QueryError>
            + Send
            + Sync
            + 'static,
    {
        self.components
            .transformers
            .register(name, &[], Arc::new(build));
        self
    }

    /// Registers a chat model (an LLM provider) under `name` (matched case-insensitively; a
    /// built-in's name, `extractive` or `openai`, replaces the built-in). Everything that
    /// generates selects it by configuration: `llm.provider: <name>` for query generation,
    /// evaluations and crews, or a crew file's `llm: { provider: <name> }` (crew checks accept
    /// the name). `build` gets the resolved `llm:` settings (the daemon's with the crew's
    /// overrides) each time a model is needed: once per pipeline, once per crew run.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// use std::sync::Arc;
    /// use orkeon::{ChatError, ChatModel, ChatRequest, ChatResponse};
    ///
    /// /// Answers every question by citing the first passage of its context block.
    /// struct FirstPassage;
    /// #[orkeon::async_trait]
    /// impl ChatModel for FirstPassage {
    ///     fn name(&self) -> String { "first-passage".into() }
    ///     async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ChatError> {
    ///         Ok(ChatResponse {
    ///             content: "The Pebble S warranty lasts two years [1].".into(),
    ///             tool_calls: Vec::new(),
    ///             model: "first-passage".into(),
    ///             usage: Default::default(),
    ///         })
    ///     }
    /// }
    ///
    /// let (data, docs) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(docs.path().join("w.md"), "# Warranty\n\nThe Pebble S has a two-year warranty.\n")?;
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// config.llm.provider = Some("first-passage".into()); // selected by configuration
    /// let kb = orkeon::Knowledge::builder(config)
    ///     .chat_model("first-passage", |_llm| Ok(Arc::new(FirstPassage) as Arc<dyn ChatModel>))
    ///     .open()?;
    /// kb.ingest_from(docs.path(), "kb", ["w.md"]).await?;
    /// let answer = kb.query(orkeon::QueryParams {
    ///     collection: Some("kb".into()),
    ///     query: "How long is the Pebble S warranty?".into(),
    ///     ..Default::default()
    /// }).await?;
    /// assert_eq!(answer.text, "The Pebble S warranty lasts two years [1].");
    /// assert_eq!(answer.citations[0].source_id, "w.md");
    /// # kb.flush()?; Ok(()) }
    /// ```
    pub fn chat_model<F>(self, name: &str, build: F) -> Self
    where
        F: Fn(&LlmSettings) -> Result<Arc<dyn ChatModel>, ChatError> + Send + Sync + 'static,
    {
        self.components
            .chat_models
            .register(name, &[], Arc::new(build));
        self
    }

    /// Opens [`Knowledge`] (the store now, the embedder on first use).
    pub fn open(self) -> anyhow::Result<Knowledge> {
        Ok(Knowledge {
            app: KnowledgeApp::open_with(self.config, self.components)?,
        })
    }

    /// Starts a [`Host`]: the knowledge, the crew engine and the crews of `crews_dir`.
    pub async fn start(self) -> anyhow::Result<Host> {
        let services = Services::start_with(self.config, self.components).await?;
        services.load_crews();
        Ok(Host { services })
    }
}

/// One process's Orkeon without the daemon: knowledge, the crew engine (with the crew files of
/// `crews_dir` loaded, as `orkeon script run` has them) and Rhai scripts — what
/// `orkeon crew run` and `orkeon script run` run on. The embedder loads at start (its query
/// session on a task of its own).
///
/// The embedded store has one opener: open either a [`Knowledge`] or a `Host` on a data folder
/// at a time ([`Host::knowledge`] is the host's own).
pub struct Host {
    services: Services,
}

impl Host {
    /// Starts with the built-in components ([`Builder::start`] for custom ones).
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        Builder::new(config).start().await
    }

    /// Runs the crew file `file` to its end, as `orkeon crew run FILE --input k=v` does: its
    /// `rag:` collections are ingested first (sources relative to the file, which must lie
    /// under an ingestion root such as `crews_dir`), then its tasks run with `inputs` filling
    /// `{{ inputs.NAME }}`.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, crews) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// std::fs::write(crews.path().join("returns.md"),
    ///     "# Returns\n\nHeadphones may be returned within 30 days of delivery.\n")?;
    /// std::fs::write(crews.path().join("desk.yaml"), r#"
    /// name: desk
    /// llm: { provider: extractive }
    /// rag:
    ///   collections:
    ///     kb: { sources: [returns.md] }
    /// agents:
    ///   clerk: { role: Support clerk, goal: Answer from the knowledge base, knowledge: [kb] }
    /// tasks:
    ///   - { name: answer, agent: clerk, description: "Answer: {{ inputs.question }}",
    ///       expected_output: A cited answer }
    /// "#)?;
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// config.crews_dir = crews.path().to_path_buf();
    /// let host = orkeon::Host::start(config).await?;
    /// let done = host
    ///     .run_crew_file(crews.path().join("desk.yaml"), [("question", "How long can I return headphones?")])
    ///     .await?;
    /// assert!(done.succeeded(), "{:?}", done.run.reason);
    /// assert!(done.run.final_output.unwrap().contains("[1]"));
    /// host.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn run_crew_file<K: Into<String>, V: Into<String>>(
        &self,
        file: impl AsRef<Path>,
        inputs: impl IntoIterator<Item = (K, V)>,
    ) -> anyhow::Result<CrewRun> {
        let inputs: BTreeMap<String, String> = inputs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.services.run_crew_file(file.as_ref(), inputs).await
    }

    /// Runs the Rhai script `file` as `orkeon script run FILE --arg k=v` does (globals `rag`,
    /// `crew`, `args`; relative sources resolve against the script's folder; the
    /// `limits.script_*` bounds apply): the value of its last statement, as JSON. What it
    /// `print`s goes to standard output.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> anyhow::Result<()> {
    /// let (data, dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// let script = dir.path().join("count.rhai");
    /// std::fs::write(&script, "let n = 0; for i in 0..args.upto.parse_int() { n += i; } n")?;
    /// let mut config = orkeon::Config::default();
    /// config.data_dir = data.path().to_path_buf();
    /// let host = orkeon::Host::start(config).await?;
    /// let value = host.run_script(&script, [("upto", "4")]).await?;
    /// assert_eq!(value, serde_json::json!(6));
    /// host.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn run_script<K: Into<String>, V: Into<String>>(
        &self,
        file: impl AsRef<Path>,
        args: impl IntoIterator<Item = (K, V)>,
    ) -> anyhow::Result<serde_json::Value> {
        let file = file.as_ref();
        let args: BTreeMap<String, String> = args
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let host = ScriptHost::in_process(&self.services, file)?;
        orkeon_daemon::script::run_file(file, args, host, ScriptLimits::of(&self.services.config))
            .await
    }

    /// The knowledge operations of this host (ingest, retrieve, query, collections, …).
    pub fn knowledge(&self) -> &KnowledgeApp {
        &self.services.knowledge_app
    }

    /// The crew and run operations of this host (kickoff by name, watch, runs, cancel).
    pub fn crews(&self) -> &CrewApp {
        &self.services.crews
    }

    /// Lets runs finish (up to `server.shutdown_grace_secs`), stops the actors and flushes the
    /// store (call before the program exits).
    pub async fn shutdown(self) {
        self.services.shutdown().await;
    }
}
