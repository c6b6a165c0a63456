//! Rerank blending (`rag.rerank.blend`): how the reranker's ranking meets the retrieval ranking
//! it was given.
//!
//! - `replace`: the reranker's order alone (its scores, labelled [`ScoreOrigin::Rerank`]);
//! - `rrf`: weighted Reciprocal Rank Fusion of the two orders, `w / (rrf_k + rank_rerank) +
//!   (1 − w) / (rrf_k + rank_retrieval)` ([`crate::fusion::weighted_rrf`]);
//! - `convex`: each side's scores normalised per query (`rag.retrieval.hybrid.normalization`),
//!   then `w · reranker + (1 − w) · retrieval` ([`crate::fusion::convex_fusion`]).
//!
//! Blended results are labelled [`ScoreOrigin::RerankBlend`]: their score is neither a
//! retrieval score nor a reranker logit. A cross-encoder trained on another domain can then
//! only move a passage so far from where retrieval put it.

use std::collections::HashMap;

use crate::fusion::{Normalization, convex_fusion, weighted_rrf};
use crate::settings::query::RerankBlend;
use crate::types::{ScoreOrigin, ScoredChunk};

/// How to blend, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlendSettings {
    pub blend: RerankBlend,
    /// Weight of the reranker, in [0, 1].
    pub weight: f32,
    /// RRF constant (`rrf`).
    pub rrf_k: f32,
    /// Per-side normalisation (`convex`).
    pub normalization: Normalization,
}

/// Blends `retrieval` (candidates in retrieval order, with retrieval scores) with `reranked`
/// (the same candidates in the reranker's order, with its scores). Returns every candidate of
/// either list once, best first; `replace` returns `reranked` as it is.
pub fn blend(
    retrieval: Vec<ScoredChunk>,
    reranked: Vec<ScoredChunk>,
    settings: &BlendSettings,
) -> Vec<ScoredChunk> {
    let w = settings.weight as f64;
    let fused: Vec<(String, f64)> = match settings.blend {
        RerankBlend::Replace => return reranked,
        RerankBlend::Rrf => {
            let ids = |list: &[ScoredChunk]| -> Vec<String> {
                list.iter().map(|c| c.chunk.id.clone()).collect()
            };
            weighted_rrf(
                &[(ids(&reranked), w), (ids(&retrieval), 1.0 - w)],
                settings.rrf_k as f64,
                usize::MAX,
            )
        }
        RerankBlend::Convex => {
            let leg = |list: &[ScoredChunk], weight: f64| {
                (
                    list.iter()
                        .map(|c| (c.chunk.id.clone(), c.score as f64))
                        .collect::<Vec<_>>(),
                    weight,
                )
            };
            convex_fusion(
                &[leg(&reranked, w), leg(&retrieval, 1.0 - w)],
                settings.normalization,
                usize::MAX,
            )
        }
    };
    let mut chunks: HashMap<String, ScoredChunk> = HashMap::new();
    for candidate in retrieval.into_iter().chain(reranked) {
        chunks
            .entry(candidate.chunk.id.clone())
            .or_insert(candidate);
    }
    fused
        .into_iter()
        .filter_map(|(id, score)| {
            chunks.remove(&id).map(|candidate| ScoredChunk {
                score: score as f32,
                origin: ScoreOrigin::RerankBlend,
                ..candidate
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;
    use proptest::prelude::*;

    fn ids(chunks: &[ScoredChunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    fn settings(blend: RerankBlend, weight: f32) -> BlendSettings {
        BlendSettings {
            blend,
            weight,
            rrf_k: 60.0,
            normalization: Normalization::MinMax,
        }
    }

    fn retrieval() -> Vec<ScoredChunk> {
        vec![
            chunk("a", 0.9, vec![]),
            chunk("b", 0.8, vec![]),
            chunk("c", 0.3, vec![]),
        ]
    }

    fn reranked() -> Vec<ScoredChunk> {
        let mut r = vec![
            chunk("c", 8.0, vec![]),
            chunk("b", 2.0, vec![]),
            chunk("a", -4.0, vec![]),
        ];
        for c in &mut r {
            c.origin = ScoreOrigin::Rerank;
        }
        r
    }

    #[test]
    fn replace_is_the_rerankers_order() {
        let out = blend(
            retrieval(),
            reranked(),
            &settings(RerankBlend::Replace, 0.5),
        );
        assert_eq!(out, reranked());
    }

    #[test]
    fn the_weight_moves_the_blend_between_the_two_orders() {
        for how in [RerankBlend::Rrf, RerankBlend::Convex] {
            let all_rerank = blend(retrieval(), reranked(), &settings(how, 1.0));
            assert_eq!(ids(&all_rerank), vec!["c", "b", "a"], "{how:?}");
            let all_retrieval = blend(retrieval(), reranked(), &settings(how, 0.0));
            assert_eq!(ids(&all_retrieval), vec!["a", "b", "c"], "{how:?}");
            let even = blend(retrieval(), reranked(), &settings(how, 0.5));
            assert!(
                even.iter().all(|c| c.origin == ScoreOrigin::RerankBlend),
                "{how:?}"
            );
            assert_eq!(even.len(), 3);
        }
        // Convex, even weights, min-max: a = (0 + 1)/2, b = (0.5 + 0.833)/2, c = (1 + 0)/2.
        let even = blend(retrieval(), reranked(), &settings(RerankBlend::Convex, 0.5));
        assert_eq!(ids(&even), vec!["b", "a", "c"]);
    }

    #[test]
    fn one_candidate_and_equal_scores_blend_without_dividing_by_zero() {
        let one = vec![chunk("a", 0.5, vec![])];
        for how in [RerankBlend::Rrf, RerankBlend::Convex] {
            let out = blend(one.clone(), one.clone(), &settings(how, 0.5));
            assert_eq!(ids(&out), vec!["a"]);
            assert!(out[0].score.is_finite());
        }
        let flat = vec![chunk("x", 1.0, vec![]), chunk("y", 1.0, vec![])];
        let out = blend(flat.clone(), flat, &settings(RerankBlend::Convex, 0.5));
        assert_eq!(ids(&out), vec!["x", "y"], "ties break by id");
        assert!(out.iter().all(|c| c.score.is_finite()));
    }

    proptest! {
        #[test]
        fn a_blend_is_a_permutation_of_the_candidates(
            scores in prop::collection::vec((-10.0f32..10.0, -10.0f32..10.0), 0..20),
            weight in 0.0f32..=1.0,
            convex in any::<bool>(),
        ) {
            let retrieval: Vec<ScoredChunk> = scores
                .iter()
                .enumerate()
                .map(|(i, (s, _))| chunk(&format!("c{i:02}"), *s, vec![]))
                .collect();
            let mut reranked: Vec<ScoredChunk> = scores
                .iter()
                .enumerate()
                .map(|(i, (_, r))| chunk(&format!("c{i:02}"), *r, vec![]))
                .collect();
            reranked.sort_by(|a, b| b.score.total_cmp(&a.score));
            let how = if convex { RerankBlend::Convex } else { RerankBlend::Rrf };
            let out = blend(retrieval, reranked, &settings(how, weight));
            let mut got = ids(&out);
            got.sort();
            let want: Vec<String> = (0..scores.len()).map(|i| format!("c{i:02}")).collect();
            prop_assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}
