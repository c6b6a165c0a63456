//! A crew from Rust: runs `examples/crews/support.yaml` in process (no daemon) with the offline
//! extractive model — its knowledge base is ingested at kickoff — and prints each task's
//! citation facts, the sources it cites and the crew's cited answer.
//!
//!     cargo run --example crew-yaml
//!     cargo run --example crew-yaml -- "How long is the warranty on the Pebble S?"

use std::path::Path;

use orkeon::{Config, Host, RunEvent};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "How many days do I have to return headphones for a refund?".into());
    let crews = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/crews");
    let data = tempfile::tempdir()?;
    let config = Config {
        data_dir: data.path().to_path_buf(),
        // The crew's sources must lie under an ingestion root: the crews folder is one.
        crews_dir: crews.clone(),
        ..Config::default()
    };

    let host = Host::start(config).await?;
    let outcome = host
        .run_crew_file(
            crews.join("support.yaml"),
            [("question", question.as_str())],
        )
        .await;
    host.shutdown().await;
    let done = outcome?;

    println!("question: {question}");
    println!("run {} {}", done.run.run_id, done.run.state.as_str());
    for event in &done.events {
        if let RunEvent::TaskCompleted { output } = &event.event {
            let mut sources: Vec<&str> = output
                .citations
                .iter()
                .map(|c| c.source_id.as_str())
                .collect();
            sources.dedup();
            println!(
                "task {} ({}): {} passages cited from {}",
                output.task,
                output.agent,
                output.citations.len(),
                sources.join(", ")
            );
        }
    }
    if let Some(reason) = &done.run.reason {
        println!("reason: {reason}");
    }
    println!(
        "\n{}",
        done.run.final_output.as_deref().unwrap_or("(no output)")
    );
    if !done.succeeded() {
        anyhow::bail!("the run ended {}", done.run.state.as_str());
    }
    Ok(())
}
