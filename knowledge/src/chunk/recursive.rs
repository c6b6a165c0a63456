//! The `recursive` strategy: cut along the separator hierarchy (paragraphs, lines, sentence
//! ends, clauses, words, characters), merge adjacent pieces up to `max_tokens`, and repeat up
//! to `overlap` tokens of each chunk's tail at the next chunk's head. Also the splitter the
//! other strategies use for oversized sections and groups.

use std::sync::Arc;

use async_trait::async_trait;

use crate::embed::TokenCounter;
use crate::types::{Chunk, Document, Metadata};

use super::pack::{OverlapBoundary, Packer};
use super::span::Span;
use super::split::Measurer;
use super::{ChunkBounds, ChunkError, Chunker};

pub(crate) struct RecursiveChunker {
    tokens: Arc<dyn TokenCounter>,
    bounds: ChunkBounds,
}

impl RecursiveChunker {
    pub fn new(tokens: Arc<dyn TokenCounter>, bounds: ChunkBounds) -> Self {
        Self { tokens, bounds }
    }
}

#[async_trait]
impl Chunker for RecursiveChunker {
    fn name(&self) -> &'static str {
        "recursive"
    }

    async fn chunk(&self, doc: &Document) -> Result<Vec<Chunk>, ChunkError> {
        let text = doc.text.as_str();
        let chunks: Vec<Chunk> = split_recursively(
            text,
            Span::new(0, text.len()),
            self.tokens.as_ref(),
            self.bounds,
        )
        .into_iter()
        .map(|span| span.to_chunk(text, Metadata::new()))
        .collect();
        tracing::debug!(source_id = %doc.source_id, strategy = "recursive", chunks = chunks.len(), "chunked");
        Ok(chunks)
    }
}

