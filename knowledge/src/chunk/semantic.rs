//! The `semantic` strategy: embed every sentence, and start a new group where the cosine
//! similarity of adjacent sentences falls below the `breakpoint_percentile`-th percentile of
//! all adjacent similarities; groups larger than `max_tokens` are cut by the recursive strategy.
//! The breakpoint computation is a pure function of the vectors.

use std::sync::Arc;

use async_trait::async_trait;

use crate::embed::{Embedder, TokenCounter};
use crate::types::{Chunk, Document, Metadata};

use super::recursive::split_recursively;
use super::sentence::sentence_spans;
use super::span::Span;
use super::{ChunkBounds, ChunkError, Chunker};

/// Sentences sent to the embedder per call (it batches further by its own batch size).
const SENTENCES_PER_EMBED_CALL: usize = 64;

/// Cosine similarity of each adjacent pair: `result[i]` compares `vectors[i]` and
/// `vectors[i + 1]`. A zero vector is similar to nothing (0).
pub fn adjacent_similarities(vectors: &[Vec<f32>]) -> Vec<f32> {
    vectors
        .windows(2)
        .map(|pair| {
            let (a, b) = (&pair[0], &pair[1]);
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let norms = a.iter().map(|x| x * x).sum::<f32>().sqrt()
                * b.iter().map(|y| y * y).sum::<f32>().sqrt();
            if norms > 0.0 { dot / norms } else { 0.0 }
        })
        .collect()
}

/// The `p`-th percentile (0–100, clamped) of `values`, interpolating linearly between the
/// closest ranks (NumPy's default). `None` for no values.
pub fn percentile(values: &[f32], p: f64) -> Option<f32> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f32::total_cmp);
    let rank = p.clamp(0.0, 100.0) / 100.0 * (sorted.len() - 1) as f64;
    let lower = rank.floor() as usize;
    let upper = rank.ceil() as usize;
    let fraction = (rank - lower as f64) as f32;
    Some(sorted[lower] + (sorted[upper] - sorted[lower]) * fraction)
}

/// Indices of the sentences that start a new group: `i` (1 ≤ i < n) such that the similarity
/// of sentences `i - 1` and `i` is below the `breakpoint_percentile`-th percentile of all
/// adjacent similarities. Percentile 0 never breaks; fewer than two vectors never break.
pub fn semantic_breakpoints(vectors: &[Vec<f32>], breakpoint_percentile: u8) -> Vec<usize> {
    let similarities = adjacent_similarities(vectors);
    let Some(threshold) = percentile(&similarities, f64::from(breakpoint_percentile)) else {
        return Vec::new();
    };
    similarities
        .iter()
        .enumerate()
        .filter(|(_, similarity)| **similarity < threshold)
        .map(|(i, _)| i + 1)
        .collect()
}

pub(crate) struct SemanticChunker {
    tokens: Arc<dyn TokenCounter>,
    embedder: Arc<dyn Embedder>,
    bounds: ChunkBounds,
    breakpoint_percentile: u8,
}

impl SemanticChunker {
    pub fn new(
        tokens: Arc<dyn TokenCounter>,
        embedder: Arc<dyn Embedder>,
        bounds: ChunkBounds,
        breakpoint_percentile: u8,
    ) -> Self {
        Self {
            tokens,
            embedder,
            bounds,
            breakpoint_percentile,
        }
    }

    /// One vector per sentence, checked for count and dimensions.
    async fn embed_sentences(
        &self,
        doc: &Document,
        sentences: &[Span],
    ) -> Result<Vec<Vec<f32>>, ChunkError> {
        let text = doc.text.as_str();
        let inputs: Vec<String> = sentences
            .iter()
            .map(|s| s.trimmed(text).map_or("", |t| t.slice(text)).to_string())
            .collect();
        let mut vectors = Vec::with_capacity(inputs.len());
        for batch in inputs.chunks(SENTENCES_PER_EMBED_CALL) {
            let embedded = self
                .embedder
                .embed_documents(batch.to_vec())
                .await
                .map_err(|e| {
                    ChunkError::Embedding(format!(
                        "embedding the sentences of {} with {}: {e}",
                        doc.source_id,
                        self.embedder.profile()
                    ))
                })?;
            if embedded.len() != batch.len() {
                return Err(ChunkError::Embedding(format!(
                    "embedding the sentences of {} with {}: {} vectors came back for {} \
                     sentences; the embedder is faulty",
                    doc.source_id,
                    self.embedder.profile(),
                    embedded.len(),
                    batch.len()
                )));
            }
            vectors.extend(embedded);
        }
        if let Some(first) = vectors.first()
            && let Some(odd) = vectors.iter().find(|v| v.len() != first.len())
        {
            return Err(ChunkError::Embedding(format!(
                "embedding the sentences of {} with {}: vectors of {} and {} dimensions came \
                 back; the embedder is faulty",
                doc.source_id,
                self.embedder.profile(),
                first.len(),
                odd.len()
            )));
        }
        Ok(vectors)
    }
}

