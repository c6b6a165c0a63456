//! A fleet on PostgreSQL: three real daemons share one schema and its queue; 60 kickoffs are
//! spread over them and one daemon is SIGKILLed halfway. Each run is claimed from the queue by
//! exactly one daemon at a time. Without `retry:`, every run ends `finished` or failed as
//! interrupted (only runs the dead daemon was executing; its leases run out and a survivor ends
//! them), none is lost, none ran twice, and `WatchRun` on one daemon streams a run executed by
//! another; once one daemon's crew file differs from the others', kickoffs of that crew are
//! refused on every daemon until it agrees. With `retry: 1`, the dead daemon's runs go back to
//! the queue and a survivor finishes them: every run ends `finished`.
//!
//! Runs take a while (the scripted LLM answers each request after 400 ms), so the kill lands
//! while some are in flight. Needs `ORKEON_TEST_PG_URL` (`scripts/test-postgres start`); skips
//! loudly without it, unless `ORKEON_REQUIRE_PG=1`.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use orkeon_crews::run::store::INTERRUPTED_REASON;
use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::crew_service_client::CrewServiceClient;
use orkeon_testkit::{ScriptReply, ScriptRule, ScriptedLlmServer};
use support::{Daemon, Store};

const KICKOFFS: usize = 60;
const LEASE_SECS: &str = "2";

fn crew(base_url: &str) -> String {
    crew_with(base_url, "Answer briefly", 0)
}

