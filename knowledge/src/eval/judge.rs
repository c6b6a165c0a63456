//! Generation judges: how an answer produced by a profile is scored.
//!
//! - [`GenerationJudge::Heuristic`] (no chat model configured): deterministic. The score is the
//!   fraction of the case's expected substrings found in the answer (case- and
//!   whitespace-insensitive; 1 when the case expects none), and the citations are valid when the
//!   answer cites at least one passage and every `[n]` in it resolves to one of the answer's
//!   citations. A case passes when every expected substring is present and citations are valid.
//! - [`GenerationJudge::Llm`]: asks the chat model for a JSON verdict
//!   (`{"correct": bool, "score": 0..1, "reason": "…"}`) given the question, the reference
//!   answer and expected facts, the answer and its cited passages. Parsing is tolerant (code
//!   fences, prose around the object, `"yes"`/`"true"` strings, scores out of 10 or 100, bare
//!   `score: 0.8` lines). Citation validity is still checked deterministically, and a case
//!   passes when the model says correct and the citations are valid. When the call fails or its
//!   answer cannot be read, that case is judged by the heuristic and marked as a fallback, so
//!   a verdict is never invented.
//!
//! The judge's [`GenerationJudge::name`] is printed in every report.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::dataset::EvalCase;
use crate::types::Citation;

/// Name of the deterministic judge, as printed in reports.
pub const HEURISTIC_JUDGE: &str = "heuristic (expected substrings + citation validity)";

/// How answers are judged.
#[derive(Clone)]
pub enum GenerationJudge {
    Heuristic,
    Llm(Arc<dyn ChatModel>),
}

/// The verdict on one answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeVerdict {
    /// Judge that produced this verdict (the heuristic when an LLM verdict fell back).
    pub judge: String,
    pub passed: bool,
    /// 0–1.
    pub score: f64,
    pub substrings_found: usize,
    pub substrings_expected: usize,
    /// The answer cites at least one passage and every `[n]` resolves to a citation.
    pub citations_valid: bool,
    pub reason: String,
    /// The LLM judge failed or answered unreadably; the heuristic judged this case.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fell_back: bool,
}

static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a literal, valid pattern
    Regex::new(r"\[(\d{1,4})\]").expect("valid marker regex")
});

fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Markers `[n]` used in `answer`.
pub fn markers_in(answer: &str) -> BTreeSet<u32> {
    MARKER
        .captures_iter(answer)
        .filter_map(|c| c.get(1)?.as_str().parse().ok())
        .collect()
}

/// Whether the answer cites at least one passage and every marker resolves to a citation.
pub fn citations_valid(answer: &str, citations: &[Citation]) -> bool {
    let used = markers_in(answer);
    let known: BTreeSet<u32> = citations.iter().map(|c| c.marker).collect();
    !used.is_empty() && used.is_subset(&known)
}

/// The deterministic verdict (see the module documentation).
pub fn heuristic_verdict(case: &EvalCase, answer: &str, citations: &[Citation]) -> JudgeVerdict {
    let normalised = normalise(answer);
    let missing: Vec<&str> = case
        .expected_substrings
        .iter()
        .filter(|s| !normalised.contains(&normalise(s)))
        .map(String::as_str)
        .collect();
    let expected = case.expected_substrings.len();
    let found = expected - missing.len();
    let valid = citations_valid(answer, citations);
    let score = if expected == 0 {
        1.0
    } else {
        found as f64 / expected as f64
    };
    let mut reasons = Vec::new();
    if !missing.is_empty() {
        reasons.push(format!("missing expected: {}", missing.join(" | ")));
    }
    if !valid {
        let used = markers_in(answer);
        if used.is_empty() {
            reasons.push("no [n] citation in the answer".to_string());
        } else {
            reasons.push(format!(
                "markers {:?} do not all resolve to the {} citation(s)",
                used,
                citations.len()
            ));
        }
    }
    JudgeVerdict {
        judge: HEURISTIC_JUDGE.to_string(),
        passed: missing.is_empty() && valid,
        score,
        substrings_found: found,
        substrings_expected: expected,
        citations_valid: valid,
        reason: if reasons.is_empty() {
            "all expected substrings present; citations valid".into()
        } else {
            reasons.join("; ")
        },
        fell_back: false,
    }
}

