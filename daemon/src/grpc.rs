//! The gRPC control plane (tonic): CrewService, KnowledgeService, grpc.health.v1 and server
//! reflection, with optional bearer-token auth and request size limits.
//!
//! Errors become gRPC statuses in exactly one place: [`ApiError`]'s `From` impl.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use orkeon_knowledge::ingest::IngestRequest;
use orkeon_knowledge::query::{QueryError, RagQuery};
use orkeon_knowledge::settings::ChunkingSettings;
use orkeon_knowledge::store::DocumentStore;
use orkeon_knowledge::types::RagAnswer;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::engine::EngineError;
use crate::proto::v1 as pb;
use crate::proto::v1::crew_service_server::{CrewService, CrewServiceServer};
use crate::proto::v1::knowledge_service_server::{KnowledgeService, KnowledgeServiceServer};
use crate::runs::{RunRecord, RunStoreError, StoredEvent};
use crate::services::Services;

/// Every error the API returns, mapped to a status code in one place.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },
    #[error("{kind} '{name}' not found{hint}")]
    NotFound {
        kind: &'static str,
        name: String,
        hint: String,
    },
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Self {
        let message = error.to_string();
        match error {
            ApiError::InvalidArgument { field, message } => Status::with_error_details(
                tonic::Code::InvalidArgument,
                format!("{field}: {message}"),
                ErrorDetails::with_bad_request_violation(field, message),
            ),
            ApiError::NotFound { kind, name, .. } => Status::with_error_details(
                tonic::Code::NotFound,
                message,
                ErrorDetails::with_resource_info(kind, name, "", "not found"),
            ),
            ApiError::FailedPrecondition(_) => Status::with_error_details(
                tonic::Code::FailedPrecondition,
                message.clone(),
                ErrorDetails::with_precondition_failure_violation(
                    "FAILED_PRECONDITION",
                    "request",
                    message,
                ),
            ),
            ApiError::Unavailable(_) => Status::unavailable(message),
            ApiError::Internal(_) => Status::internal(message),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::UnknownCrew { name, known } => ApiError::NotFound {
                kind: "crew",
                name,
                hint: format!(" (known crews: {known})"),
            },
            EngineError::InvalidCrew { .. } => ApiError::FailedPrecondition(error.to_string()),
            EngineError::MissingInput(_) => ApiError::InvalidArgument {
                field: "inputs",
                message: error.to_string(),
            },
            EngineError::ShuttingDown => ApiError::Unavailable(error.to_string()),
            EngineError::Store(RunStoreError::UnknownRun(id)) => ApiError::NotFound {
                kind: "run",
                name: id,
                hint: String::new(),
            },
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(error: QueryError) -> Self {
        let message = error.to_string();
        match error {
            QueryError::UnknownProfile { .. } | QueryError::ProfileNotAvailable { .. } => {
                ApiError::InvalidArgument {
                    field: "profile",
                    message,
                }
            }
            QueryError::UnknownReranker { .. }
            | QueryError::UnknownTransformer { .. }
            | QueryError::InvalidOption { .. } => ApiError::FailedPrecondition(message),
            QueryError::InvalidQuery(_) | QueryError::EmptyQuestion => ApiError::InvalidArgument {
                field: "query",
                message,
            },
            QueryError::NoChatModel { .. }
            | QueryError::Chat {
                source: orkeon_crews::ports::ChatError::NotConfigured(_),
                ..
            } => ApiError::FailedPrecondition(message),
            QueryError::Chat { .. } => ApiError::Unavailable(message),
            _ => ApiError::Internal(message),
        }
    }
}

impl From<RunStoreError> for ApiError {
    fn from(error: RunStoreError) -> Self {
        EngineError::Store(error).into()
    }
}

fn required(field: &'static str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::InvalidArgument {
            field,
            message: "is required".into(),
        });
    }
    Ok(())
}

fn run_to_pb(run: RunRecord) -> pb::Run {
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
    }
}

