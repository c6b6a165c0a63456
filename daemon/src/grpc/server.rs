//! Server wiring: the listen policy (no unauthenticated non-loopback listener), request size,
//! concurrency and time limits, health and reflection, and the two services behind the token
//! check.

use std::net::SocketAddr;
use std::sync::Arc;

use tonic::service::interceptor::InterceptedService;

use super::auth::TokenCheck;
use super::crews::CrewRpc;
use super::knowledge::KnowledgeRpc;
use crate::proto::v1::crew_service_server::CrewServiceServer;
use crate::proto::v1::knowledge_service_server::KnowledgeServiceServer;
use crate::services::Services;

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
    let check = TokenCheck::new(token);
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<CrewServiceServer<CrewRpc>>().await;
    health
        .set_serving::<KnowledgeServiceServer<KnowledgeRpc>>()
        .await;
    // The database is a dependency: NOT_SERVING (the whole server and both services) while it
    // is unreachable, SERVING again once it answers (see `Storage::monitor`).
    let monitor = tokio::spawn(services.host.storage.clone().monitor({
        let health = health.clone();
        move |reachable| {
            let health = health.clone();
            async move { set_health(&health, reachable).await }
        }
    }));
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let crews = InterceptedService::new(
        CrewServiceServer::new(CrewRpc::new(services.crews.clone()))
            .max_decoding_message_size(limit),
        check.clone(),
    );
    let knowledge = InterceptedService::new(
        KnowledgeServiceServer::new(KnowledgeRpc::new(services.knowledge_app.clone()))
            .max_decoding_message_size(limit),
        check,
    );
    let limits = &services.config.limits;
    let served = tonic::transport::Server::builder()
        .timeout(std::time::Duration::from_secs(
            limits.request_timeout_secs.max(1),
        ))
        .layer(tower::util::MapResponseLayer::new(
            super::size_limit::name_request_limit,
        ))
        .layer(tower::limit::ConcurrencyLimitLayer::new(
            limits.max_concurrent_requests.max(1),
        ))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(crews)
        .add_service(knowledge)
        .serve_with_incoming_shutdown(
            // TCP_NODELAY on every accepted socket: without it, Nagle's algorithm holds the
            // tail of a large response until the client's delayed ACK (≈40 ms on Linux).
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await;
    monitor.abort();
    served?;
    Ok(())
}

/// Sets the overall status and both services' to SERVING or NOT_SERVING.
async fn set_health(health: &tonic_health::server::HealthReporter, serving: bool) {
    use tonic_health::ServingStatus;
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    health.set_service_status("", status).await;
    if serving {
        health.set_serving::<CrewServiceServer<CrewRpc>>().await;
        health
            .set_serving::<KnowledgeServiceServer<KnowledgeRpc>>()
            .await;
    } else {
        health.set_not_serving::<CrewServiceServer<CrewRpc>>().await;
        health
            .set_not_serving::<KnowledgeServiceServer<KnowledgeRpc>>()
            .await;
    }
}
