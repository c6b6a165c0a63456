//! Query transformers (stage 1): a question → the texts the retrieve stage searches with, plus
//! the kind that tells the fuse stage how to combine their rankings.
//!
//! Built-ins: `none` (the question itself), `multi-query` (union of the question and LLM
//! paraphrases), `rag-fusion` (the same texts, fused by RRF) and `hyde` (LLM-written
//! hypothetical passages replace the question as probes; generation and citations still use the
//! question). LLM output is parsed tolerantly; an empty or unusable answer degrades to the
//! original question and the output says so. Names resolve through [`TransformerFactory`]
//! (case-insensitive, aliases, hosts can register their own; unknown names list the known).

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{ChatMessage, ChatModel, ChatRequest};
use serde::Serialize;

use super::QueryError;
use super::llm_output::{parse_passages, parse_variants};
use crate::registry::{Label, Registry};

/// How the retrieval texts of a transform combine at the fuse stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransformKind {
    /// One text, the question: no combination needed.
    None,
    /// Question + variants, merged by chunk id; the maximum store score wins.
    Union,
    /// Question + variants, fused by Reciprocal Rank Fusion.
    Fusion,
    /// Substitute probes instead of the question.
    Replacement,
}

impl TransformKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransformKind::None => "none",
            TransformKind::Union => "union",
            TransformKind::Fusion => "fusion",
            TransformKind::Replacement => "replacement",
        }
    }
}

/// What a transformer produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformOutput {
    /// The texts to retrieve with (never empty).
    pub texts: Vec<String>,
    /// How many of `texts` were generated (0 for `none` or after a degradation).
    pub generated: usize,
    /// Set when the transformer could not produce anything usable and fell back to the
    /// original question: why.
    pub degraded: Option<String>,
    /// The LLM that produced the variants, if one was called.
    pub model: Option<String>,
}

impl TransformOutput {
    /// Just the question.
    pub fn original(q: &str) -> Self {
        Self {
            texts: vec![q.to_string()],
            generated: 0,
            degraded: None,
            model: None,
        }
    }

    fn degraded(q: &str, reason: String, model: Option<String>) -> Self {
        Self {
            texts: vec![q.to_string()],
            generated: 0,
            degraded: Some(reason),
            model,
        }
    }
}

/// Question → retrieval texts.
#[async_trait]
pub trait QueryTransformer: Send + Sync {
    fn name(&self) -> &str;
    fn kind(&self) -> TransformKind;
    /// Produces retrieval texts for `q`, asking for `n` variants where that applies.
    async fn transform(&self, q: &str, n: usize) -> Result<TransformOutput, QueryError>;
}

/// `none`: the question is the only retrieval text.
pub struct NoTransform;

#[async_trait]
impl QueryTransformer for NoTransform {
    fn name(&self) -> &str {
        "none"
    }
    fn kind(&self) -> TransformKind {
        TransformKind::None
    }
    async fn transform(&self, q: &str, _n: usize) -> Result<TransformOutput, QueryError> {
        Ok(TransformOutput::original(q))
    }
}

/// Asks the model for `n` search-query paraphrases of the question.
fn variant_request(q: &str, n: usize) -> ChatRequest {
    let system = "You rewrite search questions. Produce alternative phrasings of the user's question that a search engine could use to find relevant passages: vary the vocabulary, expand abbreviations, name the underlying concept. Keep each under 25 words. Answer with a JSON array of strings only.";
    let user = format!("Write {n} alternative search queries for this question:\n{q}");
    let mut request = ChatRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)]);
    request.temperature = Some(0.0);
    request.json_mode = true;
    request
}

async fn ask(
    chat: &dyn ChatModel,
    transformer: &str,
    request: ChatRequest,
) -> Result<(String, String), QueryError> {
    let response = chat
        .chat(request)
        .await
        .map_err(|source| QueryError::Chat {
            stage: format!("transform ({transformer})"),
            source,
        })?;
    let model = if response.model.is_empty() {
        chat.name()
    } else {
        response.model
    };
    Ok((response.content, model))
}

/// LLM paraphrases of the question, retrieved alongside it. `kind` decides how they combine:
/// [`TransformKind::Union`] (`multi-query`) or [`TransformKind::Fusion`] (`rag-fusion`).
pub struct LlmVariantTransformer {
    name: String,
    kind: TransformKind,
    chat: Arc<dyn ChatModel>,
}

impl LlmVariantTransformer {
    pub fn multi_query(chat: Arc<dyn ChatModel>) -> Self {
        Self {
            name: "multi-query".into(),
            kind: TransformKind::Union,
            chat,
        }
    }

    pub fn rag_fusion(chat: Arc<dyn ChatModel>) -> Self {
        Self {
            name: "rag-fusion".into(),
            kind: TransformKind::Fusion,
            chat,
        }
    }
}

