//! Stage 6 (generate), the one generate step every pipeline runs: [`GenerateStep`] makes the
//! chat request (system prompt, user message, the configured sampling), maps its failure to
//! the stage, labels the answer with the model that gave it and, for a grounded answer
//! ([`GenerateStep::grounded`]), cleans up the citation markers the model invented and
//! resolves the citations. The staged pipeline, the corrective graph's `generate` node and the
//! adaptive direct answer all use it.
//!
//! Also here: the grounded prompt and the deterministic no-context answer. The user message
//! follows `orkeon_crews::ports::prompt_convention`: `Context:`, one line per passage in the
//! assembled layout (`[n] (source: …) text`, markers rank-based), a blank line, then
//! `Question: …`.

use std::sync::{Arc, OnceLock};

use orkeon_crews::ports::prompt_convention::{CONTEXT_HEADER, QUESTION_PREFIX};
use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest, Usage};
use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::QueryError;
use super::assemble::{AssembledContext, passage_line};
use super::options::GenerationOptions;
use crate::types::{Citation, ScoredChunk};

/// One generation call of a stage: the chat model, the stage it is traced and reported under,
/// and the configured sampling (`rag.generation.*`).
pub struct GenerateStep<'a> {
    chat: &'a Arc<dyn ChatModel>,
    stage: &'a str,
    options: &'a GenerationOptions,
}

/// What the model answered, labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub content: String,
    /// The model that answered (the response's label, else the chat model's name).
    pub model: String,
    pub usage: Usage,
}

/// A grounded answer: markers of passages that do not exist removed, citations resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GroundedAnswer {
    pub text: String,
    pub citations: Vec<Citation>,
    /// Known markers the answer cites, sorted, each once.
    pub cited: Vec<u32>,
    /// Unknown markers that were removed, in order of appearance.
    pub removed: Vec<u64>,
    pub model: String,
    pub usage: Usage,
    /// Passages the answer was grounded on.
    pub passages: usize,
}

impl GroundedAnswer {
    /// The `generate` trace step's detail: model, passages, cited and removed markers, tokens
    /// (a map, for callers that add their own keys).
    pub fn trace_detail(&self) -> Map<String, Value> {
        let mut detail = Map::new();
        detail.insert("model".into(), json!(self.model));
        detail.insert("passages".into(), json!(self.passages));
        detail.insert("cited".into(), json!(self.cited));
        detail.insert("removed_markers".into(), json!(self.removed));
        detail.insert("prompt_tokens".into(), json!(self.usage.prompt_tokens));
        detail.insert(
            "completion_tokens".into(),
            json!(self.usage.completion_tokens),
        );
        detail
    }
}

impl<'a> GenerateStep<'a> {
    /// Fails with [`QueryError::NoChatModel`] naming `stage` when there is no chat model.
    pub fn new(
        chat: Option<&'a Arc<dyn ChatModel>>,
        stage: &'a str,
        options: &'a GenerationOptions,
    ) -> Result<Self, QueryError> {
        let chat = chat.ok_or_else(|| QueryError::NoChatModel {
            stage: stage.to_string(),
        })?;
        Ok(Self {
            chat,
            stage,
            options,
        })
    }

    /// One chat call: `system`, then `user`, with the configured temperature and output limit.
    pub async fn reply(
        &self,
        system: impl Into<String>,
        user: impl Into<String>,
    ) -> Result<ModelReply, QueryError> {
        let mut request =
            ChatRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)]);
        request.temperature = self.options.temperature;
        request.max_tokens = self.options.max_output_tokens;
        let response = self
            .chat
            .chat(request)
            .await
            .map_err(|source| QueryError::Chat {
                stage: self.stage.to_string(),
                source,
            })?;
        let model = if response.model.is_empty() {
            self.chat.name()
        } else {
            response.model
        };
        Ok(ModelReply {
            content: response.content,
            model,
            usage: response.usage,
        })
    }

    /// The answer to `question` from the assembled `context`, under the configured grounded
    /// system prompt; invented markers are removed (with a warning) and citations resolved.
    pub async fn grounded(
        &self,
        question: &str,
        context: &AssembledContext,
    ) -> Result<GroundedAnswer, QueryError> {
        let reply = self
            .reply(
                self.options.system_prompt.clone(),
                user_message(question, context),
            )
            .await?;
        let passages = context.chunks.len();
        let cleanup = clean_markers(&reply.content, passages);
        if !cleanup.removed.is_empty() {
            tracing::warn!(model = %reply.model, removed = ?cleanup.removed, "the model cited passages that do not exist; markers removed");
        }
        Ok(GroundedAnswer {
            citations: citations_for(context, &cleanup.cited),
            text: cleanup.text,
            cited: cleanup.cited,
            removed: cleanup.removed,
            model: reply.model,
            usage: reply.usage,
            passages,
        })
    }
}

/// The user message: the numbered passages in prompt order, then the question.
pub fn user_message(question: &str, context: &AssembledContext) -> String {
    let mut message = String::from(CONTEXT_HEADER);
    message.push('\n');
    for (marker, chunk) in context.in_prompt_order() {
        message.push_str(&passage_line(marker, chunk));
        message.push('\n');
    }
    message.push('\n');
    message.push_str(QUESTION_PREFIX);
    message.push(' ');
    message.push_str(question.trim());
    message
}

/// The answer given, without calling any model, when retrieval found nothing to ground on.
pub fn no_context_answer(collection: &str) -> String {
    format!(
        "I could not find any relevant information in the knowledge collection '{collection}' to answer this question, so I cannot answer it from the available sources."
    )
}

