//! Orkeon's composition root: configuration, actors, watchers, gRPC server and the CLI.

pub mod cli;
pub mod config;
pub mod proto;
pub mod runs;
