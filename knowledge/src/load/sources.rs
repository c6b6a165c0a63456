//! Source expansion and confinement: the request's patterns (plain paths, globs with `*`, `**`,
//! `?`, http(s) URLs) → sorted, deduplicated [`SourceRef`]s inside the allowed roots: the
//! request's base directory and `rag.ingestion.roots`.
//!
//! Confinement is checked on canonical paths (symlinks resolved), so `../` and symlink escapes
//! are refused. A glob walks from its literal prefix directory; that directory must itself lie
//! inside a root, so `../**` or `/**` never walks outside. While walking, symlinked directories
//! are followed only when they resolve inside a root (others are skipped with a warning, and
//! nothing below them is read); a matching file whose canonical path lies outside is an error.
//! Ids are lexical (the path as written, normalised), so a symlink inside a root keeps its name.

use std::path::{Component, Path, PathBuf};

use globset::GlobBuilder;

use super::{Expansion, LoadError, SourceLocation, SourceRef};
use crate::settings::IngestionSettings;

/// Expands patterns relative to `base_dir` into sources (see the module documentation).
///
/// A plain path that does not exist goes to [`Expansion::missing`] (by the id it would have);
/// a glob matching nothing yields nothing. URLs need `settings.allow_urls`.
pub fn expand_sources(
    base_dir: &Path,
    patterns: &[String],
    settings: &IngestionSettings,
) -> Result<Expansion, LoadError> {
    let confinement = Confinement::new(base_dir, &settings.roots)?;
    let mut expansion = Expansion::default();
    for pattern in patterns {
        let pattern_trimmed = pattern.trim();
        if let Some(scheme) = url_scheme(pattern_trimmed) {
            expansion
                .sources
                .push(url_source(pattern_trimmed, &scheme, settings)?);
        } else if is_glob(pattern_trimmed) {
            expand_glob(&confinement, pattern_trimmed, &mut expansion.sources)?;
        } else {
            expand_plain(&confinement, pattern_trimmed, &mut expansion)?;
        }
    }
    expansion.sources.sort();
    expansion.sources.dedup_by(|a, b| a.id == b.id);
    expansion.missing.sort();
    expansion.missing.dedup();
    tracing::debug!(
        base_dir = %base_dir.display(),
        patterns = patterns.len(),
        sources = expansion.sources.len(),
        missing = expansion.missing.len(),
        "expanded sources"
    );
    Ok(expansion)
}

/// The base directory and the allowed roots, each known lexically (absolute, normalised) and
/// canonically.
struct Confinement {
    base: PathBuf,
    canonical_base: PathBuf,
    roots: Vec<(PathBuf, PathBuf)>,
}

