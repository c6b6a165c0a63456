//! Tests of the process engines with task runners written here (the engines are under
//! test, not the agents): `EchoRunner` echoes its assignment, `ScriptedRunner` answers each
//! task from a script, `SlowRunner` waits to be cancelled; `ScriptedManager` plays the
//! manager model with canned JSON answers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::*;
use crate::ports::{
    ChatError, ChatRequest, ChatResponse, KnowledgeCitation, TaskAssignment, TaskError,
};
use crate::spec::parse_crew_str;

// ----------------------------------------------------------------------------------------
// Test doubles for the ports
// ----------------------------------------------------------------------------------------

#[derive(Default)]
struct RecordingSink(Mutex<Vec<RunEvent>>);

impl RunEventSink for RecordingSink {
    fn emit(&self, event: RunEvent) {
        self.0.lock().unwrap().push(event);
    }
}

impl RecordingSink {
    fn events(&self) -> Vec<RunEvent> {
        self.0.lock().unwrap().clone()
    }

    fn kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }
}

/// Answers every task with "[task/agent] description <- context tasks", citing one passage
/// when the agent has knowledge; records every assignment.
#[derive(Default)]
struct EchoRunner {
    seen: Mutex<Vec<TaskAssignment>>,
}

fn citation(collection: &str) -> KnowledgeCitation {
    KnowledgeCitation {
        marker: 1,
        collection: collection.to_string(),
        chunk_id: "chunk-1".to_string(),
        source_id: "kb/faq.md".to_string(),
        snippet: "Refunds take 5 days.".to_string(),
        score: 0.9,
        score_origin: "hybrid".to_string(),
        start: 0,
        end: 20,
        untrusted: false,
    }
}

#[async_trait]
impl TaskRunner for EchoRunner {
    async fn run_task(&self, a: TaskAssignment) -> Result<TaskOutput, TaskError> {
        self.seen.lock().unwrap().push(a.clone());
        let context: Vec<&str> = a.context.iter().map(|c| c.task.as_str()).collect();
        let cites = if a.agent.knowledge.is_empty() {
            ""
        } else {
            " [1]"
        };
        Ok(TaskOutput {
            task: a.task_name.clone(),
            agent: a.agent.name.clone(),
            output: format!(
                "[{}/{}] {} <- {}{cites}",
                a.task_name,
                a.agent.name,
                a.description,
                context.join(",")
            ),
            passages: a
                .agent
                .knowledge
                .iter()
                .map(|c| citation(&c.collection))
                .collect(),
            model: "echo".to_string(),
            ..TaskOutput::default()
        })
    }
}

impl EchoRunner {
    fn seen(&self) -> Vec<TaskAssignment> {
        self.seen.lock().unwrap().clone()
    }
}

/// Answers each task with the next line of its script (the last line repeats); a task
/// whose script line is `FAIL` fails; can pull the cancel lever after a given task.
struct ScriptedRunner {
    script: Mutex<HashMap<String, VecDeque<String>>>,
    calls: Mutex<Vec<TaskAssignment>>,
    cancel_after: Option<(String, watch::Sender<bool>)>,
}

impl ScriptedRunner {
    fn new(script: &[(&str, &[&str])]) -> Self {
        Self {
            script: Mutex::new(
                script
                    .iter()
                    .map(|(task, lines)| {
                        (
                            task.to_string(),
                            lines.iter().map(|l| l.to_string()).collect(),
                        )
                    })
                    .collect(),
            ),
            calls: Mutex::new(Vec::new()),
            cancel_after: None,
        }
    }

    fn calls(&self) -> Vec<TaskAssignment> {
        self.calls.lock().unwrap().clone()
    }

    fn called_tasks(&self) -> Vec<String> {
        self.calls().iter().map(|a| a.task_name.clone()).collect()
    }
}

#[async_trait]
impl TaskRunner for ScriptedRunner {
    async fn run_task(&self, a: TaskAssignment) -> Result<TaskOutput, TaskError> {
        self.calls.lock().unwrap().push(a.clone());
        let line = {
            let mut script = self.script.lock().unwrap();
            let lines = script.get_mut(&a.task_name).expect("task has a script");
            if lines.len() > 1 {
                lines.pop_front().unwrap()
            } else {
                lines.front().cloned().unwrap()
            }
        };
        if let Some((task, lever)) = &self.cancel_after
            && task == &a.task_name
        {
            lever.send(true).unwrap();
        }
        if line == "FAIL" {
            return Err(TaskError::Other("the model refused".to_string()));
        }
        Ok(TaskOutput {
            task: a.task_name.clone(),
            agent: a.agent.name.clone(),
            output: line,
            model: "scripted".to_string(),
            ..TaskOutput::default()
        })
    }
}

