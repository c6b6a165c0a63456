//! The staged query pipeline: transform → retrieve → fuse → rerank → assemble → generate →
//! groundedness.
//!
//! This module owns the query-side contracts ([`RagQuery`], [`RagPipeline`], [`RetrieveOnly`],
//! [`QueryError`]) and the stages, one submodule each:
//!
//! - [`options`]: the `rag:` query keys, profile presets and [`resolve_options`];
//! - [`transform`]: query transformers (`none`, `multi-query`, `rag-fusion`, `hyde`);
//! - [`fuse`]: per-kind combination of per-text rankings (union, RRF, dedup);
//! - [`mmr`]: Maximal Marginal Relevance over the stored chunk vectors;
//! - [`rerank`]: rerankers (`none`, `llm`, `onnx`) and their factory;
//! - [`assemble`]: the token budget and the anti-Lost-in-the-Middle layout;
//! - [`generate`]: the grounded prompt, marker cleanup and citations;
//! - [`groundedness`]: post-generation checkers (heuristic, LLM);
//! - [`pipeline`]: [`StagedRagPipeline`], which runs the stages and traces each of them;
//! - [`profiles`]: [`ProfileResolver`], profile name → memoised pipeline.
//!
//! Support module: [`llm_output`] (tolerant parsing of LLM answers). What a content word is (the
//! word normalisation the heuristic stages share with the extractive model) is
//! `orkeon_crews::text`.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::embed::EmbedError;
use crate::registry::UnknownName;
use crate::store::StoreError;
use crate::types::RagAnswer;
use orkeon_crews::ports::{ChatError, ChatModel};

pub mod aggregate;
pub mod assemble;
pub mod fuse;
pub mod generate;
pub mod groundedness;
pub mod llm_output;
pub mod mmr;
pub mod options;
pub mod pipeline;
#[cfg(test)]
mod pipeline_tests;
pub mod profiles;
pub mod rerank;
pub mod transform;

pub use groundedness::{
    GroundednessChecker, GroundednessVerdict, HeuristicGroundednessChecker, LlmGroundednessChecker,
};
pub use options::{RagOptions, resolve_options};
pub use pipeline::{PipelineDeps, StagedRagPipeline};
pub use profiles::{PipelineBuilder, ProfileResolver};
pub use rerank::{Reranker, RerankerFactory};
pub use transform::{QueryTransformer, TransformKind, TransformOutput, TransformerFactory};

/// Whether `chat` can play the LLM roles (retrieval grader, query rewriter, route classifier,
/// groundedness judge): any model but the offline `extractive` one, which answers by quoting
/// passages, and the placeholder a host uses when no LLM is configured (`unconfigured`).
pub fn is_real_llm(chat: Option<&Arc<dyn ChatModel>>) -> bool {
    chat.is_some_and(|c| {
        let name = c.name();
        name != "extractive" && !name.starts_with("extractive:") && name != "unconfigured"
    })
}

/// A question asked of one collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RagQuery {
    /// The user's question (generation and citations always use it, whatever the transform).
    pub text: String,
    /// Collection to search.
    pub collection: String,
    /// Chunks wanted in the context; overrides the options' `top_k` / `rerank.top_n`.
    #[serde(default)]
    pub top_n: Option<usize>,
}

impl RagQuery {
    pub fn new(text: impl Into<String>, collection: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            collection: collection.into(),
            top_n: None,
        }
    }

    pub fn with_top_n(mut self, top_n: usize) -> Self {
        self.top_n = Some(top_n);
        self
    }

    /// Fails on what no pipeline can answer: an empty question or collection, `top_n` 0.
    pub fn check(&self) -> Result<(), QueryError> {
        if self.text.trim().is_empty() {
            return Err(QueryError::EmptyQuestion);
        }
        if self.collection.trim().is_empty() {
            return Err(QueryError::EmptyCollection);
        }
        if self.top_n == Some(0) {
            return Err(QueryError::InvalidQuery(
                "top_n must be at least 1 (or left unset to use the profile's value)".into(),
            ));
        }
        Ok(())
    }
}

/// The query façade: a question in, a cited and traced answer out.
#[async_trait]
pub trait RagPipeline: Send + Sync {
    /// Profile or pipeline name, recorded in every trace.
    fn name(&self) -> &str;

    /// Runs the whole pipeline, generation included.
    async fn query(&self, q: &RagQuery) -> Result<RagAnswer, QueryError>;

    /// Capability probe: the retrieval half alone, when this pipeline can run it.
    fn retriever(&self) -> Option<&dyn RetrieveOnly> {
        None
    }
}

/// The retrieval half of a pipeline (staged: transform → retrieve → fuse → rerank → assemble;
/// corrective: the graph stopping before generation), with no LLM call for generation. The
/// answer's text is empty and its citations are the selected passages in rank order; the trace
/// carries a `generate` step saying it was skipped.
#[async_trait]
pub trait RetrieveOnly: Send + Sync {
    async fn retrieve(&self, q: &RagQuery) -> Result<RagAnswer, QueryError>;
}

/// Runs the retrieval half of `pipeline`, or fails when the pipeline cannot honour it — never
/// falls back to a full query (that would charge exactly what the caller asked to avoid).
pub async fn retrieve_only(
    pipeline: &dyn RagPipeline,
    q: &RagQuery,
) -> Result<RagAnswer, QueryError> {
    match pipeline.retriever() {
        Some(retriever) => retriever.retrieve(q).await,
        None => Err(QueryError::RetrievalOnlyUnsupported {
            pipeline: pipeline.name().to_string(),
        }),
    }
}

/// Why a query (or building a pipeline) failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// A profile name nobody answers to (see `options::PROFILE_LABEL`).
    #[error(transparent)]
    UnknownProfile(UnknownName),
    #[error("RAG profile '{name}' is not yet available: {reason}")]
    ProfileNotAvailable { name: String, reason: String },
    #[error(transparent)]
    UnknownReranker(UnknownName),
    #[error(transparent)]
    UnknownTransformer(UnknownName),
    #[error("invalid value for rag.{key}: {reason}")]
    InvalidOption { key: String, reason: String },
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    #[error("the question is empty: ask something")]
    EmptyQuestion,
    #[error("the collection name is empty: name one (--collection, or rag.collection)")]
    EmptyCollection,
    #[error(
        "the {stage} stage needs an LLM, but none was given to the pipeline; configure llm.provider (extractive or openai)"
    )]
    NoChatModel { stage: String },
    #[error("the {stage} stage's LLM call failed: {source}")]
    Chat {
        stage: String,
        #[source]
        source: ChatError,
    },
    #[error("searching collection '{collection}' failed: {source}")]
    Store {
        collection: String,
        #[source]
        source: StoreError,
    },
    #[error("embedding failed in the {stage} stage: {source}")]
    Embed {
        stage: String,
        #[source]
        source: EmbedError,
    },
    #[error("reranker '{reranker}' failed: {reason}")]
    Rerank { reranker: String, reason: String },
    #[error("groundedness checker '{checker}' failed: {reason}")]
    Groundedness { checker: String, reason: String },
    #[error(
        "pipeline '{pipeline}' cannot run retrieval alone; use a built-in profile (fast, balanced, quality, corrective, adaptive) for retrieval-only calls"
    )]
    RetrievalOnlyUnsupported { pipeline: String },
    #[error("building {component} failed: {reason}")]
    Setup { component: String, reason: String },
    #[error("internal error in the {stage} stage: {reason}")]
    Internal { stage: String, reason: String },
}