const JUDGE_SYSTEM_PROMPT: &str = "You grade answers produced by a retrieval-augmented assistant. \
Judge whether the ANSWER correctly and completely answers the QUESTION, using the REFERENCE ANSWER and EXPECTED FACTS as ground truth and the CITED PASSAGES as the evidence the assistant had. \
An answer that says the context does not contain the answer is incorrect when the reference answer exists. \
Reply with one JSON object and nothing else: {\"correct\": true or false, \"score\": a number from 0 to 1, \"reason\": \"one short sentence\"}.";

fn judge_prompt(case: &EvalCase, answer: &str, citations: &[Citation]) -> String {
    let mut prompt = format!("QUESTION: {}\n\n", case.question);
    if let Some(reference) = &case.reference_answer {
        prompt.push_str(&format!("REFERENCE ANSWER: {reference}\n\n"));
    }
    if !case.expected_substrings.is_empty() {
        prompt.push_str(&format!(
            "EXPECTED FACTS: {}\n\n",
            case.expected_substrings.join(" | ")
        ));
    }
    prompt.push_str(&format!("ANSWER: {answer}\n\nCITED PASSAGES:\n"));
    if citations.is_empty() {
        prompt.push_str("(none)\n");
    }
    for citation in citations {
        let snippet: String = citation.snippet.chars().take(600).collect();
        prompt.push_str(&format!(
            "[{}] ({}) {}\n",
            citation.marker,
            citation.source_id,
            snippet.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    prompt
}

/// What was read from an LLM judge's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmJudgement {
    pub correct: bool,
    pub score: f64,
    pub reason: String,
}

fn truthy(value: &serde_json::Value) -> Option<bool> {
    match value {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "correct" | "pass" | "passed" => Some(true),
            "false" | "no" | "incorrect" | "fail" | "failed" => Some(false),
            _ => None,
        },
        serde_json::Value::Number(n) => n.as_f64().map(|v| v >= 0.5),
        _ => None,
    }
}

/// A score on 0–1, read from 0–1, 0–10 or 0–100 scales.
fn unit_score(raw: f64) -> Option<f64> {
    if !raw.is_finite() || raw < 0.0 {
        return None;
    }
    let scaled = if raw <= 1.0 {
        raw
    } else if raw <= 10.0 {
        raw / 10.0
    } else if raw <= 100.0 {
        raw / 100.0
    } else {
        return None;
    };
    Some(scaled)
}

fn number(value: &serde_json::Value) -> Option<f64> {
    match value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().trim_end_matches('%').parse().ok(),
        _ => None,
    }
}

static SCORE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a literal, valid pattern
    Regex::new(r#"(?i)"?score"?\s*[:=]\s*"?([0-9]+(?:\.[0-9]+)?)"#).expect("valid score regex")
});
static CORRECT_LINE: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a literal, valid pattern
    Regex::new(r#"(?i)"?(?:correct|verdict|pass)"?\s*[:=]\s*"?(true|false|yes|no|correct|incorrect|pass|fail)"#)
        .expect("valid verdict regex")
});

/// Reads an LLM judge's answer (see the module documentation); `None` when it holds no
/// usable verdict.
pub fn parse_llm_judgement(content: &str) -> Option<LlmJudgement> {
    let object = content
        .find('{')
        .zip(content.rfind('}'))
        .filter(|(start, end)| start < end)
        .and_then(|(start, end)| {
            serde_json::from_str::<serde_json::Value>(&content[start..=end]).ok()
        })
        .filter(serde_json::Value::is_object);
    if let Some(object) = object {
        let correct = ["correct", "verdict", "pass", "passed"]
            .iter()
            .find_map(|k| object.get(*k).and_then(truthy));
        let score = object.get("score").and_then(number).and_then(unit_score);
        let reason = object
            .get("reason")
            .and_then(|r| r.as_str())
            .unwrap_or_default()
            .trim()
            .to_string();
        match (correct, score) {
            (Some(correct), Some(score)) => {
                return Some(LlmJudgement {
                    correct,
                    score,
                    reason,
                });
            }
            (Some(correct), None) => {
                return Some(LlmJudgement {
                    correct,
                    score: if correct { 1.0 } else { 0.0 },
                    reason,
                });
            }
            (None, Some(score)) => {
                return Some(LlmJudgement {
                    correct: score >= 0.5,
                    score,
                    reason,
                });
            }
            (None, None) => {}
        }
    }
    let correct = CORRECT_LINE
        .captures(content)
        .and_then(|c| truthy(&serde_json::Value::String(c.get(1)?.as_str().to_string())));
    let score = SCORE_LINE
        .captures(content)
        .and_then(|c| c.get(1)?.as_str().parse::<f64>().ok())
        .and_then(unit_score);
    match (correct, score) {
        (Some(correct), score) => Some(LlmJudgement {
            correct,
            score: score.unwrap_or(if correct { 1.0 } else { 0.0 }),
            reason: String::new(),
        }),
        (None, Some(score)) => Some(LlmJudgement {
            correct: score >= 0.5,
            score,
            reason: String::new(),
        }),
        (None, None) => None,
    }
}

