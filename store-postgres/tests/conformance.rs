//! The PostgreSQL provider against a real server: the storage conformance suites (documents,
//! quarantine, runs — each check on a fresh schema), migrations, and connection errors.
//!
//! The server comes from `ORKEON_TEST_PG_URL` (+ `ORKEON_TEST_PG_PASSWORD`); `scripts/test-postgres
//! start` starts one and prints both. Without the URL every test prints a loud skip line and
//! returns, unless `ORKEON_REQUIRE_PG=1` (CI), where it fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use orkeon_crews::run::store::{RunStore, conformance as runs_conformance};
use orkeon_knowledge::settings::{PostgresSettings, StoreProvider, StoreSettings};
use orkeon_knowledge::store::{DocumentStore, conformance};
use orkeon_store_postgres::{PostgresStore, SCHEMA_VERSION};

const PASSWORD_VAR: &str = "ORKEON_TEST_PG_PASSWORD";

/// The test server's URL, or `None` (after a loud skip line) when none is configured.
fn server(test: &str) -> Option<String> {
    match std::env::var("ORKEON_TEST_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            if std::env::var("ORKEON_REQUIRE_PG").is_ok_and(|v| v == "1") {
                panic!(
                    "{test}: ORKEON_REQUIRE_PG=1 but ORKEON_TEST_PG_URL is not set; run `eval \"$(scripts/test-postgres start)\"` first"
                );
            }
            eprintln!(
                "\n*** SKIPPED {test}: ORKEON_TEST_PG_URL is not set (eval \"$(scripts/test-postgres start)\" to run the PostgreSQL tests) ***\n"
            );
            None
        }
    }
}

/// Fresh schemas for one test, dropped (with everything in them) when it ends.
struct Schemas {
    url: String,
    prefix: String,
    created: Vec<String>,
    next: AtomicUsize,
}

impl Schemas {
    fn new(url: &str, test: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Self {
            url: url.to_string(),
            prefix: format!("t_{test}_{}_{nanos}", std::process::id()),
            created: Vec::new(),
            next: AtomicUsize::new(0),
        }
    }

    fn settings(&mut self) -> StoreSettings {
        let schema = format!(
            "{}_{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::SeqCst)
        );
        self.created.push(schema.clone());
        settings(&self.url, &schema)
    }

    fn open(&mut self, tune: impl Fn(&mut StoreSettings)) -> PostgresStore {
        let mut settings = self.settings();
        tune(&mut settings);
        PostgresStore::open(&settings).unwrap_or_else(|e| panic!("open: {e}"))
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        let statements: String = self
            .created
            .iter()
            .map(|schema| format!("DROP SCHEMA IF EXISTS {schema} CASCADE;"))
            .collect();
        execute(&self.url, &statements);
    }
}

fn settings(url: &str, schema: &str) -> StoreSettings {
    StoreSettings {
        provider: StoreProvider::Postgres,
        postgres: PostgresSettings {
            url: Some(url.to_string()),
            password_env: std::env::var(PASSWORD_VAR)
                .is_ok()
                .then(|| PASSWORD_VAR.to_string()),
            pool_size: 4,
            statement_timeout_ms: 60_000,
            schema: schema.to_string(),
            ..PostgresSettings::default()
        },
        ..StoreSettings::default()
    }
}

/// Runs `sql` on the test server with a connection of its own.
fn execute(url: &str, sql: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut config: tokio_postgres::Config = url.parse().expect("ORKEON_TEST_PG_URL");
        if let Ok(password) = std::env::var(PASSWORD_VAR) {
            config.password(password);
        }
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .expect("connect");
        let driver = tokio::spawn(connection);
        client.batch_execute(sql).await.expect("execute");
        drop(client);
        let _ = driver.await;
    });
}

#[test]
fn documents_pass_the_conformance_suite() {
    let Some(url) = server("documents_pass_the_conformance_suite") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "docs");
    conformance::document_store_suite(&mut || {
        Arc::new(schemas.open(|_| {})) as Arc<dyn DocumentStore>
    });
}

#[test]
fn documents_pass_the_conformance_suite_on_hnsw_indexes() {
    let Some(url) = server("documents_pass_the_conformance_suite_on_hnsw_indexes") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "hnsw");
    conformance::document_store_suite(&mut || {
        let store = schemas.open(|settings| settings.hnsw_threshold = 0);
        Arc::new(store) as Arc<dyn DocumentStore>
    });
}

