//! Property-based fuzzing (proptest, stable Rust) of the crews crate's parsers of outside
//! input: crew YAML files (arbitrary text, and a valid crew file mutated line by line and token
//! by token, plus nesting and alias bombs) and the `[n]` citation markers of model output
//! (`cited_markers`, `neutralise_markers`, `map_markers`, the ledger's check). Nothing may
//! panic; the marker functions keep their contracts; inputs a quadratic scan could not finish
//! complete. Bounded case counts: a few seconds in a debug build.

use std::collections::BTreeMap;
use std::path::Path;

use orkeon_crews::citations::{CitationLedger, cited_markers, map_markers, neutralise_markers};
use orkeon_crews::ports::KnowledgeCitation;
use orkeon_crews::spec::parse_crew_str;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const CREW: &str = r#"name: support
description: Answers from the knowledge base
process: sequential
llm: { provider: extractive }
rag:
  collections:
    kb:
      sources: ["kb/*.md", "faq.md"]
      chunking: { strategy: recursive, max_tokens: 256, overlap: 32 }
agents:
  support:
    role: Support agent
    goal: Answer from the knowledge base
    knowledge: [kb]
    tools: [rag_search]
    max_passages: 5
  writer:
    role: Writer
    goal: Summarise
tasks:
  - name: answer
    agent: support
    description: "Answer: {{ inputs.question }}"
    expected_output: A short answer with [n] citations
  - name: summary
    agent: writer
    description: "Summarise the answer about {{ inputs.question }}"
    expected_output: One sentence
    context: [answer]
"#;

/// YAML fragments a mutation may splice into a line.
const YAML_TOKENS: &[&str] = &[
    ": ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "!!str ",
    "!!binary ",
    "|",
    ">",
    "\"",
    "'",
    "#",
    "~",
    "null",
    "<<: *a",
    "\t",
    "  ",
    "\u{feff}",
    "%YAML 1.2",
    "---",
    "...",
    "? ",
    "{{ inputs.x }}",
    "999999999999999999999",
    "-1",
    ".inf",
    "kickoff:",
    "on_load: true",
];

#[derive(Debug, Clone)]
enum Edit {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Insert(usize, usize, usize),
    ReplaceChar(usize, char),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::DeleteLine),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (any::<usize>(), any::<usize>(), 0..YAML_TOKENS.len())
            .prop_map(|(l, c, t)| Edit::Insert(l, c, t)),
        (any::<usize>(), any::<char>()).prop_map(|(at, c)| Edit::ReplaceChar(at, c)),
    ]
}

fn apply(edits: &[Edit]) -> String {
    let mut lines: Vec<String> = CREW.lines().map(str::to_owned).collect();
    for edit in edits {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match *edit {
            Edit::DeleteLine(l) => {
                lines.remove(l % n);
            }
            Edit::DuplicateLine(l) => {
                let line = lines[l % n].clone();
                lines.insert(l % n, line);
            }
            Edit::SwapLines(a, b) => lines.swap(a % n, b % n),
            Edit::Insert(l, c, t) => {
                let line = &mut lines[l % n];
                let boundaries: Vec<usize> = line
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain([line.len()])
                    .collect();
                let at = boundaries[c % boundaries.len()];
                line.insert_str(at, YAML_TOKENS[t]);
            }
            Edit::ReplaceChar(at, ch) => {
                let text = lines.join("\n");
                let chars: Vec<char> = text.chars().collect();
                let mut chars = chars;
                if !chars.is_empty() {
                    let i = at % chars.len();
                    chars[i] = ch;
                }
                lines = chars
                    .into_iter()
                    .collect::<String>()
                    .lines()
                    .map(str::to_owned)
                    .collect();
            }
        }
    }
    lines.join("\n")
}

