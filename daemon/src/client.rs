//! The CLI as a client of a running daemon's gRPC API: the application layer's contracts
//! ([`KnowledgeApi`], [`CrewApi`]) implemented over gRPC, so `orkeon rag … --server URL` and
//! `orkeon crew …` run the same commands as their local forms.

use anyhow::Context;
use async_trait::async_trait;
use futures::StreamExt;
use orkeon_knowledge::ingest::IngestReport;
use orkeon_knowledge::store::{CollectionInfo, Manifest};
use orkeon_knowledge::types::RagAnswer;
use orkeon_knowledge::validate::QuarantineEntry;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::config::Config;
use crate::grpc::convert;
use crate::proto::v1 as pb;
use crate::proto::v1::crew_service_client::CrewServiceClient;
use crate::proto::v1::knowledge_service_client::KnowledgeServiceClient;
use crate::runs::RunRecord;
use crate::service::{
    CrewApi, CrewSummary, EvalOutcome, EvalParams, EvalProgressFn, EventStream, IngestParams,
    IngestProgressFn, Kickoff, KickoffParams, KnowledgeApi, QueryParams, RunPage, ServiceError,
};

/// Adds the bearer token to every call.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Authed = InterceptedService<Channel, Bearer>;

/// Connection settings: `--server`, else `ORKEON_SERVER`, else `http://<server.listen>`; the
/// token from `ORKEON_TOKEN`, else from the variable `server.token_env` names.
pub struct Connection {
    pub url: String,
    token: Option<String>,
}

impl Connection {
    pub fn new(server: Option<String>, config: &Config) -> Self {
        let url = server
            .or_else(|| std::env::var("ORKEON_SERVER").ok())
            .unwrap_or_else(|| format!("http://{}", config.server.listen));
        let url = if url.contains("://") {
            url
        } else {
            format!("http://{url}")
        };
        let token = std::env::var("ORKEON_TOKEN").ok().or_else(|| {
            config
                .server
                .token_env
                .as_ref()
                .and_then(|var| std::env::var(var).ok())
        });
        Self { url, token }
    }

    async fn channel(&self) -> anyhow::Result<(Channel, Bearer)> {
        let channel = Channel::from_shared(self.url.clone())
            .with_context(|| format!("'{}' is not a server URL", self.url))?
            // Small requests and large answers: never wait for Nagle's algorithm.
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| {
                format!(
                    "cannot reach the Orkeon daemon at {} — is `orkeon daemon` running? (set --server or ORKEON_SERVER)",
                    self.url
                )
            })?;
        let bearer = match &self.token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .context("the token contains characters not allowed in a header")?,
            ),
            None => None,
        };
        Ok((channel, Bearer(bearer)))
    }

    pub async fn crews(&self) -> anyhow::Result<CrewServiceClient<Authed>> {
        let (channel, bearer) = self.channel().await?;
        Ok(CrewServiceClient::with_interceptor(channel, bearer))
    }

    pub async fn knowledge(&self) -> anyhow::Result<KnowledgeServiceClient<Authed>> {
        let (channel, bearer) = self.channel().await?;
        Ok(KnowledgeServiceClient::with_interceptor(channel, bearer))
    }
}

/// The knowledge operations of a daemon, over gRPC.
pub struct RemoteKnowledge {
    conn: Connection,
}

impl RemoteKnowledge {
    pub fn new(conn: Connection) -> Self {
        Self { conn }
    }

    async fn client(&self) -> Result<KnowledgeServiceClient<Authed>, ServiceError> {
        self.conn.knowledge().await.map_err(unreachable_daemon)
    }
}

/// The daemon could not be reached at all.
fn unreachable_daemon(error: anyhow::Error) -> ServiceError {
    ServiceError::Unavailable(format!("{error:#}"))
}

#[async_trait]
impl KnowledgeApi for RemoteKnowledge {
    async fn ingest(
        &self,
        params: IngestParams,
        _progress: Option<IngestProgressFn<'_>>,
    ) -> Result<IngestReport, ServiceError> {
        let report = self
            .client()
            .await?
            .ingest(convert::ingest_params_to_pb(params))
            .await?
            .into_inner();
        Ok(convert::ingest_report_from_pb(report))
    }

    async fn retrieve(&self, params: QueryParams) -> Result<RagAnswer, ServiceError> {
        let answer = self
            .client()
            .await?
            .retrieve(convert::query_params_to_pb(params))
            .await?
            .into_inner();
        convert::answer_from_pb(answer)
    }

    async fn query(&self, params: QueryParams) -> Result<RagAnswer, ServiceError> {
        let answer = self
            .client()
            .await?
            .query(convert::query_params_to_pb(params))
            .await?
            .into_inner();
        convert::answer_from_pb(answer)
    }

