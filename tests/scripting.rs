//! End to end: the example scripts of `examples/scripting/` run with the real binary, in-process
//! and against a daemon (`--server`), and print what they claim; a broken script fails naming
//! its file, line and column. Real ONNX embeddings, real files, real gRPC over loopback.

mod support;

use std::fs;
use std::path::Path;
use std::process::Output;

use support::{Daemon, orkeon, repo, run_failing};

fn script(data: &Path, server: Option<&str>, file: &str, args: &[&str]) -> Output {
    let mut cmd = orkeon(&repo(), data);
    cmd.arg("script");
    if let Some(url) = server {
        cmd.args(["--server", url]);
    }
    cmd.args(["run", file]);
    for arg in args {
        cmd.args(["--arg", arg]);
    }
    let output = cmd.output().expect("orkeon runs");
    assert!(
        output.status.success(),
        "{file} failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_ingest_and_check_example_passes_and_its_second_run_skips_every_source() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = stdout(&script(
        &data,
        None,
        "examples/scripting/ingest-and-check.rhai",
        &[],
    ));
    assert!(first.contains("check passed: ["), "{first}");
    assert!(first.contains("states the 30-day return window"), "{first}");
    let second = stdout(&script(
        &data,
        None,
        "examples/scripting/ingest-and-check.rhai",
        &[],
    ));
    assert!(second.contains(": 0 chunks written"), "{second}");
    assert!(second.contains("check passed"), "{second}");
}

#[test]
fn the_kickoff_example_prints_a_cited_answer() {
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(&script(
        &dir.path().join("data"),
        None,
        "examples/scripting/kickoff-support.rhai",
        &["question=How many days do I have to return headphones for a refund?"],
    ));
    assert!(out.contains("answer: "), "{out}");
    assert!(out.contains("finished with 2 cited tasks"), "{out}");
    assert!(
        out.contains("[1]"),
        "the cited answer carries markers:\n{out}"
    );
}

#[test]
fn scripts_run_their_calls_against_a_daemon_with_server() {
    let dir = tempfile::tempdir().unwrap();
    let crews = repo().join("examples/crews");
    let daemon = Daemon::start(&repo(), &dir.path().join("daemon-data"), &crews, &[]);
    let url = daemon.url();
    let client_data = dir.path().join("client-data");
    let checked = stdout(&script(
        &client_data,
        Some(&url),
        "examples/scripting/ingest-and-check.rhai",
        &["collection=norrvik-remote"],
    ));
    assert!(checked.contains("check passed"), "{checked}");
    let kicked = stdout(&script(
        &client_data,
        Some(&url),
        "examples/scripting/kickoff-support.rhai",
        &[],
    ));
    assert!(kicked.contains("finished with 2 cited tasks"), "{kicked}");
    // The calls ran in the daemon: its store has the collection, the client's has none.
    let remote = support::run_json(orkeon(&repo(), &client_data).args([
        "--json",
        "rag",
        "collections",
        "--server",
        &url,
    ]));
    assert!(remote.to_string().contains("norrvik-remote"), "{remote}");
    let local =
        support::run_json(orkeon(&repo(), &client_data).args(["--json", "rag", "collections"]));
    assert!(!local.to_string().contains("norrvik-remote"), "{local}");
    daemon.terminate();
}

#[test]
fn a_failing_script_names_its_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.rhai");
    fs::write(
        &file,
        "let x = 1;\nlet y = rag.retrieve(\"q\", #{ colection: \"kb\" });\n",
    )
    .unwrap();
    let output = run_failing(
        orkeon(&repo(), &dir.path().join("data"))
            .args(["script", "run"])
            .arg(&file),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!("{}:2:", file.display());
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(stderr.contains("colection"), "{stderr}");
}
