//! The sequential process: every task once, in file order, each given its `context:`
//! tasks' outputs or, without `context:`, the previous task's output.

use super::task_step::{self, StepError};
use super::{ProcessContext, ProcessResult};

pub(super) async fn run(ctx: &ProcessContext) -> ProcessResult {
    let mut outputs = Vec::new();
    for task in &ctx.crew.tasks {
        if task_step::is_cancelled(&ctx.cancel) {
            return ProcessResult::cancelled(outputs);
        }
        let step = match task_step::file_agent(ctx, task) {
            Ok(agent) => {
                let context = task_step::context_for(task, &outputs);
                task_step::perform(ctx, task, agent, context).await
            }
            Err(e) => Err(e),
        };
        match step {
            Ok(output) => outputs.push(output),
            Err(StepError::Cancelled) => return ProcessResult::cancelled(outputs),
            Err(StepError::Failed(reason)) => return ProcessResult::failed(outputs, reason),
        }
    }
    ProcessResult::finished(outputs)
}