/// Takes `delay` per task (or until the run is cancelled).
struct SlowRunner {
    delay: Duration,
    started: Mutex<usize>,
}

#[async_trait]
impl TaskRunner for SlowRunner {
    async fn run_task(&self, a: TaskAssignment) -> Result<TaskOutput, TaskError> {
        *self.started.lock().unwrap() += 1;
        tokio::time::sleep(self.delay).await;
        Ok(TaskOutput {
            task: a.task_name,
            agent: a.agent.name,
            output: "REVISE".to_string(),
            model: "slow".to_string(),
            ..TaskOutput::default()
        })
    }
}

/// A manager model answering from a script of canned replies; records every request.
struct ScriptedManager {
    name: String,
    replies: Mutex<VecDeque<Result<String, String>>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedManager {
    fn new(name: &str, replies: &[Result<&str, &str>]) -> Self {
        Self {
            name: name.to_string(),
            replies: Mutex::new(
                replies
                    .iter()
                    .map(|r| r.map(str::to_string).map_err(str::to_string))
                    .collect(),
            ),
            requests: Mutex::new(Vec::new()),
        }
    }

    fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

#[async_trait]
impl ChatModel for ScriptedManager {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        self.requests.lock().unwrap().push(request);
        match self.replies.lock().unwrap().pop_front() {
            Some(Ok(content)) => Ok(ChatResponse {
                content,
                model: self.name.clone(),
                ..ChatResponse::default()
            }),
            Some(Err(e)) => Err(ChatError::Transport(e)),
            None => Err(ChatError::InvalidResponse("script exhausted".to_string())),
        }
    }
}

// ----------------------------------------------------------------------------------------
// Fixtures
// ----------------------------------------------------------------------------------------

struct Harness {
    sink: Arc<RecordingSink>,
    cancel_tx: watch::Sender<bool>,
    ctx: ProcessContext,
}

fn harness(
    yaml: &str,
    inputs: &[(&str, &str)],
    runner: Arc<dyn TaskRunner>,
    manager: Option<Arc<dyn ChatModel>>,
) -> Harness {
    let crew = parse_crew_str(yaml, Path::new("crews/test.yaml")).unwrap();
    let sink = Arc::new(RecordingSink::default());
    let (cancel_tx, cancel) = watch::channel(false);
    let ctx = ProcessContext {
        run_id: "run-1".to_string(),
        crew: Arc::new(crew),
        inputs: inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        runner,
        manager,
        events: sink.clone(),
        cancel,
        groundedness: None,
        ledger: Default::default(),
    };
    Harness {
        sink,
        cancel_tx,
        ctx,
    }
}

const SEQUENTIAL: &str = r#"
rag:
  collections:
    kb: { sources: [kb/faq.md] }
agents:
  researcher: { role: Researcher, goal: Find facts, knowledge: [kb] }
  writer: { role: Writer, goal: Write }
tasks:
  - { name: research, agent: researcher, description: "Research {{ inputs.topic }}", expected_output: "Facts about {{inputs.topic}}" }
  - { name: outline, agent: writer, description: Outline, expected_output: An outline }
  - { name: write, agent: writer, description: "Write for {{ inputs.audience }}", expected_output: Text, context: [research, outline] }
"#;

// ----------------------------------------------------------------------------------------
// Sequential
// ----------------------------------------------------------------------------------------

#[tokio::test]
async fn sequential_runs_tasks_in_order_with_context_and_rendered_inputs() {
    let runner = Arc::new(EchoRunner::default());
    let h = harness(
        SEQUENTIAL,
        &[("topic", "refunds"), ("audience", "customers")],
        runner.clone(),
        None,
    );
    let result = run_process(h.ctx).await;

    assert_eq!(result.status, RunStatus::Finished);
    assert_eq!(result.reason, None);
    let seen = runner.seen();
    let names: Vec<&str> = seen.iter().map(|a| a.task_name.as_str()).collect();
    assert_eq!(names, vec!["research", "outline", "write"]);
    assert_eq!(seen[0].description, "Research refunds");
    assert_eq!(seen[0].expected_output, "Facts about refunds");
    assert_eq!(seen[0].run_id, "run-1");
    assert_eq!(seen[0].crew, "test");
    assert_eq!(seen[0].agent.collections(), vec!["kb"]);
    assert!(seen[0].context.is_empty(), "the first task has no context");
    let outline_context: Vec<&str> = seen[1].context.iter().map(|c| c.task.as_str()).collect();
    assert_eq!(
        outline_context,
        vec!["research"],
        "no `context:` means the previous output"
    );
    let write_context: Vec<&str> = seen[2].context.iter().map(|c| c.task.as_str()).collect();
    assert_eq!(write_context, vec!["research", "outline"]);
    assert_eq!(
        seen[2].context[0].output,
        "[research/researcher] Research refunds <-  [1]"
    );
    assert_eq!(seen[2].description, "Write for customers");

    assert_eq!(result.outputs.len(), 3);
    assert_eq!(
        result.final_output(),
        Some("[write/writer] Write for customers <- research,outline")
    );

    assert_eq!(
        h.sink.kinds(),
        vec![
            "task_started",
            "retrieval",
            "task_completed",
            "task_started",
            "task_completed",
            "task_started",
            "task_completed",
        ],
        "retrieval only for the agent with knowledge; no run_started/run_finished"
    );
    let events = h.sink.events();
    assert_eq!(
        events[1],
        RunEvent::Retrieval {
            task: "research".to_string(),
            agent: "researcher".to_string(),
            citations: vec![citation("kb")],
            trace: vec![],
        }
    );
    let RunEvent::TaskCompleted { output } = &events[2] else {
        panic!("{:?}", events[2]);
    };
    assert_eq!(output.citations, vec![citation("kb")]);
    assert!(!output.uncited && output.dangling_markers.is_empty());
    assert!(
        output.passages.is_empty(),
        "passages travel in the retrieval event"
    );
}

#[tokio::test]
async fn a_missing_input_fails_the_run_naming_it() {
    let runner = Arc::new(EchoRunner::default());
    let h = harness(SEQUENTIAL, &[("topic", "refunds")], runner.clone(), None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Failed);
    let reason = result.reason.unwrap();
    assert!(
        reason.contains("'audience' (used by task 'write')"),
        "{reason}"
    );
    assert!(reason.contains("--input audience=…"), "{reason}");
    assert!(runner.seen().is_empty(), "nothing runs");
    assert!(h.sink.events().is_empty());
}

#[tokio::test]
async fn a_failing_task_fails_the_run_and_stops_it() {
    let runner = Arc::new(ScriptedRunner::new(&[
        ("research", &["facts"]),
        ("outline", &["FAIL"]),
        ("write", &["text"]),
    ]));
    let h = harness(
        SEQUENTIAL,
        &[("topic", "t"), ("audience", "a")],
        runner.clone(),
        None,
    );
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(
        result.reason.as_deref(),
        Some("task 'outline' (agent 'writer') failed: the model refused")
    );
    assert_eq!(runner.called_tasks(), vec!["research", "outline"]);
    assert_eq!(result.outputs.len(), 1);
}

#[tokio::test]
async fn cancellation_between_tasks_stops_the_run() {
    let mut h = harness(
        SEQUENTIAL,
        &[("topic", "t"), ("audience", "a")],
        Arc::new(EchoRunner::default()),
        None,
    );
    // The runner pulls the run's own cancel lever while performing `research`.
    let mut runner = ScriptedRunner::new(&[
        ("research", &["facts"]),
        ("outline", &["outline"]),
        ("write", &["text"]),
    ]);
    runner.cancel_after = Some(("research".to_string(), h.cancel_tx.clone()));
    let runner = Arc::new(runner);
    h.ctx.runner = runner.clone();
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.reason.as_deref(), Some("the run was cancelled"));
    assert_eq!(runner.called_tasks(), vec!["research"]);
    assert_eq!(result.outputs.len(), 1, "a finished task's output is kept");
}

