//! What an evaluation run reports — per case, per profile, per run — and its Markdown
//! rendering (the comparison table, the all-cases table and the per-tag breakdown).
//!
//! The flat scores of a [`ProfileReport`] (`ndcg_at_10`, `mrr_at_10`, `recall_at`) are the
//! **gated aggregate**: the mean over cases not excluded from the gate (cases tagged
//! `correctif` by default). `all_cases` holds the same means over every case.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::judge::JudgeVerdict;
use super::metrics::mean;
use crate::ingest::IngestReport;

/// The k of the reported recall@k, when the ranking is at least that long.
pub const RECALL_KS: [usize; 5] = [1, 3, 5, 10, 100];

/// How a profile's retrieval metrics were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetrievalPath {
    /// The pipeline's retrieval-only capability (no generation call).
    RetrieveOnly,
    /// The pipeline cannot retrieve alone (e.g. a host's pipeline): its full query, ranked by
    /// its citations.
    FullQuery,
}

impl RetrievalPath {
    pub fn as_str(self) -> &'static str {
        match self {
            RetrievalPath::RetrieveOnly => "retrieve-only",
            RetrievalPath::FullQuery => "full-query",
        }
    }
}

/// Mean retrieval scores over a set of cases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetrievalScores {
    pub cases: usize,
    pub ndcg_at_10: f64,
    pub mrr_at_10: f64,
    /// `"1"`, `"3"`, `"5"`, `"10"`, `"100"` → recall (only the k the ranking depth allows).
    pub recall_at: BTreeMap<String, f64>,
}

impl RetrievalScores {
    /// Means over `cases`.
    pub fn over<'a>(cases: impl IntoIterator<Item = &'a CaseResult>) -> Self {
        let cases: Vec<&CaseResult> = cases.into_iter().collect();
        let ndcg: Vec<f64> = cases.iter().map(|c| c.ndcg_at_10).collect();
        let mrr: Vec<f64> = cases.iter().map(|c| c.mrr_at_10).collect();
        let ks: BTreeSet<&String> = cases.iter().flat_map(|c| c.recall_at.keys()).collect();
        let recall_at = ks
            .into_iter()
            .map(|k| {
                let values: Vec<f64> = cases
                    .iter()
                    .filter_map(|c| c.recall_at.get(k).copied())
                    .collect();
                (k.clone(), mean(&values))
            })
            .collect();
        Self {
            cases: cases.len(),
            ndcg_at_10: mean(&ndcg),
            mrr_at_10: mean(&mrr),
            recall_at,
        }
    }
}

/// One case under one profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub tags: Vec<String>,
    /// Counted in the gated aggregate.
    pub gated: bool,
    /// The first ten document keys retrieved (de-duplicated: a document at its best chunk).
    pub ranked: Vec<String>,
    /// Documents ranked in all (the retrieval depth actually reached).
    pub depth: usize,
    /// 1-based rank of the first relevant document, if retrieved.
    pub first_relevant_rank: Option<usize>,
    pub ndcg_at_10: f64,
    pub mrr_at_10: f64,
    pub recall_at: BTreeMap<String, f64>,
    /// Wall time of the retrieval call.
    pub retrieval_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<CaseGeneration>,
}

/// The generated answer of one case and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseGeneration {
    pub answer: String,
    /// Wall time of the full query (retrieval included) that produced the answer.
    pub generation_ms: f64,
    pub verdict: JudgeVerdict,
}

/// Generation scores of one profile (over its gated cases).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationScores {
    pub judge: String,
    pub cases: usize,
    pub pass_rate: f64,
    pub mean_score: f64,
    /// Share of answers whose citations are valid.
    pub citation_validity: f64,
    /// Cases the LLM judge could not judge (the heuristic judged them).
    pub judge_fallbacks: usize,
}

impl GenerationScores {
    pub fn over<'a>(judge: &str, cases: impl IntoIterator<Item = &'a CaseResult>) -> Option<Self> {
        let verdicts: Vec<&JudgeVerdict> = cases
            .into_iter()
            .filter_map(|c| c.generation.as_ref().map(|g| &g.verdict))
            .collect();
        if verdicts.is_empty() {
            return None;
        }
        let share = |f: &dyn Fn(&JudgeVerdict) -> bool| {
            verdicts.iter().filter(|v| f(v)).count() as f64 / verdicts.len() as f64
        };
        Some(Self {
            judge: judge.to_string(),
            cases: verdicts.len(),
            pass_rate: share(&|v| v.passed),
            mean_score: mean(&verdicts.iter().map(|v| v.score).collect::<Vec<_>>()),
            citation_validity: share(&|v| v.citations_valid),
            judge_fallbacks: verdicts.iter().filter(|v| v.fell_back).count(),
        })
    }
}

