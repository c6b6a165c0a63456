//! End to end: throwaway collections. A crew's `ephemeral: true` collection is built in memory
//! at each kickoff, cited like any other, and leaves nothing in the data folder; a script's
//! `rag.scratch` and `rag.evaluate(#{ephemeral: true})` (the `compare-chunking` example) likewise;
//! against a daemon (`--server`) `rag.scratch` is refused with what to do instead. Real ONNX
//! embeddings, real embedded store files, real gRPC over loopback.

mod support;

use std::path::Path;

use support::{
    Daemon, crews_with_example_knowledge as crew_dir, orkeon, repo, run_failing, run_json,
};

const CREW: &str = r#"name: trial
llm: { provider: extractive }
profile: fast
rag:
  collections:
    support-kb:
      sources: ["knowledge/support/*.md"]
    onboarding-trial:
      sources: ["knowledge/onboarding/*.md"]
      ephemeral: true
agents:
  helper:
    role: Support agent
    goal: Answer from the knowledge bases
    knowledge: [support-kb, onboarding-trial]
    max_passages: 6
tasks:
  - name: answer
    agent: helper
    description: "How long do customers have to return a product, and what happens in the first week of a new hire?"
    expected_output: A short answer with [n] citations
"#;

/// Every path under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).expect("read_dir") {
            let path = entry.expect("entry").path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

fn collection_names(data: &Path) -> Vec<String> {
    let listed = run_json(orkeon(&repo(), data).args(["--json", "rag", "collections"]));
    listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn an_ephemeral_collection_is_built_for_each_run_cited_and_never_stored() {
    let (work, crews) = crew_dir();
    let file = crews.join("trial.yaml");
    std::fs::write(&file, CREW).unwrap();
    let data = work.path().join("data");
    for attempt in 1..=2 {
        let mut cmd = orkeon(work.path(), &data);
        cmd.args(["--json", "crew", "run"]).arg(&file);
        let result = run_json(&mut cmd);
        assert_eq!(
            result["run"]["state"], "finished",
            "run {attempt}: {result}"
        );
        let events: Vec<&serde_json::Value> = result["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| &e["event"])
            .collect();
        let ingested = events
            .iter()
            .find(|e| {
                e["type"] == "collection_ingested" && e["status"]["name"] == "onboarding-trial"
            })
            .unwrap_or_else(|| panic!("run {attempt}: no ingestion of the ephemeral collection"));
        // Built anew at every kickoff: nothing of the previous run is left to skip.
        assert_eq!(ingested["status"]["state"], "ready", "{ingested}");
        let report = &ingested["status"]["report"];
        assert!(
            report["chunks_upserted"].as_u64().unwrap_or(0) > 0 && report["sources_skipped"] == 0,
            "run {attempt}: {ingested}"
        );
        let cited: Vec<&str> = events
            .iter()
            .filter(|e| e["type"] == "retrieval")
            .flat_map(|e| e["citations"].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["collection"].as_str().map(str::to_string))
            .map(|c| {
                if c == "onboarding-trial" {
                    "eph"
                } else {
                    "kept"
                }
            })
            .collect();
        assert!(
            cited.contains(&"eph") && cited.contains(&"kept"),
            "run {attempt}: both collections feed the block: {cited:?}"
        );
    }
    // The stored collection is there; the throwaway one is not, in any listing or file name.
    assert_eq!(collection_names(&data), ["support-kb"]);
    let files = files_under(&data);
    assert!(!files.is_empty());
    assert!(
        files.iter().all(|f| !f.contains("onboarding")),
        "the ephemeral collection left files: {files:?}"
    );
    assert!(
        files.iter().any(|f| f.contains("support-kb")),
        "the stored collection's files are named after it (the check above means something): {files:?}"
    );
}

#[test]
fn a_scripts_scratch_collection_answers_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("returns.md"),
        "# Returns\n\nHeadphones may be returned within 30 days of delivery.\n",
    )
    .unwrap();
    let script = docs.join("scratch.rhai");
    std::fs::write(
        &script,
        r#"let kb = rag.scratch("scratch-returns");
let report = rag.ingest(#{ collection: kb, sources: ["*.md"] });
let answer = rag.retrieve("How long can headphones be returned?", #{ collection: kb, profile: "fast" });
let listed = rag.collections().filter(|c| c.name == kb);
`${report.chunks_upserted} chunks; ${listed[0].provider}; ${answer.citations[0].snippet}`
"#,
    )
    .unwrap();
    let data = dir.path().join("data");
    let output = orkeon(&repo(), &data)
        .args(["--json", "script", "run"])
        .arg(&script)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("1 chunks; memory; "), "{stdout}");
    assert!(stdout.contains("30 days"), "{stdout}");
    assert!(collection_names(&data).is_empty());
    let files = files_under(&data);
    assert!(
        files.iter().all(|f| !f.contains("scratch-returns")),
        "{files:?}"
    );
}

#[test]
fn the_compare_chunking_example_evaluates_both_strategies_in_throwaway_collections() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = orkeon(&repo(), &data)
        .args(["script", "run", "examples/scripting/compare-chunking.rhai"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("recursive 128/16: "), "{stdout}");
    assert!(stdout.contains("recursive 384/48: "), "{stdout}");
    assert!(
        stdout.contains("best on the golden set with fast: recursive "),
        "{stdout}"
    );
    assert!(collection_names(&data).is_empty());
    let files = files_under(&data);
    assert!(
        files
            .iter()
            .all(|f| !f.contains("golden") && !f.contains("eval-cache")),
        "{files:?}"
    );
}

#[test]
fn against_a_daemon_a_scratch_collection_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let crews = dir.path().join("crews");
    std::fs::create_dir_all(&crews).unwrap();
    let daemon = Daemon::start(&repo(), &dir.path().join("daemon-data"), &crews, &[]);
    let script = dir.path().join("remote.rhai");
    std::fs::write(&script, "let kb = rag.scratch(\"tmp\");\nkb\n").unwrap();
    let output = run_failing(
        orkeon(&repo(), &dir.path().join("client"))
            .args(["script", "--server", &daemon.url(), "run"])
            .arg(&script),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("remote.rhai:1:"), "{stderr}");
    assert!(stderr.contains("without --server"), "{stderr}");
    daemon.terminate();
}
