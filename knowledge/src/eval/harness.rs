//! [`EvalHarness`]: one incremental ingestion of a dataset's corpus, then every requested
//! profile over the same collection, case by case, with bounded concurrency.
//!
//! Retrieval metrics come from each profile's retrieval-only path (no generation call; the
//! corrective graph stops before generation, adaptive uses the routed profile's path), in two
//! calls per case:
//!
//! - **as a user runs the profile**: `top_n =` [`PROFILE_TOP_N`] (10), the profile's own
//!   candidate counts untouched — nDCG@10, MRR@10, recall@k for k ≤ 10 and the per-query time
//!   come from it;
//! - **a deep retrieval** for recall@k above 10: `top_n = retrieve_k` on the depth resolver's
//!   pipeline (the daemon builds it with reranking off: a reranker only reorders the candidates
//!   it is given, so it cannot change which documents are in a ranking that deep), when
//!   `retrieve_k` > 10.
//!
//! (Before, a single call at `top_n = retrieve_k` lifted every profile's candidate count to
//! `retrieve_k`, so `quality` and `balanced` ranked alike.) A pipeline that cannot retrieve
//! alone (a host's) runs its full query instead and is ranked by its citations; the report says
//! so. With
//! `generate: true`, every case also runs the profile's normal full query (its own `top_n`)
//! and the answer is judged (see [`super::judge`]).
//!
//! Timing: each profile's wall time, the median per-case retrieval time, and the total of every
//! trace stage over all cases (`retrieve.embed` / `retrieve.search` split the retrieve stage),
//! so a run says where its time went.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use futures::stream::{self, StreamExt};
use orkeon_crews::ports::ChatModel;

use super::EvalError;
use super::beir_files::BeirFiles;
use super::dataset::{CorpusSource, EvalCase, EvalDataset};
use super::judge::GenerationJudge;
use super::metrics::{median, mrr_at_k, ndcg_at_k, recall_at_k};
use super::ranking::{DocumentKeys, rank_documents};
use super::report::{
    CaseGeneration, CaseResult, EvalReport, GenerationScores, ProfileReport, RECALL_KS,
    RetrievalPath, RetrievalScores,
};
use crate::ingest::{IngestProgress, IngestRequest, IngestionPipeline};
use crate::query::{ProfileResolver, RagPipeline, RagQuery};
use crate::types::{RagAnswer, RagTrace};

/// Passages a case asks each profile for when it is run as a user runs it (its own candidate
/// counts): nDCG@10, MRR@10 and recall@≤10 come from this ranking.
pub const PROFILE_TOP_N: usize = 10;

/// Tags excluded from the gated aggregate by default: cases seeded to defeat single-shot
/// retrieval on purpose.
pub const DEFAULT_EXCLUDED_TAGS: &[&str] = &["correctif"];

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalOptions {
    /// Profiles to compare, in report order (`fast`, `balanced`, …).
    pub profiles: Vec<String>,
    /// Zero network: the generation judge is the deterministic heuristic whatever judge model
    /// was given (the host is expected to have built its pipelines on the offline model).
    pub offline: bool,
    /// Passages of the deep retrieval that gives recall@k for k above [`PROFILE_TOP_N`]; at
    /// least 10 (10: no deep retrieval).
    pub retrieve_k: usize,
    /// Also run every case's full query and judge the answer.
    pub generate: bool,
    /// Cases run at once per profile.
    pub concurrency: usize,
    /// Cases with one of these tags are reported but excluded from the gated aggregate.
    pub excluded_tags: Vec<String>,
    /// Folder for the `.txt` files of BEIR corpora (one sub-folder per collection); required
    /// for BEIR datasets. The CLI passes `<data-dir>/eval-cache`.
    pub cache_dir: Option<PathBuf>,
    /// Evaluate this existing collection as it is: the dataset's corpus is not ingested, and
    /// its refs are suffix-matched against the collection's source ids (golden datasets only).
    /// `None`: ingest the corpus into the dataset's own collection.
    pub collection: Option<String>,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            profiles: vec!["fast".into()],
            offline: false,
            retrieve_k: 100,
            generate: false,
            concurrency: 4,
            excluded_tags: DEFAULT_EXCLUDED_TAGS
                .iter()
                .map(|t| t.to_string())
                .collect(),
            cache_dir: None,
            collection: None,
        }
    }
}

