//! [`CorrectiveRagPipeline`]: CRAG as a [`StateGraph<RagGraphState>`] — the same engine as
//! `process: graph` — behind the [`RagPipeline`] façade.
//!
//! Topology (the reference's, node for node):
//!
//! - start → `retrieve` → `evaluate`;
//! - after `evaluate` (conditional): Correct → `generate`; Ambiguous → `refine` → `generate`;
//!   Incorrect with budget left → `rewrite_query` → `retrieve`; Incorrect with the budget
//!   exhausted → `web_fallback` (runs the opt-in fallback or traces why not) → `generate`;
//! - `generate` → `check_groundedness`;
//! - after `check_groundedness` (conditional): ungrounded with budget left → `rewrite_query`;
//!   grounded, unchecked or budget exhausted → end.
//!
//! Double bound: the routers never enter `rewrite_query` past `corrective.max_iterations`
//! (default 3), and the graph runs under [`CircuitBreakerPolicy::for_iterations`] — (n+2)×7
//! transitions, n+2 visits per node, 2 min per node, 10 min in all — a second layer that only
//! trips if the routing is ever broken. A trip is traced (`corrective:circuit_breaker`) and
//! degrades to a best-effort answer: the last generated one, or a generation run outside the
//! graph (bounded by the per-node timeout) over the best chunks seen. A loop condition never
//! becomes an error; a failing store, embedder or generation LLM does.
//!
//! Options the graph does not use, on purpose: `rag.rerank.*` (it corrects by looping, not
//! reranking), `rag.query_transform.*` and `rag.retrieval.mmr.*` (the rewrite loop replaces
//! them) and `rag.groundedness.enabled` (the graph runs its own `check_groundedness` node
//! whenever a checker is available); a configured value is reported with a warning.
//!
//! Not [`crate::query::RetrieveOnly`]: the graph interleaves retrieval evaluation with
//! generation, so "retrieval only" is not a prefix of its run.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use orkeon_crews::graph::{CircuitBreakerPolicy, GraphOutcome, StateGraph};
use orkeon_crews::ports::{ChatError, ChatModel};
use serde_json::json;
use tracing::Instrument;

use super::evaluator::{HeuristicRetrievalEvaluator, LlmRetrievalEvaluator, RetrievalEvaluator};
use super::nodes::{CorrectiveEngine, CorrectiveNode, NodeKind};
use super::rewrite::{HeuristicQueryRewriter, LlmQueryRewriter, QueryRewriter};
use super::state::{RagGraphState, node, route_after_evaluate, route_after_groundedness};
use crate::query::groundedness::default_checker;
use crate::query::options::{RagOptions, resolve_options};
use crate::query::pipeline::PipelineDeps;
use crate::query::{QueryError, RagPipeline, RagQuery};
use crate::settings::RagSettings;
use crate::types::{RagAnswer, RagTrace};
use crate::web::{WebDocumentRetriever, WebSearchRetriever};

/// A conditional edge of the graph (a router reading the state).
pub type GraphRouter = Box<dyn Fn(&RagGraphState) -> String + Send + Sync>;

/// Kept here too for callers of `corrective::is_real_llm`.
pub use crate::query::is_real_llm;

/// The graph's pluggable components.
#[derive(Clone)]
pub struct CorrectiveComponents {
    pub evaluator: Arc<dyn RetrievalEvaluator>,
    pub rewriter: Arc<dyn QueryRewriter>,
    /// The web transport (`None`: `web_fallback` is traced as skipped).
    pub web: Option<Arc<dyn WebDocumentRetriever>>,
}

impl CorrectiveComponents {
    /// LLM evaluator and rewriter when `chat` is a real LLM, else the heuristic ones with a
    /// warning; no web transport.
    pub fn for_chat(chat: Option<&Arc<dyn ChatModel>>) -> Self {
        match chat {
            Some(chat) if is_real_llm(Some(chat)) => Self {
                evaluator: Arc::new(LlmRetrievalEvaluator::new(chat.clone())),
                rewriter: Arc::new(LlmQueryRewriter::new(chat.clone())),
                web: None,
            },
            _ => {
                tracing::warn!(
                    chat = chat.map(|c| c.name()).unwrap_or_else(|| "none".into()),
                    "no real LLM for the corrective graph: the retrieval evaluator and the query rewriter are the heuristic ones (content-word overlap, pseudo-relevance feedback)"
                );
                Self {
                    evaluator: Arc::new(HeuristicRetrievalEvaluator),
                    rewriter: Arc::new(HeuristicQueryRewriter),
                    web: None,
                }
            }
        }
    }

