//! Hybrid retrieval: one question, four ways — BM25 alone, vectors alone, BM25 + vectors fused,
//! and the `balanced` profile (convex hybrid fusion, then the local cross-encoder) — printing
//! each one's hits with their sources and scores. Retrieval only: no model generates.
//!
//!     cargo run --example hybrid-retrieval
//!     cargo run --example hybrid-retrieval -- "which codecs does the Halo 3 support?"

use std::path::Path;

use orkeon::{Config, Knowledge, QueryParams, SearchMode};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Which headphones support the LDAC codec?".to_string());
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/crews/knowledge/support");
    let data = tempfile::tempdir()?;
    let config = Config {
        data_dir: data.path().to_path_buf(),
        ..Config::default()
    };
    let kb = Knowledge::with_config(config)?;
    let report = kb
        .ingest_from(&docs, "support", ["*.md", "guides/*.md"])
        .await?;
    println!(
        "ingested {} sources ({} chunks)\nquestion: {question}",
        report.sources_ingested, report.chunks_upserted
    );

    let ways: [(&str, Option<&str>, Option<SearchMode>); 4] = [
        ("bm25", Some("fast"), Some(SearchMode::Bm25)),
        ("vector", Some("fast"), Some(SearchMode::Vector)),
        ("hybrid", Some("fast"), Some(SearchMode::Hybrid)),
        ("balanced", Some("balanced"), None),
    ];
    for (label, profile, mode) in ways {
        let answer = kb
            .retrieve_with(QueryParams {
                collection: Some("support".into()),
                query: question.clone(),
                profile: profile.map(str::to_string),
                top_n: Some(3),
                mode,
            })
            .await?;
        println!("\n== {label}");
        for c in &answer.citations {
            let line = c
                .snippet
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            let line: String = line.chars().take(70).collect();
            println!(
                "  [{}] {} score {:.4} ({:?}): {line}",
                c.marker, c.source_id, c.score, c.score_origin
            );
        }
    }
    kb.flush()?;
    Ok(())
}
