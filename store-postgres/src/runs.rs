//! The [`RunStore`] port on PostgreSQL: `runs` (the record as jsonb, with its state and last
//! sequence number as columns), `run_events` by (run, seq) and `run_keys` by (crew, key).
//!
//! - `create` inserts the key (`ON CONFLICT (crew, key) DO NOTHING`) and the run in one
//!   transaction; when the key exists, the run it names is returned instead. Two daemons
//!   creating the same key at once: the second waits for the first's commit, then gets its run.
//! - `append` locks the run's row (`FOR UPDATE`), numbers the event through
//!   `RunRecord::next_event`, and writes the event and the record in one transaction, so
//!   sequence numbers stay dense whichever process appends.
//! - `recover_interrupted` ends the runs left `running` (the partial index on `state`). With
//!   one daemon per schema that is every such run; a fleet will scope it by `owner` and
//!   `lease_expires_at` (columns already in the schema).

use std::sync::Arc;

use orkeon_crews::run::store::{RunRecord, RunStore, RunStoreError, StoredEvent};
use orkeon_crews::run::{RunEvent, RunStatus};
use orkeon_knowledge::store::StoreError;

use crate::{Shared, connection, db_error};

/// The run store of a [`crate::PostgresStore`].
pub struct PostgresRunStore {
    shared: Arc<Shared>,
}

