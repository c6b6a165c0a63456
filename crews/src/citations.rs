//! Run-level citations: the `[n]` markers of model output and the run's citation ledger.
//!
//! A run gives every passage handed to any of its agents ONE marker (a passage — same
//! collection and chunk id — seen twice keeps its first marker), so `[n]` means the same
//! passage in every task output, in the final output and in the `context:` handed to later
//! tasks. [`CitationLedger::admit_block`] renumbers a knowledge block (numbered `1..n` by the
//! knowledge service) into the ledger before the prompt is rendered;
//! [`CitationLedger::check_output`] keeps the markers of an output that resolve, removes
//! those that resolve to nothing (`dangling_markers`) and says when nothing is cited
//! (`uncited`).
//!
//! Marker syntax: `[3]`, and each number of `[1, 2]`, `[1; 2]` and `[1][2]`. Anything else in
//! brackets (`[x]`, `[1-3]`, `[see 2]`) is text.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::ports::{KnowledgeBlock, KnowledgeCitation};

/// One bracketed marker group in a text: byte range (`[` to `]` inclusive) and its numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MarkerGroup {
    start: usize,
    end: usize,
    numbers: Vec<u32>,
}

/// Every marker group of `text`, in one linear pass: after a `[`, only digits, separators
/// and blanks are scanned, so no byte is looked at more than twice.
fn marker_groups(text: &str) -> Vec<MarkerGroup> {
    scan_marker_groups(text, &mut 0)
}

/// [`marker_groups`], counting the bytes it examines in `steps` (for the linearity test).
fn scan_marker_groups(text: &str, steps: &mut usize) -> Vec<MarkerGroup> {
    let bytes = text.as_bytes();
    let mut groups = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        *steps += 1;
        if bytes[i] != b'[' {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < bytes.len() && matches!(bytes[j], b'0'..=b'9' | b',' | b';' | b' ' | b'\t') {
            *steps += 1;
            j += 1;
        }
        if j < bytes.len() && bytes[j] == b']' {
            // Everything between the brackets is ASCII, so these are char boundaries.
            let numbers: Option<Vec<u32>> = text[i + 1..j]
                .split([',', ';'])
                .map(|part| part.trim().parse::<u32>().ok())
                .collect();
            if let Some(numbers) = numbers {
                groups.push(MarkerGroup {
                    start: i,
                    end: j + 1,
                    numbers,
                });
            }
            i = j + 1;
        } else {
            // Not a marker: resume at the byte that stopped the scan (it may be a `[`).
            i = j.max(i + 1);
        }
    }
    groups
}

/// The markers a text cites: `[3]`, and each number of `[1, 2]` / `[1][2]`.
pub fn cited_markers(text: &str) -> BTreeSet<u32> {
    marker_groups(text)
        .into_iter()
        .flat_map(|g| g.numbers)
        .collect()
}

/// `text` with every marker-shaped group written in parentheses (`[14]` → `(14)`,
/// `[1, 2]` → `(1, 2)`): for quoting source text that carries bracketed references of its
/// own (scientific papers do) without them being read as citation markers.
pub fn neutralise_markers(text: &str) -> String {
    neutralise_groups_where(text, |_| true)
}

/// `text` with the marker groups whose numbers satisfy `pred` written in parentheses.
fn neutralise_groups_where(text: &str, pred: impl Fn(&[u32]) -> bool) -> String {
    let groups: Vec<_> = marker_groups(text)
        .into_iter()
        .filter(|g| pred(&g.numbers))
        .collect();
    if groups.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut copied_to = 0;
    for group in groups {
        out.push_str(&text[copied_to..group.start]);
        out.push('(');
        out.push_str(&text[group.start + 1..group.end - 1]);
        out.push(')');
        copied_to = group.end;
    }
    out.push_str(&text[copied_to..]);
    out
}

