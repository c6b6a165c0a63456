//! The schema and its versioned migrations, applied by the store when it opens.
//!
//! Every table lives in the configured schema (`rag.store.postgres.schema`), so several
//! deployments — and each conformance check — can share one database. `schema_migrations`
//! records the versions applied; opening applies the missing ones in one transaction, under an
//! advisory lock per schema (several daemons starting at once migrate once), and refuses a
//! schema whose version is newer than this build knows.
//!
//! Version 1 (see [`V1`]):
//! - `collections`: one row per collection — name, embedding profile, and the source and chunk
//!   counts `commit_sources` keeps (so listing collections never counts rows).
//! - `sources`: the manifest, one row per (collection, source).
//! - `chunks`: every collection's chunks in one table — text, offsets, metadata (jsonb), content
//!   hash, the embedding as an untyped `vector`, and a generated `tsvector` (english) under one
//!   GIN index. pgvector's HNSW indexes need a fixed dimension, so each collection gets its own
//!   partial expression index, `USING hnsw ((embedding::vector(d)) vector_cosine_ops) WHERE
//!   collection_id = <id>`, created with the collection and dropped with it (see
//!   `documents.rs`): one graph per collection, of its own dimension, searched only by its own
//!   queries.
//! - `quarantine`: one row per (collection, source).
//! - `runs`, `run_events`, `run_keys`: run records (jsonb, with their state and last sequence
//!   number as columns), their events by (run, seq), and idempotency keys by (crew, key). `runs`
//!   also has `owner` and `lease_expires_at`: the lease of the daemon running it (see `runs`).
//! - `crew_definitions` (version 2): the content hash of each crew file each live daemon
//!   serves, by (crew, owner), renewed with the leases.
//!
//! Identifiers and ids compare bytewise (`COLLATE "C"`), as the embedded store orders them.

use orkeon_knowledge::store::StoreError;
use tokio_postgres::Client;

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i32 = 3;

/// The migrations, in order: (version, description, SQL run with the schema first on the
/// search path).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "documents, quarantine and runs", V1),
    (2, "crew definitions served by each daemon", V2),
    (3, "the fleet's shared run queue", V3),
];

/// Version 3: the shared queue. A fleet kickoff records its run `queued` with the crew file's
/// hash (`definition`) and no owner; a daemon serving that definition claims it.
pub const V3: &str = r#"
ALTER TABLE runs ADD COLUMN definition text;
CREATE INDEX runs_queued ON runs (run_id) WHERE state = 'queued';
"#;

/// Version 2: which definition (content hash of the crew file) each live daemon serves, so a
/// kickoff of a crew whose file differs between daemons is refused.
pub const V2: &str = r#"
CREATE TABLE crew_definitions (
    crew text COLLATE "C" NOT NULL,
    owner text NOT NULL,
    hash text NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (crew, owner)
);
"#;

/// Version 1.
pub const V1: &str = r#"
CREATE TABLE collections (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text COLLATE "C" NOT NULL UNIQUE,
    provider text NOT NULL,
    model text NOT NULL,
    dimensions integer NOT NULL CHECK (dimensions > 0),
    source_count bigint NOT NULL DEFAULT 0,
    chunk_count bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sources (
    collection_id bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    source_id text COLLATE "C" NOT NULL,
    content_hash text NOT NULL,
    loader text NOT NULL,
    chunking text NOT NULL,
    embedding_profile text NOT NULL,
    chunk_ids text[] NOT NULL,
    ingested_at text NOT NULL,
    validation text NOT NULL,
    stale text,
    PRIMARY KEY (collection_id, source_id)
);

CREATE TABLE chunks (
    collection_id bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    id text COLLATE "C" NOT NULL,
    source_id text COLLATE "C" NOT NULL,
    ordinal bigint NOT NULL,
    body text NOT NULL,
    start_offset bigint NOT NULL,
    end_offset bigint NOT NULL,
    metadata jsonb NOT NULL,
    content_hash text NOT NULL,
    embedding vector NOT NULL,
    lexemes tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, body)) STORED,
    PRIMARY KEY (collection_id, id)
);
CREATE INDEX chunks_by_source ON chunks (collection_id, source_id, ordinal);
CREATE INDEX chunks_lexemes ON chunks USING gin (lexemes);

