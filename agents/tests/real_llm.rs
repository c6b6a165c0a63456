//! Opt-in: the `openai` provider ([`OpenAiChatModel`]) against a REAL OpenAI-compatible server
//! (llama.cpp's `llama-server`; README "Use a local LLM" has the commands). Set
//! `ORKEON_TEST_LLM_URL` (e.g. `http://127.0.0.1:8089/v1`) and optionally
//! `ORKEON_TEST_LLM_MODEL`; without it every test prints why it is skipped and passes, so CI
//! compiles and runs this file without a server. The crew-level check (the real `orkeon`
//! binary running the support crew on the server) is `tests/real_llm_crew.rs`.
//!
//! The tests assert the client's defined behaviour (see `agents/src/llm/openai.rs`), not that
//! the model is smart: a 135M-parameter model may or may not call an offered tool; either
//! outcome is checked and printed.
//!
//! Run: `ORKEON_TEST_LLM_URL=http://127.0.0.1:8089/v1 cargo test -p orkeon-agents --test
//! real_llm -- --nocapture --test-threads 1`

use std::time::{Duration, Instant};

use futures::StreamExt;
use orkeon_agents::llm::OpenAiChatSettings;
use orkeon_agents::llm::openai::OpenAiChatModel;
use orkeon_agents::prompts::PromptTemplates;
use orkeon_agents::tools::tool_specs;
use orkeon_crews::ports::{
    AgentProfile, ChatMessage, ChatModel, ChatRequest, KnowledgeAttachment, KnowledgeBlock, Role,
    TaskAssignment, ToolCall,
};
use serde_json::Value;

/// The server's base URL and model from the environment, or `None` after printing why the
/// test is skipped.
fn server(test: &str) -> Option<(String, String)> {
    match std::env::var("ORKEON_TEST_LLM_URL") {
        Ok(url) if !url.trim().is_empty() => {
            let model = std::env::var("ORKEON_TEST_LLM_MODEL")
                .ok()
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| "local".to_owned());
            Some((url.trim().to_owned(), model))
        }
        _ => {
            println!(
                "{test}: skipped: set ORKEON_TEST_LLM_URL=http://127.0.0.1:8089/v1 (an \
                 OpenAI-compatible server; see README 'Use a local LLM')"
            );
            None
        }
    }
}

fn model(url: &str, name: &str) -> OpenAiChatModel {
    OpenAiChatModel::new(&OpenAiChatSettings {
        base_url: url.to_owned(),
        model: name.to_owned(),
        api_key_env: String::new(),
        temperature: Some(0.0),
        max_tokens: Some(160),
        // One CPU thread on a small machine: a long prompt takes a while.
        timeout_ms: 300_000,
        max_retries: 1,
        json_mode: false,
        label: None,
    })
    .expect("the test settings are valid")
}

fn question() -> ChatRequest {
    ChatRequest::new(vec![
        ChatMessage::system("You are a helpful assistant. Answer in one short sentence."),
        ChatMessage::user("What is the capital of France?"),
    ])
}

#[tokio::test]
async fn the_openai_provider_answers_a_chat() {
    let Some((url, name)) = server("the_openai_provider_answers_a_chat") else {
        return;
    };
    let chat = model(&url, &name);
    let started = Instant::now();
    let response = chat.chat(question()).await.expect("the server answers");
    println!(
        "answer ({} ms, {} prompt + {} completion tokens, {}): {:?}",
        started.elapsed().as_millis(),
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
        response.model,
        response.content
    );
    assert!(
        !response.content.trim().is_empty(),
        "empty answers are errors"
    );
    assert!(response.model.starts_with("openai:"), "{}", response.model);
    assert!(response.usage.prompt_tokens > 0, "the server reports usage");
    assert!(response.tool_calls.is_empty(), "no tools were offered");
}

#[tokio::test]
async fn an_offered_rag_search_tool_round_trips() {
    let Some((url, name)) = server("an_offered_rag_search_tool_round_trips") else {
        return;
    };
    let chat = model(&url, &name);
    let mut request = ChatRequest::new(vec![
        ChatMessage::system(
            "You are a support agent. Use the rag_search tool to look facts up in the \
             knowledge base before answering.",
        ),
        ChatMessage::user("Search the knowledge base: how long is the warranty on Pebble S?"),
    ]);
    request.tools = tool_specs(&["rag_search".to_owned()]).expect("rag_search is a known tool");
    let response = chat
        .chat(request.clone())
        .await
        .expect("the server answers");
    // The call to answer: the model's own, or (when it answered in text) one made here, so the
    // server still has to accept a conversation with a tool call and its result.
    let call = match response.tool_calls.first() {
        None => {
            println!(
                "outcome: answered in text without calling the tool: {:?}",
                response.content
            );
            assert!(!response.content.trim().is_empty());
            ToolCall {
                id: "call_orkeon_1".into(),
                name: "rag_search".into(),
                arguments: r#"{"query": "Pebble S warranty"}"#.into(),
            }
        }
        Some(call) => {
            println!(
                "outcome: called {} with arguments {} (content beside it: {:?})",
                call.name, call.arguments, response.content
            );
            assert_eq!(call.name, "rag_search", "only rag_search was offered");
            assert!(!call.id.is_empty());
            match serde_json::from_str::<Value>(&call.arguments) {
                Ok(args) => {
                    println!("the arguments parse; query = {}", args["query"]);
                    assert!(args.is_object(), "{args}");
                }
                // Passed on verbatim by definition; the tool tells the model to send JSON.
                Err(e) => println!("the arguments do not parse ({e}); passed on verbatim"),
            }
            call.clone()
        }
    };

    // Round trip: the assistant's tool call and the tool's answer go back; the model answers.
    request.messages.push(ChatMessage {
        role: Role::Assistant,
        content: if response.tool_calls.is_empty() {
            String::new()
        } else {
            response.content.clone()
        },
        tool_call_id: None,
        tool_calls: vec![call.clone()],
    });
    request.messages.push(ChatMessage {
        role: Role::Tool,
        content: "[1] (source: warranty.md) The Pebble S carries a two-year warranty against \
                  manufacturing defects."
            .to_owned(),
        tool_call_id: Some(call.id.clone()),
        tool_calls: Vec::new(),
    });
    let answer = chat
        .chat(request)
        .await
        .expect("the server answers the tool result");
    println!(
        "answer after the tool result: {:?} (tool calls: {})",
        answer.content,
        answer.tool_calls.len()
    );
    assert!(!answer.content.trim().is_empty() || !answer.tool_calls.is_empty());
}

