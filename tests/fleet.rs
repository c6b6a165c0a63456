//! A fleet on PostgreSQL: three real daemons share one schema, 60 kickoffs are spread over
//! them and one is SIGKILLed halfway. Every run ends `finished` or failed as interrupted (the
//! dead daemon's leases run out and a survivor ends its runs), none is lost, none ran twice, and
//! `WatchRun` on one daemon streams a run executed by another; and once one daemon's crew file
//! differs from the others', kickoffs of that crew are refused on every daemon until it agrees.
//!
//! Runs take a while (the scripted LLM answers each request after 400 ms), so the kill lands
//! while some are in flight. Needs `ORKEON_TEST_PG_URL` (`scripts/test-postgres start`); skips
//! loudly without it, unless `ORKEON_REQUIRE_PG=1`.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

use orkeon_crews::run::store::INTERRUPTED_REASON;
use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::crew_service_client::CrewServiceClient;
use orkeon_testkit::{ScriptReply, ScriptRule, ScriptedLlmServer};
use support::{Daemon, Store};

const KICKOFFS: usize = 60;
const LEASE_SECS: &str = "2";

fn crew(base_url: &str) -> String {
    crew_with_goal(base_url, "Answer briefly")
}

fn crew_with_goal(base_url: &str, goal: &str) -> String {
    format!(
        r#"name: relay
llm:
  provider: openai
  openai: {{ base_url: "{base_url}", model: scripted, api_key_env: "", max_retries: 0, json_mode: false }}
agents:
  clerk:
    role: Clerk
    goal: {goal}
tasks:
  - name: answer
    agent: clerk
    description: "Answer: {{{{ inputs.question }}}}"
    expected_output: One sentence
"#
    )
}

async fn client(daemon: &Daemon) -> CrewServiceClient<tonic::transport::Channel> {
    CrewServiceClient::connect(daemon.url())
        .await
        .expect("connect")
}

async fn get(client: &mut CrewServiceClient<tonic::transport::Channel>, run_id: &str) -> pb::Run {
    client
        .get_run(pb::GetRunRequest {
            run_id: run_id.into(),
        })
        .await
        .expect("get run")
        .into_inner()
}