#[async_trait]
impl Chunker for SemanticChunker {
    fn name(&self) -> &'static str {
        "semantic"
    }

    async fn chunk(&self, doc: &Document) -> Result<Vec<Chunk>, ChunkError> {
        let text = doc.text.as_str();
        let sentences = sentence_spans(text);
        let breakpoints = if sentences.len() > 1 {
            let vectors = self.embed_sentences(doc, &sentences).await?;
            semantic_breakpoints(&vectors, self.breakpoint_percentile)
        } else {
            Vec::new()
        };
        let group_starts = std::iter::once(0).chain(breakpoints.iter().copied());
        let group_ends = breakpoints
            .iter()
            .copied()
            .chain(std::iter::once(sentences.len()));
        let mut chunks = Vec::new();
        for (first, end) in group_starts.zip(group_ends) {
            if first >= end {
                continue;
            }
            let group = Span::new(sentences[first].start, sentences[end - 1].end);
            chunks.extend(
                split_recursively(text, group, self.tokens.as_ref(), self.bounds)
                    .into_iter()
                    .map(|span| span.to_chunk(text, Metadata::new())),
            );
        }
        tracing::debug!(
            source_id = %doc.source_id,
            strategy = "semantic",
            sentences = sentences.len(),
            breakpoints = breakpoints.len(),
            chunks = chunks.len(),
            "chunked"
        );
        Ok(chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(angle_degrees: f32) -> Vec<f32> {
        let radians = angle_degrees.to_radians();
        vec![radians.cos(), radians.sin()]
    }

    #[test]
    fn similarities_are_cosines_of_adjacent_pairs() {
        let vectors = vec![
            vec![1.0, 0.0],
            vec![2.0, 0.0],
            vec![0.0, 3.0],
            vec![0.0, 0.0],
        ];
        assert_eq!(adjacent_similarities(&vectors), [1.0, 0.0, 0.0]);
        let tilted = adjacent_similarities(&[unit(0.0), unit(60.0)]);
        assert!((tilted[0] - 0.5).abs() < 1e-6);
        assert!(adjacent_similarities(&[unit(0.0)]).is_empty());
    }

    #[test]
    fn percentile_interpolates_like_numpy() {
        let values = [0.9, 0.1, 0.5, 0.3];
        // numpy.percentile([0.1, 0.3, 0.5, 0.9], q) for q = 0, 10, 50, 100
        let expected = [(0.0, 0.1), (10.0, 0.16), (50.0, 0.4), (100.0, 0.9)];
        for (p, value) in expected {
            let got = percentile(&values, p).expect("values");
            assert!((got - value).abs() < 1e-6, "p{p}: {got} != {value}");
        }
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[0.7], 10.0), Some(0.7));
    }

    #[test]
    fn breaks_where_the_topic_turns() {
        // Two topics: sentences 0–3 around 0°, sentences 4–6 around 90°.
        let vectors = vec![
            unit(0.0),
            unit(5.0),
            unit(2.0),
            unit(8.0),
            unit(88.0),
            unit(92.0),
            unit(85.0),
        ];
        // Similarities: high everywhere but between 3 and 4; the 10th percentile lies between
        // the lowest and the second lowest similarity.
        assert_eq!(semantic_breakpoints(&vectors, 10), [4]);
        assert_eq!(semantic_breakpoints(&vectors, 0), Vec::<usize>::new());
        // The 100th percentile is the maximum: every pair below it breaks.
        // The most similar pair is sentences 1 and 2 (3° apart).
        assert_eq!(semantic_breakpoints(&vectors, 100), [1, 3, 4, 5, 6]);
        assert!(semantic_breakpoints(&vectors[..1], 50).is_empty());
        assert!(semantic_breakpoints(&[], 50).is_empty());
    }

    /// The mechanism with the deterministic hash embedder; the real embeddings' topic breaks
    /// are tested with bge-small in `tests/real_models.rs`.
    mod with_hash_embedder {
        use std::sync::Arc;

        use super::*;
        use crate::chunk::invariants::{
            assert_contract, assert_covers_all_content, document, test_counter,
        };
        use crate::chunk::{ChunkBounds, Chunker};
        use crate::embed::HashEmbedder;

        const PASTA: &[&str] = &[
            "Bring a large pot of salted water to a rolling boil.",
            "Add the spaghetti and stir so the noodles do not stick together.",
        ];

        #[tokio::test]
        async fn factory_builds_semantic_with_an_embedder() {
            let settings = crate::settings::ChunkingSettings {
                strategy: "Semantic".to_string(),
                ..Default::default()
            };
            let embedder = Arc::new(HashEmbedder::new(64));
            let chunker = crate::chunk::build_chunker(&settings, test_counter(), Some(embedder))
                .expect("semantic builds");
            assert_eq!(chunker.name(), "semantic");
            let doc = document(&PASTA.join(" "), "text");
            let chunks = chunker.chunk(&doc).await.expect("semantic chunking");
            assert_contract(&doc, &chunks, test_counter().as_ref(), settings.max_tokens);
            assert_covers_all_content(&doc, &chunks);
        }

        #[tokio::test]
        async fn single_sentence_needs_no_embedding() {
            let doc = document("  Only one sentence here.  ", "text");
            let chunker = SemanticChunker::new(
                test_counter(),
                Arc::new(HashEmbedder::new(64)),
                ChunkBounds {
                    max_tokens: 64,
                    overlap: 4,
                },
                10,
            );
            let chunks = chunker.chunk(&doc).await.expect("semantic chunking");
            assert_eq!(chunks.len(), 1);
            assert_eq!(chunks[0].text, "Only one sentence here.");
            assert_eq!(chunker.embedder.stats().inputs, 0);
            assert!(
                chunker
                    .chunk(&document(" \n ", "text"))
                    .await
                    .expect("empty")
                    .is_empty()
            );
        }
    }

    #[test]
    fn identical_similarities_never_break() {
        let vectors = vec![unit(0.0), unit(10.0), unit(0.0), unit(10.0)];
        // Equal adjacent similarities: nothing is strictly below any percentile of them.
        assert!(semantic_breakpoints(&vectors, 50).is_empty());
    }
}
