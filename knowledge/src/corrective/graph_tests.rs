//! End-to-end tests of the corrective graph on model-free components: a seeded slice of the
//! golden evaluation corpus (`examples/rag/eval/corpus`, real files) ingested by the real
//! ingestion pipeline into the in-memory store with the deterministic hash embedder (its
//! retrieval is lexical overlap, which the seeded case defeats just as it defeats bge-small). The
//! LLM roles (grader, rewriter, generator, groundedness checker) are played by scripts, and each
//! test says which: the test kit's scripted OpenAI-compatible HTTP server on loopback
//! behind its minimal client (labelled `scripted-openai:scripted`), or its in-process scripted chat double (labelled `scripted`).
//! Termination is asserted with iteration counts and traces, never with time.

use std::path::PathBuf;
use std::sync::Arc;

use orkeon_crews::graph::END;
use orkeon_crews::ports::ChatModel;
use orkeon_testkit::searxng::SECRET;
use orkeon_testkit::{
    FakeWeb, OpenAiCompatibleChat, SCRIPTED_OPENAI_LABEL, ScriptRule, ScriptedChat,
    ScriptedLlmServer,
};
use serde_json::{Value, json};

use super::pipeline::{CorrectiveComponents, CorrectiveRagPipeline};
use super::state::{RagGraphState, node};
use super::{HeuristicQueryRewriter, HeuristicRetrievalEvaluator, register_profiles};
use crate::embed::{Embedder, HashEmbedder};
use crate::ingest::{IngestRequest, IngestionPipeline};
use crate::query::groundedness::{
    GroundednessChecker, HeuristicGroundednessChecker, LlmGroundednessChecker,
};
use crate::query::options::resolve_options;
use crate::query::pipeline::PipelineDeps;
use crate::query::profiles::ProfileResolver;
use crate::query::rerank::RerankerFactory;
use crate::query::transform::TransformerFactory;
use crate::query::{QueryError, RagPipeline, RagQuery, retrieve_only};
use crate::routing::{AdaptiveRagPipeline, DelegateSource, HeuristicClassifier};
use crate::settings::{ChunkingSettings, EmbeddingSettings, IngestionSettings, RagSettings};
use crate::store::{InMemoryQuarantineStore, InMemoryStore};
use crate::types::{RagAnswer, ScoreOrigin, TraceStep};
use crate::web::{WebDocumentRetriever, WebSearchConfig, WebSearchRetriever};

const COLLECTION: &str = "golden-slice";
/// The seeded case (golden q-065, tagged `correctif`): "Heron" is a code name defined in
/// another document, and the answer lives in `products/dashboard-3.md`, which never says
/// "Heron" — single-shot retrieval on the question finds the Heron incident and the code-name
/// table instead.
const QUESTION: &str = "How long can someone leave Heron idle before having to log in again?";
const RIGHT_SOURCE: &str = "products/dashboard-3.md";
const SOURCES: &[&str] = &[
    "products/dashboard-3.md",
    "engineering/codenames.md",
    "incidents/2025-04-22-heron-sso-login.md",
    "engineering/architecture-overview.md",
    "handbook/remote-work.md",
    "products/cloud-plans.md",
];

/// The hash embedder every fixture shares (its vectors are deterministic).
fn embedder() -> Arc<dyn Embedder> {
    Arc::new(HashEmbedder::new(1024))
}

/// The built-in rerankers; the corrective graph reranks nothing, and the one profile test that
/// delegates to `balanced` turns its cross-encoder off, so no model file is ever read.
fn rerankers() -> Arc<RerankerFactory> {
    Arc::new(RerankerFactory::builtin(EmbeddingSettings::default()))
}

struct Fixture {
    store: Arc<InMemoryStore>,
}

impl Fixture {
    fn deps(
        &self,
        chat: Option<Arc<dyn ChatModel>>,
        groundedness: Option<Arc<dyn GroundednessChecker>>,
    ) -> PipelineDeps {
        PipelineDeps {
            store: self.store.clone(),
            embedder: embedder(),
            chat,
            rerankers: rerankers(),
            transformers: Arc::new(TransformerFactory::builtin()),
            groundedness,
        }
    }
}

/// The seeded corpus slice, ingested for real (into memory).
async fn fixture() -> Fixture {
    let store = Arc::new(InMemoryStore::new());
    let ingestion = IngestionPipeline::new(
        store.clone(),
        embedder(),
        Arc::new(InMemoryQuarantineStore::new()),
        IngestionSettings::default(),
    );
    let corpus = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/rag/eval/corpus"
    ));
    let report = ingestion
        .ingest(
            &IngestRequest {
                collection: COLLECTION.into(),
                base_dir: corpus,
                sources: SOURCES.iter().map(|s| s.to_string()).collect(),
                chunking: Some(ChunkingSettings::default()),
                reindex: false,
                mode: crate::ingest::IngestMode::Replace,
            },
            None,
        )
        .await
        .expect("ingestion");
    assert_eq!(report.sources_ingested, SOURCES.len(), "{report:?}");
    Fixture { store }
}

fn settings(value: Value) -> RagSettings {
    serde_json::from_value(value).expect("settings")
}

fn pipeline(
    rag: &RagSettings,
    deps: PipelineDeps,
    components: CorrectiveComponents,
) -> CorrectiveRagPipeline {
    let options = resolve_options("corrective", rag).expect("options");
    CorrectiveRagPipeline::new("corrective", options, deps, components).expect("pipeline")
}

fn steps<'a>(answer: &'a RagAnswer, node: &str) -> Vec<&'a TraceStep> {
    let stage = format!("corrective:{node}");
    answer
        .trace
        .steps
        .iter()
        .filter(|s| s.stage == stage)
        .collect()
}

fn stages(answer: &RagAnswer) -> Vec<&str> {
    answer
        .trace
        .steps
        .iter()
        .map(|s| s.stage.as_str())
        .collect()
}

