//! The `refine` node on an `Ambiguous` verdict: decompose, filter, recompose.
//!
//! 1. Chunk filter: keep the chunks whose evaluator relevance is at least
//!    [`REFINE_RELEVANCE_THRESHOLD`] (0.5); when none reaches it, keep the single most relevant
//!    chunk (the first on a tie).
//! 2. Sentence filter: split each kept chunk into sentences and keep those sharing at least one
//!    content word with the question; a chunk left with no such sentence is dropped — unless
//!    that would empty the working set, in which case the most relevant chunk stays whole.
//! 3. Recompose: each surviving chunk's text becomes its kept sentences in order (metadata
//!    `refined = "true"`, `refined_sentences = "k/n"`); id, source, offsets and score are kept.
//!
//! A question without content words cannot be compared: the sentence filter is then skipped.
//! The working set is never emptied.

use std::collections::BTreeSet;

use serde::Serialize;
use unicode_segmentation::UnicodeSegmentation;

use crate::types::ScoredChunk;
use orkeon_crews::text::content_word_set;

/// Per-chunk relevance a chunk needs to survive `refine`.
pub const REFINE_RELEVANCE_THRESHOLD: f32 = 0.5;

/// What `refine` did (the trace detail).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefineReport {
    pub chunks_in: usize,
    pub chunks_out: usize,
    /// Chunks under the relevance threshold.
    pub below_threshold: usize,
    /// True when no chunk reached the threshold and the best one was kept.
    pub kept_best_only: bool,
    pub sentences_in: usize,
    pub sentences_out: usize,
    /// True when the sentence filter would have emptied the set and the best chunk was kept
    /// whole instead.
    pub kept_whole: bool,
}

fn best_index(relevance: &[f32], n: usize) -> usize {
    (0..n)
        .max_by(|&a, &b| {
            let ra = relevance.get(a).copied().unwrap_or(0.0);
            let rb = relevance.get(b).copied().unwrap_or(0.0);
            // Ties: the earlier (better-ranked) chunk wins.
            ra.total_cmp(&rb).then(b.cmp(&a))
        })
        .unwrap_or(0)
}

/// Refines `chunks` for `question` with the evaluator's per-chunk `relevance` (see the module
/// documentation). Missing relevances count as 0.
pub fn refine(
    question: &str,
    chunks: Vec<ScoredChunk>,
    relevance: &[f32],
) -> (Vec<ScoredChunk>, RefineReport) {
    let chunks_in = chunks.len();
    let mut report = RefineReport {
        chunks_in,
        chunks_out: chunks_in,
        below_threshold: 0,
        kept_best_only: false,
        sentences_in: 0,
        sentences_out: 0,
        kept_whole: false,
    };
    if chunks.is_empty() {
        return (chunks, report);
    }
    let best = best_index(relevance, chunks_in);
    let passes = |i: usize| relevance.get(i).copied().unwrap_or(0.0) >= REFINE_RELEVANCE_THRESHOLD;
    let passing = (0..chunks_in).filter(|&i| passes(i)).count();
    report.below_threshold = chunks_in - passing;
    report.kept_best_only = passing == 0;
    let kept: Vec<(usize, ScoredChunk)> = chunks
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| passes(i) || (passing == 0 && i == best))
        .collect();
    let question_words: BTreeSet<String> = content_word_set(question);
    let mut out = Vec::with_capacity(kept.len());
    let mut best_whole: Option<ScoredChunk> = None;
    for (index, mut chunk) in kept {
        let sentences: Vec<&str> = chunk.chunk.text.unicode_sentences().collect();
        report.sentences_in += sentences.len();
        if question_words.is_empty() {
            report.sentences_out += sentences.len();
            out.push(chunk);
            continue;
        }
        let matching: Vec<&str> = sentences
            .iter()
            .copied()
            .filter(|s| {
                content_word_set(s)
                    .iter()
                    .any(|w| question_words.contains(w))
            })
            .collect();
        if index == best || best_whole.is_none() {
            best_whole = Some(chunk.clone());
        }
        if matching.is_empty() {
            continue;
        }
        report.sentences_out += matching.len();
        let text = matching
            .iter()
            .map(|s| s.trim())
            .collect::<Vec<_>>()
            .join(" ");
        chunk.chunk.metadata.insert("refined".into(), "true".into());
        chunk.chunk.metadata.insert(
            "refined_sentences".into(),
            format!("{}/{}", matching.len(), sentences.len()),
        );
        chunk.chunk.text = text;
        out.push(chunk);
    }
    if out.is_empty()
        && let Some(whole) = best_whole
    {
        report.kept_whole = true;
        report.sentences_out += whole.chunk.text.unicode_sentences().count();
        out.push(whole);
    }
    report.chunks_out = out.len();
    (out, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corrective::test_support::chunk_with_text;

    const Q: &str = "How many days do customers have to request a refund?";

    #[test]
    fn chunks_under_the_threshold_go_and_sentences_are_filtered() {
        let chunks = vec![
            chunk_with_text(
                "a",
                "Our office is in Lisbon. Customers may request a refund within 30 days. The cafe opens at 8.",
            ),
            chunk_with_text("b", "Shipping takes five days."),
            chunk_with_text("c", "Refunds go back to the card. Parking is free."),
        ];
        let (out, report) = refine(Q, chunks, &[0.9, 0.2, 0.5]);
        let ids: Vec<&str> = out.iter().map(|c| c.chunk.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "c"]);
        assert_eq!(
            out[0].chunk.text,
            "Customers may request a refund within 30 days."
        );
        assert_eq!(out[1].chunk.text, "Refunds go back to the card.");
        assert_eq!(out[0].chunk.metadata["refined_sentences"], "1/3");
        assert_eq!(report.below_threshold, 1);
        assert_eq!((report.sentences_in, report.sentences_out), (5, 2));
        assert!(!report.kept_best_only && !report.kept_whole);
        // Offsets and source stay those of the original chunk.
        assert_eq!(out[0].chunk.source_id, "kb/a.md");
    }

    #[test]
    fn the_working_set_is_never_emptied() {
        // Nothing reaches the threshold: the most relevant chunk is kept.
        let chunks = vec![
            chunk_with_text("a", "Shipping takes five days."),
            chunk_with_text("b", "Refund forms are on the website."),
        ];
        let (out, report) = refine(Q, chunks, &[0.1, 0.3]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].chunk.id, "b");
        assert!(report.kept_best_only);

        // No sentence shares a word with the question: the best chunk stays whole.
        let chunks = vec![
            chunk_with_text("a", "Parking is free. The cafe opens at 8."),
            chunk_with_text("b", "Lisbon is sunny."),
        ];
        let (out, report) = refine(Q, chunks, &[0.7, 0.8]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].chunk.id, "b");
        assert_eq!(out[0].chunk.text, "Lisbon is sunny.");
        assert!(report.kept_whole);

        // Missing relevances count as 0; an empty set stays empty.
        let (out, _) = refine(Q, vec![chunk_with_text("a", "Refunds: 30 days.")], &[]);
        assert_eq!(out.len(), 1);
        assert!(refine(Q, Vec::new(), &[]).0.is_empty());
    }
}
