//! Stage 4 (rerank): the [`Reranker`] port, the no-op reranker and [`RerankerFactory`].
//!
//! The cascade narrows the fused candidates (candidate_k per retrieval text) to the final
//! top-n. Built-ins: `none` (alias `noop`: truncation in retrieval order), `llm` (alias
//! `listwise`: one listwise chat call, see [`listwise`]) and `onnx` (alias `cross-encoder`:
//! the local ms-marco cross-encoder, see [`cross_encoder`]). Names and aliases match
//! case-insensitively; hosts register their own; unknown names fail listing the known ones.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use orkeon_crews::ports::ChatModel;

use super::QueryError;
use super::options::RerankOptions;
use crate::settings::EmbeddingSettings;
use crate::types::ScoredChunk;

pub mod cross_encoder;
pub mod listwise;

pub use cross_encoder::OnnxReranker;
pub use listwise::LlmListwiseReranker;

/// What a reranker did, with what the trace should say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct RerankOutcome {
    /// At most `top_n` chunks, best first.
    pub chunks: Vec<ScoredChunk>,
    /// Model or component that scored them, if any.
    pub model: Option<String>,
    /// Anything the trace must carry (a fallback, a partial ranking).
    pub note: Option<String>,
}

/// Candidates → the best `top_n`, best first.
#[async_trait]
pub trait Reranker: Send + Sync {
    fn name(&self) -> &str;

