//! Knowledge operations, each written once: ingest, retrieve (search), query, collections,
//! manifest, delete, quarantine and evaluate.
//!
//! [`KnowledgeApi`] is the contract every surface speaks. [`KnowledgeApp`] implements it over
//! this process's store, embedder and profiles (the CLI without `--server`, and the daemon
//! behind its gRPC services); `client::RemoteKnowledge` implements it over gRPC (the CLI with
//! `--server`). A field a local command accepts is a field of these request types, so it is
//! accepted remotely too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use orkeon_agents::llm::ExtractiveSettings;
use orkeon_agents::llm::extractive::ExtractiveModel;
use orkeon_crews::ports::ChatModel;
use orkeon_knowledge::crew_knowledge::CollectionGates;
use orkeon_knowledge::eval::harness::{EvalHarness, EvalOptions, EvalProgress};
use orkeon_knowledge::eval::{EvalReport, check_gate, load_dataset, load_floors, render_markdown};
use orkeon_knowledge::ingest::{IngestMode, IngestProgress, IngestReport, IngestRequest};
use orkeon_knowledge::query::generate::citation;
use orkeon_knowledge::query::{
    ProfileResolver, RagQuery, RetrieveOnly, StagedRagPipeline, resolve_options,
};
use orkeon_knowledge::settings::ChunkingSettings;
use orkeon_knowledge::store::{
    CollectionInfo, DocumentStore, Manifest, ScratchLayer, SearchMode, SearchRequest,
};
use orkeon_knowledge::types::{RagAnswer, RagTrace};
use orkeon_knowledge::validate::{QuarantineEntry, QuarantineStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::OnceCell;

use super::ServiceError;
use crate::config::{Config, Limits};
use crate::knowledge_host::{Components, KnowledgeHost};
use crate::storage::Storage;

/// Progress of an ingestion, for progress bars.
pub type IngestProgressFn<'a> = &'a (dyn Fn(IngestProgress) + Send + Sync);
/// Progress of an evaluation, for progress bars.
pub type EvalProgressFn<'a> = &'a (dyn Fn(EvalProgress) + Send + Sync);

/// Chunker settings a request overrides; unset fields keep the configured default
/// (`rag.ingestion.default_chunking`). The one place request and defaults are merged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkingOverrides {
    pub strategy: Option<String>,
    pub max_tokens: Option<usize>,
    pub overlap: Option<usize>,
}

impl ChunkingOverrides {
    pub fn is_empty(&self) -> bool {
        self.strategy.is_none() && self.max_tokens.is_none() && self.overlap.is_none()
    }

    /// `None` (the pipeline's default) when nothing is overridden.
    pub fn resolve(&self, defaults: &ChunkingSettings) -> Option<ChunkingSettings> {
        (!self.is_empty()).then(|| ChunkingSettings {
            strategy: self
                .strategy
                .clone()
                .unwrap_or_else(|| defaults.strategy.clone()),
            max_tokens: self.max_tokens.unwrap_or(defaults.max_tokens),
            // A size the request names wins over a model-relative default size.
            max_tokens_percent: match self.max_tokens {
                Some(_) => None,
                None => defaults.max_tokens_percent,
            },
            overlap: self.overlap.unwrap_or(defaults.overlap),
            ..defaults.clone()
        })
    }
}

/// Ingest sources into a collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngestParams {
    pub collection: String,
    /// Paths, globs or URLs.
    pub sources: Vec<String>,
    pub chunking: ChunkingOverrides,
    /// Purge and rebuild the collection from the named sources.
    pub reindex: bool,
    /// The named sources become the collection's whole set (sources not named are purged);
    /// `false`: additive, every other source is kept.
    #[serde(default)]
    pub replace: bool,
    /// Folder relative sources resolve against (and an allowed root besides
    /// `rag.ingestion.roots`). `None` — a remote request (gRPC, `--server`): the first ingestion
    /// root ([`crate::config::Config::ingestion_roots`]), never the serving process's working
    /// directory; absolute paths must then lie under a root.
    pub base_dir: Option<PathBuf>,
}

/// A retrieval (search) or a query (with generation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryParams {
    /// `None`: `rag.collection`.
    pub collection: Option<String>,
    pub query: String,
    /// `None`: `rag.profile`.
    pub profile: Option<String>,
    /// `None`: the profile's top_n.
    pub top_n: Option<usize>,
    /// Retrieval mode override (retrieval only): `bm25` reads the lexical index directly,
    /// `vector`/`hybrid` switch the profile's hybrid retrieval off/on.
    pub mode: Option<SearchMode>,
}

