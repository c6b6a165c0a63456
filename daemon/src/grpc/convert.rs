//! Domain types ⇄ protobuf messages. The server converts requests in and results out; the
//! CLI's remote client converts the other way, so both ends of the wire share one mapping and
//! a remote command gets the very types a local one does.

use std::collections::BTreeMap;
use std::path::PathBuf;

use orkeon_knowledge::ingest::{IngestReport, QuarantinedSource, StaleSource};
use orkeon_knowledge::store::{
    CollectionInfo, Manifest, SearchMode, SourceRecord, VectorIndexStatus,
};
use orkeon_knowledge::types::{Citation, EmbeddingProfile, RagAnswer, RagTrace, ScoreOrigin};
use orkeon_knowledge::validate::QuarantineEntry;

use crate::proto::v1 as pb;
use crate::runs::{RunRecord, StoredEvent};
use crate::service::{
    ChunkingOverrides, CrewSummary, EvalOutcome, EvalParams, GateVerdict, IngestParams,
    KickoffParams, QueryParams, ServiceError,
};
use orkeon_crews::ports::GroundednessReport;
use orkeon_crews::run::store::TaskSummary;

/// A message the peer sent that does not decode into our types.
fn malformed(what: &str, error: impl std::fmt::Display) -> ServiceError {
    ServiceError::Internal(format!("malformed {what} on the wire: {error}"))
}

fn non_empty(value: String) -> Option<String> {
    (!value.is_empty()).then_some(value)
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

pub fn ingest_params_from_pb(request: pb::IngestRequest) -> IngestParams {
    IngestParams {
        collection: request.collection,
        sources: request.sources,
        chunking: request
            .chunking
            .map(|c| ChunkingOverrides {
                strategy: c.strategy.filter(|s| !s.is_empty()),
                max_tokens: c.max_tokens.map(|n| n as usize),
                overlap: c.overlap.map(|n| n as usize),
            })
            .unwrap_or_default(),
        reindex: request.reindex,
        replace: request.replace,
        base_dir: None,
    }
}

pub fn ingest_params_to_pb(params: IngestParams) -> pb::IngestRequest {
    let c = params.chunking;
    pb::IngestRequest {
        collection: params.collection,
        sources: params.sources,
        chunking: (!c.is_empty()).then(|| pb::Chunking {
            strategy: c.strategy,
            max_tokens: c.max_tokens.map(|n| n as u32),
            overlap: c.overlap.map(|n| n as u32),
        }),
        reindex: params.reindex,
        replace: params.replace,
    }
}

fn mode_from_pb(mode: i32) -> Result<Option<SearchMode>, ServiceError> {
    match pb::SearchMode::try_from(mode) {
        Ok(pb::SearchMode::Unspecified) => Ok(None),
        Ok(pb::SearchMode::Vector) => Ok(Some(SearchMode::Vector)),
        Ok(pb::SearchMode::Bm25) => Ok(Some(SearchMode::Bm25)),
        Ok(pb::SearchMode::Hybrid) => Ok(Some(SearchMode::Hybrid)),
        Err(_) => Err(ServiceError::invalid(
            "mode",
            format!("unknown search mode {mode}; use vector, bm25 or hybrid"),
        )),
    }
}

fn mode_to_pb(mode: Option<SearchMode>) -> pb::SearchMode {
    match mode {
        None => pb::SearchMode::Unspecified,
        Some(SearchMode::Vector) => pb::SearchMode::Vector,
        Some(SearchMode::Bm25) => pb::SearchMode::Bm25,
        Some(SearchMode::Hybrid) => pb::SearchMode::Hybrid,
    }
}

pub fn query_params_from_pb(request: pb::QueryRequest) -> Result<QueryParams, ServiceError> {
    Ok(QueryParams {
        mode: mode_from_pb(request.mode)?,
        collection: non_empty(request.collection),
        query: request.query,
        profile: non_empty(request.profile),
        top_n: (request.top_n > 0).then_some(request.top_n as usize),
    })
}

pub fn query_params_to_pb(params: QueryParams) -> pb::QueryRequest {
    pb::QueryRequest {
        collection: params.collection.unwrap_or_default(),
        query: params.query,
        profile: params.profile.unwrap_or_default(),
        top_n: params.top_n.unwrap_or(0).min(u32::MAX as usize) as u32,
        mode: mode_to_pb(params.mode) as i32,
    }
}

pub fn eval_params_from_pb(request: pb::EvaluateRequest) -> EvalParams {
    EvalParams {
        // A remote request: its paths are confined to the ingestion roots.
        base_dir: None,
        dataset: PathBuf::from(request.dataset),
        split: non_empty(request.split).unwrap_or_else(|| "test".into()),
        profiles: if request.profiles.is_empty() {
            vec!["fast".into(), "balanced".into(), "quality".into()]
        } else {
            request.profiles
        },
        offline: request.offline,
        generate: request.generate,
        concurrency: if request.concurrency == 0 {
            2
        } else {
            request.concurrency as usize
        },
        retrieve_k: if request.retrieve_k == 0 {
            100
        } else {
            request.retrieve_k as usize
        },
        gate: non_empty(request.gate).map(PathBuf::from),
        collection: non_empty(request.collection),
        chunking: ChunkingOverrides::default(),
        ephemeral: false,
    }
}

pub fn eval_params_to_pb(params: EvalParams) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        dataset: params.dataset.display().to_string(),
        split: params.split,
        profiles: params.profiles,
        offline: params.offline,
        generate: params.generate,
        concurrency: params.concurrency as u32,
        retrieve_k: params.retrieve_k as u32,
        gate: params
            .gate
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        collection: params.collection.unwrap_or_default(),
    }
}

