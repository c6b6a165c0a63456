//! [`AdaptiveRagPipeline`]: classify, then answer through the route's delegate —
//! NoRetrieval → a direct LLM answer without citations; SingleShot → the memoised `balanced`
//! pipeline; Iterative → the memoised `corrective` pipeline. The trace always opens with a
//! `route` step (classifier, route, delegate, reason, fallback) and `RagTrace.route` holds the
//! route; the delegate's own steps follow.
//!
//! Delegates come from a [`DelegateSource`]: [`ResolverDelegates`] shares the
//! [`ProfileResolver`]'s memoised pipelines; [`OwnDelegates`] builds and memoises them itself
//! (when only a `&ProfileResolver` is at hand) from the staged `balanced` profile and the
//! iterative builder it is given. Either way a delegate is built on first use, so an
//! unavailable `balanced` (its ONNX reranker) only fails the questions routed to it.
//!
//! Retrieval only ([`RetrieveOnly`], what crews call for their knowledge blocks): the question is
//! routed exactly as by `query`, the same `route` step opens the trace, and the routed
//! delegate's own retrieval-only path answers (`balanced`: stages 1–5; `corrective`: the graph
//! stopping before generation). The no-retrieval route retrieves nothing and makes no LLM call:
//! an empty answer without citations, its `generate` step saying why. A delegate that cannot
//! retrieve alone fails with [`QueryError::RetrievalOnlyUnsupported`] naming it — never a
//! silent full query.
//!
//! Routing sits below the corrective graph: it names the iterative delegate, the `corrective`
//! module registers the builder behind that name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::json;
use tracing::Instrument;

use super::{QueryComplexityClassifier, QueryRoute, RouteDecision, build_classifier};
use crate::query::generate::GenerateStep;
use crate::query::options::{RagOptions, resolve_options};
use crate::query::pipeline::PipelineDeps;
use crate::query::profiles::{PipelineBuilder, ProfileResolver, staged_profile};
use crate::query::{QueryError, RagPipeline, RagQuery, RetrieveOnly};
use crate::settings::RagSettings;
use crate::types::{RagAnswer, RagTrace, TraceStep};

/// The delegate profile of the single-shot route.
pub const SINGLE_SHOT_DELEGATE: &str = "balanced";
/// The delegate profile of the iterative route.
pub const ITERATIVE_DELEGATE: &str = "corrective";

/// The system prompt of the direct (no-retrieval) answer.
pub const DIRECT_ANSWER_PROMPT: &str = "You are the assistant of a question-answering system over a document collection. \
The user's message is a greeting or small talk that needs no documents: answer it briefly and politely. \
Do not cite sources, do not state facts about the documents, and invite the user to ask a question about them.";

/// Profile name → pipeline, for the routes' delegates.
pub trait DelegateSource: Send + Sync {
    fn delegate(&self, profile: &str) -> Result<Arc<dyn RagPipeline>, QueryError>;
}

/// Delegates resolved through a shared [`ProfileResolver`] (its memoised pipelines). Holds a
/// weak reference: the resolver owns the adaptive builder, which must not keep it alive.
pub struct ResolverDelegates(pub Weak<ProfileResolver>);

impl DelegateSource for ResolverDelegates {
    fn delegate(&self, profile: &str) -> Result<Arc<dyn RagPipeline>, QueryError> {
        let resolver = self.0.upgrade().ok_or_else(|| QueryError::Internal {
            stage: "adaptive routing".into(),
            reason: "the profile resolver was dropped while the adaptive pipeline was in use"
                .into(),
        })?;
        resolver.resolve(profile)
    }
}

/// Delegates built from the configuration and memoised here, one per profile: the staged
/// `balanced` profile, and `iterative` (the `corrective` graph's builder) for the iterative
/// route.
pub struct OwnDelegates {
    settings: RagSettings,
    deps: PipelineDeps,
    iterative: PipelineBuilder,
    built: Mutex<HashMap<String, Arc<dyn RagPipeline>>>,
}

impl OwnDelegates {
    pub fn new(settings: RagSettings, deps: PipelineDeps, iterative: PipelineBuilder) -> Self {
        Self {
            settings,
            deps,
            iterative,
            built: Mutex::new(HashMap::new()),
        }
    }
}

impl DelegateSource for OwnDelegates {
    fn delegate(&self, profile: &str) -> Result<Arc<dyn RagPipeline>, QueryError> {
        if let Some(p) = self
            .built
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(profile)
        {
            return Ok(p.clone());
        }
        let pipeline: Arc<dyn RagPipeline> = match profile {
            ITERATIVE_DELEGATE => (self.iterative)(&self.settings, &self.deps)?,
            SINGLE_SHOT_DELEGATE => {
                staged_profile(SINGLE_SHOT_DELEGATE)(&self.settings, &self.deps)?
            }
            other => {
                return Err(QueryError::Internal {
                    stage: "adaptive routing".into(),
                    reason: format!("no delegate profile named '{other}'"),
                });
            }
        };
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        Ok(built.entry(profile.to_string()).or_insert(pipeline).clone())
    }
}

/// The adaptive profile's pipeline (see the module documentation).
pub struct AdaptiveRagPipeline {
    name: String,
    options: RagOptions,
    deps: PipelineDeps,
    classifier: Arc<dyn QueryComplexityClassifier>,
    delegates: Arc<dyn DelegateSource>,
}

impl AdaptiveRagPipeline {
    pub fn new(
        name: &str,
        options: RagOptions,
        deps: PipelineDeps,
        classifier: Arc<dyn QueryComplexityClassifier>,
        delegates: Arc<dyn DelegateSource>,
    ) -> Self {
        Self {
            name: name.to_string(),
            options,
            deps,
            classifier,
            delegates,
        }
    }

