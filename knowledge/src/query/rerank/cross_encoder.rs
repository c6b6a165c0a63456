//! The `onnx` (`cross-encoder`) reranker: scores every (question, candidate) pair with the
//! local cross-encoder (`embed::CrossEncoder`, ms-marco-MiniLM-L-12-v2 by default: batched,
//! length-sorted pairs truncated to 512 tokens) and keeps the `top_n` highest logits, labelled
//! [`ScoreOrigin::Rerank`]. Equal logits keep retrieval order. With
//! `rag.rerank.max_passage_chars`, each passage is cut (at a word boundary) before it is
//! tokenised: the cross-encoder's cost grows with the pair's length, and a passage's opening
//! usually carries what decides its relevance.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{RerankOutcome, Reranker, RerankerBuilder};
use crate::embed::CrossEncoder;
use crate::embed::models::resolve_model;
use crate::query::QueryError;
use crate::settings::EmbeddingSettings;
use crate::types::{ScoreOrigin, ScoredChunk};

pub struct OnnxReranker {
    encoder: Arc<CrossEncoder>,
    /// Passage cut in characters (`None`: whole passages).
    max_passage_chars: Option<usize>,
}

/// `text` cut to at most `max_chars` characters, at the last whitespace inside the cut when
/// there is one (a word is never split unless it alone exceeds the cut).
pub fn cut_passage(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        None => text,
        Some((end, next)) if next.is_whitespace() => text[..end].trim_end(),
        Some((end, _)) => {
            let head = &text[..end];
            match head.rfind(char::is_whitespace) {
                Some(space) if space > 0 => head[..space].trim_end(),
                _ => head,
            }
        }
    }
}

impl OnnxReranker {
    pub fn new(encoder: Arc<CrossEncoder>) -> Self {
        Self {
            encoder,
            max_passage_chars: None,
        }
    }

    /// Cuts every passage to about `max_chars` characters before scoring.
    pub fn with_max_passage_chars(mut self, max_chars: Option<usize>) -> Self {
        self.max_passage_chars = max_chars;
        self
    }

    /// The cross-encoder in use.
    pub fn encoder(&self) -> &Arc<CrossEncoder> {
        &self.encoder
    }
}

#[async_trait]
impl Reranker for OnnxReranker {
    fn name(&self) -> &str {
        "onnx"
    }

    async fn rerank(
        &self,
        query: &str,
        candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<Vec<ScoredChunk>, QueryError> {
        let passages: Vec<String> = candidates
            .iter()
            .map(|c| match self.max_passage_chars {
                Some(max) => cut_passage(&c.chunk.text, max).to_string(),
                None => c.chunk.text.clone(),
            })
            .collect();
        let logits = self
            .encoder
            .score(query, passages)
            .await
            .map_err(|e| QueryError::Rerank {
                reranker: format!("onnx ({})", self.encoder.model_name()),
                reason: e.to_string(),
            })?;
        if logits.len() != candidates.len() {
            return Err(QueryError::Rerank {
                reranker: format!("onnx ({})", self.encoder.model_name()),
                reason: format!(
                    "{} scores for {} candidates",
                    logits.len(),
                    candidates.len()
                ),
            });
        }
        let mut scored: Vec<(f32, ScoredChunk)> = logits.into_iter().zip(candidates).collect();
        // Stable sort: equal logits keep retrieval order. NaN sorts last.
        scored.sort_by(|a, b| {
            let key = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
            key(b.0).total_cmp(&key(a.0))
        });
        Ok(scored
            .into_iter()
            .take(top_n)
            .map(|(logit, mut c)| {
                c.score = logit;
                c.origin = ScoreOrigin::Rerank;
                c
            })
            .collect())
    }

    async fn rerank_traced(
        &self,
        query: &str,
        candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<RerankOutcome, QueryError> {
        Ok(RerankOutcome {
            chunks: self.rerank(query, candidates, top_n).await?,
            model: Some(self.encoder.model_name()),
            note: None,
        })
    }
}

/// The `onnx` builder: resolves `rag.rerank.model` (folder name or path) like any model —
/// `embeddings.models_dir`, `ORKEON_MODELS_DIR`, the cache, then a verified download — and
/// loads it once per resolved folder (every pipeline using that model shares one encoder).
pub fn onnx_builder(embedding: EmbeddingSettings) -> RerankerBuilder {
    let loaded: Mutex<HashMap<PathBuf, Arc<CrossEncoder>>> = Mutex::new(HashMap::new());
    Arc::new(move |ctx| {
        let model = &ctx.options.model;
        let setup = |reason: String| QueryError::Setup {
            component: format!("reranker 'onnx' (rag.rerank.model = {model})"),
            reason,
        };
        let dir = resolve_model(model, &embedding, None).map_err(|e| setup(e.to_string()))?;
        let mut cache = loaded.lock().unwrap_or_else(|e| e.into_inner());
        let encoder = match cache.get(&dir) {
            Some(encoder) => encoder.clone(),
            None => {
                let encoder = Arc::new(
                    CrossEncoder::load(&dir, &embedding).map_err(|e| setup(e.to_string()))?,
                );
                cache.insert(dir, encoder.clone());
                encoder
            }
        };
        Ok(Arc::new(
            OnnxReranker::new(encoder).with_max_passage_chars(ctx.options.max_passage_chars),
        ) as Arc<dyn Reranker>)
    })
}

#[cfg(test)]
mod tests {
    use super::cut_passage;

    #[test]
    fn passages_are_cut_at_a_word_boundary() {
        assert_eq!(cut_passage("short text", 100), "short text");
        assert_eq!(cut_passage("alpha beta gamma", 12), "alpha beta");
        assert_eq!(cut_passage("alpha beta gamma", 10), "alpha beta");
        assert_eq!(cut_passage("alpha beta gamma", 9), "alpha");
        // A single long word is cut inside it; multi-byte characters stay whole.
        assert_eq!(cut_passage("abcdefgh", 3), "abc");
        assert_eq!(cut_passage("ééé ààà", 5), "ééé");
        assert_eq!(cut_passage("", 5), "");
    }
}

// The `onnx` reranker on the real ms-marco cross-encoder (its ranking, the memoised encoder,
// a missing model naming the key) is tested in `tests/models_retrieval.rs`.
