//! The daemon's implementation of the crews' `KnowledgeService` port: kickoff-time ingestion of
//! a crew's `rag:` collections through the incremental pipeline, and retrieval-only
//! augmentation (no LLM call) through the configured profile's pipeline.

use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{
    CollectionRequest, CollectionStatus, KnowledgeBlock, KnowledgeCitation, KnowledgeError,
    KnowledgeService, prompt_convention,
};
use orkeon_knowledge::ingest::{IngestRequest, IngestionPipeline};
use orkeon_knowledge::query::{ProfileResolver, RagQuery};
use orkeon_knowledge::settings::ChunkingSettings;
use serde_json::json;

/// Knowledge for crews, over one process's ingestion pipeline and profile resolver.
pub struct DaemonKnowledge {
    ingestion: Arc<IngestionPipeline>,
    resolver: Arc<ProfileResolver>,
    profile: String,
}

impl DaemonKnowledge {
    pub fn new(
        ingestion: Arc<IngestionPipeline>,
        resolver: Arc<ProfileResolver>,
        profile: String,
    ) -> Self {
        Self {
            ingestion,
            resolver,
            profile,
        }
    }

    async fn bootstrap_one(&self, request: CollectionRequest) -> CollectionStatus {
        let chunking = match request
            .chunking
            .clone()
            .map(serde_json::from_value::<ChunkingSettings>)
        {
            None => None,
            Some(Ok(chunking)) => Some(chunking),
            Some(Err(error)) => {
                return failed(&request.name, format!("invalid chunking settings: {error}"));
            }
        };
        let ingest = IngestRequest {
            collection: request.name.clone(),
            base_dir: request.base_dir.clone(),
            sources: request.sources.clone(),
            chunking,
            reindex: false,
        };
        match self.ingestion.ingest(&ingest, None).await {
            Ok(report) => {
                let chunks = self
                    .ingestion
                    .store()
                    .collections()
                    .ok()
                    .and_then(|all| all.into_iter().find(|c| c.name == request.name))
                    .map(|c| c.chunks)
                    .unwrap_or(0);
                let (state, reason) = if chunks == 0 {
                    let why = if report.sources_total == 0 {
                        "its sources matched no file".to_string()
                    } else if !report.quarantined.is_empty() {
                        format!("all {} sources were quarantined", report.quarantined.len())
                    } else {
                        "no chunk was produced".to_string()
                    };
                    (
                        "empty",
                        Some(format!("collection '{}' is empty: {why}", request.name)),
                    )
                } else {
                    ("ready", None)
                };
                CollectionStatus {
                    name: request.name,
                    state: state.into(),
                    report: serde_json::to_value(&report).unwrap_or_default(),
                    reason,
                }
            }
            Err(error) => failed(&request.name, error.to_string()),
        }
    }
}

fn failed(name: &str, reason: String) -> CollectionStatus {
    CollectionStatus {
        name: name.to_string(),
        state: "failed".into(),
        report: json!({}),
        reason: Some(format!("collection '{name}' failed: {reason}")),
    }
}

#[async_trait]
impl KnowledgeService for DaemonKnowledge {
    async fn bootstrap(
        &self,
        collections: Vec<CollectionRequest>,
    ) -> Result<Vec<CollectionStatus>, KnowledgeError> {
        let mut statuses = Vec::with_capacity(collections.len());
        for request in collections {
            statuses.push(self.bootstrap_one(request).await);
        }
        Ok(statuses)
    }

    async fn augment(
        &self,
        collections: &[String],
        query: &str,
        max_passages: usize,
    ) -> Result<KnowledgeBlock, KnowledgeError> {
        let pipeline = self
            .resolver
            .resolve(&self.profile)
            .map_err(|e| KnowledgeError(e.to_string()))?;
        let retriever = pipeline.retriever().ok_or_else(|| {
            KnowledgeError(format!(
                "profile '{}' cannot retrieve without generation; choose fast, balanced or quality for crews",
                self.profile
            ))
        })?;
        // Retrieve per collection, then interleave by rank (round robin keeps every attached
        // collection represented; within one collection the pipeline's order is kept).
        let mut per_collection = Vec::new();
        let mut traces = Vec::new();
        for collection in collections {
            let answer = retriever
                .retrieve(&RagQuery {
                    text: query.to_string(),
                    collection: collection.clone(),
                    top_n: Some(max_passages),
                })
                .await
                .map_err(|e| {
                    KnowledgeError(format!("retrieval from '{collection}' failed: {e}"))
                })?;
            traces.push(json!({"collection": collection, "trace": answer.trace}));
            per_collection.push((collection.clone(), answer.citations));
        }
        let mut citations = Vec::new();
        let mut rank = 0;
        while citations.len() < max_passages {
            let mut any = false;
            for (collection, list) in &per_collection {
                if let Some(c) = list.get(rank) {
                    any = true;
                    if citations.len() < max_passages {
                        citations.push(KnowledgeCitation {
                            marker: citations.len() as u32 + 1,
                            collection: collection.clone(),
                            chunk_id: c.chunk_id.clone(),
                            source_id: c.source_id.clone(),
                            snippet: c.snippet.clone(),
                            score: c.score,
                            score_origin: c.score_origin.as_str().to_string(),
                            start: c.start,
                            end: c.end,
                        });
                    }
                }
            }
            if !any {
                break;
            }
            rank += 1;
        }
        Ok(KnowledgeBlock {
            text: render_block(&citations),
            citations,
            trace: json!(traces),
        })
    }
}

/// The numbered block, in the shared prompt convention.
pub fn render_block(citations: &[KnowledgeCitation]) -> String {
    if citations.is_empty() {
        return String::new();
    }
    let mut text = String::from(prompt_convention::CONTEXT_HEADER);
    text.push('\n');
    for c in citations {
        let passage = c.snippet.split_whitespace().collect::<Vec<_>>().join(" ");
        text.push_str(&format!(
            "[{}] (source: {}) {}\n",
            c.marker, c.source_id, passage
        ));
    }
    text
}
