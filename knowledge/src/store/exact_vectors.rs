//! The live vectors of a collection in one contiguous `Vec<f32>` (row per chunk), with exact
//! cosine (dot product over L2-normalised vectors) top-k search.
//!
//! This is the whole vector index for small collections, the source the HNSW snapshot is built
//! from, and the exact scan of chunks newer than the snapshot for large ones.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// Dot product, written in 8 independent lanes so the optimiser vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a_chunks, a_rest) = a.as_chunks::<8>();
    let (b_chunks, b_rest) = b.as_chunks::<8>();
    let mut lanes = [0.0f32; 8];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += x * y;
    }
    sum
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn normalise(vector: &mut [f32]) {
    let norm = dot(vector, vector).sqrt();
    if norm > 0.0 && norm.is_finite() {
        for value in vector.iter_mut() {
            *value /= norm;
        }
    }
}

/// Best first: higher score, then smaller id (a total, input-order-free order).
pub fn best_first(a: &(Arc<str>, f32), b: &(Arc<str>, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
}

/// The `k` best of `scored`, best first.
pub fn top_k(mut scored: Vec<(Arc<str>, f32)>, k: usize) -> Vec<(Arc<str>, f32)> {
    if k == 0 {
        return Vec::new();
    }
    if scored.len() > k {
        scored.select_nth_unstable_by(k - 1, best_first);
        scored.truncate(k);
    }
    scored.sort_unstable_by(best_first);
    scored
}

/// Live vectors, one contiguous row per chunk.
#[derive(Debug, Clone)]
pub struct ExactVectors {
    dimensions: usize,
    ids: Vec<Arc<str>>,
    rows: Vec<f32>,
    slots: HashMap<Arc<str>, usize>,
}

impl ExactVectors {
    pub fn new(dimensions: usize) -> Self {
        Self {
            dimensions,
            ids: Vec::new(),
            rows: Vec::new(),
            slots: HashMap::new(),
        }
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.slots.contains_key(id)
    }

    /// The shared id of a live chunk.
    pub fn id(&self, id: &str) -> Option<Arc<str>> {
        self.slots.get(id).map(|&slot| self.ids[slot].clone())
    }

    fn row(&self, slot: usize) -> &[f32] {
        &self.rows[slot * self.dimensions..(slot + 1) * self.dimensions]
    }

    /// The (normalised) vector of a live chunk.
    pub fn vector(&self, id: &str) -> Option<&[f32]> {
        self.slots.get(id).map(|&slot| self.row(slot))
    }

    /// Cosine score of a live chunk against a normalised query.
    pub fn score(&self, id: &str, query: &[f32]) -> Option<f32> {
        self.vector(id).map(|row| dot(row, query))
    }

    /// Inserts or replaces a chunk's vector (stored normalised). Returns `false`, storing
    /// nothing, when the vector has the wrong dimension.
    pub fn upsert(&mut self, id: &str, vector: &[f32]) -> bool {
        if vector.len() != self.dimensions {
            return false;
        }
        let mut unit = vector.to_vec();
        normalise(&mut unit);
        match self.slots.get(id) {
            Some(&slot) => {
                self.rows[slot * self.dimensions..(slot + 1) * self.dimensions]
                    .copy_from_slice(&unit);
            }
            None => {
                let id: Arc<str> = Arc::from(id);
                self.slots.insert(id.clone(), self.ids.len());
                self.ids.push(id);
                self.rows.extend_from_slice(&unit);
            }
        }
        true
    }

    /// Removes a chunk's vector (the last row moves into its slot). Returns whether it was live.
    pub fn remove(&mut self, id: &str) -> bool {
        let Some(slot) = self.slots.remove(id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if slot != last {
            let (head, tail) = self.rows.split_at_mut(last * self.dimensions);
            head[slot * self.dimensions..(slot + 1) * self.dimensions]
                .copy_from_slice(&tail[..self.dimensions]);
            let moved = self.ids[last].clone();
            self.slots.insert(moved, slot);
        }
        self.ids.swap_remove(slot);
        self.rows.truncate(last * self.dimensions);
        true
    }

    /// Live chunk ids.
    pub fn ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.ids.iter()
    }

    /// A copy of every id and row (the input of an HNSW build).
    pub fn copy_all(&self) -> (Vec<Arc<str>>, Vec<f32>) {
        (self.ids.clone(), self.rows.clone())
    }

    /// Exact top-k by cosine against a normalised query, best first.
    pub fn search(&self, query: &[f32], k: usize) -> Vec<(Arc<str>, f32)> {
        if k == 0 || query.len() != self.dimensions {
            return Vec::new();
        }
        let scored: Vec<(Arc<str>, f32)> = self
            .rows
            .chunks_exact(self.dimensions)
            .zip(&self.ids)
            .map(|(row, id)| (id.clone(), dot(row, query)))
            .collect();
        top_k(scored, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_naive_sum_for_any_length() {
        for len in [0, 1, 7, 8, 9, 31, 384] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-4, "len {len}");
        }
    }

    #[test]
    fn upsert_remove_and_search_keep_rows_consistent() {
        let mut set = ExactVectors::new(2);
        assert!(set.upsert("east", &[2.0, 0.0]));
        assert!(set.upsert("north", &[0.0, 5.0]));
        assert!(set.upsert("north-east", &[1.0, 1.0]));
        assert!(!set.upsert("bad", &[1.0, 2.0, 3.0]));
        assert_eq!(set.len(), 3);

        let hits = set.search(&[1.0, 0.0], 2);
        assert_eq!(&*hits[0].0, "east");
        assert!((hits[0].1 - 1.0).abs() < 1e-6);
        assert_eq!(&*hits[1].0, "north-east");
        assert!((hits[1].1 - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);

        assert!(set.remove("east"));
        assert!(!set.remove("east"));
        assert_eq!(set.len(), 2);
        assert_eq!(set.vector("north-east").unwrap().len(), 2);
        assert!((set.score("north", &[0.0, 1.0]).unwrap() - 1.0).abs() < 1e-6);
        let hits = set.search(&[1.0, 0.0], 5);
        let ids: Vec<&str> = hits.iter().map(|(id, _)| &**id).collect();
        assert_eq!(ids, vec!["north-east", "north"]);

        assert!(set.upsert("north", &[1.0, 0.0]));
        assert_eq!(set.len(), 2);
        assert_eq!(&*set.search(&[1.0, 0.0], 1)[0].0, "north");
    }

    #[test]
    fn top_k_orders_ties_by_id() {
        let scored = vec![
            (Arc::from("b"), 0.5),
            (Arc::from("a"), 0.5),
            (Arc::from("c"), 0.9),
        ];
        let ids: Vec<String> = top_k(scored, 3)
            .iter()
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(ids, vec!["c", "a", "b"]);
    }
}
