//! Evaluation datasets: the golden YAML format and the BEIR folder format, loaded into one
//! in-memory shape ([`EvalDataset`]).
//!
//! - [`golden`]: a YAML file naming a corpus folder and cases whose relevant documents are
//!   source refs suffix-matched against ingested ids (see [`super::source_refs`]).
//! - [`beir`]: a folder with `corpus.jsonl`, `queries.jsonl` and `qrels/<split>.tsv`; each
//!   corpus entry is one document whose id is its `_id`.
//!
//! [`load_dataset`] picks the format from the path: a `.yaml`/`.yml` file is golden, a folder
//! holding `corpus.jsonl` is BEIR.

pub mod beir;
pub mod golden;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::EvalError;
use crate::settings::ChunkingSettings;

/// A dataset ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalDataset {
    /// Dataset name (golden: its `name`, else the file stem; BEIR: the folder name).
    pub name: String,
    pub corpus: CorpusSource,
    pub cases: Vec<EvalCase>,
    /// Collection the corpus is ingested into (golden: `collection`, else derived from the
    /// name; BEIR: `beir-<name>`).
    pub collection: String,
    /// Chunker settings for the corpus (`None`: the configured default).
    pub chunking: Option<ChunkingSettings>,
    /// Non-fatal findings of the loader (skipped queries, qrels naming unknown documents, …).
    pub warnings: Vec<String>,
}

/// Where a dataset's documents come from.
#[derive(Debug, Clone, PartialEq)]
pub enum CorpusSource {
    /// Files under `base_dir` matching `patterns` (ingested as they are; ids are paths
    /// relative to `base_dir`). Relevant refs are suffix-matched against those ids.
    Directory {
        base_dir: PathBuf,
        patterns: Vec<String>,
    },
    /// BEIR documents (written as text files into a cache folder before ingestion). Relevant
    /// keys are `_id`s.
    Beir { documents: Vec<BeirDocument> },
}

/// One BEIR corpus entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeirDocument {
    pub id: String,
    pub title: String,
    pub text: String,
}

impl BeirDocument {
    /// The document as ingested: the title, a blank line, then the text (the text alone when
    /// there is no title).
    pub fn content(&self) -> String {
        let title = self.title.trim();
        if title.is_empty() {
            self.text.clone()
        } else {
            format!("{title}\n\n{}", self.text)
        }
    }
}

/// One question and what a good retrieval (and answer) holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalCase {
    pub id: String,
    pub question: String,
    /// Relevant document key → grade. Golden: each source ref as written, grade 1. BEIR: corpus
    /// `_id` → qrels score (only positive scores are kept).
    pub relevant: BTreeMap<String, u32>,
    /// Strings a correct answer contains (golden only).
    pub expected_substrings: Vec<String>,
    pub reference_answer: Option<String>,
    pub tags: Vec<String>,
}

/// Loads a dataset: a `.yaml`/`.yml` file is a golden dataset, a folder holding `corpus.jsonl`
/// is a BEIR dataset whose `qrels/<split>.tsv` is used (`split` is ignored for golden files).
pub fn load_dataset(path: &Path, split: &str) -> Result<EvalDataset, EvalError> {
    if path.is_dir() {
        if path.join(beir::CORPUS_FILE).is_file() {
            return beir::load(path, split);
        }
        return Err(EvalError::UnknownFormat {
            path: path.to_path_buf(),
            reason: format!(
                "the folder holds no {}; a BEIR dataset needs corpus.jsonl, queries.jsonl and qrels/<split>.tsv",
                beir::CORPUS_FILE
            ),
        });
    }
    let extension = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if extension == "yaml" || extension == "yml" {
        return golden::load(path);
    }
    if !path.exists() {
        return Err(EvalError::UnknownFormat {
            path: path.to_path_buf(),
            reason: "it does not exist; pass a golden .yaml file or a BEIR folder".into(),
        });
    }
    Err(EvalError::UnknownFormat {
        path: path.to_path_buf(),
        reason:
            "expected a golden dataset (.yaml or .yml file) or a BEIR folder holding corpus.jsonl"
                .into(),
    })
}

/// A collection name derived from `name`: letters, digits, `-`, `_` and `.` kept, anything
/// else turned into `-`, at most 128 characters.
pub fn collection_name(prefix: &str, name: &str) -> String {
    let mut out: String = format!("{prefix}{name}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(128);
    out
}

/// Whether `name` is a valid collection name (letters, digits, `-`, `_`, `.`; 1–128).
pub fn is_valid_collection_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beir_document_is_its_title_a_blank_line_and_its_text() {
        let doc = BeirDocument {
            id: "d1".into(),
            title: "Refunds".into(),
            text: "Within 30 days.".into(),
        };
        assert_eq!(doc.content(), "Refunds\n\nWithin 30 days.");
        let untitled = BeirDocument {
            title: "  ".into(),
            ..doc
        };
        assert_eq!(untitled.content(), "Within 30 days.");
    }

    #[test]
    fn collection_names_are_sanitised() {
        assert_eq!(
            collection_name("beir-", "SciFact mini"),
            "beir-scifact-mini"
        );
        assert!(is_valid_collection_name(&collection_name("eval-", "a/b:c")));
        assert_eq!(collection_name("", &"x".repeat(300)).len(), 128);
        assert!(!is_valid_collection_name("has space"));
        assert!(!is_valid_collection_name(""));
    }

    #[test]
    fn an_unknown_path_is_refused_with_what_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_dataset(dir.path(), "test").unwrap_err().to_string();
        assert!(err.contains("corpus.jsonl"), "{err}");
        let txt = dir.path().join("cases.txt");
        std::fs::write(&txt, "x").unwrap();
        let err = load_dataset(&txt, "test").unwrap_err().to_string();
        assert!(err.contains(".yaml"), "{err}");
        let err = load_dataset(&dir.path().join("nope.json"), "test")
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
