//! Runs of a crew's process: run events, the event sink port, and the process engines
//! (sequential, hierarchical, graph) behind [`run_process`].
//!
//! The caller (the daemon's run actor, or `orkeon crew run`) owns the run: it bootstraps the
//! `rag:` collections, emits [`RunEvent::RunStarted`], [`RunEvent::CollectionIngested`] and
//! [`RunEvent::RunFinished`], and applies `on_degraded`. [`run_process`] runs the tasks and
//! emits everything in between: task started, retrieval (citations), task completed,
//! manager decisions, graph transitions and budget exhaustion.

mod graph_process;
mod hierarchical;
mod manager;
mod sequential;
pub mod store;
mod task_step;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::citations::CitationLedger;
use crate::ports::{
    ChatModel, CollectionStatus, GroundednessCheck, KnowledgeCitation, TaskOutput, TaskRunner,
};
use crate::spec::{CrewSpec, ProcessKind, template};

pub use graph_process::GraphRunState;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting in a fleet's shared queue for a daemon to claim it (PostgreSQL provider).
    Queued,
    Running,
    Finished,
    /// Finished, but without everything it should have had (an empty or failed collection,
    /// an exhausted graph budget); the reason says what.
    Degraded,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// Every state but `Queued` and `Running` is final.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Degraded => "degraded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something that happened during a run, in the order it happened. Persisted and streamed
/// as JSON: `{"type": "task_started", "task": …, "agent": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: String,
        crew: String,
        process: ProcessKind,
        inputs: BTreeMap<String, String>,
    },
    CollectionIngested {
        status: CollectionStatus,
    },
    TaskStarted {
        task: String,
        agent: String,
    },
    /// The passages a task's agent was given (empty when its knowledge found nothing), under
    /// their run-wide markers, and the traces of the retrievals that found them.
    Retrieval {
        task: String,
        agent: String,
        citations: Vec<KnowledgeCitation>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        trace: Vec<serde_json::Value>,
    },
    /// The task's output, with its citation facts: `output.citations` (what it cites),
    /// `output.dangling_markers`, `output.uncited`, `output.degraded`, `output.groundedness`.
    TaskCompleted {
        output: TaskOutput,
    },
    /// A hierarchical manager's assignment or review, or why the default was used.
    ManagerDecision {
        task: String,
        agent: String,
        reason: String,
    },
    /// A graph process moved from one task to another (`to` may be `end`).
    GraphTransition {
        from: String,
        to: String,
    },
    BudgetExhausted {
        reason: String,
    },
    /// The daemon executing the run stopped renewing its lease and the crew allows a retry
    /// (`retry:`): the run went back to the fleet's queue for attempt `attempt`; the events
    /// before this one belong to the abandoned attempt.
    RunRetried {
        attempt: u32,
        reason: String,
    },
    RunFinished {
        status: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    },
}

/// Receives run events (the daemon records and streams them).
pub trait RunEventSink: Send + Sync {
    fn emit(&self, event: RunEvent);
}

impl RunEventSink for tokio::sync::mpsc::UnboundedSender<RunEvent> {
    fn emit(&self, event: RunEvent) {
        if self.send(event).is_err() {
            tracing::debug!("run event dropped: the receiver is gone");
        }
    }
}

/// Everything a process engine needs for one run.
#[derive(Clone)]
pub struct ProcessContext {
    pub run_id: String,
    /// The spec the run started with (a reload does not change a run in flight).
    pub crew: Arc<CrewSpec>,
    /// The run's inputs (already merged with `kickoff.inputs` by the caller).
    pub inputs: BTreeMap<String, String>,
    pub runner: Arc<dyn TaskRunner>,
    /// The hierarchical manager's model; `None` (or the `extractive` model) means tasks go
    /// to the agent named in the file and reviews approve.
    pub manager: Option<Arc<dyn ChatModel>>,
    pub events: Arc<dyn RunEventSink>,
    /// `true` asks the run to stop; checked between tasks and while a task runs.
    pub cancel: tokio::sync::watch::Receiver<bool>,
    /// Scores cited task outputs against the passages they cite; `None`: not scored.
    pub groundedness: Option<Arc<dyn GroundednessCheck>>,
    /// The run's citation ledger (start with an empty one: `Default::default()`).
    pub ledger: Arc<std::sync::Mutex<CitationLedger>>,
}

