//! The remote embedder: an OpenAI-compatible `POST {base_url}/embeddings` endpoint
//! (`{"model", "input": [..]}` → `{"data": [{"index", "embedding"}]}`).
//!
//! The API key is read from the environment variable `embeddings.openai.api_key_env` names and
//! is never logged. Inputs go in batches of `embeddings.openai.batch_size`; 429, 5xx answers and
//! transport errors/timeouts are retried up to `max_retries` times under the shared
//! [`RetryPolicy`] (exponential backoff with full jitter, a `Retry-After` header honoured).
//! Vectors are checked against
//! `embeddings.openai.dimensions` (or the first answer's size) and L2-normalised.
//!
//! Token counting: the bge-small-en-v1.5 tokenizer when that model resolves locally (no
//! download is attempted), else [`CharsPerFourEstimate`], the conventional ~4 characters per
//! token estimate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use orkeon_crews::retry::{Failure, RetryPolicy, retry_after};
use serde::Deserialize;

use super::models::ModelSearch;
use super::onnx::l2_normalise;
use super::tokenizer::HfTokenCounter;
use super::{EmbedCounters, EmbedError, EmbedStats, Embedder, TokenCounter};
use crate::settings::{EmbeddingSettings, OpenAiEmbeddingSettings};
use crate::types::EmbeddingProfile;

/// Token estimate of `ceil(bytes / 4)`, used when no local tokenizer is available.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharsPerFourEstimate;

impl TokenCounter for CharsPerFourEstimate {
    fn count_tokens(&self, text: &str) -> usize {
        text.len().div_ceil(4)
    }
}