fn event_to_pb(event: StoredEvent) -> pb::RunEvent {
    pb::RunEvent {
        r#type: event
            .event
            .get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("event")
            .to_string(),
        json: event.event.to_string(),
        run_id: event.run_id,
        seq: event.seq,
        at: event.at,
    }
}

fn answer_to_pb(answer: RagAnswer) -> pb::RagAnswer {
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

/// The API over one process's services.
#[derive(Clone)]
pub struct Api {
    services: Arc<Services>,
}

impl Api {
    pub fn new(services: Arc<Services>) -> Self {
        Self { services }
    }

    fn is_terminal_event(event: &StoredEvent) -> bool {
        event.event.get("type").and_then(|t| t.as_str()) == Some("run_finished")
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl CrewService for Api {
    async fn list_crews(
        &self,
        _request: Request<pb::ListCrewsRequest>,
    ) -> Result<Response<pb::ListCrewsResponse>, Status> {
        let crews = self
            .services
            .registry
            .list()
            .into_iter()
            .map(crew_to_pb)
            .collect();
        Ok(Response::new(pb::ListCrewsResponse { crews }))
    }

    async fn get_crew(
        &self,
        request: Request<pb::GetCrewRequest>,
    ) -> Result<Response<pb::Crew>, Status> {
        let name = request.into_inner().name;
        required("name", &name)?;
        let entry = self
            .services
            .registry
            .get(&name)
            .ok_or_else(|| ApiError::NotFound {
                kind: "crew",
                name: name.clone(),
                hint: format!(
                    " (known crews: {})",
                    self.services.registry.names().join(", ")
                ),
            })?;
        Ok(Response::new(crew_to_pb(entry)))
    }

    async fn kickoff(
        &self,
        request: Request<pb::KickoffRequest>,
    ) -> Result<Response<pb::KickoffResponse>, Status> {
        let request = request.into_inner();
        required("crew", &request.crew)?;
        let key = (!request.idempotency_key.is_empty()).then_some(request.idempotency_key);
        let existed = key
            .as_ref()
            .map(|k| self.services.runs.find_by_key(&request.crew, k))
            .transpose()
            .map_err(ApiError::from)?
            .flatten();
        if let Some(run) = existed {
            return Ok(Response::new(pb::KickoffResponse {
                run_id: run.run_id,
                created: false,
            }));
        }
        let inputs: BTreeMap<String, String> = request.inputs.into_iter().collect();
        let run = self
            .services
            .engine
            .kickoff(&request.crew, inputs, key)
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::KickoffResponse {
            run_id: run.run_id,
            created: true,
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let request = request.into_inner();
        required("run_id", &request.run_id)?;
        let runs = self.services.runs.clone();
        runs.get(&request.run_id).map_err(ApiError::from)?;
        // Bounded: a slow consumer only slows its own forwarding task, which catches up from
        // the store when the live channel has moved on.
        let (tx, rx) = mpsc::channel(64);
        let run_id = request.run_id.clone();
        tokio::spawn(async move {
            let mut live = runs.subscribe(&run_id);
            let mut last = request.after_seq;
            loop {
                let backlog = match runs.events_after(&run_id, last) {
                    Ok(events) => events,
                    Err(error) => {
                        let _ = tx.send(Err(Status::from(ApiError::from(error)))).await;
                        return;
                    }
                };
                for event in backlog {
                    last = event.seq;
                    let end = Api::is_terminal_event(&event);
                    if tx.send(Ok(event_to_pb(event))).await.is_err() {
                        return;
                    }
                    if end {
                        return;
                    }
                }
                // Finished with nothing newer: done.
                match runs.get(&run_id) {
                    Ok(run) if run.state.is_terminal() && run.last_seq <= last => return,
                    Ok(_) => {}
                    Err(_) => return,
                }
                // Wait for something new (or time out and re-check the store).
                match tokio::time::timeout(std::time::Duration::from_secs(1), live.recv()).await {
                    Ok(Ok(_)) | Err(_) => {}
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => {
                        live = runs.subscribe(&run_id);
                    }
                }
            }
        });
        Ok(Response::new(
            Box::pin(ReceiverStream::new(rx)) as EventStream
        ))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let run_id = request.into_inner().run_id;
        required("run_id", &run_id)?;
        let run = self.services.runs.get(&run_id).map_err(ApiError::from)?;
        Ok(Response::new(run_to_pb(run)))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let request = request.into_inner();
        let size = match request.page_size {
            0 => 20,
            n if n > 200 => {
                return Err(ApiError::InvalidArgument {
                    field: "page_size",
                    message: "must be at most 200".into(),
                }
                .into());
            }
            n => n as usize,
        };
        let after = (!request.page_token.is_empty()).then_some(request.page_token.as_str());
        let mut runs = self
            .services
            .runs
            .list(size + 1, after)
            .map_err(ApiError::from)?;
        let next = if runs.len() > size {
            runs.truncate(size);
            runs.last().map(|r| r.run_id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListRunsResponse {
            runs: runs.into_iter().map(run_to_pb).collect(),
            next_page_token: next,
        }))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let run_id = request.into_inner().run_id;
        required("run_id", &run_id)?;
        let run = self.services.runs.get(&run_id).map_err(ApiError::from)?;
        if run.state.is_terminal() {
            return Err(ApiError::FailedPrecondition(format!(
                "run '{run_id}' already ended ({})",
                run.state.as_str()
            ))
            .into());
        }
        self.services.engine.cancel(&run_id);
        let run = self
            .services
            .engine
            .wait(&run_id)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(run_to_pb(run)))
    }
}

fn crew_to_pb(entry: crate::registry::CrewEntry) -> pb::Crew {
    let status = entry.status().to_string();
    let spec = entry.spec.clone();
    pb::Crew {
        name: entry.name,
        file: entry.file.display().to_string(),
        status,
        error: entry.error.unwrap_or_default(),
        process: spec
            .as_ref()
            .map(|s| format!("{:?}", s.process).to_lowercase())
            .unwrap_or_default(),
        collections: spec
            .as_ref()
            .map(|s| s.rag.collections.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default(),
        agents: spec
            .as_ref()
            .map(|s| s.agents.iter().map(|a| a.name.clone()).collect())
            .unwrap_or_default(),
        tasks: spec
            .as_ref()
            .map(|s| s.tasks.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default(),
        runnable: spec.is_some(),
        updated_at: entry.updated_at,
    }
}

#[tonic::async_trait]
impl KnowledgeService for Api {
    async fn ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestReport>, Status> {
        let request = request.into_inner();
        required("collection", &request.collection)?;
        if request.sources.is_empty() {
            return Err(ApiError::InvalidArgument {
                field: "sources",
                message: "name at least one path, glob or URL".into(),
            }
            .into());
        }
        let chunking = request.chunking.map(|c| {
            let defaults = self.services.config.rag.ingestion.default_chunking.clone();
            ChunkingSettings {
                strategy: if c.strategy.is_empty() {
                    defaults.strategy.clone()
                } else {
                    c.strategy
                },
                max_tokens: if c.max_tokens == 0 {
                    defaults.max_tokens
                } else {
                    c.max_tokens as usize
                },
                overlap: c.overlap as usize,
                ..defaults
            }
        });
        let base_dir = std::env::current_dir().map_err(|e| ApiError::Internal(e.to_string()))?;
        let report = self
            .services
            .host
            .ingestion
            .ingest(
                &IngestRequest {
                    collection: request.collection,
                    base_dir,
                    sources: request.sources,
                    chunking,
                    reindex: request.reindex,
                },
                None,
            )
            .await
            .map_err(|e| ApiError::InvalidArgument {
                field: "sources",
                message: e.to_string(),
            })?;
        Ok(Response::new(pb::IngestReport {
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
        }))
    }

    async fn query(
        &self,
        request: Request<pb::QueryRequest>,
    ) -> Result<Response<pb::RagAnswer>, Status> {
        let answer = self.run_query(request.into_inner(), false).await?;
        Ok(Response::new(answer_to_pb(answer)))
    }

    async fn retrieve(
        &self,
        request: Request<pb::QueryRequest>,
    ) -> Result<Response<pb::RagAnswer>, Status> {
        let answer = self.run_query(request.into_inner(), true).await?;
        Ok(Response::new(answer_to_pb(answer)))
    }

    async fn list_collections(
        &self,
        _request: Request<pb::ListCollectionsRequest>,
    ) -> Result<Response<pb::ListCollectionsResponse>, Status> {
        let collections = self
            .services
            .host
            .store
            .collections()
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .into_iter()
            .map(|c| pb::Collection {
                name: c.name,
                sources: c.sources as u64,
                chunks: c.chunks as u64,
                embedding_profile: c.profile.map(|p| p.to_string()).unwrap_or_default(),
                vector_index: c.vector_index.serving,
                vector_index_reason: c.vector_index.reason,
                hnsw_recall_at_10: c.vector_index.hnsw_recall_at_10,
            })
            .collect();
        Ok(Response::new(pb::ListCollectionsResponse { collections }))
    }

    async fn get_manifest(
        &self,
        request: Request<pb::GetManifestRequest>,
    ) -> Result<Response<pb::Manifest>, Status> {
        let collection = request.into_inner().collection;
        required("collection", &collection)?;
        let manifest = self
            .services
            .host
            .store
            .manifest(&collection)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if manifest.profile.is_none() && manifest.sources.is_empty() {
            self.require_collection(&collection)?;
        }
        Ok(Response::new(pb::Manifest {
            collection,
            embedding_profile: manifest.profile.map(|p| p.to_string()).unwrap_or_default(),
            sources: manifest
                .sources
                .into_iter()
                .map(|s| pb::ManifestEntry {
                    chunks: s.chunk_ids.len() as u64,
                    source_id: s.source_id,
                    content_hash: s.content_hash,
                    loader: s.loader,
                    chunking: s.chunking,
                    embedding_profile: s.embedding_profile,
                    ingested_at: s.ingested_at,
                    validation: s.validation,
                })
                .collect(),
            corrupt_entries: manifest.corrupt_entries,
        }))
    }

    async fn delete_collection(
        &self,
        request: Request<pb::DeleteCollectionRequest>,
    ) -> Result<Response<pb::DeleteCollectionResponse>, Status> {
        let collection = request.into_inner().collection;
        required("collection", &collection)?;
        self.require_collection(&collection)?;
        self.services
            .host
            .store
            .drop_collection(&collection)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(Response::new(pb::DeleteCollectionResponse {
            deleted: true,
        }))
    }
}

impl Api {
    /// NotFound (listing the known collections) unless `name` exists.
    fn require_collection(&self, name: &str) -> Result<(), ApiError> {
        let known: Vec<String> = self
            .services
            .host
            .store
            .collections()
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .into_iter()
            .map(|c| c.name)
            .collect();
        if known.iter().any(|c| c == name) {
            return Ok(());
        }
        Err(ApiError::NotFound {
            kind: "collection",
            name: name.to_string(),
            hint: format!(" (known collections: {})", known.join(", ")),
        })
    }

    async fn run_query(
        &self,
        request: pb::QueryRequest,
        retrieve_only: bool,
    ) -> Result<RagAnswer, ApiError> {
        if request.query.trim().is_empty() {
            return Err(ApiError::InvalidArgument {
                field: "query",
                message: "is required".into(),
            });
        }
        let collection = if request.collection.is_empty() {
            self.services
                .config
                .rag
                .collection
                .clone()
                .ok_or(ApiError::InvalidArgument {
                    field: "collection",
                    message: "is required (no rag.collection default is configured)".into(),
                })?
        } else {
            request.collection
        };
        self.require_collection(&collection)?;
        let profile = if request.profile.is_empty() {
            self.services.config.rag.profile.clone()
        } else {
            request.profile
        };
        let pipeline = self.services.resolver.resolve(&profile)?;
        let query = RagQuery {
            text: request.query,
            collection,
            top_n: (request.top_n > 0).then_some(request.top_n as usize),
        };
        let result = if retrieve_only {
            let retriever = pipeline.retriever().ok_or_else(|| {
                ApiError::FailedPrecondition(format!(
                    "profile '{profile}' cannot retrieve without generation; use Query, or a staged profile (fast, balanced, quality)"
                ))
            })?;
            retriever.retrieve(&query).await
        } else {
            pipeline.query(&query).await
        };
        Ok(result?)
    }
}

/// Checks the bearer token on every call when one is configured.
#[derive(Clone)]
pub struct TokenCheck {
    expected: Option<Arc<str>>,
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("invalid bearer token")),
            None => Err(Status::unauthenticated(
                "missing bearer token: send `authorization: Bearer <token>`",
            )),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Resolves the listen address and the token, refusing an unsafe combination.
pub fn listen_settings(services: &Services) -> anyhow::Result<(SocketAddr, Option<Arc<str>>)> {
    let server = &services.config.server;
    let addr: SocketAddr = server
        .listen
        .parse()
        .map_err(|e| anyhow::anyhow!("server.listen '{}' is not an address: {e}", server.listen))?;
    let token = match &server.token_env {
        Some(var) => {
            let value = std::env::var(var).map_err(|_| {
                anyhow::anyhow!(
                    "server.token_env names {var}, but that environment variable is not set"
                )
            })?;
            if value.is_empty() {
                anyhow::bail!("the bearer token in {var} is empty");
            }
            Some(Arc::from(value))
        }
        None => None,
    };
    if !addr.ip().is_loopback() && token.is_none() && !server.allow_insecure_remote {
        anyhow::bail!(
            "refusing to listen on non-loopback {addr} without a bearer token: set server.token_env (or server.allow_insecure_remote: true)"
        );
    }
    Ok((addr, token))
}

/// Serves the API until `shutdown` resolves.
pub async fn serve(
    services: Arc<Services>,
    listener: tokio::net::TcpListener,
    token: Option<Arc<str>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let limit = services.config.server.max_request_bytes;
    let api = Api::new(services);
    let check = TokenCheck { expected: token };
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<CrewServiceServer<Api>>().await;
    health.set_serving::<KnowledgeServiceServer<Api>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let crews = InterceptedService::new(
        CrewServiceServer::new(api.clone()).max_decoding_message_size(limit),
        check.clone(),
    );
    let knowledge = InterceptedService::new(
        KnowledgeServiceServer::new(api).max_decoding_message_size(limit),
        check,
    );
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(crews)
        .add_service(knowledge)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown,
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_maps_to_its_code_in_one_place() {
        let cases: Vec<(ApiError, tonic::Code)> = vec![
            (
                ApiError::from(EngineError::ShuttingDown),
                tonic::Code::Unavailable,
            ),
            (
                ApiError::from(EngineError::MissingInput("question".into())),
                tonic::Code::InvalidArgument,
            ),
            (
                ApiError::from(EngineError::UnknownCrew {
                    name: "x".into(),
                    known: "a".into(),
                }),
                tonic::Code::NotFound,
            ),
            (
                ApiError::from(EngineError::InvalidCrew {
                    name: "x".into(),
                    error: "x.yaml:1:1: bad".into(),
                }),
                tonic::Code::FailedPrecondition,
            ),
            (
                ApiError::from(RunStoreError::UnknownRun("r".into())),
                tonic::Code::NotFound,
            ),
            (
                ApiError::from(QueryError::EmptyQuestion),
                tonic::Code::InvalidArgument,
            ),
            (
                ApiError::from(QueryError::NoChatModel {
                    stage: "generate".into(),
                }),
                tonic::Code::FailedPrecondition,
            ),
        ];
        for (error, code) in cases {
            let text = error.to_string();
            let status = Status::from(error);
            assert_eq!(status.code(), code, "{text}");
            assert!(!status.message().is_empty());
        }
        let status = Status::from(ApiError::InvalidArgument {
            field: "crew",
            message: "is required".into(),
        });
        let details = status.get_error_details();
        let violations = &details
            .bad_request()
            .expect("bad request details")
            .field_violations;
        assert_eq!(violations[0].field, "crew");
    }
}
