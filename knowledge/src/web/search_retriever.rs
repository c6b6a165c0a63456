//! [`WebSearchRetriever`]: search → guarded page downloads → loader → injection validator →
//! one web-scored chunk per page.
//!
//! Per result, in engine rank order, until `max_results` pages are usable (at most
//! [`MAX_ATTEMPTS_PER_RESULT`] × `max_results` results are tried):
//! 1. the page URL goes through the SSRF guard (see [`super::address_guard`]) — refused URLs are
//!    never fetched;
//! 2. the page is downloaded with the configured timeout, a size limit and at most
//!    [`DEFAULT_MAX_REDIRECTS`] redirects, each hop re-checked;
//! 3. the bytes are parsed by the loader of their content type (HTML → text, hidden elements
//!    recorded for the validator);
//! 4. the document goes through [`InjectionValidator`]: `Rejected` content never leaves this
//!    module; `Suspicious` content is used with `flagged=suspicious` and the reasons in its
//!    metadata, or discarded, per `suspicious_action`; content is never rewritten;
//! 5. the page becomes one chunk: the window of consecutive sentences (at most
//!    [`PASSAGE_MAX_CHARS`] characters) sharing the most content words with the question
//!    (ties: a window opening on a matching sentence, then the first). Its score is rank-based, `1 / (1 + rank)` (the engine's own
//!    scores are not comparable across engines), origin [`ScoreOrigin::Web`].
//!
//! The API key, if configured, is sent as `Authorization: Bearer …` to the search endpoint only,
//! never to result pages.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::Url;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use unicode_segmentation::UnicodeSegmentation;

use super::address_guard::AddressGuard;
use super::guarded_fetch::{FetchLimits, guarded_get};
use super::searxng::{SearchResult, parse_results, search_url};
use super::{PageOutcome, PageReport, WebDocumentRetriever, WebError, WebRetrieval};
use crate::ingest::sha256_hex;
use crate::load::{self, RawSource, SourceKind, SourceLocation, SourceRef};
use crate::query::options::WebFallbackSettings;
use crate::settings::SuspiciousAction;
use crate::types::{Document, ScoreOrigin, ScoredChunk, StoredChunk};
use crate::validate::{InjectionValidator, Verdict};
use orkeon_crews::text::content_word_set;

/// Largest page downloaded, in bytes.
pub const DEFAULT_MAX_PAGE_BYTES: usize = 2 * 1024 * 1024;
/// Redirects followed per download (each re-checked by the SSRF guard).
pub const DEFAULT_MAX_REDIRECTS: usize = 5;
/// Longest passage taken from one page, in characters.
pub const PASSAGE_MAX_CHARS: usize = 1500;
/// Page downloads attempted per page wanted (rejected, refused or failed pages are replaced by
/// the next results, up to this factor).
pub const MAX_ATTEMPTS_PER_RESULT: usize = 3;

/// Everything the retriever needs (built from `rag.web_fallback` by
/// [`WebSearchRetriever::from_settings`]).
#[derive(Debug, Clone)]
pub struct WebSearchConfig {
    pub endpoint: Url,
    /// The key itself (read from the environment by `from_settings`).
    pub api_key: Option<String>,
    /// Transport-side cap on pages per retrieval (`rag.web_fallback.max_results`).
    pub max_results: usize,
    pub timeout: Duration,
    pub suspicious_action: SuspiciousAction,
    pub max_page_bytes: usize,
    pub max_redirects: usize,
}

/// The SearxNG-compatible web retriever.
pub struct WebSearchRetriever {
    config: WebSearchConfig,
    guard: AddressGuard,
    validator: InjectionValidator,
}

impl std::fmt::Debug for WebSearchRetriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("WebSearchRetriever")
            .field("endpoint", &self.config.endpoint.as_str())
            .field("api_key", &self.config.api_key.as_ref().map(|_| "<set>"))
            .field("max_results", &self.config.max_results)
            .finish()
    }
}

impl WebSearchRetriever {
    pub fn new(config: WebSearchConfig) -> Result<Self, WebError> {
        if !matches!(config.endpoint.scheme(), "http" | "https") {
            return Err(WebError::InvalidEndpoint {
                endpoint: config.endpoint.to_string(),
                reason: format!(
                    "the scheme `{}` is not http or https",
                    config.endpoint.scheme()
                ),
            });
        }
        if config.endpoint.host_str().is_none() {
            return Err(WebError::InvalidEndpoint {
                endpoint: config.endpoint.to_string(),
                reason: "it has no host".into(),
            });
        }
        let guard = AddressGuard::new(config.endpoint.clone(), config.timeout);
        Ok(Self {
            config,
            guard,
            validator: InjectionValidator::default(),
        })
    }

