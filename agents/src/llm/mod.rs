//! LLM settings (the `llm:` configuration section and crew files' `llm:` maps) and the factory
//! that turns them into a [`ChatModel`].
//!
//! Providers: `extractive` (the offline [`extractive::ExtractiveModel`]) and `openai` (any
//! OpenAI-compatible chat-completions endpoint, [`openai::OpenAiChatModel`]). With no provider
//! configured the factory returns a model whose every call fails with
//! [`ChatError::NotConfigured`] explaining how to set one.

pub mod extractive;
pub mod openai;

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse};
use serde::{Deserialize, Serialize};

/// The provider names [`build_chat_model`] knows.
pub const KNOWN_PROVIDERS: &[&str] = &["extractive", "openai"];

/// The `llm:` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    /// `extractive` or `openai`; `None` means no LLM is configured.
    pub provider: Option<String>,
    pub openai: OpenAiChatSettings,
    pub extractive: ExtractiveSettings,
}

/// Settings of an OpenAI-compatible chat-completions endpoint (`llm.openai.*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiChatSettings {
    /// Base URL up to and including the API version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable holding the API key. Empty: send no `Authorization`
    /// header (local servers that need no key).
    pub api_key_env: String,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Per-call timeout (whole request for `chat`, idle time between chunks for streaming).
    pub timeout_ms: u64,
    /// Retries after the first attempt on 429, 5xx, transport errors and timeouts.
    pub max_retries: u32,
    /// Whether the endpoint supports `response_format: {"type": "json_object"}`.
    pub json_mode: bool,
    /// Label used in traces instead of `openai:<model>`.
    pub label: Option<String>,
}

impl Default for OpenAiChatSettings {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".to_owned(),
            model: "gpt-4o-mini".to_owned(),
            api_key_env: "OPENAI_API_KEY".to_owned(),
            temperature: None,
            max_tokens: None,
            timeout_ms: 60_000,
            max_retries: 3,
            json_mode: true,
            label: None,
        }
    }
}

/// Settings of the offline extractive model (`llm.extractive.*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractiveSettings {
    /// How many sentences an answer quotes at most.
    pub max_sentences: usize,
}

impl Default for ExtractiveSettings {
    fn default() -> Self {
        Self { max_sentences: 3 }
    }
}

/// Builds the chat model the settings select.
pub fn build_chat_model(settings: &LlmSettings) -> Result<Arc<dyn ChatModel>, ChatError> {
    let Some(provider) = settings.provider.as_deref() else {
        return Ok(Arc::new(UnconfiguredChatModel));
    };
    match provider.trim().to_ascii_lowercase().as_str() {
        "extractive" => Ok(Arc::new(extractive::ExtractiveModel::new(
            &settings.extractive,
        ))),
        "openai" => Ok(Arc::new(openai::OpenAiChatModel::new(&settings.openai)?)),
        other => Err(ChatError::NotConfigured(format!(
            "unknown LLM provider `{other}` in `llm.provider`; known providers: {}",
            KNOWN_PROVIDERS.join(", ")
        ))),
    }
}

/// A problem with an `llm:` map: the key it concerns (path below `llm`; empty for the map
/// itself), what is wrong, and the nearest valid name when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LlmSettingsError {
    pub path: Vec<String>,
    pub message: String,
    pub hint: Option<String>,
}

impl LlmSettingsError {
    fn at(path: &[String], message: String) -> Self {
        Self {
            path: path.to_vec(),
            message,
            hint: None,
        }
    }
}