/// Progress of a run, for progress bars.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalProgress {
    /// A corpus source was ingested (or found unchanged).
    Ingest {
        done: usize,
        total: usize,
        source: String,
    },
    /// A case finished under a profile.
    Case {
        profile: String,
        done: usize,
        total: usize,
        case_id: String,
    },
    /// A profile finished.
    ProfileDone { profile: String, duration_ms: u64 },
}

/// The evaluation harness.
pub struct EvalHarness {
    ingestion: Arc<IngestionPipeline>,
    resolver: Arc<ProfileResolver>,
    /// Resolver for the retrieval metrics, when it differs (e.g. a larger context budget).
    retrieval_resolver: Option<Arc<ProfileResolver>>,
    /// Resolver for the deep retrieval (recall above 10), when it differs (e.g. reranking
    /// off); else the retrieval resolver.
    depth_resolver: Option<Arc<ProfileResolver>>,
    judge_model: Option<Arc<dyn ChatModel>>,
}

/// One case's outcome under one profile, before aggregation.
struct CaseRun {
    result: CaseResult,
    stage_ms: BTreeMap<String, f64>,
    dropped_by_budget: usize,
}

/// What every case of a profile shares.
struct ProfileRun<'a> {
    profile: &'a str,
    retrieval: Arc<dyn RagPipeline>,
    /// The deep retrieval's pipeline.
    deep: Arc<dyn RagPipeline>,
    generation: Arc<dyn RagPipeline>,
    path: RetrievalPath,
    collection: &'a str,
    keys: &'a DocumentKeys,
    judge: Option<&'a GenerationJudge>,
    options: &'a EvalOptions,
}

fn add_trace_stages(stage_ms: &mut BTreeMap<String, f64>, prefix: &str, trace: &RagTrace) {
    for step in &trace.steps {
        *stage_ms
            .entry(format!("{prefix}{}", step.stage))
            .or_default() += step.duration_ms;
        if step.stage == "retrieve" {
            for (field, name) in [
                ("embed_ms", "retrieve.embed"),
                ("search_ms", "retrieve.search"),
            ] {
                if let Some(ms) = step.detail.get(field).and_then(|v| v.as_f64()) {
                    *stage_ms.entry(format!("{prefix}{name}")).or_default() += ms;
                }
            }
        }
    }
}

/// Passages the context budget dropped from a retrieval: the staged `assemble` stage, or the
/// corrective graph's retrieval-only ending (its skipped `corrective:generate` step).
fn dropped_by_budget(trace: &RagTrace) -> usize {
    trace
        .steps
        .iter()
        .filter(|s| {
            s.stage == "assemble"
                || (s.stage == "corrective:generate"
                    && s.detail.get("skipped").and_then(|v| v.as_str()) == Some("retrieval-only"))
        })
        .filter_map(|s| s.detail.get("dropped_by_budget").and_then(|v| v.as_u64()))
        .sum::<u64>() as usize
}

fn is_gated(case: &EvalCase, excluded_tags: &[String]) -> bool {
    !case
        .tags
        .iter()
        .any(|t| excluded_tags.iter().any(|x| x.eq_ignore_ascii_case(t)))
}

