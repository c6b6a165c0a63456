//! The crew registry: crew name → the current valid spec and status, kept up to date by the
//! crews watcher. A file that becomes invalid keeps its crew's last good spec running and makes
//! the error visible; a run in flight keeps the `Arc<CrewSpec>` it started with.
//!
//! Collections are global: two crews that declare one collection name with different sources
//! would purge each other's sources at every kickoff, so the second file is refused naming
//! both — unless both mark the collection `shared: true`; then every kickoff and hot reload
//! ingests the union of their sources ([`CrewRegistry::collection_requests`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use orkeon_crews::ports::CollectionRequest;
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
    /// SHA-256 (hex) of the file's bytes when its last valid version was loaded: what a fleet
    /// compares to refuse a crew whose definition differs between daemons.
    pub hash: String,
}

/// SHA-256 (hex) of `file`'s bytes; empty when it cannot be read (the definition check then
/// compares nothing useful, and the next reload records the hash).
fn file_hash(file: &Path) -> String {
    use sha2::{Digest, Sha256};
    std::fs::read(file)
        .map(|bytes| hex::encode(Sha256::digest(&bytes)))
        .unwrap_or_default()
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
    /// Applies the result of parsing `file` (a valid file that declares a collection another
    /// crew declares differently is refused here, see the module docs).
    pub fn apply(&self, file: &Path, parsed: Result<CrewSpec, SpecError>) -> Change {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let now = crate::runs::now();
        let parsed = parsed.and_then(|spec| match collection_conflict(&inner, file, &spec) {
            Some(error) => Err(error),
            None => Ok(spec),
        });
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
                        hash: file_hash(file),
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
                        hash: String::new(),
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

    /// The `rag:` collections of `spec` as the knowledge service must ingest them: a
    /// `shared: true` collection carries the union of the sources of every registered crew
    /// that shares it, resolved against their common folder (so its source ids do not depend
    /// on which crew kicked off).
    pub fn collection_requests(&self, spec: &CrewSpec) -> Vec<CollectionRequest> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut requests = spec.collection_requests();
        for request in &mut requests {
            let shared = spec
                .rag
                .collections
                .iter()
                .any(|c| c.name == request.name && c.shared);
            if !shared {
                continue;
            }
            let mut parts: Vec<(PathBuf, Vec<String>)> =
                vec![(spec.base_dir.clone(), request.sources.clone())];
            for other in inner.by_name.values().filter_map(|e| e.spec.as_ref()) {
                if other.name == spec.name {
                    continue;
                }
                if let Some(c) = other
                    .rag
                    .collections
                    .iter()
                    .find(|c| c.name == request.name && c.shared)
                {
                    parts.push((other.base_dir.clone(), c.sources.clone()));
                }
            }
            let base = common_folder(parts.iter().map(|(dir, _)| dir.as_path()));
            let mut sources: Vec<String> = parts
                .iter()
                .flat_map(|(dir, sources)| sources.iter().map(|s| rebase(dir, s, &base)))
                .collect();
            sources.sort();
            sources.dedup();
            request.base_dir = base;
            request.sources = sources;
        }
        requests
    }
}

/// Where a collection's declared sources point: each relative source joined to the crew's
/// folder (URLs and absolute paths as written), sorted.
fn resolved_sources(dir: &Path, sources: &[String]) -> Vec<String> {
    let mut resolved: Vec<String> = sources
        .iter()
        .map(|s| {
            if s.contains("://") || Path::new(s).is_absolute() {
                s.clone()
            } else {
                dir.join(s).to_string_lossy().into_owned()
            }
        })
        .collect();
    resolved.sort();
    resolved.dedup();
    resolved
}

/// A source of a crew in `dir`, relative to `base` (an ancestor of `dir`).
fn rebase(dir: &Path, source: &str, base: &Path) -> String {
    if source.contains("://") || Path::new(source).is_absolute() {
        return source.to_string();
    }
    let joined = dir.join(source);
    joined
        .strip_prefix(base)
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .unwrap_or_else(|_| joined.to_string_lossy().into_owned())
}

