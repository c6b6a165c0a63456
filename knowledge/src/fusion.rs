//! Reciprocal Rank Fusion, the one implementation: `score(id) = Σ_rankings 1 / (rrf_k + rank)`
//! with 1-based ranks. Hybrid search (`store`, in `f32`) and the query pipeline's `rag-fusion`
//! (`query::fuse`, in `f64`) both call [`reciprocal_rank_fusion`]; the float type is the
//! caller's, so each keeps its own precision.
//!
//! The result does not depend on the order of the rankings: per id, contributions are summed in
//! rank order, and ties break by id.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ties_break_by_id_and_the_limit_cuts() {
        let fused = reciprocal_rank_fusion(&[vec!["b"], vec!["a"]], 60.0f32, 1);
        assert_eq!(fused, vec![("a".to_string(), 1.0 / 61.0)]);
        let none: Vec<Vec<&str>> = Vec::new();
        assert!(reciprocal_rank_fusion(&none, 60.0f32, 5).is_empty());
    }
}
