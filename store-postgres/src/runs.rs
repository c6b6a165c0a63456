//! The [`RunStore`] port on PostgreSQL: `runs` (the record as jsonb, with its state and last
//! sequence number as columns), `run_events` by (run, seq) and `run_keys` by (crew, key).
//!
//! - `create` inserts the key (`ON CONFLICT (crew, key) DO NOTHING`) and the run in one
//!   transaction; when the key exists, the run it names is returned instead. Two daemons
//!   creating the same key at once: the second waits for the first's commit, then gets its run.
//! - `append` locks the run's row (`FOR UPDATE`), numbers the event through
//!   `RunRecord::next_event`, and writes the event and the record in one transaction, so
//!   sequence numbers stay dense whichever process appends.
//! - **Leases**, so several daemons can share one schema: every run is created with `owner`
//!   (the creating store, unique per process) and `lease_expires_at` (`postgres.lease_secs`
//!   ahead). Each store renews its own running runs' leases every third of that
//!   ([`keep_leases`], a background task on the store's runtime) and, on the same tick, ends
//!   as interrupted the running runs whose lease has run out: their daemon died or stalled.
//!   `recover_interrupted` (at startup) ends those, the runs without an owner, and its own.
//!   Never a live peer's: its leases are fresh. The claim is `FOR UPDATE SKIP LOCKED`, so
//!   daemons recovering at once each end a different run, and every run ends exactly once.
//! - **The shared queue**: a fleet kickoff creates its run `queued`, with no owner and the
//!   crew file's hash in `definition`; [`RunStore::claim`] takes the oldest queued run of a
//!   crew the caller serves with the same hash (`FOR UPDATE SKIP LOCKED`: two daemons never
//!   claim one run), makes it `running` under the claimer's lease and counts the attempt. A run
//!   whose lease runs out is queued again while its crew's `retry:` allows
//!   (`RunRecord::abandon`), else ended as interrupted.
//! - **Notices**: every event and every queued run is announced with `pg_notify` on the channel
//!   [`CHANNEL`] (payload: schema, kind, run id, sequence number) inside the transaction that
//!   writes it, so it is delivered on commit. [`RunStore::notices`] starts, on first use, one
//!   listening connection outside the pool that forwards them (and `Resync` after it
//!   reconnects) to a broadcast channel: followers and queue workers wake at once.
//! - `serve_definition` records which crew file (content hash) this daemon serves and names
//!   the live daemons serving another; the lease tick renews this daemon's rows and forgets
//!   those not renewed for three leases.

use std::sync::Arc;
use std::time::Duration;

use orkeon_crews::run::store::{RunRecord, RunStore, RunStoreError, StoredEvent};
use orkeon_crews::run::{RunEvent, RunStatus};
use orkeon_knowledge::store::StoreError;

use orkeon_crews::run::store::{RunNotice, Served};

use crate::{Shared, connection, db_error};

/// The `LISTEN/NOTIFY` channel of run notices (one per database; payloads name the schema).
pub const CHANNEL: &str = "orkeon_runs";

/// Capacity of a store's notice channel; a receiver that falls behind gets `Lagged` and looks
/// at the store again.
const NOTICE_CAPACITY: usize = 1024;

/// Announces, on commit of the caller's transaction, a notice of `kind` (`event` or `queued`).
async fn notify(
    client: &impl deadpool_postgres::GenericClient,
    schema: &str,
    kind: &str,
    run_id: &str,
    seq: u64,
) -> Result<(), RunStoreError> {
    let payload = format!("{schema} {kind} {run_id} {seq}");
    client
        .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
        .await
        .map_err(|e| io(db_error("announcing a run notice", e)))?;
    Ok(())
}

