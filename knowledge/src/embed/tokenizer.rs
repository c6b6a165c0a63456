//! Token counting with a Hugging Face `tokenizer.json` (the embedding model's own tokenizer).

use std::path::Path;

use super::{EmbedError, TokenCounter};

/// A [`TokenCounter`] over a `tokenizers::Tokenizer`. Padding and truncation configured in the
/// file are switched off: counts are of the whole text.
pub struct HfTokenCounter {
    tokenizer: tokenizers::Tokenizer,
}

impl HfTokenCounter {
    /// Loads `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, EmbedError> {
        let mut tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            EmbedError::Setup(format!("cannot read tokenizer {}: {e}", path.display()))
        })?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Setup(format!("tokenizer {}: {e}", path.display())))?;
        Ok(Self { tokenizer })
    }

    /// The underlying tokenizer (padding and truncation off).
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }
}

impl TokenCounter for HfTokenCounter {
    fn count_tokens(&self, text: &str) -> usize {
        match self.tokenizer.encode(text, false) {
            Ok(encoding) => encoding.len(),
            // A tokenizer failure on arbitrary text is not expected; fall back to the
            // conventional estimate rather than failing a size computation.
            Err(_) => text.len().div_ceil(4),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bge_tokens_without_special_tokens() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/models/bge-small-en-v1.5/tokenizer.json");
        let counter = HfTokenCounter::from_file(&path).expect("tokenizer loads");
        assert_eq!(counter.count_tokens("hello world"), 2);
        assert_eq!(counter.count_tokens(""), 0);
    }
}
