//! Crash consistency of the embedded store: a child process (this test binary re-run in child
//! mode) ingests sources in a loop and is SIGKILLed at random points — after an acknowledged
//! replace, during an index update, or while paused between a sled commit and its index update.
//! The reopened store must hold every acknowledged source with exactly its chunks, no chunk
//! without a manifest entry (or the reverse), and BM25 and vector indexes that agree with sled.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;

use super::EmbeddedStore;
use super::bm25::Bm25Index;
use super::layout::{CHUNK_PREFIX, decode_chunk, id_of_key};
use super::tests::{chunk, profile, record, vector_for};
use crate::settings::StoreSettings;
use crate::store::{DocumentStore, SearchMode, SearchRequest};
use crate::types::StoredChunk;

const CHILD_DIR_ENV: &str = "ORKEON_STORE_CRASH_CHILD";
const CHILD_START_ENV: &str = "ORKEON_STORE_CRASH_START";
const CHILD_HOOK_ENV: &str = "ORKEON_STORE_CRASH_HOOK";
const COLLECTION: &str = "crash";
const DIMS: usize = 16;
const SOURCES: usize = 8;
const BIG_CHUNKS: u32 = 300;
/// Ops one child run performs at most (it is normally killed long before).
const MAX_OPS_PER_RUN: usize = 400;

fn settings() -> StoreSettings {
    StoreSettings {
        hnsw_threshold: 200,
        hnsw_rebuild_after: 150,
        hnsw_ef_construction: 64,
        hnsw_ef_search: 64,
        ..StoreSettings::default()
    }
}

/// One step of the child's deterministic workload.
enum Op {
    Replace(String, Vec<StoredChunk>),
    Delete(String),
}

/// Op `i` of the workload: mostly re-ingests of 8 small sources (even chunks keep their ids
/// across versions, odd ones change), every 7th a delete, every 13th a 300-chunk source.
fn op(i: usize) -> Op {
    if i % 13 == 12 {
        let chunks = (0..BIG_CHUNKS)
            .map(|j| {
                let version = if j % 3 == 0 { 0 } else { i };
                let id = format!("big-{j}-v{version}");
                let text = format!("orkeon bulk big{j}x{version} filler words for the index");
                chunk("big.txt", &id, j, &text, DIMS)
            })
            .collect();
        return Op::Replace("big.txt".into(), chunks);
    }
    if i % 7 == 6 {
        return Op::Delete(format!("s{}.md", (i / 7) % SOURCES));
    }
    let s = i % SOURCES;
    let v = i / SOURCES;
    let source = format!("s{s}.md");
    let count = 2 + (s + v) % 5;
    let chunks = (0..count)
        .map(|j| {
            let version = if j % 2 == 0 { 0 } else { v };
            let id = format!("s{s}-{j}-v{version}");
            let text = format!("orkeon common s{s}x{j}x{version} words {j}");
            chunk(&source, &id, j as u32, &text, DIMS)
        })
        .collect();
    Op::Replace(source, chunks)
}

/// source id → its chunks' (id, text), after the first `applied` ops.
type State = BTreeMap<String, Vec<(String, String)>>;

fn expected_state(applied: usize) -> State {
    let mut state = State::new();
    for i in 0..applied {
        match op(i) {
            Op::Replace(source, chunks) => {
                let mut entries: Vec<(String, String)> =
                    chunks.into_iter().map(|c| (c.id, c.text)).collect();
                entries.sort();
                state.insert(source, entries);
            }
            Op::Delete(source) => {
                state.remove(&source);
            }
        }
    }
    state
}

/// The child: ingests ops `start..` and prints `ACK <op>` after each returns.
#[test]
#[ignore = "child-process entry of the crash-consistency tests; does nothing unless ORKEON_STORE_CRASH_CHILD is set"]
fn crash_child_process() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let start: usize = std::env::var(CHILD_START_ENV).unwrap().parse().unwrap();
    let store = EmbeddedStore::open(Path::new(&dir), settings()).unwrap();
    store.ensure_collection(COLLECTION, &profile(DIMS)).unwrap();
    if let Ok(mode) = std::env::var(CHILD_HOOK_ENV) {
        // `report`, or `pause:N`: stop for good after the N-th (0-based) commit's report.
        let pause_at: Option<usize> = mode.strip_prefix("pause:").map(|n| n.parse().unwrap());
        let commits = AtomicUsize::new(0);
        store.set_after_sled_commit(Box::new(move |source| {
            println!("COMMITTED {source}");
            if Some(commits.fetch_add(1, Ordering::SeqCst)) == pause_at {
                std::thread::sleep(Duration::from_secs(600));
            }
        }));
    }
    println!("READY");
    for i in start..start + MAX_OPS_PER_RUN {
        match op(i) {
            Op::Replace(source, chunks) => {
                let rec = record(&source, &chunks, DIMS);
                store.replace_source(COLLECTION, rec, chunks).unwrap();
            }
            Op::Delete(source) => {
                store.delete_source(COLLECTION, &source).unwrap();
            }
        }
        println!("ACK {i}");
    }
}

