//! The in-memory store's BM25 index over one collection's chunks, analysed and scored like the
//! embedded store's tantivy index so both stores rank alike:
//!
//! - analysis (tantivy's `en_stem`): split on every non-alphanumeric character, drop tokens of
//!   40 bytes or more, lowercase, Snowball English stemming;
//! - scoring (tantivy's BM25): `idf · (k1 + 1) · tf / (tf + k1 · (1 − b + b · dl / avgdl))`
//!   with `idf = ln(1 + (N − n + 0.5) / (n + 0.5))`, `k1 = 1.2`, `b = 0.75`, summed over the
//!   distinct query terms (a disjunction). Unlike tantivy, document lengths are exact (tantivy
//!   stores them in one byte), so scores can differ slightly; ties break by chunk id.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Tokens of this many bytes or more are dropped (tantivy's `RemoveLongFilter::limit(40)`).
const LONG_TOKEN_BYTES: usize = 40;

/// The analysed terms of `text`, in order (repetitions kept).
pub fn analyse(text: &str) -> Vec<String> {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    let stemmer = STEMMER.get_or_init(|| Stemmer::create(Algorithm::English));
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|token| !token.is_empty() && token.len() < LONG_TOKEN_BYTES)
        .map(|token| stemmer.stem(&token.to_lowercase()).into_owned())
        .collect()
}

/// One indexed chunk: its distinct terms with their frequencies, and its length in terms.
#[derive(Debug, Clone, Default)]
struct IndexedDoc {
    frequencies: HashMap<String, u32>,
    length: u32,
}

/// An inverted index of chunk texts, updated chunk by chunk.
#[derive(Debug, Clone, Default)]
pub struct LexicalIndex {
    docs: HashMap<String, IndexedDoc>,
    /// term → ids of the chunks holding it.
    postings: HashMap<String, BTreeSet<String>>,
    total_length: u64,
}

impl LexicalIndex {
    /// Indexes (or re-indexes) the chunk `id`.
    pub fn insert(&mut self, id: &str, text: &str) {
        self.remove(id);
        let terms = analyse(text);
        let mut doc = IndexedDoc {
            length: terms.len() as u32,
            ..IndexedDoc::default()
        };
        for term in terms {
            *doc.frequencies.entry(term).or_insert(0) += 1;
        }
        for term in doc.frequencies.keys() {
            self.postings
                .entry(term.clone())
                .or_default()
                .insert(id.to_string());
        }
        self.total_length += u64::from(doc.length);
        self.docs.insert(id.to_string(), doc);
    }

    /// Forgets the chunk `id` (nothing when it is not indexed).
    pub fn remove(&mut self, id: &str) {
        let Some(doc) = self.docs.remove(id) else {
            return;
        };
        self.total_length -= u64::from(doc.length);
        for term in doc.frequencies.keys() {
            if let Some(ids) = self.postings.get_mut(term) {
                ids.remove(id);
                if ids.is_empty() {
                    self.postings.remove(term);
                }
            }
        }
    }

    /// The `limit` best chunk ids for a free-text query, with their BM25 scores, best first
    /// (ties by id). Chunks sharing no term with the query are not returned.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(String, f32)> {
        let terms: BTreeSet<String> = analyse(query).into_iter().collect();
        if limit == 0 || terms.is_empty() || self.docs.is_empty() {
            return Vec::new();
        }
        let doc_count = self.docs.len() as f32;
        let average_length = self.total_length as f32 / doc_count;
        let mut scores: HashMap<&str, f32> = HashMap::new();
        for term in &terms {
            let Some(ids) = self.postings.get(term) else {
                continue;
            };
            let holding = ids.len() as f32;
            let idf = (1.0 + (doc_count - holding + 0.5) / (holding + 0.5)).ln();
            for id in ids {
                let doc = &self.docs[id.as_str()];
                let tf = doc.frequencies[term] as f32;
                let norm = if average_length > 0.0 {
                    K1 * (1.0 - B + B * doc.length as f32 / average_length)
                } else {
                    K1 * (1.0 - B)
                };
                *scores.entry(id.as_str()).or_insert(0.0) += idf * (1.0 + K1) * tf / (tf + norm);
            }
        }
        let mut ranked: Vec<(String, f32)> = scores
            .into_iter()
            .map(|(id, score)| (id.to_string(), score))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(limit);
        ranked
    }

    /// Number of indexed chunks.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.docs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analysis_splits_lowercases_stems_and_drops_long_tokens() {
        assert_eq!(
            analyse("Refunds, REFUNDED; running-shoes 42x"),
            ["refund", "refund", "run", "shoe", "42x"]
        );
        let long = "a".repeat(40);
        assert_eq!(
            analyse(&format!("short {long} {}", &long[1..])),
            ["short".to_string(), long[1..].to_string()]
        );
        assert!(analyse(" ,;- ").is_empty());
    }

    #[test]
    fn scores_follow_bm25_and_updates_keep_statistics_exact() {
        let mut index = LexicalIndex::default();
        index.insert("a", "refund refund policy");
        index.insert("b", "shipping policy");
        index.insert("c", "warranty terms and conditions apply here");
        let hits = index.search("refund", 10);
        assert_eq!(hits.len(), 1);
        // N = 3, n = 1, tf = 2, dl = 3, avgdl = (3 + 2 + 6) / 3.
        let idf = (1.0f32 + (3.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln();
        let norm = K1 * (1.0 - B + B * 3.0 / (11.0 / 3.0));
        let expected = idf * (1.0 + K1) * 2.0 / (2.0 + norm);
        assert_eq!(hits[0].0, "a");
        assert!((hits[0].1 - expected).abs() < 1e-6, "{hits:?}");

        // The shorter document wins on a shared term; repeated query terms count once.
        let policy = index.search("policy policy", 10);
        assert_eq!(
            policy.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );

        index.insert("a", "shipping");
        assert!(index.search("refund", 10).is_empty());
        index.remove("b");
        index.remove("missing");
        assert_eq!(index.len(), 2);
        assert_eq!(index.total_length, 1 + 6);
        assert_eq!(index.search("shipping", 10)[0].0, "a");
        assert!(index.search("", 10).is_empty());
        assert!(index.search("shipping", 0).is_empty());
    }
}
