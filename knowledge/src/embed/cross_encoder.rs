//! The cross-encoder reranker: scores (query, passage) pairs with one raw relevance logit each,
//! through ONNX Runtime. Pairs are encoded `[CLS] query [SEP] passage [SEP]` (token types 0
//! then 1) and cut to the model's maximum by shortening the passage first; they run in
//! length-sorted batches of `embeddings.batch_size`, each padded to its longest pair.

use std::path::Path;
use std::sync::Arc;

use super::models::{self, ModelKind};
use super::session_pool::{ModelGraph, PaddedBatch, SessionPool, length_sorted_batches};
use super::tokenizer::{HfTokenCounter, TokenSequence};
use super::{EmbedError, EmbedStats};
use crate::settings::EmbeddingSettings;

/// Longest pair when the folder is not in the catalogue.
const DEFAULT_MAX_TOKENS: usize = 512;

/// A loaded cross-encoder.
pub struct CrossEncoder {
    pool: SessionPool,
    tokenizer: Arc<HfTokenCounter>,
    max_tokens: usize,
    batch_size: usize,
    name: String,
}

impl CrossEncoder {
    /// Loads `model.onnx` and `tokenizer.json` from `dir`. The maximum pair length comes from
    /// the catalogue when the folder name is a catalogue entry, else 512.
    pub fn load(dir: &Path, settings: &EmbeddingSettings) -> Result<Self, EmbedError> {
        let (model, tokenizer_path) = super::onnx::model_files(dir, "reranker")?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        let max_tokens = match models::find_spec(&name).map(|s| s.kind) {
            Some(ModelKind::CrossEncoder { max_tokens }) => max_tokens,
            Some(ModelKind::Embedding { .. }) => {
                return Err(EmbedError::Setup(format!(
                    "{name} is an embedding model, not a cross-encoder; use \
                     ms-marco-MiniLM-L-12-v2 as the reranker model"
                )));
            }
            None => DEFAULT_MAX_TOKENS,
        };
        let tokenizer = Arc::new(HfTokenCounter::from_file(&tokenizer_path)?);
        let pool = SessionPool::load(
            &ModelGraph::File(model),
            settings,
            settings.threads,
            &["logits"],
            // ONNX Runtime's defaults. Without `SkipLayerNormFusion` (see `onnx::
            // EMBEDDER_DISABLED_OPTIMIZERS`) this graph ran 4 % faster in `balanced` on the
            // golden set, but its int8 scores moved and nDCG@10 went 0.857 → 0.853: not adopted.
            "",
        )?;
        tracing::info!(model = %name, max_tokens, "cross-encoder loaded");
        Ok(Self {
            pool,
            tokenizer,
            max_tokens,
            batch_size: settings.batch_size.max(1),
            name,
        })
    }

    /// Raw relevance logits, one per passage, in input order.
    pub async fn score(&self, query: &str, passages: Vec<String>) -> Result<Vec<f32>, EmbedError> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let tokenizer = Arc::clone(&self.tokenizer);
        let query = query.to_string();
        let max_tokens = self.max_tokens;
        let pairs: Vec<TokenSequence> = tokio::task::spawn_blocking(move || {
            passages
                .iter()
                .map(|p| tokenizer.encode_pair(&query, p, max_tokens))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| EmbedError::Inference(format!("tokenizing task failed: {e}")))??;
        let lengths: Vec<usize> = pairs.iter().map(TokenSequence::len).collect();
        let plan = length_sorted_batches(&lengths, self.batch_size);
        let mut pending = Vec::with_capacity(plan.len());
        for indices in &plan {
            let members: Vec<&TokenSequence> = indices.iter().map(|&i| &pairs[i]).collect();
            pending.push(self.pool.submit(PaddedBatch::pad(&members))?);
        }
        let mut scores = vec![f32::NAN; pairs.len()];
        for (future, indices) in pending.into_iter().zip(&plan) {
            let output = future.await?;
            // `logits` is [batch, 1] (or [batch]); one value per row.
            if output.data.len() != indices.len() {
                return Err(EmbedError::Inference(format!(
                    "the reranker returned {} values (shape {:?}) for {} pairs",
                    output.data.len(),
                    output.shape,
                    indices.len()
                )));
            }
            for (&index, &score) in indices.iter().zip(&output.data) {
                scores[index] = score;
            }
        }
        Ok(scores)
    }

    /// Cumulative counters (pairs, batches, time inside ONNX Runtime).
    pub fn stats(&self) -> EmbedStats {
        self.pool.stats()
    }

    /// The model folder's name.
    pub fn model_name(&self) -> String {
        self.name.clone()
    }
}

// The cross-encoder's scores on the real ms-marco model are tested in
// `tests/models_embedding.rs`.
