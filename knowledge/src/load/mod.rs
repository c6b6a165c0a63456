//! Loaders: source descriptors → raw bytes → [`crate::types::Document`]s.
//!
//! Sources are files (globs expanded relative to a base directory, confined to allowed roots)
//! or http(s) URLs (off unless allowed). The loader is chosen by extension / content type.
//!
//! The three steps the ingestion pipeline calls, in order:
//! 1. [`expand_sources`] turns the request's patterns into [`SourceRef`]s (module [`sources`]);
//! 2. [`fetch`] reads a file or downloads a URL into a [`RawSource`] (module [`fetch`]);
//! 3. [`parse`] turns the bytes into documents with the loader of the source's [`SourceKind`]
//!    (modules [`text`], [`csv_rows`], [`html`], [`pdf`]).
//!
//! Between 2 and 3 the pipeline runs [`crate::validate::IntegrityValidator::check_raw`], so
//! the parsers may assume the bytes are not empty and, for text kinds, valid UTF-8 (they still
//! report a [`LoadError::Parse`] instead of panicking when that does not hold). Parsing is
//! CPU-bound (PDF above all): call [`parse`] from a blocking context, or [`parse_blocking`]
//! from async code. Every loader stays within the [`LoadLimits`] it is given (pages, inflated
//! bytes, rows, text bytes); past one, the source is refused with [`LoadError::OverLimit`].

pub mod csv_rows;
pub mod fetch;
pub mod html;
pub mod pdf;
pub mod pdf_streams;
pub mod sources;
pub mod text;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::settings::LoadLimits;
use crate::types::Document;

pub use fetch::fetch;
pub use sources::expand_sources;

/// What `kind_of` and the loaders accept, for error messages and documentation.
pub const SUPPORTED_KINDS: &[&str] = &[
    "txt",
    "md",
    "markdown",
    "csv",
    "html",
    "htm",
    "pdf",
    "http(s) URL",
];

/// Where a source lives.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SourceLocation {
    /// An absolute path to a file inside the allowed roots (as found, not canonicalised).
    File(PathBuf),
    /// An http(s) URL, credentials (`user:pass@`) included when it has them: they are used for
    /// the fetch only, never shown (see [`redact_userinfo`]).
    Url(String),
}

impl std::fmt::Debug for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceLocation::File(path) => f.debug_tuple("File").field(path).finish(),
            SourceLocation::Url(url) => f.debug_tuple("Url").field(&redact_userinfo(url)).finish(),
        }
    }
}

/// `url` without the credentials of its authority (`https://user:pass@host/x` →
/// `https://host/x`), otherwise exactly as written. Source ids, metadata, logs and errors show
/// URLs through this.
pub fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority_start + i);
    match url[authority_start..authority_end].rfind('@') {
        Some(at) => format!(
            "{}{}",
            &url[..authority_start],
            &url[authority_start + at + 1..]
        ),
        None => url.to_owned(),
    }
}

/// One source of a collection: its stable id and where to read it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SourceRef {
    /// Path relative to the base directory with `/` separators (or relative to the allowed root
    /// containing it when outside the base directory), or the URL itself.
    pub id: String,
    pub location: SourceLocation,
}

/// The loader a source needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Text,
    Markdown,
    Csv,
    Html,
    Pdf,
}

impl SourceKind {
    /// The loader name recorded in [`Document::loader`].
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Text => "text",
            SourceKind::Markdown => "markdown",
            SourceKind::Csv => "csv",
            SourceKind::Html => "html",
            SourceKind::Pdf => "pdf",
        }
    }

    /// The kind for a file extension (case-insensitive, without the dot).
    pub fn from_extension(extension: &str) -> Option<SourceKind> {
        match extension.to_ascii_lowercase().as_str() {
            "txt" | "text" => Some(SourceKind::Text),
            "md" | "markdown" => Some(SourceKind::Markdown),
            "csv" => Some(SourceKind::Csv),
            "html" | "htm" => Some(SourceKind::Html),
            "pdf" => Some(SourceKind::Pdf),
            _ => None,
        }
    }

    /// The kind for an HTTP `Content-Type` (parameters such as `charset` are ignored).
    pub fn from_content_type(content_type: &str) -> Option<SourceKind> {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "text/plain" => Some(SourceKind::Text),
            "text/markdown" | "text/x-markdown" => Some(SourceKind::Markdown),
            "text/csv" | "application/csv" => Some(SourceKind::Csv),
            "text/html" | "application/xhtml+xml" => Some(SourceKind::Html),
            "application/pdf" | "application/x-pdf" => Some(SourceKind::Pdf),
            _ => None,
        }
    }

    /// Whether the bytes of this kind must be UTF-8 text.
    pub fn is_text(self) -> bool {
        !matches!(self, SourceKind::Pdf)
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bytes of a source and how to parse them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSource {
    pub bytes: Vec<u8>,
    pub kind: SourceKind,
    /// The `Content-Type` a URL answered with (files: `None`).
    pub content_type: Option<String>,
}

/// The result of [`expand_sources`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expansion {
    /// Existing sources, sorted by id, without duplicates.
    pub sources: Vec<SourceRef>,
    /// Ids of plain (non-glob) paths that do not exist, sorted, without duplicates.
    pub missing: Vec<String>,
}

