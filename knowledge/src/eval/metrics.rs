//! Retrieval metrics over one ranked list of document keys: recall@k, MRR@k and graded
//! nDCG@k, plus the aggregation helpers the harness uses (mean, median).
//!
//! Conventions shared by every metric (documented once, tested below):
//!
//! - **Duplicates.** A ranking is de-duplicated before it is cut at `k`: the first occurrence
//!   of a key keeps its rank, later ones are dropped and free their rank (a document is ranked
//!   by its best chunk). A duplicate therefore never counts twice nor takes a slot.
//! - **Short rankings.** `k` larger than the ranking simply evaluates the whole ranking.
//! - **No relevant documents.** A case with an empty relevant set (or only grade-0 qrels)
//!   scores 0.0 on every metric, as `trec_eval` does; loaders keep such cases out of datasets.
//! - **nDCG** follows `trec_eval`'s `ndcg_cut`: linear gain (`gain = grade`, not
//!   `2^grade − 1`) with a `log2(rank + 1)` discount, ranks starting at 1:
//!   `DCG@k = Σ_{i=1..k} grade(d_i) / log2(i + 1)`. The ideal DCG sorts the qrels' positive
//!   grades in decreasing order and applies the same formula over the first `k` of them, so a
//!   relevant document the system could never retrieve still lowers the score.

use std::collections::{BTreeMap, BTreeSet, HashSet};

/// The ranking without duplicates (first occurrence wins), cut at `k`.
fn top_k_unique(ranked: &[String], k: usize) -> Vec<&str> {
    let mut seen = HashSet::new();
    ranked
        .iter()
        .map(String::as_str)
        .filter(|key| seen.insert(*key))
        .take(k)
        .collect()
}

/// Fraction of the relevant documents found in the first `k` (de-duplicated) ranks.
pub fn recall_at_k(ranked: &[String], relevant: &BTreeSet<String>, k: usize) -> f64 {
    if relevant.is_empty() || k == 0 {
        return 0.0;
    }
    let found = top_k_unique(ranked, k)
        .into_iter()
        .filter(|key| relevant.contains(*key))
        .count();
    found as f64 / relevant.len() as f64
}

/// Reciprocal rank of the first relevant document within the first `k` ranks (0 if none).
pub fn mrr_at_k(ranked: &[String], relevant: &BTreeSet<String>, k: usize) -> f64 {
    top_k_unique(ranked, k)
        .into_iter()
        .position(|key| relevant.contains(key))
        .map_or(0.0, |index| 1.0 / (index as f64 + 1.0))
}

