//! [`StagedRagPipeline`]: runs the seven stages in order, each appending a trace step with its
//! duration, counts and component names, and implements both [`RagPipeline`] (with
//! generation) and [`RetrieveOnly`] (stages 1–5, no LLM call for generation).
//!
//! The components (transformer, reranker) are built once, at construction, from the factories
//! in [`PipelineDeps`]: an unknown name fails there, listing the known ones.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use futures::future::try_join_all;
use orkeon_crews::ports::ChatModel;
use serde_json::json;
use tracing::Instrument;

use super::aggregate::aggregate_documents;
use super::assemble::{AssembledContext, assemble};
use super::fuse::{FuseMethod, fuse};
use super::generate::{GenerateStep, all_citations, no_context_answer};
use super::groundedness::GroundednessChecker;
use super::mmr::mmr_reorder;
use super::options::{RagOptions, RerankSkip};
use super::rerank::blend::{BlendSettings, blend};
use super::rerank::{Reranker, RerankerContext, RerankerFactory};
use super::transform::{QueryTransformer, TransformKind, TransformerFactory};
use super::{QueryError, RagPipeline, RagQuery, RetrieveOnly};
use crate::embed::{Embedder, TokenCounter};
use crate::settings::query::{DocumentAggregation, RerankBlend};
use crate::store::{DocumentStore, SearchMode, SearchRequest};
use crate::types::{RagAnswer, RagTrace, ScoredChunk};

/// What a pipeline is built from.
#[derive(Clone)]
pub struct PipelineDeps {
    pub store: Arc<dyn DocumentStore>,
    pub embedder: Arc<dyn Embedder>,
    /// The LLM for generation and LLM-backed components (optional: retrieval-only callers and
    /// model-free components do without).
    pub chat: Option<Arc<dyn ChatModel>>,
    pub rerankers: Arc<RerankerFactory>,
    pub transformers: Arc<TransformerFactory>,
    /// Stage 7's checker; without one the stage is traced as skipped.
    pub groundedness: Option<Arc<dyn GroundednessChecker>>,
}

