//! [`HeuristicClassifier`]: deterministic routing rules, zero LLM calls. In order:
//!
//! 1. **NoRetrieval** — the message is a greeting, thanks, farewell or small talk ("hi",
//!    "thanks a lot!", "how are you?", "who are you?"): once a known phrase is removed, nothing
//!    but filler words remains; or the message has no content word at all ("ok", "?").
//! 2. **Iterative** — any of:
//!    - comparative cues: `compare`, `comparison`, `versus`, `vs`, `difference(s) between`,
//!      `differ`, `better than`, `worse than`, `pros and cons`, `advantages and disadvantages`,
//!      `similarities`, `contrast`, `which is better`;
//!    - multi-hop cues: `both`, `relationship between`, `affect`, `impact`, `led to`,
//!      `because of`, `caused`, `depend(s) on`, `step by step`, `in total`, `altogether`,
//!      `combined`, `across all`, `and then`, `before and after`;
//!    - multi-part: two or more question marks, or a second question joined by
//!      `and/or` + a question word (`… and how …`, `… or why …`), or a `;`;
//!    - a long question: more than [`LONG_QUESTION_WORDS`] (25) words.
//! 3. **SingleShot** — everything else (a short single-fact question).
//!
//! The rule that decided is the decision's `reason`.

use std::sync::LazyLock;

use async_trait::async_trait;
use regex::Regex;
use unicode_segmentation::UnicodeSegmentation;

use super::{QueryComplexityClassifier, QueryRoute, RouteDecision};
use orkeon_crews::text::content_words;

/// Words above which a question is routed as iterative.
pub const LONG_QUESTION_WORDS: usize = 25;

/// Greeting, thanks, farewell and small-talk phrases (lowercase, punctuation removed).
const SMALL_TALK: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "hiya",
    "howdy",
    "greetings",
    "good morning",
    "good afternoon",
    "good evening",
    "good night",
    "thanks",
    "thank you",
    "thx",
    "cheers",
    "bye",
    "goodbye",
    "see you",
    "see you later",
    "how are you",
    "how are you doing",
    "how is it going",
    "how s it going",
    "what s up",
    "whats up",
    "who are you",
    "what are you",
    "what can you do",
    "nice to meet you",
    "ok",
    "okay",
    "great",
    "cool",
    "awesome",
    "perfect",
    "got it",
    "sounds good",
];

/// Words that may accompany small talk without making it a question.
const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "for",
    "it",
    "that",
    "this",
    "everything",
    "your",
    "help",
    "you",
    "there",
    "lot",
    "much",
    "very",
    "so",
    "again",
    "everyone",
    "all",
    "team",
    "bot",
    "assistant",
    "friend",
    "today",
    "then",
    "later",
    "now",
    "please",
    "man",
    "guys",
    "folks",
    "tons",
    "many",
    "really",
    "morning",
    "evening",
    "soon",
];

static COMPARATIVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:compare[sd]?|comparing|comparison|versus|vs\.?|differences?\s+between|differ(?:s|ent)?\s+from|differ|better\s+than|worse\s+than|pros\s+and\s+cons|advantages\s+and\s+disadvantages|similarities|contrast|which\s+is\s+better)\b",
    )
    .expect("literal regex")
});

static MULTI_HOP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:both|relationship\s+between|affect(?:s|ed)?|impact(?:s|ed)?|led\s+to|because\s+of|caused|depends?\s+on|step\s+by\s+step|in\s+total|altogether|combined|across\s+all|and\s+then|before\s+and\s+after)\b",
    )
    .expect("literal regex")
});

static SECOND_QUESTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:and|or)\s+(?:what|how|why|when|where|who|which|whose|whom|is|are|does|do|can)\b",
    )
    .expect("literal regex")
});

/// The deterministic classifier (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct HeuristicClassifier;

fn normalised_words(text: &str) -> Vec<String> {
    text.unicode_words()
        .map(|w| w.to_lowercase().replace('\'', " "))
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Whether `words` are small talk: known phrases and filler only.
fn is_small_talk(words: &[String]) -> bool {
    if words.is_empty() {
        return false;
    }
    let mut rest: &[String] = words;
    let mut matched_phrase = false;
    'outer: while !rest.is_empty() {
        // Longest known phrase at this position.
        let mut best = 0usize;
        for phrase in SMALL_TALK {
            let parts: Vec<&str> = phrase.split(' ').collect();
            if parts.len() <= rest.len()
                && parts.len() > best
                && parts.iter().zip(rest).all(|(p, w)| *p == w.as_str())
            {
                best = parts.len();
            }
        }
        if best > 0 {
            matched_phrase = true;
            rest = &rest[best..];
            continue 'outer;
        }
        if FILLER.contains(&rest[0].as_str()) {
            rest = &rest[1..];
            continue;
        }
        return false;
    }
    matched_phrase
}

