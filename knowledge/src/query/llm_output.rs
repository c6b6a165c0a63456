//! Tolerant parsing of LLM answers: JSON found inside prose or code fences, lists of strings
//! (query variants, hypothetical passages) and rankings of numbered candidates. Models wrap,
//! number, quote and comment their output; these parsers take what is usable and report
//! nothing usable as `None`/empty, so that the caller can degrade and say so.

use serde_json::Value;

/// Removes a surrounding Markdown code fence (```json … ```), if any.
pub fn strip_code_fence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    // Skip the info string (e.g. `json`) up to the end of the first line.
    let body = match rest.find('\n') {
        Some(i) => &rest[i + 1..],
        None => rest,
    };
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// The end (exclusive byte index) of the JSON value starting at `start` (`{` or `[`), found by
/// bracket matching outside string literals. Scans at most `*budget` bytes (and takes them
/// from it): on a text full of unclosed brackets every start scans to the end, which must not
/// add up to quadratic work.
fn balanced_end(text: &str, start: usize, budget: &mut usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        *budget = budget.checked_sub(1)?;
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Bytes [`extract_json`] may scan looking for a balanced value, per byte of the text.
const SCAN_BUDGET_PER_BYTE: usize = 16;

/// The first JSON object or array in `text`: the whole text, a fenced block, or the first
/// balanced `{…}`/`[…]` that parses.
pub fn extract_json(text: &str) -> Option<Value> {
    let unfenced = strip_code_fence(text);
    for candidate in [text.trim(), unfenced] {
        if let Ok(v @ (Value::Object(_) | Value::Array(_))) =
            serde_json::from_str::<Value>(candidate)
        {
            return Some(v);
        }
    }
    let mut budget = text.len().saturating_mul(SCAN_BUDGET_PER_BYTE).max(1 << 16);
    for (start, c) in text.char_indices() {
        if budget == 0 {
            break;
        }
        if (c == '{' || c == '[')
            && let Some(end) = balanced_end(text, start, &mut budget)
            && let Ok(v) = serde_json::from_str::<Value>(&text[start..end])
            && (v.is_object() || v.is_array())
        {
            return Some(v);
        }
    }
    None
}

fn strings_of(array: &[Value]) -> Vec<String> {
    array
        .iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(s.clone()),
            // Models sometimes answer [{"query": "…"}]: take the first string field.
            Value::Object(map) => map.values().find_map(|v| v.as_str().map(str::to_string)),
            _ => None,
        })
        .collect()
}

/// Strings from a JSON answer: an array of strings, or the first array-of-strings field of an
/// object (`{"queries": [...]}`). `None` when the text holds no such JSON.
pub fn json_string_list(text: &str) -> Option<Vec<String>> {
    match extract_json(text)? {
        Value::Array(items) => Some(strings_of(&items)).filter(|v| !v.is_empty()),
        Value::Object(map) => map.values().find_map(|v| match v {
            Value::Array(items) => Some(strings_of(items)).filter(|v| !v.is_empty()),
            _ => None,
        }),
        _ => None,
    }
}

/// Removes list decoration from one line: bullets, numbering (`1.`, `2)`, `Q3:`), surrounding
/// quotes and a trailing comma.
fn undecorate(line: &str) -> &str {
    let mut s = line.trim();
    s = s.trim_start_matches(['-', '*', '•', '·', '>']).trim_start();
    // Numbering: optional letter prefix (Q, V), digits, then '.', ')' or ':'.
    let alnum_end = s
        .char_indices()
        .find(|(_, c)| !c.is_ascii_alphanumeric())
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let head = &s[..alnum_end];
    let numbered = !head.is_empty()
        && head.chars().any(|c| c.is_ascii_digit())
        && head
            .chars()
            .skip_while(|c| c.is_ascii_alphabetic())
            .all(|c| c.is_ascii_digit())
        && head.chars().take_while(|c| c.is_ascii_alphabetic()).count() <= 8;
    if numbered && let Some(rest) = s[alnum_end..].strip_prefix(['.', ')', ':']) {
        s = rest.trim_start();
    }
    s = s.trim_end_matches(',').trim();
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\''), ('`', '`')] {
        if s.len() >= 2 && s.starts_with(open) && s.ends_with(close) {
            s = s[open.len_utf8()..s.len() - close.len_utf8()].trim();
        }
    }
    s
}