/// Where the parent kills the child.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after the n-th acknowledgement.
    AfterAcks(usize),
    /// A few milliseconds after the sled commit of the n-th `big.txt` replace (its index
    /// update — 300 documents into tantivy — is then under way).
    DuringBigIndexUpdate(usize, u64),
    /// While the child is paused between its n-th (0-based) sled commit and that commit's index
    /// update.
    BetweenCommitAndIndexUpdate(usize),
}

/// Runs one child from op `start` and kills it; returns the last acknowledged op.
fn run_child_and_kill(dir: &Path, start: usize, kill: KillPoint) -> Option<usize> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "store::embedded::crash_tests::crash_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_START_ENV, start.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    match kill {
        KillPoint::AfterAcks(_) => {}
        KillPoint::DuringBigIndexUpdate(..) => {
            command.env(CHILD_HOOK_ENV, "report");
        }
        KillPoint::BetweenCommitAndIndexUpdate(n) => {
            command.env(CHILD_HOOK_ENV, format!("pause:{n}"));
        }
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut last_ack = None;
    let (mut acks, mut big_commits, mut commits) = (0, 0, 0);
    let mut killed = false;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(i) = line.strip_prefix("ACK ") {
            last_ack = Some(i.parse::<usize>().unwrap());
            acks += 1;
            if matches!(kill, KillPoint::AfterAcks(n) if acks >= n) {
                child.kill().unwrap();
                killed = true;
                break;
            }
        } else if let Some(source) = line.strip_prefix("COMMITTED ") {
            commits += 1;
            if source == "big.txt" {
                big_commits += 1;
            }
            match kill {
                KillPoint::DuringBigIndexUpdate(n, delay_ms)
                    if source == "big.txt" && big_commits >= n =>
                {
                    std::thread::sleep(Duration::from_millis(delay_ms));
                    child.kill().unwrap();
                    killed = true;
                    break;
                }
                KillPoint::BetweenCommitAndIndexUpdate(n) if commits > n => {
                    child.kill().unwrap();
                    killed = true;
                    break;
                }
                _ => {}
            }
        }
    }
    child.wait().unwrap();
    assert!(
        killed,
        "the child exited on its own before the kill point {kill:?}"
    );
    // Acknowledgements the child printed before it died but that were not read yet.
    for line in lines {
        if let Some(i) = line.unwrap().strip_prefix("ACK ") {
            last_ack = Some(i.parse::<usize>().unwrap());
        }
    }
    last_ack
}