/// Rewrites every marker of `text` through `map`: a number mapped to `None` is dropped (a
/// group left empty disappears with the blank before it). Returns the new text and the
/// dropped numbers in order of appearance (without repeats).
pub fn map_markers(text: &str, map: impl Fn(u32) -> Option<u32>) -> (String, Vec<u32>) {
    let mut out = String::with_capacity(text.len());
    let mut dropped: Vec<u32> = Vec::new();
    let mut copied_to = 0;
    for group in marker_groups(text) {
        let mapped: Vec<Option<u32>> = group.numbers.iter().map(|&n| map(n)).collect();
        if mapped
            .iter()
            .zip(&group.numbers)
            .all(|(m, n)| *m == Some(*n))
        {
            continue; // unchanged: copied verbatim with the surrounding text
        }
        for (m, n) in mapped.iter().zip(&group.numbers) {
            if m.is_none() && !dropped.contains(n) {
                dropped.push(*n);
            }
        }
        out.push_str(&text[copied_to..group.start]);
        let kept: Vec<String> = mapped.iter().flatten().map(u32::to_string).collect();
        if kept.is_empty() {
            // "claim [9]." → "claim."
            let trimmed = out.trim_end_matches([' ', '\t']).len();
            out.truncate(trimmed);
        } else {
            out.push('[');
            out.push_str(&kept.join(", "));
            out.push(']');
        }
        copied_to = group.end;
    }
    out.push_str(&text[copied_to..]);
    (out, dropped)
}

