//! End to end: an abuse suite over gRPC against one real daemon (real binary on loopback, real
//! models). In sequence: `top_n = u32::MAX` and 100 000, a 4 MB query (under and over the
//! request-size limit), a flate-bomb PDF ingested over gRPC, 1 000 concurrent kickoffs from one
//! client against a small run queue, and clients that drop their connection mid-stream (tonic
//! clients and a raw HTTP/2 socket reset under an open `WatchRun`). After each case the daemon is
//! alive, health answers SERVING, a normal Retrieve answers within a fixed bound (against hangs,
//! not a speed assertion), and its resident memory stays under [`RSS_CAP_BYTES`] (printed).

mod support;

use std::collections::HashSet;
use std::fs;
use std::time::Duration;

use orkeon_daemon::proto::v1 as pb;
use orkeon_daemon::proto::v1::crew_service_client::CrewServiceClient;
use orkeon_daemon::proto::v1::knowledge_service_client::KnowledgeServiceClient;
use orkeon_testkit::pdf::{PdfObject, one_page, zlib_bomb};
use support::{Daemon, SUPPORT_CREW as CREW, SUPPORT_FAQ as FAQ};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The daemon's resident set must stay under this after every case.
const RSS_CAP_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// Bound on one health check or normal Retrieve after a case (a hang detector).
const ANSWER_BOUND: Duration = Duration::from_secs(10);
/// Runs executing at once and waiting in line, set small so the queue bound bites.
const MAX_CONCURRENT_RUNS: &str = "2";
const MAX_QUEUED_RUNS: &str = "8";

const MIB: usize = 1024 * 1024;

/// The resident set of a process, from `/proc/<pid>/status` (`VmRSS`, in kB).
fn rss_bytes(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status (process gone?):\n{status}"));
    kb * 1024
}

