//! Query-side configuration: the `rag:` keys of the query pipeline (as they appear in
//! `config/orkeon.yaml`, each an optional override), the profile presets (`fast`, `balanced`,
//! `quality`, `adaptive`, `corrective`), and [`resolve_options`], which expands a profile into a
//! complete [`RagOptions`] and then applies every configured key on top.
//!
//! Profile = preset, configuration = override: a key left unset takes the preset's value, a key
//! set wins whatever the profile. The key types themselves live with the rest of the
//! configuration, in [`crate::settings::query`], and are re-exported here.

use serde::Serialize;

use super::QueryError;
use crate::fusion::HybridFusion;
use crate::registry::{Label, UnknownName};
use crate::settings::RagSettings;
pub use crate::settings::query::{
    ContextOrdering, ContextSettings, CorrectiveSettings, CorrectiveWebFallbackSettings,
    DocumentAggregation, FusionMethod, GenerationSettings, GroundednessSettings, HybridSettings,
    MmrSettings, Normalization, QueryRoutingSettings, QueryTransformSettings, RerankBlend,
    RerankSettings, RetrievalSettings, WebFallbackSettings,
};

/// Profile names with a preset, in documentation order.
pub const PRESET_PROFILES: &[&str] = &["fast", "balanced", "quality", "adaptive", "corrective"];

/// How an unknown profile name is reported (here and by the profile resolver).
pub const PROFILE_LABEL: Label = Label {
    kind: "RAG profile",
    plural: "profiles",
    key: None,
    advice: Some("Set rag.profile (or ORKEON_RAG__PROFILE) to one of them"),
};

/// The built-in grounded system prompt (`rag.generation.system_prompt` overrides it).
pub const DEFAULT_SYSTEM_PROMPT: &str = "You answer questions using only the numbered context passages you are given. \
Every sentence of your answer that uses a passage must cite it with its marker, like [1] or [2]; cite only markers that appear in the context. \
If the passages do not contain the answer, say that the context does not contain it instead of guessing. \
Do not use outside knowledge and do not invent facts, numbers, names or sources.";

/// Convex fusion's leg weights unless `rag.retrieval.hybrid.{vector,bm25}_weight` say
/// otherwise: 0.7 / 0.3 scored best on both the golden set and SciFact train (0.5 / 0.5 and
/// 0.3 / 0.7 below it; README "Retrieval quality").
pub const DEFAULT_VECTOR_WEIGHT: f32 = 0.7;
pub const DEFAULT_BM25_WEIGHT: f32 = 0.3;

/// Weight of a document's other chunks for `rag.retrieval.aggregate: max-sum` unless
/// `rag.retrieval.aggregate_sum_weight` says otherwise.
pub const DEFAULT_AGGREGATE_SUM_WEIGHT: f32 = 0.1;

/// The rank `rag.rerank.skip_gap` compares the best fused score with, unless
/// `rag.rerank.skip_gap_rank` names another.
pub const DEFAULT_SKIP_GAP_RANK: usize = 2;

/// `balanced`'s (and `quality`'s) `rag.rerank.skip_gap`, measured on their min-max convex
/// hybrid scores, which lie in [0, 1] (a configured gap above 1 never skips there). It applies
/// only to such scores: under another fusion only a configured gap skips.
pub const BALANCED_SKIP_GAP: f32 = 0.2;

/// Cross-encoder model used by the `onnx` reranker unless `rag.rerank.model` names another.
pub const DEFAULT_RERANK_MODEL: &str = "ms-marco-MiniLM-L-12-v2";

// ---------------------------------------------------------------------------------------------
// Resolved options
// ---------------------------------------------------------------------------------------------

