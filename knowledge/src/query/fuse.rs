//! Stage 3 (fuse), first half: combines the per-retrieval-text rankings into one candidate
//! list according to the transform's kind, deduplicated by chunk id.
//!
//! - one ranking (no transform, or a transform that degraded): `dedup`, first occurrence kept;
//! - [`TransformKind::Union`] and several [`TransformKind::Replacement`] probes: `union`, the
//!   maximum store score wins for a chunk seen in several rankings;
//! - [`TransformKind::Fusion`]: the method of `rag.retrieval.hybrid.fusion`, as for hybrid
//!   search — `rrf`, Reciprocal Rank Fusion `Σ 1/(rrf_k + rank)` with 1-based ranks and the same
//!   `rrf_k` as hybrid search, labelled [`ScoreOrigin::Rrf`]; or `convex`, the per-ranking
//!   normalised scores (`rag.retrieval.hybrid.normalization`) averaged with equal weights,
//!   labelled [`ScoreOrigin::Convex`].
//!
//! Results are independent of the order of the input rankings: scores are summed in a fixed
//! order and ties are broken by chunk id. MMR, the optional second half, lives in `mmr`.

use std::collections::HashMap;

use serde::Serialize;

use super::transform::TransformKind;
use crate::fusion::{
    FusionMethod, HybridFusion, Normalization, convex_fusion, reciprocal_rank_fusion,
};
use crate::types::{ScoreOrigin, ScoredChunk};

/// How the rankings were combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FuseMethod {
    Dedup,
    Union,
    Rrf,
    Convex,
}

impl FuseMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            FuseMethod::Dedup => "dedup",
            FuseMethod::Union => "union",
            FuseMethod::Rrf => "rrf",
            FuseMethod::Convex => "convex",
        }
    }

    /// The method for `rankings` rankings produced by a transform of `kind`, when fusion
    /// rankings are combined by `fusion`.
    pub fn for_kind(kind: TransformKind, rankings: usize, fusion: FusionMethod) -> Self {
        match (kind, rankings) {
            (_, 0 | 1) => FuseMethod::Dedup,
            (TransformKind::Fusion, _) => match fusion {
                FusionMethod::Rrf => FuseMethod::Rrf,
                FusionMethod::Convex => FuseMethod::Convex,
            },
            (TransformKind::Union | TransformKind::Replacement | TransformKind::None, _) => {
                FuseMethod::Union
            }
        }
    }
}

/// Orders by score (descending), ties by chunk id: deterministic whatever the input order.
fn sort_by_score(chunks: &mut [ScoredChunk]) {
    chunks.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.chunk.id.cmp(&b.chunk.id))
    });
}

/// One ranking, duplicates removed (the first, best-ranked occurrence is kept).
pub fn dedup(ranking: Vec<ScoredChunk>) -> Vec<ScoredChunk> {
    let mut seen = std::collections::HashSet::new();
    ranking
        .into_iter()
        .filter(|c| seen.insert(c.chunk.id.clone()))
        .collect()
}

/// Union by chunk id; the entry with the maximum score (and its origin) wins. Sorted by score.
pub fn union_max(rankings: Vec<Vec<ScoredChunk>>) -> Vec<ScoredChunk> {
    let mut best: HashMap<String, ScoredChunk> = HashMap::new();
    for candidate in rankings.into_iter().flatten() {
        match best.get_mut(&candidate.chunk.id) {
            Some(kept) if kept.score >= candidate.score => {}
            Some(kept) => *kept = candidate,
            None => {
                best.insert(candidate.chunk.id.clone(), candidate);
            }
        }
    }
    let mut out: Vec<ScoredChunk> = best.into_values().collect();
    sort_by_score(&mut out);
    out
}

/// Reciprocal Rank Fusion: `score(c) = Σ_rankings 1/(rrf_k + rank(c))`, rank 1-based (a chunk
/// repeated inside one ranking counts at its best rank, and later chunks move up). Computed in
/// `f64` by [`crate::fusion::reciprocal_rank_fusion`], stored as `f32`; labelled
/// [`ScoreOrigin::Rrf`].
pub fn rrf(rankings: Vec<Vec<ScoredChunk>>, rrf_k: f32) -> Vec<ScoredChunk> {
    let rankings: Vec<Vec<ScoredChunk>> = rankings.into_iter().map(dedup).collect();
    let ids: Vec<Vec<&str>> = rankings
        .iter()
        .map(|ranking| ranking.iter().map(|c| c.chunk.id.as_str()).collect())
        .collect();
    let fused = reciprocal_rank_fusion(&ids, rrf_k as f64, usize::MAX);
    labelled(&rankings, fused, ScoreOrigin::Rrf)
}

