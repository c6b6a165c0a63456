//! The [`DocumentStore`] port on PostgreSQL.
//!
//! Collections, the manifest (`sources`) and chunks live in the tables of [`crate::schema`].
//! Every write of a collection first locks its `collections` row, so writers of one collection
//! (in this process or another daemon) take turns; `commit_sources` is ONE transaction — the
//! manifest rows, the chunks, the removed chunks and the counts — so a reader (each search is
//! one statement, one snapshot) sees the batch whole or not at all.
//!
//! **Vectors.** pgvector's HNSW index needs one dimension per indexed column, and collections
//! have their own (`vector(384)`, `vector(1536)`, …). All chunks share one table with an untyped
//! `vector` column, and each collection gets a partial expression index
//! `USING hnsw ((embedding::vector(d)) vector_cosine_ops) WHERE collection_id = <id>`, created
//! by `ensure_collection` and dropped by `drop_collection`. Rather than one table per
//! collection, this keeps a single schema (one set of queries, foreign keys and migrations) while
//! each collection still has its own graph, searched only by its own queries — an index over
//! every collection filtered afterwards would lose recall. The planner uses such an index only
//! when the query repeats the expression and the predicate with the id as a literal, so the
//! collection's id and dimension (integers read from the database, never user text) are written
//! into the search SQL. Collections of more than 2 000 dimensions (pgvector's HNSW limit) are
//! scanned exactly.
//!
//! **Which vector search.** Like the embedded store, a collection smaller than
//! `rag.store.hnsw_threshold` chunks is scanned exactly (ties broken by id, deterministic);
//! from the threshold on the HNSW index answers, with `hnsw.ef_search` set per query
//! (`SET LOCAL`, from `rag.store.hnsw_ef_search`, raised to the depth the query needs, at most
//! pgvector's 1 000) and iterative scans in strict order, so a graph still holding rows of
//! replaced chunks returns as many live rows as asked.
//!
//! **Lexical.** A generated `tsvector` (english configuration: stemming, stop words) under a
//! GIN index. The query text becomes a disjunction of its lexemes (`plainto_tsquery`, AND turned
//! into OR, as the embedded BM25 matches any term) ranked with `ts_rank_cd` normalised by
//! document length (flag 1).
//!
//! **Hybrid.** One SQL statement: the vector leg and the lexical leg as CTEs, each numbered by
//! rank, fused in SQL by reciprocal rank fusion with the request's `rrf_k`; when the lexical leg
//! finds nothing, the vector results pass through labelled `vector`, as the embedded store does.
//! Score-level (convex) fusion reads both legs in one read-only transaction and fuses them with
//! `fuse_hybrid`, like the other stores. RRF is its own CTE ([`fusion_sql`]); another fusion is one more
//! function beside it.

use std::collections::HashSet;
use std::sync::Arc;

use orkeon_knowledge::fusion::FusionMethod;
use orkeon_knowledge::store::{
    BatchOutcome, CheckedQuery, CollectionInfo, DocumentStore, Manifest, Rebuild, SearchRequest,
    SourceBatch, SourceRecord, StoreError, VectorIndexStatus, WriterLock, check_search,
    check_source_batch, fuse_hybrid, hybrid_depths, validate_collection_name,
};
use orkeon_knowledge::types::{EmbeddingProfile, ScoreOrigin, ScoredChunk, StoredChunk};
use pgvector::Vector;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Row};

use crate::{PostgresStore, Shared, connection, db_error};

/// pgvector indexes `vector` columns of at most this many dimensions.
const HNSW_MAX_DIMENSIONS: usize = 2_000;
/// pgvector's largest `hnsw.ef_search`.
const HNSW_MAX_EF_SEARCH: usize = 1_000;
/// HNSW graph degree (pgvector's default).
const HNSW_M: usize = 16;

/// The columns a chunk is read from, in [`chunk_of`]'s order.
const CHUNK_COLUMNS: &str = "c.id, c.source_id, c.ordinal, c.body, c.start_offset, c.end_offset, c.metadata, c.content_hash, c.embedding";

/// One collection's row.
#[derive(Debug, Clone)]
struct Collection {
    id: i64,
    profile: EmbeddingProfile,
    chunks: i64,
}

