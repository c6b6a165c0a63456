//! End to end: retrieval profiles and block sizes inside crews, run by the real `orkeon crew run`
//! (real models, real store): `max_passages` is honoured per agent and per attachment, every
//! attachment's lookup runs through its own profile (`corrective` included, retrieval only),
//! and `orkeon crew check` finds typos in profiles, `llm:` and `chunking:` maps at their line.

mod support;

use support::{crews_with_example_knowledge as crew_dir, orkeon, run_failing, run_json};

const CREW: &str = r#"name: profiled
llm: { provider: extractive }
profile: fast
rag:
  collections:
    support-kb:
      sources: ["knowledge/support/*.md"]
    onboarding:
      sources: ["knowledge/onboarding/*.md"]
      profile: corrective
agents:
  helper:
    role: Support agent
    goal: Answer from the knowledge bases
    knowledge:
      - support-kb
      - { collection: onboarding, max_passages: 1 }
    max_passages: 3
tasks:
  - name: answer
    agent: helper
    description: "How long do customers have to return a product, and what happens in the first week?"
    expected_output: A short answer with [n] citations
    citations: optional
"#;

#[test]
fn blocks_follow_max_passages_and_each_attachment_uses_its_profile() {
    let (work, crews) = crew_dir();
    let file = crews.join("profiled.yaml");
    std::fs::write(&file, CREW).expect("write crew");
    let mut cmd = orkeon(work.path(), &work.path().join("data"));
    cmd.args(["--json", "crew", "run"]).arg(&file);
    let result = run_json(&mut cmd);
    assert_eq!(result["run"]["state"], "finished", "{result}");
    let retrieval = result["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| &e["event"])
        .find(|e| e["type"] == "retrieval")
        .expect("a retrieval event")
        .clone();
    let citations = retrieval["citations"].as_array().expect("citations");
    assert_eq!(
        citations.len(),
        3,
        "agent max_passages: 3 → 3 passages: {retrieval}"
    );
    let from_onboarding = citations
        .iter()
        .filter(|c| c["collection"] == "onboarding")
        .count();
    assert_eq!(
        from_onboarding, 1,
        "the attachment's max_passages: 1 caps it"
    );

    // The trace names each collection's profile; onboarding ran the corrective graph's
    // retrieval half (its steps are there, no generation).
    let trace = serde_json::to_string(&retrieval["trace"]).unwrap();
    let lookups = retrieval["trace"][0]["trace"]
        .as_array()
        .expect("the knowledge lookup's per-collection traces");
    let by_collection = |name: &str| {
        lookups
            .iter()
            .find(|l| l["collection"] == name)
            .unwrap_or_else(|| panic!("no trace for {name}: {trace}"))
    };
    assert_eq!(by_collection("support-kb")["profile"], "fast");
    assert_eq!(by_collection("onboarding")["profile"], "corrective");
    let corrective = serde_json::to_string(&by_collection("onboarding")["trace"]).unwrap();
    assert!(
        corrective.contains("corrective:"),
        "corrective steps in the trace: {corrective}"
    );
}

#[test]
fn crew_check_locates_typos_in_profiles_llm_and_chunking() {
    let (work, crews) = crew_dir();
    let cases = [
        (
            "profile: fast",
            "profile: fsat",
            "fsat",
            "did you mean 'fast'?",
        ),
        (
            "llm: { provider: extractive }",
            "llm: { provider: extractiv }",
            "extractiv",
            "did you mean 'extractive'?",
        ),
        (
            "      sources: [\"knowledge/support/*.md\"]\n",
            "      sources: [\"knowledge/support/*.md\"]\n      chunking: { strategy: sentense }\n",
            "sentense",
            "did you mean 'sentence'?",
        ),
        (
            "{ collection: onboarding, max_passages: 1 }",
            "{ collection: onboarding, max_pasages: 1 }",
            "max_pasages",
            "did you mean 'max_passages'?",
        ),
    ];
    for (from, to, needle, hint) in cases {
        let text = CREW.replace(from, to);
        assert_ne!(text, CREW, "the case {from} applies");
        let file = crews.join("typo.yaml");
        std::fs::write(&file, &text).expect("write crew");
        let (line, column) = {
            let offset = text.find(needle).expect("needle");
            let before = &text[..offset];
            (
                before.matches('\n').count() + 1,
                before.rsplit('\n').next().unwrap().chars().count() + 1,
            )
        };
        let mut cmd = orkeon(work.path(), &work.path().join("data"));
        cmd.args(["crew", "check"]).arg(&file);
        let output = run_failing(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let place = format!("{}:{line}:{column}:", file.display());
        assert!(stderr.contains(&place), "{place} in: {stderr}");
        assert!(stderr.contains(hint), "{hint} in: {stderr}");
    }
}
