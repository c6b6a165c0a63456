//! `orkeon rag eval`: one ingestion of a golden YAML or BEIR dataset, every requested profile on
//! the same collection, a Markdown comparison table and JSON, and an optional quality gate —
//! in-process, or on a daemon with `--server` (paths are then the daemon's).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use orkeon_knowledge::eval::harness::EvalProgress;

use crate::output::{Output, progress_bar};
use crate::service::{EvalParams, KnowledgeApi};

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
    /// Depth of the deep retrieval (reranking off) that gives recall@k above 10 (≥ 10;
    /// recall@100 needs 100). nDCG@10, MRR@10 and recall@≤10 come from each profile as
    /// configured, asked for 10 passages: its own candidate counts are not changed.
    #[arg(long, default_value_t = 100)]
    pub retrieve_k: usize,
    /// Evaluate this existing collection as it is (the corpus is not ingested; the golden
    /// dataset's refs are matched against the collection's source ids).
    #[arg(long)]
    pub collection: Option<String>,
}

/// Runs the evaluation; `Ok(false)` when the gate failed.
pub async fn run(args: EvalArgs, api: &dyn KnowledgeApi, out: &Output) -> anyhow::Result<bool> {
    let params = EvalParams {
        dataset: args.dataset,
        split: args.split,
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
        gate: args.gate.clone(),
        collection: args.collection.clone(),
        // In-process: paths as given (a `--server` call drops this: the daemon confines them).
        base_dir: Some(PathBuf::from(".")),
        chunking: Default::default(),
        ephemeral: false,
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
    let outcome = api
        .evaluate(
            params,
            progress
                .as_ref()
                .map(|f| f as &(dyn Fn(EvalProgress) + Send + Sync)),
        )
        .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(path) = &args.out {
        std::fs::write(path, &outcome.markdown)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if out.json {
        out.print_json(&outcome.report)?;
    } else {
        println!("{}", outcome.markdown);
    }
    let Some(gate) = &outcome.gate else {
        return Ok(true);
    };
    for message in &gate.messages {
        match &args.gate {
            Some(file) if gate.passed => eprintln!("{message} ({})", file.display()),
            _ => eprintln!("{message}"),
        }
    }
    Ok(gate.passed)
}
