//! Prompt-injection validation: does a document try to instruct the model that will later read
//! it as retrieved context?
//!
//! Four families of signals, all matched on the document text and its `title`:
//! - **instruction overrides**: "ignore (all) previous instructions", "ignore any previous and
//!   following instructions", "ignore all the instructions you got before", "disregard the
//!   above", "forget everything you learned", "you are now an unrestricted AI", "from now on you
//!   are going to act as …", "DAN mode enabled", "new instructions:", "reveal your system
//!   prompt", …;
//! - **fake role / system markers**: chat-template tokens (`<|im_start|>system`, `<|system|>`,
//!   `[INST]`, `<<SYS>>`), `### System:` headings, `<system>` tags, `System: you …` lines;
//! - **hidden text**: zero-width characters (U+200B, U+2060, …; U+200C/U+200D only inside
//!   Latin words, as emoji and Indic/Persian scripts need them), bidi controls (U+202A–U+202E,
//!   U+2066–U+2069), Unicode tag characters (ASCII smuggling; emoji flag sequences excepted)
//!   and, for HTML, the `hidden_text` metadata the loader records for invisible elements;
//! - **exfiltration**: Markdown images/links (inline, reference-style, or raw `<img>`) whose URL
//!   query (or path, for `=[DATA]`-style values) carries a placeholder for data (`{{…}}`, `${…}`, `<secret>`, `[DATA]`, `=HISTORY`,
//!   "insert … here"), and requests to "send the conversation / system prompt / user's data …
//!   to http…".
//!
//! Grading fails closed: two independent instruction overrides (at distinct places of the
//! text), an override together with a role marker or an exfiltration signal, a role marker
//! with exfiltration, or hidden text that carries any of these (instructions inside hidden HTML,
//! spelled with invisible characters between the letters, or smuggled as tag characters) is
//! **Rejected**. Any other signal is **Suspicious** — one weak signal is common enough in
//! legitimate text (a chat transcript with `### User:` headings, a security article quoting
//! an attack) that it should not be dropped silently. Reasons quote the offending fragment,
//! truncated.
//!
//! Honest limits: this is pattern matching on English phrasings. It misses paraphrases
//! ("pay no attention to what you were told"), other languages, homoglyphs (Cyrillic letters in
//! "ignоre"), instructions encoded (base64, rot13) or split across chunks, injected content in
//! images, and CSS-hidden HTML (stylesheet classes are not evaluated). It can flag documents
//! that *discuss* prompt injection. It is one layer: retrieved text must still be presented to
//! the model as quoted data, never as instructions. Measured recall and false-positive rates on
//! a labelled public set: `knowledge/tests/injection_detection.rs` (table in the README).

use std::sync::LazyLock;

use regex::Regex;

use super::Verdict;
use crate::load::truncate_chars;
use crate::types::Document;

/// Longest quoted fragment in a reason, in characters.
pub const QUOTE_MAX_CHARS: usize = 80;
/// Reasons kept per signal family.
const MAX_REASONS_PER_FAMILY: usize = 3;
/// Hidden HTML text shorter than this many words (an icon label, "Close") is not a signal.
const HIDDEN_HTML_MIN_WORDS: usize = 3;

/// Grades documents for prompt injection (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct InjectionValidator {
    _private: (),
}

