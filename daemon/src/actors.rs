//! The daemon's actors (ractor) and the augmenter: thin wrappers that own a library object and
//! bound access to it.
//!
//! - [`AgentActor`]: one per agent per run; performs that agent's tasks one at a time through
//!   the agents crate's task runner. [`AgentPool`] routes the process engine's task calls to the
//!   right agent's actor (it implements the `TaskRunner` port).
//! - [`Augmenter`]: the `KnowledgeService` agents see — bounded, supervised, concurrent
//!   retrievals over the knowledge service (no single queue; see its docs). Bootstrap goes
//!   straight to the knowledge service, which serialises ingestion per collection.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use orkeon_crews::ports::{
    AugmentRequest, CollectionRequest, CollectionStatus, KnowledgeBlock, KnowledgeError,
    KnowledgeService, TaskAssignment, TaskError, TaskOutput, TaskRunner,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};
use tokio::sync::Semaphore;

/// An actor could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {what}: {source}")]
pub struct SpawnError {
    what: String,
    #[source]
    source: SpawnErr,
}

// ------------------------------------------------------------------------------------------
// AgentActor
// ------------------------------------------------------------------------------------------

/// Messages of an agent actor.
pub enum AgentMsg {
    RunTask(
        Box<TaskAssignment>,
        RpcReplyPort<Result<TaskOutput, TaskError>>,
    ),
}

/// One agent of one run.
pub struct AgentActor;

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = Arc<dyn TaskRunner>;
    type Arguments = Arc<dyn TaskRunner>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        runner: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(runner)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        runner: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentMsg::RunTask(assignment, reply) => {
                let result = runner.run_task(*assignment).await;
                // The caller may have gone (cancelled run): nothing to do then.
                let _ = reply.send(result);
            }
        }
        Ok(())
    }
}

/// The agents of one run, each behind its own actor.
pub struct AgentPool {
    agents: HashMap<String, ActorRef<AgentMsg>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl AgentPool {
    /// Spawns one actor per agent name, all sharing `runner` (the runner is stateless per task).
    pub async fn spawn(
        run_id: &str,
        agents: impl IntoIterator<Item = String>,
        runner: Arc<dyn TaskRunner>,
    ) -> Result<Self, SpawnError> {
        let mut pool = Self {
            agents: HashMap::new(),
            handles: Vec::new(),
        };
        for agent in agents {
            let name = format!("run:{run_id}:agent:{agent}");
            let (actor, handle) = Actor::spawn(Some(name), AgentActor, runner.clone())
                .await
                .map_err(|source| SpawnError {
                    what: format!("agent '{agent}'"),
                    source,
                })?;
            pool.agents.insert(agent, actor);
            pool.handles.push(handle);
        }
        Ok(pool)
    }

    /// Stops every agent actor and waits for them.
    pub async fn shutdown(self) {
        for actor in self.agents.values() {
            actor.stop(None);
        }
        for handle in self.handles {
            let _ = handle.await;
        }
    }
}

#[async_trait]
impl TaskRunner for AgentPool {
    async fn run_task(&self, assignment: TaskAssignment) -> Result<TaskOutput, TaskError> {
        let agent = assignment.agent.name.clone();
        let actor = self
            .agents
            .get(&agent)
            .ok_or_else(|| TaskError::Other(format!("agent '{agent}' has no actor in this run")))?;
        match actor
            .call(|reply| AgentMsg::RunTask(Box::new(assignment), reply), None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            Ok(_) => Err(TaskError::Other(format!("agent '{agent}' did not answer"))),
            Err(e) => Err(TaskError::Other(format!(
                "agent '{agent}' is unavailable: {e}"
            ))),
        }
    }
}

// ------------------------------------------------------------------------------------------
// Augmenter
// ------------------------------------------------------------------------------------------

/// Why augmentation is bounded and supervised the way it is:
///
/// - **No global queue.** Each retrieval runs as its own tokio task, so retrievals of different
///   runs (and of one run's concurrent tasks) proceed side by side; a semaphore bounds how many
///   run at once (`limits.max_concurrent_retrievals`). Ingestion of a collection still excludes
///   its readers through the per-collection gate the knowledge service holds.
/// - **Supervised.** A retrieval that panics fails that retrieval with a clear error; its task
///   is gone, the next retrieval starts a fresh one. A retrieval that exceeds
///   `limits.retrieval_timeout_secs` (waiting for a slot included) is aborted and reported.
/// - **Cancellable.** Dropping the caller's future (a cancelled run) aborts its retrieval and
///   frees its slot.
pub struct Augmenter {
    knowledge: Arc<dyn KnowledgeService>,
    permits: Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
}

impl Augmenter {
    /// At most `max_concurrent` retrievals at once (at least one), each bounded by `timeout`.
    pub fn new(
        knowledge: Arc<dyn KnowledgeService>,
        max_concurrent: usize,
        timeout: Duration,
    ) -> Self {
        let limit = max_concurrent.max(1);
        Self {
            knowledge,
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            timeout,
        }
    }

    /// An augmenter over `knowledge` sharing this one's slots and timeout (a run's own
    /// knowledge counts against the same `limits.max_concurrent_retrievals`).
    pub fn over(&self, knowledge: Arc<dyn KnowledgeService>) -> Self {
        Self {
            knowledge,
            permits: self.permits.clone(),
            limit: self.limit,
            timeout: self.timeout,
        }
    }

    /// Refuses new retrievals (running ones finish).
    pub fn stop(&self) {
        self.permits.close();
    }

    /// Retrievals running now.
    pub fn in_flight(&self) -> usize {
        self.limit - self.permits.available_permits()
    }
}

/// Aborts a spawned task when dropped (its caller went away or gave up).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

#[async_trait]
impl KnowledgeService for Augmenter {
    async fn bootstrap(
        &self,
        collections: Vec<CollectionRequest>,
    ) -> Result<Vec<CollectionStatus>, KnowledgeError> {
        self.knowledge.bootstrap(collections).await
    }

