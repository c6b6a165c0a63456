//! A collection's vector index: the exact live set, plus, at or above `hnsw_threshold` chunks,
//! an HNSW snapshot of an earlier generation. Chunks added after the snapshot are scanned
//! exactly and merged with the graph's candidates; chunks deleted since are filtered out (the
//! live set is the filter), and every score is the exact cosine against the live vector.
//!
//! A snapshot serves only if its recall@10, measured against the exact scan when it was built,
//! reaches `hnsw_min_recall`; otherwise the collection keeps scanning exactly (vectors with no
//! neighbourhood structure, such as uniform random ones in hundreds of dimensions, defeat any
//! graph at a modest `ef_search`).
//!
//! The snapshot is replaced (by the embedded store, in a background thread) once
//! `hnsw_rebuild_after` chunks were added or removed since it was built.

use std::collections::HashSet;
use std::sync::Arc;

use super::hnsw_calibration::Calibration;
use super::hnsw_snapshot::{HnswSnapshot, SnapshotHeader};
use super::index_stamp::IndexStamp;
use crate::settings::StoreSettings;
use crate::store::VectorIndexStatus;
use crate::store::exact_vectors::{ExactVectors, top_k};

/// The live vectors of a collection and its current HNSW snapshot, if any.
pub struct VectorIndex {
    live: ExactVectors,
    snapshot: Option<Arc<HnswSnapshot>>,
    /// Live ids the snapshot does not hold (scanned exactly).
    pending: HashSet<Arc<str>>,
    /// Snapshot members deleted since it was built.
    removed_since_snapshot: usize,
    settings: StoreSettings,
}

impl VectorIndex {
    pub fn new(dimensions: usize, settings: StoreSettings) -> Self {
        Self {
            live: ExactVectors::new(dimensions),
            snapshot: None,
            pending: HashSet::new(),
            removed_since_snapshot: 0,
            settings,
        }
    }

    /// Live chunks indexed.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether a chunk id is indexed.
    pub fn contains(&self, id: &str) -> bool {
        self.live.contains(id)
    }

    /// Live chunks the snapshot does not cover.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    #[cfg(test)]
    pub fn snapshot_header(&self) -> Option<SnapshotHeader> {
        self.snapshot.as_ref().map(|s| s.header())
    }

    /// Inserts or replaces a chunk's vector; `false` when its dimension is wrong.
    pub fn upsert(&mut self, id: &str, vector: &[f32]) -> bool {
        if !self.live.upsert(id, vector) {
            return false;
        }
        if let Some(snapshot) = &self.snapshot
            && !snapshot.contains(id)
            && let Some(shared) = self.live.id(id)
        {
            self.pending.insert(shared);
        }
        true
    }

    /// Removes a chunk's vector.
    pub fn remove(&mut self, id: &str) {
        if self.live.remove(id) {
            self.pending.remove(id);
            if self.snapshot.as_ref().is_some_and(|s| s.contains(id)) {
                self.removed_since_snapshot += 1;
            }
        }
    }

    /// The header a snapshot of the current live set would carry.
    pub fn snapshot_header_for(&self, stamp: IndexStamp) -> SnapshotHeader {
        SnapshotHeader {
            stamp,
            dimensions: self.live.dimensions(),
            ef_construction: self.settings.hnsw_ef_construction,
            ef_search: self.settings.hnsw_ef_search,
        }
    }

    /// Whether a snapshot with this header can serve this index (same incarnation, not newer
    /// than sled, same dimensions and build parameters).
    pub fn accepts(&self, header: &SnapshotHeader, current: IndexStamp) -> bool {
        header.stamp.incarnation == current.incarnation
            && header.stamp.generation <= current.generation
            && header.dimensions == self.live.dimensions()
            && header.ef_construction == self.settings.hnsw_ef_construction
            && header.ef_search == self.settings.hnsw_ef_search
    }

