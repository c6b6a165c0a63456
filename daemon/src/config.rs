//! Configuration: defaults ← `config/orkeon.yaml` (or `--config FILE`) ← `ORKEON_*` environment
//! (`__` separates levels) ← command-line flags, layered with figment.
//!
//! Every section rejects unknown keys; errors name the key and the source (file or variable).

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized};
use orkeon_agents::llm::LlmSettings;
use orkeon_knowledge::settings::{EmbeddingSettings, IngestionSettings, LoadLimits, RagSettings};
use serde::{Deserialize, Serialize};
use serde_saphyr::figment::Yaml;

/// The default configuration file, relative to the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "config/orkeon.yaml";

/// Environment variables with the `ORKEON_` prefix that are not configuration keys: the
/// opt-in real-LLM test suite's (README "Use a local LLM") and the PostgreSQL test server's
/// (`scripts/test-postgres`, the `store-postgres` tests).
const NON_CONFIG_VARS: &[&str] = &[
    "MODELS_DIR",
    "SERVER",
    "TOKEN",
    "TEST_LLM_URL",
    "TEST_LLM_MODEL",
    "TEST_PG_URL",
    "TEST_PG_PASSWORD",
    "TEST_PG_BIN",
    "REQUIRE_PG",
    "PG_DIR",
    "PG_PORT",
];

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where collections, runs and indexes live.
    pub data_dir: PathBuf,
    /// Folder of crew files the daemon watches.
    pub crews_dir: PathBuf,
    /// Folder whose `*.j2` files override the built-in prompt templates.
    pub prompts_dir: Option<PathBuf>,
    pub log: LogSettings,
    pub server: ServerSettings,
    /// Bounds on what one request may ask for.
    pub limits: Limits,
    pub embeddings: EmbeddingSettings,
    /// The chat model (`llm.provider`: extractive | openai; none configured: LLM calls fail
    /// with a message saying how to set one).
    pub llm: LlmSettings,
    pub rag: RagSettings,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from(".orkeon-data"),
            crews_dir: PathBuf::from("examples/crews"),
            prompts_dir: None,
            log: LogSettings::default(),
            server: ServerSettings::default(),
            limits: Limits::default(),
            embeddings: EmbeddingSettings::default(),
            llm: LlmSettings::default(),
            rag: RagSettings::default(),
        }
    }
}

/// `log:`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// A tracing filter (`info`, `orkeon_knowledge=debug,info`, …); `RUST_LOG` wins when set.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: "text".into(),
        }
    }
}

/// `server:` — the gRPC control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Listen address; loopback by default.
    pub listen: String,
    /// Name of the environment variable holding the bearer token (none: no auth).
    pub token_env: Option<String>,
    /// Allow a non-loopback listen address without a token (not recommended).
    pub allow_insecure_remote: bool,
    /// Largest accepted request message, in bytes.
    pub max_request_bytes: usize,
    /// How long a shutdown lets runs finish before cancelling them, in seconds.
    pub shutdown_grace_secs: u64,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:50051".into(),
            token_env: None,
            allow_insecure_remote: false,
            max_request_bytes: 4 * 1024 * 1024,
            shutdown_grace_secs: 30,
        }
    }
}

