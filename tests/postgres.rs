//! End to end on the PostgreSQL provider: the daemon's knowledge over real gRPC on loopback,
//! living in the database (not the data folder); a missing URL refused naming the setting; the
//! password kept out of logs, `orkeon config` and errors; the database as a health dependency
//! (NOT_SERVING while it is unreachable, SERVING again without a restart). The flows every
//! provider shares run once per provider in `cli_rag.rs` and `daemon.rs`.
//!
//! The server comes from `ORKEON_TEST_PG_URL` + `ORKEON_TEST_PG_PASSWORD` (`scripts/test-postgres
//! start`); without it each test prints a loud skip line, unless `ORKEON_REQUIRE_PG=1`.

mod support;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::knowledge_service_client::KnowledgeServiceClient;
use support::{
    Daemon, PG_PASSWORD_VAR, Store, eventually, orkeon, orkeon_on, run_failing, run_json,
};

/// The test server's URL with its password written into it (`postgres://user:pw@…`).
fn url_with_password(url: &str) -> (String, String) {
    let password = std::env::var(PG_PASSWORD_VAR).expect("ORKEON_TEST_PG_PASSWORD is set");
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (user, host) = rest.split_once('@').expect("user@host in the URL");
    let user = user.split(':').next().unwrap_or(user);
    (format!("{scheme}://{user}:{password}@{host}"), password)
}

/// The test server's `host:port`.
fn address(url: &str) -> String {
    let tail = url.rsplit_once('@').map(|(_, t)| t).unwrap_or(url);
    tail.split('/').next().unwrap_or(tail).to_string()
}

/// The same URL pointing at another `host:port`.
fn with_address(url: &str, address: &str) -> String {
    let (head, tail) = url.rsplit_once('@').expect("user@host");
    let path = tail.split_once('/').map(|(_, p)| p).unwrap_or("");
    format!("{head}@{address}/{path}")
}

#[test]
fn the_postgres_password_never_reaches_logs_config_output_or_errors() {
    let Some(Store::Postgres(pg)) = Store::postgres("password_redaction") else {
        return;
    };
    let (secret_url, password) = url_with_password(&pg.url);
    let work = tempfile::tempdir().expect("tempdir");
    let data = work.path().join("data");
    let crews = work.path().join("crews");
    fs::create_dir_all(&crews).expect("mkdir");
    let env = [
        ("ORKEON_RAG__STORE__PROVIDER", "postgres"),
        ("ORKEON_RAG__STORE__POSTGRES__URL", secret_url.as_str()),
        ("ORKEON_RAG__STORE__POSTGRES__SCHEMA", pg.schema.as_str()),
    ];
    let on = |cmd: &mut std::process::Command| {
        for (k, v) in env {
            cmd.env(k, v);
        }
    };

    // `orkeon config`: the URL is shown without its password, in YAML and JSON.
    for json in [false, true] {
        let mut cmd = orkeon(work.path(), &data);
        on(&mut cmd);
        if json {
            cmd.arg("--json");
        }
        let output = cmd.arg("config").output().expect("runs");
        assert!(output.status.success());
        let shown = String::from_utf8_lossy(&output.stdout);
        assert!(!shown.contains(&password), "{shown}");
        assert!(shown.contains(":***@"), "{shown}");
    }

    // A daemon logging at debug: it works on the database, its log never holds the password.
    let daemon = Daemon::start(
        work.path(),
        &data,
        &crews,
        &[
            env[0],
            env[1],
            env[2],
            ("RUST_LOG", "debug,ort=warn,h2=info,tower=info,hyper=info"),
        ],
    );
    let mut cmd = orkeon(work.path(), &data);
    cmd.args(["--json", "rag", "--server", &daemon.url(), "collections"]);
    assert_eq!(run_json(&mut cmd), serde_json::json!([]));
    let log = daemon.log();
    drop(daemon);
    assert!(log.contains("PostgreSQL store open"), "{log}");
    assert!(!log.contains(&password), "the daemon logged the password");

    // A refused login: the error names the setting, and neither password.
    let wrong = secret_url.replace(&format!(":{password}@"), ":wrong-Pa55word@");
    let mut cmd = orkeon(work.path(), &data);
    on(&mut cmd);
    cmd.env("ORKEON_RAG__STORE__POSTGRES__URL", &wrong)
        .args(["rag", "collections"]);
    let stderr = String::from_utf8_lossy(&run_failing(&mut cmd).stderr).to_string();
    assert!(stderr.contains("rag.store.postgres.url"), "{stderr}");
    assert!(stderr.contains("refused the login"), "{stderr}");
    assert!(!stderr.contains("wrong-Pa55word"), "{stderr}");
    assert!(!stderr.contains(&password), "{stderr}");

    // An unreachable server: the error names the setting and the address, never the password;
    // and there is no silent fallback to the embedded store.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = closed.local_addr().expect("addr").to_string();
    drop(closed);
    let mut cmd = orkeon(work.path(), &data);
    on(&mut cmd);
    cmd.env(
        "ORKEON_RAG__STORE__POSTGRES__URL",
        with_address(&secret_url, &dead),
    )
    .args(["rag", "collections"]);
    let stderr = String::from_utf8_lossy(&run_failing(&mut cmd).stderr).to_string();
    assert!(stderr.contains("rag.store.postgres.url"), "{stderr}");
    assert!(stderr.contains(&dead), "{stderr}");
    assert!(stderr.contains("does not fall back"), "{stderr}");
    assert!(!stderr.contains(&password), "{stderr}");
    assert!(!data.join("sled").exists(), "an embedded store was opened");
}

