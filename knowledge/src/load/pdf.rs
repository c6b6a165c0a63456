//! PDF loader: one document per page that has text (`source_id#page=N`, metadata `page` and
//! `pages`), extracted with pdf-extract on top of lopdf.
//!
//! pdf-extract panics on some malformed files, so loading and every page's extraction run under
//! `catch_unwind`: a truncated or corrupt PDF is a [`LoadError::Parse`], never a crash (the
//! panic message still reaches the panic hook, i.e. stderr). A page that fails fails the whole
//! source rather than silently dropping part of it. A PDF without any extractable text
//! (scanned images) is an error too: it needs OCR before it can be ingested. Encrypted PDFs
//! are opened only when they have an empty user password.
//!
//! Panics are not the only hazard: pdf-extract draws form XObjects by recursing into them, so a
//! form that (directly or indirectly) draws itself would overflow the stack and abort the
//! process, and forms drawing each other many times over would take exponential time. Before
//! extracting a page, [`check_forms`] walks its form XObjects with a bounded depth and a bounded
//! number of expanded invocations and refuses the page if either bound is hit.
//!
//! Size is bounded too ([`LoadLimits`]): streams are inflated by [`super::pdf_streams`] with
//! bounded readers (a flate bomb is refused, never allocated), a page's content streams
//! together may not exceed the document's decompressed-bytes limit (a page can list the same
//! stream many times), and a PDF with more pages than `limits.max_pdf_pages` is refused.

use std::panic::{AssertUnwindSafe, catch_unwind};

use std::collections::HashMap;

use pdf_extract::content::Content;
use pdf_extract::{
    Dictionary, Document as PdfDocument, Object, ObjectId, PlainTextOutput, output_doc_page,
};

use super::pdf_streams::{self, StreamError};
use super::{LoadError, SourceKind};
use crate::settings::LoadLimits;
use crate::types::{Document, Metadata};

