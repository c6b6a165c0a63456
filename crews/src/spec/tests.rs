//! Tests of crew file parsing: the happy path and every refusal, with positions.

use std::path::Path;

use super::*;

const SUPPORT: &str = r#"name: support
description: Answers customers
process: sequential
llm: { provider: extractive }
rag:
  collections:
    product-kb:
      sources: [kb/faq.md, "kb/**/*.md"]
      chunking: { strategy: recursive, max_tokens: 256, overlap: 32 }
agents:
  support:
    role: Support agent
    goal: Answer from the knowledge base
    knowledge: [product-kb]
    tools: [rag_search]
    max_passages: 5
  reviewer:
    role: Reviewer
    goal: Check the answer
tasks:
  - name: answer
    agent: support
    description: "Answer the customer: {{ inputs.question }}"
    expected_output: A short answer with [n] citations
  - name: review
    agent: reviewer
    description: "Review for {{inputs.audience}}"
    expected_output: The answer, corrected
    context: [answer]
kickoff: { on_load: true, inputs: { question: "How do refunds work?", retries: 3 } }
on_degraded: fail
"#;

fn parse(text: &str) -> Result<CrewSpec, SpecError> {
    parse_crew_str(text, Path::new("crews/support.yaml"))
}

fn parse_err(text: &str) -> SpecError {
    match parse(text) {
        Ok(spec) => panic!("expected an error, parsed {spec:?}"),
        Err(e) => e,
    }
}

/// 1-based (line, column) of the `nth` (0-based) occurrence of `needle` in `text`.
fn position_of(text: &str, needle: &str, nth: usize) -> (usize, usize) {
    let offset = text
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("'{needle}' #{nth} not in text"))
        .0;
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

fn assert_at(err: &SpecError, text: &str, needle: &str, nth: usize) {
    let (line, column) = position_of(text, needle, nth);
    assert_eq!(
        (err.line, err.column),
        (Some(line), Some(column)),
        "error {err} should point at '{needle}'"
    );
}

#[test]
fn parses_a_complete_sequential_crew() {
    let spec = parse(SUPPORT).unwrap();
    assert_eq!(spec.name, "support");
    assert_eq!(spec.file, Path::new("crews/support.yaml"));
    assert_eq!(spec.base_dir, Path::new("crews"));
    assert_eq!(spec.description.as_deref(), Some("Answers customers"));
    assert_eq!(spec.process, ProcessKind::Sequential);
    assert_eq!(
        spec.llm,
        Some(serde_json::json!({ "provider": "extractive" }))
    );
    assert_eq!(spec.rag.collections.len(), 1);
    let kb = &spec.rag.collections[0];
    assert_eq!(kb.name, "product-kb");
    assert_eq!(kb.sources, vec!["kb/faq.md", "kb/**/*.md"]);
    assert_eq!(
        kb.chunking,
        Some(serde_json::json!({ "strategy": "recursive", "max_tokens": 256, "overlap": 32 }))
    );
    let names: Vec<&str> = spec.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, vec!["support", "reviewer"], "file order is kept");
    let support = spec.agent("support").unwrap();
    assert_eq!(
        support.knowledge,
        vec![KnowledgeAttachment::named("product-kb")]
    );
    assert_eq!(support.tools, vec!["rag_search"]);
    assert_eq!(support.max_passages, Some(5));
    assert_eq!(support.profile().role, "Support agent");
    assert_eq!(spec.tasks.len(), 2);
    assert_eq!(spec.tasks[0].context, None);
    assert_eq!(spec.tasks[1].context, Some(vec!["answer".to_string()]));
    assert!(spec.graph.is_none());
    assert!(spec.kickoff.on_load);
    assert_eq!(spec.kickoff.inputs["question"], "How do refunds work?");
    assert_eq!(spec.kickoff.inputs["retries"], "3");
    assert_eq!(spec.on_degraded, DegradedPolicy::Fail);
    assert_eq!(
        spec.required_inputs().into_iter().collect::<Vec<_>>(),
        vec!["audience".to_string(), "question".to_string()]
    );
    let requests = spec.collection_requests();
    assert_eq!(requests[0].base_dir, Path::new("crews"));
    assert_eq!(requests[0].sources, kb.sources);
}

