//! Stage 4 (rerank): the [`Reranker`] port, the no-op reranker and [`RerankerFactory`].
//!
//! The cascade narrows the fused candidates (candidate_k per retrieval text) to the final
//! top-n. Built-ins: `none` (alias `noop`: truncation in retrieval order), `llm` (alias
//! `listwise`: one listwise chat call, see [`listwise`]) and `onnx` (alias `cross-encoder`:
//! the local ms-marco cross-encoder, see [`cross_encoder`]). Names and aliases match
//! case-insensitively; hosts register their own; unknown names fail listing the known ones.

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::ChatModel;

use super::QueryError;
use super::options::RerankOptions;
use crate::registry::{Label, Registry};
use crate::settings::EmbeddingSettings;
use crate::types::ScoredChunk;

pub mod blend;
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

/// How an unknown reranker name is reported.
pub const RERANKER_LABEL: Label = Label {
    kind: "reranker",
    plural: "rerankers",
    key: Some("rag.rerank.kind"),
    advice: None,
};

/// Named rerankers: a [`Registry`] of builders (case-insensitive names and aliases; later
/// registrations of a name replace earlier ones, so a host can override a built-in).
pub type RerankerFactory = Registry<RerankerBuilder>;

impl RerankerFactory {
    /// No reranker at all.
    pub fn empty() -> Self {
        Registry::new(&RERANKER_LABEL)
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

    /// Fails, listing the known names, unless `name` (or an alias) is registered.
    pub fn check(&self, name: &str) -> Result<(), QueryError> {
        self.get(name)
            .map(|_| ())
            .map_err(QueryError::UnknownReranker)
    }

    /// Builds the reranker registered under `name` (or an alias).
    pub fn create(
        &self,
        name: &str,
        ctx: &RerankerContext<'_>,
    ) -> Result<Arc<dyn Reranker>, QueryError> {
        let build = self.get(name).map_err(QueryError::UnknownReranker)?;
        build(ctx)
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