/// `limits:` — what one request may ask for, and what one source may expand to. A request over a
/// limit fails with an invalid-argument error naming the field and the limit (`limits.<key>`),
/// before any work; a source over a loader limit (pages, inflated bytes, rows, text bytes) is
/// refused — quarantined with the limit and its key — and the rest of the request goes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest `top_n` (passages returned) of a search or query; the candidates a profile
    /// retrieves and reranks follow top_n, so this also bounds their work.
    pub max_top_n: usize,
    /// Longest query text, in bytes.
    pub max_query_bytes: usize,
    /// Most sources (paths, globs, URLs) one ingest request may name.
    pub max_sources_per_request: usize,
    /// Runs executing at once; later kickoffs wait in line.
    pub max_concurrent_runs: usize,
    /// Runs waiting for a turn; past this, a kickoff is refused (RESOURCE_EXHAUSTED).
    pub max_queued_runs: usize,
    /// gRPC calls served at once (later ones wait).
    pub max_concurrent_requests: usize,
    /// Longest a unary gRPC call may take, in seconds (streams are not cut).
    pub request_timeout_secs: u64,
    /// Knowledge retrievals for agents (knowledge blocks, `rag_search`) running at once across
    /// all runs; later ones wait for a slot.
    pub max_concurrent_retrievals: usize,
    /// Longest one agent retrieval may take, waiting for a slot included, in seconds.
    pub retrieval_timeout_secs: u64,
    /// Pages of one PDF.
    pub max_pdf_pages: usize,
    /// Bytes one PDF stream may inflate to (a flate bomb stops here, never allocated past it).
    pub max_pdf_stream_bytes: usize,
    /// Bytes all the streams of one PDF may inflate to, together.
    pub max_pdf_document_bytes: usize,
    /// Data rows of one CSV file (one document per row).
    pub max_csv_rows: usize,
    /// Bytes of one text, Markdown or HTML document.
    pub max_text_bytes: usize,
    /// Operations one script may run (`orkeon script run`; Rhai's operation count).
    pub script_max_operations: u64,
    /// Wall time of one script, its `rag.*` and `crew.*` calls included, in seconds.
    pub script_timeout_secs: u64,
    /// Chunks all the throwaway collections of one run or script may hold in memory together
    /// (`ephemeral: true` in a crew's `rag:`, `rag.scratch` in scripts).
    pub max_ephemeral_chunks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let load = LoadLimits::default();
        Self {
            max_top_n: 100,
            max_query_bytes: 8 * 1024,
            max_sources_per_request: 256,
            max_concurrent_runs: 8,
            max_queued_runs: 256,
            max_concurrent_requests: 64,
            request_timeout_secs: 900,
            max_concurrent_retrievals: 8,
            retrieval_timeout_secs: 300,
            max_pdf_pages: load.max_pdf_pages,
            max_pdf_stream_bytes: load.max_pdf_stream_bytes,
            max_pdf_document_bytes: load.max_pdf_document_bytes,
            max_csv_rows: load.max_csv_rows,
            max_text_bytes: load.max_text_bytes,
            script_max_operations: 10_000_000,
            script_timeout_secs: 3600,
            max_ephemeral_chunks: 100_000,
        }
    }
}

impl Limits {
    /// The loaders' share of the limits (carried to `rag.ingestion` by [`Config::load`]).
    pub fn load_limits(&self) -> LoadLimits {
        LoadLimits {
            max_pdf_pages: self.max_pdf_pages,
            max_pdf_stream_bytes: self.max_pdf_stream_bytes,
            max_pdf_document_bytes: self.max_pdf_document_bytes,
            max_csv_rows: self.max_csv_rows,
            max_text_bytes: self.max_text_bytes,
        }
    }

    /// `InvalidArgument`-style message when `value` exceeds `limit`.
    pub fn check(key: &str, value: usize, limit: usize, unit: &str) -> Result<(), String> {
        if value > limit {
            return Err(format!(
                "{value} {unit} is over the limit of {limit} (limits.{key})"
            ));
        }
        Ok(())
    }
}

/// Command-line values that override the configuration (only the ones given).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CliOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crews_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerOverrides>,
}

