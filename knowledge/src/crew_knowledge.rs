//! Knowledge policy for crews — the implementation of the crews' `KnowledgeService` port:
//! kickoff-time ingestion of a crew's `rag:` collections through the incremental pipeline
//! (each collection ends `ready`, `empty` or `failed`; the declared sources replace the
//! collection's set), the `rag_ingest` tool's additive upserts, and retrieval-only augmentation
//! (no LLM call for generation): one retrieval per attached collection, concurrently, each
//! through the attachment's profile (the host's `rag.profile` when it names none) and capped by
//! its `max_passages`, merged round robin into one numbered `[n]` block in the shared prompt
//! convention.
//!
//! [`CollectionGates`] gives each collection a read/write gate: an ingestion (a kickoff's
//! bootstrap, a hot reload, an API ingest or delete) holds it for writing, retrievals for
//! reading, so a query never sees a collection with some of its changed sources updated and
//! others not. Every surface that writes or reads a collection shares one set of gates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orkeon_crews::ports::{
    AugmentRequest, CollectionRequest, CollectionState, CollectionStatus, KnowledgeAttachment,
    KnowledgeBlock, KnowledgeCitation, KnowledgeError, KnowledgeService, prompt_convention,
};
use serde_json::json;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::ingest::{IngestMode, IngestRequest, IngestionPipeline};
use crate::query::{ProfileResolver, RagQuery};
use crate::settings::ChunkingSettings;
use crate::types::Citation;

/// One read/write gate per collection name.
#[derive(Default)]
pub struct CollectionGates {
    gates: Mutex<HashMap<String, Arc<RwLock<()>>>>,
}

impl CollectionGates {
    fn gate(&self, collection: &str) -> Arc<RwLock<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        gates.entry(collection.to_string()).or_default().clone()
    }

    /// Waits until no writer holds the collection; readers share it.
    pub async fn read(&self, collection: &str) -> OwnedRwLockReadGuard<()> {
        self.gate(collection).read_owned().await
    }

    /// Waits until nobody reads or writes the collection, then holds it alone.
    pub async fn write(&self, collection: &str) -> OwnedRwLockWriteGuard<()> {
        self.gate(collection).write_owned().await
    }
}

/// Knowledge for crews, over one process's ingestion pipeline and profile resolver.
pub struct CrewKnowledge {
    ingestion: Arc<IngestionPipeline>,
    resolver: Arc<ProfileResolver>,
    profile: String,
    gates: Arc<CollectionGates>,
}

impl CrewKnowledge {
    pub fn new(
        ingestion: Arc<IngestionPipeline>,
        resolver: Arc<ProfileResolver>,
        profile: String,
        gates: Arc<CollectionGates>,
    ) -> Self {
        Self {
            ingestion,
            resolver,
            profile,
            gates,
        }
    }

    /// The gates this service respects (share them with every other writer and reader).
    pub fn gates(&self) -> &Arc<CollectionGates> {
        &self.gates
    }

    /// Ingests one collection under its write gate: `Replace` for a crew's declared sources,
    /// `Additive` for a tool's upsert.
    async fn ingest_one(&self, request: CollectionRequest, mode: IngestMode) -> CollectionStatus {
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
            mode,
        };
        let _writing = self.gates.write(&request.name).await;
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
                        CollectionState::Empty,
                        Some(format!("collection '{}' is empty: {why}", request.name)),
                    )
                } else {
                    (CollectionState::Ready, None)
                };
                CollectionStatus {
                    name: request.name,
                    state,
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
        state: CollectionState::Failed,
        report: json!({}),
        reason: Some(format!("collection '{name}' failed: {reason}")),
    }
}

#[async_trait]
impl KnowledgeService for CrewKnowledge {
    async fn bootstrap(
        &self,
        collections: Vec<CollectionRequest>,
    ) -> Result<Vec<CollectionStatus>, KnowledgeError> {
        let mut statuses = Vec::with_capacity(collections.len());
        for request in collections {
            // The crew file declares the collection's sources: they replace its set.
            statuses.push(self.ingest_one(request, IngestMode::Replace).await);
        }
        Ok(statuses)
    }

    async fn augment(&self, request: &AugmentRequest) -> Result<KnowledgeBlock, KnowledgeError> {
        // One retrieval per attachment, concurrently; each holds its collection's read gate.
        let lookups = request
            .attachments
            .iter()
            .map(|attachment| self.retrieve_one(attachment, &request.query, request.max_passages));
        let answers = futures::future::try_join_all(lookups).await?;
        let mut per_collection = Vec::with_capacity(answers.len());
        let mut traces = Vec::with_capacity(answers.len());
        for (collection, profile, answer) in answers {
            traces
                .push(json!({"collection": collection, "profile": profile, "trace": answer.trace}));
            per_collection.push((collection, answer.citations));
        }
        let citations = merge_round_robin(&per_collection, request.max_passages);
        Ok(KnowledgeBlock {
            text: render_block(&citations),
            citations,
            trace: json!(traces),
        })
    }