/// The compiled patterns. They are literals: compiling them cannot fail at run time, which the
/// unit tests prove by running every one.
struct Patterns {
    overrides: Vec<Regex>,
    role_markers: Vec<Regex>,
    link_urls: Vec<Regex>,
    placeholder: Regex,
    placeholder_value: Regex,
    send_data: Regex,
}

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("literal regex")
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    Patterns {
    overrides: [
        // ignore/disregard/forget (all) (the) previous instructions
        r"(?i)\b(?:ignore|disregard|forget)\s+(?:(?:all|any|and|each|every|the|your|my|our|these|those|of|everything)\s+){0,4}(?:previous|prior|preceding|above|earlier|former|original|initial|system|old)\s+(?:(?:and|or|&)\s+(?:following|subsequent|future|later|next)\s+)?(?:instructions?|prompts?|rules|directions|directives?|guidelines|commands|context|messages|constraints|restrictions|programming|guidance)\b",
        // ignore all the instructions you got before / you were given / you have received
        r"(?i)\b(?:ignore|disregard|forget)\s+(?:(?:all|any|and|the|your|of|every)\s+){0,3}(?:instructions?|prompts?|rules|directions|directives?|guidelines|commands)\s+(?:that\s+)?you(?:'ve|\s+have)?\s+(?:(?:been|were|have\s+been)\s+)?(?:got|gotten|given|received|told|learned|learnt)\b",
        // forget everything you learned / were told / know
        r"(?i)\bforget\s+(?:everything|all)\s+(?:that\s+)?you(?:'ve|\s+have)?\s+(?:(?:been|were)\s+)?(?:learned|learnt|know|told|given|were\s+told|been\s+told)\b",
        // persona switch: from now on you are going to act as / pretend to be …
        r"(?i)\bfrom\s+now\s+on,?\s+you\s+(?:are\s+going\s+to|will|must|shall|should)\s+(?:act|pretend|behave|role-?play|respond|answer|reply|simulate|be\s+(?:acting|playing))\b",
        // the named jailbreak personas and modes
        r"(?i)\b(?:DAN|jailbreak|jailbroken|god|evil|unrestricted)\s+mode\s+(?:is\s+)?(?:enabled|activated|on)\b|\bDAN\b[^\n]{0,40}\bdo\s+anything\s+now\b",
        // override/bypass: only with "previous"-like words ("override the system prompt" is
        // ordinary configuration talk)
        r"(?i)\b(?:override|bypass)\s+(?:(?:all|any|the|your|these|those|of)\s+){0,3}(?:previous|prior|preceding|above|earlier|original|initial)\s+(?:instructions?|prompts?|rules|directions|directives?|guidelines)\b",
        // disregard the above (at the end of a clause)
        r"(?im)\b(?:ignore|disregard|forget)\s+(?:(?:all|everything|anything)\s+)?(?:(?:the|that|what\s+is|what's)\s+)?(?:above|preceding|said\s+above|written\s+above)(?:\s*[.,;:!]|\s*$|\s+and\b)",
        r"(?i)\b(?:stop|do\s+not|don't|never)\s+follow(?:ing)?\s+(?:the|your|any|those|these)\s+(?:previous|prior|above|original|system|earlier)\s+(?:instructions|rules|guidelines|directions)\b",
        // you are now (an unrestricted AI | in developer mode | no longer bound …)
        r"(?i)\byou\s+are\s+now\s+(?:(?:a|an|the|my|in|acting\s+as|no\s+longer)\s+)?(?:[a-z-]+\s+){0,2}?(?:ai|assistant|chatbot|bot|dan|persona|character|unrestricted|unfiltered|uncensored|jailbroken|(?:developer|god|jailbreak|dan|unrestricted|evil|admin)\s+mode|bound\s+by|restricted\s+by|limited\s+by)\b",
        r"(?i)\b(?:new|updated|revised|real|actual|secret)\s+(?:system\s+)?(?:instructions?|directives?|system\s+prompt)\s*:",
        r"(?i)\b(?:reveal|print|show|output|repeat|disclose|leak|dump)\s+(?:me\s+)?(?:your|the)\s+(?:(?:full|entire|original|hidden|initial|secret|complete)\s+)?(?:system\s+prompt|system\s+message|initial\s+(?:prompt|instructions)|hidden\s+instructions|instructions\s+above)\b",
    ]
    .into_iter()
    .map(compile)
    .collect(),
    role_markers: [
        r"(?i)<\|\s*(?:im_start|im_end|im_sep|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text)\s*\|>(?:\s*(?:system|user|assistant|developer))?",
        r"(?i)\[/?INST\]|<</?SYS>>",
        r"(?im)^[ \t]*#{1,6}[ \t]*(?:system|assistant|developer|instructions?|system[ \t]+prompt)[ \t]*:",
        r"(?i)</?(?:system|system_prompt|system-prompt|assistant|instructions?)>",
        r"(?im)^[ \t]*\[(?:system|assistant)\](?:[ \t]*:)?",
        r"(?im)^[ \t]*(?:system|assistant)[ \t]*:[ \t]*(?:you\b|ignore\b|disregard\b|forget\b|new\s+instructions)",
    ]
    .into_iter()
    .map(compile)
    .collect(),
    link_urls: [
        // inline Markdown image or link: ![alt](url) / [text](url)
        r"!?\[[^\]\n]{0,200}\]\(\s*<?(https?://[^)\n]{1,500})\)",
        // reference-style link definition: [id]: url
        r"(?m)^[ \t]{0,3}\[[^\]\n]+\]:[ \t]*<?(https?://\S{1,500})",
        // raw HTML image
        r#"(?i)<img\b[^>]*\bsrc\s*=\s*["']?(https?://[^"'\s>]{1,500})"#,
    ]
    .into_iter()
    .map(compile)
    .collect(),
    placeholder: compile(
        r"(?i)\{\{|\}\}|%7b%7b|%7d%7d|\$\{|\$\(|%24%7b|\{[a-z_][a-z0-9_ .-]{0,40}\}|%7b[a-z_]|<[a-z_][a-z0-9_ ]{0,40}>|%3c[a-z_]|\[(?:insert|paste|put|add|your|user)\b|(?:insert|paste)(?:\+|%20|_|-)",
    ),
    // `=SECRET`, `=[DATA]`, `=CHAT_HISTORY`: an all-caps placeholder as a whole query value
    placeholder_value: compile(r"=(?:\[[A-Z][A-Z_ ]{2,}\]|[A-Z][A-Z_]{3,})(?:&|#|$)"),
    send_data: compile(
        r"(?i)\b(?:send|post|forward|upload|transmit|exfiltrate|leak|submit|report)\b[^.\n]{0,100}?(?:\bconversation\b|\bchat\s+(?:history|log|transcript)\b|\b(?:previous|prior|earlier|all)\s+messages\b|\bmessages\s+above\b|\bsystem\s+prompt\b|\byour\s+instructions\b|\b(?:the\s+)?user'?s\s+(?:data|password|credentials|email|messages|secrets?|api\s+key|token|address|information)\b|\bsecrets\b|\bcredentials\b|\beverything\s+(?:above|you\s+know)\b|\ball\s+(?:the\s+)?(?:data|information)\b)[^.\n]{0,80}?\b(?:to|at|into|via)\s+<?https?://",
    ),
}
});

