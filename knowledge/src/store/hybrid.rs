//! Hybrid search fusion of the vector and BM25 rankings, by the request's [`HybridFusion`]:
//! Reciprocal Rank Fusion (`score = Σ 1 / (rrf_k + rank)`, ranks 1-based), labelled
//! [`ScoreOrigin::Rrf`], or convex score fusion (per-leg min-max or z-score normalisation, a
//! weight per leg), labelled [`ScoreOrigin::Convex`]. When the lexical side has nothing to
//! contribute, the vector results pass through with their own origin (reference: "Score
//! provenance").

use std::collections::HashMap;

use crate::fusion::{FusionMethod, HybridFusion, convex_fusion};
use crate::types::{ScoreOrigin, ScoredChunk};

/// Hybrid search fetches this many times `k` candidates from each side before fusing.
const HYBRID_DEPTH_FACTOR: usize = 4;
const HYBRID_MIN_DEPTH: usize = 20;

/// How deep a hybrid search for `k` results reads each leg, as (vector, BM25). The vector leg
/// stays within the HNSW graph's reach (`graph_ef_search`, when a graph serves the collection):
/// a deeper leg would fall back to an exact scan of every vector.
pub fn hybrid_depths(k: usize, graph_ef_search: Option<usize>) -> (usize, usize) {
    let depth = k.saturating_mul(HYBRID_DEPTH_FACTOR).max(HYBRID_MIN_DEPTH);
    let vector_depth = match graph_ef_search {
        Some(ef_search) => depth.min(ef_search.max(k)),
        None => depth,
    };
    (vector_depth, depth)
}

/// Fuses rankings (each best first; an id repeated within one ranking counts at its best rank)
/// into the `limit` best `(id, score)` pairs. The result does not depend on the order of the
/// rankings: per id, contributions are summed in rank order, and ties break by id.
pub fn reciprocal_rank_fusion<S: AsRef<str>>(
    rankings: &[Vec<S>],
    rrf_k: f32,
    limit: usize,
) -> Vec<(String, f32)> {
    crate::fusion::reciprocal_rank_fusion(rankings, rrf_k, limit)
}

