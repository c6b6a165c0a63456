//! [`EmbeddedStore`]: the zero-setup [`DocumentStore`] — sled as the source of truth, with a
//! persisted tantivy BM25 index and a vector index (exact scan, HNSW snapshot above a
//! threshold) derived from it per collection.
//!
//! Layout: `<data_dir>/sled` (one tree `col/<storage>` per collection version, a
//! `collections` registry tree mapping each name to its storage id) and
//! `<data_dir>/indexes/<storage>/{bm25/, vectors.bin}` (see [`layout`]).
//!
//! Rebuilds: [`DocumentStore::begin_rebuild`] writes a new version under a fresh storage id
//! that no reader can name; publishing it is one flushed registry write pointing the name at
//! it, after which the old version's data is removed (once its last in-flight reader is done).
//! Opening removes every storage the registry does not point at, so a crash mid-rebuild leaves
//! the live version whole and nothing behind.
//!
//! Protocol: a mutation (one source, or a batch of sources such as every part of a PDF or CSV)
//! is ONE sled batch (chunks + manifest entries + stale chunk removals + generation bump),
//! flushed, and only then applied to the derived indexes, whose commits carry
//! the generation they reflect. Opening compares every index's stamp with sled and rebuilds the
//! BM25 index when it lags; the vector index is reloaded from sled, and an HNSW snapshot of an
//! older generation is used with the newer chunks scanned exactly (or rebuilt in the
//! background once enough changed). A per-collection read/write lock makes a search see a
//! source either before or after a concurrent replace, and every hit is fetched from sled, so
//! an id whose chunk is gone is never returned.