/// Graded nDCG@k, `trec_eval` definition (linear gain, `log2(rank + 1)` discount; see the
/// module documentation). `grades` maps a document key to its relevance grade; grade 0 and
/// absent keys are not relevant.
pub fn ndcg_at_k(ranked: &[String], grades: &BTreeMap<String, u32>, k: usize) -> f64 {
    let dcg: f64 = top_k_unique(ranked, k)
        .into_iter()
        .enumerate()
        .map(|(index, key)| {
            let grade = grades.get(key).copied().unwrap_or(0);
            f64::from(grade) * discount(index)
        })
        .sum();
    let mut ideal: Vec<u32> = grades.values().copied().filter(|g| *g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .into_iter()
        .take(k)
        .enumerate()
        .map(|(index, grade)| f64::from(grade) * discount(index))
        .sum();
    if idcg > 0.0 { dcg / idcg } else { 0.0 }
}

/// `1 / log2(rank + 1)` for the 0-based `index` (rank = index + 1).
fn discount(index: usize) -> f64 {
    1.0 / ((index as f64) + 2.0).log2()
}

/// Arithmetic mean (0 for an empty slice).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Median (mean of the two middle values for an even count; 0 for an empty slice).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    fn grades(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(k, g)| (k.to_string(), *g)).collect()
    }

    fn close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() < 1e-9,
            "expected {expected}, got {actual}"
        );
    }

    #[test]
    fn recall_counts_relevant_documents_in_the_first_k() {
        let ranked = ranking(&["a", "x", "b", "y", "c"]);
        let relevant = set(&["a", "b", "c", "d"]);
        close(recall_at_k(&ranked, &relevant, 1), 1.0 / 4.0);
        close(recall_at_k(&ranked, &relevant, 2), 1.0 / 4.0);
        close(recall_at_k(&ranked, &relevant, 3), 2.0 / 4.0);
        close(recall_at_k(&ranked, &relevant, 5), 3.0 / 4.0);
        // k beyond the ranking: the whole ranking; `d` was never retrieved.
        close(recall_at_k(&ranked, &relevant, 100), 3.0 / 4.0);
        close(recall_at_k(&ranked, &relevant, 0), 0.0);
    }

    #[test]
    fn mrr_is_the_reciprocal_rank_of_the_first_hit_within_k() {
        let ranked = ranking(&["x", "y", "b", "a"]);
        let relevant = set(&["a", "b"]);
        close(mrr_at_k(&ranked, &relevant, 10), 1.0 / 3.0);
        close(mrr_at_k(&ranked, &relevant, 3), 1.0 / 3.0);
        close(mrr_at_k(&ranked, &relevant, 2), 0.0);
        close(mrr_at_k(&ranking(&["a"]), &relevant, 10), 1.0);
    }

    #[test]
    fn graded_ndcg_matches_a_hand_computation() {
        // Qrels: a=2, b=1, c=2, d=0 (d is judged but not relevant).
        // Ranking: x, a, d, b, c.
        // DCG@5 = 0/log2(2) + 2/log2(3) + 0/log2(4) + 1/log2(5) + 2/log2(6)
        //       = 0 + 1.261859507 + 0 + 0.430676558 + 0.773705614 = 2.466241680
        // IDCG@5 over grades sorted [2, 2, 1]:
        //       = 2/log2(2) + 2/log2(3) + 1/log2(4) = 2 + 1.261859507 + 0.5 = 3.761859507
        // nDCG@5 = 0.655591...
        let g = grades(&[("a", 2), ("b", 1), ("c", 2), ("d", 0)]);
        let ranked = ranking(&["x", "a", "d", "b", "c"]);
        let dcg = 2.0 / 3f64.log2() + 1.0 / 5f64.log2() + 2.0 / 6f64.log2();
        let idcg = 2.0 + 2.0 / 3f64.log2() + 0.5;
        close(ndcg_at_k(&ranked, &g, 5), dcg / idcg);
        close(ndcg_at_k(&ranked, &g, 5), 0.655_591_117_903_940_9);

        // @2: DCG = 2/log2(3); IDCG = 2 + 2/log2(3).
        close(
            ndcg_at_k(&ranked, &g, 2),
            (2.0 / 3f64.log2()) / (2.0 + 2.0 / 3f64.log2()),
        );
        // The ideal ranking scores 1; k beyond the ranking evaluates all of it.
        close(ndcg_at_k(&ranking(&["a", "c", "b"]), &g, 10), 1.0);
        // Same grades swapped among equals: still ideal.
        close(ndcg_at_k(&ranking(&["c", "a", "b", "x"]), &g, 10), 1.0);
    }

    #[test]
    fn ndcg_uses_linear_gain_not_exponential() {
        // One document of grade 2 at rank 2 and one of grade 1 at rank 1.
        // Linear: DCG = 1 + 2/log2(3) = 2.261859507; IDCG = 2 + 1/log2(3) = 2.630929754.
        // (Exponential gain would give (1 + 3/log2(3)) / (3 + 1/log2(3)) = 0.797...)
        let g = grades(&[("hi", 2), ("lo", 1)]);
        let value = ndcg_at_k(&ranking(&["lo", "hi"]), &g, 10);
        close(value, (1.0 + 2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2()));
        close(value, 0.859_718_699_852_197_2);
    }

    #[test]
    fn ideal_dcg_comes_from_the_qrels_not_from_what_was_retrieved() {
        // Relevant: a (1) and b (1); only a retrieved, at rank 1.
        // DCG@10 = 1; IDCG@10 = 1 + 1/log2(3) = 1.630929754 → 0.613147...
        let g = grades(&[("a", 1), ("b", 1)]);
        close(
            ndcg_at_k(&ranking(&["a", "x"]), &g, 10),
            1.0 / (1.0 + 1.0 / 3f64.log2()),
        );
        // The ideal DCG is cut at k too: with k = 1 the single best grade is the ideal.
        close(ndcg_at_k(&ranking(&["a", "x"]), &g, 1), 1.0);
    }

    #[test]
    fn no_relevant_documents_score_zero_everywhere() {
        let ranked = ranking(&["a", "b"]);
        close(recall_at_k(&ranked, &BTreeSet::new(), 10), 0.0);
        close(mrr_at_k(&ranked, &BTreeSet::new(), 10), 0.0);
        close(ndcg_at_k(&ranked, &BTreeMap::new(), 10), 0.0);
        // Only grade-0 judgements: not relevant either.
        close(ndcg_at_k(&ranked, &grades(&[("a", 0)]), 10), 0.0);
        // Empty ranking.
        close(recall_at_k(&[], &set(&["a"]), 10), 0.0);
        close(mrr_at_k(&[], &set(&["a"]), 10), 0.0);
        close(ndcg_at_k(&[], &grades(&[("a", 1)]), 10), 0.0);
    }

    #[test]
    fn duplicates_neither_count_twice_nor_take_a_rank() {
        // a a b: de-duplicated to a b, so b sits at rank 2.
        let ranked = ranking(&["a", "a", "b"]);
        let relevant = set(&["a", "b"]);
        close(recall_at_k(&ranked, &relevant, 2), 1.0);
        close(recall_at_k(&ranking(&["a", "a", "a"]), &relevant, 3), 0.5);
        // x x x b: b is rank 2 after de-duplication.
        close(
            mrr_at_k(&ranking(&["x", "x", "x", "b"]), &relevant, 10),
            0.5,
        );
        close(mrr_at_k(&ranking(&["x", "x", "x", "b"]), &relevant, 2), 0.5);
        // A repeated relevant document does not add gain: nDCG stays ≤ 1.
        let g = grades(&[("a", 1)]);
        close(ndcg_at_k(&ranking(&["a", "a", "a"]), &g, 10), 1.0);
    }

    #[test]
    fn mean_and_median() {
        close(mean(&[]), 0.0);
        close(mean(&[1.0, 2.0, 6.0]), 3.0);
        close(median(&[]), 0.0);
        close(median(&[5.0, 1.0, 3.0]), 3.0);
        close(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
