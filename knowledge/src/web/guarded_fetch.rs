//! Guarded HTTP GETs for the web fallback and for URL sources of ingestion: every hop (the first request and each redirect) is
//! checked by the [`AddressGuard`] and pinned to the addresses that were checked; redirects are
//! followed by hand, at most `max_redirects`, and only to http(s); the body is bounded while
//! streaming (a `Content-Length` is not trusted alone); one timeout covers each hop. System
//! proxies are ignored on purpose: a proxy would connect on our behalf to addresses the guard
//! never saw.

use std::time::Duration;

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderValue};

use super::WebError;
use super::address_guard::{AddressGuard, UrlHost};
use crate::load::redact_userinfo;

/// Limits of one guarded GET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    pub timeout: Duration,
    pub max_bytes: usize,
    pub max_redirects: usize,
    /// The `User-Agent` sent.
    pub user_agent: &'static str,
}

/// A successful GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The URL that finally answered (after redirects).
    pub url: Url,
    pub content_type: Option<String>,
    pub bytes: Vec<u8>,
    pub redirects: usize,
}

fn client_for(
    url: &Url,
    host: &UrlHost,
    addrs: &[std::net::SocketAddr],
    limits: FetchLimits,
) -> Result<reqwest::Client, WebError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(limits.timeout)
        .connect_timeout(limits.timeout)
        .user_agent(limits.user_agent);
    if let UrlHost::Domain(domain) = host {
        // Pin the connection to the checked addresses: no second DNS answer is consulted.
        builder = builder.resolve_to_addrs(domain, addrs);
    }
    builder.build().map_err(|e| WebError::Download {
        url: url.to_string(),
        reason: format!("cannot build the HTTP client: {e}"),
    })
}

fn request_error(url: &Url, limits: FetchLimits, error: reqwest::Error) -> WebError {
    let url = redact_userinfo(url.as_str());
    if error.is_timeout() {
        return WebError::Timeout {
            url,
            timeout_ms: limits.timeout.as_millis() as u64,
        };
    }
    // The whole chain (hyper's and the OS's reasons), credentials left out.
    let error = error.without_url();
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(inner) = source {
        reason.push_str(": ");
        reason.push_str(&inner.to_string());
        source = inner.source();
    }
    WebError::Download { url, reason }
}

/// GETs `url` through the guard. `headers` are sent to the first hop only (an API key must
/// not follow a redirect to another host).
pub async fn guarded_get(
    guard: &AddressGuard,
    url: Url,
    headers: HeaderMap,
    limits: FetchLimits,
) -> Result<Fetched, WebError> {
    let mut current = url;
    let mut redirects = 0usize;
    loop {
        let target = guard.check(&current).await?;
        let client = client_for(&current, &target.host, &target.addrs, limits)?;
        let mut request = client.get(current.clone());
        if redirects == 0 {
            request = request.headers(headers.clone());
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| request_error(&current, limits, e))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| WebError::Redirect {
                    url: redact_userinfo(current.as_str()),
                    reason: format!(
                        "redirect {} without a usable Location header",
                        status.as_u16()
                    ),
                })?;
            let next = current.join(location).map_err(|e| WebError::Redirect {
                url: redact_userinfo(current.as_str()),
                reason: format!("redirect to an invalid URL {location:?}: {e}"),
            })?;
            redirects += 1;
            if redirects > limits.max_redirects {
                return Err(WebError::Redirect {
                    url: redact_userinfo(current.as_str()),
                    reason: format!("more than {} redirects", limits.max_redirects),
                });
            }
            if !matches!(next.scheme(), "http" | "https") {
                return Err(WebError::Redirect {
                    url: redact_userinfo(current.as_str()),
                    reason: format!(
                        "it leads to the non-http(s) URL {}",
                        redact_userinfo(next.as_str())
                    ),
                });
            }
            tracing::debug!(from = %redact_userinfo(current.as_str()), to = %redact_userinfo(next.as_str()), "guarded fetch follows a redirect");
            current = next;
            continue;
        }
        if !status.is_success() {
            return Err(WebError::Status {
                url: redact_userinfo(current.as_str()),
                status: status.as_u16(),
            });
        }
        let too_large = |size: u64| WebError::TooLarge {
            url: redact_userinfo(current.as_str()),
            size,
            limit: limits.max_bytes,
        };
        if let Some(length) = response.content_length()
            && length > limits.max_bytes as u64
        {
            return Err(too_large(length));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_owned);
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| request_error(&current, limits, e))?
        {
            if bytes.len() + chunk.len() > limits.max_bytes {
                return Err(too_large((bytes.len() + chunk.len()) as u64));
            }
            bytes.extend_from_slice(&chunk);
        }
        return Ok(Fetched {
            url: current,
            content_type,
            bytes,
            redirects,
        });
    }
}