impl ProfileRun<'_> {
    fn query_error(&self, case: &EvalCase, source: crate::query::QueryError) -> EvalError {
        EvalError::Query {
            profile: self.profile.to_string(),
            case: case.id.clone(),
            source: Box::new(source),
        }
    }

    async fn retrieve(
        &self,
        pipeline: &dyn RagPipeline,
        case: &EvalCase,
        top_n: usize,
    ) -> Result<RagAnswer, EvalError> {
        let query =
            RagQuery::new(case.question.clone(), self.collection.to_string()).with_top_n(top_n);
        let answer = match self.path {
            RetrievalPath::RetrieveOnly => match pipeline.retriever() {
                Some(retriever) => retriever.retrieve(&query).await,
                None => Err(crate::query::QueryError::RetrievalOnlyUnsupported {
                    pipeline: pipeline.name().to_string(),
                }),
            },
            RetrievalPath::FullQuery => pipeline.query(&query).await,
        };
        answer.map_err(|e| self.query_error(case, e))
    }

    async fn run_case(&self, case: &EvalCase) -> Result<CaseRun, EvalError> {
        let mut stage_ms = BTreeMap::new();
        let started = Instant::now();
        let answer = self
            .retrieve(self.retrieval.as_ref(), case, PROFILE_TOP_N)
            .await?;
        let retrieval_ms = started.elapsed().as_secs_f64() * 1000.0;
        add_trace_stages(&mut stage_ms, "", &answer.trace);
        let mut dropped = dropped_by_budget(&answer.trace);

        let ranked = rank_documents(&answer.citations, self.keys, case);
        let relevant: BTreeSet<String> = case
            .relevant
            .iter()
            .filter(|(_, grade)| **grade > 0)
            .map(|(key, _)| key.clone())
            .collect();
        let mut recall_at: BTreeMap<String, f64> = RECALL_KS
            .iter()
            .filter(|k| **k <= PROFILE_TOP_N.min(self.options.retrieve_k))
            .map(|k| (k.to_string(), recall_at_k(&ranked, &relevant, *k)))
            .collect();
        let mut depth = ranked.len();
        if self.options.retrieve_k > PROFILE_TOP_N {
            let deep = self
                .retrieve(self.deep.as_ref(), case, self.options.retrieve_k)
                .await?;
            add_trace_stages(&mut stage_ms, "deep_retrieval.", &deep.trace);
            dropped += dropped_by_budget(&deep.trace);
            let deep_ranked = rank_documents(&deep.citations, self.keys, case);
            depth = deep_ranked.len();
            for k in RECALL_KS
                .iter()
                .filter(|k| **k > PROFILE_TOP_N && **k <= self.options.retrieve_k)
            {
                recall_at.insert(k.to_string(), recall_at_k(&deep_ranked, &relevant, *k));
            }
        }
        let first_relevant_rank = ranked
            .iter()
            .position(|key| relevant.contains(key))
            .map(|i| i + 1);

        let generation = match self.judge {
            None => None,
            Some(judge) => {
                let started = Instant::now();
                let query = RagQuery::new(case.question.clone(), self.collection.to_string());
                let full = self
                    .generation
                    .query(&query)
                    .await
                    .map_err(|e| self.query_error(case, e))?;
                let generation_ms = started.elapsed().as_secs_f64() * 1000.0;
                add_trace_stages(&mut stage_ms, "generation_call.", &full.trace);
                let judged = Instant::now();
                let verdict = judge.judge(case, &full.text, &full.citations).await;
                *stage_ms.entry("judge".into()).or_default() +=
                    judged.elapsed().as_secs_f64() * 1000.0;
                Some(CaseGeneration {
                    answer: full.text,
                    generation_ms,
                    verdict,
                })
            }
        };

        Ok(CaseRun {
            result: CaseResult {
                id: case.id.clone(),
                tags: case.tags.clone(),
                gated: is_gated(case, &self.options.excluded_tags),
                depth,
                first_relevant_rank,
                ndcg_at_10: ndcg_at_k(&ranked, &case.relevant, 10),
                mrr_at_10: mrr_at_k(&ranked, &relevant, 10),
                recall_at,
                ranked: ranked.into_iter().take(10).collect(),
                retrieval_ms,
                generation,
            },
            stage_ms,
            dropped_by_budget: dropped,
        })
    }
}

impl EvalHarness {
    pub fn new(
        ingestion: Arc<IngestionPipeline>,
        resolver: Arc<ProfileResolver>,
        judge_model: Option<Arc<dyn ChatModel>>,
    ) -> Self {
        Self {
            ingestion,
            resolver,
            retrieval_resolver: None,
            depth_resolver: None,
            judge_model,
        }
    }

    /// Uses `resolver` for the deep retrieval (recall@k above [`PROFILE_TOP_N`]). Build it
    /// with reranking off and a context budget large enough for `retrieve_k` passages: the
    /// documents in a ranking that deep do not depend on how a reranker orders them.
    pub fn with_depth_resolver(mut self, resolver: Arc<ProfileResolver>) -> Self {
        self.depth_resolver = Some(resolver);
        self
    }

