//! Token counting and model input encoding with a Hugging Face `tokenizer.json` (the model's
//! own tokenizer): single texts and query/passage pairs, truncated to the model's maximum with
//! the special tokens kept.

use std::path::Path;

use tokenizers::TruncationDirection;

use super::{EmbedError, TokenCounter};

/// One model input: token ids with special tokens, and their token type ids (both unpadded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSequence {
    pub ids: Vec<i64>,
    pub type_ids: Vec<i64>,
}

impl TokenSequence {
    /// Number of tokens (special tokens included).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the sequence holds no token at all.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// A [`TokenCounter`] over a `tokenizers::Tokenizer`. Padding and truncation configured in the
/// file are switched off: counts are of the whole text.
pub struct HfTokenCounter {
    tokenizer: tokenizers::Tokenizer,
}

impl HfTokenCounter {
    /// Loads `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, EmbedError> {
        let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            EmbedError::Setup(format!("cannot read tokenizer {}: {e}", path.display()))
        })?;
        Self::from_tokenizer(tokenizer)
            .map_err(|e| EmbedError::Setup(format!("tokenizer {}: {e}", path.display())))
    }

    /// Wraps a tokenizer built in memory (padding and truncation switched off).
    pub fn from_tokenizer(mut tokenizer: tokenizers::Tokenizer) -> Result<Self, EmbedError> {
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Setup(e.to_string()))?;
        Ok(Self { tokenizer })
    }

    /// The underlying tokenizer (padding and truncation off).
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    /// Special tokens the post-processor adds around one text (`is_pair = false`) or a pair.
    fn added_tokens(&self, is_pair: bool) -> usize {
        use tokenizers::PostProcessor;
        self.tokenizer
            .get_post_processor()
            .map_or(0, |processor| processor.added_tokens(is_pair))
    }

    /// Encodes one text as `[CLS] text [SEP]` (whatever the tokenizer's template says), cut to at
    /// most `max_tokens` tokens in total: the text is shortened, the special tokens are kept.
    pub fn encode_single(
        &self,
        text: &str,
        max_tokens: usize,
    ) -> Result<TokenSequence, EmbedError> {
        let mut encoding = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| EmbedError::Inference(format!("tokenizing failed: {e}")))?;
        let budget = max_tokens.saturating_sub(self.added_tokens(false));
        if encoding.len() > budget {
            encoding.truncate(budget, 0, TruncationDirection::Right);
            encoding.take_overflowing();
        }
        let encoding = self
            .tokenizer
            .post_process(encoding, None, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer post-processing failed: {e}")))?;
        Ok(to_sequence(&encoding))
    }

    /// Encodes a pair as `[CLS] first [SEP] second [SEP]` with token types 0 then 1, cut to at
    /// most `max_tokens`: the second text (the passage) is shortened first, the first text (the
    /// query) only when it alone exceeds the budget.
    pub fn encode_pair(
        &self,
        first: &str,
        second: &str,
        max_tokens: usize,
    ) -> Result<TokenSequence, EmbedError> {
        let encode = |text: &str| {
            self.tokenizer
                .encode_fast(text, false)
                .map_err(|e| EmbedError::Inference(format!("tokenizing failed: {e}")))
        };
        let mut first_encoding = encode(first)?;
        let mut second_encoding = encode(second)?;
        let budget = max_tokens.saturating_sub(self.added_tokens(true));
        if first_encoding.len() + second_encoding.len() > budget {
            let second_keep = budget.saturating_sub(first_encoding.len());
            second_encoding.truncate(second_keep, 0, TruncationDirection::Right);
            second_encoding.take_overflowing();
            if first_encoding.len() + second_encoding.len() > budget {
                first_encoding.truncate(budget, 0, TruncationDirection::Right);
                first_encoding.take_overflowing();
            }
        }
        let encoding = self
            .tokenizer
            .post_process(first_encoding, Some(second_encoding), true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer post-processing failed: {e}")))?;
        Ok(to_sequence(&encoding))
    }
}

