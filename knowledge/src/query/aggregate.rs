//! Stage 3 (fuse), document-level aggregation (`rag.retrieval.aggregate`): the fused chunks of
//! one document (one source id) collapse to one entry, so that a document split into several
//! chunks takes one place in the ranking instead of several.
//!
//! - `none`: the chunks as fused;
//! - `max`: each document keeps its best chunk (with its score); its other chunks are dropped;
//! - `max-sum`: each document keeps its best chunk, its score raised by `sum_weight` × the sum
//!   of the document's other chunks' positive scores (a document many chunks of which match
//!   moves up a little; a negative score never lowers it).
//!
//! The kept chunk keeps its origin: its score is still the fusion's (plus the bonus, which the
//! `fuse` trace step reports). Output is ordered by the document score, ties by chunk id, so
//! it does not depend on the input order.

use std::collections::HashMap;

use serde::Serialize;

use crate::settings::query::DocumentAggregation;
use crate::types::ScoredChunk;

/// What an aggregation did, for the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AggregateOutcome {
    /// Documents in the output (one entry each).
    pub documents: usize,
    /// Chunks folded into another chunk of their document.
    pub collapsed: usize,
}

/// Aggregates `fused` (any order) per document; see the module documentation.
pub fn aggregate_documents(
    fused: Vec<ScoredChunk>,
    method: DocumentAggregation,
    sum_weight: f32,
) -> (Vec<ScoredChunk>, AggregateOutcome) {
    if method == DocumentAggregation::None {
        let documents = fused.len();
        return (
            fused,
            AggregateOutcome {
                documents,
                collapsed: 0,
            },
        );
    }
    let total = fused.len();
    let mut documents: HashMap<String, Vec<ScoredChunk>> = HashMap::new();
    for candidate in fused {
        documents
            .entry(candidate.chunk.source_id.clone())
            .or_default()
            .push(candidate);
    }
    let mut out: Vec<ScoredChunk> = documents
        .into_values()
        .map(|mut chunks| {
            // Best first, ties by chunk id: the same representative whatever the input order.
            chunks.sort_by(|a, b| {
                b.score
                    .total_cmp(&a.score)
                    .then_with(|| a.chunk.id.cmp(&b.chunk.id))
            });
            let others: f64 = chunks[1..]
                .iter()
                .filter(|c| c.score.is_finite() && c.score > 0.0)
                .map(|c| c.score as f64)
                .sum();
            let mut best = chunks.swap_remove(0);
            if method == DocumentAggregation::MaxSum && others > 0.0 {
                best.score = (best.score as f64 + sum_weight as f64 * others) as f32;
            }
            best
        })
        .collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.chunk.id.cmp(&b.chunk.id))
    });
    let documents = out.len();
    (
        out,
        AggregateOutcome {
            documents,
            collapsed: total - documents,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;
    use proptest::prelude::*;

    /// A chunk `id` of document `doc`.
    fn part(doc: &str, id: &str, score: f32) -> ScoredChunk {
        let mut c = chunk(id, score, vec![]);
        c.chunk.source_id = doc.to_string();
        c
    }

    fn ids(chunks: &[ScoredChunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    fn fused() -> Vec<ScoredChunk> {
        vec![
            part("a.md", "a1", 0.9),
            part("b.md", "b1", 0.8),
            part("a.md", "a2", 0.7),
            part("c.md", "c1", 0.75),
            part("c.md", "c2", 0.6),
            part("c.md", "c3", 0.5),
        ]
    }

    #[test]
    fn none_keeps_every_chunk_as_fused() {
        let (out, outcome) = aggregate_documents(fused(), DocumentAggregation::None, 0.1);
        assert_eq!(out, fused());
        assert_eq!(
            outcome,
            AggregateOutcome {
                documents: 6,
                collapsed: 0
            }
        );
    }

    #[test]
    fn max_keeps_each_documents_best_chunk_with_its_score() {
        let (out, outcome) = aggregate_documents(fused(), DocumentAggregation::Max, 0.1);
        assert_eq!(ids(&out), vec!["a1", "b1", "c1"]);
        assert_eq!(out[2].score, 0.75);
        assert_eq!(
            outcome,
            AggregateOutcome {
                documents: 3,
                collapsed: 3
            }
        );
    }

    #[test]
    fn max_sum_adds_a_bonus_for_the_other_chunks() {
        // a: 0.9 + 0.1 × 0.7 = 0.97; c: 0.75 + 0.1 × (0.6 + 0.5) = 0.86; b: 0.8.
        let (out, _) = aggregate_documents(fused(), DocumentAggregation::MaxSum, 0.1);
        assert_eq!(ids(&out), vec!["a1", "c1", "b1"]);
        assert!((out[0].score - 0.97).abs() < 1e-6);
        assert!((out[1].score - 0.86).abs() < 1e-6);
        assert_eq!(out[2].score, 0.8);
        // Weight 0 is `max`.
        let (zero, _) = aggregate_documents(fused(), DocumentAggregation::MaxSum, 0.0);
        let (max, _) = aggregate_documents(fused(), DocumentAggregation::Max, 0.0);
        assert_eq!(zero, max);
    }

    #[test]
    fn one_candidate_equal_scores_and_negative_scores() {
        let (one, outcome) = aggregate_documents(
            vec![part("a.md", "a1", 0.4)],
            DocumentAggregation::MaxSum,
            0.5,
        );
        assert_eq!(ids(&one), vec!["a1"]);
        assert_eq!(one[0].score, 0.4);
        assert_eq!(outcome.collapsed, 0);

        let (empty, outcome) = aggregate_documents(Vec::new(), DocumentAggregation::Max, 0.1);
        assert!(empty.is_empty());
        assert_eq!(outcome.documents, 0);

        // All-equal scores: the smallest chunk id represents the document, whatever the order.
        let flat = vec![
            part("a.md", "a2", 1.0),
            part("b.md", "b1", 1.0),
            part("a.md", "a1", 1.0),
        ];
        let (out, _) = aggregate_documents(flat, DocumentAggregation::Max, 0.1);
        assert_eq!(ids(&out), vec!["a1", "b1"]);

        // Negative scores (z-score fusion) never lower a document.
        let negative = vec![part("a.md", "a1", -0.2), part("a.md", "a2", -1.5)];
        let (out, _) = aggregate_documents(negative, DocumentAggregation::MaxSum, 0.5);
        assert_eq!(out[0].score, -0.2);
    }

    proptest! {
        #[test]
        fn aggregation_keeps_one_best_chunk_per_document_whatever_the_order(
            parts in prop::collection::vec((0u8..6, 0u8..30, -1.0f32..1.0), 0..40),
            sum in any::<bool>(),
            rotate in 0usize..40,
        ) {
            let mut seen = std::collections::HashSet::new();
            let input: Vec<ScoredChunk> = parts
                .iter()
                .filter(|(_, id, _)| seen.insert(*id))
                .map(|(doc, id, score)| part(&format!("d{doc}"), &format!("c{id:02}"), *score))
                .collect();
            let method = if sum { DocumentAggregation::MaxSum } else { DocumentAggregation::Max };
            let (out, outcome) = aggregate_documents(input.clone(), method, 0.1);
            // One entry per document of the input, each a chunk of the input.
            let mut docs: Vec<&str> = input.iter().map(|c| c.chunk.source_id.as_str()).collect();
            docs.sort();
            docs.dedup();
            let mut got: Vec<&str> = out.iter().map(|c| c.chunk.source_id.as_str()).collect();
            got.sort();
            prop_assert_eq!(&got, &docs);
            prop_assert_eq!(outcome.documents + outcome.collapsed, input.len());
            for kept in &out {
                let best = input
                    .iter()
                    .filter(|c| c.chunk.source_id == kept.chunk.source_id)
                    .map(|c| c.score)
                    .fold(f32::NEG_INFINITY, f32::max);
                prop_assert!(kept.score >= best);
            }
            // Sorted best first, and independent of the input order.
            prop_assert!(out.windows(2).all(|w| w[0].score >= w[1].score));
            let mut moved = input.clone();
            if !moved.is_empty() {
                let len = moved.len();
                moved.rotate_left(rotate % len);
            }
            moved.reverse();
            let (again, _) = aggregate_documents(moved, method, 0.1);
            prop_assert_eq!(ids(&out), ids(&again));
        }
    }
}