#[test]
fn the_quarantine_passes_the_conformance_suite() {
    let Some(url) = server("the_quarantine_passes_the_conformance_suite") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "quarantine");
    conformance::quarantine_store_suite(&mut || schemas.open(|_| {}).quarantine());
}

#[test]
fn runs_pass_the_conformance_suite() {
    let Some(url) = server("runs_pass_the_conformance_suite") else {
        return;
    };
    let schemas = std::sync::Mutex::new(Schemas::new(&url, "runs"));
    runs_conformance::run_all(&|| {
        let store = schemas.lock().unwrap().open(|_| {});
        Box::new(store.run_store()) as Box<dyn RunStore>
    });
}

#[test]
fn a_schema_of_a_newer_version_is_refused_naming_both_versions() {
    let Some(url) = server("a_schema_of_a_newer_version_is_refused_naming_both_versions") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "newer");
    let settings = schemas.settings();
    let schema = settings.postgres.schema.clone();
    drop(PostgresStore::open(&settings).expect("a fresh schema is created"));
    // Opening again is a no-op migration.
    drop(PostgresStore::open(&settings).expect("reopen"));
    execute(
        &url,
        &format!(
            "INSERT INTO {schema}.schema_migrations (version, description) VALUES ({}, 'from the future')",
            SCHEMA_VERSION + 41
        ),
    );
    let error = PostgresStore::open(&settings)
        .err()
        .expect("a newer schema is refused")
        .to_string();
    assert!(error.starts_with("rag.store.postgres.schema:"), "{error}");
    assert!(
        error.contains(&format!("version {}", SCHEMA_VERSION + 41)),
        "{error}"
    );
    assert!(
        error.contains(&format!("version {SCHEMA_VERSION}")),
        "{error}"
    );
    assert!(error.contains(&schema), "{error}");
}

#[test]
fn connection_errors_name_the_setting_and_never_the_password() {
    let Some(url) = server("connection_errors_name_the_setting_and_never_the_password") else {
        return;
    };
    let target: tokio_postgres::Config = url.parse().expect("ORKEON_TEST_PG_URL");
    let user = target.get_user().unwrap_or("orkeon").to_string();
    let port = target.get_ports().first().copied().unwrap_or(5432);
    let database = target.get_dbname().unwrap_or("orkeon").to_string();
    let secret = "not-the-password-7f3a";

    // A wrong password in the URL.
    let mut wrong = settings(
        &format!("postgres://{user}:{secret}@127.0.0.1:{port}/{database}"),
        "t_never_created",
    );
    wrong.postgres.password_env = None;
    let error = PostgresStore::open(&wrong)
        .err()
        .expect("a wrong password is refused")
        .to_string();
    assert!(error.starts_with("rag.store.postgres.url:"), "{error}");
    assert!(error.contains("refused the login"), "{error}");
    assert!(!error.contains(secret), "the password leaked: {error}");

    // The wrong password from a variable: the message names the variable, not its value.
    let mut from_env = settings(&url, "t_never_created");
    from_env.postgres.password_env = Some("ORKEON_TEST_PG_URL".into());
    let error = PostgresStore::open(&from_env)
        .err()
        .expect("a wrong password is refused")
        .to_string();
    assert!(
        error.starts_with("rag.store.postgres.password_env:"),
        "{error}"
    );
    assert!(error.contains("ORKEON_TEST_PG_URL"), "{error}");

    // Nothing listening.
    let nowhere = settings(
        &format!("postgres://{user}:{secret}@127.0.0.1:1/{database}"),
        "t_never_created",
    );
    let error = PostgresStore::open(&nowhere)
        .err()
        .expect("no server")
        .to_string();
    assert!(error.starts_with("rag.store.postgres.url:"), "{error}");
    assert!(error.contains("cannot connect"), "{error}");
    assert!(!error.contains(secret), "the password leaked: {error}");
}

