//! The embedded implementation of the crews' [`RunStore`] port, in the store's sled database
//! (trees `runs`, `run_events`, `run_keys`). Obtained from [`super::EmbeddedStore::run_store`].
//!
//! `create` writes the run record and its idempotency key in one sled transaction and flushes
//! before returning, so after a crash a key always resolves to its run. `append` writes the event
//! and the record's new `last_seq` in one transaction and flushes.

use orkeon_crews::run::store::{RunRecord, RunStore, RunStoreError, StoredEvent};
use orkeon_crews::run::{RunEvent, RunStatus};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};

/// Runs and their events in sled.
pub struct SledRunStore {
    runs: sled::Tree,
    events: sled::Tree,
    keys: sled::Tree,
    /// Serialises read-modify-write of run records (sequence numbers stay dense).
    write: std::sync::Mutex<()>,
}

fn io(error: sled::Error) -> RunStoreError {
    RunStoreError::Io(Box::new(error))
}

fn transaction(error: TransactionError<RunStoreError>) -> RunStoreError {
    match error {
        TransactionError::Abort(error) => error,
        TransactionError::Storage(error) => io(error),
    }
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, RunStoreError> {
    serde_json::to_vec(value).map_err(|e| RunStoreError::Corrupt(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RunStoreError> {
    serde_json::from_slice(bytes).map_err(|e| RunStoreError::Corrupt(e.to_string()))
}

fn scoped_key(crew: &str, key: &str) -> Vec<u8> {
    format!("{crew}\u{1f}{key}").into_bytes()
}

fn event_key(run_id: &str, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(run_id.len() + 9);
    key.extend_from_slice(run_id.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

impl super::EmbeddedStore {
    /// The run store in this store's database.
    pub fn run_store(&self) -> Result<SledRunStore, RunStoreError> {
        SledRunStore::open(&self.db)
    }
}

impl SledRunStore {
    pub(super) fn open(db: &sled::Db) -> Result<Self, RunStoreError> {
        Ok(Self {
            runs: db.open_tree("runs").map_err(io)?,
            events: db.open_tree("run_events").map_err(io)?,
            keys: db.open_tree("run_keys").map_err(io)?,
            write: std::sync::Mutex::new(()),
        })
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, run: &RunRecord) -> Result<(), RunStoreError> {
        self.runs
            .insert(run.run_id.as_bytes(), encode(run)?)
            .map_err(io)?;
        self.runs.flush().map_err(io)?;
        Ok(())
    }
}

impl RunStore for SledRunStore {
    fn create(&self, mut run: RunRecord) -> Result<(RunRecord, bool), RunStoreError> {
        let _guard = self.guard();
        run.last_seq = 0;
        let run_bytes = encode(&run)?;
        let scoped = run
            .idempotency_key
            .as_ref()
            .map(|key| scoped_key(&run.crew, key));
        let existing: Option<String> = (&self.runs, &self.keys)
            .transaction(|(runs, keys)| {
                if let Some(scoped) = &scoped {
                    if let Some(id) = keys.get(scoped)? {
                        return Ok(Some(String::from_utf8_lossy(&id).to_string()));
                    }
                    keys.insert(scoped.clone(), run.run_id.as_bytes())?;
                }
                runs.insert(run.run_id.as_bytes(), run_bytes.clone())?;
                Ok::<_, ConflictableTransactionError<RunStoreError>>(None)
            })
            .map_err(transaction)?;
        if let Some(id) = existing {
            return Ok((self.get(&id)?, false));
        }
        self.runs.flush().map_err(io)?;
        Ok((run, true))
    }

    fn find_by_key(&self, crew: &str, key: &str) -> Result<Option<RunRecord>, RunStoreError> {
        match self.keys.get(scoped_key(crew, key)).map_err(io)? {
            Some(id) => Ok(Some(self.get(&String::from_utf8_lossy(&id))?)),
            None => Ok(None),
        }
    }

    fn get(&self, run_id: &str) -> Result<RunRecord, RunStoreError> {
        let bytes = self
            .runs
            .get(run_id.as_bytes())
            .map_err(io)?
            .ok_or_else(|| RunStoreError::UnknownRun(run_id.to_string()))?;
        decode(&bytes)
    }

    fn list(&self, limit: usize, after: Option<&str>) -> Result<Vec<RunRecord>, RunStoreError> {
        let iter = match after {
            Some(after) => self.runs.range(..after.as_bytes()).rev(),
            None => self.runs.iter().rev(),
        };
        let mut out = Vec::new();
        for item in iter.take(limit) {
            let (_, bytes) = item.map_err(io)?;
            out.push(decode(&bytes)?);
        }
        Ok(out)
    }

    fn append(&self, run_id: &str, event: RunEvent) -> Result<StoredEvent, RunStoreError> {
        let _guard = self.guard();
        let mut run = self.get(run_id)?;
        let stored = run.next_event(event);
        let event_bytes = encode(&stored)?;
        let run_bytes = encode(&run)?;
        (&self.runs, &self.events)
            .transaction(|(runs, events)| {
                events.insert(event_key(run_id, stored.seq), event_bytes.clone())?;
                runs.insert(run_id.as_bytes(), run_bytes.clone())?;
                Ok::<_, ConflictableTransactionError<RunStoreError>>(())
            })
            .map_err(transaction)?;
        self.events.flush().map_err(io)?;
        Ok(stored)
    }

    fn finish(
        &self,
        run_id: &str,
        state: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    ) -> Result<RunRecord, RunStoreError> {
        let _guard = self.guard();
        let mut run = self.get(run_id)?;
        run.end(state, reason, final_output);
        self.put(&run)?;
        Ok(run)
    }

    fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<StoredEvent>, RunStoreError> {
        let start = event_key(run_id, after.saturating_add(1));
        let end = event_key(run_id, u64::MAX);
        let mut out = Vec::new();
        for item in self.events.range(start..=end) {
            let (_, bytes) = item.map_err(io)?;
            out.push(decode(&bytes)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::run::store::conformance;

    #[test]
    fn the_sled_store_passes_the_conformance_suite() {
        let dirs = std::sync::Mutex::new(Vec::new());
        conformance::run_all(&|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let db = sled::open(dir.path()).expect("sled");
            dirs.lock().expect("dirs").push(dir);
            Box::new(SledRunStore::open(&db).expect("store"))
        });
    }

    #[test]
    fn runs_and_events_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = sled::open(dir.path()).expect("sled");
            let store = SledRunStore::open(&db).expect("store");
            store
                .create(conformance::record("r1", "support", Some("k")))
                .expect("create");
            for _ in 0..3 {
                store
                    .append(
                        "r1",
                        RunEvent::BudgetExhausted {
                            reason: "tick".into(),
                        },
                    )
                    .expect("append");
            }
        }
        // sled's background flusher lets go of the file lock shortly after the last handle
        // is dropped; retry the reopen for a bounded time (it failed once in CI).
        let db = (0..200)
            .find_map(|_| {
                sled::open(dir.path()).ok().or_else(|| {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    None
                })
            })
            .expect("reopen within 2 s");
        let store = SledRunStore::open(&db).expect("store");
        assert_eq!(store.get("r1").expect("run").last_seq, 3);
        assert_eq!(store.events_after("r1", 0).expect("events").len(), 3);
        assert_eq!(
            store
                .find_by_key("support", "k")
                .expect("key")
                .map(|r| r.run_id),
            Some("r1".into())
        );
    }
}
