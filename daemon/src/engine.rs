//! The crew engine: kickoff → run id at once; each run (a `CrewRun`) bootstraps the crew's
//! `rag:` collections, spawns one agent actor per agent, runs the process, and records every
//! event in the run store.
//!
//! Where a run executes:
//! - **One process** (the embedded store, `orkeon crew run`, scripts): on the engine that
//!   kicked it off, in its line of `limits.max_concurrent_runs` slots.
//! - **A fleet** (a run store shared by several daemons, each serving the queue with
//!   [`CrewEngine::serve_queue`]): a kickoff on any daemon records the run `queued` with the
//!   crew file's hash; every daemon's queue worker claims queued runs of the crews it serves
//!   with the same definition while it has a free slot ([`RunStore::claim`], `FOR UPDATE SKIP
//!   LOCKED` on PostgreSQL) and executes them under a lease. The worker wakes on the store's
//!   notices (PostgreSQL `LISTEN/NOTIFY`) and, as a fallback, every [`QUEUE_POLL`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use orkeon_agents::llm::{LlmSettings, settings_with_overrides};
use orkeon_agents::prompts::PromptTemplates;
use orkeon_agents::runner::AgentTaskRunner;
use orkeon_agents::tools::EvalTool;
use orkeon_crews::ports::{
    ChatModel, CollectionState, GroundednessCheck, KnowledgeService, TaskRunner,
};
use orkeon_crews::run::{ProcessContext, RunEvent, RunEventSink, RunStatus, run_process};
use orkeon_crews::spec::{CrewSpec, DegradedPolicy};
use tokio::sync::watch;

use crate::actors::AgentPool;
use crate::chat_models::{self, ChatModels};

/// Makes the groundedness check of one run from its chat model (an LLM judge when the crew's
/// model is a real LLM, the heuristic checker otherwise).
pub type GroundednessFactory =
    Arc<dyn Fn(&Arc<dyn ChatModel>) -> Arc<dyn GroundednessCheck> + Send + Sync>;
use crate::registry::CrewRegistry;
use crate::runs::{RunNotice, RunRecord, RunStoreError, Runs, now};

/// How often a queue worker looks at the shared queue when no notice woke it.
pub const QUEUE_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a kickoff was refused.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("crew '{name}' is not loaded (known crews: {})", known.join(", "))]
    UnknownCrew { name: String, known: Vec<String> },
    #[error("crew '{name}' has no valid version: {error}")]
    InvalidCrew { name: String, error: String },
    #[error("missing input '{0}': pass it with --input {0}=VALUE")]
    MissingInput(String),
    #[error("the daemon is shutting down")]
    ShuttingDown,
    #[error(
        "too many runs: {running} running and {queued} queued (limits.max_concurrent_runs, limits.max_queued_runs); try again when some have finished"
    )]
    Overloaded { running: usize, queued: usize },
    #[error(transparent)]
    Store(#[from] RunStoreError),
    #[error("{0}")]
    Setup(String),
    #[error(
        "crew '{crew}' differs between the daemons sharing this database: this one serves {file} (sha256 {mine}), {}; deploy the same crew file to every daemon, then kick off again",
        theirs.iter().map(|(daemon, hash)| format!("{daemon} serves sha256 {hash}")).collect::<Vec<_>>().join(", ")
    )]
    DefinitionConflict {
        crew: String,
        file: String,
        mine: String,
        theirs: Vec<(String, String)>,
    },
}

