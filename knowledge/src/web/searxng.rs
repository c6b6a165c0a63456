//! The SearxNG-compatible search request and the reading of its JSON answer:
//! `GET {endpoint}/search?q=<question>&format=json` → `{"results": [{"url", "title",
//! "content"}, …]}`. Results without an http(s) URL are skipped; duplicates keep their first
//! (best-ranked) occurrence.

use reqwest::Url;
use serde_json::Value;

use super::WebError;

/// One search result, in engine rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchResult {
    pub url: Url,
    pub title: String,
    /// The engine's snippet.
    pub content: String,
}

/// The search URL for `question` under `endpoint` (a path prefix is kept: an endpoint of
/// `https://host/searx` searches `https://host/searx/search`).
pub fn search_url(endpoint: &Url, question: &str) -> Url {
    let mut url = endpoint.clone();
    url.set_query(None);
    url.set_fragment(None);
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty().push("search");
    }
    url.query_pairs_mut()
        .append_pair("q", question)
        .append_pair("format", "json");
    url
}

/// Reads a search answer.
pub fn parse_results(url: &Url, body: &[u8]) -> Result<Vec<SearchResult>, WebError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| WebError::SearchResponse {
        url: url.to_string(),
        reason: format!("not JSON ({e}); is format=json enabled on the instance?"),
    })?;
    let results = value
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| WebError::SearchResponse {
            url: url.to_string(),
            reason: "no `results` array".into(),
        })?;
    let mut out: Vec<SearchResult> = Vec::new();
    // Seen URLs in a set: a long answer of distinct results must not make this quadratic.
    let mut seen = std::collections::HashSet::new();
    for item in results {
        let Some(raw) = item.get("url").and_then(Value::as_str) else {
            continue;
        };
        let Ok(parsed) = Url::parse(raw) else {
            continue;
        };
        if !matches!(parsed.scheme(), "http" | "https") || !seen.insert(parsed.clone()) {
            continue;
        }
        let text = |key: &str| {
            item.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        out.push(SearchResult {
            url: parsed,
            title: text("title"),
            content: text("content"),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_url_keeps_a_path_prefix_and_encodes_the_question() {
        let base = Url::parse("http://127.0.0.1:8888").unwrap();
        assert_eq!(
            search_url(&base, "refund & returns?").as_str(),
            "http://127.0.0.1:8888/search?q=refund+%26+returns%3F&format=json"
        );
        let prefixed = Url::parse("https://example.org/searx/?x=1").unwrap();
        assert_eq!(
            search_url(&prefixed, "a").as_str(),
            "https://example.org/searx/search?q=a&format=json"
        );
    }

    #[test]
    fn results_are_read_tolerantly() {
        let url = Url::parse("http://e/search").unwrap();
        let body = br#"{"query": "q", "results": [
            {"url": "https://a.example/1", "title": " A ", "content": "snippet"},
            {"url": "ftp://b.example/file"},
            {"title": "no url"},
            {"url": "https://a.example/1", "title": "duplicate"},
            {"url": "http://c.example/", "engine": "x"}
        ]}"#;
        let results = parse_results(&url, body).unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].title, "A");
        assert_eq!(results[1].url.as_str(), "http://c.example/");
        assert_eq!(results[1].content, "");
        let err = parse_results(&url, b"<html>").unwrap_err();
        assert!(err.to_string().contains("format=json"), "{err}");
        assert!(parse_results(&url, b"{}").is_err());
    }
}