/// Evaluate retrieval (and generation) quality on a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalParams {
    /// A golden YAML file or a BEIR folder.
    pub dataset: PathBuf,
    pub split: String,
    pub profiles: Vec<String>,
    /// Zero network: the offline extractive model generates, the heuristic judge grades.
    pub offline: bool,
    pub generate: bool,
    pub concurrency: usize,
    pub retrieve_k: usize,
    /// Floors to check the report against.
    pub gate: Option<PathBuf>,
    /// Evaluate this existing collection as it is instead of ingesting the dataset's corpus
    /// (golden datasets; refs are matched against the collection's source ids).
    #[serde(default)]
    pub collection: Option<String>,
    /// Folder relative `dataset` and `gate` paths resolve against, as given. `None` — a
    /// remote request (gRPC, `--server`): they resolve against the first ingestion root and
    /// must lie under a root ([`crate::config::Config::ingestion_roots`]), like ingestion's.
    #[serde(default)]
    pub base_dir: Option<PathBuf>,
    /// Chunking of the dataset's corpus instead of the dataset's own `chunking:` (what is not
    /// given keeps the dataset's, else the configured default).
    #[serde(default)]
    pub chunking: ChunkingOverrides,
    /// Ingest the corpus into a throwaway collection for this evaluation alone (in memory,
    /// dropped when it ends; BEIR files go to a temporary folder): nothing is stored.
    #[serde(default)]
    pub ephemeral: bool,
}

/// `path` of a remote request, confined to `roots`: a relative path joins the first root; the
/// result must exist and lie (after resolving `..` and symlinks) under one of the roots.
pub fn confine_to_roots(
    field: &str,
    path: &Path,
    roots: &[PathBuf],
) -> Result<PathBuf, ServiceError> {
    let listed = || {
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(first) = roots.first() else {
        return Err(ServiceError::invalid(
            field,
            "no ingestion root exists, so a remote request can read no file; set rag.ingestion.roots",
        ));
    };
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        first.join(path)
    };
    let canonical = std::fs::canonicalize(&joined).map_err(|e| {
        ServiceError::invalid(
            field,
            format!(
                "{} cannot be read ({e}); a remote request's relative paths resolve against {}",
                joined.display(),
                first.display()
            ),
        )
    })?;
    let inside = roots
        .iter()
        .any(|root| std::fs::canonicalize(root).is_ok_and(|root| canonical.starts_with(root)));
    if !inside {
        return Err(ServiceError::invalid(
            field,
            format!(
                "{} is outside the allowed roots [{}]; a remote request reads only under rag.ingestion.roots: move the file there or add its folder to rag.ingestion.roots",
                path.display(),
                listed()
            ),
        ));
    }
    Ok(canonical)
}

/// An evaluation's report, rendered, and its gate verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalOutcome {
    pub report: EvalReport,
    pub markdown: String,
    pub gate: Option<GateVerdict>,
}

/// The quality gate's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateVerdict {
    pub passed: bool,
    /// One line: what passed, or each floor that failed.
    pub messages: Vec<String>,
}

/// The knowledge operations.
#[async_trait]
pub trait KnowledgeApi: Send + Sync {
    async fn ingest(
        &self,
        params: IngestParams,
        progress: Option<IngestProgressFn<'_>>,
    ) -> Result<IngestReport, ServiceError>;
    /// Retrieval only: the profile's stages up to assembly, no LLM call.
    async fn retrieve(&self, params: QueryParams) -> Result<RagAnswer, ServiceError>;
    /// A full query with cited generation.
    async fn query(&self, params: QueryParams) -> Result<RagAnswer, ServiceError>;
    async fn collections(&self) -> Result<Vec<CollectionInfo>, ServiceError>;
    async fn manifest(&self, collection: &str) -> Result<Manifest, ServiceError>;
    async fn delete(&self, collection: &str) -> Result<(), ServiceError>;
    /// Quarantined sources (of one collection, or of all), sorted by collection and source.
    async fn quarantine(
        &self,
        collection: Option<&str>,
    ) -> Result<Vec<QuarantineEntry>, ServiceError>;
    async fn evaluate(
        &self,
        params: EvalParams,
        progress: Option<EvalProgressFn<'_>>,
    ) -> Result<EvalOutcome, ServiceError>;
    /// Makes `collection` a throwaway collection of this process from now on: ingested, listed
    /// and searched like any other, held in memory (`limits.max_ephemeral_chunks`), never
    /// written to the store, gone when the process ends (or on `delete`). A stored collection
    /// of the same name is shadowed, never touched. Only the process that uses a scratch
    /// collection can hold it: a daemon keeps none for remote callers.
    async fn scratch(&self, collection: &str) -> Result<(), ServiceError> {
        Err(ServiceError::FailedPrecondition(format!(
            "cannot make '{collection}' a throwaway collection here: a daemon keeps none for remote callers; run the script in process (without --server), or ingest into a stored collection and delete it afterwards"
        )))
    }
}

