//! `orkeon rag …`: ingest, search (retrieval only), query (with generation), collections,
//! manifest — in-process over the embedded store, or against a daemon with `--server`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use orkeon_knowledge::ingest::{IngestProgress, IngestRequest};
use orkeon_knowledge::query::{RagPipeline, RagQuery, StagedRagPipeline, resolve_options};
use orkeon_knowledge::settings::{ChunkingSettings, RagSettings};
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore, SearchMode, SearchRequest};
use orkeon_knowledge::types::{Citation, RagAnswer, RagTrace, ScoreOrigin};
use serde_json::json;

use crate::client::{Connection, status_error};
use crate::config::Config;
use crate::knowledge_host::KnowledgeHost;
use crate::output::{Output, print_citations, progress_bar};
use crate::proto::v1 as pb;

#[derive(Debug, Subcommand)]
pub enum RagCommand {
    /// Ingest sources into a collection (incremental: unchanged sources cost nothing).
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
    /// Purge and rebuild the collection (also needed after changing the embedding model).
    #[arg(long)]
    pub reindex: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Vector,
    Bm25,
    Hybrid,
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

fn collection_of(given: Option<String>, config: &Config) -> anyhow::Result<String> {
    given
        .or_else(|| config.rag.collection.clone())
        .context("name a collection with --collection (or set rag.collection)")
}

/// Fails with a helpful message when the collection does not exist.
fn require_collection(
    store: &EmbeddedStore,
    collection: &str,
    config: &Config,
) -> anyhow::Result<()> {
    let known: Vec<String> = store.collections()?.into_iter().map(|c| c.name).collect();
    if known.iter().any(|c| c == collection) {
        return Ok(());
    }
    anyhow::bail!(
        "collection '{collection}' does not exist in {} (known: {}); create it with `orkeon rag ingest --collection {collection} --source PATH`",
        config.data_dir.display(),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )
}

pub async fn run(command: RagCommand, config: &Config, out: &Output) -> anyhow::Result<bool> {
    match command {
        RagCommand::Eval(args) => super::eval::run(args, config, out).await,
        other => run_other(other, config, out).await.map(|()| true),
    }
}

async fn run_other(command: RagCommand, config: &Config, out: &Output) -> anyhow::Result<()> {
    match command {
        RagCommand::Eval(_) => unreachable!("handled by run"),
        RagCommand::Ingest(args) => ingest(args, config, out).await,
        RagCommand::Search(args) => search(args, config, out).await,
        RagCommand::Query(args) => query(args, config, out).await,
        RagCommand::Collections => {
            let store = EmbeddedStore::open(&config.data_dir, config.rag.store.clone())?;
            let collections = store.collections()?;
            if out.json {
                return out.print_json(&collections);
            }
            if collections.is_empty() {
                println!("no collections yet: `orkeon rag ingest --collection NAME --source PATH`");
                return Ok(());
            }
            println!(
                "{:<24} {:>8} {:>8}  {:<38} vector index",
                "collection", "sources", "chunks", "profile"
            );
            for c in collections {
                let profile = c.profile.map(|p| p.to_string()).unwrap_or_default();
                println!(
                    "{:<24} {:>8} {:>8}  {profile:<38} {} ({})",
                    c.name, c.sources, c.chunks, c.vector_index.serving, c.vector_index.reason
                );
            }
            Ok(())
        }
        RagCommand::Manifest { collection } => {
            let store = EmbeddedStore::open(&config.data_dir, config.rag.store.clone())?;
            require_collection(&store, &collection, config)?;
            let manifest = store.manifest(&collection)?;
            if out.json {
                return out.print_json(&manifest);
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
            for entry in &manifest.corrupt_entries {
                println!("corrupt entry: {entry}");
            }
            Ok(())
        }
    }
}

fn chunking_of(args: &IngestArgs, defaults: &ChunkingSettings) -> Option<ChunkingSettings> {
    let explicit = args.chunking.is_some() || args.max_tokens.is_some() || args.overlap.is_some();
    explicit.then(|| ChunkingSettings {
        strategy: args
            .chunking
            .clone()
            .unwrap_or_else(|| defaults.strategy.clone()),
        max_tokens: args.max_tokens.unwrap_or(defaults.max_tokens),
        overlap: args.overlap.unwrap_or(defaults.overlap),
        ..defaults.clone()
    })
}

async fn ingest(args: IngestArgs, config: &Config, out: &Output) -> anyhow::Result<()> {
    let host = KnowledgeHost::open(config)?;
    let base_dir: PathBuf = std::env::current_dir().context("cannot read the current directory")?;
    let request = IngestRequest {
        collection: args.collection.clone(),
        base_dir,
        chunking: chunking_of(&args, &config.rag.ingestion.default_chunking),
        sources: args.sources,
        reindex: args.reindex,
    };
    let bar = progress_bar(out, "ingesting");
    let progress = bar.clone().map(|bar| {
        move |p: IngestProgress| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(p.source);
        }
    });
    let report = host
        .ingestion
        .ingest(
            &request,
            progress
                .as_ref()
                .map(|f| f as &(dyn Fn(IngestProgress) + Send + Sync)),
        )
        .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    host.store.flush()?;
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
    for w in &report.warnings {
        println!("warning: {w}");
    }
    Ok(())
}

async fn search(args: SearchArgs, config: &Config, out: &Output) -> anyhow::Result<()> {
    let collection = collection_of(args.collection, config)?;
    let host = KnowledgeHost::open(config)?;
    require_collection(&host.store, &collection, config)?;
    let answer = if let Some(ModeArg::Bm25) = args.mode {
        bm25_search(
            &host,
            &collection,
            &args.query,
            args.top_n.unwrap_or(5),
            config,
        )?
    } else {
        let profile = args.profile.unwrap_or_else(|| config.rag.profile.clone());
        let mut settings: RagSettings = config.rag.clone();
        match args.mode {
            Some(ModeArg::Vector) => settings.retrieval.hybrid.enabled = Some(false),
            Some(ModeArg::Hybrid) => settings.retrieval.hybrid.enabled = Some(true),
            _ => {}
        }
        let options = resolve_options(&profile, &settings)?;
        let pipeline = StagedRagPipeline::new(&profile, options, host.pipeline_deps(None))?;
        let query = RagQuery {
            text: args.query,
            collection,
            top_n: args.top_n,
        };
        orkeon_knowledge::query::RetrieveOnly::retrieve(&pipeline, &query).await?
    };
    if out.json {
        return out.print_json(&answer);
    }
    print_citations(&answer);
    Ok(())
}

/// Lexical search straight from the BM25 index (the `--mode bm25` override).
fn bm25_search(
    host: &KnowledgeHost,
    collection: &str,
    text: &str,
    top_n: usize,
    config: &Config,
) -> anyhow::Result<RagAnswer> {
    let started = Instant::now();
    let results = host.store.search(
        collection,
        &SearchRequest {
            mode: SearchMode::Bm25,
            text: Some(text.to_string()),
            vector: None,
            k: top_n,
            rrf_k: config.rag.store.rrf_k,
        },
    )?;
    let mut trace = RagTrace::default();
    trace.push(
        "retrieve",
        started.elapsed().as_secs_f64() * 1000.0,
        json!({"mode": "bm25", "top_k": top_n, "candidates": results.len(), "hybrid": false}),
    );
    trace.push("generate", 0.0, json!({"skipped": "retrieval-only"}));
    let citations = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| Citation {
            marker: i as u32 + 1,
            chunk_id: r.chunk.id,
            source_id: r.chunk.source_id,
            snippet: r.chunk.text,
            score: r.score,
            score_origin: r.origin,
            start: r.chunk.start,
            end: r.chunk.end,
        })
        .collect();
    Ok(RagAnswer {
        text: String::new(),
        citations,
        trace,
    })
}