use std::collections::{BTreeMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

mod bm25;
mod collection_tree;
mod consistency;
#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod fuzz_tests;
mod hnsw_calibration;
mod hnsw_snapshot;
mod index_stamp;
mod layout;
mod quarantine;
pub(super) mod runs;
mod vector_index;

use bm25::Bm25Index;
use collection_tree::{CollectionTree, CommitOutcome};
pub use consistency::{CollectionConsistency, ConsistencyReport};
use hnsw_calibration::Calibration;
use hnsw_snapshot::{HnswSnapshot, SnapshotHeader};
use index_stamp::IndexStamp;
use layout::collection_tree_name;
use vector_index::VectorIndex;

use quarantine::SledQuarantineStore;

use super::checks::{CheckedQuery, check_search, check_source_batch};
use super::hybrid::{fuse_hybrid, hybrid_depths};
use super::{
    BatchOutcome, CollectionInfo, DocumentStore, Manifest, Rebuild, SearchRequest, SourceBatch,
    StoreError, validate_collection_name,
};
use crate::settings::StoreSettings;
use crate::types::{EmbeddingProfile, ScoreOrigin, ScoredChunk, StoredChunk};
use crate::validate::QuarantineStore;

const REGISTRY_TREE: &str = "collections";
const BM25_DIR: &str = "bm25";
const SNAPSHOT_FILE: &str = "vectors.bin";

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn sled_io(context: String) -> impl FnOnce(sled::Error) -> StoreError {
    move |e| StoreError::Io(format!("{context}: {e}"))
}

/// The derived indexes of one collection and the generation they reflect.
struct CollectionIndexes {
    bm25: Bm25Index,
    vectors: VectorIndex,
    /// Generation of the last mutation applied to the indexes.
    generation: u64,
    /// The BM25 index missed an update (its commit failed): rebuild it at the next mutation.
    bm25_stale: bool,
    snapshot_build_running: bool,
}

/// One open collection version (live, or a rebuild in progress).
struct Collection {
    /// The collection's name (for messages; a rebuild carries the name it will replace).
    name: String,
    /// Its storage id: its sled tree is `col/<storage>`, its indexes `indexes/<storage>/`.
    storage: String,
    db: sled::Db,
    tree: CollectionTree,
    profile: EmbeddingProfile,
    incarnation: u64,
    dir: PathBuf,
    indexes: RwLock<CollectionIndexes>,
    snapshot_build: Mutex<Option<JoinHandle<()>>>,
    /// Discarded (dropped, swapped out by a published rebuild, or an aborted rebuild): refuses
    /// writes, and its data is removed when the last handle to it goes.
    dropped: AtomicBool,
}

impl Collection {
    /// Opens a collection's indexes, rebuilding the ones that lag sled.
    fn open(
        name: &str,
        storage: &str,
        db: &sled::Db,
        tree: CollectionTree,
        dir: PathBuf,
        settings: &StoreSettings,
    ) -> Result<Arc<Self>, StoreError> {
        let missing = |what: &str| {
            StoreError::Corrupt(format!(
                "collection '{name}' has no {what}; drop it and re-ingest it"
            ))
        };
        let profile = tree
            .profile()?
            .ok_or_else(|| missing("embedding profile"))?;
        let incarnation = tree.incarnation()?.ok_or_else(|| missing("incarnation"))?;
        let generation = tree.generation()?;
        let stamp = IndexStamp {
            incarnation,
            generation,
        };

        let mut bm25 = Bm25Index::open(&dir.join(BM25_DIR))?;
        let bm25_stamp = bm25.stamp()?;
        if bm25_stamp != Some(stamp) {
            let started = Instant::now();
            let chunks = tree.all_chunks()?;
            bm25.rebuild(&chunks, stamp)?;
            info!(
                collection = name,
                index_generation = ?bm25_stamp.map(|s| s.generation),
                sled_generation = generation,
                chunks = chunks.len(),
                duration_ms = started.elapsed().as_millis() as u64,
                "BM25 index lagged sled; rebuilt it"
            );
        }

        let mut vectors = VectorIndex::new(profile.dimensions, settings.clone());
        for (id, vector) in tree.all_vectors(profile.dimensions)? {
            vectors.upsert(&id, &vector);
        }
        let snapshot_path = dir.join(SNAPSHOT_FILE);
        match HnswSnapshot::load(&snapshot_path) {
            Ok(None) => {}
            Ok(Some(snapshot)) if vectors.accepts(&snapshot.header(), stamp) => {
                let snapshot_generation = snapshot.header().stamp.generation;
                let calibration = snapshot.calibration();
                vectors.install_snapshot(Arc::new(snapshot));
                warn_when_recall_falls_short(name, &vectors, &calibration);
                if snapshot_generation < generation {
                    info!(
                        collection = name,
                        snapshot_generation,
                        sled_generation = generation,
                        newer_chunks = vectors.pending_len(),
                        "HNSW snapshot lags sled; newer chunks are scanned exactly until it is rebuilt"
                    );
                }
            }
            Ok(Some(snapshot)) => info!(
                collection = name,
                snapshot = ?snapshot.header(),
                sled_generation = generation,
                "HNSW snapshot does not match this collection or its settings; ignoring it"
            ),
            Err(reason) => {
                warn!(collection = name, %reason, "HNSW snapshot unreadable; it will be rebuilt")
            }
        }

        let collection = Arc::new(Self {
            name: name.to_string(),
            storage: storage.to_string(),
            db: db.clone(),
            tree,
            profile,
            incarnation,
            dir,
            indexes: RwLock::new(CollectionIndexes {
                bm25,
                vectors,
                generation,
                bm25_stale: false,
                snapshot_build_running: false,
            }),
            snapshot_build: Mutex::new(None),
            dropped: AtomicBool::new(false),
        });
        {
            let mut indexes = write(&collection.indexes);
            collection.schedule_snapshot_build(&mut indexes);
        }
        Ok(collection)
    }

    fn stamp(&self, generation: u64) -> IndexStamp {
        IndexStamp {
            incarnation: self.incarnation,
            generation,
        }
    }

    /// Starts a background HNSW build when the vector index asks for one and none is running.
    fn schedule_snapshot_build(self: &Arc<Self>, indexes: &mut CollectionIndexes) {
        if indexes.snapshot_build_running
            || self.dropped.load(Ordering::SeqCst)
            || !indexes.vectors.needs_snapshot()
        {
            return;
        }
        let (ids, rows) = indexes.vectors.snapshot_input();
        let header = indexes
            .vectors
            .snapshot_header_for(self.stamp(indexes.generation));
        let probes = indexes.vectors.calibration_queries();
        let collection = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("hnsw-{}", self.name))
            .spawn(move || collection.build_snapshot(ids, rows, header, probes));
        match spawned {
            Ok(handle) => {
                indexes.snapshot_build_running = true;
                *self
                    .snapshot_build
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(handle);
            }
            Err(error) => warn!(
                collection = %self.name, %error,
                "cannot start the HNSW build thread; searching exactly meanwhile"
            ),
        }
    }

    /// Body of the build thread: build, persist, install, and chain another build if enough
    /// changed meanwhile.
    fn build_snapshot(
        self: Arc<Self>,
        ids: Vec<Arc<str>>,
        rows: Vec<f32>,
        header: SnapshotHeader,
        probes: usize,
    ) {
        let started = Instant::now();
        let built = std::panic::catch_unwind(AssertUnwindSafe(|| {
            HnswSnapshot::build(&ids, &rows, header, probes)
        }));
        drop(rows);
        let snapshot = match built {
            Ok(snapshot) => Some(snapshot),
            Err(_) => {
                warn!(collection = %self.name, "HNSW build panicked; searching exactly");
                None
            }
        };
        if let Some(snapshot) = &snapshot
            && !self.dropped.load(Ordering::SeqCst)
        {
            match snapshot.save(&self.dir.join(SNAPSHOT_FILE)) {
                Ok(()) => info!(
                    collection = %self.name,
                    chunks = snapshot.len(),
                    generation = header.stamp.generation,
                    recall_at_10 = snapshot.calibration().recall_at_10,
                    probes = snapshot.calibration().queries,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "HNSW snapshot built and saved"
                ),
                Err(reason) => warn!(
                    collection = %self.name, %reason,
                    "HNSW snapshot built but not saved; it is rebuilt after a restart"
                ),
            }
        }
        let mut indexes = write(&self.indexes);
        indexes.snapshot_build_running = false;
        if self.dropped.load(Ordering::SeqCst) {
            return;
        }
        if let Some(snapshot) = snapshot {
            let calibration = snapshot.calibration();
            indexes.vectors.install_snapshot(Arc::new(snapshot));
            warn_when_recall_falls_short(&self.name, &indexes.vectors, &calibration);
            self.schedule_snapshot_build(&mut indexes);
        }
    }

    /// Marks the collection discarded and waits for its HNSW build, if any: no write reaches it
    /// from then on, and its data goes with its last handle.
    fn discard(&self) {
        self.dropped.store(true, Ordering::SeqCst);
        self.wait_for_snapshot_builds();
    }

    /// Waits until no HNSW build is running for this collection.
    fn wait_for_snapshot_builds(&self) {
        loop {
            let handle = self
                .snapshot_build
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            match handle {
                Some(handle) => {
                    if handle.join().is_err() {
                        warn!(collection = %self.name, "HNSW build thread panicked");
                    }
                }
                None => return,
            }
        }
    }

    /// Applies a committed mutation to the derived indexes: the documents of `source_ids` are
    /// replaced by `chunks` in one BM25 commit. The chunks are already durable in sled, so a
    /// failure here leaves the BM25 index marked stale (rebuilt at the next mutation or reopen)
    /// and is reported.
    fn apply_to_indexes(
        self: &Arc<Self>,
        indexes: &mut CollectionIndexes,
        source_ids: &[&str],
        outcome: &CommitOutcome,
        chunks: &[&StoredChunk],
    ) -> Result<(), StoreError> {
        for id in &outcome.removed {
            indexes.vectors.remove(id);
        }
        for chunk in chunks {
            indexes.vectors.upsert(&chunk.id, &chunk.vector);
        }
        indexes.generation = outcome.generation;
        let stamp = self.stamp(outcome.generation);
        let result = if indexes.bm25_stale {
            self.tree
                .all_chunks()
                .and_then(|all| indexes.bm25.rebuild(&all, stamp))
        } else {
            indexes.bm25.replace_sources(source_ids, chunks, stamp)
        };
        indexes.bm25_stale = result.is_err();
        self.schedule_snapshot_build(indexes);
        result.map_err(|error| {
            let what = match source_ids {
                [one] => format!("source '{one}' is"),
                many => format!("{} sources are", many.len()),
            };
            StoreError::Io(format!(
                "collection '{}': {what} stored, but updating the BM25 index failed ({error}); the index is rebuilt at the next change or when the store is reopened",
                self.name
            ))
        })
    }

    /// Fetches hits from sled, skipping ids whose chunk is gone (or unreadable).
    fn resolve_hits<I: AsRef<str>>(
        &self,
        hits: Vec<(I, f32)>,
        origin: ScoreOrigin,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        let mut resolved = Vec::with_capacity(hits.len());
        for (id, score) in hits {
            let id = id.as_ref();
            match self.tree.chunk(id)? {
                Some(Ok(chunk)) => resolved.push(ScoredChunk {
                    chunk,
                    score,
                    origin,
                }),
                Some(Err(reason)) => {
                    warn!(collection = %self.name, chunk_id = id, %reason, "skipping an unreadable chunk")
                }
                None => {
                    debug!(collection = %self.name, chunk_id = id, "index hit without a chunk in sled; skipped")
                }
            }
        }
        Ok(resolved)
    }
}