#[tokio::test]
async fn cancellation_before_start_and_during_a_task() {
    let runner = Arc::new(EchoRunner::default());
    let h = harness(
        SEQUENTIAL,
        &[("topic", "t"), ("audience", "a")],
        runner.clone(),
        None,
    );
    h.cancel_tx.send(true).unwrap();
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Cancelled);
    assert!(runner.seen().is_empty());

    let slow = Arc::new(SlowRunner {
        delay: Duration::from_secs(30),
        started: Mutex::new(0),
    });
    let h = harness(
        SEQUENTIAL,
        &[("topic", "t"), ("audience", "a")],
        slow.clone(),
        None,
    );
    let cancel_tx = h.cancel_tx.clone();
    let running = tokio::spawn(run_process(h.ctx));
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel_tx.send(true).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("cancellation ends the run promptly")
        .unwrap();
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(*slow.started.lock().unwrap(), 1);
    assert!(result.outputs.is_empty());
}

// ----------------------------------------------------------------------------------------
// Hierarchical
// ----------------------------------------------------------------------------------------

const HIERARCHICAL: &str = r#"
process: hierarchical
agents:
  writer: { role: Writer, goal: Write clearly }
  editor: { role: Editor, goal: Make text correct }
tasks:
  - { name: draft, agent: writer, description: "Draft a note on {{ inputs.topic }}", expected_output: A note }
  - { name: polish, agent: writer, description: Polish the note, expected_output: A polished note }
"#;

