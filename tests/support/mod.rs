//! Shared helpers of the end-to-end tests: the real `orkeon` binary on real files, and a real
//! daemon on a loopback port.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A product FAQ in three sections, the knowledge of [`SUPPORT_CREW`]'s collection.
pub const SUPPORT_FAQ: &str = "# Returns\n\nYou can return a bike within 30 days of delivery for a full refund.\n\n\
# Warranty\n\nFrames carry a lifetime warranty; components are covered for two years.\n\n\
# Shipping\n\nOrders ship from Lyon within 2 business days.\n";

/// Returns and warranty, in two sections.
pub const RETURNS_FAQ: &str = "# Returns\n\nYou can return a bike within 30 days of delivery for a full refund. \
The bike must be unused and in its original packaging.\n\n# Warranty\n\nFrames carry a lifetime \
warranty; components are covered for two years.\n";

/// A shipping page, a second source beside [`RETURNS_FAQ`].
pub const SHIPPING_FAQ: &str = "# Shipping\n\nOrders ship from Lyon within 2 business days. Express delivery \
costs 19 euros and arrives the next day in France.\n";

/// A one-section warranty page (the Pebble S).
pub const PEBBLE_FAQ: &str = "# Warranty\n\nEvery Pebble S carries a two-year warranty against \
manufacturing defects. Batteries are covered for one year.\n";

/// A one-agent crew (offline extractive model) answering from `kb/*.md` beside it.
pub const SUPPORT_CREW: &str = r#"name: support
process: sequential
llm: { provider: extractive }
rag:
  collections:
    product-kb:
      sources: ["kb/*.md"]
agents:
  support:
    role: Support agent
    goal: Answer from the knowledge base
    knowledge: [product-kb]
tasks:
  - name: answer
    agent: support
    description: "Answer the customer: {{ inputs.question }}"
    expected_output: A short answer with [n] citations
"#;

/// A fresh work folder whose `crews/knowledge` is a copy of `examples/crews/knowledge`:
/// (the folder, its `crews`).
pub fn crews_with_example_knowledge() -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    copy_tree(
        &repo().join("examples/crews/knowledge"),
        &crews.join("knowledge"),
    );
    (work, crews)
}

/// The models folder (`ORKEON_MODELS_DIR`, else `../shared/models`).
pub fn models_dir() -> PathBuf {
    std::env::var_os("ORKEON_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models")))
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `orkeon` with a private data dir, the shared models, in `cwd`.
pub fn orkeon(cwd: &Path, data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orkeon"));
    cmd.current_dir(cwd)
        .env("ORKEON_MODELS_DIR", models_dir())
        .env_remove("RUST_LOG")
        .arg("--data-dir")
        .arg(data_dir);
    cmd
}