    async fn upsert_sources(
        &self,
        request: CollectionRequest,
    ) -> Result<CollectionStatus, KnowledgeError> {
        Ok(self.ingest_one(request, IngestMode::Additive).await)
    }
}

impl CrewKnowledge {
    /// The retrieval half of the attachment's profile (the host's default profile when the
    /// attachment names none), for at most its own cap (and never more than the block holds).
    async fn retrieve_one(
        &self,
        attachment: &KnowledgeAttachment,
        query: &str,
        block_size: usize,
    ) -> Result<(String, String, crate::types::RagAnswer), KnowledgeError> {
        let profile = attachment
            .profile
            .clone()
            .unwrap_or_else(|| self.profile.clone());
        let pipeline = self
            .resolver
            .resolve(&profile)
            .map_err(|e| KnowledgeError::Profile {
                profile: profile.clone(),
                source: Box::new(e),
            })?;
        let retriever =
            pipeline
                .retriever()
                .ok_or_else(|| KnowledgeError::RetrievalOnlyUnsupported {
                    profile: profile.clone(),
                })?;
        let top_n = attachment
            .max_passages
            .map_or(block_size, |cap| cap.min(block_size))
            .max(1);
        let collection = attachment.collection.clone();
        let _reading = self.gates.read(&collection).await;
        let answer = retriever
            .retrieve(&RagQuery {
                text: query.to_string(),
                collection: collection.clone(),
                top_n: Some(top_n),
            })
            .await
            .map_err(|e| KnowledgeError::Retrieval {
                collection: collection.clone(),
                source: Box::new(e),
            })?;
        Ok((collection, profile, answer))
    }
}

/// Interleaves per-collection rankings by rank (round robin keeps every attached collection
/// represented; within one collection its own order is kept) and numbers the result 1..=n.
pub fn merge_round_robin(
    per_collection: &[(String, Vec<Citation>)],
    max_passages: usize,
) -> Vec<KnowledgeCitation> {
    let mut citations = Vec::new();
    let mut rank = 0;
    while citations.len() < max_passages {
        let mut any = false;
        for (collection, list) in per_collection {
            let Some(c) = list.get(rank) else { continue };
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
                    untrusted: c.untrusted,
                });
            }
        }
        if !any {
            break;
        }
        rank += 1;
    }
    citations
}

