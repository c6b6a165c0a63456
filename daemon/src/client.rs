//! The CLI as a client of a running daemon's gRPC API: `orkeon crew list|get|kickoff|watch|
//! runs|cancel` and `orkeon rag … --server URL`.

use std::collections::HashMap;

use anyhow::Context;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::config::Config;
use crate::output::Output;
use crate::proto::v1 as pb;
use crate::proto::v1::crew_service_client::CrewServiceClient;
use crate::proto::v1::knowledge_service_client::KnowledgeServiceClient;

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

/// Turns a gRPC status into a readable error.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{} ({:?})", status.message(), status.code())
}

pub async fn list_crews(conn: &Connection, out: &Output) -> anyhow::Result<()> {
    let crews = conn
        .crews()
        .await?
        .list_crews(pb::ListCrewsRequest {})
        .await
        .map_err(status_error)?
        .into_inner()
        .crews;
    if out.json {
        let value: Vec<_> = crews.iter().map(crew_json).collect();
        return out.print_json(&value);
    }
    println!(
        "{:<20} {:<8} {:<13} {:<30} error",
        "crew", "status", "process", "collections"
    );
    for c in crews {
        println!(
            "{:<20} {:<8} {:<13} {:<30} {}",
            c.name,
            c.status,
            c.process,
            c.collections.join(","),
            c.error
        );
    }
    Ok(())
}

fn crew_json(c: &pb::Crew) -> serde_json::Value {
    serde_json::json!({
        "name": c.name, "file": c.file, "status": c.status, "error": c.error,
        "process": c.process, "collections": c.collections, "agents": c.agents,
        "tasks": c.tasks, "runnable": c.runnable, "updated_at": c.updated_at,
    })
}

pub async fn get_crew(conn: &Connection, name: String, out: &Output) -> anyhow::Result<()> {
    let crew = conn
        .crews()
        .await?
        .get_crew(pb::GetCrewRequest { name })
        .await
        .map_err(status_error)?
        .into_inner();
    if out.json {
        return out.print_json(&crew_json(&crew));
    }
    println!(
        "crew        {}\nfile        {}\nstatus      {}",
        crew.name, crew.file, crew.status
    );
    if !crew.error.is_empty() {
        println!("error       {}", crew.error);
    }
    println!(
        "process     {}\nagents      {}\ntasks       {}\ncollections {}",
        crew.process,
        crew.agents.join(", "),
        crew.tasks.join(", "),
        crew.collections.join(", ")
    );
    Ok(())
}

pub async fn kickoff(
    conn: &Connection,
    crew: String,
    inputs: Vec<(String, String)>,
    idempotency_key: Option<String>,
    wait: bool,
    out: &Output,
) -> anyhow::Result<bool> {
    let response = conn
        .crews()
        .await?
        .kickoff(pb::KickoffRequest {
            crew,
            inputs: inputs.into_iter().collect::<HashMap<_, _>>(),
            idempotency_key: idempotency_key.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if !wait {
        if out.json {
            out.print_json(
                &serde_json::json!({"run_id": response.run_id, "created": response.created}),
            )?;
        } else {
            println!("{}", response.run_id);
        }
        return Ok(true);
    }
    watch(conn, response.run_id, 0, out).await
}

pub async fn watch(
    conn: &Connection,
    run_id: String,
    after_seq: u64,
    out: &Output,
) -> anyhow::Result<bool> {
    let mut client = conn.crews().await?;
    let mut stream = client
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            after_seq,
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let spinner = crate::output::progress_bar(out, "run");
    while let Some(event) = stream.message().await.map_err(status_error)? {
        let value: serde_json::Value = serde_json::from_str(&event.json).unwrap_or_default();
        if out.json {
            println!(
                "{}",
                serde_json::json!({"run_id": event.run_id, "seq": event.seq, "at": event.at, "event": value})
            );
        } else {
            let stored = crate::runs::StoredEvent {
                run_id: event.run_id,
                seq: event.seq,
                at: event.at,
                event: value,
            };
            if let Some(bar) = &spinner {
                bar.set_message(event.r#type.clone());
                bar.suspend(|| crate::output::print_run_event(&stored));
            } else {
                crate::output::print_run_event(&stored);
            }
        }
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    let run = client
        .get_run(pb::GetRunRequest { run_id })
        .await
        .map_err(status_error)?
        .into_inner();
    if !out.json {
        println!("\nrun {} {}", run.run_id, run.state);
        if !run.reason.is_empty() {
            println!("reason: {}", run.reason);
        }
        if !run.final_output.is_empty() {
            println!("\n{}", run.final_output);
        }
    }
    Ok(matches!(run.state.as_str(), "finished" | "degraded"))
}

fn run_json(r: &pb::Run) -> serde_json::Value {
    serde_json::json!({
        "run_id": r.run_id, "crew": r.crew, "crew_file": r.crew_file, "state": r.state,
        "inputs": r.inputs, "started_at": r.started_at, "finished_at": r.finished_at,
        "reason": r.reason, "final_output": r.final_output, "last_seq": r.last_seq,
    })
}

pub async fn runs(
    conn: &Connection,
    limit: u32,
    page_token: Option<String>,
    out: &Output,
) -> anyhow::Result<()> {
    let page = conn
        .crews()
        .await?
        .list_runs(pb::ListRunsRequest {
            page_size: limit,
            page_token: page_token.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if out.json {
        let runs: Vec<_> = page.runs.iter().map(run_json).collect();
        return out.print_json(
            &serde_json::json!({"runs": runs, "next_page_token": page.next_page_token}),
        );
    }
    println!("{:<38} {:<16} {:<10} started", "run", "crew", "state");
    for r in &page.runs {
        println!(
            "{:<38} {:<16} {:<10} {}",
            r.run_id, r.crew, r.state, r.started_at
        );
    }
    if !page.next_page_token.is_empty() {
        println!("more: --page-token {}", page.next_page_token);
    }
    Ok(())
}

pub async fn cancel(conn: &Connection, run_id: String, out: &Output) -> anyhow::Result<()> {
    let run = conn
        .crews()
        .await?
        .cancel_run(pb::CancelRunRequest { run_id })
        .await
        .map_err(status_error)?
        .into_inner();
    if out.json {
        return out.print_json(&run_json(&run));
    }
    println!("run {} {}", run.run_id, run.state);
    Ok(())
}
