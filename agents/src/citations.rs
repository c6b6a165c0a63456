//! Citation markers in model output: which `[n]` a text cites, and which of a knowledge block's
//! citations a task output keeps.

use std::collections::BTreeSet;

use orkeon_crews::ports::KnowledgeCitation;

/// The markers a text cites: `[3]`, and each number of `[1, 2]` / `[1][2]`.
pub fn cited_markers(text: &str) -> BTreeSet<u32> {
    let mut markers = BTreeSet::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        let inside = &rest[..close];
        let numbers: Option<Vec<u32>> = inside
            .split(',')
            .map(|part| part.trim().parse::<u32>().ok())
            .collect();
        if let Some(numbers) = numbers {
            markers.extend(numbers);
            rest = &rest[close + 1..];
        }
    }
    markers
}

/// The citations a task output keeps: those whose marker the output cites, or all of them when
/// it cites none (markers are kept as numbered in the block so they still resolve).
pub fn citations_for_output(
    output: &str,
    citations: &[KnowledgeCitation],
) -> Vec<KnowledgeCitation> {
    let cited = cited_markers(output);
    let kept: Vec<KnowledgeCitation> = citations
        .iter()
        .filter(|c| cited.contains(&c.marker))
        .cloned()
        .collect();
    if kept.is_empty() {
        citations.to_vec()
    } else {
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn citation(marker: u32) -> KnowledgeCitation {
        KnowledgeCitation {
            marker,
            collection: "kb".into(),
            chunk_id: format!("chunk-{marker}"),
            source_id: format!("doc-{marker}.md"),
            snippet: String::new(),
            score: 1.0,
            score_origin: "hybrid".into(),
            start: 0,
            end: 0,
        }
    }

    #[test]
    fn finds_single_grouped_and_adjacent_markers() {
        let markers = cited_markers("A [1]. B [2, 4]. C [5][6]. Not [n] nor [x, 1] nor [7");
        assert_eq!(markers.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 5, 6]);
    }

    #[test]
    fn keeps_only_cited_citations_or_all_when_none_is_cited() {
        let all = vec![citation(1), citation(2), citation(3)];
        let kept = citations_for_output("Refunds take 14 days [3].", &all);
        assert_eq!(kept, vec![citation(3)]);
        assert_eq!(citations_for_output("No markers here.", &all), all);
        assert_eq!(citations_for_output("Unknown [9].", &all), all);
    }
}
