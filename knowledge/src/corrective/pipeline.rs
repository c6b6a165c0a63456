//! [`CorrectiveRagPipeline`]: CRAG as a [`StateGraph<RagGraphState>`] — the same engine as
//! `process: graph` — behind the [`RagPipeline`] façade.
//!
//! Topology of an answer ([`GraphMode::Answer`]; the reference's, node for node):
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
//! Retrieval only ([`crate::query::RetrieveOnly`], what crews call for their knowledge blocks):
//! a second topology of the same graph ([`GraphMode::RetrieveOnly`]), built from the same
//! nodes and routers and run under the same bounds, that stops before generation — the routes
//! to `generate` end the run instead (Correct → end; Ambiguous → `refine` → end; Incorrect
//! with budget left → `rewrite_query` → `retrieve`; Incorrect with the budget exhausted →
//! `web_fallback` → end). No `generate`, no `check_groundedness`, no LLM generation call (the
//! evaluator and the rewriter still call theirs when they are LLM-backed). The answer's text
//! is empty; its citations are the final selected passages (after `refine` when it ran) in
//! rank order, `[1]`..`[n]`, capped at the query's `top_n` (else the profile's) and held to
//! the context budget; the trace keeps every `corrective:*` step, traces `generate` and
//! `check_groundedness` as skipped (`"skipped": "retrieval-only"`), and ends with the
//! `corrective:graph` summary (`mode: retrieve-only`). A tripped breaker degrades to the
//! passages selected so far.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use orkeon_crews::graph::{BreakerTrip, CircuitBreakerPolicy, END, GraphOutcome, StateGraph};
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
use crate::query::{QueryError, RagPipeline, RagQuery, RetrieveOnly};
use crate::settings::RagSettings;
use crate::types::{RagAnswer, RagTrace};
use crate::web::{WebDocumentRetriever, WebSearchRetriever};

/// A conditional edge of the graph (a router reading the state).
pub type GraphRouter = Box<dyn Fn(&RagGraphState) -> String + Send + Sync>;

/// A router shared by both topologies.
type SharedRouter = Arc<dyn Fn(&RagGraphState) -> String + Send + Sync>;

/// Which topology of the graph a run takes (both are built once, with the pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphMode {
    /// The full CRAG run, through `generate` and `check_groundedness`.
    Answer,
    /// Stops before generation: the routes that lead to `generate` end the run.
    RetrieveOnly,
}

impl GraphMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GraphMode::Answer => "answer",
            GraphMode::RetrieveOnly => "retrieve-only",
        }
    }
}

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
    /// [`GraphMode::Answer`].
    graph: StateGraph<RagGraphState>,
    /// [`GraphMode::RetrieveOnly`]: the same nodes and routers, stopping before generation.
    retrieval_graph: StateGraph<RagGraphState>,
    policy: CircuitBreakerPolicy,
}