/// The throwaway collection of one `ephemeral` evaluation: dropped, with its temporary BEIR
/// files, when the evaluation ends (whichever way).
struct ScratchEval {
    layer: ScratchLayer,
    name: String,
    cache_dir: PathBuf,
}

impl Drop for ScratchEval {
    fn drop(&mut self) {
        self.layer.store.discard(&self.name);
        let _ = std::fs::remove_dir_all(&self.cache_dir);
    }
}

/// What needs the embedder (loaded on first use, so listing collections loads no model).
struct Engine {
    host: Arc<KnowledgeHost>,
    resolver: Arc<ProfileResolver>,
}

/// The knowledge operations over this process's components.
pub struct KnowledgeApp {
    config: Arc<Config>,
    storage: Arc<Storage>,
    /// The documents (`storage.documents`, or the host's store over it).
    store: Arc<dyn DocumentStore>,
    engine: OnceCell<Engine>,
    gates: Arc<CollectionGates>,
    /// The rerankers and transformers the engine's pipelines are built from.
    components: Components,
    /// This process's throwaway collections (`store` reads through it).
    scratch: ScratchLayer,
    /// Numbers the throwaway collections of `ephemeral` evaluations.
    next_scratch: std::sync::atomic::AtomicU64,
}

impl KnowledgeApp {
    /// Over a daemon's components (the gates are the ones crews' retrievals respect).
    pub fn new(
        config: Arc<Config>,
        host: Arc<KnowledgeHost>,
        resolver: Arc<ProfileResolver>,
        gates: Arc<CollectionGates>,
    ) -> Self {
        Self {
            config,
            storage: host.storage.clone(),
            store: host.store.clone(),
            components: host.components.clone(),
            scratch: host.scratch.clone(),
            next_scratch: Default::default(),
            engine: OnceCell::new_with(Some(Engine { host, resolver })),
            gates,
        }
    }

    /// For one CLI command: opens the store now, the embedder when an operation needs it.
    pub fn open(config: Config) -> anyhow::Result<Self> {
        let components = Components::builtin(&config.embeddings);
        Self::open_with(config, components)
    }

    /// [`KnowledgeApp::open`] with the host program's rerankers and transformers (selected by
    /// name in the configuration like the built-ins).
    pub fn open_with(config: Config, components: Components) -> anyhow::Result<Self> {
        let storage = KnowledgeHost::open_store(&config)?;
        let scratch = KnowledgeHost::scratch_layer(&config, &storage, Arc::default());
        Ok(Self {
            config: Arc::new(config),
            store: scratch.store.clone(),
            storage,
            engine: OnceCell::new(),
            gates: Arc::default(),
            components,
            scratch,
            next_scratch: Default::default(),
        })
    }

    /// Flushes the store (one-shot commands call it before exiting).
    pub fn flush(&self) -> Result<(), ServiceError> {
        self.storage.flush().map_err(ServiceError::from)
    }

    async fn engine(&self) -> Result<&Engine, ServiceError> {
        self.engine
            .get_or_try_init(|| async {
                let host = KnowledgeHost::with_scratch(
                    &self.config,
                    self.storage.clone(),
                    self.scratch.clone(),
                    self.components.clone(),
                )
                .map_err(|e| ServiceError::FailedPrecondition(format!("{e:#}")))?;
                let chat = self.components.chat_model(&self.config.llm).ok();
                let resolver = host.resolver(&self.config, chat);
                Ok(Engine {
                    host: Arc::new(host),
                    resolver,
                })
            })
            .await
    }

