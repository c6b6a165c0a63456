//! Property-based fuzzing (proptest, stable Rust) of everything in the knowledge crate that
//! reads input from outside: the PDF, CSV, HTML and text loaders (arbitrary bytes, and valid
//! PDFs mutated byte by byte and token by token), the LLM output parsers, the SearxNG answer
//! parser and source-glob expansion. Each target runs a bounded number of cases (a few seconds
//! in a debug build) and checks that nothing panics, that limits hold and that what comes out
//! is well-formed; the pathological inputs found while writing them (quadratic scans) are kept
//! as fixed cases at sizes that a quadratic algorithm could not finish.

use std::io::Write;
use std::path::{Path, PathBuf};

use orkeon_knowledge::load::{
    RawSource, SourceKind, SourceLocation, SourceRef, expand_sources, parse,
};
use orkeon_knowledge::query::llm_output::{
    extract_json, json_string_list, parse_passages, parse_ranking, parse_variants, strip_code_fence,
};
use orkeon_knowledge::settings::{IngestionSettings, LoadLimits};
use orkeon_knowledge::web::searxng::parse_results;
use orkeon_testkit::pdf::{PdfObject as Obj, pdf};
use proptest::prelude::*;
use reqwest::Url;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn source(name: &str) -> SourceRef {
    SourceRef {
        id: name.into(),
        location: SourceLocation::File(format!("/fuzz/{name}").into()),
    }
}

fn small_limits() -> LoadLimits {
    LoadLimits {
        max_pdf_pages: 4,
        max_pdf_stream_bytes: 256 * 1024,
        max_pdf_document_bytes: 1024 * 1024,
        max_csv_rows: 50,
        max_text_bytes: 8 * 1024,
    }
}

/// Parses and checks the loader's promises: the source id prefix, the part caps.
fn parse_checked(kind: SourceKind, bytes: Vec<u8>, limits: &LoadLimits) {
    let name = format!("input.{}", kind.as_str());
    let raw = RawSource {
        bytes,
        kind,
        content_type: None,
    };
    if let Ok(documents) = parse(&source(&name), &raw, limits) {
        for document in &documents {
            assert!(
                document.source_id.starts_with(&name),
                "{}",
                document.source_id
            );
            assert_eq!(document.loader, kind.as_str());
        }
        match kind {
            SourceKind::Csv => assert!(documents.len() <= limits.max_csv_rows),
            SourceKind::Pdf => assert!(documents.len() <= limits.max_pdf_pages),
            _ => {
                assert_eq!(documents.len(), 1);
                assert!(raw.bytes.len() <= limits.max_text_bytes);
            }
        }
    }
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).expect("deflate");
    encoder.finish().expect("deflate")
}

/// A valid two-page PDF with a compressed content stream and a form XObject: the seed the
/// mutations start from.
fn seed_pdf() -> Vec<u8> {
    let page_text = zlib(b"BT /F1 12 Tf 72 720 Td (Seed page one) Tj ET /X1 Do");
    let dict = |text: &str| Obj::Dict(text.to_string());
    pdf(&[
        dict("<< /Type /Catalog /Pages 2 0 R >>"),
        dict("<< /Type /Pages /Kids [3 0 R 6 0 R] /Count 2 >>"),
        dict(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> /XObject << /X1 7 0 R >> >> /Contents 5 0 R >>",
        ),
        dict("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"),
        Obj::Stream("/Filter /FlateDecode".into(), page_text),
        dict(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 8 0 R >>",
        ),
        Obj::Stream(
            "/Type /XObject /Subtype /Form /BBox [0 0 100 100] /Resources << /Font << /F1 4 0 R >> >>".into(),
            b"BT /F1 9 Tf (form text) Tj ET".to_vec(),
        ),
        Obj::Stream(String::new(), b"BT /F1 12 Tf (Seed page two) Tj ET".to_vec()),
    ])
}

/// PDF tokens a mutation may splice in: the ones that steer lopdf and the pre-scan.
const PDF_TOKENS: &[&str] = &[
    "/ObjStm",
    "/XRef",
    "/Encrypt",
    "/FlateDecode",
    "/LZWDecode",
    "/ASCII85Decode",
    "stream\n",
    "endstream",
    " obj ",
    "<<",
    ">>",
    "[",
    "]",
    "(",
    ")",
    "/Length 999999999",
    "/Length -1",
    " 5 0 R ",
    "/DecodeParms << /Predictor 12 /Columns 99999999 >>",
    "/Type /Page",
    "%",
    "/Kids [3 0 R 3 0 R]",
    "/Parent 2 0 R",
    "#53",
    "xref",
    "startxref\n0\n%%EOF",
];

