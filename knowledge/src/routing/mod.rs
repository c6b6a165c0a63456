//! Adaptive routing (Adaptive-RAG): a [`QueryComplexityClassifier`] decides how much machinery
//! a question needs, and [`AdaptiveRagPipeline`] runs it.
//!
//! - [`QueryRoute::NoRetrieval`] — greetings and chit-chat: a direct LLM answer, no citations;
//! - [`QueryRoute::SingleShot`] — a short single-fact question: the memoised `balanced` pipeline;
//! - [`QueryRoute::Iterative`] — multi-part, comparative or multi-hop: the memoised `corrective`
//!   graph pipeline.
//!
//! Classifiers (`rag.query_routing.classifier`): `heuristic` (default, zero LLM calls — rules in
//! [`heuristic`]) and `llm` (one constrained chat call — [`llm_classifier`]; without a real LLM,
//! or when its answer cannot be read, the heuristic decides, with a warning). The decision is
//! always traced: a `route` step carrying classifier, route, delegate and reason, and
//! `RagTrace.route`. Retrieval-only calls are routed the same way and answered by the routed
//! delegate's retrieval-only path (see [`adaptive`]).

pub mod adaptive;
pub mod heuristic;
pub mod llm_classifier;

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::ChatModel;
use serde::{Deserialize, Serialize};

use crate::query::{QueryError, is_real_llm};

pub use adaptive::{AdaptiveRagPipeline, DelegateSource, OwnDelegates, ResolverDelegates};
pub use heuristic::HeuristicClassifier;
pub use llm_classifier::LlmClassifier;

/// Classifier names `rag.query_routing.classifier` accepts.
pub const KNOWN_CLASSIFIERS: &[&str] = &["heuristic", "llm"];

/// How much machinery a question needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueryRoute {
    NoRetrieval,
    SingleShot,
    Iterative,
}

impl QueryRoute {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryRoute::NoRetrieval => "no-retrieval",
            QueryRoute::SingleShot => "single-shot",
            QueryRoute::Iterative => "iterative",
        }
    }

    /// Reads a label tolerantly (`single_shot`, `Single-Shot`, `multi-hop`, `chitchat`, …).
    pub fn parse(label: &str) -> Option<Self> {
        let l: String = label
            .trim()
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { ' ' })
            .collect();
        match l.split_whitespace().collect::<Vec<_>>().join(" ").as_str() {
            "no retrieval" | "noretrieval" | "none" | "direct" | "chitchat" | "chit chat"
            | "greeting" | "no rag" => Some(QueryRoute::NoRetrieval),
            "single shot" | "singleshot" | "single" | "simple" | "single fact" | "one shot" => {
                Some(QueryRoute::SingleShot)
            }
            "iterative" | "multi hop" | "multihop" | "complex" | "multi step" | "multi part"
            | "comparative" => Some(QueryRoute::Iterative),
            _ => None,
        }
    }
}

/// A classifier's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteDecision {
    pub route: QueryRoute,
    /// The classifier that decided (`heuristic`, `llm`).
    pub classifier: String,
    /// The rule or the model's reason.
    pub reason: String,
    /// Set when the requested classifier could not decide and the heuristic did, saying why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// Routes a question. Never fails: an LLM classifier that cannot decide falls back to the
/// heuristic.
#[async_trait]
pub trait QueryComplexityClassifier: Send + Sync {
    /// Name recorded in traces.
    fn name(&self) -> &str;
    async fn classify(&self, question: &str) -> RouteDecision;
}

/// The classifier `name` names: `heuristic`, or `llm` (the heuristic, with a warning, when
/// `chat` is not a real LLM). Unknown names fail listing the known ones.
pub fn build_classifier(
    name: &str,
    chat: Option<&Arc<dyn ChatModel>>,
) -> Result<Arc<dyn QueryComplexityClassifier>, QueryError> {
    match name.trim().to_ascii_lowercase().as_str() {
        "heuristic" => Ok(Arc::new(HeuristicClassifier)),
        "llm" => match chat {
            Some(chat) if is_real_llm(Some(chat)) => Ok(Arc::new(LlmClassifier::new(chat.clone()))),
            _ => {
                tracing::warn!(
                    "rag.query_routing.classifier is llm but no real LLM is configured: routing uses the heuristic classifier"
                );
                Ok(Arc::new(HeuristicClassifier))
            }
        },
        other => Err(QueryError::InvalidOption {
            key: "query_routing.classifier".into(),
            reason: format!(
                "unknown classifier '{other}'; known classifiers: {}",
                KNOWN_CLASSIFIERS.join(", ")
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_labels_parse_tolerantly() {
        assert_eq!(
            QueryRoute::parse("single_shot"),
            Some(QueryRoute::SingleShot)
        );
        assert_eq!(
            QueryRoute::parse(" No-Retrieval "),
            Some(QueryRoute::NoRetrieval)
        );
        assert_eq!(QueryRoute::parse("MULTI-HOP"), Some(QueryRoute::Iterative));
        assert_eq!(QueryRoute::parse("maybe"), None);
    }

    #[test]
    fn classifiers_are_built_by_name() {
        assert_eq!(
            build_classifier("Heuristic", None).unwrap().name(),
            "heuristic"
        );
        // llm without a real LLM: the heuristic, with a warning.
        assert_eq!(build_classifier("llm", None).unwrap().name(), "heuristic");
        let err = build_classifier("oracle", None).err().unwrap().to_string();
        assert!(err.contains("query_routing.classifier"), "{err}");
        assert!(err.contains("heuristic, llm"), "{err}");
    }
}
