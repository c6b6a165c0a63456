//! The BEIR dataset format: a folder with
//!
//! - `corpus.jsonl`: one JSON object per line, `{"_id", "title", "text"}` (other keys such as
//!   `metadata` are ignored; `_id` may be a string or an integer);
//! - `queries.jsonl`: `{"_id", "text"}` per line;
//! - `qrels/<split>.tsv`: `query-id corpus-id score` per line, tab- or space-separated
//!   (TREC's four-column `query-id iteration corpus-id score` is accepted too), an optional
//!   header line, graded scores; a score ≤ 0 is "judged not relevant".
//!
//! Each corpus entry is one document whose id is its `_id`. Cases are the queries that have
//! qrels in the split, in `queries.jsonl` order (a `queries.jsonl` usually serves every split,
//! so queries without qrels in this split are not errors). A query whose qrels are all ≤ 0 has
//! nothing to find and is skipped with a warning; a qrels row naming a document missing from
//! the corpus keeps counting as relevant (it cannot be retrieved, as in `trec_eval`) and is
//! warned about. Malformed lines, duplicate ids and qrels naming an unknown query are errors
//! that name the file and the line.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{BeirDocument, CorpusSource, EvalCase, EvalDataset, collection_name};
use crate::eval::EvalError;

pub const CORPUS_FILE: &str = "corpus.jsonl";
pub const QUERIES_FILE: &str = "queries.jsonl";
pub const QRELS_DIR: &str = "qrels";

fn line_error(path: &Path, line: usize, message: impl Into<String>) -> EvalError {
    EvalError::InvalidLine {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

fn io_error(path: &Path, source: std::io::Error) -> EvalError {
    EvalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Loads the BEIR dataset in `dir` with the qrels of `split`.
pub fn load(dir: &Path, split: &str) -> Result<EvalDataset, EvalError> {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "beir".into());
    let split = split.trim();
    let qrels_path = dir.join(QRELS_DIR).join(format!("{split}.tsv"));
    if split.is_empty() || !qrels_path.is_file() {
        return Err(EvalError::UnknownSplit {
            path: dir.to_path_buf(),
            split: split.to_string(),
            available: available_splits(&dir.join(QRELS_DIR)),
        });
    }
    let queries_path = dir.join(QUERIES_FILE);
    if !queries_path.is_file() {
        return Err(EvalError::InvalidDataset {
            path: dir.to_path_buf(),
            message: format!(
                "{QUERIES_FILE} is missing; a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
            ),
        });
    }

    let mut warnings = Vec::new();
    let documents = read_corpus(&dir.join(CORPUS_FILE), &mut warnings)?;
    let queries = read_queries(&queries_path)?;
    let qrels = read_qrels(&qrels_path)?;

    let query_index: HashMap<&str, usize> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| (q.id.as_str(), i))
        .collect();
    let corpus_ids: HashSet<&str> = documents.iter().map(|d| d.id.as_str()).collect();

    let mut judged: BTreeMap<usize, BTreeMap<String, u32>> = BTreeMap::new();
    let mut unknown_docs: Vec<String> = Vec::new();
    for row in &qrels {
        let Some(&index) = query_index.get(row.query_id.as_str()) else {
            return Err(line_error(
                &qrels_path,
                row.line,
                format!(
                    "query id `{}` is not in {QUERIES_FILE}; add the query or remove its qrels",
                    row.query_id
                ),
            ));
        };
        let grades = judged.entry(index).or_default();
        if row.score > 0 {
            let grade = u32::try_from(row.score).unwrap_or(u32::MAX);
            let slot = grades.entry(row.corpus_id.clone()).or_insert(0);
            *slot = (*slot).max(grade);
            if !corpus_ids.contains(row.corpus_id.as_str()) {
                unknown_docs.push(format!("{} (line {})", row.corpus_id, row.line));
            }
        }
    }
    if !unknown_docs.is_empty() {
        let shown: Vec<&str> = unknown_docs.iter().take(5).map(String::as_str).collect();
        warnings.push(format!(
            "{}: {} relevant qrels row(s) name documents missing from {CORPUS_FILE} (they count as relevant but can never be retrieved): {}{}",
            qrels_path.display(),
            unknown_docs.len(),
            shown.join(", "),
            if unknown_docs.len() > shown.len() { ", …" } else { "" }
        ));
    }

    let mut cases = Vec::new();
    let mut nothing_relevant = Vec::new();
    for (index, grades) in judged {
        let query = &queries[index];
        if grades.is_empty() {
            nothing_relevant.push(query.id.clone());
            continue;
        }
        cases.push(EvalCase {
            id: query.id.clone(),
            question: query.text.clone(),
            relevant: grades,
            expected_substrings: Vec::new(),
            reference_answer: None,
            tags: Vec::new(),
        });
    }
    if !nothing_relevant.is_empty() {
        warnings.push(format!(
            "{}: {} query(ies) have only score-0 qrels and were skipped (nothing to find): {}",
            qrels_path.display(),
            nothing_relevant.len(),
            nothing_relevant
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if cases.is_empty() {
        return Err(EvalError::InvalidDataset {
            path: qrels_path,
            message:
                "no query has a relevant document (score > 0) in this split; nothing to evaluate"
                    .into(),
        });
    }
    for warning in &warnings {
        tracing::warn!(dataset = %name, "{warning}");
    }
    Ok(EvalDataset {
        // `beir-<name>`, without doubling a name that already says it.
        collection: if name.to_ascii_lowercase().starts_with("beir") {
            collection_name("", &name)
        } else {
            collection_name("beir-", &name)
        },
        name,
        corpus: CorpusSource::Beir { documents },
        cases,
        chunking: None,
        warnings,
    })
}

fn available_splits(qrels_dir: &Path) -> Vec<String> {
    let mut splits: Vec<String> = std::fs::read_dir(qrels_dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let path = e.path();
                    (path.extension().is_some_and(|x| x == "tsv"))
                        .then(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
                        .flatten()
                })
                .collect()
        })
        .unwrap_or_default();
    splits.sort();
    splits
}

/// Non-empty lines of a file with their 1-based numbers.
fn lines(path: &Path) -> Result<Vec<(usize, String)>, EvalError> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let mut out = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| {
            line_error(
                path,
                index + 1,
                format!("cannot be read ({e}); the file must be UTF-8"),
            )
        })?;
        let trimmed = line.trim_start_matches('\u{feff}').trim();
        if !trimmed.is_empty() {
            out.push((index + 1, trimmed.to_string()));
        }
    }
    Ok(out)
}

