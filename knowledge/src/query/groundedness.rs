//! Stage 7 (groundedness): post-generation verification of an answer against its context.
//!
//! [`HeuristicGroundednessChecker`] needs no model: it splits the answer into claims
//! (sentences), and a claim is supported when enough of its content words occur in the
//! passages it cites (all passages when it cites none). [`LlmGroundednessChecker`] asks a chat
//! model for a JSON verdict and parses it tolerantly. Both are also the hooks the corrective
//! graph's `check_groundedness` node uses.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest};
use serde::Serialize;
use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation;

use super::QueryError;
use super::llm_output::extract_json;
use crate::types::ScoredChunk;
use orkeon_crews::text::content_word_set;

/// A checker's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroundednessVerdict {
    pub grounded: bool,
    /// Support in [0, 1] (the heuristic: the share of supported claims).
    pub score: f32,
    /// Claims the context does not support.
    pub unsupported_claims: Vec<String>,
}

/// Verifies an answer against its context.
#[async_trait]
pub trait GroundednessChecker: Send + Sync {
    fn name(&self) -> &str;
    /// `context` is in rank order: marker `[n]` in `answer` is `context[n - 1]`.
    async fn check(
        &self,
        question: &str,
        answer: &str,
        context: &[ScoredChunk],
    ) -> Result<GroundednessVerdict, QueryError>;
}

/// Content-word overlap between each claim and the passages it cites.
#[derive(Debug, Clone)]
pub struct HeuristicGroundednessChecker {
    /// Share of a claim's content words that must occur in its passages (default 0.5).
    pub claim_support: f32,
    /// Share of supported claims for the answer to be grounded (default 0.8).
    pub grounded_at: f32,
}

impl Default for HeuristicGroundednessChecker {
    fn default() -> Self {
        Self {
            claim_support: 0.5,
            grounded_at: 0.8,
        }
    }
}

/// Markers `[n]` (and groups `[n, m]`) cited by a claim.
fn claim_markers(claim: &str) -> Vec<usize> {
    let mut markers = Vec::new();
    let mut rest = claim;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let inside = &after[..close];
        if inside
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == ';' || c.is_whitespace())
        {
            markers.extend(
                inside
                    .split([',', ';'])
                    .filter_map(|n| n.trim().parse::<usize>().ok()),
            );
        }
        rest = &after[close + 1..];
    }
    markers
}

/// Removes `[n]` markers so they are not counted as words.
fn without_markers(claim: &str) -> String {
    let mut out = String::with_capacity(claim.len());
    let mut rest = claim;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close)
                if after[..close]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ',' || c == ';' || c.is_whitespace()) =>
            {
                rest = &after[close + 1..];
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

impl HeuristicGroundednessChecker {
    /// The verdict, computed synchronously.
    pub fn verdict(&self, answer: &str, context: &[ScoredChunk]) -> GroundednessVerdict {
        let passage_words: Vec<BTreeSet<String>> = context
            .iter()
            .map(|c| content_word_set(&c.chunk.text))
            .collect();
        let mut claims = 0usize;
        let mut supported = 0usize;
        let mut unsupported = Vec::new();
        for sentence in answer.unicode_sentences() {
            let sentence = sentence.trim();
            let words = content_word_set(&without_markers(sentence));
            // "Yes." or a bare marker carries no checkable claim.
            if words.len() < 2 {
                continue;
            }
            claims += 1;
            let cited: Vec<usize> = claim_markers(sentence)
                .into_iter()
                .filter(|&m| m >= 1 && m <= context.len())
                .map(|m| m - 1)
                .collect();
            let evidence: BTreeSet<&String> = if cited.is_empty() {
                passage_words.iter().flatten().collect()
            } else {
                cited
                    .iter()
                    .flat_map(|&i| passage_words[i].iter())
                    .collect()
            };
            let found = words.iter().filter(|w| evidence.contains(w)).count();
            if found as f32 / words.len() as f32 >= self.claim_support {
                supported += 1;
            } else {
                unsupported.push(sentence.to_string());
            }
        }
        let score = if claims == 0 {
            1.0
        } else {
            supported as f32 / claims as f32
        };
        GroundednessVerdict {
            grounded: score >= self.grounded_at,
            score,
            unsupported_claims: unsupported,
        }
    }
}

#[async_trait]
impl GroundednessChecker for HeuristicGroundednessChecker {
    fn name(&self) -> &str {
        "heuristic"
    }

    async fn check(
        &self,
        _question: &str,
        answer: &str,
        context: &[ScoredChunk],
    ) -> Result<GroundednessVerdict, QueryError> {
        Ok(self.verdict(answer, context))
    }
}

/// Asks a chat model whether every claim of the answer is supported by the passages.
pub struct LlmGroundednessChecker {
    chat: Arc<dyn ChatModel>,
}

impl LlmGroundednessChecker {
    pub fn new(chat: Arc<dyn ChatModel>) -> Self {
        Self { chat }
    }
}

fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "grounded" | "supported" => Some(true),
            "false" | "no" | "ungrounded" | "not grounded" | "unsupported" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn as_score(v: &Value) -> Option<f32> {
    let x = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().trim_end_matches('%').parse::<f64>().ok()?,
        _ => return None,
    };
    // Percentages and 0–10 scales happen.
    let x = if x > 10.0 {
        x / 100.0
    } else if x > 1.0 {
        x / 10.0
    } else {
        x
    };
    Some(x.clamp(0.0, 1.0) as f32)
}