impl Drop for Collection {
    /// A discarded version removes its index folder and sled tree once nothing reads it any
    /// more. A failure (or a crash before) leaves garbage that the next open removes: the
    /// registry no longer points at this storage.
    fn drop(&mut self) {
        if !self.dropped.load(Ordering::SeqCst) {
            return;
        }
        self.indexes
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .bm25
            .close();
        match remove_storage(&self.db, &self.dir, &self.storage) {
            Ok(()) => {
                debug!(collection = %self.name, storage = %self.storage, "removed a discarded collection version")
            }
            Err(error) => warn!(
                collection = %self.name, storage = %self.storage, %error,
                "could not remove a discarded collection version; it is removed when the store is next opened"
            ),
        }
    }
}

/// Removes a storage's index folder and sled tree (a folder is removed only when `storage` is
/// shaped like a storage id).
fn remove_storage(db: &sled::Db, dir: &Path, storage: &str) -> Result<(), StoreError> {
    if layout::is_storage_id(storage) {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "cannot remove the indexes of storage '{storage}' at {}: {e}",
                    dir.display()
                )));
            }
        }
    }
    db.drop_tree(collection_tree_name(storage))
        .map_err(sled_io(format!(
            "dropping the sled tree of storage '{storage}'"
        )))?;
    Ok(())
}

