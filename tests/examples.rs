//! The runnable demos of `examples/rust/` (README "Use it from Rust"): each is built, run
//! offline on the shipped models in its own temp data folder, and checked on what it prints —
//! citation markers, the expected source files, the custom reranker's reordering, the crew's
//! and the script's cited results.
//!
//! Skipped, saying so, only when the models folder (`ORKEON_MODELS_DIR`, else
//! `../shared/models`) has no embedding model or `ORT_DYLIB_PATH` names a missing file.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use support::{models_dir, repo};

/// Why the demos cannot run here, if they cannot.
fn missing_runtime() -> Option<String> {
    let model = models_dir().join("bge-small-en-v1.5");
    if !model.is_dir() {
        return Some(format!(
            "no embedding model at {} (set ORKEON_MODELS_DIR)",
            model.display()
        ));
    }
    if let Some(ort) = std::env::var_os("ORT_DYLIB_PATH")
        && !Path::new(&ort).is_file()
    {
        return Some(format!(
            "ORT_DYLIB_PATH={} is not a file",
            Path::new(&ort).display()
        ));
    }
    None
}

/// The profile folder this test was built into (`<target>/<profile>`), from its own path.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("<target>/<profile>/deps/<test>")
        .to_path_buf()
}

/// Builds every example once (a no-op when `cargo test` already built them) into this test's
/// target folder and profile.
fn build_examples() -> &'static Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().expect("<target>");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(repo())
            .args([
                "build",
                "--quiet",
                "-p",
                "orkeon",
                "--examples",
                "--target-dir",
            ])
            .arg(target);
        if profile.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let output = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "cargo build --examples failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    })
}

/// Runs example `name` with `args`; its stdout, after asserting that it succeeded.
fn run_example(name: &str, args: &[&str]) -> Option<String> {
    if let Some(why) = missing_runtime() {
        eprintln!("example {name}: skipped: {why}");
        return None;
    }
    if let Err(error) = build_examples() {
        panic!("{error}");
    }
    let binary = profile_dir().join("examples").join(name);
    let scratch = tempfile::tempdir().expect("temp dir");
    let output = Command::new(&binary)
        .args(args)
        // Run from an unrelated folder: the demos find their files from the repository.
        .current_dir(scratch.path())
        .env("ORKEON_MODELS_DIR", models_dir())
        .env("TMPDIR", scratch.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "example {name} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Some(stdout)
}

/// The lines of `out` after the `== label` header, up to the next header.
fn section<'a>(out: &'a str, label: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|l| *l != format!("== {label}"))
        .skip(1)
        .take_while(|l| !l.starts_with("== ") && !l.is_empty())
        .collect()
}

#[test]
fn basic_ingestion_prints_a_cited_answer_from_the_returns_policy_and_skips_on_reingest() {
    let Some(out) = run_example("basic-ingestion", &[]) else {
        return;
    };
    assert!(out.contains("ingested 6 sources into 'support'"), "{out}");
    let answer = out
        .lines()
        .find_map(|l| l.strip_prefix("answer: "))
        .unwrap_or_else(|| panic!("no answer line:\n{out}"));
    assert!(answer.contains("[1]"), "the answer cites: {answer}");
    assert!(
        answer.contains("30 days"),
        "the answer states the window: {answer}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("[") && l.contains("returns-and-refunds.md")),
        "the returns policy is a cited source:\n{out}"
    );
    assert!(
        out.contains("second ingestion: 0 chunks written, 6 sources unchanged"),
        "{out}"
    );
}

#[test]
fn hybrid_retrieval_prints_each_modes_hits_and_bm25_finds_the_exact_term() {
    let Some(out) = run_example("hybrid-retrieval", &[]) else {
        return;
    };
    for (label, origin) in [
        ("bm25", "(Bm25)"),
        ("vector", "(Vector)"),
        ("hybrid", "(Rrf)"),
        ("balanced", "(RerankBlend)"),
    ] {
        let hits = section(&out, label);
        assert_eq!(hits.len(), 3, "three hits for {label}:\n{out}");
        assert!(
            hits.iter().all(|h| h.contains(origin)),
            "{label} hits carry {origin}:\n{out}"
        );
    }
    // "LDAC" is in products.md only: the lexical leg ranks it first, and so does the
    // balanced profile (hybrid + cross-encoder).
    assert!(section(&out, "bm25")[0].contains("products.md"), "{out}");
    assert!(
        section(&out, "balanced")[0].contains("products.md"),
        "{out}"
    );
    assert!(
        section(&out, "hybrid")
            .iter()
            .any(|h| h.contains("products.md")),
        "{out}"
    );
}

#[test]
fn the_custom_reranker_is_selected_by_config_and_reorders_the_hits() {
    let Some(out) = run_example("custom-reranker", &[]) else {
        return;
    };
    let before = section(&out, "fast profile, no reranker");
    let after = section(&out, "rag.rerank.kind: prefer-source (faq.md first)");
    let sources = |hits: &[&str]| -> Vec<String> {
        hits.iter()
            .filter(|h| h.trim_start().starts_with('['))
            .map(|h| h.split_whitespace().nth(1).unwrap_or("").to_string())
            .collect()
    };
    let (before, after_sources) = (sources(&before), sources(&after));
    assert_eq!(before.len(), 4, "{out}");
    assert_eq!(after_sources.len(), 4, "{out}");
    assert_ne!(
        before[0], "faq.md",
        "retrieval alone ranks another source first:\n{out}"
    );
    assert!(
        after_sources.iter().all(|s| s == "faq.md"),
        "the reranker moved the FAQ's passages first:\n{out}"
    );
    assert!(
        after
            .iter()
            .any(|l| l.contains("\"reranker\":\"prefer-source\"")),
        "the trace names the custom reranker:\n{out}"
    );
    assert!(
        out.contains(&format!("top hit: {} -> faq.md", before[0])),
        "{out}"
    );
}

#[test]
fn the_crew_yaml_demo_runs_the_support_crew_to_a_cited_answer() {
    let Some(out) = run_example("crew-yaml", &[]) else {
        return;
    };
    assert!(
        out.lines()
            .any(|l| l.starts_with("run ") && l.ends_with(" finished")),
        "{out}"
    );
    for task in [
        "task answer (support):",
        "task ticket_note (ticket_writer):",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(task))
            .unwrap_or_else(|| panic!("no line for {task}:\n{out}"));
        assert!(
            line.contains("knowledge/support/returns-and-refunds.md"),
            "{task} cites the returns policy: {line}"
        );
        assert!(!line.contains(" 0 passages"), "{line}");
    }
    assert!(
        out.contains("[1]"),
        "the final output carries markers:\n{out}"
    );
    assert!(out.contains("30 days"), "{out}");
}

#[test]
fn the_scripting_demo_runs_the_example_script_and_an_inline_one() {
    let Some(out) = run_example("scripting", &[]) else {
        return;
    };
    assert!(
        out.contains("ingested 6 sources into 'norrvik-demo': ")
            && out.contains(" chunks written, 0 unchanged"),
        "the script's print output:\n{out}"
    );
    assert!(
        out.contains("ingest-and-check.rhai returned: \"check passed: ["),
        "{out}"
    );
    assert!(out.contains("states the 30-day return window"), "{out}");
    assert!(
        out.contains("inline script returned: \"norrvik-demo: ")
            && out.contains(" chunks; best source for the student discount: knowledge/support/"),
        "{out}"
    );
}