fn crew_with(base_url: &str, goal: &str, retry: u32) -> String {
    format!(
        r#"name: relay
retry: {retry}
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

type Client = CrewServiceClient<tonic::transport::Channel>;

async fn client(daemon: &Daemon) -> Client {
    CrewServiceClient::connect(daemon.url())
        .await
        .expect("connect")
}

async fn kickoff(client: &mut Client, question: &str, key: &str) -> Result<String, tonic::Status> {
    let response = client
        .kickoff(pb::KickoffRequest {
            crew: "relay".into(),
            inputs: [("question".to_string(), question.to_string())].into(),
            idempotency_key: key.into(),
        })
        .await?
        .into_inner();
    assert!(response.created, "kickoff {question}");
    Ok(response.run_id)
}

async fn get(client: &mut Client, run_id: &str) -> pb::Run {
    client
        .get_run(pb::GetRunRequest {
            run_id: run_id.into(),
        })
        .await
        .expect("get run")
        .into_inner()
}

async fn events(client: &mut Client, run_id: &str) -> Vec<pb::RunEvent> {
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

fn count(events: &[pb::RunEvent], kind: &str) -> usize {
    events.iter().filter(|e| e.r#type == kind).count()
}

/// Three daemons (a, b, c) on one PostgreSQL schema, each serving `crew_yaml` from its own
/// folder, with short leases.
struct Fleet {
    work: tempfile::TempDir,
    daemons: Vec<Daemon>,
    clients: Vec<Client>,
    /// Each daemon's process id: a run's `worker` is `host/pid/random`.
    pids: Vec<u32>,
}

impl Fleet {
    async fn start(store: &Store, crew_yaml: &str) -> Fleet {
        let work = tempfile::tempdir().expect("tempdir");
        let mut daemons = Vec::new();
        for name in ["a", "b", "c"] {
            let root = work.path().join(name);
            let crews = root.join("crews");
            fs::create_dir_all(&crews).expect("mkdir");
            fs::write(crews.join("relay.yaml"), crew_yaml).expect("write");
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
        let pids = daemons.iter().map(|d| d.child.id()).collect();
        Fleet {
            work,
            daemons,
            clients,
            pids,
        }
    }

    fn crews_of(&self, name: &str) -> std::path::PathBuf {
        self.work.path().join(name).join("crews")
    }

    /// The daemon that executes (or last executed) `run`.
    fn executor(&self, run: &pb::Run) -> usize {
        let pid: u32 = run
            .worker
            .split('/')
            .nth(1)
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("run {} has no worker: {run:?}", run.run_id));
        self.pids
            .iter()
            .position(|p| *p == pid)
            .unwrap_or_else(|| panic!("run {}'s worker is no daemon of the fleet", run.run_id))
    }

    /// [`KICKOFFS`] kickoffs round robin, daemon c SIGKILLed after the first half, while some
    /// of the runs it claimed are in flight. Returns the run ids.
    async fn kick_off_and_kill_c(&mut self, tag: &str) -> Vec<String> {
        let mut run_ids = Vec::new();
        let mut killed = false;
        for i in 0..KICKOFFS {
            if i == KICKOFFS / 2 {
                self.wait_until_c_runs_one_of(&run_ids).await;
                self.daemons[2].child.kill().expect("SIGKILL daemon c");
                self.daemons[2].child.wait().expect("reap daemon c");
                killed = true;
            }
            let target = if killed { i % 2 } else { i % 3 };
            let run_id = kickoff(
                &mut self.clients[target],
                &format!("question {i}"),
                &format!("{tag}-{i}"),
            )
            .await
            .unwrap_or_else(|e| panic!("kickoff {i} on daemon {target}: {e}"));
            assert!(!run_ids.contains(&run_id), "run id {run_id} returned twice");
            run_ids.push(run_id);
        }
        run_ids
    }

    /// Waits until daemon c is executing one of `run_ids`, so that the kill lands mid-run (a
    /// fixed pause let the kill land after c's runs had all finished on a slow machine).
    async fn wait_until_c_runs_one_of(&self, run_ids: &[String]) {
        let mut watcher = self.clients[0].clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            for run_id in run_ids {
                let run = get(&mut watcher, run_id).await;
                if run.state == "running" && self.executor(&run) == 2 {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "daemon c executed none of the first {} runs within 30 s; log of c:\n{}",
                run_ids.len(),
                self.daemons[2].log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every run's final record, seen from daemon a, whichever daemon ran it.
    async fn ended(&self, run_ids: &[String]) -> BTreeMap<String, pb::Run> {
        let mut watcher = self.clients[0].clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let mut ended = BTreeMap::new();
        for run_id in run_ids {
            loop {
                let run = get(&mut watcher, run_id).await;
                if run.state != "running" && run.state != "queued" {
                    ended.insert(run_id.clone(), run);
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "run {run_id} is still {} (worker {:?}); log of a:\n{}",
                    run.state,
                    run.worker,
                    self.daemons[0].log()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        ended
    }

    /// A survivor logged that it took over the dead daemon's runs.
    fn assert_recovered(&self) {
        let log_a = self.daemons[0].log();
        let log_b = self.daemons[1].log();
        assert!(
            log_a.contains("stopped renewing their lease")
                || log_b.contains("stopped renewing their lease"),
            "no survivor reported recovering the dead daemon's runs;\na:\n{log_a}\nb:\n{log_b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_the_queue_and_a_killed_ones_runs_end_interrupted_never_lost_or_twice()
{
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
    let mut fleet = Fleet::start(&store, &crew(&llm.base_url())).await;
    let run_ids = fleet.kick_off_and_kill_c("fleet").await;
    let ended = fleet.ended(&run_ids).await;

    let mut interrupted = 0;
    let mut executed = [0usize; 3];
    for (run_id, run) in &ended {
        let by = fleet.executor(run);
        executed[by] += 1;
        assert_eq!(run.attempts, 1, "run {run_id} was claimed twice: {run:?}");
        match run.state.as_str() {
            "finished" => {}
            "failed" if run.reason == INTERRUPTED_REASON => {
                assert_eq!(by, 2, "run {run_id} of a live daemon was interrupted");
                interrupted += 1;
            }
            other => panic!("run {run_id} ended {other}: {}", run.reason),
        }
    }
    assert!(
        interrupted > 0,
        "the kill landed after every run of daemon c had finished; nothing was tested"
    );
    assert!(
        executed[0] > 0 && executed[1] > 0,
        "the survivors did not share the queue: {executed:?}"
    );

    // Each run's events, streamed by daemon a: dense, one start and one task start (executed
    // once), and exactly one terminal event, last.
    let mut watcher = fleet.clients[0].clone();
    for run_id in &run_ids {
        let events = events(&mut watcher, run_id).await;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (1..=events.len() as u64).collect();
        assert_eq!(seqs, expected, "run {run_id}");
        assert_eq!(count(&events, "run_started"), 1, "run {run_id}: {events:?}");
        assert!(
            count(&events, "task_started") <= 1,
            "run {run_id} ran twice: {events:?}"
        );
        assert_eq!(count(&events, "run_retried"), 0, "run {run_id}: {events:?}");
        assert_eq!(
            count(&events, "run_finished"),
            1,
            "run {run_id}: {events:?}"
        );
        assert_eq!(
            events.last().map(|e| e.r#type.as_str()),
            Some("run_finished")
        );
        if ended[run_id].state == "finished" {
            assert_eq!(
                count(&events, "task_completed"),
                1,
                "run {run_id}: {events:?}"
            );
        }
    }

    // WatchRun on a streams, live, a run that b kicked off, whoever executes it.
    let run_id = kickoff(&mut fleet.clients[1], "live", "")
        .await
        .expect("kickoff on b");
    let live = events(&mut watcher, &run_id).await;
    assert_eq!(
        live.last().map(|e| e.r#type.as_str()),
        Some("run_finished"),
        "{live:?}"
    );
    assert_eq!(get(&mut watcher, &run_id).await.state, "finished");

    // Daemon b's crew file changes (a hot reload): the fleet now disagrees on `relay`, and a
    // kickoff on either daemon is refused, naming the crew and both definitions.
    let crews_b = fleet.crews_of("b");
    fs::write(
        crews_b.join("relay.yaml"),
        crew_with(&llm.base_url(), "Answer at length", 0),
    )
    .expect("rewrite");
    let refused = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match kickoff(&mut fleet.clients[0], "diverged", "").await {
                Err(status) => break status,
                Ok(_) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "a kickoff still ran after b's crew file changed; log of b:\n{}",
                        fleet.daemons[1].log()
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
    let on_b = kickoff(&mut fleet.clients[1], "diverged", "")
        .await
        .expect_err("b disagrees with a too");
    assert_eq!(on_b.code(), tonic::Code::FailedPrecondition, "{on_b:?}");
    // The same file again everywhere: kickoffs run again.
    restore(&crews_b, &crew(&llm.base_url()), &mut fleet.clients[0]).await;

    fleet.assert_recovered();
}

/// Writes `yaml` back and waits until kickoffs are accepted again.
async fn restore(crews: &Path, yaml: &str, client: &mut Client) {
    fs::write(crews.join("relay.yaml"), yaml).expect("restore");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = kickoff(client, "agreed", "").await;
        if outcome.is_ok() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "kickoffs stayed refused after the file was restored: {outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_retry_a_killed_daemons_runs_go_back_to_the_queue_and_every_run_finishes() {
    let Some(store) = Store::postgres("fleet_retry") else {
        return;
    };
    let llm = ScriptedLlmServer::start(vec![ScriptRule {
        when_contains: None,
        reply: ScriptReply::Text("Done.".into()).after(Duration::from_millis(400)),
        times: None,
    }])
    .await
    .expect("scripted LLM server");
    let mut fleet = Fleet::start(&store, &crew_with(&llm.base_url(), "Answer briefly", 1)).await;
    let run_ids = fleet.kick_off_and_kill_c("retry").await;
    let ended = fleet.ended(&run_ids).await;

    let mut watcher = fleet.clients[0].clone();
    let mut retried = 0;
    for (run_id, run) in &ended {
        assert_eq!(run.state, "finished", "run {run_id}: {run:?}");
        assert_eq!(run.retry, 1, "run {run_id}");
        assert_eq!(run.tasks.len(), 1, "the record shows one attempt: {run:?}");
        let events = events(&mut watcher, run_id).await;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (1..=events.len() as u64).collect();
        assert_eq!(seqs, expected, "run {run_id}");
        assert_eq!(
            count(&events, "run_started"),
            run.attempts as usize,
            "run {run_id}: one start per attempt: {events:?}"
        );
        assert_eq!(
            count(&events, "run_finished"),
            1,
            "run {run_id}: {events:?}"
        );
        // A killed attempt may have completed its task before the kill, so
        // only the attempt after the last start must complete it once.
        let last_start = events
            .iter()
            .rposition(|e| e.r#type == "run_started")
            .expect("a run_started event");
        assert_eq!(
            count(&events[last_start..], "task_completed"),
            1,
            "run {run_id}: the last attempt completes its task once: {events:?}"
        );
        assert!(
            count(&events, "task_completed") <= run.attempts as usize,
            "run {run_id}: at most one completion per attempt: {events:?}"
        );
        match run.attempts {
            1 => assert_eq!(count(&events, "run_retried"), 0, "run {run_id}: {events:?}"),
            2 => {
                retried += 1;
                assert_eq!(count(&events, "run_retried"), 1, "run {run_id}: {events:?}");
                assert_ne!(
                    fleet.executor(run),
                    2,
                    "run {run_id}'s second attempt ran on the dead daemon"
                );
            }
            n => panic!("run {run_id} was attempted {n} times with retry: 1"),
        }
    }
    assert!(
        retried > 0,
        "the kill landed after every run of daemon c had finished; nothing was tested"
    );
    fleet.assert_recovered();
}