/// Every query key resolved: the profile's preset with the configured overrides applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RagOptions {
    /// Profile the preset came from.
    pub profile: String,
    pub retrieval: RetrievalOptions,
    pub query_transform: QueryTransformOptions,
    pub rerank: RerankOptions,
    pub context: ContextOptions,
    pub groundedness: GroundednessOptions,
    pub generation: GenerationOptions,
    pub query_routing: QueryRoutingOptions,
    pub corrective: CorrectiveOptions,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrievalOptions {
    pub top_k: usize,
    pub candidate_k: usize,
    pub min_score: Option<f32>,
    pub hybrid: bool,
    pub rrf_k: f32,
    /// How hybrid search (and `rag-fusion`) combines rankings.
    pub fusion: HybridFusion,
    pub mmr: MmrOptions,
    /// Document-level aggregation of the fused chunk scores.
    pub aggregate: AggregateOptions,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AggregateOptions {
    pub method: DocumentAggregation,
    /// Weight of a document's other chunks' scores (`max-sum`), in [0, 1].
    pub sum_weight: f32,
}

/// When the rerank stage skips its reranker: the best fused score leads the one at `rank`
/// (1-based) by at least `gap`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RerankSkip {
    pub gap: f32,
    pub rank: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MmrOptions {
    pub enabled: bool,
    pub lambda: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryTransformOptions {
    pub mode: String,
    pub variant_count: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerankOptions {
    pub enabled: bool,
    pub kind: String,
    pub top_n: usize,
    pub model: String,
    pub blend: RerankBlend,
    /// Weight of the reranker in a blend, in [0, 1].
    pub blend_weight: f32,
    /// Candidates the reranker reads (`None`: all).
    pub candidates: Option<usize>,
    /// Passage cut before the cross-encoder reads it, in characters (`None`: whole passages).
    pub max_passage_chars: Option<usize>,
    /// Skip the reranker when retrieval is decisive (`None`: always rerank).
    pub skip: Option<RerankSkip>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextOptions {
    pub max_tokens: usize,
    pub ordering: ContextOrdering,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroundednessOptions {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationOptions {
    pub system_prompt: String,
    pub temperature: Option<f32>,
    pub max_output_tokens: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryRoutingOptions {
    pub classifier: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorrectiveOptions {
    pub max_iterations: u32,
    pub web_fallback_enabled: bool,
    pub web_fallback_max_results: usize,
}

impl RagOptions {
    /// Chunks the context should hold for a query: the query's `top_n`, else the rerank
    /// stage's `top_n` when it runs, else `retrieval.top_k`.
    pub fn final_top_n(&self, query_top_n: Option<usize>) -> usize {
        query_top_n.unwrap_or(if self.rerank.enabled {
            self.rerank.top_n
        } else {
            self.retrieval.top_k
        })
    }

    /// Candidates retrieved per text for a query: `candidate_k`, never below the final top-n.
    pub fn effective_candidate_k(&self, query_top_n: Option<usize>) -> usize {
        self.retrieval
            .candidate_k
            .max(self.final_top_n(query_top_n))
    }
}

/// What a preset decides; everything else has one default for all profiles.
struct Preset {
    hybrid: bool,
    /// `None`: candidate_k equals top_k (the `fast` cascade has no wide stage).
    candidate_k: Option<usize>,
    rerank_enabled: bool,
    rerank_kind: &'static str,
    groundedness: bool,
    fusion: FusionMethod,
    blend: RerankBlend,
    rerank_candidates: Option<usize>,
    max_passage_chars: Option<usize>,
    aggregate: DocumentAggregation,
    /// `rag.rerank.skip_gap` unless the key says otherwise (`None`: always rerank).
    skip_gap: Option<f32>,
}

impl Preset {
    /// The historical cascade: RRF hybrid, the reranker's order replacing the retrieval order,
    /// every candidate reranked in full.
    const fn plain(
        hybrid: bool,
        candidate_k: Option<usize>,
        rerank_enabled: bool,
        rerank_kind: &'static str,
        groundedness: bool,
    ) -> Self {
        Self {
            hybrid,
            candidate_k,
            rerank_enabled,
            rerank_kind,
            groundedness,
            fusion: FusionMethod::Rrf,
            blend: RerankBlend::Replace,
            rerank_candidates: None,
            max_passage_chars: None,
            aggregate: DocumentAggregation::None,
            skip_gap: None,
        }
    }
}

/// `balanced`'s cascade, chosen by the average nDCG@10 over the golden set, the BEIR fixture
/// and SciFact train (README "Retrieval quality"): convex hybrid fusion, the cross-encoder
/// reading the 20 best candidates cut to 600 characters, its order blended (convex, weight
/// 0.5) with the retrieval order instead of replacing it, and not read at all when the best
/// fused score leads the second by 0.2 or more (as good or better on all three datasets, and
/// the cross-encoder's cost saved on about 40 % of SciFact's claims).
const BALANCED: Preset = Preset {
    hybrid: true,
    candidate_k: Some(50),
    rerank_enabled: true,
    rerank_kind: "onnx",
    groundedness: false,
    fusion: FusionMethod::Convex,
    blend: RerankBlend::Convex,
    rerank_candidates: Some(20),
    max_passage_chars: Some(600),
    aggregate: DocumentAggregation::None,
    skip_gap: Some(BALANCED_SKIP_GAP),
};

fn preset(profile: &str) -> Option<Preset> {
    let p = match profile {
        "fast" => Preset::plain(false, None, false, "none", false),
        "balanced" => BALANCED,
        // Balanced's ranking (no measured option ranked better on average) and the
        // groundedness check.
        "quality" => Preset {
            groundedness: true,
            ..BALANCED
        },
        // Adaptive routes single-shot queries to the balanced settings.
        "adaptive" => BALANCED,
        // The corrective graph corrects by looping, not reranking, and runs its own
        // groundedness node: the linear stage 7 stays off.
        "corrective" => Preset::plain(true, Some(50), false, "none", false),
        _ => return None,
    };
    Some(p)
}

fn invalid(key: &str, reason: impl Into<String>) -> QueryError {
    QueryError::InvalidOption {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn positive(key: &str, value: usize) -> Result<usize, QueryError> {
    if value == 0 {
        Err(invalid(key, "must be at least 1"))
    } else {
        Ok(value)
    }
}

fn component_name(key: &str, value: &str) -> Result<String, QueryError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        Err(invalid(key, "must name a component, found an empty string"))
    } else {
        Ok(trimmed.to_ascii_lowercase())
    }
}

/// Expands `profile` (case-insensitive) into its preset, then applies every key set in
/// `settings`. Unknown profiles fail listing the known ones; out-of-range values fail naming the
/// key.
pub fn resolve_options(profile: &str, settings: &RagSettings) -> Result<RagOptions, QueryError> {
    let profile = profile.trim().to_ascii_lowercase();
    let preset = preset(&profile).ok_or_else(|| {
        QueryError::UnknownProfile(UnknownName::new(
            &PROFILE_LABEL,
            &profile,
            PRESET_PROFILES.iter().map(|s| s.to_string()).collect(),
        ))
    })?;

    let r = &settings.retrieval;
    let top_k = positive("retrieval.top_k", r.top_k.unwrap_or(5))?;
    let candidate_k = positive(
        "retrieval.candidate_k",
        r.candidate_k.or(preset.candidate_k).unwrap_or(top_k),
    )?;
    if let Some(min) = r.min_score
        && !min.is_finite()
    {
        return Err(invalid("retrieval.min_score", "must be a finite number"));
    }
    let rrf_k = r.hybrid.rrf_k.unwrap_or(settings.store.rrf_k);
    if !(rrf_k.is_finite() && rrf_k > 0.0) {
        return Err(invalid(
            "retrieval.hybrid.rrf_k",
            format!("must be a positive number, found {rrf_k}"),
        ));
    }
    let h = &r.hybrid;
    let fusion = HybridFusion {
        method: h.fusion.unwrap_or(preset.fusion),
        normalization: h.normalization.unwrap_or_default(),
        vector_weight: h.vector_weight.unwrap_or(DEFAULT_VECTOR_WEIGHT),
        bm25_weight: h.bm25_weight.unwrap_or(DEFAULT_BM25_WEIGHT),
    };
    crate::fusion::check_weights(&[
        (
            "retrieval.hybrid.vector_weight",
            fusion.vector_weight as f64,
        ),
        ("retrieval.hybrid.bm25_weight", fusion.bm25_weight as f64),
    ])
    .map_err(|reason| invalid("retrieval.hybrid", reason))?;
    let sum_weight = r
        .aggregate_sum_weight
        .unwrap_or(DEFAULT_AGGREGATE_SUM_WEIGHT);
    if !(sum_weight.is_finite() && (0.0..=1.0).contains(&sum_weight)) {
        return Err(invalid(
            "retrieval.aggregate_sum_weight",
            format!("must lie in [0, 1], found {sum_weight}"),
        ));
    }
    let lambda = r.mmr.lambda.unwrap_or(0.7);
    if !(0.0..=1.0).contains(&lambda) {
        return Err(invalid(
            "retrieval.mmr.lambda",
            format!("must lie in [0, 1], found {lambda}"),
        ));
    }

    let t = &settings.query_transform;
    let mode = component_name("query_transform.mode", t.mode.as_deref().unwrap_or("none"))?;
    let variant_count = positive(
        "query_transform.variant_count",
        t.variant_count.unwrap_or(3),
    )?;

    let rr = &settings.rerank;
    let kind = component_name(
        "rerank.kind",
        rr.kind.as_deref().unwrap_or(preset.rerank_kind),
    )?;
    let rerank_top_n = positive("rerank.top_n", rr.top_n.unwrap_or(5))?;
    let model = rr
        .model
        .clone()
        .unwrap_or_else(|| DEFAULT_RERANK_MODEL.to_string());
    if model.trim().is_empty() {
        return Err(invalid("rerank.model", "must name a model folder or path"));
    }
    let blend_weight = rr.blend_weight.unwrap_or(0.5);
    if !(blend_weight.is_finite() && (0.0..=1.0).contains(&blend_weight)) {
        return Err(invalid(
            "rerank.blend_weight",
            format!("must lie in [0, 1], found {blend_weight}"),
        ));
    }
    let rerank_candidates = rr
        .candidates
        .or(preset.rerank_candidates)
        .map(|n| positive("rerank.candidates", n))
        .transpose()?;
    let max_passage_chars = rr
        .max_passage_chars
        .or(preset.max_passage_chars)
        .map(|n| positive("rerank.max_passage_chars", n))
        .transpose()?;

    // The preset's gap was measured on min-max convex hybrid scores, which lie in [0, 1]; other
    // fusions score in other units (RRF's leads are a few hundredths, z-scores spread past 1),
    // so there only a configured `rerank.skip_gap` skips the reranker.
    let hybrid = r.hybrid.enabled.unwrap_or(preset.hybrid);
    let min_max_convex = hybrid
        && fusion.method == FusionMethod::Convex
        && fusion.normalization == Normalization::MinMax;
    let preset_gap = preset.skip_gap.filter(|_| min_max_convex);
    let skip = match rr.skip_gap.or(preset_gap) {
        None => None,
        Some(gap) if !(gap.is_finite() && gap >= 0.0) => {
            return Err(invalid(
                "rerank.skip_gap",
                format!("must be a finite number at least 0, found {gap}"),
            ));
        }
        Some(gap) => {
            let rank = rr.skip_gap_rank.unwrap_or(DEFAULT_SKIP_GAP_RANK);
            if rank < 2 {
                return Err(invalid(
                    "rerank.skip_gap_rank",
                    format!("must be at least 2 (the best score is rank 1), found {rank}"),
                ));
            }
            Some(RerankSkip { gap, rank })
        }
    };

    let max_tokens = positive(
        "context.max_tokens",
        settings.context.max_tokens.unwrap_or(2000),
    )?;

    let g = &settings.generation;
    let system_prompt = g
        .system_prompt
        .clone()
        .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string());
    if system_prompt.trim().is_empty() {
        return Err(invalid(
            "generation.system_prompt",
            "is empty; remove the key to use the built-in grounded prompt",
        ));
    }
    if let Some(t) = g.temperature
        && !(t.is_finite() && (0.0..=2.0).contains(&t))
    {
        return Err(invalid(
            "generation.temperature",
            format!("must lie in [0, 2], found {t}"),
        ));
    }

    let classifier = component_name(
        "query_routing.classifier",
        settings
            .query_routing
            .classifier
            .as_deref()
            .unwrap_or("heuristic"),
    )?;
    let c = &settings.corrective;
    let max_iterations = c.max_iterations.unwrap_or(3);

    Ok(RagOptions {
        profile,
        retrieval: RetrievalOptions {
            top_k,
            candidate_k,
            min_score: r.min_score,
            hybrid,
            rrf_k,
            fusion,
            mmr: MmrOptions {
                enabled: r.mmr.enabled.unwrap_or(false),
                lambda,
            },
            aggregate: AggregateOptions {
                method: r.aggregate.unwrap_or(preset.aggregate),
                sum_weight,
            },
        },
        query_transform: QueryTransformOptions {
            mode,
            variant_count,
        },
        rerank: RerankOptions {
            enabled: rr.enabled.unwrap_or(preset.rerank_enabled),
            kind,
            top_n: rerank_top_n,
            model,
            blend: rr.blend.unwrap_or(preset.blend),
            blend_weight,
            candidates: rerank_candidates,
            max_passage_chars,
            skip,
        },
        context: ContextOptions {
            max_tokens,
            ordering: settings.context.ordering.unwrap_or_default(),
        },
        groundedness: GroundednessOptions {
            enabled: settings.groundedness.enabled.unwrap_or(preset.groundedness),
        },
        generation: GenerationOptions {
            system_prompt,
            temperature: g.temperature,
            max_output_tokens: g.max_output_tokens,
        },
        query_routing: QueryRoutingOptions { classifier },
        corrective: CorrectiveOptions {
            max_iterations,
            web_fallback_enabled: c.web_fallback.enabled.unwrap_or(false),
            web_fallback_max_results: c.web_fallback.max_results.unwrap_or(3),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_from_json(value: serde_json::Value) -> RagSettings {
        serde_json::from_value(value).expect("settings deserialize")
    }

    #[test]
    fn fast_is_vector_only_with_candidate_k_equal_to_top_k() {
        let o = resolve_options("fast", &RagSettings::default()).unwrap();
        assert_eq!(o.profile, "fast");
        assert!(!o.retrieval.hybrid);
        assert_eq!(o.retrieval.top_k, 5);
        assert_eq!(o.retrieval.candidate_k, 5);
        assert!(!o.rerank.enabled);
        assert_eq!(o.rerank.kind, "none");
        assert!(!o.groundedness.enabled);
        assert_eq!(o.context.max_tokens, 2000);
        assert_eq!(o.context.ordering, ContextOrdering::Edges);
        assert_eq!(o.retrieval.rrf_k, 60.0);
        assert_eq!(o.retrieval.mmr.lambda, 0.7);
        assert!(!o.retrieval.mmr.enabled);
        assert_eq!(o.query_transform.mode, "none");
        assert_eq!(o.query_transform.variant_count, 3);
        assert_eq!(o.generation.system_prompt, DEFAULT_SYSTEM_PROMPT);

        // The fast cascade follows an overridden top_k.
        let s = settings_from_json(serde_json::json!({"retrieval": {"top_k": 8}}));
        let o = resolve_options("fast", &s).unwrap();
        assert_eq!((o.retrieval.top_k, o.retrieval.candidate_k), (8, 8));
    }

    #[test]
    fn balanced_and_quality_follow_the_reference_table() {
        let b = resolve_options("balanced", &RagSettings::default()).unwrap();
        assert!(b.retrieval.hybrid);
        assert_eq!(b.retrieval.candidate_k, 50);
        assert!(b.rerank.enabled);
        assert_eq!(b.rerank.kind, "onnx");
        assert_eq!(b.rerank.top_n, 5);
        assert_eq!(b.rerank.model, DEFAULT_RERANK_MODEL);
        assert!(!b.groundedness.enabled);
        assert_eq!(b.rerank.blend_weight, 0.5);
        assert_eq!(b.rerank.blend, RerankBlend::Convex);
        assert_eq!(b.rerank.candidates, Some(20));
        assert_eq!(b.rerank.max_passage_chars, Some(600));
        assert_eq!(
            b.retrieval.fusion,
            HybridFusion::convex(Normalization::MinMax, 0.7, 0.3)
        );

        let q = resolve_options("Quality", &RagSettings::default()).unwrap();
        assert_eq!(q.profile, "quality");
        assert!(q.retrieval.hybrid);
        assert_eq!(q.retrieval.candidate_k, 50);
        assert!(q.rerank.enabled);
        assert_eq!(q.rerank.kind, "onnx");
        assert!(q.groundedness.enabled);
        assert_eq!(q.retrieval.fusion, b.retrieval.fusion);
        assert_eq!(
            (q.rerank.blend, q.rerank.candidates),
            (b.rerank.blend, b.rerank.candidates)
        );
        // Chunks rank on their own unless a profile or key says otherwise; the reranker is
        // skipped when retrieval is decisive.
        assert_eq!(b.retrieval.aggregate.method, DocumentAggregation::None);
        assert_eq!(
            b.retrieval.aggregate.sum_weight,
            DEFAULT_AGGREGATE_SUM_WEIGHT
        );
        let decisive = Some(RerankSkip {
            gap: BALANCED_SKIP_GAP,
            rank: DEFAULT_SKIP_GAP_RANK,
        });
        assert_eq!(b.rerank.skip, decisive);
        assert_eq!(q.rerank.skip, decisive);

        let c = resolve_options("corrective", &RagSettings::default()).unwrap();
        assert!(c.retrieval.hybrid);
        assert!(!c.rerank.enabled);
        assert!(!c.groundedness.enabled);
        assert_eq!(c.corrective.max_iterations, 3);
    }

    #[test]
    fn every_key_overrides_the_preset() {
        let s = settings_from_json(serde_json::json!({
            "profile": "balanced",
            "retrieval": {"top_k": 7, "candidate_k": 20, "min_score": 0.2,
                          "hybrid": {"enabled": false, "rrf_k": 30.0, "fusion": "convex",
                                     "normalization": "zscore", "vector_weight": 0.8,
                                     "bm25_weight": 0.2},
                          "mmr": {"enabled": true, "lambda": 0.5}},
            "query_transform": {"mode": "Multi-Query", "variant_count": 4},
            "rerank": {"enabled": true, "kind": "LLM", "top_n": 3, "model": "/models/x",
                       "blend": "convex", "blend_weight": 0.3, "candidates": 12,
                       "max_passage_chars": 400, "skip_gap": 1.5, "skip_gap_rank": 3},
            "context": {"max_tokens": 900, "ordering": "linear"},
            "groundedness": {"enabled": true},
            "generation": {"system_prompt": "Be terse.", "temperature": 0.1, "max_output_tokens": 200},
            "query_routing": {"classifier": "llm"},
            "corrective": {"max_iterations": 2, "web_fallback": {"enabled": true, "max_results": 5}}
        }));
        let o = resolve_options("balanced", &s).unwrap();
        assert_eq!(o.retrieval.top_k, 7);
        assert_eq!(o.retrieval.candidate_k, 20);
        assert_eq!(o.retrieval.min_score, Some(0.2));
        assert!(!o.retrieval.hybrid);
        assert_eq!(o.retrieval.rrf_k, 30.0);
        assert!(o.retrieval.mmr.enabled);
        assert_eq!(o.retrieval.mmr.lambda, 0.5);
        assert_eq!(o.query_transform.mode, "multi-query");
        assert_eq!(o.query_transform.variant_count, 4);
        assert_eq!(o.rerank.kind, "llm");
        assert_eq!(o.rerank.top_n, 3);
        assert_eq!(o.rerank.model, "/models/x");
        assert_eq!(o.rerank.blend, RerankBlend::Convex);
        assert_eq!(o.rerank.blend_weight, 0.3);
        assert_eq!(o.rerank.candidates, Some(12));
        assert_eq!(o.rerank.max_passage_chars, Some(400));
        assert_eq!(o.rerank.skip, Some(RerankSkip { gap: 1.5, rank: 3 }));
        assert_eq!(
            o.retrieval.fusion,
            HybridFusion::convex(Normalization::ZScore, 0.8, 0.2)
        );
        assert_eq!(o.context.max_tokens, 900);
        assert_eq!(o.context.ordering, ContextOrdering::Linear);
        assert!(o.groundedness.enabled);
        assert_eq!(o.generation.system_prompt, "Be terse.");
        assert_eq!(o.generation.temperature, Some(0.1));
        assert_eq!(o.generation.max_output_tokens, Some(200));
        assert_eq!(o.query_routing.classifier, "llm");
        assert_eq!(o.corrective.max_iterations, 2);
        assert!(o.corrective.web_fallback_enabled);
        assert_eq!(o.corrective.web_fallback_max_results, 5);

        // The same overrides bend the fast preset too.
        let f = resolve_options("fast", &s).unwrap();
        assert!(f.rerank.enabled);
        assert_eq!(f.retrieval.candidate_k, 20);
    }

    /// `balanced`'s preset gap is in min-max convex units: with another fusion, or without
    /// hybrid search, it does not apply and the reranker always runs unless a gap is configured.
    #[test]
    fn the_preset_skip_gap_applies_only_to_min_max_convex_hybrid_scores() {
        let decisive = Some(RerankSkip {
            gap: BALANCED_SKIP_GAP,
            rank: DEFAULT_SKIP_GAP_RANK,
        });
        let with = |retrieval: serde_json::Value| {
            let s = settings_from_json(serde_json::json!({ "retrieval": retrieval }));
            resolve_options("balanced", &s).unwrap().rerank.skip
        };
        assert_eq!(with(serde_json::json!({})), decisive);
        assert_eq!(with(serde_json::json!({"hybrid": {"fusion": "rrf"}})), None);
        assert_eq!(
            with(serde_json::json!({"hybrid": {"normalization": "zscore"}})),
            None
        );
        assert_eq!(
            with(serde_json::json!({"hybrid": {"enabled": false}})),
            None
        );
        // A configured gap is the user's, in whatever units they chose.
        let s = settings_from_json(serde_json::json!({
            "retrieval": {"hybrid": {"fusion": "rrf"}},
            "rerank": {"skip_gap": 0.01}
        }));
        assert_eq!(
            resolve_options("balanced", &s).unwrap().rerank.skip,
            Some(RerankSkip {
                gap: 0.01,
                rank: DEFAULT_SKIP_GAP_RANK
            })
        );
    }

    #[test]
    fn hybrid_accepts_the_flat_shorthand_and_the_section() {
        let flat = settings_from_json(serde_json::json!({"retrieval": {"hybrid": true}}));
        assert_eq!(flat.retrieval.hybrid.enabled, Some(true));
        assert!(resolve_options("fast", &flat).unwrap().retrieval.hybrid);

        let env_style = settings_from_json(serde_json::json!({"retrieval": {"hybrid": "false"}}));
        assert_eq!(env_style.retrieval.hybrid.enabled, Some(false));
        assert!(
            !resolve_options("balanced", &env_style)
                .unwrap()
                .retrieval
                .hybrid
        );

        let section =
            settings_from_json(serde_json::json!({"retrieval": {"hybrid": {"rrf_k": 10}}}));
        assert_eq!(section.retrieval.hybrid.enabled, None);
        assert_eq!(
            resolve_options("fast", &section).unwrap().retrieval.rrf_k,
            10.0
        );

        let typo: Result<RagSettings, _> =
            serde_json::from_value(serde_json::json!({"retrieval": {"hybrid": {"enable": true}}}));
        let err = typo.unwrap_err().to_string();
        assert!(err.contains("enable"), "{err}");
    }

    #[test]
    fn unknown_profile_lists_the_known_ones() {
        let err = resolve_options("turbo", &RagSettings::default()).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, QueryError::UnknownProfile { .. }));
        for name in PRESET_PROFILES {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("turbo"));
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        let cases = [
            (
                serde_json::json!({"retrieval": {"mmr": {"lambda": 1.5}}}),
                "retrieval.mmr.lambda",
            ),
            (
                serde_json::json!({"retrieval": {"top_k": 0}}),
                "retrieval.top_k",
            ),
            (
                serde_json::json!({"context": {"max_tokens": 0}}),
                "context.max_tokens",
            ),
            (serde_json::json!({"rerank": {"kind": " "}}), "rerank.kind"),
            (
                serde_json::json!({"rerank": {"candidates": 0}}),
                "rerank.candidates",
            ),
            (
                serde_json::json!({"rerank": {"max_passage_chars": 0}}),
                "rerank.max_passage_chars",
            ),
            (
                serde_json::json!({"retrieval": {"hybrid": {"vector_weight": 0, "bm25_weight": 0}}}),
                "retrieval.hybrid",
            ),
            (
                serde_json::json!({"retrieval": {"hybrid": {"rrf_k": 0}}}),
                "retrieval.hybrid.rrf_k",
            ),
        ];
        for (json, key) in cases {
            let err = resolve_options("fast", &settings_from_json(json)).unwrap_err();
            assert!(err.to_string().contains(key), "{err} should name {key}");
        }
        let bad_ordering: Result<RagSettings, _> =
            serde_json::from_value(serde_json::json!({"context": {"ordering": "middle"}}));
        assert!(bad_ordering.unwrap_err().to_string().contains("edges"));
    }

    #[test]
    fn final_top_n_and_candidate_k_never_below_it() {
        let fast = resolve_options("fast", &RagSettings::default()).unwrap();
        assert_eq!(fast.final_top_n(None), 5);
        assert_eq!(fast.final_top_n(Some(9)), 9);
        assert_eq!(fast.effective_candidate_k(Some(9)), 9);
        let balanced = resolve_options("balanced", &RagSettings::default()).unwrap();
        assert_eq!(balanced.effective_candidate_k(Some(9)), 50);
        assert_eq!(balanced.effective_candidate_k(Some(80)), 80);
    }
}
