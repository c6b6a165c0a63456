//! The application layer: every operation Orkeon offers, written once, with one request type
//! and one error enum ([`ServiceError`]).
//!
//! The surfaces are thin adapters over it:
//!
//! ```text
//! CLI (local)  ──► KnowledgeApp / CrewApp ──► knowledge, crews engine, run store
//! gRPC server  ──► KnowledgeApp / CrewApp
//! CLI --server ──► client::RemoteKnowledge / RemoteCrews ──gRPC──► the daemon's gRPC server
//! ```
//!
//! [`KnowledgeApi`] and [`CrewApi`] are the contracts; the local and remote implementations
//! return the same types, so a command prints the same thing whichever way it ran.

mod crews;
mod error;
mod eval_tool;
mod knowledge;

pub use crews::{
    CrewApi, CrewApp, CrewSummary, DEFAULT_RUNS_PAGE, EventStream, Kickoff, KickoffParams,
    MAX_RUNS_PAGE, RunPage,
};
pub use error::ServiceError;
pub use eval_tool::CrewEvalTool;
pub use knowledge::{
    ChunkingOverrides, EvalOutcome, EvalParams, EvalProgressFn, GateVerdict, IngestParams,
    IngestProgressFn, KnowledgeApi, KnowledgeApp, QueryParams,
};
