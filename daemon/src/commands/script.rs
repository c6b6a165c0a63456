//! `orkeon script run FILE [--arg k=v]… [--server URL]`: runs a Rhai script (see
//! [`crate::script`]) in-process — over this process's knowledge and crew engine, with the
//! crews folder's crews loaded (no watcher, no on-load kickoffs) — or against a daemon.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Subcommand;

use crate::client::{Connection, RemoteCrews, RemoteKnowledge};
use crate::config::Config;
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
    let args: BTreeMap<String, String> = args.into_iter().collect();
    let limits = ScriptLimits::of(&config);
    let outcome = match server {
        Some(url) => {
            let connection = || Connection::new(Some(url.clone()), &config);
            let host = ScriptHost {
                knowledge: Arc::new(RemoteKnowledge::new(connection())),
                crews: Arc::new(RemoteCrews::new(connection())),
                base_dir: None,
                runtime: tokio::runtime::Handle::current(),
            };
            crate::script::run_file(&file, args, host, limits).await
        }
        None => {
            let services = Services::start(config).await?;
            services.load_crews();
            let outcome = match ScriptHost::in_process(&services, &file) {
                Ok(host) => crate::script::run_file(&file, args, host, limits).await,
                Err(error) => Err(error),
            };
            services.shutdown().await;
            outcome
        }
    };
    let value = outcome?;
    match value {
        _ if out.json => out.print_json(&value)?,
        serde_json::Value::Null => {}
        serde_json::Value::String(text) => println!("{text}"),
        other => out.print_json(&other)?,
    }
    Ok(true)
}
