//! PDF loader: one document per page that has text (`source_id#page=N`, metadata `page` and
//! `pages`), extracted with pdf-extract on top of lopdf.
//!
//! pdf-extract panics on some malformed files, so loading and every page's extraction run under
//! `catch_unwind`: a truncated or corrupt PDF is a [`LoadError::Parse`], never a crash (the
//! panic message still reaches the panic hook, i.e. stderr). A page that fails fails the whole
//! source rather than silently dropping part of it. A PDF without any extractable text
//! (scanned images) is an error too: it needs OCR before it can be ingested. Encrypted PDFs
//! are opened only when they have an empty user password.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pdf_extract::{Document as PdfDocument, PlainTextOutput, output_doc_page};

use super::{LoadError, SourceKind};
use crate::types::{Document, Metadata};

/// Parses PDF bytes into one document per non-empty page.
pub fn parse(source_id: &str, bytes: &[u8]) -> Result<Vec<Document>, LoadError> {
    let parse_error = |reason: String| LoadError::Parse {
        source_id: source_id.to_owned(),
        kind: SourceKind::Pdf,
        reason,
    };
    let mut pdf = guarded(|| PdfDocument::load_mem(bytes))
        .map_err(|panic| {
            parse_error(format!(
                "the PDF structure is corrupt ({panic}); re-export or repair the file"
            ))
        })?
        .map_err(|e| {
            parse_error(format!(
                "the PDF structure cannot be read ({e}); the file may be truncated or corrupt"
            ))
        })?;
    if pdf.is_encrypted() {
        guarded(|| pdf.decrypt(""))
            .map_err(|panic| parse_error(format!("decryption failed ({panic})")))?
            .map_err(|e| {
                parse_error(format!(
                    "the PDF is encrypted ({e}); remove its password before ingesting it"
                ))
            })?;
    }
    let pages = pdf.get_pages();
    if pages.is_empty() {
        return Err(parse_error(
            "the PDF has no pages; the file may be truncated or corrupt".into(),
        ));
    }
    let page_count = pages.len();
    let mut documents = Vec::new();
    for &page in pages.keys() {
        let text = guarded(|| {
            let mut text = String::new();
            let mut output = PlainTextOutput::new(&mut text);
            output_doc_page(&pdf, &mut output, page).map(|()| text)
        })
        .map_err(|panic| {
            parse_error(format!(
                "page {page} crashed the text extractor ({panic}); the file may be corrupt"
            ))
        })?
        .map_err(|e| {
            parse_error(format!(
                "page {page} cannot be read ({e}); the file may be truncated or corrupt"
            ))
        })?;
        let text = tidy_page_text(&text);
        if text.is_empty() {
            continue;
        }
        let mut metadata = Metadata::new();
        metadata.insert("page".into(), page.to_string());
        metadata.insert("pages".into(), page_count.to_string());
        documents.push(Document {
            source_id: format!("{source_id}#page={page}"),
            text,
            loader: SourceKind::Pdf.as_str().to_owned(),
            metadata,
        });
    }
    if documents.is_empty() {
        return Err(parse_error(format!(
            "none of its {page_count} pages has extractable text (a scanned PDF needs OCR first)"
        )));
    }
    Ok(documents)
}

/// Runs `f`, turning a panic into its message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic without a message".into())
    })
}

/// Trims every line's trailing spaces, drops leading/trailing blank lines, and keeps at most
/// one blank line in a row.
fn tidy_page_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank_run > 0 {
                out.push('\n');
            }
        }
        blank_run = 0;
        out.push_str(line);
    }
    out
}