fn to_sequence(encoding: &tokenizers::Encoding) -> TokenSequence {
    TokenSequence {
        ids: encoding.get_ids().iter().map(|&id| i64::from(id)).collect(),
        type_ids: encoding
            .get_type_ids()
            .iter()
            .map(|&t| i64::from(t))
            .collect(),
    }
}

impl TokenCounter for HfTokenCounter {
    fn count_tokens(&self, text: &str) -> usize {
        // `encode_fast`: the same tokens without computing character offsets.
        match self.tokenizer.encode_fast(text, false) {
            Ok(encoding) => encoding.len(),
            // A tokenizer failure on arbitrary text is not expected; fall back to the
            // conventional estimate rather than failing a size computation.
            Err(_) => text.len().div_ceil(4),
        }
    }

    fn splits_at_whitespace_and_punctuation(&self) -> bool {
        // BertPreTokenizer splits at whitespace and isolates every punctuation character, and
        // the BERT normaliser works character by character: no token spans such a boundary.
        matches!(
            self.tokenizer.get_pre_tokenizer(),
            Some(tokenizers::PreTokenizerWrapper::BertPreTokenizer(_))
        ) && matches!(
            self.tokenizer.get_normalizer(),
            None | Some(tokenizers::NormalizerWrapper::BertNormalizer(_))
        )
    }
}

#[cfg(test)]
mod tests {
    //! The mechanism with the in-code WordPiece test tokenizer; the real models' tokenizers
    //! (bge-small's ids, the reranker's shipped padding) are tested in
    //! `tests/models_embedding.rs`.

    use super::*;
    use crate::embed::test_tokenizer::{CLS, SEP, test_tokenizer, token_id};

    #[test]
    fn counts_tokens_without_special_tokens() {
        let counter = test_tokenizer();
        assert_eq!(counter.count_tokens("hello world"), 2);
        assert_eq!(counter.count_tokens(""), 0);
    }

    #[test]
    fn single_encoding_keeps_cls_and_sep_when_truncated() {
        let counter = test_tokenizer();
        let short = counter.encode_single("hello world", 512).expect("encodes");
        let hello = i64::from(token_id("hello").expect("in the vocabulary"));
        let world = i64::from(token_id("world").expect("in the vocabulary"));
        let (cls, sep) = (i64::from(CLS), i64::from(SEP));
        assert_eq!(short.ids, vec![cls, hello, world, sep]);
        assert_eq!(short.type_ids, vec![0, 0, 0, 0]);
        let long_text = "word ".repeat(600);
        let long = counter.encode_single(&long_text, 16).expect("encodes");
        assert_eq!(long.len(), 16);
        assert_eq!(long.ids[0], cls);
        assert_eq!(long.ids[15], sep);
    }

    #[test]
    fn pair_encoding_truncates_the_passage_and_marks_token_types() {
        let counter = test_tokenizer();
        let pair = counter
            .encode_pair("berlin", "a city", 512)
            .expect("encodes");
        // [CLS] berlin [SEP] a city [SEP]
        assert_eq!(pair.len(), 6);
        assert_eq!(pair.type_ids, vec![0, 0, 0, 1, 1, 1]);
        let query = "how many people live in berlin";
        let query_tokens = counter.count_tokens(query);
        let passage = "inhabitants ".repeat(1000);
        let cut = counter.encode_pair(query, &passage, 32).expect("encodes");
        assert_eq!(cut.len(), 32);
        let first_part = cut.type_ids.iter().filter(|&&t| t == 0).count();
        assert_eq!(first_part, query_tokens + 2, "the query is kept whole");
        assert_eq!(*cut.ids.last().expect("non-empty"), i64::from(SEP));
        // A query longer than the budget is cut too, its special tokens kept.
        let long_query = "berlin ".repeat(100);
        let both_cut = counter
            .encode_pair(&long_query, "a city", 16)
            .expect("encodes");
        assert_eq!(both_cut.len(), 16);
        assert_eq!(both_cut.ids[0], i64::from(CLS));
        assert_eq!(*both_cut.ids.last().expect("non-empty"), i64::from(SEP));
    }
}