fn unknown(collection: &str) -> StoreError {
    StoreError::UnknownCollection(collection.to_string())
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// The HNSW index of collection `id`.
fn index_name(id: i64) -> String {
    format!("chunks_embedding_{id}")
}

fn profile_of(row: &Row, offset: usize) -> Result<EmbeddingProfile, StoreError> {
    let dimensions: i32 = row.get(offset + 2);
    Ok(EmbeddingProfile {
        provider: row.get(offset),
        model: row.get(offset + 1),
        dimensions: usize::try_from(dimensions).map_err(corrupt)?,
    })
}

fn chunk_of(row: &Row) -> Result<StoredChunk, StoreError> {
    let metadata: serde_json::Value = row.get(6);
    let embedding: Vector = row.get(8);
    Ok(StoredChunk {
        id: row.get(0),
        source_id: row.get(1),
        ordinal: u32::try_from(row.get::<_, i64>(2)).map_err(corrupt)?,
        text: row.get(3),
        start: usize::try_from(row.get::<_, i64>(4)).map_err(corrupt)?,
        end: usize::try_from(row.get::<_, i64>(5)).map_err(corrupt)?,
        metadata: serde_json::from_value(metadata)
            .map_err(|e| corrupt(format!("chunk metadata: {e}")))?,
        content_hash: row.get(7),
        vector: embedding.to_vec(),
    })
}

fn record_of(row: &Row) -> SourceRecord {
    SourceRecord {
        source_id: row.get(0),
        content_hash: row.get(1),
        loader: row.get(2),
        chunking: row.get(3),
        embedding_profile: row.get(4),
        chunk_ids: row.get(5),
        ingested_at: row.get(6),
        validation: row.get(7),
        stale: row.get(8),
    }
}

/// A read-only REPEATABLE READ transaction: every statement in it reads one snapshot, so a
/// rebuild published meanwhile (the name moving to another collection id) is seen whole or not
/// at all.
async fn snapshot<'c>(
    client: &'c mut deadpool_postgres::Object,
    what: &str,
) -> Result<deadpool_postgres::Transaction<'c>, StoreError> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(|e| db_error(&format!("starting a read of {what}"), e))
}

/// A read-only snapshot (see [`snapshot`]) and collection `name` as it stands in it; an
/// unknown collection is an error.
async fn snapshot_of<'c>(
    client: &'c mut deadpool_postgres::Object,
    name: &str,
    what: &str,
) -> Result<(deadpool_postgres::Transaction<'c>, Collection), StoreError> {
    let transaction = snapshot(client, what).await?;
    let found = lookup(&transaction, name, false)
        .await?
        .ok_or_else(|| unknown(name))?;
    Ok((transaction, found))
}

/// Reads collection `name`; `for_update` locks its row until the transaction ends.
async fn lookup(
    client: &impl deadpool_postgres::GenericClient,
    name: &str,
    for_update: bool,
) -> Result<Option<Collection>, StoreError> {
    let sql = if for_update {
        "SELECT id, provider, model, dimensions, chunk_count FROM collections WHERE name = $1 FOR UPDATE"
    } else {
        "SELECT id, provider, model, dimensions, chunk_count FROM collections WHERE name = $1"
    };
    let statement = client
        .prepare_cached(sql)
        .await
        .map_err(|e| db_error("reading a collection", e))?;
    let row = client
        .query_opt(&statement, &[&name])
        .await
        .map_err(|e| db_error("reading a collection", e))?;
    row.map(|row| {
        Ok(Collection {
            id: row.get(0),
            profile: profile_of(&row, 1)?,
            chunks: row.get(4),
        })
    })
    .transpose()
}

/// Why a collection's vector searches are exact or HNSW, and which.
fn uses_hnsw(
    settings: &orkeon_knowledge::settings::StoreSettings,
    collection: &Collection,
) -> bool {
    collection.profile.dimensions <= HNSW_MAX_DIMENSIONS
        && collection.chunks > 0
        && usize::try_from(collection.chunks).unwrap_or(usize::MAX) >= settings.hnsw_threshold
}

fn index_status(
    settings: &orkeon_knowledge::settings::StoreSettings,
    collection: &Collection,
) -> VectorIndexStatus {
    let (serving, reason) = if collection.profile.dimensions > HNSW_MAX_DIMENSIONS {
        (
            "exact",
            format!(
                "{} dimensions: above pgvector's HNSW limit of {HNSW_MAX_DIMENSIONS}",
                collection.profile.dimensions
            ),
        )
    } else if uses_hnsw(settings, collection) {
        (
            "hnsw",
            format!(
                "{} chunks (threshold {}): pgvector HNSW, ef_search {}",
                collection.chunks, settings.hnsw_threshold, settings.hnsw_ef_search
            ),
        )
    } else {
        (
            "exact",
            format!(
                "{} chunks, below hnsw_threshold {}: exact scan",
                collection.chunks, settings.hnsw_threshold
            ),
        )
    };
    VectorIndexStatus {
        serving: serving.to_string(),
        reason,
        hnsw_recall_at_10: None,
    }
}

