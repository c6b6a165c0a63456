//! The LLM providers by name (`llm.provider`, and a crew file's `llm: { provider: … }`): the
//! built-in `extractive` and `openai`, plus the chat models a host program registers
//! (`orkeon::Builder::chat_model`). Crew runs, query generation and evaluations all build
//! their model here, so a registered provider is selected by configuration like a built-in.

use std::sync::Arc;

/// The `llm:` settings a [`ChatModelBuilder`] gets.
pub use orkeon_agents::llm::LlmSettings;
use orkeon_agents::llm::UnconfiguredChatModel;
use orkeon_agents::llm::extractive::ExtractiveModel;
use orkeon_agents::llm::openai::OpenAiChatModel;
use orkeon_crews::ports::{ChatError, ChatModel};
use orkeon_knowledge::registry::{Label, Registry};

/// Builds a provider's chat model from the resolved `llm:` settings (the daemon's, with a
/// crew file's overrides applied).
pub type ChatModelBuilder =
    Arc<dyn Fn(&LlmSettings) -> Result<Arc<dyn ChatModel>, ChatError> + Send + Sync>;

/// The chat model builders by provider name (a [`Registry`]: case-insensitive names; a later
/// registration of a name replaces the earlier one).
pub type ChatModels = Registry<ChatModelBuilder>;

const CHAT_MODEL_LABEL: Label = Label {
    kind: "LLM provider",
    plural: "LLM providers",
    key: Some("llm.provider"),
    advice: None,
};

/// The built-in providers: `extractive` (offline) and `openai` (any OpenAI-compatible
/// endpoint).
pub fn builtin() -> ChatModels {
    let models = Registry::new(&CHAT_MODEL_LABEL);
    let extractive: ChatModelBuilder =
        Arc::new(|settings| Ok(Arc::new(ExtractiveModel::new(&settings.extractive)) as _));
    let openai: ChatModelBuilder =
        Arc::new(|settings| Ok(Arc::new(OpenAiChatModel::new(&settings.openai)?) as _));
    models.register("extractive", &[], extractive);
    models.register("openai", &[], openai);
    models
}

/// The chat model `settings` select from `models`. No provider configured: a model whose every
/// call fails saying how to configure one; an unknown name: an error listing the known ones.
pub fn build(models: &ChatModels, settings: &LlmSettings) -> Result<Arc<dyn ChatModel>, ChatError> {
    let Some(provider) = settings.provider.as_deref() else {
        return Ok(Arc::new(UnconfiguredChatModel));
    };
    let builder = models
        .get(provider)
        .map_err(|unknown| ChatError::NotConfigured(unknown.to_string()))?;
    builder(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use orkeon_crews::ports::{ChatRequest, ChatResponse};

    struct Fixed;

    #[async_trait]
    impl ChatModel for Fixed {
        fn name(&self) -> String {
            "fixed".into()
        }
        async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ChatError> {
            Ok(ChatResponse {
                content: "fixed".into(),
                tool_calls: Vec::new(),
                model: "fixed".into(),
                usage: Default::default(),
            })
        }
    }

    fn with_provider(name: &str) -> LlmSettings {
        LlmSettings {
            provider: Some(name.into()),
            ..LlmSettings::default()
        }
    }

    #[test]
    fn builtins_are_selected_by_name_case_insensitively() {
        let models = builtin();
        assert_eq!(models.known(), ["extractive", "openai"]);
        let model = build(&models, &with_provider("Extractive")).unwrap();
        assert_eq!(model.name(), "extractive");
        let none = build(&models, &LlmSettings::default()).unwrap();
        assert_eq!(none.name(), "unconfigured");
    }

    #[test]
    fn an_unknown_provider_names_the_key_the_known_ones_and_the_nearest() {
        let err = build(&builtin(), &with_provider("extractiv"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("unknown LLM provider 'extractiv' (llm.provider)"),
            "{err}"
        );
        assert!(
            err.contains("known LLM providers: extractive, openai"),
            "{err}"
        );
        assert!(err.contains("did you mean 'extractive'?"), "{err}");
    }

    #[test]
    fn a_registered_provider_is_built_with_the_settings() {
        let models = builtin();
        models.register(
            "fixed",
            &["constant"],
            Arc::new(|_| Ok(Arc::new(Fixed) as _)),
        );
        assert_eq!(models.known(), ["extractive", "fixed", "openai"]);
        assert_eq!(
            build(&models, &with_provider("constant")).unwrap().name(),
            "fixed"
        );
    }
}