    pub fn with_web(mut self, web: Option<Arc<dyn WebDocumentRetriever>>) -> Self {
        self.web = web;
        self
    }
}

/// The corrective profile's pipeline (see the module documentation).
pub struct CorrectiveRagPipeline {
    engine: Arc<CorrectiveEngine>,
    graph: StateGraph<RagGraphState>,
    policy: CircuitBreakerPolicy,
}

impl CorrectiveRagPipeline {
    /// Builds the graph with the reference routers.
    pub fn new(
        name: &str,
        options: RagOptions,
        deps: PipelineDeps,
        components: CorrectiveComponents,
    ) -> Result<Self, QueryError> {
        Self::with_routers(
            name,
            options,
            deps,
            components,
            Box::new(route_after_evaluate),
            Box::new(route_after_groundedness),
        )
    }

    /// Builds the graph with the given conditional edges (the reference routers are
    /// [`route_after_evaluate`] and [`route_after_groundedness`]; others exist to prove that the
    /// circuit breaker holds when routing is broken).
    pub fn with_routers(
        name: &str,
        options: RagOptions,
        deps: PipelineDeps,
        components: CorrectiveComponents,
        after_evaluate: GraphRouter,
        after_groundedness: GraphRouter,
    ) -> Result<Self, QueryError> {
        let mut ignored = Vec::new();
        if options.rerank.enabled {
            ignored.push("rag.rerank.enabled");
        }
        if options.query_transform.mode != "none" {
            ignored.push("rag.query_transform.mode");
        }
        if options.retrieval.mmr.enabled {
            ignored.push("rag.retrieval.mmr.enabled");
        }
        if !ignored.is_empty() {
            tracing::warn!(
                pipeline = name,
                keys = ?ignored,
                "ignored by the corrective graph: it corrects by evaluate → rewrite loops instead"
            );
        }
        let policy =
            CircuitBreakerPolicy::for_iterations(options.corrective.max_iterations as usize);
        let tokens = deps.embedder.token_counter();
        let engine = Arc::new(CorrectiveEngine {
            name: name.to_string(),
            options,
            deps,
            evaluator: components.evaluator,
            rewriter: components.rewriter,
            web: components.web,
            tokens,
        });
        let mut graph = StateGraph::new(node::RETRIEVE);
        for kind in NodeKind::ALL {
            graph.add_node(
                kind.name(),
                CorrectiveNode {
                    kind,
                    engine: engine.clone(),
                },
            );
        }
        graph
            .add_edge(node::RETRIEVE, node::EVALUATE)
            .add_conditional_edge(node::EVALUATE, after_evaluate)
            .add_edge(node::REWRITE_QUERY, node::RETRIEVE)
            .add_edge(node::REFINE, node::GENERATE)
            .add_edge(node::WEB_FALLBACK, node::GENERATE)
            .add_edge(node::GENERATE, node::CHECK_GROUNDEDNESS)
            .add_conditional_edge(node::CHECK_GROUNDEDNESS, after_groundedness);
        graph.validate().map_err(|e| QueryError::Setup {
            component: "the corrective graph".into(),
            reason: e.to_string(),
        })?;
        tracing::debug!(
            pipeline = name,
            evaluator = engine.evaluator.name(),
            rewriter = engine.rewriter.name(),
            web = engine.web.as_ref().map(|w| w.name()),
            max_iterations = engine.options.corrective.max_iterations,
            "corrective RAG pipeline built"
        );
        Ok(Self {
            engine,
            graph,
            policy,
        })
    }

