//! Orkeon's domain kernel.
//!
//! Owns the crew/agent/task model and its YAML schema, the generic bounded [`graph::StateGraph`]
//! engine, the process engines, and the ports other crates implement ([`ports`]). Depends on no
//! other workspace crate.

pub mod citations;
pub mod graph;
pub mod ports;
pub mod run;
pub mod spec;
