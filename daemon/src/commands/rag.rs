//! `orkeon rag …`: ingest, search (retrieval only), query (with generation), collections,
//! manifest, delete and eval. Each command builds one request of the application layer and
//! runs it on a [`KnowledgeApi`]: in-process ([`KnowledgeApp`]) or against a daemon with
//! `--server` ([`RemoteKnowledge`]). Both return the same types, printed by the same code.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use orkeon_knowledge::ingest::IngestProgress;
use orkeon_knowledge::store::SearchMode;

use crate::client::{Connection, RemoteKnowledge};
use crate::config::Config;
use crate::output::{Output, print_citations, progress_bar};
use crate::service::{ChunkingOverrides, IngestParams, KnowledgeApi, KnowledgeApp, QueryParams};

#[derive(Debug, Subcommand)]
pub enum RagCommand {
    /// Ingest sources into a collection (incremental: unchanged sources cost nothing).
    /// Additive: the named sources are upserted and every other source is kept, unless
    /// `--replace`.
    Ingest(IngestArgs),
    /// Retrieve cited passages for a query: the profile's pipeline up to assembly, no LLM call.
    Search(SearchArgs),
    /// Answer a query with cited generation through the profile's pipeline.
    Query(QueryArgs),
    /// List collections.
    Collections,
    /// Show a collection's manifest (sources, hashes, chunk counts, provenance).
    Manifest {
        /// Collection name.
        collection: String,
    },
    /// List sources refused by validation (integrity or prompt injection); never searchable.
    Quarantine {
        /// Only this collection's entries.
        #[arg(long)]
        collection: Option<String>,
    },
    /// Delete a collection with its chunks, manifest and indexes.
    Delete {
        /// Collection name.
        collection: String,
    },
    /// Evaluate retrieval (and generation) quality on a golden YAML or BEIR dataset.
    Eval(super::eval::EvalArgs),
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    #[arg(long)]
    pub collection: String,
    /// Paths, globs (`*`, `**`, `?`) or URLs; relative ones resolve against the current directory.
    #[arg(long = "source", required = true, num_args = 1..)]
    pub sources: Vec<String>,
    /// Chunker: recursive (default), sentence, structural, semantic.
    #[arg(long)]
    pub chunking: Option<String>,
    #[arg(long)]
    pub max_tokens: Option<usize>,
    #[arg(long)]
    pub overlap: Option<usize>,
    /// Purge and rebuild the collection from the named sources (also needed after changing
    /// the embedding model); refused when the collection holds other sources, unless
    /// `--replace`.
    #[arg(long)]
    pub reindex: bool,
    /// Make the named sources the collection's whole set: sources not named are purged.
    /// Without it, ingestion is additive and never removes another source.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Vector,
    Bm25,
    Hybrid,
}

impl From<ModeArg> for SearchMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Vector => SearchMode::Vector,
            ModeArg::Bm25 => SearchMode::Bm25,
            ModeArg::Hybrid => SearchMode::Hybrid,
        }
    }
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    #[arg(long)]
    pub collection: Option<String>,
    #[arg(long)]
    pub query: String,
    /// Chunks returned (default: the profile's top_n).
    #[arg(long)]
    pub top_n: Option<usize>,
    /// Profile: fast, balanced, quality (default: rag.profile).
    #[arg(long)]
    pub profile: Option<String>,
    /// Override the profile's retrieval mode (bm25: lexical search only, straight from the index).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    #[arg(long)]
    pub collection: Option<String>,
    #[arg(long)]
    pub query: String,
    #[arg(long)]
    pub top_n: Option<usize>,
    /// Profile: fast, balanced, quality, corrective, adaptive (default: rag.profile).
    #[arg(long)]
    pub profile: Option<String>,
}

/// Runs a `rag` command in-process, or against the daemon at `server` when given. Returns
/// `Ok(false)` when the command ran but failed its check (the eval gate).
pub async fn run(
    command: RagCommand,
    server: Option<String>,
    config: Config,
    out: &Output,
) -> anyhow::Result<bool> {
    match server {
        Some(url) => {
            let remote = RemoteKnowledge::new(Connection::new(Some(url), &config));
            execute(command, &remote, out).await
        }
        None => {
            let local = KnowledgeApp::open(config)?;
            let result = execute(command, &local, out).await;
            local.flush()?;
            result
        }
    }
}

