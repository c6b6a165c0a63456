//! The ONNX Runtime shared library: where it comes from, and the one `ort` environment of the
//! process.
//!
//! Resolution order: `ORT_DYLIB_PATH` → the `onnxruntime` Python package (asked of `python3`,
//! then looked for in common site-packages folders) → `<cache>/onnxruntime/<library>` →
//! `python3 -m pip download --no-deps onnxruntime==1.31.1` with the library unzipped from the
//! wheel into the cache. A set but wrong `ORT_DYLIB_PATH` is an error, never skipped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;

use super::EmbedError;
use crate::settings::EmbeddingSettings;

/// The ONNX Runtime release this program is built against (`ort` rc.15, API 31).
pub const ONNXRUNTIME_VERSION: &str = "1.31.1";

/// File name of the library inside the wheel's `onnxruntime/capi/` folder and in the cache.
#[cfg(target_os = "linux")]
pub const LIBRARY_FILE: &str = "libonnxruntime.so.1.31.1";
#[cfg(target_os = "macos")]
pub const LIBRARY_FILE: &str = "libonnxruntime.1.31.1.dylib";
#[cfg(target_os = "windows")]
pub const LIBRARY_FILE: &str = "onnxruntime.dll";

const HOW_TO_PROVIDE: &str = "install the ONNX Runtime wheel (`python3 -m pip install \
onnxruntime==1.31.1`), or set ORT_DYLIB_PATH to the library file (onnxruntime/capi/libonnxruntime.so.1.31.1 \
inside that wheel)";

/// The process-wide runtime: the library path it was loaded from and the `ort` environment
/// every session is created in. Set once.
static RUNTIME: OnceLock<(PathBuf, Environment)> = OnceLock::new();
/// Serialises first-time initialisation (resolution may download).
static INIT: Mutex<()> = Mutex::new(());

/// Where cached downloads live: `settings.cache_dir`, else `$XDG_CACHE_HOME/orkeon`, else
/// `~/.cache/orkeon`, else `./.orkeon-cache` when no home folder is known.
pub fn cache_dir(settings: &EmbeddingSettings) -> PathBuf {
    if let Some(dir) = &settings.cache_dir {
        return dir.clone();
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("orkeon");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".cache").join("orkeon");
    }
    PathBuf::from(".orkeon-cache")
}

/// Finds (or fetches) the ONNX Runtime library and initialises `ort` with it, once per process.
/// Later calls return the path of the first successful call.
pub fn ensure_runtime(settings: &EmbeddingSettings) -> Result<PathBuf, EmbedError> {
    environment(settings).map(|(path, _)| path)
}

/// The process's `ort` environment, initialising the runtime if needed.
pub(crate) fn environment(
    settings: &EmbeddingSettings,
) -> Result<(PathBuf, Environment), EmbedError> {
    if let Some((path, env)) = RUNTIME.get() {
        return Ok((path.clone(), env.clone()));
    }
    let _guard = INIT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((path, env)) = RUNTIME.get() {
        return Ok((path.clone(), env.clone()));
    }
    let search = RuntimeSearch::from_process(settings);
    let path = search.locate(true)?;
    let env = ort::init_from(&path)
        .map_err(|e| {
            EmbedError::Setup(format!(
                "cannot load the ONNX Runtime library {} ({}): {e}; {HOW_TO_PROVIDE}",
                path.display(),
                search.origin_of(&path)
            ))
        })?
        .with_name("orkeon")
        .build()
        .map_err(|e| {
            EmbedError::Setup(format!(
                "cannot create the ONNX Runtime environment from {}: {e}",
                path.display()
            ))
        })?;
    tracing::info!(library = %path.display(), "ONNX Runtime loaded");
    let _ = RUNTIME.set((path.clone(), env.clone()));
    Ok((path, env))
}

/// The inputs of runtime resolution, separated from the process environment so that every
/// step can be exercised on its own.
#[derive(Debug, Clone)]
pub struct RuntimeSearch {
    /// Value of `ORT_DYLIB_PATH`, if set and non-empty.
    pub ort_dylib_path: Option<OsString>,
    /// The Python interpreter asked for the `onnxruntime` package (and used for pip).
    pub python: OsString,
    /// Extra site-packages folders to look in after asking Python.
    pub site_packages: Vec<PathBuf>,
    /// Cache root (`<cache>/onnxruntime/<library>`).
    pub cache_dir: PathBuf,
}