/// Client of an OpenAI-compatible embeddings endpoint.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    api_key: String,
    model: String,
    settings: OpenAiEmbeddingSettings,
    /// Expected vector size (configured, or learnt from the first answer; 0 = unknown yet).
    dimensions: AtomicUsize,
    counter: Arc<dyn TokenCounter>,
    counters: EmbedCounters,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// A client for `model` at `settings.base_url`. Fails when the key variable is unset.
    pub fn new(model: &str, settings: &OpenAiEmbeddingSettings) -> Result<Self, EmbedError> {
        Self::with_token_counter(model, settings, None)
    }

    /// Like [`OpenAiEmbedder::new`], with the bge-small tokenizer for token counting when it
    /// resolves locally from `embedding_settings` (no download).
    pub fn for_settings(embedding_settings: &EmbeddingSettings) -> Result<Self, EmbedError> {
        let search = ModelSearch::from_process(embedding_settings);
        let counter = search
            .find("bge-small-en-v1.5")
            .and_then(|(dir, _)| HfTokenCounter::from_file(&dir.join("tokenizer.json")).ok())
            .map(|c| Arc::new(c) as Arc<dyn TokenCounter>);
        Self::with_token_counter(
            &embedding_settings.model,
            &embedding_settings.openai,
            counter,
        )
    }

    fn with_token_counter(
        model: &str,
        settings: &OpenAiEmbeddingSettings,
        counter: Option<Arc<dyn TokenCounter>>,
    ) -> Result<Self, EmbedError> {
        let api_key = std::env::var(&settings.api_key_env).map_err(|_| {
            EmbedError::Setup(format!(
                "the embeddings API key variable {} is not set (embeddings.openai.api_key_env); \
                 export it, or name another variable there",
                settings.api_key_env
            ))
        })?;
        Self::with_api_key(model, settings, api_key, counter)
    }

    /// A client with an explicit key (the public constructors read it from the environment).
    pub(crate) fn with_api_key(
        model: &str,
        settings: &OpenAiEmbeddingSettings,
        api_key: String,
        counter: Option<Arc<dyn TokenCounter>>,
    ) -> Result<Self, EmbedError> {
        if model.trim().is_empty() {
            return Err(EmbedError::Setup(
                "embeddings.model is empty; name the remote embedding model".into(),
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.timeout_ms.max(1)))
            .build()
            .map_err(|e| EmbedError::Setup(format!("cannot build the HTTP client: {e}")))?;
        let counter = counter.unwrap_or_else(|| {
            tracing::info!("no local bge-small-en-v1.5 tokenizer; counting tokens as chars/4");
            Arc::new(CharsPerFourEstimate)
        });
        Ok(Self {
            client,
            url: format!("{}/embeddings", settings.base_url.trim_end_matches('/')),
            api_key,
            model: model.to_string(),
            settings: settings.clone(),
            dimensions: AtomicUsize::new(settings.dimensions.unwrap_or(0)),
            counter,
            counters: EmbedCounters::default(),
        })
    }

    /// One request, retried on 429/5xx/transport failures.
    async fn embed_batch(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::json!({ "model": self.model, "input": batch });
        let (response, started) = RetryPolicy::new(self.settings.max_retries)
            .run(
                || self.send_once(&body),
                |notice| {
                    tracing::warn!(attempt = notice.attempt, wait_ms = notice.delay.as_millis() as u64, reason = %notice.error, "embeddings request retried");
                },
            )
            .await
            .map_err(|gave_up| {
                let tries = gave_up.attempts;
                EmbedError::Remote(format!(
                    "{} (after {tries} attempt{})",
                    gave_up.error,
                    if tries == 1 { "" } else { "s" }
                ))
            })?;
        let parsed = response.json::<EmbeddingsResponse>().await;
        self.counters.add_inference(started.elapsed());
        let parsed = parsed
            .map_err(|e| EmbedError::Remote(format!("{}: unreadable answer: {e}", self.url)))?;
        self.vectors_from(parsed, batch.len())
    }

    /// One attempt: the answer when it is a success (with the attempt's start, for the
    /// inference time), else why not and whether to try again.
    async fn send_once(
        &self,
        body: &serde_json::Value,
    ) -> Result<(reqwest::Response, Instant), Failure<String>> {
        let started = Instant::now();
        let sent = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .json(body)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => Ok((response, started)),
            Ok(response) => {
                let status = response.status();
                let headers = response.headers();
                let wait = retry_after(|name| headers.get(name).and_then(|v| v.to_str().ok()));
                let text = response.text().await.unwrap_or_default();
                let snippet: String = text.chars().take(300).collect();
                Err(Failure::status(
                    format!("{} answered {status}: {snippet}", self.url),
                    status.as_u16(),
                    wait,
                ))
            }
            Err(e) => {
                let reason = format!("{} failed: {e}", self.url);
                if e.is_timeout() || e.is_connect() || e.is_request() {
                    Err(Failure::retryable(reason))
                } else {
                    Err(Failure::fatal(reason))
                }
            }
        }
    }

    fn vectors_from(
        &self,
        response: EmbeddingsResponse,
        expected: usize,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        if response.data.len() != expected {
            return Err(EmbedError::Remote(format!(
                "{} returned {} embeddings for {expected} inputs",
                self.url,
                response.data.len()
            )));
        }
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; expected];
        for item in response.data {
            let slot = vectors.get_mut(item.index).ok_or_else(|| {
                EmbedError::Remote(format!(
                    "{} returned an embedding with index {} for {expected} inputs",
                    self.url, item.index
                ))
            })?;
            let mut vector = item.embedding;
            let known = self.dimensions.load(Ordering::Relaxed);
            if known == 0 {
                self.dimensions.store(vector.len(), Ordering::Relaxed);
            } else if vector.len() != known {
                return Err(EmbedError::Remote(format!(
                    "{} returned a {}-dimensional vector, expected {known} (embeddings.openai.dimensions \
                     or the first answer); check embeddings.model",
                    self.url,
                    vector.len()
                )));
            }
            l2_normalise(&mut vector);
            *slot = Some(vector);
        }
        vectors
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                v.ok_or_else(|| {
                    EmbedError::Remote(format!("{} returned no embedding for input {i}", self.url))
                })
            })
            .collect()
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn profile(&self) -> EmbeddingProfile {
        EmbeddingProfile {
            provider: "openai".into(),
            model: self.model.clone(),
            dimensions: self.dimensions.load(Ordering::Relaxed),
        }
    }

    fn token_counter(&self) -> Arc<dyn TokenCounter> {
        Arc::clone(&self.counter)
    }

    async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.settings.batch_size.max(1)) {
            vectors.extend(self.embed_batch(batch).await?);
            self.counters.add_batch(batch.len());
        }
        Ok(vectors)
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vectors = self.embed_documents(vec![text.to_string()]).await?;
        vectors
            .pop()
            .ok_or_else(|| EmbedError::Remote("no vector for the query".into()))
    }

    fn stats(&self) -> EmbedStats {
        self.counters.stats()
    }
}

#[cfg(test)]
mod tests {
    use orkeon_testkit::{LoopbackServer, Recorded, Reply};

    use super::*;

