//! End to end over real gRPC: what a remote Ingest request may read. Relative paths resolve
//! against the first ingestion root (the crews folder by default), never the daemon's working
//! directory; paths outside the roots (`/etc/hostname`, `../` escapes, a sibling of the crews
//! folder) are refused naming the roots; `<data_dir>/sources` is a root; and a URL source
//! pointing at a real loopback HTTP server is refused by the address guard, so the server is
//! never contacted. A remote Evaluate reads its dataset under the same roots.

mod support;

use std::fs;

use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::knowledge_service_client::KnowledgeServiceClient;
use orkeon_testkit::{LoopbackServer, Reply};
use support::Daemon;
use tonic::Code;

fn ingest(sources: &[&str]) -> pb::IngestRequest {
    pb::IngestRequest {
        collection: "kb".into(),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_ingestion_is_confined_to_the_roots_and_public_urls() {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    let data = work.path().join("data");
    fs::create_dir_all(crews.join("docs")).expect("mkdir");
    fs::write(
        crews.join("docs/guide.md"),
        "# Guide\n\nBikes ship from Lyon within two business days.\n",
    )
    .expect("write");
    // In the daemon's working directory, outside every root.
    fs::create_dir_all(work.path().join("private")).expect("mkdir");
    fs::write(
        work.path().join("private/secret.md"),
        "# Secret\n\nThe vault code.\n",
    )
    .expect("write");

    let server = LoopbackServer::start(|_, _| Reply::typed(200, "text/markdown", "# Internal"))
        .await
        .expect("loopback server");
    let daemon = Daemon::start(
        work.path(),
        &data,
        &crews,
        &[("ORKEON_RAG__INGESTION__ALLOW_URLS", "true")],
    );
    // The daemon created the second default root.
    assert!(data.join("sources").is_dir());
    let mut client = KnowledgeServiceClient::connect(daemon.url())
        .await
        .expect("connect");

    let secret = work.path().join("private/secret.md");
    let secret = secret.to_string_lossy();
    for refused in ["/etc/hostname", "../private/secret.md", secret.as_ref()] {
        let status = client
            .ingest(ingest(&[refused]))
            .await
            .expect_err("outside the roots");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{refused}: {status:?}"
        );
        let message = status.message();
        assert!(
            message.contains("outside the allowed roots")
                && message.contains("rag.ingestion.roots"),
            "{refused}: {message}"
        );
        assert!(message.contains(&crews.display().to_string()), "{message}");
    }
    // A relative path that exists only under the daemon's working directory is not found
    // there: it resolves against the crews folder.
    let report = client
        .ingest(ingest(&["private/secret.md"]))
        .await
        .expect("a missing path is a warning")
        .into_inner();
    assert_eq!(report.sources_total, 0, "{report:?}");

    // Under the crews folder (relative) and under <data_dir>/sources (absolute): accepted.
    fs::write(
        data.join("sources/returns.md"),
        "# Returns\n\nReturns within 30 days.\n",
    )
    .expect("write");
    let in_sources = data.join("sources/returns.md");
    let report = client
        .ingest(ingest(&[
            "docs/guide.md",
            in_sources.to_string_lossy().as_ref(),
        ]))
        .await
        .expect("inside the roots")
        .into_inner();
    assert_eq!(report.sources_ingested, 2, "{report:?}");
    let manifest = client
        .get_manifest(pb::GetManifestRequest {
            collection: "kb".into(),
        })
        .await
        .expect("manifest")
        .into_inner();
    let ids: Vec<&str> = manifest
        .sources
        .iter()
        .map(|s| s.source_id.as_str())
        .collect();
    assert!(
        ids.contains(&"docs/guide.md") && ids.contains(&"returns.md"),
        "{ids:?}"
    );

    // A remote evaluation reads its dataset under the same roots.
    let secret_path = work.path().join("private/secret.md");
    for dataset in ["/etc/hostname", "../private/secret.md", secret.as_ref()] {
        let status = client
            .evaluate(pb::EvaluateRequest {
                dataset: dataset.to_string(),
                profiles: vec!["fast".into()],
                offline: true,
                ..Default::default()
            })
            .await
            .expect_err("a dataset outside the roots");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{dataset}: {status:?}"
        );
        assert!(
            status.message().contains("rag.ingestion.roots"),
            "{dataset}: {}",
            status.message()
        );
    }
    assert!(secret_path.exists());

    // A URL to a real loopback service: refused by the guard, the service never reached; its
    // credentials appear nowhere in the report.
    let url = format!(
        "{}/internal.md",
        server
            .base_url()
            .replace("http://", "http://admin:hunter2@")
    );
    let report = client
        .ingest(ingest(&[&url]))
        .await
        .expect("the request itself succeeds")
        .into_inner();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    let quarantined = &report.quarantined[0];
    assert!(
        quarantined.reason.contains("loopback address") && !quarantined.source.contains("hunter2"),
        "{quarantined:?}"
    );
    assert!(!format!("{report:?}").contains("hunter2"), "{report:?}");
    assert!(server.requests().is_empty(), "{:?}", server.requests());
}
