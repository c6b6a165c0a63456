//! The `rag` and `crew` globals of scripts: each method converts a Rhai map into a request of
//! the application layer, runs it on the [`KnowledgeApi`] / [`CrewApi`] the script was given,
//! and converts the result (serde) into a map with the same fields as the JSON output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rhai::serde::{from_dynamic, to_dynamic};
use rhai::{Dynamic, Engine, EvalAltResult, Map};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use orkeon_knowledge::store::SearchMode;

use crate::service::{
    ChunkingOverrides, CrewApi, EvalParams, IngestParams, KickoffParams, KnowledgeApi, QueryParams,
    ServiceError,
};

type CallResult = Result<Dynamic, Box<EvalAltResult>>;

/// What both globals share: the operations, where relative paths resolve, the runtime their
/// futures run on, and the script's deadline.
pub(super) struct Shared {
    pub knowledge: Arc<dyn KnowledgeApi>,
    pub crews: Arc<dyn CrewApi>,
    pub base_dir: Option<PathBuf>,
    pub runtime: tokio::runtime::Handle,
    pub deadline: Instant,
    pub timeout: Duration,
}

impl Shared {
    /// Runs one operation to completion on the runtime, bounded by the script's wall time.
    fn call<T>(
        &self,
        what: &str,
        operation: impl std::future::Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.runtime
            .block_on(async { tokio::time::timeout(left, operation).await })
            .map_err(|_| {
                format!(
                    "{what} did not finish within the script's wall time of {} s (limits.script_timeout_secs)",
                    self.timeout.as_secs()
                )
            })?
            .map_err(|error| format!("{what}: {error}"))
    }
}

/// The `rag` global.
#[derive(Clone)]
pub struct RagHandle(Arc<Shared>);

/// The `crew` global.
#[derive(Clone)]
pub struct CrewHandle(Arc<Shared>);

impl RagHandle {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self(shared)
    }
}

impl CrewHandle {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self(shared)
    }
}

/// `rag.ingest(#{…})`'s map.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IngestOptions {
    collection: String,
    sources: Vec<String>,
    #[serde(default)]
    chunking: ChunkingOverrides,
    #[serde(default)]
    reindex: bool,
    #[serde(default)]
    replace: bool,
    /// A throwaway collection (as `rag.scratch(collection)` first).
    #[serde(default)]
    ephemeral: bool,
}

/// `rag.query(question, #{…})` and `rag.retrieve(question, #{…})`'s map.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct QueryOptions {
    collection: Option<String>,
    profile: Option<String>,
    top_n: Option<usize>,
    mode: Option<SearchMode>,
}

/// `rag.evaluate(#{…})`'s map; the defaults are the CLI's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvalOptions {
    dataset: PathBuf,
    #[serde(default = "default_split")]
    split: String,
    /// Profile names to compare (default: fast).
    #[serde(default)]
    profiles: Vec<String>,
    #[serde(default = "yes")]
    offline: bool,
    #[serde(default)]
    generate: bool,
    #[serde(default = "default_concurrency")]
    concurrency: usize,
    #[serde(default = "default_retrieve_k")]
    retrieve_k: usize,
    gate: Option<PathBuf>,
    collection: Option<String>,
    /// Chunking of the dataset's corpus instead of the dataset's own.
    #[serde(default)]
    chunking: ChunkingOverrides,
    /// Ingest the corpus into a throwaway collection for this evaluation alone.
    #[serde(default)]
    ephemeral: bool,
}

fn default_split() -> String {
    "test".into()
}
fn yes() -> bool {
    true
}
fn default_concurrency() -> usize {
    2
}
fn default_retrieve_k() -> usize {
    100
}

/// A script-facing error: a runtime error whose value is `message`.
fn failure(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        message.into(),
        rhai::Position::NONE,
    ))
}

/// `value` as `T`, or an error naming the call and what is wrong with the map.
fn options<T: DeserializeOwned>(what: &str, value: &Map) -> Result<T, Box<EvalAltResult>> {
    from_dynamic::<T>(&Dynamic::from_map(value.clone()))
        .map_err(|e| failure(format!("{what}: bad options map: {}", e.unwrap_inner())))
}

fn result<T: serde::Serialize>(value: &T) -> CallResult {
    to_dynamic(value)
}

impl RagHandle {
    fn ingest(&self, map: &Map) -> CallResult {
        let o: IngestOptions = options("rag.ingest", map)?;
        if o.ephemeral {
            let _name = self.scratch(&o.collection)?;
        }
        let params = IngestParams {
            collection: o.collection,
            sources: o.sources,
            chunking: o.chunking,
            reindex: o.reindex,
            replace: o.replace,
            base_dir: self.0.base_dir.clone(),
        };
        let report = self
            .0
            .call("rag.ingest", self.0.knowledge.ingest(params, None))
            .map_err(failure)?;
        result(&report)
    }