fn manager_decisions(sink: &RecordingSink) -> Vec<(String, String, String)> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::ManagerDecision {
                task,
                agent,
                reason,
            } => Some((task, agent, reason)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn hierarchical_without_a_manager_follows_the_agent_field() {
    let runner = Arc::new(EchoRunner::default());
    let h = harness(HIERARCHICAL, &[("topic", "tea")], runner.clone(), None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished);
    let agents: Vec<String> = runner.seen().iter().map(|a| a.agent.name.clone()).collect();
    assert_eq!(agents, vec!["writer", "writer"]);
    let decisions = manager_decisions(&h.sink);
    assert_eq!(decisions.len(), 2, "one decision per task, no reviews");
    assert_eq!(decisions[0].0, "draft");
    assert_eq!(decisions[0].1, "writer");
    assert!(
        decisions[0].2.contains("no manager model is configured"),
        "{:?}",
        decisions[0]
    );
    assert!(decisions[0].2.contains("following the task's agent field"));
    assert_eq!(
        h.sink.kinds(),
        vec![
            "manager_decision",
            "task_started",
            "task_completed",
            "manager_decision",
            "task_started",
            "task_completed",
        ]
    );
}

#[tokio::test]
async fn hierarchical_never_asks_the_extractive_model_to_plan() {
    let runner = Arc::new(EchoRunner::default());
    let extractive = Arc::new(ScriptedManager::new("extractive", &[]));
    let h = harness(
        HIERARCHICAL,
        &[("topic", "tea")],
        runner.clone(),
        Some(extractive.clone()),
    );
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished);
    assert_eq!(extractive.request_count(), 0);
    let decisions = manager_decisions(&h.sink);
    assert!(
        decisions[0].2.contains("'extractive' cannot plan"),
        "{:?}",
        decisions[0]
    );
}

#[tokio::test]
async fn hierarchical_manager_assigns_reviews_and_earns_one_retry() {
    let runner = Arc::new(EchoRunner::default());
    let manager = Arc::new(ScriptedManager::new(
        "openai:gpt-test",
        &[
            // draft: assign to editor, then reject with feedback, (retry is not reviewed)
            Ok("```json\n{\"agent\": \"Editor\", \"reason\": \"needs precision\"}\n```"),
            Ok("{\"approved\": false, \"feedback\": \"Mention steeping time.\"}"),
            // polish: assign to writer, approve
            Ok("{\"agent\": \"writer\"}"),
            Ok("Looks good: {\"approved\": \"yes\", \"feedback\": \"\"}"),
        ],
    ));
    let h = harness(
        HIERARCHICAL,
        &[("topic", "tea")],
        runner.clone(),
        Some(manager.clone()),
    );
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished);
    assert_eq!(manager.request_count(), 4);

    let seen = runner.seen();
    let calls: Vec<(String, String)> = seen
        .iter()
        .map(|a| (a.task_name.clone(), a.agent.name.clone()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("draft".to_string(), "editor".to_string()),
            ("draft".to_string(), "editor".to_string()),
            ("polish".to_string(), "writer".to_string()),
        ]
    );
    // The retry sees the rejected attempt and the feedback.
    let retry_context: Vec<(&str, &str)> = seen[1]
        .context
        .iter()
        .map(|c| (c.task.as_str(), c.output.as_str()))
        .collect();
    assert_eq!(retry_context.len(), 2);
    assert_eq!(retry_context[0].0, "draft");
    assert_eq!(retry_context[1], ("draft:review", "Mention steeping time."));
    // The next task gets the retry's output as its previous output.
    assert_eq!(seen[2].context.len(), 1);
    assert_eq!(seen[2].context[0].task, "draft");
    assert_eq!(result.outputs.len(), 3);

    let decisions = manager_decisions(&h.sink);
    let reasons: Vec<&str> = decisions.iter().map(|d| d.2.as_str()).collect();
    assert_eq!(reasons.len(), 4);
    assert_eq!(
        reasons[0],
        "assigned by manager openai:gpt-test: needs precision"
    );
    assert!(reasons[1].starts_with("rejected by manager openai:gpt-test: Mention steeping time."));
    assert_eq!(
        reasons[2],
        "assigned by manager openai:gpt-test: no reason given"
    );
    assert_eq!(reasons[3], "approved by manager openai:gpt-test");
}