/// A test hook called with a source id between its sled commit and its index update.
#[cfg(test)]
pub(crate) type CommitHook = Box<dyn Fn(&str) + Send + Sync>;

/// The embedded document store. Cheap to share (`Send + Sync`); all locking is internal and
/// per collection.
pub struct EmbeddedStore {
    db: sled::Db,
    registry: sled::Tree,
    index_root: PathBuf,
    settings: StoreSettings,
    /// Live collections by name.
    collections: RwLock<BTreeMap<String, Arc<Collection>>>,
    /// Rebuilds in progress by rebuild id (= their storage id).
    rebuilds: Mutex<BTreeMap<String, Arc<Collection>>>,
    /// Called after a source's sled batch is flushed and before its indexes are updated
    /// (lets the crash tests kill a process at that point).
    #[cfg(test)]
    after_sled_commit: Mutex<Option<CommitHook>>,
}

/// How long [`open_sled`] waits for sled's file lock before it gives up.
const SLED_LOCK_WAIT: Duration = Duration::from_secs(3);

/// Opens the sled database at `path`, waiting up to [`SLED_LOCK_WAIT`] for its file lock.
///
/// sled releases the lock only when its last background thread lets go of the file, which can
/// be a moment after the last handle was dropped; a store closed and reopened in one process
/// (a restart, a test) would otherwise fail on that race. sled's own test builds block on the
/// lock for the same reason. A lock another process holds is still refused, after the wait,
/// with an error that says so.
fn open_sled(path: &Path) -> Result<sled::Db, StoreError> {
    let deadline = Instant::now() + SLED_LOCK_WAIT;
    loop {
        match sled::Config::new().path(path).open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "cannot open the sled database {}: {e} (is another Orkeon process using this data directory?)",
                    path.display()
                )));
            }
        }
    }
}

