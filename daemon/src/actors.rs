//! The daemon's actors (ractor): thin wrappers that own a library object and serialise access
//! to it.
//!
//! - [`AgentActor`]: one per agent per run; performs that agent's tasks one at a time through
//!   the agents crate's task runner. [`AgentPool`] routes the process engine's task calls to the
//!   right agent's actor (it implements the `TaskRunner` port).
//! - [`Augmenter`]: turns `knowledge:` attachments into a numbered, cited block (retrieval only).
//!   [`AugmenterHandle`] implements the `KnowledgeService` port by calling it (bootstrap goes
//!   straight to the knowledge service, which serialises ingestion per collection).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{
    CollectionRequest, CollectionStatus, KnowledgeBlock, KnowledgeError, KnowledgeService,
    TaskAssignment, TaskError, TaskOutput, TaskRunner,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};

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

/// Messages of the augmenter.
pub enum AugmenterMsg {
    Augment {
        collections: Vec<String>,
        query: String,
        max_passages: usize,
        reply: RpcReplyPort<Result<KnowledgeBlock, KnowledgeError>>,
    },
}

/// Retrieval-only augmentation of agent prompts.
pub struct Augmenter;

impl Actor for Augmenter {
    type Msg = AugmenterMsg;
    type State = Arc<dyn KnowledgeService>;
    type Arguments = Arc<dyn KnowledgeService>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        knowledge: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(knowledge)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        knowledge: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AugmenterMsg::Augment {
                collections,
                query,
                max_passages,
                reply,
            } => {
                let result = knowledge.augment(&collections, &query, max_passages).await;
                let _ = reply.send(result);
            }
        }
        Ok(())
    }
}

/// The `KnowledgeService` agents see: augmentation through the augmenter actor, bootstrap
/// through the knowledge service.
pub struct AugmenterHandle {
    augmenter: ActorRef<AugmenterMsg>,
    knowledge: Arc<dyn KnowledgeService>,
}

impl AugmenterHandle {
    pub async fn spawn(
        knowledge: Arc<dyn KnowledgeService>,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), SpawnError> {
        let (augmenter, handle) =
            Actor::spawn(Some("augmenter".into()), Augmenter, knowledge.clone())
                .await
                .map_err(|source| SpawnError {
                    what: "the augmenter".into(),
                    source,
                })?;
        Ok((
            Self {
                augmenter,
                knowledge,
            },
            handle,
        ))
    }

    pub fn stop(&self) {
        self.augmenter.stop(None);
    }
}

#[async_trait]
impl KnowledgeService for AugmenterHandle {
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

    async fn augment(
        &self,
        collections: &[String],
        query: &str,
        max_passages: usize,
    ) -> Result<KnowledgeBlock, KnowledgeError> {
        let call = self
            .augmenter
            .call(
                |reply| AugmenterMsg::Augment {
                    collections: collections.to_vec(),
                    query: query.to_string(),
                    max_passages,
                    reply,
                },
                None,
            )
            .await;
        match call {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            Ok(_) => Err(KnowledgeError::Unavailable(
                "the augmenter did not answer".into(),
            )),
            Err(e) => Err(KnowledgeError::Unavailable(format!(
                "the augmenter is unavailable: {e}"
            ))),
        }
    }
}
