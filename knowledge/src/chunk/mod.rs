//! Chunkers: a document → byte-addressed chunks, sized in embedding-model tokens.
//!
//! Strategies behind [`build_chunker`]: `recursive`, `sentence`, `structural`, `semantic`.
//! Names (and a few aliases) match case-insensitively; unknown names fail listing the known ones.
//!
//! Every strategy keeps the same contract: a chunk's `text` is exactly
//! `&doc.text[start..end]` (whitespace is trimmed by moving offsets, never by editing text), a
//! chunk holds at most `max_tokens` tokens as counted by the embedding model's tokenizer, no
//! chunk is empty, and chunks come in document order.

use std::sync::Arc;

use async_trait::async_trait;

use crate::embed::{Embedder, TokenCounter};
use crate::settings::ChunkingSettings;
use crate::types::{Chunk, Document};

mod pack;
mod recursive;
mod semantic;
mod sentence;
mod span;
mod split;
mod structural;

#[cfg(any(test, feature = "testing"))]
pub mod contract;
#[cfg(test)]
mod invariants;

pub use semantic::{adjacent_similarities, percentile, semantic_breakpoints};

/// Canonical names of the chunking strategies.
pub const KNOWN_CHUNKERS: &[&str] = &["recursive", "sentence", "structural", "semantic"];

/// Smallest accepted `max_tokens`.
pub const MIN_MAX_TOKENS: usize = 8;

/// Metadata key of the structural chunker: `"Top > Sub > Subsub"`.
pub const HEADING_PATH_KEY: &str = "heading_path";

/// Splits one document into chunks.
#[async_trait]
pub trait Chunker: Send + Sync {
    /// Canonical strategy name (one of [`KNOWN_CHUNKERS`]).
    fn name(&self) -> &'static str;

    /// The document's chunks, in document order.
    async fn chunk(&self, doc: &Document) -> Result<Vec<Chunk>, ChunkError>;
}

/// Why a chunker could not be built or could not chunk.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    #[error(
        "unknown chunking strategy \"{name}\" (chunking.strategy); known strategies: {}",
        known.join(", ")
    )]
    UnknownStrategy {
        name: String,
        known: Vec<&'static str>,
    },
    #[error("invalid chunking settings: {0}")]
    InvalidSettings(String),
    /// A numeric setting out of its range; `key` is its name under `chunking`.
    #[error("invalid chunking settings: {message}")]
    OutOfRange { key: &'static str, message: String },
    #[error("semantic chunking failed: {0}")]
    Embedding(String),
}

/// Resolves a strategy name or alias (case-insensitive, surrounding whitespace ignored) to its
/// canonical name. Aliases: `recursive-character`/`recursive_character` → recursive,
/// `sentences` → sentence, `structure`/`markdown`/`headings`/`sections` → structural,
/// `embedding`/`embeddings` → semantic.
pub fn canonical_strategy(name: &str) -> Option<&'static str> {
    match name.trim().to_ascii_lowercase().as_str() {
        "recursive" | "recursive-character" | "recursive_character" => Some("recursive"),
        "sentence" | "sentences" => Some("sentence"),
        "structural" | "structure" | "markdown" | "headings" | "sections" => Some("structural"),
        "semantic" | "embedding" | "embeddings" => Some("semantic"),
        _ => None,
    }
}

/// Builds the chunker `settings.strategy` names, after validating the settings.
///
/// `tokens` must count tokens the way the embedding model will see them. `semantic` needs
/// `embedder` to compare sentences.
pub fn build_chunker(
    settings: &ChunkingSettings,
    tokens: Arc<dyn TokenCounter>,
    embedder: Option<Arc<dyn Embedder>>,
) -> Result<Arc<dyn Chunker>, ChunkError> {
    let strategy =
        canonical_strategy(&settings.strategy).ok_or_else(|| ChunkError::UnknownStrategy {
            name: settings.strategy.clone(),
            known: KNOWN_CHUNKERS.to_vec(),
        })?;
    let model_max = embedder
        .as_ref()
        .and_then(|e| model_max_tokens(&e.profile().model));
    let max_tokens = resolve_max_tokens(settings, model_max)?;
    validate_settings(&ChunkingSettings {
        max_tokens,
        max_tokens_percent: None,
        ..settings.clone()
    })?;
    let bounds = ChunkBounds {
        max_tokens,
        overlap: settings.overlap,
    };
    let chunker: Arc<dyn Chunker> = match strategy {
        "recursive" => Arc::new(recursive::RecursiveChunker::new(tokens, bounds)),
        "sentence" => Arc::new(sentence::SentenceChunker::new(tokens, bounds)),
        "structural" => Arc::new(structural::StructuralChunker::new(tokens, bounds)),
        _ => {
            let embedder = embedder.ok_or_else(|| {
                ChunkError::InvalidSettings(
                    "chunking.strategy \"semantic\" compares sentence embeddings, but no \
                     embedder was given; configure `embeddings:` for this collection or choose \
                     another chunking.strategy (recursive, sentence, structural)"
                        .to_string(),
                )
            })?;
            Arc::new(semantic::SemanticChunker::new(
                tokens,
                embedder,
                bounds,
                settings.breakpoint_percentile,
            ))
        }
    };
    Ok(chunker)
}

