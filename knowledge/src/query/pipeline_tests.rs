//! End-to-end tests of the staged pipeline and the profile resolver on model-free components:
//! the in-memory store holding the support corpus embedded by the deterministic hash embedder,
//! the in-code test tokenizer and, for generation, either a scripted OpenAI-compatible HTTP
//! server on loopback or the in-process scripted chat double (each test says which). The
//! cross-encoder's reranking of the same corpus with the real models is tested in
//! `tests/models_retrieval.rs`.

use std::sync::Arc;

use orkeon_crews::ports::ChatModel;
use orkeon_testkit::{
    OpenAiCompatibleChat, SCRIPTED_OPENAI_LABEL, ScriptRule, ScriptedChat, ScriptedLlmServer,
};
use serde_json::Value;

use super::groundedness::HeuristicGroundednessChecker;
use super::options::resolve_options;
use super::pipeline::{PipelineDeps, StagedRagPipeline};
use super::profiles::ProfileResolver;
use super::rerank::RerankerFactory;
use super::transform::TransformerFactory;
use super::{QueryError, RagPipeline, RagQuery, retrieve_only};
use crate::embed::HashEmbedder;
use crate::settings::{EmbeddingSettings, RagSettings};
use crate::store::InMemoryStore;
use crate::testing::seed_support_corpus;
use crate::types::{RagAnswer, ScoreOrigin, TraceStep};

const COLLECTION: &str = "kb";

/// The built-in rerankers, with `onnx` (the cross-encoder) replaced by one that refuses to load:
/// unit tests never read model files (a pipeline asking for it would fail loudly).
fn rerankers() -> Arc<RerankerFactory> {
    let factory = RerankerFactory::builtin(EmbeddingSettings::default());
    factory.register(
        "onnx",
        &["cross-encoder", "crossencoder"],
        Arc::new(|_| {
            Err(QueryError::Setup {
                component: "reranker 'onnx'".into(),
                reason: "unit tests load no model; the cross-encoder is tested in tests/models_retrieval.rs".into(),
            })
        }),
    );
    Arc::new(factory)
}

struct Fixture {
    deps: PipelineDeps,
}

/// An in-memory store holding the support corpus, embedded by the hash embedder.
async fn fixture(chat: Option<Arc<dyn ChatModel>>) -> Fixture {
    let store = Arc::new(InMemoryStore::new());
    let embedder = Arc::new(HashEmbedder::new(1024));
    seed_support_corpus(store.as_ref(), embedder.as_ref(), COLLECTION)
        .await
        .expect("corpus seeded");
    Fixture {
        deps: PipelineDeps {
            store,
            embedder,
            chat,
            rerankers: rerankers(),
            transformers: Arc::new(TransformerFactory::builtin()),
            groundedness: Some(Arc::new(HeuristicGroundednessChecker::default())),
        },
    }
}

fn settings(json: Value) -> RagSettings {
    serde_json::from_value(json).expect("settings")
}

fn pipeline(profile: &str, rag: &RagSettings, deps: &PipelineDeps) -> StagedRagPipeline {
    StagedRagPipeline::new(
        profile,
        resolve_options(profile, rag).unwrap(),
        deps.clone(),
    )
    .unwrap()
}

fn step<'a>(answer: &'a RagAnswer, stage: &str) -> &'a TraceStep {
    answer
        .trace
        .steps
        .iter()
        .find(|s| s.stage == stage)
        .unwrap_or_else(|| panic!("no {stage} step in {:?}", answer.trace.steps))
}

fn stages(answer: &RagAnswer) -> Vec<&str> {
    answer
        .trace
        .steps
        .iter()
        .map(|s| s.stage.as_str())
        .collect()
}

const ALL_STAGES: [&str; 7] = [
    "transform",
    "retrieve",
    "fuse",
    "rerank",
    "assemble",
    "generate",
    "groundedness",
];

