//! `orkeon crew …`: `check FILE` and `run FILE` work offline (validation; an in-process run on
//! the daemon's engine); `list`, `get`, `kickoff`, `watch`, `runs` and `cancel` drive a daemon
//! through the application layer's [`CrewApi`].

use std::path::PathBuf;

use clap::Subcommand;
use orkeon_crews::run::RunStatus;
use orkeon_crews::spec::parse_crew_file_checked;

use crate::config::Config;
use crate::crew_checks::HostChecks;
use crate::output::Output;
use crate::service::{CrewApi, KickoffParams};
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

pub async fn check(file: PathBuf, config: &Config, out: &Output) -> anyhow::Result<bool> {
    match parse_crew_file_checked(&file, &HostChecks::new(config)) {
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
    // Validated before anything is opened or loaded.
    parse_crew_file_checked(&file, &HostChecks::new(&config))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let services = Services::start(config).await?;
    let outcome = services
        .run_crew_file(&file, inputs.into_iter().collect())
        .await;
    services.shutdown().await;
    let crate::services::CrewRun { run, events } = outcome?;
    let ok = matches!(run.state, RunStatus::Finished | RunStatus::Degraded);
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

// ---------------------------------------------------------------------------------------------
// Against a daemon: list, get, kickoff, watch, runs, cancel (over any `CrewApi`).
// ---------------------------------------------------------------------------------------------

pub async fn list(api: &dyn CrewApi, out: &Output) -> anyhow::Result<()> {
    let crews = api.list_crews().await?;
    if out.json {
        return out.print_json(&crews);
    }
    println!(
        "{:<20} {:<8} {:<13} {:<30} error",
        "crew", "status", "process", "collections"
    );
    for c in crews {
        println!(
            "{:<20} {:<8} {:<13} {:<30} {}",
            c.name,
            c.status,
            c.process,
            c.collections.join(","),
            c.error
        );
    }
    Ok(())
}

pub async fn get(api: &dyn CrewApi, name: &str, out: &Output) -> anyhow::Result<()> {
    let crew = api.get_crew(name).await?;
    if out.json {
        return out.print_json(&crew);
    }
    println!(
        "crew        {}\nfile        {}\nstatus      {}",
        crew.name, crew.file, crew.status
    );
    if !crew.error.is_empty() {
        println!("error       {}", crew.error);
    }
    println!(
        "process     {}\nagents      {}\ntasks       {}\ncollections {}",
        crew.process,
        crew.agents.join(", "),
        crew.tasks.join(", "),
        crew.collections.join(", ")
    );
    Ok(())
}

/// Starts a run; with `wait`, streams it to its end. `Ok(false)` when it ended badly.
pub async fn kickoff(
    api: &dyn CrewApi,
    params: KickoffParams,
    wait: bool,
    out: &Output,
) -> anyhow::Result<bool> {
    let kickoff = api.kickoff(params).await?;
    if !wait {
        if out.json {
            out.print_json(&kickoff)?;
        } else {
            println!("{}", kickoff.run_id);
        }
        return Ok(true);
    }
    watch(api, &kickoff.run_id, 0, out).await
}

/// Streams a run's events until it ends. `Ok(false)` when it ended badly.
pub async fn watch(
    api: &dyn CrewApi,
    run_id: &str,
    after_seq: u64,
    out: &Output,
) -> anyhow::Result<bool> {
    use futures::StreamExt;
    let mut events = api.watch(run_id, after_seq).await?;
    let spinner = crate::output::progress_bar(out, "run");
    while let Some(event) = events.next().await {
        let event = event?;
        if out.json {
            println!("{}", serde_json::to_string(&event)?);
        } else if let Some(bar) = &spinner {
            bar.set_message(crate::output::describe_run_event(&event.event));
            bar.suspend(|| crate::output::print_run_event(&event));
        } else {
            crate::output::print_run_event(&event);
        }
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    let run = api.get_run(run_id).await?;
    if !out.json {
        println!("\nrun {} {}", run.run_id, run.state);
        if let Some(reason) = &run.reason {
            println!("reason: {reason}");
        }
        if let Some(output) = &run.final_output {
            println!("\n{output}");
        }
    }
    Ok(matches!(
        run.state,
        RunStatus::Finished | RunStatus::Degraded
    ))
}

pub async fn runs(
    api: &dyn CrewApi,
    limit: usize,
    page_token: Option<String>,
    out: &Output,
) -> anyhow::Result<()> {
    let page = api.list_runs(limit, page_token.as_deref()).await?;
    if out.json {
        return out.print_json(&page);
    }
    println!(
        "{:<38} {:<16} {:<10} {:<22} started",
        "run", "crew", "state", "tasks (grounded)"
    );
    for r in &page.runs {
        let scored: Vec<bool> = r
            .tasks
            .iter()
            .filter_map(|t| t.groundedness.as_ref().map(|g| g.grounded))
            .collect();
        let tasks = format!(
            "{} ({}/{} scored)",
            r.tasks.len(),
            scored.iter().filter(|g| **g).count(),
            scored.len()
        );
        println!(
            "{:<38} {:<16} {:<10} {:<22} {}",
            r.run_id, r.crew, r.state, tasks, r.started_at
        );
    }
    if !page.next_page_token.is_empty() {
        println!("more: --page-token {}", page.next_page_token);
    }
    Ok(())
}

pub async fn cancel(api: &dyn CrewApi, run_id: &str, out: &Output) -> anyhow::Result<()> {
    let run = api.cancel(run_id).await?;
    if out.json {
        return out.print_json(&run);
    }
    println!("run {} {}", run.run_id, run.state);
    Ok(())
}