    /// Uses `resolver` for the retrieval metrics (generation keeps the main resolver). Build it
    /// with a context budget (`rag.context.max_tokens`) large enough for `retrieve_k` passages,
    /// or the assemble stage cuts the ranking and recall@k above the cut measures the budget.
    pub fn with_retrieval_resolver(mut self, resolver: Arc<ProfileResolver>) -> Self {
        self.retrieval_resolver = Some(resolver);
        self
    }

    fn check_options(options: &EvalOptions) -> Result<(), EvalError> {
        if options.profiles.is_empty() {
            return Err(EvalError::InvalidOptions(
                "no profile to evaluate; name at least one (--compare fast,balanced)".into(),
            ));
        }
        if options.retrieve_k < 10 {
            return Err(EvalError::InvalidOptions(format!(
                "retrieve_k is {}; nDCG@10 and MRR@10 need at least 10 ranked documents",
                options.retrieve_k
            )));
        }
        if options.concurrency == 0 {
            return Err(EvalError::InvalidOptions(
                "concurrency is 0; run at least one case at a time".into(),
            ));
        }
        Ok(())
    }

    /// Ingests the corpus (incrementally) and returns how its source ids map to document keys.
    async fn ingest(
        &self,
        dataset: &EvalDataset,
        options: &EvalOptions,
        progress: Option<&(dyn Fn(EvalProgress) + Send + Sync)>,
    ) -> Result<(crate::ingest::IngestReport, DocumentKeys), EvalError> {
        let (request, keys) = match &dataset.corpus {
            CorpusSource::Directory { base_dir, patterns } => (
                IngestRequest {
                    collection: dataset.collection.clone(),
                    base_dir: base_dir.clone(),
                    sources: patterns.clone(),
                    chunking: dataset.chunking.clone(),
                    reindex: false,
                    mode: crate::ingest::IngestMode::Replace,
                },
                DocumentKeys::Refs,
            ),
            CorpusSource::Beir { documents } => {
                let cache = options.cache_dir.as_ref().ok_or_else(|| {
                    EvalError::InvalidOptions(format!(
                        "dataset '{}' is in BEIR format: its documents are written as files before ingestion, so a cache folder is needed (EvalOptions.cache_dir; the CLI uses <data-dir>/eval-cache)",
                        dataset.name
                    ))
                })?;
                let dir = cache.join(&dataset.collection);
                let documents = documents.clone();
                let files = tokio::task::spawn_blocking(move || BeirFiles::write(&dir, &documents))
                    .await
                    .map_err(|e| {
                        EvalError::Task(format!("writing the BEIR corpus files failed: {e}"))
                    })??;
                (
                    IngestRequest {
                        collection: dataset.collection.clone(),
                        base_dir: files.dir.clone(),
                        sources: files.patterns.clone(),
                        chunking: dataset.chunking.clone(),
                        reindex: false,
                        mode: crate::ingest::IngestMode::Replace,
                    },
                    DocumentKeys::Beir(files),
                )
            }
        };
        let forward = |p: IngestProgress| {
            if let Some(progress) = progress {
                progress(EvalProgress::Ingest {
                    done: p.done,
                    total: p.total,
                    source: p.source,
                });
            }
        };
        let report = self
            .ingestion
            .ingest(&request, Some(&forward))
            .await
            .map_err(|source| EvalError::Ingest {
                dataset: dataset.name.clone(),
                source,
            })?;
        Ok((report, keys))
    }

