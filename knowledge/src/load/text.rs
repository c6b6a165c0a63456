//! Plain-text and Markdown loader: one document holding the whole file, titled by its first
//! `# ` heading (outside fenced code blocks) when it has one.

use super::{LoadError, SourceKind, decode_utf8};
use crate::types::{Document, Metadata};

/// Parses UTF-8 text or Markdown into one document (`loader` = `text` / `markdown`).
pub fn parse(source_id: &str, kind: SourceKind, bytes: &[u8]) -> Result<Document, LoadError> {
    let text = decode_utf8(source_id, kind, bytes)?;
    let mut metadata = Metadata::new();
    if let Some(title) = first_heading(text) {
        metadata.insert("title".into(), title);
    }
    Ok(Document {
        source_id: source_id.to_owned(),
        text: text.to_owned(),
        loader: kind.as_str().to_owned(),
        metadata,
    })
}

/// The text of the first level-1 ATX heading (`# Title`, up to three spaces of indentation,
/// closing `#`s dropped), ignoring lines inside ``` / ~~~ fences.
pub fn first_heading(text: &str) -> Option<String> {
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if indent > 3 {
            continue;
        }
        let trimmed = line.trim_start_matches(' ');
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") {
            fence = Some("```");
            continue;
        }
        if trimmed.starts_with("~~~") {
            fence = Some("~~~");
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("# ") {
            let rest = rest.trim();
            let without_closing = rest.trim_end_matches('#');
            let title = if without_closing.is_empty() || without_closing.ends_with(' ') {
                without_closing.trim()
            } else {
                rest // `# Learning C#`: a `#` glued to a word is text, not a closing sequence
            };
            if !title.is_empty() {
                return Some(title.to_owned());
            }
        }
    }
    None
}
