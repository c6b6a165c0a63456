//! `orkeon rag eval`: one ingestion of a golden YAML or BEIR dataset, every requested profile on
//! the same collection, a Markdown comparison table and JSON, and an optional quality gate.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use orkeon_agents::llm::extractive::ExtractiveModel;
use orkeon_agents::llm::{ExtractiveSettings, build_chat_model};
use orkeon_crews::ports::ChatModel;
use orkeon_knowledge::eval::harness::{EvalHarness, EvalOptions, EvalProgress};
use orkeon_knowledge::eval::{check_gate, load_dataset, load_floors, render_markdown};

use crate::config::Config;
use crate::knowledge_host::KnowledgeHost;
use crate::output::{Output, progress_bar};

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A golden YAML file, or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
    #[arg(long)]
    pub dataset: PathBuf,
    /// BEIR qrels split.
    #[arg(long, default_value = "test")]
    pub split: String,
    /// Profiles to compare, comma-separated.
    #[arg(long, default_value = "fast,balanced,quality")]
    pub compare: String,
    /// Zero network: generation by the offline extractive model, the heuristic judge.
    #[arg(long)]
    pub offline: bool,
    /// Skip generation (retrieval metrics only).
    #[arg(long)]
    pub no_generate: bool,
    /// Write the Markdown report here too.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fail (exit 1) when the floors in this file are not met.
    #[arg(long)]
    pub gate: Option<PathBuf>,
    /// Cases run at once per profile.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Documents ranked per case for the retrieval metrics (≥ 10; recall@100 needs 100). The
    /// profiles' candidate counts rise to at least this, so rerankers score this many passages.
    #[arg(long, default_value_t = 100)]
    pub retrieve_k: usize,
}

/// Runs the evaluation; `Ok(false)` when the gate failed.
pub async fn run(args: EvalArgs, config: &Config, out: &Output) -> anyhow::Result<bool> {
    let dataset = load_dataset(&args.dataset, &args.split)?;
    let host = KnowledgeHost::open(config)?;
    let chat: Option<Arc<dyn ChatModel>> = if args.offline {
        Some(Arc::new(ExtractiveModel::new(
            &ExtractiveSettings::default(),
        )))
    } else {
        build_chat_model(&config.llm).ok()
    };
    let resolver = host.resolver(config, chat.clone());
    // Retrieval metrics rank retrieve_k passages: lift the context budget so assembly does not
    // cut the ranking (generation keeps the configured budget).
    let mut deep = config.clone();
    deep.rag.context.max_tokens = Some(1_000_000);
    let retrieval_resolver = host.resolver(&deep, chat.clone());
    let judge = if args.offline { None } else { chat };
    let harness = EvalHarness::new(host.ingestion.clone(), resolver, judge)
        .with_retrieval_resolver(retrieval_resolver);
    let options = EvalOptions {
        profiles: args
            .compare
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect(),
        offline: args.offline,
        generate: !args.no_generate,
        concurrency: args.concurrency.max(1),
        retrieve_k: args.retrieve_k,
        cache_dir: Some(config.data_dir.join("eval-cache")),
        ..EvalOptions::default()
    };
    let bar = progress_bar(out, "eval");
    let progress = bar.clone().map(|bar| {
        move |p: EvalProgress| match p {
            EvalProgress::Ingest {
                done,
                total,
                source,
            } => {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                bar.set_message(format!("ingest {source}"));
            }
            EvalProgress::Case {
                profile,
                done,
                total,
                case_id,
            } => {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                bar.set_message(format!("{profile} {case_id}"));
            }
            EvalProgress::ProfileDone { .. } => {}
        }
    });
    let report = harness
        .run(
            &dataset,
            &options,
            progress
                .as_ref()
                .map(|f| f as &(dyn Fn(EvalProgress) + Send + Sync)),
        )
        .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    host.store.flush()?;
    let markdown = render_markdown(&report);
    if let Some(path) = &args.out {
        std::fs::write(path, &markdown)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if out.json {
        out.print_json(&report)?;
    } else {
        println!("{markdown}");
    }
    if let Some(gate) = &args.gate {
        let floors = load_floors(gate)?;
        match check_gate(&report, &floors) {
            Ok(()) => eprintln!(
                "quality gate passed: {} recall@5 and MRR@10 at or above the floors set on {} ({})",
                floors.profile,
                floors.set_on,
                gate.display()
            ),
            Err(failures) => {
                for failure in &failures {
                    eprintln!("quality gate failed: {failure}");
                }
                return Ok(false);
            }
        }
    }
    Ok(true)
}
