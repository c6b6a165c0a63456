//! Integrity validation: is this source usable content at all? Before parsing, the raw bytes
//! must be non-empty, under the size limit and — for text kinds — text (no NUL bytes, valid
//! UTF-8, few control characters); a PDF must start with `%PDF-`. After parsing, a document
//! must have some text that is not mostly undecodable (U+FFFD) characters.

use super::Verdict;
use crate::load::RawSource;
use crate::types::Document;

/// Above this share of control characters (other than tab, line feed, carriage return and
/// form feed), text is considered binary.
pub const MAX_CONTROL_SHARE: f64 = 0.02;
/// Above this share of U+FFFD replacement characters, parsed text is considered undecodable.
pub const MAX_REPLACEMENT_SHARE: f64 = 0.3;

/// Checks raw bytes and parsed documents; `max_bytes` is `rag.ingestion.max_document_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntegrityValidator {
    pub max_bytes: usize,
}

impl IntegrityValidator {
    /// Before parsing: empty, over the size limit, or binary → Rejected.
    pub fn check_raw(&self, source_id: &str, raw: &RawSource) -> Verdict {
        let reject = |reason: String| {
            tracing::debug!(source_id, %reason, "integrity: rejected");
            Verdict::Rejected {
                reasons: vec![reason],
            }
        };
        let bytes = raw.bytes.as_slice();
        if bytes.is_empty() {
            return reject("empty: the source has 0 bytes".into());
        }
        if bytes.len() > self.max_bytes {
            return reject(format!(
                "too large: {} bytes, over the limit of {} (rag.ingestion.max_document_bytes)",
                bytes.len(),
                self.max_bytes
            ));
        }
        if !raw.kind.is_text() {
            if !bytes.starts_with(b"%PDF-") {
                return reject(
                    "not a PDF: the file does not start with `%PDF-` (wrong extension or binary data)"
                        .into(),
                );
            }
            return Verdict::Clean;
        }
        if let Some(offset) = bytes.iter().position(|&b| b == 0) {
            return reject(format!(
                "binary data: NUL byte at offset {offset} in a {} source",
                raw.kind
            ));
        }
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                return reject(format!(
                    "not text: invalid UTF-8 at byte {} in a {} source (binary data, or another encoding: convert it to UTF-8)",
                    e.valid_up_to(),
                    raw.kind
                ));
            }
        };
        let (total, control) = text.chars().fold((0usize, 0usize), |(total, control), c| {
            let is_binary_control = c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0C');
            (total + 1, control + usize::from(is_binary_control))
        });
        if total > 0 && control as f64 / total as f64 > MAX_CONTROL_SHARE {
            return reject(format!(
                "binary data: {control} of {total} characters are control characters"
            ));
        }
        Verdict::Clean
    }

    /// After parsing: empty or whitespace-only text, or mostly undecodable characters → Rejected.
    pub fn check_document(&self, doc: &Document) -> Verdict {
        if doc.text.trim().is_empty() {
            return Verdict::Rejected {
                reasons: vec![format!(
                    "empty: the {} loader found no text in `{}`",
                    doc.loader, doc.source_id
                )],
            };
        }
        let (total, replacement) = doc
            .text
            .chars()
            .filter(|c| !c.is_whitespace())
            .fold((0usize, 0usize), |(total, bad), c| {
                (total + 1, bad + usize::from(c == '\u{FFFD}'))
            });
        if total > 0 && replacement as f64 / total as f64 > MAX_REPLACEMENT_SHARE {
            return Verdict::Rejected {
                reasons: vec![format!(
                    "undecodable: {replacement} of {total} characters of `{}` are U+FFFD replacement characters",
                    doc.source_id
                )],
            };
        }
        Verdict::Clean
    }
}
