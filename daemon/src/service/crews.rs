//! Crew and run operations, each written once: list and get crews, kickoff, get and list
//! runs, watch a run, cancel it.
//!
//! [`CrewApi`] is the contract; [`CrewApp`] implements it over the daemon's registry, engine
//! and run store; `client::RemoteCrews` implements it over gRPC for the CLI.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use super::ServiceError;
use crate::engine::CrewEngine;
use crate::registry::{CrewEntry, CrewRegistry};
use crate::runs::{RunRecord, Runs, StoredEvent};

/// Largest page of runs one call returns.
pub const MAX_RUNS_PAGE: usize = 200;
/// Page size when none is asked for.
pub const DEFAULT_RUNS_PAGE: usize = 20;

/// One crew as the registry knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrewSummary {
    pub name: String,
    pub file: String,
    /// `valid` or `invalid`.
    pub status: String,
    /// The current file's error (`file:line:column: message`), when invalid.
    pub error: String,
    /// sequential, hierarchical or graph (of the runnable version).
    pub process: String,
    pub collections: Vec<String>,
    pub agents: Vec<String>,
    pub tasks: Vec<String>,
    /// Whether a runnable (last good) version exists.
    pub runnable: bool,
    pub updated_at: String,
}

impl From<CrewEntry> for CrewSummary {
    fn from(entry: CrewEntry) -> Self {
        let status = entry.status().to_string();
        let spec = entry.spec.as_ref();
        CrewSummary {
            process: spec
                .map(|s| format!("{:?}", s.process).to_lowercase())
                .unwrap_or_default(),
            collections: spec
                .map(|s| s.rag.collections.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default(),
            agents: spec
                .map(|s| s.agents.iter().map(|a| a.name.clone()).collect())
                .unwrap_or_default(),
            tasks: spec
                .map(|s| s.tasks.iter().map(|t| t.name.clone()).collect())
                .unwrap_or_default(),
            runnable: spec.is_some(),
            name: entry.name,
            file: entry.file.display().to_string(),
            status,
            error: entry.error.unwrap_or_default(),
            updated_at: entry.updated_at,
        }
    }
}

/// Start a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KickoffParams {
    pub crew: String,
    pub inputs: BTreeMap<String, String>,
    /// A repeated key returns the run the first kickoff created.
    pub idempotency_key: Option<String>,
}

/// The run a kickoff started (or found by its idempotency key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kickoff {
    pub run_id: String,
    /// False when the idempotency key returned an earlier run.
    pub created: bool,
}

/// One page of runs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    pub runs: Vec<RunRecord>,
    /// Pass it back for the next page; empty on the last one.
    pub next_page_token: String,
}

/// A run's events, replayed then followed until it ends.
pub type EventStream = BoxStream<'static, Result<StoredEvent, ServiceError>>;

/// The crew and run operations.
#[async_trait]
pub trait CrewApi: Send + Sync {
    async fn list_crews(&self) -> Result<Vec<CrewSummary>, ServiceError>;
    async fn get_crew(&self, name: &str) -> Result<CrewSummary, ServiceError>;
    async fn kickoff(&self, params: KickoffParams) -> Result<Kickoff, ServiceError>;
    /// Events with a sequence number above `after_seq`, then new ones until the run ends.
    async fn watch(&self, run_id: &str, after_seq: u64) -> Result<EventStream, ServiceError>;
    async fn get_run(&self, run_id: &str) -> Result<RunRecord, ServiceError>;
    /// `page_size` 0: the default (20); at most 200.
    async fn list_runs(
        &self,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<RunPage, ServiceError>;
    /// Cancels a running run and waits for it to stop.
    async fn cancel(&self, run_id: &str) -> Result<RunRecord, ServiceError>;
}

/// The crew and run operations over the daemon's registry, engine and run store.
pub struct CrewApp {
    registry: Arc<CrewRegistry>,
    engine: Arc<CrewEngine>,
    runs: Arc<Runs>,
}

impl CrewApp {
    pub fn new(registry: Arc<CrewRegistry>, engine: Arc<CrewEngine>, runs: Arc<Runs>) -> Self {
        Self {
            registry,
            engine,
            runs,
        }
    }
}

#[async_trait]
impl CrewApi for CrewApp {
    async fn list_crews(&self) -> Result<Vec<CrewSummary>, ServiceError> {
        Ok(self
            .registry
            .list()
            .into_iter()
            .map(CrewSummary::from)
            .collect())
    }

    async fn get_crew(&self, name: &str) -> Result<CrewSummary, ServiceError> {
        ServiceError::require("name", name)?;
        self.registry
            .get(name)
            .map(CrewSummary::from)
            .ok_or_else(|| ServiceError::NotFound {
                kind: "crew".into(),
                name: name.to_string(),
                known: self.registry.names(),
                hint: String::new(),
            })
    }

    async fn kickoff(&self, params: KickoffParams) -> Result<Kickoff, ServiceError> {
        ServiceError::require("crew", &params.crew)?;
        let key = params.idempotency_key.filter(|k| !k.is_empty());
        if let Some(key) = &key
            && let Some(run) = self.runs.find_by_key(&params.crew, key)?
        {
            return Ok(Kickoff {
                run_id: run.run_id,
                created: false,
            });
        }
        let run = self.engine.kickoff(&params.crew, params.inputs, key)?;
        Ok(Kickoff {
            run_id: run.run_id,
            created: true,
        })
    }

    async fn watch(&self, run_id: &str, after_seq: u64) -> Result<EventStream, ServiceError> {
        ServiceError::require("run_id", run_id)?;
        self.runs.get(run_id)?;
        Ok(self
            .runs
            .follow(run_id, after_seq)
            .map(|event| event.map_err(ServiceError::from))
            .boxed())
    }

    async fn get_run(&self, run_id: &str) -> Result<RunRecord, ServiceError> {
        ServiceError::require("run_id", run_id)?;
        Ok(self.runs.get(run_id)?)
    }

    async fn list_runs(
        &self,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<RunPage, ServiceError> {
        let size = match page_size {
            0 => DEFAULT_RUNS_PAGE,
            n if n > MAX_RUNS_PAGE => {
                return Err(ServiceError::invalid(
                    "page_size",
                    format!("must be at most {MAX_RUNS_PAGE}"),
                ));
            }
            n => n,
        };
        let after = page_token.filter(|t| !t.is_empty());
        let mut runs = self.runs.list(size + 1, after)?;
        let next_page_token = if runs.len() > size {
            runs.truncate(size);
            runs.last().map(|r| r.run_id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(RunPage {
            runs,
            next_page_token,
        })
    }

    async fn cancel(&self, run_id: &str) -> Result<RunRecord, ServiceError> {
        ServiceError::require("run_id", run_id)?;
        let run = self.runs.get(run_id)?;
        if run.state.is_terminal() {
            return Err(ServiceError::FailedPrecondition(format!(
                "run '{run_id}' already ended ({})",
                run.state
            )));
        }
        if !self.engine.cancel(run_id) {
            let run = self.runs.get(run_id)?;
            if !run.state.is_terminal() {
                return Err(ServiceError::FailedPrecondition(format!(
                    "run '{run_id}' is {} on another daemon ({}); cancel it through that daemon",
                    run.state,
                    run.worker.as_deref().unwrap_or("unknown")
                )));
            }
        }
        Ok(self.engine.wait(run_id).await?)
    }
}