    /// The `adaptive` profile from configuration: the classifier `rag.query_routing.classifier`
    /// names (unknown names fail here), delegates from `delegates`.
    pub fn from_settings(
        name: &str,
        settings: &RagSettings,
        deps: &PipelineDeps,
        delegates: Arc<dyn DelegateSource>,
    ) -> Result<Self, QueryError> {
        let options = resolve_options("adaptive", settings)?;
        let classifier = build_classifier(&options.query_routing.classifier, deps.chat.as_ref())?;
        Ok(Self::new(
            name,
            options,
            deps.clone(),
            classifier,
            delegates,
        ))
    }

    async fn direct_answer(
        &self,
        q: &RagQuery,
        trace: &mut RagTrace,
    ) -> Result<String, QueryError> {
        let started = Instant::now();
        let step = GenerateStep::new(
            self.deps.chat.as_ref(),
            "adaptive direct answer",
            &self.options.generation,
        )?;
        let reply = step.reply(DIRECT_ANSWER_PROMPT, q.text.trim()).await?;
        trace.push(
            "generate",
            started.elapsed().as_secs_f64() * 1000.0,
            json!({
                "model": reply.model,
                "route": QueryRoute::NoRetrieval.as_str(),
                "passages": 0,
                "note": "no retrieval: direct answer without citations",
                "prompt_tokens": reply.usage.prompt_tokens,
                "completion_tokens": reply.usage.completion_tokens,
            }),
        );
        Ok(reply.content.trim().to_string())
    }

    /// Classifies `q` and builds the `route` trace step (the same for `query` and `retrieve`).
    async fn route(&self, q: &RagQuery) -> (RouteDecision, &'static str, TraceStep) {
        let started = Instant::now();
        let decision = self.classifier.classify(&q.text).await;
        let delegate = match decision.route {
            QueryRoute::NoRetrieval => "direct",
            QueryRoute::SingleShot => SINGLE_SHOT_DELEGATE,
            QueryRoute::Iterative => ITERATIVE_DELEGATE,
        };
        tracing::info!(route = decision.route.as_str(), classifier = %decision.classifier, delegate, reason = %decision.reason, "adaptive routing");
        let route_step = TraceStep {
            stage: "route".into(),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            detail: json!({
                "classifier": decision.classifier,
                "configured_classifier": self.classifier.name(),
                "route": decision.route.as_str(),
                "delegate": delegate,
                "reason": decision.reason,
                "fallback": decision.fallback,
            }),
        };
        (decision, delegate, route_step)
    }

    /// Labels a routed answer: the route step first, this pipeline's profile, the route.
    fn routed(&self, mut answer: RagAnswer, route: QueryRoute, route_step: TraceStep) -> RagAnswer {
        answer.trace.steps.insert(0, route_step);
        answer.trace.profile = Some(self.name.clone());
        answer.trace.route = Some(route.as_str().to_string());
        answer
    }

    async fn run(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        if q.text.trim().is_empty() {
            return Err(QueryError::EmptyQuestion);
        }
        let (decision, delegate, route_step) = self.route(q).await;
        let answer = match decision.route {
            QueryRoute::NoRetrieval => {
                let mut trace = RagTrace::default();
                let text = self.direct_answer(q, &mut trace).await?;
                RagAnswer {
                    text,
                    citations: Vec::new(),
                    trace,
                }
            }
            QueryRoute::SingleShot | QueryRoute::Iterative => {
                self.delegates.delegate(delegate)?.query(q).await?
            }
        };
        Ok(self.routed(answer, decision.route, route_step))
    }

    async fn run_retrieve_only(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        q.check()?;
        let (decision, delegate, route_step) = self.route(q).await;
        let answer = match decision.route {
            QueryRoute::NoRetrieval => {
                let mut trace = RagTrace::default();
                trace.push(
                    "generate",
                    0.0,
                    json!({
                        "skipped": "retrieval-only",
                        "reason": "retrieval-only call on the no-retrieval route: the question needs no documents, so nothing was retrieved and no LLM was called",
                        "route": QueryRoute::NoRetrieval.as_str(),
                        "model": null,
                        "passages": 0,
                    }),
                );
                RagAnswer {
                    text: String::new(),
                    citations: Vec::new(),
                    trace,
                }
            }
            QueryRoute::SingleShot | QueryRoute::Iterative => {
                let pipeline = self.delegates.delegate(delegate)?;
                let retriever =
                    pipeline
                        .retriever()
                        .ok_or_else(|| QueryError::RetrievalOnlyUnsupported {
                            pipeline: pipeline.name().to_string(),
                        })?;
                retriever.retrieve(q).await?
            }
        };
        Ok(self.routed(answer, decision.route, route_step))
    }
}

#[async_trait]
impl RagPipeline for AdaptiveRagPipeline {
    fn name(&self) -> &str {
        &self.name
    }

    async fn query(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span =
            tracing::info_span!("rag_query", pipeline = %self.name, collection = %q.collection);
        self.run(q).instrument(span).await
    }

    fn retriever(&self) -> Option<&dyn RetrieveOnly> {
        Some(self)
    }
}

#[async_trait]
impl RetrieveOnly for AdaptiveRagPipeline {
    async fn retrieve(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span =
            tracing::info_span!("rag_retrieve", pipeline = %self.name, collection = %q.collection);
        self.run_retrieve_only(q).instrument(span).await
    }
}
