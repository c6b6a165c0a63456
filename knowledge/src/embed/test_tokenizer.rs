//! Test support: a small BERT-style WordPiece tokenizer built in code (no `tokenizer.json` on
//! disk), so tests of token budgets, chunk sizes and model inputs run without model files.
//!
//! It is configured like bge-small-en-v1.5's (BERT normaliser: lowercase, accents stripped,
//! CJK characters split; BERT pre-tokeniser; WordPiece with `##` continuations; `[CLS] … [SEP]`
//! templates), and its vocabulary is a subset of bge-small's: every printable ASCII character
//! (word-initial and `##` continuation) plus the pieces bge-small cuts the unit tests' texts
//! into. Greedy longest-match over a subset that holds bge-small's pieces of a text finds those
//! same pieces, so the tests' texts count exactly as bge-small counts them; other words split
//! into more, smaller pieces, and a word with a character outside the vocabulary is one
//! `[UNK]` — the shapes a real subword tokenizer produces.

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};

use super::tokenizer::HfTokenCounter;

/// Special tokens and their ids.
pub const PAD: u32 = 0;
pub const UNK: u32 = 1;
pub const CLS: u32 = 2;
pub const SEP: u32 = 3;
const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Words and pieces beyond the single characters (all in bge-small-en-v1.5's vocabulary).
const VOCABULARY: &str = "\
00 01 03 141 17 202 256 30 42 520 82 89 aaa abc about accents accidental account activity \
add after again all also an and another answer any api are area around arrives art as \
assemble at aus available away back batteries be been before being berlin between bien big \
boil both bring builds business but by c2 ca can capital carry case cases charge cheap chose \
chunk chunks city clauses clean clock closed cloud code comment components con context cook \
costs could counts cover covering covers customer customers damage dashboard data date day \
days deep defects delivery derived details device devices did dim do document documents does \
don duration dusk each edges edit ee em email embedded empty en errors europe every ex \
example express fa fail famous few file files find first five flow follows for found four \
france free from full fuse fusion galaxy generate germany get give given go good got gr \
great guide had has hash have he heading hello help her here hi high his hour hours how html \
hybrid if ii in inc ind index ing inhabitants install into intro is it item its just kb keep \
keeps kept key kilometers know knowledge known knows ko large last light like line lines \
linux list live loaded log long longer low made make manager manual manufacturing many \
marche mark may md me meeting met method metropolitan might minutes money month months more \
most mr much museum must my naive name names need needs new next night no nobody non noodles \
noon not note number numbers of office ok old on once one only or order orders original \
other our out outside over package page pages paid paragraph paris part parts passages pasta \
payment people phone pieces placed plain plan planet planets plans policy population pot pre \
press price prices product products que query question rank rankings re rebuilt rec \
reciprocal records ref reference registered remote request requested result results \
retrieval retrieve return returns rocks rolling run runs safety said salt same sauce say sc \
search second section see semantic senator sentence sentences sep service session sessions \
set seven sh sharp she shell shipping short should si sign six sixty sky sl small smith so \
some source sources space spaghetti split square sr stage staged standard star stars starts \
step stick still stir store structural sub sun supplied support take takes team ten test \
text than that the their them then there these they thing things thirty this those three \
through tile time title to today together token top trace transform tres two uber un \
unchanged under unicode universe until up use used user users using va valid value values \
vector very vocabulary waited want warrant was washington water way ways we week weekdays \
weeks welcome well went were what when where which who whole whom why will window with \
within without word words work world would ya year years yes york you your zero zurich ε κ τ \
р т э — 。 て の 分 文 日 本 語 ﬁ ##00 ##25 ##59 ##al ##am ##arat ##ated ##bed ##ble ##codes ##ding \
##down ##ed ##ee ##ental ##ented ##er ##ers ##es ##est ##fi ##gur ##hre ##ibe ##in ##ing \
##ion ##ive ##ke ##kt ##ly ##ment ##ml ##nta ##oj ##on ##or ##pire ##ram ##rank ##rem ##ries \
##tag ##time ##tion ##und ##unds ##urs ##ße ##α ##ε ##η ##ι ##κ ##λ ##μ ##ν ##ος ##е ##ии \
##к ##о ##с ##т ##у ##す ##キ ##ス ##テ ##ト";

/// The vocabulary: specials first (ids 0–4), then characters, words and pieces.
fn vocabulary() -> Map<String, Value> {
    let mut vocab = Map::new();
    let mut add = |token: String| {
        let id = vocab.len();
        vocab.entry(token).or_insert_with(|| json!(id));
    };
    for special in SPECIALS {
        add(special.to_string());
    }
    for c in (b'!'..=b'~').map(char::from) {
        if !c.is_ascii_uppercase() {
            add(c.to_string());
            add(format!("##{c}"));
        }
    }
    for token in VOCABULARY.split_whitespace() {
        add(token.to_string());
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

    fn pieces(text: &str) -> Vec<String> {
        test_tokenizer()
            .tokenizer()
            .encode(text, false)
            .expect("encodes")
            .get_tokens()
            .to_vec()
    }

    #[test]
    fn known_pieces_are_bge_smalls_and_other_words_split_further() {
        // As bge-small cuts them.
        assert_eq!(pieces("Hello, world"), ["hello", ",", "world"]);
        assert_eq!(pieces("refunds"), ["ref", "##unds"]);
        assert_eq!(
            pieces("how many people live in berlin"),
            ["how", "many", "people", "live", "in", "berlin"]
        );
        // A word whose pieces are not in the vocabulary: characters, never [UNK]
        // (bge-small: x ##y ##zzy).
        assert_eq!(pieces("xyzzy"), ["x", "##y", "##z", "##z", "##y"]);
        // Accents are stripped, case is folded; CJK characters stand alone.
        assert_eq!(pieces("Café"), pieces("cafe"));
        assert_eq!(pieces("日本"), ["日", "本"]);
        // A character outside the vocabulary makes its word one [UNK].
        assert_eq!(pieces("Ωμέγα"), ["[UNK]"]);
        let counter = test_tokenizer();
        assert_eq!(
            crate::embed::TokenCounter::count_tokens(counter.as_ref(), ""),
            0
        );
        assert_eq!(token_id("[PAD]"), Some(PAD));
        assert_eq!(token_id("[UNK]"), Some(UNK));
    }
}