/// The catalogue's maximum sequence length of the embedding model `model`, special tokens
/// excluded (`None` for a model outside the catalogue or not an embedding model).
pub fn model_max_tokens(model: &str) -> Option<usize> {
    match crate::embed::models::find_spec(model)?.kind {
        crate::embed::models::ModelKind::Embedding { max_tokens, .. } => {
            // [CLS] and [SEP] (or their equivalents) take two positions.
            Some(max_tokens.saturating_sub(2))
        }
        crate::embed::models::ModelKind::CrossEncoder { .. } => None,
    }
}

/// The chunk size `settings` ask for: `max_tokens`, or `max_tokens_percent` of `model_max`
/// (the embedding model's maximum sequence length without special tokens, rounded down).
pub fn resolve_max_tokens(
    settings: &ChunkingSettings,
    model_max: Option<usize>,
) -> Result<usize, ChunkError> {
    let Some(percent) = settings.max_tokens_percent else {
        return Ok(settings.max_tokens);
    };
    if !(1..=100).contains(&percent) {
        return Err(ChunkError::OutOfRange {
            key: "max_tokens_percent",
            message: format!(
                "chunking.max_tokens_percent is {percent}, but it is a share of the embedding \
                 model's maximum sequence length: use 1 to 100"
            ),
        });
    }
    let model_max = model_max.ok_or_else(|| {
        ChunkError::InvalidSettings(
            "chunking.max_tokens_percent needs the embedding model's maximum sequence length, \
             but the collection's embedding model is not in the model catalogue; set \
             chunking.max_tokens instead"
                .to_string(),
        )
    })?;
    Ok(model_max * percent as usize / 100)
}

/// Checks the numeric settings; each message names the offending key and the accepted range.
/// A `max_tokens_percent` is checked for its range here and resolved by [`build_chunker`].
pub fn validate_settings(settings: &ChunkingSettings) -> Result<(), ChunkError> {
    if let Some(percent) = settings.max_tokens_percent {
        if !(1..=100).contains(&percent) {
            return resolve_max_tokens(settings, None).map(|_| ());
        }
        // The overlap is checked against the resolved size when the chunker is built.
        return validate_settings(&ChunkingSettings {
            max_tokens: usize::MAX,
            max_tokens_percent: None,
            ..settings.clone()
        });
    }
    if settings.max_tokens < MIN_MAX_TOKENS {
        return Err(ChunkError::OutOfRange {
            key: "max_tokens",
            message: format!(
                "chunking.max_tokens is {}, but it must be at least {MIN_MAX_TOKENS}; raise \
                 chunking.max_tokens (typical: 128–512)",
                settings.max_tokens
            ),
        });
    }
    if settings.overlap >= settings.max_tokens / 2 {
        return Err(ChunkError::OutOfRange {
            key: "overlap",
            message: format!(
                "chunking.overlap is {}, but it must be smaller than half of chunking.max_tokens \
             ({} / 2 = {}); lower chunking.overlap or raise chunking.max_tokens",
                settings.overlap,
                settings.max_tokens,
                settings.max_tokens / 2
            ),
        });
    }
    if settings.breakpoint_percentile > 100 {
        return Err(ChunkError::OutOfRange {
            key: "breakpoint_percentile",
            message: format!(
                "chunking.breakpoint_percentile is {}, but it is a percentile: use a value from \
                 0 to 100",
                settings.breakpoint_percentile
            ),
        });
    }
    Ok(())
}

