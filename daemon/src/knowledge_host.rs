//! Builds the knowledge services from the configuration: the storage provider (documents,
//! quarantine, runs — [`Storage`]), the embedder and the ingestion pipeline. One instance per
//! process (the embedded store allows one opener).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use orkeon_crews::ports::ChatModel;
use orkeon_knowledge::embed::{Embedder, build_embedder};
use orkeon_knowledge::ingest::IngestionPipeline;
use orkeon_knowledge::query::groundedness::default_checker;
use orkeon_knowledge::query::{PipelineDeps, ProfileResolver, RerankerFactory, TransformerFactory};
use orkeon_knowledge::settings::EmbeddingSettings;
use orkeon_knowledge::store::DocumentStore;

use crate::config::Config;
use crate::storage::Storage;

/// The named components query pipelines are built from: the built-ins plus whatever a host
/// program registers (a custom reranker or query transformer, selected by name in the
/// configuration: `rag.rerank.kind`, `rag.query_transform.mode`). Cloning shares the
/// registries, so a registration made on a clone is seen by every pipeline built afterwards.
#[derive(Clone)]
pub struct Components {
    pub rerankers: Arc<RerankerFactory>,
    pub transformers: Arc<TransformerFactory>,
}

impl Components {
    /// The built-in rerankers (the cross-encoder resolved with `embedding`'s model search) and
    /// query transformers.
    pub fn builtin(embedding: &EmbeddingSettings) -> Self {
        Self {
            rerankers: Arc::new(RerankerFactory::builtin(embedding.clone())),
            transformers: Arc::new(TransformerFactory::builtin()),
        }
    }
}

/// The knowledge services of one process.
pub struct KnowledgeHost {
    pub data_dir: PathBuf,
    pub embedding_settings: EmbeddingSettings,
    /// The provider's stores (documents, quarantine, runs).
    pub storage: Arc<Storage>,
    /// The documents every reader and writer of this process goes through.
    pub store: Arc<dyn DocumentStore>,
    pub embedder: Arc<dyn Embedder>,
    pub ingestion: Arc<IngestionPipeline>,
    /// What the query pipelines' rerankers and transformers are built from.
    pub components: Components,
}

impl KnowledgeHost {
    /// Opens the configured storage provider and loads the configured embedder.
    pub fn open(config: &Config) -> anyhow::Result<Self> {
        Self::with_store(config, Self::open_store(config)?)
    }

    /// Opens the configured storage provider (no model is loaded).
    pub fn open_store(config: &Config) -> anyhow::Result<Arc<Storage>> {
        Ok(Arc::new(Storage::open(config)?))
    }

    /// Loads the configured embedder over an open store.
    pub fn with_store(config: &Config, storage: Arc<Storage>) -> anyhow::Result<Self> {
        Self::with_components(config, storage, Components::builtin(&config.embeddings))
    }

    /// [`KnowledgeHost::with_store`] with the host program's [`Components`].
    pub fn with_components(
        config: &Config,
        storage: Arc<Storage>,
        components: Components,
    ) -> anyhow::Result<Self> {
        let data_dir = config.data_dir.clone();
        let embedder = build_embedder(&config.embeddings).context("cannot load the embedder")?;
        let store = storage.documents.clone();
        let ingestion = Arc::new(IngestionPipeline::new(
            store.clone(),
            embedder.clone(),
            storage.quarantine.clone(),
            config.ingestion_settings(),
        ));
        Ok(Self {
            data_dir,
            embedding_settings: config.embeddings.clone(),
            storage,
            store,
            embedder,
            ingestion,
            components,
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
            store: self.store.clone(),
            embedder: self.embedder.clone(),
            chat,
            rerankers: self.components.rerankers.clone(),
            transformers: self.components.transformers.clone(),
            groundedness: Some(groundedness),
        }
    }
}
