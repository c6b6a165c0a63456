//! Reading a source's bytes: files from disk (bounded by `rag.ingestion.max_document_bytes`)
//! and http(s) URLs through reqwest (bounded in time, size — enforced while streaming, not
//! trusted from `Content-Length` alone — and redirects, which may only lead to http(s)).

use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::{LoadError, RawSource, SourceKind, SourceLocation, SourceRef, kind_of};
use crate::settings::IngestionSettings;

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

/// Why a redirect was refused (carried through reqwest's error chain).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RedirectRefused(String);

async fn download(
    source: &SourceRef,
    url: &str,
    settings: &IngestionSettings,
) -> Result<RawSource, LoadError> {
    if !settings.allow_urls {
        return Err(LoadError::UrlsNotAllowed {
            url: url.to_owned(),
        });
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| LoadError::InvalidUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(LoadError::InvalidUrl {
            url: url.to_owned(),
            reason: format!("the scheme `{}` is not http or https", parsed.scheme()),
        });
    }
    let kind_from_path = kind_of(source)?;

    let max_redirects = settings.url_max_redirects;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > max_redirects {
            let reason = format!(
                "more than {max_redirects} redirects; raise rag.ingestion.url_max_redirects if this is expected"
            );
            attempt.error(RedirectRefused(reason))
        } else if !matches!(attempt.url().scheme(), "http" | "https") {
            let reason = format!("it leads to the non-http(s) URL {}", attempt.url());
            attempt.error(RedirectRefused(reason))
        } else {
            attempt.follow()
        }
    });
    let client = reqwest::Client::builder()
        .redirect(policy)
        .timeout(Duration::from_millis(settings.url_timeout_ms))
        .user_agent(concat!("orkeon/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| LoadError::Fetch {
            url: url.to_owned(),
            reason: format!("cannot build the HTTP client: {e}"),
        })?;

    let started = std::time::Instant::now();
    let mut response = client
        .get(parsed)
        .send()
        .await
        .map_err(|e| request_error(url, settings, e))?;
    let status = response.status();
    if !status.is_success() {
        return Err(LoadError::HttpStatus {
            url: url.to_owned(),
            status: status.as_u16(),
        });
    }
    let limit = settings.url_max_bytes;
    let too_large = |size| LoadError::TooLarge {
        source_id: url.to_owned(),
        size,
        limit,
        setting: "rag.ingestion.url_max_bytes",
    };
    if let Some(length) = response.content_length()
        && length > limit as u64
    {
        return Err(too_large(length));
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);

    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| request_error(url, settings, e))?
    {
        if bytes.len() + chunk.len() > limit {
            return Err(too_large((bytes.len() + chunk.len()) as u64));
        }
        bytes.extend_from_slice(&chunk);
    }

    let kind = match kind_from_path {
        Some(kind) => kind,
        None => content_type
            .as_deref()
            .and_then(SourceKind::from_content_type)
            .ok_or_else(|| LoadError::UnsupportedContentType {
                url: url.to_owned(),
                content_type: content_type.clone().unwrap_or_else(|| "(none)".into()),
            })?,
    };
    tracing::debug!(
        url,
        status = status.as_u16(),
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

fn request_error(url: &str, settings: &IngestionSettings, error: reqwest::Error) -> LoadError {
    if error.is_timeout() {
        return LoadError::Timeout {
            url: url.to_owned(),
            timeout_ms: settings.url_timeout_ms,
        };
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = cause {
        if let Some(refused) = current.downcast_ref::<RedirectRefused>() {
            return LoadError::Redirect {
                url: url.to_owned(),
                reason: refused.0.clone(),
            };
        }
        cause = current.source();
    }
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(inner) = source {
        reason.push_str(": ");
        reason.push_str(&inner.to_string());
        source = inner.source();
    }
    LoadError::Fetch {
        url: url.to_owned(),
        reason,
    }
}