/// The notice a payload of `schema` carries (`None`: another schema's, or not ours).
fn parse_notice(schema: &str, payload: &str) -> Option<RunNotice> {
    let mut parts = payload.split(' ');
    if parts.next()? != schema {
        return None;
    }
    let kind = parts.next()?;
    let run_id = parts.next()?.to_string();
    let seq = parts.next()?.parse().ok()?;
    match kind {
        "event" => Some(RunNotice::Event { run_id, seq }),
        "queued" => Some(RunNotice::Queued { run_id }),
        _ => None,
    }
}

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
            // A queued run belongs to nobody until a daemon claims it.
            let queued = run.state == RunStatus::Queued;
            let owner = (!queued).then(|| shared.owner.clone());
            transaction
                .execute(
                    "INSERT INTO runs (run_id, crew, state, last_seq, record, owner, lease_expires_at, definition)
                     VALUES ($1, $2, $3, 0, $4, $5,
                             CASE WHEN $5::text IS NULL THEN NULL ELSE now() + make_interval(secs => $6) END,
                             $7)",
                    &[
                        &run.run_id,
                        &run.crew,
                        &state,
                        &record,
                        &owner,
                        &shared.lease.as_secs_f64(),
                        &run.definition,
                    ],
                )
                .await
                .map_err(|e| io(db_error("creating a run", e)))?;
            if queued {
                notify(&transaction, schema(&shared), "queued", &run.run_id, 0).await?;
            }
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
            notify(&transaction, schema(&shared), "event", &run_id, stored.seq).await?;
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

    fn serve_definition(
        &self,
        crew: &str,
        hash: &str,
    ) -> Result<Vec<(String, String)>, RunStoreError> {
        let (crew, hash) = (crew.to_string(), hash.to_string());
        self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            client
                .execute(
                    "INSERT INTO crew_definitions (crew, owner, hash, seen_at)
                     VALUES ($1, $2, $3, now())
                     ON CONFLICT (crew, owner) DO UPDATE SET hash = $3, seen_at = now()",
                    &[&crew, &shared.owner, &hash],
                )
                .await
                .map_err(|e| io(db_error("recording a crew definition", e)))?;
            let rows = client
                .query(
                    "SELECT owner, hash FROM crew_definitions
                     WHERE crew = $1 AND owner <> $2 AND hash <> $3
                       AND seen_at > now() - make_interval(secs => $4)
                     ORDER BY owner",
                    &[&crew, &shared.owner, &hash, &definition_ttl(shared.lease)],
                )
                .await
                .map_err(|e| io(db_error("reading the fleet's crew definitions", e)))?;
            Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn claim(&self, served: &Served) -> Result<Option<RunRecord>, RunStoreError> {
        let crews: Vec<String> = served.iter().map(|(crew, _)| crew.clone()).collect();
        let hashes: Vec<String> = served.iter().map(|(_, hash)| hash.clone()).collect();
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await.map_err(io)?;
            let transaction = begin(&mut client).await?;
            let row = transaction
                .query_opt(
                    "SELECT run_id FROM runs
                     WHERE state = 'queued'
                       AND (crew, definition) IN (SELECT * FROM unnest($1::text[], $2::text[]))
                     ORDER BY run_id LIMIT 1
                     FOR UPDATE SKIP LOCKED",
                    &[&crews, &hashes],
                )
                .await
                .map_err(|e| io(db_error("claiming a queued run", e)))?;
            let Some(row) = row else {
                commit(transaction).await?;
                return Ok(None);
            };
            let run_id: String = row.get(0);
            let mut run = read(&transaction, &run_id, false).await?;
            run.state = RunStatus::Running;
            run.worker = Some(shared.owner.clone());
            run.attempts += 1;
            put(&transaction, &run).await?;
            transaction
                .execute(
                    "UPDATE runs SET owner = $2, lease_expires_at = now() + make_interval(secs => $3)
                     WHERE run_id = $1",
                    &[&run_id, &shared.owner, &shared.lease.as_secs_f64()],
                )
                .await
                .map_err(|e| io(db_error("claiming a queued run", e)))?;
            commit(transaction).await?;
            Ok(Some(run))
        })
    }

    fn queued(&self) -> Result<usize, RunStoreError> {
        self.call(|shared| async move {
            let client = connection(&shared.pool).await.map_err(io)?;
            let count: i64 = client
                .query_one("SELECT count(*) FROM runs WHERE state = 'queued'", &[])
                .await
                .map_err(|e| io(db_error("counting queued runs", e)))?
                .get(0);
            Ok(usize::try_from(count).unwrap_or(0))
        })
    }

    fn cancel_queued(&self, run_id: &str, reason: &str) -> Result<bool, RunStoreError> {
        let (run_id, reason) = (run_id.to_string(), reason.to_string());
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await.map_err(io)?;
            let transaction = begin(&mut client).await?;
            let queued = transaction
                .query_opt(
                    "SELECT run_id FROM runs WHERE run_id = $1 AND state = 'queued' FOR UPDATE",
                    &[&run_id],
                )
                .await
                .map_err(|e| io(db_error("cancelling a queued run", e)))?;
            if queued.is_none() {
                commit(transaction).await?;
                return Ok(false);
            }
            let mut run = read(&transaction, &run_id, false).await?;
            let stored = run.next_event(RunEvent::RunFinished {
                status: RunStatus::Cancelled,
                reason: Some(reason),
                final_output: None,
            });
            insert_event(&transaction, &stored).await?;
            put(&transaction, &run).await?;
            notify(&transaction, schema(&shared), "event", &run_id, stored.seq).await?;
            commit(transaction).await?;
            Ok(true)
        })
    }

    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<RunNotice>> {
        let mut first = None;
        let sender = self.shared.notices.get_or_init(|| {
            let (sender, receiver) = tokio::sync::broadcast::channel(NOTICE_CAPACITY);
            first = Some(receiver);
            self.shared.spawn(listen(
                self.shared.listen_config.clone(),
                schema(&self.shared).to_string(),
                sender.clone(),
            ));
            sender
        });
        Some(first.unwrap_or_else(|| sender.subscribe()))
    }

    fn recover_interrupted(&self) -> Result<usize, RunStoreError> {
        let mut recovered = 0;
        loop {
            let batch = self.call(|shared| async move {
                let mut client = connection(&shared.pool).await.map_err(io)?;
                end_abandoned(&mut client, schema(&shared), &shared.owner, true).await
            })?;
            if batch == 0 {
                return Ok(recovered);
            }
            recovered += batch;
        }
    }
}