CREATE TABLE quarantine (
    collection text COLLATE "C" NOT NULL,
    source_id text COLLATE "C" NOT NULL,
    reason text NOT NULL,
    content_hash text NOT NULL,
    quarantined_at text NOT NULL,
    -- UTF-8 bytes: an excerpt of rejected content may hold NUL, which `text` cannot.
    excerpt bytea NOT NULL,
    PRIMARY KEY (collection, source_id)
);

CREATE TABLE runs (
    run_id text COLLATE "C" PRIMARY KEY,
    crew text COLLATE "C" NOT NULL,
    state text NOT NULL,
    last_seq bigint NOT NULL DEFAULT 0,
    record jsonb NOT NULL,
    owner text,
    lease_expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_running ON runs (run_id) WHERE state = 'running';

CREATE TABLE run_events (
    run_id text COLLATE "C" NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    at text NOT NULL,
    event jsonb NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE run_keys (
    crew text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL
        REFERENCES runs (run_id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    PRIMARY KEY (crew, key)
);
"#;

/// The pgvector version this provider needs at least (HNSW iterative index scans).
const MIN_PGVECTOR: (u32, u32) = (0, 8);

fn io(context: &str, error: tokio_postgres::Error) -> StoreError {
    crate::db_error(context, error)
}

/// Makes sure pgvector is installed (creating it when the user may) and recent enough; returns
/// the schema it lives in.
pub(crate) async fn ensure_pgvector(client: &Client) -> Result<String, StoreError> {
    let installed = client
        .query_opt(
            "SELECT extversion, extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'",
            &[],
        )
        .await
        .map_err(|e| io("reading pg_extension", e))?;
    let row = match installed {
        Some(row) => row,
        None => {
            client
                .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
                .await
                .map_err(|e| StoreError::InvalidSetting {
                    key: "postgres.url",
                    reason: format!(
                        "the database has no pgvector extension and this user cannot create it ({e}); run `CREATE EXTENSION vector;` in it as a superuser (pgvector 0.8 or newer)"
                    ),
                })?;
            client
                .query_one(
                    "SELECT extversion, extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'",
                    &[],
                )
                .await
                .map_err(|e| io("reading pg_extension", e))?
        }
    };
    let version: String = row.get(0);
    let schema: String = row.get(1);
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found < MIN_PGVECTOR {
        return Err(StoreError::InvalidSetting {
            key: "postgres.url",
            reason: format!(
                "the database's pgvector is {version}; Orkeon needs {}.{} or newer (ALTER EXTENSION vector UPDATE)",
                MIN_PGVECTOR.0, MIN_PGVECTOR.1
            ),
        });
    }
    if schema.is_empty()
        || !schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(StoreError::InvalidSetting {
            key: "postgres.url",
            reason: format!(
                "pgvector is installed in the schema '{schema}'; Orkeon needs it in a schema with a plain name (letters, digits, '_'), e.g. public"
            ),
        });
    }
    Ok(schema)
}

/// Creates `schema` when missing and applies the migrations it lacks, in one transaction under
/// an advisory lock per schema. Returns the version the schema is at afterwards.
pub(crate) async fn migrate(
    client: &mut Client,
    schema: &str,
    extension_schema: &str,
) -> Result<i32, StoreError> {
    let transaction = client
        .transaction()
        .await
        .map_err(|e| io("starting the migration", e))?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('orkeon-schema-migrations:' || $1::text))",
            &[&schema],
        )
        .await
        .map_err(|e| io("locking the schema for migration", e))?;
    // `schema` is checked by `valid_schema_name` (`[a-z_][a-z0-9_]*`): safe unquoted.
    transaction
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             SET LOCAL search_path = {schema}, {extension_schema};
             CREATE TABLE IF NOT EXISTS schema_migrations (
                 version integer PRIMARY KEY,
                 description text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );"
        ))
        .await
        .map_err(|e| io(&format!("creating the schema {schema}"), e))?;
    let current: i32 = transaction
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(|e| io("reading schema_migrations", e))?
        .get(0);
    if current > SCHEMA_VERSION {
        return Err(StoreError::InvalidSetting {
            key: "postgres.schema",
            reason: format!(
                "the schema '{schema}' is at version {current}, newer than this orkeon build supports (version {SCHEMA_VERSION}); upgrade orkeon, or point rag.store.postgres.schema at another schema"
            ),
        });
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > current) {
        transaction
            .batch_execute(sql)
            .await
            .map_err(|e| io(&format!("applying migration {version} ({description})"), e))?;
        transaction
            .execute(
                "INSERT INTO schema_migrations (version, description) VALUES ($1, $2)",
                &[version, description],
            )
            .await
            .map_err(|e| io("recording a migration", e))?;
        tracing::info!(
            schema,
            version,
            description,
            "applied a PostgreSQL migration"
        );
    }
    transaction
        .commit()
        .await
        .map_err(|e| io("committing the migration", e))?;
    Ok(current.max(SCHEMA_VERSION))
}

