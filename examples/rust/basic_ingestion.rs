//! Basic ingestion: ingest the Norrvik support knowledge base into a fresh data folder, ask a
//! question, print the cited answer (offline extractive model) and its sources, then ingest
//! again to show that unchanged sources are skipped.
//!
//!     cargo run --example basic-ingestion
//!
//! Models resolve as for the CLI (`ORKEON_MODELS_DIR`, e.g. `../shared/models`).

use std::path::Path;

use orkeon::{Config, Knowledge, QueryParams};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/crews/knowledge/support");
    let data = tempfile::tempdir()?;
    let mut config = Config {
        data_dir: data.path().to_path_buf(),
        ..Config::default()
    };
    config.llm.provider = Some("extractive".into());
    let kb = Knowledge::with_config(config)?;

    let report = kb.ingest_from(&docs, "support", ["*.md"]).await?;
    println!(
        "ingested {} sources into 'support': {} chunks written, {} unchanged",
        report.sources_ingested, report.chunks_upserted, report.sources_skipped
    );

    let question = "How many days do I have to return headphones for a refund?";
    let answer = kb
        .query(QueryParams {
            collection: Some("support".into()),
            query: question.into(),
            ..QueryParams::default()
        })
        .await?;
    println!("\nquestion: {question}");
    println!("answer: {}", answer.text.trim());
    println!("sources:");
    for c in &answer.citations {
        println!(
            "  [{}] {} (score {:.4}, {:?})",
            c.marker, c.source_id, c.score, c.score_origin
        );
    }

    let again = kb.ingest_from(&docs, "support", ["*.md"]).await?;
    println!(
        "\nsecond ingestion: {} chunks written, {} sources unchanged",
        again.chunks_upserted, again.sources_skipped
    );
    kb.flush()?;
    Ok(())
}
