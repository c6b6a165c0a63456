//! The hierarchical process: tasks in file order; for each, the manager model picks the
//! agent and afterwards reviews the result (a rejection earns one retry with the feedback
//! in context). Without a usable manager (none, the extractive model, or an unusable
//! answer) the task's `agent` field decides and the review approves; every decision is
//! recorded as a `ManagerDecision` event with its reason.

use crate::ports::TaskOutput;
use crate::spec::template;

use super::manager::{self, Assignment};
use super::task_step::{self, StepError};
use super::{ProcessContext, ProcessResult, RunEvent};

pub(super) async fn run(ctx: &ProcessContext) -> ProcessResult {
    let mut outputs = Vec::new();
    for task in &ctx.crew.tasks {
        if task_step::is_cancelled(&ctx.cancel) {
            return ProcessResult::cancelled(outputs);
        }
        match run_task(ctx, task, &outputs).await {
            Ok(done) => outputs.extend(done),
            Err((done, StepError::Cancelled)) => {
                outputs.extend(done);
                return ProcessResult::cancelled(outputs);
            }
            Err((done, StepError::Failed(reason))) => {
                outputs.extend(done);
                return ProcessResult::failed(outputs, reason);
            }
        }
    }
    ProcessResult::finished(outputs)
}

/// Assigns, performs and reviews one task; returns the outputs it produced (the rejected
/// attempt and the retry, when the review rejected the first).
async fn run_task(
    ctx: &ProcessContext,
    task: &crate::spec::TaskSpec,
    earlier: &[TaskOutput],
) -> Result<Vec<TaskOutput>, (Vec<TaskOutput>, StepError)> {
    let description = template::render(&task.description, &ctx.inputs)
        .unwrap_or_else(|_| task.description.clone());
    let expected_output = template::render(&task.expected_output, &ctx.inputs)
        .unwrap_or_else(|_| task.expected_output.clone());

    let planner = manager::planning_model(ctx.manager.as_ref());
    let assignment = match &planner {
        Ok(model) => manager::assign(model, &ctx.crew, task, &description, &expected_output).await,
        Err(why) => Assignment {
            agent: task.agent.clone(),
            reason: format!("{why}; following the task's agent field, and reviews approve"),
        },
    };
    ctx.events.emit(RunEvent::ManagerDecision {
        task: task.name.clone(),
        agent: assignment.agent.clone(),
        reason: assignment.reason.clone(),
    });
    tracing::info!(
        run_id = %ctx.run_id,
        task = %task.name,
        agent = %assignment.agent,
        reason = %assignment.reason,
        "manager decision"
    );
    let Some(agent) = ctx.crew.agent(&assignment.agent) else {
        return Err((
            Vec::new(),
            StepError::Failed(format!(
                "task '{}' was assigned to agent '{}', which crew '{}' does not declare",
                task.name, assignment.agent, ctx.crew.name
            )),
        ));
    };

    let context = task_step::context_for(task, earlier);
    let first = task_step::perform(ctx, task, agent, context.clone())
        .await
        .map_err(|e| (Vec::new(), e))?;

    let Ok(model) = planner else {
        return Ok(vec![first]);
    };
    if task_step::is_cancelled(&ctx.cancel) {
        return Err((vec![first], StepError::Cancelled));
    }
    let verdict = manager::review(model, &ctx.crew, task, &expected_output, &first).await;
    ctx.events.emit(RunEvent::ManagerDecision {
        task: task.name.clone(),
        agent: agent.name.clone(),
        reason: verdict.reason.clone(),
    });
    if verdict.approved {
        return Ok(vec![first]);
    }

    let mut retry_context = context;
    retry_context.push(first.clone());
    retry_context.push(TaskOutput {
        task: format!("{}:review", task.name),
        agent: "manager".to_string(),
        output: if verdict.feedback.is_empty() {
            "The manager rejected the previous attempt without feedback; improve it.".to_string()
        } else {
            verdict.feedback
        },
        model: model.name(),
        ..TaskOutput::default()
    });
    match task_step::perform(ctx, task, agent, retry_context).await {
        Ok(second) => Ok(vec![first, second]),
        Err(e) => Err((vec![first], e)),
    }
}
