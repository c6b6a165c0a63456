//! Fusion of several rankings into one, the one implementation of each method:
//!
//! - **Reciprocal Rank Fusion** ([`reciprocal_rank_fusion`]): `score(id) = Σ_rankings 1 /
//!   (rrf_k + rank)` with 1-based ranks. It reads ranks only, never scores.
//! - **Convex score fusion** ([`convex_fusion`]): each ranking's (leg's) scores are normalised
//!   per query ([`Normalization`]: min-max or z-score), then `score(id) = Σ_legs weight ×
//!   normalised(id)`. An id a leg did not return gets that leg's [`Normalization::missing`]
//!   value (min-max: 0; z-score: one standard deviation below the leg's lowest hit).
//!
//! Hybrid search (`store`, in `f32`), the query pipeline's `rag-fusion` (`query::fuse`, in
//! `f64`) and rerank blending (`query::rerank::blend`) all call these; [`HybridFusion`] is how
//! a search request says which method combines its vector and BM25 legs.
//!
//! Results do not depend on the order of the rankings: per id, contributions are summed in a
//! fixed order, and ties break by id. A repeated id within one ranking counts at its first
//! (best) position.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// How rankings are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FusionMethod {
    /// Reciprocal Rank Fusion: ranks only.
    #[default]
    Rrf,
    /// Weighted sum of per-leg normalised scores.
    Convex,
}

impl FusionMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            FusionMethod::Rrf => "rrf",
            FusionMethod::Convex => "convex",
        }
    }
}

/// How one leg's raw scores are put on a common scale before a convex fusion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalization {
    /// `(s − min) / (max − min)`, in [0, 1]; all-equal scores (one hit included) map to 1.
    #[default]
    MinMax,
    /// `(s − mean) / std` (population std); all-equal scores map to 0.
    ZScore,
}

impl Normalization {
    pub fn as_str(self) -> &'static str {
        match self {
            Normalization::MinMax => "minmax",
            Normalization::ZScore => "zscore",
        }
    }

    /// The normalised scores of one leg, in input order, and the value an id absent from the
    /// leg gets. Non-finite scores are left out of the statistics and get the absent value.
    /// Min-max: absent = 0 (the floor of the scale). Z-score: absent = the lowest normalised
    /// hit minus 1 (one standard deviation below everything the leg returned; −1 when the leg's
    /// scores are all equal).
    pub fn normalise(self, scores: &[f64]) -> (Vec<f64>, f64) {
        let finite: Vec<f64> = scores.iter().copied().filter(|s| s.is_finite()).collect();
        if finite.is_empty() {
            let absent = match self {
                Normalization::MinMax => 0.0,
                Normalization::ZScore => -1.0,
            };
            return (vec![absent; scores.len()], absent);
        }
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // `normalised = (s − offset) / scale`, or `constant` when the scores do not spread.
        let (offset, scale, constant, absent) = match self {
            Normalization::MinMax => (min, max - min, 1.0, 0.0),
            Normalization::ZScore => {
                let n = finite.len() as f64;
                let mean = finite.iter().sum::<f64>() / n;
                let variance = finite.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / n;
                let std = variance.sqrt();
                (mean, std, 0.0, (min - mean) / std - 1.0)
            }
        };
        let spread = scale > 0.0 && scale.is_finite();
        let absent = if spread {
            absent
        } else {
            match self {
                Normalization::MinMax => 0.0,
                Normalization::ZScore => -1.0,
            }
        };
        let normalised = scores
            .iter()
            .map(|&s| match (s.is_finite(), spread) {
                (false, _) => absent,
                (true, true) => (s - offset) / scale,
                (true, false) => constant,
            })
            .collect();
        (normalised, absent)
    }
}

/// Which method combines a hybrid search's vector and BM25 legs, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HybridFusion {
    pub method: FusionMethod,
    /// Per-leg normalisation (convex only).
    pub normalization: Normalization,
    /// Weight of the vector leg (convex only).
    pub vector_weight: f32,
    /// Weight of the BM25 leg (convex only).
    pub bm25_weight: f32,
}