/// How long a daemon's crew definitions count without a renewal, in seconds: three leases
/// (renewed every third of one), so only stopped daemons' definitions lapse.
fn definition_ttl(lease: Duration) -> f64 {
    lease.as_secs_f64() * 3.0
}

/// The most runs one recovery transaction ends.
const RECOVERY_BATCH: i64 = 100;

/// A name for a new store's runs: host, process and a random part, unique per opened store.
pub(crate) fn new_owner() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}/{}/{}", std::process::id(), &random[..12])
}

/// Ends, in one transaction, up to [`RECOVERY_BATCH`] running runs nobody holds: no owner, a
/// lease that has run out, or (`mine`) this store's own. Each gets a terminal `run_finished`
/// event (failed, interrupted) and a failed record. Rows another transaction holds are
/// skipped (`SKIP LOCKED`): whoever holds them ends them. Returns how many it ended.
async fn end_abandoned(
    client: &mut deadpool_postgres::Object,
    schema: &str,
    owner: &str,
    mine: bool,
) -> Result<usize, RunStoreError> {
    let transaction = begin(client).await?;
    let rows = transaction
        .query(
            "SELECT run_id FROM runs
             WHERE state = 'running'
               AND (owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < now()
                    OR ($2 AND owner = $1))
             ORDER BY run_id LIMIT $3
             FOR UPDATE SKIP LOCKED",
            &[&owner, &mine, &RECOVERY_BATCH],
        )
        .await
        .map_err(|e| io(db_error("claiming interrupted runs", e)))?;
    for row in &rows {
        let run_id: String = row.get(0);
        let mut run = read(&transaction, &run_id, true).await?;
        // Queued again while the crew's `retry:` allows, else ended as interrupted.
        let stored = run.abandon();
        insert_event(&transaction, &stored).await?;
        put(&transaction, &run).await?;
        notify(&transaction, schema, "event", &run_id, stored.seq).await?;
        if run.state == RunStatus::Queued {
            transaction
                .execute(
                    "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE run_id = $1",
                    &[&run_id],
                )
                .await
                .map_err(|e| io(db_error("queueing a run again", e)))?;
            notify(&transaction, schema, "queued", &run_id, stored.seq).await?;
        }
    }
    commit(transaction).await?;
    Ok(rows.len())
}

