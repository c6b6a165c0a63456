//! Builds the knowledge services from the configuration: the embedded store, the embedder, the
//! quarantine and the ingestion pipeline. One instance per process (sled allows one opener).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use orkeon_crews::ports::ChatModel;
use orkeon_knowledge::embed::{Embedder, build_embedder};
use orkeon_knowledge::ingest::IngestionPipeline;
use orkeon_knowledge::query::groundedness::default_checker;
use orkeon_knowledge::query::{PipelineDeps, ProfileResolver, RerankerFactory, TransformerFactory};
use orkeon_knowledge::settings::EmbeddingSettings;
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore};

use crate::config::Config;

/// The knowledge services of one process.
pub struct KnowledgeHost {
    pub data_dir: PathBuf,
    pub embedding_settings: EmbeddingSettings,
    pub store: Arc<EmbeddedStore>,
    pub embedder: Arc<dyn Embedder>,
    pub ingestion: Arc<IngestionPipeline>,
}

impl KnowledgeHost {
    /// Opens the store under `data_dir` and loads the configured embedder.
    pub fn open(config: &Config) -> anyhow::Result<Self> {
        Self::with_store(config, Self::open_store(config)?)
    }

    /// Opens the store under `data_dir` (no model is loaded).
    pub fn open_store(config: &Config) -> anyhow::Result<Arc<EmbeddedStore>> {
        if config.rag.store.provider == orkeon_knowledge::settings::StoreProvider::Postgres {
            anyhow::bail!(
                "rag.store.provider: postgres is not wired into the daemon yet (the provider is the orkeon-store-postgres crate); use `embedded`"
            );
        }
        let data_dir = &config.data_dir;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
        Ok(Arc::new(
            EmbeddedStore::open(data_dir, config.rag.store.clone()).with_context(|| {
                format!(
                    "cannot open the store in {} (is another orkeon process using it?)",
                    data_dir.display()
                )
            })?,
        ))
    }

    /// Loads the configured embedder over an open store.
    pub fn with_store(config: &Config, store: Arc<EmbeddedStore>) -> anyhow::Result<Self> {
        let data_dir = config.data_dir.clone();
        let embedder = build_embedder(&config.embeddings).context("cannot load the embedder")?;
        let quarantine = store.quarantine().context("cannot open the quarantine")?;
        let ingestion = Arc::new(IngestionPipeline::new(
            store.clone() as Arc<dyn DocumentStore>,
            embedder.clone(),
            quarantine,
            config.ingestion_settings(),
        ));
        Ok(Self {
            data_dir,
            embedding_settings: config.embeddings.clone(),
            store,
            embedder,
            ingestion,
        })
    }
}

impl KnowledgeHost {
    /// The profile resolver of this process: the staged profiles plus corrective and adaptive.
    pub fn resolver(
        &self,
        config: &Config,
        chat: Option<Arc<dyn ChatModel>>,
    ) -> Arc<ProfileResolver> {
        let resolver = Arc::new(ProfileResolver::new(
            config.rag.clone(),
            self.pipeline_deps(chat),
            None,
        ));
        orkeon_knowledge::corrective::register_profiles_shared(&resolver);
        resolver
    }

    /// Dependencies of the query pipelines. An LLM groundedness checker needs a real chat
    /// model; with the offline extractive model (or none) the heuristic checker is used.
    pub fn pipeline_deps(&self, chat: Option<Arc<dyn ChatModel>>) -> PipelineDeps {
        let groundedness = default_checker(chat.clone());
        PipelineDeps {
            store: self.store.clone() as Arc<dyn DocumentStore>,
            embedder: self.embedder.clone(),
            chat,
            rerankers: Arc::new(RerankerFactory::builtin(self.embedding_settings.clone())),
            transformers: Arc::new(TransformerFactory::builtin()),
            groundedness: Some(groundedness),
        }
    }
}