    /// The transport `rag.web_fallback` describes: `None` when disabled, or when enabled
    /// without an endpoint (inert, with a warning). An invalid endpoint or an API-key variable
    /// that is not set is an error naming the key.
    pub fn from_settings(settings: &WebFallbackSettings) -> Result<Option<Self>, WebError> {
        if !settings.enabled {
            return Ok(None);
        }
        let Some(endpoint) = settings.endpoint.as_deref().map(str::trim) else {
            tracing::warn!(
                "rag.web_fallback.enabled is true but rag.web_fallback.endpoint is not set: the web fallback stays inert"
            );
            return Ok(None);
        };
        let url = Url::parse(endpoint).map_err(|e| WebError::InvalidEndpoint {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        })?;
        let api_key = match settings.api_key_env.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(var) => Some(
                std::env::var(var)
                    .ok()
                    .filter(|k| !k.trim().is_empty())
                    .ok_or_else(|| WebError::MissingApiKey {
                        var: var.to_string(),
                    })?,
            ),
        };
        if settings.max_results == 0 {
            return Err(WebError::InvalidEndpoint {
                endpoint: endpoint.to_string(),
                reason: "rag.web_fallback.max_results is 0, so no page could ever be used; set it to at least 1 or disable the web fallback".into(),
            });
        }
        Self::new(WebSearchConfig {
            endpoint: url,
            api_key,
            max_results: settings.max_results,
            timeout: Duration::from_millis(settings.timeout_ms.max(1)),
            suspicious_action: settings.suspicious_action,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
            max_redirects: DEFAULT_MAX_REDIRECTS,
        })
        .map(Some)
    }

    fn limits(&self) -> FetchLimits {
        FetchLimits {
            timeout: self.config.timeout,
            max_bytes: self.config.max_page_bytes,
            max_redirects: self.config.max_redirects,
            user_agent: concat!("orkeon/", env!("CARGO_PKG_VERSION"), " (web fallback)"),
        }
    }

    async fn search(&self, question: &str) -> Result<Vec<SearchResult>, WebError> {
        let url = search_url(&self.config.endpoint, question);
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        if let Some(key) = &self.config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                WebError::InvalidEndpoint {
                    endpoint: self.config.endpoint.to_string(),
                    reason: "the API key holds characters an HTTP header cannot carry".into(),
                }
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let fetched = guarded_get(&self.guard, url.clone(), headers, self.limits()).await?;
        parse_results(&url, &fetched.bytes)
    }

    /// Downloads, parses and validates one page; the chunk, or why there is none.
    async fn page(
        &self,
        question: &str,
        rank: usize,
        result: &SearchResult,
    ) -> (Option<ScoredChunk>, PageReport) {
        let report = |outcome, reason: Option<String>| PageReport {
            url: result.url.to_string(),
            outcome,
            reason,
        };
        let fetched = match guarded_get(
            &self.guard,
            result.url.clone(),
            HeaderMap::new(),
            self.limits(),
        )
        .await
        {
            Ok(fetched) => fetched,
            Err(e @ WebError::Refused { .. }) => {
                return (None, report(PageOutcome::Refused, Some(e.to_string())));
            }
            Err(e) => return (None, report(PageOutcome::Failed, Some(e.to_string()))),
        };
        let source = SourceRef {
            id: fetched.url.to_string(),
            location: SourceLocation::Url(fetched.url.to_string()),
        };
        let kind = fetched
            .content_type
            .as_deref()
            .and_then(SourceKind::from_content_type)
            .or_else(|| load::kind_of(&source).ok().flatten());
        let Some(kind) = kind else {
            let reason = format!(
                "unsupported content type {}",
                fetched.content_type.as_deref().unwrap_or("(none)")
            );
            return (None, report(PageOutcome::Failed, Some(reason)));
        };
        let raw = RawSource {
            bytes: fetched.bytes,
            kind,
            content_type: fetched.content_type,
        };
        let parsed = tokio::task::spawn_blocking(move || {
            load::parse(&source, &raw, &crate::settings::LoadLimits::default())
        })
        .await;
        let documents = match parsed {
            Ok(Ok(documents)) => documents,
            Ok(Err(e)) => return (None, report(PageOutcome::Failed, Some(e.to_string()))),
            Err(e) => {
                let reason = format!("parsing task failed: {e}");
                return (None, report(PageOutcome::Failed, Some(reason)));
            }
        };
        // A page is one unit: the worst verdict over its documents decides.
        let mut verdict = Verdict::Clean;
        for document in &documents {
            verdict = verdict.worst(self.validator.check(document));
        }
        let flag = match &verdict {
            Verdict::Rejected { reasons } => {
                tracing::warn!(url = %result.url, ?reasons, "web fallback rejected a page (prompt injection)");
                return (
                    None,
                    report(PageOutcome::Rejected, Some(reasons.join("; "))),
                );
            }
            Verdict::Suspicious { reasons } => match self.config.suspicious_action {
                SuspiciousAction::Drop => {
                    return (
                        None,
                        report(PageOutcome::DroppedSuspicious, Some(reasons.join("; "))),
                    );
                }
                SuspiciousAction::Flag => Some(reasons.join("; ")),
            },
            Verdict::Clean => None,
        };
        let Some(document) = documents.into_iter().find(|d| !d.text.trim().is_empty()) else {
            return (
                None,
                report(PageOutcome::Failed, Some("the page holds no text".into())),
            );
        };
        let chunk = web_chunk(question, rank, result, document, flag.clone());
        let outcome = if flag.is_some() {
            PageOutcome::Flagged
        } else {
            PageOutcome::Used
        };
        (Some(chunk), report(outcome, flag))
    }
}