#[tokio::test]
async fn the_answer_streams_in_deltas() {
    let Some((url, name)) = server("the_answer_streams_in_deltas") else {
        return;
    };
    let chat = model(&url, &name);
    let stream = chat
        .chat_stream(question())
        .await
        .expect("the stream opens");
    let deltas: Vec<String> = stream
        .map(|delta| delta.expect("every delta arrives"))
        .collect()
        .await;
    println!("{} deltas: {:?}", deltas.len(), deltas.concat());
    assert!(!deltas.concat().trim().is_empty());
}

/// A support agent's real prompt (system + task with a five-passage knowledge block from the
/// example knowledge base and the `rag_search` tool), as the runner renders it.
fn agent_prompt() -> Vec<ChatMessage> {
    let kb = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/crews/knowledge/support"
    );
    let mut block = KnowledgeBlock::default();
    for (n, file) in [
        "returns-and-refunds.md",
        "warranty.md",
        "shipping.md",
        "faq.md",
        "products.md",
    ]
    .iter()
    .enumerate()
    {
        let text = std::fs::read_to_string(format!("{kb}/{file}")).expect("example knowledge");
        let passage: String = text.chars().take(700).collect();
        block.text.push_str(&format!(
            "[{}] (source: {file}) {}\n",
            n + 1,
            passage.replace('\n', " ")
        ));
    }
    let assignment = TaskAssignment {
        run_id: "real-llm".into(),
        crew: "support".into(),
        agent: AgentProfile {
            name: "support".into(),
            role: "Norrvik Sound customer support agent".into(),
            goal: "Answer the customer's question accurately from the knowledge base, citing \
                   every fact with its [n] marker."
                .into(),
            backstory: None,
            knowledge: vec![KnowledgeAttachment::named("norrvik-kb")],
            tools: vec!["rag_search".into()],
            max_passages: Some(5),
        },
        task_name: "answer".into(),
        description: "Answer the customer: I bought Halo 3 headphones three weeks ago and the \
                      left ear cup crackles. Can I still return them for a refund?"
            .into(),
        expected_output: "A short, friendly answer with [n] citations for every fact.".into(),
        inputs: Default::default(),
        context: vec![],
        run_passages: vec![],
    };
    let tools = tool_specs(&assignment.agent.tools).expect("known tools");
    PromptTemplates::load(None)
        .expect("embedded templates")
        .render_task_with_tools(&assignment, Some(&block), &tools)
        .expect("the prompt renders")
}

/// Prints the throughput of an agent-sized prompt: the provider's usage and wall time, then the
/// server's own `timings` (llama-server reports prompt and generation tokens/s) from a raw
/// request of the same prompt with the prompt cache off. A measurement, not a speed assertion.
#[tokio::test]
async fn an_agent_sized_prompt_reports_its_throughput() {
    let Some((url, name)) = server("an_agent_sized_prompt_reports_its_throughput") else {
        return;
    };
    let messages = agent_prompt();
    let chat = model(&url, &name);
    let started = Instant::now();
    let response = chat
        .chat(ChatRequest::new(messages.clone()))
        .await
        .expect("the provider answers the agent prompt");
    let wall = started.elapsed().as_secs_f64();
    println!(
        "provider: {} prompt + {} completion tokens in {wall:.2} s wall ({:.1} tokens/s overall)",
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
        f64::from(response.usage.prompt_tokens + response.usage.completion_tokens) / wall
    );
    println!("provider answer: {:?}", response.content);
    assert!(response.usage.prompt_tokens > 500, "an agent-sized prompt");
    assert!(!response.content.trim().is_empty());

    let body = serde_json::json!({
        "model": name,
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": 160,
        // Evaluate the whole prompt again instead of reusing the call above.
        "cache_prompt": false,
    });
    let raw: Value = reqwest::Client::new()
        .post(format!("{}/chat/completions", url.trim_end_matches('/')))
        .timeout(Duration::from_secs(300))
        .json(&body)
        .send()
        .await
        .expect("the server answers")
        .json()
        .await
        .expect("the answer is JSON");
    println!("server usage: {}", raw["usage"]);
    match raw.get("timings") {
        Some(t) => println!(
            "server timings: prompt {} tokens at {:.1} tok/s, generation {} tokens at {:.1} tok/s",
            t["prompt_n"],
            t["prompt_per_second"].as_f64().unwrap_or(0.0),
            t["predicted_n"],
            t["predicted_per_second"].as_f64().unwrap_or(0.0)
        ),
        None => println!("the server reports no `timings` (not llama-server?)"),
    }
    println!(
        "finish_reason: {}; answer: {}",
        raw["choices"][0]["finish_reason"], raw["choices"][0]["message"]["content"]
    );
}
