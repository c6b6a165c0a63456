//! Folder watchers (notify, debounced):
//!
//! - [`CrewsWatcher`]: the crews folder → parse and validate → the crew registry. A bad file
//!   keeps its crew's last good version and logs the precise error; `kickoff.on_load` crews are
//!   started when they (re)load.
//! - [`SourceWatcher`]: every registered collection's source folders → incremental re-ingest
//!   (unchanged files cost nothing; a deleted file is purged).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use orkeon_crews::ports::{CollectionRequest, KnowledgeService};
use orkeon_crews::spec::{SettingsChecks, parse_crew_file_checked};
use tokio::sync::mpsc;

use crate::engine::CrewEngine;
use crate::registry::Change;

type FsDebouncer = Debouncer<notify::RecommendedWatcher, RecommendedCache>;

fn debouncer(
    delay: Duration,
) -> notify::Result<(FsDebouncer, mpsc::UnboundedReceiver<Vec<PathBuf>>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let debouncer = new_debouncer(
        delay,
        None,
        move |result: DebounceEventResult| match result {
            Ok(events) => {
                // Reads (open/close of a file, e.g. by our own ingestion) are not changes.
                let paths: Vec<PathBuf> = events
                    .iter()
                    .filter(|e| !matches!(e.kind, notify::EventKind::Access(_)))
                    .flat_map(|e| e.paths.clone())
                    .collect();
                if !paths.is_empty() {
                    let _ = tx.send(paths);
                }
            }
            Err(errors) => {
                for error in errors {
                    tracing::warn!(%error, "file watcher error");
                }
            }
        },
    )?;
    Ok((debouncer, rx))
}

/// The crew files (`*.yaml`, `*.yml`) directly in `dir`, sorted.
pub(crate) fn crew_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_crew_file(p))
        .collect();
    files.sort();
    Ok(files)
}

fn is_crew_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml") | Some("yml")
    )
}

/// Keeps the crew registry in step with the crews folder.
pub struct CrewsWatcher {
    _debouncer: FsDebouncer,
    task: tokio::task::JoinHandle<()>,
}