impl Default for HybridFusion {
    /// RRF (the historical behaviour); convex parameters min-max, 0.5 / 0.5.
    fn default() -> Self {
        Self {
            method: FusionMethod::Rrf,
            normalization: Normalization::MinMax,
            vector_weight: 0.5,
            bm25_weight: 0.5,
        }
    }
}

impl HybridFusion {
    /// Convex fusion with these weights and normalisation.
    pub fn convex(normalization: Normalization, vector_weight: f32, bm25_weight: f32) -> Self {
        Self {
            method: FusionMethod::Convex,
            normalization,
            vector_weight,
            bm25_weight,
        }
    }

    /// Fails with what is wrong when a weight is negative or not finite, or both are 0.
    pub fn check(&self) -> Result<(), String> {
        check_weights(&[
            ("vector_weight", self.vector_weight as f64),
            ("bm25_weight", self.bm25_weight as f64),
        ])
    }

    /// What the trace says about this fusion.
    pub fn describe(&self, rrf_k: f32) -> serde_json::Value {
        match self.method {
            FusionMethod::Rrf => serde_json::json!({"method": "rrf", "rrf_k": rrf_k}),
            FusionMethod::Convex => serde_json::json!({
                "method": "convex",
                "normalization": self.normalization.as_str(),
                "weights": {"vector": self.vector_weight, "bm25": self.bm25_weight},
            }),
        }
    }
}

/// Fails naming the weight when one is negative or not finite, or when all are 0.
pub fn check_weights(weights: &[(&str, f64)]) -> Result<(), String> {
    for (name, weight) in weights {
        if !(weight.is_finite() && *weight >= 0.0) {
            return Err(format!(
                "{name} must be a finite number ≥ 0, found {weight}"
            ));
        }
    }
    if weights.iter().all(|(_, w)| *w == 0.0) {
        let names: Vec<&str> = weights.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "{} are all 0; give at least one leg a positive weight",
            names.join(" and ")
        ));
    }
    Ok(())
}

/// Convex fusion of `legs` (each a ranking best first with raw scores, and its weight) into
/// the `limit` best `(id, score)` pairs, best first, ties broken by id. Every id of every leg
/// is scored (a leg that did not return it contributes its absent value, see
/// [`Normalization::normalise`]), so with `limit` ≥ the union's size the output is a
/// permutation of the union of the legs.
pub fn convex_fusion<S: AsRef<str>>(
    legs: &[(Vec<(S, f64)>, f64)],
    normalization: Normalization,
    limit: usize,
) -> Vec<(String, f64)> {
    // Per leg: id → normalised score at its first occurrence, and the absent value.
    let mut per_leg: Vec<(HashMap<&str, f64>, f64, f64)> = Vec::with_capacity(legs.len());
    for (hits, weight) in legs {
        let mut seen = HashSet::new();
        let first: Vec<(&str, f64)> = hits
            .iter()
            .map(|(id, score)| (id.as_ref(), *score))
            .filter(|(id, _)| seen.insert(*id))
            .collect();
        let scores: Vec<f64> = first.iter().map(|(_, s)| *s).collect();
        let (normalised, absent) = normalization.normalise(&scores);
        let map = first
            .iter()
            .map(|(id, _)| *id)
            .zip(normalised)
            .collect::<HashMap<&str, f64>>();
        per_leg.push((map, absent, *weight));
    }
    // The union, sorted (ties break by id below).
    let union: BTreeMap<&str, ()> = per_leg
        .iter()
        .flat_map(|(map, _, _)| map.keys().map(|id| (*id, ())))
        .collect();
    let mut fused: Vec<(String, f64)> = union
        .into_keys()
        .map(|id| {
            let mut contributions: Vec<f64> = per_leg
                .iter()
                .map(|(map, absent, weight)| weight * map.get(id).copied().unwrap_or(*absent))
                .collect();
            // Summation in value order: the same float result whatever the order of the legs.
            contributions.sort_by(f64::total_cmp);
            (id.to_string(), contributions.iter().sum())
        })
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused.truncate(limit);
    fused
}