/// Runs crews.
pub struct CrewEngine {
    pub registry: Arc<CrewRegistry>,
    pub runs: Arc<Runs>,
    knowledge: Arc<dyn KnowledgeService>,
    /// Scores cited task outputs; `None`: outputs are not scored.
    groundedness: Option<GroundednessFactory>,
    /// Serves agents' `rag_eval`; `None`: the tool answers that evaluation is unavailable.
    eval: Option<Arc<dyn EvalTool>>,
    /// Builds the knowledge of a run that declares throwaway collections; `None`: such runs
    /// fail with a message saying so.
    scratch: Option<ScratchKnowledgeFactory>,
    /// The LLM providers crews' `llm:` select from.
    chat_models: Arc<ChatModels>,
    llm: LlmSettings,
    templates: Arc<PromptTemplates>,
    active: Mutex<HashMap<String, ActiveRun>>,
    shutting_down: watch::Sender<bool>,
    /// One permit per run allowed to execute at once; the others wait in line.
    slots: Arc<tokio::sync::Semaphore>,
    max_concurrent: usize,
    max_queued: usize,
    /// Set once this engine serves the fleet's shared queue: kickoffs then enqueue.
    fleet: std::sync::atomic::AtomicBool,
    /// Wakes this engine's queue worker (a kickoff here, a run ending here).
    wake: tokio::sync::Notify,
}

/// Makes the knowledge service of one run from the names of its `ephemeral: true`
/// collections: those live in memory for that run alone, every other goes to the process's.
pub type ScratchKnowledgeFactory =
    Arc<dyn Fn(Vec<String>) -> Arc<dyn KnowledgeService> + Send + Sync>;

/// How many runs execute at once, and how many may wait for a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub max_concurrent: usize,
    pub max_queued: usize,
}

/// A run in flight: its cancel switch and its task.
type ActiveRun = (watch::Sender<bool>, tokio::task::JoinHandle<()>);

/// Appends crews' run events to the run store.
struct StoreSink {
    runs: Arc<Runs>,
    run_id: String,
}

impl RunEventSink for StoreSink {
    fn emit(&self, event: RunEvent) {
        if let Err(error) = self.runs.append(&self.run_id, event) {
            tracing::error!(run_id = %self.run_id, %error, "cannot record a run event");
        }
    }
}