/// Everything that can go wrong while finding, reading or parsing a source. Every message says
/// which source or pattern, what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("base directory {path} cannot be used: {source}; run from an existing directory")]
    BaseDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "allowed root {root} (rag.ingestion.roots) cannot be resolved: {source}; create the directory or fix rag.ingestion.roots"
    )]
    Root {
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "source `{pattern}` resolves to {path}, outside the allowed roots [{roots}]; move the file under a root or add its directory to rag.ingestion.roots"
    )]
    OutsideRoots {
        pattern: String,
        path: PathBuf,
        roots: String,
    },
    #[error(
        "source `{url}` is a URL but URL sources are disabled; set rag.ingestion.allow_urls: true to fetch it"
    )]
    UrlsNotAllowed { url: String },
    #[error("source `{url}` is not a valid http(s) URL: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error(
        "source `{pattern}` uses the unsupported scheme `{scheme}`; only local paths and http(s) URLs are supported"
    )]
    UnsupportedScheme { pattern: String, scheme: String },
    #[error("source `{pattern}` is not a valid glob: {reason}; use `*`, `**` and `?` wildcards")]
    InvalidGlob { pattern: String, reason: String },
    #[error(
        "source `{pattern}` is the directory {path}; name files, or use a glob such as `{pattern}/**/*.md`"
    )]
    IsDirectory { pattern: String, path: PathBuf },
    #[error("source `{pattern}`: cannot list {path}: {reason}")]
    Walk {
        pattern: String,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "source `{source_id}`: cannot read {path}: {error}; check that it exists and is readable"
    )]
    Io {
        source_id: String,
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "source `{source_id}` has the unsupported kind `{extension}`; supported: {}; rename it or remove it from the sources",
        SUPPORTED_KINDS.join(", ")
    )]
    UnsupportedKind {
        source_id: String,
        extension: String,
    },
    #[error(
        "source `{source_id}` is {size} bytes, over the limit of {limit} bytes; raise {setting} or split the document"
    )]
    TooLarge {
        source_id: String,
        size: u64,
        limit: usize,
        setting: &'static str,
    },
    #[error("source `{url}`: the server answered HTTP {status}; check the URL")]
    HttpStatus { url: String, status: u16 },
    #[error(
        "source `{url}`: no answer within {timeout_ms} ms; raise rag.ingestion.url_timeout_ms or check the server"
    )]
    Timeout { url: String, timeout_ms: u64 },
    #[error("source `{url}`: redirect refused: {reason}")]
    Redirect { url: String, reason: String },
    #[error(
        "source `{url}` was not fetched: {reason}; move the document to a public server or copy it under an ingestion root"
    )]
    AddressRefused { url: String, reason: String },
    #[error("source `{url}`: download failed: {reason}")]
    Fetch { url: String, reason: String },
    #[error(
        "source `{url}` answered with the content type `{content_type}`, which no loader reads; supported: {}",
        SUPPORTED_KINDS.join(", ")
    )]
    UnsupportedContentType { url: String, content_type: String },
    #[error(
        "source `{source_id}` is refused: {what}, over the limit of {limit} ({key}); raise {key} if the source is trusted, or split it"
    )]
    OverLimit {
        source_id: String,
        what: String,
        limit: u64,
        key: &'static str,
    },
    #[error("source `{source_id}` cannot be parsed as {kind}: {reason}")]
    Parse {
        source_id: String,
        kind: SourceKind,
        reason: String,
    },
}

