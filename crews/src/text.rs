//! Content words: what Orkeon counts as a word when it compares texts lexically. Words are
//! lowercased alphanumeric runs (apostrophes inside words dropped: `don't` → `dont`), English
//! stopwords are removed, and a small suffix stemmer makes `refunds`/`refunded`/`refund` meet.
//!
//! The one implementation: the offline extractive model (`orkeon-agents`) picks sentences with
//! it, and the knowledge heuristics (groundedness check, retrieval evaluator, query rewriter,
//! refine, MMR's lexical fallback, routing) judge with it, so they agree on what a word is.

use std::collections::BTreeSet;

/// English stopwords plus the filler words of questions (`please`, `tell`, `answer`, …),
/// sorted for binary search.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "answer",
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
    "give",
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
    "many",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
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
    "please",
    "question",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "tell",
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
];

/// Whether `word` (lowercase) is a stopword.
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Lowercased alphanumeric words (apostrophes inside words are dropped: `don't` → `dont`).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| {
            w.chars()
                .filter(|c| *c != '\'')
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
}

/// The content words of `text`, stemmed, in order (duplicates kept).
pub fn content_words(text: &str) -> Vec<String> {
    words(text)
        .filter(|w| !is_stopword(w))
        .map(|w| stem(&w))
        .filter(|w| !w.is_empty())
        .collect()
}

/// The distinct content words of `text`, stemmed.
pub fn content_word_set(text: &str) -> BTreeSet<String> {
    content_words(text).into_iter().collect()
}

/// Jaccard similarity of two word sets (0 when both are empty).
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f32 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f32 / union as f32
}

/// A deliberately small suffix stemmer (plural, past, gerund, adverb, a few derivations): it
/// only has to map a word and its inflections to the same key, not produce a real stem. Words
/// of four characters or fewer, and words that are not ASCII, are left alone.
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
    fn stopword_list_is_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn variants_share_a_stem() {
        assert_eq!(stem("refunds"), stem("refund"));
        assert_eq!(stem("refunded"), stem("refund"));
        assert_eq!(stem("refunding"), stem("refund"));
        assert_eq!(stem("shipping"), stem("ship"));
        assert_eq!(stem("shipped"), stem("shipping"));
        assert_eq!(stem("ships"), "ship");
        assert_eq!(stem("policies"), "policy");
        assert_eq!(stem("prices"), stem("price"));
        assert_eq!(stem("boxes"), "box");
        assert_eq!(stem("classes"), "class");
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("days"), "days", "short words are kept");
        assert_eq!(stem("cafés"), "cafés", "non-ASCII words are kept");
    }

    #[test]
    fn content_words_drop_stopwords_and_case_and_keep_order() {
        assert_eq!(
            content_words("The customers' refunds are processed within 30 days"),
            vec!["customer", "refund", "process", "within", "30", "days"]
        );
        assert_eq!(
            content_words("Please tell me: don't refunds REFUND?"),
            vec!["dont", "refund", "refund"]
        );
        let set = content_word_set("How many DAYS do customers have to request a refund?");
        let expected: BTreeSet<String> = ["days", "customer", "request", "refund"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(set, expected);
        assert!(content_words("What is it? Tell me, please.").is_empty());
    }

    #[test]
    fn jaccard_of_word_sets() {
        let a = content_word_set("refund window thirty days");
        let b = content_word_set("the refund window");
        assert!((jaccard(&a, &b) - 0.5).abs() < 1e-6);
        assert_eq!(jaccard(&BTreeSet::new(), &BTreeSet::new()), 0.0);
    }
}
