//! Reads a grounded prompt written in `crews::ports::prompt_convention`: the numbered passages
//! after the `Context:` header and the question after the last `Question:` line.

use orkeon_crews::ports::prompt_convention::{CONTEXT_HEADER, QUESTION_PREFIX};

/// One numbered passage of the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// The `n` of its `[n]` marker.
    pub marker: u32,
    /// The passage text without its marker and `(source: …)` prefix.
    pub text: String,
}

/// A grounded prompt split into its parts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroundedPrompt {
    pub passages: Vec<Passage>,
    pub question: String,
}

/// Splits a user message into passages and question.
///
/// Passages are the `[n] …` lines after the last `Context:` header line before the final
/// `Question:` line, each running until the next marker line or the final `Question:` line
/// (so a passage quoting a `Question:` line of its own, as FAQs do, stays whole). The question is the text after
/// the last `Question:` line (to the end of the message); without one, it is the message with
/// the context section removed.
pub fn parse(message: &str) -> GroundedPrompt {
    let lines: Vec<&str> = message.lines().collect();
    let question_line = lines
        .iter()
        .rposition(|line| line.trim_start().starts_with(QUESTION_PREFIX));
    let context_search_end = question_line.unwrap_or(lines.len());
    let context_line = lines[..context_search_end]
        .iter()
        .rposition(|line| line.trim() == CONTEXT_HEADER);

    let mut passages: Vec<Passage> = Vec::new();
    let mut context_end = context_line.map_or(0, |c| c + 1);
    if let Some(header) = context_line {
        let mut current: Option<(u32, Vec<&str>)> = None;
        let mut index = header + 1;
        while index < context_search_end {
            let line = lines[index];
            if let Some((marker, rest)) = split_marker(line) {
                if let Some((m, body)) = current.take() {
                    passages.push(finish_passage(m, &body));
                }
                current = Some((marker, vec![strip_source(rest)]));
            } else if let Some((_, body)) = current.as_mut() {
                // Blank lines before the final `Question:` line are trimmed with the passage.
                body.push(line);
            }
            index += 1;
        }
        if let Some((m, body)) = current.take() {
            passages.push(finish_passage(m, &body));
        }
        context_end = index;
    }
    passages.retain(|p| !p.text.is_empty());

    let question = match question_line {
        Some(q) => {
            let first = lines[q].trim_start()[QUESTION_PREFIX.len()..].trim();
            let mut parts = vec![first];
            parts.extend(lines[q + 1..].iter().copied());
            parts.join("\n").trim().to_owned()
        }
        None => {
            let before = context_line.map_or(&lines[..], |c| &lines[..c]);
            let after = if context_line.is_some() {
                &lines[context_end.min(lines.len())..]
            } else {
                &[][..]
            };
            before
                .iter()
                .chain(after.iter())
                .copied()
                .collect::<Vec<_>>()
                .join("\n")
                .trim()
                .to_owned()
        }
    };
    GroundedPrompt { passages, question }
}

/// `[12] text` → `(12, "text")`.
fn split_marker(line: &str) -> Option<(u32, &str)> {
    let rest = line.trim_start().strip_prefix('[')?;
    let close = rest.find(']')?;
    let marker = rest[..close].trim().parse().ok()?;
    Some((marker, rest[close + 1..].trim_start()))
}

/// Drops a leading `(source: …)`.
fn strip_source(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix("(source:")
        && let Some(close) = rest.find(')')
    {
        return rest[close + 1..].trim_start();
    }
    text
}

fn finish_passage(marker: u32, body: &[&str]) -> Passage {
    Passage {
        marker,
        text: body.join("\n").trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_passages_sources_and_question() {
        let prompt = "Context:\n[1] (source: kb/faq.md) Refunds take 14 days.\nSecond line.\n[2] Shipping is free.\n\nQuestion: How long do refunds take?";
        let parsed = parse(prompt);
        assert_eq!(
            parsed.passages,
            vec![
                Passage {
                    marker: 1,
                    text: "Refunds take 14 days.\nSecond line.".into()
                },
                Passage {
                    marker: 2,
                    text: "Shipping is free.".into()
                },
            ]
        );
        assert_eq!(parsed.question, "How long do refunds take?");
    }

    #[test]
    fn blank_lines_inside_a_passage_do_not_end_it() {
        let prompt = "Intro.\nContext:\n[1] Para one.\n\nPara two.\n\nQuestion: q?";
        let parsed = parse(prompt);
        assert_eq!(parsed.passages[0].text, "Para one.\n\nPara two.");
        assert_eq!(parsed.question, "q?");
    }

    #[test]
    fn a_question_line_inside_a_passage_does_not_end_the_context() {
        let prompt = "Context:\n[1] FAQ\n\nQuestion: Can I return shoes?\nAnswer: Yes.\n[2] Second.\n\nQuestion: returns?";
        let parsed = parse(prompt);
        assert_eq!(parsed.passages.len(), 2);
        assert_eq!(
            parsed.passages[0].text,
            "FAQ\n\nQuestion: Can I return shoes?\nAnswer: Yes."
        );
        assert_eq!(parsed.question, "returns?");
    }

    #[test]
    fn without_question_line_the_rest_of_the_message_is_the_question() {
        let prompt = "What is the refund window?\nContext:\n[1] Refunds take 14 days.";
        let parsed = parse(prompt);
        assert_eq!(parsed.passages.len(), 1);
        assert_eq!(parsed.question, "What is the refund window?");
    }

    #[test]
    fn no_context_means_no_passages() {
        let parsed = parse("Just a question about [1] things?");
        assert!(parsed.passages.is_empty());
        assert_eq!(parsed.question, "Just a question about [1] things?");
    }
}