    /// `NotFound` listing the known collections unless `name` exists.
    fn require_collection(&self, name: &str) -> Result<(), ServiceError> {
        let known: Vec<String> = self
            .store
            .collections()?
            .into_iter()
            .map(|c| c.name)
            .collect();
        if known.iter().any(|c| c == name) {
            return Ok(());
        }
        Err(ServiceError::unknown_collection(name, known))
    }

    fn collection_of(&self, given: Option<String>) -> Result<String, ServiceError> {
        given
            .filter(|c| !c.trim().is_empty())
            .or_else(|| self.config.rag.collection.clone())
            .ok_or_else(|| {
                ServiceError::invalid(
                    "collection",
                    "is required: name one (--collection), or set rag.collection",
                )
            })
    }

    fn profile_of(&self, given: Option<String>) -> String {
        given
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| self.config.rag.profile.clone())
    }

    /// Checks the common fields of a retrieval or query; returns (collection, profile, query).
    fn rag_query(&self, params: &QueryParams) -> Result<(RagQuery, String), ServiceError> {
        ServiceError::require("query", &params.query)?;
        let limits = &self.config.limits;
        Limits::check(
            "max_query_bytes",
            params.query.len(),
            limits.max_query_bytes,
            "bytes",
        )
        .map_err(|m| ServiceError::invalid("query", m))?;
        if let Some(top_n) = params.top_n {
            Limits::check("max_top_n", top_n, limits.max_top_n, "passages")
                .map_err(|m| ServiceError::invalid("top_n", m))?;
        }
        let collection = self.collection_of(params.collection.clone())?;
        self.require_collection(&collection)?;
        let profile = self.profile_of(params.profile.clone());
        Ok((
            RagQuery {
                text: params.query.clone(),
                collection,
                top_n: params.top_n.filter(|&n| n > 0),
            },
            profile,
        ))
    }

    /// Lexical search straight from the BM25 index (the `bm25` mode override).
    fn bm25_search(&self, query: &RagQuery) -> Result<RagAnswer, ServiceError> {
        let started = Instant::now();
        let top_n = query.top_n.unwrap_or(5);
        let results = self.store.search(
            &query.collection,
            &SearchRequest {
                mode: SearchMode::Bm25,
                text: Some(query.text.clone()),
                vector: None,
                k: top_n,
                rrf_k: self.config.rag.store.rrf_k,
                fusion: Default::default(),
            },
        )?;
        let mut trace = RagTrace::default();
        trace.push(
            "retrieve",
            started.elapsed().as_secs_f64() * 1000.0,
            json!({"mode": "bm25", "top_k": top_n, "candidates": results.len(), "hybrid": false}),
        );
        trace.push("generate", 0.0, json!({"skipped": "retrieval-only"}));
        let citations = results
            .into_iter()
            .enumerate()
            .map(|(i, r)| citation(i as u32 + 1, &r))
            .collect();
        Ok(RagAnswer {
            text: String::new(),
            citations,
            trace,
        })
    }
}

#[async_trait]
impl KnowledgeApi for KnowledgeApp {
    async fn ingest(
        &self,
        params: IngestParams,
        progress: Option<IngestProgressFn<'_>>,
    ) -> Result<IngestReport, ServiceError> {
        ServiceError::require("collection", &params.collection)?;
        if params.sources.is_empty() {
            return Err(ServiceError::invalid(
                "sources",
                "name at least one path, glob or URL",
            ));
        }
        Limits::check(
            "max_sources_per_request",
            params.sources.len(),
            self.config.limits.max_sources_per_request,
            "sources",
        )
        .map_err(|m| ServiceError::invalid("sources", m))?;
        let base_dir = match params.base_dir {
            Some(dir) => dir,
            None => self.config.ingestion_roots().into_iter().next().ok_or_else(|| {
                ServiceError::invalid(
                    "sources",
                    format!(
                        "no ingestion root exists (rag.ingestion.roots is empty and neither the crews folder {} nor {} is a directory); set rag.ingestion.roots",
                        self.config.crews_dir.display(),
                        self.config.data_dir.join("sources").display()
                    ),
                )
            })?,
        };
        let request = IngestRequest {
            chunking: params
                .chunking
                .resolve(&self.config.rag.ingestion.default_chunking),
            collection: params.collection,
            base_dir,
            sources: params.sources,
            reindex: params.reindex,
            mode: IngestMode::from_replace(params.replace),
        };
        let engine = self.engine().await?;
        let _writing = self.gates.write(&request.collection).await;
        let report = engine.host.ingestion.ingest(&request, progress).await?;
        Ok(report)
    }

