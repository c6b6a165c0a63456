//! What a task becomes when the OpenAI-compatible server answers in the shapes real servers
//! use (see `agents/src/llm/openai.rs`, "What a server's answer becomes"): the real
//! [`AgentTaskRunner`] and [`OpenAiChatModel`] over HTTP against
//! `orkeon_testkit::ScriptedLlmServer`, so it runs in CI.

use std::sync::Arc;

use orkeon_agents::llm::OpenAiChatSettings;
use orkeon_agents::llm::openai::{OpenAiChatModel, TRUNCATION_NOTE};
use orkeon_agents::prompts::PromptTemplates;
use orkeon_agents::runner::AgentTaskRunner;
use orkeon_crews::ports::{AgentProfile, ChatError, TaskAssignment, TaskError, TaskRunner};
use orkeon_testkit::{ScriptReply, ScriptRule, ScriptedLlmServer};

fn runner(server: &ScriptedLlmServer) -> AgentTaskRunner {
    let chat = OpenAiChatModel::new(&OpenAiChatSettings {
        base_url: server.base_url(),
        model: "replies".into(),
        api_key_env: String::new(),
        timeout_ms: 5_000,
        max_retries: 0,
        ..OpenAiChatSettings::default()
    })
    .expect("settings are valid");
    AgentTaskRunner::new(
        Arc::new(chat),
        None,
        Arc::new(PromptTemplates::load(None).expect("embedded templates")),
    )
}

/// A task for an agent with `rag_search` and no knowledge attached (the tool answers errors,
/// which is all these tests need from it).
fn assignment() -> TaskAssignment {
    TaskAssignment {
        run_id: "run-replies".into(),
        crew: "support".into(),
        agent: AgentProfile {
            name: "support".into(),
            role: "Support agent".into(),
            goal: "Answer the customer".into(),
            backstory: None,
            knowledge: vec![],
            tools: vec!["rag_search".into()],
            max_passages: None,
        },
        task_name: "answer".into(),
        description: "How long do refunds take?".into(),
        expected_output: "A short answer".into(),
        inputs: Default::default(),
        context: vec![],
        run_passages: vec![],
    }
}

fn message(content: Option<&str>, calls: &[(&str, &str)], finish: &str) -> ScriptReply {
    ScriptReply::Message {
        content: content.map(str::to_owned),
        tool_calls: calls
            .iter()
            .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()))
            .collect(),
        finish_reason: finish.to_owned(),
    }
}

/// The `tool` message of a recorded request.
fn tool_message(request: &serde_json::Value) -> serde_json::Value {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_else(|| panic!("no tool message in {request}"))
}

#[tokio::test]
async fn malformed_tool_arguments_go_back_to_the_model_as_an_error_and_it_answers() {
    let server = ScriptedLlmServer::start(vec![
        ScriptRule::once(message(
            None,
            &[("rag_search", r#"{"query": "refunds", }"#)],
            "tool_calls",
        )),
        ScriptRule::once(ScriptReply::Text(
            "I could not search the knowledge base; support will follow up.".into(),
        )),
    ])
    .await
    .unwrap();
    let output = runner(&server).run_task(assignment()).await.unwrap();
    assert_eq!(
        output.output,
        "I could not search the knowledge base; support will follow up."
    );
    assert!(output.uncited && output.citations.is_empty());
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let tool = tool_message(&requests[1]);
    let text = tool["content"].as_str().unwrap();
    assert!(
        text.contains("rag_search: the arguments are not valid") && text.contains("JSON object"),
        "{text}"
    );
    assert_eq!(tool["tool_call_id"], "call_scripted_1_0");
}

#[tokio::test]
async fn content_beside_tool_calls_stays_in_the_conversation_and_the_next_answer_is_the_output() {
    let server = ScriptedLlmServer::start(vec![
        ScriptRule::once(message(
            Some("Let me search for that."),
            &[("rag_search", r#"{"query": "refund time"}"#)],
            "tool_calls",
        )),
        ScriptRule::once(ScriptReply::Text("Refunds take 14 days.".into())),
    ])
    .await
    .unwrap();
    let output = runner(&server).run_task(assignment()).await.unwrap();
    assert_eq!(output.output, "Refunds take 14 days.");
    let second = &server.requests()[1];
    let assistant = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .cloned()
        .expect("the assistant turn is sent back");
    assert_eq!(assistant["content"], "Let me search for that.");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        r#"{"query": "refund time"}"#
    );
    assert!(tool_message(second)["content"].is_string());
}

#[tokio::test]
async fn an_empty_answer_fails_the_task_naming_the_endpoint() {
    let server = ScriptedLlmServer::start(vec![ScriptRule::once(message(None, &[], "stop"))])
        .await
        .unwrap();
    let err = runner(&server).run_task(assignment()).await.unwrap_err();
    assert!(
        matches!(&err, TaskError::Chat(ChatError::InvalidResponse(text))
            if text.contains("empty message") && text.contains(&server.base_url())),
        "{err}"
    );
}

#[tokio::test]
async fn a_cut_off_answer_is_the_tasks_output_trimmed_and_marked() {
    let server = ScriptedLlmServer::start(vec![ScriptRule::once(message(
        Some("Refunds take 14 days. You can start one from your acc"),
        &[],
        "length",
    ))])
    .await
    .unwrap();
    let output = runner(&server).run_task(assignment()).await.unwrap();
    assert_eq!(
        output.output,
        format!("Refunds take 14 days.{TRUNCATION_NOTE}")
    );
}
