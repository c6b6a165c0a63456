//! The `orkeon` command line: argument parsing, configuration loading, and dispatch to the
//! command implementations in [`crate::commands`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{CliOverrides, Config};

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
}

/// Entry point used by the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let overrides = CliOverrides {
        data_dir: cli.global.data_dir.clone(),
        ..CliOverrides::default()
    };
    let config = Config::load(cli.global.config.as_deref(), &overrides)?;
    match cli.command {
        Command::Config => {
            let value = config.redacted_json();
            if cli.global.json {
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print!("{}", serde_saphyr::to_string(&value)?);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
