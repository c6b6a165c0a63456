//! The run store: one record per kickoff and its ordered events, persisted in sled so that a
//! restarted daemon (or a reconnecting client) still has every run. Live subscribers get new
//! events through a bounded broadcast channel; a subscriber that falls behind reads them back
//! from the store by sequence number.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sled::Transactional;
use tokio::sync::broadcast;

/// A run's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    Finished,
    Degraded,
    Failed,
    Cancelled,
}

impl RunState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunState::Running)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Degraded => "degraded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }
}

/// One kickoff.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub crew: String,
    pub crew_file: String,
    pub state: RunState,
    pub inputs: std::collections::BTreeMap<String, String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub reason: Option<String>,
    pub final_output: Option<String>,
    pub idempotency_key: Option<String>,
    /// Sequence number of the last event.
    pub last_seq: u64,
}

/// One stored event: its sequence number (1-based, per run), time, and the event as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub run_id: String,
    pub seq: u64,
    pub at: String,
    pub event: serde_json::Value,
}

/// Why a run-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RunStoreError {
    #[error("run store I/O failed: {0}")]
    Io(#[from] sled::Error),
    #[error("run store data is corrupt: {0}")]
    Corrupt(String),
    #[error("run '{0}' does not exist")]
    UnknownRun(String),
}

/// Runs and their events in sled (trees `runs`, `run_events`, `run_keys`).
pub struct RunStore {
    runs: sled::Tree,
    events: sled::Tree,
    keys: sled::Tree,
    live: Mutex<HashMap<String, broadcast::Sender<StoredEvent>>>,
    /// Serialises appends so sequence numbers are dense.
    append: Mutex<()>,
}

/// Capacity of each run's live channel; slower watchers catch up from the store.
const LIVE_CAPACITY: usize = 256;

impl RunStore {
    pub fn open(db: &sled::Db) -> Result<Self, RunStoreError> {
        Ok(Self {
            runs: db.open_tree("runs")?,
            events: db.open_tree("run_events")?,
            keys: db.open_tree("run_keys")?,
            live: Mutex::new(HashMap::new()),
            append: Mutex::new(()),
        })
    }

    /// Marks runs left `running` by a previous process as failed (the process died under them).
    pub fn recover_interrupted(&self) -> Result<usize, RunStoreError> {
        let mut recovered = 0;
        for run in self.list(usize::MAX, None)? {
            if run.state == RunState::Running {
                let mut run = run;
                run.state = RunState::Failed;
                run.reason = Some("the daemon stopped while the run was in flight".into());
                run.finished_at = Some(now());
                self.put(&run)?;
                recovered += 1;
            }
        }
        Ok(recovered)
    }

    /// Creates a run, or returns the existing one with the same idempotency key.
    pub fn create(&self, mut run: RunRecord) -> Result<(RunRecord, bool), RunStoreError> {
        let _guard = self.append.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = &run.idempotency_key {
            let scoped = format!("{}\u{1f}{key}", run.crew);
            if let Some(existing) = self.keys.get(scoped.as_bytes())? {
                let id = String::from_utf8_lossy(&existing).to_string();
                return Ok((self.get(&id)?, false));
            }
            self.keys.insert(scoped.as_bytes(), run.run_id.as_bytes())?;
        }
        run.last_seq = 0;
        self.put(&run)?;
        self.runs.flush()?;
        Ok((run, true))
    }

    /// The run an idempotency key created for a crew, if any.
    pub fn find_by_key(&self, crew: &str, key: &str) -> Result<Option<RunRecord>, RunStoreError> {
        let scoped = format!("{crew}\u{1f}{key}");
        match self.keys.get(scoped.as_bytes())? {
            Some(id) => Ok(Some(self.get(&String::from_utf8_lossy(&id))?)),
            None => Ok(None),
        }
    }

    fn put(&self, run: &RunRecord) -> Result<(), RunStoreError> {
        let bytes = serde_json::to_vec(run).map_err(|e| RunStoreError::Corrupt(e.to_string()))?;
        self.runs.insert(run.run_id.as_bytes(), bytes)?;
        Ok(())
    }