/// The vector leg: `(id, distance)` of the `$depth` nearest chunks of `collection` to `$query`
/// (cosine distance), best first. Exact: every chunk scored, ties by id. HNSW: the index
/// expression and predicate repeated literally so the planner uses the collection's graph.
fn vector_leg_sql(collection: &Collection, hnsw: bool, query: &str, depth: &str) -> String {
    let (id, dimensions) = (collection.id, collection.profile.dimensions);
    if hnsw {
        format!(
            "SELECT c.id, c.embedding::vector({dimensions}) <=> {query} AS distance
             FROM chunks c WHERE c.collection_id = {id}
             ORDER BY c.embedding::vector({dimensions}) <=> {query} LIMIT {depth}"
        )
    } else {
        format!(
            "SELECT c.id, c.embedding <=> {query} AS distance
             FROM chunks c WHERE c.collection_id = {id}
             ORDER BY distance, c.id LIMIT {depth}"
        )
    }
}

/// The lexical leg: `(id, score)` of the `$depth` best chunks of `collection` matching any
/// lexeme of `$text`, best first, ties by id.
fn lexical_leg_sql(collection: &Collection, text: &str, depth: &str) -> String {
    let id = collection.id;
    format!(
        "SELECT c.id, ts_rank_cd(c.lexemes, q.query, 1)::float8 AS score
         FROM chunks c,
              (SELECT replace(plainto_tsquery('english', {text})::text, ' & ', ' | ')::tsquery AS query) q
         WHERE c.collection_id = {id} AND c.lexemes @@ q.query
         ORDER BY score DESC, c.id LIMIT {depth}"
    )
}

/// Reciprocal rank fusion of the ranked legs `vector_ranked` and `lexical_ranked` (each with
/// `id` and 1-based `rank`): `score = Σ 1 / (rrf_k + rank)`.
fn fusion_sql(rrf_k: &str) -> String {
    format!(
        "SELECT id, sum(1.0::float8 / ({rrf_k}::float8 + rank)) AS score
         FROM (SELECT id, rank FROM vector_ranked UNION ALL SELECT id, rank FROM lexical_ranked) legs
         GROUP BY id"
    )
}

/// The whole hybrid statement (parameters: `$1` query vector, `$2` query text, `$3` vector
/// depth, `$4` lexical depth, `$5` rrf_k, `$6` k): both legs, their fusion, the vector
/// pass-through when the lexical leg is empty, and the chunks, best first.
fn hybrid_sql(collection: &Collection, hnsw: bool) -> String {
    let id = collection.id;
    format!(
        "WITH vector_leg AS ({vector}),
         vector_ranked AS (
             SELECT id, distance, row_number() OVER (ORDER BY distance, id) AS rank FROM vector_leg
         ),
         lexical_leg AS ({lexical}),
         lexical_ranked AS (
             SELECT id, row_number() OVER (ORDER BY score DESC, id) AS rank FROM lexical_leg
         ),
         fused AS ({fusion}),
         results AS (
             SELECT id, score, 'rrf' AS origin FROM fused
             WHERE EXISTS (SELECT 1 FROM lexical_ranked)
             UNION ALL
             SELECT id, 1 - distance, 'vector' FROM vector_ranked
             WHERE NOT EXISTS (SELECT 1 FROM lexical_ranked)
         )
         SELECT {CHUNK_COLUMNS}, r.score, r.origin
         FROM results r JOIN chunks c ON c.collection_id = {id} AND c.id = r.id
         ORDER BY r.score DESC, r.id LIMIT $6",
        vector = vector_leg_sql(collection, hnsw, "$1", "$3"),
        lexical = lexical_leg_sql(collection, "$2", "$4"),
        fusion = fusion_sql("$5"),
    )
}

/// A single-leg statement: the leg's `(id, score)` joined to the chunks, best first.
fn single_leg_sql(collection: &Collection, leg: &str, score: &str, order: &str) -> String {
    format!(
        "WITH leg AS ({leg})
         SELECT {CHUNK_COLUMNS}, {score} AS score
         FROM leg JOIN chunks c ON c.collection_id = {id} AND c.id = leg.id
         ORDER BY {order}",
        id = collection.id
    )
}

fn scored(rows: Vec<Row>, origin: Option<ScoreOrigin>) -> Result<Vec<ScoredChunk>, StoreError> {
    rows.iter()
        .map(|row| {
            let score: f64 = row.get(9);
            let origin = match origin {
                Some(origin) => origin,
                None => match row.get::<_, &str>(10) {
                    "rrf" => ScoreOrigin::Rrf,
                    _ => ScoreOrigin::Vector,
                },
            };
            Ok(ScoredChunk {
                chunk: chunk_of(row)?,
                score: score as f32,
                origin,
            })
        })
        .collect()
}

