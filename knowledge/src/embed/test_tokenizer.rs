//! Test support: a small BERT-style WordPiece tokenizer built in code (no `tokenizer.json` on
//! disk), so tests of token budgets, chunk sizes and model inputs run without model files.
//!
//! It is configured like bge-small-en-v1.5's (BERT normaliser: lowercase, accents stripped,
//! CJK characters split; BERT pre-tokeniser; WordPiece with `##` continuations; `[CLS] … [SEP]`
//! templates) over a vocabulary of a few hundred common English words, every printable ASCII
//! character (word-initial and `##` continuation) and a few suffixes: known words are one
//! token, other ASCII words split into pieces, words with characters outside the vocabulary
//! are one `[UNK]` — the shapes a real subword tokenizer produces.

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};

use super::tokenizer::HfTokenCounter;

/// Special tokens and their ids.
pub const PAD: u32 = 0;
pub const UNK: u32 = 1;
pub const CLS: u32 = 2;
pub const SEP: u32 = 3;
const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Whole-word entries of the vocabulary.
const WORDS: &[&str] = &[
    "the",
    "a",
    "an",
    "and",
    "or",
    "but",
    "of",
    "to",
    "in",
    "on",
    "at",
    "by",
    "for",
    "with",
    "from",
    "into",
    "about",
    "after",
    "before",
    "over",
    "under",
    "within",
    "without",
    "between",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "has",
    "have",
    "had",
    "do",
    "does",
    "did",
    "can",
    "could",
    "will",
    "would",
    "should",
    "may",
    "might",
    "must",
    "not",
    "no",
    "yes",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "there",
    "here",
    "what",
    "which",
    "who",
    "whom",
    "how",
    "when",
    "where",
    "why",
    "i",
    "you",
    "he",
    "she",
    "we",
    "they",
    "me",
    "my",
    "your",
    "our",
    "their",
    "them",
    "his",
    "her",
    "all",
    "any",
    "each",
    "every",
    "some",
    "many",
    "much",
    "more",
    "most",
    "few",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "ten",
    "first",
    "second",
    "next",
    "last",
    "new",
    "old",
    "long",
    "short",
    "free",
    "full",
    "same",
    "other",
    "only",
    "also",
    "just",
    "then",
    "than",
    "so",
    "if",
    "as",
    "up",
    "out",
    "again",
    "once",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "hour",
    "hours",
    "time",
    "date",
    "today",
    "customer",
    "customers",
    "order",
    "orders",
    "refund",
    "refunds",
    "return",
    "returns",
    "request",
    "requested",
    "delivery",
    "shipping",
    "express",
    "standard",
    "europe",
    "business",
    "payment",
    "method",
    "original",
    "paid",
    "back",
    "money",
    "warranty",
    "cover",
    "covers",
    "covering",
    "damage",
    "accidental",
    "water",
    "device",
    "devices",
    "defects",
    "support",
    "email",
    "phone",
    "weekdays",
    "available",
    "clock",
    "around",
    "city",
    "people",
    "live",
    "population",
    "capital",
    "museum",
    "art",
    "famous",
    "berlin",
    "paris",
    "york",
    "france",
    "germany",
    "policy",
    "details",
    "window",
    "thirty",
    "sixty",
    "word",
    "words",
    "text",
    "chunk",
    "chunks",
    "token",
    "tokens",
    "store",
    "knowledge",
    "retrieval",
    "embedding",
    "document",
    "documents",
    "sentence",
    "sentences",
    "paragraph",
    "section",
    "title",
    "heading",
    "list",
    "item",
    "code",
    "data",
    "file",
    "files",
    "page",
    "pages",
    "question",
    "answer",
    "context",
    "source",
    "sources",
    "query",
    "search",
    "result",
    "results",
    "session",
    "sessions",
    "expire",
    "activity",
    "login",
    "sign",
    "dashboard",
    "plan",
    "plans",
    "cloud",
    "team",
    "work",
    "remote",
    "office",
    "product",
    "products",
    "price",
    "prices",
    "service",
    "user",
    "users",
    "account",
    "help",
    "hello",
    "world",
    "hi",
    "yes",
    "ok",
    "pasta",
    "water",
    "salt",
    "boil",
    "sauce",
    "cook",
    "minutes",
    "star",
    "stars",
    "sun",
    "light",
    "galaxy",
    "universe",
    "night",
    "sky",
    "planet",
    "planets",
    "space",
    "top",
    "sub",
    "note",
    "see",
    "use",
    "used",
    "using",
    "make",
    "made",
    "get",
    "got",
    "take",
    "run",
    "runs",
    "set",
    "keep",
    "kept",
    "need",
    "needs",
    "want",
    "find",
    "found",
    "give",
    "given",
    "know",
    "known",
    "say",
    "said",
    "like",
    "well",
    "very",
    "good",
    "great",
    "small",
    "large",
    "big",
    "high",
    "low",
    "part",
    "parts",
    "case",
    "cases",
    "way",
    "ways",
    "thing",
    "things",
    "number",
    "numbers",
    "name",
    "names",
    "value",
    "values",
    "example",
    "line",
    "lines",
];