fn json_object(
    path: &Path,
    line: usize,
    text: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, EvalError> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(line_error(
            path,
            line,
            "is not a JSON object; each line must be one `{...}` object",
        )),
        Err(e) => Err(line_error(path, line, format!("is not valid JSON: {e}"))),
    }
}

fn id_field(
    path: &Path,
    line: usize,
    map: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, EvalError> {
    let id = match map.get("_id") {
        Some(serde_json::Value::String(s)) => s.trim().to_string(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(_) => {
            return Err(line_error(
                path,
                line,
                "`_id` must be a string or an integer",
            ));
        }
        None => return Err(line_error(path, line, "has no `_id`")),
    };
    if id.is_empty() {
        return Err(line_error(path, line, "`_id` is empty"));
    }
    Ok(id)
}

fn text_field(
    path: &Path,
    line: usize,
    map: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    required: bool,
) -> Result<String, EvalError> {
    match map.get(key) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Null) | None if !required => Ok(String::new()),
        None => Err(line_error(path, line, format!("has no `{key}`"))),
        Some(_) => Err(line_error(path, line, format!("`{key}` must be a string"))),
    }
}

fn read_corpus(path: &Path, warnings: &mut Vec<String>) -> Result<Vec<BeirDocument>, EvalError> {
    let mut documents = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut empty = Vec::new();
    for (line, text) in lines(path)? {
        let map = json_object(path, line, &text)?;
        let id = id_field(path, line, &map)?;
        if let Some(first) = seen.insert(id.clone(), line) {
            return Err(line_error(
                path,
                line,
                format!(
                    "document `_id` `{id}` is already used at line {first}; ids must be unique"
                ),
            ));
        }
        let title = text_field(path, line, &map, "title", false)?;
        let body = text_field(path, line, &map, "text", true)?;
        if title.trim().is_empty() && body.trim().is_empty() {
            empty.push(id);
            continue;
        }
        documents.push(BeirDocument {
            id,
            title,
            text: body,
        });
    }
    if !empty.is_empty() {
        warnings.push(format!(
            "{}: {} document(s) have neither title nor text and were left out: {}",
            path.display(),
            empty.len(),
            empty.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if documents.is_empty() {
        return Err(EvalError::InvalidDataset {
            path: path.to_path_buf(),
            message: "holds no document".into(),
        });
    }
    Ok(documents)
}

struct Query {
    id: String,
    text: String,
}

fn read_queries(path: &Path) -> Result<Vec<Query>, EvalError> {
    let mut queries = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (line, text) in lines(path)? {
        let map = json_object(path, line, &text)?;
        let id = id_field(path, line, &map)?;
        if let Some(first) = seen.insert(id.clone(), line) {
            return Err(line_error(
                path,
                line,
                format!("query `_id` `{id}` is already used at line {first}; ids must be unique"),
            ));
        }
        let text = text_field(path, line, &map, "text", true)?;
        if text.trim().is_empty() {
            return Err(line_error(
                path,
                line,
                format!("query `{id}` has an empty `text`"),
            ));
        }
        queries.push(Query {
            id,
            text: text.trim().to_string(),
        });
    }
    Ok(queries)
}

struct QrelsRow {
    line: usize,
    query_id: String,
    corpus_id: String,
    score: i64,
}

fn read_qrels(path: &Path) -> Result<Vec<QrelsRow>, EvalError> {
    let mut rows = Vec::new();
    for (position, (line, text)) in lines(path)?.into_iter().enumerate() {
        let columns: Vec<&str> = text.split_whitespace().collect();
        let (query_id, corpus_id, score) = match columns.as_slice() {
            [q, d, s] => (*q, *d, *s),
            [q, _iteration, d, s] => (*q, *d, *s),
            _ => {
                return Err(line_error(
                    path,
                    line,
                    format!(
                        "has {} column(s); expected `query-id corpus-id score` (tab- or space-separated)",
                        columns.len()
                    ),
                ));
            }
        };
        let score = match score.parse::<i64>() {
            Ok(score) => score,
            // The first line may be a header (`query-id corpus-id score`).
            Err(_) if position == 0 => continue,
            Err(_) => {
                return Err(line_error(
                    path,
                    line,
                    format!("score `{score}` is not an integer (graded relevance: 0, 1, 2, …)"),
                ));
            }
        };
        rows.push(QrelsRow {
            line,
            query_id: query_id.to_string(),
            corpus_id: corpus_id.to_string(),
            score,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new(corpus: &str, queries: &str, qrels: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("mini-beir");
            fs::create_dir_all(root.join("qrels")).unwrap();
            fs::write(root.join(CORPUS_FILE), corpus).unwrap();
            fs::write(root.join(QUERIES_FILE), queries).unwrap();
            fs::write(root.join("qrels/test.tsv"), qrels).unwrap();
            Self { dir }
        }
        fn root(&self) -> PathBuf {
            self.dir.path().join("mini-beir")
        }
    }

    const CORPUS: &str = r#"{"_id": "d1", "title": "Refund policy", "text": "Refunds are accepted within 30 days.", "metadata": {}}
{"_id": "d2", "title": "", "text": "Shipping takes five business days."}
{"_id": 3, "title": "Warranty", "text": "Two years on all speakers."}

{"_id": "d4", "text": "Store hours are 9 to 5."}
"#;
    const QUERIES: &str = r#"{"_id": "q1", "text": "How long do I have to return an item?"}
{"_id": "q2", "text": "How long is the warranty?"}
{"_id": "q3", "text": "Is there a query from another split?"}
{"_id": "q4", "text": "A query whose judgements are all zero"}
"#;
    const QRELS: &str =
        "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1 d2 0\nq2\t3\t1\nq2   d1   1\nq4\td2\t0\n\n";

    #[test]
    fn a_beir_folder_loads_documents_cases_and_graded_qrels() {
        let f = Fixture::new(CORPUS, QUERIES, QRELS);
        let dataset = load(&f.root(), "test").unwrap();
        assert_eq!(dataset.name, "mini-beir");
        assert_eq!(dataset.collection, "beir-mini-beir");
        let CorpusSource::Beir { documents } = &dataset.corpus else {
            panic!("not a BEIR corpus");
        };
        let ids: Vec<&str> = documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, vec!["d1", "d2", "3", "d4"]);
        assert_eq!(
            documents[0].content(),
            "Refund policy\n\nRefunds are accepted within 30 days."
        );
        assert_eq!(documents[3].title, "");

        // q3 has no qrels in this split; q4 has only score-0 rows.
        let case_ids: Vec<&str> = dataset.cases.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(case_ids, vec!["q1", "q2"]);
        let q1 = &dataset.cases[0];
        assert_eq!(q1.question, "How long do I have to return an item?");
        assert_eq!(q1.relevant, BTreeMap::from([("d1".to_string(), 2)]));
        let q2 = &dataset.cases[1];
        assert_eq!(
            q2.relevant,
            BTreeMap::from([("3".to_string(), 1), ("d1".to_string(), 1)])
        );
        assert!(
            dataset.warnings.iter().any(|w| w.contains("q4")),
            "{:?}",
            dataset.warnings
        );
    }

    #[test]
    fn trec_four_column_qrels_and_headerless_files_are_read() {
        let f = Fixture::new(CORPUS, QUERIES, "q1 0 d1 1\nq2 0 3 2\n");
        let dataset = load(&f.root(), "test").unwrap();
        assert_eq!(dataset.cases.len(), 2);
        assert_eq!(dataset.cases[1].relevant.get("3"), Some(&2));
    }

    #[test]
    fn malformed_lines_are_named_by_file_and_line() {
        let f = Fixture::new(
            "{\"_id\": \"d1\", \"text\": \"ok\"}\n{\"_id\": \"d2\", \"text\": \n",
            QUERIES,
            QRELS,
        );
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(err.contains("corpus.jsonl:2"), "{err}");
        assert!(err.contains("not valid JSON"), "{err}");

        let f = Fixture::new("[1, 2]\n", QUERIES, QRELS);
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(
            err.contains("corpus.jsonl:1") && err.contains("JSON object"),
            "{err}"
        );

        let f = Fixture::new("{\"title\": \"t\", \"text\": \"x\"}\n", QUERIES, QRELS);
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(
            err.contains("corpus.jsonl:1") && err.contains("no `_id`"),
            "{err}"
        );

        let f = Fixture::new(
            "{\"_id\": \"a\", \"text\": \"x\"}\n{\"_id\": \"a\", \"text\": \"y\"}\n",
            QUERIES,
            QRELS,
        );
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(
            err.contains("corpus.jsonl:2") && err.contains("already used at line 1"),
            "{err}"
        );

        let f = Fixture::new(CORPUS, "{\"_id\": \"q1\"}\n", QRELS);
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(
            err.contains("queries.jsonl:1") && err.contains("no `text`"),
            "{err}"
        );
    }

    #[test]
    fn bad_qrels_rows_are_named_by_line() {
        let f = Fixture::new(CORPUS, QUERIES, "query-id corpus-id score\nq1 d1\n");
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(err.contains("test.tsv:2"), "{err}");
        assert!(err.contains("2 column(s)"), "{err}");

        let f = Fixture::new(CORPUS, QUERIES, "q1 d1 1\nq2 3 high\n");
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(
            err.contains("test.tsv:2") && err.contains("not an integer"),
            "{err}"
        );

        let f = Fixture::new(CORPUS, QUERIES, "q1 d1 1\n\nq9 d1 1\n");
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(err.contains("test.tsv:3"), "{err}");
        assert!(err.contains("`q9` is not in queries.jsonl"), "{err}");
    }

    #[test]
    fn qrels_naming_missing_documents_are_kept_and_warned_about() {
        let f = Fixture::new(CORPUS, QUERIES, "q1 d1 1\nq1 gone 2\n");
        let dataset = load(&f.root(), "test").unwrap();
        assert_eq!(dataset.cases[0].relevant.get("gone"), Some(&2));
        assert!(
            dataset.warnings.iter().any(|w| w.contains("gone (line 2)")),
            "{:?}",
            dataset.warnings
        );
    }

    #[test]
    fn an_unknown_split_lists_the_available_ones() {
        let f = Fixture::new(CORPUS, QUERIES, QRELS);
        fs::write(f.root().join("qrels/dev.tsv"), "q1 d1 1\n").unwrap();
        let err = load(&f.root(), "train").unwrap_err().to_string();
        assert!(err.contains("train"), "{err}");
        assert!(err.contains("dev, test"), "{err}");
    }

    #[test]
    fn a_split_with_nothing_relevant_is_an_error() {
        let f = Fixture::new(CORPUS, QUERIES, "q1 d1 0\n");
        let err = load(&f.root(), "test").unwrap_err().to_string();
        assert!(err.contains("nothing to evaluate"), "{err}");
    }
}