/// `server.*` flags.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Loads the layered configuration. `file`: an explicit `--config` (must exist); without it
    /// `config/orkeon.yaml` is read when present.
    pub fn load(file: Option<&Path>, cli: &CliOverrides) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        match file {
            Some(path) if !path.exists() => return Err(ConfigError::MissingFile(path.into())),
            Some(path) => figment = figment.merge(Yaml::file_exact(path)),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                figment = figment.merge(Yaml::file_exact(DEFAULT_CONFIG_FILE))
            }
            None => {}
        }
        let env = Env::prefixed("ORKEON_")
            .filter(|key| {
                !NON_CONFIG_VARS
                    .iter()
                    .any(|skip| key.as_str().eq_ignore_ascii_case(skip))
            })
            .split("__");
        figment = figment.merge(env).merge(Serialized::defaults(cli.clone()));
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Invalid(describe(e)))?;
        config.rag.ingestion.load_limits = config.limits.load_limits();
        let checks = [
            ("rag.store", config.rag.store.check()),
            ("rag.ingestion", config.rag.ingestion.check()),
        ];
        for (section, check) in checks {
            let Err((key, reason)) = check else { continue };
            let path = format!("{section}.{key}");
            let source = figment
                .find_metadata(&path)
                .map(|meta| source_of(meta, &path))
                .unwrap_or_default();
            return Err(ConfigError::Invalid(format!(
                "{reason} (key `{path}`){source}"
            )));
        }
        Ok(config)
    }

    /// The ingestion settings of this process: `rag.ingestion` with the loader limits of
    /// `limits:` and the roots of [`Config::ingestion_roots`].
    pub fn ingestion_settings(&self) -> IngestionSettings {
        let mut settings = self.rag.ingestion.clone();
        settings.load_limits = self.limits.load_limits();
        settings.roots = self.ingestion_roots();
        settings
    }

    /// The folders ingestion may read besides a request's own folder, absolute. Remote requests
    /// (gRPC, `--server`), which have no folder of their own, resolve relative paths against the
    /// first. `rag.ingestion.roots` when set (relative entries against the working directory,
    /// like `data_dir`); else the crews folder and `<data_dir>/sources` — created here — of
    /// which those that exist.
    pub fn ingestion_roots(&self) -> Vec<PathBuf> {
        let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.into());
        if !self.rag.ingestion.roots.is_empty() {
            return self
                .rag
                .ingestion
                .roots
                .iter()
                .map(|root| absolute(root))
                .collect();
        }
        let sources = self.data_dir.join("sources");
        if let Err(error) = std::fs::create_dir_all(&sources) {
            tracing::warn!(path = %sources.display(), %error, "cannot create the default ingestion root");
        }
        [self.crews_dir.as_path(), sources.as_path()]
            .into_iter()
            .map(absolute)
            .filter(|root| root.is_dir())
            .collect()
    }

    /// The effective configuration as JSON with secrets redacted (secret-looking keys, and
    /// the password inside `rag.store.postgres.url`).
    pub fn redacted_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        redact(&mut value);
        if let Some(url) = value
            .pointer_mut("/rag/store/postgres/url")
            .filter(|url| url.is_string())
        {
            let shown = orkeon_store_postgres::redact_url(url.as_str().unwrap_or_default());
            *url = serde_json::Value::String(shown);
        }
        value
    }
}

