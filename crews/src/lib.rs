//! Orkeon's domain kernel.
//!
//! Owns the crew/agent/task model and its YAML schema, the generic bounded [`graph::StateGraph`]
//! engine, the process engines, and the ports other crates implement ([`ports`]). Also the
//! policies the crates above share so that they agree: [`retry`] (retries of remote calls) and
//! [`text`] (what a content word is). Depends on no other workspace crate.

pub mod citations;
pub mod graph;
pub mod ports;
pub mod retry;
pub mod run;
pub mod spec;
pub mod text;