/// A rebuild's name: never a valid collection name (`@`), so no user request reaches it, and
/// unique. Leftovers of a rebuild cut short are removed when the store opens
/// ([`remove_unfinished_rebuilds`]).
fn staging_name(collection: &str) -> String {
    format!("{collection}@rebuild-{}", uuid::Uuid::new_v4().simple())
}

/// Drops every rebuild a previous process left unpublished (and its indexes).
pub(crate) async fn remove_unfinished_rebuilds(
    client: &mut deadpool_postgres::Object,
) -> Result<(), StoreError> {
    let transaction = client
        .transaction()
        .await
        .map_err(|e| db_error("starting a transaction", e))?;
    delete_collections(
        &transaction,
        "strpos(name, '@rebuild-') > 0",
        &[],
        "removing unfinished rebuilds",
    )
    .await?;
    transaction
        .commit()
        .await
        .map_err(|e| db_error("committing the removal of unfinished rebuilds", e))
}

/// Deletes the collections matching `condition` (their chunks and manifest go with them) and
/// drops their HNSW indexes, inside `transaction`; returns how many.
async fn delete_collections(
    transaction: &deadpool_postgres::Transaction<'_>,
    condition: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &str,
) -> Result<usize, StoreError> {
    let rows = transaction
        .query(
            &format!("DELETE FROM collections WHERE {condition} RETURNING id"),
            params,
        )
        .await
        .map_err(|e| db_error(what, e))?;
    for row in &rows {
        let id: i64 = row.get(0);
        transaction
            .batch_execute(&format!("DROP INDEX IF EXISTS {}", index_name(id)))
            .await
            .map_err(|e| db_error(what, e))?;
    }
    Ok(rows.len())
}

