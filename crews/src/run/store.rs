//! The run store port: one [`RunRecord`] per kickoff, its ordered [`StoredEvent`]s, and the
//! idempotency keys that map a repeated kickoff to the run the first one created.
//!
//! Implementations: [`MemoryRunStore`] here (throwaway runs, tests); the embedded (sled) one in
//! `orkeon_knowledge::store::embedded`. Every implementation must pass [`conformance`].
//!
//! Contract:
//! - `create` records the run and its idempotency key in one atomic, durable step: after a
//!   crash, a key resolves to its run or does not exist — never to nothing.
//! - `append` gives events dense, 1-based sequence numbers per run and is durable on return.
//! - `recover_interrupted` ends every run a previous process left `running`: it appends a
//!   terminal `run_finished` event (status failed) and marks the record failed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{RunEvent, RunStatus};
use crate::ports::{BoxError, GroundednessReport, TaskOutput};

/// One kickoff.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub crew: String,
    pub crew_file: String,
    pub state: RunStatus,
    pub inputs: BTreeMap<String, String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub reason: Option<String>,
    pub final_output: Option<String>,
    pub idempotency_key: Option<String>,
    /// Sequence number of the last event.
    pub last_seq: u64,
    /// One entry per completed task, in completion order (kept by [`RunRecord::next_event`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskSummary>,
    /// Fleet runs: the sha256 of the crew file the run was kicked off with; only a daemon
    /// serving that same definition claims it from the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// Fleet runs: the process executing (or that last executed) the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Fleet runs: how many times a daemon claimed the run (1 on its first execution).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// Fleet runs: the crew's `retry:`, how many more attempts a run whose daemon died may get.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// What one completed task came to: the facts of its `task_completed` event an operator scans
/// in `crew runs` (the event has the whole output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub task: String,
    pub agent: String,
    /// Passages the output cites.
    pub cited: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dangling_markers: Vec<u32>,
    #[serde(default)]
    pub uncited: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groundedness: Option<GroundednessReport>,
}

impl TaskSummary {
    pub fn of(output: &TaskOutput) -> Self {
        Self {
            task: output.task.clone(),
            agent: output.agent.clone(),
            cited: output.citations.len(),
            dangling_markers: output.dangling_markers.clone(),
            uncited: output.uncited,
            degraded: output.degraded.clone(),
            groundedness: output.groundedness.clone(),
        }
    }
}

impl RunRecord {
    /// The run's next event: the next sequence number (recorded in `last_seq`), stamped now;
    /// a `task_completed` event also adds its [`TaskSummary`], and the terminal `run_finished`
    /// event ends the record ([`RunRecord::end`]) — so a store that writes the record with the
    /// event never shows the terminal event of a run it still calls running. Every store's
    /// `append` numbers events through this.
    pub fn next_event(&mut self, event: RunEvent) -> StoredEvent {
        match &event {
            RunEvent::TaskCompleted { output } => self.tasks.push(TaskSummary::of(output)),
            RunEvent::RunFinished {
                status,
                reason,
                final_output,
            } => self.end(*status, reason.clone(), final_output.clone()),
            _ => {}
        }
        self.last_seq += 1;
        StoredEvent {
            run_id: self.run_id.clone(),
            seq: self.last_seq,
            at: now(),
            event,
        }
    }

    /// The run's fate when its executing daemon died: queued again for the next attempt while
    /// the crew's `retry:` allows one (`RunRetried`, the record back to `queued`), else ended
    /// as interrupted (`RunFinished` failed). Every store's recovery goes through this.
    pub fn abandon(&mut self) -> StoredEvent {
        if self.attempts <= self.retry && self.attempts > 0 {
            let attempt = self.attempts + 1;
            let stored = self.next_event(RunEvent::RunRetried {
                attempt,
                reason: INTERRUPTED_REASON.into(),
            });
            self.state = RunStatus::Queued;
            self.worker = None;
            // The record summarises the attempt under way; the events keep the abandoned one.
            self.tasks.clear();
            stored
        } else {
            self.next_event(RunEvent::RunFinished {
                status: RunStatus::Failed,
                reason: Some(INTERRUPTED_REASON.into()),
                final_output: None,
            })
        }
    }