    async fn collections(&self) -> Result<Vec<CollectionInfo>, ServiceError> {
        let list = self
            .client()
            .await?
            .list_collections(pb::ListCollectionsRequest {})
            .await?
            .into_inner();
        Ok(list
            .collections
            .into_iter()
            .map(convert::collection_from_pb)
            .collect())
    }

    async fn manifest(&self, collection: &str) -> Result<Manifest, ServiceError> {
        let manifest = self
            .client()
            .await?
            .get_manifest(pb::GetManifestRequest {
                collection: collection.to_string(),
            })
            .await?
            .into_inner();
        Ok(convert::manifest_from_pb(manifest))
    }

    async fn delete(&self, collection: &str) -> Result<(), ServiceError> {
        self.client()
            .await?
            .delete_collection(pb::DeleteCollectionRequest {
                collection: collection.to_string(),
            })
            .await?;
        Ok(())
    }

    async fn quarantine(
        &self,
        collection: Option<&str>,
    ) -> Result<Vec<QuarantineEntry>, ServiceError> {
        let response = self
            .client()
            .await?
            .list_quarantine(pb::ListQuarantineRequest {
                collection: collection.unwrap_or_default().to_string(),
            })
            .await?
            .into_inner();
        Ok(response
            .entries
            .into_iter()
            .map(convert::quarantine_entry_from_pb)
            .collect())
    }

    async fn evaluate(
        &self,
        params: EvalParams,
        _progress: Option<EvalProgressFn<'_>>,
    ) -> Result<EvalOutcome, ServiceError> {
        if params.ephemeral || !params.chunking.is_empty() {
            return Err(ServiceError::FailedPrecondition(
                "an evaluation with its own chunking or a throwaway collection runs in process only (a daemon evaluates datasets as they are): run it without --server".into(),
            ));
        }
        let response = self
            .client()
            .await?
            .evaluate(convert::eval_params_to_pb(params))
            .await?
            .into_inner();
        convert::eval_outcome_from_pb(response)
    }
}

/// The crew and run operations of a daemon, over gRPC.
pub struct RemoteCrews {
    conn: Connection,
}

impl RemoteCrews {
    pub fn new(conn: Connection) -> Self {
        Self { conn }
    }

    async fn client(&self) -> Result<CrewServiceClient<Authed>, ServiceError> {
        self.conn.crews().await.map_err(unreachable_daemon)
    }
}

#[async_trait]
impl CrewApi for RemoteCrews {
    async fn list_crews(&self) -> Result<Vec<CrewSummary>, ServiceError> {
        let crews = self
            .client()
            .await?
            .list_crews(pb::ListCrewsRequest {})
            .await?
            .into_inner()
            .crews;
        Ok(crews.into_iter().map(convert::crew_from_pb).collect())
    }

    async fn get_crew(&self, name: &str) -> Result<CrewSummary, ServiceError> {
        let crew = self
            .client()
            .await?
            .get_crew(pb::GetCrewRequest {
                name: name.to_string(),
            })
            .await?
            .into_inner();
        Ok(convert::crew_from_pb(crew))
    }

    async fn kickoff(&self, params: KickoffParams) -> Result<Kickoff, ServiceError> {
        let response = self
            .client()
            .await?
            .kickoff(convert::kickoff_params_to_pb(params))
            .await?
            .into_inner();
        Ok(Kickoff {
            run_id: response.run_id,
            created: response.created,
        })
    }

    async fn watch(&self, run_id: &str, after_seq: u64) -> Result<EventStream, ServiceError> {
        let stream = self
            .client()
            .await?
            .watch_run(pb::WatchRunRequest {
                run_id: run_id.to_string(),
                after_seq,
            })
            .await?
            .into_inner();
        Ok(stream
            .map(|event| match event {
                Ok(event) => convert::event_from_pb(event),
                Err(status) => Err(ServiceError::from(status)),
            })
            .boxed())
    }

    async fn get_run(&self, run_id: &str) -> Result<RunRecord, ServiceError> {
        let run = self
            .client()
            .await?
            .get_run(pb::GetRunRequest {
                run_id: run_id.to_string(),
            })
            .await?
            .into_inner();
        convert::run_from_pb(run)
    }

    async fn list_runs(
        &self,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<RunPage, ServiceError> {
        let page = self
            .client()
            .await?
            .list_runs(pb::ListRunsRequest {
                page_size: page_size.min(u32::MAX as usize) as u32,
                page_token: page_token.unwrap_or_default().to_string(),
            })
            .await?
            .into_inner();
        Ok(RunPage {
            runs: page
                .runs
                .into_iter()
                .map(convert::run_from_pb)
                .collect::<Result<_, _>>()?,
            next_page_token: page.next_page_token,
        })
    }

    async fn cancel(&self, run_id: &str) -> Result<RunRecord, ServiceError> {
        let run = self
            .client()
            .await?
            .cancel_run(pb::CancelRunRequest {
                run_id: run_id.to_string(),
            })
            .await?
            .into_inner();
        convert::run_from_pb(run)
    }
}