fn depth(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// `ensure_collection` under any name (a rebuild's included).
    fn ensure_named(&self, name: String, profile: EmbeddingProfile) -> Result<(), StoreError> {
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            let transaction = client
                .transaction()
                .await
                .map_err(|e| db_error("starting a transaction", e))?;
            let dimensions =
                i32::try_from(profile.dimensions).map_err(|_| StoreError::InvalidRequest {
                    collection: name.clone(),
                    reason: format!("{} dimensions is too many", profile.dimensions),
                })?;
            let created = transaction
                .query_opt(
                    "INSERT INTO collections (name, provider, model, dimensions)
                     VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING RETURNING id",
                    &[&name, &profile.provider, &profile.model, &dimensions],
                )
                .await
                .map_err(|e| db_error("creating a collection", e))?;
            match created {
                Some(row) => {
                    let id: i64 = row.get(0);
                    if profile.dimensions <= HNSW_MAX_DIMENSIONS {
                        let ef_construction = shared.settings.hnsw_ef_construction.max(2 * HNSW_M);
                        transaction
                            .batch_execute(&format!(
                                "CREATE INDEX {index} ON chunks
                                 USING hnsw ((embedding::vector({dimensions})) vector_cosine_ops)
                                 WITH (m = {HNSW_M}, ef_construction = {ef_construction})
                                 WHERE collection_id = {id}",
                                index = index_name(id),
                            ))
                            .await
                            .map_err(|e| db_error("creating the collection's HNSW index", e))?;
                    }
                }
                None => {
                    let existing = lookup(&transaction, &name, false)
                        .await?
                        .ok_or_else(|| unknown(&name))?;
                    if existing.profile != profile {
                        return Err(StoreError::ProfileMismatch {
                            collection: name,
                            recorded: existing.profile.to_string(),
                            active: profile.to_string(),
                        });
                    }
                }
            }
            transaction
                .commit()
                .await
                .map_err(|e| db_error("committing a new collection", e))
        })
    }

    /// `commit_sources` under any name (a rebuild's included).
    fn commit_named(&self, name: String, batch: SourceBatch) -> Result<BatchOutcome, StoreError> {
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            let transaction = client
                .transaction()
                .await
                .map_err(|e| db_error("starting a transaction", e))?;
            let found = lookup(&transaction, &name, true)
                .await?
                .ok_or_else(|| unknown(&name))?;
            check_source_batch(&name, &found.profile, &batch)?;
            if batch.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let id = found.id;
            let new_ids: HashSet<&str> = batch
                .writes
                .iter()
                .flat_map(|w| w.chunks.iter().map(|c| c.id.as_str()))
                .collect();
            let mut outcome = BatchOutcome::default();
            let mut stale: Vec<String> = Vec::new();

            // The sources written: their previous chunks that the batch does not keep go.
            let written: Vec<&str> = batch
                .writes
                .iter()
                .map(|w| w.record.source_id.as_str())
                .collect();
            let previous = transaction
                .query(
                    "SELECT chunk_ids FROM sources WHERE collection_id = $1 AND source_id = ANY($2)",
                    &[&id, &written],
                )
                .await
                .map_err(|e| db_error("reading the manifest", e))?;
            for row in &previous {
                let ids: Vec<String> = row.get(0);
                stale.extend(ids.into_iter().filter(|c| !new_ids.contains(c.as_str())));
            }
            // The sources deleted: their entries and their chunks.
            if !batch.deletes.is_empty() {
                let deleted = transaction
                    .query(
                        "DELETE FROM sources WHERE collection_id = $1 AND source_id = ANY($2)
                         RETURNING chunk_ids",
                        &[&id, &batch.deletes],
                    )
                    .await
                    .map_err(|e| db_error("deleting sources", e))?;
                outcome.sources_deleted = deleted.len();
                for row in &deleted {
                    let ids: Vec<String> = row.get(0);
                    stale.extend(ids.into_iter().filter(|c| !new_ids.contains(c.as_str())));
                }
            }
            outcome.chunks_removed = stale.len();
            if !stale.is_empty() {
                transaction
                    .execute(
                        "DELETE FROM chunks WHERE collection_id = $1 AND id = ANY($2)",
                        &[&id, &stale],
                    )
                    .await
                    .map_err(|e| db_error("removing chunks", e))?;
            }

            // The chunks written, in one statement.
            let chunks: Vec<&StoredChunk> =
                batch.writes.iter().flat_map(|w| w.chunks.iter()).collect();
            if !chunks.is_empty() {
                let ids: Vec<&str> = chunks.iter().map(|c| c.id.as_str()).collect();
                let sources: Vec<&str> = chunks.iter().map(|c| c.source_id.as_str()).collect();
                let ordinals: Vec<i64> = chunks.iter().map(|c| i64::from(c.ordinal)).collect();
                let bodies: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
                let starts: Vec<i64> = chunks.iter().map(|c| depth(c.start)).collect();
                let ends: Vec<i64> = chunks.iter().map(|c| depth(c.end)).collect();
                let metadata: Vec<serde_json::Value> = chunks
                    .iter()
                    .map(|c| serde_json::to_value(&c.metadata))
                    .collect::<Result<_, _>>()
                    .map_err(|e| corrupt(format!("chunk metadata: {e}")))?;
                let hashes: Vec<&str> = chunks.iter().map(|c| c.content_hash.as_str()).collect();
                let vectors: Vec<Vector> = chunks
                    .iter()
                    .map(|c| Vector::from(c.vector.clone()))
                    .collect();
                let params: [&(dyn ToSql + Sync); 10] = [
                    &id, &ids, &sources, &ordinals, &bodies, &starts, &ends, &metadata, &hashes,
                    &vectors,
                ];
                transaction
                    .execute(
                        "INSERT INTO chunks (collection_id, id, source_id, ordinal, body,
                                             start_offset, end_offset, metadata, content_hash, embedding)
                         SELECT $1, * FROM unnest($2::text[], $3::text[], $4::int8[], $5::text[],
                                                  $6::int8[], $7::int8[], $8::jsonb[], $9::text[], $10::vector[])
                         ON CONFLICT (collection_id, id) DO UPDATE SET
                             source_id = excluded.source_id, ordinal = excluded.ordinal,
                             body = excluded.body, start_offset = excluded.start_offset,
                             end_offset = excluded.end_offset, metadata = excluded.metadata,
                             content_hash = excluded.content_hash, embedding = excluded.embedding",
                        &params,
                    )
                    .await
                    .map_err(|e| db_error("writing chunks", e))?;
            }

            // The manifest entries written, in one statement.
            if !batch.writes.is_empty() {
                let records: Vec<&SourceRecord> = batch.writes.iter().map(|w| &w.record).collect();
                let column = |f: fn(&SourceRecord) -> &str| -> Vec<&str> {
                    records.iter().map(|r| f(r)).collect()
                };
                let source_ids = column(|r| &r.source_id);
                let content_hashes = column(|r| &r.content_hash);
                let loaders = column(|r| &r.loader);
                let chunkings = column(|r| &r.chunking);
                let profiles = column(|r| &r.embedding_profile);
                let chunk_ids: Vec<serde_json::Value> = records
                    .iter()
                    .map(|r| serde_json::Value::from(r.chunk_ids.clone()))
                    .collect();
                let ingested = column(|r| &r.ingested_at);
                let validations = column(|r| &r.validation);
                let stales: Vec<Option<&str>> =
                    records.iter().map(|r| r.stale.as_deref()).collect();
                let params: [&(dyn ToSql + Sync); 10] = [
                    &id,
                    &source_ids,
                    &content_hashes,
                    &loaders,
                    &chunkings,
                    &profiles,
                    &chunk_ids,
                    &ingested,
                    &validations,
                    &stales,
                ];
                transaction
                    .execute(
                        "INSERT INTO sources (collection_id, source_id, content_hash, loader, chunking,
                                              embedding_profile, chunk_ids, ingested_at, validation, stale)
                         SELECT $1, s.source_id, s.content_hash, s.loader, s.chunking, s.profile,
                                ARRAY(SELECT jsonb_array_elements_text(s.chunk_ids)),
                                s.ingested_at, s.validation, s.stale
                         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                                     $7::jsonb[], $8::text[], $9::text[], $10::text[])
                              AS s(source_id, content_hash, loader, chunking, profile, chunk_ids,
                                   ingested_at, validation, stale)
                         ON CONFLICT (collection_id, source_id) DO UPDATE SET
                             content_hash = excluded.content_hash, loader = excluded.loader,
                             chunking = excluded.chunking,
                             embedding_profile = excluded.embedding_profile,
                             chunk_ids = excluded.chunk_ids, ingested_at = excluded.ingested_at,
                             validation = excluded.validation, stale = excluded.stale",
                        &params,
                    )
                    .await
                    .map_err(|e| db_error("writing the manifest", e))?;
            }
            transaction
                .execute(
                    "UPDATE collections SET
                         source_count = (SELECT count(*) FROM sources WHERE collection_id = $1),
                         chunk_count = (SELECT count(*) FROM chunks WHERE collection_id = $1)
                     WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(|e| db_error("counting the collection", e))?;
            transaction
                .commit()
                .await
                .map_err(|e| db_error("committing a batch", e))?;
            Ok(outcome)
        })
    }

    /// `drop_collection` under any name (a rebuild's included).
    fn drop_named(&self, name: String) -> Result<(), StoreError> {
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            let transaction = client
                .transaction()
                .await
                .map_err(|e| db_error("starting a transaction", e))?;
            let dropped =
                delete_collections(&transaction, "name = $1", &[&name], "dropping a collection")
                    .await?;
            if dropped == 0 {
                return Err(unknown(&name));
            }
            transaction
                .commit()
                .await
                .map_err(|e| db_error("committing a dropped collection", e))
        })
    }

    fn call<T, Fut>(&self, work: impl FnOnce(Arc<Shared>) -> Fut) -> Result<T, StoreError>
    where
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        let shared = self.shared.clone();
        self.shared.run(work(shared))
    }
}