    async fn rerank(
        &self,
        query: &str,
        candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<Vec<ScoredChunk>, QueryError>;

    /// [`Reranker::rerank`] plus the notes the pipeline traces. Rerankers that can fall back
    /// or know their model override it; the default adds nothing.
    async fn rerank_traced(
        &self,
        query: &str,
        candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<RerankOutcome, QueryError> {
        Ok(RerankOutcome {
            chunks: self.rerank(query, candidates, top_n).await?,
            model: None,
            note: None,
        })
    }
}

/// `none`: keeps the first `top_n` candidates in retrieval (fused) order.
pub struct NoopReranker;

#[async_trait]
impl Reranker for NoopReranker {
    fn name(&self) -> &str {
        "none"
    }

    async fn rerank(
        &self,
        _query: &str,
        mut candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<Vec<ScoredChunk>, QueryError> {
        candidates.truncate(top_n);
        Ok(candidates)
    }
}

/// What a reranker builder gets: the pipeline's chat model and the resolved rerank options.
pub struct RerankerContext<'a> {
    pub chat: Option<Arc<dyn ChatModel>>,
    pub options: &'a RerankOptions,
}

/// Builds a reranker.
pub type RerankerBuilder =
    Arc<dyn Fn(&RerankerContext<'_>) -> Result<Arc<dyn Reranker>, QueryError> + Send + Sync>;

struct RerankerEntry {
    name: String,
    aliases: Vec<String>,
    builder: RerankerBuilder,
}

/// Named rerankers (case-insensitive names and aliases; later registrations of a name replace
/// earlier ones, so a host can override a built-in).
pub struct RerankerFactory {
    entries: RwLock<Vec<RerankerEntry>>,
}

impl RerankerFactory {
    /// No reranker at all.
    pub fn empty() -> Self {
        Self {
            entries: RwLock::new(Vec::new()),
        }
    }

    /// Every built-in: `none`/`noop`, `llm`/`listwise` and `onnx`/`cross-encoder`. The
    /// cross-encoder named by `rag.rerank.model` is resolved with `embedding`'s model search
    /// (models_dir, `ORKEON_MODELS_DIR`, cache, verified download) when a pipeline first needs
    /// it, and loaded once per model folder.
    pub fn builtin(embedding: EmbeddingSettings) -> Self {
        let factory = Self::without_models();
        factory.register(
            "onnx",
            &["cross-encoder", "crossencoder"],
            cross_encoder::onnx_builder(embedding),
        );
        factory
    }

    /// `none`/`noop` and `llm`/`listwise` only (no model files needed).
    pub fn without_models() -> Self {
        let factory = Self::empty();
        factory.register("none", &["noop"], Arc::new(|_| Ok(Arc::new(NoopReranker))));
        factory.register(
            "llm",
            &["listwise"],
            Arc::new(|ctx| {
                let chat = ctx.chat.clone().ok_or_else(|| QueryError::NoChatModel {
                    stage: "rerank (llm)".into(),
                })?;
                Ok(Arc::new(LlmListwiseReranker::new(chat)))
            }),
        );
        factory
    }

    /// Registers (or replaces) a reranker under `name` and `aliases`.
    pub fn register(&self, name: &str, aliases: &[&str], builder: RerankerBuilder) {
        let name = name.trim().to_ascii_lowercase();
        let aliases: Vec<String> = aliases
            .iter()
            .map(|a| a.trim().to_ascii_lowercase())
            .collect();
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.name != name);
        for entry in entries.iter_mut() {
            entry.aliases.retain(|a| !aliases.contains(a) && *a != name);
        }
        entries.push(RerankerEntry {
            name,
            aliases,
            builder,
        });
    }

    /// Registered names (aliases excluded), sorted.
    pub fn known(&self) -> Vec<String> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
        names.sort();
        names
    }

    /// Whether `name` (or an alias) is registered.
    pub fn is_known(&self, name: &str) -> bool {
        let key = name.trim().to_ascii_lowercase();
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .any(|e| e.name == key || e.aliases.contains(&key))
    }

    /// Builds the reranker registered under `name` (or an alias).
    pub fn create(
        &self,
        name: &str,
        ctx: &RerankerContext<'_>,
    ) -> Result<Arc<dyn Reranker>, QueryError> {
        let key = name.trim().to_ascii_lowercase();
        let builder = {
            let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
            entries
                .iter()
                .find(|e| e.name == key || e.aliases.contains(&key))
                .map(|e| e.builder.clone())
        };
        match builder {
            Some(build) => build(ctx),
            None => Err(QueryError::UnknownReranker {
                name: name.to_string(),
                known: self.known(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::fuse::tests::chunk;
    use crate::query::options::resolve_options;
    use crate::settings::RagSettings;

    fn options() -> RerankOptions {
        resolve_options("fast", &RagSettings::default())
            .unwrap()
            .rerank
    }

    #[tokio::test]
    async fn noop_truncates_in_retrieval_order() {
        let factory = RerankerFactory::without_models();
        let opts = options();
        let ctx = RerankerContext {
            chat: None,
            options: &opts,
        };
        let r = factory.create("NoOp", &ctx).unwrap();
        let out = r
            .rerank(
                "q",
                vec![
                    chunk("a", 0.1, vec![]),
                    chunk("b", 0.9, vec![]),
                    chunk("c", 0.5, vec![]),
                ],
                2,
            )
            .await
            .unwrap();
        let ids: Vec<&str> = out.iter().map(|c| c.chunk.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b"]);
    }

    #[test]
    fn unknown_reranker_lists_the_known_ones_and_hosts_can_register() {
        let factory = RerankerFactory::without_models();
        let opts = options();
        let ctx = RerankerContext {
            chat: None,
            options: &opts,
        };
        let err = factory.create("colbert", &ctx).err().unwrap();
        let text = err.to_string();
        assert!(matches!(err, QueryError::UnknownReranker { .. }));
        assert!(
            text.contains("colbert") && text.contains("none") && text.contains("llm"),
            "{text}"
        );

        let err = factory.create("listwise", &ctx).err().unwrap();
        assert!(matches!(err, QueryError::NoChatModel { .. }), "{err}");

        struct Reverse;
        #[async_trait]
        impl Reranker for Reverse {
            fn name(&self) -> &str {
                "reverse"
            }
            async fn rerank(
                &self,
                _q: &str,
                mut c: Vec<ScoredChunk>,
                n: usize,
            ) -> Result<Vec<ScoredChunk>, QueryError> {
                c.reverse();
                c.truncate(n);
                Ok(c)
            }
        }
        factory.register(
            "reverse",
            &["backwards", "noop"],
            Arc::new(|_| Ok(Arc::new(Reverse))),
        );
        assert_eq!(factory.create("BACKWARDS", &ctx).unwrap().name(), "reverse");
        // The alias moved to the newer registration.
        assert_eq!(factory.create("noop", &ctx).unwrap().name(), "reverse");
        assert_eq!(factory.create("none", &ctx).unwrap().name(), "none");
        assert_eq!(factory.known(), vec!["llm", "none", "reverse"]);
    }
}
