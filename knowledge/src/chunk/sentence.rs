//! The `sentence` strategy: Unicode sentence boundaries (UAX #29), sentences packed up to
//! `max_tokens` (an oversized sentence is cut along the separator hierarchy), and overlap in
//! whole sentences of at most `overlap` tokens. Also the sentence segmentation the semantic
//! strategy embeds.

use std::sync::Arc;

use async_trait::async_trait;
use unicode_segmentation::UnicodeSegmentation;

use crate::embed::TokenCounter;
use crate::types::{Chunk, Document, Metadata};

use super::pack::{OverlapBoundary, Packer};
use super::span::Span;
use super::split::Measurer;
use super::{ChunkBounds, ChunkError, Chunker};

/// Sentences of `text` tiling it in order (trailing whitespace stays with its sentence;
/// whitespace-only segments join their neighbour), each with some non-whitespace content.
pub(crate) fn sentence_spans(text: &str) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut leading_whitespace: Option<usize> = None;
    for (at, sentence) in text.split_sentence_bound_indices() {
        let end = at + sentence.len();
        if sentence.trim().is_empty() {
            match spans.last_mut() {
                Some(last) => last.end = end,
                None => {
                    leading_whitespace.get_or_insert(at);
                }
            }
            continue;
        }
        let start = leading_whitespace.take().unwrap_or(at);
        spans.push(Span::new(start, end));
    }
    spans
}

pub(crate) struct SentenceChunker {
    tokens: Arc<dyn TokenCounter>,
    bounds: ChunkBounds,
}

impl SentenceChunker {
    pub fn new(tokens: Arc<dyn TokenCounter>, bounds: ChunkBounds) -> Self {
        Self { tokens, bounds }
    }
}

#[async_trait]
impl Chunker for SentenceChunker {
    fn name(&self) -> &'static str {
        "sentence"
    }

    async fn chunk(&self, doc: &Document) -> Result<Vec<Chunk>, ChunkError> {
        let text = doc.text.as_str();
        let measurer = Measurer::new(text, self.tokens.as_ref(), self.bounds.max_tokens);
        let mut pieces = Vec::new();
        for sentence in sentence_spans(text) {
            measurer.measure(sentence, &mut pieces);
        }
        let chunks: Vec<Chunk> =
            Packer::new(&measurer, text, self.bounds, OverlapBoundary::WholePieces)
                .pack(&pieces)
                .into_iter()
                .map(|span| span.to_chunk(text, Metadata::new()))
                .collect();
        tracing::debug!(source_id = %doc.source_id, strategy = "sentence", chunks = chunks.len(), "chunked");
        Ok(chunks)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::chunk::invariants::{
        arbitrary_text, assert_contract, assert_covers_all_content, chunks_recounting, document,
        test_counter,
    };

    fn chunker(max_tokens: usize, overlap: usize) -> SentenceChunker {
        SentenceChunker::new(
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
            .expect("sentence chunking does not fail");
        assert_contract(&doc, &chunks, test_counter().as_ref(), max_tokens);
        assert_covers_all_content(&doc, &chunks);
        chunks
    }

    const TEXT: &str = "Mr. Smith went to Washington. He met the senator at 9 a.m. sharp! \
        Did the meeting go well? Nobody knows. The press waited outside for hours, e.g. until \
        dusk.\n\nA new paragraph starts here. It has two sentences.";

    #[test]
    fn sentences_tile_the_text() {
        let spans = sentence_spans(TEXT);
        let sentences: Vec<&str> = spans.iter().map(|s| s.slice(TEXT).trim()).collect();
        assert_eq!(
            sentences,
            [
                "Mr.",
                "Smith went to Washington.",
                "He met the senator at 9 a.m. sharp!",
                "Did the meeting go well?",
                "Nobody knows.",
                "The press waited outside for hours, e.g. until dusk.",
                "A new paragraph starts here.",
                "It has two sentences.",
            ]
        );
        let mut at = 0;
        for span in &spans {
            assert_eq!(span.start, at);
            at = span.end;
        }
        assert_eq!(at, TEXT.len());
        assert!(sentence_spans("  \n ").is_empty());
        assert_eq!(sentence_spans("  Hi.  ").len(), 1);
    }

    #[tokio::test]
    async fn chunks_end_at_sentence_ends() {
        let sentence_ends: Vec<usize> = sentence_spans(TEXT)
            .iter()
            .map(|s| s.trimmed(TEXT).map_or(s.end, |t| t.end))
            .collect();
        let chunks = chunk(TEXT, 20, 0).await;
        assert!(chunks.len() > 2);
        for chunk in &chunks {
            assert!(sentence_ends.contains(&chunk.end), "{chunk:?}");
        }
    }

    #[tokio::test]
    async fn overlap_is_whole_sentences_within_budget() {
        let counter = test_counter();
        let sentence_starts: Vec<usize> = sentence_spans(TEXT)
            .iter()
            .filter_map(|s| s.trimmed(TEXT))
            .map(|s| s.start)
            .collect();
        let overlap = 11;
        let chunks = chunk(TEXT, 30, overlap).await;
        let mut overlapping = 0;
        for pair in chunks.windows(2) {
            assert!(sentence_starts.contains(&pair[1].start), "{:?}", pair[1]);
            if pair[1].start < pair[0].end {
                overlapping += 1;
                let shared = &TEXT[pair[1].start..pair[0].end];
                assert!(counter.count_tokens(shared) <= overlap, "{shared:?}");
            }
        }
        assert!(overlapping > 0, "{chunks:#?}");
    }

    #[tokio::test]
    async fn oversized_sentences_are_cut() {
        let long = format!("{}.", "word ".repeat(200).trim_end());
        let text = format!("Short one. {long} Another short one.");
        let chunks = chunk(&text, 32, 4).await;
        assert!(chunks.len() >= 7);
    }

    #[tokio::test]
    async fn unicode_sentences() {
        let text = "Grüße aus Zürich! Ça va très bien. Это русский текст. 日本語の文です。絵文字もあります🎉。Ελληνικά; τέλος.";
        let chunks = chunk(text, 10, 3).await;
        assert!(chunks.len() > 2);
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
                .expect("sentence chunking does not fail");
            assert_contract(&doc, &chunks, test_counter().as_ref(), max_tokens);
            assert_covers_all_content(&doc, &chunks);
            // Summing additive counts gives exactly what counting every range gives.
            let bounds = ChunkBounds { max_tokens, overlap };
            let counted = chunks_recounting(|counter| SentenceChunker::new(counter, bounds), &doc);
            prop_assert_eq!(chunks, counted);
        }
    }
}
