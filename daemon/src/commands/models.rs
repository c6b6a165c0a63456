//! `orkeon models list|fetch`: which local models (and the ONNX Runtime library) are present,
//! and fetching all of them ahead of time (sha256-pinned, with a progress bar on a terminal).

use clap::Subcommand;
use orkeon_knowledge::embed::fetch::FetchProgress;
use orkeon_knowledge::embed::{models, runtime};

use crate::config::Config;
use crate::output::{Output, progress_bar};

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Show the model catalogue and where each model was found.
    List,
    /// Fetch the ONNX Runtime library and every catalogue model into the cache.
    Fetch,
}

pub async fn run(command: ModelsCommand, config: &Config, out: &Output) -> anyhow::Result<()> {
    let settings = config.embeddings.clone();
    match command {
        ModelsCommand::List => {
            let statuses =
                tokio::task::spawn_blocking(move || models::model_status(&settings)).await?;
            if out.json {
                let value: Vec<_> = statuses
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "name": s.name, "kind": s.kind, "path": s.path, "found_in": s.found_in,
                            "verified": s.verified, "problem": s.problem,
                        })
                    })
                    .collect();
                return out.print_json(&value);
            }
            println!(
                "{:<26} {:<14} {:<22} {:<9} path",
                "model", "kind", "found in", "verified"
            );
            for s in statuses {
                println!(
                    "{:<26} {:<14} {:<22} {:<9} {}",
                    s.name,
                    s.kind,
                    s.found_in,
                    if s.verified { "yes" } else { "no" },
                    s.path
                        .map(|p| p.display().to_string())
                        .or(s.problem)
                        .unwrap_or_default()
                );
            }
            Ok(())
        }
        ModelsCommand::Fetch => {
            let bar = progress_bar(out, "fetching");
            let bar_for_task = bar.clone();
            let (runtime_path, paths) = tokio::task::spawn_blocking(move || {
                let progress = |p: FetchProgress| {
                    if let Some(bar) = &bar_for_task {
                        bar.set_length(p.bytes_total.unwrap_or(0));
                        bar.set_position(p.bytes_done);
                        bar.set_message(p.file.clone());
                    }
                };
                let runtime_path = runtime::ensure_runtime(&settings)?;
                let paths = models::fetch_all(&settings, Some(&progress))?;
                Ok::<_, anyhow::Error>((runtime_path, paths))
            })
            .await??;
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if out.json {
                return out.print_json(
                    &serde_json::json!({"onnxruntime": runtime_path, "models": paths}),
                );
            }
            println!("onnxruntime  {}", runtime_path.display());
            for path in paths {
                println!("model        {}", path.display());
            }
            Ok(())
        }
    }
}