impl Confinement {
    fn new(base_dir: &Path, roots: &[PathBuf]) -> Result<Self, LoadError> {
        let absolute_base = if base_dir.is_absolute() {
            base_dir.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|source| LoadError::BaseDir {
                    path: base_dir.to_path_buf(),
                    source,
                })?
                .join(base_dir)
        };
        let base = normalize(&absolute_base);
        let canonical_base = base.canonicalize().map_err(|source| LoadError::BaseDir {
            path: base.clone(),
            source,
        })?;
        // The base directory is always a root (the request's own folder: the crew file's, the
        // local CLI's working directory, or the first configured root for remote requests);
        // the configured roots are added to it.
        let mut all_roots = vec![(base.clone(), canonical_base.clone())];
        for root in roots {
            let lexical = normalize(&base.join(root));
            let canonical = lexical.canonicalize().map_err(|source| LoadError::Root {
                root: root.clone(),
                source,
            })?;
            if !all_roots.iter().any(|(_, known)| known == &canonical) {
                all_roots.push((lexical, canonical));
            }
        }
        let roots = all_roots;
        Ok(Self {
            base,
            canonical_base,
            roots,
        })
    }

    fn roots_display(&self) -> String {
        self.roots
            .iter()
            .map(|(lexical, _)| lexical.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn inside_roots(&self, canonical: &Path) -> bool {
        self.roots
            .iter()
            .any(|(_, root)| canonical.starts_with(root))
    }

    /// Refuses `path` (lexical, absolute) unless its canonical form lies inside a root. A path
    /// that does not exist is resolved through its longest existing ancestor.
    fn check(&self, pattern: &str, path: &Path) -> Result<(), LoadError> {
        let canonical = canonicalize_existing_prefix(path);
        if self.inside_roots(&canonical) {
            Ok(())
        } else {
            Err(LoadError::OutsideRoots {
                pattern: pattern.to_owned(),
                path: canonical,
                roots: self.roots_display(),
            })
        }
    }

    /// The id of a lexical absolute path already checked to be inside a root.
    fn id_of(&self, path: &Path) -> String {
        if let Ok(relative) = path.strip_prefix(&self.base) {
            return slash_path(relative);
        }
        for (lexical, _) in &self.roots {
            if let Ok(relative) = path.strip_prefix(lexical) {
                return slash_path(relative);
            }
        }
        // Reached through a symlink: fall back to the canonical location.
        let canonical = canonicalize_existing_prefix(path);
        if let Ok(relative) = canonical.strip_prefix(&self.canonical_base) {
            return slash_path(relative);
        }
        for (_, root) in &self.roots {
            if let Ok(relative) = canonical.strip_prefix(root) {
                return slash_path(relative);
            }
        }
        slash_path(&canonical)
    }
}

fn url_scheme(pattern: &str) -> Option<String> {
    let (scheme, _) = pattern.split_once("://")?;
    let valid = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then(|| scheme.to_ascii_lowercase())
}

fn url_source(
    pattern: &str,
    scheme: &str,
    settings: &IngestionSettings,
) -> Result<SourceRef, LoadError> {
    if scheme != "http" && scheme != "https" {
        return Err(LoadError::UnsupportedScheme {
            pattern: super::redact_userinfo(pattern),
            scheme: scheme.to_owned(),
        });
    }
    let shown = super::redact_userinfo(pattern);
    if !settings.allow_urls {
        return Err(LoadError::UrlsNotAllowed { url: shown });
    }
    let parsed = reqwest::Url::parse(pattern).map_err(|e| LoadError::InvalidUrl {
        url: shown.clone(),
        reason: e.to_string(),
    })?;
    if parsed.host_str().is_none() {
        return Err(LoadError::InvalidUrl {
            url: shown,
            reason: "it has no host".into(),
        });
    }
    // Credentials are for the fetch only: never in the id (manifest, citations, logs).
    Ok(SourceRef {
        id: super::redact_userinfo(pattern),
        location: SourceLocation::Url(pattern.to_owned()),
    })
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

fn expand_plain(
    confinement: &Confinement,
    pattern: &str,
    expansion: &mut Expansion,
) -> Result<(), LoadError> {
    let path = normalize(&confinement.base.join(pattern));
    confinement.check(pattern, &path)?;
    match std::fs::metadata(&path) {
        Ok(metadata) if metadata.is_dir() => Err(LoadError::IsDirectory {
            pattern: pattern.to_owned(),
            path,
        }),
        Ok(_) => {
            expansion.sources.push(SourceRef {
                id: confinement.id_of(&path),
                location: SourceLocation::File(path),
            });
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            expansion.missing.push(confinement.id_of(&path));
            Ok(())
        }
        Err(error) => Err(LoadError::Io {
            source_id: confinement.id_of(&path),
            path,
            error,
        }),
    }
}

fn expand_glob(
    confinement: &Confinement,
    pattern: &str,
    sources: &mut Vec<SourceRef>,
) -> Result<(), LoadError> {
    let full = normalize(&confinement.base.join(pattern));

    // Walk from the longest prefix without wildcards: it must be inside a root. The prefix is
    // matched literally (it may contain `[` or `{`), the rest as a glob.
    let prefix_len = full
        .components()
        .take_while(|c| !is_glob(&c.as_os_str().to_string_lossy()))
        .count();
    let walk_root: PathBuf = full.components().take(prefix_len).collect();
    let wildcard_part: PathBuf = full.components().skip(prefix_len).collect();
    confinement.check(pattern, &walk_root)?;
    let glob_text = format!(
        "{}/{}",
        globset::escape(walk_root.to_string_lossy().trim_end_matches('/')),
        wildcard_part.to_string_lossy()
    );
    let matcher = GlobBuilder::new(&glob_text)
        .literal_separator(true)
        .build()
        .map_err(|e| LoadError::InvalidGlob {
            pattern: pattern.to_owned(),
            reason: e.kind().to_string(),
        })?
        .compile_matcher();
    if !walk_root.is_dir() {
        return Ok(());
    }

    let walker = walkdir::WalkDir::new(&walk_root)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            if entry.depth() == 0 || !entry.path_is_symlink() || !entry.file_type().is_dir() {
                return true;
            }
            match entry.path().canonicalize() {
                Ok(target) if confinement.inside_roots(&target) => true,
                resolved => {
                    tracing::warn!(
                        pattern,
                        link = %entry.path().display(),
                        target = ?resolved.ok(),
                        "skipping a symlinked directory outside the allowed roots"
                    );
                    false
                }
            }
        });
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) if error.loop_ancestor().is_some() => {
                tracing::warn!(pattern, %error, "skipping a symlink loop");
                continue;
            }
            Err(error)
                if error
                    .io_error()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) =>
            {
                tracing::warn!(pattern, %error, "skipping a dangling symlink");
                continue;
            }
            Err(error) => {
                return Err(LoadError::Walk {
                    pattern: pattern.to_owned(),
                    path: error.path().unwrap_or(&walk_root).to_path_buf(),
                    reason: error.to_string(),
                });
            }
        };
        if entry.file_type().is_dir() || !matcher.is_match(entry.path()) {
            continue;
        }
        let path = entry.path().to_path_buf();
        confinement.check(pattern, &path)?;
        sources.push(SourceRef {
            id: confinement.id_of(&path),
            location: SourceLocation::File(path),
        });
    }
    Ok(())
}

/// Resolves `.` and `..` lexically (`a/b/../c` → `a/c`); never goes above the root.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Canonicalises the longest existing ancestor of `path` and appends the rest.
fn canonicalize_existing_prefix(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut out = canonical;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn slash_path(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}