/// Overlays a crew file's free-form `llm:` map on the daemon's settings.
///
/// Objects merge key by key (so `{openai: {model: x}}` keeps the daemon's base URL); any other
/// value replaces. An unknown key or a value of the wrong type is an error naming the key
/// (`llm.openai.temprature`).
pub fn settings_with_overrides(
    base: &LlmSettings,
    overrides: &serde_json::Value,
) -> Result<LlmSettings, LlmSettingsError> {
    let overrides = match overrides {
        serde_json::Value::Null => return Ok(base.clone()),
        serde_json::Value::Object(map) => map,
        other => {
            return Err(LlmSettingsError::at(
                &[],
                format!(
                    "`llm` must be a map of settings (provider, openai, extractive), found {}",
                    json_kind(other)
                ),
            ));
        }
    };
    let base_value = serde_json::to_value(base).map_err(|e| {
        LlmSettingsError::at(
            &[],
            format!("the base `llm` settings could not be serialised: {e}"),
        )
    })?;

    let mut leaves = Vec::new();
    collect_override_leaves(&base_value, overrides, &mut Vec::new(), &mut leaves)?;

    let mut merged = base_value.clone();
    for (path, value) in &leaves {
        // Check each overridden leaf alone first, so a type error names its key.
        let mut single = base_value.clone();
        set_path(&mut single, path, value.clone());
        if let Err(e) = serde_json::from_value::<LlmSettings>(single) {
            return Err(LlmSettingsError::at(
                path,
                format!("invalid value for `llm.{}`: {e}", path.join(".")),
            ));
        }
        set_path(&mut merged, path, value.clone());
    }
    serde_json::from_value(merged)
        .map_err(|e| LlmSettingsError::at(&[], format!("invalid `llm` settings: {e}")))
}

/// What `crew check` and the crews watcher ask of a crew's `llm:` map: it merges onto the
/// daemon's settings ([`settings_with_overrides`]), names one of `providers` (the host's
/// provider names, lowercase: [`KNOWN_PROVIDERS`] plus any it registered), and gives that
/// provider what it needs (`openai`: an http(s) `base_url` and a `model`).
pub fn check_overrides(
    base: &LlmSettings,
    overrides: &serde_json::Value,
    providers: &[String],
) -> Result<LlmSettings, LlmSettingsError> {
    let settings = settings_with_overrides(base, overrides)?;
    let Some(provider) = settings.provider.as_deref() else {
        return Ok(settings);
    };
    let canonical = provider.trim().to_ascii_lowercase();
    if !providers.contains(&canonical) {
        return Err(LlmSettingsError {
            path: vec!["provider".into()],
            message: format!(
                "unknown LLM provider `{provider}`; known providers: {}",
                providers.join(", ")
            ),
            hint: orkeon_crews::spec::suggest::hint(
                provider,
                providers.iter().map(String::as_str),
                "providers",
            ),
        });
    }
    if canonical == "openai" {
        let at = |key: &str| vec!["openai".to_string(), key.to_string()];
        let url = settings.openai.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(LlmSettingsError {
                path: at("base_url"),
                message: format!(
                    "`llm.openai.base_url` must be an http(s) URL up to the API version, found `{url}`"
                ),
                hint: Some("e.g. `http://127.0.0.1:8080/v1` or `https://api.openai.com/v1`".into()),
            });
        }
        if settings.openai.model.trim().is_empty() {
            return Err(LlmSettingsError {
                path: at("model"),
                message: "`llm.openai.model` is empty; name the model the server serves".into(),
                hint: None,
            });
        }
    }
    Ok(settings)
}

