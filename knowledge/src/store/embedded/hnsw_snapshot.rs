//! An HNSW graph (instant-distance) over a collection's vectors as of one generation, and its
//! persisted form `vectors.bin`.
//!
//! File format: the magic `ORKHNSW3`, the SHA-256 of the rest, then postcard-encoded
//! [`SnapshotHeader`], the graph's [`Calibration`] and the `HnswMap` (points are unit vectors,
//! values chunk ids). Written to a temporary file, synced and renamed into place, so a crash
//! leaves either the old file or the new one. The checksum is verified before decoding: a
//! damaged graph can decode and then index out of bounds when searched (found by fuzzing), so
//! damage must be caught first. Files of older formats (`ORKHNSW1` without calibration,
//! `ORKHNSW2` without checksum) are refused and rebuilt.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use instant_distance::{Builder, HnswMap, Point, Search};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::hnsw_calibration::{Calibration, calibrate};
use super::index_stamp::IndexStamp;
use crate::store::exact_vectors::dot;

const MAGIC: &[u8; 8] = b"ORKHNSW3";
const OLDER_MAGICS: [&[u8; 8]; 2] = [b"ORKHNSW1", b"ORKHNSW2"];
#[cfg(test)]
const OLDER_MAGIC: &[u8; 8] = OLDER_MAGICS[1];
/// Bytes of the checksum after the magic.
const CHECKSUM_LEN: usize = 32;

/// Forwards writes to `inner` and hashes them.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A normalised vector as an HNSW point: distance is `1 - cosine`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitVector(Vec<f32>);

impl Point for UnitVector {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - dot(&self.0, &other.0)
    }
}

/// What a snapshot was built from and with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub stamp: IndexStamp,
    pub dimensions: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
}

/// An HNSW graph over the vectors of one generation, with its measured recall.
pub struct HnswSnapshot {
    header: SnapshotHeader,
    calibration: Calibration,
    map: HnswMap<UnitVector, String>,
    members: HashSet<String>,
}

impl HnswSnapshot {
    /// Builds the graph over `rows` (one normalised vector of `header.dimensions` per id), then
    /// measures its recall@10 against the exact scan on `calibration_queries` probes.
    pub fn build(
        ids: &[Arc<str>],
        rows: &[f32],
        header: SnapshotHeader,
        calibration_queries: usize,
    ) -> Self {
        let points: Vec<UnitVector> = rows
            .chunks_exact(header.dimensions.max(1))
            .map(|row| UnitVector(row.to_vec()))
            .collect();
        let values: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        let seed = header.stamp.incarnation ^ header.stamp.generation;
        let map = Builder::default()
            .ef_construction(header.ef_construction)
            .ef_search(header.ef_search)
            .seed(seed)
            .build(points, values);
        let calibration = calibrate(
            ids,
            rows,
            header.dimensions,
            calibration_queries,
            seed,
            |query| search_map(&map, query),
        );
        Self::from_parts(header, calibration, map)
    }

    fn from_parts(
        header: SnapshotHeader,
        calibration: Calibration,
        map: HnswMap<UnitVector, String>,
    ) -> Self {
        let members = map.values.iter().cloned().collect();
        Self {
            header,
            calibration,
            map,
            members,
        }
    }

    pub fn header(&self) -> SnapshotHeader {
        self.header
    }

    /// The graph's recall as measured when it was built.
    pub fn calibration(&self) -> Calibration {
        self.calibration
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.members.contains(id)
    }

    /// Chunk ids of the snapshot.
    pub fn members(&self) -> impl Iterator<Item = &String> {
        self.members.iter()
    }

    /// The approximate nearest neighbours of a normalised query (at most `ef_search`), nearest
    /// first. They may include chunks deleted since the snapshot: the caller filters them.
    pub fn search(&self, query: &[f32]) -> Vec<&str> {
        search_map(&self.map, query)
    }