#[tokio::test]
async fn fast_profile_answers_with_citations_through_a_scripted_openai_server() {
    // A scripted OpenAI-compatible server on loopback stands in for the LLM.
    let server = ScriptedLlmServer::start(ScriptRule::queue(&[
        "Customers have 30 days from delivery to request a refund [1]. The money goes back within five business days [9].",
    ]))
    .await
    .expect("scripted LLM server");
    let chat: Arc<dyn ChatModel> = Arc::new(OpenAiCompatibleChat::new(server.base_url()));
    let fx = fixture(Some(chat)).await;
    let p = pipeline("fast", &RagSettings::default(), &fx.deps);
    let answer = p
        .query(
            &RagQuery::new(
                "How many days do customers have to request a refund?",
                COLLECTION,
            )
            .with_top_n(4),
        )
        .await
        .unwrap();

    assert_eq!(stages(&answer), ALL_STAGES);
    assert_eq!(answer.trace.profile.as_deref(), Some("fast"));
    // The unknown marker [9] was removed and traced.
    assert_eq!(
        answer.text,
        "Customers have 30 days from delivery to request a refund [1]. The money goes back within five business days."
    );
    let generate = &step(&answer, "generate").detail;
    assert_eq!(generate["model"], SCRIPTED_OPENAI_LABEL);
    assert_eq!(generate["removed_markers"], serde_json::json!([9]));
    assert_eq!(generate["cited"], serde_json::json!([1]));
    // Citations list only what was cited; [1] is the best-ranked refund passage.
    assert_eq!(answer.citations.len(), 1);
    assert_eq!(answer.citations[0].marker, 1);
    assert!(
        answer.citations[0].source_id.starts_with("kb/refund"),
        "{:?}",
        answer.citations[0]
    );
    assert_eq!(answer.citations[0].score_origin, ScoreOrigin::Vector);

    let retrieve = &step(&answer, "retrieve").detail;
    assert_eq!(retrieve["mode"], "vector");
    assert_eq!(retrieve["hybrid"], false);
    // fast: candidate_k = top_k (5), never below the query's top_n (4); truncation to 4.
    assert_eq!(retrieve["candidate_k"], 5);
    assert_eq!(retrieve["top_k"], 4);
    assert_eq!(retrieve["candidates"], 5);
    assert_eq!(step(&answer, "rerank").detail["kept"], 4);
    assert_eq!(step(&answer, "rerank").detail["reranker"], "disabled");
    let assemble = &step(&answer, "assemble").detail;
    assert_eq!(assemble["ordering"], "edges");
    assert_eq!(assemble["layout"], serde_json::json!([1, 3, 4, 2]));
    assert!(assemble["tokens"].as_u64().unwrap() <= 2000);
    assert_eq!(step(&answer, "groundedness").detail["skipped"], "disabled");
    assert!(answer.trace.steps.iter().all(|s| s.duration_ms >= 0.0));

    // The request the server saw: grounded system prompt, prompt_convention user message in
    // edges layout with rank-based markers.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages[0]["content"].as_str().unwrap().contains("[1]"));
    let user = messages[1]["content"].as_str().unwrap();
    assert!(
        user.starts_with("Context:\n[1] (source: kb/refund"),
        "{user}"
    );
    let markers: Vec<&str> = user
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| &l[..3])
        .collect();
    assert_eq!(markers, vec!["[1]", "[3]", "[4]", "[2]"]);
    assert!(user.ends_with("\n\nQuestion: How many days do customers have to request a refund?"));
}

