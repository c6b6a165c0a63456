//! The `rewrite_query` node: a new retrieval probe across the vocabulary gap.
//!
//! [`LlmQueryRewriter`]: one chat call at temperature 0 in JSON mode, fed with the original
//! question, the current probe, the evaluator's rationale and the unsupported claims of the
//! last answer (when the loop comes from `check_groundedness`); answer `{"query": "…"}`, read
//! tolerantly (fenced/embedded JSON, a JSON list, or the first plain line).
//!
//! [`HeuristicQueryRewriter`] (no model) — pseudo-relevance feedback: the probe is the
//! question's content words followed by up to [`FEEDBACK_TERMS`] (6) expansion terms. Terms
//! come first from the unsupported claims (words the answer needed and the context lacked),
//! then from the sentences of the working set that share a word with the question, ranked by
//! how many such sentences contain them (ties: alphabetical), then from the chunks' `title` /
//! `heading_path` metadata. Bare numbers are never expansion terms; words already in the
//! question or in the current probe are skipped, so each rewrite reaches for new vocabulary. Deterministic: the same inputs give the same
//! probe.
//!
//! A rewrite is **unusable** when it is empty, longer than [`MAX_PROBE_CHARS`] characters, or
//! the current probe again (case- and space-insensitive). The node then retries the previous
//! probe — the budget is still consumed — and never fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest};
use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation;

use crate::query::llm_output::{extract_json, parse_variants};
use crate::types::ScoredChunk;
use orkeon_crews::text::{content_word_set, content_words};

/// Expansion terms the heuristic rewriter adds.
pub const FEEDBACK_TERMS: usize = 6;
/// Longest usable probe, in characters.
pub const MAX_PROBE_CHARS: usize = 400;

/// What a rewriter is given.
#[derive(Debug, Clone, Copy)]
pub struct RewriteRequest<'a> {
    /// The user's question (the information need never changes).
    pub question: &'a str,
    /// The probe that produced the current working set.
    pub previous_probe: &'a str,
    /// The evaluator's rationale for its last verdict.
    pub rationale: &'a str,
    /// Claims of the last answer the groundedness checker found unsupported.
    pub unsupported_claims: &'a [String],
    /// The current working set, rank order.
    pub chunks: &'a [ScoredChunk],
}

/// A rewriter's result.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteOutcome {
    /// The new probe, or `None` when the rewrite was unusable.
    pub probe: Option<String>,
    /// Why the rewrite was unusable.
    pub unusable: Option<String>,
    /// The model that answered (LLM rewriter).
    pub model: Option<String>,
}