impl EmbeddedStore {
    /// Opens (creating when missing) the store in `data_dir`: sled at `<data_dir>/sled`,
    /// indexes under `<data_dir>/indexes/<collection>/`. Finishes any half-done creation or
    /// drop of a collection, and rebuilds every derived index that lags sled (logged).
    pub fn open(data_dir: &Path, settings: StoreSettings) -> Result<Self, StoreError> {
        settings
            .check()
            .map_err(|(key, reason)| StoreError::InvalidSetting { key, reason })?;
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::Io(format!(
                "cannot create the data directory {}: {e}",
                data_dir.display()
            ))
        })?;
        let sled_path = data_dir.join("sled");
        let db = open_sled(&sled_path)?;
        let registry = db
            .open_tree(REGISTRY_TREE)
            .map_err(sled_io("opening the collections registry".into()))?;
        let store = Self {
            db,
            registry,
            index_root: data_dir.join("indexes"),
            settings,
            collections: RwLock::new(BTreeMap::new()),
            rebuilds: Mutex::new(BTreeMap::new()),
            #[cfg(test)]
            after_sled_commit: Mutex::new(None),
        };
        let registered = store.reconcile_registry()?;
        let mut collections = BTreeMap::new();
        for (name, storage) in registered {
            let collection = store.open_storage(&name, &storage)?;
            collections.insert(name, collection);
        }
        *write(&store.collections) = collections;
        Ok(store)
    }

    /// The quarantine kept in this store's database (a tree beside the collections; flushed
    /// by [`flush`](Self::flush) like the rest of an ingestion).
    pub fn quarantine(&self) -> Result<Arc<dyn QuarantineStore>, StoreError> {
        let quarantine = SledQuarantineStore::open(&self.db).map_err(sled_io(format!(
            "opening the {} tree",
            quarantine::QUARANTINE_TREE
        )))?;
        Ok(Arc::new(quarantine))
    }

    /// The sled database, for this module's tests that reach below the port.
    #[cfg(test)]
    pub(crate) fn db(&self) -> sled::Db {
        self.db.clone()
    }

    /// Flushes sled to disk (every mutation already does; this is for other trees' writers).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db
            .flush()
            .map(|_| ())
            .map_err(sled_io("flushing the database".into()))
    }

    /// Waits until no background HNSW build is running (a CLI calls it before exiting so the
    /// snapshot is saved; dropping the store does it too).
    pub fn wait_for_index_builds(&self) {
        let collections: Vec<Arc<Collection>> = read(&self.collections).values().cloned().collect();
        for collection in collections {
            collection.wait_for_snapshot_builds();
        }
    }

    fn tree(&self, name: &str, storage: &str) -> Result<CollectionTree, StoreError> {
        let tree = self
            .db
            .open_tree(collection_tree_name(storage))
            .map_err(sled_io(format!("opening the tree of collection '{name}'")))?;
        Ok(CollectionTree::new(name, tree))
    }

    /// Opens the collection version kept in `storage`.
    fn open_storage(&self, name: &str, storage: &str) -> Result<Arc<Collection>, StoreError> {
        Collection::open(
            name,
            storage,
            &self.db,
            self.tree(name, storage)?,
            self.index_root.join(storage),
            &self.settings,
        )
    }

    /// Creates an empty storage for a version of `name` recording `profile` (flushed), not yet
    /// pointed at by the registry, and opens it.
    fn create_storage(
        &self,
        name: &str,
        profile: &EmbeddingProfile,
    ) -> Result<Arc<Collection>, StoreError> {
        let storage = layout::new_storage_id(name, rand::random());
        let dir = self.index_root.join(&storage);
        remove_storage(&self.db, &dir, &storage)?;
        self.tree(name, &storage)?
            .initialise(profile, rand::random())?;
        self.open_storage(name, &storage)
    }

    /// Points `name` at `storage` (or forgets it) in one flushed registry write.
    fn point(&self, name: &str, storage: Option<&str>) -> Result<(), StoreError> {
        let written = match storage {
            Some(storage) => self
                .registry
                .insert(name.as_bytes(), layout::encode_registry_value(storage))
                .map(|_| ()),
            None => self.registry.remove(name.as_bytes()).map(|_| ()),
        };
        written.map_err(sled_io(format!(
            "recording collection '{name}' in the registry"
        )))?;
        self.registry
            .flush()
            .map(|_| ())
            .map_err(sled_io("flushing the collections registry".into()))
    }

    /// The registry's entries: collection name → storage id.
    fn registered(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let mut registered = BTreeMap::new();
        for entry in self.registry.iter() {
            let (key, value) = entry.map_err(sled_io("reading the collections registry".into()))?;
            let name = String::from_utf8_lossy(&key).into_owned();
            let storage = layout::decode_registry_value(&name, &value).map_err(|reason| {
                StoreError::Corrupt(format!(
                    "the collections registry is damaged: {reason}; drop collection '{name}' and re-ingest it"
                ))
            })?;
            registered.insert(name, storage);
        }
        Ok(registered)
    }

    /// Brings the registry and the storages back in line after a crash and returns what the
    /// registry points at: a registered name whose storage holds no initialised tree is
    /// forgotten; every storage tree and index folder the registry does not point at (an
    /// unfinished rebuild, a version swapped out or dropped, a creation cut short) is removed.
    fn reconcile_registry(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let mut registered = self.registered()?;
        let trees: HashSet<String> = self
            .db
            .tree_names()
            .iter()
            .filter_map(|tree| {
                String::from_utf8_lossy(tree)
                    .strip_prefix(layout::TREE_PREFIX)
                    .map(str::to_string)
            })
            .collect();
        let mut forgotten = Vec::new();
        for (name, storage) in &registered {
            let initialised = trees.contains(storage) && {
                let tree = self.tree(name, storage)?;
                tree.profile()?.is_some() && tree.incarnation()?.is_some()
            };
            if !initialised || validate_collection_name(name).is_err() {
                info!(collection = %name, storage = %storage, "forgetting a registered collection without data");
                self.point(name, None)?;
                forgotten.push(name.clone());
            }
        }
        for name in forgotten {
            registered.remove(&name);
        }
        let live: HashSet<&str> = registered.values().map(String::as_str).collect();
        for storage in trees.iter().filter(|s| !live.contains(s.as_str())) {
            info!(storage = %storage, "removing a collection version nothing points at (an unfinished rebuild, drop or creation)");
            remove_storage(&self.db, &self.index_root.join(storage), storage)?;
        }
        match std::fs::read_dir(&self.index_root) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let folder = entry.file_name().to_string_lossy().into_owned();
                    if layout::is_storage_id(&folder) && !live.contains(folder.as_str()) {
                        info!(storage = %folder, "removing indexes nothing points at");
                        remove_storage(&self.db, &entry.path(), &folder)?;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "cannot list the index folder {}: {e}",
                    self.index_root.display()
                )));
            }
        }
        self.flush()?;
        Ok(registered)
    }

    /// Commits a batch to one collection version (live or a rebuild): ONE flushed sled batch,
    /// then the derived indexes. A version discarded meanwhile gets nothing and the error of
    /// `discarded`.
    fn commit_to(
        &self,
        handle: &Arc<Collection>,
        batch: SourceBatch,
        discarded: impl FnOnce() -> StoreError,
    ) -> Result<BatchOutcome, StoreError> {
        let collection = handle.name.as_str();
        check_source_batch(&handle.name, &handle.profile, &batch)?;
        let mut indexes = write(&handle.indexes);
        if handle.dropped.load(Ordering::SeqCst) {
            return Err(discarded());
        }
        let Some(outcome) = handle.tree.commit(&batch.writes, &batch.deletes)? else {
            return Ok(BatchOutcome::default());
        };
        let first = batch
            .writes
            .first()
            .map(|w| w.record.source_id.as_str())
            .or(batch.deletes.first().map(String::as_str))
            .unwrap_or_default();
        self.after_sled_commit(first);
        debug!(
            collection,
            written = batch.writes.len(),
            deleted = outcome.sources_deleted,
            chunks = batch.writes.iter().map(|w| w.chunks.len()).sum::<usize>(),
            removed = outcome.removed.len(),
            generation = outcome.generation,
            "sources committed"
        );
        let source_ids: Vec<&str> = batch
            .writes
            .iter()
            .map(|w| w.record.source_id.as_str())
            .chain(batch.deletes.iter().map(String::as_str))
            .collect();
        let chunks: Vec<&StoredChunk> = batch.writes.iter().flat_map(|w| &w.chunks).collect();
        handle.apply_to_indexes(&mut indexes, &source_ids, &outcome, &chunks)?;
        Ok(BatchOutcome {
            sources_deleted: outcome.sources_deleted,
            chunks_removed: outcome.removed.len(),
        })
    }

    /// The rebuild in progress `rebuild` names.
    fn rebuild(&self, rebuild: &Rebuild) -> Result<Arc<Collection>, StoreError> {
        lock(&self.rebuilds)
            .get(rebuild.id())
            .filter(|staged| staged.name == rebuild.collection())
            .cloned()
            .ok_or_else(|| rebuild.not_in_progress())
    }

    fn collection(&self, name: &str) -> Result<Arc<Collection>, StoreError> {
        validate_collection_name(name)?;
        read(&self.collections)
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::UnknownCollection(name.to_string()))
    }

    #[cfg(test)]
    fn after_sled_commit(&self, source_id: &str) {
        if let Some(hook) = self
            .after_sled_commit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            hook(source_id);
        }
    }

    #[cfg(not(test))]
    fn after_sled_commit(&self, _source_id: &str) {}

    /// Installs the hook called between a source's sled commit and its index update.
    #[cfg(test)]
    pub(crate) fn set_after_sled_commit(&self, hook: CommitHook) {
        *self
            .after_sled_commit
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    /// The storage id collection `name` lives in (tests that reach below the port).
    #[cfg(test)]
    pub(crate) fn storage_of(&self, name: &str) -> String {
        self.collection(name).unwrap().storage.clone()
    }

    /// The index folder of collection `name`.
    #[cfg(test)]
    pub(crate) fn index_dir_of(&self, name: &str) -> PathBuf {
        self.index_root.join(self.storage_of(name))
    }

    /// The sled tree of collection `name`.
    #[cfg(test)]
    pub(crate) fn sled_tree_of(&self, name: &str) -> sled::Tree {
        self.db
            .open_tree(collection_tree_name(&self.storage_of(name)))
            .unwrap()
    }

    /// Overwrites a source's manifest entry with raw bytes (tests of corrupt entries).
    #[cfg(test)]
    pub(crate) fn damage_manifest_entry(&self, collection: &str, source_id: &str, bytes: &[u8]) {
        self.collection(collection)
            .unwrap()
            .tree
            .insert_raw(&layout::source_key(source_id), bytes);
    }

    /// What the derived indexes of a collection hold, for consistency checks in tests.
    #[cfg(test)]
    pub(crate) fn index_state(&self, name: &str) -> IndexState {
        let collection = self.collection(name).unwrap();
        let indexes = read(&collection.indexes);
        let mut vector_ids: Vec<String> = collection
            .tree
            .all_vectors(collection.profile.dimensions)
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| indexes.vectors.contains(id))
            .collect();
        vector_ids.sort();
        let mut bm25_ids = indexes.bm25.all_ids().unwrap();
        bm25_ids.sort();
        IndexState {
            sled_stamp: collection.stamp(collection.tree.generation().unwrap()),
            bm25_stamp: indexes.bm25.stamp().unwrap(),
            bm25_ids,
            vector_ids,
            vector_len: indexes.vectors.len(),
            snapshot: indexes.vectors.snapshot_header(),
            pending: indexes.vectors.pending_len(),
        }
    }
}

