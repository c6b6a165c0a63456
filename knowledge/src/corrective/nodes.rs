//! The corrective graph's seven nodes over [`RagGraphState`], and [`CorrectiveEngine`], the
//! shared components they run with. Every node appends a `corrective:<node>` trace step whose
//! detail carries `iteration` (the rewrites consumed so far).
//!
//! Generation reuses the staged pipeline's stages: [`assemble`] (token budget, edges layout) and
//! [`GenerateStep`] (the prompt convention, marker clean-up, rank-based `[n]` citations), and
//! always answers the original question. A retrieval-only run ends without the generation nodes
//! ([`NodeKind::is_generation`]); [`CorrectiveEngine::retrieved_passages`] turns its final
//! working set into the answer's citations instead.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use orkeon_crews::graph::{Node, NodeError};
use serde_json::{Value, json};

use super::evaluator::RetrievalEvaluator;
use super::refine::refine;
use super::rewrite::{QueryRewriter, RewriteRequest};
use super::state::{GeneratedAnswer, RagGraphState, RewriteTrigger, node};
use crate::embed::TokenCounter;
use crate::query::QueryError;
use crate::query::assemble::assemble;
use crate::query::generate::{GenerateStep, all_citations, no_context_answer};
use crate::query::options::RagOptions;
use crate::query::pipeline::PipelineDeps;
use crate::store::{SearchMode, SearchRequest};
use crate::types::{Citation, ScoreOrigin, ScoredChunk};
use crate::web::WebDocumentRetriever;

/// What the nodes run with.
pub struct CorrectiveEngine {
    pub name: String,
    pub options: RagOptions,
    pub deps: PipelineDeps,
    pub evaluator: Arc<dyn RetrievalEvaluator>,
    pub rewriter: Arc<dyn QueryRewriter>,
    pub web: Option<Arc<dyn WebDocumentRetriever>>,
    pub tokens: Arc<dyn TokenCounter>,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Appends `corrective:<node>` with the iteration added to `detail`.
fn push(state: &mut RagGraphState, node: &str, started: Instant, mut detail: Value) {
    if let Value::Object(map) = &mut detail {
        map.insert("iteration".into(), json!(state.rewrites));
    }
    state
        .trace
        .push(format!("corrective:{node}"), ms(started), detail);
}

/// Records the error for the pipeline and fails the node.
fn fail(state: &mut RagGraphState, error: QueryError) -> NodeError {
    let message = error.to_string();
    state.error = Some(error);
    NodeError::new(message)
}

fn sources(chunks: &[ScoredChunk]) -> Vec<&str> {
    chunks.iter().map(|c| c.chunk.source_id.as_str()).collect()
}

impl CorrectiveEngine {
    async fn retrieve(&self, s: &mut RagGraphState) -> Result<(), NodeError> {
        let started = Instant::now();
        let o = &self.options;
        let candidate_k = o.retrieval.candidate_k.max(s.top_n);
        let vector = match self.deps.embedder.embed_query(&s.probe).await {
            Ok(vector) => vector,
            Err(source) => {
                return Err(fail(
                    s,
                    QueryError::Embed {
                        stage: "corrective:retrieve".into(),
                        source,
                    },
                ));
            }
        };
        let mode = if o.retrieval.hybrid {
            SearchMode::Hybrid
        } else {
            SearchMode::Vector
        };
        let request = SearchRequest {
            mode,
            text: Some(s.probe.clone()),
            vector: Some(vector),
            k: candidate_k,
            rrf_k: o.retrieval.rrf_k,
            fusion: o.retrieval.fusion,
        };
        let store = self.deps.store.clone();
        let collection = s.query.collection.clone();
        let searched =
            tokio::task::spawn_blocking(move || store.search(&collection, &request)).await;
        let found = match searched {
            Ok(Ok(found)) => found,
            Ok(Err(source)) => {
                let collection = s.query.collection.clone();
                return Err(fail(s, QueryError::Store { collection, source }));
            }
            Err(e) => {
                return Err(fail(
                    s,
                    QueryError::Internal {
                        stage: "corrective:retrieve".into(),
                        reason: format!("search task failed: {e}"),
                    },
                ));
            }
        };
        let candidates = found.len();
        let mut kept: Vec<ScoredChunk> = match o.retrieval.min_score {
            Some(min) => found.into_iter().filter(|c| c.score >= min).collect(),
            None => found,
        };
        let below_floor = candidates - kept.len();
        kept.truncate(s.top_n);
        let detail = json!({
            "probe": s.probe,
            "mode": match mode { SearchMode::Hybrid => "hybrid", SearchMode::Vector => "vector", SearchMode::Bm25 => "bm25" },
            "candidate_k": candidate_k,
            "candidates": candidates,
            "below_min_score": below_floor,
            "top_n": s.top_n,
            "kept": kept.len(),
            "sources": sources(&kept),
        });
        s.working = kept;
        push(s, node::RETRIEVE, started, detail);
        Ok(())
    }

