//! `orkeon.v1.CrewService`: each RPC converts its request, calls the application layer
//! ([`CrewApp`]) and converts the result. No logic of its own.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::convert;
use crate::proto::v1 as pb;
use crate::proto::v1::crew_service_server::CrewService;
use crate::service::{CrewApi, CrewApp};

/// The crew service over the application layer.
#[derive(Clone)]
pub struct CrewRpc {
    app: Arc<CrewApp>,
}

impl CrewRpc {
    pub fn new(app: Arc<CrewApp>) -> Self {
        Self { app }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl CrewService for CrewRpc {
    async fn list_crews(
        &self,
        _request: Request<pb::ListCrewsRequest>,
    ) -> Result<Response<pb::ListCrewsResponse>, Status> {
        let crews = self.app.list_crews().await?;
        Ok(Response::new(pb::ListCrewsResponse {
            crews: crews.into_iter().map(convert::crew_to_pb).collect(),
        }))
    }

    async fn get_crew(
        &self,
        request: Request<pb::GetCrewRequest>,
    ) -> Result<Response<pb::Crew>, Status> {
        let crew = self.app.get_crew(&request.into_inner().name).await?;
        Ok(Response::new(convert::crew_to_pb(crew)))
    }

    async fn kickoff(
        &self,
        request: Request<pb::KickoffRequest>,
    ) -> Result<Response<pb::KickoffResponse>, Status> {
        let params = convert::kickoff_params_from_pb(request.into_inner());
        let kickoff = self.app.kickoff(params).await?;
        Ok(Response::new(pb::KickoffResponse {
            run_id: kickoff.run_id,
            created: kickoff.created,
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let request = request.into_inner();
        let events = self.app.watch(&request.run_id, request.after_seq).await?;
        let stream = events.map(|event| event.map(convert::event_to_pb).map_err(Status::from));
        Ok(Response::new(Box::pin(stream) as EventStream))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let run = self.app.get_run(&request.into_inner().run_id).await?;
        Ok(Response::new(convert::run_to_pb(run)))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let request = request.into_inner();
        let page = self
            .app
            .list_runs(request.page_size as usize, Some(&request.page_token))
            .await?;
        Ok(Response::new(pb::ListRunsResponse {
            runs: page.runs.into_iter().map(convert::run_to_pb).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let run = self.app.cancel(&request.into_inner().run_id).await?;
        Ok(Response::new(convert::run_to_pb(run)))
    }
}