/// The index folder of the one collection of a closed store.
fn only_index_dir(dir: &Path) -> std::path::PathBuf {
    let folders: Vec<_> = std::fs::read_dir(dir.join("indexes"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    folders.into_iter().next().unwrap()
}

/// Checks the reopened store against sled and the workload; returns how many ops are applied.
fn verify(dir: &Path, acknowledged: usize, kill: KillPoint) -> usize {
    let store = EmbeddedStore::open(dir, settings()).unwrap();
    let manifest = store.manifest(COLLECTION).unwrap();
    assert!(
        manifest.corrupt_entries.is_empty(),
        "{:?}",
        manifest.corrupt_entries
    );

    // Raw sled contents: every chunk of the collection tree.
    let tree = store.sled_tree_of(COLLECTION);
    let mut raw_chunks: BTreeMap<String, StoredChunk> = BTreeMap::new();
    for item in tree.scan_prefix(CHUNK_PREFIX) {
        let (key, value) = item.unwrap();
        let id = id_of_key(CHUNK_PREFIX, &key).unwrap();
        raw_chunks.insert(id.to_string(), decode_chunk(id, &value).unwrap());
    }

    // The state as the store reports it, built from the manifest.
    let mut actual = State::new();
    let mut listed = 0;
    for source in &manifest.sources {
        let chunks = store
            .chunks_of_source(COLLECTION, &source.source_id)
            .unwrap();
        let mut ordinals: Vec<u32> = chunks.iter().map(|c| c.ordinal).collect();
        ordinals.dedup();
        assert_eq!(
            ordinals.len(),
            chunks.len(),
            "duplicated chunk in {}",
            source.source_id
        );
        assert_eq!(
            chunks.len(),
            source.chunk_ids.len(),
            "missing chunk of {}",
            source.source_id
        );
        for chunk in &chunks {
            assert_eq!(chunk.source_id, source.source_id);
            assert_eq!(raw_chunks.get(&chunk.id), Some(chunk));
        }
        listed += chunks.len();
        let mut entries: Vec<(String, String)> =
            chunks.into_iter().map(|c| (c.id, c.text)).collect();
        entries.sort();
        actual.insert(source.source_id.clone(), entries);
    }
    assert_eq!(
        raw_chunks.len(),
        listed,
        "chunks in sled without a manifest entry after {kill:?}"
    );

    // Every acknowledged op is there; at most the one in flight beyond it.
    let applied = if actual == expected_state(acknowledged) {
        acknowledged
    } else if actual == expected_state(acknowledged + 1) {
        acknowledged + 1
    } else {
        let summary = |state: &State| -> Vec<(String, usize)> {
            state
                .iter()
                .map(|(source, chunks)| (source.clone(), chunks.len()))
                .collect()
        };
        panic!(
            "after {kill:?} with ops 0..{acknowledged} acknowledged, the store matches neither that state nor the next:\nactual {:?}\nexpected {:?}\nor {:?}",
            summary(&actual),
            summary(&expected_state(acknowledged)),
            summary(&expected_state(acknowledged + 1)),
        );
    };

    // Derived indexes agree with sled (rebuilt at open if they lagged).
    let state = store.index_state(COLLECTION);
    let sled_ids: Vec<String> = raw_chunks.keys().cloned().collect();
    assert_eq!(state.bm25_stamp, Some(state.sled_stamp));
    assert_eq!(
        state.bm25_ids, sled_ids,
        "BM25 index differs from sled after {kill:?}"
    );
    assert_eq!(
        state.vector_ids, sled_ids,
        "vector index differs from sled after {kill:?}"
    );
    assert_eq!(state.vector_len, sled_ids.len());

    let everything = SearchRequest {
        mode: SearchMode::Bm25,
        text: Some("orkeon".into()),
        vector: None,
        k: sled_ids.len() + 10,
        rrf_k: 60.0,
        fusion: Default::default(),
    };
    let mut found: Vec<String> = store
        .search(COLLECTION, &everything)
        .unwrap()
        .into_iter()
        .map(|hit| hit.chunk.id)
        .collect();
    found.sort();
    assert_eq!(found, sled_ids);
    for id in sled_ids.iter().step_by(7) {
        let request = SearchRequest {
            mode: SearchMode::Vector,
            text: None,
            vector: Some(vector_for(id, DIMS)),
            k: 1,
            rrf_k: 60.0,
            fusion: Default::default(),
        };
        assert_eq!(&store.search(COLLECTION, &request).unwrap()[0].chunk.id, id);
    }
    applied
}

#[test]
fn killed_ingestion_loses_no_acknowledged_source_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let kills = [
        KillPoint::AfterAcks(rng.random_range(3..=15)),
        KillPoint::DuringBigIndexUpdate(1, rng.random_range(0..=20)),
        KillPoint::AfterAcks(rng.random_range(3..=15)),
        KillPoint::BetweenCommitAndIndexUpdate(rng.random_range(0..=6)),
        KillPoint::DuringBigIndexUpdate(1, rng.random_range(0..=5)),
    ];
    let mut applied = 0;
    let started = std::time::Instant::now();
    for kill in kills {
        eprintln!(
            "{:>6.1}s: kill at {kill:?}, from op {applied}",
            started.elapsed().as_secs_f64()
        );
        if let KillPoint::BetweenCommitAndIndexUpdate(_) = kill {
            let last = run_child_and_kill(dir.path(), applied, kill);
            // The paused op is committed in sled; the BM25 index on disk still lags it.
            let bm25 = Bm25Index::open(&only_index_dir(dir.path()).join("bm25")).unwrap();
            let lagging = bm25.stamp().unwrap().unwrap().generation;
            drop(bm25);
            let acknowledged = last.map_or(applied, |i| i + 1);
            let now = verify(dir.path(), acknowledged, kill);
            assert_eq!(now, acknowledged + 1, "the paused op was committed in sled");
            let store = EmbeddedStore::open(dir.path(), settings()).unwrap();
            let state = store.index_state(COLLECTION);
            assert!(
                lagging < state.sled_stamp.generation,
                "index lagged at the kill"
            );
            applied = now;
        } else {
            let last = run_child_and_kill(dir.path(), applied, kill);
            let acknowledged = last.map_or(applied, |i| i + 1);
            applied = verify(dir.path(), acknowledged, kill);
        }
    }
    assert!(applied > 10, "the workload advanced ({applied} ops)");
}

const REBUILD_CHILD_ENV: &str = "ORKEON_STORE_REBUILD_CHILD";
const REBUILD_PAUSE_ENV: &str = "ORKEON_STORE_REBUILD_PAUSE";
const REBUILT_SOURCES: usize = 12;

/// The live version of the rebuilt collection: 5 sources of 3 chunks.
fn old_version() -> Vec<(String, Vec<StoredChunk>)> {
    (0..5)
        .map(|s| {
            let source = format!("old{s}.md");
            let chunks = (0..3)
                .map(|j| {
                    let text = format!("orkeon old{s}x{j} words");
                    chunk(&source, &format!("old{s}-{j}"), j, &text, DIMS)
                })
                .collect();
            (source, chunks)
        })
        .collect()
}

/// The rebuilt version: `REBUILT_SOURCES` sources of 20 chunks.
fn new_version() -> Vec<(String, Vec<StoredChunk>)> {
    (0..REBUILT_SOURCES)
        .map(|s| {
            let source = format!("new{s}.md");
            let chunks = (0..20)
                .map(|j| {
                    let text = format!("orkeon new{s}x{j} filler words for the index");
                    chunk(&source, &format!("new{s}-{j}"), j, &text, DIMS)
                })
                .collect();
            (source, chunks)
        })
        .collect()
}

/// source id → its chunk ids, as the store reports it.
fn served(store: &EmbeddedStore) -> BTreeMap<String, Vec<String>> {
    store
        .manifest(COLLECTION)
        .unwrap()
        .sources
        .into_iter()
        .map(|record| {
            let mut ids: Vec<String> = store
                .chunks_of_source(COLLECTION, &record.source_id)
                .unwrap()
                .into_iter()
                .map(|c| c.id)
                .collect();
            ids.sort();
            (record.source_id, ids)
        })
        .collect()
}

fn expected(version: Vec<(String, Vec<StoredChunk>)>) -> BTreeMap<String, Vec<String>> {
    version
        .into_iter()
        .map(|(source, chunks)| {
            let mut ids: Vec<String> = chunks.into_iter().map(|c| c.id).collect();
            ids.sort();
            (source, ids)
        })
        .collect()
}

/// The rebuild child: rebuilds the collection source after source (printing `STAGED <i>`),
/// publishes it (`PUBLISHED`) and waits to be killed.
#[test]
#[ignore = "child-process entry of the rebuild crash test; does nothing unless ORKEON_STORE_REBUILD_CHILD is set"]
fn rebuild_child_process() {
    let Ok(dir) = std::env::var(REBUILD_CHILD_ENV) else {
        return;
    };
    let store = EmbeddedStore::open(Path::new(&dir), settings()).unwrap();
    if let Ok(pause_at) = std::env::var(REBUILD_PAUSE_ENV) {
        let pause_at: usize = pause_at.parse().unwrap();
        let commits = AtomicUsize::new(0);
        store.set_after_sled_commit(Box::new(move |source| {
            println!("COMMITTED {source}");
            if commits.fetch_add(1, Ordering::SeqCst) == pause_at {
                std::thread::sleep(Duration::from_secs(600));
            }
        }));
    }
    let rebuild = store.begin_rebuild(COLLECTION, &profile(DIMS)).unwrap();
    println!("BEGUN");
    for (i, (source, chunks)) in new_version().into_iter().enumerate() {
        let batch = crate::store::SourceBatch {
            writes: vec![crate::store::SourceWrite {
                record: record(&source, &chunks, DIMS),
                chunks,
            }],
            deletes: Vec::new(),
        };
        store.commit_rebuild(&rebuild, batch).unwrap();
        println!("STAGED {i}");
    }
    store.publish_rebuild(&rebuild).unwrap();
    println!("PUBLISHED");
    std::thread::sleep(Duration::from_secs(600));
}

/// Where the rebuild child is killed.
#[derive(Debug, Clone, Copy)]
enum RebuildKill {
    /// Right after the rebuild began.
    AfterBegin,
    /// After the n-th staged source.
    AfterStaged(usize),
    /// Paused between the n-th rebuild commit in sled and its index update.
    BetweenCommitAndIndexUpdate(usize),
    /// A few milliseconds after the last staged source (the publish is under way or done).
    DuringPublish(u64),
    /// After the publish returned.
    AfterPublish,
}

/// Runs the rebuild child until `kill`; returns whether it had reported the publish.
fn rebuild_and_kill(dir: &Path, kill: RebuildKill) -> bool {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "store::embedded::crash_tests::rebuild_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(REBUILD_CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let RebuildKill::BetweenCommitAndIndexUpdate(n) = kill {
        command.env(REBUILD_PAUSE_ENV, n.to_string());
    }
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut published = false;
    let mut killed = false;
    let mut commits = 0;
    for line in lines.by_ref() {
        let line = line.unwrap();
        // The harness writes "test <name> ... " before the child's first line, unterminated.
        let line = line.rsplit_once(" ... ").map_or(line.as_str(), |(_, l)| l);
        published |= line == "PUBLISHED";
        let now = match kill {
            RebuildKill::AfterBegin => line == "BEGUN",
            RebuildKill::AfterStaged(n) => line == format!("STAGED {n}"),
            RebuildKill::BetweenCommitAndIndexUpdate(n) => {
                if line.starts_with("COMMITTED ") {
                    commits += 1;
                }
                commits > n
            }
            RebuildKill::DuringPublish(delay_ms) => {
                let last = line == format!("STAGED {}", REBUILT_SOURCES - 1);
                if last {
                    std::thread::sleep(Duration::from_millis(delay_ms));
                }
                last
            }
            RebuildKill::AfterPublish => line == "PUBLISHED",
        };
        if now {
            child.kill().unwrap();
            killed = true;
            break;
        }
    }
    child.wait().unwrap();
    assert!(killed, "the rebuild child ended before {kill:?}");
    published || lines.any(|line| line.is_ok_and(|l| l == "PUBLISHED"))
}

