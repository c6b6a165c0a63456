//! The storage provider of one process, chosen by `rag.store.provider`: documents, the
//! quarantine and runs as the ports the rest of the daemon speaks ([`DocumentStore`],
//! [`QuarantineStore`], [`RunStore`]), opened either on the embedded store in `data_dir` (sled +
//! tantivy + vector snapshots) or on PostgreSQL + pgvector (`rag.store.postgres`, the
//! `orkeon-store-postgres` crate). No fallback: a PostgreSQL that cannot be opened is an error
//! naming the setting to fix, never a quiet switch to the data folder.
//!
//! What only one provider has (flushing sled, pinging the database) is reached through
//! [`Storage`]'s own methods, so nothing above this module names a concrete store.

use std::sync::Arc;

use anyhow::Context;
use orkeon_crews::run::store::RunStore;
use orkeon_knowledge::settings::StoreProvider;
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore, StoreError};
use orkeon_knowledge::validate::QuarantineStore;
use orkeon_store_postgres::PostgresStore;

use crate::config::Config;

/// The concrete store behind the ports.
enum Backend {
    Embedded(Arc<EmbeddedStore>),
    /// The ports hold clones of the same pool.
    Postgres(PostgresStore),
}

/// Documents, quarantine and runs of one process, on the configured provider.
pub struct Storage {
    pub documents: Arc<dyn DocumentStore>,
    pub quarantine: Arc<dyn QuarantineStore>,
    pub runs: Arc<dyn RunStore>,
    backend: Backend,
    /// Where the data lives, for listings and messages (never a password).
    location: String,
}

impl Storage {
    /// Opens the configured provider: the embedded store under `data_dir` (created when
    /// missing), or the PostgreSQL database (schema created or migrated).
    pub fn open(config: &Config) -> anyhow::Result<Self> {
        match config.rag.store.provider {
            StoreProvider::Embedded => Self::open_embedded(config),
            StoreProvider::Postgres => Self::open_postgres(config),
        }
    }

    fn open_embedded(config: &Config) -> anyhow::Result<Self> {
        let data_dir = &config.data_dir;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
        let store = Arc::new(
            EmbeddedStore::open(data_dir, config.rag.store.clone()).with_context(|| {
                format!(
                    "cannot open the store in {} (is another orkeon process using it?)",
                    data_dir.display()
                )
            })?,
        );
        let quarantine = store.quarantine().context("cannot open the quarantine")?;
        let runs = Arc::new(store.run_store().context("cannot open the run store")?);
        Ok(Self {
            documents: store.clone() as Arc<dyn DocumentStore>,
            quarantine,
            runs,
            location: data_dir.display().to_string(),
            backend: Backend::Embedded(store),
        })
    }

    fn open_postgres(config: &Config) -> anyhow::Result<Self> {
        let settings = &config.rag.store;
        let store = PostgresStore::open(settings).context(
            "cannot open the PostgreSQL store (rag.store.provider: postgres; the daemon does not fall back to the embedded store)",
        )?;
        Ok(Self {
            documents: Arc::new(store.clone()) as Arc<dyn DocumentStore>,
            quarantine: store.quarantine(),
            runs: Arc::new(store.run_store()),
            location: format!("{} schema {}", store.describe(), settings.postgres.schema),
            backend: Backend::Postgres(store),
        })
    }

    /// Where the data lives: the data folder, or `user@host:port/database schema S` (never the
    /// password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Makes everything written durable: flushes sled (every PostgreSQL commit already is).
    pub fn flush(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(store) => store.flush(),
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Whether the store can serve now: always for the embedded store; for PostgreSQL, one
    /// round trip on a pooled connection (bounded by a timeout).
    pub fn check_reachable(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(_) => Ok(()),
            Backend::Postgres(store) => store.ping(),
        }
    }

    /// Whether this provider depends on something outside the process that can go away.
    pub fn has_remote_dependency(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Probes the database for as long as the process lives, calling `on_change(reachable)` at
    /// the first probe and at every change: every [`PROBE_INTERVAL`] while it answers, with a
    /// doubling backoff (from [`RETRY_FIRST`] up to [`RETRY_MAX`]) while it does not. The pool
    /// replaces broken connections, so recovery needs no restart. Returns at once for the
    /// embedded store (nothing to watch).
    pub async fn monitor<F, Fut>(self: Arc<Self>, on_change: F)
    where
        F: Fn(bool) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        if !self.has_remote_dependency() {
            return;
        }
        let mut last: Option<bool> = None;
        let mut backoff = RETRY_FIRST;
        loop {
            let storage = self.clone();
            let result = tokio::task::spawn_blocking(move || storage.check_reachable())
                .await
                .unwrap_or_else(|join| {
                    Err(StoreError::Io(format!("the health probe failed: {join}")))
                });
            let reachable = result.is_ok();
            if last != Some(reachable) {
                match &result {
                    Ok(()) if last.is_some() => {
                        tracing::info!(store = %self.location, "the database is reachable again; serving")
                    }
                    Ok(()) => {}
                    Err(error) => tracing::warn!(
                        store = %self.location,
                        %error,
                        "the database is unreachable; health is NOT_SERVING, retrying with backoff"
                    ),
                }
                on_change(reachable).await;
                last = Some(reachable);
            }
            let wait = if reachable {
                backoff = RETRY_FIRST;
                PROBE_INTERVAL
            } else {
                let wait = backoff;
                backoff = (backoff * 2).min(RETRY_MAX);
                wait
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// How often a reachable database is probed.
const PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// First and longest wait between probes of an unreachable database (doubling in between).
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(250);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(8);
