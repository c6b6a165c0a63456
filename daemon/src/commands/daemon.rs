//! `orkeon daemon`: watch the crews folder, run crews, serve the gRPC control API; structured
//! logs; clean shutdown on SIGINT/SIGTERM (stop watching, stop accepting calls, let runs finish
//! up to a deadline, flush).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::grpc;
use crate::services::Services;
use crate::watch::{CrewsWatcher, SourceWatcher};

pub async fn run(config: Config) -> anyhow::Result<()> {
    let crews_dir: PathBuf = config.crews_dir.clone();
    let services = Arc::new(Services::start(config).await?);
    let checks = Arc::new(services.checks());
    let (addr, token) = grpc::listen_settings(&services)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (server.listen / --listen)"))?;
    let bound = listener.local_addr()?;

    let sources = SourceWatcher::start(services.knowledge.clone(), Duration::from_millis(750))?;
    let crews = CrewsWatcher::start(
        crews_dir.clone(),
        services.engine.clone(),
        sources.clone(),
        checks,
        Duration::from_millis(300),
    )
    .await?;

    // On a run store shared by a fleet, this daemon claims queued runs of the crews it serves.
    services.engine.serve_queue();

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(grpc::serve(services.clone(), listener, token, async move {
        let _ = stop_rx.await;
    }));
    tracing::info!(
        listen = %bound,
        crews_dir = %crews_dir.display(),
        data_dir = %services.config.data_dir.display(),
        "orkeon daemon ready"
    );
    // A machine-readable line for scripts and tests that start the daemon on port 0.
    println!("orkeon listening on {bound}");

    wait_for_signal().await;
    tracing::info!("shutting down: no new runs; letting running ones finish");
    crews.stop();
    sources.stop();
    services.shutdown().await;
    let _ = stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(Err(error))) => tracing::error!(%error, "gRPC server failed"),
        Ok(Err(error)) => tracing::error!(%error, "gRPC server task failed"),
        _ => {}
    }
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