/// The default [`RagPipeline`]: transform → retrieve → fuse → rerank → assemble → generate →
/// groundedness, driven by [`RagOptions`].
pub struct StagedRagPipeline {
    name: String,
    options: RagOptions,
    deps: PipelineDeps,
    transformer: Arc<dyn QueryTransformer>,
    /// `None` when the rerank stage is disabled.
    reranker: Option<Arc<dyn Reranker>>,
    tokens: Arc<dyn TokenCounter>,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Whether retrieval is decisive enough to skip the reranker (`rag.rerank.skip_gap`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SkipDecision {
    pub skip: bool,
    /// Best fused score minus the score at `rule.rank` (the last one when there are fewer);
    /// `None` with fewer than two candidates.
    pub gap: Option<f32>,
    pub reason: String,
    pub rule: RerankSkip,
}

/// Decides [`SkipDecision`] for the fused candidates: skip when the best score leads the one at
/// `rule.rank` (or the last, with fewer candidates) by at least `rule.gap`, or when there are
/// fewer than two candidates (nothing to reorder). All-equal scores have gap 0: reranked
/// unless `rule.gap` is 0.
pub(crate) fn decisive(fused: &[ScoredChunk], rule: RerankSkip) -> SkipDecision {
    let mut scores: Vec<f32> = fused.iter().map(|c| c.score).collect();
    scores.sort_by(|a, b| b.total_cmp(a));
    if scores.len() < 2 {
        return SkipDecision {
            skip: true,
            gap: None,
            reason: format!(
                "{} candidate(s): nothing for the reranker to reorder",
                scores.len()
            ),
            rule,
        };
    }
    let at = rule.rank.min(scores.len());
    let gap = scores[0] - scores[at - 1];
    let skip = gap.is_finite() && gap >= rule.gap;
    let reason = format!(
        "best fused score {:.4} leads rank {at} ({:.4}) by {gap:.4}, {} skip_gap {}",
        scores[0],
        scores[at - 1],
        if skip { "at or above" } else { "below" },
        rule.gap
    );
    SkipDecision {
        skip,
        gap: Some(gap),
        reason,
        rule,
    }
}

/// What stages 1–5 hand to generation.
struct Retrieved {
    trace: RagTrace,
    context: AssembledContext,
    /// Candidates after fusion (0 means retrieval found nothing at all).
    fused: usize,
}

impl StagedRagPipeline {
    /// Builds the pipeline's components from the factories (unknown names fail here).
    pub fn new(name: &str, options: RagOptions, deps: PipelineDeps) -> Result<Self, QueryError> {
        let transformer = deps
            .transformers
            .create(&options.query_transform.mode, deps.chat.clone())?;
        let reranker = if options.rerank.enabled {
            let ctx = RerankerContext {
                chat: deps.chat.clone(),
                options: &options.rerank,
            };
            Some(deps.rerankers.create(&options.rerank.kind, &ctx)?)
        } else {
            // Even a disabled stage must not hide a misspelt name.
            deps.rerankers.check(&options.rerank.kind)?;
            None
        };
        let tokens = deps.embedder.token_counter();
        tracing::debug!(
            pipeline = name,
            options = %serde_json::to_string(&options).unwrap_or_default(),
            "staged RAG pipeline built"
        );
        Ok(Self {
            name: name.to_string(),
            options,
            deps,
            transformer,
            reranker,
            tokens,
        })
    }

    /// The resolved options this pipeline runs with.
    pub fn options(&self) -> &RagOptions {
        &self.options
    }

    async fn search_one(
        &self,
        collection: &str,
        text: &str,
        k: usize,
    ) -> Result<(Vec<ScoredChunk>, f64, f64), QueryError> {
        let embed_started = Instant::now();
        let vector = self
            .deps
            .embedder
            .embed_query(text)
            .await
            .map_err(|source| QueryError::Embed {
                stage: "retrieve".into(),
                source,
            })?;
        let embed_ms = ms(embed_started);
        let request = SearchRequest {
            mode: if self.options.retrieval.hybrid {
                SearchMode::Hybrid
            } else {
                SearchMode::Vector
            },
            text: Some(text.to_string()),
            vector: Some(vector),
            k,
            rrf_k: self.options.retrieval.rrf_k,
            fusion: self.options.retrieval.fusion,
        };
        let store = self.deps.store.clone();
        let name = collection.to_string();
        // Timed inside the blocking task: the search itself, not the wait for a thread.
        let (result, search_ms) = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let result = store.search(&name, &request);
            (result, ms(started))
        })
        .await
        .map_err(|e| QueryError::Internal {
            stage: "retrieve".into(),
            reason: format!("search task failed: {e}"),
        })?;
        let found = result.map_err(|source| QueryError::Store {
            collection: collection.to_string(),
            source,
        })?;
        Ok((found, embed_ms, search_ms))
    }

