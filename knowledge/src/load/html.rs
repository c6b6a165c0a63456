//! HTML loader: the readable text of a page, its `<title>`, and the text it hides.
//!
//! Dropped without a trace: `script`, `style`, `noscript`, `template`, `svg`, `canvas`,
//! `iframe`, `object`, `embed`. Dropped as *hidden* (and recorded, whitespace-collapsed and
//! truncated, in metadata `hidden_text` so the injection validator can inspect it): elements
//! with the `hidden` attribute, `aria-hidden="true"`, or an inline style with `display:none`,
//! `visibility:hidden|collapse`, `opacity:0` or `font-size:0`. Styles from stylesheets and
//! classes are not evaluated (a `.hidden { display: none }` rule is not seen).
//!
//! Block elements become line breaks (paragraph-level blocks a blank line), whitespace inside
//! a line is collapsed except in `<pre>`, table cells are separated by ` | `, and `h1`–`h6`
//! are written as Markdown headings (`## Section`) so the structural chunker finds the page's
//! sections. The title is `<title>`, else the first `h1`.

use scraper::{ElementRef, Html};

use super::{LoadError, SourceKind, decode_utf8, truncate_chars};
use crate::types::{Document, Metadata};

/// Longest `hidden_text` kept in metadata, in characters.
pub const HIDDEN_TEXT_MAX_CHARS: usize = 2_000;

/// Parses an HTML page into one document (`loader` = `html`; metadata `title`, `hidden_text`).
pub fn parse(source_id: &str, bytes: &[u8]) -> Result<Document, LoadError> {
    let source = decode_utf8(source_id, SourceKind::Html, bytes)?;
    let page = Html::parse_document(source);
    let mut walk = Walk::default();
    walk.run(page.root_element());

    let mut metadata = Metadata::new();
    if let Some(title) = walk.title.or(walk.first_h1) {
        metadata.insert("title".into(), title);
    }
    let hidden = walk.hidden.finish();
    if !hidden.trim().is_empty() {
        metadata.insert(
            "hidden_text".into(),
            truncate_chars(hidden.trim(), HIDDEN_TEXT_MAX_CHARS),
        );
    }
    Ok(Document {
        source_id: source_id.to_owned(),
        text: walk.visible.finish(),
        loader: SourceKind::Html.as_str().to_owned(),
        metadata,
    })
}

#[derive(Default)]
struct Walk {
    visible: TextWriter,
    hidden: TextWriter,
    title: Option<String>,
    first_h1: Option<String>,
    preformatted: usize,
}

