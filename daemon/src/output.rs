//! Terminal output: JSON printing, progress bars on terminals, human-readable citations.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
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
    let e = &event.event;
    let kind = e.get("type").and_then(|t| t.as_str()).unwrap_or("event");
    let s = |k: &str| e.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let line = match kind {
        "run_started" => format!("run started: crew {} ({})", s("crew"), s("process")),
        "collection_ingested" => {
            let st = &e["status"];
            format!(
                "collection {} {}: {} ingested, {} unchanged, {} chunks embedded{}",
                st["name"].as_str().unwrap_or(""),
                st["state"].as_str().unwrap_or(""),
                st["report"]["sources_ingested"],
                st["report"]["sources_skipped"],
                st["report"]["chunks_embedded"],
                st["reason"]
                    .as_str()
                    .map(|r| format!(" — {r}"))
                    .unwrap_or_default()
            )
        }
        "task_started" => format!("task {} started (agent {})", s("task"), s("agent")),
        "retrieval" => {
            let cites: Vec<String> = e["citations"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            format!(
                                "[{}] {}",
                                c["marker"],
                                c["source_id"].as_str().unwrap_or("")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!("retrieval for {}: {}", s("task"), cites.join(", "))
        }
        "task_completed" => {
            let o = &e["output"];
            format!(
                "task {} completed by {} ({})",
                o["task"].as_str().unwrap_or(""),
                o["agent"].as_str().unwrap_or(""),
                o["model"].as_str().unwrap_or("")
            )
        }
        "run_finished" => format!("run finished: {}", e["status"].as_str().unwrap_or("")),
        other => format!("{other}: {e}"),
    };
    println!("[{:>3}] {line}", event.seq);
}