    /// Stages 1–5.
    async fn retrieve_and_assemble(&self, q: &RagQuery) -> Result<Retrieved, QueryError> {
        q.check()?;
        let o = &self.options;
        let top_n = o.final_top_n(q.top_n);
        let candidate_k = o.effective_candidate_k(q.top_n);
        let mut trace = RagTrace {
            profile: Some(self.name.clone()),
            ..RagTrace::default()
        };

        // 1. transform
        let started = Instant::now();
        let kind = self.transformer.kind();
        let transformed = if kind == TransformKind::None {
            super::transform::TransformOutput::original(&q.text)
        } else {
            self.transformer
                .transform(&q.text, o.query_transform.variant_count)
                .await?
        };
        let texts = transformed.texts.clone();
        let generated: Vec<&String> = match kind {
            TransformKind::Union | TransformKind::Fusion => texts.iter().skip(1).collect(),
            TransformKind::Replacement if transformed.degraded.is_none() => texts.iter().collect(),
            _ => Vec::new(),
        };
        if kind != TransformKind::None {
            trace.query_variants = texts.clone();
        }
        trace.push(
            "transform",
            ms(started),
            json!({
                "mode": self.transformer.name(),
                "kind": kind.as_str(),
                "variants": generated,
                "variant_n": transformed.generated,
                "requested": if kind == TransformKind::None { 0 } else { o.query_transform.variant_count },
                "retrieval_texts": texts.len(),
                "model": transformed.model,
                "degraded": transformed.degraded,
            }),
        );

        // 2. retrieve
        let started = Instant::now();
        let searches = texts
            .iter()
            .map(|text| self.search_one(&q.collection, text, candidate_k));
        let searched = try_join_all(searches).await?;
        let embed_ms: f64 = searched.iter().map(|(_, e, _)| e).sum();
        let search_ms: f64 = searched.iter().map(|(_, _, s)| s).sum();
        let mut rankings: Vec<Vec<ScoredChunk>> = searched.into_iter().map(|(r, _, _)| r).collect();
        let mut below_floor = 0usize;
        if let Some(floor) = o.retrieval.min_score {
            for ranking in &mut rankings {
                let before = ranking.len();
                ranking.retain(|c| c.score >= floor);
                below_floor += before - ranking.len();
            }
        }
        let per_text: Vec<usize> = rankings.iter().map(Vec::len).collect();
        let retrieved: usize = per_text.iter().sum();
        trace.push(
            "retrieve",
            ms(started),
            json!({
                "candidates": retrieved,
                "per_text": per_text,
                "top_k": top_n,
                "candidate_k": candidate_k,
                "mode": if o.retrieval.hybrid { "hybrid" } else { "vector" },
                "hybrid": o.retrieval.hybrid,
                "rrf_k": o.retrieval.rrf_k,
                "fusion": if o.retrieval.hybrid {
                    o.retrieval.fusion.describe(o.retrieval.rrf_k)
                } else {
                    serde_json::Value::Null
                },
                "variants": texts.len(),
                "min_score": o.retrieval.min_score,
                "below_min_score": below_floor,
                "embedder": self.deps.embedder.profile().model,
                "embed_ms": embed_ms,
                "search_ms": search_ms,
            }),
        );

        // 3. fuse (+ MMR)
        let started = Instant::now();
        let (method, mut fused) = fuse(kind, rankings, o.retrieval.rrf_k, &o.retrieval.fusion);
        let mut detail = json!({
            "method": method.as_str(),
            "in": retrieved,
            "out": fused.len(),
            "mmr": o.retrieval.mmr.enabled,
        });
        match method {
            FuseMethod::Rrf => detail["rrf_k"] = json!(o.retrieval.rrf_k),
            FuseMethod::Convex => {
                detail["normalization"] = json!(o.retrieval.fusion.normalization.as_str());
                detail["weights"] = json!("equal");
            }
            FuseMethod::Dedup | FuseMethod::Union => {}
        }
        let aggregate = o.retrieval.aggregate;
        if aggregate.method != DocumentAggregation::None {
            let (documents, outcome) =
                aggregate_documents(fused, aggregate.method, aggregate.sum_weight);
            fused = documents;
            detail["aggregate"] = json!(aggregate.method.as_str());
            if aggregate.method == DocumentAggregation::MaxSum {
                detail["aggregate_sum_weight"] = json!(aggregate.sum_weight);
            }
            detail["documents"] = json!(outcome.documents);
            detail["collapsed"] = json!(outcome.collapsed);
            detail["out"] = json!(fused.len());
        }
        if o.retrieval.mmr.enabled {
            let (reordered, outcome) = mmr_reorder(fused, o.retrieval.mmr.lambda);
            fused = reordered;
            detail["mmr_lambda"] = json!(outcome.lambda);
            detail["mmr_similarity"] = json!(if outcome.lexical_pairs == 0 {
                "cosine"
            } else {
                "cosine+jaccard-fallback"
            });
            detail["mmr_cosine_pairs"] = json!(outcome.cosine_pairs);
            detail["mmr_lexical_pairs"] = json!(outcome.lexical_pairs);
            detail["mmr_moved"] = json!(outcome.moved);
        }
        let fused_count = fused.len();
        trace.push("fuse", ms(started), detail);

        // 4. rerank
        let started = Instant::now();
        let skip = o.rerank.skip.map(|rule| decisive(&fused, rule));
        let (mut kept, detail) = match &self.reranker {
            Some(reranker) if skip.as_ref().is_some_and(|s| s.skip) => {
                let decided = skip.as_ref().expect("checked above");
                let mut truncated = fused;
                truncated.truncate(top_n);
                let detail = json!({
                    "reranker": reranker.name(),
                    "skipped": "decisive-retrieval",
                    "reason": decided.reason,
                    "gap": decided.gap,
                    "skip_gap": decided.rule.gap,
                    "skip_gap_rank": decided.rule.rank,
                    "candidates": fused_count,
                    "kept": truncated.len(),
                    "top_n": top_n,
                });
                (truncated, detail)
            }
            Some(reranker) => {
                let (kept, mut detail) = self.rerank(reranker.as_ref(), q, fused, top_n).await?;
                if let Some(decided) = &skip {
                    detail["gap"] = json!(decided.gap);
                    detail["skip_gap"] = json!(decided.rule.gap);
                    detail["skip_gap_rank"] = json!(decided.rule.rank);
                }
                (kept, detail)
            }
            None => {
                let mut truncated = fused;
                truncated.truncate(top_n);
                let detail = json!({
                    "reranker": "disabled",
                    "candidates": fused_count,
                    "kept": truncated.len(),
                    "top_n": top_n,
                    "note": "rerank disabled: truncation in retrieval order",
                });
                (truncated, detail)
            }
        };
        kept.truncate(top_n);
        trace.push("rerank", ms(started), detail);

        // 5. assemble
        let started = Instant::now();
        let context = assemble(
            kept,
            o.context.max_tokens,
            o.context.ordering,
            self.tokens.as_ref(),
        );
        trace.push(
            "assemble",
            ms(started),
            serde_json::to_value(context.summary()).unwrap_or_default(),
        );

        Ok(Retrieved {
            trace,
            context,
            fused: fused_count,
        })
    }

