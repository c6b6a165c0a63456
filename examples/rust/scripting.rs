//! Scripting from Rust: runs `examples/scripting/ingest-and-check.rhai` (ingest the support
//! knowledge base, retrieve, check that a cited passage states the return window) on the
//! in-process Rhai engine, then a short inline script over the same collection. What the
//! scripts `print` appears as they run; their last values are printed after.
//!
//!     cargo run --example scripting

use std::path::Path;

use orkeon::{Config, Host};

/// Lists the collection's sources through `rag.collections()` and `rag.retrieve`.
const INLINE: &str = r#"
let kb = rag.collections().filter(|c| c.name == args.collection);
if kb.len() != 1 { throw `no collection ${args.collection}`; }
let answer = rag.retrieve("Is there a student discount?", #{ collection: args.collection, top_n: 2 });
`${args.collection}: ${kb[0].chunks} chunks; best source for the student discount: ${answer.citations[0].source_id}`
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir()?;
    let config = Config {
        data_dir: dir.path().join("data"),
        // The script's sources (`../crews/knowledge/...`) lie under this ingestion root.
        crews_dir: root.join("examples/crews"),
        ..Config::default()
    };
    let host = Host::start(config).await?;

    let script = root.join("examples/scripting/ingest-and-check.rhai");
    let checked = host
        .run_script(&script, [("collection", "norrvik-demo")])
        .await;
    let inline = dir.path().join("inline.rhai");
    std::fs::write(&inline, INLINE)?;
    let listed = match &checked {
        Ok(_) => Some(
            host.run_script(&inline, [("collection", "norrvik-demo")])
                .await,
        ),
        Err(_) => None,
    };
    host.shutdown().await;

    println!("ingest-and-check.rhai returned: {}", checked?);
    if let Some(listed) = listed {
        println!("inline script returned: {}", listed?);
    }
    Ok(())
}
