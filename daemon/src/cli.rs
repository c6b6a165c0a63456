//! The `orkeon` command line: argument parsing, configuration loading, logging, and dispatch
//! to the command implementations.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::client::{Connection, RemoteCrews};
use crate::commands::crew::{self as crew_cmd, parse_input};
use crate::commands::{models, rag};
use crate::config::{CliOverrides, Config, LogSettings, ServerOverrides};
use crate::output::Output;
use crate::service::KickoffParams;

/// Crew orchestration daemon with built-in retrieval-augmented knowledge.
#[derive(Debug, Parser)]
#[command(name = "orkeon", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags accepted by every command.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Configuration file (default: config/orkeon.yaml when present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (collections, runs, indexes); overrides `data_dir`.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the effective configuration (secrets redacted).
    Config,
    /// Run the daemon: watch the crews folder, run crews, serve the gRPC API.
    Daemon {
        /// Crews folder to watch (overrides `crews_dir`).
        #[arg(long, value_name = "DIR")]
        crews: Option<PathBuf>,
        /// Listen address (overrides `server.listen`), e.g. 127.0.0.1:50051 or 127.0.0.1:0.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Knowledge collections: ingest, search, query, inspect.
    Rag {
        /// Talk to a running daemon at this URL instead of working in-process.
        #[arg(long, global = true, value_name = "URL")]
        server: Option<String>,
        #[command(subcommand)]
        command: rag::RagCommand,
    },
    /// Crews: validate and run locally, or drive a running daemon.
    Crew {
        /// Daemon URL (default: ORKEON_SERVER, else http://<server.listen>).
        #[arg(long, global = true, value_name = "URL")]
        server: Option<String>,
        #[command(subcommand)]
        command: CrewCommand,
    },
    /// Rhai scripts over `rag.*` and `crew.*`, in-process or against a daemon.
    Script {
        /// Run the script's calls against a running daemon at this URL.
        #[arg(long, global = true, value_name = "URL")]
        server: Option<String>,
        #[command(subcommand)]
        command: crate::commands::script::ScriptCommand,
    },
    /// The storage provider's schema: apply migrations, or show their state.
    Db {
        #[command(subcommand)]
        command: crate::commands::db::DbCommand,
    },
    /// Local models: list what is present, or fetch everything ahead of time.
    Models {
        #[command(subcommand)]
        command: models::ModelsCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum CrewCommand {
    /// Validate a crew file offline; prints the first error with file, line and column.
    Check { file: PathBuf },
    /// Run a crew file in-process (no daemon) and print the result.
    Run {
        file: PathBuf,
        /// Inputs for `{{ inputs.NAME }}` placeholders, as NAME=VALUE (repeatable).
        #[arg(long = "input", value_parser = parse_input)]
        inputs: Vec<(String, String)>,
    },
    /// List the daemon's crews with their status.
    List,
    /// Show one crew.
    Get { name: String },
    /// Start a run on the daemon; prints the run id (with --wait, streams it to the end).
    Kickoff {
        name: String,
        #[arg(long = "input", value_parser = parse_input)]
        inputs: Vec<(String, String)>,
        /// Stream the run's events until it ends.
        #[arg(long)]
        wait: bool,
        /// A repeated key returns the run the first kickoff created.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Stream a run's events (from the beginning, or after --after SEQ) until it ends.
    Watch {
        run: String,
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// List runs, newest first.
    Runs {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        page_token: Option<String>,
    },
    /// Cancel a running run.
    Cancel { run: String },
}

/// Entry point used by the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let mut overrides = CliOverrides {
        data_dir: cli.global.data_dir.clone(),
        ..CliOverrides::default()
    };
    if let Command::Daemon { crews, listen } = &cli.command {
        overrides.crews_dir = crews.clone();
        overrides.server = listen.clone().map(|listen| ServerOverrides {
            listen: Some(listen),
        });
    }
    let config = Config::load(cli.global.config.as_deref(), &overrides)?;
    let out = Output {
        json: cli.global.json,
    };
    init_logging(&config.log, matches!(cli.command, Command::Daemon { .. }));
    match cli.command {
        Command::Config => {
            let value = config.redacted_json();
            if out.json {
                out.print_json(&value)?;
            } else {
                print!("{}", serde_saphyr::to_string(&value)?);
            }
            Ok(true)
        }
        Command::Daemon { .. } => crate::commands::daemon::run(config).await.map(|()| true),
        Command::Rag { server, command } => rag::run(command, server, config, &out).await,
        Command::Script { server, command } => {
            crate::commands::script::run(command, server, config, &out).await
        }
        Command::Db { command } => crate::commands::db::run(command, config, &out).await,
        Command::Models { command } => models::run(command, &config, &out).await.map(|()| true),
        Command::Crew { server, command } => {
            let api = RemoteCrews::new(Connection::new(server, &config));
            match command {
                CrewCommand::Check { file } => crew_cmd::check(file, &config, &out).await,
                CrewCommand::Run { file, inputs } => {
                    crew_cmd::run(file, inputs, config, &out).await
                }
                CrewCommand::List => crew_cmd::list(&api, &out).await.map(|()| true),
                CrewCommand::Get { name } => crew_cmd::get(&api, &name, &out).await.map(|()| true),
                CrewCommand::Kickoff {
                    name,
                    inputs,
                    wait,
                    idempotency_key,
                } => {
                    let params = KickoffParams {
                        crew: name,
                        inputs: inputs.into_iter().collect(),
                        idempotency_key,
                    };
                    crew_cmd::kickoff(&api, params, wait, &out).await
                }
                CrewCommand::Watch { run, after } => crew_cmd::watch(&api, &run, after, &out).await,
                CrewCommand::Runs { limit, page_token } => {
                    crew_cmd::runs(&api, limit as usize, page_token, &out)
                        .await
                        .map(|()| true)
                }
                CrewCommand::Cancel { run } => {
                    crew_cmd::cancel(&api, &run, &out).await.map(|()| true)
                }
            }
        }
    }
}

/// Structured logs on stderr. The daemon logs at the configured level; other commands only
/// warnings unless `RUST_LOG` says otherwise. ONNX Runtime's own log (hundreds of INFO lines
/// per model load) stays at WARN unless `RUST_LOG` asks for more.
fn init_logging(settings: &LogSettings, daemon: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if daemon {
        settings.level.as_str()
    } else {
        "warn"
    };
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(default_filter(default)))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if settings.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The filter used when `RUST_LOG` is unset: the level, with ONNX Runtime capped at WARN.
fn default_filter(level: &str) -> String {
    format!("{level},ort=warn")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnx_runtime_logs_stay_at_warn_by_default() {
        use tracing::Level;
        use tracing_subscriber::layer::SubscriberExt;
        let filter =
            tracing_subscriber::EnvFilter::try_new(default_filter("info")).expect("filter");
        let subscriber = tracing_subscriber::registry().with(filter);
        tracing::subscriber::with_default(subscriber, || {
            let ort_info = tracing::event_enabled!(target: "ort::logging", Level::INFO);
            let ort_warn = tracing::event_enabled!(target: "ort::logging", Level::WARN);
            let ours = tracing::event_enabled!(target: "orkeon_daemon::watch", Level::INFO);
            assert!(!ort_info, "ort INFO must be filtered out");
            assert!(ort_warn && ours);
        });
    }
}
