//! Retrieval with the real models (`ORKEON_MODELS_DIR`, else `../shared/models`): semantic
//! chunking on bge-small-en-v1.5's sentence embeddings, the ms-marco cross-encoder as the `onnx`
//! reranker, and the `balanced` profile reranking hybrid candidates with it — what depends on
//! the models' judgement of meaning. The mechanisms are unit-tested without model files.

mod common;

use std::sync::{Arc, OnceLock};

use common::{embedding_settings, model};
use orkeon_knowledge::chunk::contract::{assert_contract, assert_covers_all_content, document};
use orkeon_knowledge::chunk::{Chunker, build_chunker};
use orkeon_knowledge::embed::{Embedder, OnnxEmbedder, TokenCounter};
use orkeon_knowledge::query::options::resolve_options;
use orkeon_knowledge::query::rerank::{RerankerContext, RerankerFactory};
use orkeon_knowledge::query::{
    HeuristicGroundednessChecker, PipelineDeps, RagQuery, StagedRagPipeline, TransformerFactory,
    retrieve_only,
};
use orkeon_knowledge::settings::{ChunkingSettings, RagSettings, StoreSettings};
use orkeon_knowledge::store::EmbeddedStore;
use orkeon_knowledge::testing::seed_support_corpus;
use orkeon_knowledge::types::{RagAnswer, ScoreOrigin, ScoredChunk, StoredChunk, TraceStep};

/// bge-small-en-v1.5, loaded once.
fn bge() -> Arc<OnnxEmbedder> {
    static EMBEDDER: OnceLock<Arc<OnnxEmbedder>> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            Arc::new(
                OnnxEmbedder::load(&model("bge-small-en-v1.5"), &embedding_settings())
                    .expect("bge-small-en-v1.5 loads with ONNX Runtime"),
            )
        })
        .clone()
}

/// bge-small-en-v1.5's own tokenizer.
fn bge_counter() -> Arc<dyn TokenCounter> {
    bge().token_counter()
}

// ---------------------------------------------------------------------------------------------
// Semantic chunking
// ---------------------------------------------------------------------------------------------

const PASTA: &[&str] = &[
    "Bring a large pot of salted water to a rolling boil.",
    "Add the spaghetti and stir so the noodles do not stick together.",
    "Cook the pasta for about nine minutes until it is al dente.",
    "Meanwhile, simmer crushed tomatoes with garlic and olive oil for the sauce.",
    "Drain the pasta, toss it with the tomato sauce and top it with grated parmesan.",
];
const STARS: &[&str] = &[
    "A black hole forms when a massive star collapses under its own gravity.",
    "Its event horizon is the boundary beyond which not even light can escape.",
    "Astronomers detect black holes by watching stars orbit an invisible companion.",
    "Merging black holes emit gravitational waves that observatories like LIGO measure.",
    "The supermassive black hole at the centre of our galaxy is called Sagittarius A*.",
];

/// A semantic chunker on a fresh bge-small embedder (so its counters start at zero), with
/// `max_tokens`, overlap 4 and the 10th-percentile breakpoint; and that embedder.
fn semantic(max_tokens: usize) -> (Arc<dyn Chunker>, Arc<OnnxEmbedder>) {
    let embedder = Arc::new(
        OnnxEmbedder::load(&model("bge-small-en-v1.5"), &embedding_settings())
            .expect("bge-small-en-v1.5 loads with ONNX Runtime"),
    );
    let settings = ChunkingSettings {
        strategy: "semantic".into(),
        max_tokens,
        max_tokens_percent: None,
        overlap: 4,
        breakpoint_percentile: 10,
    };
    let chunker = build_chunker(
        &settings,
        bge_counter(),
        Some(embedder.clone() as Arc<dyn Embedder>),
    )
    .expect("semantic builds");
    (chunker, embedder)
}

