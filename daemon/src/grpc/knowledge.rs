//! `orkeon.v1.KnowledgeService`: each RPC converts its request, calls the application layer
//! ([`KnowledgeApp`]) and converts the result. No logic of its own.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert;
use crate::proto::v1 as pb;
use crate::proto::v1::knowledge_service_server::KnowledgeService;
use crate::service::{KnowledgeApi, KnowledgeApp};

/// The knowledge service over the application layer.
#[derive(Clone)]
pub struct KnowledgeRpc {
    app: Arc<KnowledgeApp>,
}

impl KnowledgeRpc {
    pub fn new(app: Arc<KnowledgeApp>) -> Self {
        Self { app }
    }
}

#[tonic::async_trait]
impl KnowledgeService for KnowledgeRpc {
    async fn ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestReport>, Status> {
        let params = convert::ingest_params_from_pb(request.into_inner());
        let report = self.app.ingest(params, None).await?;
        Ok(Response::new(convert::ingest_report_to_pb(report)))
    }

    async fn query(
        &self,
        request: Request<pb::QueryRequest>,
    ) -> Result<Response<pb::RagAnswer>, Status> {
        let params = convert::query_params_from_pb(request.into_inner())?;
        let answer = self.app.query(params).await?;
        Ok(Response::new(convert::answer_to_pb(answer)))
    }

    async fn retrieve(
        &self,
        request: Request<pb::QueryRequest>,
    ) -> Result<Response<pb::RagAnswer>, Status> {
        let params = convert::query_params_from_pb(request.into_inner())?;
        let answer = self.app.retrieve(params).await?;
        Ok(Response::new(convert::answer_to_pb(answer)))
    }

    async fn list_collections(
        &self,
        _request: Request<pb::ListCollectionsRequest>,
    ) -> Result<Response<pb::ListCollectionsResponse>, Status> {
        let collections = self.app.collections().await?;
        Ok(Response::new(pb::ListCollectionsResponse {
            collections: collections
                .into_iter()
                .map(convert::collection_to_pb)
                .collect(),
        }))
    }

    async fn get_manifest(
        &self,
        request: Request<pb::GetManifestRequest>,
    ) -> Result<Response<pb::Manifest>, Status> {
        let manifest = self.app.manifest(&request.into_inner().collection).await?;
        Ok(Response::new(convert::manifest_to_pb(manifest)))
    }

    async fn delete_collection(
        &self,
        request: Request<pb::DeleteCollectionRequest>,
    ) -> Result<Response<pb::DeleteCollectionResponse>, Status> {
        self.app.delete(&request.into_inner().collection).await?;
        Ok(Response::new(pb::DeleteCollectionResponse {
            deleted: true,
        }))
    }

    async fn list_quarantine(
        &self,
        request: Request<pb::ListQuarantineRequest>,
    ) -> Result<Response<pb::ListQuarantineResponse>, Status> {
        let collection = request.into_inner().collection;
        let entries = self.app.quarantine(Some(&collection)).await?;
        Ok(Response::new(pb::ListQuarantineResponse {
            entries: entries
                .into_iter()
                .map(convert::quarantine_entry_to_pb)
                .collect(),
        }))
    }

    async fn evaluate(
        &self,
        request: Request<pb::EvaluateRequest>,
    ) -> Result<Response<pb::EvaluateResponse>, Status> {
        let params = convert::eval_params_from_pb(request.into_inner());
        let outcome = self.app.evaluate(params, None).await?;
        Ok(Response::new(convert::eval_outcome_to_pb(outcome)?))
    }
}
