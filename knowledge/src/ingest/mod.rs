//! The incremental ingestion pipeline: load → validate → chunk → embed → upsert, driven by the
//! per-collection manifest.
//!
//! - An unchanged source (same raw-byte hash, chunker settings and embedding profile) is
//!   skipped: zero embeddings.
//! - A changed source is re-chunked; only chunks whose content hash (text + chunker settings +
//!   embedding profile) is new are embedded, the others reuse their stored vectors. Its new
//!   chunks and manifest entry are committed atomically, replacing the old ones.
//! - A multi-part source (PDF pages, CSV rows) is committed in ONE store batch: all its parts,
//!   and the removal of the parts it no longer has, land together or not at all.
//! - [`IngestMode::Additive`] (the default of API requests and the `rag_ingest` tool) upserts
//!   the named sources and never removes another; [`IngestMode::Replace`] (a crew file's
//!   declared sources at kickoff and hot reload) makes the named sources the collection's whole
//!   set: a source no longer named (or whose file is gone) is purged.
//! - A source that cannot be loaded (read, fetched or parsed) keeps its last good chunks: its
//!   manifest entries are marked `stale` with the error and the report lists it. A source
//!   never ingested before is quarantined instead (there is nothing to keep).
//! - A collection recording another embedding profile fails loudly unless `reindex`; a
//!   reindex rebuilds from the named sources only, so an additive reindex of a collection
//!   holding other sources is refused rather than dropping them.
//! - Rejected documents (integrity or prompt injection) are quarantined, never searchable.
//!
//! Ingestion of one collection is serialised (concurrent requests for the same collection run
//! one after the other, so the second finds a fresh manifest and does no work).

pub(crate) mod plan;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::chunk::{ChunkError, build_chunker};
use crate::embed::{EmbedError, Embedder};
use crate::load::{self, LoadError, SourceRef};
use crate::settings::{ChunkingSettings, IngestionSettings, SuspiciousAction};
use crate::store::{DocumentStore, SourceBatch, SourceRecord, SourceWrite, StoreError};
use crate::types::{Document, EmbeddingProfile, StoredChunk};
use crate::validate::{
    InjectionValidator, IntegrityValidator, QuarantineEntry, QuarantineStore, Verdict,
};

pub use plan::{file_of, part_ids_of};

/// How a request's sources relate to the collection's other sources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IngestMode {
    /// Upsert the named sources; every other source of the collection is kept.
    #[default]
    Additive,
    /// The named sources become the collection's whole set: sources not named are purged.
    Replace,
}

impl IngestMode {
    /// `replace: true` of the API, `--replace` of the CLI.
    pub fn from_replace(replace: bool) -> Self {
        if replace {
            Self::Replace
        } else {
            Self::Additive
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Additive => "additive",
            Self::Replace => "replace",
        }
    }
}

/// What to ingest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestRequest {
    pub collection: String,
    /// Folder relative sources resolve against (also the default allowed root).
    pub base_dir: PathBuf,
    /// Paths, globs (`*`, `**`, `?`) or http(s) URLs.
    pub sources: Vec<String>,
    /// Chunker settings; the configured default when `None`.
    pub chunking: Option<ChunkingSettings>,
    /// Purge the collection and rebuild it from the named sources (also the way to change
    /// embedding profile).
    pub reindex: bool,
    /// Additive (default) or replace (see [`IngestMode`]).
    #[serde(default)]
    pub mode: IngestMode,
}

/// A source refused by validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuarantinedSource {
    pub source: String,
    pub reason: String,
}

/// A source whose load failed: its last good chunks stay searchable, marked stale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaleSource {
    pub source: String,
    /// Why the load failed.
    pub error: String,
}

/// What an ingestion did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngestReport {
    pub collection: String,
    /// Files and URLs the request expanded to.
    pub sources_total: usize,
    /// Sources (re-)ingested because they were new or changed.
    pub sources_ingested: usize,
    /// Sources skipped because they were unchanged.
    pub sources_skipped: usize,
    /// Manifest entries purged (source gone or no longer requested).
    pub sources_removed: usize,
    pub chunks_embedded: usize,
    pub chunks_upserted: usize,
    pub quarantined: Vec<QuarantinedSource>,
    /// Sources that could not be loaded and keep their last good content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<StaleSource>,
    /// Non-fatal problems (missing paths, corrupt manifest entries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub duration_ms: u64,
}