#[test]
fn defaults_name_process_and_policies() {
    let text = "agents:\n  a: { role: r, goal: g }\ntasks:\n  - { name: t, agent: a, description: d, expected_output: o }\n";
    let spec = parse_crew_str(text, Path::new("my-crew.yml")).unwrap();
    assert_eq!(spec.name, "my-crew");
    assert_eq!(spec.base_dir, Path::new("."));
    assert_eq!(spec.process, ProcessKind::Sequential);
    assert_eq!(spec.on_degraded, DegradedPolicy::Continue);
    assert!(!spec.kickoff.on_load);
    assert!(spec.rag.collections.is_empty());
    assert!(spec.llm.is_none());
}

#[test]
fn effective_inputs_override_the_file() {
    let spec = parse(SUPPORT).unwrap();
    let given = BTreeMap::from([("question".to_string(), "Shipping?".to_string())]);
    let inputs = spec.effective_inputs(&given);
    assert_eq!(inputs["question"], "Shipping?");
    assert_eq!(inputs["retries"], "3");
}

#[test]
fn display_matches_the_documented_form() {
    let text = SUPPORT.replace("agent: support\n", "agent: suport\n");
    let err = parse_err(&text);
    assert_at(&err, &text, "suport", 0);
    assert_eq!(
        err.to_string(),
        format!(
            "crews/support.yaml:{}:{}: task 'answer' names agent 'suport', which is not declared (did you mean 'support'?)",
            err.line.unwrap(),
            err.column.unwrap()
        )
    );
    assert_eq!(err.line, Some(22));
    assert_eq!(err.column, Some(12));
}

#[test]
fn rejects_yaml_syntax_errors_with_a_position() {
    let text = "name: x\nagents:\n  a: { role: r, goal: g\ntasks: []\n";
    let err = parse_err(text);
    assert!(err.line.is_some() && err.column.is_some(), "{err}");
    assert!(err.line >= Some(3), "{err}");

    let text = "name: x\n  bad: indentation\n";
    let err = parse_err(text);
    assert_eq!(err.line, Some(2), "{err}");
}

#[test]
fn shape_errors_say_what_was_expected() {
    let text = SUPPORT.replace("tools: [rag_search]", "tools: rag_search");
    let err = parse_err(&text);
    assert!(err.message.starts_with("expected a list"), "{err}");
    assert_at(&err, &text, "rag_search", 0);

    let text = SUPPORT.replace("process: sequential", "process: [a]");
    let err = parse_err(&text);
    assert_eq!(err.message, "expected a single word here, not a list");
    assert_at(&err, &text, "[a]", 0);

    let text = SUPPORT.replace("  reviewer:\n", "  support:\n");
    let err = parse_err(&text);
    assert_eq!(err.message, "duplicate key 'support'");
    assert_at(&err, &text, "support:\n    role: Reviewer", 0);
}