/// Writes one stored event (inside the caller's transaction).
async fn insert_event(
    client: &impl deadpool_postgres::GenericClient,
    stored: &StoredEvent,
) -> Result<(), RunStoreError> {
    client
        .execute(
            "INSERT INTO run_events (run_id, seq, at, event) VALUES ($1, $2, $3, $4)",
            &[
                &stored.run_id,
                &seq(stored.seq),
                &stored.at,
                &encode(&stored.event)?,
            ],
        )
        .await
        .map_err(|e| io(db_error("appending an event", e)))?;
    Ok(())
}

/// The schema a store's tables live in (notice payloads name it).
fn schema(shared: &Shared) -> &str {
    &shared.settings.postgres.schema
}

/// The listening connection behind [`RunStore::notices`]: `LISTEN` on [`CHANNEL`], forward this
/// schema's notices to `notices`; on any failure reconnect with backoff and send `Resync` once
/// listening again (what was announced meanwhile was missed). Runs for the store's lifetime (a
/// task on its bridge runtime); notices nobody is subscribed to are dropped.
async fn listen(
    config: tokio_postgres::Config,
    schema: String,
    notices: tokio::sync::broadcast::Sender<RunNotice>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                // The connection delivers notifications only while it is polled.
                let driver = tokio::spawn(async move {
                    while let Some(message) =
                        std::future::poll_fn(|cx| connection.poll_message(cx)).await
                    {
                        match message {
                            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_string()).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(_) => return,
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => {
                        backoff = Duration::from_millis(100);
                        let _ = notices.send(RunNotice::Resync);
                        while let Some(payload) = rx.recv().await {
                            if let Some(notice) = parse_notice(&schema, &payload) {
                                // No subscriber right now: nothing to wake.
                                let _ = notices.send(notice);
                            }
                        }
                    }
                    Err(error) => tracing::debug!(%error, "cannot LISTEN for run notices"),
                }
                drop(client);
                driver.abort();
            }
            Err(error) => tracing::debug!(%error, "cannot open the run-notice connection"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// The background task of a store: every third of `lease`, renews the leases of the running
/// runs `owner` created, then ends the runs whose lease has run out (see the module docs).
/// Failures (the database away) are logged and retried on the next tick; the health probe
/// reports them.
pub(crate) async fn keep_leases(
    pool: deadpool_postgres::Pool,
    schema: String,
    owner: String,
    lease: Duration,
) {
    let tick = (lease / 3).max(Duration::from_millis(200));
    loop {
        tokio::time::sleep(tick).await;
        let result = async {
            let mut client = connection(&pool).await.map_err(io)?;
            client
                .execute(
                    "UPDATE runs SET lease_expires_at = now() + make_interval(secs => $2)
                     WHERE owner = $1 AND state = 'running'",
                    &[&owner, &lease.as_secs_f64()],
                )
                .await
                .map_err(|e| io(db_error("renewing run leases", e)))?;
            client
                .execute(
                    "UPDATE crew_definitions SET seen_at = now() WHERE owner = $1",
                    &[&owner],
                )
                .await
                .map_err(|e| io(db_error("renewing crew definitions", e)))?;
            client
                .execute(
                    "DELETE FROM crew_definitions WHERE seen_at < now() - make_interval(secs => $1)",
                    &[&definition_ttl(lease)],
                )
                .await
                .map_err(|e| io(db_error("forgetting stopped daemons' crew definitions", e)))?;
            end_abandoned(&mut client, &schema, &owner, false).await
        }
        .await;
        match result {
            Ok(0) => {}
            Ok(ended) => tracing::warn!(
                runs = ended,
                "runs whose daemon stopped renewing their lease were marked failed (each got a terminal event)"
            ),
            Err(error) => tracing::debug!(%error, "the run lease tick failed; retrying"),
        }
    }
}