/// Says so when a collection's HNSW graph was measured too inexact to serve.
fn warn_when_recall_falls_short(
    collection: &str,
    vectors: &VectorIndex,
    calibration: &Calibration,
) {
    if !vectors.recall_suffices(calibration) {
        warn!(
            collection,
            recall_at_10 = calibration.recall_at_10,
            probes = calibration.queries,
            "vector searches scan exactly: {}",
            vectors.status().reason
        );
    }
}

/// Snapshot of a collection's derived indexes (tests only).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct IndexState {
    pub sled_stamp: IndexStamp,
    pub bm25_stamp: Option<IndexStamp>,
    /// Every id in the BM25 index, sorted, repetitions kept.
    pub bm25_ids: Vec<String>,
    /// Sled chunk ids present in the vector index, sorted.
    pub vector_ids: Vec<String>,
    pub vector_len: usize,
    pub snapshot: Option<SnapshotHeader>,
    pub pending: usize,
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        // A rebuild never published is discarded with the store (its data goes with it).
        for staged in lock(&self.rebuilds).values() {
            staged.discard();
        }
        self.wait_for_index_builds();
        if let Err(error) = self.db.flush() {
            warn!(%error, "flushing sled while closing the store failed");
        }
    }
}

impl DocumentStore for EmbeddedStore {
    fn collections(&self) -> Result<Vec<CollectionInfo>, StoreError> {
        Ok(read(&self.collections)
            .values()
            .map(|collection| {
                let (sources, chunks) = collection.tree.counts();
                CollectionInfo {
                    name: collection.name.clone(),
                    sources,
                    chunks,
                    profile: Some(collection.profile.clone()),
                    vector_index: read(&collection.indexes).vectors.status(),
                    provider: "embedded".into(),
                }
            })
            .collect())
    }