async fn query(args: QueryArgs, config: &Config, out: &Output) -> anyhow::Result<()> {
    let collection = collection_of(args.collection, config)?;
    let host = KnowledgeHost::open(config)?;
    require_collection(&host.store, &collection, config)?;
    let chat = orkeon_agents::llm::build_chat_model(&config.llm)?;
    let resolver = host.resolver(config, Some(chat));
    let profile = args.profile.unwrap_or_else(|| config.rag.profile.clone());
    let pipeline: Arc<dyn RagPipeline> = resolver.resolve(&profile)?;
    let answer = pipeline
        .query(&RagQuery {
            text: args.query,
            collection,
            top_n: args.top_n,
        })
        .await?;
    if out.json {
        return out.print_json(&answer);
    }
    print_citations(&answer);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Remote (--server)
// ---------------------------------------------------------------------------------------------

fn answer_from_pb(answer: pb::RagAnswer) -> RagAnswer {
    let mut trace: RagTrace = serde_json::from_str(&answer.trace_json).unwrap_or_default();
    if trace.steps.is_empty() {
        for step in answer.trace {
            trace.push(
                step.stage,
                step.duration_ms,
                serde_json::from_str(&step.detail_json).unwrap_or_default(),
            );
        }
    }
    RagAnswer {
        text: answer.text,
        citations: answer
            .citations
            .into_iter()
            .map(|c| Citation {
                marker: c.marker,
                chunk_id: c.chunk_id,
                source_id: c.source_id,
                snippet: c.snippet,
                score: c.score,
                score_origin: serde_json::from_value(json!(c.score_origin))
                    .unwrap_or(ScoreOrigin::Vector),
                start: c.start as usize,
                end: c.end as usize,
            })
            .collect(),
        trace,
    }
}

pub async fn run_remote(
    command: RagCommand,
    conn: &Connection,
    out: &Output,
) -> anyhow::Result<()> {
    if matches!(command, RagCommand::Eval(_)) {
        anyhow::bail!(
            "`rag eval` runs in-process (it ingests the dataset into the local data directory); drop --server"
        );
    }
    let mut client = conn.knowledge().await?;
    match command {
        RagCommand::Eval(_) => unreachable!("refused above"),
        RagCommand::Ingest(args) => {
            let chunking = args.chunking.clone().map(|strategy| pb::Chunking {
                strategy,
                max_tokens: args.max_tokens.unwrap_or(0) as u32,
                overlap: args.overlap.unwrap_or(0) as u32,
            });
            let report = client
                .ingest(pb::IngestRequest {
                    collection: args.collection,
                    sources: args.sources,
                    chunking,
                    reindex: args.reindex,
                })
                .await
                .map_err(status_error)?
                .into_inner();
            let value = json!({
                "collection": report.collection, "sources_total": report.sources_total,
                "sources_ingested": report.sources_ingested, "sources_skipped": report.sources_skipped,
                "sources_removed": report.sources_removed, "chunks_embedded": report.chunks_embedded,
                "chunks_upserted": report.chunks_upserted,
                "quarantined": report.quarantined.iter().map(|q| json!({"source": q.source, "reason": q.reason})).collect::<Vec<_>>(),
                "warnings": report.warnings, "duration_ms": report.duration_ms,
            });
            out.print_json(&value)
        }
        RagCommand::Search(args) => {
            let answer = client
                .retrieve(pb::QueryRequest {
                    collection: args.collection.unwrap_or_default(),
                    query: args.query,
                    profile: args.profile.unwrap_or_default(),
                    top_n: args.top_n.unwrap_or(0) as u32,
                })
                .await
                .map_err(status_error)?
                .into_inner();
            let answer = answer_from_pb(answer);
            if out.json {
                out.print_json(&answer)
            } else {
                print_citations(&answer);
                Ok(())
            }
        }
        RagCommand::Query(args) => {
            let answer = client
                .query(pb::QueryRequest {
                    collection: args.collection.unwrap_or_default(),
                    query: args.query,
                    profile: args.profile.unwrap_or_default(),
                    top_n: args.top_n.unwrap_or(0) as u32,
                })
                .await
                .map_err(status_error)?
                .into_inner();
            let answer = answer_from_pb(answer);
            if out.json {
                out.print_json(&answer)
            } else {
                print_citations(&answer);
                Ok(())
            }
        }
        RagCommand::Collections => {
            let list = client
                .list_collections(pb::ListCollectionsRequest {})
                .await
                .map_err(status_error)?
                .into_inner();
            let value: Vec<_> = list
                .collections
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name, "sources": c.sources, "chunks": c.chunks,
                        "profile": c.embedding_profile,
                        "vector_index": {
                            "serving": c.vector_index, "reason": c.vector_index_reason,
                            "hnsw_recall_at_10": c.hnsw_recall_at_10,
                        },
                    })
                })
                .collect();
            out.print_json(&value)
        }
        RagCommand::Manifest { collection } => {
            let m = client
                .get_manifest(pb::GetManifestRequest { collection })
                .await
                .map_err(status_error)?
                .into_inner();
            let value = json!({
                "collection": m.collection, "profile": m.embedding_profile,
                "sources": m.sources.iter().map(|s| json!({
                    "source_id": s.source_id, "content_hash": s.content_hash, "loader": s.loader,
                    "chunking": s.chunking, "embedding_profile": s.embedding_profile, "chunks": s.chunks,
                    "ingested_at": s.ingested_at, "validation": s.validation,
                })).collect::<Vec<_>>(),
                "corrupt_entries": m.corrupt_entries,
            });
            out.print_json(&value)
        }
    }
}
