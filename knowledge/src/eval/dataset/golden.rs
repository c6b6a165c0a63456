//! The golden YAML dataset format (`examples/rag/eval/golden.yaml`):
//!
//! ```yaml
//! name: orkeon-golden            # optional; default: the file stem
//! description: optional
//! corpus: corpus                 # folder, relative to this file
//! patterns: ["**/*.md"]          # optional; default: every file kind a loader reads
//! collection: golden-eval        # optional; default: eval-<name>
//! chunking: { strategy: recursive, max_tokens: 256, overlap: 32 }   # optional
//! cases:
//!   - id: q-001
//!     question: "How many days do customers have to request a refund?"
//!     relevant: [policies/refunds.md]       # source refs (csv rows: data/stores.csv#row=3)
//!     expected_substrings: ["30 days"]      # optional
//!     reference_answer: "Within 30 days."   # optional
//!     tags: [lexical]                       # optional
//! ```
//!
//! Unknown keys are errors. Every case needs a unique id, a question and at least one relevant
//! ref; refs of one case must not overlap, and every ref must name a file that exists under the
//! corpus folder (refs are suffix-matched, see [`crate::eval::source_refs`]). Errors name the
//! file, the case and its line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{CorpusSource, EvalCase, EvalDataset, collection_name, is_valid_collection_name};
use crate::eval::EvalError;
use crate::eval::source_refs::SourceRef;
use crate::settings::ChunkingSettings;