    fn ensure_collection(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<(), StoreError> {
        validate_collection_name(collection)?;
        let mut collections = write(&self.collections);
        if let Some(existing) = collections.get(collection) {
            if &existing.profile != profile {
                return Err(StoreError::ProfileMismatch {
                    collection: collection.to_string(),
                    recorded: existing.profile.to_string(),
                    active: profile.to_string(),
                });
            }
            return Ok(());
        }
        let created = self.create_storage(collection, profile)?;
        if let Err(error) = self.point(collection, Some(&created.storage)) {
            created.discard();
            return Err(error);
        }
        info!(collection, %profile, storage = %created.storage, "created collection");
        collections.insert(collection.to_string(), created);
        Ok(())
    }

    fn manifest(&self, collection: &str) -> Result<Manifest, StoreError> {
        let handle = match self.collection(collection) {
            Ok(handle) => handle,
            Err(StoreError::UnknownCollection(_)) => {
                return Ok(Manifest {
                    collection: collection.to_string(),
                    ..Manifest::default()
                });
            }
            Err(other) => return Err(other),
        };
        let _consistent = read(&handle.indexes);
        let mut manifest = Manifest {
            collection: collection.to_string(),
            profile: Some(handle.profile.clone()),
            sources: Vec::new(),
            corrupt_entries: Vec::new(),
        };
        for (source_id, entry) in handle.tree.manifest_entries()? {
            match entry {
                Ok(record) => manifest.sources.push(record),
                Err(reason) => {
                    warn!(collection, source_id, %reason, "corrupt manifest entry; the source will be re-ingested in full");
                    manifest.corrupt_entries.push(source_id);
                }
            }
        }
        Ok(manifest)
    }

    fn commit_sources(
        &self,
        collection: &str,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        let handle = self.collection(collection)?;
        self.commit_to(&handle, batch, || {
            StoreError::UnknownCollection(collection.to_string())
        })
    }

    fn drop_collection(&self, collection: &str) -> Result<(), StoreError> {
        validate_collection_name(collection)?;
        let handle = {
            let mut collections = write(&self.collections);
            if !collections.contains_key(collection) {
                return Err(StoreError::UnknownCollection(collection.to_string()));
            }
            self.point(collection, None)?;
            collections
                .remove(collection)
                .ok_or_else(|| StoreError::UnknownCollection(collection.to_string()))?
        };
        handle.discard();
        drop(handle);
        info!(collection, "dropped collection");
        Ok(())
    }

    fn begin_rebuild(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<Rebuild, StoreError> {
        validate_collection_name(collection)?;
        let staged = self.create_storage(collection, profile)?;
        let rebuild = Rebuild::new(collection, staged.storage.clone());
        lock(&self.rebuilds).insert(staged.storage.clone(), staged);
        info!(collection, %profile, rebuild = rebuild.id(), "began rebuilding collection beside the live one");
        Ok(rebuild)
    }

    fn commit_rebuild(
        &self,
        rebuild: &Rebuild,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        let handle = self.rebuild(rebuild)?;
        self.commit_to(&handle, batch, || rebuild.not_in_progress())
    }

    fn publish_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        let collection = rebuild.collection();
        let staged = self.rebuild(rebuild)?;
        let swapped_out = {
            let mut collections = write(&self.collections);
            // The commit point: one flushed registry write.
            self.point(collection, Some(&staged.storage))?;
            lock(&self.rebuilds).remove(rebuild.id());
            collections.insert(collection.to_string(), staged)
        };
        info!(
            collection,
            rebuild = rebuild.id(),
            "published the rebuild of collection"
        );
        if let Some(old) = swapped_out {
            old.discard();
        }
        Ok(())
    }

    fn abort_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        let staged = lock(&self.rebuilds)
            .remove(rebuild.id())
            .ok_or_else(|| rebuild.not_in_progress())?;
        staged.discard();
        // Waits for a commit in flight; later ones find the rebuild discarded.
        drop(write(&staged.indexes));
        info!(
            collection = rebuild.collection(),
            rebuild = rebuild.id(),
            "aborted the rebuild of collection; the live one is untouched"
        );
        Ok(())
    }

