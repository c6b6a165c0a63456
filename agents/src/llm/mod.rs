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

/// Overlays a crew file's free-form `llm:` map on the daemon's settings.
///
/// Objects merge key by key (so `{openai: {model: x}}` keeps the daemon's base URL); any other
/// value replaces. An unknown key or a value of the wrong type is an error naming the key
/// (`llm.openai.temprature`).
pub fn settings_with_overrides(
    base: &LlmSettings,
    overrides: &serde_json::Value,
) -> Result<LlmSettings, String> {
    let overrides = match overrides {
        serde_json::Value::Null => return Ok(base.clone()),
        serde_json::Value::Object(map) => map,
        other => {
            return Err(format!(
                "`llm` must be a map of settings (provider, openai, extractive), found {}",
                json_kind(other)
            ));
        }
    };
    let base_value = serde_json::to_value(base)
        .map_err(|e| format!("the base `llm` settings could not be serialised: {e}"))?;

    let mut leaves = Vec::new();
    collect_override_leaves(&base_value, overrides, "llm", &mut Vec::new(), &mut leaves)?;

    let mut merged = base_value.clone();
    for (path, value) in &leaves {
        // Check each overridden leaf alone first, so a type error names its key.
        let mut single = base_value.clone();
        set_path(&mut single, path, value.clone());
        if let Err(e) = serde_json::from_value::<LlmSettings>(single) {
            return Err(format!("invalid value for `llm.{}`: {e}", path.join(".")));
        }
        set_path(&mut merged, path, value.clone());
    }
    serde_json::from_value(merged).map_err(|e| format!("invalid `llm` settings: {e}"))
}

/// Walks `overrides` against the shape of the serialised settings, collecting the leaves to set
/// and rejecting keys the settings do not have.
fn collect_override_leaves(
    shape: &serde_json::Value,
    overrides: &serde_json::Map<String, serde_json::Value>,
    display_prefix: &str,
    path: &mut Vec<String>,
    leaves: &mut Vec<(Vec<String>, serde_json::Value)>,
) -> Result<(), String> {
    let serde_json::Value::Object(shape_map) = shape else {
        return Err(format!("`{display_prefix}` is not a map of settings"));
    };
    for (key, value) in overrides {
        let Some(shape_child) = shape_map.get(key) else {
            let known: Vec<&str> = shape_map.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown key `{display_prefix}.{key}`; known keys there: {}",
                known.join(", ")
            ));
        };
        path.push(key.clone());
        let child_display = format!("{display_prefix}.{key}");
        match (shape_child, value) {
            (serde_json::Value::Object(_), serde_json::Value::Object(child)) => {
                collect_override_leaves(shape_child, child, &child_display, path, leaves)?;
            }
            (serde_json::Value::Object(_), other) => {
                return Err(format!(
                    "`{child_display}` must be a map of settings, found {}",
                    json_kind(other)
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
        assert!(err.contains("`llm.openai.temprature`"), "{err}");
        assert!(err.contains("temperature"), "lists known keys: {err}");

        let err =
            settings_with_overrides(&base, &json!({"openai": {"max_tokens": "many"}})).unwrap_err();
        assert!(err.contains("`llm.openai.max_tokens`"), "{err}");

        let err = settings_with_overrides(&base, &json!({"openai": "gpt"})).unwrap_err();
        assert!(
            err.contains("`llm.openai`") && err.contains("a string"),
            "{err}"
        );

        let err = settings_with_overrides(&base, &json!(["extractive"])).unwrap_err();
        assert!(err.contains("a list"), "{err}");
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
