//! `orkeon script run FILE`: Rhai scripts over the application layer.
//!
//! A script sees two globals, `rag` and `crew`, whose methods are adapters over
//! [`KnowledgeApi`] and [`CrewApi`] — the same operations, types and checks as the CLI and
//! gRPC, in-process or against a daemon (`--server`) — and a constant map `args` (`--arg k=v`).
//! Results come back as maps with the fields of the JSON outputs (`--json`).
//!
//! Why Rhai: it is a maintained, pure-Rust embedded language designed for untrusted scripts —
//! no file, network or process access unless the host registers it, and built-in limits on
//! operations, call depth, string/array/map sizes, with a progress hook for a wall-time bound.
//! Here the host registers nothing but `rag.*`, `crew.*` and `args`, and `import` resolves
//! nothing (Rhai's own `eval` runs text in this same sandbox), so a script reads files only
//! through `rag.*`, which keeps the
//! ingestion roots' confinement (relative paths resolve against the script's folder locally,
//! against the daemon's first ingestion root remotely).
//!
//! The script runs on a blocking thread; each `rag.*`/`crew.*` call waits for the async
//! operation on the caller's runtime, bounded by what is left of the wall time.

mod bindings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rhai::{Dynamic, Engine, EvalAltResult, Map, Position, Scope};

use crate::config::Config;
use crate::service::{CrewApi, KnowledgeApi};
use crate::services::Services;

pub use bindings::{CrewHandle, RagHandle};

/// The bounds every script runs under (`limits.script_*`).
#[derive(Debug, Clone, Copy)]
pub struct ScriptLimits {
    /// Rhai operations (roughly: expression nodes evaluated, loop iterations, calls).
    pub max_operations: u64,
    /// Wall time of the whole script, `rag.*` and `crew.*` calls included.
    pub timeout: Duration,
}

/// What a script runs against.
pub struct ScriptHost {
    pub knowledge: Arc<dyn KnowledgeApi>,
    pub crews: Arc<dyn CrewApi>,
    /// Folder relative sources and datasets resolve against (`None`: a daemon, remote
    /// confinement applies).
    pub base_dir: Option<PathBuf>,
    pub runtime: tokio::runtime::Handle,
}

impl ScriptLimits {
    /// The limits of `config` (`limits.script_max_operations`, `limits.script_timeout_secs`).
    pub fn of(config: &Config) -> Self {
        Self {
            max_operations: config.limits.script_max_operations,
            timeout: Duration::from_secs(config.limits.script_timeout_secs.max(1)),
        }
    }
}

impl ScriptHost {
    /// Over this process's services (knowledge and crew engine), with relative sources
    /// resolving against the folder of `script` (on the caller's Tokio runtime).
    pub fn in_process(services: &Services, script: &Path) -> anyhow::Result<Self> {
        let folder = script.parent().filter(|p| !p.as_os_str().is_empty());
        let folder = folder.unwrap_or(Path::new("."));
        let base_dir = std::fs::canonicalize(folder)
            .with_context(|| format!("script folder {}", folder.display()))?;
        Ok(Self {
            knowledge: services.knowledge_app.clone(),
            crews: services.crews.clone(),
            base_dir: Some(base_dir),
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

/// Reads and [`run`]s the script `file` on a blocking thread (its `rag.*`/`crew.*` calls wait
/// on the caller's runtime): the value of its last statement.
pub async fn run_file(
    file: &Path,
    args: BTreeMap<String, String>,
    host: ScriptHost,
    limits: ScriptLimits,
) -> anyhow::Result<serde_json::Value> {
    let source = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the script {}", file.display()))?;
    let path = file.to_path_buf();
    let value = tokio::task::spawn_blocking(move || run(&path, &source, &args, host, limits))
        .await
        .context("the script's thread failed")??;
    Ok(value)
}

/// Why a script failed: where (file, line, column) and what.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ScriptError {
    pub file: String,
    /// 1-based; 0 when the error has no position (e.g. a limit hit between statements).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl ScriptError {
    fn at(file: &Path, position: Position, message: String) -> Self {
        Self {
            file: file.display().to_string(),
            line: position.line().unwrap_or(0),
            column: position.position().unwrap_or(0),
            message,
        }
    }
}

/// Runs `source` (the text of `file`) with `args` as its `args` map and returns the value of
/// its last statement as JSON (`null` for none). Blocking: call it from a blocking thread
/// (`spawn_blocking`), never from an async task.
pub fn run(
    file: &Path,
    source: &str,
    args: &BTreeMap<String, String>,
    host: ScriptHost,
    limits: ScriptLimits,
) -> Result<serde_json::Value, ScriptError> {
    let deadline = Instant::now() + limits.timeout;
    let engine = engine(limits, deadline);
    let ast = engine
        .compile(source)
        .map_err(|e| ScriptError::at(file, e.position(), e.err_type().to_string()))?;
    let shared = Arc::new(bindings::Shared {
        knowledge: host.knowledge,
        crews: host.crews,
        base_dir: host.base_dir,
        runtime: host.runtime,
        deadline,
        timeout: limits.timeout,
    });
    let args: Map = args
        .iter()
        .map(|(k, v)| (k.into(), Dynamic::from(v.clone())))
        .collect();
    let mut scope = Scope::new();
    scope.push_constant("args", args);
    scope.push("rag", RagHandle::new(shared.clone()));
    scope.push("crew", CrewHandle::new(shared));
    let value = engine
        .eval_ast_with_scope::<Dynamic>(&mut scope, &ast)
        .map_err(|e| describe(file, *e, limits))?;
    rhai::serde::from_dynamic(&value).map_err(|e| {
        ScriptError::at(
            file,
            Position::NONE,
            format!("the script's last value cannot be printed as JSON: {e}"),
        )
    })
}

/// The sandboxed engine: limits set, `import` resolving nothing.
fn engine(limits: ScriptLimits, deadline: Instant) -> Engine {
    let mut engine = Engine::new();
    engine.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    engine.set_max_operations(limits.max_operations);
    engine.set_max_call_levels(64);
    engine.set_max_expr_depths(64, 32);
    engine.set_max_string_size(16 * 1024 * 1024);
    engine.set_max_array_size(100_000);
    engine.set_max_map_size(100_000);
    engine.on_progress(move |_| (Instant::now() > deadline).then(|| Dynamic::from("wall time")));
    bindings::register(&mut engine);
    engine
}

/// An evaluation error as a [`ScriptError`], naming the limit a script ran into.
fn describe(file: &Path, mut error: EvalAltResult, limits: ScriptLimits) -> ScriptError {
    // Taken out so that the message does not repeat it.
    let position = error.take_position();
    let message = match error {
        EvalAltResult::ErrorTooManyOperations(_) => format!(
            "the script ran past {} operations (limits.script_max_operations); raise it or simplify the script",
            limits.max_operations
        ),
        EvalAltResult::ErrorTerminated(..) => format!(
            "the script ran past its wall time of {} s (limits.script_timeout_secs); raise it or do less per run",
            limits.timeout.as_secs()
        ),
        // Our own functions' errors carry their message as the runtime error's value.
        EvalAltResult::ErrorRuntime(value, _) => value.to_string(),
        // An error inside a function the script defined: report where it happened inside.
        EvalAltResult::ErrorInFunctionCall(name, _, inner, _) => {
            let inner = describe(file, *inner, limits);
            if inner.line > 0 {
                return inner;
            }
            format!("in {name}: {}", inner.message)
        }
        other => other.to_string(),
    };
    ScriptError::at(file, position, message)
}

#[cfg(test)]
mod tests;