    fn chunks_of_source(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Vec<StoredChunk>, StoreError> {
        let handle = self.collection(collection)?;
        let _consistent = read(&handle.indexes);
        let mut chunks = Vec::new();
        for id in handle.tree.owned_chunk_ids(source_id)? {
            match handle.tree.chunk(&id)? {
                Some(Ok(chunk)) => chunks.push(chunk),
                Some(Err(reason)) => {
                    return Err(StoreError::Corrupt(format!(
                        "collection '{collection}', source '{source_id}': chunk '{id}' is unreadable ({reason}); re-ingest the source with --reindex"
                    )));
                }
                None => {
                    warn!(collection, source_id, chunk_id = %id, "manifest names a missing chunk")
                }
            }
        }
        chunks.sort_by_key(|chunk| chunk.ordinal);
        Ok(chunks)
    }

    fn get_chunk(
        &self,
        collection: &str,
        chunk_id: &str,
    ) -> Result<Option<StoredChunk>, StoreError> {
        let handle = self.collection(collection)?;
        match handle.tree.chunk(chunk_id)? {
            None => Ok(None),
            Some(Ok(chunk)) => Ok(Some(chunk)),
            Some(Err(reason)) => Err(StoreError::Corrupt(format!(
                "collection '{collection}': chunk '{chunk_id}' is unreadable ({reason}); re-ingest its source with --reindex"
            ))),
        }
    }

    fn search(
        &self,
        collection: &str,
        request: &SearchRequest,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        let handle = self.collection(collection)?;
        let Some(search) = check_search(collection, &handle.profile, request, self.settings.rrf_k)?
        else {
            return Ok(Vec::new());
        };
        let k = search.k;
        let indexes = read(&handle.indexes);
        match search.query {
            CheckedQuery::Bm25(text) => {
                let hits = indexes.bm25.search(text, k.saturating_mul(2))?;
                let mut resolved = handle.resolve_hits(hits, ScoreOrigin::Bm25)?;
                resolved.truncate(k);
                Ok(resolved)
            }
            CheckedQuery::Vector(query) => {
                let hits = indexes.vectors.search(&query, k);
                handle.resolve_hits(hits, ScoreOrigin::Vector)
            }
            CheckedQuery::Hybrid(query, text) => {
                let (vector_depth, depth) = hybrid_depths(k, indexes.vectors.approximate_depth());
                let vector_hits = handle.resolve_hits(
                    indexes.vectors.search(&query, vector_depth),
                    ScoreOrigin::Vector,
                )?;
                let lexical_hits = match text {
                    Some(text) => {
                        handle.resolve_hits(indexes.bm25.search(text, depth)?, ScoreOrigin::Bm25)?
                    }
                    None => Vec::new(),
                };
                Ok(fuse_hybrid(
                    vector_hits,
                    lexical_hits,
                    search.rrf_k,
                    &request.fusion,
                    k,
                ))
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