    /// One ingestion (incremental), then every profile over the same collection (see the
    /// module documentation). `progress` is called per ingested source and per finished case.
    pub async fn run(
        &self,
        dataset: &EvalDataset,
        options: &EvalOptions,
        progress: Option<&(dyn Fn(EvalProgress) + Send + Sync)>,
    ) -> Result<EvalReport, EvalError> {
        Self::check_options(options)?;
        let retrieval_resolver = self.retrieval_resolver.as_ref().unwrap_or(&self.resolver);
        let depth_resolver = self.depth_resolver.as_ref().unwrap_or(retrieval_resolver);
        // Resolve every profile before the (possibly long) ingestion: a typo fails at once.
        let mut pipelines = Vec::with_capacity(options.profiles.len());
        for profile in &options.profiles {
            let resolve = |resolver: &ProfileResolver| {
                resolver
                    .resolve(profile)
                    .map_err(|source| EvalError::Profile {
                        profile: profile.clone(),
                        source: Box::new(source),
                    })
            };
            pipelines.push((
                profile.as_str(),
                resolve(retrieval_resolver)?,
                resolve(depth_resolver)?,
                resolve(&self.resolver)?,
            ));
        }
        let judge = options.generate.then(|| {
            if options.offline {
                GenerationJudge::Heuristic
            } else {
                GenerationJudge::for_model(self.judge_model.clone())
            }
        });

        let (ingestion, keys, collection) = match &options.collection {
            Some(existing) => {
                if !matches!(dataset.corpus, CorpusSource::Directory { .. }) {
                    return Err(EvalError::InvalidOptions(format!(
                        "dataset '{}' is in BEIR format: its document ids only exist in its own collection, so it cannot evaluate the existing collection '{existing}'; use a golden YAML dataset whose refs name that collection's sources",
                        dataset.name
                    )));
                }
                let ingestion = crate::ingest::IngestReport {
                    collection: existing.clone(),
                    ..Default::default()
                };
                (ingestion, DocumentKeys::Refs, existing.as_str())
            }
            None => {
                let (ingestion, keys) = self.ingest(dataset, options, progress).await?;
                (ingestion, keys, dataset.collection.as_str())
            }
        };
        let mut warnings = dataset.warnings.clone();
        for quarantined in &ingestion.quarantined {
            warnings.push(format!(
                "corpus source `{}` was quarantined and is not searchable: {}",
                quarantined.source, quarantined.reason
            ));
        }
        warnings.extend(ingestion.warnings.iter().cloned());
        if options.collection.is_some() {
            warnings.push(format!(
                "evaluated the existing collection '{collection}' as it is; the dataset's corpus was not ingested"
            ));
        } else if ingestion.sources_total == 0 {
            warnings.push(format!(
                "the corpus of dataset '{}' matched no source: every metric is 0",
                dataset.name
            ));
        }

        let mut profiles = Vec::with_capacity(pipelines.len());
        for (profile, retrieval, deep, generation) in pipelines {
            let path = if retrieval.retriever().is_some() {
                RetrievalPath::RetrieveOnly
            } else {
                RetrievalPath::FullQuery
            };
            let run = ProfileRun {
                profile,
                retrieval,
                deep,
                generation,
                path,
                collection,
                keys: &keys,
                judge: judge.as_ref(),
                options,
            };
            profiles.push(self.run_profile(&run, dataset, progress).await?);
        }

        Ok(EvalReport {
            dataset: dataset.name.clone(),
            queries: dataset.cases.len(),
            profiles,
            ingestion,
            retrieve_k: options.retrieve_k,
            concurrency: options.concurrency,
            excluded_tags: options.excluded_tags.clone(),
            warnings,
        })
    }

