//! Performing one task inside a run: its rendered assignment, its context, the call to the
//! [`TaskRunner`](crate::ports::TaskRunner) (abandoned on cancellation), the citation check
//! against the run's ledger (dangling markers removed, `uncited` recorded, `citations:
//! required` enforced), the groundedness score, and the task and retrieval events around it.

use std::collections::BTreeMap;

use tokio::sync::watch;

use crate::citations::{CitationLedger, map_markers};
use crate::ports::{TaskAssignment, TaskError, TaskOutput};
use crate::spec::{AgentSpec, CitationPolicy, DegradedPolicy, TaskSpec, template};

use super::{ProcessContext, RunEvent};

/// Why a task step did not produce an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StepError {
    Cancelled,
    /// The run fails with this reason.
    Failed(String),
}

/// Whether cancellation has been asked for.
pub(super) fn is_cancelled(cancel: &watch::Receiver<bool>) -> bool {
    *cancel.borrow()
}

/// Resolves once cancellation is asked for (never, if the sender is gone without asking).
pub(super) async fn cancelled(mut cancel: watch::Receiver<bool>) {
    loop {
        if *cancel.borrow_and_update() {
            return;
        }
        if cancel.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The outputs `task` receives: the latest output of each task it names under `context:`
/// (those that have run), or, without `context:`, the latest output of the run.
pub(super) fn context_for(task: &TaskSpec, outputs: &[TaskOutput]) -> Vec<TaskOutput> {
    match &task.context {
        Some(names) => names
            .iter()
            .filter_map(|name| outputs.iter().rev().find(|o| &o.task == name).cloned())
            .collect(),
        None => outputs.last().cloned().into_iter().collect(),
    }
}

/// The agent the file assigns to `task`.
pub(super) fn file_agent<'a>(
    ctx: &'a ProcessContext,
    task: &TaskSpec,
) -> Result<&'a AgentSpec, StepError> {
    ctx.crew.agent(&task.agent).ok_or_else(|| {
        StepError::Failed(format!(
            "task '{}' names agent '{}', which crew '{}' does not declare",
            task.name, task.agent, ctx.crew.name
        ))
    })
}