/// One profile's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    pub profile: String,
    /// Gated aggregate (see the module documentation).
    pub ndcg_at_10: f64,
    pub mrr_at_10: f64,
    pub recall_at: BTreeMap<String, f64>,
    /// The generation judge, or why there is none.
    pub judge: String,
    pub generation: Option<GenerationScores>,
    /// Wall time of the profile's whole run (all cases, concurrently).
    pub duration_ms: u64,
    /// Median per-case time of the retrieval call.
    pub per_query_ms_p50: f64,
    pub per_case: Vec<CaseResult>,
    pub gated_cases: usize,
    pub excluded_cases: usize,
    /// The same means over every case, excluded ones included.
    pub all_cases: RetrievalScores,
    pub retrieval_path: RetrievalPath,
    /// Total milliseconds per trace stage over all cases (`retrieve.embed` and
    /// `retrieve.search` split the retrieve stage; `judge` is the judge's time).
    pub stage_ms: BTreeMap<String, f64>,
    /// What a reader must know to read the numbers right.
    pub notes: Vec<String>,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub dataset: String,
    pub queries: usize,
    pub profiles: Vec<ProfileReport>,
    pub ingestion: IngestReport,
    /// Documents ranked per query for the retrieval metrics.
    pub retrieve_k: usize,
    /// Cases run at once.
    pub concurrency: usize,
    /// Tags whose cases are excluded from the gated aggregate.
    pub excluded_tags: Vec<String>,
    /// Loader and harness warnings.
    pub warnings: Vec<String>,
}

fn f3(value: f64) -> String {
    format!("{value:.3}")
}

fn recall_cell(recall: &BTreeMap<String, f64>, k: usize) -> String {
    recall
        .get(&k.to_string())
        .map_or_else(|| "–".to_string(), |v| f3(*v))
}

fn recall_ks(report: &EvalReport) -> Vec<usize> {
    RECALL_KS
        .into_iter()
        .filter(|k| {
            report
                .profiles
                .iter()
                .any(|p| p.all_cases.recall_at.contains_key(&k.to_string()))
        })
        .collect()
}