/// Progress of a running ingestion (for progress bars).
#[derive(Debug, Clone, PartialEq)]
pub struct IngestProgress {
    pub done: usize,
    pub total: usize,
    pub source: String,
}

/// Why an ingestion failed as a whole (per-source problems are quarantined or warned instead).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("quarantine store failed: {0}")]
    Quarantine(String),
    #[error("ingestion task failed: {0}")]
    Task(String),
    /// An additive reindex would drop sources the request does not name.
    #[error(
        "reindexing collection '{collection}' rebuilds it from the named sources only, but it also holds {} other source(s) ({}): ask for replace (`--replace`, `replace: true`) to drop them, or name them too",
        others.len(),
        preview(others)
    )]
    ReindexWouldPurge {
        collection: String,
        others: Vec<String>,
    },
}

/// The first few items of a list, for messages.
fn preview(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(", … {} more", items.len() - SHOWN));
    }
    text
}

/// The ingestion façade.
pub struct IngestionPipeline {
    store: Arc<dyn DocumentStore>,
    embedder: Arc<dyn Embedder>,
    quarantine: Arc<dyn QuarantineStore>,
    settings: IngestionSettings,
    integrity: IntegrityValidator,
    injection: InjectionValidator,
    /// One lock per collection: ingestion of a collection is serialised.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl IngestionPipeline {
    pub fn new(
        store: Arc<dyn DocumentStore>,
        embedder: Arc<dyn Embedder>,
        quarantine: Arc<dyn QuarantineStore>,
        settings: IngestionSettings,
    ) -> Self {
        let integrity = IntegrityValidator {
            max_bytes: settings.max_document_bytes,
        };
        Self {
            store,
            embedder,
            quarantine,
            settings,
            integrity,
            injection: InjectionValidator::default(),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The embedder whose profile this pipeline writes.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The store this pipeline writes to.
    pub fn store(&self) -> &Arc<dyn DocumentStore> {
        &self.store
    }

    /// The quarantine of rejected sources.
    pub fn quarantine(&self) -> &Arc<dyn QuarantineStore> {
        &self.quarantine
    }

    fn collection_lock(&self, collection: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(collection.to_string()).or_default().clone()
    }

    /// Runs one ingestion. `progress` is called after each source.
    pub async fn ingest(
        &self,
        request: &IngestRequest,
        progress: Option<&(dyn Fn(IngestProgress) + Send + Sync)>,
    ) -> Result<IngestReport, IngestError> {
        let lock = self.collection_lock(&request.collection);
        let _guard = lock.lock().await;
        let started = Instant::now();
        let collection = request.collection.as_str();
        let mut report = IngestReport {
            collection: collection.to_string(),
            ..IngestReport::default()
        };

        let chunking = request
            .chunking
            .clone()
            .unwrap_or_else(|| self.settings.default_chunking.clone());
        let chunker = build_chunker(
            &chunking,
            self.embedder.token_counter(),
            Some(self.embedder.clone()),
        )?;
        let profile = self.embedder.profile();
        let profile_label = profile.to_string();
        let chunking_label = chunking.fingerprint();

        // Expand the request (touches no store).
        let expansion = load::expand_sources_blocking(
            request.base_dir.clone(),
            request.sources.clone(),
            self.settings.clone(),
        )
        .await?;
        for missing in &expansion.missing {
            let consequence = match request.mode {
                IngestMode::Replace => "its chunks are purged",
                IngestMode::Additive => {
                    "nothing is ingested from it and its chunks, if any, are kept"
                }
            };
            report.warnings.push(format!(
                "source '{missing}' does not exist (relative to {}); {consequence}",
                request.base_dir.display()
            ));
        }
        report.sources_total = expansion.sources.len();
        let wanted: BTreeSet<&str> = expansion.sources.iter().map(|s| s.id.as_str()).collect();

        // Profile drift and reindex.
        let manifest = self.store.manifest(collection)?;
        if request.reindex {
            if request.mode == IngestMode::Additive {
                let others: BTreeSet<String> = manifest
                    .sources
                    .iter()
                    .map(|r| file_of(&r.source_id))
                    .filter(|file| !wanted.contains(file))
                    .map(str::to_string)
                    .collect();
                if !others.is_empty() {
                    return Err(IngestError::ReindexWouldPurge {
                        collection: collection.to_string(),
                        others: others.into_iter().collect(),
                    });
                }
            }
            if manifest.profile.is_some() || !manifest.sources.is_empty() {
                self.store.drop_collection(collection)?;
            }
        } else if let Some(recorded) = &manifest.profile
            && recorded != &profile
        {
            return Err(StoreError::ProfileMismatch {
                collection: collection.to_string(),
                recorded: recorded.to_string(),
                active: profile_label,
            }
            .into());
        }
        self.store.ensure_collection(collection, &profile)?;
        let manifest = if request.reindex {
            self.store.manifest(collection)?
        } else {
            manifest
        };
        for entry in &manifest.corrupt_entries {
            report.warnings.push(format!(
                "manifest entry '{entry}' of collection '{collection}' is corrupt; its source is re-ingested in full"
            ));
        }
        let records: BTreeMap<String, SourceRecord> = manifest
            .sources
            .into_iter()
            .map(|r| (r.source_id.clone(), r))
            .collect();

        // Replace: purge, in one batch, the manifest entries whose file is no longer named.
        if request.mode == IngestMode::Replace {
            let purged: Vec<String> = records
                .keys()
                .filter(|id| !wanted.contains(file_of(id)))
                .cloned()
                .collect();
            if !purged.is_empty() {
                let outcome = self
                    .commit(
                        collection,
                        SourceBatch {
                            writes: Vec::new(),
                            deletes: purged,
                        },
                    )
                    .await?;
                report.sources_removed += outcome.sources_deleted;
            }
        }

        // One source's commit runs on a blocking thread while the next source is fetched,
        // chunked and embedded: the model never waits for sled or tantivy. Commits stay in
        // source order (the previous one is awaited before the next starts).
        let total = expansion.sources.len();
        let mut in_flight: Option<CommitJob> = None;
        for (index, source) in expansion.sources.iter().enumerate() {
            let outcome = self
                .ingest_source(
                    collection,
                    source,
                    &records,
                    &*chunker,
                    &chunking_label,
                    &profile,
                    &mut report,
                )
                .await?;
            if let Some(job) = in_flight.take() {
                self.finish_commit(collection, job, &mut report).await?;
            }
            match outcome {
                SourceOutcome::Skipped => report.sources_skipped += 1,
                SourceOutcome::Quarantined | SourceOutcome::Stale => {}
                SourceOutcome::Ready(job) => in_flight = Some(job),
            }
            if let Some(progress) = progress {
                progress(IngestProgress {
                    done: index + 1,
                    total,
                    source: source.id.clone(),
                });
            }
        }
        if let Some(job) = in_flight.take() {
            self.finish_commit(collection, job, &mut report).await?;
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            collection,
            sources_total = report.sources_total,
            ingested = report.sources_ingested,
            skipped = report.sources_skipped,
            removed = report.sources_removed,
            chunks_embedded = report.chunks_embedded,
            quarantined = report.quarantined.len(),
            stale = report.stale.len(),
            mode = request.mode.as_str(),
            duration_ms = report.duration_ms,
            "ingestion finished"
        );
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    async fn ingest_source(
        &self,
        collection: &str,
        source: &SourceRef,
        records: &BTreeMap<String, SourceRecord>,
        chunker: &dyn crate::chunk::Chunker,
        chunking_label: &str,
        profile: &EmbeddingProfile,
        report: &mut IngestReport,
    ) -> Result<SourceOutcome, IngestError> {
        let profile_label = profile.to_string();
        let previous = part_ids_of(records, &source.id);

        let raw = match load::fetch(source, &self.settings).await {
            Ok(raw) => raw,
            Err(error) => {
                let reason = format!("could not be read: {error}");
                return self
                    .load_failed(collection, source, records, &previous, &reason, report)
                    .await;
            }
        };
        let file_hash = sha256_hex(&raw.bytes);

        // Unchanged: every recorded part carries the same file hash, chunker and profile, and
        // none is stale (a stale part is rewritten to clear its mark; its vectors are reused).
        let unchanged = !previous.is_empty()
            && previous.iter().all(|id| {
                records.get(*id).is_some_and(|r| {
                    r.content_hash == file_hash
                        && r.chunking == chunking_label
                        && r.embedding_profile == profile_label
                        && r.stale.is_none()
                })
            });
        if unchanged {
            return Ok(SourceOutcome::Skipped);
        }

        if let Verdict::Rejected { reasons } = self.integrity.check_raw(&source.id, &raw) {
            let excerpt = excerpt_of(&String::from_utf8_lossy(&raw.bytes));
            let reason = reasons.join("; ");
            self.reject(
                collection, source, &previous, &file_hash, &reason, &excerpt, report,
            )
            .await?;
            return Ok(SourceOutcome::Quarantined);
        }
        let parsed =
            load::parse_blocking(source.clone(), raw, self.settings.load_limits.clone()).await;
        let documents = match parsed {
            Ok(documents) => documents,
            Err(error) => {
                let reason = format!("could not be parsed: {error}");
                if previous.is_empty() {
                    self.reject(
                        collection, source, &previous, &file_hash, &reason, "", report,
                    )
                    .await?;
                    return Ok(SourceOutcome::Quarantined);
                }
                return self
                    .load_failed(collection, source, records, &previous, &reason, report)
                    .await;
            }
        };

        // Vectors of the file's previous chunks, by content hash, for reuse.
        let mut reusable: HashMap<String, Vec<f32>> = HashMap::new();
        for id in &previous {
            for chunk in self.store.chunks_of_source(collection, id)? {
                reusable.insert(chunk.content_hash, chunk.vector);
            }
        }

        let mut kept_parts: BTreeSet<String> = BTreeSet::new();
        let mut pending: Vec<(SourceRecord, Vec<StoredChunk>)> = Vec::new();
        for document in documents {
            let validation = match self.validate(&document) {
                DocumentVerdict::Accept(validation) => validation,
                DocumentVerdict::Refuse(reason) => {
                    let excerpt = excerpt_of(&document.text);
                    self.quarantine_entry(
                        collection,
                        &document.source_id,
                        &file_hash,
                        &reason,
                        &excerpt,
                    )?;
                    report.quarantined.push(QuarantinedSource {
                        source: document.source_id.clone(),
                        reason,
                    });
                    continue;
                }
            };
            let chunks = chunker.chunk(&document).await?;
            let mut stored = Vec::with_capacity(chunks.len());
            let mut occurrences: HashMap<String, u32> = HashMap::new();
            for (ordinal, chunk) in chunks.into_iter().enumerate() {
                let content_hash = sha256_hex(
                    format!("{}\u{1f}{chunking_label}\u{1f}{profile_label}", chunk.text).as_bytes(),
                );
                let occurrence = occurrences.entry(content_hash.clone()).or_insert(0);
                let id = chunk_id(&document.source_id, &content_hash, *occurrence);
                *occurrence += 1;
                let mut metadata = document.metadata.clone();
                metadata.extend(chunk.metadata);
                metadata.insert("loader".into(), document.loader.clone());
                if validation != "clean" {
                    metadata.insert("flagged".into(), "suspicious".into());
                    metadata.insert("flag_reasons".into(), validation.clone());
                }
                stored.push(StoredChunk {
                    id,
                    source_id: document.source_id.clone(),
                    ordinal: ordinal as u32,
                    text: chunk.text,
                    start: chunk.start,
                    end: chunk.end,
                    metadata,
                    vector: reusable.get(&content_hash).cloned().unwrap_or_default(),
                    content_hash,
                });
            }
            let record = SourceRecord {
                source_id: document.source_id.clone(),
                content_hash: file_hash.clone(),
                loader: document.loader.clone(),
                chunking: chunking_label.to_string(),
                embedding_profile: profile_label.clone(),
                chunk_ids: stored.iter().map(|c| c.id.clone()).collect(),
                ingested_at: now_rfc3339(),
                validation,
                stale: None,
            };
            kept_parts.insert(document.source_id.clone());
            pending.push((record, stored));
        }

        // Embed what is new, in one call for the whole file (length-sorted batches inside).
        let missing: Vec<(usize, usize)> = pending
            .iter()
            .enumerate()
            .flat_map(|(p, (_, chunks))| {
                chunks
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.vector.is_empty())
                    .map(move |(c, _)| (p, c))
            })
            .collect();
        if !missing.is_empty() {
            let texts = missing
                .iter()
                .map(|&(p, c)| pending[p].1[c].text.clone())
                .collect();
            let vectors = self.embedder.embed_documents(texts).await?;
            if vectors.len() != missing.len() {
                return Err(EmbedError::Inference(format!(
                    "embedder returned {} vectors for {} chunks",
                    vectors.len(),
                    missing.len()
                ))
                .into());
            }
            for (&(p, c), vector) in missing.iter().zip(vectors) {
                pending[p].1[c].vector = vector;
            }
            report.chunks_embedded += missing.len();
        }

        if kept_parts.is_empty() {
            // Every part was refused: whatever of the file was searchable goes too.
            if !previous.is_empty() {
                let outcome = self
                    .commit(
                        collection,
                        SourceBatch {
                            writes: Vec::new(),
                            deletes: previous.iter().map(|id| id.to_string()).collect(),
                        },
                    )
                    .await?;
                report.sources_removed += outcome.sources_deleted;
            }
            return Ok(SourceOutcome::Quarantined);
        }
        // Every part, and the removal of the parts that disappeared, in ONE batch — started
        // now, awaited by the caller after it has prepared the next source.
        let store = self.store.clone();
        let collection_owned = collection.to_string();
        let batch = SourceBatch {
            writes: pending
                .into_iter()
                .map(|(record, chunks)| SourceWrite { record, chunks })
                .collect(),
            deletes: previous
                .iter()
                .filter(|id| !kept_parts.contains(**id))
                .map(|id| id.to_string())
                .collect(),
        };
        let upserted: usize = batch.writes.iter().map(|w| w.chunks.len()).sum();
        let handle = tokio::task::spawn_blocking(move || -> Result<usize, StoreError> {
            store
                .commit_sources(&collection_owned, batch)
                .map(|outcome| outcome.sources_deleted)
        });
        Ok(SourceOutcome::Ready(CommitJob {
            handle,
            upserted,
            kept_parts,
        }))
    }

    /// Waits for a source's commit and records its outcome.
    async fn finish_commit(
        &self,
        collection: &str,
        job: CommitJob,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let removed = job
            .handle
            .await
            .map_err(|e| IngestError::Task(e.to_string()))??;
        report.chunks_upserted += job.upserted;
        report.sources_removed += removed;
        report.sources_ingested += 1;
        for part in &job.kept_parts {
            self.quarantine
                .remove(collection, part)
                .map_err(|e| IngestError::Quarantine(e.to_string()))?;
        }
        Ok(())
    }

    /// Integrity and injection checks of one parsed document.
    fn validate(&self, document: &Document) -> DocumentVerdict {
        if let Verdict::Rejected { reasons } = self.integrity.check_document(document) {
            return DocumentVerdict::Refuse(reasons.join("; "));
        }
        match self.injection.check(document) {
            Verdict::Clean => DocumentVerdict::Accept("clean".into()),
            Verdict::Suspicious { reasons } => match self.settings.suspicious_action {
                SuspiciousAction::Flag => {
                    DocumentVerdict::Accept(format!("suspicious: {}", reasons.join("; ")))
                }
                SuspiciousAction::Drop => DocumentVerdict::Refuse(format!(
                    "suspicious (rag.ingestion.suspicious_action = drop): {}",
                    reasons.join("; ")
                )),
            },
            Verdict::Rejected { reasons } => {
                DocumentVerdict::Refuse(format!("prompt injection: {}", reasons.join("; ")))
            }
        }
    }

    /// Commits a batch on a blocking thread.
    async fn commit(
        &self,
        collection: &str,
        batch: SourceBatch,
    ) -> Result<crate::store::BatchOutcome, IngestError> {
        let store = self.store.clone();
        let collection = collection.to_string();
        let outcome = tokio::task::spawn_blocking(move || store.commit_sources(&collection, batch))
            .await
            .map_err(|e| IngestError::Task(e.to_string()))??;
        Ok(outcome)
    }

    /// A source that could not be loaded: a source ingested before keeps its last good chunks,
    /// its manifest entries marked stale with `reason` (one batch; nothing is written when
    /// they already carry that mark); a source never ingested is quarantined.
    async fn load_failed(
        &self,
        collection: &str,
        source: &SourceRef,
        records: &BTreeMap<String, SourceRecord>,
        previous: &[&str],
        reason: &str,
        report: &mut IngestReport,
    ) -> Result<SourceOutcome, IngestError> {
        if previous.is_empty() {
            self.reject(collection, source, previous, "", reason, "", report)
                .await?;
            return Ok(SourceOutcome::Quarantined);
        }
        tracing::warn!(
            collection,
            source = %source.id,
            reason,
            "source could not be loaded; its last good content is kept, marked stale"
        );
        report.stale.push(StaleSource {
            source: source.id.clone(),
            error: reason.to_string(),
        });
        let already_marked = previous.iter().all(|id| {
            records
                .get(*id)
                .is_some_and(|r| r.stale.as_deref() == Some(reason))
        });
        if already_marked {
            return Ok(SourceOutcome::Stale);
        }
        let mut writes = Vec::with_capacity(previous.len());
        for id in previous {
            let Some(record) = records.get(*id) else {
                continue;
            };
            let chunks = self.store.chunks_of_source(collection, id)?;
            let mut record = record.clone();
            record.chunk_ids = chunks.iter().map(|c| c.id.clone()).collect();
            record.stale = Some(reason.to_string());
            writes.push(SourceWrite { record, chunks });
        }
        self.commit(
            collection,
            SourceBatch {
                writes,
                deletes: Vec::new(),
            },
        )
        .await?;
        Ok(SourceOutcome::Stale)
    }

    /// Quarantines a whole source and purges, in one batch, whatever of it was searchable.
    #[allow(clippy::too_many_arguments)]
    async fn reject(
        &self,
        collection: &str,
        source: &SourceRef,
        previous: &[&str],
        hash: &str,
        reason: &str,
        excerpt: &str,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        self.quarantine_entry(collection, &source.id, hash, reason, excerpt)?;
        if !previous.is_empty() {
            let outcome = self
                .commit(
                    collection,
                    SourceBatch {
                        writes: Vec::new(),
                        deletes: previous.iter().map(|id| id.to_string()).collect(),
                    },
                )
                .await?;
            report.sources_removed += outcome.sources_deleted;
        }
        report.quarantined.push(QuarantinedSource {
            source: source.id.clone(),
            reason: reason.to_string(),
        });
        tracing::warn!(collection, source = %source.id, reason, "source quarantined");
        Ok(())
    }

    fn quarantine_entry(
        &self,
        collection: &str,
        source_id: &str,
        hash: &str,
        reason: &str,
        excerpt: &str,
    ) -> Result<(), IngestError> {
        self.quarantine
            .put(&QuarantineEntry {
                collection: collection.to_string(),
                source_id: source_id.to_string(),
                reason: reason.to_string(),
                content_hash: hash.to_string(),
                quarantined_at: now_rfc3339(),
                excerpt: excerpt.to_string(),
            })
            .map_err(|e| IngestError::Quarantine(e.to_string()))
    }
}

enum SourceOutcome {
    Skipped,
    Quarantined,
    /// Could not be loaded; its last good content is kept, marked stale.
    Stale,
    /// Prepared and embedded; its commit is running.
    Ready(CommitJob),
}

/// A source's commit in flight.
struct CommitJob {
    handle: tokio::task::JoinHandle<Result<usize, StoreError>>,
    upserted: usize,
    kept_parts: BTreeSet<String>,
}

enum DocumentVerdict {
    /// Ingest, with the validation label (`clean` or `suspicious: …`).
    Accept(String),
    /// Quarantine, with the reason.
    Refuse(String),
}

/// Lower-case hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A chunk id stable while the chunk's text, chunker and profile are unchanged.
fn chunk_id(source_id: &str, content_hash: &str, occurrence: u32) -> String {
    let digest =
        sha256_hex(format!("{source_id}\u{1f}{content_hash}\u{1f}{occurrence}").as_bytes());
    digest[..24].to_string()
}

fn excerpt_of(text: &str) -> String {
    text.chars().take(240).collect()
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
