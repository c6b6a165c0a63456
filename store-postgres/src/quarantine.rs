//! The [`QuarantineStore`] port on PostgreSQL: the `quarantine` table, one row per
//! (collection, source id), the latest verdict wins (`ON CONFLICT … DO UPDATE`). Writes are
//! committed when `put` returns. The excerpt is stored as UTF-8 bytes (`bytea`): rejected
//! content may hold NUL characters, which PostgreSQL's `text` refuses.

use std::sync::Arc;

use orkeon_knowledge::validate::quarantine::log_quarantined;
use orkeon_knowledge::validate::{QuarantineEntry, QuarantineStore, ValidateError};
use tokio_postgres::Row;

use orkeon_knowledge::store::StoreError;

use crate::{Shared, connection, db_error};

/// The quarantine of a [`crate::PostgresStore`].
pub(crate) struct PostgresQuarantine {
    shared: Arc<Shared>,
}

impl PostgresQuarantine {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn call<T, Fut>(
        &self,
        action: &'static str,
        work: impl FnOnce(Arc<Shared>) -> Fut,
    ) -> Result<T, ValidateError>
    where
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        let shared = self.shared.clone();
        self.shared
            .run(work(shared))
            .map_err(|error| ValidateError::Store {
                action,
                source: Box::new(error),
            })
    }
}

const COLUMNS: &str = "collection, source_id, reason, content_hash, quarantined_at, excerpt";

fn entry_of(row: &Row) -> QuarantineEntry {
    QuarantineEntry {
        collection: row.get(0),
        source_id: row.get(1),
        reason: row.get(2),
        content_hash: row.get(3),
        quarantined_at: row.get(4),
        excerpt: String::from_utf8_lossy(row.get::<_, &[u8]>(5)).into_owned(),
    }
}

impl QuarantineStore for PostgresQuarantine {
    fn put(&self, entry: &QuarantineEntry) -> Result<(), ValidateError> {
        let owned = entry.clone();
        self.call("put", |shared| async move {
            let client = connection(&shared.pool).await?;
            client
                .execute(
                    &format!(
                        "INSERT INTO quarantine ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
                         ON CONFLICT (collection, source_id) DO UPDATE SET
                             reason = excluded.reason, content_hash = excluded.content_hash,
                             quarantined_at = excluded.quarantined_at, excerpt = excluded.excerpt"
                    ),
                    &[
                        &owned.collection,
                        &owned.source_id,
                        &owned.reason,
                        &owned.content_hash,
                        &owned.quarantined_at,
                        &owned.excerpt.as_bytes(),
                    ],
                )
                .await
                .map_err(|e| db_error("quarantine", e))?;
            Ok(())
        })?;
        log_quarantined(entry);
        Ok(())
    }

    fn get(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Option<QuarantineEntry>, ValidateError> {
        let (collection, source) = (collection.to_string(), source_id.to_string());
        self.call("get", |shared| async move {
            let client = connection(&shared.pool).await?;
            let row = client
                .query_opt(
                    &format!(
                        "SELECT {COLUMNS} FROM quarantine WHERE collection = $1 AND source_id = $2"
                    ),
                    &[&collection, &source],
                )
                .await
                .map_err(|e| db_error("quarantine", e))?;
            Ok(row.as_ref().map(entry_of))
        })
    }

    fn list(&self, collection: Option<&str>) -> Result<Vec<QuarantineEntry>, ValidateError> {
        let collection = collection.map(str::to_string);
        self.call("list", |shared| async move {
            let client = connection(&shared.pool).await?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM quarantine
                         WHERE $1::text IS NULL OR collection = $1
                         ORDER BY collection, source_id"
                    ),
                    &[&collection],
                )
                .await
                .map_err(|e| db_error("quarantine", e))?;
            Ok(rows.iter().map(entry_of).collect())
        })
    }

    fn remove(&self, collection: &str, source_id: &str) -> Result<(), ValidateError> {
        let (collection, source) = (collection.to_string(), source_id.to_string());
        self.call("remove", |shared| async move {
            let client = connection(&shared.pool).await?;
            client
                .execute(
                    "DELETE FROM quarantine WHERE collection = $1
                     AND (source_id = $2 OR starts_with(source_id, $2 || '#'))",
                    &[&collection, &source],
                )
                .await
                .map_err(|e| db_error("quarantine", e))?;
            Ok(())
        })
    }
}
