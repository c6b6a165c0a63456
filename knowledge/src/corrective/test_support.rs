//! Test support shared by the corrective, routing and web tests: the query module's scripted
//! chat double (the same source file, included here because `query::scripted_chat` is private
//! to `query`) and small chunk constructors.

#[allow(dead_code)]
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