async fn execute(
    command: RagCommand,
    api: &dyn KnowledgeApi,
    out: &Output,
) -> anyhow::Result<bool> {
    match command {
        RagCommand::Ingest(args) => ingest(args, api, out).await.map(|()| true),
        RagCommand::Search(args) => {
            let answer = api
                .retrieve(QueryParams {
                    collection: args.collection,
                    query: args.query,
                    profile: args.profile,
                    top_n: args.top_n,
                    mode: args.mode.map(SearchMode::from),
                })
                .await?;
            print_answer(&answer, out).map(|()| true)
        }
        RagCommand::Query(args) => {
            let answer = api
                .query(QueryParams {
                    collection: args.collection,
                    query: args.query,
                    profile: args.profile,
                    top_n: args.top_n,
                    mode: None,
                })
                .await?;
            print_answer(&answer, out).map(|()| true)
        }
        RagCommand::Collections => {
            let collections = api.collections().await?;
            if out.json {
                out.print_json(&collections)?;
                return Ok(true);
            }
            if collections.is_empty() {
                println!("no collections yet: `orkeon rag ingest --collection NAME --source PATH`");
                return Ok(true);
            }
            println!(
                "{:<24} {:>8} {:>8}  {:<9} {:<38} vector index",
                "collection", "sources", "chunks", "provider", "profile"
            );
            for c in collections {
                let profile = c.profile.map(|p| p.to_string()).unwrap_or_default();
                println!(
                    "{:<24} {:>8} {:>8}  {:<9} {profile:<38} {} ({})",
                    c.name,
                    c.sources,
                    c.chunks,
                    c.provider,
                    c.vector_index.serving,
                    c.vector_index.reason
                );
            }
            Ok(true)
        }
        RagCommand::Manifest { collection } => {
            let manifest = api.manifest(&collection).await?;
            if out.json {
                out.print_json(&manifest)?;
                return Ok(true);
            }
            if let Some(profile) = &manifest.profile {
                println!("collection {collection}  embeddings {profile}");
            }
            println!(
                "{:<44} {:>6}  {:<12} {:<26} validation",
                "source", "chunks", "hash", "ingested"
            );
            for s in &manifest.sources {
                println!(
                    "{:<44} {:>6}  {:<12} {:<26} {}",
                    s.source_id,
                    s.chunk_ids.len(),
                    &s.content_hash[..s.content_hash.len().min(12)],
                    s.ingested_at,
                    s.validation
                );
            }
            for s in manifest.sources.iter().filter(|s| s.stale.is_some()) {
                println!(
                    "stale: {} keeps its content of {}; its last load failed: {}",
                    s.source_id,
                    s.ingested_at,
                    s.stale.as_deref().unwrap_or_default()
                );
            }
            for entry in &manifest.corrupt_entries {
                println!("corrupt entry: {entry}");
            }
            Ok(true)
        }
        RagCommand::Delete { collection } => {
            api.delete(&collection).await?;
            if out.json {
                out.print_json(&serde_json::json!({"collection": collection, "deleted": true}))?;
            } else {
                println!("collection {collection} deleted");
            }
            Ok(true)
        }
        RagCommand::Quarantine { collection } => {
            let entries = api.quarantine(collection.as_deref()).await?;
            if out.json {
                out.print_json(&entries)?;
                return Ok(true);
            }
            if entries.is_empty() {
                println!("nothing is quarantined");
            }
            for e in &entries {
                println!(
                    "{}/{}  {}  ({})",
                    e.collection, e.source_id, e.reason, e.quarantined_at
                );
            }
            Ok(true)
        }
        RagCommand::Eval(args) => super::eval::run(args, api, out).await,
    }
}

fn print_answer(answer: &orkeon_knowledge::types::RagAnswer, out: &Output) -> anyhow::Result<()> {
    if out.json {
        return out.print_json(answer);
    }
    print_citations(answer);
    Ok(())
}

async fn ingest(args: IngestArgs, api: &dyn KnowledgeApi, out: &Output) -> anyhow::Result<()> {
    // Relative sources are the user's: resolve them against the directory the command runs in
    // (a daemon resolves a remote request against its own allowed roots).
    let base_dir: Option<PathBuf> = std::env::current_dir().ok();
    let params = IngestParams {
        collection: args.collection,
        sources: args.sources,
        chunking: ChunkingOverrides {
            strategy: args.chunking,
            max_tokens: args.max_tokens,
            overlap: args.overlap,
        },
        reindex: args.reindex,
        replace: args.replace,
        base_dir,
    };
    let bar = progress_bar(out, "ingesting");
    let progress = bar.clone().map(|bar| {
        move |p: IngestProgress| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(p.source);
        }
    });
    let report = api
        .ingest(
            params,
            progress
                .as_ref()
                .map(|f| f as &(dyn Fn(IngestProgress) + Send + Sync)),
        )
        .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if out.json {
        return out.print_json(&report);
    }
    println!(
        "{}: {} sources ({} ingested, {} unchanged, {} removed), {} chunks embedded, {} upserted in {} ms",
        report.collection,
        report.sources_total,
        report.sources_ingested,
        report.sources_skipped,
        report.sources_removed,
        report.chunks_embedded,
        report.chunks_upserted,
        report.duration_ms
    );
    for q in &report.quarantined {
        println!("quarantined {}: {}", q.source, q.reason);
    }
    for s in &report.stale {
        println!(
            "stale {} (its last good content is kept): {}",
            s.source, s.error
        );
    }
    for w in &report.warnings {
        println!("warning: {w}");
    }
    Ok(())
}
