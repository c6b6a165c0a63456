//! End to end over gRPC: a crew whose task output cites a marker that does not exist. The
//! daemon (real binary, real embeddings, real gRPC over loopback) runs it against the test kit's
//! scripted OpenAI-compatible server, which answers "…[9]." though the agent was given fewer
//! passages; a client reads the facts from `WatchRun` alone: the marker was dangling and removed,
//! the output is uncited, and under `citations: required` the task and the run are degraded.
//! A crew on a real LLM has its cited output judged by that LLM (the groundedness checker the
//! query pipeline uses), and the run record `GetRun` returns carries the verdict.

mod support;

use std::fs;

use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::crew_service_client::CrewServiceClient;
use orkeon_testkit::{ScriptReply, ScriptRule, ScriptedLlmServer};
use support::{Daemon, PEBBLE_FAQ as FAQ};

fn crew(base_url: &str) -> String {
    format!(
        r#"name: phantom
llm:
  provider: openai
  openai: {{ base_url: "{base_url}", model: scripted, api_key_env: "", max_retries: 0, json_mode: false }}
rag:
  collections:
    kb:
      sources: [kb/*.md]
agents:
  support:
    role: Support agent
    goal: Answer from the knowledge base
    knowledge: [kb]
tasks:
  - name: answer
    agent: support
    description: "Answer: {{{{ inputs.question }}}}"
    expected_output: One sentence with [n] citations
kickoff: {{ on_load: false, inputs: {{ question: "How long is the warranty?" }} }}
"#
    )
}

/// A daemon with the `phantom` crew over the scripted LLM `rules`; the run's events, streamed
/// over `WatchRun` to its end, and the run record `GetRun` returns after it.
async fn run_phantom(rules: Vec<ScriptRule>) -> (Vec<serde_json::Value>, pb::Run) {
    let llm = ScriptedLlmServer::start(rules)
        .await
        .expect("scripted LLM server");
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    fs::create_dir_all(crews.join("kb")).expect("mkdir");
    fs::write(crews.join("kb/faq.md"), FAQ).expect("write");
    fs::write(crews.join("phantom.yaml"), crew(&llm.base_url())).expect("write");
    let root = work.path().to_path_buf();
    let daemon = tokio::task::spawn_blocking(move || {
        Daemon::start(&root, &root.join("data"), &root.join("crews"), &[])
    })
    .await
    .expect("daemon starts");

    let mut client = CrewServiceClient::connect(daemon.url())
        .await
        .expect("connect");
    let run_id = client
        .kickoff(pb::KickoffRequest {
            crew: "phantom".into(),
            ..Default::default()
        })
        .await
        .expect("kickoff")
        .into_inner()
        .run_id;
    let mut stream = client
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            after_seq: 0,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) =
        tokio::time::timeout(std::time::Duration::from_secs(120), stream.message())
            .await
            .expect("the run streams to its end")
            .expect("event")
    {
        events.push(serde_json::from_str::<serde_json::Value>(&event.json).expect("json"));
    }
    let run = client
        .get_run(pb::GetRunRequest { run_id })
        .await
        .expect("get run")
        .into_inner();
    assert!(
        !llm.requests().is_empty(),
        "the scripted server was never asked"
    );
    daemon.terminate();
    (events, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangling_markers_and_uncited_output_reach_watch_run() {
    let (events, _) = run_phantom(vec![ScriptRule {
        when_contains: None,
        reply: ScriptReply::Text("The warranty lasts two years [9].".into()),
        times: None,
    }])
    .await;

    let retrieval = events
        .iter()
        .find(|e| e["type"] == "retrieval")
        .unwrap_or_else(|| panic!("no retrieval event: {events:?}"));
    let given = retrieval["citations"].as_array().expect("passages").len();
    assert!((1..9).contains(&given), "{retrieval}");
    let completed = events
        .iter()
        .find(|e| e["type"] == "task_completed")
        .unwrap_or_else(|| panic!("no task_completed event: {events:?}"));
    let output = &completed["output"];
    assert_eq!(
        output["dangling_markers"],
        serde_json::json!([9]),
        "{output}"
    );
    assert_eq!(output["uncited"], true, "{output}");
    assert_eq!(output["citations"], serde_json::json!([]), "{output}");
    let text = output["output"].as_str().expect("text");
    assert!(
        !text.contains("[9]"),
        "the dangling marker stays in the text: {text}"
    );
    assert!(output["degraded"].is_string(), "{output}");
    let finished = events.last().expect("events");
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["status"], "degraded", "{finished}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crew_on_a_real_llm_is_judged_by_the_llm_and_the_run_record_says_so() {
    let (events, run) = run_phantom(vec![
        ScriptRule {
            when_contains: Some("Answer to check".into()),
            reply: ScriptReply::Text(
                r#"{"grounded": false, "score": 0.25, "unsupported_claims": ["It is blue."]}"#
                    .into(),
            ),
            times: None,
        },
        ScriptRule {
            when_contains: None,
            reply: ScriptReply::Text("The warranty lasts two years [1]. It is blue.".into()),
            times: None,
        },
    ])
    .await;
    let completed = events
        .iter()
        .find(|e| e["type"] == "task_completed")
        .unwrap_or_else(|| panic!("no task_completed event: {events:?}"));
    let verdict = &completed["output"]["groundedness"];
    assert_eq!(verdict["checker"], "llm", "{completed}");
    assert_eq!(verdict["grounded"], false, "{completed}");
    assert_eq!(
        verdict["unsupported_claims"][0], "It is blue.",
        "{completed}"
    );
    // The run record carries the same facts (what `crew runs --json` prints).
    let task = run.tasks.first().expect("a task summary on the run");
    assert_eq!(task.cited, 1);
    let g = task.groundedness.as_ref().expect("scored");
    assert_eq!((g.checker.as_str(), g.grounded), ("llm", false));
    assert!((g.score - 0.25).abs() < 1e-6);
}
