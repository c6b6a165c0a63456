//! Stage 3 (fuse), optional second half: Maximal Marginal Relevance re-ordering of the fused
//! candidates. Each pick maximises `λ·relevance − (1 − λ)·max-similarity-to-already-picked`.
//!
//! Similarity is the cosine of the chunks' stored embeddings (no re-embedding: the store keeps
//! every chunk's vector). For a pair where either vector is missing or the dimensions differ
//! (e.g. web documents), it falls back to the Jaccard similarity of their content words, and the
//! outcome counts those pairs. Relevance is the fused score min-max normalised over the
//! candidates, so that RRF rank aggregates and cosine scores are on the same [0, 1] scale as the
//! similarity. Scores are not changed: MMR only re-orders.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::types::ScoredChunk;
use orkeon_crews::text::{content_word_set, jaccard};

/// What MMR did, for the trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MmrOutcome {
    pub lambda: f32,
    /// Pairs compared by embedding cosine.
    pub cosine_pairs: usize,
    /// Pairs compared by content-word Jaccard (a vector was missing or of another size).
    pub lexical_pairs: usize,
    /// Candidates whose position changed.
    pub moved: usize,
}

fn unit(vector: &[f32]) -> Option<Vec<f32>> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    (!vector.is_empty() && norm > 0.0 && norm.is_finite())
        .then(|| vector.iter().map(|x| x / norm).collect())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Re-orders `candidates` by MMR with trade-off `lambda` (1 = pure relevance, 0 = pure
/// diversity).
pub fn mmr_reorder(candidates: Vec<ScoredChunk>, lambda: f32) -> (Vec<ScoredChunk>, MmrOutcome) {
    let n = candidates.len();
    let mut outcome = MmrOutcome {
        lambda,
        ..MmrOutcome::default()
    };
    if n < 2 {
        return (candidates, outcome);
    }

    let (lo, hi) = candidates
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), c| {
            (lo.min(c.score), hi.max(c.score))
        });
    let relevance: Vec<f32> = candidates
        .iter()
        .map(|c| {
            if hi > lo {
                (c.score - lo) / (hi - lo)
            } else {
                1.0
            }
        })
        .collect();
    let units: Vec<Option<Vec<f32>>> = candidates.iter().map(|c| unit(&c.chunk.vector)).collect();
    let mut words: Vec<Option<BTreeSet<String>>> = vec![None; n];

    let mut picked: Vec<usize> = Vec::with_capacity(n);
    let mut remaining: Vec<usize> = (0..n).collect();
    // Highest similarity of each candidate to anything picked so far.
    let mut max_sim = vec![f32::NEG_INFINITY; n];

    while !remaining.is_empty() {
        let (pos, _) = remaining
            .iter()
            .enumerate()
            .map(|(pos, &i)| {
                let redundancy = if picked.is_empty() { 0.0 } else { max_sim[i] };
                (pos, lambda * relevance[i] - (1.0 - lambda) * redundancy)
            })
            // Strictly greater: ties keep the earlier (better fused) candidate.
            .fold((0, f32::NEG_INFINITY), |best, cur| {
                if cur.1 > best.1 { cur } else { best }
            });
        let chosen = remaining.remove(pos);
        picked.push(chosen);
        for &i in &remaining {
            let sim = match (&units[chosen], &units[i]) {
                (Some(a), Some(b)) if a.len() == b.len() => {
                    outcome.cosine_pairs += 1;
                    dot(a, b)
                }
                _ => {
                    outcome.lexical_pairs += 1;
                    for j in [chosen, i] {
                        if words[j].is_none() {
                            words[j] = Some(content_word_set(&candidates[j].chunk.text));
                        }
                    }
                    match (&words[chosen], &words[i]) {
                        (Some(a), Some(b)) => jaccard(a, b),
                        _ => 0.0,
                    }
                }
            };
            max_sim[i] = max_sim[i].max(sim);
        }
    }

    outcome.moved = picked.iter().enumerate().filter(|(p, i)| p != *i).count();
    let mut slots: Vec<Option<ScoredChunk>> = candidates.into_iter().map(Some).collect();
    let reordered = picked.into_iter().filter_map(|i| slots[i].take()).collect();
    (reordered, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;

    fn ids(chunks: &[ScoredChunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    #[test]
    fn near_duplicates_are_pushed_down() {
        // a and a2 point the same way; b is orthogonal and slightly less relevant.
        let candidates = vec![
            chunk("a", 0.90, vec![1.0, 0.0, 0.0]),
            chunk("a2", 0.89, vec![0.99, 0.14, 0.0]),
            chunk("b", 0.80, vec![0.0, 1.0, 0.0]),
            chunk("c", 0.10, vec![0.0, 0.0, 1.0]),
        ];
        let (out, outcome) = mmr_reorder(candidates.clone(), 0.7);
        assert_eq!(ids(&out), vec!["a", "b", "a2", "c"]);
        assert_eq!(outcome.cosine_pairs, 3 + 2 + 1);
        assert_eq!(outcome.lexical_pairs, 0);
        assert_eq!(outcome.moved, 2);
        // Scores are untouched.
        assert_eq!(out[1].score, 0.80);

        // λ = 1 is pure relevance: the fused order stays.
        let (out, outcome) = mmr_reorder(candidates.clone(), 1.0);
        assert_eq!(ids(&out), vec!["a", "a2", "b", "c"]);
        assert_eq!(outcome.moved, 0);

        // λ = 0 is pure diversity: after the first pick, the least similar comes next.
        let (out, _) = mmr_reorder(candidates, 0.0);
        assert_eq!(out[0].chunk.id, "a");
        assert_ne!(out[1].chunk.id, "a2");
        assert_eq!(out[3].chunk.id, "a2");
    }

    #[test]
    fn missing_vectors_fall_back_to_lexical_similarity() {
        let mut a = chunk("a", 0.9, vec![]);
        a.chunk.text = "refund window thirty days".into();
        let mut dup = chunk("dup", 0.85, vec![]);
        dup.chunk.text = "refund window thirty days".into();
        let mut other = chunk("other", 0.8, vec![1.0, 0.0]);
        other.chunk.text = "shipping to europe".into();
        let (out, outcome) = mmr_reorder(vec![a, dup, other], 0.5);
        assert_eq!(ids(&out), vec!["a", "other", "dup"]);
        assert!(outcome.lexical_pairs > 0);
        assert_eq!(outcome.cosine_pairs, 0);
    }

    #[test]
    fn output_is_a_permutation_of_the_input() {
        let candidates: Vec<ScoredChunk> = (0..30)
            .map(|i| {
                let angle = i as f32 * 0.37;
                chunk(
                    &format!("c{i}"),
                    1.0 / (1.0 + i as f32),
                    vec![angle.cos(), angle.sin(), 0.3],
                )
            })
            .collect();
        let (out, _) = mmr_reorder(candidates.clone(), 0.7);
        let mut before: Vec<&str> = ids(&candidates);
        let mut after: Vec<&str> = ids(&out);
        before.sort();
        after.sort();
        assert_eq!(before, after);
        assert_eq!(
            out[0].chunk.id, "c0",
            "the most relevant candidate is always picked first"
        );
    }
}
