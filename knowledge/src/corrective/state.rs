//! [`RagGraphState`]: what the corrective graph's nodes read and update, and the two routers
//! (the graph's conditional edges) that decide from it alone.
//!
//! Iterations: `rewrites` counts the `rewrite_query` runs, i.e. the budget consumed; every
//! trace step carries it as `iteration` (0 = the original question's pass).

use crate::query::assemble::AssembledContext;
use crate::query::groundedness::GroundednessVerdict;
use crate::query::{QueryError, RagQuery};
use crate::types::{Citation, RagTrace, ScoredChunk};

use super::evaluator::{RetrievalGrade, RetrievalVerdict};

/// Node names (also the `corrective:<node>` trace stages).
pub mod node {
    pub const RETRIEVE: &str = "retrieve";
    pub const EVALUATE: &str = "evaluate";
    pub const REWRITE_QUERY: &str = "rewrite_query";
    pub const REFINE: &str = "refine";
    pub const WEB_FALLBACK: &str = "web_fallback";
    pub const GENERATE: &str = "generate";
    pub const CHECK_GROUNDEDNESS: &str = "check_groundedness";
}

/// The answer `generate` produced.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedAnswer {
    pub text: String,
    pub citations: Vec<Citation>,
    /// The context the answer was generated from (empty for the no-context answer).
    pub context: AssembledContext,
    /// True for the deterministic no-context answer (no LLM call).
    pub no_context: bool,
}

/// Why the last `rewrite_query` ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteTrigger {
    Incorrect,
    Ungrounded,
}

impl RewriteTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            RewriteTrigger::Incorrect => "incorrect",
            RewriteTrigger::Ungrounded => "ungrounded",
        }
    }
}

/// The state of one corrective run.
#[derive(Debug)]
pub struct RagGraphState {
    /// The user's question and collection (generation always answers `query.text`).
    pub query: RagQuery,
    /// Chunks the working set holds after `retrieve`.
    pub top_n: usize,
    /// The current retrieval probe: the question, or the latest usable rewrite.
    pub probe: String,
    /// `rewrite_query` runs so far (the budget consumed).
    pub rewrites: u32,
    /// The budget (`corrective.max_iterations`).
    pub max_iterations: u32,
    /// What `generate` will use: retrieved, refined, or web + best local chunks.
    pub working: Vec<ScoredChunk>,
    /// The local working set with the highest best relevance graded so far, and that relevance
    /// (best-effort generation uses it when retrieval never became `Correct`).
    pub best: Vec<ScoredChunk>,
    pub best_relevance: Option<f32>,
    /// The last evaluator verdict.
    pub verdict: Option<RetrievalVerdict>,
    pub answer: Option<GeneratedAnswer>,
    /// The last groundedness verdict (`None`: not checked, skipped or failed).
    pub groundedness: Option<GroundednessVerdict>,
    pub web_attempted: bool,
    pub trace: RagTrace,
    /// The error that made a node fail (returned by the pipeline).
    pub error: Option<QueryError>,
}

impl RagGraphState {
    pub fn new(query: RagQuery, top_n: usize, max_iterations: u32, trace: RagTrace) -> Self {
        Self {
            probe: query.text.clone(),
            query,
            top_n,
            rewrites: 0,
            max_iterations,
            working: Vec::new(),
            best: Vec::new(),
            best_relevance: None,
            verdict: None,
            answer: None,
            groundedness: None,
            web_attempted: false,
            trace,
            error: None,
        }
    }

    /// Whether `rewrite_query` may still run.
    pub fn budget_left(&self) -> bool {
        self.rewrites < self.max_iterations
    }

    /// Why the next rewrite happens: an ungrounded answer when one was just checked.
    pub fn rewrite_trigger(&self) -> RewriteTrigger {
        match &self.groundedness {
            Some(v) if !v.grounded && self.answer.is_some() => RewriteTrigger::Ungrounded,
            _ => RewriteTrigger::Incorrect,
        }
    }
}

/// The conditional edge after `evaluate`: Correct → generate; Ambiguous → refine; Incorrect →
/// rewrite_query while the budget lasts, else web_fallback (which runs the opt-in fallback or
/// traces why it is skipped, then hands the best available chunks to generate).
pub fn route_after_evaluate(state: &RagGraphState) -> String {
    let next = match state.verdict.as_ref().map(|v| v.verdict) {
        Some(RetrievalGrade::Correct) | None => node::GENERATE,
        Some(RetrievalGrade::Ambiguous) => node::REFINE,
        Some(RetrievalGrade::Incorrect) if state.budget_left() => node::REWRITE_QUERY,
        Some(RetrievalGrade::Incorrect) => node::WEB_FALLBACK,
    };
    next.to_string()
}

/// The conditional edge after `check_groundedness`: ungrounded with budget left →
/// rewrite_query; grounded, unchecked or budget exhausted → end.
pub fn route_after_groundedness(state: &RagGraphState) -> String {
    match &state.groundedness {
        Some(v) if !v.grounded && state.budget_left() => node::REWRITE_QUERY.to_string(),
        _ => orkeon_crews::graph::END.to_string(),
    }
}