/// Walks `overrides` against the shape of the serialised settings, collecting the leaves to set
/// and rejecting keys the settings do not have.
fn collect_override_leaves(
    shape: &serde_json::Value,
    overrides: &serde_json::Map<String, serde_json::Value>,
    path: &mut Vec<String>,
    leaves: &mut Vec<(Vec<String>, serde_json::Value)>,
) -> Result<(), LlmSettingsError> {
    let display = |path: &[String]| {
        std::iter::once("llm")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".")
    };
    let serde_json::Value::Object(shape_map) = shape else {
        return Err(LlmSettingsError::at(
            path,
            format!("`{}` is not a map of settings", display(path)),
        ));
    };
    for (key, value) in overrides {
        path.push(key.clone());
        let Some(shape_child) = shape_map.get(key) else {
            let known: Vec<&str> = shape_map.keys().map(String::as_str).collect();
            return Err(LlmSettingsError {
                message: format!(
                    "unknown key `{}`; known keys there: {}",
                    display(path),
                    known.join(", ")
                ),
                hint: orkeon_crews::spec::suggest::nearest(key, known.iter().copied())
                    .map(|near| format!("did you mean '{near}'?")),
                path: path.clone(),
            });
        };
        match (shape_child, value) {
            (serde_json::Value::Object(_), serde_json::Value::Object(child)) => {
                collect_override_leaves(shape_child, child, path, leaves)?;
            }
            (serde_json::Value::Object(_), other) => {
                return Err(LlmSettingsError::at(
                    path,
                    format!(
                        "`{}` must be a map of settings, found {}",
                        display(path),
                        json_kind(other)
                    ),
                ));
            }
            _ => leaves.push((path.clone(), value.clone())),
        }
        path.pop();
    }
    Ok(())
}

fn set_path(root: &mut serde_json::Value, path: &[String], value: serde_json::Value) {
    let mut node = root;
    for key in &path[..path.len().saturating_sub(1)] {
        node = match node {
            serde_json::Value::Object(map) => map
                .entry(key.clone())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new())),
            _ => return,
        };
    }
    if let (serde_json::Value::Object(map), Some(last)) = (node, path.last()) {
        map.insert(last.clone(), value);
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
    }
}

/// The model used when no provider is configured: every call fails saying how to set one.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnconfiguredChatModel;

/// What [`UnconfiguredChatModel`] answers.
pub const NOT_CONFIGURED_HELP: &str = "set `llm.provider: extractive` for the offline extractive \
model, or `llm.provider: openai` with `llm.openai.base_url`, `llm.openai.model` and \
`llm.openai.api_key_env` (the environment variable holding the key) for an OpenAI-compatible \
endpoint; the environment variable ORKEON_LLM__PROVIDER sets the provider too";

#[async_trait]
impl ChatModel for UnconfiguredChatModel {
    fn name(&self) -> String {
        "unconfigured".to_owned()
    }