fn retrieved_sources(step: &TraceStep) -> Vec<String> {
    step.detail["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect()
}

fn query() -> RagQuery {
    RagQuery::new(QUESTION, COLLECTION).with_top_n(2)
}

// ---------------------------------------------------------------------------------------------
// The mechanism
// ---------------------------------------------------------------------------------------------

/// Incorrect verdict → rewrite → re-retrieve → the right source cited. LLM roles: the scripted
/// OpenAI-compatible HTTP server (`scripted-openai:scripted`).
#[tokio::test]
async fn incorrect_verdict_rewrite_and_re_retrieval_cite_the_right_source() {
    let fx = fixture().await;
    let server = ScriptedLlmServer::start(ScriptRule::queue(&[
        // evaluate (iteration 0)
        r#"{"verdict": "incorrect", "relevance": [0.2, 0.1], "rationale": "the passages describe an SSO incident and code names, not how long an idle session lasts"}"#,
        // rewrite_query
        r#"{"query": "Dashboard 3 sign-in: sessions expire after hours without activity"}"#,
        // evaluate (iteration 1)
        r#"{"verdict": "correct", "relevance": [0.95, 0.2], "rationale": "[1] gives the session expiry"}"#,
        // generate
        "Heron is Dashboard 3, whose sessions expire after 12 hours without activity [1].",
        // check_groundedness
        r#"{"grounded": true, "score": 1.0, "unsupported_claims": []}"#,
    ]))
    .await
    .expect("scripted LLM server");
    let chat: Arc<dyn ChatModel> = Arc::new(OpenAiCompatibleChat::new(server.base_url()));
    let deps = fx.deps(
        Some(chat.clone()),
        Some(Arc::new(LlmGroundednessChecker::new(chat.clone()))),
    );
    let corrective = pipeline(
        &RagSettings::default(),
        deps.clone(),
        CorrectiveComponents::for_chat(Some(&chat)),
    );
    let answer = corrective.query(&query()).await.expect("answer");

    assert_eq!(
        stages(&answer),
        vec![
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:rewrite_query",
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:generate",
            "corrective:check_groundedness",
            "corrective:graph",
        ]
    );
    // Single-shot retrieval on the question does not put the right source first (it never
    // says "Heron"; the Heron incident outranks it); the rewritten probe finds it first.
    let retrieves = steps(&answer, node::RETRIEVE);
    assert_ne!(
        retrieved_sources(retrieves[0])[0],
        RIGHT_SOURCE,
        "{:?}",
        retrieves[0].detail
    );
    assert_eq!(retrieves[0].detail["probe"], QUESTION);
    assert_eq!(
        retrieved_sources(retrieves[1])[0],
        RIGHT_SOURCE,
        "{:?}",
        retrieves[1].detail
    );
    assert_eq!(retrieves[1].detail["iteration"], 1);

    assert_eq!(answer.trace.verdicts, vec!["incorrect", "correct"]);
    assert_eq!(
        answer.trace.query_variants,
        vec!["Dashboard 3 sign-in: sessions expire after hours without activity"]
    );
    assert_eq!(answer.trace.iterations, Some(1));
    assert_eq!(answer.trace.profile.as_deref(), Some("corrective"));
    let rewrite = &steps(&answer, node::REWRITE_QUERY)[0].detail;
    assert_eq!(rewrite["trigger"], "incorrect");
    assert_eq!(rewrite["rewriter"], "llm");
    assert_eq!(rewrite["model"], SCRIPTED_OPENAI_LABEL);

    assert_eq!(answer.citations.len(), 1);
    assert_eq!(answer.citations[0].source_id, RIGHT_SOURCE);
    assert!(
        answer.citations[0]
            .snippet
            .contains("12 hours without activity")
    );
    assert!(answer.text.contains("[1]"));
    assert_eq!(
        steps(&answer, node::CHECK_GROUNDEDNESS)[0].detail["grounded"],
        true
    );
    assert_eq!(
        steps(&answer, node::GENERATE)[0].detail["model"],
        SCRIPTED_OPENAI_LABEL
    );

    // Five LLM calls; the rewrite was fed the rationale; generation answered the original
    // question, never the probe; the grader and the rewriter were constrained.
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let user = |i: usize| {
        requests[i]["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        user(1).contains("not how long an idle session lasts"),
        "{}",
        user(1)
    );
    for i in [0, 1, 2, 4] {
        assert_eq!(
            requests[i]["response_format"]["type"], "json_object",
            "request {i}"
        );
    }
    assert_eq!(requests[1]["temperature"], 0.0);
    assert!(
        user(3).ends_with(&format!("Question: {QUESTION}")),
        "{}",
        user(3)
    );
    assert!(!user(3).contains("Question: Dashboard 3 sign-in"));
}

/// Without a real LLM (the offline `extractive` model, or none) the grader and the rewriter are
/// the heuristic ones; on the seeded case they stay within the budget and are labelled in the
/// trace. Generation by the in-process `scripted` chat (the extractive model lives in
/// `agents`).
#[tokio::test]
async fn offline_heuristic_roles_run_the_graph_within_the_budget() {
    let fx = fixture().await;
    let reply = "Sessions expire after 12 hours without activity [1].";
    let chat = ScriptedChat::new(&[reply; 4]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let corrective = pipeline(
        &RagSettings::default(),
        fx.deps(
            Some(chat_dyn),
            Some(Arc::new(HeuristicGroundednessChecker::default())),
        ),
        CorrectiveComponents::for_chat(None),
    );
    let answer = corrective.query(&query()).await.expect("answer");
    let iterations = answer.trace.iterations.expect("iterations");
    assert!(iterations <= 3, "{iterations}");
    let evaluations = steps(&answer, node::EVALUATE);
    assert!(
        evaluations
            .iter()
            .all(|e| e.detail["evaluator"] == "heuristic")
    );
    assert!(
        steps(&answer, node::REWRITE_QUERY)
            .iter()
            .all(|r| r.detail["rewriter"] == "heuristic")
    );
    assert_eq!(evaluations.len(), answer.trace.verdicts.len());
    assert_eq!(steps(&answer, node::RETRIEVE).len() as u32, iterations + 1);
    assert_eq!(steps(&answer, "graph")[0].detail["outcome"], "completed");
}

// ---------------------------------------------------------------------------------------------
// Termination under adversarial scripts (in-process scripted chat, `scripted`)
// ---------------------------------------------------------------------------------------------

/// A grader that always says Incorrect: exactly `max_iterations` rewrites, then web_fallback
/// (skipped: disabled) and best-effort generation with the best chunks seen.
#[tokio::test]
async fn always_incorrect_stops_at_the_budget_with_a_best_effort_answer() {
    let fx = fixture().await;
    let incorrect = r#"{"verdict": "incorrect", "rationale": "nothing relevant"}"#;
    let chat = ScriptedChat::new(&[
        incorrect,
        r#"{"query": "Heron idle session timeout"}"#,
        incorrect,
        r#"{"query": "Tidewell dashboard automatic logout"}"#,
        incorrect,
        "I could not find it; the closest passage is about sign-in [1].",
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"corrective": {"max_iterations": 2}}));
    let corrective = pipeline(
        &rag,
        fx.deps(
            Some(chat_dyn.clone()),
            Some(Arc::new(HeuristicGroundednessChecker::default())),
        ),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = corrective.query(&query()).await.expect("answer");

    assert_eq!(answer.trace.iterations, Some(2));
    assert_eq!(answer.trace.verdicts, vec!["incorrect"; 3]);
    assert_eq!(steps(&answer, node::REWRITE_QUERY).len(), 2);
    assert_eq!(steps(&answer, node::RETRIEVE).len(), 3);
    let web = &steps(&answer, node::WEB_FALLBACK)[0].detail;
    assert!(
        web["skipped"].as_str().unwrap().starts_with("disabled"),
        "{web}"
    );
    assert_eq!(web["iteration"], 2);
    assert_eq!(steps(&answer, node::GENERATE).len(), 1);
    assert!(!answer.citations.is_empty());
    assert!(
        stages(&answer)
            .iter()
            .all(|s| *s != "corrective:circuit_breaker")
    );
    assert_eq!(chat.calls(), 6);
    let graph = &steps(&answer, "graph")[0].detail;
    assert_eq!(graph["outcome"], "completed");
}

/// A checker that always says ungrounded: the groundedness loop re-enters rewrite_query until
/// the budget is spent, then ends with the last answer.
#[tokio::test]
async fn always_ungrounded_re_loops_only_within_the_budget() {
    let fx = fixture().await;
    let correct = r#"{"verdict": "correct", "rationale": "[1] answers"}"#;
    let ungrounded =
        r#"{"grounded": false, "score": 0.0, "unsupported_claims": ["Sessions never expire."]}"#;
    let chat = ScriptedChat::new(&[
        correct,
        "Sessions never expire [1].",
        ungrounded,
        r#"{"query": "session expiry without activity"}"#,
        correct,
        "Sessions never expire [1].",
        ungrounded,
        r#"{"query": "Dashboard 3 sessions idle hours"}"#,
        correct,
        "Sessions never expire [1].",
        ungrounded,
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"corrective": {"max_iterations": 2}}));
    let corrective = pipeline(
        &rag,
        fx.deps(
            Some(chat_dyn.clone()),
            Some(Arc::new(LlmGroundednessChecker::new(chat_dyn.clone()))),
        ),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = corrective.query(&query()).await.expect("answer");

    assert_eq!(answer.trace.iterations, Some(2));
    assert_eq!(answer.trace.verdicts, vec!["correct"; 3]);
    let checks = steps(&answer, node::CHECK_GROUNDEDNESS);
    assert_eq!(checks.len(), 3);
    assert!(checks.iter().all(|c| c.detail["grounded"] == false));
    let rewrites = steps(&answer, node::REWRITE_QUERY);
    assert_eq!(rewrites.len(), 2);
    assert!(rewrites.iter().all(|r| r.detail["trigger"] == "ungrounded"));
    assert_eq!(answer.trace.query_variants.len(), 2);
    assert_eq!(answer.text, "Sessions never expire [1].");
    assert_eq!(chat.calls(), 11);
    // The unsupported claim was fed to the rewriter.
    let requests = chat.requests.lock().unwrap().clone();
    assert!(
        requests[3].messages[1]
            .content
            .contains("- Sessions never expire.")
    );
}

/// Garbage everywhere: the grader's documented fallback (Ambiguous) spends no budget; refine
/// and generation run; the unreadable groundedness verdict is traced and the graph ends.
#[tokio::test]
async fn garbage_json_ends_without_spending_the_budget() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&["~~ lorem {ipsum", "~~ lorem {ipsum", "~~ lorem {ipsum"]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let corrective = pipeline(
        &RagSettings::default(),
        fx.deps(
            Some(chat_dyn.clone()),
            Some(Arc::new(LlmGroundednessChecker::new(chat_dyn.clone()))),
        ),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = corrective.query(&query()).await.expect("answer");

    assert_eq!(answer.trace.iterations, Some(0));
    assert_eq!(answer.trace.verdicts, vec!["ambiguous"]);
    let evaluate = &steps(&answer, node::EVALUATE)[0].detail;
    assert!(
        evaluate["fallback"]
            .as_str()
            .unwrap()
            .contains("could not be read"),
        "{evaluate}"
    );
    assert_eq!(steps(&answer, node::REFINE).len(), 1);
    let check = &steps(&answer, node::CHECK_GROUNDEDNESS)[0].detail;
    assert!(
        check["error"]
            .as_str()
            .unwrap()
            .contains("could not be read"),
        "{check}"
    );
    assert_eq!(chat.calls(), 3);
}

/// Unusable rewrites retry the previous probe and still consume the budget.
#[tokio::test]
async fn unusable_rewrites_retry_the_previous_probe_and_consume_the_budget() {
    let fx = fixture().await;
    let incorrect = r#"{"verdict": "incorrect"}"#;
    let chat = ScriptedChat::new(&[
        incorrect,
        "{}",
        incorrect,
        QUESTION,
        incorrect,
        "No context answers this.",
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"corrective": {"max_iterations": 2}}));
    let corrective = pipeline(
        &rag,
        fx.deps(Some(chat_dyn.clone()), None),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = corrective.query(&query()).await.expect("answer");
    assert_eq!(answer.trace.iterations, Some(2));
    assert!(answer.trace.query_variants.is_empty());
    let rewrites = steps(&answer, node::REWRITE_QUERY);
    assert_eq!(rewrites[0].detail["usable"], false);
    assert!(
        rewrites[1].detail["unusable"]
            .as_str()
            .unwrap()
            .contains("previous probe")
    );
    assert!(
        steps(&answer, node::RETRIEVE)
            .iter()
            .all(|r| r.detail["probe"] == QUESTION)
    );
    // Without a checker the node is traced as skipped and the graph ends.
    assert_eq!(
        steps(&answer, node::CHECK_GROUNDEDNESS)[0].detail["skipped"],
        "no groundedness checker registered"
    );
}

// ---------------------------------------------------------------------------------------------
// The circuit breaker (routing invariants broken on purpose)
// ---------------------------------------------------------------------------------------------

/// A router that always loops back to rewrite_query, ignoring the budget: the breaker trips on
/// the (n+3)-th visit of a node, the trip is traced, and generation runs outside the graph.
/// Heuristic grader and rewriter (no LLM call); generation by the in-process `scripted` chat.
#[tokio::test]
async fn a_router_that_always_loops_trips_the_breaker_and_degrades_to_best_effort() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&["Best effort: sessions expire after 12 hours [1]."]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"corrective": {"max_iterations": 1}}));
    let options = resolve_options("corrective", &rag).unwrap();
    let components = CorrectiveComponents {
        evaluator: Arc::new(HeuristicRetrievalEvaluator),
        rewriter: Arc::new(HeuristicQueryRewriter),
        web: None,
    };
    let corrective = CorrectiveRagPipeline::with_routers(
        "corrective",
        options,
        fx.deps(Some(chat_dyn), None),
        components,
        Box::new(|_: &RagGraphState| node::REWRITE_QUERY.to_string()),
        Box::new(|_: &RagGraphState| END.to_string()),
    )
    .unwrap();
    assert_eq!(corrective.policy().max_state_visits, 3);
    let answer = corrective
        .query(&query())
        .await
        .expect("a loop is never an error");

    let breaker = answer
        .trace
        .steps
        .iter()
        .find(|s| s.stage == "corrective:circuit_breaker")
        .expect("breaker traced");
    assert!(
        breaker.detail["trip"]
            .as_str()
            .unwrap()
            .contains("would run 4 times"),
        "{}",
        breaker.detail
    );
    assert_eq!(
        breaker.detail["degraded_to"],
        "generation outside the graph"
    );
    // The broken router overran the budget; the breaker, not the budget, stopped it.
    assert_eq!(steps(&answer, node::RETRIEVE).len(), 3);
    assert_eq!(steps(&answer, node::REWRITE_QUERY).len(), 3);
    assert_eq!(answer.trace.iterations, Some(3));
    let generate = steps(&answer, node::GENERATE);
    assert_eq!(generate.len(), 1);
    assert_eq!(generate[0].detail["outside_graph"], true);
    assert_eq!(
        answer.text,
        "Best effort: sessions expire after 12 hours [1]."
    );
    assert_eq!(answer.citations.len(), 1);
    let graph = &steps(&answer, "graph")[0].detail;
    assert!(
        graph["outcome"]
            .as_str()
            .unwrap()
            .starts_with("circuit breaker tripped")
    );
    assert_eq!(chat.calls(), 1);
}

