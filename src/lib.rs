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

use std::path::{Path, PathBuf};

pub use orkeon_daemon::config::Config;
pub use orkeon_daemon::service::{
    ChunkingOverrides, IngestParams, KnowledgeApi, KnowledgeApp, QueryParams, ServiceError,
};
pub use orkeon_knowledge::ingest::IngestReport;
pub use orkeon_knowledge::types::{Citation, RagAnswer};

/// One data folder's knowledge: ingest sources into collections, retrieve and query them.
///
/// The embedder loads on the first operation that needs it (models resolve as for the CLI:
/// `embeddings.models_dir`, `ORKEON_MODELS_DIR`, the cache, then a pinned download).
pub struct Knowledge {
    app: KnowledgeApp,
}

impl Knowledge {
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