    /// The `corrective` profile from configuration: the `corrective` preset with every
    /// configured key, components chosen by [`CorrectiveComponents::for_chat`], the web
    /// transport when `rag.web_fallback` enables one, and the host's groundedness checker —
    /// or, when the host registered none, the default one ([`default_checker`]: LLM-backed for
    /// a real LLM, heuristic otherwise).
    pub fn from_settings(
        name: &str,
        settings: &RagSettings,
        deps: &PipelineDeps,
    ) -> Result<Self, QueryError> {
        let options = resolve_options("corrective", settings)?;
        let web = WebSearchRetriever::from_settings(&settings.web_fallback).map_err(|e| {
            QueryError::Setup {
                component: "the web fallback (rag.web_fallback)".into(),
                reason: e.to_string(),
            }
        })?;
        if web.is_some() && !options.corrective.web_fallback_enabled {
            tracing::info!(
                "rag.web_fallback is configured but rag.corrective.web_fallback.enabled is false: the graph will not call it"
            );
        }
        let web = web.map(|w| Arc::new(w) as Arc<dyn WebDocumentRetriever>);
        let components = CorrectiveComponents::for_chat(deps.chat.as_ref()).with_web(web);
        let mut deps = deps.clone();
        if deps.groundedness.is_none() {
            deps.groundedness = Some(default_checker(deps.chat.clone()));
        }
        Self::new(name, options, deps, components)
    }

    /// The resolved options the graph runs with.
    pub fn options(&self) -> &RagOptions {
        &self.engine.options
    }

    /// The circuit breaker derived from the budget.
    pub fn policy(&self) -> &CircuitBreakerPolicy {
        &self.policy
    }

    async fn run(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        q.check()?;
        let started = Instant::now();
        let options = &self.engine.options;
        let trace = RagTrace {
            profile: Some(self.engine.name.clone()),
            ..RagTrace::default()
        };
        let state = RagGraphState::new(
            q.clone(),
            options.final_top_n(q.top_n),
            options.corrective.max_iterations,
            trace,
        );
        let run = self.graph.run(state, &self.policy).await;
        let mut s = run.state;
        match &run.outcome {
            GraphOutcome::Completed => {}
            GraphOutcome::CircuitBroken(trip) => {
                tracing::warn!(%trip, path = ?run.path, "corrective graph circuit breaker tripped: best-effort answer");
                let generated = s.answer.is_some();
                s.trace.push(
                    "corrective:circuit_breaker",
                    0.0,
                    json!({
                        "trip": trip.to_string(),
                        "iteration": s.rewrites,
                        "nodes_run": run.path.len(),
                        "max_transitions": self.policy.max_transitions,
                        "max_state_visits": self.policy.max_state_visits,
                        "degraded_to": if generated { "last generated answer" } else { "generation outside the graph" },
                    }),
                );
                if !generated {
                    if s.working.is_empty() {
                        s.working = s.best.clone();
                    }
                    let limit = self.policy.per_state_timeout;
                    match tokio::time::timeout(limit, self.engine.generate(&mut s, true)).await {
                        Ok(result) => result?,
                        Err(_) => {
                            return Err(QueryError::Chat {
                                stage: "corrective:generate (best effort)".into(),
                                source: ChatError::Timeout(limit.as_millis() as u64),
                            });
                        }
                    }
                }
            }
            GraphOutcome::NodeFailed { node, error } => {
                return Err(s.error.take().unwrap_or_else(|| QueryError::Internal {
                    stage: format!("corrective:{node}"),
                    reason: error.clone(),
                }));
            }
            GraphOutcome::UnknownNode(name) => {
                return Err(QueryError::Internal {
                    stage: "the corrective graph".into(),
                    reason: format!("a router named the unknown node '{name}'"),
                });
            }
        }
        let Some(answer) = s.answer.take() else {
            return Err(QueryError::Internal {
                stage: "the corrective graph".into(),
                reason: format!(
                    "the run ended without an answer (path: {})",
                    run.path.join(" → ")
                ),
            });
        };
        s.trace.iterations = Some(s.rewrites);
        s.trace.push(
            "corrective:graph",
            started.elapsed().as_secs_f64() * 1000.0,
            json!({
                "outcome": run.outcome.to_string(),
                "path": run.path,
                "iterations": s.rewrites,
                "max_iterations": s.max_iterations,
                "evaluator": self.engine.evaluator.name(),
                "rewriter": self.engine.rewriter.name(),
                "groundedness_checker": self.engine.deps.groundedness.as_ref().map(|c| c.name().to_string()),
                "web_retriever": self.engine.web.as_ref().map(|w| w.name().to_string()),
            }),
        );
        Ok(RagAnswer {
            text: answer.text,
            citations: answer.citations,
            trace: s.trace,
        })
    }
}

#[async_trait]
impl RagPipeline for CorrectiveRagPipeline {
    fn name(&self) -> &str {
        &self.engine.name
    }

    async fn query(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span = tracing::info_span!("rag_query", pipeline = %self.engine.name, collection = %q.collection);
        self.run(q).instrument(span).await
    }
}
