//! Orkeon's test doubles, for `[dev-dependencies]` only (`publish = false`; `cargo tree -e normal
//! -p orkeon` must never list this crate): nothing here ships in the release binary.
//!
//! - [`http`]: [`LoopbackServer`], the one loopback HTTP/1.1 server core (records requests,
//!   answers per handler, bounded head and body sizes, stops on drop), with [`Recorded`] and
//!   [`Reply`]; every HTTP double below is a handler on it.
//! - [`openai`]: [`ScriptedLlmServer`], a scripted OpenAI-compatible chat-completions server
//!   (rules, tool calls, streaming, error statuses, `Retry-After`, malformed and truncated
//!   answers, slow replies), and [`OpenAiCompatibleChat`], a minimal
//!   `ChatModel` client of it.
//! - [`searxng`]: [`FakeWeb`], a fake SearxNG with its pages and a private service for SSRF
//!   tests.
//! - [`chat`]: [`ScriptedChat`], an in-process `ChatModel` double answering from a list.
//! - [`pdf`]: PDF fixtures written byte by byte (a minimal writer, a zlib bomb).
//!
//! This crate may depend on `orkeon-crews` and external crates only: agents, knowledge and
//! daemon dev-depend on it, and a dependency back on one of them would give that crate's unit
//! tests two incompatible copies of its types.

pub mod chat;
pub mod http;
pub mod openai;
pub mod pdf;
pub mod searxng;

pub use chat::{SCRIPTED_CHAT_MODEL, ScriptedChat};
pub use http::{LoopbackServer, Recorded, Reply};
pub use openai::{
    OpenAiCompatibleChat, SCRIPTED_MODEL, SCRIPTED_OPENAI_LABEL, ScriptReply, ScriptRule,
    ScriptedLlmServer,
};
pub use searxng::FakeWeb;
