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
//! - Every chunk records its text's token count (the embedding model's tokenizer) in its
//!   metadata ([`crate::embed::CHUNK_TOKENS_KEY`]), so that assembling a query's context does
//!   not tokenise the passages again.
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
//! - A reindex writes into a rebuild beside the live collection
//!   ([`DocumentStore::begin_rebuild`]), which readers keep seeing whole until the rebuild is
//!   published in one step at the end. On any error (including a source the collection holds
//!   that cannot be loaded: its content would be lost) the rebuild is discarded, the live
//!   collection is left as it was, and the error says so ([`IngestError::ReindexAborted`]).
//!   Quarantine entries of a reindex are recorded once it is published.
//! - Rejected documents (integrity or prompt injection) are quarantined, never searchable.
//! - New chunks are embedded in windows of `rag.ingestion.embed_window` chunks across sources
//!   (one embedder call each, so its length-sorted batches mix sources and carry little
//!   padding); the window's sources are then committed in one store batch (atomically: all of
//!   them or none) while the next window is prepared and embedded.
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
use crate::embed::{CHUNK_TOKENS_KEY, EmbedError, Embedder};
use crate::load::{self, LoadError, SourceRef};
use crate::settings::{ChunkingSettings, IngestionSettings, SuspiciousAction};
use crate::store::{
    BatchOutcome, DocumentStore, Manifest, Rebuild, SourceBatch, SourceRecord, SourceWrite,
    StoreError,
};
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
    /// Rebuild the collection from the named sources beside the live one, and swap it in
    /// when complete (also the way to change embedding profile).
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
    /// A reindex failed part-way: its rebuild was discarded and the live collection was left
    /// as it was. `source` says why.
    #[error(
        "reindexing collection '{collection}' failed, so its rebuild was discarded and the collection is unchanged: {source}"
    )]
    ReindexAborted {
        collection: String,
        #[source]
        source: Box<IngestError>,
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
        // Then across processes sharing the store (a fleet on one database).
        let store = self.store.clone();
        let name = request.collection.clone();
        let _writer = tokio::task::spawn_blocking(move || store.writer_lock(&name))
            .await
            .map_err(|e| {
                StoreError::Io(format!("waiting for the collection's writer lock: {e}"))
            })??;
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

        // Profile drift and reindex: a reindex builds into a rebuild beside the live
        // collection, which readers keep seeing until the rebuild is published whole.
        let manifest = self.store.manifest(collection)?;
        let target = if request.reindex {
            let live_files: BTreeSet<String> = manifest
                .sources
                .iter()
                .map(|r| file_of(&r.source_id).to_string())
                .collect();
            if request.mode == IngestMode::Additive {
                let others: Vec<String> = live_files
                    .iter()
                    .filter(|file| !wanted.contains(file.as_str()))
                    .cloned()
                    .collect();
                if !others.is_empty() {
                    return Err(IngestError::ReindexWouldPurge {
                        collection: collection.to_string(),
                        others,
                    });
                }
            }
            let rebuild = self.store.begin_rebuild(collection, &profile)?;
            Target::rebuild(rebuild, live_files)
        } else {
            if let Some(recorded) = &manifest.profile
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
            Target::live(collection)
        };
        let target = Arc::new(target);
        let guard = RebuildGuard {
            store: self.store.clone(),
            rebuild: target.rebuild.clone(),
        };
        let manifest = if request.reindex {
            Manifest::default()
        } else {
            manifest
        };
        let written = self
            .write_sources(
                &target,
                request,
                &expansion,
                manifest,
                &*chunker,
                &chunking_label,
                &profile,
                progress,
                &mut report,
            )
            .await;
        guard.finish(&target, written, &self.quarantine).await?;
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

    /// Writes the request's sources into `target` (the live collection, or a reindex's
    /// rebuild): purges what a replace no longer names, then loads, validates, chunks, embeds
    /// and commits source after source.
    #[allow(clippy::too_many_arguments)]
    async fn write_sources(
        &self,
        target: &Arc<Target>,
        request: &IngestRequest,
        expansion: &load::Expansion,
        manifest: Manifest,
        chunker: &dyn crate::chunk::Chunker,
        chunking_label: &str,
        profile: &EmbeddingProfile,
        progress: Option<&(dyn Fn(IngestProgress) + Send + Sync)>,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let collection = target.collection.as_str();
        let wanted: BTreeSet<&str> = expansion.sources.iter().map(|s| s.id.as_str()).collect();
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
                        target,
                        SourceBatch {
                            writes: Vec::new(),
                            deletes: purged,
                        },
                    )
                    .await?;
                report.sources_removed += outcome.sources_deleted;
            }
        }

        // Sources are prepared (fetched, validated, chunked) into a window of at most
        // `rag.ingestion.embed_window` chunks, whose new chunks are embedded in ONE call: the
        // embedder sorts them by length across sources, so its batches carry little padding
        // and its workers stay busy. The stages overlap: while window N is being embedded,
        // window N+1 is prepared, and window N-1's commit (one batch for all its sources) runs
        // on a blocking thread. The model never waits for loading, chunking, sled or tantivy,
        // and commits still land in request order.
        let total = expansion.sources.len();
        let window_chunks = self.settings.embed_window.max(1);
        let mut window = Window::default();
        let mut embedding: Option<WindowEmbedding> = None;
        let mut in_flight: Option<WindowCommit> = None;
        let mut embedder_preparing = false;
        for (index, source) in expansion.sources.iter().enumerate() {
            let prepared = self
                .prepare_source(
                    target,
                    source,
                    &records,
                    chunker,
                    chunking_label,
                    profile,
                    report,
                )
                .await;
            match prepared {
                Ok(prepared) => {
                    // The first source with chunks to embed: the embedder loads (ONNX sessions)
                    // while the rest of the first window is prepared. An unchanged collection
                    // never loads them.
                    if !embedder_preparing && prepared.needs_vectors() {
                        embedder_preparing = true;
                        self.prepare_embedder();
                    }
                    window.push(index, &source.id, prepared);
                }
                Err(error) => {
                    // The window being embedded is dropped (it has written nothing) and the
                    // previous commit finishes (or fails) before the error is reported, so
                    // nothing writes to the target once the caller sees the error.
                    drop(embedding.take());
                    if let Some(job) = in_flight.take() {
                        let _ = job.handle.await;
                    }
                    return Err(error);
                }
            }
            // A full window, or the last source's partial one, starts embedding; the window
            // embedded before it commits meanwhile.
            let last_source = index + 1 == total;
            if window.chunks >= window_chunks || (last_source && !window.entries.is_empty()) {
                let started = self.start_embedding(std::mem::take(&mut window));
                if let Some(previous) = embedding.replace(started) {
                    self.commit_window(target, previous, &mut in_flight, total, progress, report)
                        .await?;
                }
            }
        }
        if let Some(last) = embedding.take() {
            self.commit_window(target, last, &mut in_flight, total, progress, report)
                .await?;
        }
        if let Some(job) = in_flight.take() {
            self.finish_commits(target, job, report).await?;
        }
        Ok(())
    }

    /// Starts loading what the embedder needs for documents, on a task of its own; a failure
    /// is reported by the first embedding call, which tries again.
    fn prepare_embedder(&self) {
        let embedder = Arc::clone(&self.embedder);
        tokio::spawn(async move {
            if let Err(error) = embedder.prepare_for_documents().await {
                tracing::debug!(%error, "preparing the embedder for documents failed");
            }
        });
    }

    /// Starts embedding the window's chunks that have no vector yet, in one embedder call on
    /// a task of its own (so that the next window is prepared meanwhile).
    fn start_embedding(&self, mut window: Window) -> WindowEmbedding {
        let texts: Vec<String> = new_chunks(&mut window.entries)
            .map(|c| c.text.clone())
            .collect();
        let count = texts.len();
        let task = (count > 0).then(|| {
            let embedder = Arc::clone(&self.embedder);
            tokio::spawn(async move { embedder.embed_documents(texts).await })
        });
        WindowEmbedding {
            entries: window.entries,
            count,
            task,
        }
    }

    /// Waits for a window's vectors, then for the previous window's commit, starts this
    /// window's commit (one batch for all its sources) and reports each of its sources'
    /// progress, in source order.
    async fn commit_window(
        &self,
        target: &Arc<Target>,
        mut embedding: WindowEmbedding,
        in_flight: &mut Option<WindowCommit>,
        total: usize,
        progress: Option<&(dyn Fn(IngestProgress) + Send + Sync)>,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let attached = self.attach_vectors(&mut embedding, report).await;
        let previous = in_flight.take();
        if let Err(error) = attached {
            if let Some(job) = previous {
                let _ = job.handle.await;
            }
            return Err(error);
        }
        if let Some(job) = previous {
            self.finish_commits(target, job, report).await?;
        }
        let entries = std::mem::take(&mut embedding.entries);
        // The window's sources land in ONE batch (one sled transaction, one BM25 commit):
        // a commit has a fixed cost (a flush, a tantivy segment) that per-source commits paid
        // hundreds of times per ingestion, on the cores the model needs.
        let mut batch = SourceBatch::default();
        let mut committed = Vec::new();
        for entry in entries {
            match entry.state {
                Prepared::Skipped => report.sources_skipped += 1,
                Prepared::Quarantined | Prepared::Stale => {}
                Prepared::Ready(source) => {
                    committed.push(CommittedSource {
                        upserted: source.pending.iter().map(|(_, chunks)| chunks.len()).sum(),
                        kept_parts: source.kept_parts,
                    });
                    batch.writes.extend(
                        source
                            .pending
                            .into_iter()
                            .map(|(record, chunks)| SourceWrite { record, chunks }),
                    );
                    batch.deletes.extend(source.deletes);
                }
            }
            if let Some(progress) = progress {
                progress(IngestProgress {
                    done: entry.index + 1,
                    total,
                    source: entry.source,
                });
            }
        }
        if !committed.is_empty() {
            let store = self.store.clone();
            let writer = Arc::clone(target);
            let handle = tokio::task::spawn_blocking(move || {
                writer
                    .commit(&*store, batch)
                    .map(|outcome| outcome.sources_deleted)
            });
            *in_flight = Some(WindowCommit {
                handle,
                sources: committed,
            });
        }
        Ok(())
    }

    /// Waits for the window's vectors and gives each new chunk its own.
    async fn attach_vectors(
        &self,
        embedding: &mut WindowEmbedding,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let Some(task) = embedding.task.take() else {
            return Ok(());
        };
        let vectors = task.await.map_err(|e| IngestError::Task(e.to_string()))??;
        let count = embedding.count;
        if vectors.len() != count {
            return Err(EmbedError::Inference(format!(
                "embedder returned {} vectors for {count} chunks",
                vectors.len()
            ))
            .into());
        }
        for (chunk, vector) in new_chunks(&mut embedding.entries).zip(vectors) {
            chunk.vector = vector;
        }
        report.chunks_embedded += count;
        Ok(())
    }

    /// Fetches, validates and chunks one source; its new chunks still lack their vectors.
    #[allow(clippy::too_many_arguments)]
    async fn prepare_source(
        &self,
        target: &Arc<Target>,
        source: &SourceRef,
        records: &BTreeMap<String, SourceRecord>,
        chunker: &dyn crate::chunk::Chunker,
        chunking_label: &str,
        profile: &EmbeddingProfile,
        report: &mut IngestReport,
    ) -> Result<Prepared, IngestError> {
        let collection = target.collection.as_str();
        let profile_label = profile.to_string();
        let previous = part_ids_of(records, &source.id);

        let raw = match load::fetch(source, &self.settings).await {
            Ok(raw) => raw,
            Err(error) => {
                if target.reindexes(source) {
                    return Err(error.into());
                }
                let reason = format!("could not be read: {error}");
                return self
                    .load_failed(target, source, records, &previous, &reason, report)
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
            return Ok(Prepared::Skipped);
        }

        if let Verdict::Rejected { reasons } = self.integrity.check_raw(&source.id, &raw) {
            let excerpt = excerpt_of(&String::from_utf8_lossy(&raw.bytes));
            let reason = reasons.join("; ");
            self.reject(
                target, source, &previous, &file_hash, &reason, &excerpt, report,
            )
            .await?;
            return Ok(Prepared::Quarantined);
        }
        let parsed =
            load::parse_blocking(source.clone(), raw, self.settings.load_limits.clone()).await;
        let documents = match parsed {
            Ok(documents) => documents,
            Err(error) => {
                if target.reindexes(source) {
                    return Err(error.into());
                }
                let reason = format!("could not be parsed: {error}");
                if previous.is_empty() {
                    self.reject(target, source, &previous, &file_hash, &reason, "", report)
                        .await?;
                    return Ok(Prepared::Quarantined);
                }
                return self
                    .load_failed(target, source, records, &previous, &reason, report)
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

        let counter = self.embedder.token_counter();
        let mut kept_parts: BTreeSet<String> = BTreeSet::new();
        let mut pending: Vec<(SourceRecord, Vec<StoredChunk>)> = Vec::new();
        for document in documents {
            let validation = match self.validate(&document) {
                DocumentVerdict::Accept(validation) => validation,
                DocumentVerdict::Refuse(reason) => {
                    let excerpt = excerpt_of(&document.text);
                    self.quarantine_entry(
                        target,
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
                // Recorded for assembly, which then need not tokenise the text at query time.
                metadata.insert(
                    CHUNK_TOKENS_KEY.into(),
                    counter.count_tokens(&chunk.text).to_string(),
                );
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

        if kept_parts.is_empty() {
            // Every part was refused: whatever of the file was searchable goes too.
            self.remove_sources(target, &previous, report).await?;
            return Ok(Prepared::Quarantined);
        }
        // Every part, and the removal of the parts that disappeared, in ONE batch, once the
        // window it waits in is embedded.
        let deletes = previous
            .iter()
            .filter(|id| !kept_parts.contains(**id))
            .map(|id| id.to_string())
            .collect();
        Ok(Prepared::Ready(PreparedSource {
            pending,
            deletes,
            kept_parts,
        }))
    }

    /// Waits for a window's commits and records their outcomes, in source order.
    async fn finish_commits(
        &self,
        target: &Target,
        job: WindowCommit,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let removed = job
            .handle
            .await
            .map_err(|e| IngestError::Task(e.to_string()))??;
        report.sources_removed += removed;
        for source in &job.sources {
            report.chunks_upserted += source.upserted;
            report.sources_ingested += 1;
            for part in &source.kept_parts {
                self.quarantine
                    .remove(&target.collection, part)
                    .map_err(|e| IngestError::Quarantine(e.to_string()))?;
            }
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

    /// Deletes the stored sources `ids` (a refused file's parts) in one batch, counting them in
    /// the report.
    async fn remove_sources(
        &self,
        target: &Arc<Target>,
        ids: &[&str],
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        if ids.is_empty() {
            return Ok(());
        }
        let batch = SourceBatch {
            writes: Vec::new(),
            deletes: ids.iter().map(|id| id.to_string()).collect(),
        };
        report.sources_removed += self.commit(target, batch).await?.sources_deleted;
        Ok(())
    }

    /// Commits a batch to `target` on a blocking thread.
    async fn commit(
        &self,
        target: &Arc<Target>,
        batch: SourceBatch,
    ) -> Result<crate::store::BatchOutcome, IngestError> {
        let store = self.store.clone();
        let target = Arc::clone(target);
        let outcome = tokio::task::spawn_blocking(move || target.commit(&*store, batch))
            .await
            .map_err(|e| IngestError::Task(e.to_string()))??;
        Ok(outcome)
    }

    /// A source that could not be loaded: a source ingested before keeps its last good chunks,
    /// its manifest entries marked stale with `reason` (one batch; nothing is written when
    /// they already carry that mark); a source never ingested is quarantined.
    async fn load_failed(
        &self,
        target: &Arc<Target>,
        source: &SourceRef,
        records: &BTreeMap<String, SourceRecord>,
        previous: &[&str],
        reason: &str,
        report: &mut IngestReport,
    ) -> Result<Prepared, IngestError> {
        let collection = target.collection.as_str();
        if previous.is_empty() {
            self.reject(target, source, previous, "", reason, "", report)
                .await?;
            return Ok(Prepared::Quarantined);
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
            return Ok(Prepared::Stale);
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
            target,
            SourceBatch {
                writes,
                deletes: Vec::new(),
            },
        )
        .await?;
        Ok(Prepared::Stale)
    }

    /// Quarantines a whole source and purges, in one batch, whatever of it was searchable.
    #[allow(clippy::too_many_arguments)]
    async fn reject(
        &self,
        target: &Arc<Target>,
        source: &SourceRef,
        previous: &[&str],
        hash: &str,
        reason: &str,
        excerpt: &str,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let collection = target.collection.as_str();
        self.quarantine_entry(target, &source.id, hash, reason, excerpt)?;
        self.remove_sources(target, previous, report).await?;
        report.quarantined.push(QuarantinedSource {
            source: source.id.clone(),
            reason: reason.to_string(),
        });
        tracing::warn!(collection, source = %source.id, reason, "source quarantined");
        Ok(())
    }

    /// Quarantines a source (for a reindex, once its rebuild is published).
    fn quarantine_entry(
        &self,
        target: &Target,
        source_id: &str,
        hash: &str,
        reason: &str,
        excerpt: &str,
    ) -> Result<(), IngestError> {
        let entry = QuarantineEntry {
            collection: target.collection.clone(),
            source_id: source_id.to_string(),
            reason: reason.to_string(),
            content_hash: hash.to_string(),
            quarantined_at: now_rfc3339(),
            excerpt: excerpt.to_string(),
        };
        if target.rebuild.is_some() {
            target
                .deferred
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(entry);
            return Ok(());
        }
        self.quarantine
            .put(&entry)
            .map_err(|e| IngestError::Quarantine(e.to_string()))
    }
}

/// Where one ingestion writes: the live collection, or — for a reindex — a rebuild beside it
/// that is published once every source is in.
struct Target {
    collection: String,
    rebuild: Option<Rebuild>,
    /// Reindex: the files the live collection holds. One of them failing to load fails the
    /// reindex (publishing without it would lose its last good content).
    live_files: BTreeSet<String>,
    /// Reindex: quarantine entries recorded once the rebuild is published (recorded earlier, a
    /// source the live collection still serves would be quarantined and searchable at once if
    /// the reindex then failed).
    deferred: Mutex<Vec<QuarantineEntry>>,
}

impl Target {
    fn live(collection: &str) -> Self {
        Self {
            collection: collection.to_string(),
            rebuild: None,
            live_files: BTreeSet::new(),
            deferred: Mutex::new(Vec::new()),
        }
    }

    fn rebuild(rebuild: Rebuild, live_files: BTreeSet<String>) -> Self {
        Self {
            collection: rebuild.collection().to_string(),
            rebuild: Some(rebuild),
            live_files,
            deferred: Mutex::new(Vec::new()),
        }
    }

    /// Commits a batch (blocking).
    fn commit(
        &self,
        store: &dyn DocumentStore,
        batch: SourceBatch,
    ) -> Result<BatchOutcome, StoreError> {
        match &self.rebuild {
            Some(rebuild) => store.commit_rebuild(rebuild, batch),
            None => store.commit_sources(&self.collection, batch),
        }
    }

    /// Whether this is a reindex of a collection holding `source`: then failing to load it
    /// fails the reindex.
    fn reindexes(&self, source: &SourceRef) -> bool {
        self.rebuild.is_some() && self.live_files.contains(&source.id)
    }
}

/// Ends a reindex's rebuild: published when the sources were written, discarded otherwise —
/// also when the ingestion is dropped half-way (a caller gone), so no rebuild outlives it.
struct RebuildGuard {
    store: Arc<dyn DocumentStore>,
    rebuild: Option<Rebuild>,
}

impl RebuildGuard {
    /// Publishes the rebuild after `written` succeeded (then records the deferred quarantine
    /// entries), or discards it and reports the failure as [`IngestError::ReindexAborted`].
    /// Without a rebuild, passes `written` through.
    async fn finish(
        mut self,
        target: &Target,
        written: Result<(), IngestError>,
        quarantine: &Arc<dyn QuarantineStore>,
    ) -> Result<(), IngestError> {
        let Some(rebuild) = self.rebuild.take() else {
            return written;
        };
        let store = self.store.clone();
        let outcome = match written {
            Ok(()) => {
                let (store, rebuild) = (store.clone(), rebuild.clone());
                tokio::task::spawn_blocking(move || store.publish_rebuild(&rebuild))
                    .await
                    .map_err(|e| IngestError::Task(e.to_string()))
                    .and_then(|published| published.map_err(IngestError::from))
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {
                let deferred =
                    std::mem::take(&mut *target.deferred.lock().unwrap_or_else(|p| p.into_inner()));
                for entry in &deferred {
                    quarantine
                        .put(entry)
                        .map_err(|e| IngestError::Quarantine(e.to_string()))?;
                }
                Ok(())
            }
            Err(error) => {
                let aborted = tokio::task::spawn_blocking(move || store.abort_rebuild(&rebuild))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|result| result.map_err(|e| e.to_string()));
                if let Err(reason) = aborted {
                    tracing::warn!(collection = %target.collection, %reason, "discarding a failed rebuild failed; its data is removed when the store is next opened");
                }
                Err(IngestError::ReindexAborted {
                    collection: target.collection.clone(),
                    source: Box::new(error),
                })
            }
        }
    }
}

impl Drop for RebuildGuard {
    fn drop(&mut self) {
        if let Some(rebuild) = self.rebuild.take()
            && let Err(error) = self.store.abort_rebuild(&rebuild)
        {
            tracing::warn!(collection = rebuild.collection(), %error, "discarding an abandoned rebuild failed; its data is removed when the store is next opened");
        }
    }
}

/// What preparing a source came to.
enum Prepared {
    Skipped,
    Quarantined,
    /// Could not be loaded; its last good content is kept, marked stale.
    Stale,
    /// Loaded, validated and chunked; waits in the window for its vectors and its commit.
    Ready(PreparedSource),
}

/// A source's parts, each with its chunks (new ones without a vector yet), and the parts it
/// no longer has.
struct PreparedSource {
    pending: Vec<(SourceRecord, Vec<StoredChunk>)>,
    deletes: Vec<String>,
    kept_parts: BTreeSet<String>,
}

impl Prepared {
    /// Chunks the window holds for this source.
    fn chunks(&self) -> usize {
        match self {
            Prepared::Ready(source) => source.pending.iter().map(|(_, c)| c.len()).sum(),
            _ => 0,
        }
    }

    /// Whether any of its chunks still needs a vector.
    fn needs_vectors(&self) -> bool {
        match self {
            Prepared::Ready(source) => source
                .pending
                .iter()
                .any(|(_, chunks)| chunks.iter().any(|c| c.vector.is_empty())),
            _ => false,
        }
    }
}

/// Prepared sources waiting to be embedded together, in source order.
#[derive(Default)]
struct Window {
    entries: Vec<WindowEntry>,
    /// Chunks held by the entries.
    chunks: usize,
}

struct WindowEntry {
    /// The source's position in the request (for progress).
    index: usize,
    source: String,
    state: Prepared,
}

impl Window {
    fn push(&mut self, index: usize, source: &str, state: Prepared) {
        self.chunks += state.chunks();
        self.entries.push(WindowEntry {
            index,
            source: source.to_string(),
            state,
        });
    }
}

/// A window whose new chunks are being embedded on a task of their own. Dropping it (an
/// ingestion that fails meanwhile) aborts the task: it has written nothing.
struct WindowEmbedding {
    entries: Vec<WindowEntry>,
    /// Chunks sent to the embedder.
    count: usize,
    /// `None` when the window has no new chunk.
    task: Option<tokio::task::JoinHandle<Result<Vec<Vec<f32>>, EmbedError>>>,
}

impl Drop for WindowEmbedding {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The window's chunks that have no vector yet, in window order.
fn new_chunks(entries: &mut [WindowEntry]) -> impl Iterator<Item = &mut StoredChunk> {
    entries
        .iter_mut()
        .filter_map(|entry| match &mut entry.state {
            Prepared::Ready(source) => Some(source),
            _ => None,
        })
        .flat_map(|source| {
            source
                .pending
                .iter_mut()
                .flat_map(|(_, chunks)| chunks.iter_mut())
        })
        .filter(|chunk| chunk.vector.is_empty())
}

/// A window's commit in flight: one store batch holding all of the window's sources.
struct WindowCommit {
    /// The number of sources the batch deleted (stale parts of multi-part sources).
    handle: tokio::task::JoinHandle<Result<usize, StoreError>>,
    sources: Vec<CommittedSource>,
}

struct CommittedSource {
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