/// A float type RRF scores are computed in (`f32` or `f64`).
pub trait RrfScore: Copy + std::iter::Sum<Self> {
    /// One ranking's contribution, `1 / (rrf_k + rank)`.
    fn contribution(rrf_k: Self, rank: usize) -> Self;
    /// Total order of two scores.
    fn order(&self, other: &Self) -> Ordering;
}

impl RrfScore for f32 {
    fn contribution(rrf_k: Self, rank: usize) -> Self {
        1.0 / (rrf_k + rank as f32)
    }

    fn order(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

impl RrfScore for f64 {
    fn contribution(rrf_k: Self, rank: usize) -> Self {
        1.0 / (rrf_k + rank as f64)
    }

    fn order(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

/// Fuses rankings (each best first; an id repeated within one ranking counts at its best rank)
/// into the `limit` best `(id, score)` pairs, best first, ties broken by id.
pub fn reciprocal_rank_fusion<S: AsRef<str>, F: RrfScore>(
    rankings: &[Vec<S>],
    rrf_k: F,
    limit: usize,
) -> Vec<(String, F)> {
    let mut ranks: HashMap<&str, Vec<usize>> = HashMap::new();
    for ranking in rankings {
        let mut seen = HashSet::new();
        for (position, id) in ranking.iter().enumerate() {
            let id = id.as_ref();
            if seen.insert(id) {
                ranks.entry(id).or_default().push(position + 1);
            }
        }
    }
    let mut fused: Vec<(String, F)> = ranks
        .into_iter()
        .map(|(id, mut id_ranks)| {
            // Summation in rank order: the same float result whatever the input order.
            id_ranks.sort_unstable();
            let score = id_ranks
                .iter()
                .map(|&rank| F::contribution(rrf_k, rank))
                .sum();
            (id.to_string(), score)
        })
        .collect();
    fused.sort_by(|a, b| b.1.order(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused.truncate(limit);
    fused
}

/// Weighted Reciprocal Rank Fusion: `score(id) = Σ_rankings weight / (rrf_k + rank)`, ranks
/// 1-based (an id repeated within a ranking counts at its first position); the `limit` best
/// pairs, best first, ties broken by id. With equal weights it orders like
/// [`reciprocal_rank_fusion`].
pub fn weighted_rrf<S: AsRef<str>>(
    rankings: &[(Vec<S>, f64)],
    rrf_k: f64,
    limit: usize,
) -> Vec<(String, f64)> {
    let mut contributions: HashMap<&str, Vec<f64>> = HashMap::new();
    for (ranking, weight) in rankings {
        let mut seen = HashSet::new();
        for (position, id) in ranking.iter().enumerate() {
            let id = id.as_ref();
            if seen.insert(id) {
                contributions
                    .entry(id)
                    .or_default()
                    .push(weight * f64::contribution(rrf_k, position + 1));
            }
        }
    }
    let mut fused: Vec<(String, f64)> = contributions
        .into_iter()
        .map(|(id, mut parts)| {
            parts.sort_by(f64::total_cmp);
            (id.to_string(), parts.iter().sum())
        })
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused.truncate(limit);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn both_precisions_follow_the_formula() {
        let rankings = [vec!["a", "b", "c"], vec!["c", "a"]];
        let single = reciprocal_rank_fusion(&rankings, 60.0f32, 10);
        let double = reciprocal_rank_fusion(&rankings, 60.0f64, 10);
        assert_eq!(single[0], ("a".to_string(), 1.0 / 61.0 + 1.0 / 62.0));
        assert_eq!(double[0], ("a".to_string(), 1.0 / 61.0 + 1.0 / 62.0));
        assert_eq!(double[1], ("c".to_string(), 1.0 / 61.0 + 1.0 / 63.0));
        assert_eq!(double[2], ("b".to_string(), 1.0 / 62.0));
        let ids = |fused: &[(String, f32)]| fused.iter().map(|(id, _)| id.clone()).collect();
        let single_ids: Vec<String> = ids(&single);
        assert_eq!(single_ids, vec!["a", "c", "b"]);
    }

    #[test]
    fn a_repeated_id_counts_once_at_its_best_rank() {
        let fused = reciprocal_rank_fusion(&[vec!["x", "y", "x"]], 10.0f64, 10);
        assert_eq!(
            fused,
            vec![
                ("x".to_string(), 1.0 / 11.0),
                // Positions count the repeat: `y` is still second.
                ("y".to_string(), 1.0 / 12.0),
            ]
        );
    }

    fn leg(hits: &[(&str, f64)], weight: f64) -> (Vec<(String, f64)>, f64) {
        (
            hits.iter().map(|(id, s)| (id.to_string(), *s)).collect(),
            weight,
        )
    }

    #[test]
    fn min_max_maps_to_the_unit_range_and_absent_ids_to_zero() {
        let (n, absent) = Normalization::MinMax.normalise(&[3.0, 1.0, 2.0]);
        assert_eq!(n, vec![1.0, 0.0, 0.5]);
        assert_eq!(absent, 0.0);
    }

    #[test]
    fn z_score_centres_and_puts_absent_ids_below_every_hit() {
        let (n, absent) = Normalization::ZScore.normalise(&[3.0, 1.0, 2.0]);
        let std = (2.0f64 / 3.0).sqrt();
        assert!((n[0] - 1.0 / std).abs() < 1e-12);
        assert!((n[1] + 1.0 / std).abs() < 1e-12);
        assert_eq!(n[2], 0.0);
        assert!((absent - (-1.0 / std - 1.0)).abs() < 1e-12);
    }

    #[test]
    fn one_candidate_and_all_equal_scores_do_not_divide_by_zero() {
        for scores in [vec![0.42], vec![7.0, 7.0, 7.0]] {
            let (n, absent) = Normalization::MinMax.normalise(&scores);
            assert!(n.iter().all(|v| *v == 1.0), "{n:?}");
            assert_eq!(absent, 0.0);
            let (n, absent) = Normalization::ZScore.normalise(&scores);
            assert!(n.iter().all(|v| *v == 0.0), "{n:?}");
            assert_eq!(absent, -1.0);
        }
        // Non-finite scores are left out and treated as absent.
        let (n, absent) = Normalization::MinMax.normalise(&[f64::NAN, 2.0, 4.0]);
        assert_eq!(n, vec![absent, 0.0, 1.0]);
        let (empty, _) = Normalization::ZScore.normalise(&[]);
        assert!(empty.is_empty());
    }

    #[test]
    fn convex_fusion_weighs_normalised_legs() {
        // Vector scores (cosine) and BM25 scores live on different scales.
        let vector = leg(&[("a", 0.9), ("b", 0.8), ("c", 0.5)], 0.5);
        let bm25 = leg(&[("c", 20.0), ("b", 15.0), ("d", 10.0)], 0.5);
        let fused = convex_fusion(&[vector.clone(), bm25.clone()], Normalization::MinMax, 10);
        // a: 0.5·1 + 0 = 0.5; b: 0.5·0.75 + 0.5·0.5 = 0.625; c: 0 + 0.5 = 0.5; d: 0 + 0 = 0.
        let ids: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, vec!["b", "a", "c", "d"]);
        assert!((fused[0].1 - 0.625).abs() < 1e-12);
        assert_eq!(fused[1].1, 0.5);
        assert_eq!(fused[2].1, 0.5, "a and c tie; the id breaks it");

        // Weight 1/0 is the vector ranking alone, followed by the ids only BM25 found.
        let vector_only = convex_fusion(
            &[
                leg(&[("a", 0.9), ("b", 0.8), ("c", 0.5)], 1.0),
                leg(&[("c", 20.0), ("b", 15.0), ("d", 10.0)], 0.0),
            ],
            Normalization::MinMax,
            10,
        );
        let ids: Vec<&str> = vector_only.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b", "c", "d"]);
    }

    #[test]
    fn a_leg_with_no_hits_leaves_the_other_ranking_as_it_is() {
        let vector = leg(&[("a", 0.9), ("b", 0.8), ("c", 0.5)], 0.5);
        let empty = leg(&[], 0.5);
        for normalization in [Normalization::MinMax, Normalization::ZScore] {
            let fused = convex_fusion(&[vector.clone(), empty.clone()], normalization, 10);
            let ids: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(ids, vec!["a", "b", "c"], "{normalization:?}");
        }
        let none: Vec<(Vec<(String, f64)>, f64)> = Vec::new();
        assert!(convex_fusion(&none, Normalization::MinMax, 10).is_empty());
    }

    #[test]
    fn weights_must_be_finite_non_negative_and_not_all_zero() {
        assert!(HybridFusion::default().check().is_ok());
        let err = HybridFusion::convex(Normalization::MinMax, -1.0, 0.5)
            .check()
            .unwrap_err();
        assert!(err.contains("vector_weight"), "{err}");
        let err = HybridFusion::convex(Normalization::MinMax, 0.0, 0.0)
            .check()
            .unwrap_err();
        assert!(err.contains("all 0"), "{err}");
        assert!(
            HybridFusion::convex(Normalization::ZScore, 0.0, f32::NAN)
                .check()
                .is_err()
        );
    }

    /// Rankings of distinct-or-repeated ids from a small pool, with scores.
    fn scored_legs() -> impl Strategy<Value = Vec<(Vec<(String, f64)>, f64)>> {
        prop::collection::vec(
            (
                prop::collection::vec((0u8..25, -50.0f64..50.0), 0..15),
                0.0f64..2.0,
            ),
            0..4,
        )
        .prop_map(|legs| {
            legs.into_iter()
                .map(|(hits, weight)| {
                    (
                        hits.into_iter()
                            .map(|(id, score)| (format!("c{id:02}"), score))
                            .collect(),
                        weight,
                    )
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn convex_output_is_a_permutation_of_the_union_of_the_legs(
            legs in scored_legs(), zscore in any::<bool>(),
        ) {
            let normalization = if zscore { Normalization::ZScore } else { Normalization::MinMax };
            let fused = convex_fusion(&legs, normalization, usize::MAX);
            let mut got: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
            got.sort_unstable();
            let union: BTreeSet<&str> = legs
                .iter()
                .flat_map(|(hits, _)| hits.iter().map(|(id, _)| id.as_str()))
                .collect();
            let want: Vec<&str> = union.into_iter().collect();
            prop_assert_eq!(got, want);
            for pair in fused.windows(2) {
                prop_assert!(pair[0].1 > pair[1].1 || (pair[0].1 == pair[1].1 && pair[0].0 < pair[1].0));
            }
            // The order of the legs does not matter.
            let mut reversed = legs.clone();
            reversed.reverse();
            prop_assert_eq!(&fused, &convex_fusion(&reversed, normalization, usize::MAX));
        }

        #[test]
        fn rrf_output_is_a_permutation_of_the_union_of_the_rankings(legs in scored_legs()) {
            let rankings: Vec<Vec<&str>> = legs
                .iter()
                .map(|(hits, _)| hits.iter().map(|(id, _)| id.as_str()).collect())
                .collect();
            let fused = reciprocal_rank_fusion(&rankings, 60.0f64, usize::MAX);
            let mut got: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
            got.sort_unstable();
            let want: Vec<&str> = rankings.iter().flatten().copied().collect::<BTreeSet<_>>().into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn weighted_rrf_scales_each_ranking() {
        let rankings = [(vec!["a", "b"], 0.25), (vec!["b", "c"], 0.75)];
        let fused = weighted_rrf(&rankings, 60.0, 10);
        let ids: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, vec!["b", "c", "a"]);
        assert!((fused[0].1 - (0.25 / 62.0 + 0.75 / 61.0)).abs() < 1e-15);
        // Equal weights order like plain RRF.
        let plain = reciprocal_rank_fusion(&[vec!["a", "b"], vec!["b", "c"]], 60.0f64, 10);
        let equal = weighted_rrf(&[(vec!["a", "b"], 1.0), (vec!["b", "c"], 1.0)], 60.0, 10);
        assert_eq!(plain, equal);
    }

    #[test]
    fn ties_break_by_id_and_the_limit_cuts() {
        let fused = reciprocal_rank_fusion(&[vec!["b"], vec!["a"]], 60.0f32, 1);
        assert_eq!(fused, vec![("a".to_string(), 1.0 / 61.0)]);
        let none: Vec<Vec<&str>> = Vec::new();
        assert!(reciprocal_rank_fusion(&none, 60.0f32, 5).is_empty());
    }
}
