//! Assembles one process's services from the configuration: the knowledge host, the profile
//! resolver, the run store, the augmenter actor and the crew engine. Used by the daemon, by
//! `orkeon crew run` and by the gRPC server.

use std::sync::Arc;

use anyhow::Context;
use orkeon_agents::prompts::PromptTemplates;
use orkeon_crews::ports::KnowledgeService;
use orkeon_knowledge::query::{PipelineDeps, ProfileResolver};

use crate::actors::AugmenterHandle;
use crate::config::Config;
use crate::engine::CrewEngine;
use crate::knowledge_host::KnowledgeHost;
use crate::knowledge_service::DaemonKnowledge;
use crate::registry::CrewRegistry;
use crate::runs::RunStore;

/// Everything a running Orkeon process needs.
pub struct Services {
    pub config: Config,
    pub host: KnowledgeHost,
    pub resolver: Arc<ProfileResolver>,
    pub knowledge: Arc<DaemonKnowledge>,
    pub augmenter: Arc<AugmenterHandle>,
    pub registry: Arc<CrewRegistry>,
    pub runs: Arc<RunStore>,
    pub engine: Arc<CrewEngine>,
}

impl Services {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        let host = KnowledgeHost::open(&config)?;
        let runs = Arc::new(RunStore::open(&host.store.db()).context("cannot open the run store")?);
        let recovered = runs.recover_interrupted()?;
        if recovered > 0 {
            tracing::warn!(
                runs = recovered,
                "runs interrupted by a previous stop were marked failed"
            );
        }
        let chat = orkeon_agents::llm::build_chat_model(&config.llm).ok();
        let resolver = host.resolver(&config, chat);
        let knowledge = Arc::new(DaemonKnowledge::new(
            host.ingestion.clone(),
            resolver.clone(),
            config.rag.profile.clone(),
        ));
        let (augmenter, _handle) =
            AugmenterHandle::spawn(knowledge.clone() as Arc<dyn KnowledgeService>)
                .await
                .map_err(anyhow::Error::msg)?;
        let augmenter = Arc::new(augmenter);
        let templates = Arc::new(
            PromptTemplates::load(config.prompts_dir.as_deref())
                .context("cannot load prompt templates")?,
        );
        let registry = Arc::new(CrewRegistry::default());
        let engine = Arc::new(CrewEngine::new(
            registry.clone(),
            runs.clone(),
            augmenter.clone() as Arc<dyn KnowledgeService>,
            config.llm.clone(),
            templates,
        ));
        Ok(Self {
            config,
            host,
            resolver,
            knowledge,
            augmenter,
            registry,
            runs,
            engine,
        })
    }

    /// Lets runs finish (up to the configured grace), stops the actors and flushes the store.
    pub async fn shutdown(&self) {
        let grace = std::time::Duration::from_secs(self.config.server.shutdown_grace_secs);
        self.engine.shutdown(grace).await;
        self.augmenter.stop();
        if let Err(error) = self.host.store.flush() {
            tracing::error!(%error, "flushing the store failed");
        }
    }

    /// A pipeline deps bundle is cheap to clone; expose it for the gRPC/CLI query paths.
    pub fn deps(&self) -> PipelineDeps {
        self.host
            .pipeline_deps(orkeon_agents::llm::build_chat_model(&self.config.llm).ok())
    }
}