    /// Records the run's end, stamped now. Every store's `finish` ends runs through this.
    pub fn end(&mut self, state: RunStatus, reason: Option<String>, final_output: Option<String>) {
        self.state = state;
        self.reason = reason;
        self.final_output = final_output;
        self.finished_at = Some(now());
    }
}

/// One stored event: its sequence number (1-based, per run), time, and the event (stored as
/// its serde-tagged JSON: `{"type": "task_started", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub run_id: String,
    pub seq: u64,
    pub at: String,
    pub event: RunEvent,
}

impl StoredEvent {
    /// The run's last event.
    pub fn is_terminal(&self) -> bool {
        matches!(self.event, RunEvent::RunFinished { .. })
    }
}

/// Why a run-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RunStoreError {
    #[error("run store I/O failed: {0}")]
    Io(#[source] BoxError),
    #[error("run store data is corrupt: {0}")]
    Corrupt(String),
    #[error("run '{0}' does not exist")]
    UnknownRun(String),
}

/// Why recovery ended a run.
pub const INTERRUPTED_REASON: &str = "the daemon stopped while the run was in flight";

/// Current time, RFC 3339.
pub fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// What a store shared by several processes announces (PostgreSQL: `LISTEN/NOTIFY`), so that
/// watchers and workers wake at once instead of polling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunNotice {
    /// A run got event `seq` (from any process).
    Event { run_id: String, seq: u64 },
    /// A run entered the shared queue.
    Queued { run_id: String },
    /// Notices may have been missed (the listening connection was re-established): look again.
    Resync,
}

/// The definitions a worker serves, as (crew name, content hash): it claims only runs of these.
pub type Served = [(String, String)];

/// The run store port. Calls are short and synchronous.
pub trait RunStore: Send + Sync {
    /// Creates a run (and its idempotency key, atomically), or returns the existing run with
    /// the same key for the same crew (`false`).
    fn create(&self, run: RunRecord) -> Result<(RunRecord, bool), RunStoreError>;

    /// The run an idempotency key created for a crew, if any.
    fn find_by_key(&self, crew: &str, key: &str) -> Result<Option<RunRecord>, RunStoreError>;

    fn get(&self, run_id: &str) -> Result<RunRecord, RunStoreError>;

    /// Runs, newest first (run ids are time-ordered), strictly before `after` when given.
    fn list(&self, limit: usize, after: Option<&str>) -> Result<Vec<RunRecord>, RunStoreError>;

    /// Appends an event with the next sequence number; durable when this returns.
    fn append(&self, run_id: &str, event: RunEvent) -> Result<StoredEvent, RunStoreError>;

    /// Records a run's end.
    fn finish(
        &self,
        run_id: &str,
        state: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    ) -> Result<RunRecord, RunStoreError>;

    /// Events with `seq > after`, in order.
    fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<StoredEvent>, RunStoreError>;

    /// For a fleet sharing this store: records that this process serves `crew` with the
    /// definition `hash` (the crew file's content hash), and returns the other live processes
    /// serving a different one, as (process, hash), so a kickoff can refuse to run a crew the
    /// fleet disagrees on. A store one process owns has no other process: the default records
    /// nothing and returns none.
    fn serve_definition(
        &self,
        crew: &str,
        hash: &str,
    ) -> Result<Vec<(String, String)>, RunStoreError> {
        let _ = (crew, hash);
        Ok(Vec::new())
    }

    /// True when several processes share this store as a fleet: kickoffs then enqueue runs
    /// (`queued`) and every process's workers [`RunStore::claim`] them. A store one process owns
    /// runs each kickoff where it was made.
    fn is_shared(&self) -> bool {
        false
    }

    /// Claims the oldest queued run of a crew in `served` (same name and definition hash) for
    /// this process: the record becomes `running` with this process as its `worker`, its
    /// attempts counted and a fresh lease; no other process can claim it. `None`: nothing to do.
    fn claim(&self, served: &Served) -> Result<Option<RunRecord>, RunStoreError> {
        let _ = served;
        Ok(None)
    }

    /// How many runs wait in the shared queue (0 for a store one process owns).
    fn queued(&self) -> Result<usize, RunStoreError> {
        Ok(0)
    }