/// A groundedness router that always loops: generation has run, so the last answer stands.
#[tokio::test]
async fn a_broken_groundedness_loop_keeps_the_last_generated_answer() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&["First [1].", "Second [1].", "Third [1]."]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"corrective": {"max_iterations": 1}}));
    let corrective = CorrectiveRagPipeline::with_routers(
        "corrective",
        resolve_options("corrective", &rag).unwrap(),
        fx.deps(
            Some(chat_dyn),
            Some(Arc::new(HeuristicGroundednessChecker::default())),
        ),
        CorrectiveComponents {
            evaluator: Arc::new(HeuristicRetrievalEvaluator),
            rewriter: Arc::new(HeuristicQueryRewriter),
            web: None,
        },
        Box::new(|_: &RagGraphState| node::GENERATE.to_string()),
        Box::new(|_: &RagGraphState| node::REWRITE_QUERY.to_string()),
    )
    .unwrap();
    let answer = corrective.query(&query()).await.expect("answer");
    let breaker = steps(&answer, "circuit_breaker");
    assert_eq!(breaker.len(), 1);
    assert_eq!(breaker[0].detail["degraded_to"], "last generated answer");
    assert_eq!(answer.text, "Third [1].");
    assert_eq!(steps(&answer, node::GENERATE).len(), 3);
    assert_eq!(chat.calls(), 3);
}

