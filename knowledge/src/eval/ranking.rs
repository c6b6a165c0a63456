//! From retrieved chunks to a ranking of documents: every citation is mapped to the key its
//! document is judged under, and a document keeps the rank of its best chunk (later chunks of
//! the same document are dropped).
//!
//! - Golden datasets: the key is the case's relevant ref the source id matches (so `data.csv`
//!   collects every row of the file at its best row), else the source id itself.
//! - BEIR datasets: the key is the `_id` the cached `.txt` file was written for.

use std::collections::HashSet;

use super::beir_files::BeirFiles;
use super::dataset::EvalCase;
use super::source_refs::SourceRef;
use crate::types::Citation;

/// How source ids map to document keys for a dataset.
#[derive(Debug, Clone)]
pub enum DocumentKeys {
    /// Golden: suffix-matched refs.
    Refs,
    /// BEIR: file names back to `_id`s.
    Beir(BeirFiles),
}

impl DocumentKeys {
    fn key(&self, refs: &[SourceRef], source_id: &str) -> String {
        match self {
            DocumentKeys::Refs => refs
                .iter()
                .find(|r| r.matches(source_id))
                .map_or_else(|| source_id.to_string(), |r| r.text.clone()),
            DocumentKeys::Beir(files) => files
                .document_id(source_id)
                .map_or_else(|| source_id.to_string(), str::to_string),
        }
    }
}

/// The document ranking of `citations` (ordered by marker, i.e. by rank), de-duplicated by
/// document.
pub fn rank_documents(citations: &[Citation], keys: &DocumentKeys, case: &EvalCase) -> Vec<String> {
    let refs: Vec<SourceRef> = match keys {
        // Refs were validated when the dataset was loaded; one that no longer parses matches
        // nothing (and is reported as never found).
        DocumentKeys::Refs => case
            .relevant
            .keys()
            .filter_map(|r| SourceRef::parse(r).ok())
            .collect(),
        DocumentKeys::Beir(_) => Vec::new(),
    };
    let mut ordered: Vec<&Citation> = citations.iter().collect();
    ordered.sort_by_key(|c| c.marker);
    let mut seen = HashSet::new();
    ordered
        .into_iter()
        .map(|c| keys.key(&refs, &c.source_id))
        .filter(|key| seen.insert(key.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::dataset::BeirDocument;
    use crate::types::ScoreOrigin;
    use std::collections::BTreeMap;

    fn citation(marker: u32, source_id: &str) -> Citation {
        Citation {
            marker,
            chunk_id: format!("{source_id}:{marker}"),
            source_id: source_id.into(),
            snippet: String::new(),
            score: 1.0 / marker as f32,
            score_origin: ScoreOrigin::Rrf,
            start: 0,
            end: 0,
            untrusted: false,
        }
    }

    fn case(refs: &[&str]) -> EvalCase {
        EvalCase {
            id: "q".into(),
            question: "?".into(),
            relevant: refs
                .iter()
                .map(|r| (r.to_string(), 1))
                .collect::<BTreeMap<_, _>>(),
            expected_substrings: vec![],
            reference_answer: None,
            tags: vec![],
        }
    }

    #[test]
    fn golden_citations_rank_refs_at_their_best_chunk() {
        let c = case(&[
            "policies/refunds.md",
            "data/stores.csv",
            "reports/q3.pdf#page=2",
        ]);
        let citations = vec![
            citation(3, "data/stores.csv#row=7"),
            citation(1, "faq.md"),
            citation(2, "policies/refunds.md"),
            citation(4, "policies/refunds.md"),
            citation(5, "data/stores.csv#row=2"),
            citation(6, "reports/q3.pdf#page=1"),
            citation(7, "reports/q3.pdf#page=2"),
        ];
        let ranked = rank_documents(&citations, &DocumentKeys::Refs, &c);
        assert_eq!(
            ranked,
            vec![
                "faq.md",
                "policies/refunds.md",
                "data/stores.csv",
                "reports/q3.pdf#page=1",
                "reports/q3.pdf#page=2",
            ]
        );
    }

    #[test]
    fn beir_citations_map_back_to_ids() {
        let dir = tempfile::tempdir().unwrap();
        let docs: Vec<BeirDocument> = ["d1", "a/b", "d3"]
            .iter()
            .map(|id| BeirDocument {
                id: id.to_string(),
                title: String::new(),
                text: format!("text of {id}"),
            })
            .collect();
        let files = BeirFiles::write(dir.path(), &docs).unwrap();
        let hashed = format!("{}.txt", crate::eval::beir_files::file_id("a/b"));
        let citations = vec![
            citation(1, &hashed),
            citation(2, "d3.txt"),
            citation(3, &hashed),
            citation(4, "d1.txt"),
        ];
        let ranked = rank_documents(&citations, &DocumentKeys::Beir(files), &case(&[]));
        assert_eq!(ranked, vec!["a/b", "d3", "d1"]);
    }
}