const RETURNS: &str = "# Returns\n\nYou can return a bike within 30 days of delivery for a full refund. \
The bike must be unused and in its original packaging.\n";
const SHIPPING: &str = "# Shipping\n\nOrders ship from Lyon within 2 business days. Express delivery \
costs 19 euros and arrives the next day in France.\n";

/// Retrieve over gRPC in `mode`; the answer's citations.
async fn retrieve(
    client: &mut KnowledgeServiceClient<tonic::transport::Channel>,
    query: &str,
    mode: pb::SearchMode,
) -> Vec<pb::Citation> {
    client
        .retrieve(pb::QueryRequest {
            collection: "notes".into(),
            query: query.into(),
            profile: "fast".into(),
            top_n: 3,
            mode: mode as i32,
        })
        .await
        .unwrap_or_else(|status| panic!("retrieve ({mode:?}): {status}"))
        .into_inner()
        .citations
}

/// Both questions, every mode: the right source first, with offsets into its text.
async fn retrieves_the_right_sources(
    client: &mut KnowledgeServiceClient<tonic::transport::Channel>,
) {
    for mode in [
        pb::SearchMode::Vector,
        pb::SearchMode::Bm25,
        pb::SearchMode::Hybrid,
    ] {
        for (query, source, text, phrase) in [
            (
                "How many days do I have to return a bike?",
                "returns.md",
                RETURNS,
                "30 days",
            ),
            (
                "How much does express delivery cost?",
                "shipping.md",
                SHIPPING,
                "19 euros",
            ),
        ] {
            let citations = retrieve(client, query, mode).await;
            let top = citations
                .first()
                .unwrap_or_else(|| panic!("no citation for {query:?} ({mode:?})"));
            assert!(top.source_id.ends_with(source), "{mode:?}: {citations:?}");
            let cited = &text[top.start as usize..top.end as usize];
            assert!(cited.contains(phrase), "{mode:?}: {cited:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_ingests_and_retrieves_over_grpc_on_postgres() {
    let Some(store) = Store::postgres("grpc_knowledge") else {
        return;
    };
    let Store::Postgres(pg) = &store else {
        unreachable!()
    };
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    let notes = crews.join("notes");
    fs::create_dir_all(&notes).expect("mkdir");
    fs::write(notes.join("returns.md"), RETURNS).expect("write");
    fs::write(notes.join("shipping.md"), SHIPPING).expect("write");
    let data = work.path().join("data");
    let daemon = Daemon::start_on(work.path(), &data, &crews, &[], &store);
    let mut client = KnowledgeServiceClient::connect(daemon.url())
        .await
        .expect("connect");

    let report = client
        .ingest(pb::IngestRequest {
            collection: "notes".into(),
            sources: ["returns.md", "shipping.md"]
                .iter()
                .map(|name| notes.join(name).display().to_string())
                .collect(),
            ..Default::default()
        })
        .await
        .expect("ingest")
        .into_inner();
    assert_eq!((report.sources_total, report.sources_ingested), (2, 2));
    assert!(report.chunks_upserted >= 2, "{report:?}");
    retrieves_the_right_sources(&mut client).await;

    let collections = client
        .list_collections(pb::ListCollectionsRequest::default())
        .await
        .expect("collections")
        .into_inner()
        .collections;
    assert_eq!(collections.len(), 1, "{collections:?}");
    assert_eq!(collections[0].name, "notes");
    assert_eq!(collections[0].provider, "postgres");
    assert_eq!(collections[0].sources, 2);

    // The chunks are rows in the test schema, and the data folder holds no embedded store.
    if let Some(output) = pg.psql(&format!(
        "SELECT count(*) FROM {}.chunks c JOIN {0}.collections k ON k.id = c.collection_id WHERE k.name = 'notes'",
        pg.schema
    )) {
        assert!(output.status.success(), "{output:?}");
        let rows: u64 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("a count");
        assert_eq!(rows, report.chunks_upserted, "chunk rows in {}", pg.schema);
    }
    assert!(!data.join("sled").exists(), "an embedded store was opened");
    drop(client);
    let status = daemon.terminate();
    assert!(status.success(), "daemon exit: {status}");

    // Another daemon with an empty data folder, on the same database: it serves the same
    // collection.
    let other = work.path().join("other-data");
    let daemon = Daemon::start_on(work.path(), &other, &crews, &[], &store);
    let mut client = KnowledgeServiceClient::connect(daemon.url())
        .await
        .expect("connect");
    retrieves_the_right_sources(&mut client).await;
    drop(daemon);
}

#[test]
fn the_postgres_provider_without_a_url_is_refused_naming_the_setting() {
    let work = tempfile::tempdir().expect("tempdir");
    let data = work.path().join("data");
    let crews = work.path().join("crews");
    fs::create_dir_all(&crews).expect("mkdir");
    for args in [
        vec!["rag", "collections"],
        vec!["daemon", "--listen", "127.0.0.1:0", "--crews"],
    ] {
        let mut cmd = orkeon(work.path(), &data);
        cmd.env("ORKEON_RAG__STORE__PROVIDER", "postgres")
            .env_remove("ORKEON_RAG__STORE__POSTGRES__URL")
            .args(&args);
        if args[0] == "daemon" {
            cmd.arg(&crews);
        }
        let output = run_failing(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("rag.store.postgres.url"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("required"), "{args:?}: {stderr}");
        assert!(
            !data.join("sled").exists(),
            "{args:?}: an embedded store was opened"
        );
    }
}

/// `orkeon db status` on a fresh schema: version 0, one pending migration, a failing exit (the
/// schema needs work) and nothing created; `orkeon db migrate` applies it; `status` then
/// succeeds. On the embedded store `status` says there is no schema and `migrate` refuses.
#[test]
fn db_status_shows_pending_migrations_and_db_migrate_applies_them() {
    let Some(store) = Store::postgres("db_migrate") else {
        return;
    };
    let Store::Postgres(pg) = &store else {
        unreachable!("Store::postgres gives a PostgreSQL store")
    };
    let work = tempfile::tempdir().expect("tempdir");
    let data = work.path().join("data");

    let output = orkeon_on(work.path(), &data, &store)
        .args(["--json", "db", "status"])
        .output()
        .expect("runs");
    assert!(
        !output.status.success(),
        "pending migrations must fail status"
    );
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(status["provider"], "postgres");
    assert_eq!(status["schema"], pg.schema.as_str());
    assert_eq!(status["version"], 0);
    assert_eq!(status["pending"], status["supported"]);
    assert!(status["migrations"][0]["applied_at"].is_null(), "{status}");
    assert!(
        status["pgvector"]
            .as_str()
            .is_some_and(|v| v.starts_with("0.8")),
        "{status}"
    );
    // Nothing was created by reading the status (psql is known under scripts/test-postgres).
    if let Some(tables) = pg.psql(&format!(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = '{}'",
        pg.schema
    )) {
        assert_eq!(
            String::from_utf8_lossy(&tables.stdout).trim(),
            "0",
            "status created tables"
        );
    }

    let migrated =
        run_json(orkeon_on(work.path(), &data, &store).args(["--json", "db", "migrate"]));
    assert_eq!(migrated["version"], migrated["supported"]);
    assert_eq!(migrated["pending"], 0);
    assert!(
        migrated["migrations"][0]["applied_at"].is_string(),
        "{migrated}"
    );

    let again = run_json(orkeon_on(work.path(), &data, &store).args(["--json", "db", "status"]));
    assert_eq!(again["pending"], 0);
    assert_eq!(again["version"], migrated["version"]);

    let embedded = run_json(orkeon(work.path(), &data).args(["--json", "db", "status"]));
    assert_eq!(embedded["provider"], "embedded");
    let refused = run_failing(orkeon(work.path(), &data).args(["db", "migrate"]));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("rag.store.provider"), "{stderr}");
}

/// A TCP relay between the daemon and the test server that can cut the database off: while
/// down it resets every relayed connection and every new one.
struct Relay {
    address: String,
    down: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        let down = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        {
            let (down, open) = (down.clone(), open.clone());
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { continue };
                    if down.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        continue;
                    };
                    for stream in [&client, &server] {
                        if let Ok(copy) = stream.try_clone() {
                            open.lock().expect("lock").push(copy);
                        }
                    }
                    pipe(&client, &server);
                    pipe(&server, &client);
                }
            });
        }
        Relay {
            address,
            down,
            open,
        }
    }

    fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for stream in self.open.lock().expect("lock").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread until either side closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// The daemon's overall gRPC health status.