#[tokio::test]
async fn breaks_between_topics_with_real_embeddings() {
    let text = format!("{}\n{}", PASTA.join(" "), STARS.join(" "));
    let doc = document(&text, "text");
    let (chunker, embedder) = semantic(256);
    let chunks = chunker.chunk(&doc).await.expect("semantic chunking");
    assert_contract(&doc, &chunks, bge_counter().as_ref(), 256);
    assert_covers_all_content(&doc, &chunks);
    let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(texts, [PASTA.join(" "), STARS.join(" ")], "{chunks:#?}");
    assert_eq!(embedder.stats().inputs, 10, "one embedding per sentence");
}

#[tokio::test]
async fn oversized_groups_are_cut_to_the_bound() {
    let text = format!("{} {}", PASTA.join(" "), STARS.join(" "));
    let doc = document(&text, "text");
    let chunks = semantic(24).0.chunk(&doc).await.expect("semantic chunking");
    assert_contract(&doc, &chunks, bge_counter().as_ref(), 24);
    assert_covers_all_content(&doc, &chunks);
    assert!(chunks.len() >= 6, "{chunks:#?}");
    // No chunk mixes the topics: the breakpoint is kept while groups are cut.
    let boundary = text.find(STARS[0]).expect("star text");
    assert!(
        chunks
            .iter()
            .all(|c| c.end <= boundary || c.start >= boundary)
    );
}

// ---------------------------------------------------------------------------------------------
// The cross-encoder as a reranker
// ---------------------------------------------------------------------------------------------

/// A retrieval candidate `id` holding `text`.
fn scored(id: &str, text: &str) -> ScoredChunk {
    ScoredChunk {
        chunk: StoredChunk {
            id: id.to_string(),
            source_id: format!("src/{id}.md"),
            ordinal: 0,
            text: text.to_string(),
            start: 0,
            end: text.len(),
            metadata: Default::default(),
            content_hash: String::new(),
            vector: Vec::new(),
        },
        score: 0.5,
        origin: ScoreOrigin::Vector,
    }
}

#[tokio::test]
async fn cross_encoder_puts_the_answering_passage_first() {
    let factory = RerankerFactory::builtin(embedding_settings());
    let options = resolve_options("balanced", &RagSettings::default())
        .unwrap()
        .rerank;
    let ctx = RerankerContext {
        chat: None,
        options: &options,
    };
    let reranker = factory.create("Cross-Encoder", &ctx).unwrap();
    assert_eq!(reranker.name(), "onnx");
    let texts = [
        (
            "ny",
            "New York City is famous for the Metropolitan Museum of Art",
        ),
        (
            "berlin",
            "Berlin has a population of 3,520,031 registered inhabitants",
        ),
        (
            "paris",
            "Paris is the capital of France and hosts the Louvre.",
        ),
    ];
    let candidates = texts.iter().map(|(id, text)| scored(id, text)).collect();
    let out = reranker
        .rerank_traced("How many people live in Berlin?", candidates, 2)
        .await
        .unwrap();
    assert_eq!(out.model.as_deref(), Some("ms-marco-MiniLM-L-12-v2"));
    assert_eq!(out.chunks.len(), 2);
    assert_eq!(out.chunks[0].chunk.id, "berlin");
    assert_eq!(out.chunks[0].origin, ScoreOrigin::Rerank);
    // README figures: +9.2 for the Berlin pair, −11.2 for New York.
    assert!(out.chunks[0].score > 8.0, "{}", out.chunks[0].score);
    assert!(out.chunks[1].score < out.chunks[0].score);

    // A second build reuses the memoised encoder of that model folder.
    let again = factory.create("onnx", &ctx).unwrap();
    let out2 = again
        .rerank("How many people live in Berlin?", out.chunks.clone(), 1)
        .await
        .unwrap();
    assert_eq!(out2[0].chunk.id, "berlin");

    // A model that does not exist fails naming the key.
    let mut missing = options.clone();
    missing.model = "no-such-reranker".into();
    let err = factory
        .create(
            "onnx",
            &RerankerContext {
                chat: None,
                options: &missing,
            },
        )
        .err()
        .unwrap();
    assert!(err.to_string().contains("rag.rerank.model"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// The balanced profile
// ---------------------------------------------------------------------------------------------

const COLLECTION: &str = "kb";

/// The support corpus in an embedded store (temp folder), embedded with bge-small; pipeline
/// dependencies with the built-in rerankers (the cross-encoder resolved from the models folder).
async fn support_fixture() -> (tempfile::TempDir, PipelineDeps) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Arc::new(EmbeddedStore::open(dir.path(), StoreSettings::default()).expect("store opens"));
    let embedder = bge();
    seed_support_corpus(store.as_ref(), embedder.as_ref(), COLLECTION)
        .await
        .expect("corpus seeded");
    let deps = PipelineDeps {
        store,
        embedder,
        chat: None,
        rerankers: Arc::new(RerankerFactory::builtin(embedding_settings())),
        transformers: Arc::new(TransformerFactory::builtin()),
        groundedness: Some(Arc::new(HeuristicGroundednessChecker::default())),
    };
    (dir, deps)
}

fn step<'a>(answer: &'a RagAnswer, stage: &str) -> &'a TraceStep {
    answer
        .trace
        .steps
        .iter()
        .find(|s| s.stage == stage)
        .unwrap_or_else(|| panic!("no {stage} step in {:?}", answer.trace.steps))
}

