//! The library facade's registrations reach every surface that selects by name: a chat model
//! registered with `orkeon::Builder::chat_model` passes a crew file's checks
//! (`llm: { provider: … }`), runs the crew's agent with its knowledge block, and is refused by
//! name where it is not registered.

use std::sync::{Arc, Mutex};

use orkeon::{ChatError, ChatModel, ChatRequest, ChatResponse};

/// Records the prompts it is sent and answers by citing the first passage.
struct Recorder {
    prompts: Arc<Mutex<Vec<String>>>,
}

#[orkeon::async_trait]
impl ChatModel for Recorder {
    fn name(&self) -> String {
        "recorder".into()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        let prompt: Vec<String> = request.messages.iter().map(|m| m.content.clone()).collect();
        self.prompts.lock().unwrap().push(prompt.join("\n"));
        Ok(ChatResponse {
            content: "Headphones may be returned within 30 days [1].".into(),
            tool_calls: Vec::new(),
            model: "recorder".into(),
            usage: Default::default(),
        })
    }
}

const CREW: &str = r#"
name: desk
llm: { provider: recorder }
rag:
  collections:
    kb: { sources: [returns.md] }
agents:
  clerk: { role: Support clerk, goal: Answer from the knowledge base, knowledge: [kb] }
tasks:
  - { name: answer, agent: clerk, description: "Answer: {{ inputs.question }}",
      expected_output: A cited answer }
"#;

fn folders() -> (tempfile::TempDir, tempfile::TempDir, orkeon::Config) {
    let (data, crews) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(
        crews.path().join("returns.md"),
        "# Returns\n\nHeadphones may be returned within 30 days of delivery.\n",
    )
    .unwrap();
    std::fs::write(crews.path().join("desk.yaml"), CREW).unwrap();
    let config = orkeon::Config {
        data_dir: data.path().to_path_buf(),
        crews_dir: crews.path().to_path_buf(),
        ..orkeon::Config::default()
    };
    (data, crews, config)
}

#[tokio::test]
async fn a_registered_chat_model_runs_a_crew_that_names_it() {
    let (_data, crews, config) = folders();
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let recorded = prompts.clone();
    let host = orkeon::Knowledge::builder(config)
        .chat_model("Recorder", move |llm| {
            assert_eq!(
                llm.provider.as_deref(),
                Some("recorder"),
                "the crew's settings"
            );
            Ok(Arc::new(Recorder {
                prompts: recorded.clone(),
            }) as Arc<dyn ChatModel>)
        })
        .start()
        .await
        .unwrap();
    let done = host
        .run_crew_file(
            crews.path().join("desk.yaml"),
            [("question", "How long can I return headphones?")],
        )
        .await
        .unwrap();
    assert!(done.succeeded(), "{:?}", done.run.reason);
    assert_eq!(
        done.run.final_output.as_deref(),
        Some("Headphones may be returned within 30 days [1].")
    );
    let task = &done.run.tasks[0];
    assert_eq!(task.cited, 1, "{task:?}");
    assert!(
        task.dangling_markers.is_empty() && !task.uncited,
        "{task:?}"
    );
    let prompts = prompts.lock().unwrap().clone();
    assert!(
        prompts
            .iter()
            .any(|p| p.contains("within 30 days of delivery")),
        "the agent's knowledge block reached the registered model: {prompts:?}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn without_the_registration_the_crew_is_refused_naming_the_provider() {
    let (_data, crews, config) = folders();
    let host = orkeon::Host::start(config).await.unwrap();
    let error = host
        .run_crew_file(crews.path().join("desk.yaml"), [("question", "Returns?")])
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("desk.yaml"), "{error}");
    assert!(error.contains("unknown LLM provider `recorder`"), "{error}");
    assert!(error.contains("extractive, openai"), "{error}");
    host.shutdown().await;
}