/// After each case: the process is alive, health answers SERVING, a normal Retrieve (fast
/// profile, top_n 3) answers with citations within [`ANSWER_BOUND`], and the RSS is under the
/// cap (printed, for the notes).
async fn still_serving(daemon: &mut Daemon, channel: &Channel, case: &str) {
    if let Ok(Some(status)) = daemon.child.try_wait() {
        panic!(
            "after {case}: the daemon exited ({status}); log:\n{}",
            daemon.log()
        );
    }
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "orkeon.v1.KnowledgeService", "orkeon.v1.CrewService"] {
        let status = tokio::time::timeout(
            ANSWER_BOUND,
            health.check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("after {case}: health check of '{service}' hung"))
        .unwrap_or_else(|e| panic!("after {case}: health check of '{service}' failed: {e}"))
        .into_inner();
        assert_eq!(
            status.status,
            ServingStatus::Serving as i32,
            "after {case}: '{service}'"
        );
    }
    let mut knowledge = KnowledgeServiceClient::new(channel.clone());
    let answer = tokio::time::timeout(
        ANSWER_BOUND,
        knowledge.retrieve(pb::QueryRequest {
            collection: "product-kb".into(),
            query: "How long is the warranty on frames?".into(),
            profile: "fast".into(),
            top_n: 3,
            ..Default::default()
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("after {case}: a normal Retrieve hung past {ANSWER_BOUND:?}"))
    .unwrap_or_else(|e| panic!("after {case}: a normal Retrieve failed: {e}"))
    .into_inner();
    assert!(!answer.citations.is_empty(), "after {case}: {answer:?}");
    assert!(answer.citations.len() <= 3, "after {case}: {answer:?}");
    let rss = rss_bytes(daemon.child.id());
    println!(
        "abuse: after {case}: daemon RSS {:.1} MiB (cap {} MiB)",
        rss as f64 / MIB as f64,
        RSS_CAP_BYTES / MIB as u64
    );
    assert!(
        rss < RSS_CAP_BYTES,
        "after {case}: daemon RSS {rss} bytes is over the cap of {RSS_CAP_BYTES}"
    );
}

/// Asserts `error` has `code` and its message names `needle`.
fn assert_refused(error: &tonic::Status, code: Code, needle: &str) {
    assert_eq!(error.code(), code, "{error:?}");
    assert!(
        error.message().contains(needle),
        "the message should name {needle}: {}",
        error.message()
    );
}

/// One HTTP/2 frame: 24-bit length, type, flags, stream id.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut frame = len.to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Opens `WatchRun(run_id)` on a raw HTTP/2 connection (literal HPACK headers, a hand-encoded
/// request), reads until the first response DATA frame — the stream is flowing — and resets
/// the TCP connection (SO_LINGER 0): no END_STREAM, no RST_STREAM, no GOAWAY.
async fn raw_watch_then_reset(addr: &str, run_id: &str) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[])); // SETTINGS, all defaults
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/orkeon.v1.CrewService/WatchRun"),
        (":authority", addr),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        // Literal header field without indexing, new name, no Huffman (lengths < 127).
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    out.extend(h2_frame(0x1, 0x4, 1, &block)); // HEADERS, END_HEADERS
    // WatchRunRequest { run_id = 1 (string), after_seq = 2 (varint 0) }.
    let mut message = vec![0x0A, run_id.len() as u8];
    message.extend_from_slice(run_id.as_bytes());
    message.extend_from_slice(&[0x10, 0x00]);
    let mut grpc = vec![0u8];
    grpc.extend_from_slice(&(message.len() as u32).to_be_bytes());
    grpc.extend_from_slice(&message);
    out.extend(h2_frame(0x0, 0x1, 1, &grpc)); // DATA, END_STREAM
    socket.write_all(&out).await.expect("write request");

    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let saw_data = tokio::time::timeout(ANSWER_BOUND, async {
        loop {
            // Frames complete in `buffer`: look for DATA on stream 1, ack SETTINGS.
            let mut at = 0;
            while buffer.len() >= at + 9 {
                let len =
                    u32::from_be_bytes([0, buffer[at], buffer[at + 1], buffer[at + 2]]) as usize;
                if buffer.len() < at + 9 + len {
                    break;
                }
                let (kind, flags) = (buffer[at + 3], buffer[at + 4]);
                let stream =
                    u32::from_be_bytes(buffer[at + 5..at + 9].try_into().unwrap()) & 0x7FFF_FFFF;
                if kind == 0x0 && stream == 1 && len > 0 {
                    return true;
                }
                if kind == 0x4 && flags & 0x1 == 0 {
                    socket
                        .write_all(&h2_frame(0x4, 0x1, 0, &[]))
                        .await
                        .expect("settings ack");
                }
                at += 9 + len;
            }
            buffer.drain(..at);
            let n = socket.read(&mut chunk).await.expect("read");
            if n == 0 {
                return false;
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("the raw WatchRun got an answer");
    assert!(
        saw_data,
        "the daemon closed the raw connection before any event"
    );
    socket.set_zero_linger().expect("linger 0");
    drop(socket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_requests_leave_the_daemon_serving_and_bounded() {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    fs::create_dir_all(crews.join("kb")).expect("mkdir");
    fs::create_dir_all(crews.join("uploads")).expect("mkdir");
    fs::write(crews.join("kb/faq.md"), FAQ).expect("write");
    fs::write(crews.join("support.yaml"), CREW).expect("write");
    let mut daemon = Daemon::start(
        work.path(),
        &work.path().join("data"),
        &crews,
        &[
            ("ORKEON_LLM__PROVIDER", "extractive"),
            ("ORKEON_LIMITS__MAX_CONCURRENT_RUNS", MAX_CONCURRENT_RUNS),
            ("ORKEON_LIMITS__MAX_QUEUED_RUNS", MAX_QUEUED_RUNS),
        ],
    );
    let url = daemon.url();
    let channel = Channel::from_shared(url.clone())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut knowledge = KnowledgeServiceClient::new(channel.clone());
    let mut crew_client = CrewServiceClient::new(channel.clone());

    // The collection every check retrieves from, ingested over gRPC.
    let report = knowledge
        .ingest(pb::IngestRequest {
            collection: "product-kb".into(),
            sources: vec![crews.join("kb/faq.md").display().to_string()],
            ..Default::default()
        })
        .await
        .expect("ingest the FAQ")
        .into_inner();
    assert_eq!(report.sources_ingested, 1, "{report:?}");
    still_serving(&mut daemon, &channel, "start").await;

    // 1. top_n far over the cap (u32::MAX used to abort the process): refused before any work.
    for top_n in [u32::MAX, 100_000] {
        for profile in ["balanced", "quality", "fast"] {
            let request = pb::QueryRequest {
                collection: "product-kb".into(),
                query: "warranty".into(),
                profile: profile.into(),
                top_n,
                ..Default::default()
            };
            let refused = knowledge
                .retrieve(request.clone())
                .await
                .expect_err("Retrieve: top_n over the limit");
            assert_refused(&refused, Code::InvalidArgument, "limits.max_top_n");
            let refused = knowledge
                .query(request)
                .await
                .expect_err("Query: top_n over the limit");
            assert_refused(&refused, Code::InvalidArgument, "limits.max_top_n");
        }
    }
    still_serving(
        &mut daemon,
        &channel,
        "case 1 (top_n = u32::MAX and 100000)",
    )
    .await;

    // 2. A 4 MB query (under the 4 MiB request limit): refused by the query-length limit. A
    // query of 4 MiB makes the message itself too large: refused by the request-size limit
    // while decoding, before the service sees it.
    let four_mb = "warranty ".repeat(4_000_000 / 9);
    let four_mib = "w".repeat(4 * MIB);
    for query in [true, false] {
        let request = |text: &str| pb::QueryRequest {
            collection: "product-kb".into(),
            query: text.into(),
            ..Default::default()
        };
        let call = |text: &str| {
            let mut client = knowledge.clone();
            let request = request(text);
            async move {
                if query {
                    client.query(request).await
                } else {
                    client.retrieve(request).await
                }
            }
        };
        let refused = call(&four_mb).await.expect_err("a 4 MB query");
        assert_refused(&refused, Code::InvalidArgument, "limits.max_query_bytes");
        let refused = call(&four_mib).await.expect_err("a 4 MiB query");
        assert_refused(&refused, Code::OutOfRange, "server.max_request_bytes");
    }
    still_serving(&mut daemon, &channel, "case 2 (4 MB and 4 MiB queries)").await;

    // 3. A flate-bomb PDF (2 GiB of zeros once inflated, ~2 MB on disk) ingested over gRPC next
    // to a sound file: the bomb is quarantined naming the limit it hit, the rest is ingested.
    let bomb = crews.join("uploads/bomb.pdf");
    fs::write(
        &bomb,
        one_page(
            "5 0 R",
            vec![PdfObject::Stream(
                "/Filter /FlateDecode".into(),
                zlib_bomb(2048),
            )],
        ),
    )
    .expect("write bomb");
    assert!(fs::metadata(&bomb).expect("bomb").len() < 4 * MIB as u64);
    fs::write(
        crews.join("uploads/sound.md"),
        "Sound notes: the depot opens at seven.",
    )
    .expect("write");
    let report = knowledge
        .ingest(pb::IngestRequest {
            collection: "uploads".into(),
            sources: vec![
                bomb.display().to_string(),
                crews.join("uploads/sound.md").display().to_string(),
            ],
            ..Default::default()
        })
        .await
        .expect("the ingest request itself succeeds")
        .into_inner();
    assert_eq!(report.sources_ingested, 1, "{report:?}");
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    let quarantined = &report.quarantined[0];
    assert!(quarantined.source.ends_with("bomb.pdf"), "{quarantined:?}");
    assert!(
        quarantined.reason.contains("limits.max_pdf_stream_bytes")
            || quarantined.reason.contains("limits.max_pdf_document_bytes"),
        "{quarantined:?}"
    );
    let listed = knowledge
        .list_quarantine(pb::ListQuarantineRequest {
            collection: "uploads".into(),
        })
        .await
        .expect("list quarantine")
        .into_inner();
    assert!(
        listed
            .entries
            .iter()
            .any(|e| e.source_id.ends_with("bomb.pdf") && e.reason.contains("limits.max_pdf_")),
        "{listed:?}"
    );
    still_serving(&mut daemon, &channel, "case 3 (flate-bomb PDF)").await;

    // 4. 1 000 concurrent kickoffs from one client over one channel: each is accepted or refused
    // by the queue bound, nothing else, and the burst ends.
    let burst = (0..1000).map(|i| {
        let mut client = crew_client.clone();
        tokio::spawn(async move {
            client
                .kickoff(pb::KickoffRequest {
                    crew: "support".into(),
                    inputs: [(
                        "question".to_string(),
                        format!("How many days do I have to return a bike? ({i})"),
                    )]
                    .into_iter()
                    .collect(),
                    idempotency_key: format!("burst-{i}"),
                })
                .await
        })
    });
    let results = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(burst))
        .await
        .expect("the burst of 1000 kickoffs ends");
    let mut accepted = Vec::new();
    let mut refused = 0;
    for result in results {
        match result.expect("join") {
            Ok(response) => {
                let response = response.into_inner();
                assert!(response.created, "{response:?}");
                accepted.push(response.run_id);
            }
            Err(status) => {
                assert_refused(&status, Code::ResourceExhausted, "limits.max_queued_runs");
                refused += 1;
            }
        }
    }
    println!(
        "abuse: 1000 concurrent kickoffs: {} accepted, {refused} refused (RESOURCE_EXHAUSTED)",
        accepted.len()
    );
    assert!(refused > 0, "the queue bound never bit");
    assert!(!accepted.is_empty(), "no kickoff was accepted");
    // Every accepted run ends.
    let ended = tokio::time::timeout(Duration::from_secs(300), async {
        for run_id in &accepted {
            loop {
                let run = crew_client
                    .get_run(pb::GetRunRequest {
                        run_id: run_id.clone(),
                    })
                    .await
                    .expect("get run")
                    .into_inner();
                if run.state != "running" {
                    assert_eq!(run.state, "finished", "{run:?}");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "accepted runs still running after 300 s");
    // ListRuns pages through exactly the accepted runs, none running.
    let mut listed = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = crew_client
            .list_runs(pb::ListRunsRequest {
                page_size: 200,
                page_token: page_token.clone(),
            })
            .await
            .expect("list runs")
            .into_inner();
        listed.extend(page.runs);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    let listed_ids: HashSet<&str> = listed.iter().map(|r| r.run_id.as_str()).collect();
    let accepted_ids: HashSet<&str> = accepted.iter().map(String::as_str).collect();
    assert_eq!(listed_ids, accepted_ids);
    assert!(listed.iter().all(|r| r.state != "running"));
    still_serving(&mut daemon, &channel, "case 4 (1000 concurrent kickoffs)").await;

    // 5. Clients that go away mid-stream. (a) tonic clients on their own connection: a
    // WatchRun of a finished run read for one event, a WatchRun of a running run, a health
    // Watch and a reflection stream, each dropped with its connection while the stream is open.
    let finished = accepted[0].clone();
    for round in 0..10 {
        let own = Channel::from_shared(url.clone())
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut crew = CrewServiceClient::new(own.clone());
        let mut events = crew
            .watch_run(pb::WatchRunRequest {
                run_id: finished.clone(),
                after_seq: 0,
            })
            .await
            .expect("watch")
            .into_inner();
        let first = events.message().await.expect("stream").expect("an event");
        assert_eq!(first.seq, 1);
        let running = crew
            .kickoff(pb::KickoffRequest {
                crew: "support".into(),
                inputs: [(
                    "question".to_string(),
                    "Where do orders ship from?".to_string(),
                )]
                .into_iter()
                .collect(),
                idempotency_key: format!("dropped-watch-{round}"),
            })
            .await
            .expect("kickoff")
            .into_inner();
        accepted.push(running.run_id.clone());
        let live = crew
            .watch_run(pb::WatchRunRequest {
                run_id: running.run_id,
                after_seq: 0,
            })
            .await
            .expect("watch a running run")
            .into_inner();
        let mut health = HealthClient::new(own.clone())
            .watch(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health watch")
            .into_inner();
        health.message().await.expect("health").expect("a status");
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::{
            ServerReflectionRequest, server_reflection_request::MessageRequest,
        };
        let (requests, receiver) = tokio::sync::mpsc::channel(1);
        requests
            .send(ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            })
            .await
            .expect("send");
        let mut reflection = ServerReflectionClient::new(own.clone())
            .server_reflection_info(tokio_stream_from(receiver))
            .await
            .expect("reflection")
            .into_inner();
        reflection
            .message()
            .await
            .expect("reflection")
            .expect("an answer");
        drop((own, crew, events, live, health, reflection, requests));
    }
    // (b) A raw HTTP/2 connection reset under an open WatchRun, on a finished and on a running
    // run.
    for round in 0..20 {
        raw_watch_then_reset(&daemon.addr, &finished).await;
        let running = crew_client
            .kickoff(pb::KickoffRequest {
                crew: "support".into(),
                inputs: [(
                    "question".to_string(),
                    "What does the warranty cover?".to_string(),
                )]
                .into_iter()
                .collect(),
                idempotency_key: format!("reset-watch-{round}"),
            })
            .await
            .expect("kickoff")
            .into_inner();
        accepted.push(running.run_id.clone());
        raw_watch_then_reset(&daemon.addr, &running.run_id).await;
    }
    // The runs whose watchers vanished still end, and their streams are whole.
    for run_id in &accepted {
        let events = tokio::time::timeout(Duration::from_secs(120), async {
            let mut stream = crew_client
                .watch_run(pb::WatchRunRequest {
                    run_id: run_id.clone(),
                    after_seq: 0,
                })
                .await
                .expect("watch")
                .into_inner();
            let mut events = Vec::new();
            while let Some(event) = stream.message().await.expect("stream") {
                events.push(event);
            }
            events
        })
        .await
        .expect("the run ends");
        assert_eq!(
            events.last().map(|e| e.r#type.as_str()),
            Some("run_finished"),
            "{run_id}"
        );
    }
    still_serving(&mut daemon, &channel, "case 5 (clients dropped mid-stream)").await;

    let log = daemon.log();
    assert!(
        !log.contains("panicked"),
        "a panic in the daemon log:\n{log}"
    );

    let status = daemon.terminate();
    assert!(status.success(), "the daemon exits cleanly: {status}");
}

/// A request stream from a channel receiver (the reflection call is bidirectional).
fn tokio_stream_from<T: Send + 'static>(
    mut receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}