#[tokio::test]
async fn retrieval_only_makes_no_llm_call_and_traces_the_skipped_generation() {
    let chat = ScriptedChat::new(&[]);
    let fx = fixture(Some(chat.clone() as Arc<dyn ChatModel>)).await;
    let p = pipeline("fast", &RagSettings::default(), &fx.deps);
    let answer = retrieve_only(
        &p,
        &RagQuery::new("What does the warranty cover?", COLLECTION),
    )
    .await
    .unwrap();
    assert_eq!(chat.calls(), 0);
    assert_eq!(answer.text, "");
    assert_eq!(stages(&answer), ALL_STAGES);
    let generate = &step(&answer, "generate").detail;
    assert_eq!(generate["skipped"], "retrieval-only");
    assert!(generate["reason"].as_str().unwrap().contains("on purpose"));
    // Citations are every assembled passage, in rank order.
    assert_eq!(answer.citations.len(), 5);
    assert_eq!(
        answer
            .citations
            .iter()
            .map(|c| c.marker)
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert!(
        answer.citations[0].source_id == "kb/warranty.md",
        "{:?}",
        answer.citations[0]
    );
    assert!(
        answer
            .citations
            .windows(2)
            .all(|w| w[0].score >= w[1].score)
    );
}

#[tokio::test]
async fn no_candidates_give_the_no_context_answer_without_an_llm_call() {
    let chat = ScriptedChat::new(&[]);
    let fx = fixture(Some(chat.clone() as Arc<dyn ChatModel>)).await;
    // A floor above any cosine similarity: retrieval keeps nothing.
    let rag = settings(serde_json::json!({"retrieval": {"min_score": 1.5}}));
    let p = pipeline("fast", &rag, &fx.deps);
    let answer = p
        .query(&RagQuery::new(
            "How many days do I have for a refund?",
            COLLECTION,
        ))
        .await
        .unwrap();
    assert_eq!(chat.calls(), 0);
    assert!(answer.text.contains("could not find"), "{}", answer.text);
    assert!(answer.citations.is_empty());
    assert_eq!(step(&answer, "retrieve").detail["below_min_score"], 5);
    assert_eq!(step(&answer, "generate").detail["skipped"], "no-context");
    assert_eq!(
        step(&answer, "groundedness").detail["skipped"],
        "no-context"
    );
    // Deterministic.
    let again = p
        .query(&RagQuery::new(
            "How many days do I have for a refund?",
            COLLECTION,
        ))
        .await
        .unwrap();
    assert_eq!(again.text, answer.text);
}

#[tokio::test]
async fn quality_runs_the_groundedness_check_on_the_generated_answer() {
    let fx = fixture(None).await;
    let question = "What does the warranty cover?";
    let q = RagQuery::new(question, COLLECTION).with_top_n(2);
    // The quality preset without its cross-encoder (unit tests load no model): hybrid
    // retrieval of 100 candidates, then the groundedness check this test is about.
    let quality = settings(serde_json::json!({"rerank": {"enabled": false}}));
    // Which marker holds which warranty passage (retrieval decides the ranks).
    let retrieved = retrieve_only(&pipeline("quality", &quality, &fx.deps), &q)
        .await
        .unwrap();
    let marker_of = |chunk_id: &str| {
        retrieved
            .citations
            .iter()
            .find(|c| c.chunk_id == chunk_id)
            .map(|c| c.marker)
            .unwrap_or_else(|| panic!("{chunk_id} not retrieved: {:?}", retrieved.citations))
    };
    let (defects, damage) = (marker_of("kb/warranty.md#0"), marker_of("kb/warranty.md#1"));

    let run = |reply: String, checker: bool| {
        let mut deps = fx.deps.clone();
        let chat = ScriptedChat::new(&[reply.as_str()]);
        deps.chat = Some(chat.clone() as Arc<dyn ChatModel>);
        if !checker {
            deps.groundedness = None;
        }
        let p = pipeline("quality", &quality, &deps);
        let q = q.clone();
        async move { (p.query(&q).await.unwrap(), chat.calls()) }
    };

    // In-process scripted chat double; the heuristic checker verifies the answer.
    let (answer, calls) = run(
        format!(
            "All devices carry a two-year warranty covering manufacturing defects [{defects}]. Accidental damage is not covered [{damage}]."
        ),
        true,
    )
    .await;
    assert_eq!(calls, 1);
    assert_eq!(step(&answer, "retrieve").detail["candidate_k"], 50);
    let ground = &step(&answer, "groundedness").detail;
    assert_eq!(ground["checker"], "heuristic");
    assert_eq!(ground["grounded"], true, "{ground}");
    assert_eq!(ground["score"], 1.0);
    assert_eq!(answer.citations.len(), 2);

    // The same claims citing each other's passages are caught.
    let (answer, _) = run(
        format!(
            "All devices carry a two-year warranty covering manufacturing defects [{damage}]. Accidental damage is not covered [{defects}]."
        ),
        true,
    )
    .await;
    let ground = &step(&answer, "groundedness").detail;
    assert_eq!(ground["grounded"], false, "{ground}");
    assert_eq!(ground["unsupported_claims"].as_array().unwrap().len(), 2);

    // Without a checker the enabled stage is traced as skipped.
    let (answer, _) = run(format!("Two years [{defects}]."), false).await;
    assert!(
        step(&answer, "groundedness").detail["skipped"]
            .as_str()
            .unwrap()
            .contains("no groundedness checker")
    );
}

#[tokio::test]
async fn multi_query_and_rag_fusion_retrieve_once_per_variant() {
    let chat = ScriptedChat::new(&[
        // The rewrites bridge the question's words to the corpus's ("refund", "paid"), as an
        // LLM's would; the hash embedder matches words, not meanings.
        r#"["refund deadline after delivery", "refund of money paid back"]"#,
        "1. refund deadline after delivery\n2. refund of money paid back",
    ]);
    let fx = fixture(Some(chat.clone() as Arc<dyn ChatModel>)).await;
    let question = "How long can I wait before asking for my money back?";

    let union = pipeline(
        "fast",
        &settings(
            serde_json::json!({"query_transform": {"mode": "multi-query", "variant_count": 2}}),
        ),
        &fx.deps,
    );
    let answer = retrieve_only(&union, &RagQuery::new(question, COLLECTION))
        .await
        .unwrap();
    assert_eq!(answer.trace.query_variants.len(), 3);
    assert_eq!(answer.trace.query_variants[0], question);
    let transform = &step(&answer, "transform").detail;
    assert_eq!(transform["kind"], "union");
    assert_eq!(transform["variant_n"], 2);
    assert_eq!(step(&answer, "retrieve").detail["variants"], 3);
    assert_eq!(step(&answer, "retrieve").detail["candidates"], 15);
    let fuse = &step(&answer, "fuse").detail;
    assert_eq!(fuse["method"], "union");
    assert_eq!(fuse["in"], 15);
    assert!(
        fuse["out"].as_u64().unwrap() < 15,
        "duplicates merged: {fuse}"
    );
    assert!(answer.citations[0].source_id.starts_with("kb/refund"));
    assert_eq!(answer.citations[0].score_origin, ScoreOrigin::Vector);

    let fusion = pipeline(
        "fast",
        &settings(
            serde_json::json!({"query_transform": {"mode": "rag-fusion", "variant_count": 2}}),
        ),
        &fx.deps,
    );
    let answer = retrieve_only(&fusion, &RagQuery::new(question, COLLECTION))
        .await
        .unwrap();
    assert_eq!(step(&answer, "fuse").detail["method"], "rrf");
    assert_eq!(answer.citations[0].score_origin, ScoreOrigin::Rrf);
    assert!(answer.citations[0].source_id.starts_with("kb/refund"));
    // Generation would still use the original question; the transform made one LLM call each.
    assert_eq!(chat.calls(), 2);
}

#[tokio::test]
async fn mmr_diversifies_with_stored_vectors() {
    let fx = fixture(None).await;
    let question = "How many days do customers have to request a refund?";
    let plain = pipeline("fast", &RagSettings::default(), &fx.deps);
    let answer = retrieve_only(&plain, &RagQuery::new(question, COLLECTION).with_top_n(3))
        .await
        .unwrap();
    let plain_sources: Vec<String> = answer
        .citations
        .iter()
        .map(|c| c.source_id.clone())
        .collect();

    let rag = settings(
        serde_json::json!({"retrieval": {"candidate_k": 10, "mmr": {"enabled": true, "lambda": 0.3}}}),
    );
    let diverse = pipeline("fast", &rag, &fx.deps);
    let answer = retrieve_only(&diverse, &RagQuery::new(question, COLLECTION).with_top_n(3))
        .await
        .unwrap();
    let fuse = &step(&answer, "fuse").detail;
    assert_eq!(fuse["mmr"], true);
    assert_eq!(fuse["mmr_similarity"], "cosine");
    assert_eq!(fuse["mmr_lexical_pairs"], 0);
    assert!(fuse["mmr_cosine_pairs"].as_u64().unwrap() > 0);
    let diverse_sources: Vec<String> = answer
        .citations
        .iter()
        .map(|c| c.source_id.clone())
        .collect();
    // The best passage stays first; near-duplicate refund passages make room for others.
    assert_eq!(diverse_sources[0], plain_sources[0]);
    let refund_count = |s: &[String]| s.iter().filter(|s| s.starts_with("kb/refund")).count();
    assert!(
        refund_count(&diverse_sources) < refund_count(&plain_sources),
        "plain {plain_sources:?} vs mmr {diverse_sources:?}"
    );
}

#[tokio::test]
async fn a_tight_budget_drops_passages_and_never_overruns() {
    let fx = fixture(None).await;
    let rag = settings(serde_json::json!({"context": {"max_tokens": 45, "ordering": "linear"}}));
    let p = pipeline("fast", &rag, &fx.deps);
    let answer = retrieve_only(&p, &RagQuery::new("shipping times", COLLECTION))
        .await
        .unwrap();
    let assemble = &step(&answer, "assemble").detail;
    assert!(assemble["tokens"].as_u64().unwrap() <= 45);
    assert!(
        assemble["dropped_by_budget"].as_u64().unwrap() >= 3,
        "{assemble}"
    );
    assert_eq!(assemble["ordering"], "linear");
    assert_eq!(
        answer.citations.len() as u64,
        assemble["chunks"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn unknown_collection_and_bad_queries_fail_clearly() {
    let fx = fixture(None).await;
    let p = pipeline("fast", &RagSettings::default(), &fx.deps);
    let err = retrieve_only(&p, &RagQuery::new("anything", "nope"))
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::Store { .. }), "{err}");
    assert!(err.to_string().contains("nope"), "{err}");
    let err = retrieve_only(&p, &RagQuery::new("  ", COLLECTION))
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::EmptyQuestion));
    let err = retrieve_only(&p, &RagQuery::new("q", COLLECTION).with_top_n(0))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("top_n"), "{err}");
    // Generation without an LLM says how to configure one.
    let err = p
        .query(&RagQuery::new("refund", COLLECTION))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("llm.provider"), "{err}");
}