/// File kinds ingested from a golden corpus when the dataset names no patterns.
pub const DEFAULT_EXTENSIONS: &[&str] =
    &["md", "markdown", "txt", "text", "csv", "html", "htm", "pdf"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GoldenFile {
    name: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    corpus: Spanned<String>,
    patterns: Option<Vec<String>>,
    collection: Option<Spanned<String>>,
    chunking: Option<ChunkingSettings>,
    cases: Vec<GoldenCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GoldenCase {
    id: Spanned<String>,
    question: String,
    relevant: Vec<String>,
    #[serde(default)]
    expected_substrings: Vec<String>,
    reference_answer: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
}

fn invalid(path: &Path, message: impl Into<String>) -> EvalError {
    EvalError::InvalidDataset {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Loads and validates a golden dataset file.
pub fn load(path: &Path) -> Result<EvalDataset, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file: GoldenFile = serde_saphyr::from_str(&text).map_err(|e| {
        invalid(
            path,
            format!(
                "not a valid golden dataset (see the format in examples/rag/eval/README.md): {e}"
            ),
        )
    })?;

    let name = match file.name.as_deref().map(str::trim) {
        Some("") => {
            return Err(invalid(
                path,
                "`name` is empty; name the dataset or remove the key",
            ));
        }
        Some(name) => name.to_string(),
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "golden".into()),
    };

    let base = path.parent().unwrap_or_else(|| Path::new("."));
    let corpus_dir = base.join(file.corpus.value.trim());
    if file.corpus.value.trim().is_empty() || !corpus_dir.is_dir() {
        return Err(invalid(
            path,
            format!(
                "`corpus` (line {}) names the folder {}, which does not exist; the path is relative to the dataset file",
                file.corpus.referenced.line(),
                corpus_dir.display()
            ),
        ));
    }

    let collection = match &file.collection {
        Some(spanned) => {
            let value = spanned.value.trim().to_string();
            if !is_valid_collection_name(&value) {
                return Err(invalid(
                    path,
                    format!(
                        "`collection` (line {}) is `{value}`: use 1–128 letters, digits, '-', '_' or '.'",
                        spanned.referenced.line()
                    ),
                ));
            }
            value
        }
        None => collection_name("eval-", &name),
    };

    let patterns = match file.patterns {
        Some(patterns) if patterns.iter().all(|p| !p.trim().is_empty()) && !patterns.is_empty() => {
            patterns
        }
        Some(_) => {
            return Err(invalid(
                path,
                "`patterns` is empty or holds an empty pattern; remove the key to ingest every supported file",
            ));
        }
        None => DEFAULT_EXTENSIONS
            .iter()
            .map(|e| format!("**/*.{e}"))
            .collect(),
    };

    if file.cases.is_empty() {
        return Err(invalid(path, "`cases` is empty; add at least one case"));
    }
    let corpus_files = list_files(&corpus_dir).map_err(|source| EvalError::Io {
        path: corpus_dir.clone(),
        source,
    })?;

    let mut seen_ids: BTreeMap<String, u64> = BTreeMap::new();
    let mut cases = Vec::with_capacity(file.cases.len());
    for case in file.cases {
        cases.push(validate_case(
            path,
            &corpus_dir,
            &corpus_files,
            &mut seen_ids,
            case,
        )?);
    }

    Ok(EvalDataset {
        name,
        corpus: CorpusSource::Directory {
            base_dir: corpus_dir,
            patterns,
        },
        cases,
        collection,
        chunking: file.chunking,
        warnings: Vec::new(),
    })
}

fn validate_case(
    path: &Path,
    corpus_dir: &Path,
    corpus_files: &[String],
    seen_ids: &mut BTreeMap<String, u64>,
    case: GoldenCase,
) -> Result<EvalCase, EvalError> {
    let line = case.id.referenced.line();
    let id = case.id.value.trim().to_string();
    if id.is_empty() {
        return Err(invalid(
            path,
            format!("the case at line {line} has an empty `id`"),
        ));
    }
    if let Some(first) = seen_ids.insert(id.clone(), line) {
        return Err(invalid(
            path,
            format!(
                "case id `{id}` (line {line}) is already used at line {first}; case ids must be unique"
            ),
        ));
    }
    let at = format!("case `{id}` (line {line})");
    if case.question.trim().is_empty() {
        return Err(invalid(path, format!("{at} has an empty `question`")));
    }
    if case.relevant.is_empty() {
        return Err(invalid(
            path,
            format!("{at} has no `relevant` refs; name the source(s) that answer it"),
        ));
    }
    let mut refs: Vec<SourceRef> = Vec::with_capacity(case.relevant.len());
    for text in &case.relevant {
        let parsed = SourceRef::parse(text)
            .map_err(|e| invalid(path, format!("{at}: relevant ref `{text}`: {e}")))?;
        if let Some(other) = refs.iter().find(|r| r.overlaps(&parsed)) {
            return Err(invalid(
                path,
                format!(
                    "{at}: relevant refs `{}` and `{}` overlap (one source could match both); keep one of them",
                    other.text, parsed.text
                ),
            ));
        }
        if !corpus_files.iter().any(|f| parsed.names_file(f)) {
            return Err(invalid(
                path,
                format!(
                    "{at}: relevant ref `{text}` names no file under the corpus folder {}; fix the ref or add the file",
                    corpus_dir.display()
                ),
            ));
        }
        refs.push(parsed);
    }
    if case.expected_substrings.iter().any(|s| s.trim().is_empty()) {
        return Err(invalid(
            path,
            format!("{at} has an empty expected substring"),
        ));
    }
    let tags: BTreeSet<String> = case
        .tags
        .iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    Ok(EvalCase {
        id,
        question: case.question.trim().to_string(),
        relevant: refs.into_iter().map(|r| (r.text, 1)).collect(),
        expected_substrings: case.expected_substrings,
        reference_answer: case.reference_answer.filter(|a| !a.trim().is_empty()),
        tags: tags.into_iter().collect(),
    })
}

/// Every file under `dir`, as `/`-separated paths relative to it.
fn list_files(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(true) {
        let entry = entry.map_err(std::io::Error::other)?;
        if entry.file_type().is_file() {
            let relative: PathBuf = entry
                .path()
                .strip_prefix(dir)
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| entry.path().to_path_buf());
            files.push(
                relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/"),
            );
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A dataset folder with `corpus/policies/refunds.md`, `corpus/data/stores.csv` and the
    /// given YAML as `golden.yaml`.
    fn fixture(yaml: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus");
        fs::create_dir_all(corpus.join("policies")).unwrap();
        fs::create_dir_all(corpus.join("data")).unwrap();
        fs::write(
            corpus.join("policies/refunds.md"),
            "# Refunds\n\nCustomers may request a refund within 30 days of delivery.\n",
        )
        .unwrap();
        fs::write(
            corpus.join("data/stores.csv"),
            "city,opens\nLyon,9am\nNantes,10am\n",
        )
        .unwrap();
        let path = dir.path().join("golden.yaml");
        fs::write(&path, yaml).unwrap();
        (dir, path)
    }

    const VALID: &str = r#"
name: mini
corpus: corpus
collection: mini-eval
chunking: { strategy: recursive, max_tokens: 128, overlap: 16 }
cases:
  - id: q-001
    question: "How many days do customers have to request a refund?"
    relevant: [policies/refunds.md]
    expected_substrings: ["30 days"]
    reference_answer: "Within 30 days of delivery."
    tags: [lexical]
  - id: q-002
    question: "When does the Nantes store open?"
    relevant: [data/stores.csv#row=2, refunds.md]
    tags: [csv, multi-doc]
"#;

    #[test]
    fn a_valid_file_loads_into_the_common_shape() {
        let (dir, path) = fixture(VALID);
        let dataset = load(&path).unwrap();
        assert_eq!(dataset.name, "mini");
        assert_eq!(dataset.collection, "mini-eval");
        assert_eq!(dataset.chunking.as_ref().unwrap().max_tokens, 128);
        match &dataset.corpus {
            CorpusSource::Directory { base_dir, patterns } => {
                assert_eq!(base_dir, &dir.path().join("corpus"));
                assert!(patterns.contains(&"**/*.md".to_string()));
                assert!(patterns.contains(&"**/*.pdf".to_string()));
            }
            other => panic!("unexpected corpus {other:?}"),
        }
        assert_eq!(dataset.cases.len(), 2);
        let first = &dataset.cases[0];
        assert_eq!(first.id, "q-001");
        assert_eq!(first.relevant.get("policies/refunds.md"), Some(&1));
        assert_eq!(first.expected_substrings, vec!["30 days"]);
        assert_eq!(
            first.reference_answer.as_deref(),
            Some("Within 30 days of delivery.")
        );
        let second = &dataset.cases[1];
        assert_eq!(second.relevant.len(), 2);
        assert_eq!(second.relevant.get("data/stores.csv#row=2"), Some(&1));
        assert_eq!(second.tags, vec!["csv", "multi-doc"]);
        assert!(second.expected_substrings.is_empty());
    }

    #[test]
    fn defaults_come_from_the_file_name() {
        let (_dir, path) = fixture(
            "corpus: corpus\ncases:\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n",
        );
        let dataset = load(&path).unwrap();
        assert_eq!(dataset.name, "golden");
        assert_eq!(dataset.collection, "eval-golden");
        assert!(dataset.chunking.is_none());
    }

    #[test]
    fn unknown_fields_are_errors_that_name_the_key() {
        let (_dir, path) = fixture(
            "corpus: corpus\ncases:\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n    expected: [x]\n",
        );
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("golden.yaml"), "{err}");
        assert!(err.contains("expected"), "{err}");
        assert!(err.contains("line 6") || err.contains("6:"), "{err}");

        let (_dir, path) = fixture("corpus: corpus\nquestions: []\ncases: []\n");
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("questions"), "{err}");
    }

    #[test]
    fn a_missing_corpus_folder_is_named() {
        let (_dir, path) = fixture(
            "corpus: nowhere\ncases:\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n",
        );
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("nowhere"), "{err}");
        assert!(err.contains("does not exist"), "{err}");
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn a_ref_naming_no_corpus_file_is_an_error_with_case_and_line() {
        let (_dir, path) = fixture(
            "corpus: corpus\ncases:\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n  - id: b\n    question: q?\n    relevant: [policies/refundz.md]\n",
        );
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("case `b` (line 6)"), "{err}");
        assert!(err.contains("policies/refundz.md"), "{err}");
    }

    #[test]
    fn duplicate_ids_overlapping_refs_and_empty_fields_are_refused() {
        let (_dir, path) = fixture(
            "corpus: corpus\ncases:\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n",
        );
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("already used at line 3"), "{err}");

        let (_dir, path) = fixture(
            "corpus: corpus\ncases:\n  - id: a\n    question: q?\n    relevant: [stores.csv, data/stores.csv#row=1]\n",
        );
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("overlap"), "{err}");

        let (_dir, path) =
            fixture("corpus: corpus\ncases:\n  - id: a\n    question: q?\n    relevant: []\n");
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("no `relevant` refs")
        );

        let (_dir, path) = fixture(
            "corpus: corpus\ncases:\n  - id: a\n    question: ' '\n    relevant: [refunds.md]\n",
        );
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("empty `question`")
        );

        let (_dir, path) = fixture("corpus: corpus\ncases: []\n");
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("`cases` is empty")
        );

        let (_dir, path) = fixture(
            "corpus: corpus\ncollection: 'bad name'\ncases:\n  - id: a\n    question: q?\n    relevant: [refunds.md]\n",
        );
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("`collection` (line 2)")
        );
    }
}