/// Produces a new retrieval probe. Never fails: an unusable rewrite is an outcome.
#[async_trait]
pub trait QueryRewriter: Send + Sync {
    /// Name recorded in traces.
    fn name(&self) -> &str;
    async fn rewrite(&self, request: &RewriteRequest<'_>) -> RewriteOutcome;
}

fn normalised(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Checks a candidate probe: the probe, or why it is unusable.
pub fn usable_probe(candidate: &str, previous: &str) -> Result<String, String> {
    let probe = candidate.split_whitespace().collect::<Vec<_>>().join(" ");
    if probe.is_empty() {
        return Err("the rewrite is empty".into());
    }
    if probe.chars().count() > MAX_PROBE_CHARS {
        return Err(format!(
            "the rewrite is longer than {MAX_PROBE_CHARS} characters"
        ));
    }
    if normalised(&probe) == normalised(previous) {
        return Err("the rewrite is the previous probe again".into());
    }
    Ok(probe)
}

fn outcome(candidate: Option<String>, previous: &str, model: Option<String>) -> RewriteOutcome {
    match candidate.map(|c| usable_probe(&c, previous)) {
        Some(Ok(probe)) => RewriteOutcome {
            probe: Some(probe),
            unusable: None,
            model,
        },
        Some(Err(why)) => RewriteOutcome {
            probe: None,
            unusable: Some(why),
            model,
        },
        None => RewriteOutcome {
            probe: None,
            unusable: Some("the rewriter produced no probe".into()),
            model,
        },
    }
}

/// Pseudo-relevance feedback (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct HeuristicQueryRewriter;

/// Surface words of `text` that are content words, lowercased, each with its stem.
fn surface_terms(text: &str) -> Vec<(String, String)> {
    text.unicode_words()
        .filter_map(|w| {
            let lower = w.to_lowercase();
            let stems = content_words(&lower);
            (stems.len() == 1).then(|| (stems[0].clone(), lower))
        })
        .collect()
}

impl HeuristicQueryRewriter {
    /// The probe, computed synchronously.
    pub fn probe(request: &RewriteRequest<'_>) -> String {
        let question_terms = surface_terms(request.question);
        let mut seen: BTreeSet<String> = question_terms.iter().map(|(s, _)| s.clone()).collect();
        seen.extend(content_word_set(request.previous_probe));
        let mut words: Vec<String> = Vec::new();
        let mut in_probe = BTreeSet::new();
        for (stemmed, surface) in &question_terms {
            if in_probe.insert(stemmed.clone()) {
                words.push(surface.clone());
            }
        }

        let mut expansion: Vec<String> = Vec::new();
        let mut take = |candidates: Vec<(String, String)>, expansion: &mut Vec<String>| {
            for (stemmed, surface) in candidates {
                if expansion.len() >= FEEDBACK_TERMS {
                    break;
                }
                // Bare numbers ("3", "2025") are too unspecific to steer retrieval.
                if surface.chars().all(|c| c.is_ascii_digit()) {
                    continue;
                }
                if seen.insert(stemmed) {
                    expansion.push(surface);
                }
            }
        };
        // 1. Unsupported claims, in order.
        let claim_terms: Vec<(String, String)> = request
            .unsupported_claims
            .iter()
            .flat_map(|c| surface_terms(c))
            .collect();
        take(claim_terms, &mut expansion);

        // 2. Words co-occurring with the question in the working set's sentences.
        let question_stems: BTreeSet<String> =
            question_terms.iter().map(|(s, _)| s.clone()).collect();
        let mut counts: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for chunk in request.chunks {
            for sentence in chunk.chunk.text.unicode_sentences() {
                let terms = surface_terms(sentence);
                if !terms.iter().any(|(s, _)| question_stems.contains(s)) {
                    continue;
                }
                let distinct: BTreeMap<String, String> = terms.into_iter().collect();
                for (stemmed, surface) in distinct {
                    let entry = counts.entry(stemmed).or_insert((0, surface));
                    entry.0 += 1;
                }
            }
        }
        let mut ranked: Vec<(String, (usize, String))> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
        take(
            ranked
                .into_iter()
                .map(|(s, (_, surface))| (s, surface))
                .collect(),
            &mut expansion,
        );

        // 3. Titles and heading paths.
        let meta_terms: Vec<(String, String)> = request
            .chunks
            .iter()
            .flat_map(|c| {
                ["title", "heading_path"]
                    .iter()
                    .filter_map(|k| c.chunk.metadata.get(*k))
                    .flat_map(|v| surface_terms(v))
                    .collect::<Vec<_>>()
            })
            .collect();
        take(meta_terms, &mut expansion);

        words.extend(expansion);
        words.join(" ")
    }
}

#[async_trait]
impl QueryRewriter for HeuristicQueryRewriter {
    fn name(&self) -> &str {
        "heuristic"
    }

    async fn rewrite(&self, request: &RewriteRequest<'_>) -> RewriteOutcome {
        outcome(Some(Self::probe(request)), request.previous_probe, None)
    }
}

/// One constrained chat call (see the module documentation).
pub struct LlmQueryRewriter {
    chat: Arc<dyn ChatModel>,
}

impl LlmQueryRewriter {
    pub fn new(chat: Arc<dyn ChatModel>) -> Self {
        Self { chat }
    }
}

const REWRITER_SYSTEM_PROMPT: &str = "You rewrite search queries for a document retriever that combines keyword (BM25) and semantic search. \
The previous query did not retrieve passages that answer the user's question. Write ONE new search query for the same information need, \
bridging the vocabulary gap: use synonyms, the likely wording of the documents, expanded names or code names, and keep every constraint of the question. \
Answer with a JSON object only: {\"query\": \"...\"}.";

/// Reads a rewriter answer: `{"query": …}` (or a synonym field), a JSON list's first string,
/// or the first plain line.
pub fn parse_rewrite(text: &str) -> Option<String> {
    match extract_json(text) {
        Some(Value::Object(map)) => {
            let named = [
                "query",
                "rewritten_query",
                "rewrite",
                "search_query",
                "probe",
                "q",
            ]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str).map(str::to_string));
            named.or_else(|| map.values().find_map(|v| v.as_str().map(str::to_string)))
        }
        Some(Value::Array(items)) => items.iter().find_map(|v| v.as_str().map(str::to_string)),
        _ => parse_variants(text, "", 1).into_iter().next(),
    }
    .map(|s| s.trim().to_string())
    .filter(|s| !s.is_empty())
}

#[async_trait]
impl QueryRewriter for LlmQueryRewriter {
    fn name(&self) -> &str {
        "llm"
    }