#[async_trait]
impl QueryTransformer for LlmVariantTransformer {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TransformKind {
        self.kind
    }
    async fn transform(&self, q: &str, n: usize) -> Result<TransformOutput, QueryError> {
        let (content, model) = ask(self.chat.as_ref(), &self.name, variant_request(q, n)).await?;
        let variants = parse_variants(&content, q, n);
        if variants.is_empty() {
            tracing::warn!(transformer = %self.name, answer = %excerpt(&content), "no usable query variant; retrieving with the original question");
            return Ok(TransformOutput::degraded(
                q,
                format!(
                    "the LLM's answer held no usable variant ({}); retrieved with the original question",
                    describe_answer(&content)
                ),
                Some(model),
            ));
        }
        let generated = variants.len();
        let mut texts = vec![q.to_string()];
        texts.extend(variants);
        Ok(TransformOutput {
            texts,
            generated,
            degraded: None,
            model: Some(model),
        })
    }
}

/// `hyde`: the LLM writes hypothetical passages answering the question; they are the probes.
pub struct HydeTransformer {
    chat: Arc<dyn ChatModel>,
}

impl HydeTransformer {
    pub fn new(chat: Arc<dyn ChatModel>) -> Self {
        Self { chat }
    }
}

#[async_trait]
impl QueryTransformer for HydeTransformer {
    fn name(&self) -> &str {
        "hyde"
    }
    fn kind(&self) -> TransformKind {
        TransformKind::Replacement
    }
    async fn transform(&self, q: &str, n: usize) -> Result<TransformOutput, QueryError> {
        let system = "You write short passages that could appear in a document answering a question. Write factual-sounding prose of 2 to 4 sentences, in the style of documentation; no preamble.";
        let user = if n <= 1 {
            format!("Write one passage answering:\n{q}")
        } else {
            format!(
                "Write {n} different passages answering the question below. Answer with a JSON array of {n} strings.\n{q}"
            )
        };
        let mut request =
            ChatRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)]);
        request.temperature = Some(0.0);
        let (content, model) = ask(self.chat.as_ref(), "hyde", request).await?;
        let passages = parse_passages(&content, n.max(1));
        if passages.is_empty() {
            tracing::warn!(
                transformer = "hyde",
                "empty hypothetical passage; retrieving with the original question"
            );
            return Ok(TransformOutput::degraded(
                q,
                format!(
                    "the LLM's answer held no usable passage ({}); retrieved with the original question",
                    describe_answer(&content)
                ),
                Some(model),
            ));
        }
        Ok(TransformOutput {
            generated: passages.len(),
            texts: passages,
            degraded: None,
            model: Some(model),
        })
    }
}

fn excerpt(text: &str) -> String {
    let t: String = text.chars().take(120).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}

fn describe_answer(content: &str) -> String {
    if content.trim().is_empty() {
        "empty answer".to_string()
    } else {
        format!("answer: {:?}", excerpt(content.trim()))
    }
}

/// Builds a transformer; receives the pipeline's chat model, if any.
pub type TransformerBuilder = Arc<
    dyn Fn(Option<Arc<dyn ChatModel>>) -> Result<Arc<dyn QueryTransformer>, QueryError>
        + Send
        + Sync,
>;

/// How an unknown transformer name is reported.
pub const TRANSFORMER_LABEL: Label = Label {
    kind: "query transformer",
    plural: "transformers",
    key: Some("rag.query_transform.mode"),
    advice: None,
};

/// Named query transformers: a [`Registry`] of builders (names and aliases matched
/// case-insensitively; hosts register their own, a later registration of a name replacing the
/// earlier one; unknown names fail listing the known ones).
pub type TransformerFactory = Registry<TransformerBuilder>;

fn needs_chat(
    name: &str,
    chat: Option<Arc<dyn ChatModel>>,
) -> Result<Arc<dyn ChatModel>, QueryError> {
    chat.ok_or_else(|| QueryError::NoChatModel {
        stage: format!("transform ({name})"),
    })
}

impl TransformerFactory {
    /// No transformer at all (hosts that want full control).
    pub fn empty() -> Self {
        Registry::new(&TRANSFORMER_LABEL)
    }

    /// `none`, `multi-query` (alias `multiquery`), `rag-fusion` (alias `ragfusion`, `fusion`)
    /// and `hyde`.
    pub fn builtin() -> Self {
        let factory = Self::empty();
        factory.register("none", &["noop"], Arc::new(|_| Ok(Arc::new(NoTransform))));
        factory.register(
            "multi-query",
            &["multiquery"],
            Arc::new(|chat| {
                Ok(Arc::new(LlmVariantTransformer::multi_query(needs_chat(
                    "multi-query",
                    chat,
                )?)))
            }),
        );
        factory.register(
            "rag-fusion",
            &["ragfusion", "fusion"],
            Arc::new(|chat| {
                Ok(Arc::new(LlmVariantTransformer::rag_fusion(needs_chat(
                    "rag-fusion",
                    chat,
                )?)))
            }),
        );
        factory.register(
            "hyde",
            &[],
            Arc::new(|chat| Ok(Arc::new(HydeTransformer::new(needs_chat("hyde", chat)?)))),
        );
        factory
    }