#[test]
fn stores_work_from_inside_async_tasks() {
    let Some(url) = server("stores_work_from_inside_async_tasks") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "async");
    let store = schemas.open(|_| {});
    // Workers of a multi-thread runtime (block_in_place)…
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let seen: Vec<usize> = runtime.block_on({
        let store = store.clone();
        async move {
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store
                            .ensure_collection(&format!("c{i}"), &conformance::profile())
                            .expect("ensure_collection");
                        store.collections().expect("collections").len()
                    })
                })
                .collect();
            let mut seen = Vec::new();
            for task in tasks {
                seen.push(task.await.expect("task"));
            }
            seen
        }
    });
    assert!(seen.iter().all(|&n| (1..=8).contains(&n)), "{seen:?}");
    // …a current-thread runtime (a plain wait), and a store dropped inside a runtime.
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let names = current.block_on(async move {
        let names: Vec<String> = store
            .collections()
            .expect("collections")
            .into_iter()
            .map(|c| c.name)
            .collect();
        drop(store);
        names
    });
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"]);
}

/// Polls `check` every 100 ms until it holds or `timeout` passes.
fn wait_until(timeout: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Two daemons on one schema: a peer's recovery never ends a run whose daemon is alive (its
/// lease is renewed), and ends it — once, with a terminal event — after that daemon is gone.
#[test]
fn runs_of_a_live_peer_are_never_recovered_and_a_dead_peers_are_after_their_lease() {
    use orkeon_crews::run::RunStatus;
    use orkeon_crews::run::store::{INTERRUPTED_REASON, conformance::record};
    let Some(url) = server("runs_of_a_live_peer_are_never_recovered") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "leases");
    let mut settings = schemas.settings();
    settings.postgres.lease_secs = 2;
    let alive = PostgresStore::open(&settings).expect("open the first daemon's store");
    let peer = PostgresStore::open(&settings).expect("open the second daemon's store");
    let (alive_runs, peer_runs) = (alive.run_store(), peer.run_store());
    alive_runs
        .create(record("r1", "support", None))
        .expect("create");

    // Over three lease lengths the owner keeps renewing: a peer's startup recovery and its
    // background sweeps leave the run alone.
    for _ in 0..6 {
        assert_eq!(peer_runs.recover_interrupted().expect("recover"), 0);
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert_eq!(peer_runs.get("r1").expect("get").state, RunStatus::Running);

    // The owner dies (its store, and with it the renewals, are gone): the peer's background
    // sweep ends the run once its lease has run out.
    drop(alive_runs);
    drop(alive);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || {
            peer_runs.get("r1").expect("get").state == RunStatus::Failed
        }),
        "the dead daemon's run was never recovered"
    );
    let run = peer_runs.get("r1").expect("get");
    assert_eq!(run.reason.as_deref(), Some(INTERRUPTED_REASON));
    let events = peer_runs.events_after("r1", 0).expect("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].is_terminal(), "{events:?}");
}

/// Daemons recovering at once (`FOR UPDATE SKIP LOCKED`) each end a different run: every
/// abandoned run ends exactly once, with one terminal event.
#[test]
fn concurrent_recoveries_end_every_abandoned_run_exactly_once() {
    use orkeon_crews::run::RunStatus;
    use orkeon_crews::run::store::conformance::record;
    let Some(url) = server("concurrent_recoveries_end_every_abandoned_run_exactly_once") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "recoveries");
    let mut settings = schemas.settings();
    settings.postgres.lease_secs = 1;
    let dead = PostgresStore::open(&settings).expect("open");
    let runs = dead.run_store();
    let ids: Vec<String> = (0..150).map(|i| format!("r{i:03}")).collect();
    for id in &ids {
        runs.create(record(id, "support", None)).expect("create");
    }
    drop(runs);
    drop(dead);
    std::thread::sleep(std::time::Duration::from_millis(1500));

    let stores: Vec<PostgresStore> = (0..3)
        .map(|_| PostgresStore::open(&settings).expect("open"))
        .collect();
    let recovered: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .map(|store| scope.spawn(move || store.run_store().recover_interrupted()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("join").expect("recover"))
            .sum()
    });
    // The stores' background sweeps may have ended some runs too; none twice.
    assert!(
        recovered <= ids.len(),
        "{recovered} recoveries of {} runs",
        ids.len()
    );
    let check = stores[0].run_store();
    for id in &ids {
        let run = check.get(id).expect("get");
        assert_eq!(run.state, RunStatus::Failed, "{id}");
        let events = check.events_after(id, 0).expect("events");
        assert_eq!(events.len(), 1, "{id}: {events:?}");
        assert!(events[0].is_terminal(), "{id}: {events:?}");
    }
}