    async fn retrieve(&self, params: QueryParams) -> Result<RagAnswer, ServiceError> {
        let (query, profile) = self.rag_query(&params)?;
        let _reading = self.gates.read(&query.collection).await;
        if params.mode == Some(SearchMode::Bm25) {
            return self.bm25_search(&query);
        }
        let engine = self.engine().await?;
        match params.mode {
            Some(mode) => {
                let mut settings = self.config.rag.clone();
                settings.retrieval.hybrid.enabled = Some(mode == SearchMode::Hybrid);
                let options = resolve_options(&profile, &settings)?;
                let pipeline =
                    StagedRagPipeline::new(&profile, options, engine.host.pipeline_deps(None))?;
                Ok(RetrieveOnly::retrieve(&pipeline, &query).await?)
            }
            None => {
                let pipeline = engine.resolver.resolve(&profile)?;
                let retriever = pipeline.retriever().ok_or_else(|| {
                    ServiceError::FailedPrecondition(format!(
                        "profile '{profile}' cannot retrieve without generation; use query, or a staged profile (fast, balanced, quality)"
                    ))
                })?;
                Ok(retriever.retrieve(&query).await?)
            }
        }
    }

    async fn query(&self, params: QueryParams) -> Result<RagAnswer, ServiceError> {
        if params.mode.is_some() {
            return Err(ServiceError::invalid(
                "mode",
                "applies to retrieval (search) only; a query runs its profile's retrieval",
            ));
        }
        let (query, profile) = self.rag_query(&params)?;
        let engine = self.engine().await?;
        let pipeline = engine.resolver.resolve(&profile)?;
        let _reading = self.gates.read(&query.collection).await;
        Ok(pipeline.query(&query).await?)
    }

    async fn collections(&self) -> Result<Vec<CollectionInfo>, ServiceError> {
        Ok(self.store.collections()?)
    }

    async fn manifest(&self, collection: &str) -> Result<Manifest, ServiceError> {
        ServiceError::require("collection", collection)?;
        self.require_collection(collection)?;
        let _reading = self.gates.read(collection).await;
        Ok(self.store.manifest(collection)?)
    }

    async fn delete(&self, collection: &str) -> Result<(), ServiceError> {
        ServiceError::require("collection", collection)?;
        let _writing = self.gates.write(collection).await;
        if self.scratch.store.discard(collection) {
            return Ok(());
        }
        self.require_collection(collection)?;
        self.store.drop_collection(collection)?;
        Ok(())
    }

    async fn scratch(&self, collection: &str) -> Result<(), ServiceError> {
        ServiceError::require("collection", collection)?;
        self.scratch
            .store
            .add(collection)
            .map_err(|e| ServiceError::invalid("collection", e.to_string()))?;
        Ok(())
    }

    async fn quarantine(
        &self,
        collection: Option<&str>,
    ) -> Result<Vec<QuarantineEntry>, ServiceError> {
        let collection = collection.filter(|c| !c.trim().is_empty());
        if let Some(name) = collection {
            self.require_collection(name)?;
        }
        // Through the scratch layer: a throwaway collection's refusals are listed too.
        QuarantineStore::list(self.scratch.quarantine.as_ref(), collection)
            .map_err(|e| ServiceError::Internal(e.to_string()))
    }