/// Rewrites the `[n]` at the start of each line of a knowledge block's text through `map`
/// (passage lines of the prompt convention); other lines and markers inside passages stay.
fn renumber_passage_lines(text: &str, map: &BTreeMap<u32, u32>) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for (index, line) in text.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[')
            && let Some(close) = rest.find(']')
            && let Ok(marker) = rest[..close].trim().parse::<u32>()
            && let Some(new) = map.get(&marker)
        {
            out.push_str(&line[..line.len() - trimmed.len()]);
            out.push_str(&format!("[{new}]"));
            out.push_str(&rest[close + 1..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

/// What a task output cites once checked against the run's ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CitationCheck {
    /// The output with dangling markers removed.
    pub text: String,
    /// The passages the output cites, in marker order.
    pub cited: Vec<KnowledgeCitation>,
    /// Markers the output used that resolve to no passage of the run (removed from `text`).
    pub dangling_markers: Vec<u32>,
    /// The output cites no passage (after dangling markers were removed).
    pub uncited: bool,
}

/// Every passage handed to an agent in one run, each with its run-wide marker `1..=n`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CitationLedger {
    /// Index `i` holds marker `i + 1`.
    passages: Vec<KnowledgeCitation>,
    by_passage: HashMap<(String, String), u32>,
}

impl CitationLedger {
    pub fn new() -> Self {
        Self::default()
    }

    /// A ledger holding `passages` under their markers, e.g. a run's ledger handed to a task
    /// runner. Passages are admitted in marker order; a marker already taken, or a passage
    /// already present, is skipped.
    pub fn from_passages(passages: &[KnowledgeCitation]) -> Self {
        let mut sorted: Vec<&KnowledgeCitation> = passages.iter().collect();
        sorted.sort_by_key(|c| c.marker);
        let mut ledger = Self::new();
        for passage in sorted {
            if passage.marker as usize == ledger.passages.len() + 1 {
                ledger.admit(passage.clone());
            } else {
                tracing::warn!(
                    marker = passage.marker,
                    expected = ledger.passages.len() + 1,
                    chunk = %passage.chunk_id,
                    "citation ledger: passage skipped (markers must run 1..=n)"
                );
            }
        }
        ledger
    }

    /// Every passage, in marker order.
    pub fn passages(&self) -> &[KnowledgeCitation] {
        &self.passages
    }

    pub fn len(&self) -> usize {
        self.passages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.passages.is_empty()
    }

    /// The passage behind `marker`.
    pub fn get(&self, marker: u32) -> Option<&KnowledgeCitation> {
        (marker as usize)
            .checked_sub(1)
            .and_then(|i| self.passages.get(i))
    }

    /// The run-wide marker of `passage`: its existing one when the run has seen it (same
    /// collection and chunk id), else the next free one. Returns the passage as recorded.
    pub fn admit(&mut self, mut passage: KnowledgeCitation) -> KnowledgeCitation {
        let key = (passage.collection.clone(), passage.chunk_id.clone());
        if let Some(&marker) = self.by_passage.get(&key) {
            passage.marker = marker;
            return passage;
        }
        let marker = self.passages.len() as u32 + 1;
        passage.marker = marker;
        self.by_passage.insert(key, marker);
        self.passages.push(passage.clone());
        passage
    }

    /// Renumbers a block (citations and the `[n]` opening each passage line) into the run's
    /// markers, admitting passages the run has not seen.
    pub fn admit_block(&mut self, block: KnowledgeBlock) -> KnowledgeBlock {
        let (block, _) = self.admit_block_mapped(block);
        block
    }

    /// [`Self::admit_block`], also returning the block-local → run marker mapping (to
    /// renumber other renderings of the same block, e.g. a tool's answer).
    pub fn admit_block_mapped(
        &mut self,
        block: KnowledgeBlock,
    ) -> (KnowledgeBlock, BTreeMap<u32, u32>) {
        let mut map = BTreeMap::new();
        let mut citations = Vec::with_capacity(block.citations.len());
        for citation in block.citations {
            let local = citation.marker;
            let admitted = self.admit(citation);
            map.entry(local).or_insert(admitted.marker);
            citations.push(admitted);
        }
        let text = renumber_passage_lines(&block.text, &map);
        (
            KnowledgeBlock {
                text,
                citations,
                trace: block.trace,
            },
            map,
        )
    }

    /// Renumbers the passage lines of a text rendered from a block admitted with `map`.
    pub fn renumber_text(text: &str, map: &BTreeMap<u32, u32>) -> String {
        renumber_passage_lines(text, map)
    }

    /// Checks an output against the ledger: markers that resolve are kept, the others are
    /// removed from the text and reported; an output citing nothing has no citations.
    pub fn check_output(&self, output: &str) -> CitationCheck {
        let (text, dangling_markers) = map_markers(output, |n| self.get(n).is_some().then_some(n));
        // Removing a marker can join the text around it into a new group ("[0, 0, 0[3]]" →
        // "[0, 0, 0]"); such a group was never a citation: write it in parentheses.
        let text = neutralise_groups_where(&text, |numbers| {
            numbers.iter().any(|&n| self.get(n).is_none())
        });
        let cited: Vec<KnowledgeCitation> = cited_markers(&text)
            .into_iter()
            .filter_map(|n| self.get(n).cloned())
            .collect();
        CitationCheck {
            uncited: cited.is_empty(),
            text,
            cited,
            dangling_markers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn passage(collection: &str, chunk: &str, marker: u32) -> KnowledgeCitation {
        KnowledgeCitation {
            marker,
            collection: collection.into(),
            chunk_id: chunk.into(),
            source_id: format!("{chunk}.md"),
            snippet: format!("text of {chunk}"),
            score: 1.0,
            score_origin: "hybrid".into(),
            start: 0,
            end: 0,
            untrusted: false,
        }
    }

    fn block(chunks: &[&str]) -> KnowledgeBlock {
        let citations: Vec<KnowledgeCitation> = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| passage("kb", c, i as u32 + 1))
            .collect();
        let mut text = String::from("Context:\n");
        for c in &citations {
            text.push_str(&format!(
                "[{}] (source: {}) {} [14]\n",
                c.marker, c.source_id, c.snippet
            ));
        }
        KnowledgeBlock {
            text,
            citations,
            trace: serde_json::json!({"stages": []}),
        }
    }

    #[test]
    fn finds_single_grouped_and_adjacent_markers() {
        let markers =
            cited_markers("A [1]. B [2, 4]. C [5][6]. D [7; 8]. Not [n] nor [x, 1] nor [7");
        assert_eq!(
            markers.into_iter().collect::<Vec<_>>(),
            vec![1, 2, 4, 5, 6, 7, 8]
        );
        assert_eq!(
            cited_markers("[[[1]"),
            BTreeSet::from([1]),
            "a run of brackets ends in a marker"
        );
        assert!(cited_markers("[1-3] [] [,] [99999999999]").is_empty());
    }

    #[test]
    fn neutralised_text_has_no_markers_left() {
        assert_eq!(
            neutralise_markers("as shown in [14] and [3, 7]; see [x]."),
            "as shown in (14) and (3, 7); see [x]."
        );
        assert!(cited_markers(&neutralise_markers("[[1]] [2][3]")).is_empty());
        assert_eq!(neutralise_markers("plain"), "plain");
    }

    #[test]
    fn a_group_fused_by_a_removal_is_not_left_as_a_marker() {
        let ledger = CitationLedger::from_passages(&[passage("kb", "a", 1)]);
        let check = ledger.check_output("See [0, 0, 0[3]] and [1].");
        assert_eq!(check.text, "See (0, 0, 0) and [1].");
        assert_eq!(check.dangling_markers, vec![3]);
        assert_eq!(check.cited.len(), 1);
    }

    #[test]
    fn dangling_markers_are_removed_and_groups_shrink() {
        let keep = |n: u32| (n <= 3).then_some(n);
        assert_eq!(
            map_markers("Unknown [9]. Known [2].", keep),
            ("Unknown. Known [2].".to_string(), vec![9])
        );
        assert_eq!(
            map_markers("Mixed [1, 9][9].", keep),
            ("Mixed [1].".to_string(), vec![9])
        );
        assert_eq!(
            map_markers("Untouched [1, 2] text [x].", keep),
            ("Untouched [1, 2] text [x].".to_string(), vec![])
        );
    }

    #[test]
    fn a_passage_seen_twice_keeps_its_marker_and_blocks_are_renumbered() {
        let mut ledger = CitationLedger::new();
        let first = ledger.admit_block(block(&["a", "b"]));
        assert_eq!(
            first.citations.iter().map(|c| c.marker).collect::<Vec<_>>(),
            [1, 2]
        );
        // The second block is numbered 1..3 by the service: b is known, c and d are new.
        let second = ledger.admit_block(block(&["c", "b", "d"]));
        let markers: Vec<u32> = second.citations.iter().map(|c| c.marker).collect();
        assert_eq!(markers, [3, 2, 4]);
        assert!(
            second
                .text
                .starts_with("Context:\n[3] (source: c.md) text of c [14]\n[2] (source: b.md)"),
            "{}",
            second.text
        );
        assert!(second.text.contains("[4] (source: d.md) text of d [14]"));
        assert_eq!(ledger.len(), 4);
        assert_eq!(ledger.get(2).unwrap().chunk_id, "b");
        // The same chunk id in another collection is another passage.
        assert_eq!(ledger.admit(passage("other", "b", 1)).marker, 5);

        let copy = CitationLedger::from_passages(ledger.passages());
        assert_eq!(copy, ledger);
    }

    #[test]
    fn a_task_citing_a_marker_that_does_not_exist_keeps_no_citation() {
        let mut ledger = CitationLedger::new();
        ledger.admit_block(block(&["a", "b", "c"]));
        let check = ledger.check_output("Refunds take 14 days [9].");
        assert_eq!(check.text, "Refunds take 14 days.");
        assert!(check.cited.is_empty());
        assert_eq!(check.dangling_markers, vec![9]);
        assert!(check.uncited);

        let check = ledger.check_output("No markers here.");
        assert!(check.uncited && check.cited.is_empty() && check.dangling_markers.is_empty());

        let check = ledger.check_output("B [2]. C [3, 7].");
        assert_eq!(check.text, "B [2]. C [3].");
        assert_eq!(
            check
                .cited
                .iter()
                .map(|c| c.chunk_id.as_str())
                .collect::<Vec<_>>(),
            ["b", "c"]
        );
        assert_eq!(check.dangling_markers, vec![7]);
        assert!(!check.uncited);
        // Idempotent: checking the cleaned text again changes nothing.
        assert_eq!(ledger.check_output(&check.text).text, check.text);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Never panics, on any input (multi-byte text and bracket soup included), and finds
        /// nothing but numbers that occur in the text.
        #[test]
        fn marker_scanning_never_panics(text in "[\\[\\]0-9, ;a-zé\u{1F600}]{0,200}") {
            let markers = cited_markers(&text);
            for m in &markers {
                prop_assert!(text.contains(&m.to_string()));
            }
            let (cleaned, dropped) = map_markers(&text, |_| None);
            prop_assert!(cleaned.len() <= text.len());
            prop_assert_eq!(dropped.into_iter().collect::<BTreeSet<_>>(), markers);
        }

        /// Linear behaviour: the bytes the scan examines are at most twice the input length,
        /// even for inputs made of `[`, digits and blanks only (the old scan was quadratic).
        #[test]
        fn marker_scanning_is_linear_in_bracket_soup(
            n in 1usize..4000,
            digit in "[0-9]",
            text in "[\\[\\]0-9 ,x]{0,400}",
        ) {
            let soup = format!("[{digit}").repeat(n);
            let mut steps = 0;
            prop_assert!(scan_marker_groups(&soup, &mut steps).is_empty());
            prop_assert!(steps <= 2 * soup.len(), "{} steps for {} bytes", steps, soup.len());
            let mut steps = 0;
            scan_marker_groups(&text, &mut steps);
            prop_assert!(steps <= 2 * text.len().max(1), "{} steps for {} bytes", steps, text.len());
            let closed = format!("{soup}]");
            // Only the last `[d` closes.
            prop_assert_eq!(marker_groups(&closed).len(), 1);
            let opens = "[".repeat(n) + "1]";
            prop_assert_eq!(cited_markers(&opens), BTreeSet::from([1]));
        }
    }
}
