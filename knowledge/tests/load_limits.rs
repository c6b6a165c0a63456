//! Loader limits on real generated files: a flate-bomb PDF (gigabytes once inflated, a few MB
//! on disk) refused with the limit it hit and without inflating it, bombs hidden in object
//! streams (lopdf inflates those while loading), a PDF over the page cap, a page repeating one
//! stream, a CSV over the row cap, an oversized text, and the ingestion pipeline quarantining
//! such a source while the rest of the request is ingested.

use std::io::Write;
use std::sync::Arc;

use flate2::Compression;
use orkeon_knowledge::embed::HashEmbedder;
use orkeon_knowledge::ingest::{IngestRequest, IngestionPipeline};
use orkeon_knowledge::load::{LoadError, RawSource, SourceKind, SourceLocation, SourceRef, parse};
use orkeon_knowledge::settings::{IngestionSettings, LoadLimits, StoreSettings};
use orkeon_knowledge::store::{DocumentStore, EmbeddedStore};
use orkeon_testkit::pdf::{PdfObject as Obj, one_page, pdf, zlib_bomb};

const MIB: usize = 1024 * 1024;

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(data).expect("deflate");
    encoder.finish().expect("deflate")
}

/// A PDF of `pages` pages, each saying its number.
fn pages(count: usize) -> Vec<u8> {
    let kids: Vec<String> = (0..count).map(|i| format!("{} 0 R", 4 + 2 * i)).collect();
    let mut objects = vec![
        Obj::Dict("<< /Type /Catalog /Pages 2 0 R >>".into()),
        Obj::Dict(format!(
            "<< /Type /Pages /Kids [{}] /Count {count} >>",
            kids.join(" ")
        )),
        Obj::Dict("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into()),
    ];
    for i in 0..count {
        objects.push(Obj::Dict(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
            5 + 2 * i
        )));
        let text = format!("BT /F1 12 Tf 72 720 Td (Page number {}) Tj ET", i + 1);
        objects.push(Obj::Stream(String::new(), text.into_bytes()));
    }
    pdf(&objects)
}

fn source(name: &str) -> SourceRef {
    SourceRef {
        id: name.into(),
        location: SourceLocation::File(format!("/k/{name}").into()),
    }
}

fn load(
    name: &str,
    kind: SourceKind,
    bytes: Vec<u8>,
    limits: &LoadLimits,
) -> Result<usize, LoadError> {
    let raw = RawSource {
        bytes,
        kind,
        content_type: None,
    };
    parse(&source(name), &raw, limits).map(|documents| documents.len())
}

/// The error is the limit `key`, and its message names the source and the key.
fn assert_over(result: Result<usize, LoadError>, name: &str, key: &str) {
    let error = result.expect_err("over the limit");
    assert!(
        matches!(&error, LoadError::OverLimit { key: k, .. } if *k == key),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains(name) && message.contains(key), "{message}");
}

#[test]
fn a_flate_bomb_pdf_is_refused_with_the_default_limits_without_inflating_it() {
    // 2 GiB of zeros once inflated, ~2 MB on disk (under rag.ingestion.max_document_bytes).
    let bomb = zlib_bomb(2048);
    assert!(bomb.len() < 4 * MIB, "{}", bomb.len());
    let file = one_page(
        "5 0 R",
        vec![Obj::Stream("/Filter /FlateDecode".into(), bomb)],
    );
    assert_over(
        load("bomb.pdf", SourceKind::Pdf, file, &LoadLimits::default()),
        "bomb.pdf",
        "limits.max_pdf_stream_bytes",
    );
}

#[test]
fn compressed_pages_within_the_limits_are_read() {
    let text = b"BT /F1 12 Tf 72 720 Td (Refunds are paid within thirty days.) Tj ET".to_vec();
    let file = one_page(
        "5 0 R",
        vec![Obj::Stream("/Filter /FlateDecode".into(), zlib(&text))],
    );
    let raw = RawSource {
        bytes: file,
        kind: SourceKind::Pdf,
        content_type: None,
    };
    let documents = parse(&source("ok.pdf"), &raw, &LoadLimits::default()).expect("parses");
    assert!(
        documents[0].text.contains("Refunds are paid"),
        "{}",
        documents[0].text
    );
}

#[test]
fn streams_are_bounded_one_by_one_and_in_total() {
    let limits = LoadLimits {
        max_pdf_stream_bytes: 2 * MIB,
        max_pdf_document_bytes: 5 * MIB,
        ..LoadLimits::default()
    };
    // Each of three 1 MiB streams is fine, but a fourth and fifth take the document past 5 MiB.
    let padding = |n: usize| {
        (0..n)
            .map(|_| Obj::Stream("/Filter /FlateDecode".into(), zlib_bomb(1)))
            .collect::<Vec<_>>()
    };
    let text = b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET".to_vec();
    let mut extra = vec![Obj::Stream(String::new(), text)];
    extra.extend(padding(3));
    assert_eq!(
        load(
            "three.pdf",
            SourceKind::Pdf,
            one_page("5 0 R", extra),
            &limits
        )
        .unwrap(),
        1
    );

    let mut extra = vec![Obj::Stream(String::new(), b"BT ET".to_vec())];
    extra.extend(padding(6));
    assert_over(
        load(
            "six.pdf",
            SourceKind::Pdf,
            one_page("5 0 R", extra),
            &limits,
        ),
        "six.pdf",
        "limits.max_pdf_document_bytes",
    );

    // One stream of 3 MiB: over the stream limit.
    let extra = vec![Obj::Stream("/Filter /FlateDecode".into(), zlib_bomb(3))];
    assert_over(
        load(
            "big.pdf",
            SourceKind::Pdf,
            one_page("5 0 R", extra),
            &limits,
        ),
        "big.pdf",
        "limits.max_pdf_stream_bytes",
    );
}

