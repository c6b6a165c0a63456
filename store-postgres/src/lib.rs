//! Orkeon's storage provider on PostgreSQL + pgvector: the knowledge crate's [`DocumentStore`]
//! and [`QuarantineStore`] ports and the crews crate's [`RunStore`] port over one connection
//! pool, passing the same conformance suites as the embedded store. Selected by
//! `rag.store.provider: postgres` (settings under `rag.store.postgres`).
//!
//! - [`bridge`]: why and how the synchronous ports drive the async driver (a private runtime).
//! - [`schema`]: the tables and their versioned migrations, applied on open.
//! - `documents`: collections, the manifest, chunks; vector (HNSW), lexical (`tsvector`) and
//!   hybrid search (reciprocal rank fusion inside one SQL statement).
//! - `quarantine`, `runs`: the other two ports.
//!
//! Crates: `tokio-postgres` (the maintained native async driver), `deadpool-postgres` (its
//! pool: small, tokio-native, statement cache per connection) and `pgvector` (the `vector`
//! type's binary encoding for `tokio-postgres`).

mod bridge;
mod connect;
mod documents;
mod quarantine;
mod runs;
pub mod schema;

use std::future::Future;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use orkeon_knowledge::settings::{StoreSettings, valid_schema_name};
use orkeon_knowledge::store::StoreError;
use tokio_postgres::NoTls;

pub use connect::redact_url;
pub use runs::PostgresRunStore;
pub use schema::{MigrationState, SCHEMA_VERSION, SchemaStatus};

use bridge::Bridge;
use connect::Target;

// For the doc links above.
#[allow(unused_imports)]
use {
    orkeon_crews::run::store::RunStore, orkeon_knowledge::store::DocumentStore,
    orkeon_knowledge::validate::QuarantineStore,
};

/// What every port of one store shares: the runtime, the pool and the settings.
pub(crate) struct Shared {
    pub pool: Pool,
    pub settings: StoreSettings,
    /// `user@host:port/database`, for messages (never the password).
    pub describe: String,
    /// This store's name on the runs it creates (`runs.owner`): unique per opened store.
    pub owner: String,
    /// How long a run stays claimed without a renewal (`postgres.lease_secs`).
    pub lease: std::time::Duration,
    /// The session of the run-notice listener (`LISTEN` needs its own connection).
    pub listen_config: tokio_postgres::Config,
    /// Run notices, once something asked for them (see `runs::listen`).
    pub notices:
        std::sync::OnceLock<tokio::sync::broadcast::Sender<orkeon_crews::run::store::RunNotice>>,
    /// Last: dropped after the pool, whose connections are tasks on it.
    bridge: Bridge,
}

impl Shared {
    /// Runs `future` on the store's runtime and waits for it (see [`bridge`]).
    pub(crate) fn run<F>(&self, future: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.bridge.run(future)
    }

    /// Runs `future` in the background on the store's runtime, for as long as the store lives.
    pub(crate) fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.bridge.spawn(future)
    }
}

/// A pooled connection, or an I/O error naming what failed.
pub(crate) async fn connection(pool: &Pool) -> Result<deadpool_postgres::Object, StoreError> {
    pool.get()
        .await
        .map_err(|e| StoreError::Io(format!("cannot get a PostgreSQL connection: {e}")))
}

