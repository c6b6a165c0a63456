//! End to end: the gRPC control plane of a real daemon on loopback — streaming runs, resuming a
//! watch from a sequence number, auth, error codes, concurrent queries, health and reflection.

mod support;

use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::crew_service_client::CrewServiceClient;
use orkeon_daemon::proto::v1::knowledge_service_client::KnowledgeServiceClient;
use std::fs;
use support::{Daemon, SUPPORT_FAQ as FAQ};
use tonic::Code;

const CREW: &str = r#"name: support
process: sequential
llm: { provider: extractive }
rag:
  collections:
    product-kb:
      sources: ["kb/*.md"]
agents:
  support:
    role: Support agent
    goal: Answer from the knowledge base
    knowledge: [product-kb]
  writer:
    role: Writer
    goal: Summarise the answer for the customer
    knowledge: [product-kb]
tasks:
  - name: answer
    agent: support
    description: "Answer the customer: {{ inputs.question }}"
    expected_output: A short answer with [n] citations
  - name: summary
    agent: writer
    description: "Summarise the answer about: {{ inputs.question }}"
    expected_output: One sentence with [n] citations
    context: [answer]
"#;

struct Fixture {
    _work: tempfile::TempDir,
    daemon: Daemon,
}

fn start(env: &[(&str, &str)]) -> Fixture {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    fs::create_dir_all(crews.join("kb")).expect("mkdir");
    fs::write(crews.join("kb/faq.md"), FAQ).expect("write");
    fs::write(crews.join("support.yaml"), CREW).expect("write");
    fs::write(
        crews.join("invalid.yaml"),
        "name: invalid\nprocess: sequential\nagents: {}\ntasks: []\n",
    )
    .expect("write");
    let mut env = env.to_vec();
    env.push(("ORKEON_LLM__PROVIDER", "extractive"));
    let daemon = Daemon::start(work.path(), &work.path().join("data"), &crews, &env);
    Fixture {
        _work: work,
        daemon,
    }
}

async fn crews(url: &str) -> CrewServiceClient<tonic::transport::Channel> {
    CrewServiceClient::connect(url.to_string())
        .await
        .expect("connect")
}