#[test]
fn rejects_unknown_fields_with_the_nearest_field() {
    let text = SUPPORT.replace("    goal: Answer from", "    gaol: Answer from");
    let err = parse_err(&text);
    assert!(err.message.contains("unknown field 'gaol'"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'goal'?"));
    assert_at(&err, &text, "gaol", 0);

    let text = SUPPORT.replace("on_degraded: fail", "on_degrade: fail");
    let err = parse_err(&text);
    assert_eq!(err.hint.as_deref(), Some("did you mean 'on_degraded'?"));
    assert_at(&err, &text, "on_degrade", 0);

    let text = SUPPORT.replace("      chunking:", "      chunkng:");
    let err = parse_err(&text);
    assert!(err.message.contains("'chunkng'"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'chunking'?"));
}

#[test]
fn rejects_unknown_process_and_policy_values() {
    let text = SUPPORT.replace("process: sequential", "process: sequental");
    let err = parse_err(&text);
    assert!(err.message.contains("unknown value 'sequental'"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'sequential'?"));
    assert_at(&err, &text, "sequental", 0);

    let text = SUPPORT.replace("on_degraded: fail", "on_degraded: explode");
    let err = parse_err(&text);
    assert_eq!(err.hint.as_deref(), Some("allowed values: continue, fail"));
}

#[test]
fn rejects_wrong_types() {
    let text = SUPPORT.replace("max_passages: 5", "max_passages: five");
    let err = parse_err(&text);
    assert_eq!(err.message, "expected a whole number (0 or more)");
    assert_at(&err, &text, "five", 0);

    let text = SUPPORT.replace("llm: { provider: extractive }", "llm: extractive");
    let err = parse_err(&text);
    assert!(err.message.contains("llm must be a map"), "{err}");
    assert_at(&err, &text, "extractive", 0);
}

#[test]
fn rejects_missing_required_fields() {
    let text = SUPPORT.replace("    goal: Check the answer\n", "");
    let err = parse_err(&text);
    assert_eq!(err.message, "missing field 'goal'");
    assert_at(&err, &text, "role: Reviewer", 0);
}

#[test]
fn a_missing_top_level_section_is_located() {
    let text = "name: x\nagents:\n  a: { role: r, goal: g }\n";
    let err = parse_err(text);
    assert_eq!(err.message, "missing field 'tasks'");
    assert!(err.line.is_some() && err.column.is_some(), "{err}");
}

#[test]
fn rejects_empty_agents_and_tasks() {
    let text =
        "agents: {}\ntasks:\n  - { name: t, agent: a, description: d, expected_output: o }\n";
    let err = parse_err(text);
    assert!(err.message.contains("no agents"), "{err}");
    assert_at(&err, text, "{}", 0);

    let text = "agents:\n  a: { role: r, goal: g }\ntasks: []\n";
    let err = parse_err(text);
    assert!(err.message.contains("no tasks"), "{err}");
    assert_at(&err, text, "[]", 0);
}

#[test]
fn rejects_duplicate_task_names_and_agent_keys() {
    let text = SUPPORT.replace("  - name: review\n", "  - name: answer\n");
    let err = parse_err(&text);
    assert!(
        err.message
            .contains("'answer' is used twice (first at line 21, column 11)"),
        "{err}"
    );
    assert_at(&err, &text, "answer\n    agent: reviewer", 0);
}

#[test]
fn rejects_an_undeclared_collection_with_the_nearest_name() {
    let text = SUPPORT.replace("knowledge: [product-kb]", "knowledge: [product-k]");
    let err = parse_err(&text);
    assert_eq!(
        err.message,
        "agent 'support' names collection 'product-k', which is not declared under rag.collections"
    );
    assert_eq!(err.hint.as_deref(), Some("did you mean 'product-kb'?"));
    assert_at(&err, &text, "product-k]", 0);
}

#[test]
fn rejects_unknown_tools() {
    let text = SUPPORT.replace("tools: [rag_search]", "tools: [rag_serch]");
    let err = parse_err(&text);
    assert!(err.message.contains("unknown tool 'rag_serch'"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'rag_search'?"));
    assert_at(&err, &text, "rag_serch", 0);

    let text = SUPPORT.replace("tools: [rag_search]", "tools: [web_browse]");
    let err = parse_err(&text);
    assert_eq!(
        err.hint.as_deref(),
        Some("allowed tools: rag_search, rag_ingest, rag_eval")
    );
}

#[test]
fn rejects_context_naming_unknown_later_or_same_tasks() {
    let text = SUPPORT.replace("context: [answer]", "context: [anwser]");
    let err = parse_err(&text);
    assert!(
        err.message.contains("task 'anwser', which is not declared"),
        "{err}"
    );
    assert_eq!(err.hint.as_deref(), Some("did you mean 'answer'?"));
    assert_at(&err, &text, "anwser", 0);

    let text = SUPPORT.replace("context: [answer]", "context: [review]");
    let err = parse_err(&text);
    assert!(err.message.contains("from itself"), "{err}");

    let text = SUPPORT.replace(
        "    expected_output: A short answer with [n] citations\n",
        "    expected_output: A short answer with [n] citations\n    context: [review]\n",
    );
    let err = parse_err(&text);
    assert!(err.message.contains("comes later in the file"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("move 'review' before 'answer'"));
    assert_at(&err, &text, "review]", 0);
}

#[test]
fn rejects_invalid_names_and_unclosed_placeholders() {
    let text = SUPPORT.replace("  - name: answer", "  - name: \"an answer\"");
    let err = parse_err(&text);
    assert!(
        err.message
            .contains("task name 'an answer' contains characters"),
        "{err}"
    );

    let text = SUPPORT.replace("{{ inputs.question }}", "{{ inputs.question");
    let err = parse_err(&text);
    assert!(err.message.contains("never closed"), "{err}");
    assert_at(&err, &text, "\"Answer the customer", 0);

    let err = parse_crew_str(
        "agents:\n  a: { role: r, goal: g }\ntasks:\n  - { name: t, agent: a, description: d, expected_output: o }\n",
        Path::new("crews/my crew.yaml"),
    )
    .unwrap_err();
    assert!(err.message.contains("taken from the file name"), "{err}");
    assert_eq!(err.line, None);
    assert_eq!(
        err.to_string().split(':').next(),
        Some("crews/my crew.yaml")
    );
}

#[test]
fn rejects_manager_outside_hierarchical() {
    let text = SUPPORT.replace(
        "on_degraded: fail",
        "manager: { llm: { provider: extractive } }",
    );
    let err = parse_err(&text);
    assert!(
        err.message.contains("only used by `process: hierarchical`"),
        "{err}"
    );
    assert_at(&err, &text, "{ llm: { provider", 0);

    let text = SUPPORT
        .replace("process: sequential", "process: hierarchical")
        .replace(
            "on_degraded: fail",
            "manager: { llm: { provider: openai, model: m } }",
        );
    let spec = parse(&text).unwrap();
    assert_eq!(spec.process, ProcessKind::Hierarchical);
    assert_eq!(
        spec.manager.unwrap().llm,
        Some(serde_json::json!({ "provider": "openai", "model": "m" }))
    );
}

const GRAPH: &str = r#"name: writer
process: graph
agents:
  writer: { role: Writer, goal: Write }
  editor: { role: Editor, goal: Edit }
tasks:
  - { name: draft, agent: writer, description: "Draft {{ inputs.topic }}", expected_output: A draft }
  - { name: review, agent: editor, description: Review the draft, expected_output: APPROVED or REVISE }
  - { name: publish, agent: writer, description: Publish, expected_output: Final text, context: [draft, review] }
graph:
  start: draft
  edges:
    - { from: draft, to: review }
    - { from: review, to: draft, when: { output_contains: "REVISE" } }
    - { from: review, to: publish, when: { output_matches: "(?i)approved" } }
    - { from: review, to: end }
    - { from: publish, to: end }
  max_iterations: 6
  max_seconds: 30
"#;

#[test]
fn parses_a_graph_crew() {
    let spec = parse(GRAPH).unwrap();
    let graph = spec.graph.as_ref().unwrap();
    assert_eq!(graph.start, "draft");
    assert_eq!(graph.max_iterations, 6);
    assert_eq!(graph.max_seconds, 30);
    assert_eq!(graph.edges.len(), 5);
    assert_eq!(
        graph.edges[1].when,
        Some(EdgePredicate::OutputContains("REVISE".to_string()))
    );
    let review: Vec<&EdgeSpec> = graph.edges_from("review").collect();
    assert_eq!(review.len(), 3);
    assert!(review[0].matches("please REVISE"));
    assert!(!review[0].matches("fine"));
    assert!(review[1].matches("Approved!"));
    assert!(review[2].matches("anything"));
    assert_eq!(
        serde_json::to_value(&graph.edges[2].when).unwrap(),
        serde_json::json!({ "output_matches": "(?i)approved" })
    );
}

#[test]
fn graph_budgets_default() {
    let text = GRAPH.replace("  max_iterations: 6\n  max_seconds: 30\n", "");
    let graph = parse(&text).unwrap().graph.unwrap();
    assert_eq!(graph.max_iterations, DEFAULT_MAX_ITERATIONS);
    assert_eq!(graph.max_seconds, DEFAULT_MAX_SECONDS);
}

#[test]
fn rejects_missing_or_misplaced_graph() {
    let text = GRAPH.split("graph:\n").next().unwrap().to_string();
    let err = parse_err(&text);
    assert!(err.message.contains("needs a `graph:` block"), "{err}");
    assert_at(&err, &text, "graph\n", 0);

    let text = GRAPH.replace("process: graph", "process: sequential");
    let err = parse_err(&text);
    assert!(
        err.message.contains("only used by `process: graph`"),
        "{err}"
    );
    assert_at(&err, &text, "start: draft", 0);
}

#[test]
fn rejects_edges_naming_unknown_tasks() {
    let text = GRAPH.replace("{ from: draft, to: review }", "{ from: draft, to: reveiw }");
    let err = parse_err(&text);
    assert!(
        err.message.contains("'reveiw' is not a declared task"),
        "{err}"
    );
    assert_eq!(err.hint.as_deref(), Some("did you mean 'review'?"));
    assert_at(&err, &text, "reveiw", 0);

    let text = GRAPH.replace("{ from: publish, to: end }", "{ from: pubish, to: end }");
    let err = parse_err(&text);
    assert_eq!(err.hint.as_deref(), Some("did you mean 'publish'?"));
    assert_at(&err, &text, "pubish", 0);

    let text = GRAPH.replace("start: draft", "start: drat");
    let err = parse_err(&text);
    assert!(err.message.contains("graph start 'drat'"), "{err}");
    assert_at(&err, &text, "drat", 0);

    let text = GRAPH.replace("{ from: publish, to: end }", "{ from: end, to: publish }");
    let err = parse_err(&text);
    assert!(err.message.contains("cannot start at 'end'"), "{err}");
}

#[test]
fn rejects_unreachable_and_dead_end_nodes() {
    let text = GRAPH.replace(
        "    - { from: review, to: publish, when: { output_matches: \"(?i)approved\" } }\n",
        "",
    );
    let err = parse_err(&text);
    assert!(
        err.message
            .contains("'publish' is not reachable from the start task 'draft'"),
        "{err}"
    );
    assert_at(&err, &text, "publish", 0);

    let text = GRAPH.replace("    - { from: publish, to: end }\n", "");
    let err = parse_err(&text);
    assert!(
        err.message.contains("'publish' has no outgoing edge"),
        "{err}"
    );
    assert_at(&err, &text, "publish", 0);

    let text = GRAPH
        .replace("name: publish", "name: end")
        .replace("publish", "end");
    let err = parse_err(&text);
    assert!(
        err.message.contains("cannot have a task named 'end'"),
        "{err}"
    );
}

#[test]
fn rejects_bad_when_predicates() {
    let text = GRAPH.replace("output_contains: \"REVISE\"", "output_has: \"REVISE\"");
    let err = parse_err(&text);
    assert_eq!(
        err.hint.as_deref(),
        Some("allowed fields: output_contains, output_not_contains, output_matches")
    );
    assert_at(&err, &text, "output_has", 0);

    let text = GRAPH.replace("output_contains: \"REVISE\"", "output_contain: \"REVISE\"");
    let err = parse_err(&text);
    assert_eq!(err.hint.as_deref(), Some("did you mean 'output_contains'?"));

    let text = GRAPH.replace(
        "output_contains: \"REVISE\"",
        "output_contains: \"REVISE\", output_not_contains: OK",
    );
    let err = parse_err(&text);
    assert!(
        err.message.contains("exactly one predicate, found 2"),
        "{err}"
    );
    assert_at(&err, &text, "{ output_contains: \"REVISE\", output_not", 0);

    let text = GRAPH.replace("output_contains: \"REVISE\"", "");
    let err = parse_err(&text);
    assert!(err.message.contains("found 0"), "{err}");

    let text = GRAPH.replace("(?i)approved", "(unclosed");
    let err = parse_err(&text);
    assert!(
        err.message.contains("not a valid regular expression"),
        "{err}"
    );
    assert_at(&err, &text, "\"(unclosed\"", 0);

    let text = GRAPH.replace("output_contains: \"REVISE\"", "output_contains: \"\"");
    let err = parse_err(&text);
    assert!(err.message.contains("is empty"), "{err}");
}

#[test]
fn rejects_zero_budgets_and_non_scalar_inputs() {
    let text = GRAPH.replace("max_iterations: 6", "max_iterations: 0");
    let err = parse_err(&text);
    assert!(
        err.message.contains("max_iterations` must be at least 1"),
        "{err}"
    );
    assert_at(&err, &text, "0\n", 0);

    let text = SUPPORT.replace("retries: 3", "retries: [1, 2]");
    let err = parse_err(&text);
    assert!(
        err.message
            .contains("kickoff input 'retries' must be a single value"),
        "{err}"
    );
    assert_at(&err, &text, "[1, 2]", 0);
}

#[test]
fn graph_context_may_name_later_tasks() {
    let text = GRAPH.replace(
        "description: \"Draft {{ inputs.topic }}\", expected_output: A draft }",
        "description: \"Draft {{ inputs.topic }}\", expected_output: A draft, context: [review] }",
    );
    let spec = parse(&text).unwrap();
    assert_eq!(spec.tasks[0].context, Some(vec!["review".to_string()]));
}

#[test]
fn parse_crew_file_reads_from_disk_and_reports_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("support.yaml");
    std::fs::write(&path, SUPPORT).unwrap();
    let spec = parse_crew_file(&path).unwrap();
    assert_eq!(spec.base_dir, dir.path());
    assert_eq!(spec.file, path);

    let missing = dir.path().join("absent.yaml");
    let err = parse_crew_file(&missing).unwrap_err();
    assert!(err.message.contains("cannot read the crew file"), "{err}");
    assert_eq!(err.file, missing);
}

#[test]
fn empty_file_is_refused_clearly() {
    for text in ["", "# only a comment\n"] {
        let err = parse_err(text);
        assert_eq!(err.message, "the crew file is empty or ends too early");
        assert!(err.hint.as_deref().unwrap().contains("agents:"), "{err}");
    }
}

#[test]
fn citations_policy_defaults_by_agent_and_is_overridable_per_crew_and_task() {
    let spec = parse(SUPPORT).unwrap();
    assert_eq!(spec.citations, None);
    let policy = |spec: &CrewSpec, task: &str| {
        let task = spec.task(task).unwrap();
        spec.citation_policy(task, spec.agent(&task.agent).unwrap())
    };
    assert_eq!(
        policy(&spec, "answer"),
        CitationPolicy::Required,
        "agent has knowledge"
    );
    assert_eq!(
        policy(&spec, "review"),
        CitationPolicy::Optional,
        "agent has none"
    );

    let text = format!("{SUPPORT}citations: optional\n");
    let spec = parse(&text).unwrap();
    assert_eq!(policy(&spec, "answer"), CitationPolicy::Optional);

    let text = format!("{SUPPORT}citations: optional\n").replace(
        "    context: [answer]\n",
        "    context: [answer]\n    citations: required\n",
    );
    let spec = parse(&text).unwrap();
    assert_eq!(policy(&spec, "review"), CitationPolicy::Required);
    assert_eq!(policy(&spec, "answer"), CitationPolicy::Optional);
}

#[test]
fn rejects_unknown_citations_values_and_misspelt_keys() {
    let text = format!("{SUPPORT}citations: requird\n");
    let err = parse_err(&text);
    assert!(err.message.contains("unknown value 'requird'"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'required'?"));
    assert_at(&err, &text, "requird", 0);

    let text = SUPPORT.replace(
        "    context: [answer]\n",
        "    context: [answer]\n    citation: optional\n",
    );
    let err = parse_err(&text);
    assert!(err.message.contains("unknown field 'citation'"), "{err}");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'citations'?"));
    assert_at(&err, &text, "citation:", 0);
}

/// A host that knows three profiles, one provider and one chunker — the shape of the daemon's
/// checks, small enough to read.
struct TestHost;

impl SettingsChecks for TestHost {
    fn llm(&self, value: &serde_json::Value) -> Result<(), SettingProblem> {
        match value.get("provider").and_then(|p| p.as_str()) {
            Some("extractive") | None => Ok(()),
            Some(other) => Err(SettingProblem {
                path: vec!["provider".into()],
                message: format!("unknown provider '{other}'"),
                hint: suggest::hint(other, ["extractive"], "providers"),
            }),
        }
    }
    fn chunking(&self, value: &serde_json::Value) -> Result<(), SettingProblem> {
        match value.get("max_tokens").and_then(|n| n.as_u64()) {
            Some(0) => Err(SettingProblem {
                path: vec!["max_tokens".into()],
                message: "must be at least 1".into(),
                hint: None,
            }),
            _ => Ok(()),
        }
    }
    fn profiles(&self) -> Vec<String> {
        vec!["fast".into(), "balanced".into(), "corrective".into()]
    }
}

fn parse_checked(text: &str) -> Result<CrewSpec, SpecError> {
    parse_crew_str_checked(text, Path::new("crews/support.yaml"), &TestHost)
}

const PROFILED: &str = r#"profile: balanced
rag:
  collections:
    kb: { sources: [kb/*.md], profile: fast }
    notes: { sources: [notes/*.md] }
    papers: { sources: [papers/*.md] }
agents:
  a:
    role: r
    goal: g
    knowledge:
      - kb
      - notes
      - { collection: papers, profile: corrective, max_passages: 3 }
    max_passages: 4
tasks:
  - { name: t, agent: a, description: d, expected_output: o }
"#;

#[test]
fn profiles_resolve_attachment_then_collection_then_crew() {
    let spec = parse_checked(PROFILED).unwrap();
    assert_eq!(spec.profile.as_deref(), Some("balanced"));
    let agent = spec.agent("a").unwrap();
    assert_eq!(
        agent.knowledge,
        vec![
            KnowledgeAttachment {
                collection: "kb".into(),
                profile: Some("fast".into()),
                max_passages: None
            },
            KnowledgeAttachment {
                collection: "notes".into(),
                profile: Some("balanced".into()),
                max_passages: None
            },
            KnowledgeAttachment {
                collection: "papers".into(),
                profile: Some("corrective".into()),
                max_passages: Some(3)
            },
        ]
    );
    assert_eq!(agent.profile().max_passages, Some(4));
    // Without a crew profile, an attachment with none leaves the choice to the host.
    let spec = parse_checked(&PROFILED.replace("profile: balanced\n", "")).unwrap();
    assert_eq!(spec.agent("a").unwrap().knowledge[1].profile, None);
}

#[test]
fn unknown_profiles_are_located_with_the_nearest_name() {
    for (from, to, needle) in [
        ("profile: balanced", "profile: balancd", "balancd"),
        ("profile: fast }", "profile: fsat }", "fsat"),
        ("profile: corrective", "profile: corective", "corective"),
    ] {
        let text = PROFILED.replace(from, to);
        let err = parse_checked(&text).unwrap_err();
        assert!(
            err.message.contains(&format!("unknown profile '{needle}'")),
            "{err}"
        );
        assert!(
            err.hint
                .as_deref()
                .unwrap_or("")
                .starts_with("did you mean"),
            "{err}"
        );
        assert_at(&err, &text, needle, 0);
    }
    // Without a host, any name is accepted (the host checks it at kickoff).
    assert!(
        parse_crew_str(
            &PROFILED.replace("profile: balanced", "profile: mine"),
            Path::new("c.yaml")
        )
        .is_ok()
    );
}

#[test]
fn knowledge_maps_are_checked_key_by_key() {
    let text = PROFILED.replace("max_passages: 3 }", "max_pasages: 3 }");
    let err = parse_checked(&text).unwrap_err();
    assert!(
        err.message.contains("unknown knowledge key 'max_pasages'"),
        "{err}"
    );
    assert_eq!(err.hint.as_deref(), Some("did you mean 'max_passages'?"));
    assert_at(&err, &text, "max_pasages", 0);

    let text = PROFILED.replace("max_passages: 3 }", "max_passages: 0 }");
    let err = parse_checked(&text).unwrap_err();
    assert!(err.message.contains("at least 1"), "{err}");

    let text = PROFILED.replace("{ collection: papers,", "{ collection: paper,");
    let err = parse_checked(&text).unwrap_err();
    assert_eq!(err.hint.as_deref(), Some("did you mean 'papers'?"));
    assert_at(&err, &text, "paper,", 0);

    let text = PROFILED.replace("{ collection: papers, ", "{ ");
    let err = parse_checked(&text).unwrap_err();
    assert!(err.message.contains("needs `collection:`"), "{err}");
}

#[test]
fn host_checks_point_at_the_key_inside_llm_and_chunking() {
    let text = SUPPORT.replace(
        "llm: { provider: extractive }",
        "llm:\n  provider: extractiv",
    );
    let err = parse_checked(&text).unwrap_err();
    assert_eq!(err.message, "llm.provider: unknown provider 'extractiv'");
    assert_eq!(err.hint.as_deref(), Some("did you mean 'extractive'?"));
    assert_at(&err, &text, "extractiv", 0);

    let text = SUPPORT.replace("max_tokens: 256", "max_tokens: 0");
    let err = parse_checked(&text).unwrap_err();
    assert_eq!(
        err.message,
        "rag.collections.product-kb.chunking.max_tokens: must be at least 1"
    );
    assert_at(&err, &text, "0, overlap", 0);
}

#[test]
fn ephemeral_collections_are_listed_and_cannot_also_be_shared() {
    let crew = |flags: &str| {
        format!(
            "name: trial\nrag:\n  collections:\n    kept: {{ sources: [a.md] }}\n    tmp: {{ sources: [b.md], {flags} }}\nagents:\n  a: {{ role: r, goal: g, knowledge: [kept, tmp] }}\ntasks:\n  - {{ name: t, agent: a, description: d, expected_output: o }}\n"
        )
    };
    let spec = parse(&crew("ephemeral: true")).expect("parses");
    assert_eq!(spec.ephemeral_collections(), ["tmp"]);
    assert!(!spec.rag.collections[0].ephemeral);

    let text = crew("shared: true, ephemeral: true");
    let err = parse_err(&text);
    assert!(err.message.contains("both ephemeral and shared"), "{err}");
    assert!(
        err.hint.as_deref().unwrap_or("").contains("shared: true"),
        "{err}"
    );
    assert_at(&err, &text, "true }", 0);
}