impl CrewsWatcher {
    /// Loads the folder's current contents, then watches it.
    pub async fn start(
        dir: PathBuf,
        engine: Arc<CrewEngine>,
        sources: Arc<SourceWatcher>,
        checks: Arc<dyn SettingsChecks + Send + Sync>,
        delay: Duration,
    ) -> anyhow::Result<Self> {
        let dir = std::fs::canonicalize(&dir)
            .map_err(|e| anyhow::anyhow!("crews folder {}: {e}", dir.display()))?;
        for path in &crew_files(&dir)? {
            load(path, &engine, &sources, checks.as_ref());
        }
        let (mut debouncer, mut rx) = debouncer(delay)?;
        debouncer.watch(&dir, RecursiveMode::NonRecursive)?;
        tracing::info!(dir = %dir.display(), crews = engine.registry.list().len(), "watching crews");
        let task = tokio::spawn(async move {
            while let Some(paths) = rx.recv().await {
                let unique: BTreeSet<PathBuf> =
                    paths.into_iter().filter(|p| is_crew_file(p)).collect();
                for path in unique {
                    if path.exists() {
                        load(&path, &engine, &sources, checks.as_ref());
                    } else if let Some(Change::Removed(name)) = engine.registry.remove_file(&path) {
                        tracing::info!(crew = %name, file = %path.display(), "crew removed");
                        sources.forget_crew(&name);
                    }
                }
            }
        });
        Ok(Self {
            _debouncer: debouncer,
            task,
        })
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

fn load(
    path: &Path,
    engine: &Arc<CrewEngine>,
    sources: &Arc<SourceWatcher>,
    checks: &dyn SettingsChecks,
) {
    let parsed = parse_crew_file_checked(path, checks);
    let spec = parsed.as_ref().ok().cloned();
    match engine.registry.apply(path, parsed) {
        Change::Added(name) | Change::Updated(name) => {
            tracing::info!(crew = %name, file = %path.display(), "crew loaded");
            engine.publish_definition(&name);
            if let Some(spec) = spec {
                // Throwaway collections are built at each kickoff; there is nothing to reload.
                let ephemeral = spec.ephemeral_collections();
                let requests = engine
                    .registry
                    .collection_requests(&spec)
                    .into_iter()
                    .filter(|request| !ephemeral.contains(&request.name))
                    .collect();
                sources.register_crew(&spec.name, requests);
                if spec.kickoff.on_load {
                    match engine.kickoff(&name, BTreeMap::new(), None) {
                        Ok(run) => {
                            tracing::info!(crew = %name, run_id = %run.run_id, "kicked off on load")
                        }
                        Err(error) => {
                            tracing::error!(crew = %name, %error, "kickoff on load failed")
                        }
                    }
                }
            }
        }
        Change::Invalid { name, error } => {
            tracing::error!(crew = %name, file = %path.display(), "invalid crew file (the last good version keeps running): {error}");
        }
        Change::Removed(_) | Change::Unchanged => {}
    }
}

/// One watched collection.
#[derive(Clone)]
struct Watched {
    request: CollectionRequest,
    dirs: Vec<PathBuf>,
    crews: BTreeSet<String>,
}

/// Re-ingests collections when their sources change.
pub struct SourceWatcher {
    knowledge: Arc<dyn KnowledgeService>,
    collections: Mutex<BTreeMap<String, Watched>>,
    debouncer: Mutex<Option<FsDebouncer>>,
    watched_dirs: Mutex<BTreeSet<PathBuf>>,
}

impl SourceWatcher {
    pub fn start(
        knowledge: Arc<dyn KnowledgeService>,
        delay: Duration,
    ) -> anyhow::Result<Arc<Self>> {
        let (debouncer, mut rx) = debouncer(delay)?;
        let watcher = Arc::new(Self {
            knowledge,
            collections: Mutex::new(BTreeMap::new()),
            debouncer: Mutex::new(Some(debouncer)),
            watched_dirs: Mutex::new(BTreeSet::new()),
        });
        let this = Arc::downgrade(&watcher);
        tokio::spawn(async move {
            while let Some(paths) = rx.recv().await {
                let Some(this) = this.upgrade() else { break };
                this.on_change(paths).await;
            }
        });
        Ok(watcher)
    }

    /// Watches the sources of a crew's collections.
    /// Watches the sources of `requests` (the crew's collections as the registry resolves them,
    /// shared ones with every sharing crew's sources) and re-ingests them on change.
    pub fn register_crew(&self, crew: &str, requests: Vec<CollectionRequest>) {
        for request in requests {
            let name = request.name.clone();
            let dirs: Vec<PathBuf> = request
                .sources
                .iter()
                .filter(|s| !s.starts_with("http://") && !s.starts_with("https://"))
                .map(|s| static_dir(&request.base_dir, s))
                .collect();
            for dir in &dirs {
                self.watch_dir(dir);
            }
            let mut collections = self.collections.lock().unwrap_or_else(|p| p.into_inner());
            let entry = collections.entry(name.clone()).or_insert_with(|| Watched {
                request: request.clone(),
                dirs: Vec::new(),
                crews: BTreeSet::new(),
            });
            entry.request = request;
            entry.dirs = dirs;
            entry.crews.insert(crew.to_string());
        }
    }

    /// Stops re-ingesting collections only this crew used.
    pub fn forget_crew(&self, crew: &str) {
        let mut collections = self.collections.lock().unwrap_or_else(|p| p.into_inner());
        collections.retain(|_, w| {
            w.crews.remove(crew);
            !w.crews.is_empty()
        });
    }

    fn watch_dir(&self, dir: &Path) {
        let Ok(dir) = std::fs::canonicalize(dir) else {
            tracing::warn!(dir = %dir.display(), "source folder does not exist; not watched");
            return;
        };
        let mut watched = self.watched_dirs.lock().unwrap_or_else(|p| p.into_inner());
        if watched.iter().any(|w| dir.starts_with(w)) {
            return;
        }
        let mut debouncer = self.debouncer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(debouncer) = debouncer.as_mut() {
            match debouncer.watch(&dir, RecursiveMode::Recursive) {
                Ok(()) => {
                    watched.insert(dir);
                }
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch source folder")
                }
            }
        }
    }

    async fn on_change(&self, paths: Vec<PathBuf>) {
        let affected: Vec<CollectionRequest> = {
            let collections = self.collections.lock().unwrap_or_else(|p| p.into_inner());
            collections
                .values()
                .filter(|w| {
                    paths.iter().any(|p| {
                        w.dirs.iter().any(|d| {
                            let d = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
                            p.starts_with(&d)
                        })
                    })
                })
                .map(|w| w.request.clone())
                .collect()
        };
        for request in affected {
            let name = request.name.clone();
            match self.knowledge.bootstrap(vec![request]).await {
                Ok(statuses) => {
                    for status in statuses {
                        tracing::info!(collection = %name, state = %status.state, report = %status.report, "sources changed: collection re-ingested");
                    }
                }
                Err(error) => tracing::error!(collection = %name, %error, "re-ingestion failed"),
            }
        }
    }

    pub fn stop(&self) {
        let mut debouncer = self.debouncer.lock().unwrap_or_else(|p| p.into_inner());
        debouncer.take();
    }
}

/// The folder part of a source pattern before any glob character.
fn static_dir(base: &Path, pattern: &str) -> PathBuf {
    let absolute = Path::new(pattern).is_absolute();
    let mut dir = if absolute {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    };
    let components: Vec<&str> = pattern.split('/').collect();
    for (i, component) in components.iter().enumerate() {
        let last = i + 1 == components.len();
        if last || component.contains(['*', '?', '[', '{']) {
            break;
        }
        dir.push(component);
    }
    if absolute { dir } else { base.join(dir) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_dir_stops_at_the_first_glob() {
        let base = Path::new("/crews");
        assert_eq!(static_dir(base, "kb/**/*.md"), PathBuf::from("/crews/kb"));
        assert_eq!(static_dir(base, "kb/faq.md"), PathBuf::from("/crews/kb"));
        assert_eq!(static_dir(base, "*.md"), PathBuf::from("/crews"));
        assert_eq!(static_dir(base, "/srv/kb/*.md"), PathBuf::from("/srv/kb"));
    }
}