async fn collect(
    client: &mut CrewServiceClient<tonic::transport::Channel>,
    run_id: &str,
    after: u64,
    limit: Option<usize>,
) -> Vec<pb::RunEvent> {
    let mut stream = client
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.into(),
            after_seq: after,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.expect("stream") {
        events.push(event);
        if limit.is_some_and(|l| events.len() >= l) {
            break;
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kickoff_stream_resume_errors_concurrency_health_and_reflection() {
    let fixture = start(&[]);
    let url = fixture.daemon.url();
    let mut client = crews(&url).await;

    // Kickoff returns a run id at once; the stream runs to the end.
    let inputs = [(
        "question".to_string(),
        "How many days do I have to return a bike?".to_string(),
    )]
    .into_iter()
    .collect();
    let run = client
        .kickoff(pb::KickoffRequest {
            crew: "support".into(),
            inputs,
            idempotency_key: "k-1".into(),
        })
        .await
        .expect("kickoff")
        .into_inner();
    assert!(run.created);

    // Resume mid-run: read two events, drop the stream, continue after seq 2.
    let head = collect(&mut client, &run.run_id, 0, Some(2)).await;
    assert_eq!(head.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    let tail = collect(&mut client, &run.run_id, 2, None).await;
    let all = collect(&mut client, &run.run_id, 0, None).await;
    let resumed: Vec<u64> = head.iter().chain(tail.iter()).map(|e| e.seq).collect();
    assert_eq!(
        resumed,
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        "a resumed watch misses nothing"
    );
    assert_eq!(
        resumed,
        (1..=all.len() as u64).collect::<Vec<_>>(),
        "dense sequence numbers"
    );
    assert_eq!(all.last().expect("events").r#type, "run_finished");
    let types: Vec<&str> = all.iter().map(|e| e.r#type.as_str()).collect();
    assert!(
        types.contains(&"task_completed") && types.contains(&"retrieval"),
        "{types:?}"
    );

    let record = client
        .get_run(pb::GetRunRequest {
            run_id: run.run_id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(record.state, "finished");
    assert!(record.final_output.contains('['), "{}", record.final_output);

    // The same idempotency key returns the same run.
    let again = client
        .kickoff(pb::KickoffRequest {
            crew: "support".into(),
            inputs: Default::default(),
            idempotency_key: "k-1".into(),
        })
        .await
        .expect("kickoff")
        .into_inner();
    assert_eq!(again.run_id, run.run_id);
    assert!(!again.created);

    // Error codes.
    let code = |r: Result<tonic::Response<pb::Crew>, tonic::Status>| r.expect_err("error").code();
    assert_eq!(
        code(
            client
                .get_crew(pb::GetCrewRequest {
                    name: "nope".into()
                })
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(
            client
                .get_crew(pb::GetCrewRequest {
                    name: String::new()
                })
                .await
        ),
        Code::InvalidArgument
    );
    let invalid = client
        .kickoff(pb::KickoffRequest {
            crew: "invalid".into(),
            ..Default::default()
        })
        .await
        .expect_err("invalid crew");
    assert_eq!(invalid.code(), Code::FailedPrecondition, "{invalid:?}");
    assert!(
        invalid.message().contains("invalid.yaml"),
        "{}",
        invalid.message()
    );
    let missing = client
        .get_run(pb::GetRunRequest {
            run_id: "no-such-run".into(),
        })
        .await
        .expect_err("missing");
    assert_eq!(missing.code(), Code::NotFound);
    let no_input = client
        .kickoff(pb::KickoffRequest {
            crew: "support".into(),
            ..Default::default()
        })
        .await
        .expect_err("missing input");
    assert_eq!(no_input.code(), Code::InvalidArgument, "{no_input:?}");
    let mut knowledge = KnowledgeServiceClient::connect(url.clone())
        .await
        .expect("connect");
    let unknown = knowledge
        .retrieve(pb::QueryRequest {
            collection: "nope".into(),
            query: "x".into(),
            ..Default::default()
        })
        .await
        .expect_err("unknown collection");
    assert_eq!(unknown.code(), Code::NotFound);
    let bad_profile = knowledge
        .retrieve(pb::QueryRequest {
            collection: "product-kb".into(),
            query: "x".into(),
            profile: "fastest".into(),
            ..Default::default()
        })
        .await
        .expect_err("unknown profile");
    assert_eq!(bad_profile.code(), Code::InvalidArgument);
    // A top_n that used to abort the process (balanced: candidates follow top_n) is refused
    // before any work, naming the field and the limit; the daemon keeps serving.
    let huge = knowledge
        .retrieve(pb::QueryRequest {
            collection: "product-kb".into(),
            query: "warranty".into(),
            profile: "balanced".into(),
            top_n: u32::MAX,
            ..Default::default()
        })
        .await
        .expect_err("top_n over the limit");
    assert_eq!(huge.code(), Code::InvalidArgument);
    assert!(
        huge.message().contains("limits.max_top_n"),
        "{}",
        huge.message()
    );
    let long_query = knowledge
        .retrieve(pb::QueryRequest {
            collection: "product-kb".into(),
            query: "warranty ".repeat(100_000),
            ..Default::default()
        })
        .await
        .expect_err("query over the limit");
    assert_eq!(long_query.code(), Code::InvalidArgument);
    assert!(
        long_query.message().contains("limits.max_query_bytes"),
        "{}",
        long_query.message()
    );

    // 50 concurrent queries, no error.
    let mut handles = Vec::new();
    for i in 0..50 {
        let url = url.clone();
        handles.push(tokio::spawn(async move {
            let mut k = KnowledgeServiceClient::connect(url).await.expect("connect");
            let request = pb::QueryRequest {
                collection: "product-kb".into(),
                query: format!("How long is the warranty? ({i})"),
                top_n: 3,
                ..Default::default()
            };
            if i % 2 == 0 {
                k.query(request).await
            } else {
                k.retrieve(request).await
            }
        }));
    }
    for handle in handles {
        let answer = handle.await.expect("join").expect("query").into_inner();
        assert!(!answer.citations.is_empty());
    }

    // The collection the kickoff ingested, with the index that serves its vector searches.
    let listed = knowledge
        .list_collections(pb::ListCollectionsRequest {})
        .await
        .expect("list collections")
        .into_inner();
    let kb = listed
        .collections
        .iter()
        .find(|c| c.name == "product-kb")
        .expect("product-kb listed");
    assert!(kb.chunks > 0, "{kb:?}");
    assert_eq!(kb.vector_index, "exact", "{kb:?}");
    assert!(
        kb.vector_index_reason.contains("below hnsw_threshold"),
        "{kb:?}"
    );
    assert_eq!(kb.hnsw_recall_at_10, None, "no graph below the threshold");

    // Health and reflection.
    let channel = tonic::transport::Channel::from_shared(url.clone())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "orkeon.v1.CrewService".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_request::MessageRequest,
        server_reflection_response::MessageResponse,
    };
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(futures::stream::iter(vec![request]))
        .await
        .expect("reflection")
        .into_inner();
    let response = responses
        .message()
        .await
        .expect("message")
        .expect("response");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"orkeon.v1.CrewService".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"orkeon.v1.KnowledgeService".to_string()),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_checked_on_every_call() {
    let fixture = start(&[
        ("ORKEON_SERVER__TOKEN_ENV", "E2E_DAEMON_TOKEN"),
        ("E2E_DAEMON_TOKEN", "s3cret-token"),
    ]);
    let url = fixture.daemon.url();
    let channel = tonic::transport::Channel::from_shared(url)
        .expect("url")
        .connect()
        .await
        .expect("connect");

    let mut anonymous = CrewServiceClient::new(channel.clone());
    let denied = anonymous
        .list_crews(pb::ListCrewsRequest {})
        .await
        .expect_err("no token");
    assert_eq!(denied.code(), Code::Unauthenticated);

    let with = |token: &'static str| {
        move |mut request: tonic::Request<()>| {
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {token}").parse().expect("header"),
            );
            Ok(request)
        }
    };
    let mut wrong = CrewServiceClient::with_interceptor(channel.clone(), with("nope"));
    assert_eq!(
        wrong
            .list_crews(pb::ListCrewsRequest {})
            .await
            .expect_err("wrong")
            .code(),
        Code::Unauthenticated
    );

    let mut right = CrewServiceClient::with_interceptor(channel, with("s3cret-token"));
    let crews = right
        .list_crews(pb::ListCrewsRequest {})
        .await
        .expect("authorised")
        .into_inner()
        .crews;
    assert!(crews.iter().any(|c| c.name == "support"));
}

/// Source ids of a collection's manifest, over gRPC.
async fn manifest_ids(
    client: &mut KnowledgeServiceClient<tonic::transport::Channel>,
    collection: &str,
) -> Vec<String> {
    client
        .get_manifest(pb::GetManifestRequest {
            collection: collection.into(),
        })
        .await
        .expect("manifest")
        .into_inner()
        .sources
        .into_iter()
        .map(|s| s.source_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_is_additive_unless_replace_and_a_failed_load_keeps_its_content() {
    let fixture = start(&[]);
    // Inside the crews folder, named by absolute path: allowed under every roots setting.
    let notes = fixture._work.path().join("crews/notes");
    fs::create_dir_all(&notes).expect("mkdir");
    for (name, text) in [
        ("a.md", "Alpha notes: the depot opens at seven."),
        ("b.md", "Bravo notes: deliveries leave at noon."),
        ("c.md", "Charlie notes: returns are checked on Fridays."),
    ] {
        fs::write(notes.join(name), text).expect("write");
    }
    fs::copy(
        support::repo().join("examples/rag/eval/corpus/reports/aquaprobe-s2-datasheet.pdf"),
        notes.join("sheet.pdf"),
    )
    .expect("copy pdf");
    let path = |name: &str| notes.join(name).display().to_string();
    let mut client = KnowledgeServiceClient::connect(fixture.daemon.url())
        .await
        .expect("connect");
    let ingest = |sources: Vec<String>, replace: bool, reindex: bool| pb::IngestRequest {
        collection: "notes".into(),
        sources,
        replace,
        reindex,
        ..Default::default()
    };

    client
        .ingest(ingest(vec![path("a.md"), path("b.md")], false, false))
        .await
        .expect("first ingest");
    // Additive (the default): c.md joins, a.md and b.md stay.
    let report = client
        .ingest(ingest(vec![path("c.md")], false, false))
        .await
        .expect("additive ingest")
        .into_inner();
    assert_eq!((report.sources_ingested, report.sources_removed), (1, 0));
    let ids = manifest_ids(&mut client, "notes").await;
    for name in ["a.md", "b.md", "c.md"] {
        assert!(ids.iter().any(|id| id.ends_with(name)), "{name} in {ids:?}");
    }

    // An additive reindex would drop a.md and b.md: refused, naming the way out.
    let refused = client
        .ingest(ingest(vec![path("c.md")], false, true))
        .await
        .expect_err("reindex without replace");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("replace"),
        "{}",
        refused.message()
    );
    assert_eq!(manifest_ids(&mut client, "notes").await.len(), 3);

    // Replace: the named set becomes the whole collection.
    let report = client
        .ingest(ingest(vec![path("c.md"), path("sheet.pdf")], true, false))
        .await
        .expect("replace ingest")
        .into_inner();
    assert_eq!(report.sources_removed, 2, "{report:?}");
    let ids = manifest_ids(&mut client, "notes").await;
    assert!(
        ids.iter()
            .all(|id| id.contains("c.md") || id.contains("sheet.pdf#page=")),
        "{ids:?}"
    );
    assert!(
        ids.iter().any(|id| id.contains("sheet.pdf#page=")),
        "{ids:?}"
    );

    // The PDF breaks: its pages keep their chunks, marked stale in the manifest.
    fs::write(notes.join("sheet.pdf"), b"%PDF-1.7\ncut short").expect("write");
    let report = client
        .ingest(ingest(vec![path("sheet.pdf")], false, false))
        .await
        .expect("ingest of a broken file")
        .into_inner();
    assert_eq!(report.stale.len(), 1, "{report:?}");
    assert!(report.stale[0].source.ends_with("sheet.pdf"));
    assert!(report.stale[0].error.contains("could not be parsed"));
    assert!(report.quarantined.is_empty());
    let manifest = client
        .get_manifest(pb::GetManifestRequest {
            collection: "notes".into(),
        })
        .await
        .expect("manifest")
        .into_inner();
    let pages: Vec<&pb::ManifestEntry> = manifest
        .sources
        .iter()
        .filter(|s| s.source_id.contains("sheet.pdf#page="))
        .collect();
    assert!(!pages.is_empty());
    for page in pages {
        assert!(page.chunks > 0, "{page:?}");
        assert!(
            page.stale
                .as_deref()
                .is_some_and(|e| e.contains("could not be parsed")),
            "{page:?}"
        );
    }
}