    /// Cancels a run still waiting in the shared queue (a terminal `run_finished` event,
    /// cancelled); false when it is not queued (claimed meanwhile, or already over).
    fn cancel_queued(&self, run_id: &str, reason: &str) -> Result<bool, RunStoreError> {
        let _ = (run_id, reason);
        Ok(false)
    }

    /// Notices from the other processes sharing this store, when it has them.
    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<RunNotice>> {
        None
    }

    /// Ends every run left `running` by a previous process: a terminal `run_finished` event
    /// (failed) and a failed record. Returns how many.
    fn recover_interrupted(&self) -> Result<usize, RunStoreError> {
        let mut recovered = 0;
        for run in self.list(usize::MAX, None)? {
            if run.state != RunStatus::Running {
                continue;
            }
            self.append(
                &run.run_id,
                RunEvent::RunFinished {
                    status: RunStatus::Failed,
                    reason: Some(INTERRUPTED_REASON.into()),
                    final_output: None,
                },
            )?;
            self.finish(
                &run.run_id,
                RunStatus::Failed,
                Some(INTERRUPTED_REASON.into()),
                None,
            )?;
            recovered += 1;
        }
        Ok(recovered)
    }
}

/// Runs in memory: for throwaway engines and tests. Lost when dropped.
#[derive(Default)]
pub struct MemoryRunStore {
    inner: Mutex<MemoryRuns>,
}

#[derive(Default)]
struct MemoryRuns {
    runs: BTreeMap<String, RunRecord>,
    events: HashMap<String, Vec<StoredEvent>>,
    keys: HashMap<(String, String), String>,
}

impl MemoryRunStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryRuns> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RunStore for MemoryRunStore {
    fn create(&self, mut run: RunRecord) -> Result<(RunRecord, bool), RunStoreError> {
        let mut inner = self.lock();
        if let Some(key) = &run.idempotency_key {
            let scoped = (run.crew.clone(), key.clone());
            if let Some(id) = inner.keys.get(&scoped) {
                let existing = inner
                    .runs
                    .get(id)
                    .cloned()
                    .ok_or_else(|| RunStoreError::Corrupt(format!("key {key} has no run")))?;
                return Ok((existing, false));
            }
            inner.keys.insert(scoped, run.run_id.clone());
        }
        run.last_seq = 0;
        inner.runs.insert(run.run_id.clone(), run.clone());
        Ok((run, true))
    }

    fn find_by_key(&self, crew: &str, key: &str) -> Result<Option<RunRecord>, RunStoreError> {
        let inner = self.lock();
        Ok(inner
            .keys
            .get(&(crew.to_string(), key.to_string()))
            .and_then(|id| inner.runs.get(id).cloned()))
    }

    fn get(&self, run_id: &str) -> Result<RunRecord, RunStoreError> {
        self.lock()
            .runs
            .get(run_id)
            .cloned()
            .ok_or_else(|| RunStoreError::UnknownRun(run_id.to_string()))
    }

    fn list(&self, limit: usize, after: Option<&str>) -> Result<Vec<RunRecord>, RunStoreError> {
        let inner = self.lock();
        let runs: Box<dyn Iterator<Item = &RunRecord>> = match after {
            Some(after) => Box::new(inner.runs.range(..after.to_string()).rev().map(|(_, r)| r)),
            None => Box::new(inner.runs.values().rev()),
        };
        Ok(runs.take(limit).cloned().collect())
    }

    fn append(&self, run_id: &str, event: RunEvent) -> Result<StoredEvent, RunStoreError> {
        let mut inner = self.lock();
        let run = inner
            .runs
            .get_mut(run_id)
            .ok_or_else(|| RunStoreError::UnknownRun(run_id.to_string()))?;
        let stored = run.next_event(event);
        inner
            .events
            .entry(run_id.to_string())
            .or_default()
            .push(stored.clone());
        Ok(stored)
    }

    fn finish(
        &self,
        run_id: &str,
        state: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    ) -> Result<RunRecord, RunStoreError> {
        let mut inner = self.lock();
        let run = inner
            .runs
            .get_mut(run_id)
            .ok_or_else(|| RunStoreError::UnknownRun(run_id.to_string()))?;
        run.end(state, reason, final_output);
        Ok(run.clone())
    }

    fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<StoredEvent>, RunStoreError> {
        let inner = self.lock();
        Ok(inner
            .events
            .get(run_id)
            .map(|events| events.iter().filter(|e| e.seq > after).cloned().collect())
            .unwrap_or_default())
    }
}

/// The run-store conformance suite: every implementation must pass each check. Call
/// [`conformance::run_all`] with a factory of empty stores.
#[cfg(any(test, feature = "testing"))]
pub mod conformance {
    use super::*;

    /// A running record of crew `crew` with id `id`.
    pub fn record(id: &str, crew: &str, key: Option<&str>) -> RunRecord {
        RunRecord {
            run_id: id.into(),
            crew: crew.into(),
            crew_file: format!("{crew}.yaml"),
            state: RunStatus::Running,
            inputs: BTreeMap::from([("question".to_string(), "why?".to_string())]),
            started_at: now(),
            finished_at: None,
            reason: None,
            final_output: None,
            idempotency_key: key.map(str::to_string),
            last_seq: 0,
            tasks: Vec::new(),
            definition: None,
            worker: None,
            attempts: 0,
            retry: 0,
        }
    }

    fn started(task: &str) -> RunEvent {
        RunEvent::TaskStarted {
            task: task.into(),
            agent: "a".into(),
        }
    }

    /// Runs every check, each on a fresh store from `make`.
    pub fn run_all(make: &dyn Fn() -> Box<dyn RunStore>) {
        create_get_and_unknown(make().as_ref());
        idempotency_keys_are_scoped_by_crew(make().as_ref());
        events_are_dense_ordered_and_typed(make().as_ref());
        finish_records_the_end(make().as_ref());
        list_is_newest_first_and_pages(make().as_ref());
        recovery_ends_interrupted_runs_with_a_terminal_event(make().as_ref());
        completed_tasks_are_summarised_on_the_record(make().as_ref());
    }

    /// A `task_completed` event leaves its summary (citations, groundedness) on the record.
    pub fn completed_tasks_are_summarised_on_the_record(store: &dyn RunStore) {
        store.create(record("r1", "support", None)).expect("create");
        let output = TaskOutput {
            task: "answer".into(),
            agent: "a".into(),
            output: "Refunds take 30 days [1].".into(),
            citations: vec![crate::ports::KnowledgeCitation {
                marker: 1,
                collection: "kb".into(),
                chunk_id: "kb/refunds.md#0".into(),
                source_id: "kb/refunds.md".into(),
                snippet: "Refunds take 30 days.".into(),
                score: 0.9,
                score_origin: "vector".into(),
                start: 0,
                end: 21,
                untrusted: false,
            }],
            dangling_markers: vec![9],
            groundedness: Some(GroundednessReport {
                checker: "heuristic".into(),
                grounded: true,
                score: 0.8,
                unsupported_claims: Vec::new(),
            }),
            ..TaskOutput::default()
        };
        store.append("r1", started("answer")).expect("append");
        store
            .append("r1", RunEvent::TaskCompleted { output })
            .expect("append");
        let run = store.get("r1").expect("get");
        assert_eq!(run.tasks.len(), 1);
        let summary = &run.tasks[0];
        assert_eq!((summary.task.as_str(), summary.cited), ("answer", 1));
        assert_eq!(summary.dangling_markers, vec![9]);
        assert_eq!(summary.groundedness.as_ref().map(|g| g.score), Some(0.8));

        // The terminal event ends the record in the same write.
        store
            .append(
                "r1",
                RunEvent::RunFinished {
                    status: RunStatus::Degraded,
                    reason: Some("uncited".into()),
                    final_output: Some("done".into()),
                },
            )
            .expect("append");
        let run = store.get("r1").expect("get");
        assert_eq!(run.state, RunStatus::Degraded);
        assert_eq!(run.final_output.as_deref(), Some("done"));
        assert!(run.finished_at.is_some());
    }

    pub fn create_get_and_unknown(store: &dyn RunStore) {
        let (run, created) = store.create(record("r1", "support", None)).expect("create");
        assert!(created);
        assert_eq!(run.last_seq, 0);
        assert_eq!(store.get("r1").expect("get"), run);
        assert!(matches!(
            store.get("nope"),
            Err(RunStoreError::UnknownRun(id)) if id == "nope"
        ));
        assert!(matches!(
            store.append("nope", started("t")),
            Err(RunStoreError::UnknownRun(_))
        ));
    }