impl CrewEngine {
    pub fn new(
        registry: Arc<CrewRegistry>,
        runs: Arc<Runs>,
        knowledge: Arc<dyn KnowledgeService>,
        llm: LlmSettings,
        templates: Arc<PromptTemplates>,
        limits: RunLimits,
    ) -> Self {
        let max_concurrent = limits.max_concurrent.max(1);
        Self {
            registry,
            runs,
            knowledge,
            groundedness: None,
            eval: None,
            scratch: None,
            chat_models: Arc::new(chat_models::builtin()),
            llm,
            templates,
            active: Mutex::new(HashMap::new()),
            shutting_down: watch::channel(false).0,
            slots: Arc::new(tokio::sync::Semaphore::new(max_concurrent)),
            max_concurrent,
            max_queued: limits.max_queued,
            fleet: std::sync::atomic::AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// True while kickoffs go through the fleet's shared queue.
    fn in_fleet(&self) -> bool {
        self.fleet.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Scores every cited task output of every run with the checker `factory` makes for the
    /// run's chat model (the `task_completed` event and the run record carry the verdict).
    pub fn with_groundedness(mut self, factory: GroundednessFactory) -> Self {
        self.groundedness = Some(factory);
        self
    }

    /// Serves agents' `rag_eval` tool with `eval`.
    pub fn with_eval_tool(mut self, eval: Arc<dyn EvalTool>) -> Self {
        self.eval = Some(eval);
        self
    }

    /// Serves runs whose crew declares throwaway collections (`ephemeral: true`) with the
    /// knowledge `factory` makes for each run.
    pub fn with_scratch_knowledge(mut self, factory: ScratchKnowledgeFactory) -> Self {
        self.scratch = Some(factory);
        self
    }

    /// Builds crews' chat models from `models` (the built-in providers by default).
    pub fn with_chat_models(mut self, models: Arc<ChatModels>) -> Self {
        self.chat_models = models;
        self
    }

    /// Refuses a new run when every slot is taken and the line is full.
    fn admit(&self) -> Result<(), EngineError> {
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let in_flight = active.values().filter(|(_, h)| !h.is_finished()).count();
        if in_flight >= self.max_concurrent + self.max_queued {
            let running = self.max_concurrent - self.slots.available_permits();
            return Err(EngineError::Overloaded {
                running,
                queued: in_flight.saturating_sub(running),
            });
        }
        Ok(())
    }

    /// Starts a run of a registered crew; returns its record at once.
    pub fn kickoff(
        self: &Arc<Self>,
        crew: &str,
        inputs: BTreeMap<String, String>,
        idempotency_key: Option<String>,
    ) -> Result<RunRecord, EngineError> {
        if *self.shutting_down.borrow() {
            return Err(EngineError::ShuttingDown);
        }
        let entry = self
            .registry
            .get(crew)
            .ok_or_else(|| EngineError::UnknownCrew {
                name: crew.to_string(),
                known: self.registry.names(),
            })?;
        let spec = entry.spec.clone().ok_or_else(|| EngineError::InvalidCrew {
            name: crew.to_string(),
            error: entry.error.clone().unwrap_or_default(),
        })?;
        let theirs = self.runs.serve_definition(crew, &entry.hash)?;
        if !theirs.is_empty() {
            return Err(EngineError::DefinitionConflict {
                crew: crew.to_string(),
                file: entry.file.display().to_string(),
                mine: entry.hash.clone(),
                theirs,
            });
        }
        if self.in_fleet() {
            return self.enqueue(spec, &entry.hash, inputs, idempotency_key);
        }
        self.start(spec, inputs, idempotency_key)
    }

    /// Records a fleet run `queued` for any daemon serving the same definition to claim.
    /// Refused while the shared queue holds `limits.max_queued_runs` runs.
    fn enqueue(
        self: &Arc<Self>,
        spec: Arc<CrewSpec>,
        definition: &str,
        inputs: BTreeMap<String, String>,
        idempotency_key: Option<String>,
    ) -> Result<RunRecord, EngineError> {
        let inputs = Self::inputs(&spec, inputs)?;
        if let Some(key) = &idempotency_key
            && let Some(existing) = self.runs.find_by_key(&spec.name, key)?
        {
            return Ok(existing);
        }
        let queued = self.runs.queued()?;
        if queued >= self.max_queued {
            return Err(EngineError::Overloaded {
                running: self.max_concurrent - self.slots.available_permits(),
                queued,
            });
        }
        let mut record = Self::record(&spec, inputs, idempotency_key, RunStatus::Queued);
        record.definition = Some(definition.to_string());
        record.retry = spec.retry;
        let (record, _) = self.runs.create(record)?;
        self.wake.notify_one();
        Ok(record)
    }

    /// Makes this engine one of the fleet's queue workers (the daemon calls it when its run
    /// store is shared): from now on kickoffs enqueue, and a background task claims queued runs
    /// of the crews this daemon serves whenever a slot is free. A store one process owns has
    /// no queue: nothing changes.
    pub fn serve_queue(self: &Arc<Self>) {
        if !self.runs.is_shared() || self.fleet.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move { engine.queue_worker().await });
    }

    /// The queue worker: take a slot, claim a run for it, execute it; when there is nothing to
    /// claim, sleep until a notice, a local kickoff or [`QUEUE_POLL`].
    async fn queue_worker(self: Arc<Self>) {
        let mut notices = self.runs.notices();
        let mut shutting_down = self.shutting_down.subscribe();
        let mut backoff = std::time::Duration::from_millis(100);
        loop {
            if *shutting_down.borrow() {
                return;
            }
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                return;
            };
            if *shutting_down.borrow() {
                return;
            }
            let served: Vec<(String, String)> = self
                .registry
                .list()
                .into_iter()
                .filter(|entry| entry.spec.is_some())
                .map(|entry| (entry.name, entry.hash))
                .collect();
            let claimed = if served.is_empty() {
                Ok(None)
            } else {
                self.runs.claim(&served)
            };
            match claimed {
                Ok(Some(record)) => {
                    backoff = std::time::Duration::from_millis(100);
                    self.execute_claimed(record, slot);
                    continue;
                }
                Ok(None) => drop(slot),
                Err(error) => {
                    drop(slot);
                    tracing::warn!(%error, "cannot claim a run from the shared queue; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(QUEUE_POLL);
                    continue;
                }
            }
            let notice = async {
                match notices.as_mut() {
                    Some(rx) => loop {
                        match rx.recv().await {
                            Ok(RunNotice::Queued { .. } | RunNotice::Resync) => return,
                            Ok(RunNotice::Event { .. }) => {}
                            // Missed some: look again.
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                                std::future::pending::<()>().await
                            }
                        }
                    },
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = notice => {}
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(QUEUE_POLL) => {}
                _ = shutting_down.changed() => {}
            }
        }
    }

    /// Executes a run this daemon claimed, holding `slot` until it ends.
    fn execute_claimed(
        self: &Arc<Self>,
        record: RunRecord,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let run_id = record.run_id.clone();
        let spec = self
            .registry
            .get(&record.crew)
            .filter(|entry| Some(&entry.hash) == record.definition.as_ref())
            .and_then(|entry| entry.spec);
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let engine = self.clone();
        let task_run_id = run_id.clone();
        // Held across the spawn, so the task's own removal comes after this insertion.
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let handle = tokio::spawn(async move {
            let _slot = slot;
            match spec {
                Some(spec) => {
                    engine
                        .execute(task_run_id.clone(), spec, record.inputs, cancel_rx)
                        .await
                }
                // The file changed between the claim and now.
                None => engine.end(
                    &task_run_id,
                    RunStatus::Failed,
                    Some(format!(
                        "crew '{}' changed on this daemon after it claimed the run; kick it off again",
                        record.crew
                    )),
                    None,
                ),
            }
            engine.runs.close_live(&task_run_id);
            let mut active = engine.active.lock().unwrap_or_else(|p| p.into_inner());
            active.remove(&task_run_id);
            drop(active);
            engine.wake.notify_one();
        });
        active.insert(run_id, (cancel_tx, handle));
    }

    /// The run's inputs: `inputs` over the crew's `kickoff.inputs`, every required one present.
    fn inputs(
        spec: &CrewSpec,
        mut inputs: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        for (key, value) in &spec.kickoff.inputs {
            inputs.entry(key.clone()).or_insert_with(|| value.clone());
        }
        match spec
            .required_inputs()
            .into_iter()
            .find(|k| !inputs.contains_key(k))
        {
            Some(missing) => Err(EngineError::MissingInput(missing)),
            None => Ok(inputs),
        }
    }

    /// A new run record of `spec`.
    fn record(
        spec: &CrewSpec,
        inputs: BTreeMap<String, String>,
        idempotency_key: Option<String>,
        state: RunStatus,
    ) -> RunRecord {
        RunRecord {
            run_id: uuid::Uuid::now_v7().to_string(),
            crew: spec.name.clone(),
            crew_file: spec.file.display().to_string(),
            state,
            inputs,
            started_at: now(),
            finished_at: None,
            reason: None,
            final_output: None,
            idempotency_key,
            last_seq: 0,
            tasks: Vec::new(),
            definition: None,
            worker: None,
            attempts: 0,
            retry: 0,
        }
    }

    /// Records, for a fleet sharing the run store, that this daemon serves `crew`'s loaded
    /// definition (so a peer's kickoff sees a difference before this daemon kicks it off).
    pub fn publish_definition(&self, crew: &str) {
        if let Some(entry) = self.registry.get(crew)
            && let Err(error) = self.runs.serve_definition(crew, &entry.hash)
        {
            tracing::warn!(crew, %error, "cannot record the crew's definition for the fleet");
        }
    }

    /// Starts a run of the given spec (used by `orkeon crew run` and by kickoff).
    pub fn start(
        self: &Arc<Self>,
        spec: Arc<CrewSpec>,
        inputs: BTreeMap<String, String>,
        idempotency_key: Option<String>,
    ) -> Result<RunRecord, EngineError> {
        let inputs = Self::inputs(&spec, inputs)?;
        if let Some(key) = &idempotency_key
            && let Some(existing) = self.runs.find_by_key(&spec.name, key)?
        {
            return Ok(existing);
        }
        self.admit()?;
        let record = Self::record(&spec, inputs.clone(), idempotency_key, RunStatus::Running);
        let (record, created) = self.runs.create(record)?;
        if !created {
            return Ok(record);
        }
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let engine = self.clone();
        let run_id = record.run_id.clone();
        let task_run_id = run_id.clone();
        let slots = self.slots.clone();
        // Held across the spawn, so the task's own removal comes after this insertion.
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let handle = tokio::spawn(async move {
            // Wait for a slot (bounded by admit); a closed semaphore never happens.
            let _slot = slots.acquire_owned().await;
            engine
                .execute(task_run_id.clone(), spec, inputs, cancel_rx)
                .await;
            engine.runs.close_live(&task_run_id);
            let mut active = engine.active.lock().unwrap_or_else(|p| p.into_inner());
            active.remove(&task_run_id);
        });
        active.insert(run_id, (cancel_tx, handle));
        drop(active);
        Ok(record)
    }

    /// Asks a run to stop between tasks, or cancels it while it waits in the fleet's queue.
    /// Returns false when it is neither running here nor queued.
    pub fn cancel(&self, run_id: &str) -> bool {
        {
            let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((cancel, _)) = active.get(run_id) {
                return cancel.send(true).is_ok();
            }
        }
        match self
            .runs
            .cancel_queued(run_id, "cancelled before it started")
        {
            Ok(cancelled) => cancelled,
            Err(error) => {
                tracing::warn!(run_id, %error, "cannot cancel a queued run");
                false
            }
        }
    }

    /// Waits for a run to end (used by `orkeon crew run`).
    pub async fn wait(&self, run_id: &str) -> Result<RunRecord, EngineError> {
        use futures::StreamExt;
        let last_seq = self.runs.get(run_id)?.last_seq;
        let mut events = std::pin::pin!(self.runs.follow(run_id, last_seq));
        while let Some(event) = events.next().await {
            event?;
        }
        // The terminal event is appended just before the record is finished: wait for that.
        loop {
            let run = self.runs.get(run_id)?;
            if run.state.is_terminal() {
                return Ok(run);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Refuses new kickoffs, lets runs finish until `grace`, then cancels the rest.
    pub async fn shutdown(&self, grace: std::time::Duration) {
        let _ = self.shutting_down.send(true);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let pending: Vec<String> = {
                let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
                active
                    .iter()
                    .filter(|(_, (_, h))| !h.is_finished())
                    .map(|(id, _)| id.clone())
                    .collect()
            };
            if pending.is_empty() {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(runs = pending.len(), "grace period over: cancelling runs");
                for id in &pending {
                    self.cancel(id);
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    fn chat_model(&self, spec: &CrewSpec) -> Result<Arc<dyn ChatModel>, String> {
        let settings = match &spec.llm {
            Some(overrides) => settings_with_overrides(&self.llm, overrides)
                .map_err(|e| format!("{}: llm: {e}", spec.file.display()))?,
            None => self.llm.clone(),
        };
        chat_models::build(&self.chat_models, &settings).map_err(|e| e.to_string())
    }

    async fn execute(
        &self,
        run_id: String,
        spec: Arc<CrewSpec>,
        inputs: BTreeMap<String, String>,
        cancel: watch::Receiver<bool>,
    ) {
        let sink: Arc<dyn RunEventSink> = Arc::new(StoreSink {
            runs: self.runs.clone(),
            run_id: run_id.clone(),
        });
        if *cancel.borrow() {
            // Cancelled while it waited for a slot: it never started.
            let reason = Some("cancelled before it started".to_string());
            self.end(&run_id, RunStatus::Cancelled, reason, None);
            return;
        }
        sink.emit(RunEvent::RunStarted {
            run_id: run_id.clone(),
            crew: spec.name.clone(),
            process: spec.process,
            inputs: inputs.clone(),
        });
        tracing::info!(run_id = %run_id, crew = %spec.name, "run started");

        // 1. Knowledge: the process's, or a run's own when it declares throwaway collections
        //    (built now, in memory, and dropped with `knowledge` when the run ends).
        let ephemeral = spec.ephemeral_collections();
        let knowledge = match &self.scratch {
            _ if ephemeral.is_empty() => self.knowledge.clone(),
            Some(make) => make(ephemeral),
            None => {
                let reason = format!(
                    "{}: this host cannot hold throwaway collections (ephemeral: true on {})",
                    spec.file.display(),
                    ephemeral.join(", ")
                );
                self.end(&run_id, RunStatus::Failed, Some(reason), None);
                return;
            }
        };
        let requests = self.registry.collection_requests(&spec);
        let mut degraded: Vec<String> = Vec::new();
        if !requests.is_empty() {
            match knowledge.bootstrap(requests).await {
                Ok(statuses) => {
                    for status in statuses {
                        if status.state != CollectionState::Ready {
                            degraded.push(status.reason.clone().unwrap_or_else(|| {
                                format!("collection '{}' is {}", status.name, status.state)
                            }));
                        }
                        sink.emit(RunEvent::CollectionIngested { status });
                    }
                }
                Err(error) => degraded.push(format!("knowledge bootstrap failed: {error}")),
            }
        }
        if !degraded.is_empty() && matches!(spec.on_degraded, DegradedPolicy::Fail) {
            let reason = format!("{} (on_degraded: fail)", degraded.join("; "));
            self.end(&run_id, RunStatus::Failed, Some(reason), None);
            return;
        }

        // 2. Agents as actors.
        let chat = match self.chat_model(&spec) {
            Ok(chat) => chat,
            Err(error) => {
                self.end(&run_id, RunStatus::Failed, Some(error), None);
                return;
            }
        };
        // Tools resolve paths against the crew file's folder, never the daemon's working
        // directory.
        let mut runner = AgentTaskRunner::new(
            chat.clone(),
            Some(knowledge.clone()),
            self.templates.clone(),
        )
        .with_crew_dir(spec.base_dir.clone());
        if let Some(eval) = &self.eval {
            runner = runner.with_eval_tool(eval.clone());
        }
        let runner: Arc<dyn TaskRunner> = Arc::new(runner);
        let agents: Vec<String> = spec.agents.iter().map(|a| a.name.clone()).collect();
        let pool = match AgentPool::spawn(&run_id, agents, runner).await {
            Ok(pool) => Arc::new(pool),
            Err(error) => {
                let reason = error.to_string();
                self.end(&run_id, RunStatus::Failed, Some(reason), None);
                return;
            }
        };

        // 3. The process.
        let result = run_process(ProcessContext {
            run_id: run_id.clone(),
            crew: spec.clone(),
            inputs,
            runner: pool.clone(),
            manager: Some(chat.clone()),
            events: sink.clone(),
            cancel,
            groundedness: self.groundedness.as_ref().map(|make| make(&chat)),
            ledger: Default::default(),
        })
        .await;
        if let Ok(pool) = Arc::try_unwrap(pool) {
            pool.shutdown().await;
        }

        let final_output = result.outputs.last().map(|o| o.output.clone());
        let mut reasons: Vec<String> = degraded;
        reasons.extend(result.reason.clone());
        let state = match result.status {
            status @ (RunStatus::Failed | RunStatus::Cancelled | RunStatus::Degraded) => status,
            _ if !reasons.is_empty() => RunStatus::Degraded,
            _ => RunStatus::Finished,
        };
        let reason = (!reasons.is_empty()).then(|| reasons.join("; "));
        self.end(&run_id, state, reason, final_output);
    }

    fn end(
        &self,
        run_id: &str,
        state: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    ) {
        // The terminal event ends the run record in the same store write
        // (`RunRecord::next_event`): whoever sees the event sees the run ended.
        let terminal = RunEvent::RunFinished {
            status: state,
            reason: reason.clone(),
            final_output: final_output.clone(),
        };
        if let Err(error) = self.runs.append(run_id, terminal) {
            tracing::error!(run_id, %error, "cannot record the end of a run; ending its record alone");
            if let Err(error) = self
                .runs
                .finish(run_id, state, reason.clone(), final_output)
            {
                tracing::error!(run_id, %error, "cannot record the end of a run");
            }
        }
        tracing::info!(
            run_id,
            state = state.as_str(),
            reason = reason.as_deref().unwrap_or(""),
            "run ended"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use orkeon_crews::ports::{
        CollectionRequest, CollectionStatus, KnowledgeBlock, KnowledgeError,
    };
    use orkeon_crews::run::store::MemoryRunStore;

    /// Knowledge whose bootstrap waits until the test opens the gate: runs stay in flight.
    struct GatedKnowledge {
        open: watch::Sender<bool>,
    }

    #[async_trait]
    impl KnowledgeService for GatedKnowledge {
        async fn bootstrap(
            &self,
            collections: Vec<CollectionRequest>,
        ) -> Result<Vec<CollectionStatus>, KnowledgeError> {
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|open| *open).await;
            Ok(collections
                .into_iter()
                .map(|c| CollectionStatus {
                    name: c.name,
                    state: CollectionState::Ready,
                    report: serde_json::json!({}),
                    reason: None,
                })
                .collect())
        }

        async fn augment(
            &self,
            _request: &orkeon_crews::ports::AugmentRequest,
        ) -> Result<KnowledgeBlock, KnowledgeError> {
            Ok(KnowledgeBlock::default())
        }

        async fn upsert_sources(
            &self,
            request: CollectionRequest,
        ) -> Result<CollectionStatus, KnowledgeError> {
            Err(KnowledgeError::Unavailable(format!(
                "no ingestion in this test double ({})",
                request.name
            )))
        }
    }

    const CREW: &str = "name: slow\nrag:\n  collections:\n    kb:\n      sources: [kb/*.md]\nagents:\n  a:\n    role: R\n    goal: G\n    knowledge: [kb]\ntasks:\n  - name: t\n    agent: a\n    description: Say hello\n    expected_output: hello\n";

    #[tokio::test]
    async fn kickoffs_past_the_slots_and_the_line_are_refused_and_the_line_drains() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("slow.yaml");
        std::fs::write(&file, CREW).expect("write");
        let spec = orkeon_crews::spec::parse_crew_file(&file).expect("valid crew");
        let registry = Arc::new(CrewRegistry::default());
        registry.apply(&file, Ok(spec));
        let knowledge = Arc::new(GatedKnowledge {
            open: watch::channel(false).0,
        });
        let runs = Arc::new(Runs::new(Arc::new(MemoryRunStore::default())));
        let engine = Arc::new(CrewEngine::new(
            registry,
            runs.clone(),
            knowledge.clone(),
            LlmSettings::default(),
            Arc::new(PromptTemplates::load(None).expect("templates")),
            RunLimits {
                max_concurrent: 1,
                max_queued: 2,
            },
        ));
        let mut accepted = Vec::new();
        for _ in 0..3 {
            accepted.push(
                engine
                    .kickoff("slow", BTreeMap::new(), None)
                    .expect("admitted"),
            );
        }
        let refused = engine.kickoff("slow", BTreeMap::new(), None);
        match refused {
            Err(EngineError::Overloaded { running, queued }) => assert_eq!(running + queued, 3),
            other => panic!("expected Overloaded, got {other:?}"),
        }
        // Open the gate: the one slot serves the line run by run.
        knowledge.open.send_replace(true);
        for run in &accepted {
            let ended =
                tokio::time::timeout(std::time::Duration::from_secs(20), engine.wait(&run.run_id))
                    .await
                    .expect("the run ends")
                    .expect("wait");
            assert!(ended.state.is_terminal(), "{ended:?}");
        }
        // The line drained: a new kickoff is admitted again.
        assert!(engine.kickoff("slow", BTreeMap::new(), None).is_ok());
    }
}