/// Parses PDF bytes into one document per non-empty page, within `limits`.
pub fn parse(
    source_id: &str,
    bytes: &[u8],
    limits: &LoadLimits,
) -> Result<Vec<Document>, LoadError> {
    let parse_error = |reason: String| LoadError::Parse {
        source_id: source_id.to_owned(),
        kind: SourceKind::Pdf,
        reason,
    };
    let stream_error = |error: StreamError| match error {
        StreamError::OverLimit { what, limit, key } => LoadError::OverLimit {
            source_id: source_id.to_owned(),
            what,
            limit,
            key,
        },
        StreamError::Refused(reason) => parse_error(reason),
    };
    let prescanned = pdf_streams::prescan(bytes, limits).map_err(stream_error)?;
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
    guarded(|| pdf_streams::decode_in_place(&mut pdf, limits, prescanned))
        .map_err(|panic| parse_error(format!("a stream cannot be decoded ({panic})")))?
        .map_err(stream_error)?;
    let pages = pdf.get_pages();
    if pages.is_empty() {
        return Err(parse_error(
            "the PDF has no pages; the file may be truncated or corrupt".into(),
        ));
    }
    let page_count = pages.len();
    if page_count > limits.max_pdf_pages {
        return Err(LoadError::OverLimit {
            source_id: source_id.to_owned(),
            what: format!("it has {page_count} pages"),
            limit: limits.max_pdf_pages as u64,
            key: "limits.max_pdf_pages",
        });
    }
    let mut documents = Vec::new();
    for (&page, &page_id) in &pages {
        let content_bytes: u64 = pdf
            .get_page_contents(page_id)
            .into_iter()
            .filter_map(|id| pdf.get_object(id).and_then(Object::as_stream).ok())
            .map(|stream| stream.content.len() as u64 + 1)
            .sum();
        if content_bytes > limits.max_pdf_document_bytes as u64 {
            return Err(LoadError::OverLimit {
                source_id: source_id.to_owned(),
                what: format!("page {page}'s content streams add up to {content_bytes} bytes"),
                limit: limits.max_pdf_document_bytes as u64,
                key: "limits.max_pdf_document_bytes",
            });
        }
        check_forms(&pdf, page_id).map_err(|reason| {
            parse_error(format!(
                "page {page} cannot be drawn safely: {reason}; the file is malformed or hostile"
            ))
        })?;
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

/// Deepest chain of form XObjects accepted (pdf-extract recurses once per level).
pub const MAX_FORM_DEPTH: usize = 32;
/// Most form XObject invocations one page may expand to (a form drawn twice by a form drawn
/// twice … grows exponentially).
pub const MAX_FORM_INVOCATIONS: u64 = 10_000;

/// Refuses a page whose form XObjects draw themselves, nest deeper than [`MAX_FORM_DEPTH`], or
/// expand to more than [`MAX_FORM_INVOCATIONS`] drawings.
pub fn check_forms(pdf: &PdfDocument, page_id: ObjectId) -> Result<(), String> {
    let page = pdf
        .get_dictionary(page_id)
        .map_err(|e| format!("the page object is unreadable ({e})"))?;
    let resources = inherited_resources(pdf, page);
    let content = pdf.get_page_content(page_id).unwrap_or_default();
    let mut walk = FormWalk {
        pdf,
        path: Vec::new(),
        expanded: HashMap::new(),
    };
    let invocations = walk.content(&content, resources)?;
    if invocations > MAX_FORM_INVOCATIONS {
        return Err(format!(
            "its form XObjects expand to {invocations} drawings (limit {MAX_FORM_INVOCATIONS})"
        ));
    }
    Ok(())
}

struct FormWalk<'a> {
    pdf: &'a PdfDocument,
    /// Forms being drawn, outermost first.
    path: Vec<ObjectId>,
    /// Invocations a form expands to, once known.
    expanded: HashMap<ObjectId, u64>,
}

impl<'a> FormWalk<'a> {
    /// Number of form drawings `content` expands to.
    fn content(
        &mut self,
        content: &[u8],
        resources: Option<&'a Dictionary>,
    ) -> Result<u64, String> {
        let names = drawn_names(content);
        if names.is_empty() {
            return Ok(0);
        }
        let Some(xobjects) = resources
            .and_then(|r| r.get(b"XObject").ok())
            .and_then(|o| resolve_dict(self.pdf, o))
        else {
            return Ok(0);
        };
        let mut total: u64 = 0;
        for name in names {
            let Ok(&Object::Reference(id)) = xobjects.get(&name) else {
                continue; // a direct (inline) object cannot refer back to itself
            };
            total = total.saturating_add(self.form(id, resources)?);
            if total > MAX_FORM_INVOCATIONS {
                return Ok(total);
            }
        }
        Ok(total)
    }

    /// Number of drawings one invocation of the XObject `id` expands to (itself included).
    fn form(&mut self, id: ObjectId, inherited: Option<&'a Dictionary>) -> Result<u64, String> {
        if self.path.contains(&id) {
            return Err(format!("form XObject {} {} R draws itself", id.0, id.1));
        }
        if let Some(&known) = self.expanded.get(&id) {
            return Ok(known);
        }
        let Ok(stream) = self.pdf.get_object(id).and_then(Object::as_stream) else {
            return Ok(1);
        };
        if stream.dict.get(b"Subtype").and_then(Object::as_name).ok() != Some(&b"Form"[..]) {
            return Ok(1); // an image
        }
        if self.path.len() >= MAX_FORM_DEPTH {
            return Err(format!(
                "form XObjects are nested more than {MAX_FORM_DEPTH} deep"
            ));
        }
        let own = stream
            .dict
            .get(b"Resources")
            .ok()
            .and_then(|o| resolve_dict(self.pdf, o));
        let content = stream
            .decompressed_content()
            .unwrap_or_else(|_| stream.content.clone());
        self.path.push(id);
        let inner = self.content(&content, own.or(inherited));
        self.path.pop();
        let count = inner?.saturating_add(1);
        self.expanded.insert(id, count);
        Ok(count)
    }
}

/// The names a content stream draws with `Do` (none when it does not decode).
fn drawn_names(content: &[u8]) -> Vec<Vec<u8>> {
    Content::decode(content)
        .map(|content| {
            content
                .operations
                .into_iter()
                .filter(|operation| operation.operator == "Do")
                .filter_map(|operation| {
                    operation
                        .operands
                        .first()
                        .and_then(|operand| operand.as_name().ok())
                        .map(<[u8]>::to_vec)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn resolve_dict<'a>(pdf: &'a PdfDocument, object: &'a Object) -> Option<&'a Dictionary> {
    pdf.dereference(object).ok()?.1.as_dict().ok()
}

/// The page's `Resources`, its own or inherited from the page tree (bounded: parent chains of
/// corrupt files may loop).
fn inherited_resources<'a>(pdf: &'a PdfDocument, page: &'a Dictionary) -> Option<&'a Dictionary> {
    let mut node = page;
    for _ in 0..64 {
        if let Ok(resources) = node.get(b"Resources") {
            return resolve_dict(pdf, resources);
        }
        let parent = node.get(b"Parent").and_then(Object::as_reference).ok()?;
        node = pdf.get_dictionary(parent).ok()?;
    }
    None
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