fn io(error: StoreError) -> RunStoreError {
    RunStoreError::Io(Box::new(error))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, RunStoreError> {
    serde_json::to_value(value).map_err(|e| RunStoreError::Corrupt(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, RunStoreError> {
    serde_json::from_value(value).map_err(|e| RunStoreError::Corrupt(e.to_string()))
}

fn state_name(state: RunStatus) -> Result<String, RunStoreError> {
    match encode(&state)? {
        serde_json::Value::String(name) => Ok(name),
        other => Err(RunStoreError::Corrupt(format!(
            "run state encodes as {other}"
        ))),
    }
}

fn seq(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Writes `run` over its row (inside the caller's transaction).
async fn put(
    client: &impl deadpool_postgres::GenericClient,
    run: &RunRecord,
) -> Result<(), RunStoreError> {
    let record = encode(run)?;
    let state = state_name(run.state)?;
    let updated = client
        .execute(
            "UPDATE runs SET record = $2, state = $3, last_seq = $4, updated_at = now()
             WHERE run_id = $1",
            &[&run.run_id, &record, &state, &seq(run.last_seq)],
        )
        .await
        .map_err(|e| io(db_error("updating a run", e)))?;
    if updated == 0 {
        return Err(RunStoreError::UnknownRun(run.run_id.clone()));
    }
    Ok(())
}

/// Reads a run, locking its row when `for_update`.
async fn read(
    client: &impl deadpool_postgres::GenericClient,
    run_id: &str,
    for_update: bool,
) -> Result<RunRecord, RunStoreError> {
    let sql = if for_update {
        "SELECT record FROM runs WHERE run_id = $1 FOR UPDATE"
    } else {
        "SELECT record FROM runs WHERE run_id = $1"
    };
    let row = client
        .query_opt(sql, &[&run_id])
        .await
        .map_err(|e| io(db_error("reading a run", e)))?
        .ok_or_else(|| RunStoreError::UnknownRun(run_id.to_string()))?;
    decode(row.get(0))
}

impl PostgresRunStore {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn call<T, Fut>(&self, work: impl FnOnce(Arc<Shared>) -> Fut) -> Result<T, RunStoreError>
    where
        Fut: std::future::Future<Output = Result<T, RunStoreError>> + Send + 'static,
        T: Send + 'static,
    {
        let shared = self.shared.clone();
        self.shared.run(work(shared))
    }
}

async fn begin(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, RunStoreError> {
    client
        .transaction()
        .await
        .map_err(|e| io(db_error("starting a transaction", e)))
}

async fn commit(transaction: deadpool_postgres::Transaction<'_>) -> Result<(), RunStoreError> {
    transaction
        .commit()
        .await
        .map_err(|e| io(db_error("committing", e)))
}

impl RunStore for PostgresRunStore {
    fn create(&self, mut run: RunRecord) -> Result<(RunRecord, bool), RunStoreError> {
        run.last_seq = 0;
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await.map_err(io)?;
            let transaction = begin(&mut client).await?;
            if let Some(key) = &run.idempotency_key {
                let claimed = transaction
                    .query_opt(
                        "INSERT INTO run_keys (crew, key, run_id) VALUES ($1, $2, $3)
                         ON CONFLICT (crew, key) DO NOTHING RETURNING run_id",
                        &[&run.crew, key, &run.run_id],
                    )
                    .await
                    .map_err(|e| io(db_error("recording an idempotency key", e)))?;
                if claimed.is_none() {
                    let existing: String = transaction
                        .query_one(
                            "SELECT run_id FROM run_keys WHERE crew = $1 AND key = $2",
                            &[&run.crew, key],
                        )
                        .await
                        .map_err(|e| io(db_error("reading an idempotency key", e)))?
                        .get(0);
                    let existing = read(&transaction, &existing, false).await.map_err(
                        |error| match error {
                            RunStoreError::UnknownRun(id) => {
                                RunStoreError::Corrupt(format!("key {key} names a missing run {id}"))
                            }
                            other => other,
                        },
                    )?;
                    commit(transaction).await?;
                    return Ok((existing, false));
                }
            }
            let record = encode(&run)?;
            let state = state_name(run.state)?;
            transaction
                .execute(
                    "INSERT INTO runs (run_id, crew, state, last_seq, record) VALUES ($1, $2, $3, 0, $4)",
                    &[&run.run_id, &run.crew, &state, &record],
                )
                .await
                .map_err(|e| io(db_error("creating a run", e)))?;
            commit(transaction).await?;
            Ok((run, true))
        })
    }

    fn find_by_key(&self, crew: &str, key: &str) -> Result<Option<RunRecord>, RunStoreError> {
        let (crew, key) = (crew.to_string(), key.to_string());
        self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            let row = client
                .query_opt(
                    "SELECT r.record FROM run_keys k JOIN runs r ON r.run_id = k.run_id
                     WHERE k.crew = $1 AND k.key = $2",
                    &[&crew, &key],
                )
                .await
                .map_err(|e| io(db_error("reading an idempotency key", e)))?;
            row.map(|row| decode(row.get(0))).transpose()
        })
    }

    fn get(&self, run_id: &str) -> Result<RunRecord, RunStoreError> {
        let run_id = run_id.to_string();
        self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            read(&client, &run_id, false).await
        })
    }

    fn list(&self, limit: usize, after: Option<&str>) -> Result<Vec<RunRecord>, RunStoreError> {
        let after = after.map(str::to_string);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            let rows = client
                .query(
                    "SELECT record FROM runs WHERE $1::text IS NULL OR run_id < $1
                     ORDER BY run_id DESC LIMIT $2",
                    &[&after, &limit],
                )
                .await
                .map_err(|e| io(db_error("listing runs", e)))?;
            rows.into_iter().map(|row| decode(row.get(0))).collect()
        })
    }

    fn append(&self, run_id: &str, event: RunEvent) -> Result<StoredEvent, RunStoreError> {
        let run_id = run_id.to_string();
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await.map_err(io)?;
            let transaction = begin(&mut client).await?;
            let mut run = read(&transaction, &run_id, true).await?;
            let stored = run.next_event(event);
            let encoded = encode(&stored.event)?;
            transaction
                .execute(
                    "INSERT INTO run_events (run_id, seq, at, event) VALUES ($1, $2, $3, $4)",
                    &[&run_id, &seq(stored.seq), &stored.at, &encoded],
                )
                .await
                .map_err(|e| io(db_error("appending an event", e)))?;
            put(&transaction, &run).await?;
            commit(transaction).await?;
            Ok(stored)
        })
    }

    fn finish(
        &self,
        run_id: &str,
        state: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    ) -> Result<RunRecord, RunStoreError> {
        let run_id = run_id.to_string();
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await.map_err(io)?;
            let transaction = begin(&mut client).await?;
            let mut run = read(&transaction, &run_id, true).await?;
            run.end(state, reason, final_output);
            put(&transaction, &run).await?;
            commit(transaction).await?;
            Ok(run)
        })
    }

    fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<StoredEvent>, RunStoreError> {
        let run_id = run_id.to_string();
        self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            let rows = client
                .query(
                    "SELECT seq, at, event FROM run_events WHERE run_id = $1 AND seq > $2
                     ORDER BY seq",
                    &[&run_id, &seq(after)],
                )
                .await
                .map_err(|e| io(db_error("reading events", e)))?;
            rows.into_iter()
                .map(|row| {
                    let seq: i64 = row.get(0);
                    Ok(StoredEvent {
                        run_id: run_id.clone(),
                        seq: u64::try_from(seq)
                            .map_err(|e| RunStoreError::Corrupt(e.to_string()))?,
                        at: row.get(1),
                        event: decode(row.get(2))?,
                    })
                })
                .collect()
        })
    }

    fn recover_interrupted(&self) -> Result<usize, RunStoreError> {
        let running: Vec<String> = self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            let rows = client
                .query(
                    "SELECT run_id FROM runs WHERE state = 'running' ORDER BY run_id",
                    &[],
                )
                .await
                .map_err(|e| io(db_error("listing running runs", e)))?;
            Ok(rows.into_iter().map(|row| row.get(0)).collect())
        })?;
        for run_id in &running {
            self.append(
                run_id,
                RunEvent::RunFinished {
                    status: RunStatus::Failed,
                    reason: Some(orkeon_crews::run::store::INTERRUPTED_REASON.into()),
                    final_output: None,
                },
            )?;
            self.finish(
                run_id,
                RunStatus::Failed,
                Some(orkeon_crews::run::store::INTERRUPTED_REASON.into()),
                None,
            )?;
        }
        Ok(running.len())
    }
}
