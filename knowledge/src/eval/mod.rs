//! The offline evaluation harness: retrieval quality (and, optionally, answer quality) as a
//! measured number.
//!
//! - [`dataset`]: golden YAML and BEIR datasets, loaded into one shape ([`load_dataset`]);
//! - [`beir_files`]: BEIR documents written as `.txt` files for the ingestion pipeline;
//! - [`source_refs`]: how golden refs match ingested source ids (suffix, part-aware);
//! - [`ranking`]: retrieved chunks → a de-duplicated ranking of document keys;
//! - [`metrics`]: recall@k, MRR@k, graded nDCG@k (`trec_eval` definitions);
//! - [`judge`]: the generation judge (LLM verdict, or the deterministic heuristic);
//! - [`harness`]: [`EvalHarness`], one ingestion then every profile, case by case;
//! - [`report`]: per-case/per-profile results and their Markdown rendering;
//! - [`gate`]: the CI floors and their check.

pub mod beir_files;
pub mod dataset;
pub mod gate;
pub mod harness;
pub mod judge;
pub mod metrics;
pub mod ranking;
pub mod report;
pub mod source_refs;

use std::path::PathBuf;

pub use dataset::{BeirDocument, CorpusSource, EvalCase, EvalDataset, load_dataset};
pub use gate::{Floors, Metric, ProfileFloors, check_gate, load_floors};
pub use harness::{EvalHarness, EvalOptions, EvalProgress};
pub use judge::{GenerationJudge, JudgeVerdict};
pub use metrics::{mrr_at_k, ndcg_at_k, recall_at_k};
pub use report::{
    CaseGeneration, CaseResult, EvalReport, GenerationScores, ProfileReport, RetrievalPath,
    RetrievalScores, render_markdown,
};

/// Why an evaluation could not be loaded or run. Every message names the file (and line, case
/// or profile) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an evaluation dataset: {reason}")]
    UnknownFormat { path: PathBuf, reason: String },
    #[error("{path}: {message}")]
    InvalidDataset { path: PathBuf, message: String },
    #[error("{path}:{line}: {message}")]
    InvalidLine {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error(
        "{path}: no qrels for split `{split}` (qrels/{split}.tsv); available splits: {}; pass one with --split",
        if available.is_empty() { "none".to_string() } else { available.join(", ") }
    )]
    UnknownSplit {
        path: PathBuf,
        split: String,
        available: Vec<String>,
    },
    #[error("invalid evaluation options: {0}")]
    InvalidOptions(String),
    #[error("ingesting the corpus of dataset '{dataset}' failed: {source}")]
    Ingest {
        dataset: String,
        #[source]
        source: crate::ingest::IngestError,
    },
    #[error("profile '{profile}' cannot be used: {source}")]
    Profile {
        profile: String,
        #[source]
        source: Box<crate::query::QueryError>,
    },
    #[error("profile '{profile}' failed on case '{case}': {source}")]
    Query {
        profile: String,
        case: String,
        #[source]
        source: Box<crate::query::QueryError>,
    },
    #[error("evaluation task failed: {0}")]
    Task(String),
    #[error("floors file {path}: {message}")]
    InvalidFloors { path: PathBuf, message: String },
}
