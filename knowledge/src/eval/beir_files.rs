//! BEIR documents as files: each corpus entry is written as `<file-id>.txt` into a cache
//! folder, so that BEIR corpora go through the real ingestion pipeline (validation, chunking,
//! embedding, incremental manifest) like any other source.
//!
//! - The file id is the `_id` itself when it is a safe file name (ASCII letters, digits, `.`,
//!   `_`, `-`, not starting with `.`, at most 100 bytes); otherwise a sanitised prefix plus 12
//!   hex digits of the `_id`'s sha256, so distinct ids never share a file. The mapping back to
//!   `_id` is kept in memory ([`BeirFiles::document_id`]).
//! - Files are rewritten only when their content changed, and `.txt` files of documents no
//!   longer in the corpus are deleted, so the next ingestion purges them and stays incremental.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::EvalError;
use super::dataset::BeirDocument;

/// Longest file id used as is.
const MAX_PLAIN_ID: usize = 100;

/// The BEIR corpus written to disk.
#[derive(Debug, Clone)]
pub struct BeirFiles {
    /// Folder holding the `.txt` files (the ingestion base directory).
    pub dir: PathBuf,
    /// Ingestion patterns for the folder.
    pub patterns: Vec<String>,
    /// Source id (`<file-id>.txt`) → `_id`.
    by_source_id: HashMap<String, String>,
    /// Files written (new or changed) by [`BeirFiles::write`].
    pub written: usize,
    /// Stale files deleted by [`BeirFiles::write`].
    pub deleted: usize,
}

/// The file id of a BEIR `_id` (see the module documentation).
pub fn file_id(id: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !id.is_empty() && id.len() <= MAX_PLAIN_ID && !id.starts_with('.') && id.chars().all(safe) {
        return id.to_string();
    }
    let prefix: String = id
        .chars()
        .map(|c| if safe(c) { c } else { '_' })
        .take(60)
        .collect();
    let prefix = prefix.trim_start_matches('.');
    let hash = hex::encode(Sha256::digest(id.as_bytes()));
    format!("{prefix}-{}", &hash[..12])
}

fn io(path: &Path, source: std::io::Error) -> EvalError {
    EvalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl BeirFiles {
    /// Writes `documents` into `dir` (created if needed) and removes stale `.txt` files.
    pub fn write(dir: &Path, documents: &[BeirDocument]) -> Result<Self, EvalError> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut by_source_id: HashMap<String, String> = HashMap::with_capacity(documents.len());
        let mut written = 0;
        for document in documents {
            let source_id = format!("{}.txt", file_id(&document.id));
            if let Some(other) = by_source_id.insert(source_id.clone(), document.id.clone()) {
                return Err(EvalError::InvalidDataset {
                    path: dir.to_path_buf(),
                    message: format!(
                        "BEIR ids `{other}` and `{}` map to the same file {source_id}; rename one of them",
                        document.id
                    ),
                });
            }
            let path = dir.join(&source_id);
            let content = document.content();
            let unchanged =
                std::fs::read(&path).is_ok_and(|existing| existing == content.as_bytes());
            if !unchanged {
                let temporary = dir.join(format!(".{source_id}.tmp"));
                std::fs::write(&temporary, content.as_bytes()).map_err(|e| io(&temporary, e))?;
                std::fs::rename(&temporary, &path).map_err(|e| io(&path, e))?;
                written += 1;
            }
        }
        let wanted: HashSet<&str> = by_source_id.keys().map(String::as_str).collect();
        let mut deleted = 0;
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let entry = entry.map_err(|e| io(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".txt") && !wanted.contains(name.as_str()) && entry.path().is_file() {
                std::fs::remove_file(entry.path()).map_err(|e| io(&entry.path(), e))?;
                deleted += 1;
            }
        }
        tracing::debug!(dir = %dir.display(), documents = documents.len(), written, deleted, "BEIR corpus files written");
        Ok(Self {
            dir: dir.to_path_buf(),
            patterns: vec!["*.txt".to_string()],
            by_source_id,
            written,
            deleted,
        })
    }

    /// The BEIR `_id` of an ingested source id (`<file-id>.txt`, possibly under a folder).
    pub fn document_id(&self, source_id: &str) -> Option<&str> {
        let name = source_id.rsplit('/').next().unwrap_or(source_id);
        self.by_source_id.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, title: &str, text: &str) -> BeirDocument {
        BeirDocument {
            id: id.into(),
            title: title.into(),
            text: text.into(),
        }
    }

    #[test]
    fn safe_ids_are_kept_and_others_are_sanitised_and_hashed() {
        assert_eq!(file_id("d01"), "d01");
        assert_eq!(file_id("MED-10_v2.1"), "MED-10_v2.1");
        let slashed = file_id("a/b");
        assert!(
            slashed.starts_with("a_b-") && slashed.len() == 4 + 12,
            "{slashed}"
        );
        assert_ne!(file_id("a/b"), file_id("a:b"));
        assert!(!file_id(".hidden").starts_with('.'));
        assert!(!file_id("../../etc/passwd").contains('/'));
        assert!(file_id(&"x".repeat(500)).len() <= 60 + 13);
        assert_ne!(file_id("é"), file_id("è"));
    }

    #[test]
    fn documents_are_written_once_and_stale_files_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("beir-mini");
        let docs = vec![
            doc("d1", "Oxygen", "Salmon need 6 mg/L."),
            doc("q/2", "", "No title."),
        ];
        let files = BeirFiles::write(&root, &docs).unwrap();
        assert_eq!((files.written, files.deleted), (2, 0));
        assert_eq!(
            std::fs::read_to_string(root.join("d1.txt")).unwrap(),
            "Oxygen\n\nSalmon need 6 mg/L."
        );
        let hashed = format!("{}.txt", file_id("q/2"));
        assert_eq!(
            std::fs::read_to_string(root.join(&hashed)).unwrap(),
            "No title."
        );
        assert_eq!(files.document_id("d1.txt"), Some("d1"));
        assert_eq!(files.document_id(&hashed), Some("q/2"));
        assert_eq!(files.document_id(&format!("cache/{hashed}")), Some("q/2"));
        assert_eq!(files.document_id("other.txt"), None);

        // Unchanged documents are not rewritten; a changed one is; a removed one is deleted.
        let docs = vec![
            doc("d1", "Oxygen", "Salmon need 6 mg/L."),
            doc("d3", "", "New."),
        ];
        let files = BeirFiles::write(&root, &docs).unwrap();
        assert_eq!((files.written, files.deleted), (1, 1));
        assert!(!root.join(&hashed).exists());
        let names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
