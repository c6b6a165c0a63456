//! The gRPC control plane (tonic): `CrewService` and `KnowledgeService` as thin adapters over
//! the application layer ([`crate::service`]), plus grpc.health.v1 and server reflection.
//!
//! - [`error`]: `ServiceError` ⇄ `tonic::Status` — the only place errors become status codes.
//! - [`convert`]: domain types ⇄ protobuf messages (both directions: server and CLI client).
//! - [`crews`], [`knowledge`]: the two services.
//! - [`auth`]: the bearer-token check.
//! - [`server`]: the listen policy and the server wiring.

pub mod auth;
pub mod convert;
pub mod crews;
pub mod error;
pub mod knowledge;
pub mod server;
pub mod size_limit;

pub use server::{listen_settings, serve};