/// Query variants from an LLM answer: JSON if present, else one per non-empty line with list
/// decoration removed. Drops preambles (lines ending with ':'), the original question, blanks
/// and duplicates (case-insensitive); keeps at most `max`.
pub fn parse_variants(text: &str, original: &str, max: usize) -> Vec<String> {
    let whole_is_json = serde_json::from_str::<Value>(strip_code_fence(text))
        .map(|v| v.is_array() || v.is_object())
        .unwrap_or(false);
    let raw: Vec<String> = match json_string_list(text) {
        Some(list) => list,
        // A JSON answer without strings holds no variant; its text is not one either.
        None if whole_is_json => Vec::new(),
        None => strip_code_fence(text)
            .lines()
            .filter(|l| !l.trim_end().ends_with(':'))
            .map(|l| undecorate(l).to_string())
            .collect(),
    };
    let mut seen = vec![original.trim().to_lowercase()];
    let mut out = Vec::new();
    for v in raw {
        if out.len() >= max {
            break; // also when `max` is 0
        }
        let v = undecorate(&v).to_string();
        let key = v.to_lowercase();
        if v.is_empty() || seen.contains(&key) {
            continue;
        }
        seen.push(key);
        out.push(v);
    }
    out
}

/// Hypothetical passages from an LLM answer: a JSON list when present, else the whole answer
/// (fences and a leading "Passage:" label removed) as one passage.
pub fn parse_passages(text: &str, max: usize) -> Vec<String> {
    let list = json_string_list(text).unwrap_or_else(|| {
        let body = strip_code_fence(text);
        let body = ["Passage:", "passage:", "Answer:", "answer:"]
            .iter()
            .find_map(|label| body.strip_prefix(label))
            .unwrap_or(body);
        vec![body.trim().to_string()]
    });
    list.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .take(max)
        .collect()
}

fn numbers_of(array: &[Value]) -> Vec<i64> {
    array
        .iter()
        .filter_map(|v| match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().trim_matches(['[', ']']).parse().ok(),
            Value::Object(map) => ["index", "id", "passage", "doc"]
                .iter()
                .find_map(|k| map.get(*k).and_then(Value::as_i64)),
            _ => None,
        })
        .collect()
}

/// Valid 0-based positions from 1-based numbers: out-of-range numbers and repeats dropped.
fn to_order(numbers: &[i64], m: usize) -> Vec<usize> {
    let mut seen = vec![false; m];
    let mut order = Vec::new();
    for &n in numbers {
        if n >= 1 && (n as usize) <= m && !seen[n as usize - 1] {
            seen[n as usize - 1] = true;
            order.push(n as usize - 1);
        }
    }
    order
}

/// Every integer written in `text`, in order.
fn integers_in(text: &str) -> Vec<i64> {
    let mut found = Vec::new();
    let mut current: Option<i64> = None;
    for c in text.chars() {
        match c.to_digit(10) {
            Some(d) => {
                current = Some(
                    current
                        .unwrap_or(0)
                        .saturating_mul(10)
                        .saturating_add(d as i64),
                )
            }
            None => found.extend(current.take()),
        }
    }
    found.extend(current);
    found
}

