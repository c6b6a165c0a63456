//! Orkeon's RAG subsystem.
//!
//! Ingestion: [`load`] → [`validate`] → [`chunk`] → [`embed`] → [`store`], orchestrated
//! incrementally by [`ingest`]. Query: the staged pipeline in [`query`] (transform → retrieve →
//! fuse → rerank → assemble → generate → groundedness); the corrective graph in [`corrective`]
//! (with its opt-in [`web`] fallback) and adaptive routing in [`routing`]. Shared by both halves:
//! [`settings`] (configuration), [`fusion`] (Reciprocal Rank Fusion, for hybrid search and
//! `rag-fusion`) and [`registry`] (named components: rerankers, transformers, profiles).

pub mod chunk;
pub mod corrective;
pub mod crew_groundedness;
pub mod crew_knowledge;
pub mod embed;
pub mod eval;
pub mod fusion;
pub mod ingest;
pub mod load;
pub mod query;
pub mod registry;
pub mod routing;
pub mod settings;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod types;
pub mod validate;
pub mod web;