/// Combines vector and BM25 results (each best first) into the `limit` hybrid results, by
/// `fusion`'s method (`rrf_k` is RRF's constant).
pub fn fuse_hybrid(
    vector: Vec<ScoredChunk>,
    bm25: Vec<ScoredChunk>,
    rrf_k: f32,
    fusion: &HybridFusion,
    limit: usize,
) -> Vec<ScoredChunk> {
    if bm25.is_empty() {
        let mut passthrough = vector;
        passthrough.truncate(limit);
        return passthrough;
    }
    let (fused, origin): (Vec<(String, f32)>, ScoreOrigin) = match fusion.method {
        FusionMethod::Rrf => {
            let rankings = [
                vector
                    .iter()
                    .map(|s| s.chunk.id.clone())
                    .collect::<Vec<_>>(),
                bm25.iter().map(|s| s.chunk.id.clone()).collect::<Vec<_>>(),
            ];
            (
                reciprocal_rank_fusion(&rankings, rrf_k, limit),
                ScoreOrigin::Rrf,
            )
        }
        FusionMethod::Convex => {
            fn leg(hits: &[ScoredChunk], weight: f32) -> (Vec<(&str, f64)>, f64) {
                (
                    hits.iter()
                        .map(|s| (s.chunk.id.as_str(), s.score as f64))
                        .collect(),
                    weight as f64,
                )
            }
            let legs = [
                leg(&vector, fusion.vector_weight),
                leg(&bm25, fusion.bm25_weight),
            ];
            let fused = convex_fusion(&legs, fusion.normalization, limit)
                .into_iter()
                .map(|(id, score)| (id, score as f32))
                .collect();
            (fused, ScoreOrigin::Convex)
        }
    };
    let mut chunks: HashMap<String, ScoredChunk> = HashMap::new();
    for scored in vector.into_iter().chain(bm25) {
        chunks.entry(scored.chunk.id.clone()).or_insert(scored);
    }
    fused
        .into_iter()
        .filter_map(|(id, score)| {
            chunks.remove(&id).map(|scored| ScoredChunk {
                chunk: scored.chunk,
                score,
                origin,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::Normalization;
    use crate::types::StoredChunk;
    use proptest::prelude::*;

    fn scored(id: &str, score: f32, origin: ScoreOrigin) -> ScoredChunk {
        ScoredChunk {
            chunk: StoredChunk {
                id: id.into(),
                source_id: "s".into(),
                ordinal: 0,
                text: id.into(),
                start: 0,
                end: 0,
                metadata: Default::default(),
                content_hash: id.into(),
                vector: vec![],
            },
            score,
            origin,
        }
    }

    /// A ranking of distinct ids drawn from a small pool (so rankings overlap).
    fn ranking() -> impl Strategy<Value = Vec<String>> {
        proptest::sample::subsequence(
            (0..30).map(|i| format!("c{i:02}")).collect::<Vec<_>>(),
            0..20,
        )
        .prop_shuffle()
    }

    #[test]
    fn rrf_matches_the_worked_example() {
        let fused = reciprocal_rank_fusion(&[vec!["a", "b", "c"], vec!["c", "a"]], 60.0, 10);
        let expected_a = 1.0 / 61.0 + 1.0 / 62.0;
        let expected_c = 1.0 / 63.0 + 1.0 / 61.0;
        assert_eq!(fused[0].0, "a");
        assert!((fused[0].1 - expected_a).abs() < 1e-7);
        assert_eq!(fused[1].0, "c");
        assert!((fused[1].1 - expected_c).abs() < 1e-7);
        assert_eq!(fused[2], ("b".to_string(), 1.0 / 62.0));
    }

    proptest! {
        #[test]
        fn fused_order_is_independent_of_the_order_of_the_rankings(
            vector in ranking(), lexical in ranking(), rrf_k in 1.0f32..100.0, limit in 0usize..40,
        ) {
            let forward = reciprocal_rank_fusion(&[vector.clone(), lexical.clone()], rrf_k, limit);
            let backward = reciprocal_rank_fusion(&[lexical.clone(), vector.clone()], rrf_k, limit);
            prop_assert_eq!(&forward, &backward);

            let union: std::collections::BTreeSet<&String> = vector.iter().chain(&lexical).collect();
            prop_assert_eq!(forward.len(), union.len().min(limit));
            for pair in forward.windows(2) {
                prop_assert!(pair[0].1 > pair[1].1 || (pair[0].1 == pair[1].1 && pair[0].0 < pair[1].0));
            }
            for (id, score) in &forward {
                let mut expected = 0.0f32;
                let mut ranks: Vec<usize> = [&vector, &lexical]
                    .iter()
                    .filter_map(|r| r.iter().position(|x| x == id).map(|p| p + 1))
                    .collect();
                ranks.sort_unstable();
                for rank in ranks {
                    expected += 1.0 / (rrf_k + rank as f32);
                }
                prop_assert_eq!(*score, expected);
            }
        }

        #[test]
        fn hybrid_results_are_labelled_by_where_their_score_comes_from(
            vector in ranking(), lexical in ranking(), limit in 1usize..40,
        ) {
            let vector_hits: Vec<ScoredChunk> = vector
                .iter()
                .enumerate()
                .map(|(i, id)| scored(id, 1.0 - i as f32 * 0.01, ScoreOrigin::Vector))
                .collect();
            let lexical_hits: Vec<ScoredChunk> = lexical
                .iter()
                .enumerate()
                .map(|(i, id)| scored(id, 20.0 - i as f32, ScoreOrigin::Bm25))
                .collect();
            let fused = fuse_hybrid(vector_hits.clone(), lexical_hits.clone(), 60.0, &HybridFusion::default(), limit);
            if lexical.is_empty() {
                let mut expected = vector_hits;
                expected.truncate(limit);
                prop_assert_eq!(fused, expected);
            } else {
                if !vector.is_empty() {
                    let swapped = fuse_hybrid(lexical_hits, vector_hits, 60.0, &HybridFusion::default(), limit);
                    prop_assert_eq!(&fused, &swapped);
                }
                let expected = reciprocal_rank_fusion(&[vector, lexical], 60.0, limit);
                prop_assert_eq!(fused.len(), expected.len());
                for (result, (id, score)) in fused.iter().zip(&expected) {
                    prop_assert_eq!(result.origin, ScoreOrigin::Rrf);
                    prop_assert_eq!(&result.chunk.id, id);
                    prop_assert_eq!(result.score, *score);
                }
            }
        }

        #[test]
        fn convex_hybrid_is_a_permutation_of_the_union_labelled_convex(
            vector in ranking(), lexical in ranking(), zscore in any::<bool>(), weight in 0.0f32..1.0,
        ) {
            let vector_hits: Vec<ScoredChunk> = vector
                .iter()
                .enumerate()
                .map(|(i, id)| scored(id, 1.0 - i as f32 * 0.01, ScoreOrigin::Vector))
                .collect();
            let lexical_hits: Vec<ScoredChunk> = lexical
                .iter()
                .enumerate()
                .map(|(i, id)| scored(id, 20.0 - i as f32, ScoreOrigin::Bm25))
                .collect();
            let normalization = if zscore { Normalization::ZScore } else { Normalization::MinMax };
            let fusion = HybridFusion::convex(normalization, weight, 1.0 - weight);
            let fused = fuse_hybrid(vector_hits.clone(), lexical_hits, 60.0, &fusion, usize::MAX);
            if lexical.is_empty() {
                prop_assert_eq!(fused, vector_hits);
            } else {
                let mut got: Vec<&String> = fused.iter().map(|c| &c.chunk.id).collect();
                got.sort();
                let union: Vec<&String> = vector.iter().chain(&lexical).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
                prop_assert_eq!(got, union);
                prop_assert!(fused.iter().all(|c| c.origin == ScoreOrigin::Convex));
                for pair in fused.windows(2) {
                    prop_assert!(pair[0].score >= pair[1].score);
                }
            }
        }
    }
}
