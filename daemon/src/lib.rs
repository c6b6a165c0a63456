//! Orkeon's composition root: configuration, actors, watchers, gRPC server and the CLI.
//!
//! - [`config`]: layered configuration (figment).
//! - [`storage`]: the storage provider (`rag.store.provider`: embedded or PostgreSQL).
//! - [`knowledge_host`]: the knowledge components of one process; [`chat_models`]: the LLM
//!   providers by name.
//! - [`service`]: the application layer — every operation once, under every surface.
//! - [`runs`], [`registry`], [`engine`], [`actors`], [`watch`]: crews, runs and actors.
//! - [`grpc`], [`proto`], [`client`]: the control plane and its CLI client.
//! - [`cli`], [`commands`], [`output`]: the command line.

pub mod actors;
pub mod chat_models;
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod crew_checks;
pub mod engine;
pub mod grpc;
pub mod knowledge_host;
pub mod output;
pub mod proto;
pub mod registry;
pub mod runs;
pub mod script;
pub mod service;
pub mod services;
pub mod storage;
pub mod watch;