/// Two processes' stores on one schema: a second writer of a collection waits until the first
/// drops its lock; another collection is not held up.
#[test]
fn a_collections_writer_lock_serialises_writers_across_stores() {
    let Some(url) = server("a_collections_writer_lock_serialises_writers_across_stores") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "writer_lock");
    let settings = schemas.settings();
    let first = PostgresStore::open(&settings).expect("open");
    let second = Arc::new(PostgresStore::open(&settings).expect("open"));
    let held = first.writer_lock("kb").expect("lock");
    // Another collection is free.
    drop(second.writer_lock("other").expect("another collection"));

    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let second = second.clone();
        std::thread::spawn(move || {
            let lock = second
                .writer_lock("kb")
                .expect("lock after the first writer");
            tx.send(()).expect("send");
            drop(lock);
        })
    };
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(800))
            .is_err(),
        "the second writer got the collection while the first held it"
    );
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(5))
        .expect("the second writer gets the collection once the first is done");
    waiter.join().expect("join");
    // Released again: the first store can take it back at once.
    drop(first.writer_lock("kb").expect("lock again"));
}

/// A fleet run waiting in the shared queue: no owner yet, the crew file's hash `definition`.
fn queued(id: &str, definition: &str, retry: u32) -> orkeon_crews::run::store::RunRecord {
    let mut run = orkeon_crews::run::store::conformance::record(id, "support", None);
    run.state = orkeon_crews::run::RunStatus::Queued;
    run.definition = Some(definition.to_string());
    run.retry = retry;
    run
}

