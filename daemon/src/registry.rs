//! The crew registry: crew name → the current valid spec and status, kept up to date by the
//! crews watcher. A file that becomes invalid keeps its crew's last good spec running and makes
//! the error visible; a run in flight keeps the `Arc<CrewSpec>` it started with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use orkeon_crews::spec::{CrewSpec, SpecError};
use serde::Serialize;

/// One crew as the registry knows it.
#[derive(Debug, Clone, Serialize)]
pub struct CrewEntry {
    pub name: String,
    pub file: PathBuf,
    /// The last valid spec (None: the file has never been valid).
    #[serde(skip)]
    pub spec: Option<Arc<CrewSpec>>,
    /// The current file's error, if it is invalid now.
    pub error: Option<String>,
    pub updated_at: String,
}

impl CrewEntry {
    pub fn status(&self) -> &'static str {
        if self.error.is_some() {
            "invalid"
        } else {
            "valid"
        }
    }
}

/// Thread-safe registry (reads are frequent, writes happen on file changes).
#[derive(Default)]
pub struct CrewRegistry {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    by_name: BTreeMap<String, CrewEntry>,
    /// File → the crew name it defines (the last good name, or the file stem if never valid).
    by_file: BTreeMap<PathBuf, String>,
}

/// What an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Added(String),
    Updated(String),
    /// Invalid file: the crew keeps its last good version (if any).
    Invalid {
        name: String,
        error: String,
    },
    Removed(String),
    Unchanged,
}

impl CrewRegistry {
    /// Applies the result of parsing `file`.
    pub fn apply(&self, file: &Path, parsed: Result<CrewSpec, SpecError>) -> Change {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let now = crate::runs::now();
        match parsed {
            Ok(spec) => {
                let name = spec.name.clone();
                // The file may have been renamed internally: drop its old name.
                if let Some(old) = inner.by_file.get(file).cloned()
                    && old != name
                {
                    inner.by_name.remove(&old);
                }
                inner.by_file.insert(file.to_path_buf(), name.clone());
                let existed = inner.by_name.contains_key(&name);
                inner.by_name.insert(
                    name.clone(),
                    CrewEntry {
                        name: name.clone(),
                        file: file.to_path_buf(),
                        spec: Some(Arc::new(spec)),
                        error: None,
                        updated_at: now,
                    },
                );
                if existed {
                    Change::Updated(name)
                } else {
                    Change::Added(name)
                }
            }
            Err(error) => {
                let message = error.to_string();
                let name = inner.by_file.get(file).cloned().unwrap_or_else(|| {
                    file.file_stem()
                        .map(|s| s.to_string_lossy().to_string())
                        .unwrap_or_else(|| file.display().to_string())
                });
                inner.by_file.insert(file.to_path_buf(), name.clone());
                let entry = inner
                    .by_name
                    .entry(name.clone())
                    .or_insert_with(|| CrewEntry {
                        name: name.clone(),
                        file: file.to_path_buf(),
                        spec: None,
                        error: None,
                        updated_at: now.clone(),
                    });
                if entry.error.as_deref() == Some(message.as_str()) {
                    return Change::Unchanged;
                }
                entry.error = Some(message.clone());
                entry.updated_at = now;
                Change::Invalid {
                    name,
                    error: message,
                }
            }
        }
    }

    /// The file was deleted (or renamed away).
    pub fn remove_file(&self, file: &Path) -> Option<Change> {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let name = inner.by_file.remove(file)?;
        inner.by_name.remove(&name);
        Some(Change::Removed(name))
    }

    pub fn get(&self, name: &str) -> Option<CrewEntry> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.by_name.get(name).cloned()
    }

    pub fn list(&self) -> Vec<CrewEntry> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.by_name.values().cloned().collect()
    }

    pub fn names(&self) -> Vec<String> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.by_name.keys().cloned().collect()
    }
}