    pub fn get(&self, run_id: &str) -> Result<RunRecord, RunStoreError> {
        let bytes = self
            .runs
            .get(run_id.as_bytes())?
            .ok_or_else(|| RunStoreError::UnknownRun(run_id.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| RunStoreError::Corrupt(e.to_string()))
    }

    /// Runs, newest first (run ids are time-ordered UUIDv7), after `after` when given.
    pub fn list(&self, limit: usize, after: Option<&str>) -> Result<Vec<RunRecord>, RunStoreError> {
        let iter = match after {
            Some(after) => self.runs.range(..after.as_bytes()).rev(),
            None => self.runs.iter().rev(),
        };
        let mut out = Vec::new();
        for item in iter.take(limit) {
            let (_, bytes) = item?;
            out.push(
                serde_json::from_slice(&bytes)
                    .map_err(|e| RunStoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Appends an event (durable when this returns) and publishes it to live watchers.
    pub fn append(
        &self,
        run_id: &str,
        event: serde_json::Value,
    ) -> Result<StoredEvent, RunStoreError> {
        let stored = {
            let _guard = self.append.lock().unwrap_or_else(|p| p.into_inner());
            let mut run = self.get(run_id)?;
            run.last_seq += 1;
            let stored = StoredEvent {
                run_id: run_id.to_string(),
                seq: run.last_seq,
                at: now(),
                event,
            };
            let bytes =
                serde_json::to_vec(&stored).map_err(|e| RunStoreError::Corrupt(e.to_string()))?;
            let run_bytes =
                serde_json::to_vec(&run).map_err(|e| RunStoreError::Corrupt(e.to_string()))?;
            (&self.runs, &self.events)
                .transaction(|(runs, events)| {
                    events.insert(event_key(run_id, stored.seq), bytes.clone())?;
                    runs.insert(run_id.as_bytes(), run_bytes.clone())?;
                    Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
                })
                .map_err(|e| RunStoreError::Corrupt(format!("{e:?}")))?;
            self.events.flush()?;
            stored
        };
        if let Some(sender) = self.sender(run_id, false) {
            // No receiver is fine: watchers read from the store.
            let _ = sender.send(stored.clone());
        }
        Ok(stored)
    }

    /// Updates a run's terminal state.
    pub fn finish(
        &self,
        run_id: &str,
        state: RunState,
        reason: Option<String>,
        final_output: Option<String>,
    ) -> Result<RunRecord, RunStoreError> {
        let _guard = self.append.lock().unwrap_or_else(|p| p.into_inner());
        let mut run = self.get(run_id)?;
        run.state = state;
        run.reason = reason;
        run.final_output = final_output;
        run.finished_at = Some(now());
        self.put(&run)?;
        self.runs.flush()?;
        Ok(run)
    }

    /// Events with `seq > after`, in order.
    pub fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<StoredEvent>, RunStoreError> {
        let start = event_key(run_id, after.saturating_add(1));
        let end = event_key(run_id, u64::MAX);
        let mut out = Vec::new();
        for item in self.events.range(start..=end) {
            let (_, bytes) = item?;
            out.push(
                serde_json::from_slice(&bytes)
                    .map_err(|e| RunStoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// A receiver of the run's future events (subscribe before reading the backlog).
    pub fn subscribe(&self, run_id: &str) -> broadcast::Receiver<StoredEvent> {
        match self.sender(run_id, true) {
            Some(sender) => sender.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Drops the live channel of a finished run.
    pub fn close_live(&self, run_id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.remove(run_id);
    }

    fn sender(&self, run_id: &str, create: bool) -> Option<broadcast::Sender<StoredEvent>> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if create {
            Some(
                live.entry(run_id.to_string())
                    .or_insert_with(|| broadcast::channel(LIVE_CAPACITY).0)
                    .clone(),
            )
        } else {
            live.get(run_id).cloned()
        }
    }
}

fn event_key(run_id: &str, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(run_id.len() + 9);
    key.extend_from_slice(run_id.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Current time, RFC 3339.
pub fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, key: Option<&str>) -> RunRecord {
        RunRecord {
            run_id: id.into(),
            crew: "support".into(),
            crew_file: "support.yaml".into(),
            state: RunState::Running,
            inputs: Default::default(),
            started_at: now(),
            finished_at: None,
            reason: None,
            final_output: None,
            idempotency_key: key.map(str::to_string),
            last_seq: 0,
        }
    }

    #[test]
    fn events_are_dense_durable_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = sled::open(dir.path()).expect("sled");
            let store = RunStore::open(&db).expect("store");
            store.create(record("r1", None)).expect("create");
            for i in 0..5 {
                store
                    .append("r1", serde_json::json!({"type": "tick", "i": i}))
                    .expect("append");
            }
            store
                .finish("r1", RunState::Finished, None, Some("done".into()))
                .expect("finish");
            let tail = store.events_after("r1", 3).expect("events");
            assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
        }
        let db = sled::open(dir.path()).expect("reopen");
        let store = RunStore::open(&db).expect("store");
        let run = store.get("r1").expect("run");
        assert_eq!(run.state, RunState::Finished);
        assert_eq!(run.last_seq, 5);
        assert_eq!(store.events_after("r1", 0).expect("events").len(), 5);
    }

    #[test]
    fn idempotency_key_returns_the_same_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("sled");
        let store = RunStore::open(&db).expect("store");
        let (first, created) = store.create(record("r1", Some("k"))).expect("create");
        assert!(created);
        let (second, created) = store.create(record("r2", Some("k"))).expect("create");
        assert!(!created);
        assert_eq!(first.run_id, second.run_id);
    }

    #[test]
    fn interrupted_runs_are_marked_failed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("sled");
        let store = RunStore::open(&db).expect("store");
        store.create(record("r1", None)).expect("create");
        assert_eq!(store.recover_interrupted().expect("recover"), 1);
        assert_eq!(store.get("r1").expect("run").state, RunState::Failed);
    }

    #[tokio::test]
    async fn live_subscribers_receive_new_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("sled");
        let store = RunStore::open(&db).expect("store");
        store.create(record("r1", None)).expect("create");
        let mut rx = store.subscribe("r1");
        store
            .append("r1", serde_json::json!({"type": "x"}))
            .expect("append");
        assert_eq!(rx.recv().await.expect("event").seq, 1);
    }
}