    /// Writes the snapshot to `path` atomically (temporary file, sync, rename).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let temporary = path.with_extension("bin.tmp");
        let write = || -> Result<(), String> {
            let file = File::create(&temporary).map_err(|e| e.to_string())?;
            let mut out = BufWriter::new(file);
            out.write_all(MAGIC).map_err(|e| e.to_string())?;
            out.write_all(&[0; CHECKSUM_LEN])
                .map_err(|e| e.to_string())?;
            let out = HashingWriter {
                inner: out,
                hasher: Sha256::new(),
            };
            let out = postcard::to_io(&self.header, out).map_err(|e| e.to_string())?;
            let out = postcard::to_io(&self.calibration, out).map_err(|e| e.to_string())?;
            let mut out = postcard::to_io(&self.map, out).map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
            let HashingWriter { inner, hasher } = out;
            let mut file = inner.into_inner().map_err(|e| e.to_string())?;
            file.seek(SeekFrom::Start(MAGIC.len() as u64))
                .map_err(|e| e.to_string())?;
            file.write_all(&hasher.finalize())
                .map_err(|e| e.to_string())?;
            file.sync_all().map_err(|e| e.to_string())
        };
        write().map_err(|e| format!("writing {}: {e}", temporary.display()))?;
        std::fs::rename(&temporary, path).map_err(|e| {
            format!(
                "renaming {} to {}: {e}",
                temporary.display(),
                path.display()
            )
        })
    }

    /// Reads a snapshot written by [`save`](Self::save); `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<Self>, String> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        if OLDER_MAGICS.iter().any(|magic| bytes.starts_with(*magic)) {
            return Err(format!(
                "{} is an HNSW snapshot of an older format (without a measured recall or a checksum)",
                path.display()
            ));
        }
        let checked = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or_else(|| format!("{} is not an Orkeon HNSW snapshot", path.display()))?;
        if checked.len() < CHECKSUM_LEN
            || Sha256::digest(&checked[CHECKSUM_LEN..]).as_slice() != &checked[..CHECKSUM_LEN]
        {
            return Err(format!(
                "decoding {}: its checksum does not match (the file is damaged)",
                path.display()
            ));
        }
        let body = &checked[CHECKSUM_LEN..];
        let (header, rest): (SnapshotHeader, _) = postcard::take_from_bytes(body)
            .map_err(|e| format!("decoding the header of {}: {e}", path.display()))?;
        let (calibration, rest): (Calibration, _) = postcard::take_from_bytes(rest)
            .map_err(|e| format!("decoding the calibration of {}: {e}", path.display()))?;
        let map: HnswMap<UnitVector, String> = postcard::from_bytes(rest)
            .map_err(|e| format!("decoding the graph of {}: {e}", path.display()))?;
        Ok(Some(Self::from_parts(header, calibration, map)))
    }
}

/// Chunk ids of the graph's nearest points to `query` (at most its `ef_search`), nearest first.
fn search_map<'m>(map: &'m HnswMap<UnitVector, String>, query: &[f32]) -> Vec<&'m str> {
    let mut search = Search::default();
    let point = UnitVector(query.to_vec());
    let positions: Vec<usize> = map
        .search(&point, &mut search)
        .map(|item| item.pid.into_inner() as usize)
        .collect();
    positions
        .into_iter()
        .filter_map(|position| map.values.get(position).map(String::as_str))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::exact_vectors::{ExactVectors, normalise};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn header(dimensions: usize, generation: u64) -> SnapshotHeader {
        SnapshotHeader {
            stamp: IndexStamp {
                incarnation: 3,
                generation,
            },
            dimensions,
            ef_construction: 40,
            ef_search: 40,
        }
    }

    fn random_set(count: usize, dimensions: usize, seed: u64) -> ExactVectors {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut set = ExactVectors::new(dimensions);
        for i in 0..count {
            let mut v: Vec<f32> = (0..dimensions)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            normalise(&mut v);
            set.upsert(&format!("c{i}"), &v);
        }
        set
    }

    #[test]
    fn snapshot_finds_each_point_and_survives_a_save_load_round_trip() {
        let set = random_set(500, 16, 1);
        let (ids, rows) = set.copy_all();
        let snapshot = HnswSnapshot::build(&ids, &rows, header(16, 4), 50);
        assert_eq!(snapshot.len(), 500);
        let calibration = snapshot.calibration();
        assert_eq!(calibration.queries, 50);
        assert!(calibration.recall_at_10 > 0.9, "{calibration:?}");
        for id in ["c0", "c123", "c499"] {
            let hits = snapshot.search(set.vector(id).unwrap());
            assert_eq!(hits[0], id);
        }

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        assert!(HnswSnapshot::load(&path).unwrap().is_none());
        snapshot.save(&path).unwrap();
        assert!(!path.with_extension("bin.tmp").exists());
        let loaded = HnswSnapshot::load(&path).unwrap().unwrap();
        assert_eq!(loaded.header(), header(16, 4));
        assert_eq!(loaded.calibration(), calibration);
        assert!(loaded.contains("c42"));
        let query = set.vector("c42").unwrap();
        assert_eq!(loaded.search(query), snapshot.search(query));
    }

    #[test]
    fn damaged_snapshot_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        std::fs::write(&path, b"something else").unwrap();
        assert!(
            HnswSnapshot::load(&path)
                .err()
                .unwrap()
                .contains("not an Orkeon HNSW snapshot")
        );
        let set = random_set(50, 4, 2);
        let (ids, rows) = set.copy_all();
        HnswSnapshot::build(&ids, &rows, header(4, 1), 10)
            .save(&path)
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(
            HnswSnapshot::load(&path)
                .err()
                .unwrap()
                .contains("decoding")
        );
        let mut older = OLDER_MAGIC.to_vec();
        older.extend_from_slice(&bytes[MAGIC.len()..]);
        std::fs::write(&path, older).unwrap();
        assert!(
            HnswSnapshot::load(&path)
                .err()
                .unwrap()
                .contains("older format")
        );
    }
}
