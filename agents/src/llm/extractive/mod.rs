//! The offline extractive model: answers a grounded prompt deterministically by quoting the
//! context sentences most relevant to the question, each cited with its passage's `[n]`.
//!
//! No network and no weights: pure string work over the last user message, read with
//! `crews::ports::prompt_convention` ([`grounded_prompt`]).

pub mod grounded_prompt;

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use orkeon_crews::citations::neutralise_markers;
use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse, Role, Usage};
use orkeon_crews::text::content_word_set;
use unicode_segmentation::UnicodeSegmentation;

use super::ExtractiveSettings;
use grounded_prompt::Passage;

/// The label of the extractive model in traces and answers.
pub const EXTRACTIVE_MODEL_NAME: &str = "extractive";

/// The answer when the context holds nothing relevant to the question.
pub const NO_CONTEXT_ANSWER: &str = "I could not find this in the provided context.";

/// The offline extractive model.
#[derive(Debug, Clone)]
pub struct ExtractiveModel {
    max_sentences: usize,
}

impl ExtractiveModel {
    pub fn new(settings: &ExtractiveSettings) -> Self {
        Self {
            max_sentences: settings.max_sentences.max(1),
        }
    }

    /// The answer text for one user message.
    pub fn answer(&self, user_message: &str) -> String {
        let prompt = grounded_prompt::parse(user_message);
        let selected = select_sentences(&prompt.passages, &prompt.question, self.max_sentences);
        if selected.is_empty() {
            return NO_CONTEXT_ANSWER.to_owned();
        }
        // A quoted sentence may carry bracketed references of its own ("as shown in
        // [14]"); written as they are, they would read as our markers and cite passages
        // that do not exist. Only the marker the model adds cites.
        selected
            .iter()
            .map(|s| format!("{} [{}]", neutralise_markers(&s.text), s.marker))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Default for ExtractiveModel {
    fn default() -> Self {
        Self::new(&ExtractiveSettings::default())
    }
}

#[async_trait]
impl ChatModel for ExtractiveModel {
    fn name(&self) -> String {
        EXTRACTIVE_MODEL_NAME.to_owned()
    }

    /// Answers the last user message. In JSON mode the answer is wrapped as
    /// `{"answer": "…"}` so callers that asked for a JSON object get one.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        let user_message = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .ok_or_else(|| {
                ChatError::InvalidResponse(
                    "the extractive model needs a user message to answer; the request had none"
                        .to_owned(),
                )
            })?;
        let answer = self.answer(user_message);
        let content = if request.json_mode {
            serde_json::json!({ "answer": answer }).to_string()
        } else {
            answer
        };
        Ok(ChatResponse {
            content,
            tool_calls: Vec::new(),
            model: EXTRACTIVE_MODEL_NAME.to_owned(),
            usage: Usage::default(),
        })
    }
}

/// A sentence chosen for the answer.
#[derive(Debug, Clone, PartialEq)]
struct SelectedSentence {
    marker: u32,
    /// Position of the passage in the prompt and of the sentence in its passage.
    passage_index: usize,
    sentence_index: usize,
    text: String,
}

/// Scores every sentence of every passage by the IDF-weighted overlap of its content terms
/// with the question's and keeps the best `max` (ties: lower marker, then earlier sentence),
/// returned in passage-rank order.
fn select_sentences(passages: &[Passage], question: &str, max: usize) -> Vec<SelectedSentence> {
    let question_terms = content_word_set(question);
    if passages.is_empty() || question_terms.is_empty() {
        return Vec::new();
    }

    struct Candidate {
        marker: u32,
        passage_index: usize,
        sentence_index: usize,
        text: String,
        terms: BTreeSet<String>,
    }
    let mut candidates = Vec::new();
    let mut document_frequency: HashMap<&str, usize> = HashMap::new();
    let passage_terms: Vec<BTreeSet<String>> =
        passages.iter().map(|p| content_word_set(&p.text)).collect();
    for terms in &passage_terms {
        for term in terms.iter().filter(|t| question_terms.contains(*t)) {
            *document_frequency.entry(term.as_str()).or_default() += 1;
        }
    }
    for (passage_index, passage) in passages.iter().enumerate() {
        for (sentence_index, sentence) in passage.text.unicode_sentences().enumerate() {
            let text = normalise_whitespace(sentence);
            if text.is_empty() {
                continue;
            }
            candidates.push(Candidate {
                marker: passage.marker,
                passage_index,
                sentence_index,
                terms: content_word_set(&text),
                text,
            });
        }
    }

    let n = passages.len() as f64;
    let idf = |term: &str| -> f64 {
        let df = document_frequency.get(term).copied().unwrap_or(0) as f64;
        (1.0 + n / df.max(1.0)).ln()
    };
    let mut scored: Vec<(f64, &Candidate)> = candidates
        .iter()
        .map(|c| {
            let score: f64 = c
                .terms
                .iter()
                .filter(|t| question_terms.contains(*t))
                .map(|t| idf(t))
                .sum();
            (score, c)
        })
        .filter(|(score, _)| *score > 0.0)
        .collect();
    scored.sort_by(|(sa, a), (sb, b)| {
        sb.total_cmp(sa)
            .then(a.marker.cmp(&b.marker))
            .then(a.passage_index.cmp(&b.passage_index))
            .then(a.sentence_index.cmp(&b.sentence_index))
    });

    let mut seen_texts: BTreeSet<&str> = BTreeSet::new();
    let mut selected: Vec<SelectedSentence> = Vec::new();
    for (_, candidate) in scored {
        if selected.len() >= max {
            break;
        }
        // Overlapping chunks repeat sentences: quote each sentence once.
        if !seen_texts.insert(candidate.text.as_str()) {
            continue;
        }
        selected.push(SelectedSentence {
            marker: candidate.marker,
            passage_index: candidate.passage_index,
            sentence_index: candidate.sentence_index,
            text: candidate.text.clone(),
        });
    }
    selected.sort_by(|a, b| {
        a.marker
            .cmp(&b.marker)
            .then(a.passage_index.cmp(&b.passage_index))
            .then(a.sentence_index.cmp(&b.sentence_index))
    });
    selected
}