/// Validated size limits shared by the strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkBounds {
    pub max_tokens: usize,
    pub overlap: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::invariants::test_counter;

    fn settings(strategy: &str, max_tokens: usize, overlap: usize) -> ChunkingSettings {
        ChunkingSettings {
            strategy: strategy.to_string(),
            max_tokens,
            overlap,
            breakpoint_percentile: 10,
            ..ChunkingSettings::default()
        }
    }

    fn build_error(settings: &ChunkingSettings) -> ChunkError {
        match build_chunker(settings, test_counter(), None) {
            Ok(chunker) => panic!("expected an error, built {}", chunker.name()),
            Err(e) => e,
        }
    }

    #[test]
    fn names_and_aliases_resolve_case_insensitively() {
        let cases = [
            ("recursive", "recursive"),
            ("Recursive", "recursive"),
            ("SENTENCE", "sentence"),
            ("structural", "structural"),
            ("Markdown", "structural"),
            ("headings", "structural"),
            (" sentences ", "sentence"),
        ];
        for (name, canonical) in cases {
            let chunker = build_chunker(&settings(name, 64, 8), test_counter(), None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(chunker.name(), canonical, "{name}");
        }
        for known in KNOWN_CHUNKERS {
            assert_eq!(canonical_strategy(known), Some(*known));
        }
    }

    #[test]
    fn unknown_name_lists_the_known_strategies() {
        let err = build_error(&settings("paragraphs", 64, 8));
        assert!(
            matches!(err, ChunkError::UnknownStrategy { ref name, .. } if name == "paragraphs")
        );
        assert_eq!(
            err.to_string(),
            "unknown chunking strategy \"paragraphs\" (chunking.strategy); known strategies: \
             recursive, sentence, structural, semantic"
        );
    }

    #[test]
    fn invalid_settings_name_the_key() {
        let err = build_error(&settings("recursive", 4, 0));
        assert!(matches!(
            err,
            ChunkError::OutOfRange {
                key: "max_tokens",
                ..
            }
        ));
        assert!(
            err.to_string().contains("chunking.max_tokens is 4"),
            "{err}"
        );

        let err = build_error(&settings("recursive", 64, 32));
        assert!(matches!(err, ChunkError::OutOfRange { key: "overlap", .. }));
        assert!(err.to_string().contains("chunking.overlap is 32"), "{err}");
        assert!(err.to_string().contains("64 / 2 = 32"), "{err}");

        let mut bad_percentile = settings("sentence", 64, 8);
        bad_percentile.breakpoint_percentile = 101;
        let err = build_error(&bad_percentile);
        assert!(
            err.to_string()
                .contains("chunking.breakpoint_percentile is 101"),
            "{err}"
        );

        // The smallest valid configuration builds.
        assert!(build_chunker(&settings("recursive", 8, 3), test_counter(), None).is_ok());
        assert!(build_chunker(&settings("recursive", 8, 0), test_counter(), None).is_ok());
    }

    #[test]
    fn a_size_relative_to_the_model_resolves_from_the_catalogue() {
        // bge-small-en-v1.5 reads 512 positions, two of them special tokens.
        assert_eq!(model_max_tokens("bge-small-en-v1.5"), Some(510));
        assert_eq!(model_max_tokens("ms-marco-MiniLM-L-12-v2"), None);
        assert_eq!(model_max_tokens("no-such-model"), None);
        let mut relative = settings("recursive", 256, 32);
        relative.max_tokens_percent = Some(94);
        assert_eq!(resolve_max_tokens(&relative, Some(510)).unwrap(), 479);
        relative.max_tokens_percent = Some(100);
        assert_eq!(resolve_max_tokens(&relative, Some(510)).unwrap(), 510);
        // Without it, max_tokens as written.
        assert_eq!(
            resolve_max_tokens(&settings("recursive", 256, 32), None).unwrap(),
            256
        );
        assert_ne!(
            relative.fingerprint(),
            settings("recursive", 256, 32).fingerprint()
        );

        // A model outside the catalogue (the hash embedder) cannot resolve a share.
        let hash: Arc<dyn Embedder> = Arc::new(crate::embed::HashEmbedder::new(16));
        let err = match build_chunker(&relative, test_counter(), Some(hash)) {
            Ok(_) => panic!("a share of an unknown model's length built"),
            Err(e) => e,
        };
        assert!(
            err.to_string().contains("chunking.max_tokens_percent"),
            "{err}"
        );
        for bad in [0u8, 101] {
            relative.max_tokens_percent = Some(bad);
            let err = validate_settings(&relative).unwrap_err();
            assert!(matches!(
                err,
                ChunkError::OutOfRange {
                    key: "max_tokens_percent",
                    ..
                }
            ));
        }
        // A share too small for the overlap fails at build time, naming overlap.
        relative.max_tokens_percent = Some(10);
        assert!(validate_settings(&relative).is_ok());
        let err = resolve_max_tokens(&relative, Some(510))
            .and_then(|max| {
                validate_settings(&ChunkingSettings {
                    max_tokens: max,
                    max_tokens_percent: None,
                    ..relative.clone()
                })
            })
            .unwrap_err();
        assert!(matches!(err, ChunkError::OutOfRange { key: "overlap", .. }));
    }

    #[test]
    fn semantic_without_embedder_says_so() {
        let err = build_error(&settings("semantic", 64, 8));
        assert!(matches!(err, ChunkError::InvalidSettings(_)));
        assert!(err.to_string().contains("no embedder was given"), "{err}");
    }
}