#[derive(Debug, Clone)]
enum Mutation {
    SetByte(usize, u8),
    Insert(usize, usize),
    Delete(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::SetByte(at, b)),
        (any::<usize>(), 0..PDF_TOKENS.len()).prop_map(|(at, t)| Mutation::Insert(at, t)),
        (any::<usize>(), 1usize..64).prop_map(|(at, n)| Mutation::Delete(at, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        if bytes.is_empty() {
            break;
        }
        let len = bytes.len();
        match *mutation {
            Mutation::SetByte(at, b) => bytes[at % len] = b,
            Mutation::Insert(at, token) => {
                let at = at % len;
                bytes.splice(at..at, PDF_TOKENS[token].bytes());
            }
            Mutation::Delete(at, n) => {
                let at = at % len;
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Truncate(at) => bytes.truncate(at % len),
        }
    }
    bytes
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn text_html_and_csv_loaders_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        for kind in [SourceKind::Text, SourceKind::Markdown, SourceKind::Html, SourceKind::Csv] {
            parse_checked(kind, bytes.clone(), &small_limits());
        }
    }

    #[test]
    fn text_html_and_csv_loaders_take_any_text(text in "(?s).{0,2048}") {
        for kind in [SourceKind::Text, SourceKind::Markdown, SourceKind::Html, SourceKind::Csv] {
            parse_checked(kind, text.clone().into_bytes(), &small_limits());
        }
    }

    #[test]
    fn csv_rows_stay_under_the_cap(rows in proptest::collection::vec("[a-z\",; ]{0,12}(,[a-z\" ]{0,8}){0,4}", 0..120)) {
        let text = format!("name,value\n{}", rows.join("\n"));
        parse_checked(SourceKind::Csv, text.into_bytes(), &small_limits());
    }

    #[test]
    fn html_structures_never_break_the_loader(parts in proptest::collection::vec(
        prop_oneof![
            Just("<div>".to_string()), Just("</div>".to_string()), Just("<p hidden>".to_string()),
            Just("<script>".to_string()), Just("</script>".to_string()), Just("<pre>".to_string()),
            Just("<table><tr><td>".to_string()), Just("<h1>".to_string()), Just("<!--".to_string()),
            Just("<title>".to_string()), Just("<svg><g>".to_string()), "[a-z ]{0,10}",
            Just("<span style=\"display:none\">".to_string()),
        ],
        0..300,
    )) {
        parse_checked(SourceKind::Html, parts.concat().into_bytes(), &small_limits());
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn the_pdf_loader_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut with_header = b"%PDF-1.4\n".to_vec();
        with_header.extend_from_slice(&bytes);
        parse_checked(SourceKind::Pdf, bytes, &small_limits());
        parse_checked(SourceKind::Pdf, with_header, &small_limits());
    }

    #[test]
    fn the_pdf_loader_takes_mutated_pdfs(mutations in proptest::collection::vec(mutation(), 1..8)) {
        parse_checked(SourceKind::Pdf, mutate(seed_pdf(), &mutations), &small_limits());
        parse_checked(SourceKind::Pdf, mutate(seed_pdf(), &mutations), &LoadLimits::default());
    }
}

#[test]
fn the_seed_pdf_parses() {
    let raw = RawSource {
        bytes: seed_pdf(),
        kind: SourceKind::Pdf,
        content_type: None,
    };
    let documents = parse(&source("seed.pdf"), &raw, &LoadLimits::default()).expect("parses");
    assert_eq!(documents.len(), 2);
    assert!(
        documents[0].text.contains("Seed page one"),
        "{}",
        documents[0].text
    );
    assert!(
        documents[1].text.contains("Seed page two"),
        "{}",
        documents[1].text
    );
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn llm_output_parsers_take_any_text(text in "(?s).{0,512}", m in 0usize..20, max in 0usize..6) {
        let _ = strip_code_fence(&text);
        if let Some(value) = extract_json(&text) {
            prop_assert!(value.is_array() || value.is_object());
        }
        if let Some(list) = json_string_list(&text) {
            prop_assert!(!list.is_empty());
        }
        let variants = parse_variants(&text, "original question", max);
        prop_assert!(variants.len() <= max);
        prop_assert!(variants.iter().all(|v| !v.is_empty()));
        let passages = parse_passages(&text, max);
        prop_assert!(passages.len() <= max);
        if let Some(order) = parse_ranking(&text, m) {
            prop_assert!(!order.is_empty());
            prop_assert!(order.iter().all(|&i| i < m));
            let mut unique = order.clone();
            unique.sort_unstable();
            unique.dedup();
            prop_assert_eq!(unique.len(), order.len());
        }
    }

    #[test]
    fn llm_output_parsers_take_json_shaped_text(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("[".to_string()), Just("]".to_string()), Just("{".to_string()),
                Just("}".to_string()), Just("\"".to_string()), Just("\\".to_string()),
                Just(",".to_string()), Just(":".to_string()), Just("```json\n".to_string()),
                Just("```".to_string()), "[0-9]{1,3}", "[a-z ]{0,6}",
            ],
            0..200,
        ),
        m in 0usize..10,
    ) {
        let text = parts.concat();
        let _ = extract_json(&text);
        let _ = parse_variants(&text, "q", 5);
        if let Some(order) = parse_ranking(&text, m) {
            prop_assert!(order.iter().all(|&i| i < m));
        }
    }

    #[test]
    fn searxng_answers_of_any_shape_are_read_or_refused(body in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let url = Url::parse("http://127.0.0.1:8888/search").unwrap();
        let _ = parse_results(&url, &body);
    }

    #[test]
    fn searxng_results_keep_only_unique_http_urls(
        results in proptest::collection::vec(
            (prop_oneof![
                "https?://[a-z]{1,3}\\.example/[a-z]{0,3}",
                "(ftp|file|javascript|data):[a-z/]{0,8}",
                "[ -~]{0,16}",
            ], "[ -~]{0,12}"),
            0..40,
        )
    ) {
        let items: Vec<serde_json::Value> = results
            .iter()
            .map(|(url, title)| serde_json::json!({"url": url, "title": title, "content": title}))
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({"results": items})).unwrap();
        let url = Url::parse("http://127.0.0.1:8888/search").unwrap();
        let parsed = parse_results(&url, &body).expect("a results array is read");
        let mut seen = std::collections::HashSet::new();
        for result in &parsed {
            prop_assert!(matches!(result.url.scheme(), "http" | "https"));
            prop_assert!(seen.insert(result.url.clone()), "duplicate {}", result.url);
        }
    }
}

