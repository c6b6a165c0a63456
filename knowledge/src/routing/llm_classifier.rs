//! [`LlmClassifier`]: one lightweight chat call (temperature 0, JSON mode, at most
//! [`CLASSIFIER_MAX_TOKENS`] output tokens) answering `{"route": "no_retrieval" |
//! "single_shot" | "iterative", "reason": "…"}`, read tolerantly. When the call fails or the
//! answer cannot be read, the [`HeuristicClassifier`] decides — the documented fallback — with
//! a warning and the decision's `fallback` saying why.

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest};
use serde_json::Value;

use super::heuristic::HeuristicClassifier;
use super::{QueryComplexityClassifier, QueryRoute, RouteDecision};
use crate::query::llm_output::extract_json;

/// Output budget of the classification call.
pub const CLASSIFIER_MAX_TOKENS: u32 = 120;

const CLASSIFIER_SYSTEM_PROMPT: &str = "You route user messages for a question-answering system over a document collection. \
Choose one route: \"no_retrieval\" for greetings, thanks and small talk that need no documents; \
\"single_shot\" for a question asking one fact that one search should find; \
\"iterative\" for multi-part, comparative or multi-hop questions that need several searches or combining documents. \
Answer with a JSON object only: {\"route\": \"no_retrieval\" | \"single_shot\" | \"iterative\", \"reason\": \"a few words\"}.";

/// The LLM-backed classifier (see the module documentation).
pub struct LlmClassifier {
    chat: Arc<dyn ChatModel>,
}

impl LlmClassifier {
    pub fn new(chat: Arc<dyn ChatModel>) -> Self {
        Self { chat }
    }
}

/// Reads a classifier answer: a JSON object with `route` (or a synonym), else a bare label.
pub fn parse_route(text: &str) -> Option<(QueryRoute, Option<String>)> {
    if let Some(Value::Object(map)) = extract_json(text) {
        let route = ["route", "classification", "label", "category", "complexity"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .and_then(QueryRoute::parse)?;
        let reason = ["reason", "rationale", "why"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        return Some((route, reason));
    }
    QueryRoute::parse(
        text.trim()
            .trim_matches(|c: char| c == '"' || c == '.' || c == '`'),
    )
    .map(|r| (r, None))
}

fn fallback(question: &str, why: String) -> RouteDecision {
    tracing::warn!(reason = %why, "LLM query classifier fell back to the heuristic");
    let mut decision = HeuristicClassifier::decide(question);
    decision.fallback = Some(why);
    decision
}

#[async_trait]
impl QueryComplexityClassifier for LlmClassifier {
    fn name(&self) -> &str {
        "llm"
    }

    async fn classify(&self, question: &str) -> RouteDecision {
        let mut request = ChatRequest::new(vec![
            ChatMessage::system(CLASSIFIER_SYSTEM_PROMPT),
            ChatMessage::user(format!("Message: {}", question.trim())),
        ]);
        request.temperature = Some(0.0);
        request.max_tokens = Some(CLASSIFIER_MAX_TOKENS);
        request.json_mode = true;
        let response = match self.chat.chat(request).await {
            Ok(response) => response,
            Err(e) => return fallback(question, format!("the classifier's LLM call failed: {e}")),
        };
        match parse_route(&response.content) {
            Some((route, reason)) => RouteDecision {
                route,
                classifier: "llm".into(),
                reason: reason.unwrap_or_else(|| "the model's choice".into()),
                fallback: None,
            },
            None => {
                let excerpt: String = response.content.chars().take(120).collect();
                fallback(
                    question,
                    format!("the classifier's answer could not be read: {excerpt:?}"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_testkit::ScriptedChat;

    #[test]
    fn routes_parse_tolerantly() {
        assert_eq!(
            parse_route("```json\n{\"route\": \"Single-Shot\", \"reason\": \"one fact\"}\n```"),
            Some((QueryRoute::SingleShot, Some("one fact".into())))
        );
        assert_eq!(
            parse_route("{\"classification\": \"multi_hop\"}"),
            Some((QueryRoute::Iterative, None))
        );
        assert_eq!(
            parse_route("\"no_retrieval\""),
            Some((QueryRoute::NoRetrieval, None))
        );
        assert_eq!(parse_route("{\"route\": \"dunno\"}"), None);
        assert_eq!(parse_route("It depends on the question."), None);
    }

    #[tokio::test]
    async fn one_constrained_call_with_the_heuristic_as_fallback() {
        let chat =
            ScriptedChat::new(&[r#"{"route": "iterative", "reason": "two products"}"#, "hmm"]);
        let classifier = LlmClassifier::new(chat.clone());
        let d = classifier.classify("Tell me about the S2.").await;
        assert_eq!(d.route, QueryRoute::Iterative);
        assert_eq!(
            (d.classifier.as_str(), d.reason.as_str()),
            ("llm", "two products")
        );
        let sent = chat.requests.lock().unwrap()[0].clone();
        assert!(sent.json_mode);
        assert_eq!(sent.temperature, Some(0.0));
        assert_eq!(sent.max_tokens, Some(CLASSIFIER_MAX_TOKENS));

        // Unreadable: the heuristic decides, and says it was a fallback.
        let d = classifier.classify("Hello!").await;
        assert_eq!(d.route, QueryRoute::NoRetrieval);
        assert_eq!(d.classifier, "heuristic");
        assert!(d.fallback.unwrap().contains("could not be read"));
        // The script is exhausted: a failed call falls back too.
        let d = classifier.classify("What is the refund window?").await;
        assert_eq!(d.route, QueryRoute::SingleShot);
        assert!(d.fallback.unwrap().contains("LLM call failed"));
    }
}