    /// Stage 4 with a reranker: the first `rerank.candidates` fused candidates are reranked
    /// (the rest follow in retrieval order), then blended with their retrieval order per
    /// `rerank.blend`. Returns the chunks, best first, and the trace detail.
    async fn rerank(
        &self,
        reranker: &dyn Reranker,
        q: &RagQuery,
        mut fused: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<(Vec<ScoredChunk>, serde_json::Value), QueryError> {
        let o = &self.options;
        let candidates = fused.len();
        let head_n = o.rerank.candidates.unwrap_or(candidates).min(candidates);
        let tail = fused.split_off(head_n);
        let head = fused;
        let settings = BlendSettings {
            blend: o.rerank.blend,
            weight: o.rerank.blend_weight,
            rrf_k: o.retrieval.rrf_k,
            normalization: o.retrieval.fusion.normalization,
        };
        let (mut ranked, outcome) = match o.rerank.blend {
            RerankBlend::Replace => {
                let outcome = reranker.rerank_traced(&q.text, head, top_n).await?;
                (outcome.chunks.clone(), outcome)
            }
            RerankBlend::Rrf | RerankBlend::Convex => {
                let outcome = reranker
                    .rerank_traced(&q.text, head.clone(), head_n)
                    .await?;
                (blend(head, outcome.chunks.clone(), &settings), outcome)
            }
        };
        ranked.extend(tail);
        ranked.truncate(top_n);
        let mut detail = json!({
            "reranker": reranker.name(),
            "model": outcome.model,
            "candidates": candidates,
            "reranked": head_n,
            "kept": ranked.len(),
            "top_n": top_n,
            "blend": o.rerank.blend.as_str(),
            "note": outcome.note,
        });
        if o.rerank.blend != RerankBlend::Replace {
            detail["blend_weight"] = json!(o.rerank.blend_weight);
            match o.rerank.blend {
                RerankBlend::Rrf => detail["rrf_k"] = json!(o.retrieval.rrf_k),
                _ => detail["normalization"] = json!(o.retrieval.fusion.normalization.as_str()),
            }
        }
        if let Some(chars) = o.rerank.max_passage_chars {
            detail["max_passage_chars"] = json!(chars);
        }
        Ok((ranked, detail))
    }

    async fn generate(
        &self,
        q: &RagQuery,
        context: &AssembledContext,
        trace: &mut RagTrace,
    ) -> Result<(String, Vec<crate::types::Citation>), QueryError> {
        let started = Instant::now();
        let step = GenerateStep::new(
            self.deps.chat.as_ref(),
            "generate",
            &self.options.generation,
        )?;
        let answer = step.grounded(&q.text, context).await?;
        trace.push(
            "generate",
            ms(started),
            serde_json::Value::Object(answer.trace_detail()),
        );
        Ok((answer.text, answer.citations))
    }

    async fn check_groundedness(
        &self,
        q: &RagQuery,
        answer: &str,
        context: &AssembledContext,
        trace: &mut RagTrace,
    ) {
        let started = Instant::now();
        if !self.options.groundedness.enabled {
            trace.push("groundedness", 0.0, json!({"skipped": "disabled"}));
            return;
        }
        let Some(checker) = &self.deps.groundedness else {
            trace.push(
                "groundedness",
                0.0,
                json!({"skipped": "no groundedness checker registered"}),
            );
            return;
        };
        match checker.check(&q.text, answer, &context.chunks).await {
            Ok(verdict) => trace.push(
                "groundedness",
                ms(started),
                json!({
                    "checker": checker.name(),
                    "grounded": verdict.grounded,
                    "score": verdict.score,
                    "unsupported_claims": verdict.unsupported_claims,
                }),
            ),
            // The answer stands; the failed verification is reported, not hidden.
            Err(e) => {
                tracing::warn!(checker = checker.name(), error = %e, "groundedness check failed");
                trace.push(
                    "groundedness",
                    ms(started),
                    json!({"checker": checker.name(), "error": e.to_string()}),
                );
            }
        }
    }
}

#[async_trait]
impl RagPipeline for StagedRagPipeline {
    fn name(&self) -> &str {
        &self.name
    }

