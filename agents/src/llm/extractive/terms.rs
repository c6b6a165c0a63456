//! Content terms of a text for the extractive model: lowercased words, English stopwords
//! removed, reduced by a small suffix stemmer so `refunds`/`refunded`/`refund` meet.

use std::collections::BTreeSet;

const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "may",
    "might",
    "must",
    "shall",
    "also",
    "please",
    "tell",
    "give",
    "answer",
    "question",
    "much",
    "many",
];

/// The distinct content terms of `text`.
pub fn content_terms(text: &str) -> BTreeSet<String> {
    words(text)
        .filter(|w| !is_stopword(w))
        .map(|w| stem(&w))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Lowercased alphanumeric words (apostrophes inside words are dropped: `don't` → `dont`).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| {
            w.chars()
                .filter(|c| *c != '\'')
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
}

fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&word)
}

/// A deliberately small suffix stemmer (plural, past, gerund, adverb, a few derivations).
/// Words of four characters or fewer are left alone.
pub fn stem(word: &str) -> String {
    let w = word;
    if w.chars().count() <= 4 || !w.is_ascii() {
        return w.to_owned();
    }
    let rules: &[(&str, &str)] = &[
        ("ational", "ate"),
        ("ization", "ize"),
        ("fulness", "ful"),
        ("iveness", "ive"),
        ("ousness", "ous"),
        ("ations", "ate"),
        ("ation", "ate"),
        ("ments", "ment"),
        ("ities", "ity"),
        ("ness", ""),
        ("ings", ""),
        ("ing", ""),
        ("ies", "y"),
        ("ied", "y"),
        ("edly", ""),
        ("ly", ""),
        ("sses", "ss"),
        ("es", ""),
        ("ed", ""),
        ("s", ""),
    ];
    for (suffix, replacement) in rules {
        if let Some(root) = w.strip_suffix(suffix) {
            // Keep stems at least three characters long; `ss` words are not plurals.
            if root.len() + replacement.len() < 3 || (*suffix == "s" && root.ends_with('s')) {
                continue;
            }
            if *suffix == "es"
                && !(root.ends_with(['s', 'x', 'z'])
                    || root.ends_with("ch")
                    || root.ends_with("sh"))
            {
                // `prices` → `price`, not `pric`: only strip `es` after sibilants.
                let mut kept = root.to_owned();
                kept.push('e');
                return undouble(kept);
            }
            let mut stemmed = root.to_owned();
            stemmed.push_str(replacement);
            return undouble(stemmed);
        }
    }
    w.to_owned()
}

/// `shipp` → `ship`, `stopp` → `stop` (after stripping `-ed`/`-ing`), but `ll`/`ss`/`zz` stay.
fn undouble(mut stem: String) -> String {
    let bytes = stem.as_bytes();
    let n = bytes.len();
    if n >= 4
        && bytes[n - 1] == bytes[n - 2]
        && !matches!(bytes[n - 1], b'l' | b's' | b'z' | b'e' | b'o')
    {
        stem.pop();
    }
    stem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_share_a_stem() {
        assert_eq!(stem("refunds"), stem("refund"));
        assert_eq!(stem("refunded"), stem("refund"));
        assert_eq!(stem("refunding"), stem("refund"));
        assert_eq!(stem("shipping"), stem("ship"));
        assert_eq!(stem("shipped"), stem("shipping"));
        assert_eq!(stem("policies"), stem("policy"));
        assert_eq!(stem("prices"), stem("price"));
        assert_eq!(stem("boxes"), stem("box"));
        assert_eq!(stem("classes"), "class");
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("days"), "days", "short words are kept");
    }

    #[test]
    fn content_terms_drop_stopwords_and_case() {
        let terms = content_terms("How many DAYS do customers have to request a refund?");
        let expected: BTreeSet<String> = ["days", "customer", "request", "refund"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(terms, expected);
    }
}