    async fn evaluate(
        &self,
        params: EvalParams,
        progress: Option<EvalProgressFn<'_>>,
    ) -> Result<EvalOutcome, ServiceError> {
        let params = match params.base_dir {
            Some(_) => params,
            None => {
                let roots = self.config.ingestion_roots();
                EvalParams {
                    dataset: confine_to_roots("dataset", &params.dataset, &roots)?,
                    gate: params
                        .gate
                        .as_deref()
                        .map(|gate| confine_to_roots("gate", gate, &roots))
                        .transpose()?,
                    ..params
                }
            }
        };
        let mut dataset = load_dataset(&params.dataset, &params.split)?;
        let existing = params.collection.filter(|c| !c.trim().is_empty());
        if let Some(collection) = &existing {
            if params.ephemeral {
                return Err(ServiceError::invalid(
                    "ephemeral",
                    format!(
                        "evaluates a throwaway copy of the dataset's corpus; it cannot also evaluate the existing collection '{collection}' (drop one of the two)"
                    ),
                ));
            }
            self.require_collection(collection)?;
        }
        let defaults = dataset
            .chunking
            .clone()
            .unwrap_or_else(|| self.config.rag.ingestion.default_chunking.clone());
        if let Some(chunking) = params.chunking.resolve(&defaults) {
            dataset.chunking = Some(chunking);
        }
        let mut cache_dir = self.config.data_dir.join("eval-cache");
        let scratch = if params.ephemeral {
            let n = self
                .next_scratch
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{}.scratch-{n}", dataset.collection);
            self.scratch
                .store
                .add(&name)
                .map_err(|e| ServiceError::invalid("ephemeral", e.to_string()))?;
            dataset.collection = name.clone();
            cache_dir =
                std::env::temp_dir().join(format!("orkeon-eval-{}-{n}", std::process::id()));
            Some(ScratchEval {
                layer: self.scratch.clone(),
                name,
                cache_dir: cache_dir.clone(),
            })
        } else {
            None
        };
        let floors = params.gate.as_deref().map(load_floors).transpose()?;
        let engine = self.engine().await?;
        let chat: Option<Arc<dyn ChatModel>> = if params.offline {
            Some(Arc::new(ExtractiveModel::new(
                &ExtractiveSettings::default(),
            )))
        } else {
            self.components.chat_model(&self.config.llm).ok()
        };
        let host = &engine.host;
        let resolver = host.resolver(&self.config, chat.clone());
        // Retrieval metrics rank retrieve_k passages: lift the context budget so assembly does
        // not cut the ranking (generation keeps the configured budget).
        let mut deep = (*self.config).clone();
        deep.rag.context.max_tokens = Some(1_000_000);
        let retrieval_resolver = host.resolver(&deep, chat.clone());
        // Recall above 10 comes from a deep retrieval with reranking off (a reranker only
        // reorders what it is given, so the documents that deep are the same).
        let mut unranked = deep.clone();
        unranked.rag.rerank.enabled = Some(false);
        let depth_resolver = host.resolver(&unranked, chat.clone());
        let judge = if params.offline { None } else { chat };
        let harness = EvalHarness::new(host.ingestion.clone(), resolver, judge)
            .with_retrieval_resolver(retrieval_resolver)
            .with_depth_resolver(depth_resolver);
        let options = EvalOptions {
            profiles: params.profiles,
            offline: params.offline,
            generate: params.generate,
            concurrency: params.concurrency.max(1),
            retrieve_k: params.retrieve_k,
            cache_dir: Some(cache_dir),
            collection: existing.clone(),
            ..EvalOptions::default()
        };
        // An existing collection is only read: hold its read gate while the cases run.
        let _reading = match &existing {
            Some(collection) => Some(self.gates.read(collection).await),
            None => None,
        };
        let report = harness.run(&dataset, &options, progress).await;
        drop(scratch);
        let report = report?;
        self.storage.flush()?;
        let markdown = render_markdown(&report);
        let gate = floors.map(|floors| match check_gate(&report, &floors) {
            Ok(()) => GateVerdict {
                passed: true,
                messages: vec![format!(
                    "quality gate passed: {} at or above the floors set on {}",
                    floors.describe(),
                    floors.set_on
                )],
            },
            Err(failures) => GateVerdict {
                passed: false,
                messages: failures
                    .into_iter()
                    .map(|f| format!("quality gate failed: {f}"))
                    .collect(),
            },
        });
        Ok(EvalOutcome {
            report,
            markdown,
            gate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunking_overrides_merge_with_the_configured_defaults_in_one_way() {
        let defaults = ChunkingSettings {
            strategy: "recursive".into(),
            max_tokens: 256,
            max_tokens_percent: None,
            overlap: 32,
            breakpoint_percentile: 10,
        };
        assert_eq!(ChunkingOverrides::default().resolve(&defaults), None);
        // An overridden strategy keeps the default size and overlap (it used to become 0 over
        // gRPC).
        let only_strategy = ChunkingOverrides {
            strategy: Some("sentence".into()),
            ..Default::default()
        };
        let merged = only_strategy.resolve(&defaults).expect("overridden");
        assert_eq!(
            (merged.strategy.as_str(), merged.max_tokens, merged.overlap),
            ("sentence", 256, 32)
        );
        let explicit_zero = ChunkingOverrides {
            overlap: Some(0),
            ..Default::default()
        };
        let merged = explicit_zero.resolve(&defaults).expect("overridden");
        assert_eq!(
            (merged.strategy.as_str(), merged.max_tokens, merged.overlap),
            ("recursive", 256, 0)
        );
    }
}