/// What one pass over a text found.
#[derive(Default)]
struct Findings {
    overrides: Vec<String>,
    /// Instruction overrides at distinct, non-overlapping places of the text (two patterns
    /// matching the same words count once).
    independent_overrides: usize,
    role_markers: Vec<String>,
    exfiltration: Vec<String>,
}

impl Findings {
    fn total(&self) -> usize {
        self.overrides.len() + self.role_markers.len() + self.exfiltration.len()
    }

    fn any(&self) -> bool {
        self.total() > 0
    }

    fn first_quote(&self) -> Option<&str> {
        self.overrides
            .first()
            .or(self.role_markers.first())
            .or(self.exfiltration.first())
            .map(String::as_str)
    }
}

fn quote(fragment: &str) -> String {
    let visible: String = fragment
        .chars()
        .filter(|&c| invisible_class(c).is_none())
        .collect();
    let collapsed = visible.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("\"{}\"", truncate_chars(&collapsed, QUOTE_MAX_CHARS))
}

fn push_unique(list: &mut Vec<String>, fragment: String) {
    if list.len() < MAX_REASONS_PER_FAMILY && !list.contains(&fragment) {
        list.push(fragment);
    }
}

fn scan(text: &str) -> Findings {
    let patterns = &*PATTERNS;
    let mut findings = Findings::default();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for regex in &patterns.overrides {
        for found in regex.find_iter(text) {
            push_unique(&mut findings.overrides, quote(found.as_str()));
            spans.push((found.start(), found.end()));
        }
    }
    spans.sort_unstable();
    let mut last_end = None;
    for (start, end) in spans {
        if last_end.is_none_or(|e| start >= e) {
            findings.independent_overrides += 1;
            last_end = Some(end);
        } else if let Some(e) = last_end.as_mut() {
            *e = (*e).max(end);
        }
    }
    for regex in &patterns.role_markers {
        for found in regex.find_iter(text) {
            push_unique(&mut findings.role_markers, quote(found.as_str()));
        }
    }
    for regex in &patterns.link_urls {
        for captures in regex.captures_iter(text) {
            let (Some(whole), Some(url)) = (captures.get(0), captures.get(1)) else {
                continue;
            };
            let url = url.as_str();
            let in_query = url.split_once('?').is_some_and(|(_, query)| {
                patterns.placeholder.is_match(query) || patterns.placeholder_value.is_match(query)
            });
            // `https://host/azure=[DATA]`: an all-caps placeholder as a value in the path too
            if in_query || patterns.placeholder_value.is_match(url) {
                push_unique(&mut findings.exfiltration, quote(whole.as_str()));
            }
        }
    }
    for found in patterns.send_data.find_iter(text) {
        push_unique(&mut findings.exfiltration, quote(found.as_str()));
    }
    findings
}