    async fn query(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span =
            tracing::info_span!("rag_query", pipeline = %self.name, collection = %q.collection);
        async {
            let Retrieved {
                mut trace,
                context,
                fused,
            } = self.retrieve_and_assemble(q).await?;
            if context.chunks.is_empty() {
                // Nothing to ground on: a deterministic answer, and no LLM call.
                let reason = if fused == 0 {
                    "no candidates retrieved"
                } else {
                    "no candidate fitted the context budget"
                };
                trace.push(
                    "generate",
                    0.0,
                    json!({"skipped": "no-context", "reason": reason, "model": null}),
                );
                trace.push("groundedness", 0.0, json!({"skipped": "no-context"}));
                return Ok(RagAnswer {
                    text: no_context_answer(&q.collection),
                    citations: Vec::new(),
                    trace,
                });
            }
            let (text, citations) = self.generate(q, &context, &mut trace).await?;
            self.check_groundedness(q, &text, &context, &mut trace)
                .await;
            Ok(RagAnswer {
                text,
                citations,
                trace,
            })
        }
        .instrument(span)
        .await
    }

    fn retriever(&self) -> Option<&dyn RetrieveOnly> {
        Some(self)
    }
}

#[async_trait]
impl RetrieveOnly for StagedRagPipeline {
    async fn retrieve(&self, q: &RagQuery) -> Result<RagAnswer, QueryError> {
        let span =
            tracing::info_span!("rag_retrieve", pipeline = %self.name, collection = %q.collection);
        async {
            let Retrieved {
                mut trace, context, ..
            } = self.retrieve_and_assemble(q).await?;
            trace.push(
                "generate",
                0.0,
                json!({
                    "skipped": "retrieval-only",
                    "reason": "retrieval-only call: stages 1-5 ran, generation skipped on purpose (no LLM call)",
                    "model": null,
                }),
            );
            trace.push("groundedness", 0.0, json!({"skipped": "retrieval-only"}));
            Ok(RagAnswer {
                text: String::new(),
                citations: all_citations(&context),
                trace,
            })
        }
        .instrument(span)
        .await
    }
}

#[cfg(test)]
mod skip_tests {
    use super::*;
    use crate::query::fuse::tests::chunk;

    fn rule(gap: f32, rank: usize) -> RerankSkip {
        RerankSkip { gap, rank }
    }

    #[test]
    fn the_gap_is_the_best_score_minus_the_one_at_the_rank() {
        let fused = vec![
            chunk("a", 0.9, vec![]),
            chunk("b", 0.5, vec![]),
            chunk("c", 0.4, vec![]),
        ];
        let d = decisive(&fused, rule(0.45, 3));
        assert!(d.skip, "{}", d.reason);
        assert!((d.gap.unwrap() - 0.5).abs() < 1e-6);
        let d = decisive(&fused, rule(0.45, 2));
        assert!(!d.skip, "{}", d.reason);
        assert!((d.gap.unwrap() - 0.4).abs() < 1e-6);
        assert!(d.reason.contains("below"), "{}", d.reason);
        // Fewer candidates than the rank: the last one is compared.
        let d = decisive(&fused, rule(0.45, 10));
        assert!(d.skip && d.reason.contains("rank 3"), "{}", d.reason);
    }

    #[test]
    fn one_candidate_is_skipped_and_equal_scores_are_not() {
        let one = decisive(&[chunk("a", 0.3, vec![])], rule(0.2, 2));
        assert!(one.skip);
        assert_eq!(one.gap, None);
        assert!(one.reason.contains("nothing"), "{}", one.reason);
        assert!(decisive(&[], rule(0.2, 2)).skip);
        let flat = vec![chunk("a", 0.5, vec![]), chunk("b", 0.5, vec![])];
        let d = decisive(&flat, rule(0.1, 2));
        assert!(!d.skip);
        assert_eq!(d.gap, Some(0.0));
        assert!(
            decisive(&flat, rule(0.0, 2)).skip,
            "a zero threshold always skips"
        );
    }
}