    /// Builds the transformer registered under `name` (or an alias).
    pub fn create(
        &self,
        name: &str,
        chat: Option<Arc<dyn ChatModel>>,
    ) -> Result<Arc<dyn QueryTransformer>, QueryError> {
        let build = self.get(name).map_err(QueryError::UnknownTransformer)?;
        build(chat)
    }
}

impl Default for TransformerFactory {
    fn default() -> Self {
        Self::builtin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_testkit::ScriptedChat;

    fn chat(replies: &[&str]) -> Option<Arc<dyn ChatModel>> {
        Some(ScriptedChat::new(replies) as Arc<dyn ChatModel>)
    }

    #[tokio::test]
    async fn multi_query_keeps_the_question_first_and_parses_variants() {
        let factory = TransformerFactory::builtin();
        let scripted = ScriptedChat::new(&["1. refund policy\n2. money back window"]);
        let t = factory
            .create("Multi-Query", Some(scripted.clone() as Arc<dyn ChatModel>))
            .unwrap();
        assert_eq!(t.kind(), TransformKind::Union);
        let out = t.transform("How do refunds work?", 3).await.unwrap();
        assert_eq!(
            out.texts,
            vec!["How do refunds work?", "refund policy", "money back window"]
        );
        assert_eq!(out.generated, 2);
        assert_eq!(out.degraded, None);
        assert_eq!(out.model.as_deref(), Some("scripted"));
        assert_eq!(scripted.calls(), 1);
        let request = scripted.requests.lock().unwrap()[0].clone();
        assert!(request.messages[1].content.contains("Write 3 alternative"));
    }

    #[tokio::test]
    async fn unusable_variants_degrade_to_the_question_and_say_so() {
        let factory = TransformerFactory::builtin();
        let t = factory
            .create("rag-fusion", chat(&["How do refunds work?\n\n"]))
            .unwrap();
        assert_eq!(t.kind(), TransformKind::Fusion);
        let out = t.transform("How do refunds work?", 3).await.unwrap();
        assert_eq!(out.texts, vec!["How do refunds work?"]);
        assert_eq!(out.generated, 0);
        assert!(out.degraded.unwrap().contains("original question"));
    }

    #[tokio::test]
    async fn hyde_replaces_the_question_with_a_passage() {
        let factory = TransformerFactory::builtin();
        let t = factory
            .create(
                "hyde",
                chat(&["Passage: Refunds are granted within 30 days of purchase."]),
            )
            .unwrap();
        assert_eq!(t.kind(), TransformKind::Replacement);
        let out = t
            .transform("How long do I have for a refund?", 1)
            .await
            .unwrap();
        assert_eq!(
            out.texts,
            vec!["Refunds are granted within 30 days of purchase."]
        );

        let empty = factory.create("hyde", chat(&[""])).unwrap();
        let out = empty.transform("q?", 1).await.unwrap();
        assert_eq!(out.texts, vec!["q?"]);
        assert!(out.degraded.unwrap().contains("empty answer"));
    }

    #[tokio::test]
    async fn unknown_transformer_lists_the_known_ones_and_llm_ones_need_a_model() {
        let factory = TransformerFactory::builtin();
        let err = factory.create("step-back", None).err().unwrap();
        let text = err.to_string();
        for name in ["none", "multi-query", "rag-fusion", "hyde"] {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("step-back"));
        let err = factory.create("hyde", None).err().unwrap();
        assert!(matches!(err, QueryError::NoChatModel { .. }), "{err}");
        let none = factory.create("NONE", None).unwrap();
        assert_eq!(none.transform("q", 3).await.unwrap().texts, vec!["q"]);
    }

    #[tokio::test]
    async fn hosts_register_their_own_transformers() {
        struct Uppercase;
        #[async_trait]
        impl QueryTransformer for Uppercase {
            fn name(&self) -> &str {
                "uppercase"
            }
            fn kind(&self) -> TransformKind {
                TransformKind::Replacement
            }
            async fn transform(&self, q: &str, _n: usize) -> Result<TransformOutput, QueryError> {
                Ok(TransformOutput {
                    texts: vec![q.to_uppercase()],
                    generated: 1,
                    degraded: None,
                    model: None,
                })
            }
        }
        let factory = TransformerFactory::builtin();
        factory.register(
            "uppercase",
            &["upper"],
            Arc::new(|_| Ok(Arc::new(Uppercase))),
        );
        let t = factory.create("UPPER", None).unwrap();
        assert_eq!(t.transform("abc", 1).await.unwrap().texts, vec!["ABC"]);
        assert!(factory.known().contains(&"uppercase".to_string()));
    }
}