/// What marker clean-up did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkerCleanup {
    /// The answer with unknown markers removed.
    pub text: String,
    /// Known markers the answer cites, sorted, each once.
    pub cited: Vec<u32>,
    /// Unknown markers that were removed, as numbers, in order of appearance.
    pub removed: Vec<u64>,
}

fn marker_group() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // `[3]`, `[1, 2]`, `[1][2]` (two groups), `[ 4 ; 5 ]`; leading whitespace is captured so a
    // removed marker does not leave a double space or a space before punctuation.
    RE.get_or_init(|| {
        Regex::new(r"(\s*)\[\s*(\d{1,6}(?:\s*[,;]\s*\d{1,6})*)\s*\]").expect("static regex")
    })
}

/// Checks every `[n]` of `answer` against `known` assembled passages (markers `1..=known`):
/// unknown numbers are removed (a group keeps its known members), known ones are collected.
pub fn clean_markers(answer: &str, known: usize) -> MarkerCleanup {
    let mut cited = Vec::new();
    let mut removed = Vec::new();
    let text = marker_group().replace_all(answer, |caps: &regex::Captures| {
        let leading = caps.get(1).map_or("", |m| m.as_str());
        let numbers: Vec<u64> = caps[2]
            .split([',', ';'])
            .filter_map(|n| n.trim().parse().ok())
            .collect();
        let (good, bad): (Vec<u64>, Vec<u64>) = numbers
            .into_iter()
            .partition(|&n| n >= 1 && n <= known as u64);
        removed.extend(bad.iter().copied());
        cited.extend(good.iter().map(|&n| n as u32));
        if bad.is_empty() {
            caps[0].to_string()
        } else if good.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = good.iter().map(u64::to_string).collect();
            format!("{leading}[{}]", list.join(", "))
        }
    });
    cited.sort_unstable();
    cited.dedup();
    MarkerCleanup {
        text: text.into_owned(),
        cited,
        removed,
    }
}

/// The citation of the chunk behind `marker` (1-based rank).
pub fn citation(marker: u32, chunk: &ScoredChunk) -> Citation {
    Citation {
        marker,
        chunk_id: chunk.chunk.id.clone(),
        source_id: chunk.chunk.source_id.clone(),
        snippet: chunk.chunk.text.clone(),
        score: chunk.score,
        score_origin: chunk.origin,
        start: chunk.chunk.start,
        end: chunk.chunk.end,
        untrusted: super::assemble::is_untrusted(chunk),
    }
}

/// Citations of the given markers (unknown ones skipped), in marker order.
pub fn citations_for(context: &AssembledContext, markers: &[u32]) -> Vec<Citation> {
    markers
        .iter()
        .filter_map(|&m| {
            context
                .chunks
                .get((m as usize).checked_sub(1)?)
                .map(|chunk| citation(m, chunk))
        })
        .collect()
}

/// Citations of every assembled passage, in rank order (the retrieval-only answer).
pub fn all_citations(context: &AssembledContext) -> Vec<Citation> {
    context
        .chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| citation(i as u32 + 1, chunk))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;
    use crate::query::options::ContextOrdering;

    fn context(n: usize) -> AssembledContext {
        let chunks: Vec<ScoredChunk> = (0..n)
            .map(|i| chunk(&format!("c{}", i + 1), 1.0 - i as f32 / 10.0, vec![]))
            .collect();
        AssembledContext {
            layout: crate::query::assemble::edges_layout(n),
            chunks,
            ordering: ContextOrdering::Edges,
            tokens: 0,
            max_tokens: 100,
            dropped_by_budget: 0,
        }
    }

    #[test]
    fn user_message_follows_the_prompt_convention_in_edges_layout() {
        let msg = user_message("  How long is the refund window? ", &context(4));
        let expected = "Context:\n\
            [1] (source: src/c1.md) text of c1\n\
            [3] (source: src/c3.md) text of c3\n\
            [4] (source: src/c4.md) text of c4\n\
            [2] (source: src/c2.md) text of c2\n\
            \n\
            Question: How long is the refund window?";
        assert_eq!(msg, expected);
    }

    #[test]
    fn unknown_markers_are_removed_and_reported() {
        let out = clean_markers(
            "Refunds take 30 days [1]. Shipping is free [7]. Both apply [2, 9]. See [3][2].",
            3,
        );
        assert_eq!(
            out.text,
            "Refunds take 30 days [1]. Shipping is free. Both apply [2]. See [3][2]."
        );
        assert_eq!(out.cited, vec![1, 2, 3]);
        assert_eq!(out.removed, vec![7, 9]);

        let out = clean_markers("Nothing cited [0] here [12].", 2);
        assert_eq!(out.text, "Nothing cited here.");
        assert!(out.cited.is_empty());
        assert_eq!(out.removed, vec![0, 12]);

        let untouched = clean_markers("A list [a] and a year [2024] and [2].", 2);
        assert_eq!(untouched.text, "A list [a] and a year and [2].");
        assert_eq!(untouched.removed, vec![2024]);
    }

    #[test]
    fn citations_resolve_markers_to_ranked_chunks() {
        let ctx = context(3);
        let cites = citations_for(&ctx, &[1, 3, 5]);
        assert_eq!(cites.len(), 2);
        assert_eq!((cites[0].marker, cites[0].chunk_id.as_str()), (1, "c1"));
        assert_eq!((cites[1].marker, cites[1].chunk_id.as_str()), (3, "c3"));
        assert_eq!(cites[1].snippet, "text of c3");
        let all = all_citations(&ctx);
        assert_eq!(
            all.iter().map(|c| c.marker).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }
}
