//! The web fallback's transport: the [`WebDocumentRetriever`] port the corrective graph's
//! `web_fallback` node calls, and its implementation [`WebSearchRetriever`] — a
//! SearxNG-compatible JSON search (`GET {endpoint}/search?q=…&format=json` →
//! `results[].url/title/content`), then a guarded download of each result page, HTML → text
//! through the loaders, and every page through the prompt-injection validator.
//!
//! Submodules: [`address_guard`] (the SSRF guard), [`guarded_fetch`] (bounded, pinned,
//! hand-followed GETs), [`searxng`] (the search request and its answer), [`search_retriever`]
//! (pages → validated, web-scored chunks).
//!
//! Opt-in twice: this transport is only built when `rag.web_fallback.enabled` is true (and an
//! endpoint is configured), and the graph only calls it when `rag.corrective.web_fallback.enabled`
//! is true. The API key, when the endpoint needs one, only ever comes from the environment
//! variable `rag.web_fallback.api_key_env` names.

pub mod address_guard;
pub mod guarded_fetch;
pub mod search_retriever;
pub mod searxng;

use async_trait::async_trait;
use serde::Serialize;

use crate::types::ScoredChunk;

pub use address_guard::{AddressGuard, non_public_reason};
pub use search_retriever::{WebSearchConfig, WebSearchRetriever};

/// Why a web retrieval (or building the retriever) failed.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "invalid rag.web_fallback.endpoint {endpoint:?}: {reason}; give the base URL of a SearxNG-compatible instance, e.g. http://127.0.0.1:8888"
    )]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error(
        "rag.web_fallback.api_key_env names the environment variable {var}, which is not set (or not valid UTF-8); export it or remove the key"
    )]
    MissingApiKey { var: String },
    #[error("refused to fetch {url}: {reason}")]
    Refused { url: String, reason: String },
    #[error("fetching {url} failed: {reason}")]
    Download { url: String, reason: String },
    #[error("fetching {url}: redirect refused: {reason}")]
    Redirect { url: String, reason: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url} did not answer within {timeout_ms} ms (rag.web_fallback.timeout_ms)")]
    Timeout { url: String, timeout_ms: u64 },
    #[error("{url} is {size} bytes, over the limit of {limit}")]
    TooLarge {
        url: String,
        size: u64,
        limit: usize,
    },
    #[error("the search endpoint's answer could not be read ({url}): {reason}")]
    SearchResponse { url: String, reason: String },
}

/// What happened to one search result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageOutcome {
    /// Downloaded, validated clean, used.
    Used,
    /// Validated suspicious and used, flagged in the chunk's metadata.
    Flagged,
    /// Validated suspicious and discarded (`suspicious_action: drop`).
    DroppedSuspicious,
    /// Validated as a prompt-injection attempt: never leaves the retriever.
    Rejected,
    /// Refused by the SSRF guard or the scheme check: never fetched.
    Refused,
    /// Download or parsing failed.
    Failed,
}

/// One search result and what became of it (for the trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageReport {
    pub url: String,
    pub outcome: PageOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The result of one web retrieval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WebRetrieval {
    /// Results the search endpoint returned (before the `max_results` cut).
    pub results_found: usize,
    /// One chunk per used page, best result first, each with [`crate::types::ScoreOrigin::Web`].
    #[serde(skip)]
    pub chunks: Vec<ScoredChunk>,
    pub pages: Vec<PageReport>,
}

/// Fetches web documents for a question (the corrective graph's last resort).
#[async_trait]
pub trait WebDocumentRetriever: Send + Sync {
    /// Name recorded in traces.
    fn name(&self) -> &str;

    /// Searches the web for `question` and returns at most `max_results` validated chunks.
    async fn retrieve(&self, question: &str, max_results: usize) -> Result<WebRetrieval, WebError>;
}

#[cfg(test)]
mod tests;