/// Three daemons' stores claim from one queue at once (`FOR UPDATE SKIP LOCKED`): every run of
/// the served definition goes to exactly one of them, a run of another definition to none; a
/// run still queued can be cancelled, a claimed one cannot.
#[test]
fn the_shared_queue_hands_each_run_to_exactly_one_claimer_of_its_definition() {
    use orkeon_crews::run::RunStatus;
    let Some(url) = server("the_shared_queue_hands_each_run_to_exactly_one_claimer") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "queue");
    let settings = schemas.settings();
    let stores: Vec<PostgresStore> = (0..3)
        .map(|_| PostgresStore::open(&settings).expect("open"))
        .collect();
    let kickoffs = stores[0].run_store();
    assert!(kickoffs.is_shared());
    let ids: Vec<String> = (0..40).map(|i| format!("q{i:03}")).collect();
    for id in &ids {
        kickoffs.create(queued(id, "sha-one", 0)).expect("enqueue");
    }
    kickoffs
        .create(queued("other", "sha-two", 0))
        .expect("enqueue another definition");
    assert_eq!(kickoffs.queued().expect("queued"), 41);

    let served = [("support".to_string(), "sha-one".to_string())];
    let claims: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .map(|store| {
                let served = &served;
                scope.spawn(move || {
                    let runs = store.run_store();
                    let mut mine = Vec::new();
                    while let Some(run) = runs.claim(served).expect("claim") {
                        assert_eq!(run.state, RunStatus::Running);
                        assert_eq!(run.attempts, 1);
                        assert!(run.worker.is_some());
                        mine.push(run.run_id);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect()
    });
    let mut all: Vec<String> = claims.iter().flatten().cloned().collect();
    all.sort();
    assert_eq!(all, ids, "each queued run claimed exactly once: {claims:?}");
    // Oldest first: one claimer alone takes the runs in the order they were queued.
    for mine in &claims {
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(&sorted, mine);
    }
    assert_eq!(kickoffs.queued().expect("queued"), 1);
    assert_eq!(kickoffs.get("other").expect("get").state, RunStatus::Queued);

    // A queued run is cancelled with one terminal event; a claimed one is not the queue's.
    assert!(!kickoffs.cancel_queued(&ids[0], "no").expect("cancel"));
    assert!(
        kickoffs
            .cancel_queued("other", "not needed")
            .expect("cancel")
    );
    let other = kickoffs.get("other").expect("get");
    assert_eq!(other.state, RunStatus::Cancelled);
    let events = kickoffs.events_after("other", 0).expect("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].is_terminal(), "{events:?}");
    assert_eq!(kickoffs.queued().expect("queued"), 0);
    assert!(!kickoffs.cancel_queued("other", "twice").expect("cancel"));
}

/// A claimed run whose daemon dies goes back to the queue while its crew's `retry:` allows
/// (`run_retried`, attempt 2, claimed by a survivor), and ends interrupted when the retries
/// are spent.
#[test]
fn a_dead_daemons_claimed_run_is_queued_again_while_its_retries_last() {
    use orkeon_crews::run::store::INTERRUPTED_REASON;
    use orkeon_crews::run::{RunEvent, RunStatus};
    let Some(url) = server("a_dead_daemons_claimed_run_is_queued_again") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "retry");
    let mut settings = schemas.settings();
    settings.postgres.lease_secs = 1;
    let watcher = PostgresStore::open(&settings).expect("open");
    let runs = watcher.run_store();
    runs.create(queued("r1", "sha", 1)).expect("enqueue");
    let served = [("support".to_string(), "sha".to_string())];

    let wait_for = |state: RunStatus| {
        assert!(
            wait_until(std::time::Duration::from_secs(15), || {
                runs.get("r1").expect("get").state == state
            }),
            "the run never became {state}: {:?}",
            runs.get("r1")
        );
    };
    for attempt in 1..=2 {
        let daemon = PostgresStore::open(&settings).expect("open a daemon's store");
        let claimed = daemon
            .run_store()
            .claim(&served)
            .expect("claim")
            .expect("the run is queued");
        assert_eq!(claimed.attempts, attempt);
        // The daemon dies mid-run: its lease runs out and the watcher's sweep takes over.
        drop(daemon);
        if attempt == 1 {
            wait_for(RunStatus::Queued);
        } else {
            wait_for(RunStatus::Failed);
        }
    }
    let run = runs.get("r1").expect("get");
    assert_eq!(run.reason.as_deref(), Some(INTERRUPTED_REASON));
    assert_eq!(run.attempts, 2);
    let events = runs.events_after("r1", 0).expect("events");
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        matches!(events[0].event, RunEvent::RunRetried { attempt: 2, .. }),
        "{events:?}"
    );
    assert!(events[1].is_terminal(), "{events:?}");
}

/// `LISTEN/NOTIFY`: a store hears of the runs another store queues and of the events it
/// appends, naming the run and the sequence number (what wakes queue workers and followers).
#[test]
fn a_store_hears_the_runs_and_events_of_another_store() {
    use orkeon_crews::run::RunEvent;
    use orkeon_crews::run::store::{RunNotice, conformance::record};
    let Some(url) = server("a_store_hears_the_runs_and_events_of_another_store") else {
        return;
    };
    let mut schemas = Schemas::new(&url, "notices");
    let settings = schemas.settings();
    let listener = PostgresStore::open(&settings).expect("open");
    let speaker = PostgresStore::open(&settings).expect("open");
    // A store on another schema of the same database: its notices are not ours.
    let stranger = schemas.open(|_| {});
    let mut notices = listener
        .run_store()
        .notices()
        .expect("a shared store has notices");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let next = |notices: &mut tokio::sync::broadcast::Receiver<RunNotice>| {
        runtime.block_on(async {
            loop {
                let notice =
                    tokio::time::timeout(std::time::Duration::from_secs(10), notices.recv())
                        .await
                        .expect("a notice arrives")
                        .expect("notice");
                // The listener announces it is listening (and after every reconnect).
                if notice != RunNotice::Resync {
                    return notice;
                }
            }
        })
    };
    // Make sure the listener is up before anything is announced.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while runtime.block_on(async {
        tokio::time::timeout(std::time::Duration::from_millis(200), notices.recv())
            .await
            .is_err()
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never started"
        );
    }

    let stranger_runs = stranger.run_store();
    stranger_runs
        .create(queued("elsewhere", "sha", 0))
        .expect("enqueue elsewhere");
    let runs = speaker.run_store();
    runs.create(queued("q1", "sha", 0)).expect("enqueue");
    assert_eq!(
        next(&mut notices),
        RunNotice::Queued {
            run_id: "q1".into()
        }
    );
    runs.create(record("r1", "support", None)).expect("create");
    let stored = runs
        .append(
            "r1",
            RunEvent::BudgetExhausted {
                reason: "test".into(),
            },
        )
        .expect("append");
    assert_eq!(
        next(&mut notices),
        RunNotice::Event {
            run_id: "r1".into(),
            seq: stored.seq
        }
    );
}
