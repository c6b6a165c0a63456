//! Test support shared by the corrective tests: small chunk constructors over knowledge types.
//! The chat doubles and loopback servers live in the `orkeon-testkit` dev-dependency.

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