/// Runs and parses stdout as JSON, failing with both streams on a non-zero exit.
pub fn run_json(cmd: &mut Command) -> serde_json::Value {
    let output = cmd.output().expect("orkeon runs");
    assert!(
        output.status.success(),
        "orkeon failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Runs expecting failure; returns the output.
pub fn run_failing(cmd: &mut Command) -> Output {
    let output = cmd.output().expect("orkeon runs");
    assert!(
        !output.status.success(),
        "orkeon unexpectedly succeeded:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    output
}

/// A daemon on 127.0.0.1:<ephemeral>.
pub struct Daemon {
    pub child: Child,
    pub addr: String,
    pub stderr_log: PathBuf,
}

impl Daemon {
    /// Starts `orkeon daemon` and waits for its "listening" line.
    pub fn start(cwd: &Path, data_dir: &Path, crews: &Path, extra_env: &[(&str, &str)]) -> Daemon {
        let stderr_log = data_dir.with_extension("daemon.log");
        let log = std::fs::File::create(&stderr_log).expect("log file");
        let mut cmd = orkeon(cwd, data_dir);
        cmd.arg("daemon")
            .arg("--crews")
            .arg(crews)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("daemon starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(addr) = line.strip_prefix("orkeon listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "daemon did not start; log:\n{}",
                    std::fs::read_to_string(&stderr_log).unwrap_or_default()
                );
            }
        };
        Daemon {
            child,
            addr,
            stderr_log,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg("-TERM").arg(&pid).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("daemon did not stop after SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it returns Some or the deadline passes.
pub fn eventually<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Copies a folder tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The storage provider a test's commands and daemons use: the embedded store in their data
/// folder, or a fresh schema on the PostgreSQL test server (`scripts/test-postgres start`
/// prints `ORKEON_TEST_PG_URL`, `ORKEON_TEST_PG_PASSWORD`, `ORKEON_TEST_PG_BIN`).
pub enum Store {
    Embedded,
    Postgres(PgSchema),
}

/// A schema of its own on the test server, dropped with everything in it when the test ends.
pub struct PgSchema {
    pub url: String,
    pub schema: String,
}

/// The environment variable holding the test server's password (never a configuration key).
pub const PG_PASSWORD_VAR: &str = "ORKEON_TEST_PG_PASSWORD";

impl Store {
    /// A fresh schema on the test server, or `None` after a loud skip line when none is
    /// configured — unless `ORKEON_REQUIRE_PG=1` (CI), where a missing server fails the test.
    pub fn postgres(test: &str) -> Option<Store> {
        let url = match std::env::var("ORKEON_TEST_PG_URL") {
            Ok(url) if !url.trim().is_empty() => url,
            _ => {
                if std::env::var("ORKEON_REQUIRE_PG").is_ok_and(|v| v == "1") {
                    panic!(
                        "{test}: ORKEON_REQUIRE_PG=1 but ORKEON_TEST_PG_URL is not set; run `eval \"$(scripts/test-postgres start)\"` first"
                    );
                }
                eprintln!(
                    "\n*** SKIPPED {test} on PostgreSQL: ORKEON_TEST_PG_URL is not set (eval \"$(scripts/test-postgres start)\" to run it) ***\n"
                );
                return None;
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let short: String = test
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(30)
            .collect::<String>()
            .to_ascii_lowercase();
        Some(Store::Postgres(PgSchema {
            url,
            schema: format!("e2e_{short}_{}_{nanos}", std::process::id()),
        }))
    }

    /// The `ORKEON_*` configuration this provider needs.
    pub fn env(&self) -> Vec<(String, String)> {
        match self {
            Store::Embedded => Vec::new(),
            Store::Postgres(pg) => vec![
                ("ORKEON_RAG__STORE__PROVIDER".into(), "postgres".into()),
                ("ORKEON_RAG__STORE__POSTGRES__URL".into(), pg.url.clone()),
                (
                    "ORKEON_RAG__STORE__POSTGRES__PASSWORD_ENV".into(),
                    PG_PASSWORD_VAR.into(),
                ),
                (
                    "ORKEON_RAG__STORE__POSTGRES__SCHEMA".into(),
                    pg.schema.clone(),
                ),
            ],
        }
    }

    /// `provider` as `orkeon rag collections` names it.
    pub fn name(&self) -> &'static str {
        match self {
            Store::Embedded => "embedded",
            Store::Postgres(_) => "postgres",
        }
    }

    /// Applies [`Store::env`] to a command.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (key, value) in self.env() {
            cmd.env(key, value);
        }
        cmd
    }
}

impl PgSchema {
    /// Runs one SQL statement on the test server with `psql` (from `ORKEON_TEST_PG_BIN`);
    /// `None` when no psql is known.
    pub fn psql(&self, sql: &str) -> Option<Output> {
        let bin = std::env::var_os("ORKEON_TEST_PG_BIN")?;
        Command::new(PathBuf::from(bin).join("psql"))
            .arg(&self.url)
            .args(["-q", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env(
                "PGPASSWORD",
                std::env::var(PG_PASSWORD_VAR).unwrap_or_default(),
            )
            .output()
            .ok()
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // The name is ours (letters, digits, '_'): safe unquoted.
        let _ = self.psql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

/// `orkeon` like [`orkeon`], on `store`.
pub fn orkeon_on(cwd: &Path, data_dir: &Path, store: &Store) -> Command {
    let mut cmd = orkeon(cwd, data_dir);
    store.apply(&mut cmd);
    cmd
}

impl Daemon {
    /// [`Daemon::start`] on `store`.
    pub fn start_on(
        cwd: &Path,
        data_dir: &Path,
        crews: &Path,
        extra_env: &[(&str, &str)],
        store: &Store,
    ) -> Daemon {
        let env = store.env();
        let mut all: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra_env);
        Daemon::start(cwd, data_dir, crews, &all)
    }
}
