//! End to end: the knowledge tools of a crew's agent, run by the real `orkeon crew run` against
//! the test kit's scripted OpenAI-compatible server (real embeddings, real store). The agent
//! calls `rag_ingest` with one new file (relative to the crew's folder), then `rag_search` finds
//! both the new file and the collection's declared sources (nothing was purged), then
//! `rag_eval` evaluates its collection on a golden dataset in the crew's folder and answers the
//! metrics table.

mod support;

use std::fs;

use orkeon_testkit::{ScriptReply, ScriptRule, ScriptedLlmServer};
use serde_json::{Value, json};
use support::{PEBBLE_FAQ as FAQ, orkeon, run_json};

const SHIPPING: &str = "# Shipping\n\nOrders leave the Lyon warehouse within two business \
days. Express delivery costs twelve euros.\n";
const NOTE: &str = "# Lantern recall\n\nThe Lantern desk lamp batch L-42 is recalled: its \
switch overheats. Customers get a free replacement switch kit.\n";

const GOLDEN: &str = r#"name: crew-kb
corpus: ../kb
cases:
  - id: warranty
    question: "How long is the warranty of the Pebble S?"
    relevant: [faq.md]
  - id: shipping
    question: "When do orders leave the warehouse?"
    relevant: [shipping.md]
"#;

fn crew(base_url: &str) -> String {
    format!(
        r#"name: toolsmith
llm:
  provider: openai
  openai: {{ base_url: "{base_url}", model: scripted, api_key_env: "", max_retries: 0, json_mode: false }}
rag:
  collections:
    kb:
      sources: [kb/*.md]
agents:
  support:
    role: Support agent
    goal: Keep the knowledge base current and answer from it
    knowledge: [kb]
    tools: [rag_ingest, rag_search, rag_eval]
tasks:
  - name: answer
    agent: support
    description: "Answer: {{{{ inputs.question }}}}"
    expected_output: One sentence with [n] citations
"#
    )
}

fn tool_call(name: &str, arguments: Value) -> ScriptRule {
    ScriptRule::once(ScriptReply::ToolCall {
        name: name.into(),
        arguments,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rag_ingest_keeps_other_sources_and_rag_eval_returns_metrics() {
    let llm = ScriptedLlmServer::start(vec![
        tool_call(
            "rag_ingest",
            json!({"collection": "kb", "sources": ["notes/lantern.md"]}),
        ),
        tool_call(
            "rag_search",
            json!({"query": "Lantern lamp recall switch kit"}),
        ),
        tool_call(
            "rag_search",
            json!({"query": "Pebble S warranty manufacturing defects"}),
        ),
        tool_call("rag_eval", json!({"dataset": "eval/golden.yaml"})),
        ScriptRule::once(ScriptReply::Text(
            "The Lantern batch L-42 is recalled [1].".into(),
        )),
    ])
    .await
    .expect("scripted LLM server");
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    for (path, text) in [
        ("kb/faq.md", FAQ),
        ("kb/shipping.md", SHIPPING),
        ("notes/lantern.md", NOTE),
        ("eval/golden.yaml", GOLDEN),
    ] {
        let path = crews.join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }
    fs::write(crews.join("toolsmith.yaml"), crew(&llm.base_url())).expect("write");

    // Run from another directory: the tools must resolve against the crew's folder.
    let elsewhere = work.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).expect("mkdir");
    let mut cmd = orkeon(&elsewhere, &work.path().join("data"));
    cmd.args(["--json", "crew", "run"])
        .arg(crews.join("toolsmith.yaml"))
        .args(["--input", "question=Is the Lantern lamp recalled?"]);
    let result = tokio::task::spawn_blocking(move || run_json(&mut cmd))
        .await
        .expect("crew run");
    assert!(
        matches!(
            result["run"]["state"].as_str(),
            Some("finished" | "degraded")
        ),
        "{result}"
    );

    // The agent's requests (the groundedness judge of its cited answer asks the LLM too).
    let requests: Vec<Value> = llm
        .requests()
        .into_iter()
        .filter(|r| !r.to_string().contains("Answer to check"))
        .collect();
    assert_eq!(requests.len(), 5, "four tool rounds and the answer");
    let messages = requests[4]["messages"].as_array().expect("messages");
    let tool_answers: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().expect("content"))
        .collect();
    assert_eq!(tool_answers.len(), 4, "{messages:?}");

    let ingest: Value = serde_json::from_str(tool_answers[0]).expect("ingest status JSON");
    assert_eq!(ingest["name"], "kb");
    assert_eq!(ingest["state"], "ready", "{ingest}");
    assert_eq!(ingest["report"]["sources_ingested"], 1, "{ingest}");
    assert_eq!(ingest["report"]["sources_removed"], 0, "{ingest}");

    assert!(
        tool_answers[1].contains("(source: notes/lantern.md)"),
        "the ingested file is searchable: {}",
        tool_answers[1]
    );
    assert!(
        tool_answers[2].contains("(source: kb/faq.md)"),
        "the declared sources are still searchable: {}",
        tool_answers[2]
    );

    let eval: Value = serde_json::from_str(tool_answers[3])
        .unwrap_or_else(|e| panic!("rag_eval answers JSON ({e}): {}", tool_answers[3]));
    assert_eq!(eval["collection"], "kb", "{eval}");
    assert_eq!(eval["queries"], 2, "{eval}");
    let profile = &eval["profiles"][0];
    for metric in ["ndcg_at_10", "mrr_at_10"] {
        let value = profile[metric].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&value), "{metric}: {eval}");
    }
    assert!(
        profile["mrr_at_10"].as_f64().unwrap() > 0.0,
        "both answers are in the collection: {eval}"
    );
    let table = eval["table"].as_str().expect("the metrics table");
    assert!(table.contains("MRR") || table.contains("mrr"), "{table}");
}