/// One topology of the corrective graph over `engine`'s nodes.
fn build_graph(
    mode: GraphMode,
    engine: &Arc<CorrectiveEngine>,
    after_evaluate: &SharedRouter,
    after_groundedness: &SharedRouter,
) -> Result<StateGraph<RagGraphState>, QueryError> {
    let mut graph = StateGraph::new(node::RETRIEVE);
    for kind in NodeKind::ALL {
        if mode == GraphMode::RetrieveOnly && kind.is_generation() {
            continue;
        }
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
        .add_edge(node::REWRITE_QUERY, node::RETRIEVE);
    match mode {
        GraphMode::Answer => {
            let after_evaluate = after_evaluate.clone();
            let after_groundedness = after_groundedness.clone();
            graph
                .add_conditional_edge(node::EVALUATE, move |s: &RagGraphState| after_evaluate(s))
                .add_edge(node::REFINE, node::GENERATE)
                .add_edge(node::WEB_FALLBACK, node::GENERATE)
                .add_edge(node::GENERATE, node::CHECK_GROUNDEDNESS)
                .add_conditional_edge(node::CHECK_GROUNDEDNESS, move |s: &RagGraphState| {
                    after_groundedness(s)
                });
        }
        GraphMode::RetrieveOnly => {
            // The same router; where it would generate, the run ends.
            let after_evaluate = after_evaluate.clone();
            graph
                .add_conditional_edge(node::EVALUATE, move |s: &RagGraphState| {
                    let next = after_evaluate(s);
                    if next == node::GENERATE {
                        END.to_string()
                    } else {
                        next
                    }
                })
                .add_edge(node::REFINE, END)
                .add_edge(node::WEB_FALLBACK, END);
        }
    }
    graph.validate().map_err(|e| QueryError::Setup {
        component: format!("the corrective graph ({})", mode.as_str()),
        reason: e.to_string(),
    })?;
    Ok(graph)
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

    /// Builds the graph's two topologies ([`GraphMode`]) with the given conditional edges (the
    /// reference routers are [`route_after_evaluate`] and [`route_after_groundedness`]; others
    /// exist to prove that the circuit breaker holds when routing is broken).
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
        let after_evaluate: SharedRouter = Arc::from(after_evaluate);
        let after_groundedness: SharedRouter = Arc::from(after_groundedness);
        let graph = build_graph(
            GraphMode::Answer,
            &engine,
            &after_evaluate,
            &after_groundedness,
        )?;
        let retrieval_graph = build_graph(
            GraphMode::RetrieveOnly,
            &engine,
            &after_evaluate,
            &after_groundedness,
        )?;
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
            retrieval_graph,
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

    /// One run of the `mode` topology.
    async fn run(&self, q: &RagQuery, mode: GraphMode) -> Result<RagAnswer, QueryError> {
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
        let graph = match mode {
            GraphMode::Answer => &self.graph,
            GraphMode::RetrieveOnly => &self.retrieval_graph,
        };
        let run = graph.run(state, &self.policy).await;
        let mut s = run.state;
        match &run.outcome {
            GraphOutcome::Completed => {}
            GraphOutcome::CircuitBroken(trip) => {
                self.degrade(&mut s, mode, trip, &run.path).await?;
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
        let (text, citations) = match mode {
            GraphMode::Answer => {
                let Some(answer) = s.answer.take() else {
                    return Err(QueryError::Internal {
                        stage: "the corrective graph".into(),
                        reason: format!(
                            "the run ended without an answer (path: {})",
                            run.path.join(" → ")
                        ),
                    });
                };
                (answer.text, answer.citations)
            }
            GraphMode::RetrieveOnly => (String::new(), self.engine.retrieved_passages(&mut s)),
        };
        s.trace.iterations = Some(s.rewrites);
        s.trace.push(
            "corrective:graph",
            started.elapsed().as_secs_f64() * 1000.0,
            json!({
                "mode": mode.as_str(),
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
            text,
            citations,
            trace: s.trace,
        })
    }

    /// A tripped breaker: traced, then the best effort of the mode — the last generated answer
    /// or a generation outside the graph (bounded by the per-node timeout) over the best chunks
    /// seen; in retrieval-only mode, the passages selected so far (the best seen when none are).
    async fn degrade(
        &self,
        s: &mut RagGraphState,
        mode: GraphMode,
        trip: &BreakerTrip,
        path: &[String],
    ) -> Result<(), QueryError> {
        tracing::warn!(%trip, ?path, mode = mode.as_str(), "corrective graph circuit breaker tripped: best-effort answer");
        let generated = s.answer.is_some();
        let degraded_to = match mode {
            GraphMode::RetrieveOnly => {
                "the passages selected so far (retrieval-only: no generation)"
            }
            GraphMode::Answer if generated => "last generated answer",
            GraphMode::Answer => "generation outside the graph",
        };
        s.trace.push(
            "corrective:circuit_breaker",
            0.0,
            json!({
                "trip": trip.to_string(),
                "iteration": s.rewrites,
                "nodes_run": path.len(),
                "max_transitions": self.policy.max_transitions,
                "max_state_visits": self.policy.max_state_visits,
                "degraded_to": degraded_to,
            }),
        );
        if s.working.is_empty() {
            s.working = s.best.clone();
        }
        if mode == GraphMode::Answer && !generated {
            let limit = self.policy.per_state_timeout;
            match tokio::time::timeout(limit, self.engine.generate(s, true)).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(QueryError::Chat {
                        stage: "corrective:generate (best effort)".into(),
                        source: ChatError::Timeout(limit.as_millis() as u64),
                    });
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl RagPipeline for CorrectiveRagPipeline {
    fn name(&self) -> &str {
        &self.engine.name
    }

    async fn query(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span = tracing::info_span!("rag_query", pipeline = %self.engine.name, collection = %q.collection);
        self.run(q, GraphMode::Answer).instrument(span).await
    }

    fn retriever(&self) -> Option<&dyn RetrieveOnly> {
        Some(self)
    }
}

#[async_trait]
impl RetrieveOnly for CorrectiveRagPipeline {
    async fn retrieve(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span = tracing::info_span!("rag_retrieve", pipeline = %self.engine.name, collection = %q.collection);
        self.run(q, GraphMode::RetrieveOnly).instrument(span).await
    }
}