/// The byte range of the best passage of `text` for `question` (see the module docs).
pub fn best_passage(text: &str, question: &str, max_chars: usize) -> (usize, usize) {
    let wanted: BTreeSet<String> = content_word_set(question);
    let sentences: Vec<(usize, &str, usize, BTreeSet<String>)> = text
        .split_sentence_bound_indices()
        .map(|(offset, s)| (offset, s, s.chars().count(), content_word_set(s)))
        .collect();
    // Score: distinct question words in the window, then whether the window opens on a
    // matching sentence (so a passage does not start with an unrelated sentence).
    let mut best: Option<((usize, bool), usize, usize)> = None; // (score, start, end)
    for first in 0..sentences.len() {
        let start = sentences[first].0;
        let mut end = start;
        let mut chars = 0usize;
        let mut words: BTreeSet<&String> = BTreeSet::new();
        for (offset, sentence, n, sentence_words) in &sentences[first..] {
            if chars > 0 && chars + n > max_chars {
                break;
            }
            chars += n;
            end = offset + sentence.len();
            words.extend(sentence_words.iter().filter(|w| wanted.contains(*w)));
        }
        let opens_on_match = sentences[first].3.iter().any(|w| wanted.contains(w));
        let score = (words.len(), opens_on_match);
        if best.is_none_or(|(s, _, _)| score > s) {
            best = Some((score, start, end));
        }
    }
    let Some((_, mut start, mut end)) = best else {
        return (0, 0);
    };
    // One overlong sentence: cut it at a character boundary.
    if let Some((cut, _)) = text[start..end].char_indices().nth(max_chars) {
        end = start + cut;
    }
    // Trim surrounding whitespace without leaving the range.
    let slice = &text[start..end];
    start += slice.len() - slice.trim_start().len();
    end = start + text[start..end].trim_end().len();
    (start, end)
}

fn web_chunk(
    question: &str,
    rank: usize,
    result: &SearchResult,
    document: Document,
    flag: Option<String>,
) -> ScoredChunk {
    let (start, end) = best_passage(&document.text, question, PASSAGE_MAX_CHARS);
    let text = document.text[start..end].to_string();
    let url = result.url.to_string();
    let mut metadata = document.metadata;
    metadata.insert("origin".into(), "web".into());
    metadata.insert("loader".into(), document.loader);
    metadata.insert("search_rank".into(), (rank + 1).to_string());
    if !result.title.is_empty() {
        metadata
            .entry("title".into())
            .or_insert_with(|| result.title.clone());
    }
    if let Some(reasons) = flag {
        metadata.insert("flagged".into(), "suspicious".into());
        metadata.insert("flag_reasons".into(), reasons);
    }
    let content_hash = sha256_hex(text.as_bytes());
    ScoredChunk {
        chunk: StoredChunk {
            id: format!("web:{}", &sha256_hex(url.as_bytes())[..16]),
            source_id: document.source_id,
            ordinal: 0,
            text,
            start,
            end,
            metadata,
            content_hash,
            vector: Vec::new(),
        },
        score: 1.0 / (1.0 + rank as f32),
        origin: ScoreOrigin::Web,
    }
}

#[async_trait]
impl WebDocumentRetriever for WebSearchRetriever {
    fn name(&self) -> &str {
        "searxng"
    }

    async fn retrieve(&self, question: &str, max_results: usize) -> Result<WebRetrieval, WebError> {
        let results = self.search(question).await?;
        let found = results.len();
        let wanted = max_results.min(self.config.max_results);
        let mut chunks = Vec::new();
        let mut pages = Vec::new();
        // Pages are tried in rank order until `wanted` are usable, each result once, and at
        // most MAX_ATTEMPTS_PER_RESULT × `wanted` downloads in all.
        for (rank, result) in results
            .iter()
            .enumerate()
            .take(wanted.saturating_mul(MAX_ATTEMPTS_PER_RESULT))
        {
            if chunks.len() >= wanted {
                break;
            }
            let (chunk, report) = self.page(question, rank, result).await;
            tracing::debug!(url = %report.url, outcome = ?report.outcome, "web fallback page");
            chunks.extend(chunk);
            pages.push(report);
        }
        Ok(WebRetrieval {
            results_found: found,
            chunks,
            pages,
        })
    }
}