    async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ChatError> {
        Err(ChatError::NotConfigured(NOT_CONFIGURED_HELP.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::ports::ChatMessage;
    use serde_json::json;

    #[tokio::test]
    async fn no_provider_fails_every_call_saying_how_to_configure() {
        let model = build_chat_model(&LlmSettings::default()).unwrap();
        let err = model
            .chat(ChatRequest::new(vec![ChatMessage::user("hi")]))
            .await
            .unwrap_err();
        assert!(matches!(err, ChatError::NotConfigured(_)));
        let text = err.to_string();
        assert!(text.contains("llm.provider: extractive"), "{text}");
        assert!(text.contains("ORKEON_LLM__PROVIDER"), "{text}");
    }

    #[test]
    fn unknown_provider_lists_known_ones() {
        let settings = LlmSettings {
            provider: Some("anthropic".into()),
            ..LlmSettings::default()
        };
        let err = build_chat_model(&settings).err().unwrap().to_string();
        assert!(
            err.contains("`anthropic`") && err.contains("extractive, openai"),
            "{err}"
        );
    }

    #[test]
    fn extractive_provider_builds_the_extractive_model() {
        let settings = LlmSettings {
            provider: Some("Extractive".into()),
            ..LlmSettings::default()
        };
        assert_eq!(build_chat_model(&settings).unwrap().name(), "extractive");
    }

    #[test]
    fn overrides_merge_nested_maps_and_keep_other_keys() {
        let base = LlmSettings {
            provider: Some("openai".into()),
            openai: OpenAiChatSettings {
                base_url: "http://localhost:9/v1".into(),
                ..OpenAiChatSettings::default()
            },
            ..LlmSettings::default()
        };
        let merged = settings_with_overrides(
            &base,
            &json!({"openai": {"model": "small", "temperature": 0.2}, "extractive": {"max_sentences": 5}}),
        )
        .unwrap();
        assert_eq!(merged.openai.base_url, "http://localhost:9/v1");
        assert_eq!(merged.openai.model, "small");
        assert_eq!(merged.openai.temperature, Some(0.2));
        assert_eq!(merged.extractive.max_sentences, 5);
        assert_eq!(merged.provider.as_deref(), Some("openai"));

        let switched = settings_with_overrides(&base, &json!({"provider": "extractive"})).unwrap();
        assert_eq!(switched.provider.as_deref(), Some("extractive"));
        assert_eq!(settings_with_overrides(&base, &json!(null)).unwrap(), base);
    }

    #[test]
    fn overrides_name_the_bad_key() {
        let base = LlmSettings::default();
        let err =
            settings_with_overrides(&base, &json!({"openai": {"temprature": 0.1}})).unwrap_err();
        assert!(err.message.contains("`llm.openai.temprature`"), "{err}");
        assert!(
            err.message.contains("temperature"),
            "lists known keys: {err}"
        );
        assert_eq!(err.path, ["openai", "temprature"]);
        assert_eq!(err.hint.as_deref(), Some("did you mean 'temperature'?"));

        let err =
            settings_with_overrides(&base, &json!({"openai": {"max_tokens": "many"}})).unwrap_err();
        assert!(err.message.contains("`llm.openai.max_tokens`"), "{err}");
        assert_eq!(err.path, ["openai", "max_tokens"]);

        let err = settings_with_overrides(&base, &json!({"openai": "gpt"})).unwrap_err();
        assert!(
            err.message.contains("`llm.openai`") && err.message.contains("a string"),
            "{err}"
        );
        assert_eq!(err.path, ["openai"]);

        let err = settings_with_overrides(&base, &json!(["extractive"])).unwrap_err();
        assert!(err.message.contains("a list"), "{err}");
        assert!(err.path.is_empty());
    }

    #[test]
    fn checks_name_unknown_providers_and_missing_openai_settings() {
        let base = LlmSettings::default();
        let known: Vec<String> = KNOWN_PROVIDERS.iter().map(|p| p.to_string()).collect();
        let check_overrides = |base: &LlmSettings, value: &serde_json::Value| {
            super::check_overrides(base, value, &known)
        };
        let err = check_overrides(&base, &json!({"provider": "opena"})).unwrap_err();
        assert_eq!(err.path, ["provider"]);
        assert_eq!(err.hint.as_deref(), Some("did you mean 'openai'?"));
        let err = check_overrides(
            &base,
            &json!({"provider": "openai", "openai": {"base_url": "localhost:8080"}}),
        )
        .unwrap_err();
        assert_eq!(err.path, ["openai", "base_url"]);
        let err = check_overrides(
            &base,
            &json!({"provider": "openai", "openai": {"model": " "}}),
        )
        .unwrap_err();
        assert_eq!(err.path, ["openai", "model"]);
        let ok = check_overrides(&base, &json!({"provider": "Extractive"})).unwrap();
        assert_eq!(ok.provider.as_deref(), Some("Extractive"));
    }

    #[test]
    fn settings_deserialize_with_defaults_and_reject_unknown_fields() {
        let s: LlmSettings =
            serde_json::from_value(json!({"provider": "openai", "openai": {"model": "m"}}))
                .unwrap();
        assert_eq!(s.openai.api_key_env, "OPENAI_API_KEY");
        assert_eq!(s.openai.base_url, "https://api.openai.com/v1");
        assert_eq!(s.extractive.max_sentences, 3);
        assert!(serde_json::from_value::<LlmSettings>(json!({"providr": "openai"})).is_err());
    }
}