/// One step of the depth-first walk. The walk keeps its own stack (no recursion), so a page
/// nested a million levels deep cannot overflow the thread's stack.
enum Step<'a> {
    Enter(ElementRef<'a>, bool),
    Text(&'a str, bool),
    Leave(Leave),
}

/// What to do when leaving an element.
struct Leave {
    hidden: bool,
    breaks: u8,
    heading: Option<(u8, HeadingMark)>,
    preformatted: bool,
}

impl Walk {
    fn run(&mut self, root: ElementRef<'_>) {
        let mut stack = vec![Step::Enter(root, false)];
        while let Some(step) = stack.pop() {
            match step {
                Step::Enter(element, parent_hidden) => {
                    let Some(leave) = self.enter(element, parent_hidden) else {
                        continue;
                    };
                    let hidden = leave.hidden;
                    stack.push(Step::Leave(leave));
                    for child in element.children().rev() {
                        if let Some(child_element) = ElementRef::wrap(child) {
                            stack.push(Step::Enter(child_element, hidden));
                        } else if let Some(text) = child.value().as_text() {
                            stack.push(Step::Text(text, hidden));
                        }
                    }
                }
                Step::Text(text, hidden) => {
                    let preformatted = self.preformatted > 0;
                    let writer = self.writer(hidden);
                    if preformatted {
                        writer.preformatted(text);
                    } else {
                        writer.text(text);
                    }
                }
                Step::Leave(leave) => self.leave(leave),
            }
        }
    }

    fn writer(&mut self, hidden: bool) -> &mut TextWriter {
        if hidden {
            &mut self.hidden
        } else {
            &mut self.visible
        }
    }

    /// Opens an element; `None` when its content is skipped entirely.
    fn enter(&mut self, element: ElementRef<'_>, parent_hidden: bool) -> Option<Leave> {
        let name = element.value().name();
        match name {
            "script" | "style" | "noscript" | "template" | "svg" | "canvas" | "iframe"
            | "object" | "embed" => return None,
            "title" => {
                if self.title.is_none() {
                    let title = collapse_whitespace(&element.text().collect::<String>());
                    if !title.is_empty() {
                        self.title = Some(title);
                    }
                }
                return None;
            }
            _ => {}
        }
        let hidden = parent_hidden || is_hidden(element);
        let heading_level = match name {
            "h1" => Some(1),
            "h2" => Some(2),
            "h3" => Some(3),
            "h4" => Some(4),
            "h5" => Some(5),
            "h6" => Some(6),
            _ => None,
        };
        let breaks = block_breaks(name);
        let preformatted = name == "pre";
        if preformatted {
            self.preformatted += 1;
        }
        let writer = self.writer(hidden);
        if breaks > 0 {
            writer.block(breaks);
        }
        match name {
            "br" => writer.line_break(),
            "td" | "th" => writer.cell(),
            _ => {}
        }
        let heading = heading_level.map(|level| (level, writer.begin_heading(level)));
        Some(Leave {
            hidden,
            breaks,
            heading,
            preformatted,
        })
    }

    fn leave(&mut self, leave: Leave) {
        if leave.preformatted {
            self.preformatted -= 1;
        }
        let writer = self.writer(leave.hidden);
        let heading = leave
            .heading
            .map(|(level, mark)| (level, writer.end_heading(mark)));
        if leave.breaks > 0 {
            writer.block(leave.breaks);
        }
        if let Some((1, text)) = heading
            && !leave.hidden
            && self.first_h1.is_none()
            && !text.is_empty()
        {
            self.first_h1 = Some(text);
        }
    }
}

/// Line breaks around a block element: 2 for paragraph-level blocks, 1 for line-level ones.
fn block_breaks(name: &str) -> u8 {
    match name {
        "p" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "ul" | "ol" | "dl" | "table"
        | "blockquote" | "pre" | "section" | "article" | "header" | "footer" | "nav" | "aside"
        | "main" | "figure" | "form" | "fieldset" | "details" | "address" | "hr" => 2,
        "div" | "li" | "tr" | "dt" | "dd" | "figcaption" | "summary" | "caption" | "legend"
        | "option" | "body" => 1,
        _ => 0,
    }
}

/// Whether an element hides itself (attributes and inline style only).
fn is_hidden(element: ElementRef<'_>) -> bool {
    let value = element.value();
    if value.attr("hidden").is_some() {
        return true;
    }
    if value
        .attr("aria-hidden")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return true;
    }
    let Some(style) = value.attr("style") else {
        return false;
    };
    style.split(';').any(|declaration| {
        let Some((property, value)) = declaration.split_once(':') else {
            return false;
        };
        let property = property.trim().to_ascii_lowercase();
        let value = value
            .to_ascii_lowercase()
            .replace("!important", "")
            .trim()
            .to_owned();
        match property.as_str() {
            "display" => value == "none",
            "visibility" => value == "hidden" || value == "collapse",
            "opacity" | "font-size" => value
                .trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%')
                .parse::<f64>()
                .is_ok_and(|number| number == 0.0),
            _ => false,
        }
    })
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Builds text with collapsed whitespace and block-level line breaks.
#[derive(Default)]
struct TextWriter {
    out: String,
    pending_space: bool,
    pending_newlines: u8,
    pending_cell: bool,
}

/// Where a heading started, to drop it again if it turns out empty.
struct HeadingMark {
    before: usize,
    text_start: usize,
}

impl TextWriter {
    fn block(&mut self, newlines: u8) {
        self.pending_newlines = self.pending_newlines.max(newlines);
        self.pending_space = false;
        self.pending_cell = false;
    }

    fn line_break(&mut self) {
        // Consecutive <br>s may open a blank line, never more.
        self.pending_newlines = (self.pending_newlines + 1).min(2);
        self.pending_space = false;
        self.pending_cell = false;
    }

    fn cell(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with('\n') && self.pending_newlines == 0 {
            self.pending_cell = true;
        }
    }

    fn flush_pending(&mut self) {
        if self.pending_newlines > 0 {
            if !self.out.is_empty() {
                let existing = self.out.len() - self.out.trim_end_matches('\n').len();
                for _ in existing..usize::from(self.pending_newlines) {
                    self.out.push('\n');
                }
            }
        } else if self.pending_cell {
            self.out.push_str(" | ");
        } else if self.pending_space && !self.out.is_empty() && !self.out.ends_with(['\n', ' ']) {
            self.out.push(' ');
        }
        self.pending_newlines = 0;
        self.pending_space = false;
        self.pending_cell = false;
    }

    fn text(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_whitespace() {
                self.pending_space = true;
            } else {
                self.flush_pending();
                self.out.push(c);
            }
        }
    }

    fn preformatted(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.flush_pending();
        self.out.push_str(text);
    }

    fn begin_heading(&mut self, level: u8) -> HeadingMark {
        let before = self.out.len();
        self.flush_pending();
        self.out.push_str(&"#".repeat(usize::from(level)));
        self.out.push(' ');
        HeadingMark {
            before,
            text_start: self.out.len(),
        }
    }

    /// Closes a heading; returns its text (empty headings are removed).
    fn end_heading(&mut self, mark: HeadingMark) -> String {
        let text = self.out[mark.text_start..].trim().to_owned();
        if text.is_empty() {
            self.out.truncate(mark.before);
            self.pending_newlines = 2;
        }
        text
    }

    fn finish(self) -> String {
        self.out.trim_end().to_owned()
    }
}