    pub fn idempotency_keys_are_scoped_by_crew(store: &dyn RunStore) {
        let (first, created) = store
            .create(record("r1", "support", Some("k")))
            .expect("create");
        assert!(created);
        let (again, created) = store
            .create(record("r2", "support", Some("k")))
            .expect("create");
        assert!(!created, "a repeated key returns the first run");
        assert_eq!(again.run_id, first.run_id);
        assert!(matches!(store.get("r2"), Err(RunStoreError::UnknownRun(_))));
        let (other, created) = store
            .create(record("r3", "research", Some("k")))
            .expect("create");
        assert!(created, "the same key of another crew is another run");
        assert_eq!(other.run_id, "r3");
        assert_eq!(
            store
                .find_by_key("support", "k")
                .expect("find")
                .map(|r| r.run_id),
            Some("r1".into())
        );
        assert_eq!(store.find_by_key("support", "other").expect("find"), None);
    }

    pub fn events_are_dense_ordered_and_typed(store: &dyn RunStore) {
        store.create(record("r1", "support", None)).expect("create");
        store.create(record("r2", "support", None)).expect("create");
        for i in 0..5 {
            let stored = store
                .append("r1", started(&format!("t{i}")))
                .expect("append");
            assert_eq!(stored.seq, i + 1);
        }
        store.append("r2", started("other")).expect("append");
        let all = store.events_after("r1", 0).expect("events");
        assert_eq!(
            all.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(all[2].event, started("t2"));
        assert!(all.iter().all(|e| e.run_id == "r1" && !e.at.is_empty()));
        let tail = store.events_after("r1", 3).expect("events");
        assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
        assert!(store.events_after("r1", 5).expect("events").is_empty());
        assert_eq!(store.get("r1").expect("get").last_seq, 5);
        assert_eq!(store.events_after("r2", 0).expect("events").len(), 1);
    }

    pub fn finish_records_the_end(store: &dyn RunStore) {
        store.create(record("r1", "support", None)).expect("create");
        let done = store
            .finish(
                "r1",
                RunStatus::Degraded,
                Some("why".into()),
                Some("out".into()),
            )
            .expect("finish");
        assert_eq!(done.state, RunStatus::Degraded);
        let read = store.get("r1").expect("get");
        assert_eq!(read, done);
        assert_eq!(read.reason.as_deref(), Some("why"));
        assert_eq!(read.final_output.as_deref(), Some("out"));
        assert!(read.finished_at.is_some());
    }

    pub fn list_is_newest_first_and_pages(store: &dyn RunStore) {
        for id in ["r1", "r2", "r3", "r4"] {
            store.create(record(id, "support", None)).expect("create");
        }
        let ids = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.list(10, None).expect("list")),
            ["r4", "r3", "r2", "r1"]
        );
        assert_eq!(ids(store.list(2, None).expect("list")), ["r4", "r3"]);
        assert_eq!(ids(store.list(2, Some("r3")).expect("list")), ["r2", "r1"]);
        assert!(store.list(2, Some("r1")).expect("list").is_empty());
    }

    pub fn recovery_ends_interrupted_runs_with_a_terminal_event(store: &dyn RunStore) {
        store.create(record("r1", "support", None)).expect("create");
        store.create(record("r2", "support", None)).expect("create");
        store.append("r1", started("t")).expect("append");
        store
            .finish("r2", RunStatus::Finished, None, None)
            .expect("finish");
        assert_eq!(store.recover_interrupted().expect("recover"), 1);
        let run = store.get("r1").expect("get");
        assert_eq!(run.state, RunStatus::Failed);
        assert_eq!(run.reason.as_deref(), Some(INTERRUPTED_REASON));
        let events = store.events_after("r1", 0).expect("events");
        let last = events.last().expect("events");
        assert!(last.is_terminal(), "{last:?}");
        assert_eq!(last.seq, 2);
        assert_eq!(store.get("r2").expect("get").state, RunStatus::Finished);
        assert_eq!(store.recover_interrupted().expect("again"), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_store_passes_the_conformance_suite() {
        conformance::run_all(&|| Box::new(MemoryRunStore::default()));
    }
}