/// Escapes `|` so a value cannot break a table row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The report as Markdown: the comparison table over gated cases, the all-cases table, the
/// per-tag breakdown, then notes and warnings.
pub fn render_markdown(report: &EvalReport) -> String {
    let mut out = String::new();
    let excluded = if report.excluded_tags.is_empty() {
        "none".to_string()
    } else {
        report.excluded_tags.join(", ")
    };
    let gated = report.profiles.first().map_or(0, |p| p.gated_cases);
    out.push_str(&format!(
        "## RAG evaluation: {} ({} cases, {} gated; excluded tags: {})\n\n",
        report.dataset, report.queries, gated, excluded
    ));
    let ing = &report.ingestion;
    out.push_str(&format!(
        "Ingestion of `{}`: {} sources ({} ingested, {} unchanged, {} removed, {} quarantined), {} chunks embedded, {} ms. Each profile ranks {} passages per query as configured (nDCG, MRR, recall@≤{}, p50); recall above that comes from a deep retrieval of {} passages with reranking off. {} cases at a time.\n\n",
        ing.collection,
        ing.sources_total,
        ing.sources_ingested,
        ing.sources_skipped,
        ing.sources_removed,
        ing.quarantined.len(),
        ing.chunks_embedded,
        ing.duration_ms,
        super::harness::PROFILE_TOP_N,
        super::harness::PROFILE_TOP_N,
        report.retrieve_k,
        report.concurrency
    ));

    let ks = recall_ks(report);
    let recall_headers: String = ks.iter().map(|k| format!(" R@{k} |")).collect();
    let recall_rule: String = ks.iter().map(|_| "---:|").collect();

    out.push_str("### Gated aggregate\n\n");
    out.push_str(&format!(
        "| Profile | Path | nDCG@10 | MRR@10 |{recall_headers} Judge | Gen pass | Cites valid | p50 ms/query | Total s |\n"
    ));
    out.push_str(&format!(
        "|---|---|---:|---:|{recall_rule}---|---:|---:|---:|---:|\n"
    ));
    for p in &report.profiles {
        let recalls: String = ks
            .iter()
            .map(|k| format!(" {} |", recall_cell(&p.recall_at, *k)))
            .collect();
        let (pass, cites) = p
            .generation
            .as_ref()
            .map_or(("–".to_string(), "–".to_string()), |g| {
                (f3(g.pass_rate), f3(g.citation_validity))
            });
        out.push_str(&format!(
            "| {} | {} | {} | {} |{recalls} {} | {} | {} | {:.1} | {:.1} |\n",
            cell(&p.profile),
            p.retrieval_path.as_str(),
            f3(p.ndcg_at_10),
            f3(p.mrr_at_10),
            cell(&p.judge),
            pass,
            cites,
            p.per_query_ms_p50,
            p.duration_ms as f64 / 1000.0
        ));
    }

    out.push_str("\n### All cases\n\n");
    out.push_str(&format!(
        "| Profile | Cases | nDCG@10 | MRR@10 |{recall_headers}\n"
    ));
    out.push_str(&format!("|---|---:|---:|---:|{recall_rule}\n"));
    for p in &report.profiles {
        let a = &p.all_cases;
        let recalls: String = ks
            .iter()
            .map(|k| format!(" {} |", recall_cell(&a.recall_at, *k)))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} |{recalls}\n",
            cell(&p.profile),
            a.cases,
            f3(a.ndcg_at_10),
            f3(a.mrr_at_10)
        ));
    }

    let tags: BTreeSet<&str> = report
        .profiles
        .iter()
        .flat_map(|p| {
            p.per_case
                .iter()
                .flat_map(|c| c.tags.iter().map(String::as_str))
        })
        .collect();
    let untagged = report
        .profiles
        .iter()
        .any(|p| p.per_case.iter().any(|c| c.tags.is_empty()));
    if !tags.is_empty() {
        out.push_str("\n### Per tag (nDCG@10 / MRR@10 / R@5, all cases with the tag)\n\n");
        out.push_str("| Tag | Cases |");
        for p in &report.profiles {
            out.push_str(&format!(" {} |", cell(&p.profile)));
        }
        out.push_str("\n|---|---:|");
        for _ in &report.profiles {
            out.push_str("---|");
        }
        out.push('\n');
        let mut rows: Vec<(String, Option<&str>)> =
            tags.iter().map(|t| (t.to_string(), Some(*t))).collect();
        if untagged {
            rows.push(("(untagged)".to_string(), None));
        }
        for (label, tag) in rows {
            let has_tag = |c: &&CaseResult| match tag {
                Some(tag) => c.tags.iter().any(|t| t == tag),
                None => c.tags.is_empty(),
            };
            let count = report
                .profiles
                .first()
                .map_or(0, |p| p.per_case.iter().filter(has_tag).count());
            out.push_str(&format!("| {} | {} |", cell(&label), count));
            for p in &report.profiles {
                let scores = RetrievalScores::over(p.per_case.iter().filter(has_tag));
                out.push_str(&format!(
                    " {} / {} / {} |",
                    f3(scores.ndcg_at_10),
                    f3(scores.mrr_at_10),
                    recall_cell(&scores.recall_at, 5)
                ));
            }
            out.push('\n');
        }
    }

    let notes: Vec<String> = report
        .profiles
        .iter()
        .flat_map(|p| p.notes.iter().map(move |n| format!("{}: {n}", p.profile)))
        .collect();
    if !notes.is_empty() || !report.warnings.is_empty() {
        out.push_str("\n### Notes\n\n");
        for note in notes.iter().chain(&report.warnings) {
            out.push_str(&format!("- {note}\n"));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn case_result(
        id: &str,
        tags: &[&str],
        gated: bool,
        ndcg: f64,
        mrr: f64,
        r5: f64,
    ) -> CaseResult {
        CaseResult {
            id: id.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            gated,
            ranked: vec![],
            depth: 10,
            first_relevant_rank: None,
            ndcg_at_10: ndcg,
            mrr_at_10: mrr,
            recall_at: BTreeMap::from([
                ("1".to_string(), r5 / 2.0),
                ("5".to_string(), r5),
                ("10".to_string(), r5),
            ]),
            retrieval_ms: 3.0,
            generation: None,
        }
    }

    pub(crate) fn profile(name: &str, cases: Vec<CaseResult>) -> ProfileReport {
        let gated = RetrievalScores::over(cases.iter().filter(|c| c.gated));
        let all_cases = RetrievalScores::over(cases.iter());
        ProfileReport {
            profile: name.into(),
            ndcg_at_10: gated.ndcg_at_10,
            mrr_at_10: gated.mrr_at_10,
            recall_at: gated.recall_at,
            judge: "none: generation not run".into(),
            generation: None,
            duration_ms: 1500,
            per_query_ms_p50: 3.0,
            gated_cases: gated.cases,
            excluded_cases: cases.len() - gated.cases,
            per_case: cases,
            all_cases,
            retrieval_path: RetrievalPath::RetrieveOnly,
            stage_ms: BTreeMap::new(),
            notes: vec![],
        }
    }

    pub(crate) fn report(profiles: Vec<ProfileReport>) -> EvalReport {
        EvalReport {
            dataset: "mini".into(),
            queries: profiles.first().map_or(0, |p| p.per_case.len()),
            profiles,
            ingestion: IngestReport {
                collection: "mini-eval".into(),
                sources_total: 3,
                ..IngestReport::default()
            },
            retrieve_k: 10,
            concurrency: 4,
            excluded_tags: vec!["correctif".into()],
            warnings: vec!["a loader warning".into()],
        }
    }

    #[test]
    fn aggregates_separate_gated_cases_from_all_cases() {
        let p = profile(
            "fast",
            vec![
                case_result("a", &["lexical"], true, 1.0, 1.0, 1.0),
                case_result("b", &["paraphrase"], true, 0.5, 0.5, 0.0),
                case_result("c", &["correctif"], false, 0.0, 0.0, 0.0),
            ],
        );
        assert_eq!((p.gated_cases, p.excluded_cases), (2, 1));
        assert!((p.mrr_at_10 - 0.75).abs() < 1e-12);
        assert!((p.recall_at["5"] - 0.5).abs() < 1e-12);
        assert!((p.all_cases.mrr_at_10 - 0.5).abs() < 1e-12);
        assert!((p.all_cases.recall_at["5"] - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn markdown_has_the_comparison_all_cases_and_per_tag_tables() {
        let fast = profile(
            "fast",
            vec![
                case_result("a", &["lexical"], true, 1.0, 1.0, 1.0),
                case_result("b", &[], true, 0.5, 0.5, 0.0),
                case_result("c", &["correctif"], false, 0.0, 0.0, 0.0),
            ],
        );
        let mut balanced = profile(
            "balanced",
            vec![
                case_result("a", &["lexical"], true, 1.0, 1.0, 1.0),
                case_result("b", &[], true, 1.0, 1.0, 1.0),
                case_result("c", &["correctif"], false, 0.5, 0.5, 1.0),
            ],
        );
        balanced
            .notes
            .push("context budget dropped 3 passages".into());
        let md = render_markdown(&report(vec![fast, balanced]));
        assert!(
            md.contains("## RAG evaluation: mini (3 cases, 2 gated; excluded tags: correctif)"),
            "{md}"
        );
        assert!(
            md.contains("| Profile | Path | nDCG@10 | MRR@10 | R@1 | R@5 | R@10 | Judge |"),
            "{md}"
        );
        assert!(md.contains("| fast | retrieve-only | 0.750 | 0.750 | 0.250 | 0.500 | 0.500 | none: generation not run | – | – | 3.0 | 1.5 |"), "{md}");
        assert!(
            md.contains("| balanced | 3 | 0.833 | 0.833 | 0.500 | 1.000 | 1.000 |"),
            "{md}"
        );
        assert!(
            md.contains("| correctif | 1 | 0.000 / 0.000 / 0.000 | 0.500 / 0.500 / 1.000 |"),
            "{md}"
        );
        assert!(
            md.contains("| (untagged) | 1 | 0.500 / 0.500 / 0.000 | 1.000 / 1.000 / 1.000 |"),
            "{md}"
        );
        assert!(
            md.contains("- balanced: context budget dropped 3 passages"),
            "{md}"
        );
        assert!(md.contains("- a loader warning"), "{md}");
    }
}
