//! Validation of every document before chunking: prompt-injection and integrity checks, and the
//! quarantine for rejected content.
//!
//! - [`IntegrityValidator`] (module [`integrity`]): raw bytes before parsing (empty, too large,
//!   binary) and parsed documents (no text).
//! - [`InjectionValidator`] (module [`injection`]): instruction overrides, fake role markers,
//!   hidden text and exfiltration links, graded Clean / Suspicious / Rejected with reasons.
//! - [`QuarantineStore`] (module [`quarantine`]): the port keeping rejected content for
//!   inspection, never searchable (implemented by the stores in `crate::store`).

pub mod injection;
pub mod integrity;
pub mod quarantine;

use serde::{Deserialize, Serialize};

pub use injection::InjectionValidator;
pub use integrity::IntegrityValidator;
pub use quarantine::{QuarantineEntry, QuarantineStore};

/// The outcome of a validator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    Clean,
    /// Ingested and flagged (or dropped, per `rag.ingestion.suspicious_action`).
    Suspicious {
        reasons: Vec<String>,
    },
    /// Never ingested: quarantined.
    Rejected {
        reasons: Vec<String>,
    },
}

impl Verdict {
    /// The reasons of a non-clean verdict (empty when clean).
    pub fn reasons(&self) -> &[String] {
        match self {
            Verdict::Clean => &[],
            Verdict::Suspicious { reasons } | Verdict::Rejected { reasons } => reasons,
        }
    }

    pub fn is_clean(&self) -> bool {
        matches!(self, Verdict::Clean)
    }

    pub fn is_rejected(&self) -> bool {
        matches!(self, Verdict::Rejected { .. })
    }

    /// `clean`, `suspicious` or `rejected`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Suspicious { .. } => "suspicious",
            Verdict::Rejected { .. } => "rejected",
        }
    }

    /// The more severe of two verdicts; reasons of equal severity are concatenated.
    pub fn worst(self, other: Verdict) -> Verdict {
        fn rank(v: &Verdict) -> u8 {
            match v {
                Verdict::Clean => 0,
                Verdict::Suspicious { .. } => 1,
                Verdict::Rejected { .. } => 2,
            }
        }
        match (self, other) {
            (Verdict::Suspicious { mut reasons }, Verdict::Suspicious { reasons: more }) => {
                reasons.extend(more);
                Verdict::Suspicious { reasons }
            }
            (Verdict::Rejected { mut reasons }, Verdict::Rejected { reasons: more }) => {
                reasons.extend(more);
                Verdict::Rejected { reasons }
            }
            (a, b) => {
                if rank(&b) > rank(&a) {
                    b
                } else {
                    a
                }
            }
        }
    }
}

/// Errors of the quarantine store.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error(
        "quarantine store: {action} failed: {source}; check the data directory (disk full, permissions, or another process holding it)"
    )]
    Store {
        action: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(
        "quarantine store: the entry `{key}` is corrupt ({reason}); remove it with `remove` or delete the `quarantine` tree"
    )]
    Corrupt { key: String, reason: String },
}

#[cfg(test)]
mod tests;
