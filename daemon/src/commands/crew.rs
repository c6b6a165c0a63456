//! `orkeon crew check FILE` and `orkeon crew run FILE [--input k=v]...` — offline validation
//! and an in-process run (same engine as the daemon, no daemon needed).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use orkeon_crews::spec::parse_crew_file;

use crate::config::Config;
use crate::output::Output;
use crate::services::Services;

#[derive(Debug, Subcommand)]
pub enum CrewLocalCommand {
    /// Validate a crew file offline and print the first error precisely.
    Check { file: PathBuf },
    /// Run a crew in-process (no daemon) and print the result.
    Run {
        file: PathBuf,
        /// Inputs for `{{ inputs.NAME }}` placeholders, as NAME=VALUE.
        #[arg(long = "input", value_parser = parse_input)]
        inputs: Vec<(String, String)>,
    },
}

/// Parses `NAME=VALUE`.
pub fn parse_input(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("'{raw}' is not NAME=VALUE"))
}

pub async fn check(file: PathBuf, out: &Output) -> anyhow::Result<bool> {
    match parse_crew_file(&file) {
        Ok(spec) => {
            if out.json {
                out.print_json(&serde_json::json!({
                    "file": file, "valid": true, "name": spec.name,
                    "agents": spec.agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
                    "tasks": spec.tasks.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
                    "collections": spec.rag.collections.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
                }))?;
            } else {
                println!(
                    "{}: crew '{}' is valid ({} agents, {} tasks, {} collections)",
                    file.display(),
                    spec.name,
                    spec.agents.len(),
                    spec.tasks.len(),
                    spec.rag.collections.len()
                );
            }
            Ok(true)
        }
        Err(error) => {
            if out.json {
                out.print_json(&serde_json::json!({
                    "file": file, "valid": false, "error": error.to_string(),
                    "line": error.line, "column": error.column,
                }))?;
            } else {
                eprintln!("{error}");
            }
            Ok(false)
        }
    }
}

pub async fn run(
    file: PathBuf,
    inputs: Vec<(String, String)>,
    config: Config,
    out: &Output,
) -> anyhow::Result<bool> {
    let spec = parse_crew_file(&file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let services = Services::start(config).await?;
    let inputs: BTreeMap<String, String> = inputs.into_iter().collect();
    let record = services
        .engine
        .start(Arc::new(spec), inputs, None)
        .context("cannot start the run")?;
    let run = services.engine.wait(&record.run_id).await?;
    let events = services.runs.events_after(&run.run_id, 0)?;
    services.shutdown().await;
    let ok = matches!(
        run.state,
        crate::runs::RunState::Finished | crate::runs::RunState::Degraded
    );
    if out.json {
        out.print_json(&serde_json::json!({"run": run, "events": events}))?;
        return Ok(ok);
    }
    for event in &events {
        crate::output::print_run_event(event);
    }
    println!("\nrun {} {}", run.run_id, run.state.as_str());
    if let Some(reason) = &run.reason {
        println!("reason: {reason}");
    }
    if let Some(output) = &run.final_output {
        println!("\n{output}");
    }
    Ok(ok)
}