    /// Whether a (new) snapshot should be built: the collection is at or above the threshold
    /// and has no snapshot, or `hnsw_rebuild_after` chunks changed since the current one.
    pub fn needs_snapshot(&self) -> bool {
        if self.live.is_empty() || self.live.len() < self.settings.hnsw_threshold {
            return false;
        }
        match &self.snapshot {
            None => true,
            Some(_) => {
                self.pending.len() + self.removed_since_snapshot
                    >= self.settings.hnsw_rebuild_after.max(1)
            }
        }
    }

    /// Probe queries measuring a new snapshot's recall.
    pub fn calibration_queries(&self) -> usize {
        self.settings.hnsw_calibration_queries
    }

    /// Ids and rows to build a snapshot from.
    pub fn snapshot_input(&self) -> (Vec<Arc<str>>, Vec<f32>) {
        self.live.copy_all()
    }

    /// Makes `snapshot` the current one; live chunks it lacks become pending.
    pub fn install_snapshot(&mut self, snapshot: Arc<HnswSnapshot>) {
        self.pending = self
            .live
            .ids()
            .filter(|id| !snapshot.contains(id))
            .cloned()
            .collect();
        self.removed_since_snapshot = snapshot
            .members()
            .filter(|id| !self.live.contains(id))
            .count();
        self.snapshot = Some(snapshot);
    }

    /// Whether a snapshot's measured recall reaches `hnsw_min_recall`.
    pub fn recall_suffices(&self, calibration: &Calibration) -> bool {
        calibration.recall_at_10 >= self.settings.hnsw_min_recall
    }

    /// The snapshot, when it serves searches: the collection is at or above the threshold and
    /// the graph's measured recall suffices.
    fn serving_snapshot(&self) -> Option<&Arc<HnswSnapshot>> {
        self.snapshot.as_ref().filter(|s| {
            self.live.len() >= self.settings.hnsw_threshold
                && self.recall_suffices(&s.calibration())
        })
    }

    /// Which index serves vector searches now, and why.
    pub fn status(&self) -> VectorIndexStatus {
        let threshold = self.settings.hnsw_threshold;
        let recall = self.snapshot.as_ref().map(|s| s.calibration().recall_at_10);
        let (serving, reason) = match (&self.snapshot, self.serving_snapshot()) {
            (_, Some(s)) => (
                "hnsw".to_string(),
                format!(
                    "{} chunks in the graph (ef_search {}), {} newer scanned exactly",
                    s.len(),
                    s.header().ef_search,
                    self.pending.len()
                ),
            ),
            _ if self.live.len() < threshold => (
                "exact".to_string(),
                format!(
                    "{} chunks, below hnsw_threshold {threshold}",
                    self.live.len()
                ),
            ),
            (None, None) => (
                "exact".to_string(),
                "the HNSW graph is being built".to_string(),
            ),
            (Some(s), None) => (
                "exact".to_string(),
                format!(
                    "the HNSW graph's measured recall@10 {:.3} is below hnsw_min_recall {}; raise hnsw_ef_search (and hnsw_ef_construction) to use it",
                    s.calibration().recall_at_10,
                    self.settings.hnsw_min_recall
                ),
            ),
        };
        VectorIndexStatus {
            serving,
            reason,
            hnsw_recall_at_10: recall,
        }
    }

    /// How deep a search can go through the HNSW snapshot (its `ef_search`), when one serves
    /// this index; deeper searches scan exactly.
    pub fn approximate_depth(&self) -> Option<usize> {
        self.serving_snapshot().map(|s| s.header().ef_search)
    }

