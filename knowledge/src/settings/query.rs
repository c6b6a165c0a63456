//! The query-side keys of the `rag:` section (`rag.retrieval`, `rag.query_transform`,
//! `rag.rerank`, `rag.context`, `rag.groundedness`, `rag.generation`, `rag.query_routing`,
//! `rag.corrective`, `rag.web_fallback`), every key optional: unset = the profile preset's value.
//! The query pipeline's options module expands a profile and applies them (and re-exports
//! these types).

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::SuspiciousAction;
pub use crate::fusion::{FusionMethod, Normalization};

/// `rag.retrieval:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalSettings {
    /// Chunks kept for context assembly (default 5; a query's `top_n` wins).
    pub top_k: Option<usize>,
    /// Candidates retrieved per retrieval text (the wide stage of the cascade; never below the
    /// final top-n). Preset: `fast` = top_k, `balanced` and `quality` 50.
    pub candidate_k: Option<usize>,
    /// Optional raw-score floor applied to store results (no floor by default).
    pub min_score: Option<f32>,
    /// `hybrid: true|false` or `hybrid: { enabled, rrf_k, fusion, normalization, vector_weight,
    /// bm25_weight }`.
    pub hybrid: HybridSettings,
    pub mmr: MmrSettings,
    /// Document-level aggregation of chunk scores after fusion: `none` (default: every chunk
    /// ranks on its own), `max` (a document's chunks collapse to its best one) or `max-sum`
    /// (the best chunk, its score raised by `aggregate_sum_weight` × the sum of the document's
    /// other positive chunk scores). Preset per profile.
    pub aggregate: Option<DocumentAggregation>,
    /// Weight of the other chunks' scores for `aggregate: max-sum`, in [0, 1] (default 0.1).
    pub aggregate_sum_weight: Option<f32>,
}

/// `rag.retrieval.aggregate`: how the chunks of one document (one source id) are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DocumentAggregation {
    /// Every chunk ranks on its own.
    #[default]
    None,
    /// A document ranks by its best chunk; its other chunks are dropped.
    Max,
    /// A document ranks by its best chunk plus a bonus for its other chunks' scores.
    #[serde(alias = "max_sum", alias = "maxsum")]
    MaxSum,
}

impl DocumentAggregation {
    pub fn as_str(self) -> &'static str {
        match self {
            DocumentAggregation::None => "none",
            DocumentAggregation::Max => "max",
            DocumentAggregation::MaxSum => "max-sum",
        }
    }
}

/// `rag.retrieval.hybrid:` — also accepts the flat shorthand `hybrid: true`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HybridSettings {
    /// BM25 + vector fused (preset: off for `fast`, on otherwise).
    pub enabled: Option<bool>,
    /// Reciprocal Rank Fusion constant, shared by hybrid search and `rag-fusion` (default:
    /// `rag.store.rrf_k`, 60).
    pub rrf_k: Option<f32>,
    /// How the legs are combined, in hybrid search and for `rag-fusion`: `rrf` (ranks only) or
    /// `convex` (weighted sum of per-leg normalised scores). Preset per profile.
    pub fusion: Option<FusionMethod>,
    /// Per-leg normalisation for `convex`: `minmax` (default) or `zscore`.
    pub normalization: Option<Normalization>,
    /// Weight of the vector leg for `convex` (default 0.7).
    pub vector_weight: Option<f32>,
    /// Weight of the BM25 leg for `convex` (default 0.3).
    pub bm25_weight: Option<f32>,
}

#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
struct HybridSection {
    enabled: Option<bool>,
    rrf_k: Option<f32>,
    fusion: Option<FusionMethod>,
    normalization: Option<Normalization>,
    vector_weight: Option<f32>,
    bm25_weight: Option<f32>,
}

impl<'de> Deserialize<'de> for HybridSettings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HybridVisitor;

        impl<'de> Visitor<'de> for HybridVisitor {
            type Value = HybridSettings;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a boolean (hybrid: true) or a map with `enabled`, `rrf_k`, `fusion`, \
                     `normalization`, `vector_weight` and `bm25_weight`",
                )
            }

            fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
                Ok(HybridSettings {
                    enabled: Some(value),
                    ..HybridSettings::default()
                })
            }

            // Environment layers deliver `ORKEON_RAG__RETRIEVAL__HYBRID=true` as a string.
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                match value.trim().to_ascii_lowercase().as_str() {
                    "true" => self.visit_bool(true),
                    "false" => self.visit_bool(false),
                    other => Err(E::custom(format!(
                        "expected true or false for rag.retrieval.hybrid, found '{other}'"
                    ))),
                }
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(HybridSettings::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let section =
                    HybridSection::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(HybridSettings {
                    enabled: section.enabled,
                    rrf_k: section.rrf_k,
                    fusion: section.fusion,
                    normalization: section.normalization,
                    vector_weight: section.vector_weight,
                    bm25_weight: section.bm25_weight,
                })
            }
        }

        deserializer.deserialize_any(HybridVisitor)
    }
}

/// `rag.retrieval.mmr:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MmrSettings {
    /// MMR diversification at the fuse stage (default off).
    pub enabled: Option<bool>,
    /// Relevance/diversity trade-off in [0, 1] (default 0.7, relevance-leaning).
    pub lambda: Option<f32>,
}

