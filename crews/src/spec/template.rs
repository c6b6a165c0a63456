//! `{{ inputs.NAME }}` placeholders in task texts: finding them and rendering them.
//!
//! Only the plain form `{{ inputs.NAME }}` (any whitespace inside the braces) is rendered
//! here; other `{{ … }}` expressions are left untouched for the prompt renderer. Every
//! `inputs.NAME` mentioned inside any `{{ … }}` counts as a required input.

use std::collections::{BTreeMap, BTreeSet};

/// A `{{` without its closing `}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{{{{' at character {offset} is never closed with '}}}}'")]
pub struct UnclosedPlaceholder {
    /// Character offset of the `{{` in the text.
    pub offset: usize,
}

/// Inputs a text needs that the caller did not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("missing input(s): {}", .names.join(", "))]
pub struct MissingInputs {
    pub names: Vec<String>,
}

/// One `{{ … }}` block: its byte range in the text and the expression inside.
struct Placeholder<'a> {
    start: usize,
    end: usize,
    expression: &'a str,
}

fn placeholders(text: &str) -> Result<Vec<Placeholder<'_>>, UnclosedPlaceholder> {
    let mut found = Vec::new();
    let mut cursor = 0;
    while let Some(open) = text[cursor..].find("{{") {
        let start = cursor + open;
        let inner_start = start + 2;
        let Some(close) = text[inner_start..].find("}}") else {
            return Err(UnclosedPlaceholder {
                offset: text[..start].chars().count(),
            });
        };
        let end = inner_start + close + 2;
        found.push(Placeholder {
            start,
            end,
            expression: &text[inner_start..inner_start + close],
        });
        cursor = end;
    }
    Ok(found)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The `NAME`s of every `inputs.NAME` inside `expression`.
fn names_in_expression(expression: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor = 0;
    while let Some(found) = expression[cursor..].find("inputs.") {
        let at = cursor + found;
        let after = at + "inputs.".len();
        let preceded_by_name = expression[..at]
            .chars()
            .next_back()
            .is_some_and(is_name_char);
        let name: String = expression[after..]
            .chars()
            .take_while(|c| is_name_char(*c))
            .collect();
        if !preceded_by_name && !name.is_empty() {
            names.push(name);
        }
        cursor = after;
    }
    names
}

/// The plain `inputs.NAME` expression's name, if `expression` is exactly that.
fn plain_input(expression: &str) -> Option<&str> {
    let name = expression.trim().strip_prefix("inputs.")?;
    (!name.is_empty() && name.chars().all(is_name_char)).then_some(name)
}

/// Checks every `{{` is closed.
pub fn check_closed(text: &str) -> Result<(), UnclosedPlaceholder> {
    placeholders(text).map(|_| ())
}

/// The input names `text` refers to (an unclosed `{{` contributes nothing).
pub fn input_names(text: &str) -> BTreeSet<String> {
    placeholders(text)
        .unwrap_or_default()
        .iter()
        .flat_map(|p| names_in_expression(p.expression))
        .collect()
}

/// Replaces every `{{ inputs.NAME }}` with its value; fails naming every input `text`
/// refers to that `inputs` lacks. An unclosed `{{` is left as written.
pub fn render(text: &str, inputs: &BTreeMap<String, String>) -> Result<String, MissingInputs> {
    let missing: Vec<String> = input_names(text)
        .into_iter()
        .filter(|n| !inputs.contains_key(n))
        .collect();
    if !missing.is_empty() {
        return Err(MissingInputs { names: missing });
    }
    let Ok(blocks) = placeholders(text) else {
        return Ok(text.to_string());
    };
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    for block in blocks {
        if let Some(value) = plain_input(block.expression).and_then(|n| inputs.get(n)) {
            out.push_str(&text[cursor..block.start]);
            out.push_str(value);
            cursor = block.end;
        }
    }
    out.push_str(&text[cursor..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn finds_names_whitespace_tolerant_and_in_expressions() {
        let names =
            input_names("A {{inputs.a}} b {{   inputs.b_2 }} {{ inputs.c | upper }} {{ x }}");
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            vec!["a".to_string(), "b_2".to_string(), "c".to_string()]
        );
        assert!(input_names("no placeholders, inputs.x outside braces").is_empty());
        assert!(input_names("{{ myinputs.x }}").is_empty());
    }

    #[test]
    fn renders_plain_placeholders_and_keeps_other_expressions() {
        let text = "Answer: {{ inputs.question }} / {{inputs.question}} / {{ other }}";
        let out = render(text, &inputs(&[("question", "why {{ not }}?")])).unwrap();
        assert_eq!(out, "Answer: why {{ not }}? / why {{ not }}? / {{ other }}");
    }

    #[test]
    fn names_every_missing_input() {
        let err = render(
            "{{ inputs.a }} {{ inputs.b }} {{ inputs.c }}",
            &inputs(&[("b", "1")]),
        )
        .unwrap_err();
        assert_eq!(err.names, vec!["a".to_string(), "c".to_string()]);
        assert_eq!(err.to_string(), "missing input(s): a, c");
    }

    #[test]
    fn reports_unclosed_placeholders_by_character_offset() {
        assert_eq!(check_closed("ok {{ inputs.a }}"), Ok(()));
        assert_eq!(
            check_closed("é {{ inputs.a }} then {{ inputs.b"),
            Err(UnclosedPlaceholder { offset: 22 })
        );
    }
}
