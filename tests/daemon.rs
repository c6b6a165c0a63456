//! End to end: the real daemon on a temporary crews folder, driven by the real CLI over
//! loopback gRPC. The LLM is the offline extractive model. The daemon's flow and the in-process
//! `crew run` run once per storage provider (embedded, and PostgreSQL when the test server is
//! configured: `scripts/test-postgres start`).

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use support::{
    Daemon, RETURNS_FAQ as FAQ, SUPPORT_CREW as CREW, Store, eventually, orkeon, orkeon_on,
    run_json,
};

fn kickoff_and_wait(
    cwd: &Path,
    data: &Path,
    url: &str,
    crew: &str,
    question: &str,
) -> Vec<serde_json::Value> {
    let mut cmd = orkeon(cwd, data);
    cmd.args(["--json", "crew", "--server", url, "kickoff", crew, "--wait"])
        .arg("--input")
        .arg(format!("question={question}"));
    let output = cmd.output().expect("kickoff runs");
    assert!(
        output.status.success(),
        "kickoff failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("event line is JSON"))
        .collect()
}

fn task_output(events: &[serde_json::Value]) -> serde_json::Value {
    events
        .iter()
        .find(|e| e["event"]["type"] == "task_completed")
        .map(|e| e["event"]["output"].clone())
        .unwrap_or_else(|| panic!("no task_completed event in {events:?}"))
}

#[test]
fn daemon_runs_crews_with_cited_knowledge_hot_reloads_and_keeps_runs() {
    daemon_flow(&Store::Embedded);
}

#[test]
fn daemon_runs_crews_with_cited_knowledge_hot_reloads_and_keeps_runs_on_postgres() {
    if let Some(store) = Store::postgres("daemon_flow") {
        daemon_flow(&store);
    }
}

fn daemon_flow(store: &Store) {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    let data = work.path().join("data");
    fs::create_dir_all(crews.join("kb")).expect("mkdir");
    fs::write(crews.join("kb/faq.md"), FAQ).expect("write");

    let daemon = Daemon::start_on(work.path(), &data, &crews, &[], store);
    let url = daemon.url();

    // Drop a crew file: the watcher registers it.
    fs::write(crews.join("support.yaml"), CREW).expect("write");
    let listed = eventually(Duration::from_secs(20), || {
        let mut cmd = orkeon(work.path(), &data);
        cmd.args(["--json", "crew", "--server", &url, "list"]);
        let crews = run_json(&mut cmd);
        crews
            .as_array()
            .filter(|a| a.iter().any(|c| c["name"] == "support"))
            .cloned()
    });
    assert!(
        listed.is_some(),
        "crew not registered; log:\n{}",
        daemon.log()
    );

    // Kick it off: cited output.
    let events = kickoff_and_wait(
        work.path(),
        &data,
        &url,
        "support",
        "How many days do I have to return a bike?",
    );
    let output = task_output(&events);
    let text = output["output"].as_str().expect("text");
    assert!(text.contains("30 days"), "{text}");
    assert!(text.contains("[1]"), "{text}");
    assert_eq!(output["model"], "extractive");
    let citation = &output["citations"][0];
    assert_eq!(citation["source_id"], "kb/faq.md");
    assert_eq!(citation["collection"], "product-kb");
    assert!(
        events
            .iter()
            .any(|e| e["event"]["type"] == "collection_ingested")
    );
    assert!(events.iter().any(|e| e["event"]["type"] == "retrieval"));
    let first_run = events[0]["run_id"].as_str().expect("run id").to_string();

    // Edit the knowledge: a later run cites the new text.
    fs::write(crews.join("kb/faq.md"), FAQ.replace("30 days", "45 days")).expect("write");
    let updated = eventually(Duration::from_secs(30), || {
        let events = kickoff_and_wait(
            work.path(),
            &data,
            &url,
            "support",
            "How many days do I have to return a bike?",
        );
        let text = task_output(&events)["output"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        text.contains("45 days").then_some(text)
    });
    assert!(
        updated.is_some(),
        "hot reload not seen; log:\n{}",
        daemon.log()
    );

    // A malformed crew file: precise error, other crews keep working.
    fs::write(
        crews.join("broken.yaml"),
        CREW.replace("name: support", "name: broken")
            .replace("agent: support", "agent: suport"),
    )
    .expect("write");
    let broken = eventually(Duration::from_secs(20), || {
        let mut cmd = orkeon(work.path(), &data);
        cmd.args(["--json", "crew", "--server", &url, "list"]);
        let crews = run_json(&mut cmd);
        crews
            .as_array()?
            .iter()
            .find(|c| c["name"] == "broken" && c["status"] == "invalid")
            .cloned()
    })
    .unwrap_or_else(|| panic!("broken crew not reported; log:\n{}", daemon.log()));
    let error = broken["error"].as_str().expect("error");
    assert!(error.contains("broken.yaml:"), "{error}");
    assert!(
        error.contains("suport") && error.contains("support"),
        "{error}"
    );
    let events = kickoff_and_wait(
        work.path(),
        &data,
        &url,
        "support",
        "What does the frame warranty cover?",
    );
    assert!(
        task_output(&events)["output"]
            .as_str()
            .unwrap_or_default()
            .contains("[1]")
    );

    // Restart: finished runs are still there.
    let status = daemon.terminate();
    assert!(status.success(), "daemon exit: {status}");
    let daemon = Daemon::start_on(work.path(), &data, &crews, &[], store);
    let mut cmd = orkeon(work.path(), &data);
    cmd.args([
        "--json",
        "crew",
        "--server",
        &daemon.url(),
        "runs",
        "--limit",
        "50",
    ]);
    let runs = run_json(&mut cmd);
    let found = runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["run_id"] == first_run.as_str())
        .cloned()
        .expect("first run survives the restart");
    assert_eq!(found["state"], "finished");
    // Each completed task's citation facts and groundedness are on the run itself.
    let task = &found["tasks"][0];
    assert!(task["cited"].as_u64().unwrap_or(0) >= 1, "{found}");
    assert_eq!(task["groundedness"]["checker"], "heuristic", "{found}");
    assert!(task["groundedness"]["score"].is_number(), "{found}");
    // Everything lived on the configured provider: on PostgreSQL, no embedded store was
    // opened in the data folder (no silent fallback).
    if let Store::Postgres(_) = store {
        assert!(
            !data.join("sled").exists(),
            "the PostgreSQL daemon opened an embedded store in {}",
            data.display()
        );
    }
    drop(daemon);
}

#[test]
fn crew_check_prints_file_line_and_column() {
    let work = tempfile::tempdir().expect("tempdir");
    let file = work.path().join("bad.yaml");
    fs::write(
        &file,
        CREW.replace("knowledge: [product-kb]", "knowledge: [product-kbb]"),
    )
    .expect("write");
    let mut cmd = orkeon(work.path(), &work.path().join("data"));
    cmd.args(["crew", "check"]).arg(&file);
    let output = cmd.output().expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.yaml:12:"), "{stderr}");
    assert!(stderr.contains("product-kb"), "{stderr}");
}

#[test]
fn crew_run_works_in_process_without_a_daemon() {
    crew_run_in_process(&Store::Embedded);
}

#[test]
fn crew_run_works_in_process_without_a_daemon_on_postgres() {
    if let Some(store) = Store::postgres("crew_run_in_process") {
        crew_run_in_process(&store);
    }
}

fn crew_run_in_process(store: &Store) {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    fs::create_dir_all(crews.join("kb")).expect("mkdir");
    fs::write(crews.join("kb/faq.md"), FAQ).expect("write");
    fs::write(crews.join("support.yaml"), CREW).expect("write");
    let mut cmd = orkeon_on(work.path(), &work.path().join("data"), store);
    cmd.args(["--json", "crew", "run"])
        .arg(crews.join("support.yaml"))
        .args([
            "--input",
            "question=How long is the warranty on components?",
        ]);
    let result = run_json(&mut cmd);
    assert_eq!(result["run"]["state"], "finished", "{result}");
    let output = result["run"]["final_output"].as_str().expect("output");
    assert!(
        output.contains("two years") && output.contains("[1]"),
        "{output}"
    );
}
