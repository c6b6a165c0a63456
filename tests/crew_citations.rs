//! End to end: the research example crew (`examples/crews/research.yaml`, its writer gets the
//! researcher's output as `context:`) run by the real `orkeon crew run`; its events alone show
//! that every `[n]` of the final brief is the passage the researcher meant by `[n]`.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use support::{copy_tree, orkeon, repo, run_json};

fn markers(text: &str) -> BTreeSet<u64> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        if let Some(close) = rest.find(']')
            && let Ok(n) = rest[..close].trim().parse::<u64>()
        {
            found.insert(n);
        }
    }
    found
}

fn passage_key(c: &serde_json::Value) -> (String, String) {
    (
        c["collection"].as_str().unwrap().to_string(),
        c["chunk_id"].as_str().unwrap().to_string(),
    )
}

#[test]
fn the_research_briefs_markers_mean_what_the_researcher_meant() {
    let work = tempfile::tempdir().expect("tempdir");
    let crews = work.path().join("crews");
    copy_tree(&repo().join("examples/crews"), &crews);
    let mut cmd = orkeon(work.path(), &work.path().join("data"));
    cmd.args(["--json", "crew", "run"])
        .arg(crews.join("research.yaml"));
    let result = run_json(&mut cmd);
    assert_eq!(result["run"]["state"], "finished", "{result}");
    let events: Vec<&serde_json::Value> = result["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| &e["event"])
        .collect();

    // One marker, one passage, across every retrieval of the run.
    let mut ledger: BTreeMap<u64, (String, String)> = BTreeMap::new();
    let mut given_to: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for event in events.iter().filter(|e| e["type"] == "retrieval") {
        let task = event["task"].as_str().unwrap().to_string();
        assert!(
            !event["trace"].as_array().expect("trace").is_empty(),
            "the retrieval trace is in the event: {event}"
        );
        for c in event["citations"].as_array().unwrap() {
            let marker = c["marker"].as_u64().unwrap();
            assert!(c["source_id"].is_string() && c["score_origin"].is_string());
            let key = passage_key(c);
            let known = ledger.entry(marker).or_insert_with(|| key.clone());
            assert_eq!(*known, key, "marker [{marker}] names two passages");
            given_to.entry(task.clone()).or_default().insert(marker);
        }
    }
    let distinct: BTreeSet<_> = ledger.values().collect();
    assert_eq!(distinct.len(), ledger.len(), "a passage got two markers");

    let completed: BTreeMap<String, &serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "task_completed")
        .map(|e| {
            (
                e["output"]["task"].as_str().unwrap().to_string(),
                &e["output"],
            )
        })
        .collect();
    let researcher = completed["gather_findings"];
    let brief = completed["write_brief"];
    assert_eq!(
        brief["output"], result["run"]["final_output"],
        "the brief is the final output"
    );

    // Every marker of the brief resolves, through its own citations, to the run's passage.
    let brief_markers = markers(brief["output"].as_str().unwrap());
    assert!(!brief_markers.is_empty(), "{brief}");
    let brief_citations: BTreeMap<u64, (String, String)> = brief["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["marker"].as_u64().unwrap(), passage_key(c)))
        .collect();
    assert_eq!(
        brief_citations.keys().copied().collect::<BTreeSet<_>>(),
        brief_markers
    );
    for (marker, key) in &brief_citations {
        assert_eq!(ledger.get(marker), Some(key), "[{marker}]");
    }
    // The writer's block re-used the researcher's markers for the passages both were given,
    // and where both cite a marker they cite the same passage.
    let shared: BTreeSet<u64> = given_to["gather_findings"]
        .intersection(&given_to["write_brief"])
        .copied()
        .collect();
    assert!(!shared.is_empty(), "{given_to:?}");
    for c in researcher["citations"].as_array().unwrap() {
        let marker = c["marker"].as_u64().unwrap();
        if let Some(key) = brief_citations.get(&marker) {
            assert_eq!(*key, passage_key(c), "[{marker}]");
        }
    }

    // The citation facts are in the events.
    for output in [researcher, brief] {
        assert_eq!(output["uncited"], false, "{output}");
        assert!(output.get("dangling_markers").is_none(), "{output}");
        let g = &output["groundedness"];
        assert_eq!(g["checker"], "heuristic", "{output}");
        assert!(g["score"].as_f64().unwrap() > 0.0, "{output}");
    }
}
