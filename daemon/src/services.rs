//! Assembles one process's services from the configuration: the knowledge host, the profile
//! resolver, the run store, the augmenter, the crew engine and the application layer
//! over them. Used by the daemon, by `orkeon crew run` and by the gRPC server.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use orkeon_agents::prompts::PromptTemplates;
use orkeon_crews::ports::KnowledgeService;
use orkeon_crews::run::RunStatus;
use orkeon_crews::run::store::{RunRecord, StoredEvent};
use orkeon_crews::spec::parse_crew_file_checked;
use orkeon_knowledge::crew_groundedness::CrewGroundedness;
use orkeon_knowledge::crew_knowledge::{CollectionGates, CrewKnowledge};
use orkeon_knowledge::query::ProfileResolver;
use orkeon_knowledge::query::groundedness::default_checker;

use crate::actors::Augmenter;
use crate::config::Config;
use crate::crew_checks::HostChecks;
use crate::engine::{CrewEngine, RunLimits, ScratchKnowledgeFactory};
use crate::knowledge_host::{Components, KnowledgeHost};
use crate::registry::CrewRegistry;
use crate::runs::Runs;
use crate::service::{CrewApp, CrewEvalTool, KnowledgeApp};

/// A finished in-process run: its record (state, final output, per-task citation facts) and
/// every event it appended, in order.
#[derive(Debug, Clone)]
pub struct CrewRun {
    pub run: RunRecord,
    pub events: Vec<StoredEvent>,
}

impl CrewRun {
    /// Whether the run ended `finished` or `degraded` (not failed or cancelled).
    pub fn succeeded(&self) -> bool {
        matches!(self.run.state, RunStatus::Finished | RunStatus::Degraded)
    }
}

/// Everything a running Orkeon process needs.
pub struct Services {
    pub config: Arc<Config>,
    pub host: Arc<KnowledgeHost>,
    pub resolver: Arc<ProfileResolver>,
    /// Crews' knowledge (bootstrap and augmentation).
    pub knowledge: Arc<CrewKnowledge>,
    pub augmenter: Arc<Augmenter>,
    pub registry: Arc<CrewRegistry>,
    pub runs: Arc<Runs>,
    pub engine: Arc<CrewEngine>,
    /// The application layer: knowledge operations.
    pub knowledge_app: Arc<KnowledgeApp>,
    /// The application layer: crew and run operations.
    pub crews: Arc<CrewApp>,
}