impl HeuristicClassifier {
    /// The decision, computed synchronously.
    pub fn decide(question: &str) -> RouteDecision {
        let decision = |route, reason: String| RouteDecision {
            route,
            classifier: "heuristic".into(),
            reason,
            fallback: None,
        };
        let words = normalised_words(question);
        if is_small_talk(&words) {
            return decision(
                QueryRoute::NoRetrieval,
                "greeting or small talk: nothing to look up".into(),
            );
        }
        if content_words(question).is_empty() {
            return decision(
                QueryRoute::NoRetrieval,
                "no content word to retrieve on".into(),
            );
        }
        if let Some(m) = COMPARATIVE.find(question) {
            return decision(
                QueryRoute::Iterative,
                format!("comparative cue {:?}", m.as_str()),
            );
        }
        if let Some(m) = MULTI_HOP.find(question) {
            return decision(
                QueryRoute::Iterative,
                format!("multi-hop cue {:?}", m.as_str()),
            );
        }
        if question.matches('?').count() >= 2 {
            return decision(
                QueryRoute::Iterative,
                "several questions (question marks)".into(),
            );
        }
        if question.contains(';') {
            return decision(QueryRoute::Iterative, "several parts (semicolon)".into());
        }
        if let Some(m) = SECOND_QUESTION.find(question) {
            return decision(
                QueryRoute::Iterative,
                format!("a second question joined by {:?}", m.as_str()),
            );
        }
        if words.len() > LONG_QUESTION_WORDS {
            return decision(
                QueryRoute::Iterative,
                format!("long question ({} words)", words.len()),
            );
        }
        decision(QueryRoute::SingleShot, "short single-fact question".into())
    }
}

#[async_trait]
impl QueryComplexityClassifier for HeuristicClassifier {
    fn name(&self) -> &str {
        "heuristic"
    }

    async fn classify(&self, question: &str) -> RouteDecision {
        Self::decide(question)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(q: &str) -> QueryRoute {
        HeuristicClassifier::decide(q).route
    }

    #[test]
    fn small_talk_needs_no_retrieval() {
        for q in [
            "Hi!",
            "hello there",
            "Thanks a lot!",
            "thank you very much",
            "Good morning, team",
            "How are you?",
            "what's up",
            "Who are you?",
            "ok",
            "?",
            "bye, see you later",
        ] {
            assert_eq!(route(q), QueryRoute::NoRetrieval, "{q}");
        }
        // A greeting followed by a real question is a question.
        assert_eq!(
            route("Hi, how many days do I have to request a refund?"),
            QueryRoute::SingleShot
        );
        assert_eq!(
            route("Thanks! What is the warranty period?"),
            QueryRoute::SingleShot
        );
    }

    #[test]
    fn short_single_fact_questions_are_single_shot() {
        for q in [
            "How many days do customers have to request a refund?",
            "What is the warranty period of the AquaProbe S2?",
            "Who is the head of support?",
            "When does Heron log users out?",
        ] {
            let d = HeuristicClassifier::decide(q);
            assert_eq!(d.route, QueryRoute::SingleShot, "{q}: {d:?}");
            assert_eq!(d.classifier, "heuristic");
        }
    }

    #[test]
    fn multi_part_comparative_and_multi_hop_are_iterative() {
        for (q, cue) in [
            ("Compare the Pro and Basic cloud plans.", "comparative"),
            (
                "What is the difference between the S2 and the Mini?",
                "comparative",
            ),
            ("AquaProbe S2 vs AquaProbe Mini battery life", "comparative"),
            (
                "Which incidents affected both Gannet and Puffin?",
                "multi-hop",
            ),
            ("How did the firmware bug impact battery life?", "multi-hop"),
            (
                "What is the refund window? And who approves refunds?",
                "question marks",
            ),
            (
                "What is the SLA and how are credits computed?",
                "second question",
            ),
            ("Refund window; warranty length", "semicolon"),
        ] {
            let d = HeuristicClassifier::decide(q);
            assert_eq!(d.route, QueryRoute::Iterative, "{q}: {d:?}");
            assert!(d.reason.contains(cue), "{q}: {}", d.reason);
        }
        let long = "Please tell me what the procedure is for a customer in the Asia Pacific region who bought a gateway last year and now wants to connect it to the new region";
        assert_eq!(route(long), QueryRoute::Iterative);
    }
}