    /// Tool ingestion goes straight to the service, like bootstrap (it takes the collection's
    /// write gate there).
    async fn upsert_sources(
        &self,
        request: CollectionRequest,
    ) -> Result<CollectionStatus, KnowledgeError> {
        self.knowledge.upsert_sources(request).await
    }

    async fn augment(&self, request: &AugmentRequest) -> Result<KnowledgeBlock, KnowledgeError> {
        let timeout = self.timeout;
        let slot_and_retrieval = async {
            let permit = self.permits.clone().acquire_owned().await.map_err(|_| {
                KnowledgeError::Unavailable("the daemon is shutting down".to_string())
            })?;
            let knowledge = self.knowledge.clone();
            let owned = request.clone();
            let task = tokio::spawn(async move {
                let _permit = permit;
                knowledge.augment(&owned).await
            });
            let _abort = AbortOnDrop(task.abort_handle());
            match task.await {
                Ok(result) => result,
                Err(join) if join.is_panic() => {
                    let message = panic_message(join.into_panic().as_ref());
                    tracing::error!(query = %request.query, panic = %message, "a retrieval panicked");
                    Err(KnowledgeError::Unavailable(format!(
                        "the retrieval panicked ({message}); it was abandoned and later retrievals run normally"
                    )))
                }
                Err(_) => Err(KnowledgeError::Unavailable(
                    "the retrieval was cancelled".to_string(),
                )),
            }
        };
        match tokio::time::timeout(timeout, slot_and_retrieval).await {
            Ok(result) => result,
            Err(_) => Err(KnowledgeError::Unavailable(format!(
                "the retrieval did not finish within limits.retrieval_timeout_secs = {} s (waiting for one of {} slots included); raise the limit or lower the load",
                timeout.as_secs(),
                self.limit
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A knowledge service whose retrievals wait until released, count how many run at once,
    /// and panic on the query `panic`.
    #[derive(Default)]
    struct GatedKnowledge {
        release: tokio::sync::Notify,
        running: AtomicUsize,
        peak: AtomicUsize,
    }

    #[async_trait]
    impl KnowledgeService for GatedKnowledge {
        async fn bootstrap(
            &self,
            _: Vec<CollectionRequest>,
        ) -> Result<Vec<CollectionStatus>, KnowledgeError> {
            Ok(Vec::new())
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

        async fn augment(
            &self,
            request: &AugmentRequest,
        ) -> Result<KnowledgeBlock, KnowledgeError> {
            if request.query == "panic" {
                panic!("index out of bounds in a test retrieval");
            }
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            if request.query != "quick" {
                self.release.notified().await;
            }
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(KnowledgeBlock {
                text: request.query.clone(),
                ..KnowledgeBlock::default()
            })
        }
    }

    fn request(query: &str) -> AugmentRequest {
        AugmentRequest {
            attachments: Vec::new(),
            query: query.to_string(),
            max_passages: 3,
        }
    }

    async fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if ready() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("timed out waiting until {what}");
    }

    #[tokio::test]
    async fn retrievals_run_side_by_side_up_to_the_limit() {
        let knowledge = Arc::new(GatedKnowledge::default());
        let augmenter = Arc::new(Augmenter::new(
            knowledge.clone(),
            3,
            Duration::from_secs(30),
        ));
        let calls: Vec<_> = (0..5)
            .map(|i| {
                let augmenter = augmenter.clone();
                tokio::spawn(async move { augmenter.augment(&request(&format!("q{i}"))).await })
            })
            .collect();
        wait_until("three retrievals run", || {
            knowledge.running.load(Ordering::SeqCst) == 3
        })
        .await;
        assert_eq!(augmenter.in_flight(), 3);
        // Release them one by one: the two waiting ones get in, never more than three at once.
        while calls.iter().any(|c| !c.is_finished()) {
            knowledge.release.notify_one();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for call in calls {
            assert!(call.await.unwrap().is_ok());
        }
        assert_eq!(knowledge.peak.load(Ordering::SeqCst), 3);
        assert_eq!(augmenter.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_panicking_retrieval_fails_alone_and_the_next_one_works() {
        let knowledge = Arc::new(GatedKnowledge::default());
        let augmenter = Augmenter::new(knowledge, 1, Duration::from_secs(30));
        let error = augmenter.augment(&request("panic")).await.unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("panicked") && text.contains("index out of bounds"),
            "{text}"
        );
        // The slot was released and the next retrieval runs normally.
        let block = augmenter.augment(&request("quick")).await.unwrap();
        assert_eq!(block.text, "quick");
    }

    #[tokio::test]
    async fn a_retrieval_past_its_deadline_is_aborted_and_frees_its_slot() {
        let knowledge = Arc::new(GatedKnowledge::default());
        let augmenter = Augmenter::new(knowledge.clone(), 1, Duration::from_millis(50));
        let error = augmenter
            .augment(&request("never released"))
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("limits.retrieval_timeout_secs"),
            "{error}"
        );
        wait_until("the aborted retrieval frees its slot", || {
            augmenter.in_flight() == 0
        })
        .await;
        assert!(augmenter.augment(&request("quick")).await.is_ok());
    }

    #[tokio::test]
    async fn after_stop_retrievals_are_refused() {
        let augmenter = Augmenter::new(
            Arc::new(GatedKnowledge::default()),
            2,
            Duration::from_secs(5),
        );
        augmenter.stop();
        let error = augmenter.augment(&request("quick")).await.unwrap_err();
        assert!(error.to_string().contains("shutting down"), "{error}");
    }
}