/// The fused `(id, score)` list as the rankings' chunks, labelled `origin`, best first.
fn labelled(
    rankings: &[Vec<ScoredChunk>],
    fused: Vec<(String, f64)>,
    origin: ScoreOrigin,
) -> Vec<ScoredChunk> {
    let mut chunks: HashMap<&str, &ScoredChunk> = HashMap::new();
    for candidate in rankings.iter().flatten() {
        chunks
            .entry(candidate.chunk.id.as_str())
            .or_insert(candidate);
    }
    let mut out: Vec<ScoredChunk> = fused
        .into_iter()
        .filter_map(|(id, score)| {
            chunks.get(id.as_str()).map(|candidate| ScoredChunk {
                score: score as f32,
                origin,
                ..(*candidate).clone()
            })
        })
        .collect();
    // Ordered again as stored (`f32`), so that two scores equal in `f32` break ties by id.
    sort_by_score(&mut out);
    out
}

/// Convex fusion of the rankings, each weighted equally: per-ranking `normalization` of the
/// store scores, summed; labelled [`ScoreOrigin::Convex`].
pub fn convex(rankings: Vec<Vec<ScoredChunk>>, normalization: Normalization) -> Vec<ScoredChunk> {
    let rankings: Vec<Vec<ScoredChunk>> = rankings.into_iter().map(dedup).collect();
    let weight = 1.0 / rankings.len().max(1) as f64;
    let legs: Vec<(Vec<(&str, f64)>, f64)> = rankings
        .iter()
        .map(|ranking| {
            (
                ranking
                    .iter()
                    .map(|c| (c.chunk.id.as_str(), c.score as f64))
                    .collect(),
                weight,
            )
        })
        .collect();
    let fused = convex_fusion(&legs, normalization, usize::MAX);
    labelled(&rankings, fused, ScoreOrigin::Convex)
}