    async fn evaluate(&self, s: &mut RagGraphState) -> Result<(), NodeError> {
        let started = Instant::now();
        let verdict = match self.evaluator.evaluate(&s.query.text, &s.working).await {
            Ok(verdict) => verdict,
            Err(e) => return Err(fail(s, e)),
        };
        let best = verdict.best_relevance();
        if s.best_relevance.is_none_or(|b| best > b) {
            s.best = s.working.clone();
            s.best_relevance = Some(best);
        }
        s.trace.verdicts.push(verdict.verdict.as_str().to_string());
        let detail = json!({
            "evaluator": self.evaluator.name(),
            "verdict": verdict.verdict.as_str(),
            "relevance": verdict.relevance,
            "rationale": verdict.rationale,
            "fallback": verdict.fallback,
            "chunks": s.working.len(),
            "budget_left": s.max_iterations.saturating_sub(s.rewrites),
        });
        s.verdict = Some(verdict);
        push(s, node::EVALUATE, started, detail);
        Ok(())
    }

    async fn rewrite_query(&self, s: &mut RagGraphState) -> Result<(), NodeError> {
        let started = Instant::now();
        let trigger = s.rewrite_trigger();
        s.rewrites += 1;
        let rationale = s
            .verdict
            .as_ref()
            .map(|v| v.rationale.clone())
            .unwrap_or_default();
        let claims: Vec<String> = match (&s.groundedness, trigger) {
            (Some(v), RewriteTrigger::Ungrounded) => v.unsupported_claims.clone(),
            _ => Vec::new(),
        };
        let outcome = {
            let request = RewriteRequest {
                question: &s.query.text,
                previous_probe: &s.probe,
                rationale: &rationale,
                unsupported_claims: &claims,
                chunks: &s.working,
            };
            self.rewriter.rewrite(&request).await
        };
        let previous = s.probe.clone();
        if let Some(probe) = &outcome.probe {
            s.probe = probe.clone();
            s.trace.query_variants.push(probe.clone());
        } else {
            tracing::warn!(reason = ?outcome.unusable, "unusable query rewrite: retrying the previous probe");
        }
        // The verdict that triggered this rewrite is consumed.
        s.groundedness = None;
        let detail = json!({
            "rewriter": self.rewriter.name(),
            "trigger": trigger.as_str(),
            "previous_probe": previous,
            "probe": s.probe,
            "usable": outcome.probe.is_some(),
            "unusable": outcome.unusable,
            "model": outcome.model,
            "unsupported_claims": claims.len(),
            "budget_left": s.max_iterations.saturating_sub(s.rewrites),
        });
        push(s, node::REWRITE_QUERY, started, detail);
        Ok(())
    }

    async fn refine(&self, s: &mut RagGraphState) -> Result<(), NodeError> {
        let started = Instant::now();
        let relevance = s
            .verdict
            .as_ref()
            .map(|v| v.relevance.clone())
            .unwrap_or_default();
        let (chunks, report) = refine(&s.query.text, std::mem::take(&mut s.working), &relevance);
        s.working = chunks;
        let mut detail = serde_json::to_value(&report).unwrap_or_else(|_| json!({}));
        detail["sources"] = json!(sources(&s.working));
        push(s, node::REFINE, started, detail);
        Ok(())
    }