    /// Answers every input with the unnormalised vector [len, 1, 0, 0], listing the items in
    /// reverse order (clients must use `index`).
    fn embeddings_reply(request: &Recorded) -> Reply {
        let body: serde_json::Value = serde_json::from_slice(&request.body).expect("json body");
        let inputs = body["input"].as_array().expect("input array").clone();
        let data: Vec<serde_json::Value> = inputs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, text)| {
                let len = text.as_str().expect("text").len() as f32;
                serde_json::json!({"object": "embedding", "index": i, "embedding": [len, 1.0, 0.0, 0.0]})
            })
            .collect();
        Reply::json(
            200,
            serde_json::json!({"object": "list", "data": data, "model": body["model"]}),
        )
    }

    fn settings_for(
        server: &LoopbackServer,
        batch_size: usize,
        max_retries: u32,
    ) -> OpenAiEmbeddingSettings {
        OpenAiEmbeddingSettings {
            base_url: format!("{}/v1", server.base_url()),
            api_key_env: "ORKEON_TEST_EMBEDDINGS_KEY".into(),
            dimensions: None,
            timeout_ms: 5_000,
            max_retries,
            batch_size,
        }
    }

    #[tokio::test]
    async fn scripted_endpoint_batches_orders_and_normalises() {
        let server = LoopbackServer::start(|request, _| embeddings_reply(request))
            .await
            .expect("loopback server");
        let settings = settings_for(&server, 2, 0);
        let embedder = OpenAiEmbedder::with_api_key(
            "text-embedding-3-small",
            &settings,
            "test-key".into(),
            None,
        )
        .expect("client");
        let texts: Vec<String> = ["a", "bbb", "cc", "dddd", "eeeee"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let vectors = embedder
            .embed_documents(texts.clone())
            .await
            .expect("embeddings");
        assert_eq!(vectors.len(), 5);
        for (text, vector) in texts.iter().zip(&vectors) {
            let len = text.len() as f32;
            let norm = (len * len + 1.0).sqrt();
            assert!((vector[0] - len / norm).abs() < 1e-6, "{text}: {vector:?}");
            assert!((vector[1] - 1.0 / norm).abs() < 1e-6);
        }
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "5 inputs in batches of 2");
        let sizes: Vec<usize> = requests
            .iter()
            .map(|r| {
                let body: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
                assert_eq!(body["model"], "text-embedding-3-small");
                body["input"].as_array().expect("array").len()
            })
            .collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        assert!(
            requests
                .iter()
                .all(|r| r.method == "POST" && r.path == "/v1/embeddings")
        );
        assert_eq!(requests[0].header("authorization"), Some("Bearer test-key"));
        assert_eq!(
            embedder.profile(),
            EmbeddingProfile {
                provider: "openai".into(),
                model: "text-embedding-3-small".into(),
                dimensions: 4
            }
        );
        let stats = embedder.stats();
        assert_eq!((stats.inputs, stats.batches), (5, 3));
        assert_eq!(
            embedder.token_counter().count_tokens("abcdefghi"),
            3,
            "chars/4 estimate"
        );
    }

    #[tokio::test]
    async fn scripted_429_is_retried_then_succeeds() {
        let server = LoopbackServer::start(|request, n| {
            if n == 0 {
                Reply::json(429, serde_json::json!({"error": {"message": "slow down"}}))
                    .header("retry-after", "0")
            } else {
                embeddings_reply(request)
            }
        })
        .await
        .expect("loopback server");
        let embedder =
            OpenAiEmbedder::with_api_key("m", &settings_for(&server, 8, 2), "k".into(), None)
                .expect("client");
        let vector = embedder.embed_query("hello").await.expect("retried");
        assert_eq!(vector.len(), 4);
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test]
    async fn scripted_server_errors_exhaust_retries_and_report() {
        let server =
            LoopbackServer::start(|_, _| Reply::json(503, serde_json::json!({"error": "down"})))
                .await
                .expect("loopback server");
        let embedder =
            OpenAiEmbedder::with_api_key("m", &settings_for(&server, 8, 1), "k".into(), None)
                .expect("client");
        let err = embedder.embed_query("hello").await.expect_err("fails");
        let text = err.to_string();
        assert!(
            text.contains("503") && text.contains("after 2 attempts"),
            "{text}"
        );
        assert_eq!(server.requests().len(), 2);
        // A client error is not retried.
        let server =
            LoopbackServer::start(|_, _| Reply::json(400, serde_json::json!({"error": "bad"})))
                .await
                .expect("loopback server");
        let embedder =
            OpenAiEmbedder::with_api_key("m", &settings_for(&server, 8, 3), "k".into(), None)
                .expect("client");
        assert!(embedder.embed_query("hello").await.is_err());
        assert_eq!(server.requests().len(), 1);
    }

    #[tokio::test]
    async fn scripted_wrong_dimensions_are_refused() {
        let server = LoopbackServer::start(|request, _| embeddings_reply(request))
            .await
            .expect("loopback server");
        let mut settings = settings_for(&server, 8, 0);
        settings.dimensions = Some(3);
        let embedder =
            OpenAiEmbedder::with_api_key("m", &settings, "k".into(), None).expect("client");
        let err = embedder
            .embed_query("hello")
            .await
            .expect_err("4 dims, 3 expected");
        assert!(
            err.to_string().contains("4-dimensional vector, expected 3"),
            "{err}"
        );
    }

    #[test]
    fn missing_key_variable_is_named() {
        let settings = OpenAiEmbeddingSettings {
            api_key_env: "ORKEON_TEST_SURELY_UNSET_KEY_VARIABLE".into(),
            ..OpenAiEmbeddingSettings::default()
        };
        let err = OpenAiEmbedder::new("m", &settings)
            .err()
            .expect("missing variable");
        assert!(
            err.to_string()
                .contains("ORKEON_TEST_SURELY_UNSET_KEY_VARIABLE is not set"),
            "{err}"
        );
    }
}