#[tokio::test]
async fn balanced_reranks_hybrid_candidates_with_the_cross_encoder() {
    let (_dir, deps) = support_fixture().await;
    // A skip_gap above 1 keeps this decisive question reranked (min-max scores lie in [0, 1]).
    let mut rag = RagSettings::default();
    rag.rerank.skip_gap = Some(2.0);
    let p = StagedRagPipeline::new("balanced", resolve_options("balanced", &rag).unwrap(), deps)
        .unwrap();
    let answer = retrieve_only(
        &p,
        &RagQuery::new("How many people live in Berlin?", COLLECTION).with_top_n(3),
    )
    .await
    .unwrap();
    let retrieve = &step(&answer, "retrieve").detail;
    assert_eq!(retrieve["mode"], "hybrid");
    assert_eq!(retrieve["candidate_k"], 50);
    let rerank = &step(&answer, "rerank").detail;
    assert_eq!(rerank["reranker"], "onnx");
    assert_eq!(rerank["model"], "ms-marco-MiniLM-L-12-v2");
    assert_eq!(
        rerank["candidates"], 10,
        "every chunk of the corpus is a candidate"
    );
    assert_eq!(rerank["reranked"], 10);
    assert_eq!(rerank["blend"], "convex");
    assert_eq!(rerank["kept"], 3);
    let best = &answer.citations[0];
    assert_eq!(best.source_id, "kb/berlin.md");
    // The cross-encoder's order blended with the retrieval order: a convex score in [0, 1].
    assert_eq!(best.score_origin, ScoreOrigin::RerankBlend);
    assert!(
        best.score >= 0.5 && best.score <= 1.0,
        "Berlin {}",
        best.score
    );
    assert!(answer.citations[1].score < best.score);

    // With `blend: replace` the cross-encoder's logits rank alone, labelled as such.
    let rag: RagSettings = serde_json::from_value(
        serde_json::json!({"rerank": {"blend": "replace", "skip_gap": 2.0}}),
    )
    .unwrap();
    let (_dir, deps) = support_fixture().await;
    let p = StagedRagPipeline::new("balanced", resolve_options("balanced", &rag).unwrap(), deps)
        .unwrap();
    let answer = retrieve_only(
        &p,
        &RagQuery::new("How many people live in Berlin?", COLLECTION).with_top_n(3),
    )
    .await
    .unwrap();
    let best = &answer.citations[0];
    assert_eq!(best.source_id, "kb/berlin.md");
    assert_eq!(best.score_origin, ScoreOrigin::Rerank);
    assert!(best.score > 5.0, "Berlin logit {}", best.score);
}