    async fn web_fallback(&self, s: &mut RagGraphState) -> Result<(), NodeError> {
        let started = Instant::now();
        let local = if s.best.is_empty() {
            s.working.clone()
        } else {
            s.best.clone()
        };
        let skip = if !self.options.corrective.web_fallback_enabled {
            Some("disabled: rag.corrective.web_fallback.enabled is false")
        } else if self.web.is_none() {
            Some(
                "no web retriever registered: rag.web_fallback.enabled is false or rag.web_fallback.endpoint is not set",
            )
        } else if s.web_attempted {
            Some("already attempted")
        } else {
            None
        };
        let detail = match (skip, &self.web) {
            (None, Some(web)) => {
                s.web_attempted = true;
                let max = self.options.corrective.web_fallback_max_results;
                match web.retrieve(&s.query.text, max).await {
                    Ok(found) => {
                        let web_chunks = found.chunks.len();
                        let detail = json!({
                            "retriever": web.name(),
                            "max_results": max,
                            "results_found": found.results_found,
                            "pages": found.pages,
                            "web_chunks": web_chunks,
                            "local_chunks": local.len(),
                        });
                        // Web chunks open the working set; the local best closes it.
                        s.working = found.chunks.into_iter().chain(local).collect();
                        detail
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "web fallback failed: best-effort generation with local chunks");
                        s.working = local;
                        json!({
                            "retriever": web.name(),
                            "error": e.to_string(),
                            "web_chunks": 0,
                            "local_chunks": s.working.len(),
                        })
                    }
                }
            }
            (reason, _) => {
                let reason = reason.unwrap_or("no web retriever registered");
                tracing::info!(reason, "web fallback skipped: best-effort generation");
                s.working = local;
                json!({
                    "skipped": reason,
                    "best_effort": true,
                    "local_chunks": s.working.len(),
                })
            }
        };
        push(s, node::WEB_FALLBACK, started, detail);
        Ok(())
    }

    /// Grounded generation over the working set; `outside_graph` when the breaker tripped
    /// before generation ran.
    pub async fn generate(
        &self,
        s: &mut RagGraphState,
        outside_graph: bool,
    ) -> Result<(), QueryError> {
        let started = Instant::now();
        let o = &self.options;
        let context = assemble(
            s.working.clone(),
            o.context.max_tokens,
            o.context.ordering,
            self.tokens.as_ref(),
        );
        if context.chunks.is_empty() {
            let reason = if s.working.is_empty() {
                "no chunk retrieved"
            } else {
                "no chunk fitted the context budget"
            };
            s.answer = Some(GeneratedAnswer {
                text: no_context_answer(&s.query.collection),
                citations: Vec::new(),
                context,
                no_context: true,
            });
            push(
                s,
                node::GENERATE,
                started,
                json!({"skipped": "no-context", "reason": reason, "model": null, "outside_graph": outside_graph}),
            );
            return Ok(());
        }
        let step = GenerateStep::new(
            self.deps.chat.as_ref(),
            "corrective:generate",
            &o.generation,
        )?;
        // The original question, never the rewritten probe.
        let answer = step.grounded(&s.query.text, &context).await?;
        let web_passages = context
            .chunks
            .iter()
            .filter(|c| c.origin == ScoreOrigin::Web)
            .count();
        let mut detail = answer.trace_detail();
        detail.insert("web_passages".into(), json!(web_passages));
        detail.insert("layout".into(), json!(context.layout_markers()));
        detail.insert("dropped_by_budget".into(), json!(context.dropped_by_budget));
        detail.insert("tokens".into(), json!(context.tokens));
        detail.insert("outside_graph".into(), json!(outside_graph));
        s.answer = Some(GeneratedAnswer {
            text: answer.text,
            citations: answer.citations,
            context,
            no_context: false,
        });
        push(s, node::GENERATE, started, Value::Object(detail));
        Ok(())
    }

    /// The end of a retrieval-only run: the final working set (after `refine` when it ran; web
    /// chunks first after a web fallback) capped at the run's `top_n` and held to the context
    /// budget, as citations `[1]`..`[n]` in rank order — the shape of the staged pipeline's
    /// retrieval-only answer. Traces `generate` and `check_groundedness` as skipped on purpose:
    /// no LLM call.
    pub fn retrieved_passages(&self, s: &mut RagGraphState) -> Vec<Citation> {
        let started = Instant::now();
        let o = &self.options;
        let mut selected = s.working.clone();
        let capped_by_top_n = selected.len().saturating_sub(s.top_n);
        selected.truncate(s.top_n);
        let context = assemble(
            selected,
            o.context.max_tokens,
            o.context.ordering,
            self.tokens.as_ref(),
        );
        let web_passages = context
            .chunks
            .iter()
            .filter(|c| c.origin == ScoreOrigin::Web)
            .count();
        let detail = json!({
            "skipped": "retrieval-only",
            "reason": "retrieval-only call: the graph stopped before generation on purpose (no LLM call); the answer cites its selected passages",
            "model": null,
            "passages": context.chunks.len(),
            "top_n": s.top_n,
            "capped_by_top_n": capped_by_top_n,
            "dropped_by_budget": context.dropped_by_budget,
            "tokens": context.tokens,
            "web_passages": web_passages,
            "sources": sources(&context.chunks),
        });
        push(s, node::GENERATE, started, detail);
        push(
            s,
            node::CHECK_GROUNDEDNESS,
            Instant::now(),
            json!({"skipped": "retrieval-only"}),
        );
        all_citations(&context)
    }

