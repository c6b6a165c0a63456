//! Orkeon's RAG subsystem.
//!
//! Ingestion: [`load`] → [`validate`] → [`chunk`] → [`embed`] → [`store`], orchestrated
//! incrementally by [`ingest`]. Query: the staged pipeline in [`query`] (transform → retrieve →
//! fuse → rerank → assemble → generate → groundedness).

pub mod chunk;
pub mod embed;
pub mod eval;
pub mod ingest;
pub mod load;
pub mod query;
pub mod settings;
pub mod store;
pub mod types;
pub mod validate;
