//! The `llm` (`listwise`) reranker: one chat call shows the model every candidate, numbered,
//! and asks for a JSON ranking. The answer is parsed tolerantly; candidates the model left out
//! follow in retrieval order; an answer with no usable ranking falls back to retrieval order
//! and says so in the trace. Scores of ranked candidates are rank-derived (`1 − pos/m`).

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest};

use super::{RerankOutcome, Reranker};
use crate::query::QueryError;
use crate::query::llm_output::parse_ranking;
use crate::types::{ScoreOrigin, ScoredChunk};

/// Longest passage excerpt shown to the model, in characters.
const PASSAGE_CHARS: usize = 700;

pub struct LlmListwiseReranker {
    chat: Arc<dyn ChatModel>,
}

impl LlmListwiseReranker {
    pub fn new(chat: Arc<dyn ChatModel>) -> Self {
        Self { chat }
    }

    fn request(query: &str, candidates: &[ScoredChunk], top_n: usize) -> ChatRequest {
        let mut passages = String::new();
        for (i, c) in candidates.iter().enumerate() {
            let text = c
                .chunk
                .text
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let excerpt: String = text.chars().take(PASSAGE_CHARS).collect();
            passages.push_str(&format!("[{}] {excerpt}\n", i + 1));
        }
        let system = "You rank passages by how well they answer a question. Answer with a JSON object only: {\"ranking\": [passage numbers, most relevant first]}.";
        let user = format!(
            "Question: {query}\n\nPassages:\n{passages}\nRank the {} passages (at least the {top_n} most relevant) by relevance to the question.",
            candidates.len()
        );
        let mut request =
            ChatRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)]);
        request.temperature = Some(0.0);
        request.json_mode = true;
        request
    }
}

#[async_trait]
impl Reranker for LlmListwiseReranker {
    fn name(&self) -> &str {
        "llm"
    }

    async fn rerank(
        &self,
        query: &str,
        candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<Vec<ScoredChunk>, QueryError> {
        Ok(self.rerank_traced(query, candidates, top_n).await?.chunks)
    }

    async fn rerank_traced(
        &self,
        query: &str,
        mut candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<RerankOutcome, QueryError> {
        let model = self.chat.name();
        if candidates.len() <= 1 {
            candidates.truncate(top_n);
            return Ok(RerankOutcome {
                chunks: candidates,
                model: Some(model),
                note: Some("one candidate or none: no LLM call".into()),
            });
        }
        let response = self
            .chat
            .chat(Self::request(query, &candidates, top_n))
            .await
            .map_err(|source| QueryError::Chat {
                stage: "rerank (llm)".into(),
                source,
            })?;
        let model = if response.model.is_empty() {
            model
        } else {
            response.model
        };
        let m = candidates.len();
        let Some(mut order) = parse_ranking(&response.content, m) else {
            tracing::warn!(
                reranker = "llm",
                "unusable ranking from the model; keeping retrieval order"
            );
            candidates.truncate(top_n);
            return Ok(RerankOutcome {
                chunks: candidates,
                model: Some(model),
                note: Some(format!(
                    "the model's ranking could not be read ({:?}); fell back to retrieval order",
                    response.content.chars().take(120).collect::<String>()
                )),
            });
        };
        let ranked = order.len();
        let mut listed = vec![false; m];
        for &i in &order {
            listed[i] = true;
        }
        order.extend((0..m).filter(|&i| !listed[i]));
        let mut slots: Vec<Option<ScoredChunk>> = candidates.into_iter().map(Some).collect();
        let chunks = order
            .into_iter()
            .take(top_n)
            .enumerate()
            .filter_map(|(pos, i)| {
                let mut c = slots[i].take()?;
                c.score = 1.0 - pos as f32 / m as f32;
                c.origin = ScoreOrigin::Rerank;
                Some(c)
            })
            .collect();
        let note = (ranked < m).then(|| {
            format!(
                "the model ranked {ranked} of {m} candidates; the rest follow in retrieval order"
            )
        });
        Ok(RerankOutcome {
            chunks,
            model: Some(model),
            note,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;
    use orkeon_testkit::ScriptedChat;

    fn candidates() -> Vec<ScoredChunk> {
        ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, id)| chunk(id, 0.9 - i as f32 / 10.0, vec![]))
            .collect()
    }

    fn ids(chunks: &[ScoredChunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    #[tokio::test]
    async fn follows_the_models_ranking() {
        let chat = ScriptedChat::new(&["```json\n{\"ranking\": [3, 1, 4, 2]}\n```"]);
        let r = LlmListwiseReranker::new(chat.clone());
        let out = r.rerank_traced("q?", candidates(), 2).await.unwrap();
        assert_eq!(ids(&out.chunks), vec!["c", "a"]);
        assert!(out.chunks.iter().all(|c| c.origin == ScoreOrigin::Rerank));
        assert!(out.chunks[0].score > out.chunks[1].score);
        assert_eq!(out.note, None);
        let request = chat.requests.lock().unwrap()[0].clone();
        assert!(request.json_mode);
        assert!(request.messages[1].content.contains("[4] text of d"));
    }

    #[tokio::test]
    async fn partial_rankings_are_completed_in_retrieval_order() {
        let chat = ScriptedChat::new(&["Most relevant: [4], then [2]."]);
        let r = LlmListwiseReranker::new(chat);
        let out = r.rerank_traced("q?", candidates(), 4).await.unwrap();
        assert_eq!(ids(&out.chunks), vec!["d", "b", "a", "c"]);
        assert!(out.note.unwrap().contains("ranked 2 of 4"));
    }

    #[tokio::test]
    async fn garbage_falls_back_to_retrieval_order_with_a_note() {
        let chat = ScriptedChat::new(&["I'd rather not say."]);
        let r = LlmListwiseReranker::new(chat);
        let out = r.rerank_traced("q?", candidates(), 3).await.unwrap();
        assert_eq!(ids(&out.chunks), vec!["a", "b", "c"]);
        assert!(out.chunks.iter().all(|c| c.origin == ScoreOrigin::Vector));
        assert!(out.note.unwrap().contains("fell back to retrieval order"));
    }
}
