//! The graph process: each task is a node of a [`StateGraph<GraphRunState>`]; after a task
//! runs, the first edge from it (file order) whose predicate holds on its output decides
//! where to go. Two bounds stop a loop: the routing never continues past
//! `graph.max_iterations` task executions, and the graph's circuit breaker (transitions and
//! per-node visits = `max_iterations`, time = `max_seconds`) backs it up. Either ends the
//! run `degraded` with a `BudgetExhausted` event and a reason starting "budget exhausted:".

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::graph::{
    BreakerTrip, CircuitBreakerPolicy, END, GraphOutcome, Node, NodeError, StateGraph,
};
use crate::ports::TaskOutput;
use crate::spec::{AgentSpec, GRAPH_END, GraphSpec, TaskSpec};

use super::task_step::{self, StepError};
use super::{ProcessContext, ProcessResult, RunEvent, RunStatus};

/// The state a graph process threads through its task nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphRunState {
    /// Every task execution's output, in order.
    pub outputs: Vec<TaskOutput>,
    /// Task executions so far.
    pub executions: usize,
    /// Set when the routing stopped the run because `max_iterations` was used up.
    pub budget_exhausted: Option<String>,
    /// Set when the run was cancelled.
    pub cancelled: bool,
    /// Where the last task's edges lead (a task name or the engine's END).
    next: Option<String>,
}

struct TaskNode {
    ctx: Arc<ProcessContext>,
    task: TaskSpec,
    agent: AgentSpec,
    graph: Arc<GraphSpec>,
}

#[async_trait]
impl Node<GraphRunState> for TaskNode {
    async fn run(&self, state: &mut GraphRunState) -> Result<(), NodeError> {
        state.next = None;
        let context = task_step::context_for(&self.task, &state.outputs);
        let output = match task_step::perform(&self.ctx, &self.task, &self.agent, context).await {
            Ok(output) => output,
            Err(StepError::Cancelled) => {
                state.cancelled = true;
                return Err(NodeError::Cancelled);
            }
            Err(StepError::Failed(reason)) => return Err(NodeError::new(reason)),
        };
        state.executions += 1;
        let chosen = self
            .graph
            .edges_from(&self.task.name)
            .find(|edge| edge.matches(&output.output))
            .map(|edge| edge.to.clone());
        state.outputs.push(output);
        let Some(to) = chosen else {
            return Err(NodeError::new(format!(
                "no edge from task '{}' matched its output; end its edges with an unconditional one, e.g. `{{ from: {}, to: {GRAPH_END} }}`",
                self.task.name, self.task.name
            )));
        };
        if to != GRAPH_END && state.executions >= self.graph.max_iterations {
            state.budget_exhausted = Some(format!(
                "budget exhausted: graph.max_iterations ({}) task executions used; '{}' would have continued to '{to}'",
                self.graph.max_iterations, self.task.name
            ));
            state.next = Some(END.to_string());
            return Ok(());
        }
        self.ctx.events.emit(RunEvent::GraphTransition {
            from: self.task.name.clone(),
            to: to.clone(),
        });
        state.next = Some(if to == GRAPH_END { END.to_string() } else { to });
        Ok(())
    }
}

/// The breaker for a crew graph: transitions and visits per task = `max_iterations`,
/// per-task and total time = `max_seconds`.
pub(super) fn breaker_policy(graph: &GraphSpec) -> CircuitBreakerPolicy {
    let time = Duration::from_secs(graph.max_seconds);
    CircuitBreakerPolicy {
        max_transitions: graph.max_iterations,
        max_state_visits: graph.max_iterations,
        per_state_timeout: time,
        total_timeout: time,
    }
}

pub(super) async fn run(ctx: &ProcessContext) -> ProcessResult {
    let Some(graph_spec) = ctx.crew.graph.clone() else {
        return ProcessResult::failed(
            Vec::new(),
            format!(
                "crew '{}' has `process: graph` but no `graph:` block",
                ctx.crew.name
            ),
        );
    };
    let graph_spec = Arc::new(graph_spec);
    let shared = Arc::new(ctx.clone());

    let mut graph: StateGraph<GraphRunState> = StateGraph::new(&graph_spec.start);
    for task in &ctx.crew.tasks {
        let agent = match task_step::file_agent(ctx, task) {
            Ok(agent) => agent.clone(),
            Err(StepError::Failed(reason)) => return ProcessResult::failed(Vec::new(), reason),
            Err(StepError::Cancelled) => return ProcessResult::cancelled(Vec::new()),
        };
        graph.add_node(
            &task.name,
            TaskNode {
                ctx: shared.clone(),
                task: task.clone(),
                agent,
                graph: graph_spec.clone(),
            },
        );
        graph.add_conditional_edge(&task.name, |state: &GraphRunState| {
            state.next.clone().unwrap_or_default()
        });
    }
    if let Err(e) = graph.validate() {
        return ProcessResult::failed(Vec::new(), format!("the crew graph is invalid: {e}"));
    }
    if task_step::is_cancelled(&ctx.cancel) {
        return ProcessResult::cancelled(Vec::new());
    }

    let run = graph
        .run(GraphRunState::default(), &breaker_policy(&graph_spec))
        .await;
    tracing::info!(
        run_id = %ctx.run_id,
        outcome = %run.outcome,
        path = ?run.path,
        "graph process ended"
    );
    let state = run.state;
    let exhausted = |reason: String| {
        ctx.events.emit(RunEvent::BudgetExhausted {
            reason: reason.clone(),
        });
        let reason = match super::degraded_tasks(&state.outputs) {
            Some(tasks) => format!("{reason}; {tasks}"),
            None => reason,
        };
        ProcessResult {
            status: RunStatus::Degraded,
            outputs: state.outputs.clone(),
            reason: Some(reason),
        }
    };
    match run.outcome {
        GraphOutcome::Completed => match state.budget_exhausted.clone() {
            Some(reason) => exhausted(reason),
            None => ProcessResult::finished(state.outputs),
        },
        GraphOutcome::CircuitBroken(
            BreakerTrip::TotalTimeout(_) | BreakerTrip::StateTimeout { .. },
        ) => exhausted(format!(
            "budget exhausted: graph.max_seconds ({} s) elapsed after {} task execution(s)",
            graph_spec.max_seconds, state.executions
        )),
        GraphOutcome::CircuitBroken(trip) => exhausted(format!(
            "budget exhausted: the graph's circuit breaker tripped ({trip})"
        )),
        GraphOutcome::NodeFailed { .. } if state.cancelled => {
            ProcessResult::cancelled(state.outputs)
        }
        GraphOutcome::NodeFailed { error, .. } => ProcessResult::failed(state.outputs, error),
        GraphOutcome::UnknownNode(name) => ProcessResult::failed(
            state.outputs,
            format!("the graph was routed to '{name}', which is not a task of this crew"),
        ),
    }
}
