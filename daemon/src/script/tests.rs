//! Scripts on a real in-process host (a fresh data folder, no model loaded unless a script
//! calls `rag.*` on documents): results, errors with positions, and the limits.

use std::path::Path;
use std::time::Duration;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{ScriptError, ScriptHost, ScriptLimits, run};
use crate::config::Config;
use crate::services::Services;

const LIMITS: ScriptLimits = ScriptLimits {
    max_operations: 100_000,
    timeout: Duration::from_secs(60),
};

/// Runs `source` as `test.rhai` against a fresh in-process host.
async fn script(
    source: &str,
    args: BTreeMap<String, String>,
    limits: ScriptLimits,
) -> Result<Value, ScriptError> {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().join("data"),
        crews_dir: dir.path().join("crews"),
        ..Config::default()
    };
    let services = Services::start(config).await.expect("services");
    let host = ScriptHost {
        knowledge: services.knowledge_app.clone(),
        crews: services.crews.clone(),
        base_dir: Some(dir.path().to_path_buf()),
        runtime: tokio::runtime::Handle::current(),
    };
    let source = source.to_string();
    let outcome = tokio::task::spawn_blocking(move || {
        run(Path::new("test.rhai"), &source, &args, host, limits)
    })
    .await
    .unwrap();
    services.shutdown().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_returns_its_last_value_and_reads_its_args() {
    let args = BTreeMap::from([("who".to_string(), "world".to_string())]);
    let value = script(
        r#"let greeting = "hello " + args.who; greeting"#,
        args,
        LIMITS,
    )
    .await
    .expect("runs");
    assert_eq!(value, json!("hello world"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_store_lists_no_collections_as_an_array() {
    let value = script("rag.collections()", BTreeMap::new(), LIMITS)
        .await
        .expect("runs");
    assert_eq!(value, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syntax_error_names_the_file_line_and_column() {
    let error = script("let a = 1;\nlet b = ;\n", BTreeMap::new(), LIMITS)
        .await
        .expect_err("does not parse");
    assert_eq!(
        (error.file.as_str(), error.line),
        ("test.rhai", 2),
        "{error}"
    );
    assert!(error.column > 0, "{error}");
    assert!(error.to_string().starts_with("test.rhai:2:"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_options_map_names_the_call_and_the_field() {
    let error = script(
        "let x = 1;\nrag.query(\"refunds\", #{ collection: \"kb\", topn: 3 })",
        BTreeMap::new(),
        LIMITS,
    )
    .await
    .expect_err("unknown option");
    assert_eq!(error.line, 2, "{error}");
    assert!(
        error.message.contains("rag.query") && error.message.contains("topn"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_error_reaches_the_script_with_its_position() {
    let error = script(
        "\n\nrag.retrieve(\"refunds\", #{ collection: \"no-such-collection\" })",
        BTreeMap::new(),
        LIMITS,
    )
    .await
    .expect_err("unknown collection");
    assert_eq!(error.line, 3, "{error}");
    assert!(
        error.message.starts_with("rag.retrieve: ") && error.message.contains("no-such-collection"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_stops_at_the_operation_limit_naming_it() {
    let error = script("let n = 0;\nloop { n += 1; }", BTreeMap::new(), LIMITS)
        .await
        .expect_err("stopped");
    assert!(
        error.message.contains("limits.script_max_operations"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_script_stops_at_the_wall_time_naming_it() {
    let limits = ScriptLimits {
        max_operations: 0, // unlimited: only the clock stops it
        timeout: Duration::from_secs(1),
    };
    let error = script("loop { }", BTreeMap::new(), limits)
        .await
        .expect_err("stopped");
    assert!(
        error.message.contains("limits.script_timeout_secs"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_cannot_import_modules_or_reach_files() {
    let error = script("import \"/etc/passwd\" as p;", BTreeMap::new(), LIMITS)
        .await
        .expect_err("no modules");
    assert_eq!(error.line, 1, "{error}");
    let error = script("open_file(\"/etc/passwd\")", BTreeMap::new(), LIMITS)
        .await
        .expect_err("no such function");
    assert!(error.message.contains("open_file"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kicking_off_an_unknown_crew_fails_with_the_services_message() {
    let error = script("crew.kickoff(\"nobody\", #{})", BTreeMap::new(), LIMITS)
        .await
        .expect_err("no such crew");
    assert!(
        error.message.starts_with("crew.kickoff: ") && error.message.contains("nobody"),
        "{error}"
    );
}