// ---------------------------------------------------------------------------------------------
// Web fallback (both switches) against the fake SearxNG on loopback
// ---------------------------------------------------------------------------------------------

fn web_retriever(web: &FakeWeb) -> Arc<dyn WebDocumentRetriever> {
    Arc::new(
        WebSearchRetriever::new(WebSearchConfig {
            endpoint: reqwest::Url::parse(&web.searxng.base_url()).unwrap(),
            api_key: None,
            max_results: 5,
            timeout: std::time::Duration::from_secs(5),
            suspicious_action: crate::settings::SuspiciousAction::Flag,
            max_page_bytes: 64 * 1024,
            max_redirects: 3,
        })
        .unwrap(),
    )
}

#[tokio::test]
async fn web_fallback_needs_both_switches_and_never_passes_rejected_pages() {
    let fx = fixture().await;
    let web = FakeWeb::start().await.expect("fake web");
    let incorrect = r#"{"verdict": "incorrect", "rationale": "no passage about the generator"}"#;
    let question = RagQuery::new(
        "How long does the backup generator in building C run?",
        COLLECTION,
    )
    .with_top_n(2);
    let policy_on = settings(
        json!({"corrective": {"max_iterations": 0, "web_fallback": {"enabled": true, "max_results": 3}}}),
    );
    let policy_off = settings(json!({"corrective": {"max_iterations": 0}}));

    // Transport present, policy off: skipped, "disabled".
    let chat = ScriptedChat::new(&[incorrect, "Not in the context."]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let components =
        CorrectiveComponents::for_chat(Some(&chat_dyn)).with_web(Some(web_retriever(&web)));
    let answer = pipeline(
        &policy_off,
        fx.deps(Some(chat_dyn.clone()), None),
        components,
    )
    .query(&question)
    .await
    .unwrap();
    let detail = &steps(&answer, node::WEB_FALLBACK)[0].detail;
    assert!(
        detail["skipped"].as_str().unwrap().starts_with("disabled"),
        "{detail}"
    );
    assert!(web.searxng.requests().is_empty());

    // Policy on, no transport registered: skipped with that reason.
    let chat = ScriptedChat::new(&[incorrect, "Not in the context."]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let answer = pipeline(
        &policy_on,
        fx.deps(Some(chat_dyn.clone()), None),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    )
    .query(&question)
    .await
    .unwrap();
    let detail = &steps(&answer, node::WEB_FALLBACK)[0].detail;
    assert!(
        detail["skipped"]
            .as_str()
            .unwrap()
            .starts_with("no web retriever"),
        "{detail}"
    );

    // Both on: the search runs, the injected page is rejected, private addresses are refused,
    // and the web chunks open the working set ahead of the local ones.
    let chat = ScriptedChat::new(&[incorrect, "The generator runs for up to 12 hours [1]."]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let components =
        CorrectiveComponents::for_chat(Some(&chat_dyn)).with_web(Some(web_retriever(&web)));
    let answer = pipeline(
        &policy_on,
        fx.deps(Some(chat_dyn.clone()), None),
        components,
    )
    .query(&question)
    .await
    .unwrap();
    let detail = &steps(&answer, node::WEB_FALLBACK)[0].detail;
    assert_eq!(detail["results_found"], 6, "{detail}");
    let outcomes: Vec<(&str, &str)> = detail["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["url"].as_str().unwrap(), p["outcome"].as_str().unwrap()))
        .collect();
    assert!(
        outcomes
            .iter()
            .any(|(u, o)| u.ends_with("/faq.html") && *o == "rejected"),
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|(u, o)| u.ends_with("/secret.html") && *o == "refused"),
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|(u, o)| u.contains("10.255.255.1") && *o == "refused"),
        "{outcomes:?}"
    );
    assert_eq!(detail["web_chunks"], 2);
    assert!(web.private.requests().is_empty());

    assert_eq!(answer.citations[0].score_origin, ScoreOrigin::Web);
    assert!(answer.citations[0].source_id.ends_with("/pages/power.html"));
    let generate = &steps(&answer, node::GENERATE)[0].detail;
    assert_eq!(generate["web_passages"], 2);
    let prompt = chat.requests.lock().unwrap()[1].messages[1].content.clone();
    assert!(prompt.contains("[1] (source: http://127.0.0.1"), "{prompt}");
    assert!(!prompt.contains("PWNED"), "{prompt}");
    assert!(!prompt.contains(SECRET), "{prompt}");
    // Local chunks close the set.
    let passages = generate["passages"].as_u64().unwrap();
    assert!(passages > 2, "{generate}");

    // A router that keeps re-entering web_fallback: the second visit is skipped as already
    // attempted, and the breaker ends the loop.
    let chat = ScriptedChat::new(&["A [1].", "B [1].", "C [1]."]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let searches_before = web
        .searxng
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/search"))
        .count();
    let looping = CorrectiveRagPipeline::with_routers(
        "corrective",
        resolve_options("corrective", &policy_on).unwrap(),
        fx.deps(Some(chat_dyn), None),
        CorrectiveComponents {
            evaluator: Arc::new(HeuristicRetrievalEvaluator),
            rewriter: Arc::new(HeuristicQueryRewriter),
            web: Some(web_retriever(&web)),
        },
        Box::new(|_: &RagGraphState| node::WEB_FALLBACK.to_string()),
        Box::new(|_: &RagGraphState| node::REWRITE_QUERY.to_string()),
    )
    .unwrap();
    let answer = looping.query(&question).await.unwrap();
    let webs = steps(&answer, node::WEB_FALLBACK);
    assert!(webs.len() >= 2);
    assert!(
        webs[1..]
            .iter()
            .all(|w| w.detail["skipped"] == "already attempted")
    );
    assert_eq!(steps(&answer, "circuit_breaker").len(), 1);
    let searches_after = web
        .searxng
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/search"))
        .count();
    assert_eq!(searches_after - searches_before, 1);
}

// ---------------------------------------------------------------------------------------------
// Retrieval only (what crews call): the same graph, stopping before generation
// ---------------------------------------------------------------------------------------------

fn markers(answer: &RagAnswer) -> Vec<u32> {
    answer.citations.iter().map(|c| c.marker).collect()
}

fn cited_sources(answer: &RagAnswer) -> Vec<String> {
    answer
        .citations
        .iter()
        .map(|c| c.source_id.clone())
        .collect()
}

/// Asserts the retrieval-only ending: `generate` and `check_groundedness` traced as skipped
/// (once each, never run), the `corrective:graph` summary last, in retrieve-only mode, and an
/// empty text with citations `[1]`..`[n]`.
fn assert_stopped_before_generation(answer: &RagAnswer) {
    let generate = steps(answer, node::GENERATE);
    assert_eq!(generate.len(), 1, "{:?}", stages(answer));
    assert_eq!(generate[0].detail["skipped"], "retrieval-only");
    assert!(
        generate[0].detail["reason"]
            .as_str()
            .unwrap()
            .contains("no LLM call"),
        "{}",
        generate[0].detail
    );
    assert_eq!(generate[0].detail["model"], Value::Null);
    let check = steps(answer, node::CHECK_GROUNDEDNESS);
    assert_eq!(check.len(), 1);
    assert_eq!(check[0].detail["skipped"], "retrieval-only");
    let last = answer.trace.steps.last().expect("steps");
    assert_eq!(last.stage, "corrective:graph");
    assert_eq!(last.detail["mode"], "retrieve-only");
    let path: Vec<&str> = last.detail["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        !path.contains(&node::GENERATE) && !path.contains(&node::CHECK_GROUNDEDNESS),
        "{path:?}"
    );
    assert!(
        answer
            .trace
            .steps
            .iter()
            .all(|s| s.stage.starts_with("corrective:")),
        "{:?}",
        stages(answer)
    );
    assert!(answer.text.is_empty(), "{}", answer.text);
    let expected: Vec<u32> = (1..=answer.citations.len() as u32).collect();
    assert_eq!(markers(answer), expected);
    assert_eq!(
        generate[0].detail["passages"].as_u64(),
        Some(answer.citations.len() as u64)
    );
}

/// Incorrect verdict → rewrite → re-retrieve → Correct → stop: the rewritten probe's passages,
/// the right source first, and only the grader's and the rewriter's LLM calls — the scripted
/// chat (`scripted`) holds no reply for a generation or a groundedness check, so either would
/// fail the call.
#[tokio::test]
async fn retrieve_only_loops_through_rewrite_and_stops_before_generation() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&[
        r#"{"verdict": "incorrect", "relevance": [0.2, 0.1], "rationale": "an SSO incident and code names, not how long an idle session lasts"}"#,
        r#"{"query": "Dashboard 3 sign-in: sessions expire after hours without activity"}"#,
        r#"{"verdict": "correct", "relevance": [0.95, 0.2], "rationale": "[1] gives the session expiry"}"#,
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let corrective = pipeline(
        &RagSettings::default(),
        fx.deps(
            Some(chat_dyn.clone()),
            Some(Arc::new(LlmGroundednessChecker::new(chat_dyn.clone()))),
        ),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    assert!(corrective.retriever().is_some());
    let answer = retrieve_only(&corrective, &query())
        .await
        .expect("passages");

    assert_eq!(
        stages(&answer),
        vec![
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:rewrite_query",
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:generate",
            "corrective:check_groundedness",
            "corrective:graph",
        ]
    );
    assert_stopped_before_generation(&answer);
    let graph = &steps(&answer, "graph")[0].detail;
    assert_eq!(graph["outcome"], "completed");
    assert_eq!(
        graph["path"],
        json!([
            "retrieve",
            "evaluate",
            "rewrite_query",
            "retrieve",
            "evaluate"
        ])
    );
    assert_eq!(answer.trace.iterations, Some(1));
    assert_eq!(answer.trace.verdicts, vec!["incorrect", "correct"]);
    assert_eq!(answer.trace.profile.as_deref(), Some("corrective"));
    assert_eq!(
        answer.trace.query_variants,
        vec!["Dashboard 3 sign-in: sessions expire after hours without activity"]
    );

    // The citations are the rewritten probe's retrieval, in rank order, capped at top_n = 2.
    let second = retrieved_sources(steps(&answer, node::RETRIEVE)[1]);
    assert_eq!(cited_sources(&answer), second);
    assert_eq!(answer.citations.len(), 2);
    assert_eq!(answer.citations[0].source_id, RIGHT_SOURCE);
    assert!(
        answer.citations[0]
            .snippet
            .contains("12 hours without activity")
    );

    // Grade, rewrite, grade: all constrained JSON calls, none of them a generation.
    assert_eq!(chat.calls(), 3);
    assert!(chat.requests.lock().unwrap().iter().all(|r| r.json_mode));
}

/// `top_n` caps the passages (a Correct verdict ends the run on the retrieved set); unset, the
/// profile's final top_n applies. Grader: the in-process `scripted` chat, one call per run.
#[tokio::test]
async fn retrieve_only_honours_top_n() {
    let fx = fixture().await;
    let rag = RagSettings::default();
    let correct = r#"{"verdict": "correct", "rationale": "the passages answer"}"#;
    for top_n in [1usize, 3] {
        let chat = ScriptedChat::new(&[correct]);
        let chat_dyn: Arc<dyn ChatModel> = chat.clone();
        let corrective = pipeline(
            &rag,
            fx.deps(Some(chat_dyn.clone()), None),
            CorrectiveComponents::for_chat(Some(&chat_dyn)),
        );
        let answer = retrieve_only(
            &corrective,
            &RagQuery::new(QUESTION, COLLECTION).with_top_n(top_n),
        )
        .await
        .expect("passages");
        assert_stopped_before_generation(&answer);
        assert_eq!(answer.citations.len(), top_n);
        assert_eq!(
            cited_sources(&answer),
            retrieved_sources(steps(&answer, node::RETRIEVE)[0])
        );
        assert_eq!(steps(&answer, node::GENERATE)[0].detail["top_n"], top_n);
        assert_eq!(chat.calls(), 1);
    }

    let expected = resolve_options("corrective", &rag)
        .unwrap()
        .final_top_n(None);
    let chat = ScriptedChat::new(&[correct]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let corrective = pipeline(
        &rag,
        fx.deps(Some(chat_dyn.clone()), None),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = retrieve_only(&corrective, &RagQuery::new(QUESTION, COLLECTION))
        .await
        .expect("passages");
    assert_stopped_before_generation(&answer);
    assert_eq!(steps(&answer, node::RETRIEVE)[0].detail["top_n"], expected);
    assert_eq!(steps(&answer, node::GENERATE)[0].detail["top_n"], expected);
    assert_eq!(answer.citations.len(), expected);
}

/// Without any chat model (heuristic grader and rewriter; a full query cannot generate), the
/// retrieval-only run still answers with passages and the whole graph trace.
#[tokio::test]
async fn retrieve_only_needs_no_chat_model() {
    let fx = fixture().await;
    let corrective = pipeline(
        &RagSettings::default(),
        fx.deps(
            None,
            Some(Arc::new(HeuristicGroundednessChecker::default())),
        ),
        CorrectiveComponents::for_chat(None),
    );
    let err = corrective.query(&query()).await.unwrap_err();
    assert!(matches!(err, QueryError::NoChatModel { .. }), "{err}");

    let answer = retrieve_only(&corrective, &query())
        .await
        .expect("passages");
    assert_stopped_before_generation(&answer);
    assert!(!answer.citations.is_empty());
    assert!(answer.citations.len() <= 2);
    let iterations = answer.trace.iterations.expect("iterations");
    assert!(iterations <= 3, "{iterations}");
    assert_eq!(steps(&answer, node::RETRIEVE).len() as u32, iterations + 1);
    assert!(
        steps(&answer, node::EVALUATE)
            .iter()
            .all(|e| e.detail["evaluator"] == "heuristic")
    );
}

/// Ambiguous → refine → stop: the citations are the refined passages. The grader's unreadable
/// answer (in-process `scripted` chat) falls back to Ambiguous.
#[tokio::test]
async fn retrieve_only_cites_the_refined_passages_on_ambiguous() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&["~~ lorem {ipsum"]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let corrective = pipeline(
        &RagSettings::default(),
        fx.deps(Some(chat_dyn.clone()), None),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = retrieve_only(&corrective, &query())
        .await
        .expect("passages");
    assert_eq!(
        stages(&answer),
        vec![
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:refine",
            "corrective:generate",
            "corrective:check_groundedness",
            "corrective:graph",
        ]
    );
    assert_stopped_before_generation(&answer);
    assert_eq!(answer.trace.verdicts, vec!["ambiguous"]);
    assert_eq!(
        cited_sources(&answer),
        retrieved_sources(steps(&answer, node::REFINE)[0])
    );
    assert!(!answer.citations.is_empty());
    assert_eq!(chat.calls(), 1);
}

/// Incorrect until the budget is spent: web_fallback (skipped: disabled) → stop, with the best
/// passages seen; never generate.
#[tokio::test]
async fn retrieve_only_at_budget_exhaustion_ends_after_web_fallback() {
    let fx = fixture().await;
    let incorrect = r#"{"verdict": "incorrect", "rationale": "nothing relevant"}"#;
    let chat = ScriptedChat::new(&[
        incorrect,
        r#"{"query": "Heron idle session timeout"}"#,
        incorrect,
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"corrective": {"max_iterations": 1}}));
    let corrective = pipeline(
        &rag,
        fx.deps(Some(chat_dyn.clone()), None),
        CorrectiveComponents::for_chat(Some(&chat_dyn)),
    );
    let answer = retrieve_only(&corrective, &query())
        .await
        .expect("passages");
    assert_eq!(
        stages(&answer),
        vec![
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:rewrite_query",
            "corrective:retrieve",
            "corrective:evaluate",
            "corrective:web_fallback",
            "corrective:generate",
            "corrective:check_groundedness",
            "corrective:graph",
        ]
    );
    assert_stopped_before_generation(&answer);
    assert_eq!(answer.trace.iterations, Some(1));
    let web = &steps(&answer, node::WEB_FALLBACK)[0].detail;
    assert!(
        web["skipped"].as_str().unwrap().starts_with("disabled"),
        "{web}"
    );
    assert!(!answer.citations.is_empty());
    assert_eq!(chat.calls(), 3);
}

/// Web fallback in retrieval-only mode: the web chunks open the working set and the citations
/// are capped at top_n (local chunks cut first).
#[tokio::test]
async fn retrieve_only_caps_the_web_fallback_set_at_top_n() {
    let fx = fixture().await;
    let web = FakeWeb::start().await.expect("fake web");
    let chat = ScriptedChat::new(&[
        r#"{"verdict": "incorrect", "rationale": "no passage about the generator"}"#,
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(
        json!({"corrective": {"max_iterations": 0, "web_fallback": {"enabled": true, "max_results": 3}}}),
    );
    let components =
        CorrectiveComponents::for_chat(Some(&chat_dyn)).with_web(Some(web_retriever(&web)));
    let corrective = pipeline(&rag, fx.deps(Some(chat_dyn.clone()), None), components);
    let question = RagQuery::new(
        "How long does the backup generator in building C run?",
        COLLECTION,
    )
    .with_top_n(2);
    let answer = retrieve_only(&corrective, &question)
        .await
        .expect("passages");
    assert_stopped_before_generation(&answer);
    let fallback = &steps(&answer, node::WEB_FALLBACK)[0].detail;
    assert_eq!(fallback["web_chunks"], 2, "{fallback}");
    let local = fallback["local_chunks"].as_u64().unwrap();
    assert!(local > 0, "{fallback}");
    assert_eq!(answer.citations.len(), 2);
    assert!(
        answer
            .citations
            .iter()
            .all(|c| c.score_origin == ScoreOrigin::Web)
    );
    let generate = &steps(&answer, node::GENERATE)[0].detail;
    assert_eq!(generate["capped_by_top_n"], local);
    assert_eq!(generate["web_passages"], 2);
    assert_eq!(chat.calls(), 1);
}

/// The same circuit breaker bounds the retrieval-only topology: a router that always loops
/// trips it, the trip is traced, and the passages selected so far are the answer. Heuristic
/// grader and rewriter, no chat model at all.
#[tokio::test]
async fn retrieve_only_a_looping_router_trips_the_breaker_and_keeps_the_passages() {
    let fx = fixture().await;
    let rag = settings(json!({"corrective": {"max_iterations": 1}}));
    let corrective = CorrectiveRagPipeline::with_routers(
        "corrective",
        resolve_options("corrective", &rag).unwrap(),
        fx.deps(None, None),
        CorrectiveComponents {
            evaluator: Arc::new(HeuristicRetrievalEvaluator),
            rewriter: Arc::new(HeuristicQueryRewriter),
            web: None,
        },
        Box::new(|_: &RagGraphState| node::REWRITE_QUERY.to_string()),
        Box::new(|_: &RagGraphState| END.to_string()),
    )
    .unwrap();
    let answer = retrieve_only(&corrective, &query())
        .await
        .expect("a loop is never an error");
    let breaker = steps(&answer, "circuit_breaker");
    assert_eq!(breaker.len(), 1);
    assert!(
        breaker[0].detail["trip"]
            .as_str()
            .unwrap()
            .contains("would run 4 times"),
        "{}",
        breaker[0].detail
    );
    assert!(
        breaker[0].detail["degraded_to"]
            .as_str()
            .unwrap()
            .contains("passages selected so far"),
        "{}",
        breaker[0].detail
    );
    assert_eq!(steps(&answer, node::RETRIEVE).len(), 3);
    assert_eq!(answer.trace.iterations, Some(3));
    assert_stopped_before_generation(&answer);
    assert!(
        steps(&answer, "graph")[0].detail["outcome"]
            .as_str()
            .unwrap()
            .starts_with("circuit breaker tripped")
    );
    assert!(!answer.citations.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Profiles and adaptive routing
// ---------------------------------------------------------------------------------------------

/// `corrective` and `adaptive` resolve by name; the adaptive routes are traced; the corrective
/// profile brings its default groundedness checker when the host registered none. Generation,
/// grading and checking by the in-process `scripted` chat; the balanced delegate runs without its ONNX
/// reranker here (`rerank.enabled: false`) to keep the test fast — it is the same staged
/// pipeline the query module tests with the cross-encoder.
#[tokio::test]
async fn profiles_resolve_and_adaptive_routes_are_traced() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&[
        // "Hello!" → direct answer
        "Hello! Ask me anything about the documents.",
        // single-shot → balanced: generation
        "Sessions expire after 12 hours without activity [1].",
        // iterative → corrective: evaluate, generate
        r#"{"verdict": "correct"}"#,
        "Heron is Dashboard 3 [1].",
        // the corrective profile's default checker (the host registered none): LLM-backed
        r#"{"grounded": true, "score": 1.0}"#,
    ]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"rerank": {"enabled": false}}));
    let resolver = ProfileResolver::new(rag, fx.deps(Some(chat_dyn), None), None);
    assert!(matches!(
        resolver.resolve("corrective").err(),
        Some(QueryError::ProfileNotAvailable { .. })
    ));
    register_profiles(&resolver);
    assert_eq!(resolver.resolve("Corrective").unwrap().name(), "corrective");
    let adaptive = resolver.resolve("adaptive").unwrap();
    assert_eq!(adaptive.name(), "adaptive");

    let route = |answer: &RagAnswer| answer.trace.steps[0].detail.clone();

    let hello = adaptive
        .query(&RagQuery::new("Hello!", COLLECTION))
        .await
        .unwrap();
    assert_eq!(hello.trace.route.as_deref(), Some("no-retrieval"));
    assert_eq!(route(&hello)["delegate"], "direct");
    assert_eq!(route(&hello)["classifier"], "heuristic");
    assert!(hello.citations.is_empty());
    assert_eq!(hello.text, "Hello! Ask me anything about the documents.");

    let single = adaptive
        .query(&RagQuery::new("When do Dashboard 3 sessions expire?", COLLECTION).with_top_n(2))
        .await
        .unwrap();
    assert_eq!(single.trace.route.as_deref(), Some("single-shot"));
    assert_eq!(route(&single)["delegate"], "balanced");
    assert!(single.trace.steps.iter().any(|s| s.stage == "rerank"));
    assert_eq!(single.citations[0].source_id, RIGHT_SOURCE);

    let iterative = adaptive
        .query(
            &RagQuery::new(
                "What is Heron and how long do its idle sessions last?",
                COLLECTION,
            )
            .with_top_n(2),
        )
        .await
        .unwrap();
    assert_eq!(iterative.trace.route.as_deref(), Some("iterative"));
    assert_eq!(route(&iterative)["delegate"], "corrective");
    assert!(
        iterative
            .trace
            .steps
            .iter()
            .any(|s| s.stage == "corrective:graph")
    );
    let check = iterative
        .trace
        .steps
        .iter()
        .find(|s| s.stage == "corrective:check_groundedness")
        .expect("check step");
    assert_eq!(check.detail["checker"], "llm");
    assert_eq!(check.detail["grounded"], true);
    assert_eq!(iterative.trace.profile.as_deref(), Some("adaptive"));
    assert_eq!(chat.calls(), 5);
}

/// Retrieval-only through `adaptive`: each question is routed as by `query`, the route is
/// traced, and the routed profile's retrieval-only path answers — `balanced` (stages 1–5, its
/// cross-encoder off here), `corrective` (the graph stopping before generation); the
/// no-retrieval route retrieves nothing and calls no LLM. The one LLM call is the corrective
/// grader's (in-process `scripted` chat).
#[tokio::test]
async fn adaptive_retrieve_only_delegates_to_the_routed_profile() {
    let fx = fixture().await;
    let chat = ScriptedChat::new(&[r#"{"verdict": "correct"}"#]);
    let chat_dyn: Arc<dyn ChatModel> = chat.clone();
    let rag = settings(json!({"rerank": {"enabled": false}}));
    let resolver = ProfileResolver::new(rag, fx.deps(Some(chat_dyn), None), None);
    register_profiles(&resolver);
    let adaptive = resolver.resolve("adaptive").unwrap();
    assert!(adaptive.retriever().is_some());
    let route = |answer: &RagAnswer| answer.trace.steps[0].clone();

    let hello = retrieve_only(adaptive.as_ref(), &RagQuery::new("Hello!", COLLECTION))
        .await
        .unwrap();
    assert_eq!(hello.trace.route.as_deref(), Some("no-retrieval"));
    assert_eq!(route(&hello).stage, "route");
    assert_eq!(route(&hello).detail["delegate"], "direct");
    assert!(hello.text.is_empty());
    assert!(hello.citations.is_empty());
    let generate = &hello.trace.steps[1];
    assert_eq!(generate.stage, "generate");
    assert_eq!(generate.detail["skipped"], "retrieval-only");
    assert_eq!(hello.trace.profile.as_deref(), Some("adaptive"));

    let single = retrieve_only(
        adaptive.as_ref(),
        &RagQuery::new("When do Dashboard 3 sessions expire?", COLLECTION).with_top_n(2),
    )
    .await
    .unwrap();
    assert_eq!(single.trace.route.as_deref(), Some("single-shot"));
    assert_eq!(route(&single).detail["delegate"], "balanced");
    assert!(single.trace.steps.iter().any(|s| s.stage == "rerank"));
    let generate = single
        .trace
        .steps
        .iter()
        .find(|s| s.stage == "generate")
        .expect("generate step");
    assert_eq!(generate.detail["skipped"], "retrieval-only");
    assert!(single.text.is_empty());
    assert_eq!(markers(&single), vec![1, 2]);
    assert_eq!(single.citations[0].source_id, RIGHT_SOURCE);
    assert_eq!(single.trace.profile.as_deref(), Some("adaptive"));

    let iterative = retrieve_only(
        adaptive.as_ref(),
        &RagQuery::new(
            "What is Heron and how long do its idle sessions last?",
            COLLECTION,
        )
        .with_top_n(2),
    )
    .await
    .unwrap();
    assert_eq!(iterative.trace.route.as_deref(), Some("iterative"));
    assert_eq!(route(&iterative).detail["delegate"], "corrective");
    assert_eq!(iterative.trace.verdicts, vec!["correct"]);
    let mut delegated = iterative.clone();
    delegated.trace.steps.remove(0);
    assert_stopped_before_generation(&delegated);
    assert_eq!(markers(&iterative), vec![1, 2]);
    assert_eq!(iterative.trace.profile.as_deref(), Some("adaptive"));

    assert_eq!(chat.calls(), 1);
    assert!(chat.requests.lock().unwrap()[0].json_mode);
}

/// A pipeline without a retrieval-only path (a host's), as the routed delegate.
struct QueryOnlyPipeline;

#[async_trait::async_trait]
impl RagPipeline for QueryOnlyPipeline {
    fn name(&self) -> &str {
        "host-query-only"
    }

    async fn query(&self, _q: &RagQuery) -> Result<RagAnswer, QueryError> {
        Err(QueryError::Internal {
            stage: "test".into(),
            reason: "a retrieval-only call must never fall back to a full query".into(),
        })
    }
}

struct QueryOnlyDelegates;

impl DelegateSource for QueryOnlyDelegates {
    fn delegate(&self, _profile: &str) -> Result<Arc<dyn RagPipeline>, QueryError> {
        Ok(Arc::new(QueryOnlyPipeline))
    }
}

/// A routed delegate that cannot retrieve alone fails the retrieval-only call, naming it —
/// never a full query.
#[tokio::test]
async fn adaptive_retrieve_only_fails_when_the_routed_delegate_cannot_retrieve_alone() {
    let fx = fixture().await;
    let adaptive = AdaptiveRagPipeline::new(
        "adaptive",
        resolve_options("adaptive", &RagSettings::default()).unwrap(),
        fx.deps(None, None),
        Arc::new(HeuristicClassifier),
        Arc::new(QueryOnlyDelegates),
    );
    let err = retrieve_only(
        &adaptive,
        &RagQuery::new("When do Dashboard 3 sessions expire?", COLLECTION),
    )
    .await
    .unwrap_err();
    match &err {
        QueryError::RetrievalOnlyUnsupported { pipeline } => {
            assert_eq!(pipeline, "host-query-only")
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(err.to_string().contains("host-query-only"), "{err}");
}