impl RuntimeSearch {
    /// The search this process performs: its environment, `python3`, the usual site-packages
    /// folders and [`cache_dir`].
    pub fn from_process(settings: &EmbeddingSettings) -> Self {
        Self {
            ort_dylib_path: std::env::var_os("ORT_DYLIB_PATH").filter(|v| !v.is_empty()),
            python: OsString::from("python3"),
            site_packages: common_site_packages(),
            cache_dir: cache_dir(settings),
        }
    }

    /// Finds the library without loading it. With `allow_download`, a missing library is
    /// fetched with pip into the cache as a last step.
    pub fn locate(&self, allow_download: bool) -> Result<PathBuf, EmbedError> {
        if let Some(explicit) = &self.ort_dylib_path {
            let path = PathBuf::from(explicit);
            if path.is_file() {
                return Ok(path);
            }
            return Err(EmbedError::Setup(format!(
                "ORT_DYLIB_PATH is set to {}, which is not a file; point it at the ONNX Runtime \
                 library or unset it; to get the library, {HOW_TO_PROVIDE}",
                path.display()
            )));
        }
        if let Some(path) = self.in_python_package() {
            return Ok(path);
        }
        if let Some(path) = self.in_site_packages() {
            return Ok(path);
        }
        let cached = self.cached_library();
        if cached.is_file() {
            return Ok(cached);
        }
        if !allow_download {
            return Err(self.not_found(None));
        }
        self.download_into_cache()
            .map_err(|reason| self.not_found(Some(reason)))
    }

    /// `<cache>/onnxruntime/<library>`.
    pub fn cached_library(&self) -> PathBuf {
        self.cache_dir.join("onnxruntime").join(LIBRARY_FILE)
    }

    fn not_found(&self, download_failure: Option<String>) -> EmbedError {
        let download = match download_failure {
            Some(reason) => format!("; downloading it with pip failed: {reason}"),
            None => String::new(),
        };
        EmbedError::Setup(format!(
            "the ONNX Runtime library {LIBRARY_FILE} was not found (ORT_DYLIB_PATH is unset, \
             the onnxruntime Python package is not installed, and {} does not exist){download}; \
             {HOW_TO_PROVIDE}",
            self.cached_library().display()
        ))
    }

    /// A short description of where `path` came from, for error messages.
    fn origin_of(&self, path: &Path) -> &'static str {
        if self.ort_dylib_path.as_deref() == Some(path.as_os_str()) {
            "from ORT_DYLIB_PATH"
        } else if path == self.cached_library() {
            "from the cache"
        } else {
            "from the onnxruntime Python package"
        }
    }

    /// Asks the interpreter where `onnxruntime` is installed. `find_spec` locates the package
    /// without importing it: importing would load numpy and the runtime itself, 0.2–0.4 s of
    /// every process start that finds the library this way.
    fn in_python_package(&self) -> Option<PathBuf> {
        let output = Command::new(&self.python)
            .args([
                "-c",
                "import importlib.util as u; s = u.find_spec('onnxruntime'); \
                 print(s.submodule_search_locations[0])",
            ])
            .output()
            .ok()?;
        if !output.status.success() {
            return None;
        }
        let folder = String::from_utf8(output.stdout).ok()?;
        library_in_package(Path::new(folder.trim()))
    }

    fn in_site_packages(&self) -> Option<PathBuf> {
        self.site_packages
            .iter()
            .find_map(|site| library_in_package(&site.join("onnxruntime")))
    }

    /// `pip download` of the pinned wheel into a scratch folder of the cache, then the library
    /// is unzipped next to it (written to a temporary name and renamed, so a crash leaves no
    /// half-written library).
    fn download_into_cache(&self) -> Result<PathBuf, String> {
        let target_dir = self.cache_dir.join("onnxruntime");
        std::fs::create_dir_all(&target_dir)
            .map_err(|e| format!("cannot create {}: {e}", target_dir.display()))?;
        let scratch = target_dir.join(format!("download-{}", std::process::id()));
        let result = (|| {
            let wheel = super::fetch::pip_download(
                &self.python,
                &format!("onnxruntime=={ONNXRUNTIME_VERSION}"),
                &scratch,
            )?;
            let member = format!("onnxruntime/capi/{LIBRARY_FILE}");
            let target = self.cached_library();
            super::fetch::extract_member(&wheel, &member, &target, None)?;
            Ok(target)
        })();
        let _ = std::fs::remove_dir_all(&scratch);
        if let Ok(path) = &result {
            tracing::info!(library = %path.display(), "ONNX Runtime library fetched into the cache");
        }
        result
    }
}

