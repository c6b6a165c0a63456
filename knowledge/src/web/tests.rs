//! The web retriever against a fake SearxNG on loopback (configured as the endpoint, so the
//! guard allows it): search request, guarded downloads, the injection validator and the SSRF
//! guard, with real HTTP over real sockets.

use std::time::Duration;

use orkeon_testkit::FakeWeb;
use orkeon_testkit::searxng::SECRET;
use reqwest::Url;

use super::search_retriever::{DEFAULT_MAX_REDIRECTS, best_passage};
use super::*;
use crate::query::options::WebFallbackSettings;
use crate::settings::SuspiciousAction;
use crate::types::ScoreOrigin;

fn config(endpoint: &str, action: SuspiciousAction) -> WebSearchConfig {
    WebSearchConfig {
        endpoint: Url::parse(endpoint).unwrap(),
        api_key: Some("test-key-123".into()),
        max_results: 10,
        timeout: Duration::from_secs(5),
        suspicious_action: action,
        max_page_bytes: 64 * 1024,
        max_redirects: DEFAULT_MAX_REDIRECTS,
    }
}

fn outcome_of<'a>(found: &'a WebRetrieval, path: &str) -> &'a PageReport {
    found
        .pages
        .iter()
        .find(|p| p.url.ends_with(path))
        .unwrap_or_else(|| panic!("no report for {path}: {:?}", found.pages))
}

#[tokio::test]
async fn pages_are_validated_and_private_addresses_refused() {
    let web = FakeWeb::start().await.expect("fake web");
    let retriever =
        WebSearchRetriever::new(config(&web.searxng.base_url(), SuspiciousAction::Flag)).unwrap();
    let found = retriever
        .retrieve("How long does the backup generator run?", 10)
        .await
        .unwrap();

    // The search request: GET /search?q=…&format=json with the key, which pages never get.
    let requests = web.searxng.requests();
    let search = &requests[0];
    assert_eq!(search.method, "GET");
    assert!(
        search
            .path
            .starts_with("/search?q=How+long+does+the+backup+generator+run%3F&format=json"),
        "{}",
        search.path
    );
    assert_eq!(search.header("authorization"), Some("Bearer test-key-123"));
    assert!(
        requests[1..]
            .iter()
            .all(|r| r.header("authorization").is_none())
    );

    assert_eq!(found.results_found, 6);
    assert_eq!(
        outcome_of(&found, "/pages/power.html").outcome,
        PageOutcome::Used
    );
    let injected = outcome_of(&found, "/pages/faq.html");
    assert_eq!(injected.outcome, PageOutcome::Rejected);
    assert!(
        injected
            .reason
            .as_deref()
            .unwrap()
            .contains("instruction override")
    );
    let private = outcome_of(&found, "/secret.html");
    assert_eq!(private.outcome, PageOutcome::Refused);
    assert!(
        private.reason.as_deref().unwrap().contains("loopback"),
        "{private:?}"
    );
    let ten = outcome_of(&found, "/internal.html");
    assert_eq!(ten.outcome, PageOutcome::Refused);
    assert!(
        ten.reason.as_deref().unwrap().contains("private address"),
        "{ten:?}"
    );
    // A redirect to the private server is refused at the redirect hop.
    let moved = outcome_of(&found, "/pages/moved");
    assert_eq!(moved.outcome, PageOutcome::Refused);
    assert_eq!(
        outcome_of(&found, "/pages/fuel.html").outcome,
        PageOutcome::Flagged
    );
    // The private server was never contacted.
    assert!(web.private.requests().is_empty());

    // Two chunks: the clean page, then the flagged one; Rejected content never leaves.
    assert_eq!(found.chunks.len(), 2);
    let good = &found.chunks[0];
    assert_eq!(good.origin, ScoreOrigin::Web);
    assert!(good.chunk.source_id.ends_with("/pages/power.html"));
    assert!(
        good.chunk.text.contains("runs for up to 12 hours"),
        "{}",
        good.chunk.text
    );
    assert_eq!(good.chunk.metadata["origin"], "web");
    assert_eq!(good.chunk.metadata["title"], "Power notes");
    assert_eq!(good.score, 1.0);
    let flagged = &found.chunks[1];
    assert_eq!(flagged.chunk.metadata["flagged"], "suspicious");
    assert!(flagged.chunk.metadata["flag_reasons"].contains("instruction override"));
    assert!(flagged.score < good.score);
    for chunk in &found.chunks {
        assert!(!chunk.chunk.text.contains("PWNED"), "{}", chunk.chunk.text);
        assert!(!chunk.chunk.text.contains(SECRET));
    }
}

