//! The daemon's answers to the crew schema's [`SettingsChecks`]: a crew file's `llm:` maps are
//! checked against the configured LLM settings (provider names, keys, what the provider
//! needs), its `chunking:` maps against the chunkers (strategy names, numbers in range), and its
//! profile names against the profiles this daemon serves. `orkeon crew check` and the crews
//! watcher use the same checks, so a typo is caught before any kickoff.

use orkeon_agents::llm::{LlmSettings, check_overrides};
use orkeon_crews::spec::{SettingProblem, SettingsChecks, suggest};
use orkeon_knowledge::chunk::{ChunkError, KNOWN_CHUNKERS, canonical_strategy, validate_settings};
use orkeon_knowledge::query::options::PRESET_PROFILES;
use orkeon_knowledge::query::profiles::DEFAULT_PROFILE;
use orkeon_knowledge::settings::ChunkingSettings;

use crate::chat_models;
use crate::config::Config;

/// Host checks built from one configuration.
pub struct HostChecks {
    llm: LlmSettings,
    /// The LLM provider names a crew's `llm.provider` may name.
    providers: Vec<String>,
    profiles: Vec<String>,
}

impl HostChecks {
    /// Checks against `config` and the built-in LLM providers.
    pub fn new(config: &Config) -> Self {
        let mut profiles: Vec<String> = PRESET_PROFILES.iter().map(|p| p.to_string()).collect();
        profiles.push(DEFAULT_PROFILE.to_string());
        Self {
            llm: config.llm.clone(),
            providers: chat_models::builtin().known(),
            profiles,
        }
    }

    /// The same checks with `providers` as the known LLM providers (a host's registered ones
    /// included).
    pub fn with_providers(mut self, providers: Vec<String>) -> Self {
        self.providers = providers;
        self
    }
}

impl SettingsChecks for HostChecks {
    fn llm(&self, value: &serde_json::Value) -> Result<(), SettingProblem> {
        check_overrides(&self.llm, value, &self.providers)
            .map(|_| ())
            .map_err(|e| SettingProblem {
                path: e.path,
                message: e.message,
                hint: e.hint,
            })
    }

    fn chunking(&self, value: &serde_json::Value) -> Result<(), SettingProblem> {
        let problem = |key: &str, message: String, hint: Option<String>| SettingProblem {
            path: vec![key.to_string()],
            message,
            hint,
        };
        let Some(map) = value.as_object() else {
            return Err(SettingProblem {
                path: Vec::new(),
                message: "must be a map of settings".into(),
                hint: None,
            });
        };
        // The keys a `chunking:` map may hold: the settings' own fields.
        let defaults = serde_json::to_value(ChunkingSettings::default()).unwrap_or_default();
        let known: Vec<&str> = defaults
            .as_object()
            .map(|fields| fields.keys().map(String::as_str).collect())
            .unwrap_or_default();
        // Key by key first, so an unknown key or a value of the wrong type names its key.
        for (key, item) in map {
            if !known.contains(&key.as_str()) {
                return Err(problem(
                    key,
                    format!("unknown key '{key}'"),
                    suggest::hint(key, known.iter().copied(), "keys"),
                ));
            }
            let single = serde_json::json!({ key: item });
            if let Err(e) = serde_json::from_value::<ChunkingSettings>(single) {
                return Err(problem(key, format!("invalid value: {e}"), None));
            }
        }
        let settings: ChunkingSettings = serde_json::from_value(value.clone())
            .map_err(|e| problem("", format!("invalid settings: {e}"), None))?;
        if canonical_strategy(&settings.strategy).is_none() {
            return Err(problem(
                "strategy",
                format!("unknown chunking strategy '{}'", settings.strategy),
                suggest::hint(
                    &settings.strategy,
                    KNOWN_CHUNKERS.iter().copied(),
                    "strategies",
                ),
            ));
        }
        match validate_settings(&settings) {
            Ok(()) => Ok(()),
            Err(ChunkError::OutOfRange { key, message }) => Err(problem(key, message, None)),
            Err(other) => Err(problem("", other.to_string(), None)),
        }
    }

    fn profiles(&self) -> Vec<String> {
        self.profiles.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checks() -> HostChecks {
        HostChecks::new(&Config::default())
    }

    #[test]
    fn chunking_problems_name_their_key() {
        let c = checks();
        assert!(
            c.chunking(&json!({"strategy": "sentence", "max_tokens": 128}))
                .is_ok()
        );
        let e = c.chunking(&json!({"strategy": "recursiv"})).unwrap_err();
        assert_eq!(e.path, ["strategy"]);
        assert_eq!(e.hint.as_deref(), Some("did you mean 'recursive'?"));
        let e = c
            .chunking(&json!({"max_tokens": 512, "overlap": 300}))
            .unwrap_err();
        assert_eq!(e.path, ["overlap"]);
        let e = c.chunking(&json!({"max_tokens": "lots"})).unwrap_err();
        assert_eq!(e.path, ["max_tokens"]);
        let e = c.chunking(&json!({"max_token": 100})).unwrap_err();
        assert_eq!(e.path, ["max_token"]);
        assert_eq!(e.hint.as_deref(), Some("did you mean 'max_tokens'?"));
    }

    #[test]
    fn llm_problems_and_profiles() {
        let c = checks();
        assert!(c.llm(&json!({"provider": "extractive"})).is_ok());
        let e = c.llm(&json!({"provider": "extractiv"})).unwrap_err();
        assert_eq!(e.path, ["provider"]);
        let e = c.llm(&json!({"openai": {"modle": "x"}})).unwrap_err();
        assert_eq!(e.path, ["openai", "modle"]);
        let profiles = c.profiles();
        for p in [
            "fast",
            "balanced",
            "quality",
            "corrective",
            "adaptive",
            "default",
        ] {
            assert!(
                profiles.iter().any(|k| k == p),
                "{p} missing from {profiles:?}"
            );
        }
    }
}
