//! Embedders: text → L2-normalised vectors, and token counting with the model's tokenizer.
//!
//! Implementations: local ONNX (`onnx`, through `ort` with `load-dynamic` and `tokenizers`) and
//! an OpenAI-compatible `/v1/embeddings` HTTP client (`openai`). Model files and the ONNX
//! Runtime library are resolved by `models` and `runtime`. For tests (`cfg(test)` or the
//! `testing` feature): the model-free [`HashEmbedder`] (`hashing`) and its in-code WordPiece
//! tokenizer (`test_tokenizer`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod cls_graph;
pub mod cross_encoder;
pub mod fetch;
#[cfg(any(test, feature = "testing"))]
pub mod hashing;
pub mod models;
pub mod onnx;
mod onnx_proto;
pub mod openai;
pub mod runtime;
mod session_pool;
#[cfg(any(test, feature = "testing"))]
pub mod test_tokenizer;
pub mod tokenizer;
mod unmasked_graph;

pub use cross_encoder::CrossEncoder;
pub use fetch::FetchProgress;
#[cfg(any(test, feature = "testing"))]
pub use hashing::HashEmbedder;
pub use models::{
    CATALOGUE, ModelKind, ModelSource, ModelSpec, ModelStatus, Pooling, fetch_all, model_status,
    resolve_model,
};
pub use onnx::OnnxEmbedder;
pub use openai::OpenAiEmbedder;
pub use runtime::{cache_dir, ensure_runtime};

use async_trait::async_trait;

use crate::types::EmbeddingProfile;

/// Chunk metadata key under which ingestion records the chunk text's token count (the
/// embedding model's tokenizer, no special tokens), so that assembly need not re-tokenise at
/// query time. Chunks without it (ingested before it existed) are counted when assembled.
pub const CHUNK_TOKENS_KEY: &str = "tokens";

/// Counts tokens the way the embedding model will see them (chunk sizes, context budgets).
pub trait TokenCounter: Send + Sync {
    /// Number of tokens of `text`, without special tokens.
    fn count_tokens(&self, text: &str) -> usize;

    /// Whether counts add up across a whitespace or punctuation boundary: the count of
    /// `a + " " + b` is the count of `a` plus the count of `b`, and a punctuation character
    /// next to a word is a token of its own. True for BERT-style tokenizers (every shipped
    /// model); then a passage's count can be its frame's plus its text's recorded count.
    fn splits_at_whitespace_and_punctuation(&self) -> bool {
        false
    }
}

/// Cumulative counters of an embedder, for benchmarks and traces.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EmbedStats {
    /// Texts embedded so far.
    pub inputs: u64,
    /// Model invocations (batches) so far.
    pub batches: u64,
    /// Nanoseconds spent inside the model runtime (ONNX Runtime `run`, or the HTTP call).
    pub inference_ns: u64,
}

/// The live counters behind an embedder's [`EmbedStats`].
#[derive(Debug, Default)]
pub(crate) struct EmbedCounters {
    inputs: AtomicU64,
    batches: AtomicU64,
    inference_ns: AtomicU64,
}

impl EmbedCounters {
    /// A batch of `inputs` texts was embedded.
    pub(crate) fn add_batch(&self, inputs: usize) {
        self.inputs.fetch_add(inputs as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Time spent inside the model runtime.
    pub(crate) fn add_inference(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.inference_ns.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> EmbedStats {
        EmbedStats {
            inputs: self.inputs.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            inference_ns: self.inference_ns.load(Ordering::Relaxed),
        }
    }
}

impl EmbedStats {
    /// The counters of two runtimes together.
    pub fn plus(self, other: Self) -> Self {
        Self {
            inputs: self.inputs + other.inputs,
            batches: self.batches + other.batches,
            inference_ns: self.inference_ns + other.inference_ns,
        }
    }
}

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("{0}")]
    Setup(String),
    #[error("embedding inference failed: {0}")]
    Inference(String),
    #[error("embedding endpoint failed: {0}")]
    Remote(String),
}

/// Text → vector.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Provider, model and dimensions; recorded in every collection's manifest.
    fn profile(&self) -> EmbeddingProfile;

    /// The tokenizer-backed counter matching this model.
    fn token_counter(&self) -> Arc<dyn TokenCounter>;

    /// Embeds passages (no query prefix). Output order matches input order.
    async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// Embeds one search query (with the model's query prefix, if it has one).
    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError>;

    /// Loads now what queries need, so that the first query does not wait for it (a server
    /// calls this at start). Embedders that load nothing lazily do nothing.
    async fn prepare_for_queries(&self) -> Result<(), EmbedError> {
        Ok(())
    }

    /// Loads now what embedding documents needs (ingestion calls this at the first source
    /// with chunks to embed, so that loading overlaps the preparation of the first window).
    async fn prepare_for_documents(&self) -> Result<(), EmbedError> {
        Ok(())
    }

    /// Cumulative counters.
    fn stats(&self) -> EmbedStats {
        EmbedStats::default()
    }
}

/// The embedder `embeddings.provider` names: `onnx` resolves `embeddings.model` (fetching it
/// if needed) and loads it locally; `openai` talks to the configured endpoint.
pub fn build_embedder(
    settings: &crate::settings::EmbeddingSettings,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    match settings.provider.as_str() {
        "onnx" => {
            let dir = resolve_model(&settings.model, settings, None)?;
            Ok(Arc::new(OnnxEmbedder::load(&dir, settings)?))
        }
        "openai" => Ok(Arc::new(OpenAiEmbedder::for_settings(settings)?)),
        other => Err(EmbedError::Setup(format!(
            "unknown embeddings.provider {other:?}; known providers: [\"onnx\", \"openai\"]"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::EmbeddingSettings;

    #[test]
    fn build_embedder_follows_the_provider_setting() {
        let unknown = EmbeddingSettings {
            provider: "tfidf".into(),
            ..EmbeddingSettings::default()
        };
        let err = build_embedder(&unknown).err().expect("unknown provider");
        assert!(
            err.to_string()
                .contains(r#"known providers: ["onnx", "openai"]"#),
            "{err}"
        );

        // `onnx` loading the configured model is tested with the real model in
        // `tests/models_embedding.rs`; here, a missing model fails naming where it looked.
        let missing = EmbeddingSettings {
            model: "no-such-model".into(),
            models_dir: Some(std::path::PathBuf::from("/nonexistent/models")),
            ..EmbeddingSettings::default()
        };
        let err = build_embedder(&missing).err().expect("unknown model");
        assert!(
            err.to_string()
                .contains("/nonexistent/models/no-such-model"),
            "{err}"
        );

        let mut remote = EmbeddingSettings {
            provider: "openai".into(),
            ..EmbeddingSettings::default()
        };
        remote.openai.api_key_env = "ORKEON_TEST_SURELY_UNSET_KEY_VARIABLE".into();
        let err = build_embedder(&remote).err().expect("missing key");
        assert!(
            err.to_string()
                .contains("ORKEON_TEST_SURELY_UNSET_KEY_VARIABLE"),
            "{err}"
        );
    }
}