impl DocumentStore for PostgresStore {
    /// A session advisory lock on the collection (per schema), taken on a connection detached
    /// from the pool: the guard owns it, and dropping the guard closes it, which releases the
    /// lock — also when this process dies. Polled with `pg_try_advisory_lock` so the wait is
    /// never cut by the statement timeout, and bounded by [`WRITER_WAIT`].
    fn writer_lock(&self, collection: &str) -> Result<WriterLock, StoreError> {
        validate_collection_name(collection)?;
        let shared = self.shared.clone();
        let collection = collection.to_string();
        let client = self.shared.run(async move {
            let key = format!(
                "orkeon-collection:{}:{collection}",
                shared.settings.postgres.schema
            );
            let client = deadpool_postgres::Object::take(connection(&shared.pool).await?);
            let started = std::time::Instant::now();
            let mut announced = false;
            loop {
                let held: bool = client
                    .query_one("SELECT pg_try_advisory_lock(hashtext($1))", &[&key])
                    .await
                    .map_err(|e| db_error("taking the collection's writer lock", e))?
                    .get(0);
                if held {
                    return Ok(client);
                }
                if started.elapsed() > WRITER_WAIT {
                    return Err(StoreError::Io(format!(
                        "collection '{collection}' has been written by another process sharing this database for more than {} s; try again when its ingestion is done",
                        WRITER_WAIT.as_secs()
                    )));
                }
                if !announced {
                    tracing::info!(
                        collection = %collection,
                        "another process is writing this collection; waiting for its ingestion to finish"
                    );
                    announced = true;
                }
                tokio::time::sleep(WRITER_POLL).await;
            }
        })?;
        Ok(WriterLock::holding(client))
    }