/// `rag.query_transform:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryTransformSettings {
    /// `none` (default), `multi-query`, `rag-fusion`, `hyde`, or a registered name.
    pub mode: Option<String>,
    /// Variants requested from non-`none` transformers (default 3).
    pub variant_count: Option<usize>,
}

/// `rag.rerank:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerankSettings {
    /// Whether the rerank stage runs (preset: off for `fast`; disabled = truncation in
    /// retrieval order).
    pub enabled: Option<bool>,
    /// `none`, `llm`, `onnx`, or a registered name (aliases accepted).
    pub kind: Option<String>,
    /// Chunks kept after reranking (default 5; a query's `top_n` wins).
    pub top_n: Option<usize>,
    /// Cross-encoder model folder name or path for the `onnx` reranker
    /// (default `ms-marco-MiniLM-L-12-v2`).
    pub model: Option<String>,
    /// How the reranker's ranking meets the retrieval ranking: `replace` (the reranker's order
    /// alone), `rrf` or `convex` (fused with the retrieval ranking). Preset per profile.
    pub blend: Option<RerankBlend>,
    /// Weight of the reranker in a blend, in [0, 1]; the retrieval ranking gets the rest
    /// (default 0.5).
    pub blend_weight: Option<f32>,
    /// Rerank only the first this many fused candidates; the others follow in retrieval order
    /// (default: all of them). Preset per profile.
    pub candidates: Option<usize>,
    /// Cut each passage to about this many characters (at a word boundary) before the
    /// cross-encoder reads it (default: whole passages, up to the model's token limit).
    /// Preset per profile.
    pub max_passage_chars: Option<usize>,
    /// Skip the reranker when retrieval is already decisive: when the best fused score leads
    /// the one at rank `skip_gap_rank` by at least this much (in the fused score's units:
    /// min-max convex scores lie in [0, 1]). Preset per profile: `balanced` and `quality` 0.2,
    /// which applies to min-max convex hybrid scores only (under another fusion only a
    /// configured gap skips); the others always rerank; a gap above 1 never skips with min-max
    /// convex fusion. The `rerank` trace step says when it skipped and why.
    pub skip_gap: Option<f32>,
    /// The rank the best fused score is compared with for `skip_gap` (at least 2, default 2).
    pub skip_gap_rank: Option<usize>,
}

/// `rag.rerank.blend`: how the reranker's ranking meets the retrieval ranking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RerankBlend {
    /// The reranker's order replaces the retrieval order.
    #[default]
    Replace,
    /// Reciprocal Rank Fusion of the two rankings (`rag.retrieval.hybrid.rrf_k`).
    Rrf,
    /// Weighted sum of the two rankings' normalised scores
    /// (`rag.retrieval.hybrid.normalization`).
    Convex,
}

impl RerankBlend {
    pub fn as_str(self) -> &'static str {
        match self {
            RerankBlend::Replace => "replace",
            RerankBlend::Rrf => "rrf",
            RerankBlend::Convex => "convex",
        }
    }
}

/// Layout of the assembled context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextOrdering {
    /// Anti-Lost-in-the-Middle: r1, r3, r5, … from the head, …, r6, r4, r2 closing the tail.
    #[default]
    Edges,
    /// Plain rank order.
    Linear,
}

impl ContextOrdering {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextOrdering::Edges => "edges",
            ContextOrdering::Linear => "linear",
        }
    }
}

/// `rag.context:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextSettings {
    /// Context budget in embedding-tokenizer tokens (default 2000); excess chunks are dropped,
    /// the budget is never overrun.
    pub max_tokens: Option<usize>,
    /// `edges` (default) or `linear`.
    pub ordering: Option<ContextOrdering>,
}

/// `rag.groundedness:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroundednessSettings {
    /// Post-generation verification (preset: on for `quality`); traced as skipped when no
    /// checker is available.
    pub enabled: Option<bool>,
}

/// `rag.generation:`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerationSettings {
    /// Replaces the built-in grounded system prompt.
    pub system_prompt: Option<String>,
    /// Sampling passed to the chat model (unset: the model's own setting).
    pub temperature: Option<f32>,
    pub max_output_tokens: Option<u32>,
}

/// `rag.query_routing:` (adaptive profile)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryRoutingSettings {
    /// `heuristic` (default) or `llm`.
    pub classifier: Option<String>,
}

/// `rag.corrective:` (corrective profile)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorrectiveSettings {
    /// Query-rewrite budget (default 3).
    pub max_iterations: Option<u32>,
    pub web_fallback: CorrectiveWebFallbackSettings,
}

/// `rag.corrective.web_fallback:` — pipeline-side policy: may the graph route to web fallback.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorrectiveWebFallbackSettings {
    /// Default false.
    pub enabled: Option<bool>,
    /// Web documents the graph asks for (default 3).
    pub max_results: Option<usize>,
}

/// `rag.web_fallback:` — transport of the web retriever (SearxNG-compatible search + page
/// download). Separate from the pipeline policy on purpose: both must be enabled for a web
/// document to ever reach a pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebFallbackSettings {
    pub enabled: bool,
    /// Search endpoint (SearxNG-compatible JSON API).
    pub endpoint: Option<String>,
    /// Name of the environment variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    pub max_results: usize,
    pub timeout_ms: u64,
    pub suspicious_action: SuspiciousAction,
}

impl Default for WebFallbackSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: None,
            api_key_env: None,
            max_results: 3,
            timeout_ms: 10_000,
            suspicious_action: SuspiciousAction::Flag,
        }
    }
}
