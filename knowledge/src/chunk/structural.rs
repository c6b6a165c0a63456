//! The `structural` strategy: sections delimited by Markdown ATX headings (`#` … `######`,
//! ignored inside fenced code). The HTML loader writes `h1`–`h6` as such lines too, so HTML
//! documents (`loader` = `html`) are sectioned by the same rule, without fences (the loader
//! emits none: a literal fence line in a page is text). Each section becomes one chunk, or several when it
//! exceeds `max_tokens` (cut by the recursive strategy, with overlap); every chunk carries
//! `heading_path` = `"Top > Sub > Subsub"`. A heading directly followed by a deeper heading has
//! no text of its own: it opens the next section's chunk instead of standing alone.

use std::sync::Arc;

use async_trait::async_trait;

use crate::embed::TokenCounter;
use crate::types::{Chunk, Document, Metadata};

use super::recursive::split_recursively;
use super::span::Span;
use super::{ChunkBounds, ChunkError, Chunker, HEADING_PATH_KEY};

/// A heading line: its level (1–6) and its text without markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heading {
    pub level: usize,
    pub title: String,
}

/// A run of text from one heading line (or the document start) to the next heading line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Section {
    pub span: Span,
    /// `None` for text before the first heading.
    pub heading: Option<Heading>,
    /// Titles of the enclosing headings, outermost first, ending with this section's own.
    pub path: Vec<String>,
    /// Whether anything but the heading line has content.
    pub has_body: bool,
}

/// Parses an ATX heading line (`line` without its line ending).
pub(crate) fn parse_heading(line: &str) -> Option<Heading> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.len() - rest.trim_start_matches('#').len();
    if !(1..=6).contains(&level) {
        return None;
    }
    let after = &rest[level..];
    if !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return None;
    }
    let mut title = after.trim();
    // An optional closing sequence: spaces then #s (or only #s).
    let without_closing = title.trim_end_matches('#');
    if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
        title = without_closing.trim_end();
    }
    Some(Heading {
        level,
        title: title.to_string(),
    })
}

/// Opening or closing fence of fenced code: the fence character and run length.
fn fence(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let marker = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = rest.len() - rest.trim_start_matches(marker).len();
    (run >= 3).then_some((marker, run))
}

/// Sections of `text`, tiling it in order. With `fenced_code`, heading lines inside fenced
/// code (Markdown) are ignored; the HTML loader emits no fences, so its text is read without.
pub(crate) fn sections(text: &str, fenced_code: bool) -> Vec<Section> {
    let mut headings: Vec<(usize, usize, Heading)> = Vec::new(); // (line start, line end, heading)
    let mut open_fence: Option<(char, usize)> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let content = line.trim_end_matches(['\n', '\r']);
        let fence = if fenced_code { fence(content) } else { None };
        match (open_fence, fence) {
            (None, Some(opened)) => open_fence = Some(opened),
            (Some((marker, run)), Some((closing, closing_run)))
                if closing == marker
                    && closing_run >= run
                    && content
                        .trim_start()
                        .trim_start_matches(marker)
                        .trim()
                        .is_empty() =>
            {
                open_fence = None;
            }
            (None, None) => {
                if let Some(heading) = parse_heading(content) {
                    headings.push((start, at, heading));
                }
            }
            _ => {}
        }
    }

    let mut sections = Vec::new();
    let first_heading = headings.first().map_or(text.len(), |(start, _, _)| *start);
    if first_heading > 0 {
        sections.push(Section {
            span: Span::new(0, first_heading),
            heading: None,
            path: Vec::new(),
            has_body: !text[..first_heading].trim().is_empty(),
        });
    }
    let mut stack: Vec<Heading> = Vec::new();
    for (i, (start, line_end, heading)) in headings.iter().enumerate() {
        let end = headings.get(i + 1).map_or(text.len(), |(next, _, _)| *next);
        while stack.last().is_some_and(|open| open.level >= heading.level) {
            stack.pop();
        }
        stack.push(heading.clone());
        sections.push(Section {
            span: Span::new(*start, end),
            heading: Some(heading.clone()),
            path: stack
                .iter()
                .map(|h| h.title.clone())
                .filter(|t| !t.is_empty())
                .collect(),
            has_body: !text[*line_end..end].trim().is_empty(),
        });
    }
    sections
}