#[tokio::test]
async fn hierarchical_falls_back_when_the_manager_answer_is_unusable() {
    let runner = Arc::new(EchoRunner::default());
    let manager = Arc::new(ScriptedManager::new(
        "openai:gpt-test",
        &[
            Ok("{\"agent\": \"ghostwriter\"}"),
            Ok("I approve, I guess"),
            Err("connection reset"),
            Ok("{\"approved\": 1}"),
        ],
    ));
    let h = harness(
        HIERARCHICAL,
        &[("topic", "tea")],
        runner.clone(),
        Some(manager),
    );
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished);
    let agents: Vec<String> = runner.seen().iter().map(|a| a.agent.name.clone()).collect();
    assert_eq!(
        agents,
        vec!["writer", "writer"],
        "no retries: unusable reviews approve"
    );
    let reasons: Vec<String> = manager_decisions(&h.sink)
        .into_iter()
        .map(|d| d.2)
        .collect();
    assert!(
        reasons[0].contains("named agent 'ghostwriter', which this crew does not declare"),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[1].contains("not a JSON object") && reasons[1].ends_with("approved by default"),
        "{}",
        reasons[1]
    );
    assert!(
        reasons[2].contains("the manager call failed") && reasons[2].contains("connection reset"),
        "{}",
        reasons[2]
    );
    assert!(
        reasons[3].contains("no usable \"approved\""),
        "{}",
        reasons[3]
    );
}

// ----------------------------------------------------------------------------------------
// Graph
// ----------------------------------------------------------------------------------------

const GRAPH: &str = r#"
process: graph
agents:
  writer: { role: Writer, goal: Write }
  editor: { role: Editor, goal: Review }
tasks:
  - { name: draft, agent: writer, description: "Draft on {{ inputs.topic }}", expected_output: A draft }
  - { name: review, agent: editor, description: Review, expected_output: APPROVED or REVISE }
  - { name: publish, agent: writer, description: Publish, expected_output: Final, context: [draft] }
graph:
  start: draft
  edges:
    - { from: draft, to: review }
    - { from: review, to: draft, when: { output_contains: REVISE } }
    - { from: review, to: publish, when: { output_matches: "^APPROVED" } }
    - { from: publish, to: end }
  max_iterations: 8
  max_seconds: 60
"#;