#[tokio::test]
async fn suspicious_pages_can_be_dropped_and_results_are_capped() {
    let web = FakeWeb::start().await.expect("fake web");
    let retriever =
        WebSearchRetriever::new(config(&web.searxng.base_url(), SuspiciousAction::Drop)).unwrap();
    let found = retriever.retrieve("backup generator", 10).await.unwrap();
    assert_eq!(
        outcome_of(&found, "/pages/fuel.html").outcome,
        PageOutcome::DroppedSuspicious
    );
    assert_eq!(found.chunks.len(), 1);

    // One page wanted: the first usable result ends the downloads.
    let found = retriever.retrieve("backup generator", 1).await.unwrap();
    assert_eq!(found.chunks.len(), 1);
    assert_eq!(found.pages.len(), 1);
}

#[tokio::test]
async fn oversized_pages_and_a_broken_endpoint_are_reported() {
    let web = FakeWeb::start().await.expect("fake web");
    let mut small = config(&web.searxng.base_url(), SuspiciousAction::Flag);
    small.max_page_bytes = 64;
    let retriever = WebSearchRetriever::new(small).unwrap();
    // The search answer itself is over 64 bytes: the endpoint's failure is an error.
    let err = retriever.retrieve("generator", 3).await.unwrap_err();
    assert!(matches!(err, WebError::TooLarge { .. }), "{err}");

    let mut missing = config(&web.searxng.base_url(), SuspiciousAction::Flag);
    missing.endpoint = Url::parse(&format!("{}/nowhere/", web.searxng.base_url())).unwrap();
    let err = WebSearchRetriever::new(missing)
        .unwrap()
        .retrieve("generator", 3)
        .await
        .unwrap_err();
    assert!(matches!(err, WebError::Status { status: 404, .. }), "{err}");
}

#[test]
fn the_transport_is_built_only_when_enabled_and_configured() {
    let disabled = WebFallbackSettings::default();
    assert!(
        WebSearchRetriever::from_settings(&disabled)
            .unwrap()
            .is_none()
    );
    let unconfigured = WebFallbackSettings {
        enabled: true,
        ..WebFallbackSettings::default()
    };
    assert!(
        WebSearchRetriever::from_settings(&unconfigured)
            .unwrap()
            .is_none()
    );

    let mut configured = WebFallbackSettings {
        enabled: true,
        endpoint: Some("http://127.0.0.1:8888".into()),
        ..WebFallbackSettings::default()
    };
    assert!(
        WebSearchRetriever::from_settings(&configured)
            .unwrap()
            .is_some()
    );

    configured.api_key_env = Some("ORKEON_TEST_SURELY_UNSET_SEARX_KEY".into());
    let err = WebSearchRetriever::from_settings(&configured).unwrap_err();
    assert!(
        err.to_string()
            .contains("ORKEON_TEST_SURELY_UNSET_SEARX_KEY"),
        "{err}"
    );

    // The key comes from the named variable and is never printed.
    configured.api_key_env = Some("PATH".into());
    let retriever = WebSearchRetriever::from_settings(&configured)
        .unwrap()
        .unwrap();
    let shown = format!("{retriever:?}");
    assert!(shown.contains("<set>"), "{shown}");
    assert!(!shown.contains(&std::env::var("PATH").unwrap()), "{shown}");

    configured.endpoint = Some("not a url".into());
    let err = WebSearchRetriever::from_settings(&configured).unwrap_err();
    assert!(
        err.to_string().contains("rag.web_fallback.endpoint"),
        "{err}"
    );
    configured.endpoint = Some("ftp://example.org".into());
    assert!(WebSearchRetriever::from_settings(&configured).is_err());
}

#[test]
fn the_best_passage_is_the_window_sharing_most_words_with_the_question() {
    let text = "Welcome to our site. Cookies are used. The backup generator runs for 12 hours. \
                It needs diesel. Contact us.";
    let (start, end) = best_passage(text, "How long does the generator run?", 60);
    assert_eq!(
        &text[start..end],
        "The backup generator runs for 12 hours. It needs diesel."
    );
    // No overlap at all: the first window.
    let (start, end) = best_passage(text, "pricing", 40);
    assert_eq!(&text[start..end], "Welcome to our site. Cookies are used.");
    // One overlong sentence is cut at the limit.
    let long = "a".repeat(100);
    let (start, end) = best_passage(&long, "a", 10);
    assert_eq!(end - start, 10);
    assert_eq!(best_passage("", "q", 10), (0, 0));
}
