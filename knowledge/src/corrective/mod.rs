//! Corrective RAG (CRAG) on the crews [`orkeon_crews::graph::StateGraph`] — the engine behind
//! `process: graph` — behind the same [`crate::query::RagPipeline`] façade as every profile.
//!
//! - [`pipeline`]: [`CorrectiveRagPipeline`], the graph in its two topologies ([`GraphMode`]:
//!   answer, and retrieval-only — stopping before generation, what crews call), its double
//!   bound and the degradation of a tripped breaker;
//! - [`state`]: [`RagGraphState`] and the two routers (conditional edges);
//! - [`nodes`]: the seven nodes (retrieve, evaluate, rewrite_query, refine, web_fallback,
//!   generate, check_groundedness);
//! - [`evaluator`]: [`RetrievalEvaluator`] — LLM-backed and heuristic;
//! - [`rewrite`]: [`QueryRewriter`] — LLM-backed and heuristic (pseudo-relevance feedback);
//! - [`refine`]: the decompose-then-recompose filter on `Ambiguous`;
//! - [`profiles`]: [`register_profiles`] for the `corrective` and `adaptive` profiles.
//!
//! Groundedness uses the query module's checkers ([`crate::query::GroundednessChecker`]).

pub mod evaluator;
pub mod nodes;
pub mod pipeline;
pub mod profiles;
pub mod refine;
pub mod rewrite;
pub mod state;

#[cfg(test)]
mod graph_tests;
#[cfg(test)]
pub(crate) mod test_support;

pub use evaluator::{
    HeuristicRetrievalEvaluator, LlmRetrievalEvaluator, RetrievalEvaluator, RetrievalGrade,
    RetrievalVerdict,
};
pub use pipeline::{
    CorrectiveComponents, CorrectiveRagPipeline, GraphMode, GraphRouter, is_real_llm,
};
pub use profiles::{register_profiles, register_profiles_shared};
pub use rewrite::{HeuristicQueryRewriter, LlmQueryRewriter, QueryRewriter};
pub use state::RagGraphState;
