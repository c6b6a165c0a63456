//! Data shared by every stage of the RAG subsystem: documents, chunks, scored results, answers
//! and traces.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Free-form string metadata carried by documents and chunks (ordered, so hashes are stable).
pub type Metadata = BTreeMap<String, String>;

/// A loaded, not yet chunked, piece of source text.
///
/// One file can yield several documents (a CSV row each, a PDF page each); their `source_id`s
/// then carry a part suffix (`stores.csv#row=3`, `manual.pdf#page=2`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    /// Path relative to the ingestion base directory, or the URL, plus a part suffix if any.
    pub source_id: String,
    /// Readable text (what gets chunked and embedded).
    pub text: String,
    /// Loader that produced it: `text`, `markdown`, `csv`, `html`, `pdf`, `url`.
    pub loader: String,
    /// Loader metadata: `title`, `row`, `page`, `content_type`, …
    pub metadata: Metadata,
}

/// A slice of a document, as produced by a chunker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    pub text: String,
    /// Byte offsets of the chunk in its document's `text` (`text == &doc.text[start..end]`
    /// unless the chunker normalised whitespace, in which case the range covers the original).
    pub start: usize,
    pub end: usize,
    /// Chunker metadata, e.g. `heading_path` for the structural chunker.
    pub metadata: Metadata,
}

/// Provider, model and dimensions of the vectors in a collection. Mixing profiles in one
/// collection is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EmbeddingProfile {
    pub provider: String,
    pub model: String,
    pub dimensions: usize,
}

impl std::fmt::Display for EmbeddingProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} ({} dims)",
            self.provider, self.model, self.dimensions
        )
    }
}

/// A chunk as stored in a collection: text, provenance, offsets and its embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredChunk {
    /// Stable id: derived from source id, ordinal and content hash.
    pub id: String,
    pub source_id: String,
    /// Position of the chunk in its source (0-based).
    pub ordinal: u32,
    pub text: String,
    pub start: usize,
    pub end: usize,
    /// Document metadata merged with chunk metadata (`flagged=suspicious` when validation
    /// flagged the document).
    pub metadata: Metadata,
    /// sha256 of text + chunker settings + embedding profile: equal hashes may reuse vectors.
    pub content_hash: String,
    pub vector: Vec<f32>,
}

/// Where a result's score comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScoreOrigin {
    /// Cosine similarity from the vector index.
    Vector,
    /// BM25 from the text index.
    Bm25,
    /// Reciprocal Rank Fusion of several rankings (a rank aggregate, not a similarity).
    Rrf,
    /// Convex fusion: a weighted sum of per-ranking normalised scores (not a similarity).
    Convex,
    /// Cross-encoder or LLM reranker score.
    Rerank,
    /// The reranker's ranking fused with the retrieval ranking (`rag.rerank.blend`: RRF or
    /// convex); not a raw reranker score.
    RerankBlend,
    /// A document fetched by the corrective graph's web fallback.
    Web,
}

impl ScoreOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            ScoreOrigin::Vector => "vector",
            ScoreOrigin::Bm25 => "bm25",
            ScoreOrigin::Rrf => "rrf",
            ScoreOrigin::Convex => "convex",
            ScoreOrigin::Rerank => "rerank",
            ScoreOrigin::RerankBlend => "rerank-blend",
            ScoreOrigin::Web => "web",
        }
    }
}

/// A search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredChunk {
    pub chunk: StoredChunk,
    pub score: f32,
    pub origin: ScoreOrigin,
}

/// One numbered citation of an answer: `[marker]` in the text resolves to this chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Citation {
    pub marker: u32,
    pub chunk_id: String,
    pub source_id: String,
    pub snippet: String,
    pub score: f32,
    pub score_origin: ScoreOrigin,
    pub start: usize,
    pub end: usize,
    /// Flagged at ingestion as a possible prompt injection (`flagged: suspicious` in the
    /// chunk's metadata): labelled and fenced in the assembled context.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
}

/// One executed (or deliberately skipped) stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStep {
    pub stage: String,
    pub duration_ms: f64,
    /// Counts, component names and decisions of the stage.
    pub detail: serde_json::Value,
}

/// The execution trace of a query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RagTrace {
    pub steps: Vec<TraceStep>,
    /// Profile that produced the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Adaptive routing decision, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Retrieval texts actually used (variants, rewrites).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_variants: Vec<String>,
    /// Corrective verdicts in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<String>,
    /// Corrective loop count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
}

impl RagTrace {
    /// Appends a step.
    pub fn push(&mut self, stage: impl Into<String>, duration_ms: f64, detail: serde_json::Value) {
        self.steps.push(TraceStep {
            stage: stage.into(),
            duration_ms,
            detail,
        });
    }
}

/// What a query returns: generated text with `[n]` markers, the citations, and the trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RagAnswer {
    pub text: String,
    pub citations: Vec<Citation>,
    pub trace: RagTrace,
}