fn transitions(sink: &RecordingSink) -> Vec<(String, String)> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::GraphTransition { from, to } => Some((from, to)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn graph_loop_ends_by_predicate() {
    let runner = Arc::new(ScriptedRunner::new(&[
        ("draft", &["draft v1", "draft v2", "draft v3"]),
        (
            "review",
            &["REVISE: too short", "REVISE: typos", "APPROVED"],
        ),
        ("publish", &["published"]),
    ]));
    let h = harness(GRAPH, &[("topic", "tea")], runner.clone(), None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished, "{:?}", result.reason);
    assert_eq!(
        runner.called_tasks(),
        vec![
            "draft", "review", "draft", "review", "draft", "review", "publish"
        ]
    );
    assert_eq!(result.final_output(), Some("published"));
    assert_eq!(result.outputs.len(), 7);

    let calls = runner.calls();
    assert_eq!(calls[0].description, "Draft on tea");
    // Without `context:`, a node gets the previous node's output: draft v2 sees the review.
    assert_eq!(calls[2].context.len(), 1);
    assert_eq!(calls[2].context[0].output, "REVISE: too short");
    // publish names `context: [draft]`: the latest draft.
    assert_eq!(calls[6].context.len(), 1);
    assert_eq!(calls[6].context[0].output, "draft v3");

    let moves = transitions(&h.sink);
    assert_eq!(moves.len(), 7);
    assert_eq!(moves[1], ("review".to_string(), "draft".to_string()));
    assert_eq!(moves[5], ("review".to_string(), "publish".to_string()));
    assert_eq!(moves[6], ("publish".to_string(), "end".to_string()));
    assert!(!h.sink.kinds().contains(&"budget_exhausted".to_string()));
}

#[tokio::test]
async fn graph_loop_ends_by_iteration_budget_as_degraded() {
    let runner = Arc::new(ScriptedRunner::new(&[
        ("draft", &["draft"]),
        ("review", &["REVISE again"]),
        ("publish", &["never"]),
    ]));
    let yaml = GRAPH.replace("max_iterations: 8", "max_iterations: 5");
    let h = harness(&yaml, &[("topic", "tea")], runner.clone(), None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Degraded);
    let reason = result.reason.clone().unwrap();
    assert!(
        reason.starts_with("budget exhausted: graph.max_iterations (5)"),
        "{reason}"
    );
    assert_eq!(
        runner.called_tasks().len(),
        5,
        "exactly max_iterations task executions"
    );
    assert_eq!(result.outputs.len(), 5);
    let budget: Vec<RunEvent> = h
        .sink
        .events()
        .into_iter()
        .filter(|e| matches!(e, RunEvent::BudgetExhausted { .. }))
        .collect();
    assert_eq!(budget, vec![RunEvent::BudgetExhausted { reason }]);
}

#[tokio::test]
async fn graph_loop_ends_by_time_budget_as_degraded() {
    let slow = Arc::new(SlowRunner {
        delay: Duration::from_millis(400),
        started: Mutex::new(0),
    });
    let yaml = GRAPH
        .replace("max_seconds: 60", "max_seconds: 1")
        .replace("max_iterations: 8", "max_iterations: 100");
    let h = harness(&yaml, &[("topic", "tea")], slow.clone(), None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Degraded);
    let reason = result.reason.unwrap();
    assert!(
        reason.starts_with("budget exhausted: graph.max_seconds (1 s) elapsed"),
        "{reason}"
    );
    assert!(h.sink.kinds().contains(&"budget_exhausted".to_string()));
    assert!(*slow.started.lock().unwrap() >= 2);
}

#[tokio::test]
async fn graph_fails_when_no_edge_matches() {
    let runner = Arc::new(ScriptedRunner::new(&[
        ("draft", &["draft"]),
        ("review", &["undecided"]),
        ("publish", &["never"]),
    ]));
    let h = harness(GRAPH, &[("topic", "tea")], runner, None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Failed);
    let reason = result.reason.unwrap();
    assert!(
        reason.contains("no edge from task 'review' matched its output"),
        "{reason}"
    );
    assert_eq!(result.outputs.len(), 2);
}

#[tokio::test]
async fn graph_task_failure_and_cancellation() {
    let runner = Arc::new(ScriptedRunner::new(&[
        ("draft", &["draft"]),
        ("review", &["FAIL"]),
        ("publish", &["never"]),
    ]));
    let h = harness(GRAPH, &[("topic", "tea")], runner, None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(
        result.reason.as_deref(),
        Some("task 'review' (agent 'editor') failed: the model refused")
    );

    let mut runner = ScriptedRunner::new(&[
        ("draft", &["draft"]),
        ("review", &["REVISE"]),
        ("publish", &["never"]),
    ]);
    let mut h = harness(
        GRAPH,
        &[("topic", "tea")],
        Arc::new(EchoRunner::default()),
        None,
    );
    runner.cancel_after = Some(("review".to_string(), h.cancel_tx.clone()));
    let runner = Arc::new(runner);
    h.ctx.runner = runner.clone();
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(runner.called_tasks(), vec!["draft", "review"]);
    assert_eq!(result.outputs.len(), 2);
}

#[test]
fn graph_breaker_follows_the_crew_budget() {
    let crew = parse_crew_str(GRAPH, Path::new("g.yaml")).unwrap();
    let policy = graph_process::breaker_policy(crew.graph.as_ref().unwrap());
    assert_eq!(policy.max_transitions, 8);
    assert_eq!(policy.max_state_visits, 8);
    assert_eq!(policy.total_timeout, Duration::from_secs(60));
}

// ----------------------------------------------------------------------------------------
// Events on the wire
// ----------------------------------------------------------------------------------------

#[test]
fn run_events_serialise_tagged_and_round_trip() {
    let started = RunEvent::RunStarted {
        run_id: "r1".to_string(),
        crew: "support".to_string(),
        process: ProcessKind::Graph,
        inputs: BTreeMap::from([("q".to_string(), "why".to_string())]),
    };
    assert_eq!(
        serde_json::to_value(&started).unwrap(),
        serde_json::json!({
            "type": "run_started", "run_id": "r1", "crew": "support",
            "process": "graph", "inputs": { "q": "why" }
        })
    );
    let finished = RunEvent::RunFinished {
        status: RunStatus::Degraded,
        reason: Some("budget exhausted: x".to_string()),
        final_output: None,
    };
    let json = serde_json::to_string(&finished).unwrap();
    assert!(json.contains("\"type\":\"run_finished\"") && json.contains("\"status\":\"degraded\""));
    for event in [started, finished] {
        let back: RunEvent = serde_json::from_str(&serde_json::to_string(&event).unwrap()).unwrap();
        assert_eq!(back, event);
    }
}

#[tokio::test]
async fn channel_sink_forwards_events() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tx.emit(RunEvent::BudgetExhausted {
        reason: "r".to_string(),
    });
    assert_eq!(
        rx.recv().await,
        Some(RunEvent::BudgetExhausted {
            reason: "r".to_string()
        })
    );
    drop(rx);
    tx.emit(RunEvent::BudgetExhausted {
        reason: "dropped quietly".to_string(),
    });
}

// ----------------------------------------------------------------------------------------
// Citations: the run's ledger, dangling markers, `citations: required`, groundedness
// ----------------------------------------------------------------------------------------

/// Answers each task with a fixed text and hands back the passages it "retrieved" (chunk
/// ids), numbered `1..n` per task as a knowledge service numbers a block; records every
/// assignment.
struct PassageRunner {
    script: HashMap<String, (String, Vec<&'static str>)>,
    seen: Mutex<Vec<TaskAssignment>>,
}

impl PassageRunner {
    fn new(script: &[(&str, &str, &[&'static str])]) -> Self {
        Self {
            script: script
                .iter()
                .map(|(task, text, chunks)| (task.to_string(), (text.to_string(), chunks.to_vec())))
                .collect(),
            seen: Mutex::new(Vec::new()),
        }
    }
}

fn chunk_passage(chunk: &str, marker: u32) -> KnowledgeCitation {
    KnowledgeCitation {
        marker,
        collection: "kb".to_string(),
        chunk_id: chunk.to_string(),
        source_id: format!("kb/{chunk}.md"),
        snippet: format!("Passage {chunk} says refunds take five days."),
        score: 0.5,
        score_origin: "hybrid".to_string(),
        start: 0,
        end: 10,
        untrusted: false,
    }
}

#[async_trait]
impl TaskRunner for PassageRunner {
    async fn run_task(&self, a: TaskAssignment) -> Result<TaskOutput, TaskError> {
        self.seen.lock().unwrap().push(a.clone());
        let (text, chunks) = self.script.get(&a.task_name).cloned().expect("scripted");
        Ok(TaskOutput {
            task: a.task_name.clone(),
            agent: a.agent.name.clone(),
            output: text,
            model: "passages".to_string(),
            passages: chunks
                .iter()
                .enumerate()
                .map(|(i, c)| chunk_passage(c, i as u32 + 1))
                .collect(),
            retrieval_trace: vec![serde_json::json!({"stages": ["bm25"]})],
            ..TaskOutput::default()
        })
    }
}

/// Records what it is asked and answers a fixed score.
#[derive(Default)]
struct RecordingGroundedness(Mutex<Vec<(String, Vec<u32>)>>);

#[async_trait]
impl crate::ports::GroundednessCheck for RecordingGroundedness {
    async fn check(
        &self,
        _question: &str,
        answer: &str,
        passages: &[KnowledgeCitation],
    ) -> Result<crate::ports::GroundednessReport, crate::ports::GroundednessError> {
        self.0.lock().unwrap().push((
            answer.to_string(),
            passages.iter().map(|p| p.marker).collect(),
        ));
        Ok(crate::ports::GroundednessReport {
            checker: "recording".to_string(),
            grounded: true,
            score: 0.75,
            unsupported_claims: Vec::new(),
        })
    }
}

const CITING: &str = r#"
rag:
  collections:
    kb: { sources: [kb/faq.md] }
agents:
  researcher: { role: Researcher, goal: Find facts, knowledge: [kb] }
  writer: { role: Writer, goal: Write, knowledge: [kb] }
tasks:
  - { name: research, agent: researcher, description: Research, expected_output: Facts }
  - { name: write, agent: writer, description: Write, expected_output: Text, context: [research] }
"#;

fn completed(events: &[RunEvent]) -> Vec<TaskOutput> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::TaskCompleted { output } => Some(output.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_marker_that_resolves_to_nothing_is_removed_and_the_required_task_degrades() {
    let runner = Arc::new(PassageRunner::new(&[
        ("research", "Refunds take five days [9].", &["a", "b"]),
        ("write", "Customers wait five days [1].", &["a"]),
    ]));
    let h = harness(CITING, &[], runner, None);
    let result = run_process(h.ctx).await;

    let outputs = completed(&h.sink.events());
    assert_eq!(outputs[0].output, "Refunds take five days.");
    assert!(outputs[0].citations.is_empty(), "no citation is kept");
    assert_eq!(outputs[0].dangling_markers, vec![9]);
    assert!(outputs[0].uncited);
    let reason = outputs[0].degraded.clone().expect("degraded");
    assert!(
        reason.contains("[9]") && reason.contains("citations: required"),
        "{reason}"
    );
    // The run goes on (on_degraded: continue) and ends degraded with the task's reason.
    assert_eq!(outputs[1].citations.len(), 1);
    assert_eq!(result.status, RunStatus::Degraded);
    assert_eq!(result.reason.as_deref(), Some(reason.as_str()));
    assert_eq!(result.outputs[0].output, "Refunds take five days.");
}

#[tokio::test]
async fn an_uncited_answer_degrades_a_required_task_and_fails_the_run_under_on_degraded_fail() {
    let runner = Arc::new(PassageRunner::new(&[
        ("research", "Refunds take five days.", &["a"]),
        ("write", "unused", &[]),
    ]));
    let yaml = format!("{CITING}on_degraded: fail\n");
    let h = harness(&yaml, &[], runner.clone(), None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Failed);
    let reason = result.reason.unwrap();
    assert!(reason.contains("cites none of its passages"), "{reason}");
    assert!(reason.ends_with("(on_degraded: fail)"), "{reason}");
    let outputs = completed(&h.sink.events());
    assert_eq!(
        outputs.len(),
        1,
        "the evidence is recorded before the run stops"
    );
    assert!(outputs[0].uncited && outputs[0].citations.is_empty());
    assert_eq!(runner.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn citations_optional_records_uncited_output_without_degrading() {
    let runner = Arc::new(PassageRunner::new(&[
        ("research", "Refunds take five days.", &["a"]),
        ("write", "Nothing cited here.", &["a"]),
    ]));
    // Crew-wide optional, and a task-level override back to required is honoured too.
    let yaml = format!("{CITING}citations: optional\n");
    let h = harness(&yaml, &[], runner, None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished, "{:?}", result.reason);
    let outputs = completed(&h.sink.events());
    assert!(outputs.iter().all(|o| o.uncited && o.degraded.is_none()));

    let yaml = CITING.replace(
        "expected_output: Text, context: [research] }",
        "expected_output: Text, context: [research], citations: required }",
    ) + "citations: optional\n";
    let runner = Arc::new(PassageRunner::new(&[
        ("research", "Refunds take five days.", &["a"]),
        ("write", "Nothing cited here.", &["a"]),
    ]));
    let h = harness(&yaml, &[], runner, None);
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Degraded);
    assert!(result.reason.unwrap().starts_with("task 'write'"));
}

#[tokio::test]
async fn one_marker_means_one_passage_across_the_run() {
    // The researcher gets a, b, c as [1] [2] [3]; the writer's block is numbered 1..2 by
    // its service (c, d): c keeps the run's [3], d becomes [4]. The writer cites [2] from the
    // researcher's output (context) and its own d as [2] in block numbering.
    let runner = Arc::new(PassageRunner::new(&[
        ("research", "A [1]. C [3].", &["a", "b", "c"]),
        ("write", "From research [3]. New [2].", &["c", "d"]),
    ]));
    let groundedness = Arc::new(RecordingGroundedness::default());
    let mut h = harness(CITING, &[], runner.clone(), None);
    h.ctx.groundedness = Some(groundedness.clone());
    let ledger = h.ctx.ledger.clone();
    let result = run_process(h.ctx).await;
    assert_eq!(result.status, RunStatus::Finished, "{:?}", result.reason);

    // The writer was handed the run's ledger so far.
    let seen = runner.seen.lock().unwrap().clone();
    assert!(seen[0].run_passages.is_empty());
    let ids: Vec<(u32, &str)> = seen[1]
        .run_passages
        .iter()
        .map(|p| (p.marker, p.chunk_id.as_str()))
        .collect();
    assert_eq!(ids, [(1, "a"), (2, "b"), (3, "c")]);

    // Block-local [1] (c) and [2] (d) of the writer were mapped onto [3] and [4].
    let outputs = completed(&h.sink.events());
    assert_eq!(outputs[1].output, "From research [3]. New [4].");
    let cited: Vec<(u32, &str)> = outputs[1]
        .citations
        .iter()
        .map(|c| (c.marker, c.chunk_id.as_str()))
        .collect();
    assert_eq!(cited, [(3, "c"), (4, "d")]);
    // [3] in the researcher's output is the same passage as [3] in the writer's.
    assert_eq!(outputs[0].citations[1].chunk_id, "c");
    assert_eq!(outputs[0].citations[1].marker, 3);
    assert_eq!(ledger.lock().unwrap().len(), 4);

    // Retrieval events carry the passages under run markers and the traces.
    let retrievals: Vec<(Vec<u32>, usize)> = h
        .sink
        .events()
        .iter()
        .filter_map(|e| match e {
            RunEvent::Retrieval {
                citations, trace, ..
            } => Some((citations.iter().map(|c| c.marker).collect(), trace.len())),
            _ => None,
        })
        .collect();
    assert_eq!(retrievals, [(vec![1, 2, 3], 1), (vec![3, 4], 1)]);

    // Groundedness scored every cited output against its cited passages.
    let checks = groundedness.0.lock().unwrap().clone();
    assert_eq!(
        checks,
        [
            ("A [1]. C [3].".to_string(), vec![1, 3]),
            ("From research [3]. New [4].".to_string(), vec![3, 4]),
        ]
    );
    assert_eq!(outputs[1].groundedness.as_ref().unwrap().score, 0.75);
}

#[test]
fn task_completed_events_stored_before_citation_facts_still_decode() {
    let old = r#"{"type":"task_completed","output":{"task":"t","agent":"a","output":"x [1]","citations":[],"model":"extractive"}}"#;
    let event: RunEvent = serde_json::from_str(old).unwrap();
    let RunEvent::TaskCompleted { output } = event else {
        panic!("decoded as another event");
    };
    assert!(!output.uncited && output.dangling_markers.is_empty() && output.groundedness.is_none());
    let old = r#"{"type":"retrieval","task":"t","agent":"a","citations":[]}"#;
    assert!(matches!(
        serde_json::from_str::<RunEvent>(old).unwrap(),
        RunEvent::Retrieval { trace, .. } if trace.is_empty()
    ));
}