/// Runs `task` as `agent` with `context`, emitting `TaskStarted`, `Retrieval` (when the
/// agent has knowledge or the output cites something) and `TaskCompleted`.
pub(super) async fn perform(
    ctx: &ProcessContext,
    task: &TaskSpec,
    agent: &AgentSpec,
    context: Vec<TaskOutput>,
) -> Result<TaskOutput, StepError> {
    if is_cancelled(&ctx.cancel) {
        return Err(StepError::Cancelled);
    }
    let render = |text: &str, field: &str| {
        template::render(text, &ctx.inputs)
            .map_err(|e| StepError::Failed(format!("task '{}' {field}: {e}", task.name)))
    };
    let assignment = TaskAssignment {
        run_id: ctx.run_id.clone(),
        crew: ctx.crew.name.clone(),
        agent: agent.profile(),
        task_name: task.name.clone(),
        description: render(&task.description, "description")?,
        expected_output: render(&task.expected_output, "expected_output")?,
        inputs: ctx.inputs.clone(),
        context,
        run_passages: lock_ledger(ctx).passages().to_vec(),
    };

    ctx.events.emit(RunEvent::TaskStarted {
        task: task.name.clone(),
        agent: agent.name.clone(),
    });
    tracing::info!(run_id = %ctx.run_id, task = %task.name, agent = %agent.name, "task started");

    // Biased towards the task: an output that is ready is kept even if cancellation
    // arrived in the meantime.
    let result = tokio::select! {
        biased;
        result = ctx.runner.run_task(assignment) => result,
        () = cancelled(ctx.cancel.clone()) => Err(TaskError::Cancelled),
    };
    let mut output = match result {
        Ok(output) => output,
        Err(TaskError::Cancelled) => {
            tracing::info!(run_id = %ctx.run_id, task = %task.name, "task cancelled");
            return Err(StepError::Cancelled);
        }
        Err(error) => {
            tracing::warn!(run_id = %ctx.run_id, task = %task.name, agent = %agent.name, %error, "task failed");
            return Err(StepError::Failed(format!(
                "task '{}' (agent '{}') failed: {error}",
                task.name, agent.name
            )));
        }
    };
    if output.task.is_empty() {
        output.task = task.name.clone();
    }
    if output.agent.is_empty() {
        output.agent = agent.name.clone();
    }

    let passages = std::mem::take(&mut output.passages);
    let trace = std::mem::take(&mut output.retrieval_trace);
    let passages = check_citations(ctx, &mut output, passages);
    let policy = ctx.crew.citation_policy(task, agent);
    if policy == CitationPolicy::Required && output.uncited {
        let reason = if output.dangling_markers.is_empty() {
            format!(
                "task '{}' (agent '{}') cites none of its passages (citations: required)",
                task.name, agent.name
            )
        } else {
            format!(
                "task '{}' (agent '{}') cites only markers that resolve to no passage ({}) (citations: required)",
                task.name,
                agent.name,
                markers_list(&output.dangling_markers)
            )
        };
        tracing::warn!(run_id = %ctx.run_id, task = %task.name, %reason, "task degraded");
        output.degraded = Some(reason);
    }
    if let Some(checker) = &ctx.groundedness
        && !output.citations.is_empty()
    {
        let question = template::render(&task.description, &ctx.inputs)
            .unwrap_or_else(|_| task.description.clone());
        match checker
            .check(&question, &output.output, &output.citations)
            .await
        {
            Ok(report) => output.groundedness = Some(report),
            Err(error) => {
                tracing::warn!(run_id = %ctx.run_id, task = %task.name, %error, "groundedness check failed; the output is not scored");
            }
        }
    }

    if !agent.knowledge.is_empty() || !passages.is_empty() {
        ctx.events.emit(RunEvent::Retrieval {
            task: task.name.clone(),
            agent: agent.name.clone(),
            citations: passages,
            trace,
        });
    }
    ctx.events.emit(RunEvent::TaskCompleted {
        output: output.clone(),
    });
    tracing::info!(
        run_id = %ctx.run_id,
        task = %task.name,
        agent = %agent.name,
        citations = output.citations.len(),
        dangling = output.dangling_markers.len(),
        uncited = output.uncited,
        model = %output.model,
        "task completed"
    );
    if let Some(reason) = &output.degraded
        && ctx.crew.on_degraded == DegradedPolicy::Fail
    {
        return Err(StepError::Failed(format!("{reason} (on_degraded: fail)")));
    }
    Ok(output)
}

fn lock_ledger(ctx: &ProcessContext) -> std::sync::MutexGuard<'_, CitationLedger> {
    ctx.ledger.lock().unwrap_or_else(|p| p.into_inner())
}

/// `[3], [9]`.
fn markers_list(markers: &[u32]) -> String {
    markers
        .iter()
        .map(|m| format!("[{m}]"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Admits the passages the task was given into the run's ledger and checks the output
/// against it. A runner that numbered a passage differently from the ledger (e.g. `1..n` per
/// block) has its markers mapped onto the run's first. Returns the passages under their
/// run-wide markers.
fn check_citations(
    ctx: &ProcessContext,
    output: &mut TaskOutput,
    passages: Vec<crate::ports::KnowledgeCitation>,
) -> Vec<crate::ports::KnowledgeCitation> {
    let mut ledger = lock_ledger(ctx);
    let mut remap: BTreeMap<u32, u32> = BTreeMap::new();
    let mut given = Vec::with_capacity(passages.len());
    for passage in passages {
        let local = passage.marker;
        let admitted = ledger.admit(passage);
        if admitted.marker != local {
            remap.entry(local).or_insert(admitted.marker);
        }
        given.push(admitted);
    }
    if !remap.is_empty() {
        tracing::debug!(run_id = %ctx.run_id, task = %output.task, ?remap, "runner markers mapped onto the run's ledger");
        let (text, _) = map_markers(&output.output, |n| {
            Some(remap.get(&n).copied().unwrap_or(n))
        });
        output.output = text;
    }
    let check = ledger.check_output(&output.output);
    output.output = check.text;
    output.citations = check.cited;
    for marker in check.dangling_markers {
        if !output.dangling_markers.contains(&marker) {
            output.dangling_markers.push(marker);
        }
    }
    output.uncited = check.uncited;
    given
}
