//! Test support: [`HashEmbedder`], a deterministic [`Embedder`] needing no model file — feature
//! hashing of a text's normalised words (unigrams and bigrams) into a fixed number of
//! dimensions, L2-normalised. Texts sharing words get similar vectors, so retrieval behaves
//! plausibly (lexical overlap stands in for meaning), and the same text always gets the same
//! vector, on every machine.
//!
//! Words are the query module's content words (lowercased, stopwords removed, lightly
//! stemmed); a text without any falls back to its plain lowercased words. Each feature adds
//! ±1 to one dimension (FNV-1a of the feature picks the dimension and the sign). Tokens are
//! counted with the in-code WordPiece test tokenizer ([`super::test_tokenizer`]).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::onnx::l2_normalise;
use super::test_tokenizer::test_tokenizer;
use super::{EmbedCounters, EmbedError, EmbedStats, Embedder, TokenCounter};
use crate::types::EmbeddingProfile;
use orkeon_crews::text::content_words;

/// Provider label of every hash embedder's profile.
pub const HASH_PROVIDER: &str = "hash";
/// Model label of [`HashEmbedder::new`].
pub const HASH_MODEL: &str = "word-bigrams";

/// The deterministic test embedder (see the module docs).
pub struct HashEmbedder {
    model: String,
    dimensions: usize,
    counters: EmbedCounters,
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The normalised words of `text` (see the module docs).
fn words(text: &str) -> Vec<String> {
    let content = content_words(text);
    if !content.is_empty() {
        return content;
    }
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

impl HashEmbedder {
    /// A hash embedder of `dimensions` dimensions, model [`HASH_MODEL`].
    pub fn new(dimensions: usize) -> Self {
        Self::named(HASH_MODEL, dimensions)
    }

    /// A hash embedder with its own model label (another label is another embedding profile,
    /// as another model would be).
    pub fn named(model: &str, dimensions: usize) -> Self {
        assert!(
            dimensions > 0,
            "a hash embedder needs at least one dimension"
        );
        Self {
            model: model.to_string(),
            dimensions,
            counters: EmbedCounters::default(),
        }
    }

    /// The vector of one text (queries and passages alike: there is no query prefix).
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let words = words(text);
        let mut vector = vector_of_features(
            self.dimensions,
            words.iter().map(|w| format!("1:{w}")).chain(
                words
                    .windows(2)
                    .map(|pair| format!("2:{} {}", pair[0], pair[1])),
            ),
        );
        if vector.iter().all(|&v| v == 0.0) {
            // No word at all (or features cancelling out): one fixed feature, never a zero vector.
            vector = vector_of_features(self.dimensions, std::iter::once("0:".to_string()));
        }
        l2_normalise(&mut vector);
        vector
    }

    fn record(&self, inputs: usize, started: Instant) {
        self.counters.add_batch(inputs);
        self.counters.add_inference(started.elapsed());
    }
}

fn vector_of_features(dimensions: usize, features: impl Iterator<Item = String>) -> Vec<f32> {
    let mut vector = vec![0.0f32; dimensions];
    for feature in features {
        let hash = fnv1a(feature.as_bytes());
        let dimension = (hash % dimensions as u64) as usize;
        let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
        vector[dimension] += sign;
    }
    vector
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn profile(&self) -> EmbeddingProfile {
        EmbeddingProfile {
            provider: HASH_PROVIDER.to_string(),
            model: self.model.clone(),
            dimensions: self.dimensions,
        }
    }

    fn token_counter(&self) -> Arc<dyn TokenCounter> {
        test_tokenizer()
    }

    async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let started = Instant::now();
        let vectors: Vec<Vec<f32>> = texts.iter().map(|text| self.vector(text)).collect();
        self.record(texts.len(), started);
        Ok(vectors)
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let started = Instant::now();
        let vector = self.vector(text);
        self.record(1, started);
        Ok(vector)
    }

    fn stats(&self) -> EmbedStats {
        self.counters.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[tokio::test]
    async fn vectors_are_deterministic_unit_length_and_follow_shared_words() {
        let embedder = HashEmbedder::new(256);
        let query = embedder
            .embed_query("How many days do customers have to request a refund?")
            .await
            .expect("query");
        let passages = embedder
            .embed_documents(vec![
                "Customers can request a refund within 30 days of delivery.".into(),
                "Express shipping arrives the next business day.".into(),
                "".into(),
            ])
            .await
            .expect("passages");
        for vector in passages.iter().chain([&query]) {
            assert_eq!(vector.len(), 256);
            let norm: f32 = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        }
        assert!(cosine(&query, &passages[0]) > 0.5);
        assert!(cosine(&query, &passages[0]) > cosine(&query, &passages[1]) + 0.3);
        // Same text, same vector — across instances too.
        assert_eq!(
            HashEmbedder::new(256)
                .vector("Customers can request a refund within 30 days of delivery."),
            passages[0]
        );
        // Word order matters through the bigrams only.
        let swapped = embedder.vector("refund request");
        let straight = embedder.vector("request refund");
        assert_ne!(swapped, straight);
        assert!(cosine(&swapped, &straight) > 0.5);

        let stats = embedder.stats();
        assert_eq!((stats.inputs, stats.batches), (4, 2));
        assert_eq!(
            embedder.profile().to_string(),
            "hash:word-bigrams (256 dims)"
        );
        assert_ne!(
            HashEmbedder::named("other", 256).profile(),
            embedder.profile()
        );
        assert_eq!(embedder.token_counter().count_tokens("hello world"), 2);
    }
}