async fn events(
    client: &mut CrewServiceClient<tonic::transport::Channel>,
    run_id: &str,
) -> Vec<pb::RunEvent> {
    let mut stream = client
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.into(),
            after_seq: 0,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(60), stream.message())
        .await
        .expect("the run streams to its end")
        .expect("event")
    {
        events.push(event);
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_runs_and_a_killed_ones_runs_end_interrupted_never_lost_or_twice() {
    let Some(store) = Store::postgres("fleet") else {
        return;
    };
    let llm = ScriptedLlmServer::start(vec![ScriptRule {
        when_contains: None,
        reply: ScriptReply::Text("Done.".into()).after(Duration::from_millis(400)),
        times: None,
    }])
    .await
    .expect("scripted LLM server");
    let work = tempfile::tempdir().expect("tempdir");
    let mut daemons = Vec::new();
    for name in ["a", "b", "c"] {
        let root = work.path().join(name);
        let crews = root.join("crews");
        fs::create_dir_all(&crews).expect("mkdir");
        fs::write(crews.join("relay.yaml"), crew(&llm.base_url())).expect("write");
        let store_env = store.env();
        let daemon = tokio::task::spawn_blocking(move || {
            let mut env: Vec<(&str, &str)> = store_env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            env.push(("ORKEON_RAG__STORE__POSTGRES__LEASE_SECS", LEASE_SECS));
            Daemon::start(&root, &root.join("data"), &crews, &env)
        })
        .await
        .expect("daemon starts");
        daemons.push(daemon);
    }
    let mut clients = Vec::new();
    for daemon in &daemons {
        clients.push(client(daemon).await);
    }

    // 60 kickoffs round robin; daemon c is killed after the first half.
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    let mut killed = false;
    for i in 0..KICKOFFS {
        if i == KICKOFFS / 2 {
            // Let c's runs get under way, then kill it mid-flight.
            tokio::time::sleep(Duration::from_millis(300)).await;
            daemons[2].child.kill().expect("SIGKILL daemon c");
            daemons[2].child.wait().expect("reap daemon c");
            killed = true;
        }
        let target = if killed { i % 2 } else { i % 3 };
        let run = clients[target]
            .kickoff(pb::KickoffRequest {
                crew: "relay".into(),
                inputs: [("question".to_string(), format!("question {i}"))].into(),
                idempotency_key: format!("fleet-{i}"),
            })
            .await
            .unwrap_or_else(|e| panic!("kickoff {i} on daemon {target}: {e}"))
            .into_inner();
        assert!(run.created, "kickoff {i}");
        assert!(
            owner.insert(run.run_id.clone(), target).is_none(),
            "run id {} returned twice",
            run.run_id
        );
    }
    assert_eq!(owner.len(), KICKOFFS);

    // Every run ends, seen from a survivor, whichever daemon ran it.
    let mut watcher = clients[0].clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut states: BTreeMap<String, pb::Run> = BTreeMap::new();
    for run_id in owner.keys() {
        loop {
            let run = get(&mut watcher, run_id).await;
            if run.state != "running" {
                states.insert(run_id.clone(), run);
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run {run_id} (daemon {}) is still running; log of a:\n{}",
                owner[run_id],
                daemons[0].log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut interrupted = 0;
    for (run_id, run) in &states {
        match run.state.as_str() {
            "finished" => {}
            "failed" if run.reason == INTERRUPTED_REASON => {
                assert_eq!(
                    owner[run_id], 2,
                    "run {run_id} of a live daemon was interrupted"
                );
                interrupted += 1;
            }
            other => panic!("run {run_id} ended {other}: {}", run.reason),
        }
        if owner[run_id] != 2 {
            assert_eq!(run.state, "finished", "run {run_id} on a live daemon");
        }
    }
    assert!(
        interrupted > 0,
        "the kill landed after every run of daemon c had finished; nothing was tested"
    );

    // Each run's events, streamed by daemon a: dense, at most one start and one task start
    // (executed once), and exactly one terminal event, last.
    for run_id in owner.keys() {
        let events = events(&mut watcher, run_id).await;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (1..=events.len() as u64).collect();
        assert_eq!(seqs, expected, "run {run_id}");
        let count = |kind: &str| events.iter().filter(|e| e.r#type == kind).count();
        // A run killed while queued never started: its only event is the terminal one.
        assert!(
            count("run_started") <= 1,
            "run {run_id} started twice: {events:?}"
        );
        assert!(
            count("task_started") <= 1,
            "run {run_id} ran twice: {events:?}"
        );
        assert_eq!(count("run_finished"), 1, "run {run_id}: {events:?}");
        assert_eq!(
            events.last().map(|e| e.r#type.as_str()),
            Some("run_finished")
        );
        if states[run_id].state == "finished" {
            assert_eq!(count("run_started"), 1, "run {run_id}: {events:?}");
            assert_eq!(count("task_completed"), 1, "run {run_id}: {events:?}");
        }
    }

    // WatchRun on a streams, live, a run that b executes.
    let run_id = clients[1]
        .kickoff(pb::KickoffRequest {
            crew: "relay".into(),
            inputs: [("question".to_string(), "live".to_string())].into(),
            idempotency_key: String::new(),
        })
        .await
        .expect("kickoff on b")
        .into_inner()
        .run_id;
    let live = events(&mut watcher, &run_id).await;
    assert_eq!(
        live.last().map(|e| e.r#type.as_str()),
        Some("run_finished"),
        "{live:?}"
    );
    assert_eq!(get(&mut watcher, &run_id).await.state, "finished");

    // Daemon b's crew file changes (a hot reload): the fleet now disagrees on `relay`, and a
    // kickoff on either daemon is refused, naming the crew and both definitions.
    let crews_b = work.path().join("b/crews");
    fs::write(
        crews_b.join("relay.yaml"),
        crew_with_goal(&llm.base_url(), "Answer at length"),
    )
    .expect("rewrite");
    let refused = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let outcome = clients[0]
                .kickoff(pb::KickoffRequest {
                    crew: "relay".into(),
                    inputs: [("question".to_string(), "diverged".to_string())].into(),
                    idempotency_key: String::new(),
                })
                .await;
            match outcome {
                Err(status) => break status,
                Ok(_) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "a kickoff still ran after b's crew file changed; log of b:\n{}",
                        daemons[1].log()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    };
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    let message = refused.message();
    assert!(
        message.contains("crew 'relay' differs between the daemons") && message.contains("sha256"),
        "{message}"
    );
    let on_b = clients[1]
        .kickoff(pb::KickoffRequest {
            crew: "relay".into(),
            inputs: [("question".to_string(), "diverged".to_string())].into(),
            idempotency_key: String::new(),
        })
        .await
        .expect_err("b disagrees with a too");
    assert_eq!(on_b.code(), tonic::Code::FailedPrecondition, "{on_b:?}");
    // The same file again everywhere: kickoffs run again.
    fs::write(crews_b.join("relay.yaml"), crew(&llm.base_url())).expect("restore");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = clients[0]
            .kickoff(pb::KickoffRequest {
                crew: "relay".into(),
                inputs: [("question".to_string(), "agreed".to_string())].into(),
                idempotency_key: String::new(),
            })
            .await;
        if outcome.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "kickoffs stayed refused after b's file was restored: {outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let log_a = daemons[0].log();
    let log_b = daemons[1].log();
    assert!(
        log_a.contains("stopped renewing their lease")
            || log_b.contains("stopped renewing their lease"),
        "no survivor reported recovering the dead daemon's runs;\na:\n{log_a}\nb:\n{log_b}"
    );
}