pub fn kickoff_params_from_pb(request: pb::KickoffRequest) -> KickoffParams {
    KickoffParams {
        crew: request.crew,
        inputs: request.inputs.into_iter().collect(),
        idempotency_key: non_empty(request.idempotency_key),
    }
}

pub fn kickoff_params_to_pb(params: KickoffParams) -> pb::KickoffRequest {
    pb::KickoffRequest {
        crew: params.crew,
        inputs: params.inputs.into_iter().collect(),
        idempotency_key: params.idempotency_key.unwrap_or_default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Knowledge results
// ---------------------------------------------------------------------------------------------

pub fn ingest_report_to_pb(report: IngestReport) -> pb::IngestReport {
    pb::IngestReport {
        collection: report.collection,
        sources_total: report.sources_total as u64,
        sources_ingested: report.sources_ingested as u64,
        sources_skipped: report.sources_skipped as u64,
        sources_removed: report.sources_removed as u64,
        chunks_embedded: report.chunks_embedded as u64,
        chunks_upserted: report.chunks_upserted as u64,
        quarantined: report
            .quarantined
            .into_iter()
            .map(|q| pb::QuarantinedSource {
                source: q.source,
                reason: q.reason,
            })
            .collect(),
        warnings: report.warnings,
        duration_ms: report.duration_ms,
        stale: report
            .stale
            .into_iter()
            .map(|s| pb::StaleSource {
                source: s.source,
                error: s.error,
            })
            .collect(),
    }
}

pub fn ingest_report_from_pb(report: pb::IngestReport) -> IngestReport {
    IngestReport {
        collection: report.collection,
        sources_total: report.sources_total as usize,
        sources_ingested: report.sources_ingested as usize,
        sources_skipped: report.sources_skipped as usize,
        sources_removed: report.sources_removed as usize,
        chunks_embedded: report.chunks_embedded as usize,
        chunks_upserted: report.chunks_upserted as usize,
        quarantined: report
            .quarantined
            .into_iter()
            .map(|q| QuarantinedSource {
                source: q.source,
                reason: q.reason,
            })
            .collect(),
        warnings: report.warnings,
        duration_ms: report.duration_ms,
        stale: report
            .stale
            .into_iter()
            .map(|s| StaleSource {
                source: s.source,
                error: s.error,
            })
            .collect(),
    }
}

pub fn answer_to_pb(answer: RagAnswer) -> pb::RagAnswer {
    pb::RagAnswer {
        trace_json: serde_json::to_string(&answer.trace).unwrap_or_default(),
        text: answer.text,
        citations: answer
            .citations
            .into_iter()
            .map(|c| pb::Citation {
                marker: c.marker,
                chunk_id: c.chunk_id,
                source_id: c.source_id,
                snippet: c.snippet,
                score: c.score,
                score_origin: c.score_origin.as_str().into(),
                start: c.start as u64,
                end: c.end as u64,
                untrusted: c.untrusted,
            })
            .collect(),
        trace: answer
            .trace
            .steps
            .into_iter()
            .map(|s| pb::TraceStep {
                stage: s.stage,
                duration_ms: s.duration_ms,
                detail_json: s.detail.to_string(),
            })
            .collect(),
    }
}

pub fn answer_from_pb(answer: pb::RagAnswer) -> Result<RagAnswer, ServiceError> {
    let trace: RagTrace =
        serde_json::from_str(&answer.trace_json).map_err(|e| malformed("trace", e))?;
    let citations = answer
        .citations
        .into_iter()
        .map(|c| {
            let score_origin: ScoreOrigin =
                serde_json::from_value(serde_json::Value::String(c.score_origin))
                    .map_err(|e| malformed("score origin", e))?;
            Ok(Citation {
                marker: c.marker,
                chunk_id: c.chunk_id,
                source_id: c.source_id,
                snippet: c.snippet,
                score: c.score,
                score_origin,
                start: c.start as usize,
                end: c.end as usize,
                untrusted: c.untrusted,
            })
        })
        .collect::<Result<_, ServiceError>>()?;
    Ok(RagAnswer {
        text: answer.text,
        citations,
        trace,
    })
}

fn profile_to_pb(profile: &EmbeddingProfile) -> pb::EmbeddingProfile {
    pb::EmbeddingProfile {
        provider: profile.provider.clone(),
        model: profile.model.clone(),
        dimensions: profile.dimensions as u64,
    }
}

fn profile_from_pb(profile: pb::EmbeddingProfile) -> EmbeddingProfile {
    EmbeddingProfile {
        provider: profile.provider,
        model: profile.model,
        dimensions: profile.dimensions as usize,
    }
}

pub fn collection_to_pb(c: CollectionInfo) -> pb::Collection {
    pb::Collection {
        name: c.name,
        sources: c.sources as u64,
        chunks: c.chunks as u64,
        embedding_profile: c
            .profile
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        profile: c.profile.as_ref().map(profile_to_pb),
        vector_index: c.vector_index.serving,
        vector_index_reason: c.vector_index.reason,
        hnsw_recall_at_10: c.vector_index.hnsw_recall_at_10,
        provider: c.provider,
    }
}

pub fn collection_from_pb(c: pb::Collection) -> CollectionInfo {
    CollectionInfo {
        name: c.name,
        sources: c.sources as usize,
        chunks: c.chunks as usize,
        profile: c.profile.map(profile_from_pb),
        vector_index: VectorIndexStatus {
            serving: c.vector_index,
            reason: c.vector_index_reason,
            hnsw_recall_at_10: c.hnsw_recall_at_10,
        },
        provider: c.provider,
    }
}

pub fn manifest_to_pb(m: Manifest) -> pb::Manifest {
    pb::Manifest {
        collection: m.collection,
        embedding_profile: m
            .profile
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        profile: m.profile.as_ref().map(profile_to_pb),
        sources: m
            .sources
            .into_iter()
            .map(|s| pb::ManifestEntry {
                chunks: s.chunk_ids.len() as u64,
                chunk_ids: s.chunk_ids,
                source_id: s.source_id,
                content_hash: s.content_hash,
                loader: s.loader,
                chunking: s.chunking,
                embedding_profile: s.embedding_profile,
                ingested_at: s.ingested_at,
                validation: s.validation,
                stale: s.stale,
            })
            .collect(),
        corrupt_entries: m.corrupt_entries,
    }
}

pub fn manifest_from_pb(m: pb::Manifest) -> Manifest {
    Manifest {
        collection: m.collection,
        profile: m.profile.map(profile_from_pb),
        sources: m
            .sources
            .into_iter()
            .map(|s| SourceRecord {
                source_id: s.source_id,
                content_hash: s.content_hash,
                loader: s.loader,
                chunking: s.chunking,
                embedding_profile: s.embedding_profile,
                chunk_ids: s.chunk_ids,
                ingested_at: s.ingested_at,
                validation: s.validation,
                stale: s.stale,
            })
            .collect(),
        corrupt_entries: m.corrupt_entries,
    }
}

pub fn quarantine_entry_to_pb(e: QuarantineEntry) -> pb::QuarantineEntry {
    pb::QuarantineEntry {
        collection: e.collection,
        source_id: e.source_id,
        reason: e.reason,
        content_hash: e.content_hash,
        quarantined_at: e.quarantined_at,
        excerpt: e.excerpt,
    }
}

pub fn quarantine_entry_from_pb(e: pb::QuarantineEntry) -> QuarantineEntry {
    QuarantineEntry {
        collection: e.collection,
        source_id: e.source_id,
        reason: e.reason,
        content_hash: e.content_hash,
        quarantined_at: e.quarantined_at,
        excerpt: e.excerpt,
    }
}

pub fn eval_outcome_to_pb(outcome: EvalOutcome) -> Result<pb::EvaluateResponse, ServiceError> {
    Ok(pb::EvaluateResponse {
        report_json: serde_json::to_string(&outcome.report)
            .map_err(|e| ServiceError::Internal(format!("cannot encode the report: {e}")))?,
        markdown: outcome.markdown,
        gate_passed: outcome.gate.as_ref().map(|g| g.passed),
        gate_messages: outcome.gate.map(|g| g.messages).unwrap_or_default(),
    })
}

pub fn eval_outcome_from_pb(response: pb::EvaluateResponse) -> Result<EvalOutcome, ServiceError> {
    Ok(EvalOutcome {
        report: serde_json::from_str(&response.report_json)
            .map_err(|e| malformed("evaluation report", e))?,
        markdown: response.markdown,
        gate: response.gate_passed.map(|passed| GateVerdict {
            passed,
            messages: response.gate_messages,
        }),
    })
}

// ---------------------------------------------------------------------------------------------
// Crews and runs
// ---------------------------------------------------------------------------------------------

pub fn crew_to_pb(c: CrewSummary) -> pb::Crew {
    pb::Crew {
        name: c.name,
        file: c.file,
        status: c.status,
        error: c.error,
        process: c.process,
        collections: c.collections,
        agents: c.agents,
        tasks: c.tasks,
        runnable: c.runnable,
        updated_at: c.updated_at,
    }
}

pub fn crew_from_pb(c: pb::Crew) -> CrewSummary {
    CrewSummary {
        name: c.name,
        file: c.file,
        status: c.status,
        error: c.error,
        process: c.process,
        collections: c.collections,
        agents: c.agents,
        tasks: c.tasks,
        runnable: c.runnable,
        updated_at: c.updated_at,
    }
}

pub fn run_to_pb(run: RunRecord) -> pb::Run {
    pb::Run {
        run_id: run.run_id,
        crew: run.crew,
        crew_file: run.crew_file,
        state: run.state.as_str().into(),
        inputs: run.inputs.into_iter().collect(),
        started_at: run.started_at,
        finished_at: run.finished_at.unwrap_or_default(),
        reason: run.reason.unwrap_or_default(),
        final_output: run.final_output.unwrap_or_default(),
        last_seq: run.last_seq,
        idempotency_key: run.idempotency_key.unwrap_or_default(),
        tasks: run.tasks.into_iter().map(task_summary_to_pb).collect(),
        worker: run.worker.unwrap_or_default(),
        attempts: run.attempts,
        definition: run.definition.unwrap_or_default(),
        retry: run.retry,
    }
}

fn task_summary_to_pb(t: TaskSummary) -> pb::TaskSummary {
    pb::TaskSummary {
        task: t.task,
        agent: t.agent,
        cited: u32::try_from(t.cited).unwrap_or(u32::MAX),
        dangling_markers: t.dangling_markers,
        uncited: t.uncited,
        degraded: t.degraded.unwrap_or_default(),
        groundedness: t.groundedness.map(|g| pb::Groundedness {
            checker: g.checker,
            grounded: g.grounded,
            score: g.score,
            unsupported_claims: g.unsupported_claims,
        }),
    }
}

fn task_summary_from_pb(t: pb::TaskSummary) -> TaskSummary {
    TaskSummary {
        task: t.task,
        agent: t.agent,
        cited: t.cited as usize,
        dangling_markers: t.dangling_markers,
        uncited: t.uncited,
        degraded: non_empty(t.degraded),
        groundedness: t.groundedness.map(|g| GroundednessReport {
            checker: g.checker,
            grounded: g.grounded,
            score: g.score,
            unsupported_claims: g.unsupported_claims,
        }),
    }
}

pub fn run_from_pb(run: pb::Run) -> Result<RunRecord, ServiceError> {
    Ok(RunRecord {
        state: serde_json::from_value(serde_json::Value::String(run.state))
            .map_err(|e| malformed("run state", e))?,
        run_id: run.run_id,
        crew: run.crew,
        crew_file: run.crew_file,
        inputs: run.inputs.into_iter().collect::<BTreeMap<_, _>>(),
        started_at: run.started_at,
        finished_at: non_empty(run.finished_at),
        reason: non_empty(run.reason),
        final_output: non_empty(run.final_output),
        idempotency_key: non_empty(run.idempotency_key),
        last_seq: run.last_seq,
        tasks: run.tasks.into_iter().map(task_summary_from_pb).collect(),
        worker: non_empty(run.worker),
        attempts: run.attempts,
        definition: non_empty(run.definition),
        retry: run.retry,
    })
}

pub fn event_to_pb(event: StoredEvent) -> pb::RunEvent {
    let json = serde_json::to_value(&event.event).unwrap_or_default();
    pb::RunEvent {
        r#type: json
            .get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("event")
            .to_string(),
        json: json.to_string(),
        run_id: event.run_id,
        seq: event.seq,
        at: event.at,
    }
}

pub fn event_from_pb(event: pb::RunEvent) -> Result<StoredEvent, ServiceError> {
    Ok(StoredEvent {
        event: serde_json::from_str(&event.json).map_err(|e| malformed("run event", e))?,
        run_id: event.run_id,
        seq: event.seq,
        at: event.at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_survive_the_wire_unchanged() {
        let ingest = IngestParams {
            collection: "kb".into(),
            sources: vec!["docs/**/*.md".into()],
            chunking: ChunkingOverrides {
                strategy: Some("sentence".into()),
                max_tokens: None,
                overlap: Some(0),
            },
            reindex: true,
            replace: true,
            base_dir: None,
        };
        assert_eq!(
            ingest_params_from_pb(ingest_params_to_pb(ingest.clone())),
            ingest
        );
        let query = QueryParams {
            collection: Some("kb".into()),
            query: "warranty".into(),
            profile: None,
            top_n: Some(3),
            mode: Some(SearchMode::Bm25),
        };
        assert_eq!(
            query_params_from_pb(query_params_to_pb(query.clone())).expect("decodes"),
            query
        );
        let unknown_mode = pb::QueryRequest {
            mode: 42,
            ..Default::default()
        };
        assert!(matches!(
            query_params_from_pb(unknown_mode),
            Err(ServiceError::InvalidArgument { field, .. }) if field == "mode"
        ));
    }

    #[test]
    fn results_survive_the_wire_unchanged() {
        let profile = EmbeddingProfile {
            provider: "onnx".into(),
            model: "bge-small-en-v1.5".into(),
            dimensions: 384,
        };
        let manifest = Manifest {
            collection: "kb".into(),
            profile: Some(profile.clone()),
            sources: vec![SourceRecord {
                source_id: "faq.md".into(),
                content_hash: "ab".into(),
                loader: "markdown".into(),
                chunking: "recursive:256:32".into(),
                embedding_profile: profile.to_string(),
                chunk_ids: vec!["c1".into(), "c2".into()],
                ingested_at: "2026-12-03T00:00:00Z".into(),
                validation: "clean".into(),
                stale: None,
            }],
            corrupt_entries: vec![],
        };
        assert_eq!(manifest_from_pb(manifest_to_pb(manifest.clone())), manifest);
        let info = CollectionInfo {
            name: "kb".into(),
            sources: 1,
            chunks: 2,
            profile: Some(profile),
            vector_index: VectorIndexStatus {
                serving: "exact".into(),
                reason: "2 chunks".into(),
                hnsw_recall_at_10: None,
            },
            provider: "postgres".into(),
        };
        assert_eq!(collection_from_pb(collection_to_pb(info.clone())), info);
        let mut trace = RagTrace::default();
        trace.push("retrieve", 1.5, serde_json::json!({"mode": "bm25"}));
        let answer = RagAnswer {
            text: "It is two years [1].".into(),
            citations: vec![Citation {
                marker: 1,
                chunk_id: "c1".into(),
                source_id: "faq.md".into(),
                snippet: "two years".into(),
                score: 0.5,
                score_origin: ScoreOrigin::Bm25,
                start: 0,
                end: 9,
                untrusted: false,
            }],
            trace,
        };
        assert_eq!(
            answer_from_pb(answer_to_pb(answer.clone())).expect("decodes"),
            answer
        );
    }
}