/// Continuation pieces beyond the single characters.
const SUFFIXES: &[&str] = &[
    "##s", "##es", "##ed", "##ing", "##ly", "##er", "##ers", "##est", "##tion", "##ment", "##al",
];

/// The vocabulary: specials first (ids 0–4), then words, characters and pieces.
fn vocabulary() -> Map<String, Value> {
    let mut vocab = Map::new();
    let mut add = |token: String| {
        let id = vocab.len();
        vocab.entry(token).or_insert_with(|| json!(id));
    };
    for special in SPECIALS {
        add(special.to_string());
    }
    for word in WORDS {
        add(word.to_string());
    }
    for c in (b'!'..=b'~').map(char::from) {
        if !c.is_ascii_uppercase() {
            add(c.to_string());
            add(format!("##{c}"));
        }
    }
    for suffix in SUFFIXES {
        add(suffix.to_string());
    }
    vocab
}

/// The `tokenizer.json` of the test tokenizer.
fn tokenizer_json() -> Value {
    let added: Vec<Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(id, content)| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            })
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {
            "type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
            "strip_accents": null, "lowercase": true
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", SEP], "cls": ["[CLS]", CLS]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {
            "type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocabulary()
        }
    })
}

/// The test tokenizer (built once per process).
pub fn test_tokenizer() -> Arc<HfTokenCounter> {
    static COUNTER: OnceLock<Arc<HfTokenCounter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            let json = tokenizer_json().to_string();
            let tokenizer: tokenizers::Tokenizer = json
                .parse()
                .unwrap_or_else(|e| panic!("the in-code test tokenizer is invalid: {e}"));
            Arc::new(
                HfTokenCounter::from_tokenizer(tokenizer)
                    .unwrap_or_else(|e| panic!("the in-code test tokenizer is invalid: {e}")),
            )
        })
        .clone()
}

/// The id of a vocabulary entry (tests compare encodings with it).
pub fn token_id(token: &str) -> Option<u32> {
    test_tokenizer().tokenizer().token_to_id(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::TokenCounter;

    #[test]
    fn known_words_are_one_token_and_others_split_into_pieces() {
        let counter = test_tokenizer();
        assert_eq!(counter.count_tokens(""), 0);
        assert_eq!(counter.count_tokens("Hello, world"), 3);
        assert_eq!(counter.count_tokens("refunds"), 1);
        // An unknown ASCII word: a known prefix then pieces, never [UNK].
        let pieces = counter
            .tokenizer()
            .encode("xyzzy", false)
            .expect("encodes")
            .get_ids()
            .to_vec();
        assert_eq!(pieces.len(), 5);
        assert!(!pieces.contains(&UNK));
        // Characters outside the vocabulary: one [UNK] per word, one token per CJK character.
        let unknown = counter
            .tokenizer()
            .encode("Ελληνικά 日本", false)
            .expect("encodes");
        assert_eq!(unknown.get_ids(), [UNK, UNK, UNK]);
        // Accents are stripped, case is folded.
        assert_eq!(counter.count_tokens("Café"), counter.count_tokens("cafe"));
        assert_eq!(token_id("[PAD]"), Some(PAD));
    }
}