/// The family of an invisible character, if it is one.
fn invisible_class(c: char) -> Option<&'static str> {
    match c {
        '\u{200B}'
        | '\u{200C}'
        | '\u{200D}'
        | '\u{2060}'
        | '\u{180E}'
        | '\u{FEFF}'
        | '\u{2061}'..='\u{2064}' => Some("zero-width"),
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => Some("bidi control"),
        '\u{E0000}'..='\u{E007F}' => Some("tag"),
        _ => None,
    }
}

/// Invisible characters that count as hiding something, and the text they smuggle.
struct Invisible {
    count: usize,
    first: Option<(char, usize)>,
    /// The text with every invisible character removed (what a tokenizer may still "read").
    stripped: String,
    /// ASCII carried by tag characters (U+E0020–U+E007E).
    smuggled: String,
}

fn find_invisible(text: &str) -> Invisible {
    let mut out = Invisible {
        count: 0,
        first: None,
        stripped: String::with_capacity(text.len()),
        smuggled: String::new(),
    };
    let mut previous: Option<char> = None;
    let mut chars = text.chars().enumerate().peekable();
    let mut in_emoji_tag_sequence = false;
    while let Some((index, c)) = chars.next() {
        let before = previous.replace(c);
        let Some(class) = invisible_class(c) else {
            in_emoji_tag_sequence = false;
            out.stripped.push(c);
            continue;
        };
        if class == "tag" {
            // Subdivision flags: U+1F3F4 followed by tag letters and U+E007F.
            if before == Some('\u{1F3F4}') {
                in_emoji_tag_sequence = true;
            }
            if in_emoji_tag_sequence {
                out.stripped.push(c);
                if c == '\u{E007F}' {
                    in_emoji_tag_sequence = false;
                }
                continue;
            }
        }
        let counts = match c {
            // Joiners are legitimate in emoji and in many scripts; suspicious inside Latin words.
            '\u{200C}' | '\u{200D}' => {
                let after = chars.peek().map(|&(_, a)| a);
                before.is_some_and(|b| b.is_ascii_alphanumeric())
                    && after.is_some_and(|a| a.is_ascii_alphanumeric())
            }
            // A byte-order mark at the very start is an encoding artefact.
            '\u{FEFF}' => index > 0,
            _ => true,
        };
        if counts {
            out.count += 1;
            if out.first.is_none() {
                out.first = Some((c, index));
            }
            if ('\u{E0020}'..='\u{E007E}').contains(&c) {
                out.smuggled
                    .push(char::from_u32(c as u32 - 0xE0000).unwrap_or(' '));
            }
        }
    }
    out
}