struct HostPipeline;

#[async_trait::async_trait]
impl RagPipeline for HostPipeline {
    fn name(&self) -> &str {
        "host"
    }
    async fn query(&self, _q: &RagQuery) -> Result<RagAnswer, QueryError> {
        Ok(RagAnswer {
            text: "answered by the host's own pipeline".into(),
            ..RagAnswer::default()
        })
    }
}

#[tokio::test]
async fn profiles_resolve_memoised_with_overrides_and_clear_errors() {
    let fx = fixture(None).await;
    let rag = settings(serde_json::json!({"profile": "balanced", "rerank": {"enabled": false}}));
    let resolver = ProfileResolver::new(rag, fx.deps.clone(), None);

    let fast = resolver.resolve("fast").unwrap();
    assert!(
        Arc::ptr_eq(&fast, &resolver.resolve("FAST").unwrap()),
        "memoised per name"
    );
    assert_eq!(fast.name(), "fast");

    // `default` without a host pipeline is the configured profile, with its overrides.
    let default = resolver.resolve("default").unwrap();
    assert_eq!(default.name(), "balanced");
    let answer = retrieve_only(
        default.as_ref(),
        &RagQuery::new("Berlin population", COLLECTION),
    )
    .await
    .unwrap();
    assert_eq!(step(&answer, "rerank").detail["reranker"], "disabled");
    assert_eq!(step(&answer, "retrieve").detail["mode"], "hybrid");

    let err = resolver.resolve("turbo").err().unwrap();
    let text = err.to_string();
    for name in [
        "fast",
        "balanced",
        "quality",
        "corrective",
        "adaptive",
        "default",
    ] {
        assert!(text.contains(name), "{text}");
    }
    for name in ["corrective", "adaptive"] {
        let err = resolver.resolve(name).err().unwrap();
        assert!(
            matches!(err, QueryError::ProfileNotAvailable { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("not yet available"), "{err}");
    }

    // A registered builder replaces the placeholder.
    resolver.register(
        "corrective",
        Arc::new(|_, _| Ok(Arc::new(HostPipeline) as Arc<dyn RagPipeline>)),
    );
    assert_eq!(resolver.resolve("corrective").unwrap().name(), "host");

    // With a host pipeline, `default` is the host's, and retrieval-only on it is an error.
    let host: Arc<dyn RagPipeline> = Arc::new(HostPipeline);
    let resolver =
        ProfileResolver::new(RagSettings::default(), fx.deps.clone(), Some(host.clone()));
    let default = resolver.resolve("default").unwrap();
    assert!(Arc::ptr_eq(&default, &host));
    let err = retrieve_only(default.as_ref(), &RagQuery::new("q", COLLECTION))
        .await
        .unwrap_err();
    assert!(
        matches!(err, QueryError::RetrievalOnlyUnsupported { .. }),
        "{err}"
    );

    // Unknown component names fail when the profile is built, listing the known ones.
    let bad = settings(
        serde_json::json!({"rerank": {"kind": "colbert"}, "query_transform": {"mode": "none"}}),
    );
    let resolver = ProfileResolver::new(bad, fx.deps.clone(), None);
    let err = resolver.resolve("fast").err().unwrap();
    assert!(
        err.to_string().contains("onnx") && err.to_string().contains("colbert"),
        "{err}"
    );
    let bad = settings(serde_json::json!({"query_transform": {"mode": "step-back"}}));
    let resolver = ProfileResolver::new(bad, fx.deps.clone(), None);
    let err = resolver.resolve("fast").err().unwrap();
    assert!(err.to_string().contains("multi-query"), "{err}");
}

#[tokio::test]
async fn the_llm_listwise_reranker_runs_inside_a_full_query() {
    // In-process scripted chat double: first the ranking, then the answer.
    let chat = ScriptedChat::new(&[
        r#"{"ranking": [3, 1]}"#,
        "Express shipping arrives the next business day [1].",
    ]);
    let fx = fixture(Some(chat.clone() as Arc<dyn ChatModel>)).await;
    let rag =
        settings(serde_json::json!({"rerank": {"enabled": true, "kind": "listwise", "top_n": 2}}));
    let p = pipeline("fast", &rag, &fx.deps);
    let question = "How fast is express shipping?";
    let plain = retrieve_only(
        &pipeline("fast", &RagSettings::default(), &fx.deps),
        &RagQuery::new(question, COLLECTION),
    )
    .await
    .unwrap();
    let answer = p.query(&RagQuery::new(question, COLLECTION)).await.unwrap();
    assert_eq!(chat.calls(), 2);
    let rerank = &step(&answer, "rerank").detail;
    assert_eq!(rerank["reranker"], "llm");
    assert_eq!(rerank["kept"], 2);
    assert!(
        rerank["note"].as_str().unwrap().contains("ranked 2 of 5"),
        "{rerank}"
    );
    // The model's first pick (retrieval rank 3) became marker [1].
    assert_eq!(answer.citations.len(), 1);
    assert_eq!(answer.citations[0].chunk_id, plain.citations[2].chunk_id);
    assert_eq!(answer.citations[0].score_origin, ScoreOrigin::Rerank);
    let ranking_prompt = &chat.requests.lock().unwrap()[0];
    assert!(ranking_prompt.json_mode);
}

/// A model-free reranker: longer passages first, scored by their length.
struct ByLength;

#[async_trait::async_trait]
impl super::rerank::Reranker for ByLength {
    fn name(&self) -> &str {
        "by-length"
    }

    async fn rerank(
        &self,
        _query: &str,
        mut candidates: Vec<crate::types::ScoredChunk>,
        top_n: usize,
    ) -> Result<Vec<crate::types::ScoredChunk>, QueryError> {
        candidates.sort_by_key(|c| std::cmp::Reverse(c.chunk.text.len()));
        candidates.truncate(top_n);
        for c in &mut candidates {
            c.score = c.chunk.text.len() as f32;
            c.origin = ScoreOrigin::Rerank;
        }
        Ok(candidates)
    }
}

#[tokio::test]
async fn convex_fusion_and_rerank_blending_are_traced_and_labelled() {
    let fx = fixture(None).await;
    fx.deps
        .rerankers
        .register("by-length", &[], Arc::new(|_| Ok(Arc::new(ByLength))));
    let question = RagQuery::new(
        "How many days do customers have to request a refund?",
        COLLECTION,
    )
    .with_top_n(3);

    // The balanced preset fuses by convex fusion and blends the reranker in, and says so
    // (a skip_gap above 1 keeps this decisive question reranked).
    let rag = settings(serde_json::json!({"rerank": {"kind": "by-length", "skip_gap": 2.0}}));
    let answer = retrieve_only(&pipeline("balanced", &rag, &fx.deps), &question)
        .await
        .unwrap();
    let fusion = &step(&answer, "retrieve").detail["fusion"];
    assert_eq!(fusion["method"], "convex");
    assert_eq!(fusion["normalization"], "minmax");
    assert_eq!(step(&answer, "rerank").detail["blend"], "convex");
    assert!(
        answer
            .citations
            .iter()
            .all(|c| c.score_origin == ScoreOrigin::RerankBlend)
    );

    // RRF and the reranker's order alone, as before.
    let rag = settings(serde_json::json!({
        "retrieval": {"hybrid": {"fusion": "rrf"}},
        "rerank": {"kind": "by-length", "blend": "replace"}
    }));
    let answer = retrieve_only(&pipeline("balanced", &rag, &fx.deps), &question)
        .await
        .unwrap();
    assert_eq!(step(&answer, "retrieve").detail["fusion"]["method"], "rrf");
    assert_eq!(step(&answer, "rerank").detail["blend"], "replace");
    assert!(
        answer
            .citations
            .iter()
            .all(|c| c.score_origin == ScoreOrigin::Rerank)
    );

    let rag = settings(serde_json::json!({
        "retrieval": {"hybrid": {"fusion": "convex", "normalization": "zscore",
                                 "vector_weight": 0.75, "bm25_weight": 0.25}},
        "rerank": {"kind": "by-length", "blend": "rrf", "blend_weight": 0.25, "candidates": 6,
                   "max_passage_chars": 200, "skip_gap": 100.0}
    }));
    let answer = retrieve_only(&pipeline("balanced", &rag, &fx.deps), &question)
        .await
        .unwrap();
    let fusion = &step(&answer, "retrieve").detail["fusion"];
    assert_eq!(fusion["method"], "convex");
    assert_eq!(fusion["normalization"], "zscore");
    assert_eq!(fusion["weights"]["vector"], 0.75);
    assert_eq!(fusion["weights"]["bm25"], 0.25);
    let rerank = &step(&answer, "rerank").detail;
    assert_eq!(rerank["blend"], "rrf");
    assert_eq!(rerank["blend_weight"], 0.25);
    assert_eq!(rerank["reranked"], 6);
    assert_eq!(rerank["max_passage_chars"], 200);
    assert_eq!(answer.citations.len(), 3);
    assert!(
        answer
            .citations
            .iter()
            .all(|c| c.score_origin == ScoreOrigin::RerankBlend),
        "{:?}",
        answer.citations
    );

    // Weights are checked when the options resolve, naming the key.
    let bad = settings(serde_json::json!({"retrieval": {"hybrid": {"bm25_weight": -1}}}));
    let err = resolve_options("balanced", &bad).unwrap_err().to_string();
    assert!(err.contains("bm25_weight"), "{err}");
    let bad = settings(serde_json::json!({"rerank": {"blend_weight": 1.5}}));
    let err = resolve_options("balanced", &bad).unwrap_err().to_string();
    assert!(err.contains("rerank.blend_weight"), "{err}");
}

#[tokio::test]
async fn document_aggregation_collapses_chunks_of_one_source_and_is_traced() {
    let fx = fixture(None).await;
    let question = RagQuery::new(
        "How many days do customers have to request a refund?",
        COLLECTION,
    )
    .with_top_n(8);
    let plain = retrieve_only(
        &pipeline(
            "fast",
            &settings(serde_json::json!({"retrieval": {"candidate_k": 30}})),
            &fx.deps,
        ),
        &question,
    )
    .await
    .unwrap();
    let sources = |answer: &RagAnswer| -> Vec<String> {
        answer
            .citations
            .iter()
            .map(|c| c.source_id.clone())
            .collect()
    };
    let plain_sources = sources(&plain);
    let mut distinct = plain_sources.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() < plain_sources.len(),
        "the support corpus has sources with several matching chunks: {plain_sources:?}"
    );

    for method in ["max", "max-sum"] {
        let rag = settings(serde_json::json!({
            "retrieval": {"candidate_k": 30, "aggregate": method, "aggregate_sum_weight": 0.2}
        }));
        let answer = retrieve_only(&pipeline("fast", &rag, &fx.deps), &question)
            .await
            .unwrap();
        let got = sources(&answer);
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "{method}: one passage per source");
        let fuse = &step(&answer, "fuse").detail;
        assert_eq!(fuse["aggregate"], method);
        assert_eq!(
            fuse["documents"].as_u64().unwrap() + fuse["collapsed"].as_u64().unwrap(),
            fuse["in"].as_u64().unwrap(),
            "{fuse}"
        );
        assert_eq!(
            fuse.get("aggregate_sum_weight").is_some(),
            method == "max-sum"
        );
        if method == "max" {
            // `max` keeps each source's best chunk where the plain ranking (all 30 candidates)
            // had it first.
            let all = retrieve_only(
                &pipeline(
                    "fast",
                    &settings(serde_json::json!({"retrieval": {"candidate_k": 30}})),
                    &fx.deps,
                ),
                &question.clone().with_top_n(30),
            )
            .await
            .unwrap();
            let mut first_seen = sources(&all);
            let mut seen = std::collections::HashSet::new();
            first_seen.retain(|s| seen.insert(s.clone()));
            assert_eq!(got, first_seen[..got.len()].to_vec());
        }
    }

    let bad = settings(serde_json::json!({"retrieval": {"aggregate_sum_weight": 2.0}}));
    let err = resolve_options("fast", &bad).unwrap_err().to_string();
    assert!(err.contains("retrieval.aggregate_sum_weight"), "{err}");
    let typo: Result<RagSettings, _> =
        serde_json::from_value(serde_json::json!({"retrieval": {"aggregate": "mean"}}));
    assert!(typo.is_err());
}