#[test]
fn bombs_in_object_streams_are_refused_before_lopdf_loads_them() {
    let limits = LoadLimits {
        max_pdf_stream_bytes: MIB,
        ..LoadLimits::default()
    };
    // lopdf inflates object streams while loading the file: the name must be found in the raw
    // bytes, also when spelled with `#xx` escapes or behind an unreadable dictionary.
    for (name, dict) in [
        (
            "objstm.pdf",
            "/Type /ObjStm /N 1 /First 4 /Filter /FlateDecode",
        ),
        (
            "escaped.pdf",
            "/Type /Obj#53tm /N 1 /First 4 /Filter /Flate#44ecode",
        ),
        (
            "xref.pdf",
            "/Type /XRef /Size 6 /W [1 2 1] /Filter /FlateDecode",
        ),
        ("odd.pdf", "/Type /ObjStm /X ] /Filter /FlateDecode"),
    ] {
        let file = one_page(
            "6 0 R",
            vec![
                Obj::Stream(dict.into(), zlib_bomb(64)),
                Obj::Stream(String::new(), b"BT /F1 12 Tf (x) Tj ET".to_vec()),
            ],
        );
        assert_over(
            load(name, SourceKind::Pdf, file, &limits),
            name,
            "limits.max_pdf_stream_bytes",
        );
    }
}

#[test]
fn a_pdf_over_the_page_cap_is_refused() {
    let limits = LoadLimits {
        max_pdf_pages: 3,
        ..LoadLimits::default()
    };
    assert_eq!(
        load("three.pdf", SourceKind::Pdf, pages(3), &limits).unwrap(),
        3
    );
    assert_over(
        load("four.pdf", SourceKind::Pdf, pages(4), &limits),
        "four.pdf",
        "limits.max_pdf_pages",
    );
}

#[test]
fn a_page_repeating_one_stream_is_bounded_by_the_document_limit() {
    let limits = LoadLimits {
        max_pdf_stream_bytes: MIB,
        max_pdf_document_bytes: 4 * MIB,
        ..LoadLimits::default()
    };
    // One 512 KiB stream listed 16 times as the page's contents: 8 MiB of content to draw.
    let mut content = b"BT /F1 12 Tf (x) Tj ET\n".to_vec();
    content.resize(512 * 1024, b' ');
    let repeated = format!("[{}]", vec!["5 0 R"; 16].join(" "));
    let file = one_page(
        &repeated,
        vec![Obj::Stream("/Filter /FlateDecode".into(), zlib(&content))],
    );
    assert_over(
        load("repeat.pdf", SourceKind::Pdf, file, &limits),
        "repeat.pdf",
        "limits.max_pdf_document_bytes",
    );
}

#[test]
fn a_csv_over_the_row_cap_is_refused_and_one_at_the_cap_is_read() {
    let limits = LoadLimits {
        max_csv_rows: 100,
        ..LoadLimits::default()
    };
    let csv = |rows: usize| {
        let mut text = String::from("city,hours\n");
        for i in 0..rows {
            text.push_str(&format!("City {i},9-18\n"));
        }
        text.into_bytes()
    };
    assert_eq!(
        load("ok.csv", SourceKind::Csv, csv(100), &limits).unwrap(),
        100
    );
    assert_over(
        load("rows.csv", SourceKind::Csv, csv(101), &limits),
        "rows.csv",
        "limits.max_csv_rows",
    );
}

#[test]
fn text_and_html_over_the_byte_cap_are_refused() {
    let limits = LoadLimits {
        max_text_bytes: 1_000,
        ..LoadLimits::default()
    };
    assert_eq!(
        load("ok.md", SourceKind::Markdown, vec![b'a'; 1_000], &limits).unwrap(),
        1
    );
    for (name, kind) in [
        ("big.txt", SourceKind::Text),
        ("big.md", SourceKind::Markdown),
        ("big.html", SourceKind::Html),
    ] {
        assert_over(
            load(name, kind, vec![b'a'; 1_001], &limits),
            name,
            "limits.max_text_bytes",
        );
    }
}

#[tokio::test]
async fn the_pipeline_quarantines_a_source_over_a_limit_and_ingests_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).expect("mkdir");
    std::fs::write(
        corpus.join("refunds.md"),
        "# Refunds\n\nRefunds within 30 days.\n",
    )
    .expect("write");
    let bomb = one_page(
        "5 0 R",
        vec![Obj::Stream("/Filter /FlateDecode".into(), zlib_bomb(1024))],
    );
    std::fs::write(corpus.join("bomb.pdf"), bomb).expect("write");

    let store = Arc::new(
        EmbeddedStore::open(&dir.path().join("data"), StoreSettings::default()).expect("store"),
    );
    let pipeline = IngestionPipeline::new(
        store.clone() as Arc<dyn DocumentStore>,
        Arc::new(HashEmbedder::named("hash", 64)),
        store.quarantine().expect("quarantine"),
        IngestionSettings::default(),
    );
    let report = pipeline
        .ingest(
            &IngestRequest {
                collection: "kb".into(),
                base_dir: corpus.clone(),
                sources: vec!["*".into()],
                chunking: None,
                reindex: false,
                mode: Default::default(),
            },
            None,
        )
        .await
        .expect("the request succeeds");
    assert_eq!(report.sources_ingested, 1, "{report:?}");
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].source, "bomb.pdf");
    assert!(
        report.quarantined[0]
            .reason
            .contains("limits.max_pdf_stream_bytes"),
        "{}",
        report.quarantined[0].reason
    );
}