    async fn check_groundedness(&self, s: &mut RagGraphState) -> Result<(), NodeError> {
        let started = Instant::now();
        s.groundedness = None;
        let found = match (&s.answer, self.deps.groundedness.clone()) {
            (None, _) => Err("no answer was generated"),
            (Some(a), _) if a.no_context => Err("no-context"),
            (Some(_), None) => Err("no groundedness checker registered"),
            (Some(a), Some(checker)) => Ok((a.text.clone(), a.context.chunks.clone(), checker)),
        };
        let (text, context, checker) = match found {
            Ok(found) => found,
            Err(reason) => {
                push(
                    s,
                    node::CHECK_GROUNDEDNESS,
                    started,
                    json!({"skipped": reason}),
                );
                return Ok(());
            }
        };
        let detail = match checker.check(&s.query.text, &text, &context).await {
            Ok(verdict) => {
                let detail = json!({
                    "checker": checker.name(),
                    "grounded": verdict.grounded,
                    "score": verdict.score,
                    "unsupported_claims": verdict.unsupported_claims,
                    "budget_left": s.max_iterations.saturating_sub(s.rewrites),
                });
                s.groundedness = Some(verdict);
                detail
            }
            // The answer stands; the failed verification is reported, not hidden.
            Err(e) => {
                tracing::warn!(checker = checker.name(), error = %e, "groundedness check failed");
                json!({"checker": checker.name(), "error": e.to_string()})
            }
        };
        push(s, node::CHECK_GROUNDEDNESS, started, detail);
        Ok(())
    }
}

/// Which node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Retrieve,
    Evaluate,
    RewriteQuery,
    Refine,
    WebFallback,
    Generate,
    CheckGroundedness,
}

impl NodeKind {
    pub const ALL: [NodeKind; 7] = [
        NodeKind::Retrieve,
        NodeKind::Evaluate,
        NodeKind::RewriteQuery,
        NodeKind::Refine,
        NodeKind::WebFallback,
        NodeKind::Generate,
        NodeKind::CheckGroundedness,
    ];

    /// Whether the node belongs to the generation half (`generate`, `check_groundedness`),
    /// which a retrieval-only run never reaches.
    pub fn is_generation(self) -> bool {
        matches!(self, NodeKind::Generate | NodeKind::CheckGroundedness)
    }

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Retrieve => node::RETRIEVE,
            NodeKind::Evaluate => node::EVALUATE,
            NodeKind::RewriteQuery => node::REWRITE_QUERY,
            NodeKind::Refine => node::REFINE,
            NodeKind::WebFallback => node::WEB_FALLBACK,
            NodeKind::Generate => node::GENERATE,
            NodeKind::CheckGroundedness => node::CHECK_GROUNDEDNESS,
        }
    }
}

/// One node of the graph: a kind and the engine it runs with.
pub struct CorrectiveNode {
    pub kind: NodeKind,
    pub engine: Arc<CorrectiveEngine>,
}

#[async_trait]
impl Node<RagGraphState> for CorrectiveNode {
    async fn run(&self, state: &mut RagGraphState) -> Result<(), NodeError> {
        let e = &self.engine;
        match self.kind {
            NodeKind::Retrieve => e.retrieve(state).await,
            NodeKind::Evaluate => e.evaluate(state).await,
            NodeKind::RewriteQuery => e.rewrite_query(state).await,
            NodeKind::Refine => e.refine(state).await,
            NodeKind::WebFallback => e.web_fallback(state).await,
            NodeKind::Generate => match e.generate(state, false).await {
                Ok(()) => Ok(()),
                Err(error) => Err(fail(state, error)),
            },
            NodeKind::CheckGroundedness => e.check_groundedness(state).await,
        }
    }
}
