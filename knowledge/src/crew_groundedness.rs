//! Groundedness of crews' task outputs — the implementation of the crews'
//! `GroundednessCheck` port over the query pipeline's checkers
//! ([`crate::query::GroundednessChecker`]: the heuristic content-word checker offline, the
//! LLM checker when configured).
//!
//! A task output cites passages under the run's markers (`[3]`, `[7]`, …) while a checker reads
//! marker `[n]` as its `n`-th context passage, so the output's markers are renumbered to the
//! passages' positions before the check. A marker written after a sentence's closing
//! punctuation (`Refunds take 30 days. [1]`, the offline extractive model's style) is moved
//! before it, so the checkers' sentence split keeps it with the claim it cites.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use orkeon_crews::citations::map_markers;
use orkeon_crews::ports::{
    GroundednessCheck, GroundednessError, GroundednessReport, KnowledgeCitation,
};

use crate::query::GroundednessChecker;
use crate::types::{ScoreOrigin, ScoredChunk, StoredChunk};

/// Scores task outputs against the passages they cite.
pub struct CrewGroundedness {
    checker: Arc<dyn GroundednessChecker>,
}

impl CrewGroundedness {
    pub fn new(checker: Arc<dyn GroundednessChecker>) -> Self {
        Self { checker }
    }
}

/// `claim. [1]` → `claim [1].` (also `!`, `?`, and groups such as `[1, 2]`).
fn markers_before_punctuation(text: &str) -> String {
    static TRAILING: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"([.!?])[ \t]+(\[[0-9][0-9,; \t]*\])").expect("valid regex")
    });
    TRAILING.replace_all(text, " $2$1").into_owned()
}

/// A cited passage as the checkers see it: its snippet (the text the agent was shown).
fn as_chunk(passage: &KnowledgeCitation) -> ScoredChunk {
    ScoredChunk {
        chunk: StoredChunk {
            id: passage.chunk_id.clone(),
            source_id: passage.source_id.clone(),
            ordinal: 0,
            text: passage.snippet.clone(),
            start: passage.start,
            end: passage.end,
            metadata: BTreeMap::new(),
            content_hash: String::new(),
            vector: Vec::new(),
        },
        score: passage.score,
        // The checkers read the text only; the origin is informational here.
        origin: ScoreOrigin::Vector,
    }
}

#[async_trait]
impl GroundednessCheck for CrewGroundedness {
    async fn check(
        &self,
        question: &str,
        answer: &str,
        passages: &[KnowledgeCitation],
    ) -> Result<GroundednessReport, GroundednessError> {
        let position: BTreeMap<u32, u32> = passages
            .iter()
            .enumerate()
            .map(|(i, p)| (p.marker, i as u32 + 1))
            .collect();
        // Markers citing none of `passages` are dropped: they cannot support anything.
        let (local_answer, _) = map_markers(answer, |n| position.get(&n).copied());
        let local_answer = markers_before_punctuation(&local_answer);
        let context: Vec<ScoredChunk> = passages.iter().map(as_chunk).collect();
        let verdict = self
            .checker
            .check(question, &local_answer, &context)
            .await
            .map_err(|e| GroundednessError {
                checker: self.checker.name().to_string(),
                source: Box::new(e),
            })?;
        Ok(GroundednessReport {
            checker: self.checker.name().to_string(),
            grounded: verdict.grounded,
            score: verdict.score,
            unsupported_claims: verdict.unsupported_claims,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::HeuristicGroundednessChecker;

    fn passage(marker: u32, text: &str) -> KnowledgeCitation {
        KnowledgeCitation {
            marker,
            collection: "kb".into(),
            chunk_id: format!("c{marker}"),
            source_id: format!("kb/{marker}.md"),
            snippet: text.into(),
            score: 1.0,
            score_origin: "hybrid".into(),
            start: 0,
            end: text.len(),
            untrusted: false,
        }
    }

    #[test]
    fn a_marker_after_the_full_stop_moves_into_its_sentence() {
        assert_eq!(
            markers_before_punctuation("Refunds take 30 days. [1] Shipping is free! [2, 3] Ok."),
            "Refunds take 30 days [1]. Shipping is free [2, 3]! Ok."
        );
    }

    #[tokio::test]
    async fn extractive_style_answers_keep_each_marker_with_its_sentence() {
        let check = CrewGroundedness::new(Arc::new(HeuristicGroundednessChecker::default()));
        let passages = [
            passage(
                4,
                "Protected lanes raised weekday cycling counts by 31 percent.",
            ),
            passage(
                9,
                "Near-miss rates fell on corridors with physical separation.",
            ),
        ];
        let report = check
            .check(
                "q",
                "Protected lanes raised weekday cycling counts by 31 percent. [4] Near-miss rates fell on corridors with physical separation. [9]",
                &passages,
            )
            .await
            .unwrap();
        assert!(report.grounded, "{report:?}");
    }

    #[tokio::test]
    async fn run_markers_are_checked_against_the_passages_they_name() {
        let check = CrewGroundedness::new(Arc::new(HeuristicGroundednessChecker::default()));
        let passages = [
            passage(
                7,
                "Protected lanes raised weekday cycling counts by 31 percent.",
            ),
            passage(
                12,
                "Near-miss rates fell on corridors with physical separation.",
            ),
        ];
        let grounded = check
            .check(
                "q",
                "Weekday cycling counts rose 31 percent on protected lanes [7]. Near-miss rates fell on separated corridors [12].",
                &passages,
            )
            .await
            .unwrap();
        assert_eq!(grounded.checker, "heuristic");
        assert!(grounded.grounded, "{grounded:?}");
        assert_eq!(grounded.score, 1.0);

        // The same claims cited the other way round are not supported by what they cite.
        let swapped = check
            .check(
                "q",
                "Weekday cycling counts rose 31 percent on protected lanes [12]. Near-miss rates fell on separated corridors [7].",
                &passages,
            )
            .await
            .unwrap();
        assert!(!swapped.grounded, "{swapped:?}");
        assert_eq!(swapped.unsupported_claims.len(), 2);
    }
}
