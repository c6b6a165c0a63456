//! Content words of a text: Unicode words, lowercased, English stopwords removed, with a light
//! suffix stemming so that "refunds" and "refund" meet. Shared by the stages that compare texts
//! lexically (the heuristic groundedness checker, MMR's lexical fallback) so that they agree on
//! what a word is.

use std::collections::BTreeSet;

use unicode_segmentation::UnicodeSegmentation;

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
    "may",
    "me",
    "might",
    "more",
    "most",
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
    "same",
    "shall",
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
];

fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Strips common English inflections (plural, -ing, -ed, possessive). Deliberately light: it
/// only has to map a word and its inflections to the same key, not produce a real stem.
pub fn stem(word: &str) -> String {
    let w = word.trim_end_matches("'s").trim_end_matches('\'');
    let n = w.chars().count();
    let strip = |suffix: &str, min_len: usize| -> Option<String> {
        if n >= min_len && w.ends_with(suffix) {
            Some(w[..w.len() - suffix.len()].to_string())
        } else {
            None
        }
    };
    if let Some(base) = strip("ies", 5) {
        return base + "y";
    }
    if let Some(base) = strip("ing", 6) {
        return base;
    }
    if let Some(base) = strip("ed", 5) {
        return base;
    }
    for suffix in ["sses", "shes", "ches", "xes"] {
        if let Some(base) = strip(suffix, suffix.len() + 2) {
            return base + &suffix[..suffix.len() - 2];
        }
    }
    if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && n >= 4 {
        return w[..w.len() - 1].to_string();
    }
    w.to_string()
}

/// The content words of `text`, in order (duplicates kept).
pub fn content_words(text: &str) -> Vec<String> {
    text.unicode_words()
        .map(|w| w.to_lowercase())
        .filter(|w| !is_stopword(w))
        .filter(|w| w.chars().count() >= 2 || w.chars().all(|c| c.is_ascii_digit()))
        .map(|w| stem(&w))
        .collect()
}

/// The set of content words of `text`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopword_list_is_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn inflections_meet_and_stopwords_go() {
        assert_eq!(
            content_words("The customers' refunds are processed within 30 days"),
            vec!["customer", "refund", "process", "within", "30", "day"]
        );
        assert_eq!(stem("policies"), "policy");
        assert_eq!(stem("boxes"), "box");
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("status"), "status");
        assert_eq!(stem("shipping"), "shipp");
        assert_eq!(stem("ships"), "ship");
    }

    #[test]
    fn jaccard_of_word_sets() {
        let a = content_word_set("refund window thirty days");
        let b = content_word_set("the refund window");
        assert!((jaccard(&a, &b) - 0.5).abs() < 1e-6);
        assert_eq!(jaccard(&BTreeSet::new(), &BTreeSet::new()), 0.0);
    }
}