/// The numbered block, in the shared prompt convention.
pub fn render_block(citations: &[KnowledgeCitation]) -> String {
    if citations.is_empty() {
        return String::new();
    }
    let mut text = String::from(prompt_convention::CONTEXT_HEADER);
    text.push('\n');
    for c in citations {
        text.push_str(&prompt_convention::passage_line(
            c.marker,
            &c.source_id,
            &c.snippet,
            c.untrusted,
        ));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ScoreOrigin;

    fn citation(id: &str) -> Citation {
        Citation {
            marker: 0,
            chunk_id: id.into(),
            source_id: format!("kb/{id}.md"),
            snippet: format!("text of {id}"),
            score: 1.0,
            score_origin: ScoreOrigin::Vector,
            start: 0,
            end: 10,
            untrusted: false,
        }
    }

    #[test]
    fn round_robin_keeps_every_collection_and_numbers_from_one() {
        let per = vec![
            (
                "a".to_string(),
                vec![citation("a1"), citation("a2"), citation("a3")],
            ),
            ("b".to_string(), vec![citation("b1")]),
        ];
        let merged = merge_round_robin(&per, 4);
        let ids: Vec<_> = merged.iter().map(|c| c.chunk_id.as_str()).collect();
        assert_eq!(ids, ["a1", "b1", "a2", "a3"]);
        let markers: Vec<_> = merged.iter().map(|c| c.marker).collect();
        assert_eq!(markers, [1, 2, 3, 4]);
        assert_eq!(merged[1].collection, "b");
        assert_eq!(merge_round_robin(&per, 2).len(), 2);
        assert!(merge_round_robin(&[], 5).is_empty());
    }

    #[test]
    fn the_block_follows_the_prompt_convention() {
        let per = vec![("a".to_string(), vec![citation("a1"), citation("a2")])];
        let block = render_block(&merge_round_robin(&per, 2));
        assert!(block.starts_with("Context:\n[1] (source: kb/a1.md) text of a1\n"));
        assert!(block.contains("[2] (source: kb/a2.md) text of a2"));
        assert_eq!(render_block(&[]), "");
        // A passage flagged at ingestion is labelled and fenced as untrusted data.
        let mut flagged = merge_round_robin(&per, 1);
        flagged[0].untrusted = true;
        let block = render_block(&flagged);
        assert!(
            block.contains("[1] (source: kb/a1.md; untrusted: ") && block.contains("«text of a1»"),
            "{block}"
        );
    }

    #[tokio::test]
    async fn a_writer_excludes_readers_of_its_collection_only() {
        let gates = CollectionGates::default();
        let writing = gates.write("kb").await;
        // Another collection is readable while kb is being written.
        let _other = gates.read("other").await;
        let blocked =
            tokio::time::timeout(std::time::Duration::from_millis(50), gates.read("kb")).await;
        assert!(
            blocked.is_err(),
            "a reader got in while kb was being written"
        );
        drop(writing);
        let _reading = tokio::time::timeout(std::time::Duration::from_secs(1), gates.read("kb"))
            .await
            .expect("the reader gets in once the writer is done");
    }

    /// A crew knowledge service over an in-memory store and the hash embedder (profile `fast`).
    fn in_memory_knowledge() -> (CrewKnowledge, Arc<crate::store::InMemoryStore>) {
        use crate::embed::HashEmbedder;
        use crate::query::{PipelineDeps, RerankerFactory, TransformerFactory};
        use crate::settings::{EmbeddingSettings, IngestionSettings, RagSettings};
        use crate::store::{DocumentStore, InMemoryQuarantineStore, InMemoryStore};

        let store = Arc::new(InMemoryStore::new());
        let embedder = Arc::new(HashEmbedder::new(256));
        let ingestion = Arc::new(IngestionPipeline::new(
            store.clone() as Arc<dyn DocumentStore>,
            embedder.clone(),
            Arc::new(InMemoryQuarantineStore::new()),
            IngestionSettings::default(),
        ));
        let deps = PipelineDeps {
            store: store.clone(),
            embedder,
            chat: None,
            rerankers: Arc::new(RerankerFactory::builtin(EmbeddingSettings::default())),
            transformers: Arc::new(TransformerFactory::builtin()),
            groundedness: None,
        };
        let resolver = Arc::new(ProfileResolver::new(RagSettings::default(), deps, None));
        let knowledge = CrewKnowledge::new(ingestion, resolver, "fast".into(), Arc::default());
        (knowledge, store)
    }

    #[tokio::test]
    async fn a_tool_upsert_keeps_the_declared_sources_and_a_kickoff_restores_the_declared_set() {
        use crate::store::DocumentStore;

        let crew = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(crew.path().join("kb")).unwrap();
        std::fs::create_dir_all(crew.path().join("notes")).unwrap();
        std::fs::write(
            crew.path().join("kb/warranty.md"),
            "The Pebble warranty covers manufacturing defects for two years.",
        )
        .unwrap();
        std::fs::write(
            crew.path().join("notes/recall.md"),
            "The Lantern lamp batch is recalled because its switch overheats.",
        )
        .unwrap();
        let (knowledge, store) = in_memory_knowledge();
        let declared = CollectionRequest {
            name: "kb".into(),
            base_dir: crew.path().to_path_buf(),
            sources: vec!["kb/*.md".into()],
            chunking: None,
        };
        let ids = || -> Vec<String> {
            store
                .manifest("kb")
                .unwrap()
                .sources
                .into_iter()
                .map(|s| s.source_id)
                .collect()
        };

        let statuses = knowledge.bootstrap(vec![declared.clone()]).await.unwrap();
        assert_eq!(statuses[0].state, CollectionState::Ready);

        let status = knowledge
            .upsert_sources(CollectionRequest {
                sources: vec!["notes/recall.md".into()],
                ..declared.clone()
            })
            .await
            .unwrap();
        assert_eq!(status.state, CollectionState::Ready, "{status:?}");
        assert_eq!(status.report["sources_removed"], 0);
        assert_eq!(ids(), ["kb/warranty.md", "notes/recall.md"]);
        for (query, source) in [
            ("Pebble warranty manufacturing defects", "kb/warranty.md"),
            ("Lantern lamp recalled switch", "notes/recall.md"),
        ] {
            let request = AugmentRequest {
                attachments: vec![KnowledgeAttachment::named("kb")],
                query: query.to_string(),
                max_passages: 1,
            };
            let block = knowledge.augment(&request).await.unwrap();
            assert_eq!(block.citations[0].source_id, source, "{query}");
        }

        // The crew file declares the collection's sources: the next kickoff replaces the set.
        knowledge.bootstrap(vec![declared]).await.unwrap();
        assert_eq!(ids(), ["kb/warranty.md"]);
    }
}