fn normalise_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::ports::ChatMessage;

    const PROMPT: &str = "Context:
[1] (source: kb/refunds.md) Customers can request a refund within 30 days of purchase. Refunds are paid back to the original payment method. Our office dog is called Biscuit.
[2] (source: kb/shipping.md) Standard shipping takes 3 to 5 business days. Express shipping arrives the next day.
[3] (source: kb/faq.md) Gift cards cannot be refunded. Contact support by email for anything else.

Question: How many days do customers have to request a refund?";

    fn model(max: usize) -> ExtractiveModel {
        ExtractiveModel::new(&ExtractiveSettings { max_sentences: max })
    }

    #[test]
    fn picks_the_relevant_sentences_with_their_markers_in_rank_order() {
        let answer = model(2).answer(PROMPT);
        assert_eq!(
            answer,
            "Customers can request a refund within 30 days of purchase. [1] \
             Refunds are paid back to the original payment method. [1]"
        );
    }

    #[test]
    fn more_sentences_reach_other_passages_but_never_irrelevant_ones() {
        let answer = model(5).answer(PROMPT);
        assert!(answer.starts_with("Customers can request a refund within 30 days"));
        assert!(
            answer.contains("Gift cards cannot be refunded. [3]"),
            "{answer}"
        );
        assert!(
            answer.contains("Standard shipping takes 3 to 5 business days. [2]"),
            "days matches: {answer}"
        );
        assert!(!answer.contains("Biscuit"), "{answer}");
        assert!(!answer.contains("Express"), "{answer}");
        // Passage-rank order: every [1] before [2] before [3].
        let p1 = answer.rfind("[1]").unwrap();
        let p2 = answer.find("[2]").unwrap();
        let p3 = answer.find("[3]").unwrap();
        assert!(p1 < p2 && p2 < p3, "{answer}");
    }

    #[test]
    fn rare_terms_outweigh_common_ones() {
        // "refund" occurs in two passages, "business" in one: the business sentence wins over
        // the refund sentences even though they sit in a better-ranked passage.
        let prompt = PROMPT.replace(
            "How many days do customers have to request a refund?",
            "refund for business",
        );
        let answer = model(1).answer(&prompt);
        assert_eq!(answer, "Standard shipping takes 3 to 5 business days. [2]");
    }

    #[test]
    fn no_passages_or_no_overlap_gives_the_fixed_answer_without_markers() {
        assert_eq!(
            model(3).answer("Question: what is the refund window?"),
            NO_CONTEXT_ANSWER
        );
        let unrelated = PROMPT.replace(
            "How many days do customers have to request a refund?",
            "Which database engine powers the warehouse?",
        );
        assert_eq!(model(3).answer(&unrelated), NO_CONTEXT_ANSWER);
    }

    #[test]
    fn ties_go_to_the_earlier_passage_and_duplicates_are_quoted_once() {
        let prompt = "Context:\n[1] The warranty lasts two years.\n[2] The warranty lasts two years.\n[3] A warranty claim needs the receipt.\n\nQuestion: warranty";
        assert_eq!(
            model(2).answer(prompt),
            "The warranty lasts two years. [1] A warranty claim needs the receipt. [3]"
        );
    }

    #[test]
    fn bracketed_references_in_quoted_text_never_become_markers() {
        // Scientific abstracts cite their own references as [14]; the prompt has 2 passages.
        let prompt = "Context:\n\
[1] (source: pubmed/1.txt) Statins lower LDL cholesterol by a third [14]. Adherence falls after a year [3, 22].\n\
[2] (source: pubmed/2.txt) Exercise lowers blood pressure.\n\n\
Question: Do statins lower LDL cholesterol, and what about adherence?";
        let answer = model(2).answer(prompt);
        assert_eq!(
            answer,
            "Statins lower LDL cholesterol by a third (14). [1] \
             Adherence falls after a year (3, 22). [1]"
        );
        let markers = crate::citations::cited_markers(&answer);
        assert_eq!(markers.into_iter().collect::<Vec<_>>(), vec![1]);
    }

    #[tokio::test]
    async fn chat_answers_the_last_user_message_labelled_extractive() {
        let request = ChatRequest::new(vec![
            ChatMessage::system("You answer from context."),
            ChatMessage::user("an older message"),
            ChatMessage::user(PROMPT),
        ]);
        let response = model(1).chat(request.clone()).await.unwrap();
        assert_eq!(response.model, "extractive");
        assert_eq!(
            response.content,
            "Customers can request a refund within 30 days of purchase. [1]"
        );

        let json = model(1)
            .chat(ChatRequest {
                json_mode: true,
                ..request
            })
            .await
            .unwrap();
        let value: serde_json::Value = serde_json::from_str(&json.content).unwrap();
        assert_eq!(value["answer"], response.content.as_str());
    }
}