/// How the process ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessResult {
    pub status: RunStatus,
    /// Every completed task execution, in order; the last one is the crew's final output.
    pub outputs: Vec<TaskOutput>,
    /// Why the run failed, was cancelled or is degraded.
    pub reason: Option<String>,
}

impl ProcessResult {
    /// All tasks ran: `finished`, or `degraded` when some task output is (the reasons of its
    /// degraded tasks, joined).
    fn finished(outputs: Vec<TaskOutput>) -> Self {
        match degraded_tasks(&outputs) {
            Some(reason) => Self {
                status: RunStatus::Degraded,
                outputs,
                reason: Some(reason),
            },
            None => Self {
                status: RunStatus::Finished,
                outputs,
                reason: None,
            },
        }
    }

    fn failed(outputs: Vec<TaskOutput>, reason: String) -> Self {
        Self {
            status: RunStatus::Failed,
            outputs,
            reason: Some(reason),
        }
    }

    fn cancelled(outputs: Vec<TaskOutput>) -> Self {
        Self {
            status: RunStatus::Cancelled,
            outputs,
            reason: Some("the run was cancelled".to_string()),
        }
    }

    /// The last task output's text.
    pub fn final_output(&self) -> Option<&str> {
        self.outputs.last().map(|o| o.output.as_str())
    }
}

/// The reasons of the degraded task outputs, joined, or `None`.
fn degraded_tasks(outputs: &[TaskOutput]) -> Option<String> {
    let reasons: Vec<&str> = outputs
        .iter()
        .filter_map(|o| o.degraded.as_deref())
        .collect();
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// Runs the crew's process. Emits task, retrieval, manager, transition and budget events,
/// but not `RunStarted`/`RunFinished` (the caller owns those).
pub async fn run_process(ctx: ProcessContext) -> ProcessResult {
    let span = tracing::info_span!(
        "crew_process",
        run_id = %ctx.run_id,
        crew = %ctx.crew.name,
        process = %ctx.crew.process
    );
    run_process_inner(ctx).instrument(span).await
}

async fn run_process_inner(ctx: ProcessContext) -> ProcessResult {
    if let Some(reason) = missing_inputs(&ctx.crew, &ctx.inputs) {
        tracing::warn!(run_id = %ctx.run_id, %reason, "run refused");
        return ProcessResult::failed(Vec::new(), reason);
    }
    let result = match ctx.crew.process {
        ProcessKind::Sequential => sequential::run(&ctx).await,
        ProcessKind::Hierarchical => hierarchical::run(&ctx).await,
        ProcessKind::Graph => graph_process::run(&ctx).await,
    };
    tracing::info!(
        run_id = %ctx.run_id,
        status = %result.status,
        tasks = result.outputs.len(),
        reason = result.reason.as_deref().unwrap_or(""),
        "crew process ended"
    );
    result
}

/// "missing input(s) …" naming each input and the tasks that use it, or `None`.
fn missing_inputs(crew: &CrewSpec, inputs: &BTreeMap<String, String>) -> Option<String> {
    let missing: BTreeSet<String> = crew
        .required_inputs()
        .into_iter()
        .filter(|name| !inputs.contains_key(name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let described: Vec<String> = missing
        .iter()
        .map(|name| {
            let users: Vec<&str> = crew
                .tasks
                .iter()
                .filter(|t| {
                    template::input_names(&t.description).contains(name)
                        || template::input_names(&t.expected_output).contains(name)
                })
                .map(|t| t.name.as_str())
                .collect();
            format!("'{name}' (used by task '{}')", users.join("', '"))
        })
        .collect();
    let example = missing
        .iter()
        .map(|n| format!("--input {n}=…"))
        .collect::<Vec<_>>()
        .join(" ");
    Some(format!(
        "missing input(s) {}; give them at kickoff (e.g. {example}) or under kickoff.inputs in {}",
        described.join(", "),
        crew.file.display()
    ))
}

#[cfg(test)]
mod tests;