/// A verdict from an LLM answer: a JSON object (`grounded`, `score`, `unsupported_claims`,
/// with tolerated synonyms) anywhere in the text, or else an unambiguous yes/no wording.
pub fn parse_verdict(text: &str) -> Option<GroundednessVerdict> {
    if let Some(Value::Object(map)) = extract_json(text) {
        let field = |names: &[&str]| names.iter().find_map(|n| map.get(*n));
        let grounded =
            field(&["grounded", "is_grounded", "supported", "verdict"]).and_then(as_bool);
        let score = field(&["score", "confidence", "support"]).and_then(as_score);
        let claims = field(&["unsupported_claims", "unsupported", "claims"])
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let (grounded, score) = match (grounded, score) {
            (Some(g), Some(s)) => (g, s),
            (Some(g), None) => (g, if g { 1.0 } else { 0.0 }),
            (None, Some(s)) => (s >= 0.5, s),
            (None, None) => return None,
        };
        return Some(GroundednessVerdict {
            grounded,
            score,
            unsupported_claims: claims,
        });
    }
    let lower = text.to_ascii_lowercase();
    let negative = ["not grounded", "ungrounded", "unsupported", "not supported"]
        .iter()
        .any(|w| lower.contains(w));
    let positive = ["grounded", "supported", "yes"]
        .iter()
        .any(|w| lower.contains(w));
    match (negative, positive) {
        (true, _) => Some(GroundednessVerdict {
            grounded: false,
            score: 0.0,
            unsupported_claims: Vec::new(),
        }),
        (false, true) => Some(GroundednessVerdict {
            grounded: true,
            score: 1.0,
            unsupported_claims: Vec::new(),
        }),
        (false, false) => None,
    }
}

#[async_trait]
impl GroundednessChecker for LlmGroundednessChecker {
    fn name(&self) -> &str {
        "llm"
    }

    async fn check(
        &self,
        question: &str,
        answer: &str,
        context: &[ScoredChunk],
    ) -> Result<GroundednessVerdict, QueryError> {
        let mut passages = String::new();
        for (i, chunk) in context.iter().enumerate() {
            passages.push_str(&super::assemble::passage_line(i as u32 + 1, chunk));
            passages.push('\n');
        }
        let system = "You check whether an answer is supported by numbered context passages. A claim is supported only if the passages state it. Answer with a JSON object only: {\"grounded\": true|false, \"score\": <share of supported claims between 0 and 1>, \"unsupported_claims\": [\"...\"]}.";
        let user =
            format!("Passages:\n{passages}\nQuestion: {question}\n\nAnswer to check:\n{answer}");
        let mut request =
            ChatRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)]);
        request.temperature = Some(0.0);
        request.json_mode = true;
        let response = self
            .chat
            .chat(request)
            .await
            .map_err(|source| QueryError::Chat {
                stage: "groundedness (llm)".into(),
                source,
            })?;
        parse_verdict(&response.content).ok_or_else(|| QueryError::Groundedness {
            checker: "llm".into(),
            reason: format!(
                "the model's verdict could not be read: {:?}",
                response.content.chars().take(200).collect::<String>()
            ),
        })
    }
}