fn check_crew(text: &str) {
    match parse_crew_str(text, Path::new("crews/fuzz.yaml")) {
        Ok(spec) => {
            assert!(!spec.name.is_empty());
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
}

#[test]
fn the_seed_crew_parses() {
    let spec = parse_crew_str(CREW, Path::new("crews/support.yaml")).expect("valid");
    assert_eq!(spec.name, "support");
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn crew_yaml_of_any_text_is_parsed_or_refused(text in "(?s).{0,512}") {
        check_crew(&text);
    }

    #[test]
    fn mutated_crew_files_are_parsed_or_refused(edits in proptest::collection::vec(edit(), 1..6)) {
        check_crew(&apply(&edits));
    }
}

/// Nesting and alias expansion bombs: refused or parsed, in bounded memory and stack.
#[test]
fn crew_yaml_bombs_are_refused() {
    for depth in [64, 1_000, 100_000] {
        check_crew(&format!(
            "name: x\ndescription: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ));
        check_crew(&format!(
            "name: x\ndescription: {}1{}\n",
            "{a: ".repeat(depth),
            "}".repeat(depth)
        ));
        check_crew(&format!("name: x\nagents:\n{}\n", "- ".repeat(depth)));
    }
    let mut laughs = String::from(
        "a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n",
    );
    for i in 1..10 {
        let previous = format!("*a{}", i - 1);
        laughs.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [previous.as_str(); 9].join(", ")
        ));
    }
    check_crew(&format!("name: x\n{laughs}description: *a9\n"));
}

fn passage(marker: u32) -> KnowledgeCitation {
    KnowledgeCitation {
        marker,
        collection: "kb".into(),
        chunk_id: format!("c{marker}"),
        source_id: "a.md".into(),
        snippet: "text".into(),
        score: 1.0,
        score_origin: "vector".into(),
        start: 0,
        end: 4,
        untrusted: false,
    }
}

/// Text biased towards marker syntax.
fn markerish() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("[".to_string()),
            Just("]".to_string()),
            Just(", ".to_string()),
            Just(";".to_string()),
            Just(" ".to_string()),
            "[0-9]{1,11}",
            "[a-zé.]{0,4}",
            Just("[3]".to_string()),
            Just("[1, 2]".to_string()),
        ],
        0..80,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn marker_functions_keep_their_contracts(text in prop_oneof!["(?s).{0,256}", markerish()], keep in 0u32..6) {
        let cited = cited_markers(&text);
        for marker in &cited {
            prop_assert!(text.contains(&marker.to_string()), "{marker} not in {text:?}");
        }
        // Neutralised text cites nothing, and keeps every other character.
        let neutral = neutralise_markers(&text);
        prop_assert!(cited_markers(&neutral).is_empty(), "{neutral:?}");
        prop_assert_eq!(neutral.chars().count(), text.chars().count());
        // The identity map changes nothing; dropping everything leaves no marker.
        let (same, dropped) = map_markers(&text, Some);
        prop_assert_eq!(&same, &text);
        prop_assert!(dropped.is_empty());
        // Dropping everything reports every marker. (map_markers alone may leave a marker:
        // removing a group can fuse the text around it into a new one — `[0, 0, 0[3]]` →
        // `[0, 0, 0]`; the ledger's check below must not.)
        let (_, dropped) = map_markers(&text, |_| None);
        prop_assert_eq!(dropped.len(), cited.len());
        // The ledger cites only passages it holds, and its text keeps no marker it cannot
        // resolve.
        let ledger = CitationLedger::from_passages(&(1..=keep).map(passage).collect::<Vec<_>>());
        let check = ledger.check_output(&text);
        prop_assert!(
            cited_markers(&check.text).iter().all(|&n| n >= 1 && n <= keep),
            "{:?} → {:?}", text, check.text
        );
        prop_assert!(check.cited.iter().all(|c| c.marker >= 1 && c.marker <= keep));
        prop_assert_eq!(check.uncited, check.cited.is_empty());
        prop_assert!(check.dangling_markers.iter().all(|&n| n == 0 || n > keep));
        let _ = CitationLedger::renumber_text(&text, &BTreeMap::from([(1, 2), (2, 1)]));
    }
}

/// Inputs a quadratic marker scan could not finish: they must simply complete.
#[test]
fn marker_scans_stay_linear_on_bracket_floods() {
    let floods = [
        "[".repeat(4 << 20),
        "[1, 2, 3, ".repeat(1 << 19),
        format!("{}]", "[1".repeat(2 << 20)),
        "[ ".repeat(2 << 20),
    ];
    for text in &floods {
        let _ = cited_markers(text);
        let _ = neutralise_markers(text);
        let _ = map_markers(text, |n| (n % 2 == 0).then_some(n));
        let _ = CitationLedger::from_passages(&[passage(1)]).check_output(text);
    }
    assert_eq!(
        cited_markers(&format!("{}[7]", "[".repeat(1 << 20))).len(),
        1
    );
}
