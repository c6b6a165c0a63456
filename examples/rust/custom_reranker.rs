//! A custom reranker: `prefer-source` moves the passages of one named source (here the FAQ)
//! ahead of the others, keeping the retrieval order within each group. It is registered by
//! name with `Knowledge::builder(..).reranker(..)` and selected by the configuration file this
//! example writes (`rag.rerank.kind: prefer-source`), like a built-in reranker. The same
//! question is retrieved without it and with it, and both rankings are printed.
//!
//!     cargo run --example custom-reranker

use std::path::Path;
use std::sync::Arc;

use orkeon::{Config, Knowledge, QueryError, RagAnswer, Reranker, ScoredChunk};

/// Passages of `source` first (stable within each group), then the first `top_n`.
struct PreferSource {
    source: String,
}

#[orkeon::async_trait]
impl Reranker for PreferSource {
    fn name(&self) -> &str {
        "prefer-source"
    }

    async fn rerank(
        &self,
        _query: &str,
        mut candidates: Vec<ScoredChunk>,
        top_n: usize,
    ) -> Result<Vec<ScoredChunk>, QueryError> {
        candidates.sort_by_key(|c| c.chunk.source_id != self.source);
        candidates.truncate(top_n);
        Ok(candidates)
    }
}

const CONFIG: &str = "\
rag:
  profile: fast
  retrieval: { candidate_k: 20 }     # the reranker reads 20 candidates
  rerank:
    enabled: true
    kind: prefer-source               # the name registered below
    top_n: 4
";

fn print_hits(label: &str, answer: &RagAnswer) {
    println!("\n== {label}");
    for c in &answer.citations {
        println!(
            "  [{}] {} (score {:.4}, {:?})",
            c.marker, c.source_id, c.score, c.score_origin
        );
    }
    let rerank = answer.trace.steps.iter().find(|s| s.stage == "rerank");
    if let Some(step) = rerank {
        println!("  rerank stage: {}", step.detail);
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/crews/knowledge/support");
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let question = "Can I return damaged headphones?";

    // Without the custom reranker: the built-in `fast` profile (no rerank stage).
    let config = Config {
        data_dir: data.clone(),
        ..Config::default()
    };
    let before = {
        let kb = Knowledge::with_config(config)?;
        kb.ingest_from(&docs, "support", ["*.md"]).await?;
        let params = orkeon::QueryParams {
            collection: Some("support".into()),
            query: question.into(),
            profile: Some("fast".into()),
            top_n: Some(4),
            ..Default::default()
        };
        let answer = kb.retrieve_with(params).await?;
        kb.flush()?;
        answer
    };

    // With it: registered by name, selected by the configuration file.
    let file = dir.path().join("orkeon.yaml");
    std::fs::write(&file, CONFIG)?;
    let mut config = Config::load(Some(&file), &Default::default())?;
    config.data_dir = data;
    let kb = Knowledge::builder(config)
        .reranker("prefer-source", |_ctx| {
            Ok(Arc::new(PreferSource {
                source: "faq.md".into(),
            }) as Arc<dyn Reranker>)
        })
        .open()?;
    let after = kb.retrieve("support", question).await?;
    kb.flush()?;

    println!("question: {question}");
    print_hits("fast profile, no reranker", &before);
    print_hits("rag.rerank.kind: prefer-source (faq.md first)", &after);
    let top = |a: &RagAnswer| a.citations.first().map(|c| c.source_id.clone());
    println!(
        "\ntop hit: {} -> {}",
        top(&before).unwrap_or_default(),
        top(&after).unwrap_or_default()
    );
    Ok(())
}
