//! Command implementations behind the CLI.

pub mod crew;
pub mod daemon;
pub mod db;
pub mod eval;
pub mod models;
pub mod rag;
pub mod script;