/// A ranking of `m` numbered candidates (1-based in the text, 0-based in the result), best
/// first: a JSON array of numbers, a JSON object's first array field (`{"ranking": [..]}`), or
/// else the numbers in the text in order (`[3] > [1] > [2]`). JSON found inside prose is only
/// trusted when it ranks at least two candidates (a lone `[3]` in prose is a marker, not a
/// ranking). Out-of-range numbers and repeats are dropped. `None` when nothing usable remains.
pub fn parse_ranking(text: &str, m: usize) -> Option<Vec<usize>> {
    let whole_is_json = serde_json::from_str::<Value>(strip_code_fence(text))
        .map(|v| v.is_array() || v.is_object())
        .unwrap_or(false);
    let json_numbers: Vec<i64> = match extract_json(text) {
        Some(Value::Array(items)) => numbers_of(&items),
        Some(Value::Object(map)) => map
            .values()
            .find_map(|v| match v {
                Value::Array(items) => Some(numbers_of(items)).filter(|n| !n.is_empty()),
                _ => None,
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let json_order = to_order(&json_numbers, m);
    let order = if whole_is_json || json_order.len() >= 2 {
        json_order
    } else {
        to_order(&integers_in(text), m)
    };
    (!order.is_empty()).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_in_fences_and_prose() {
        let fenced = "```json\n{\"queries\": [\"a\", \"b\"]}\n```";
        assert_eq!(json_string_list(fenced), Some(vec!["a".into(), "b".into()]));
        let prose = "Sure! Here you go: [\"x [1]\", \"y\"] hope it helps";
        assert_eq!(
            json_string_list(prose),
            Some(vec!["x [1]".into(), "y".into()])
        );
        assert_eq!(extract_json("no json here"), None);
        assert_eq!(extract_json("{broken"), None);
    }

    #[test]
    fn variants_parse_from_json_numbered_lines_and_bullets() {
        let q = "How do refunds work?";
        assert_eq!(
            parse_variants(
                r#"{"variants": ["refund policy", "Refund Policy", "return money"]}"#,
                q,
                5
            ),
            vec!["refund policy", "return money"]
        );
        let lines = "Here are 3 alternative queries:\n1. \"refund policy\"\n2) return window\n- How do refunds work?\n* money back rules,\n\n";
        assert_eq!(
            parse_variants(lines, q, 5),
            vec!["refund policy", "return window", "money back rules"]
        );
        assert_eq!(parse_variants("Q1: a\nQ2: b\nQ3: c", q, 2), vec!["a", "b"]);
        assert!(parse_variants("", q, 3).is_empty());
        assert!(parse_variants("   \n\n", q, 3).is_empty());
        assert!(parse_variants("[]", q, 3).is_empty());
    }

    #[test]
    fn passages_parse_as_json_or_whole_text() {
        assert_eq!(
            parse_passages("Passage: Refunds are issued within 30 days.", 1),
            vec!["Refunds are issued within 30 days."]
        );
        assert_eq!(parse_passages(r#"["p1", "p2", "p3"]"#, 2), vec!["p1", "p2"]);
        assert!(parse_passages("  ", 1).is_empty());
    }

    #[test]
    fn rankings_parse_tolerantly() {
        assert_eq!(
            parse_ranking(r#"{"ranking": [3, 1, 2]}"#, 3),
            Some(vec![2, 0, 1])
        );
        assert_eq!(parse_ranking("[2, \"1\", 2, 9, 0]", 3), Some(vec![1, 0]));
        assert_eq!(
            parse_ranking("The order is [3] > [1] > [2].", 3),
            Some(vec![2, 0, 1])
        );
        assert_eq!(
            parse_ranking("Best: [2], then [3], then [1]", 3),
            Some(vec![1, 2, 0])
        );
        assert_eq!(
            parse_ranking("Ranking: [2, 3, 1]. Passage 1 is off-topic.", 3),
            Some(vec![1, 2, 0])
        );
        assert_eq!(
            parse_ranking(r#"[{"index": 2}, {"index": 1}]"#, 2),
            Some(vec![1, 0])
        );
        assert_eq!(parse_ranking("I cannot rank these.", 3), None);
        assert_eq!(
            parse_ranking("ref 99999999999999999999999 then 2", 3),
            Some(vec![1])
        );
        assert_eq!(parse_ranking("[42, 43]", 3), None);
    }
}
