//! `orkeon script run FILE [--arg k=v]… [--server URL]`: runs a Rhai script (see
//! [`crate::script`]) in-process — over this process's knowledge and crew engine, with the
//! crews folder's crews loaded (no watcher, no on-load kickoffs) — or against a daemon.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use orkeon_crews::spec::parse_crew_file_checked;

use crate::client::{Connection, RemoteCrews, RemoteKnowledge};
use crate::config::Config;
use crate::crew_checks::HostChecks;
use crate::output::Output;
use crate::script::{ScriptHost, ScriptLimits};
use crate::services::Services;

#[derive(Debug, Subcommand)]
pub enum ScriptCommand {
    /// Run a Rhai script: globals `rag` (ingest, query, retrieve, eval, collections), `crew`
    /// (kickoff) and `args` (the --arg values). Prints the value of its last statement.
    Run {
        file: PathBuf,
        /// A value for the script's `args` map, as NAME=VALUE (strings).
        #[arg(long = "arg", value_parser = super::crew::parse_input)]
        args: Vec<(String, String)>,
    },
}

pub async fn run(
    command: ScriptCommand,
    server: Option<String>,
    config: Config,
    out: &Output,
) -> anyhow::Result<bool> {
    let ScriptCommand::Run { file, args } = command;
    let source = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read the script {}", file.display()))?;
    let args: BTreeMap<String, String> = args.into_iter().collect();
    let limits = ScriptLimits {
        max_operations: config.limits.script_max_operations,
        timeout: Duration::from_secs(config.limits.script_timeout_secs.max(1)),
    };
    let runtime = tokio::runtime::Handle::current();
    let (host, services) = match server {
        Some(url) => {
            let connection = || Connection::new(Some(url.clone()), &config);
            let host = ScriptHost {
                knowledge: Arc::new(RemoteKnowledge::new(connection())),
                crews: Arc::new(RemoteCrews::new(connection())),
                base_dir: None,
                runtime,
            };
            (host, None)
        }
        None => {
            let services = Services::start(config).await?;
            load_crews(&services);
            let base_dir = script_folder(&file)?;
            let host = ScriptHost {
                knowledge: services.knowledge_app.clone(),
                crews: services.crews.clone(),
                base_dir: Some(base_dir),
                runtime,
            };
            (host, Some(services))
        }
    };
    let path = file.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        crate::script::run(&path, &source, &args, host, limits)
    })
    .await
    .context("the script's thread failed")?;
    if let Some(services) = services {
        services.shutdown().await;
    }
    let value = outcome?;
    match value {
        _ if out.json => out.print_json(&value)?,
        serde_json::Value::Null => {}
        serde_json::Value::String(text) => println!("{text}"),
        other => out.print_json(&other)?,
    }
    Ok(true)
}

/// The folder relative paths in the script resolve against.
fn script_folder(file: &Path) -> anyhow::Result<PathBuf> {
    let folder = file.parent().filter(|p| !p.as_os_str().is_empty());
    let folder = folder.unwrap_or(Path::new("."));
    std::fs::canonicalize(folder).with_context(|| format!("script folder {}", folder.display()))
}

/// Loads every crew file of the crews folder into the registry (invalid ones are listed by
/// `crew.kickoff`'s error when named).
fn load_crews(services: &Services) {
    let dir = &services.config.crews_dir;
    let Ok(files) = crate::watch::crew_files(dir) else {
        tracing::warn!(dir = %dir.display(), "no crews folder: crew.kickoff will find no crew");
        return;
    };
    let checks = HostChecks::new(&services.config);
    for file in files {
        services
            .registry
            .apply(&file, parse_crew_file_checked(&file, &checks));
    }
}