    async fn rewrite(&self, request: &RewriteRequest<'_>) -> RewriteOutcome {
        let mut user = format!(
            "User question: {}\nPrevious search query: {}\nWhy the retrieved passages were not good enough: {}\n",
            request.question.trim(),
            request.previous_probe.trim(),
            if request.rationale.trim().is_empty() {
                "(no rationale given)"
            } else {
                request.rationale.trim()
            }
        );
        if !request.unsupported_claims.is_empty() {
            user.push_str("Claims of the last answer that the passages did not support:\n");
            for claim in request.unsupported_claims {
                user.push_str("- ");
                user.push_str(claim.trim());
                user.push('\n');
            }
        }
        let titles: Vec<&str> = request
            .chunks
            .iter()
            .map(|c| c.chunk.source_id.as_str())
            .collect();
        if !titles.is_empty() {
            user.push_str(&format!(
                "Sources retrieved so far (not the right ones): {}\n",
                titles.join(", ")
            ));
        }
        let mut chat_request = ChatRequest::new(vec![
            ChatMessage::system(REWRITER_SYSTEM_PROMPT),
            ChatMessage::user(user),
        ]);
        chat_request.temperature = Some(0.0);
        chat_request.json_mode = true;
        match self.chat.chat(chat_request).await {
            Ok(response) => {
                let model = Some(if response.model.is_empty() {
                    self.chat.name()
                } else {
                    response.model.clone()
                });
                outcome(
                    parse_rewrite(&response.content),
                    request.previous_probe,
                    model,
                )
            }
            Err(e) => RewriteOutcome {
                probe: None,
                unusable: Some(format!("the rewriter's LLM call failed: {e}")),
                model: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_testkit::ScriptedChat;

    use crate::corrective::test_support::chunk_with_text;

    #[test]
    fn heuristic_rewrite_expands_with_co_occurring_words() {
        let mut a = chunk_with_text(
            "a",
            "Heron sessions expire after 12 hours of inactivity. The office has a cafe.",
        );
        a.chunk
            .metadata
            .insert("title".into(), "Dashboard 3 release notes".into());
        let chunks = vec![
            a,
            chunk_with_text(
                "b",
                "Heron is the code name of Dashboard 3 and its sessions.",
            ),
        ];
        let request = RewriteRequest {
            question: "How long can someone leave Heron idle?",
            previous_probe: "How long can someone leave Heron idle?",
            rationale: "",
            unsupported_claims: &[],
            chunks: &chunks,
        };
        let probe = HeuristicQueryRewriter::probe(&request);
        // Question words first, then words co-occurring with "heron" (most frequent first).
        assert!(
            probe.starts_with("long someone leave heron idle session"),
            "{probe}"
        );
        assert!(!probe.contains("cafe"), "{probe}");
        assert!(probe.split(' ').count() <= 5 + FEEDBACK_TERMS, "{probe}");
        // Deterministic.
        assert_eq!(probe, HeuristicQueryRewriter::probe(&request));

        // Unsupported claims come first; words of the previous probe are not repeated.
        let claims = vec!["Sessions time out after twelve hours.".to_string()];
        let request = RewriteRequest {
            previous_probe: &probe,
            unsupported_claims: &claims,
            ..request
        };
        let next = HeuristicQueryRewriter::probe(&request);
        assert!(
            next.starts_with("long someone leave heron idle time twelve"),
            "{next}"
        );
        assert_ne!(next, probe);
    }

    #[test]
    fn unusable_rewrites_are_recognised() {
        assert_eq!(
            usable_probe("  Dashboard 3   session expiry ", "x").unwrap(),
            "Dashboard 3 session expiry"
        );
        assert!(usable_probe("", "x").unwrap_err().contains("empty"));
        assert!(
            usable_probe(&"w ".repeat(300), "x")
                .unwrap_err()
                .contains("longer")
        );
        assert!(
            usable_probe(
                "How long  can SOMEONE leave?",
                "how long can someone leave?"
            )
            .unwrap_err()
            .contains("previous probe")
        );
    }

    #[tokio::test]
    async fn llm_rewrite_is_one_constrained_call_read_tolerantly() {
        let chat = ScriptedChat::new(&[
            "```json\n{\"rewritten_query\": \"Dashboard 3 session timeout\"}\n```",
            "1. Heron idle logout",
            "{}",
        ]);
        let rewriter = LlmQueryRewriter::new(chat.clone());
        let claims = vec!["Sessions last forever.".to_string()];
        let chunks = vec![chunk_with_text("a", "Heron SSO incident.")];
        let request = RewriteRequest {
            question: "How long can someone leave Heron idle?",
            previous_probe: "How long can someone leave Heron idle?",
            rationale: "no passage gives a session duration",
            unsupported_claims: &claims,
            chunks: &chunks,
        };
        let out = rewriter.rewrite(&request).await;
        assert_eq!(out.probe.as_deref(), Some("Dashboard 3 session timeout"));
        assert_eq!(out.model.as_deref(), Some("scripted"));
        let sent = chat.requests.lock().unwrap()[0].clone();
        assert_eq!(sent.temperature, Some(0.0));
        assert!(sent.json_mode);
        let user = &sent.messages[1].content;
        assert!(
            user.contains("no passage gives a session duration"),
            "{user}"
        );
        assert!(user.contains("- Sessions last forever."), "{user}");
        assert!(user.contains("kb/a.md"), "{user}");

        let out = rewriter.rewrite(&request).await;
        assert_eq!(out.probe.as_deref(), Some("Heron idle logout"));
        let out = rewriter.rewrite(&request).await;
        assert!(out.probe.is_none());
        assert!(out.unusable.is_some());
        // The script is exhausted: the failed call is an unusable rewrite, not an error.
        let out = rewriter.rewrite(&request).await;
        assert!(out.unusable.unwrap().contains("LLM call failed"));
    }
}
