//! Terminal output: JSON printing, progress bars on terminals, human-readable citations.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use orkeon_crews::run::RunEvent;
use orkeon_crews::spec::ProcessKind;
use orkeon_knowledge::types::RagAnswer;
use serde::Serialize;

/// How a command prints.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    pub fn print_json<T: Serialize>(&self, value: &T) -> anyhow::Result<()> {
        println!("{}", serde_json::to_string_pretty(value)?);
        Ok(())
    }
}

/// A progress bar on stderr when it is a terminal and the output is not JSON.
pub fn progress_bar(out: &Output, label: &str) -> Option<ProgressBar> {
    if out.json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    Some(bar)
}

/// Prints an answer's text, its citations and a one-line trace summary.
pub fn print_citations(answer: &RagAnswer) {
    if !answer.text.is_empty() {
        println!("{}\n", answer.text);
    }
    for c in &answer.citations {
        let snippet: String = c
            .snippet
            .chars()
            .take(160)
            .collect::<String>()
            .replace('\n', " ");
        println!(
            "[{}] {} ({} {:.4}) {}",
            c.marker,
            c.source_id,
            c.score_origin.as_str(),
            c.score,
            snippet
        );
    }
    let stages: Vec<String> = answer
        .trace
        .steps
        .iter()
        .map(|s| format!("{} {:.1}ms", s.stage, s.duration_ms))
        .collect();
    println!("\ntrace: {}", stages.join(" → "));
}

/// One human-readable line (or a few) per run event.
pub fn print_run_event(event: &crate::runs::StoredEvent) {
    println!("[{:>3}] {}", event.seq, describe_run_event(&event.event));
}

/// A run event in one line.
pub fn describe_run_event(event: &RunEvent) -> String {
    match event {
        RunEvent::RunStarted { crew, process, .. } => {
            format!("run started: crew {crew} ({})", process_name(*process))
        }
        RunEvent::CollectionIngested { status } => {
            let report = &status.report;
            format!(
                "collection {} {}: {} ingested, {} unchanged, {} chunks embedded{}",
                status.name,
                status.state,
                report["sources_ingested"],
                report["sources_skipped"],
                report["chunks_embedded"],
                status
                    .reason
                    .as_deref()
                    .map(|r| format!(" — {r}"))
                    .unwrap_or_default()
            )
        }
        RunEvent::TaskStarted { task, agent } => format!("task {task} started (agent {agent})"),
        RunEvent::Retrieval {
            task, citations, ..
        } => {
            let cites: Vec<String> = citations
                .iter()
                .map(|c| format!("[{}] {}", c.marker, c.source_id))
                .collect();
            format!("retrieval for {task}: {}", cites.join(", "))
        }
        RunEvent::TaskCompleted { output } => {
            let mut facts: Vec<String> = Vec::new();
            if output.uncited {
                facts.push("cites nothing".to_string());
            } else {
                let cited: Vec<String> = output
                    .citations
                    .iter()
                    .map(|c| format!("[{}]", c.marker))
                    .collect();
                facts.push(format!("cites {}", cited.join(" ")));
            }
            if !output.dangling_markers.is_empty() {
                let dangling: Vec<String> = output
                    .dangling_markers
                    .iter()
                    .map(|m| format!("[{m}]"))
                    .collect();
                facts.push(format!("removed dangling {}", dangling.join(" ")));
            }
            if let Some(g) = &output.groundedness {
                facts.push(format!(
                    "groundedness {:.2} ({}, {})",
                    g.score,
                    if g.grounded {
                        "grounded"
                    } else {
                        "not grounded"
                    },
                    g.checker
                ));
            }
            if let Some(reason) = &output.degraded {
                facts.push(format!("degraded: {reason}"));
            }
            format!(
                "task {} completed by {} ({}): {}",
                output.task,
                output.agent,
                output.model,
                facts.join("; ")
            )
        }
        RunEvent::ManagerDecision {
            task,
            agent,
            reason,
        } => format!("manager: {task} → {agent} ({reason})"),
        RunEvent::GraphTransition { from, to } => format!("graph: {from} → {to}"),
        RunEvent::BudgetExhausted { reason } => format!("budget exhausted: {reason}"),
        RunEvent::RunRetried { attempt, reason } => {
            format!("run retried: attempt {attempt} queued ({reason})")
        }
        RunEvent::RunFinished { status, .. } => format!("run finished: {status}"),
    }
}

fn process_name(process: ProcessKind) -> String {
    serde_json::to_value(process)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{process:?}").to_lowercase())
}