impl InjectionValidator {
    /// Grades a document (see the module documentation for the signals and the grading).
    pub fn check(&self, doc: &Document) -> Verdict {
        let mut text = doc.text.clone();
        if let Some(title) = doc.metadata.get("title") {
            text.push('\n');
            text.push_str(title);
        }

        let invisible = find_invisible(&text);
        // Scan the text as a model would read it: invisible characters removed.
        let findings = scan(&invisible.stripped);
        let mut strong = Vec::new();
        let mut weak = Vec::new();

        if invisible.count > 0 {
            let visible_findings = scan(&text);
            if visible_findings.total() < findings.total() {
                strong.push(format!(
                    "hidden text carrying instructions: invisible characters inside {}",
                    findings.first_quote().unwrap_or("\"\"")
                ));
            }
            let smuggled = scan(&invisible.smuggled);
            if smuggled.any() || !invisible.smuggled.trim().is_empty() {
                let reason = format!(
                    "hidden text carrying instructions: tag characters spell {}",
                    quote(&invisible.smuggled)
                );
                if smuggled.any() {
                    strong.push(reason);
                } else {
                    weak.push(reason);
                }
            }
            if let Some((c, index)) = invisible.first {
                weak.push(format!(
                    "hidden characters: {} invisible character(s), the first U+{:04X} ({}) at character {}",
                    invisible.count,
                    c as u32,
                    invisible_class(c).unwrap_or("invisible"),
                    index
                ));
            }
        }

        if let Some(hidden_html) = doc.metadata.get("hidden_text") {
            let hidden_findings = scan(&find_invisible(hidden_html).stripped);
            if let Some(fragment) = hidden_findings.first_quote() {
                strong.push(format!(
                    "hidden text carrying instructions: invisible HTML contains {fragment}"
                ));
            } else if hidden_html.split_whitespace().count() >= HIDDEN_HTML_MIN_WORDS {
                weak.push(format!("hidden HTML text: {}", quote(hidden_html)));
            }
        }

        let has_override = !findings.overrides.is_empty();
        let has_role = !findings.role_markers.is_empty();
        let has_exfiltration = !findings.exfiltration.is_empty();
        // Fails closed: two independent instruction overrides ("ignore all previous
        // instructions … reveal the system prompt") are an attack, not a quotation.
        let combined = findings.independent_overrides >= 2
            || (has_override && (has_role || has_exfiltration))
            || (has_role && has_exfiltration);

        let mut reasons = strong;
        let is_rejected = !reasons.is_empty() || combined;
        reasons.extend(
            findings
                .overrides
                .iter()
                .map(|q| format!("instruction override: {q}")),
        );
        reasons.extend(
            findings
                .role_markers
                .iter()
                .map(|q| format!("fake role marker: {q}")),
        );
        reasons.extend(
            findings
                .exfiltration
                .iter()
                .map(|q| format!("exfiltration: {q}")),
        );
        reasons.extend(weak);

        let verdict = if reasons.is_empty() {
            Verdict::Clean
        } else if is_rejected {
            Verdict::Rejected { reasons }
        } else {
            Verdict::Suspicious { reasons }
        };
        if !verdict.is_clean() {
            tracing::debug!(
                source_id = %doc.source_id,
                verdict = verdict.as_str(),
                reasons = ?verdict.reasons(),
                "injection check"
            );
        }
        verdict
    }
}