    fn query_params(
        what: &str,
        question: &str,
        map: &Map,
    ) -> Result<QueryParams, Box<EvalAltResult>> {
        let o: QueryOptions = options(what, map)?;
        Ok(QueryParams {
            collection: o.collection,
            query: question.to_string(),
            profile: o.profile,
            top_n: o.top_n,
            mode: o.mode,
        })
    }

    fn query(&self, question: &str, map: &Map) -> CallResult {
        let params = Self::query_params("rag.query", question, map)?;
        let answer = self
            .0
            .call("rag.query", self.0.knowledge.query(params))
            .map_err(failure)?;
        result(&answer)
    }

    fn retrieve(&self, question: &str, map: &Map) -> CallResult {
        let params = Self::query_params("rag.retrieve", question, map)?;
        let answer = self
            .0
            .call("rag.retrieve", self.0.knowledge.retrieve(params))
            .map_err(failure)?;
        result(&answer)
    }

    fn eval(&self, map: &Map) -> CallResult {
        let o: EvalOptions = options("rag.evaluate", map)?;
        // In process, relative paths are the script's, like its sources (a daemon confines
        // them to its roots instead).
        let local = |path: PathBuf| match &self.0.base_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path,
        };
        let params = EvalParams {
            dataset: local(o.dataset),
            split: o.split,
            profiles: if o.profiles.is_empty() {
                vec!["fast".into()]
            } else {
                o.profiles
            },
            offline: o.offline,
            generate: o.generate,
            concurrency: o.concurrency.max(1),
            retrieve_k: o.retrieve_k,
            gate: o.gate.map(local),
            collection: o.collection,
            base_dir: self.0.base_dir.clone(),
            chunking: o.chunking,
            ephemeral: o.ephemeral,
        };
        let outcome = self
            .0
            .call("rag.evaluate", self.0.knowledge.evaluate(params, None))
            .map_err(failure)?;
        result(&outcome)
    }

    /// `rag.scratch(name)`: makes `name` a throwaway collection for the rest of the script
    /// (in memory, never stored) and returns the name.
    fn scratch(&self, name: &str) -> CallResult {
        let knowledge = self.0.knowledge.clone();
        let collection = name.to_string();
        self.0
            .call("rag.scratch", async move {
                knowledge.scratch(&collection).await
            })
            .map_err(failure)?;
        Ok(Dynamic::from(name.to_string()))
    }

    fn collections(&self) -> CallResult {
        let collections = self
            .0
            .call("rag.collections", self.0.knowledge.collections())
            .map_err(failure)?;
        result(&collections)
    }
}

impl CrewHandle {
    /// Kicks the crew off, follows its events until the run ends and returns the run record
    /// (`final_output`, `tasks` with their citations' checks, `state`, `reason`).
    fn kickoff(&self, name: &str, inputs: &Map) -> CallResult {
        let inputs: BTreeMap<String, String> = inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let params = KickoffParams {
            crew: name.to_string(),
            inputs,
            idempotency_key: None,
        };
        let crews = self.0.crews.clone();
        let run = self
            .0
            .call("crew.kickoff", async move {
                let kickoff = crews.kickoff(params).await?;
                let mut events = crews.watch(&kickoff.run_id, 0).await?;
                while let Some(event) = events.next().await {
                    if event?.is_terminal() {
                        break;
                    }
                }
                crews.get_run(&kickoff.run_id).await
            })
            .map_err(failure)?;
        result(&run)
    }
}

/// Registers the globals' types and methods.
pub(super) fn register(engine: &mut Engine) {
    engine.register_type_with_name::<RagHandle>("Rag");
    engine.register_type_with_name::<CrewHandle>("Crew");
    engine.register_fn("ingest", |rag: &mut RagHandle, map: Map| rag.ingest(&map));
    engine.register_fn("query", |rag: &mut RagHandle, q: &str, map: Map| {
        rag.query(q, &map)
    });
    engine.register_fn("query", |rag: &mut RagHandle, q: &str| {
        rag.query(q, &Map::new())
    });
    engine.register_fn("retrieve", |rag: &mut RagHandle, q: &str, map: Map| {
        rag.retrieve(q, &map)
    });
    engine.register_fn("retrieve", |rag: &mut RagHandle, q: &str| {
        rag.retrieve(q, &Map::new())
    });
    // `eval` is a Rhai keyword (its own eval function), which no function can be named after:
    // scripts call `rag.evaluate`.
    engine.register_fn("evaluate", |rag: &mut RagHandle, map: Map| rag.eval(&map));
    engine.register_fn("collections", |rag: &mut RagHandle| rag.collections());
    engine.register_fn("scratch", |rag: &mut RagHandle, name: &str| {
        rag.scratch(name)
    });
    engine.register_fn(
        "kickoff",
        |crew: &mut CrewHandle, name: &str, inputs: Map| crew.kickoff(name, &inputs),
    );
    engine.register_fn("kickoff", |crew: &mut CrewHandle, name: &str| {
        crew.kickoff(name, &Map::new())
    });
}
