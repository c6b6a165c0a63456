//! Builds the knowledge services from the configuration: the storage provider (documents,
//! quarantine, runs — [`Storage`]), the embedder and the ingestion pipeline. One instance per
//! process (the embedded store allows one opener).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use orkeon_agents::llm::LlmSettings;
use orkeon_crews::ports::{ChatError, ChatModel};
use orkeon_knowledge::embed::{Embedder, build_embedder};
use orkeon_knowledge::ingest::IngestionPipeline;
use orkeon_knowledge::query::groundedness::default_checker;
use orkeon_knowledge::query::{PipelineDeps, ProfileResolver, RerankerFactory, TransformerFactory};
use orkeon_knowledge::settings::EmbeddingSettings;
use orkeon_knowledge::store::{DocumentStore, ScratchLayer, ScratchNames};

use crate::chat_models::{self, ChatModels};
use crate::config::Config;
use crate::storage::Storage;

/// The named components query pipelines are built from: the built-ins plus whatever a host
/// program registers (a custom reranker, query transformer or chat model, selected by name in
/// the configuration: `rag.rerank.kind`, `rag.query_transform.mode`, `llm.provider`). Cloning shares the
/// registries, so a registration made on a clone is seen by every pipeline built afterwards.
#[derive(Clone)]
pub struct Components {
    pub rerankers: Arc<RerankerFactory>,
    pub transformers: Arc<TransformerFactory>,
    /// The LLM providers `llm.provider` (and crew files' `llm:`) select from.
    pub chat_models: Arc<ChatModels>,
}

impl Components {
    /// The built-in rerankers (the cross-encoder resolved with `embedding`'s model search),
    /// query transformers and LLM providers.
    pub fn builtin(embedding: &EmbeddingSettings) -> Self {
        Self {
            rerankers: Arc::new(RerankerFactory::builtin(embedding.clone())),
            transformers: Arc::new(TransformerFactory::builtin()),
            chat_models: Arc::new(chat_models::builtin()),
        }
    }

    /// The chat model `llm` selects (see [`chat_models::build`]).
    pub fn chat_model(&self, llm: &LlmSettings) -> Result<Arc<dyn ChatModel>, ChatError> {
        chat_models::build(&self.chat_models, llm)
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
    /// This process's throwaway collections (a script's `rag.scratch`): `store` and the
    /// ingestion keep the collections named in it in memory.
    pub scratch: ScratchLayer,
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
        let scratch = Self::scratch_layer(config, &storage, Arc::default());
        Self::with_scratch(config, storage, scratch, components)
    }

    /// A [`ScratchLayer`] over `storage` keeping `names` in memory (within
    /// `limits.max_ephemeral_chunks`).
    pub fn scratch_layer(
        config: &Config,
        storage: &Storage,
        names: Arc<ScratchNames>,
    ) -> ScratchLayer {
        ScratchLayer::over(
            storage.documents.clone(),
            storage.quarantine.clone(),
            names,
            config.limits.max_ephemeral_chunks,
        )
    }

    /// [`KnowledgeHost::with_components`] over a scratch layer made beforehand (whoever made
    /// it reads through the same layer).
    pub fn with_scratch(
        config: &Config,
        storage: Arc<Storage>,
        scratch: ScratchLayer,
        components: Components,
    ) -> anyhow::Result<Self> {
        let data_dir = config.data_dir.clone();
        let embedder = build_embedder(&config.embeddings).context("cannot load the embedder")?;
        let store = scratch.store.clone() as Arc<dyn DocumentStore>;
        let ingestion = Arc::new(IngestionPipeline::new(
            store.clone(),
            embedder.clone(),
            scratch.quarantine.clone(),
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
            scratch,
        })
    }
}

/// The knowledge of one crew run that declares throwaway collections (`ephemeral: true`):
/// an ingestion pipeline and profiles over a store of its own that keeps those collections in
/// memory and passes every other one through to the process's store. Dropped with the run.
pub struct RunScratch {
    pub ingestion: Arc<IngestionPipeline>,
    pub resolver: Arc<ProfileResolver>,
}

impl KnowledgeHost {
    /// [`RunScratch`] for a run whose throwaway collections are `ephemeral` (same embedder,
    /// same components, same profiles as the process's).
    pub fn run_scratch(
        &self,
        config: &Config,
        chat: Option<Arc<dyn ChatModel>>,
        ephemeral: Vec<String>,
    ) -> RunScratch {
        let layer =
            Self::scratch_layer(config, &self.storage, Arc::new(ScratchNames::of(ephemeral)));
        let store = layer.store.clone() as Arc<dyn DocumentStore>;
        let ingestion = Arc::new(IngestionPipeline::new(
            store.clone(),
            self.embedder.clone(),
            layer.quarantine.clone(),
            config.ingestion_settings(),
        ));
        let mut deps = self.pipeline_deps(chat);
        deps.store = store;
        let resolver = Arc::new(ProfileResolver::new(config.rag.clone(), deps, None));
        orkeon_knowledge::corrective::register_profiles_shared(&resolver);
        RunScratch {
            ingestion,
            resolver,
        }
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
