//! `orkeon db migrate | status`: the storage provider's schema. On PostgreSQL, `status` reads
//! the applied and pending migrations without changing anything, and `migrate` applies the
//! missing ones (what every daemon also does when it opens the store). The embedded store has
//! no schema to migrate: `status` says so, `migrate` refuses naming the setting.

use clap::Subcommand;
use orkeon_knowledge::settings::StoreProvider;
use orkeon_store_postgres::{PostgresStore, SchemaStatus};

use crate::config::Config;
use crate::output::Output;

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create the schema or apply the migrations it lacks (PostgreSQL).
    Migrate,
    /// Show the provider, the schema version and every migration (applied or pending).
    Status,
}

/// Runs a `db` command; `Ok(false)` when the schema needs work the command did not do (status
/// with pending migrations or a schema newer than this build).
pub async fn run(command: DbCommand, config: Config, out: &Output) -> anyhow::Result<bool> {
    let settings = config.rag.store.clone();
    if settings.provider == StoreProvider::Embedded {
        return match command {
            DbCommand::Status => {
                let value = serde_json::json!({
                    "provider": "embedded",
                    "location": config.data_dir.display().to_string(),
                    "migrations": "none: the embedded store has no schema (its indexes are rebuilt on open when they lag)",
                });
                if out.json {
                    out.print_json(&value)?;
                } else {
                    println!(
                        "provider: embedded ({})\nno schema to migrate: the embedded store's indexes are rebuilt on open when they lag",
                        config.data_dir.display()
                    );
                }
                Ok(true)
            }
            DbCommand::Migrate => anyhow::bail!(
                "orkeon db migrate applies to rag.store.provider: postgres; this configuration uses the embedded store, which has no schema"
            ),
        };
    }
    let status = match command {
        DbCommand::Status => {
            tokio::task::spawn_blocking(move || orkeon_store_postgres::schema_status(&settings))
                .await??
        }
        DbCommand::Migrate => {
            tokio::task::spawn_blocking(move || {
                let store = PostgresStore::open(&settings)?;
                store.schema_status()
            })
            .await??
        }
    };
    print_status(&status, out)?;
    Ok(status.pending() == 0 && status.version <= status.supported)
}

fn print_status(status: &SchemaStatus, out: &Output) -> anyhow::Result<()> {
    if out.json {
        let mut value = serde_json::to_value(status)?;
        value["provider"] = "postgres".into();
        value["pending"] = status.pending().into();
        return out.print_json(&value);
    }
    println!("provider: postgres");
    println!("database: {}", status.database);
    println!("schema:   {}", status.schema);
    println!("server:   {}", status.server_version);
    println!(
        "pgvector: {}",
        status.pgvector.as_deref().unwrap_or("not installed")
    );
    println!(
        "version:  {} (this build knows up to {})",
        status.version, status.supported
    );
    for migration in &status.migrations {
        println!(
            "  {:>3}  {:<40} {}",
            migration.version,
            migration.description,
            migration.applied_at.as_deref().unwrap_or("pending")
        );
    }
    if status.version > status.supported {
        println!(
            "the schema is newer than this build: upgrade orkeon, or point rag.store.postgres.schema at another schema"
        );
    } else if status.pending() > 0 {
        println!(
            "{} migration(s) pending: run `orkeon db migrate` (a daemon applies them when it starts)",
            status.pending()
        );
    }
    Ok(())
}