/// A rebuild killed at any point leaves the collection whole — the old version until the
/// publish, the new one after — consistent, and with no storage left but the one serving it.
#[test]
fn a_killed_rebuild_leaves_the_old_or_the_new_version_whole_and_nothing_behind() {
    let mut rng = rand::rng();
    let kills = [
        RebuildKill::AfterBegin,
        RebuildKill::AfterStaged(rng.random_range(0..REBUILT_SOURCES - 1)),
        RebuildKill::BetweenCommitAndIndexUpdate(rng.random_range(0..REBUILT_SOURCES)),
        RebuildKill::DuringPublish(rng.random_range(0..=3)),
        RebuildKill::AfterPublish,
    ];
    for kill in kills {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = EmbeddedStore::open(dir.path(), settings()).unwrap();
            store.ensure_collection(COLLECTION, &profile(DIMS)).unwrap();
            for (source, chunks) in old_version() {
                let rec = record(&source, &chunks, DIMS);
                store.replace_source(COLLECTION, rec, chunks).unwrap();
            }
        }
        let published = rebuild_and_kill(dir.path(), kill);
        let store = EmbeddedStore::open(dir.path(), settings()).unwrap();
        let state = served(&store);
        let (old, new) = (expected(old_version()), expected(new_version()));
        match kill {
            RebuildKill::AfterPublish => assert_eq!(state, new, "{kill:?}"),
            _ if published => assert_eq!(state, new, "{kill:?}: published"),
            RebuildKill::DuringPublish(_) => {
                assert!(state == old || state == new, "{kill:?}: a mix {state:?}")
            }
            _ => assert_eq!(state, old, "{kill:?}: the live version is untouched"),
        }
        let report = store.check_consistency().unwrap();
        assert!(report.is_consistent(), "{kill:?}: {:?}", report.problems());
        let storage = store.storage_of(COLLECTION);
        let trees: Vec<String> = store
            .db()
            .tree_names()
            .iter()
            .map(|t| String::from_utf8_lossy(t).into_owned())
            .filter(|t| t.starts_with("col/"))
            .collect();
        assert_eq!(trees, [format!("col/{storage}")], "{kill:?}: leftovers");
        assert_eq!(
            only_index_dir(dir.path())
                .file_name()
                .unwrap()
                .to_string_lossy(),
            storage,
            "{kill:?}"
        );
        let everything = SearchRequest {
            mode: SearchMode::Bm25,
            text: Some("orkeon".into()),
            vector: None,
            k: 1000,
            rrf_k: 60.0,
            fusion: Default::default(),
        };
        let found = store.search(COLLECTION, &everything).unwrap().len();
        let chunks: usize = state.values().map(Vec::len).sum();
        assert_eq!(found, chunks, "{kill:?}: every chunk is searchable");
    }
}
