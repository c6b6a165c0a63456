//! Performing one task inside a run: its rendered assignment, its context, the call to the
//! [`TaskRunner`](crate::ports::TaskRunner) (abandoned on cancellation), and the task and
//! retrieval events around it.

use tokio::sync::watch;

use crate::ports::{TaskAssignment, TaskError, TaskOutput};
use crate::spec::{AgentSpec, TaskSpec, template};

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

    if !agent.knowledge.is_empty() || !output.citations.is_empty() {
        ctx.events.emit(RunEvent::Retrieval {
            task: task.name.clone(),
            agent: agent.name.clone(),
            citations: output.citations.clone(),
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
        model = %output.model,
        "task completed"
    );
    Ok(output)
}