/// A driver error during `what`.
pub(crate) fn db_error(what: &str, error: tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => StoreError::Io(format!(
            "PostgreSQL {what}: {} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        )),
        None => StoreError::Io(format!("PostgreSQL {what}: {error}")),
    }
}

/// The PostgreSQL store: documents (as [`DocumentStore`]), its [`PostgresStore::quarantine`] and
/// its [`PostgresStore::run_store`]. Cheap to clone; every clone shares one pool.
#[derive(Clone)]
pub struct PostgresStore {
    shared: Arc<Shared>,
}

impl PostgresStore {
    /// Connects with `settings.postgres`, creates the schema or migrates it, and opens a pool of
    /// `pool_size` connections whose search path is that schema. Errors name the setting to fix
    /// (never the password): an unreachable server or a refused login, a missing pgvector, a
    /// schema newer than this build.
    pub fn open(settings: &StoreSettings) -> Result<Self, StoreError> {
        let postgres = &settings.postgres;
        if !valid_schema_name(&postgres.schema) {
            return Err(StoreError::InvalidSetting {
                key: "postgres.schema",
                reason: format!(
                    "'{}' is not a valid schema name: use lowercase letters, digits and '_', starting with a letter or '_' (max 63)",
                    postgres.schema
                ),
            });
        }
        let target = Target::from_settings(postgres)?;
        let bridge = Bridge::new(2).map_err(|e| {
            StoreError::Io(format!("cannot start the PostgreSQL store's runtime: {e}"))
        })?;
        let schema = postgres.schema.clone();
        let setup = target.clone();
        let extension_schema = bridge.run(async move {
            let config = setup.with_session("public", 0);
            let (mut client, connection) = config
                .connect(NoTls)
                .await
                .map_err(|e| setup.connect_error(&e))?;
            let driver = tokio::spawn(connection);
            let result = async {
                let extension_schema = schema::ensure_pgvector(&client).await?;
                schema::migrate(&mut client, &schema, &extension_schema).await?;
                Ok::<_, StoreError>(extension_schema)
            }
            .await
            .map_err(|e| match e {
                StoreError::Io(message) => StoreError::Io(setup.scrub(&message)),
                other => other,
            });
            drop(client);
            let _ = driver.await;
            result
        })?;
        let search_path = format!("{},{extension_schema}", postgres.schema);
        let manager = Manager::from_config(
            target.with_session(&search_path, postgres.statement_timeout_ms),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(postgres.pool_size.max(1))
            .build()
            .map_err(|e| StoreError::InvalidSetting {
                key: "postgres.pool_size",
                reason: format!("cannot build the connection pool: {e}"),
            })?;
        tracing::info!(
            database = %target.describe,
            schema = %postgres.schema,
            version = SCHEMA_VERSION,
            "PostgreSQL store open"
        );
        let store = Self {
            shared: Arc::new(Shared {
                pool,
                settings: settings.clone(),
                describe: target.describe.clone(),
                owner: runs::new_owner(),
                lease: std::time::Duration::from_secs(postgres.lease_secs.max(1)),
                listen_config: target.with_session(&search_path, 0),
                notices: std::sync::OnceLock::new(),
                bridge,
            }),
        };
        let shared = store.shared.clone();
        store.shared.run(async move {
            let mut client = connection(&shared.pool).await?;
            documents::remove_unfinished_rebuilds(&mut client).await
        })?;
        store.shared.spawn(runs::keep_leases(
            store.shared.pool.clone(),
            postgres.schema.clone(),
            store.shared.owner.clone(),
            store.shared.lease,
        ));
        Ok(store)
    }

    /// The quarantine in this store's database.
    pub fn quarantine(&self) -> Arc<dyn QuarantineStore> {
        Arc::new(quarantine::PostgresQuarantine::new(self.shared.clone()))
    }

    /// The run store in this store's database.
    pub fn run_store(&self) -> PostgresRunStore {
        PostgresRunStore::new(self.shared.clone())
    }

    /// The schema's migration state (`orkeon db status`), read on one connection of the pool.
    pub fn schema_status(&self) -> Result<SchemaStatus, StoreError> {
        let shared = self.shared.clone();
        self.shared.run(async move {
            let client = connection(&shared.pool).await?;
            schema::status(
                &client,
                shared.describe.clone(),
                &shared.settings.postgres.schema,
            )
            .await
        })
    }

    /// `user@host:port/database` of the server (never the password).
    pub fn describe(&self) -> &str {
        &self.shared.describe
    }

    /// One round trip on a pooled connection, within [`PING_TIMEOUT`]: whether the database
    /// answers now. A connection broken by a server restart is replaced by the pool, so this
    /// turns healthy again by itself once the server is back.
    pub fn ping(&self) -> Result<(), StoreError> {
        let shared = self.shared.clone();
        self.shared.run(async move {
            let probe = async {
                let client = connection(&shared.pool).await?;
                client
                    .simple_query("SELECT 1")
                    .await
                    .map_err(|e| db_error("answering a health probe", e))?;
                Ok(())
            };
            match tokio::time::timeout(PING_TIMEOUT, probe).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Io(format!(
                    "PostgreSQL at {} did not answer a health probe within {} s",
                    shared.describe,
                    PING_TIMEOUT.as_secs()
                ))),
            }
        })
    }
}

/// The schema's migration state without opening a store, so without migrating anything
/// (`orkeon db status`): errors name the setting to fix, never the password.
pub fn schema_status(settings: &StoreSettings) -> Result<SchemaStatus, StoreError> {
    let postgres = &settings.postgres;
    if !valid_schema_name(&postgres.schema) {
        return Err(StoreError::InvalidSetting {
            key: "postgres.schema",
            reason: format!("'{}' is not a valid schema name", postgres.schema),
        });
    }
    let target = Target::from_settings(postgres)?;
    let bridge = Bridge::new(1)
        .map_err(|e| StoreError::Io(format!("cannot start the PostgreSQL store's runtime: {e}")))?;
    let schema = postgres.schema.clone();
    bridge.run(async move {
        let config = target.with_session("public", STATUS_TIMEOUT_MS);
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| target.connect_error(&e))?;
        let driver = tokio::spawn(connection);
        let result = schema::status(&client, target.describe.clone(), &schema)
            .await
            .map_err(|e| match e {
                StoreError::Io(message) => StoreError::Io(target.scrub(&message)),
                other => other,
            });
        drop(client);
        let _ = driver.await;
        result
    })
}

/// The statement timeout of a status read, in milliseconds.
const STATUS_TIMEOUT_MS: u64 = 30_000;

/// How long [`PostgresStore::ping`] waits for the database.
pub const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