pub(crate) struct StructuralChunker {
    tokens: Arc<dyn TokenCounter>,
    bounds: ChunkBounds,
}

impl StructuralChunker {
    pub fn new(tokens: Arc<dyn TokenCounter>, bounds: ChunkBounds) -> Self {
        Self { tokens, bounds }
    }
}

#[async_trait]
impl Chunker for StructuralChunker {
    fn name(&self) -> &'static str {
        "structural"
    }

    async fn chunk(&self, doc: &Document) -> Result<Vec<Chunk>, ChunkError> {
        let text = doc.text.as_str();
        let sections = sections(text, doc.loader != "html");
        let mut chunks = Vec::new();
        let mut carried_start: Option<usize> = None;
        for (i, section) in sections.iter().enumerate() {
            let opens_child = match (&section.heading, sections.get(i + 1)) {
                (Some(heading), Some(next)) => next
                    .heading
                    .as_ref()
                    .is_some_and(|child| child.level > heading.level),
                _ => false,
            };
            if !section.has_body && opens_child {
                carried_start.get_or_insert(section.span.start);
                continue;
            }
            let span = Span::new(
                carried_start.take().unwrap_or(section.span.start),
                section.span.end,
            );
            let mut metadata = Metadata::new();
            if !section.path.is_empty() {
                metadata.insert(HEADING_PATH_KEY.to_string(), section.path.join(" > "));
            }
            chunks.extend(
                split_recursively(text, span, self.tokens.as_ref(), self.bounds)
                    .into_iter()
                    .map(|piece| piece.to_chunk(text, metadata.clone())),
            );
        }
        tracing::debug!(
            source_id = %doc.source_id,
            loader = %doc.loader,
            strategy = "structural",
            sections = sections.len(),
            chunks = chunks.len(),
            "chunked"
        );
        Ok(chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::invariants::{
        assert_contract, assert_covers_all_content, document, test_counter,
    };

    fn chunker(max_tokens: usize, overlap: usize) -> StructuralChunker {
        StructuralChunker::new(
            test_counter(),
            ChunkBounds {
                max_tokens,
                overlap,
            },
        )
    }

    async fn chunk(text: &str, loader: &str, max_tokens: usize) -> Vec<Chunk> {
        let doc = document(text, loader);
        let chunks = chunker(max_tokens, 4)
            .chunk(&doc)
            .await
            .expect("structural chunking does not fail");
        assert_contract(&doc, &chunks, test_counter().as_ref(), max_tokens);
        assert_covers_all_content(&doc, &chunks);
        chunks
    }

    fn path(chunk: &Chunk) -> Option<&str> {
        chunk.metadata.get(HEADING_PATH_KEY).map(String::as_str)
    }

    #[test]
    fn parses_atx_headings() {
        let heading = |level: usize, title: &str| {
            Some(Heading {
                level,
                title: title.to_string(),
            })
        };
        assert_eq!(parse_heading("# Top"), heading(1, "Top"));
        assert_eq!(
            parse_heading("###   Deep  title  "),
            heading(3, "Deep  title")
        );
        assert_eq!(parse_heading("## Closed ##"), heading(2, "Closed"));
        assert_eq!(parse_heading("## C# rocks"), heading(2, "C# rocks"));
        assert_eq!(parse_heading("   ###### Six"), heading(6, "Six"));
        assert_eq!(parse_heading("#"), heading(1, ""));
        assert_eq!(parse_heading("####### seven"), None);
        assert_eq!(parse_heading("#hashtag"), None);
        assert_eq!(parse_heading("    # indented code"), None);
        assert_eq!(parse_heading("text # not a heading"), None);
    }

    const MARKDOWN: &str = "Preamble before any heading.\n\
        \n\
        # Guide\n\
        \n\
        Intro to the guide.\n\
        \n\
        ## Install\n\
        \n\
        Run the installer.\n\
        \n\
        ```sh\n\
        # not a heading: a shell comment\n\
        make install\n\
        ```\n\
        \n\
        ### Linux\n\
        \n\
        Use the package manager.\n\
        \n\
        ## Configure\n\
        \n\
        Edit orkeon.yaml.\n\
        \n\
        # Reference\n\
        ## API\n\
        ### Errors\n\
        Errors name the key.\n";

    #[tokio::test]
    async fn sections_carry_heading_paths() {
        let chunks = chunk(MARKDOWN, "markdown", 128).await;
        let summary: Vec<(Option<&str>, &str)> = chunks
            .iter()
            .map(|c| (path(c), c.text.lines().next().unwrap_or_default()))
            .collect();
        assert_eq!(
            summary,
            [
                (None, "Preamble before any heading."),
                (Some("Guide"), "# Guide"),
                (Some("Guide > Install"), "## Install"),
                (Some("Guide > Install > Linux"), "### Linux"),
                (Some("Guide > Configure"), "## Configure"),
                // Heading-only sections open their first child's chunk.
                (Some("Reference > API > Errors"), "# Reference"),
            ]
        );
        assert!(chunks[2].text.contains("# not a heading: a shell comment"));
        assert!(chunks[2].text.ends_with("```"));
        assert_eq!(
            chunks[5].text,
            "# Reference\n## API\n### Errors\nErrors name the key."
        );
    }

    #[tokio::test]
    async fn oversized_sections_split_with_the_same_path() {
        let body = "This sentence is part of a long section about ingestion. ".repeat(30);
        let text = format!("# Top\n## Sub\n{body}\n## Next\nShort.");
        let chunks = chunk(&text, "markdown", 32).await;
        let in_sub: Vec<&Chunk> = chunks
            .iter()
            .filter(|c| path(c) == Some("Top > Sub"))
            .collect();
        assert!(in_sub.len() > 5, "{chunks:#?}");
        assert!(in_sub[0].text.starts_with("# Top\n## Sub\n"));
        let last = chunks.last().expect("chunks");
        assert_eq!(
            (path(last), last.text.as_str()),
            (Some("Top > Next"), "## Next\nShort.")
        );
    }

    #[tokio::test]
    async fn html_documents_use_the_heading_lines_the_loader_leaves() {
        let text = "# Product manual\nWelcome to the manual.\n```\n## Safety\nKeep away from \
                    water.\n### Batteries\nUse the supplied charger.\n## Warranty\nTwo years.";
        let chunks = chunk(text, "html", 64).await;
        let paths: Vec<Option<&str>> = chunks.iter().map(path).collect();
        assert_eq!(
            paths,
            [
                Some("Product manual"),
                Some("Product manual > Safety"),
                Some("Product manual > Safety > Batteries"),
                Some("Product manual > Warranty"),
            ]
        );
    }

    #[tokio::test]
    async fn sibling_heading_without_body_stands_alone_and_unicode_titles_work() {
        let text = "# Über uns 🚀\n# Kontakt\nSchreiben Sie uns: ça marche.\n~~~\n# code\n~~~\n";
        let chunks = chunk(text, "markdown", 64).await;
        let summary: Vec<(Option<&str>, &str)> =
            chunks.iter().map(|c| (path(c), c.text.as_str())).collect();
        assert_eq!(
            summary,
            [
                (Some("Über uns 🚀"), "# Über uns 🚀"),
                (
                    Some("Kontakt"),
                    "# Kontakt\nSchreiben Sie uns: ça marche.\n~~~\n# code\n~~~"
                ),
            ]
        );
    }

    #[tokio::test]
    async fn text_without_headings_is_chunked_recursively_without_path() {
        let chunks = chunk("Plain text.\n\nNo headings at all.", "text", 64).await;
        assert_eq!(chunks.len(), 1);
        assert_eq!(path(&chunks[0]), None);
    }
}