    fn begin_rebuild(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<Rebuild, StoreError> {
        validate_collection_name(collection)?;
        let rebuild = Rebuild::new(collection, staging_name(collection));
        self.ensure_named(rebuild.id().to_string(), profile.clone())?;
        Ok(rebuild)
    }

    fn commit_rebuild(
        &self,
        rebuild: &Rebuild,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        self.commit_named(rebuild.id().to_string(), batch)
            .map_err(|e| match e {
                StoreError::UnknownCollection(_) => rebuild.not_in_progress(),
                other => other,
            })
    }

    fn publish_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        let (live, staging) = (rebuild.collection().to_string(), rebuild.id().to_string());
        let missing = rebuild.not_in_progress();
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            let transaction = client
                .transaction()
                .await
                .map_err(|e| db_error("starting a transaction", e))?;
            if lookup(&transaction, &staging, true).await?.is_none() {
                return Err(missing);
            }
            // One transaction: readers see the old version until it commits, the new one after.
            delete_collections(
                &transaction,
                "name = $1",
                &[&live],
                "dropping the replaced version",
            )
            .await?;
            transaction
                .execute(
                    "UPDATE collections SET name = $1 WHERE name = $2",
                    &[&live, &staging],
                )
                .await
                .map_err(|e| db_error("publishing a rebuild", e))?;
            transaction
                .commit()
                .await
                .map_err(|e| db_error("committing a published rebuild", e))
        })
    }

    fn abort_rebuild(&self, rebuild: &Rebuild) -> Result<(), StoreError> {
        self.drop_named(rebuild.id().to_string())
            .map_err(|e| match e {
                StoreError::UnknownCollection(_) => rebuild.not_in_progress(),
                other => other,
            })
    }

    fn collections(&self) -> Result<Vec<CollectionInfo>, StoreError> {
        self.call(|shared| async move {
            let client = connection(&shared.pool).await?;
            let rows = client
                .query(
                    "SELECT id, provider, model, dimensions, chunk_count, source_count, name
                     FROM collections WHERE strpos(name, '@rebuild-') = 0 ORDER BY name",
                    &[],
                )
                .await
                .map_err(|e| db_error("listing collections", e))?;
            rows.iter()
                .map(|row| {
                    let collection = Collection {
                        id: row.get(0),
                        profile: profile_of(row, 1)?,
                        chunks: row.get(4),
                    };
                    let sources: i64 = row.get(5);
                    Ok(CollectionInfo {
                        name: row.get(6),
                        sources: usize::try_from(sources).map_err(corrupt)?,
                        chunks: usize::try_from(collection.chunks).map_err(corrupt)?,
                        vector_index: index_status(&shared.settings, &collection),
                        profile: Some(collection.profile),
                        provider: "postgres".into(),
                    })
                })
                .collect()
        })
    }

    fn ensure_collection(
        &self,
        collection: &str,
        profile: &EmbeddingProfile,
    ) -> Result<(), StoreError> {
        validate_collection_name(collection)?;
        self.ensure_named(collection.to_string(), profile.clone())
    }

    fn manifest(&self, collection: &str) -> Result<Manifest, StoreError> {
        validate_collection_name(collection)?;
        let name = collection.to_string();
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            // One snapshot for the lookup and the rows (see `search`).
            let client = snapshot(&mut client, "a manifest").await?;
            let Some(found) = lookup(&client, &name, false).await? else {
                return Ok(Manifest {
                    collection: name,
                    ..Manifest::default()
                });
            };
            let rows = client
                .query(
                    "SELECT source_id, content_hash, loader, chunking, embedding_profile, chunk_ids,
                            ingested_at, validation, stale
                     FROM sources WHERE collection_id = $1 ORDER BY source_id",
                    &[&found.id],
                )
                .await
                .map_err(|e| db_error("reading the manifest", e))?;
            Ok(Manifest {
                collection: name,
                profile: Some(found.profile),
                sources: rows.iter().map(record_of).collect(),
                corrupt_entries: Vec::new(),
            })
        })
    }

    fn commit_sources(
        &self,
        collection: &str,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        validate_collection_name(collection)?;
        self.commit_named(collection.to_string(), batch)
    }

    fn drop_collection(&self, collection: &str) -> Result<(), StoreError> {
        validate_collection_name(collection)?;
        self.drop_named(collection.to_string())
    }

    fn chunks_of_source(
        &self,
        collection: &str,
        source_id: &str,
    ) -> Result<Vec<StoredChunk>, StoreError> {
        validate_collection_name(collection)?;
        let (name, source) = (collection.to_string(), source_id.to_string());
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            // One snapshot for the lookup and the rows (see `snapshot`).
            let (client, found) = snapshot_of(&mut client, &name, "a source's chunks").await?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {CHUNK_COLUMNS} FROM chunks c
                         WHERE c.collection_id = $1 AND c.source_id = $2 ORDER BY c.ordinal, c.id"
                    ),
                    &[&found.id, &source],
                )
                .await
                .map_err(|e| db_error("reading a source's chunks", e))?;
            rows.iter().map(chunk_of).collect()
        })
    }

    fn get_chunk(
        &self,
        collection: &str,
        chunk_id: &str,
    ) -> Result<Option<StoredChunk>, StoreError> {
        validate_collection_name(collection)?;
        let (name, chunk) = (collection.to_string(), chunk_id.to_string());
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            // One snapshot for the lookup and the row (see `snapshot`).
            let (client, found) = snapshot_of(&mut client, &name, "a chunk").await?;
            let row = client
                .query_opt(
                    &format!(
                        "SELECT {CHUNK_COLUMNS} FROM chunks c WHERE c.collection_id = $1 AND c.id = $2"
                    ),
                    &[&found.id, &chunk],
                )
                .await
                .map_err(|e| db_error("reading a chunk", e))?;
            row.as_ref().map(chunk_of).transpose()
        })
    }

    fn search(
        &self,
        collection: &str,
        request: &SearchRequest,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        validate_collection_name(collection)?;
        let (name, request) = (collection.to_string(), request.clone());
        self.call(|shared| async move {
            let mut client = connection(&shared.pool).await?;
            // One snapshot for the lookup and the legs: a rebuild published meanwhile is seen
            // whole or not at all.
            let (transaction, found) = snapshot_of(&mut client, &name, "a search").await?;
            let settings = &shared.settings;
            let Some(search) = check_search(&name, &found.profile, &request, settings.rrf_k)?
            else {
                return Ok(Vec::new());
            };
            let k = search.k;
            let hnsw = uses_hnsw(settings, &found);
            let tx = &transaction;
            let tune = |vector_depth: usize| {
                let ef_search = settings
                    .hnsw_ef_search
                    .max(vector_depth)
                    .min(HNSW_MAX_EF_SEARCH)
                    .to_string();
                async move {
                    if hnsw {
                        tx.execute(
                            "SELECT set_config('hnsw.ef_search', $1, true),
                                        set_config('hnsw.iterative_scan', 'strict_order', true)",
                            &[&ef_search],
                        )
                        .await
                        .map_err(|e| db_error("tuning the HNSW search", e))?;
                    }
                    Ok::<_, StoreError>(())
                }
            };
            // One leg alone, best first, labelled with its own score origin.
            let found = &found;
            let vector_leg = |query: Vec<f32>, leg_depth: usize| async move {
                let sql = single_leg_sql(
                    found,
                    &vector_leg_sql(found, hnsw, "$1", "$2"),
                    "1 - leg.distance",
                    "leg.distance, c.id",
                );
                let rows = tx
                    .query(&sql, &[&Vector::from(query), &depth(leg_depth)])
                    .await
                    .map_err(|e| db_error("searching vectors", e))?;
                scored(rows, Some(ScoreOrigin::Vector))
            };
            let lexical_leg = |text: String, leg_depth: usize| async move {
                let sql = single_leg_sql(
                    found,
                    &lexical_leg_sql(found, "$1", "$2"),
                    "leg.score",
                    "leg.score DESC, c.id",
                );
                let rows = tx
                    .query(&sql, &[&text, &depth(leg_depth)])
                    .await
                    .map_err(|e| db_error("searching text", e))?;
                scored(rows, Some(ScoreOrigin::Bm25))
            };
            let results = match search.query {
                CheckedQuery::Vector(query) => {
                    tune(k).await?;
                    vector_leg(query, k).await?
                }
                CheckedQuery::Bm25(text) => lexical_leg(text.to_string(), k).await?,
                CheckedQuery::Hybrid(query, text)
                    if request.fusion.method == FusionMethod::Convex =>
                {
                    // Score-level fusion needs each leg's scores, normalised per query: both
                    // legs are read in this transaction and fused by the one implementation
                    // every store uses (`fuse_hybrid`).
                    let (vector_depth, lexical_depth) = hybrid_depths(k, None);
                    tune(vector_depth).await?;
                    let vector_hits = vector_leg(query, vector_depth).await?;
                    let lexical_hits = match text {
                        Some(text) => lexical_leg(text.to_string(), lexical_depth).await?,
                        None => Vec::new(),
                    };
                    fuse_hybrid(vector_hits, lexical_hits, search.rrf_k, &request.fusion, k)
                }
                CheckedQuery::Hybrid(query, text) => {
                    let (vector_depth, lexical_depth) = hybrid_depths(k, None);
                    tune(vector_depth).await?;
                    // Without text the lexical leg matches nothing: the vector results pass
                    // through.
                    let text = text.unwrap_or("");
                    let rows = transaction
                        .query(
                            &hybrid_sql(found, hnsw),
                            &[
                                &Vector::from(query),
                                &text,
                                &depth(vector_depth),
                                &depth(lexical_depth),
                                &f64::from(search.rrf_k),
                                &depth(k),
                            ],
                        )
                        .await
                        .map_err(|e| db_error("searching (hybrid)", e))?;
                    scored(rows, None)?
                }
            };
            transaction
                .commit()
                .await
                .map_err(|e| db_error("ending a search", e))?;
            Ok(results)
        })
    }
}

/// The longest [`DocumentStore::writer_lock`] waits for another process's ingestion.
const WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// How often it asks again.
const WRITER_POLL: std::time::Duration = std::time::Duration::from_millis(200);