/// Combines the rankings with the method `kind` (and, for fusion transforms, `fusion`) calls
/// for.
pub fn fuse(
    kind: TransformKind,
    rankings: Vec<Vec<ScoredChunk>>,
    rrf_k: f32,
    fusion: &HybridFusion,
) -> (FuseMethod, Vec<ScoredChunk>) {
    let method = FuseMethod::for_kind(kind, rankings.len(), fusion.method);
    let fused = match method {
        FuseMethod::Dedup => dedup(rankings.into_iter().flatten().collect()),
        FuseMethod::Union => union_max(rankings),
        FuseMethod::Rrf => rrf(rankings, rrf_k),
        FuseMethod::Convex => convex(rankings, fusion.normalization),
    };
    (method, fused)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::types::StoredChunk;
    use proptest::prelude::*;

    pub(crate) fn chunk(id: &str, score: f32, vector: Vec<f32>) -> ScoredChunk {
        ScoredChunk {
            chunk: StoredChunk {
                id: id.to_string(),
                source_id: format!("src/{id}.md"),
                ordinal: 0,
                text: format!("text of {id}"),
                start: 0,
                end: 10,
                metadata: Default::default(),
                content_hash: String::new(),
                vector,
            },
            score,
            origin: ScoreOrigin::Vector,
        }
    }

    fn ids(chunks: &[ScoredChunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    #[test]
    fn rrf_rewards_agreement_between_rankings() {
        let a = vec![
            chunk("x", 0.9, vec![]),
            chunk("y", 0.8, vec![]),
            chunk("z", 0.7, vec![]),
        ];
        let b = vec![
            chunk("y", 0.95, vec![]),
            chunk("w", 0.9, vec![]),
            chunk("x", 0.5, vec![]),
        ];
        let fused = rrf(vec![a, b], 60.0);
        // y: 1/62 + 1/61; x: 1/61 + 1/63; w: 1/62; z: 1/63.
        assert_eq!(ids(&fused), vec!["y", "x", "w", "z"]);
        assert!((fused[0].score - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-7);
        assert!(fused.iter().all(|c| c.origin == ScoreOrigin::Rrf));
    }

    #[test]
    fn union_keeps_the_maximum_score_and_dedup_the_first() {
        let a = vec![chunk("x", 0.6, vec![]), chunk("y", 0.5, vec![])];
        let b = vec![chunk("y", 0.9, vec![]), chunk("x", 0.1, vec![])];
        let merged = union_max(vec![a.clone(), b]);
        assert_eq!(ids(&merged), vec!["y", "x"]);
        assert_eq!(merged[0].score, 0.9);
        assert_eq!(merged[1].score, 0.6);

        let mut repeated = a.clone();
        repeated.push(chunk("x", 0.05, vec![]));
        let (method, one) = fuse(
            TransformKind::Fusion,
            vec![repeated],
            60.0,
            &HybridFusion::default(),
        );
        assert_eq!(method, FuseMethod::Dedup);
        assert_eq!(ids(&one), vec!["x", "y"]);
        assert_eq!(one[0].score, 0.6, "a single ranking keeps its store scores");
    }

    #[test]
    fn method_follows_the_transform_kind() {
        let rrf = FusionMethod::Rrf;
        assert_eq!(
            FuseMethod::for_kind(TransformKind::None, 1, rrf),
            FuseMethod::Dedup
        );
        assert_eq!(
            FuseMethod::for_kind(TransformKind::Union, 3, rrf),
            FuseMethod::Union
        );
        assert_eq!(
            FuseMethod::for_kind(TransformKind::Fusion, 3, rrf),
            FuseMethod::Rrf
        );
        assert_eq!(
            FuseMethod::for_kind(TransformKind::Fusion, 3, FusionMethod::Convex),
            FuseMethod::Convex
        );
        assert_eq!(
            FuseMethod::for_kind(TransformKind::Replacement, 2, FusionMethod::Convex),
            FuseMethod::Union
        );
        assert_eq!(
            FuseMethod::for_kind(TransformKind::Fusion, 1, FusionMethod::Convex),
            FuseMethod::Dedup
        );
    }

    #[test]
    fn convex_averages_normalised_scores_of_the_rankings() {
        let a = vec![
            chunk("x", 0.9, vec![]),
            chunk("y", 0.7, vec![]),
            chunk("z", 0.5, vec![]),
        ];
        // Another scale: min-max puts both on [0, 1].
        let b = vec![chunk("y", 30.0, vec![]), chunk("x", 10.0, vec![])];
        let fusion = HybridFusion::convex(Normalization::MinMax, 0.5, 0.5);
        let (method, fused) = fuse(TransformKind::Fusion, vec![a, b], 60.0, &fusion);
        assert_eq!(method, FuseMethod::Convex);
        // x: (1 + 0)/2; y: (0.5 + 1)/2; z: (0 + 0)/2.
        assert_eq!(ids(&fused), vec!["y", "x", "z"]);
        assert!((fused[0].score - 0.75).abs() < 1e-6);
        assert!(fused.iter().all(|c| c.origin == ScoreOrigin::Convex));

        // One candidate, and a ranking with no hits: nothing divides by zero.
        let (_, single) = fuse(
            TransformKind::Fusion,
            vec![vec![chunk("only", 3.0, vec![])], vec![]],
            60.0,
            &fusion,
        );
        assert_eq!(ids(&single), vec!["only"]);
        assert!(single[0].score.is_finite());
    }

    fn rankings_strategy() -> impl Strategy<Value = Vec<Vec<ScoredChunk>>> {
        // Up to 5 rankings of up to 12 ids drawn from a pool of 20 (so they overlap).
        prop::collection::vec(prop::collection::vec((0u8..20, 0.0f32..1.0), 0..12), 1..5).prop_map(
            |rankings| {
                rankings
                    .into_iter()
                    .map(|r| {
                        r.into_iter()
                            .map(|(id, score)| chunk(&format!("c{id}"), score, vec![]))
                            .collect()
                    })
                    .collect()
            },
        )
    }

    proptest! {
        #[test]
        fn rrf_is_independent_of_input_order(rankings in rankings_strategy(), rotate in 0usize..5) {
            let forward = rrf(rankings.clone(), 60.0);
            let mut permuted = rankings.clone();
            permuted.reverse();
            let len = permuted.len();
            permuted.rotate_left(rotate % len);
            let other = rrf(permuted, 60.0);
            prop_assert_eq!(ids(&forward), ids(&other));
            let scores_a: Vec<u32> = forward.iter().map(|c| c.score.to_bits()).collect();
            let scores_b: Vec<u32> = other.iter().map(|c| c.score.to_bits()).collect();
            prop_assert_eq!(scores_a, scores_b);
            // Every fused chunk appears once and is labelled RRF.
            let mut unique = ids(&forward);
            unique.sort();
            unique.dedup();
            prop_assert_eq!(unique.len(), forward.len());
            prop_assert!(forward.iter().all(|c| c.origin == ScoreOrigin::Rrf));
        }

        #[test]
        fn convex_is_a_permutation_of_the_union_of_the_rankings(
            rankings in rankings_strategy(), zscore in any::<bool>(),
        ) {
            let normalization = if zscore { Normalization::ZScore } else { Normalization::MinMax };
            let fused = convex(rankings.clone(), normalization);
            let mut got = ids(&fused);
            got.sort();
            let mut want: Vec<&str> = rankings.iter().flatten().map(|c| c.chunk.id.as_str()).collect();
            want.sort();
            want.dedup();
            prop_assert_eq!(got, want);
            let mut reversed = rankings.clone();
            reversed.reverse();
            let backward = convex(reversed, normalization);
            prop_assert_eq!(ids(&fused), ids(&backward));
        }

        #[test]
        fn union_is_independent_of_input_order(rankings in rankings_strategy()) {
            let forward = union_max(rankings.clone());
            let mut reversed = rankings;
            reversed.reverse();
            let backward = union_max(reversed);
            prop_assert_eq!(ids(&forward), ids(&backward));
        }
    }
}