async fn health(url: &str) -> Option<i32> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let channel = tonic::transport::Channel::from_shared(url.to_string())
        .ok()?
        .connect()
        .await
        .ok()?;
    let mut client = HealthClient::new(channel);
    let reply = client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .ok()?;
    Some(reply.into_inner().status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_serving_while_the_database_is_unreachable_and_recovers() {
    use tonic_health::ServingStatus;
    let Some(store) = Store::postgres("health_dependency") else {
        return;
    };
    let Store::Postgres(pg) = &store else {
        unreachable!()
    };
    let relay = Relay::start(address(&pg.url));
    let relayed = with_address(&pg.url, &relay.address);
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    fs::create_dir_all(&crews).expect("mkdir");
    let mut env = store.env();
    for (key, value) in env.iter_mut() {
        if key == "ORKEON_RAG__STORE__POSTGRES__URL" {
            *value = relayed.clone();
        }
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let daemon = Daemon::start(work.path(), &work.path().join("data"), &crews, &env);
    let url = daemon.url();
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;

    let wait_for = |want: i32| {
        let url = url.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                if health(&url).await == Some(want) {
                    return true;
                }
                if tokio::time::Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(wait_for(serving).await, "not SERVING at start");

    relay.cut();
    assert!(
        wait_for(not_serving).await,
        "health stayed SERVING with the database cut off; log:\n{}",
        daemon.log()
    );
    // A request meanwhile fails with an error naming the database, and the daemon lives on.
    let mut cmd = orkeon(work.path(), &work.path().join("data"));
    cmd.args(["rag", "--server", &url, "collections"]);
    let stderr = String::from_utf8_lossy(&run_failing(&mut cmd).stderr).to_string();
    assert!(stderr.contains("PostgreSQL"), "{stderr}");

    relay.restore();
    assert!(
        wait_for(serving).await,
        "health did not recover after the database came back; log:\n{}",
        daemon.log()
    );
    let listed = eventually(Duration::from_secs(10), || {
        let mut cmd = orkeon(work.path(), &work.path().join("data"));
        cmd.args(["--json", "rag", "--server", &url, "collections"]);
        cmd.output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
    });
    assert_eq!(listed.as_deref().map(str::trim), Some("[]"));
    let log = daemon.log();
    assert!(log.contains("the database is unreachable"), "{log}");
    assert!(log.contains("reachable again"), "{log}");
    drop(daemon);
}