impl Services {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        let components = Components::builtin(&config.embeddings);
        Self::start_with(config, components).await
    }

    /// [`Services::start`] with the host program's rerankers and transformers.
    pub async fn start_with(config: Config, components: Components) -> anyhow::Result<Self> {
        let config = Arc::new(config);
        let storage = KnowledgeHost::open_store(&config)?;
        let host = Arc::new(KnowledgeHost::with_components(
            &config, storage, components,
        )?);
        // Crews query their knowledge: the query session loads while the rest starts, not at
        // the first query.
        let embedder = host.embedder.clone();
        tokio::spawn(async move {
            if let Err(error) = embedder.prepare_for_queries().await {
                tracing::error!(%error, "the embedder's query session did not load; queries will retry it");
            }
        });
        let runs = Arc::new(Runs::new(host.storage.runs.clone()));
        let recovered = runs.recover_interrupted()?;
        if recovered > 0 {
            tracing::warn!(
                runs = recovered,
                "runs interrupted by a previous stop were marked failed (each got a terminal event)"
            );
        }
        let chat = host.components.chat_model(&config.llm).ok();
        let resolver = host.resolver(&config, chat.clone());
        let gates = Arc::new(CollectionGates::default());
        let knowledge = Arc::new(CrewKnowledge::new(
            host.ingestion.clone(),
            resolver.clone(),
            config.rag.profile.clone(),
            gates.clone(),
        ));
        let augmenter = Arc::new(Augmenter::new(
            knowledge.clone() as Arc<dyn KnowledgeService>,
            config.limits.max_concurrent_retrievals,
            std::time::Duration::from_secs(config.limits.retrieval_timeout_secs),
        ));
        // A run with throwaway collections gets knowledge of its own over the same components,
        // gates and retrieval slots.
        let scratch_knowledge: ScratchKnowledgeFactory = {
            let (host, config, gates, augmenter) = (
                host.clone(),
                config.clone(),
                gates.clone(),
                augmenter.clone(),
            );
            Arc::new(move |ephemeral| {
                let run = host.run_scratch(&config, chat.clone(), ephemeral);
                let knowledge = CrewKnowledge::new(
                    run.ingestion,
                    run.resolver,
                    config.rag.profile.clone(),
                    gates.clone(),
                );
                Arc::new(augmenter.over(Arc::new(knowledge))) as Arc<dyn KnowledgeService>
            })
        };
        let templates = Arc::new(
            PromptTemplates::load(config.prompts_dir.as_deref())
                .context("cannot load prompt templates")?,
        );
        let registry = Arc::new(CrewRegistry::default());
        // Crews' cited task outputs are scored by the checker the query pipeline uses for the
        // run's model: an LLM judge when the crew runs on a real LLM, else the heuristic one
        // (content-word overlap with the cited passages).
        let groundedness: crate::engine::GroundednessFactory =
            Arc::new(|chat| Arc::new(CrewGroundedness::new(default_checker(Some(chat.clone())))));
        let knowledge_app = Arc::new(KnowledgeApp::new(
            config.clone(),
            host.clone(),
            resolver.clone(),
            gates,
        ));
        // Agents' `rag_eval` runs the application layer's evaluation.
        let eval_tool = Arc::new(CrewEvalTool::new(
            knowledge_app.clone(),
            config.rag.profile.clone(),
        ));
        let engine = Arc::new(
            CrewEngine::new(
                registry.clone(),
                runs.clone(),
                augmenter.clone() as Arc<dyn KnowledgeService>,
                config.llm.clone(),
                templates,
                RunLimits {
                    max_concurrent: config.limits.max_concurrent_runs,
                    max_queued: config.limits.max_queued_runs,
                },
            )
            .with_groundedness(groundedness)
            .with_eval_tool(eval_tool)
            .with_scratch_knowledge(scratch_knowledge)
            .with_chat_models(host.components.chat_models.clone()),
        );
        let crews = Arc::new(CrewApp::new(registry.clone(), engine.clone(), runs.clone()));
        Ok(Self {
            config,
            host,
            resolver,
            knowledge,
            augmenter,
            registry,
            runs,
            engine,
            knowledge_app,
            crews,
        })
    }

    /// The checks crew files get here: this process's configuration and LLM providers.
    pub fn checks(&self) -> HostChecks {
        HostChecks::new(&self.config).with_providers(self.host.components.chat_models.known())
    }

    /// Loads every crew file of the crews folder (`crews_dir`) into the registry once (no
    /// watcher, no on-load kickoffs — what `orkeon script run` works with); invalid ones are
    /// registered with their error, which a kickoff naming them reports.
    pub fn load_crews(&self) {
        let dir = &self.config.crews_dir;
        let Ok(files) = crate::watch::crew_files(dir) else {
            tracing::warn!(dir = %dir.display(), "no crews folder: a kickoff will find no crew");
            return;
        };
        let checks = self.checks();
        for file in files {
            self.registry
                .apply(&file, parse_crew_file_checked(&file, &checks));
        }
    }

    /// Runs one crew file in this process (`orkeon crew run`): validates it with the host's
    /// checks, starts a run with `inputs`, waits for its end and returns it with its events.
    pub async fn run_crew_file(
        &self,
        file: &Path,
        inputs: BTreeMap<String, String>,
    ) -> anyhow::Result<CrewRun> {
        let spec =
            parse_crew_file_checked(file, &self.checks()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let record = self
            .engine
            .start(Arc::new(spec), inputs, None)
            .context("cannot start the run")?;
        let run = self.engine.wait(&record.run_id).await?;
        let events = self.runs.events_after(&run.run_id, 0)?;
        Ok(CrewRun { run, events })
    }

    /// Lets runs finish (up to the configured grace), stops the actors and flushes the store.
    pub async fn shutdown(&self) {
        let grace = std::time::Duration::from_secs(self.config.server.shutdown_grace_secs);
        self.engine.shutdown(grace).await;
        self.augmenter.stop();
        if let Err(error) = self.host.storage.flush() {
            tracing::error!(%error, "flushing the store failed");
        }
    }
}