    async fn run_profile(
        &self,
        run: &ProfileRun<'_>,
        dataset: &EvalDataset,
        progress: Option<&(dyn Fn(EvalProgress) + Send + Sync)>,
    ) -> Result<ProfileReport, EvalError> {
        let started = Instant::now();
        let total = dataset.cases.len();
        let done = AtomicUsize::new(0);

        let mut outcomes: Vec<(usize, CaseRun)> = Vec::with_capacity(total);
        // The futures are built up front (not by a closure inside the stream) so the whole
        // evaluation stays `Send`: a stream mapping `&EvalCase` through a closure trips the
        // compiler's higher-ranked lifetime check when it is awaited in a `Send` context.
        let done = &done;
        let cases: Vec<_> = dataset
            .cases
            .iter()
            .enumerate()
            .map(|(index, case)| async move {
                let outcome = run.run_case(case).await;
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(progress) = progress {
                    progress(EvalProgress::Case {
                        profile: run.profile.to_string(),
                        done: finished,
                        total,
                        case_id: case.id.clone(),
                    });
                }
                outcome.map(|o| (index, o))
            })
            .collect();
        let mut runs = stream::iter(cases).buffer_unordered(run.options.concurrency);
        while let Some(outcome) = runs.next().await {
            // The first failure stops the profile: a silently skipped case would bias the
            // aggregate.
            outcomes.push(outcome?);
        }
        drop(runs);
        outcomes.sort_by_key(|(index, _)| *index);
        let duration_ms = started.elapsed().as_millis() as u64;

        let mut stage_ms: BTreeMap<String, f64> = BTreeMap::new();
        let mut dropped = 0usize;
        let mut cases = Vec::with_capacity(total);
        for (_, outcome) in outcomes {
            for (stage, ms) in outcome.stage_ms {
                *stage_ms.entry(stage).or_default() += ms;
            }
            dropped += outcome.dropped_by_budget;
            cases.push(outcome.result);
        }

        let gated = RetrievalScores::over(cases.iter().filter(|c| c.gated));
        let all_cases = RetrievalScores::over(cases.iter());
        let judge_name = match (run.judge, run.options.offline) {
            (None, _) => "none: generation not run".to_string(),
            (Some(judge), true) => format!("{} (offline)", judge.name()),
            (Some(judge), false) => judge.name(),
        };
        let generation = GenerationScores::over(&judge_name, cases.iter().filter(|c| c.gated));
        let retrieval_ms: Vec<f64> = cases.iter().map(|c| c.retrieval_ms).collect();

        let mut notes = Vec::new();
        if run.path == RetrievalPath::FullQuery {
            notes.push(format!(
                "`{}` cannot run retrieval alone: its metrics rank the citations of its full queries (top_n = {PROFILE_TOP_N}, and {} for recall above {PROFILE_TOP_N}), i.e. only the passages its answers cited",
                run.profile, run.options.retrieve_k
            ));
        }
        if dropped > 0 {
            let shallow = cases
                .iter()
                .filter(|c| c.depth < run.options.retrieve_k)
                .count();
            notes.push(format!(
                "the context budget (rag.context.max_tokens) dropped {dropped} retrieved passage(s); {shallow} of {total} rankings hold fewer than {} documents, so recall at the deeper cut-offs measures the budget too (raise the budget for evaluation runs)",
                run.options.retrieve_k
            ));
        }
        if let Some(generation) = &generation
            && generation.judge_fallbacks > 0
        {
            notes.push(format!(
                "the LLM judge could not judge {} case(s); the heuristic judged them",
                generation.judge_fallbacks
            ));
        }
        tracing::info!(
            profile = run.profile,
            cases = total,
            gated = gated.cases,
            ndcg_at_10 = gated.ndcg_at_10,
            mrr_at_10 = gated.mrr_at_10,
            duration_ms,
            "profile evaluated"
        );
        if let Some(progress) = progress {
            progress(EvalProgress::ProfileDone {
                profile: run.profile.to_string(),
                duration_ms,
            });
        }

        Ok(ProfileReport {
            profile: run.profile.to_string(),
            ndcg_at_10: gated.ndcg_at_10,
            mrr_at_10: gated.mrr_at_10,
            recall_at: gated.recall_at.clone(),
            judge: judge_name,
            generation,
            duration_ms,
            per_query_ms_p50: median(&retrieval_ms),
            gated_cases: gated.cases,
            excluded_cases: total - gated.cases,
            per_case: cases,
            all_cases,
            retrieval_path: run.path,
            stage_ms,
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn budget_drops_count_the_staged_assemble_and_the_corrective_retrieval_only_ending() {
        let mut trace = RagTrace::default();
        trace.push("assemble", 0.0, json!({"dropped_by_budget": 2}));
        trace.push(
            "corrective:generate",
            0.0,
            json!({"skipped": "retrieval-only", "dropped_by_budget": 3}),
        );
        // A generation's own budget is not the ranking's.
        trace.push(
            "corrective:generate",
            0.0,
            json!({"model": "scripted", "dropped_by_budget": 5}),
        );
        assert_eq!(dropped_by_budget(&trace), 5);
    }
}