/// The kind of a source from its extension. URLs: from the path's extension when it has a
/// known one, else `None` (decided after the fetch from the content type). A file with an
/// unknown or no extension is an error listing [`SUPPORTED_KINDS`].
pub fn kind_of(source: &SourceRef) -> Result<Option<SourceKind>, LoadError> {
    match &source.location {
        SourceLocation::File(path) => {
            let extension = path
                .extension()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_default();
            SourceKind::from_extension(&extension)
                .map(Some)
                .ok_or_else(|| LoadError::UnsupportedKind {
                    source_id: source.id.clone(),
                    extension: if extension.is_empty() {
                        "(no extension)".into()
                    } else {
                        extension
                    },
                })
        }
        SourceLocation::Url(url) => {
            let parsed = reqwest::Url::parse(url).map_err(|e| LoadError::InvalidUrl {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            let last_segment = parsed
                .path_segments()
                .and_then(|mut segments| segments.next_back())
                .unwrap_or_default();
            Ok(Path::new(last_segment)
                .extension()
                .and_then(|e| SourceKind::from_extension(&e.to_string_lossy())))
        }
    }
}

/// Parses a fetched source into documents with the loader of `raw.kind`, within `limits`.
///
/// Every document carries `source_id` = the source id (plus `#row=N` / `#page=N` for parts),
/// `loader` = the kind's name, and metadata `content_type` (URLs) and `url` (URL sources).
pub fn parse(
    source: &SourceRef,
    raw: &RawSource,
    limits: &LoadLimits,
) -> Result<Vec<Document>, LoadError> {
    if matches!(
        raw.kind,
        SourceKind::Text | SourceKind::Markdown | SourceKind::Html
    ) && raw.bytes.len() > limits.max_text_bytes
    {
        return Err(LoadError::OverLimit {
            source_id: source.id.clone(),
            what: format!("its {} text is {} bytes", raw.kind, raw.bytes.len()),
            limit: limits.max_text_bytes as u64,
            key: "limits.max_text_bytes",
        });
    }
    let mut documents = match raw.kind {
        SourceKind::Text | SourceKind::Markdown => {
            vec![text::parse(&source.id, raw.kind, &raw.bytes)?]
        }
        SourceKind::Csv => csv_rows::parse(&source.id, &raw.bytes, limits.max_csv_rows)?,
        SourceKind::Html => vec![html::parse(&source.id, &raw.bytes)?],
        SourceKind::Pdf => pdf::parse(&source.id, &raw.bytes, limits)?,
    };
    for document in &mut documents {
        if let Some(content_type) = &raw.content_type {
            document
                .metadata
                .insert("content_type".into(), content_type.clone());
        }
        if let SourceLocation::Url(url) = &source.location {
            document.metadata.insert("url".into(), redact_userinfo(url));
        }
    }
    Ok(documents)
}

/// [`parse`] on a blocking thread: parsing is CPU-bound (PDFs above all) and must not hold an
/// async worker.
pub async fn parse_blocking(
    source: SourceRef,
    raw: RawSource,
    limits: LoadLimits,
) -> Result<Vec<Document>, LoadError> {
    let source_id = source.id.clone();
    let kind = raw.kind;
    tokio::task::spawn_blocking(move || parse(&source, &raw, &limits))
        .await
        .map_err(|e| LoadError::Parse {
            source_id,
            kind,
            reason: format!("the parsing task failed ({e})"),
        })?
}

/// [`expand_sources`] on a blocking thread (it walks directories).
pub async fn expand_sources_blocking(
    base_dir: PathBuf,
    patterns: Vec<String>,
    settings: crate::settings::IngestionSettings,
) -> Result<Expansion, LoadError> {
    let base = base_dir.clone();
    tokio::task::spawn_blocking(move || expand_sources(&base_dir, &patterns, &settings))
        .await
        .map_err(|e| LoadError::Walk {
            pattern: "(all)".into(),
            path: base,
            reason: format!("the expansion task failed ({e})"),
        })?
}

/// Decodes the bytes of a text kind as UTF-8 (a leading byte-order mark is dropped).
pub(crate) fn decode_utf8<'a>(
    source_id: &str,
    kind: SourceKind,
    bytes: &'a [u8],
) -> Result<&'a str, LoadError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| LoadError::Parse {
        source_id: source_id.to_owned(),
        kind,
        reason: format!(
            "not valid UTF-8 at byte {}; convert the file to UTF-8",
            e.valid_up_to()
        ),
    })
}

/// Cuts `text` to at most `max_chars` characters, marking the cut with `…`.
pub(crate) fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