/// Chunk spans of `span` of `text` by the recursive strategy.
pub(crate) fn split_recursively(
    text: &str,
    span: Span,
    counter: &dyn TokenCounter,
    bounds: ChunkBounds,
) -> Vec<Span> {
    let measurer = Measurer::new(text, counter, bounds.max_tokens);
    let mut pieces = Vec::new();
    measurer.measure(span, &mut pieces);
    Packer::new(&measurer, text, bounds, OverlapBoundary::WithinLastPiece).pack(&pieces)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use std::sync::Arc;

    use crate::chunk::invariants::{
        CountEverySpan, arbitrary_text, assert_contract, assert_covers_all_content,
        chunks_recounting, document, test_counter,
    };

    fn chunker(max_tokens: usize, overlap: usize) -> RecursiveChunker {
        RecursiveChunker::new(
            test_counter(),
            ChunkBounds {
                max_tokens,
                overlap,
            },
        )
    }

    async fn chunk(text: &str, max_tokens: usize, overlap: usize) -> Vec<Chunk> {
        let doc = document(text, "text");
        let chunks = chunker(max_tokens, overlap)
            .chunk(&doc)
            .await
            .expect("recursive chunking does not fail");
        assert_contract(&doc, &chunks, test_counter().as_ref(), max_tokens);
        assert_covers_all_content(&doc, &chunks);
        chunks
    }

    const PROSE: &str = "Orkeon ingests knowledge incrementally. Each source is loaded, \
        validated and chunked before it is embedded. An unchanged source costs zero embeddings, \
        which keeps re-ingestion cheap.\n\nThe store keeps chunks in sled. A BM25 index and a \
        vector index are derived from it; both can be rebuilt at any time. Hybrid search fuses \
        their rankings with reciprocal rank fusion.\n\nQueries flow through staged retrieval: \
        transform, retrieve, fuse, rerank, assemble and generate. Every stage records a trace \
        step with its duration, its counts and the components it chose.";

    #[tokio::test]
    async fn small_document_is_one_trimmed_chunk() {
        let chunks = chunk("\n  Hello, world.  \n", 64, 8).await;
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "Hello, world.");
        assert_eq!((chunks[0].start, chunks[0].end), (3, 16));
        assert!(chunk(" \n\t ", 64, 8).await.is_empty());
        assert!(chunk("", 64, 8).await.is_empty());
    }

    #[tokio::test]
    async fn paragraphs_that_fit_stay_whole() {
        let chunks = chunk(PROSE, 64, 0).await;
        let paragraphs: Vec<&str> = PROSE.split("\n\n").collect();
        assert_eq!(chunks.len(), paragraphs.len(), "{chunks:#?}");
        for (chunk, paragraph) in chunks.iter().zip(paragraphs) {
            assert_eq!(chunk.text, paragraph);
        }
    }

    #[tokio::test]
    async fn without_overlap_chunks_are_disjoint() {
        let chunks = chunk(PROSE, 24, 0).await;
        assert!(chunks.len() > 3);
        for pair in chunks.windows(2) {
            assert!(pair[1].start >= pair[0].end, "{pair:#?}");
        }
    }

    #[tokio::test]
    async fn overlap_repeats_the_previous_tail_within_budget() {
        let counter = test_counter();
        let (max_tokens, overlap) = (32, 10);
        let chunks = chunk(PROSE, max_tokens, overlap).await;
        assert!(chunks.len() > 3);
        let mut overlapping = 0;
        for pair in chunks.windows(2) {
            let (previous, next) = (&pair[0], &pair[1]);
            assert!(next.start > previous.start);
            if next.start < previous.end {
                overlapping += 1;
                let shared = &PROSE[next.start..previous.end];
                let tokens = counter.count_tokens(shared);
                assert!(
                    tokens > 0 && tokens <= overlap,
                    "{tokens} tokens: {shared:?}"
                );
                // The overlap starts on a piece boundary: right after whitespace.
                assert!(
                    PROSE[..next.start].ends_with(char::is_whitespace),
                    "overlap starts mid-word: {shared:?}"
                );
            }
        }
        // Prose has word boundaries everywhere: every chunk after the first carries overlap.
        assert_eq!(overlapping, chunks.len() - 1, "{chunks:#?}");
    }

    #[tokio::test]
    async fn prefers_sentence_ends_over_words() {
        let chunks = chunk(PROSE, 40, 0).await;
        let sentence_ends = chunks
            .iter()
            .filter(|c| c.text.ends_with('.') || c.text.ends_with(';'))
            .count();
        assert!(
            sentence_ends * 10 >= chunks.len() * 8,
            "most chunks should end at a sentence or clause end: {chunks:#?}"
        );
    }

    /// With a tokenizer whose counts add up across whitespace, ranges already counted part by
    /// part are not counted again: a paragraph over the bound is tokenised about once (plus the
    /// overlap's search), not once whole, once by sentence and again for each chunk and tail.
    #[tokio::test]
    async fn additive_counts_are_summed_not_counted_again() {
        let text = PROSE.replace("\n\n", " ").repeat(3);
        let doc = document(&text, "text");
        let mut chunkings = Vec::new();
        for additive in [true, false] {
            let counter = Arc::new(CountEverySpan::new(additive));
            let bounds = ChunkBounds {
                max_tokens: 48,
                overlap: 8,
            };
            let chunks = RecursiveChunker::new(counter.clone(), bounds)
                .chunk(&doc)
                .await
                .unwrap();
            chunkings.push((chunks, counter.counted()));
        }
        let ((summed, summed_work), (counted, counted_work)) = (&chunkings[0], &chunkings[1]);
        assert_eq!(summed, counted, "the same chunks either way");
        let doc_tokens = test_counter().count_tokens(&text);
        assert!(summed.len() > 3);
        // What is still counted beyond the sentences is the overlap's search inside the last
        // sentence of each chunk (clauses, then words from the back).
        assert!(
            *summed_work <= doc_tokens * 14 / 10,
            "{summed_work} for {doc_tokens}"
        );
        assert!(
            *counted_work > summed_work * 2,
            "{counted_work} against {summed_work}"
        );
    }

    #[tokio::test]
    async fn unspaced_runs_fall_back_to_characters() {
        // CJK characters are one token each for BERT tokenizers and carry no separator.
        let run = "知识库分块器按照令牌数量切分文本😀".repeat(20);
        let text = format!("Intro line.\n{run}\nOutro line.");
        let chunks = chunk(&text, 16, 4).await;
        assert!(chunks.len() > 20);
        assert!(chunks.iter().any(|c| c.text.contains('😀')));
    }

    #[tokio::test]
    async fn multibyte_text_keeps_char_boundaries() {
        let text = "Grüße aus Zürich — ça va? Ünïcödé text with emoji 🚀🚀 and accents: \
                    éèêë àâä ïî ôö ùûü ç. Ελληνικά κείμενα, русский текст; 日本語のテキスト。"
            .repeat(6);
        let chunks = chunk(&text, 12, 3).await;
        assert!(chunks.len() > 6);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn contract_holds_on_arbitrary_text(
            text in arbitrary_text(),
            max_tokens in 8usize..80,
            overlap_share in 0usize..50,
        ) {
            let overlap = (max_tokens / 2).saturating_sub(1) * overlap_share / 50;
            let doc = document(&text, "text");
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            let chunks = runtime
                .block_on(chunker(max_tokens, overlap).chunk(&doc))
                .expect("recursive chunking does not fail");
            assert_contract(&doc, &chunks, test_counter().as_ref(), max_tokens);
            assert_covers_all_content(&doc, &chunks);
            // Summing additive counts gives exactly what counting every range gives.
            let bounds = ChunkBounds { max_tokens, overlap };
            let counted = chunks_recounting(|counter| RecursiveChunker::new(counter, bounds), &doc);
            prop_assert_eq!(chunks, counted);
        }
    }
}