/// The checker a host registers by default: the LLM checker when a real chat model is
/// available ([`crate::query::is_real_llm`]), else the heuristic one. The offline `extractive`
/// model answers by quoting passages and cannot produce a verdict, so it gets the heuristic
/// checker too.
pub fn default_checker(chat: Option<Arc<dyn ChatModel>>) -> Arc<dyn GroundednessChecker> {
    match chat {
        Some(chat) if crate::query::is_real_llm(Some(&chat)) => {
            Arc::new(LlmGroundednessChecker::new(chat))
        }
        Some(_) => Arc::new(HeuristicGroundednessChecker::default()),
        None => {
            tracing::warn!(
                "no LLM configured: groundedness uses the heuristic checker (content-word overlap)"
            );
            Arc::new(HeuristicGroundednessChecker::default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;
    use orkeon_testkit::ScriptedChat;

    fn context() -> Vec<ScoredChunk> {
        let mut a = chunk("a", 0.9, vec![]);
        a.chunk.text = "Customers can request a refund within 30 days of delivery.".into();
        let mut b = chunk("b", 0.8, vec![]);
        b.chunk.text = "Standard shipping to Europe takes five business days.".into();
        vec![a, b]
    }

    #[test]
    fn heuristic_supports_claims_found_in_their_cited_passages() {
        let checker = HeuristicGroundednessChecker::default();
        let v = checker.verdict(
            "Customers may request a refund within 30 days [1]. Shipping to Europe takes five business days [2].",
            &context(),
        );
        assert!(v.grounded, "{v:?}");
        assert_eq!(v.score, 1.0);

        // The right words cited against the wrong passage are not support.
        let v = checker.verdict(
            "Customers can request a refund within 30 days [2].",
            &context(),
        );
        assert!(!v.grounded);
        assert_eq!(v.unsupported_claims.len(), 1);

        // An invented claim is unsupported.
        let v = checker.verdict(
            "Refunds within 30 days [1]. Gift cards never expire and earn loyalty points.",
            &context(),
        );
        assert_eq!(v.score, 0.5);
        assert!(!v.grounded);
        assert_eq!(
            v.unsupported_claims,
            vec!["Gift cards never expire and earn loyalty points."]
        );
    }

    #[test]
    fn llm_verdicts_parse_tolerantly() {
        let v = parse_verdict(
            "```json\n{\"grounded\": false, \"score\": 0.4, \"unsupported_claims\": [\"x\"]}\n```",
        )
        .unwrap();
        assert_eq!(
            (v.grounded, v.score, v.unsupported_claims.len()),
            (false, 0.4, 1)
        );
        let v = parse_verdict("Verdict: {\"is_grounded\": \"yes\"}").unwrap();
        assert!(v.grounded);
        assert_eq!(v.score, 1.0);
        let v = parse_verdict("{\"score\": 85}").unwrap();
        assert!(v.grounded);
        assert!((v.score - 0.85).abs() < 1e-6);
        assert!(
            !parse_verdict("The answer is NOT grounded in passage 2.")
                .unwrap()
                .grounded
        );
        assert!(parse_verdict("I am not sure.").is_none());
    }

    #[test]
    fn default_checker_needs_a_model_that_can_judge() {
        assert_eq!(default_checker(None).name(), "heuristic");
        let chat: Arc<dyn ChatModel> = ScriptedChat::new(&[]);
        assert_eq!(default_checker(Some(chat)).name(), "llm");
    }

    #[tokio::test]
    async fn llm_checker_asks_for_json_and_reports_unreadable_verdicts() {
        let chat = ScriptedChat::new(&[r#"{"grounded": true, "score": 0.9}"#, "hmm"]);
        let checker = LlmGroundednessChecker::new(chat.clone());
        let v = checker.check("q?", "answer [1]", &context()).await.unwrap();
        assert!(v.grounded);
        let request = chat.requests.lock().unwrap()[0].clone();
        assert!(request.json_mode);
        assert!(
            request.messages[1]
                .content
                .contains("[2] (source: src/b.md)")
        );
        let err = checker.check("q?", "answer", &context()).await.unwrap_err();
        assert!(err.to_string().contains("could not be read"), "{err}");
    }
}