#[tokio::test]
async fn a_decisive_retrieval_skips_the_reranker_and_says_why() {
    let fx = fixture(None).await;
    fx.deps
        .rerankers
        .register("by-length", &[], Arc::new(|_| Ok(Arc::new(ByLength))));
    let question = RagQuery::new(
        "How many days do customers have to request a refund?",
        COLLECTION,
    )
    .with_top_n(3);

    // A zero gap is always decisive: the reranker never runs, the order is retrieval's.
    let always = settings(serde_json::json!({
        "rerank": {"kind": "by-length", "skip_gap": 0.0, "skip_gap_rank": 3}
    }));
    let answer = retrieve_only(&pipeline("balanced", &always, &fx.deps), &question)
        .await
        .unwrap();
    let rerank = &step(&answer, "rerank").detail;
    assert_eq!(rerank["skipped"], "decisive-retrieval", "{rerank}");
    assert!(
        rerank["reason"].as_str().unwrap().contains("rank 3"),
        "{rerank}"
    );
    assert_eq!(rerank["skip_gap_rank"], 3);
    assert!(
        answer
            .citations
            .iter()
            .all(|c| c.score_origin == ScoreOrigin::Convex)
    );

    // A gap no fused score can reach (convex scores lie in [0, 1]) never skips; the trace
    // still carries the measured gap.
    let never = settings(serde_json::json!({"rerank": {"kind": "by-length", "skip_gap": 2.0}}));
    let answer = retrieve_only(&pipeline("balanced", &never, &fx.deps), &question)
        .await
        .unwrap();
    let rerank = &step(&answer, "rerank").detail;
    assert!(rerank.get("skipped").is_none(), "{rerank}");
    assert!(rerank["gap"].as_f64().unwrap() >= 0.0, "{rerank}");
    assert_eq!(rerank["skip_gap_rank"], 2);
    assert!(
        answer
            .citations
            .iter()
            .all(|c| c.score_origin == ScoreOrigin::RerankBlend)
    );

    // The balanced preset decides by its own gap (0.2) when no key is set, and traces it.
    let preset = settings(serde_json::json!({"rerank": {"kind": "by-length"}}));
    let answer = retrieve_only(&pipeline("balanced", &preset, &fx.deps), &question)
        .await
        .unwrap();
    let rerank = &step(&answer, "rerank").detail;
    let gap = rerank["skip_gap"].as_f64().unwrap();
    assert!((gap - 0.2).abs() < 1e-6, "{rerank}");

    for (json, key) in [
        (
            serde_json::json!({"rerank": {"skip_gap": -0.1}}),
            "rerank.skip_gap",
        ),
        (
            serde_json::json!({"rerank": {"skip_gap": 0.1, "skip_gap_rank": 1}}),
            "rerank.skip_gap_rank",
        ),
    ] {
        let err = resolve_options("balanced", &settings(json))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{err}");
    }
}