/// One migration as `orkeon db status` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationState {
    pub version: i32,
    pub description: String,
    /// When it was applied (RFC 3339, the server's clock); `None`: pending.
    pub applied_at: Option<String>,
}

/// A schema's state, read without changing anything (`orkeon db status`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaStatus {
    /// `user@host:port/database` (never the password).
    pub database: String,
    pub schema: String,
    /// `SELECT version()` of the server.
    pub server_version: String,
    /// The installed pgvector version, if any.
    pub pgvector: Option<String>,
    /// The newest version applied (0: the schema has no Orkeon tables yet).
    pub version: i32,
    /// The newest version this build knows ([`SCHEMA_VERSION`]).
    pub supported: i32,
    /// Every migration this build knows, and any newer one the schema records.
    pub migrations: Vec<MigrationState>,
}

impl SchemaStatus {
    /// Migrations this build would apply.
    pub fn pending(&self) -> usize {
        self.migrations
            .iter()
            .filter(|m| m.applied_at.is_none())
            .count()
    }
}

/// Reads the state of `schema` on `client` (nothing is created or changed).
pub(crate) async fn status(
    client: &Client,
    database: String,
    schema: &str,
) -> Result<SchemaStatus, StoreError> {
    let server_version: String = client
        .query_one("SELECT version()", &[])
        .await
        .map_err(|e| io("reading the server version", e))?
        .get(0);
    let pgvector: Option<String> = client
        .query_opt(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
            &[],
        )
        .await
        .map_err(|e| io("reading pg_extension", e))?
        .map(|row| row.get(0));
    let table = format!("{schema}.schema_migrations");
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(|e| io("looking for schema_migrations", e))?
        .get(0);
    let mut applied: Vec<(i32, String, String)> = Vec::new();
    if exists {
        // `schema` is checked by `valid_schema_name`: safe unquoted.
        let rows = client
            .query(
                &format!(
                    "SELECT version, description, to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
                     FROM {schema}.schema_migrations ORDER BY version"
                ),
                &[],
            )
            .await
            .map_err(|e| io("reading schema_migrations", e))?;
        applied = rows
            .into_iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
    }
    let mut migrations: Vec<MigrationState> = MIGRATIONS
        .iter()
        .map(|(version, description, _)| MigrationState {
            version: *version,
            description: description.to_string(),
            applied_at: applied
                .iter()
                .find(|(v, _, _)| v == version)
                .map(|(_, _, at)| at.clone()),
        })
        .collect();
    for (version, description, at) in &applied {
        if !migrations.iter().any(|m| m.version == *version) {
            migrations.push(MigrationState {
                version: *version,
                description: description.clone(),
                applied_at: Some(at.clone()),
            });
        }
    }
    Ok(SchemaStatus {
        database,
        schema: schema.to_string(),
        server_version,
        pgvector,
        version: applied.iter().map(|(v, _, _)| *v).max().unwrap_or(0),
        supported: SCHEMA_VERSION,
        migrations,
    })
}