    /// The `k` nearest live chunks to a normalised query, best first, with cosine scores.
    pub fn search(&self, query: &[f32], k: usize) -> Vec<(Arc<str>, f32)> {
        if k == 0 || self.live.is_empty() {
            return Vec::new();
        }
        let snapshot = match self.serving_snapshot() {
            Some(s) if k <= s.header().ef_search => s,
            _ => return self.live.search(query, k),
        };
        let mut scored: Vec<(Arc<str>, f32)> = snapshot
            .search(query)
            .into_iter()
            .filter_map(|id| Some((self.live.id(id)?, self.live.score(id, query)?)))
            .collect();
        let covered = self.live.len() - self.pending.len();
        if scored.len() < k && covered > scored.len() {
            // Deletions left the graph with too few live candidates: scan exactly.
            return self.live.search(query, k);
        }
        scored.extend(
            self.pending
                .iter()
                .filter_map(|id| Some((id.clone(), self.live.score(id, query)?))),
        );
        top_k(scored, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::exact_vectors::normalise;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::time::Instant;

    fn random_unit(rng: &mut StdRng, dimensions: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dimensions)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        normalise(&mut v);
        v
    }

    fn settings(threshold: usize, rebuild_after: usize) -> StoreSettings {
        StoreSettings {
            hnsw_threshold: threshold,
            hnsw_rebuild_after: rebuild_after,
            ..StoreSettings::default()
        }
    }

    fn stamp(generation: u64) -> IndexStamp {
        IndexStamp {
            incarnation: 1,
            generation,
        }
    }

    fn build_snapshot(index: &mut VectorIndex, generation: u64) {
        let (ids, rows) = index.snapshot_input();
        let header = index.snapshot_header_for(stamp(generation));
        let snapshot = HnswSnapshot::build(&ids, &rows, header, index.calibration_queries());
        index.install_snapshot(Arc::new(snapshot));
    }

    /// How test vectors are drawn.
    #[derive(Clone, Copy)]
    enum Draw {
        /// Uniform in [-1, 1]^d, normalised: no neighbourhood structure at all.
        Uniform,
        /// Around `count / 50` random centres, each vector its centre plus noise of this norm,
        /// normalised: topic-like groups, as embeddings of a corpus form.
        Clustered(f32),
    }

    fn draw(count: usize, dimensions: usize, how: Draw, rng: &mut StdRng) -> Vec<Vec<f32>> {
        let centres: Vec<Vec<f32>> = (0..1 + count / 50)
            .map(|_| random_unit(rng, dimensions))
            .collect();
        (0..count)
            .map(|_| match how {
                Draw::Uniform => random_unit(rng, dimensions),
                Draw::Clustered(noise) => {
                    let centre = &centres[rng.random_range(0..centres.len())];
                    let offset = random_unit(rng, dimensions);
                    let mut v: Vec<f32> = centre
                        .iter()
                        .zip(&offset)
                        .map(|(c, o)| c + noise * o)
                        .collect();
                    normalise(&mut v);
                    v
                }
            })
            .collect()
    }

    /// What a recall run found.
    struct RecallRun {
        /// recall@10 of `VectorIndex::search` against the exact scan on fresh queries.
        recall: f64,
        /// Which index served those searches.
        status: VectorIndexStatus,
    }

    /// Builds a `count` x `dimensions` index over `how`-drawn vectors with its snapshot, then
    /// measures recall@10 of its searches against the exact scan on `queries` fresh queries
    /// drawn the same way.
    fn recall_run(
        count: usize,
        dimensions: usize,
        how: Draw,
        queries: usize,
        settings: StoreSettings,
    ) -> RecallRun {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut vectors = draw(count + queries, dimensions, how, &mut rng);
        let probes = vectors.split_off(count);
        let mut index = VectorIndex::new(dimensions, settings);
        for (i, v) in vectors.iter().enumerate() {
            assert!(index.upsert(&format!("c{i}"), v));
        }
        let started = Instant::now();
        build_snapshot(&mut index, 1);
        eprintln!(
            "HNSW build over {count} x {dimensions} (with calibration): {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(index.pending_len(), 0);
        let mut found = 0usize;
        for query in &probes {
            let exact: HashSet<Arc<str>> = index
                .live
                .search(query, 10)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            let served = index.search(query, 10);
            assert_eq!(served.len(), 10);
            found += served.iter().filter(|(id, _)| exact.contains(id)).count();
        }
        let run = RecallRun {
            recall: found as f64 / (queries * 10) as f64,
            status: index.status(),
        };
        eprintln!(
            "recall@10 of searches = {:.4}; served by {} ({}); graph measured at build: {:?}",
            run.recall, run.status.serving, run.status.reason, run.status.hnsw_recall_at_10
        );
        run
    }

    /// Settings where every collection gets a graph, at the given breadth.
    fn graph_settings(ef: usize) -> StoreSettings {
        StoreSettings {
            hnsw_ef_construction: ef,
            hnsw_ef_search: ef,
            ..settings(1, usize::MAX)
        }
    }

    /// The always-on variant. Small because instant-distance's generic code is compiled at this
    /// crate's opt-level: ~10 s here in a debug build, where the same code at opt-level 2 builds
    /// a 20,000 x 64 graph in ~35 s.
    #[test]
    fn hnsw_recall_at_10_on_1k_random_32_dim_vectors() {
        let run = recall_run(1_000, 32, Draw::Uniform, 200, graph_settings(100));
        assert_eq!(run.status.serving, "hnsw", "{}", run.status.reason);
        assert!(run.recall >= 0.98, "recall@10 {} < 0.98", run.recall);
    }

    #[test]
    fn a_graph_measured_below_hnsw_min_recall_is_not_served() {
        // ef 10 over 1,000 uniform random 48-dim vectors: a graph that misses neighbours.
        let narrow = graph_settings(10);
        let guarded = recall_run(1_000, 48, Draw::Uniform, 100, narrow.clone());
        let measured = guarded.status.hnsw_recall_at_10.unwrap();
        assert!(measured < 0.98, "the graph measured {measured}");
        assert_eq!(guarded.status.serving, "exact");
        assert!(
            guarded.status.reason.contains("hnsw_min_recall"),
            "{}",
            guarded.status.reason
        );
        assert_eq!(guarded.recall, 1.0, "exact scans answer");

        // The same graph served anyway (min recall 0): searches lose what calibration measured.
        let unguarded = recall_run(
            1_000,
            48,
            Draw::Uniform,
            100,
            StoreSettings {
                hnsw_min_recall: 0.0,
                ..narrow
            },
        );
        assert_eq!(unguarded.status.serving, "hnsw");
        assert!(unguarded.recall < 0.98, "{}", unguarded.recall);
        assert!(
            (unguarded.recall - measured).abs() < 0.1,
            "calibration {measured} predicts served recall {}",
            unguarded.recall
        );
    }

    /// The bar: recall@10 >= 0.98 against exact on 50,000 uniform random vectors, here
    /// 64-dimensional. At the default ef (100) this graph measured 0.955 and was not served; at
    /// ef 200 it serves and meets the bar.
    #[test]
    #[ignore = "heavy (minutes in release): cargo test --release -p orkeon-knowledge -- --ignored hnsw_recall"]
    fn hnsw_recall_at_10_on_50k_uniform_random_64_dim_vectors_at_ef_200() {
        let run = recall_run(50_000, 64, Draw::Uniform, 200, graph_settings(200));
        assert_eq!(run.status.serving, "hnsw", "{}", run.status.reason);
        assert!(run.recall >= 0.98, "recall@10 {} < 0.98", run.recall);
    }

    /// The same bar on embedding-like (clustered) 384-dim vectors, the size of the default
    /// model's: the graph serves and meets it.
    #[test]
    #[ignore = "heavy (minutes in release): cargo test --release -p orkeon-knowledge -- --ignored hnsw_recall"]
    fn hnsw_recall_at_10_on_50k_clustered_384_dim_vectors() {
        let run = recall_run(
            50_000,
            384,
            Draw::Clustered(1.0),
            200,
            settings(1, usize::MAX),
        );
        assert_eq!(run.status.serving, "hnsw", "{}", run.status.reason);
        assert!(run.recall >= 0.98, "recall@10 {} < 0.98", run.recall);
    }

    /// The same bar on uniform random 384-dim vectors, which have no neighbourhood structure:
    /// at ef 100 the graph measures far below 0.98, so the index keeps scanning exactly and its
    /// searches still meet the bar.
    #[test]
    #[ignore = "heavy (minutes in release): cargo test --release -p orkeon-knowledge -- --ignored hnsw_recall"]
    fn hnsw_recall_at_10_on_50k_uniform_random_384_dim_vectors() {
        let run = recall_run(50_000, 384, Draw::Uniform, 200, settings(1, usize::MAX));
        assert!(run.recall >= 0.98, "recall@10 {} < 0.98", run.recall);
        let measured = run.status.hnsw_recall_at_10.unwrap();
        assert_eq!(run.status.serving == "hnsw", measured >= 0.98);
    }

    #[test]
    fn chunks_added_after_the_snapshot_are_found_and_deleted_ones_never_returned() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut index = VectorIndex::new(16, settings(100, 1_000));
        for i in 0..300 {
            index.upsert(&format!("old{i}"), &random_unit(&mut rng, 16));
        }
        assert!(index.needs_snapshot());
        build_snapshot(&mut index, 3);
        assert!(!index.needs_snapshot());

        let fresh: Vec<Vec<f32>> = (0..20).map(|_| random_unit(&mut rng, 16)).collect();
        for (i, v) in fresh.iter().enumerate() {
            index.upsert(&format!("new{i}"), v);
        }
        assert_eq!(index.pending_len(), 20);
        for (i, v) in fresh.iter().enumerate() {
            let hits = index.search(v, 3);
            assert_eq!(&*hits[0].0, format!("new{i}"));
            assert!((hits[0].1 - 1.0).abs() < 1e-5);
        }

        let deleted: Vec<String> = (0..300).step_by(3).map(|i| format!("old{i}")).collect();
        let deleted_vectors: Vec<Vec<f32>> = deleted
            .iter()
            .map(|id| index.live.vector(id).unwrap().to_vec())
            .collect();
        for id in &deleted {
            index.remove(id);
        }
        index.remove("new0");
        for query in deleted_vectors.iter().chain(&fresh[..1]) {
            let hits = index.search(query, 10);
            assert_eq!(hits.len(), 10);
            for (id, _) in &hits {
                assert!(index.contains(id), "{id} was deleted but returned");
            }
        }
        // Survivors are still found through the graph.
        let survivor = index.live.vector("old1").unwrap().to_vec();
        assert_eq!(&*index.search(&survivor, 1)[0].0, "old1");
    }

    #[test]
    fn snapshot_is_rebuilt_after_enough_changes_and_only_accepted_when_compatible() {
        let mut rng = StdRng::seed_from_u64(9);
        let mut index = VectorIndex::new(8, settings(50, 10));
        for i in 0..49 {
            index.upsert(&format!("c{i}"), &random_unit(&mut rng, 8));
        }
        assert!(!index.needs_snapshot(), "below the threshold");
        index.upsert("c49", &random_unit(&mut rng, 8));
        assert!(index.needs_snapshot(), "at the threshold");
        build_snapshot(&mut index, 5);
        for i in 0..5 {
            index.upsert(&format!("n{i}"), &random_unit(&mut rng, 8));
            index.remove(&format!("c{i}"));
        }
        assert!(index.needs_snapshot(), "5 added + 5 removed >= 10");

        let header = index.snapshot_header().unwrap();
        assert!(index.accepts(&header, stamp(5)));
        assert!(
            index.accepts(&header, stamp(9)),
            "older snapshots serve, newer chunks scanned"
        );
        assert!(
            !index.accepts(&header, stamp(4)),
            "a snapshot newer than sled is foreign"
        );
        let other_incarnation = IndexStamp {
            incarnation: 2,
            generation: 5,
        };
        assert!(!index.accepts(&header, other_incarnation));
        let other = VectorIndex::new(
            8,
            StoreSettings {
                hnsw_ef_search: 7,
                ..settings(50, 10)
            },
        );
        assert!(!other.accepts(&header, stamp(5)));
    }
}