impl GenerationJudge {
    /// The judge for an optional chat model.
    pub fn for_model(model: Option<Arc<dyn ChatModel>>) -> Self {
        match model {
            Some(model) => GenerationJudge::Llm(model),
            None => GenerationJudge::Heuristic,
        }
    }

    /// The name printed in reports.
    pub fn name(&self) -> String {
        match self {
            GenerationJudge::Heuristic => HEURISTIC_JUDGE.to_string(),
            GenerationJudge::Llm(model) => format!("llm:{}", model.name()),
        }
    }

    /// Judges one answer.
    pub async fn judge(
        &self,
        case: &EvalCase,
        answer: &str,
        citations: &[Citation],
    ) -> JudgeVerdict {
        let heuristic = heuristic_verdict(case, answer, citations);
        let GenerationJudge::Llm(model) = self else {
            return heuristic;
        };
        let mut request = ChatRequest::new(vec![
            ChatMessage::system(JUDGE_SYSTEM_PROMPT),
            ChatMessage::user(judge_prompt(case, answer, citations)),
        ]);
        request.json_mode = true;
        request.temperature = Some(0.0);
        request.max_tokens = Some(200);
        let fallback = |reason: String| JudgeVerdict {
            fell_back: true,
            reason: format!("{reason}; judged by the heuristic: {}", heuristic.reason),
            ..heuristic.clone()
        };
        match model.chat(request).await {
            Err(error) => {
                tracing::warn!(case = %case.id, judge = %model.name(), %error, "LLM judge call failed; heuristic used");
                fallback(format!("LLM judge call failed ({error})"))
            }
            Ok(response) => match parse_llm_judgement(&response.content) {
                None => {
                    let excerpt: String = response.content.chars().take(120).collect();
                    tracing::warn!(case = %case.id, judge = %model.name(), answer = %excerpt, "LLM judge answer unreadable; heuristic used");
                    fallback(format!("LLM judge answer unreadable (`{excerpt}`)"))
                }
                Some(judgement) => JudgeVerdict {
                    judge: self.name(),
                    passed: judgement.correct && heuristic.citations_valid,
                    score: judgement.score,
                    substrings_found: heuristic.substrings_found,
                    substrings_expected: heuristic.substrings_expected,
                    citations_valid: heuristic.citations_valid,
                    reason: if judgement.reason.is_empty() {
                        format!("llm: correct={}", judgement.correct)
                    } else {
                        judgement.reason
                    },
                    fell_back: false,
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ScoreOrigin;
    use async_trait::async_trait;
    use orkeon_crews::ports::{ChatError, ChatResponse};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    fn case(expected: &[&str]) -> EvalCase {
        EvalCase {
            id: "q-1".into(),
            question: "How many days do customers have to request a refund?".into(),
            relevant: BTreeMap::from([("policies/refunds.md".to_string(), 1)]),
            expected_substrings: expected.iter().map(|s| s.to_string()).collect(),
            reference_answer: Some("Within 30 days of delivery.".into()),
            tags: vec![],
        }
    }

    fn citation(marker: u32) -> Citation {
        Citation {
            marker,
            chunk_id: format!("c{marker}"),
            source_id: "policies/refunds.md".into(),
            snippet: "Customers may request a refund within 30 days of delivery.".into(),
            score: 0.9,
            score_origin: ScoreOrigin::Vector,
            start: 0,
            end: 10,
            untrusted: false,
        }
    }

    #[test]
    fn the_heuristic_checks_substrings_and_citations() {
        let c = case(&["30 days", "delivery"]);
        let good = heuristic_verdict(&c, "Within 30  Days of delivery [1].", &[citation(1)]);
        assert!(good.passed, "{good:?}");
        assert_eq!(good.score, 1.0);
        assert_eq!((good.substrings_found, good.substrings_expected), (2, 2));

        let half = heuristic_verdict(&c, "Within 30 days [1].", &[citation(1)]);
        assert!(!half.passed);
        assert_eq!(half.score, 0.5);
        assert!(half.reason.contains("delivery"), "{}", half.reason);

        let uncited = heuristic_verdict(&c, "Within 30 days of delivery.", &[citation(1)]);
        assert!(!uncited.passed && !uncited.citations_valid);
        assert!(uncited.reason.contains("no [n] citation"));

        let dangling = heuristic_verdict(&c, "30 days of delivery [1][3].", &[citation(1)]);
        assert!(!dangling.citations_valid);
        assert!(
            dangling.reason.contains("[1, 3]") || dangling.reason.contains("{1, 3}"),
            "{}",
            dangling.reason
        );

        let nothing_expected = heuristic_verdict(&case(&[]), "See [2].", &[citation(2)]);
        assert!(nothing_expected.passed);
        assert_eq!(nothing_expected.score, 1.0);
    }

    #[test]
    fn llm_verdicts_are_parsed_tolerantly() {
        let parsed =
            parse_llm_judgement("{\"correct\": true, \"score\": 0.9, \"reason\": \"ok\"}").unwrap();
        assert_eq!(
            parsed,
            LlmJudgement {
                correct: true,
                score: 0.9,
                reason: "ok".into()
            }
        );

        let fenced = "Here is my verdict:\n```json\n{\"correct\": \"no\", \"score\": \"3\"}\n```";
        let parsed = parse_llm_judgement(fenced).unwrap();
        assert!(!parsed.correct);
        assert!((parsed.score - 0.3).abs() < 1e-12);

        let percent = parse_llm_judgement("{\"score\": 85}").unwrap();
        assert!(percent.correct && (percent.score - 0.85).abs() < 1e-12);

        let loose = parse_llm_judgement("correct: yes\nscore: 0.7").unwrap();
        assert!(loose.correct && (loose.score - 0.7).abs() < 1e-12);

        let verdict_only = parse_llm_judgement("{\"verdict\": \"fail\"}").unwrap();
        assert!(!verdict_only.correct && verdict_only.score == 0.0);

        assert_eq!(parse_llm_judgement("I think it is fine."), None);
        assert_eq!(parse_llm_judgement("{\"reason\": \"no verdict\"}"), None);
    }

    /// A chat model answering from a fixed list (a scripted stand-in for a remote judge; it
    /// records the prompts it was given).
    struct ScriptedJudge {
        answers: Mutex<Vec<Result<String, String>>>,
        prompts: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl ChatModel for ScriptedJudge {
        fn name(&self) -> String {
            "scripted-judge".into()
        }
        async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
            self.prompts
                .lock()
                .unwrap()
                .push(request.messages.last().unwrap().content.clone());
            match self.answers.lock().unwrap().remove(0) {
                Ok(content) => Ok(ChatResponse {
                    content,
                    model: "scripted-judge".into(),
                    ..ChatResponse::default()
                }),
                Err(e) => Err(ChatError::Transport(e)),
            }
        }
    }

    #[tokio::test]
    async fn the_llm_judge_uses_the_model_and_falls_back_honestly() {
        let model = Arc::new(ScriptedJudge {
            answers: Mutex::new(vec![
                Ok(
                    "{\"correct\": true, \"score\": 1, \"reason\": \"matches the reference\"}"
                        .into(),
                ),
                Ok("I cannot decide".into()),
                Err("connection refused".into()),
            ]),
            prompts: Mutex::new(Vec::new()),
        });
        let judge = GenerationJudge::for_model(Some(model.clone()));
        assert_eq!(judge.name(), "llm:scripted-judge");
        let c = case(&["30 days"]);

        let v = judge.judge(&c, "Within 30 days [1].", &[citation(1)]).await;
        assert_eq!(v.judge, "llm:scripted-judge");
        assert!(v.passed && !v.fell_back);
        assert_eq!(v.reason, "matches the reference");
        let prompt = model.prompts.lock().unwrap()[0].clone();
        assert!(
            prompt.contains("REFERENCE ANSWER: Within 30 days of delivery."),
            "{prompt}"
        );
        assert!(prompt.contains("[1] (policies/refunds.md)"), "{prompt}");

        let v = judge.judge(&c, "Within 30 days [1].", &[citation(1)]).await;
        assert!(v.fell_back && v.judge == HEURISTIC_JUDGE);
        assert!(v.reason.contains("unreadable"), "{}", v.reason);
        assert!(v.passed, "the heuristic verdict stands: {v:?}");

        let v = judge.judge(&c, "No idea.", &[]).await;
        assert!(v.fell_back && !v.passed);
        assert!(v.reason.contains("connection refused"), "{}", v.reason);

        assert_eq!(GenerationJudge::for_model(None).name(), HEURISTIC_JUDGE);
    }
}