/// The deepest folder containing every one of `dirs`.
fn common_folder<'a>(dirs: impl Iterator<Item = &'a Path>) -> PathBuf {
    let mut common: Option<PathBuf> = None;
    for dir in dirs {
        common = Some(match common {
            None => dir.to_path_buf(),
            Some(current) => current
                .components()
                .zip(dir.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    common.unwrap_or_else(|| PathBuf::from("."))
}

/// A collection `spec` (from `file`) declares that another crew's file declares with other
/// sources, where the two do not both say `shared: true`.
fn collection_conflict(inner: &Inner, file: &Path, spec: &CrewSpec) -> Option<SpecError> {
    for collection in &spec.rag.collections {
        let mine = resolved_sources(&spec.base_dir, &collection.sources);
        for entry in inner.by_name.values().filter(|e| e.file != file) {
            let Some(other) = &entry.spec else { continue };
            let Some(theirs) = other
                .rag
                .collections
                .iter()
                .find(|c| c.name == collection.name)
            else {
                continue;
            };
            if collection.shared && theirs.shared {
                continue;
            }
            if resolved_sources(&other.base_dir, &theirs.sources) == mine {
                continue;
            }
            return Some(SpecError {
                file: file.to_path_buf(),
                line: None,
                column: None,
                message: format!(
                    "collection '{}' is also declared by {} (crew '{}') with other sources; every kickoff of one crew would purge the other's",
                    collection.name,
                    entry.file.display(),
                    other.name
                ),
                hint: Some(format!(
                    "give one of them another name, or mark it `shared: true` in both {} and {} to make its sources the union",
                    file.display(),
                    entry.file.display()
                )),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::spec::parse_crew_str;

    const GOOD: &str = "name: support\nprocess: sequential\nagents:\n  a:\n    role: r\n    goal: g\ntasks:\n  - name: t\n    agent: a\n    description: d\n    expected_output: o\n";

    #[test]
    fn an_invalid_update_keeps_the_last_good_spec_and_shows_the_error() {
        let registry = CrewRegistry::default();
        let file = Path::new("/crews/support.yaml");
        assert_eq!(
            registry.apply(file, parse_crew_str(GOOD, file)),
            Change::Added("support".into())
        );
        let broken = GOOD.replace("agent: a", "agent: b");
        let change = registry.apply(file, parse_crew_str(&broken, file));
        assert!(
            matches!(change, Change::Invalid { ref name, .. } if name == "support"),
            "{change:?}"
        );
        let entry = registry.get("support").expect("still registered");
        assert!(entry.spec.is_some(), "the last good version keeps running");
        assert_eq!(entry.status(), "invalid");
        assert!(
            entry
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("support.yaml:")
        );
        // Fixed again: valid, error cleared.
        assert_eq!(
            registry.apply(file, parse_crew_str(GOOD, file)),
            Change::Updated("support".into())
        );
        assert_eq!(registry.get("support").expect("entry").status(), "valid");
        // Deleted: gone.
        assert_eq!(
            registry.remove_file(file),
            Some(Change::Removed("support".into()))
        );
        assert!(registry.get("support").is_none());
    }

    #[test]
    fn a_file_that_was_never_valid_is_listed_under_its_stem() {
        let registry = CrewRegistry::default();
        let file = Path::new("/crews/draft.yaml");
        let change = registry.apply(file, parse_crew_str("name: [", file));
        assert!(matches!(change, Change::Invalid { ref name, .. } if name == "draft"));
        let entry = registry.get("draft").expect("listed");
        assert!(entry.spec.is_none());
    }

    fn crew_with(name: &str, sources: &str, shared: bool) -> String {
        format!(
            "name: {name}\nrag:\n  collections:\n    kb:\n      sources: [{sources}]\n      shared: {shared}\nagents:\n  a:\n    role: r\n    goal: g\n    knowledge: [kb]\ntasks:\n  - name: t\n    agent: a\n    description: d\n    expected_output: o\n"
        )
    }

    #[test]
    fn one_collection_declared_differently_by_two_crews_is_refused_naming_both_files() {
        let registry = CrewRegistry::default();
        let a = Path::new("/crews/a.yaml");
        let b = Path::new("/crews/b.yaml");
        let text = crew_with("a", "kb/*.md", false);
        assert_eq!(
            registry.apply(a, parse_crew_str(&text, a)),
            Change::Added("a".into())
        );
        // The same sources: no conflict.
        let same = crew_with("b", "kb/*.md", false);
        assert_eq!(
            registry.apply(b, parse_crew_str(&same, b)),
            Change::Added("b".into())
        );
        // Other sources: refused, naming both files.
        let other = crew_with("b", "notes/*.md", false);
        let change = registry.apply(b, parse_crew_str(&other, b));
        let Change::Invalid { error, .. } = change else {
            panic!("expected a refusal, got {change:?}");
        };
        assert!(
            error.contains("/crews/a.yaml") && error.contains("/crews/b.yaml"),
            "{error}"
        );
        assert!(error.contains("shared: true"), "{error}");
        // Only one side shared: still refused (the same error as before: no change).
        let half = crew_with("b", "notes/*.md", true);
        let change = registry.apply(b, parse_crew_str(&half, b));
        assert_eq!(change, Change::Unchanged);
        let entry = registry.get("b").unwrap();
        assert!(entry.error.is_some(), "{entry:?}");
        let kept = entry.spec.expect("the last good version is kept");
        assert_eq!(kept.rag.collections[0].sources, ["kb/*.md"]);
    }

    #[test]
    fn a_shared_collection_ingests_the_union_of_its_declarations() {
        let registry = CrewRegistry::default();
        let a = Path::new("/crews/a.yaml");
        let b = Path::new("/crews/team/b.yaml");
        let text = crew_with("a", "kb/*.md", true);
        registry.apply(a, parse_crew_str(&text, a));
        let text = crew_with("b", "notes/*.md, kb/faq.md", true);
        assert_eq!(
            registry.apply(b, parse_crew_str(&text, b)),
            Change::Added("b".into())
        );
        let spec_a = registry.get("a").unwrap().spec.unwrap();
        let spec_b = registry.get("b").unwrap().spec.unwrap();
        let from_a = registry.collection_requests(&spec_a);
        let from_b = registry.collection_requests(&spec_b);
        assert_eq!(from_a, from_b, "the same request whichever crew kicks off");
        assert_eq!(from_a[0].base_dir, Path::new("/crews"));
        assert_eq!(
            from_a[0].sources,
            ["kb/*.md", "team/kb/faq.md", "team/notes/*.md"]
        );
    }
}
