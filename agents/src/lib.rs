//! Orkeon agents: the task runner, LLM clients and prompts.
//!
//! - [`llm`]: the `llm:` settings, the chat-model factory, the OpenAI-compatible client and the
//!   offline extractive model (implementations of `crews::ports::ChatModel`).
//! - [`prompts`]: minijinja prompt templates (built in from `config/prompts/`, overridable).
//! - [`tools`]: the `rag_search`, `rag_ingest` and `rag_eval` tools offered to LLMs.
//! - [`citations`]: reading `[n]` markers out of model output.
//! - [`runner`]: [`runner::AgentTaskRunner`], the `crews::ports::TaskRunner` implementation.

pub mod citations;
pub mod llm;
pub mod prompts;
pub mod runner;
pub mod tools;