/// `<package>/capi/<library>` if present.
fn library_in_package(package: &Path) -> Option<PathBuf> {
    let candidate = package.join("capi").join(LIBRARY_FILE);
    candidate.is_file().then_some(candidate)
}

/// Site-packages folders where a pip-installed `onnxruntime` usually lives.
fn common_site_packages() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec![
        PathBuf::from("/usr/local/lib"),
        PathBuf::from("/usr/lib"),
        PathBuf::from("/usr/lib64"),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        roots.insert(0, PathBuf::from(home).join(".local/lib"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        roots.insert(0, PathBuf::from(venv).join("lib"));
    }
    let mut found = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        pythons.sort();
        pythons.reverse();
        for python in pythons {
            for leaf in ["site-packages", "dist-packages"] {
                let site = python.join(leaf);
                if site.is_dir() {
                    found.push(site);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search_in(cache: &Path) -> RuntimeSearch {
        RuntimeSearch {
            ort_dylib_path: None,
            python: OsString::from("python3"),
            site_packages: Vec::new(),
            cache_dir: cache.to_path_buf(),
        }
    }

    #[test]
    fn bogus_ort_dylib_path_is_a_clear_error() {
        let cache = tempfile::tempdir().expect("tempdir");
        let mut search = search_in(cache.path());
        search.ort_dylib_path = Some(OsString::from("/nonexistent/libonnxruntime.so"));
        let err = search
            .locate(false)
            .expect_err("a missing file is an error");
        let text = err.to_string();
        assert!(
            text.contains("ORT_DYLIB_PATH is set to /nonexistent/libonnxruntime.so"),
            "{text}"
        );
        assert!(text.contains("pip install onnxruntime==1.31.1"), "{text}");
    }

    #[test]
    fn nothing_anywhere_names_every_place_looked_and_how_to_fix() {
        let cache = tempfile::tempdir().expect("tempdir");
        let mut search = search_in(cache.path());
        search.python = OsString::from("/nonexistent/python3");
        let err = search.locate(false).expect_err("nothing to find");
        let text = err.to_string();
        assert!(text.contains("ORT_DYLIB_PATH is unset"), "{text}");
        assert!(
            text.contains(&cache.path().join("onnxruntime").display().to_string()),
            "{text}"
        );
        assert!(text.contains("set ORT_DYLIB_PATH"), "{text}");
    }

    #[test]
    fn cached_library_is_found_when_python_has_none() {
        let cache = tempfile::tempdir().expect("tempdir");
        let mut search = search_in(cache.path());
        search.python = OsString::from("/nonexistent/python3");
        let target = search.cached_library();
        std::fs::create_dir_all(target.parent().expect("has parent")).expect("mkdir");
        std::fs::write(&target, b"placeholder").expect("write");
        assert_eq!(search.locate(false).expect("found"), target);
    }

    #[test]
    fn installed_python_package_is_found() {
        // The test machine has the onnxruntime wheel installed (see the README).
        let cache = tempfile::tempdir().expect("tempdir");
        let search = search_in(cache.path());
        let path = search
            .locate(false)
            .expect("the onnxruntime package is installed");
        assert!(
            path.ends_with(Path::new("capi").join(LIBRARY_FILE)),
            "{}",
            path.display()
        );
    }

    #[test]
    fn cache_dir_prefers_settings() {
        let settings = EmbeddingSettings {
            cache_dir: Some(PathBuf::from("/tmp/orkeon-cache-test")),
            ..EmbeddingSettings::default()
        };
        assert_eq!(
            cache_dir(&settings),
            PathBuf::from("/tmp/orkeon-cache-test")
        );
    }
}