/// Inputs a quadratic scan could not finish: they must simply complete.
#[test]
fn pathological_parser_inputs_complete() {
    // 1 MB of unclosed brackets: every start used to scan to the end (quadratic).
    let brackets = "[".repeat(1 << 20);
    assert_eq!(extract_json(&brackets), None);
    let _ = parse_ranking(&brackets, 10);
    let nested = format!("{}{}", "[".repeat(1 << 18), "]".repeat(1 << 18));
    let _ = extract_json(&nested);
    // 200 000 distinct search results: duplicates used to be found by a linear search each.
    let items: Vec<serde_json::Value> = (0..200_000)
        .map(|i| serde_json::json!({"url": format!("https://e.example/{i}")}))
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({"results": items})).unwrap();
    let url = Url::parse("http://127.0.0.1:8888/search").unwrap();
    assert_eq!(parse_results(&url, &body).unwrap().len(), 200_000);
}

/// base/{a.md, docs/b.md, docs/deep/c.txt, odd [x]/d.md}, sibling outside/secret.md, and a
/// symlink base/link → outside.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("base");
    for file in ["a.md", "docs/b.md", "docs/deep/c.txt", "odd [x]/d.md"] {
        let path = base.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.md"), "secret").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.path().join("outside"), base.join("link")).unwrap();
    (dir, base)
}

fn inside(base: &Path, path: &Path) -> bool {
    let canonical_base = base.canonicalize().unwrap();
    path.canonicalize()
        .is_ok_and(|p| p.starts_with(&canonical_base))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn source_globs_never_escape_the_root(patterns in proptest::collection::vec(
        "(\\.\\./|/|\\./)?([a-z.*?\\[\\]{}!, -]{0,6}/){0,3}[a-z.*?\\[\\]{}!-]{0,8}",
        1..4,
    )) {
        let (_dir, base) = tree();
        let settings = IngestionSettings::default();
        if let Ok(expansion) = expand_sources(&base, &patterns, &settings) {
            for source in &expansion.sources {
                let SourceLocation::File(path) = &source.location else {
                    panic!("a URL from {patterns:?}");
                };
                prop_assert!(inside(&base, path), "{} escapes via {patterns:?}", path.display());
                prop_assert!(!source.id.starts_with('/') && !source.id.split('/').any(|c| c == ".."), "{}", source.id);
            }
            let mut ids: Vec<&str> = expansion.sources.iter().map(|s| s.id.as_str()).collect();
            let sorted = ids.clone();
            ids.dedup();
            prop_assert_eq!(ids, sorted);
        }
    }
}
