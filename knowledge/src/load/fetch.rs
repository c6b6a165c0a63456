//! Reading a source's bytes: files from disk (bounded by `rag.ingestion.max_document_bytes`)
//! and http(s) URLs through the web fallback's guarded GET ([`crate::web::guarded_fetch`]):
//! every hop checked by the same [`AddressGuard`] (public addresses only — no loopback,
//! private, link-local/metadata, CGNAT, benchmarking, 6to4 or NAT64 target — DNS pinned to the
//! checked addresses, redirects followed by hand and only to http(s), no system proxy), bounded
//! in time, size — enforced while streaming, not trusted from `Content-Length` alone — and
//! redirects. Credentials in a URL are used for the fetch and never shown: errors and logs
//! carry [`redact_userinfo`]'s form.

use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::io::AsyncReadExt;

use super::{
    LoadError, RawSource, SourceKind, SourceLocation, SourceRef, kind_of, redact_userinfo,
};
use crate::settings::IngestionSettings;
use crate::web::WebError;
use crate::web::address_guard::AddressGuard;
use crate::web::guarded_fetch::{FetchLimits, Fetched, guarded_get};

/// Reads the file or downloads the URL of `source`.
pub async fn fetch(
    source: &SourceRef,
    settings: &IngestionSettings,
) -> Result<RawSource, LoadError> {
    match &source.location {
        SourceLocation::File(path) => {
            let kind = kind_of(source)?.ok_or_else(|| LoadError::UnsupportedKind {
                source_id: source.id.clone(),
                extension: "(none)".into(),
            })?;
            let bytes = read_file(&source.id, path, settings.max_document_bytes).await?;
            Ok(RawSource {
                bytes,
                kind,
                content_type: None,
            })
        }
        SourceLocation::Url(url) => download(source, url, settings).await,
    }
}

async fn read_file(
    source_id: &str,
    path: &std::path::Path,
    limit: usize,
) -> Result<Vec<u8>, LoadError> {
    let io_error = |error| LoadError::Io {
        source_id: source_id.to_owned(),
        path: path.to_path_buf(),
        error,
    };
    let file = tokio::fs::File::open(path).await.map_err(io_error)?;
    let size = file.metadata().await.map_err(io_error)?.len();
    let too_large = |size| LoadError::TooLarge {
        source_id: source_id.to_owned(),
        size,
        limit,
        setting: "rag.ingestion.max_document_bytes",
    };
    if size > limit as u64 {
        return Err(too_large(size));
    }
    // Read at most one byte past the limit, in case the file grew since `metadata`.
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(io_error)?;
    if bytes.len() > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

async fn download(
    source: &SourceRef,
    url: &str,
    settings: &IngestionSettings,
) -> Result<RawSource, LoadError> {
    let shown = redact_userinfo(url);
    if !settings.allow_urls {
        return Err(LoadError::UrlsNotAllowed { url: shown });
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| LoadError::InvalidUrl {
        url: shown.clone(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(LoadError::InvalidUrl {
            url: shown,
            reason: format!("the scheme `{}` is not http or https", parsed.scheme()),
        });
    }
    let kind_from_path = kind_of(source)?;

    let timeout = Duration::from_millis(settings.url_timeout_ms);
    let guard = AddressGuard::public_only(timeout, "URL ingestion")
        .with_exempt(settings.url_exempt_addrs.iter().copied());
    let limits = FetchLimits {
        timeout,
        max_bytes: settings.url_max_bytes,
        max_redirects: settings.url_max_redirects,
        user_agent: concat!("orkeon/", env!("CARGO_PKG_VERSION")),
    };
    let started = std::time::Instant::now();
    let fetched = guarded_get(&guard, parsed, HeaderMap::new(), limits)
        .await
        .map_err(|error| fetch_error(&shown, settings, error))?;
    let Fetched {
        content_type,
        bytes,
        redirects,
        ..
    } = fetched;

    let kind = match kind_from_path {
        Some(kind) => kind,
        None => content_type
            .as_deref()
            .and_then(SourceKind::from_content_type)
            .ok_or_else(|| LoadError::UnsupportedContentType {
                url: shown.clone(),
                content_type: content_type.clone().unwrap_or_else(|| "(none)".into()),
            })?,
    };
    tracing::debug!(
        url = %shown,
        redirects,
        bytes = bytes.len(),
        %kind,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "downloaded source"
    );
    Ok(RawSource {
        bytes,
        kind,
        content_type,
    })
}

/// The loader's error for a failed guarded GET, naming the `rag.ingestion` key to change.
fn fetch_error(url: &str, settings: &IngestionSettings, error: WebError) -> LoadError {
    let url = url.to_owned();
    match error {
        WebError::Refused { reason, .. } => LoadError::AddressRefused { url, reason },
        WebError::Timeout { .. } => LoadError::Timeout {
            url,
            timeout_ms: settings.url_timeout_ms,
        },
        WebError::Status { status, .. } => LoadError::HttpStatus { url, status },
        WebError::TooLarge { size, limit, .. } => LoadError::TooLarge {
            source_id: url,
            size,
            limit,
            setting: "rag.ingestion.url_max_bytes",
        },
        WebError::Redirect { reason, .. } if reason.starts_with("more than") => {
            LoadError::Redirect {
                url,
                reason: format!(
                    "{reason}; raise rag.ingestion.url_max_redirects if this is expected"
                ),
            }
        }
        WebError::Redirect { reason, .. } => LoadError::Redirect { url, reason },
        other => LoadError::Fetch {
            url,
            reason: other.to_string(),
        },
    }
}