/// One line per figment error: what is wrong, which key, and which source.
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|e| {
            let key = if e.path.is_empty() {
                String::new()
            } else {
                format!(" (key `{}`)", e.path.join("."))
            };
            let source = e
                .metadata
                .as_ref()
                .map(|meta| source_of(meta, &e.path.join(".")))
                .unwrap_or_default();
            format!("{}{key}{source}", e.kind)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where the value of `key` (dotted; empty when unknown) came from: " in environment variable
/// ORKEON_RAG__STORE__RRF_K", " in YAML file config/orkeon.yaml", ...
fn source_of(meta: &figment::Metadata, key: &str) -> String {
    if meta.name.contains("environment") && !key.is_empty() {
        let var = key.replace('.', "__").to_ascii_uppercase();
        return format!(" in environment variable ORKEON_{var}");
    }
    match &meta.source {
        Some(figment::Source::File(path)) => format!(" in {} {}", meta.name, path.display()),
        Some(src) => format!(" in {} {src}", meta.name),
        None => format!(" in {}", meta.name),
    }
}

/// Replaces values of secret-looking keys (never the `*_env` variable names) with `***`.
fn redact(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                let k = key.to_ascii_lowercase();
                let secret = !k.ends_with("_env")
                    && ["secret", "password", "api_key", "token"]
                        .iter()
                        .any(|s| k.contains(s));
                if secret && !v.is_null() {
                    *v = serde_json::Value::String("***".into());
                } else {
                    redact(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closures return figment::Error
mod tests {
    use super::*;

    #[test]
    fn defaults_load_without_a_file() {
        figment::Jail::expect_with(|_jail| {
            let config = Config::load(None, &CliOverrides::default()).map_err(|e| e.to_string())?;
            assert_eq!(config.embeddings.model, "bge-small-en-v1.5");
            assert_eq!(config.rag.profile, "fast");
            Ok(())
        });
    }

    #[test]
    fn layers_file_env_and_flags_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_dir("config")?;
            jail.create_file(
                "config/orkeon.yaml",
                "data_dir: from-file\nembeddings:\n  model: all-MiniLM-L6-v2\nrag:\n  profile: balanced\n",
            )?;
            jail.set_env("ORKEON_RAG__PROFILE", "quality");
            jail.set_env("ORKEON_MODELS_DIR", "/ignored/not/a/key");
            let cli = CliOverrides {
                data_dir: Some("from-flag".into()),
                ..CliOverrides::default()
            };
            let config = Config::load(None, &cli).map_err(|e| e.to_string())?;
            assert_eq!(config.data_dir, PathBuf::from("from-flag"));
            assert_eq!(config.embeddings.model, "all-MiniLM-L6-v2");
            assert_eq!(config.rag.profile, "quality");
            Ok(())
        });
    }

    /// The error of loading the configuration (`file` as `--config`), which must fail.
    fn load_error(file: Option<&str>, why: &str) -> String {
        Config::load(file.map(Path::new), &CliOverrides::default())
            .expect_err(why)
            .to_string()
    }

    #[test]
    fn unknown_keys_name_the_key_and_the_source() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("custom.yaml", "embeddings:\n  modle: x\n")?;
            let err = load_error(Some("custom.yaml"), "unknown key is an error");
            assert!(err.contains("modle"), "{err}");
            assert!(err.contains("custom.yaml"), "{err}");

            jail.set_env("ORKEON_EMBEDDINGS__BATCH_SIZE", "many");
            let err = load_error(None, "bad value is an error");
            assert!(err.contains("embeddings.batch_size"), "{err}");
            assert!(err.contains("ORKEON_EMBEDDINGS__BATCH_SIZE"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn out_of_range_store_values_name_the_key_and_the_source() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("custom.yaml", "rag:\n  store:\n    hnsw_min_recall: 1.5\n")?;
            let err = load_error(Some("custom.yaml"), "a recall above 1 is an error");
            assert!(err.contains("rag.store.hnsw_min_recall"), "{err}");
            assert!(err.contains("between 0 and 1"), "{err}");
            assert!(err.contains("custom.yaml"), "{err}");

            jail.set_env("ORKEON_RAG__STORE__HNSW_EF_SEARCH", "0");
            let err = load_error(None, "ef_search 0 is an error");
            assert!(err.contains("rag.store.hnsw_ef_search"), "{err}");
            assert!(err.contains("ORKEON_RAG__STORE__HNSW_EF_SEARCH"), "{err}");

            jail.set_env("ORKEON_RAG__STORE__HNSW_EF_SEARCH", "100");
            jail.set_env("ORKEON_RAG__INGESTION__EMBED_WINDOW", "0");
            let err = load_error(None, "an empty embedding window is an error");
            assert!(err.contains("rag.ingestion.embed_window"), "{err}");
            assert!(err.contains("between 1 and 4096"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn loader_limits_are_carried_to_the_ingestion_settings() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "custom.yaml",
                "limits:\n  max_pdf_pages: 7\n  max_csv_rows: 9\n",
            )?;
            jail.set_env("ORKEON_LIMITS__MAX_PDF_STREAM_BYTES", "1024");
            let config = Config::load(Some(Path::new("custom.yaml")), &CliOverrides::default())
                .map_err(|e| e.to_string())?;
            let carried = &config.rag.ingestion.load_limits;
            assert_eq!(carried.max_pdf_pages, 7);
            assert_eq!(carried.max_csv_rows, 9);
            assert_eq!(carried.max_pdf_stream_bytes, 1024);
            assert_eq!(carried, &config.limits.load_limits());
            // Shown once, under `limits:`.
            let json = config.redacted_json();
            assert_eq!(json["limits"]["max_pdf_pages"], 7);
            assert!(json["rag"]["ingestion"].get("load_limits").is_none());
            Ok(())
        });
    }

    #[test]
    fn ingestion_roots_default_to_the_crews_folder_and_data_sources() {
        let dir = tempfile::tempdir().expect("tempdir");
        let crews = dir.path().join("crews");
        std::fs::create_dir_all(&crews).expect("mkdir");
        let mut config = Config {
            data_dir: dir.path().join("data"),
            crews_dir: crews.clone(),
            ..Config::default()
        };
        let roots = config.ingestion_roots();
        assert_eq!(roots, vec![crews.clone(), dir.path().join("data/sources")]);
        assert!(dir.path().join("data/sources").is_dir());
        assert_eq!(config.ingestion_settings().roots, roots);

        // A missing crews folder is left out; configured roots replace the defaults.
        config.crews_dir = dir.path().join("no-crews");
        assert_eq!(
            config.ingestion_roots(),
            vec![dir.path().join("data/sources")]
        );
        config.rag.ingestion.roots = vec![dir.path().join("docs"), "rel".into()];
        let roots = config.ingestion_roots();
        assert_eq!(roots[0], dir.path().join("docs"));
        assert!(
            roots[1].is_absolute() && roots[1].ends_with("rel"),
            "{roots:?}"
        );
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let err = Config::load(
            Some(Path::new("/no/such/orkeon.yaml")),
            &CliOverrides::default(),
        )
        .expect_err("missing file");
        assert!(err.to_string().contains("/no/such/orkeon.yaml"));
    }

    #[test]
    fn the_configuration_never_shows_the_postgres_password() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "custom.yaml",
                "rag:\n  store:\n    provider: postgres\n    postgres:\n      url: postgres://orkeon:hunter2-secret@db.example:5432/orkeon\n      password_env: ORKEON_DB_PASSWORD_VAR\n",
            )?;
            let config = Config::load(Some(Path::new("custom.yaml")), &CliOverrides::default())
                .map_err(|e| e.to_string())?;
            let shown = config.redacted_json();
            let text = shown.to_string();
            assert!(!text.contains("hunter2-secret"), "{text}");
            assert_eq!(
                shown["rag"]["store"]["postgres"]["url"],
                "postgres://orkeon:***@db.example:5432/orkeon"
            );
            // The variable's name is not a secret.
            assert_eq!(
                shown["rag"]["store"]["postgres"]["password_env"],
                "ORKEON_DB_PASSWORD_VAR"
            );
            Ok(())
        });
    }

    #[test]
    fn redaction_hides_secret_values_but_not_variable_names() {
        let mut value =
            serde_json::json!({"a": {"api_key": "sk-1", "api_key_env": "OPENAI_API_KEY"}});
        redact(&mut value);
        assert_eq!(value["a"]["api_key"], "***");
        assert_eq!(value["a"]["api_key_env"], "OPENAI_API_KEY");
    }
}
