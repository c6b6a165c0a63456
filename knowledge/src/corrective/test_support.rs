//! Test support shared by the corrective, routing and web tests: the query module's scripted
//! chat double (the same source file, included here because `query::scripted_chat` is private
//! to `query`) and small chunk constructors.

// Included by path: the owning module keeps it private (see the module docs).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../query/scripted_chat.rs"]
mod scripted_chat;

pub(crate) use scripted_chat::ScriptedChat;

use crate::types::{ScoreOrigin, ScoredChunk, StoredChunk};

/// A chunk `id` of source `kb/<id>.md` holding `text`.
pub(crate) fn chunk_with_text(id: &str, text: &str) -> ScoredChunk {
    ScoredChunk {
        chunk: StoredChunk {
            id: id.to_string(),
            source_id: format!("kb/{id}.md"),
            ordinal: 0,
            text: text.to_string(),
            start: 0,
            end: text.len(),
            metadata: Default::default(),
            content_hash: String::new(),
            vector: Vec::new(),
        },
        score: 1.0,
        origin: ScoreOrigin::Vector,
    }
}

// Included by path: the owning module keeps it private (see the module docs).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../query/scripted_openai.rs"]
mod scripted_openai;

pub(crate) use scripted_openai::{OpenAiCompatibleChat, SCRIPTED_MODEL, ScriptedOpenAiServer};
