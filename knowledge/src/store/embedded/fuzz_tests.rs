//! Property-based fuzzing (proptest) of what the embedded store decodes from disk: stored
//! chunks (arbitrary bytes, and valid encodings mutated), counters, and HNSW snapshot files
//! (arbitrary bytes behind the magic, and valid snapshots with bytes flipped, cut or spliced).
//! Decoding must refuse bad input with an error, never panic; a snapshot that still decodes
//! after damage must answer searches without panicking (this found damaged graphs that decoded
//! and then indexed out of bounds on search: snapshots now carry a checksum). Bounded case
//! counts (a few seconds).

use std::sync::Arc;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::hnsw_snapshot::{HnswSnapshot, SnapshotHeader};
use super::index_stamp::IndexStamp;
use super::layout::{decode_chunk, decode_chunk_vector, decode_u64, encode_chunk};
use crate::store::exact_vectors::normalise;
use crate::types::StoredChunk;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn chunk(text: String, vector: Vec<f32>) -> StoredChunk {
    StoredChunk {
        id: "c1".into(),
        source_id: "a.md".into(),
        ordinal: 3,
        text,
        start: 0,
        end: 4,
        metadata: [("loader".to_string(), "markdown".to_string())].into(),
        vector,
        content_hash: "h".into(),
    }
}

/// A saved snapshot of 40 random unit vectors, built once.
static SNAPSHOT: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| snapshot_bytes(40));

/// A saved snapshot of `count` random unit vectors of 8 dimensions.
fn snapshot_bytes(count: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(7);
    let ids: Vec<Arc<str>> = (0..count).map(|i| Arc::from(format!("c{i}"))).collect();
    let mut rows = Vec::new();
    for _ in 0..count {
        let mut v: Vec<f32> = (0..8).map(|_| rng.random_range(-1.0..1.0)).collect();
        normalise(&mut v);
        rows.extend(v);
    }
    let header = SnapshotHeader {
        stamp: IndexStamp {
            incarnation: 1,
            generation: 2,
        },
        dimensions: 8,
        ef_construction: 20,
        ef_search: 20,
    };
    let snapshot = HnswSnapshot::build(&ids, &rows, header, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vectors.bin");
    snapshot.save(&path).unwrap();
    std::fs::read(&path).unwrap()
}

/// Loads `bytes` as a snapshot file; when it decodes, searches it.
fn load_and_search(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vectors.bin");
    std::fs::write(&path, bytes).unwrap();
    if let Ok(Some(snapshot)) = HnswSnapshot::load(&path) {
        let dimensions = snapshot.header().dimensions.clamp(1, 64);
        let mut query = vec![0.0f32; dimensions];
        query[0] = 1.0;
        let _ = snapshot.search(&query);
        let _ = snapshot.len();
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn stored_chunks_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_chunk("c1", &bytes);
        if let Ok(vector) = decode_chunk_vector(&bytes) {
            prop_assert!(vector.len() * 4 <= bytes.len());
        }
        if let Ok(value) = decode_u64(&bytes) {
            prop_assert_eq!(bytes.len(), 8);
            prop_assert_eq!(value.to_be_bytes().to_vec(), bytes);
        }
    }

    #[test]
    fn stored_chunks_round_trip_and_survive_mutation(
        text in "(?s).{0,64}",
        vector in proptest::collection::vec(-1.0f32..1.0, 0..16),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let original = chunk(text, vector);
        let encoded = encode_chunk(&original).unwrap();
        prop_assert_eq!(&decode_chunk("c1", &encoded).unwrap(), &original);
        prop_assert_eq!(decode_chunk_vector(&encoded).unwrap(), original.vector.clone());
        let mut damaged = encoded.clone();
        for (at, byte) in flips {
            let at = at % damaged.len();
            damaged[at] = byte;
        }
        damaged.truncate(cut % (damaged.len() + 1));
        let _ = decode_chunk("c1", &damaged);
        let _ = decode_chunk_vector(&damaged);
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn snapshot_files_of_any_content_are_refused_or_read(
        body in proptest::collection::vec(any::<u8>(), 0..512),
        magic in prop_oneof![Just(&b"ORKHNSW3"[..]), Just(&b"ORKHNSW2"[..]), Just(&b""[..])],
    ) {
        let bytes = [magic, &body].concat();
        load_and_search(&bytes);
        // With a valid checksum the body reaches the decoder: it must refuse or decode, never
        // panic (searching what a crafted body decodes to is not promised: writing the data
        // folder is already full control).
        use sha2::{Digest, Sha256};
        let sealed = [&b"ORKHNSW3"[..], Sha256::digest(&body).as_slice(), &body].concat();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        std::fs::write(&path, sealed).unwrap();
        let _ = HnswSnapshot::load(&path);
    }

    #[test]
    fn damaged_snapshots_are_refused_or_searchable(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let mut bytes = SNAPSHOT.clone();
        for (at, byte) in flips {
            let at = 8 + at % (bytes.len() - 8);
            bytes[at] = byte;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        load_and_search(&bytes);
    }
}
