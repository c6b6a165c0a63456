//! Turns a [`RawCrew`] into a [`CrewSpec`], checking names, cross references, the graph and
//! templates; and turns YAML/serde errors into [`SpecError`]s with positions and hints.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use serde_saphyr::{Location, MessageFormatter, Spanned};

use super::raw::{OrderedMap, RawAgent, RawCrew, RawEdge, RawGraph, RawTask, RawWhen};
use super::spanned_value::SpannedValue;
use super::{
    AgentSpec, CollectionSpec, CrewSpec, DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_SECONDS,
    EdgePredicate, EdgeSpec, GRAPH_END, GraphSpec, KNOWN_TOOLS, KickoffSpec, ManagerSpec,
    OutputPattern, ProcessKind, RagSpec, SettingProblem, SettingsChecks, SpecError, TaskSpec,
    suggest, template,
};
use crate::ports::KnowledgeAttachment;

const MAX_NAME_CHARS: usize = 64;

fn position(location: Location) -> (Option<usize>, Option<usize>) {
    if location == Location::UNKNOWN || location.line() == 0 {
        (None, None)
    } else {
        let column = usize::try_from(location.column()).ok().filter(|c| *c > 0);
        (usize::try_from(location.line()).ok(), column)
    }
}

/// A YAML syntax or shape error as a [`SpecError`].
pub(super) fn yaml_error(file: &Path, error: &serde_saphyr::Error) -> SpecError {
    let error = error.without_snippet();
    let (line, column) = error.location().map(position).unwrap_or((None, None));
    let (message, hint) = match error {
        serde_saphyr::Error::SerdeUnknownField {
            field, expected, ..
        } => (
            format!("unknown field '{field}'"),
            Some(known_values_hint(field, expected, "fields")),
        ),
        serde_saphyr::Error::SerdeUnknownVariant {
            variant, expected, ..
        } => (
            format!("unknown value '{variant}'"),
            Some(known_values_hint(variant, expected, "values")),
        ),
        serde_saphyr::Error::SerdeMissingField { field, .. } => (
            format!("missing field '{field}'"),
            Some(format!("add `{field}:` here")),
        ),
        serde_saphyr::Error::Eof { .. } => (
            "the crew file is empty or ends too early".to_string(),
            Some("a crew file needs at least `agents:` and `tasks:`".to_string()),
        ),
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => (
            match key {
                Some(key) => format!("duplicate key '{key}'"),
                None => "duplicate key".to_string(),
            },
            Some("each key may appear once in a map; remove or rename one".to_string()),
        ),
        serde_saphyr::Error::Unexpected { expected, .. } => {
            (format!("expected {}", friendly_expectation(expected)), None)
        }
        serde_saphyr::Error::InvalidScalar { ty, .. } => {
            (format!("expected {}", friendly_expectation(ty)), None)
        }
        serde_saphyr::Error::ExternallyTaggedEnumExpectedScalarOrMapping { .. } => {
            ("expected a single word here, not a list".to_string(), None)
        }
        other => (
            serde_saphyr::DefaultMessageFormatter
                .format_message(other)
                .into_owned(),
            None,
        ),
    };
    SpecError {
        file: file.to_path_buf(),
        line,
        column,
        message,
        hint,
    }
}

/// Words a YAML user understands for what the deserializer expected.
fn friendly_expectation(expected: &str) -> &str {
    match expected {
        "sequence start" => "a list (`[a, b]` or lines starting with `- `)",
        "mapping start" => "a map (`key: value` lines or `{ key: value }`)",
        "u8" | "u16" | "u32" | "u64" | "usize" | "u128" => "a whole number (0 or more)",
        "i8" | "i16" | "i32" | "i64" | "isize" | "i128" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" => "true or false",
        other => other,
    }
}

fn known_values_hint(given: &str, expected: &[&'static str], kind: &str) -> String {
    match suggest::nearest(given, expected.iter().copied()) {
        Some(near) => format!("did you mean '{near}'?"),
        None if expected.is_empty() => format!("no {kind} are allowed here"),
        None => format!("allowed {kind}: {}", expected.join(", ")),
    }
}

/// Builds [`SpecError`]s for one file and runs the host's checks.
struct Errors<'a> {
    file: &'a Path,
    checks: &'a dyn SettingsChecks,
}

impl Errors<'_> {
    fn at(&self, location: Location, message: String, hint: Option<String>) -> SpecError {
        let (line, column) = position(location);
        SpecError {
            file: self.file.to_path_buf(),
            line,
            column,
            message,
            hint,
        }
    }

    fn at_value<T>(&self, value: &Spanned<T>, message: String, hint: Option<String>) -> SpecError {
        self.at(value.referenced, message, hint)
    }

    fn check_name(&self, name: &Spanned<String>, what: &str) -> Result<(), SpecError> {
        name_problem(&name.value).map_or(Ok(()), |problem| {
            Err(self.at_value(
                name,
                format!("{what} '{}' {problem}", name.value),
                Some(
                    "use 1-64 characters from A-Z a-z 0-9 _ - . starting with a letter or digit"
                        .to_string(),
                ),
            ))
        })
    }

    /// A map of settings as JSON, checked by `check` (one of the host's checks); a problem is
    /// reported at the key it names.
    fn check_settings(
        &self,
        value: &Spanned<SpannedValue>,
        what: &str,
        check: impl Fn(&serde_json::Value) -> Result<(), SettingProblem>,
    ) -> Result<serde_json::Value, SpecError> {
        if value.value.entries().is_none() {
            return Err(self.at_value(
                value,
                format!(
                    "{what} must be a map of settings, found {}",
                    value.value.kind()
                ),
                Some(format!("write it as `{what}: {{ key: value, ... }}`")),
            ));
        }
        let json = value.value.to_json();
        check(&json).map_err(|problem| {
            let location = value.value.locate(&problem.path, value.referenced);
            let key = std::iter::once(what.to_string())
                .chain(problem.path.iter().cloned())
                .collect::<Vec<_>>()
                .join(".");
            self.at(
                location,
                format!("{key}: {}", problem.message),
                problem.hint,
            )
        })?;
        Ok(json)
    }

    /// A profile name the host knows (any non-empty name when the host lists none).
    fn check_profile(&self, profile: &Spanned<String>, what: &str) -> Result<String, SpecError> {
        let name = profile.value.trim();
        if name.is_empty() {
            return Err(self.at_value(
                profile,
                format!("{what} is empty"),
                Some("name a profile or remove the key".to_string()),
            ));
        }
        let known = self.checks.profiles();
        if known.is_empty() || known.iter().any(|k| k.eq_ignore_ascii_case(name)) {
            return Ok(name.to_string());
        }
        Err(self.at_value(
            profile,
            format!("{what} names unknown profile '{name}'"),
            suggest::hint(name, known.iter().map(String::as_str), "profiles"),
        ))
    }

    fn check_text(&self, value: &Spanned<String>, what: &str) -> Result<String, SpecError> {
        if value.value.trim().is_empty() {
            return Err(self.at_value(value, format!("{what} is empty"), None));
        }
        self.check_placeholders(value, what)?;
        Ok(value.value.clone())
    }

    fn check_placeholders(&self, value: &Spanned<String>, what: &str) -> Result<(), SpecError> {
        template::check_closed(&value.value).map_err(|e| {
            self.at_value(
                value,
                format!("{what}: {e}"),
                Some("close it, e.g. `{{ inputs.question }}`".to_string()),
            )
        })
    }
}

fn name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => Some("is empty"),
        Some(first) if !first.is_ascii_alphanumeric() => {
            Some("must start with a letter or a digit")
        }
        _ if name.chars().count() > MAX_NAME_CHARS => Some("is longer than 64 characters"),
        _ if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) =>
        {
            Some("contains characters other than A-Z a-z 0-9 _ - .")
        }
        _ => None,
    }
}

/// Checks `raw` and builds the spec.
pub(super) fn validate(
    raw: RawCrew,
    file: &Path,
    checks: &dyn SettingsChecks,
) -> Result<CrewSpec, SpecError> {
    let errors = Errors { file, checks };
    let name = crew_name(&raw, file, &errors)?;
    let process = raw.process.as_ref().map(|p| p.value).unwrap_or_default();

    let llm = raw
        .llm
        .as_ref()
        .map(|v| errors.check_settings(v, "llm", |j| checks.llm(j)))
        .transpose()?;
    let profile = raw
        .profile
        .as_ref()
        .map(|p| errors.check_profile(p, "profile"))
        .transpose()?;

    let retry = match &raw.retry {
        None => 0,
        Some(retry) if retry.value > super::MAX_RETRY => {
            return Err(errors.at_value(
                retry,
                format!(
                    "`retry: {}` is more than the {} retries a run may have",
                    retry.value,
                    super::MAX_RETRY
                ),
                Some(format!("use 0 to {}", super::MAX_RETRY)),
            ));
        }
        Some(retry) => retry.value,
    };

    let manager = match &raw.manager {
        None => None,
        Some(manager) if process != ProcessKind::Hierarchical => {
            return Err(errors.at_value(
                manager,
                format!("`manager` is only used by `process: hierarchical`, but this crew's process is {process}"),
                Some("remove `manager:` or set `process: hierarchical`".to_string()),
            ));
        }
        Some(manager) => Some(ManagerSpec {
            llm: manager
                .value
                .llm
                .as_ref()
                .map(|v| errors.check_settings(v, "manager.llm", |j| checks.llm(j)))
                .transpose()?,
        }),
    };

    let rag = rag_spec(&raw, &errors)?;
    let agents = agent_specs(&raw.agents, &rag, profile.as_deref(), &errors)?;
    let agent_names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
    let tasks = task_specs(&raw.tasks, &agent_names, process, &errors)?;

    let graph = match (&raw.graph, process) {
        (Some(graph), ProcessKind::Graph) => Some(graph_spec(graph, &raw.tasks, &errors)?),
        (None, ProcessKind::Graph) => {
            let location = raw
                .process
                .as_ref()
                .map_or(Location::UNKNOWN, |p| p.referenced);
            return Err(errors.at(
                location,
                "`process: graph` needs a `graph:` block".to_string(),
                Some("add `graph: { start: TASK, edges: [{ from: TASK, to: end }] }`".to_string()),
            ));
        }
        (Some(graph), other) => {
            return Err(errors.at_value(
                graph,
                format!(
                    "`graph:` is only used by `process: graph`, but this crew's process is {other}"
                ),
                Some("remove `graph:` or set `process: graph`".to_string()),
            ));
        }
        (None, _) => None,
    };

    let kickoff = match &raw.kickoff {
        None => KickoffSpec::default(),
        Some(kickoff) => KickoffSpec {
            on_load: kickoff.on_load,
            inputs: kickoff_inputs(kickoff.inputs.as_ref(), &errors)?,
        },
    };

    let base_dir = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };

    Ok(CrewSpec {
        name,
        file: file.to_path_buf(),
        base_dir,
        description: raw.description.clone(),
        process,
        llm,
        manager,
        rag,
        agents,
        tasks,
        graph,
        kickoff,
        on_degraded: raw.on_degraded.unwrap_or_default(),
        citations: raw.citations,
        profile,
        retry,
    })
}

fn crew_name(raw: &RawCrew, file: &Path, errors: &Errors<'_>) -> Result<String, SpecError> {
    if let Some(name) = &raw.name {
        errors.check_name(name, "crew name")?;
        return Ok(name.value.clone());
    }
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name_problem(&stem) {
        None => Ok(stem),
        Some(problem) => Err(errors.at(
            Location::UNKNOWN,
            format!("the crew name '{stem}', taken from the file name, {problem}"),
            Some("set `name:` in the file or rename the file".to_string()),
        )),
    }
}

fn rag_spec(raw: &RawCrew, errors: &Errors<'_>) -> Result<RagSpec, SpecError> {
    let Some(rag) = &raw.rag else {
        return Ok(RagSpec::default());
    };
    let mut collections = Vec::new();
    for (name, collection) in &rag.collections.value.0 {
        errors.check_name(name, "collection name")?;
        if collection.sources.value.is_empty() {
            return Err(errors.at_value(
                &collection.sources,
                format!("collection '{}' has no sources", name.value),
                Some("list files or glob patterns, e.g. `sources: [kb/*.md]`".to_string()),
            ));
        }
        let mut sources = Vec::new();
        for source in &collection.sources.value {
            if source.value.trim().is_empty() {
                return Err(errors.at_value(
                    source,
                    format!("collection '{}' lists an empty source", name.value),
                    None,
                ));
            }
            sources.push(source.value.clone());
        }
        let chunking = collection
            .chunking
            .as_ref()
            .map(|c| {
                let what = format!("rag.collections.{}.chunking", name.value);
                errors.check_settings(c, &what, |j| errors.checks.chunking(j))
            })
            .transpose()?;
        let profile = collection
            .profile
            .as_ref()
            .map(|p| errors.check_profile(p, &format!("collection '{}': profile", name.value)))
            .transpose()?;
        let shared = collection.shared.unwrap_or(false);
        let ephemeral = match &collection.ephemeral {
            Some(flag) if flag.value && shared => {
                return Err(errors.at_value(
                    flag,
                    format!(
                        "collection '{}' cannot be both ephemeral and shared: a throwaway collection belongs to one run",
                        name.value
                    ),
                    Some("drop `shared: true`, or `ephemeral: true` to keep it".to_string()),
                ));
            }
            Some(flag) => flag.value,
            None => false,
        };
        collections.push(CollectionSpec {
            name: name.value.clone(),
            sources,
            chunking,
            profile,
            shared,
            ephemeral,
        });
    }
    Ok(RagSpec { collections })
}

fn agent_specs(
    agents: &Spanned<OrderedMap<RawAgent>>,
    rag: &RagSpec,
    crew_profile: Option<&str>,
    errors: &Errors<'_>,
) -> Result<Vec<AgentSpec>, SpecError> {
    if agents.value.0.is_empty() {
        return Err(errors.at_value(
            agents,
            "the crew declares no agents".to_string(),
            Some("declare at least one agent with `role:` and `goal:`".to_string()),
        ));
    }
    let mut specs = Vec::new();
    for (name, agent) in &agents.value.0 {
        errors.check_name(name, "agent name")?;
        let what = |field: &str| format!("agent '{}': {field}", name.value);
        let role = errors.check_text(&agent.role, &what("role"))?;
        let goal = errors.check_text(&agent.goal, &what("goal"))?;
        let mut knowledge: Vec<KnowledgeAttachment> = Vec::new();
        for entry in &agent.knowledge {
            let attachment = attachment(entry, &name.value, rag, crew_profile, errors)?;
            if !knowledge
                .iter()
                .any(|k| k.collection == attachment.collection)
            {
                knowledge.push(attachment);
            }
        }
        let mut tools: Vec<String> = Vec::new();
        for tool in &agent.tools {
            if !KNOWN_TOOLS.contains(&tool.value.as_str()) {
                return Err(errors.at_value(
                    tool,
                    format!("agent '{}' names unknown tool '{}'", name.value, tool.value),
                    Some(known_values_hint(&tool.value, KNOWN_TOOLS, "tools")),
                ));
            }
            if !tools.contains(&tool.value) {
                tools.push(tool.value.clone());
            }
        }
        let max_passages = match &agent.max_passages {
            Some(max) if max.value == 0 => {
                return Err(errors.at_value(
                    max,
                    format!("agent '{}': max_passages must be at least 1", name.value),
                    Some("remove it to use the default, or set a positive number".to_string()),
                ));
            }
            other => other.as_ref().map(|m| m.value),
        };
        specs.push(AgentSpec {
            name: name.value.clone(),
            role,
            goal,
            backstory: agent.backstory.clone(),
            knowledge,
            tools,
            max_passages,
        });
    }
    Ok(specs)
}

/// One `knowledge:` entry: a collection name, or `{collection, profile, max_passages}`.
fn attachment(
    entry: &Spanned<SpannedValue>,
    agent: &str,
    rag: &RagSpec,
    crew_profile: Option<&str>,
    errors: &Errors<'_>,
) -> Result<KnowledgeAttachment, SpecError> {
    const KEYS: &[&str] = &["collection", "profile", "max_passages"];
    let mut collection: Option<Spanned<String>> = None;
    let mut profile = None;
    let mut max_passages = None;
    match &entry.value {
        SpannedValue::String(name) => {
            collection = Some(Spanned {
                value: name.clone(),
                referenced: entry.referenced,
                defined: entry.defined,
            })
        }
        SpannedValue::Map(entries) => {
            for (key, value) in entries {
                let as_text = || match &value.value {
                    SpannedValue::String(s) => Ok(Spanned {
                        value: s.clone(),
                        referenced: value.referenced,
                        defined: value.defined,
                    }),
                    other => Err(errors.at_value(
                        value,
                        format!(
                            "agent '{agent}': knowledge `{}` must be text, found {}",
                            key.value,
                            other.kind()
                        ),
                        None,
                    )),
                };
                match key.value.as_str() {
                    "collection" => collection = Some(as_text()?),
                    "profile" => {
                        let what = format!("agent '{agent}': knowledge profile");
                        profile = Some(errors.check_profile(&as_text()?, &what)?);
                    }
                    "max_passages" => {
                        let n = match &value.value {
                            SpannedValue::Number(n) => n.as_u64().filter(|n| *n >= 1),
                            _ => None,
                        };
                        let Some(n) = n else {
                            return Err(errors.at_value(
                                value,
                                format!("agent '{agent}': knowledge max_passages must be a whole number of at least 1"),
                                Some("remove it to use the agent's block size, or set a positive number".to_string()),
                            ));
                        };
                        max_passages = Some(usize::try_from(n).unwrap_or(usize::MAX));
                    }
                    other => {
                        return Err(errors.at(
                            key.referenced,
                            format!("agent '{agent}': unknown knowledge key '{other}'"),
                            Some(known_values_hint(other, KEYS, "keys")),
                        ));
                    }
                }
            }
        }
        other => {
            return Err(errors.at_value(
                entry,
                format!("agent '{agent}': a knowledge entry must be a collection name or a map, found {}", other.kind()),
                Some("write `knowledge: [kb]` or `knowledge: [{ collection: kb, profile: fast }]`".to_string()),
            ));
        }
    }
    let Some(collection) = collection else {
        return Err(errors.at_value(
            entry,
            format!("agent '{agent}': a knowledge map needs `collection:`"),
            Some("add `collection: NAME` naming one of rag.collections".to_string()),
        ));
    };
    let Some(declared) = rag.collections.iter().find(|c| c.name == collection.value) else {
        return Err(errors.at_value(
            &collection,
            format!(
                "agent '{agent}' names collection '{}', which is not declared under rag.collections",
                collection.value
            ),
            suggest::hint(
                &collection.value,
                rag.collections.iter().map(|c| c.name.as_str()),
                "collections",
            ),
        ));
    };
    Ok(KnowledgeAttachment {
        collection: collection.value,
        profile: profile
            .or_else(|| declared.profile.clone())
            .or_else(|| crew_profile.map(str::to_string)),
        max_passages,
    })
}

fn task_specs(
    tasks: &Spanned<Vec<RawTask>>,
    agents: &[&str],
    process: ProcessKind,
    errors: &Errors<'_>,
) -> Result<Vec<TaskSpec>, SpecError> {
    if tasks.value.is_empty() {
        return Err(errors.at_value(
            tasks,
            "the crew declares no tasks".to_string(),
            Some(
                "add at least one task with `name`, `agent`, `description` and `expected_output`"
                    .to_string(),
            ),
        ));
    }
    let all_names: Vec<&str> = tasks.value.iter().map(|t| t.name.value.as_str()).collect();
    let mut seen: HashMap<&str, Location> = HashMap::new();
    let mut specs = Vec::new();
    for (index, task) in tasks.value.iter().enumerate() {
        let name = &task.name;
        errors.check_name(name, "task name")?;
        if let Some(first) = seen.get(name.value.as_str()) {
            return Err(errors.at_value(
                name,
                format!(
                    "task name '{}' is used twice (first at line {}, column {})",
                    name.value,
                    first.line(),
                    first.column()
                ),
                Some("give each task a unique name".to_string()),
            ));
        }
        seen.insert(name.value.as_str(), name.referenced);
        if process == ProcessKind::Graph && name.value == GRAPH_END {
            return Err(errors.at_value(
                name,
                format!("a graph crew cannot have a task named '{GRAPH_END}': edges use `to: {GRAPH_END}` to end the run"),
                Some("rename the task".to_string()),
            ));
        }
        if !agents.contains(&task.agent.value.as_str()) {
            return Err(errors.at_value(
                &task.agent,
                format!(
                    "task '{}' names agent '{}', which is not declared",
                    name.value, task.agent.value
                ),
                suggest::hint(&task.agent.value, agents.iter().copied(), "agents"),
            ));
        }
        let what = |field: &str| format!("task '{}': {field}", name.value);
        let description = errors.check_text(&task.description, &what("description"))?;
        errors.check_placeholders(&task.expected_output, &what("expected_output"))?;
        let context = match &task.context {
            None => None,
            Some(entries) => {
                let mut context: Vec<String> = Vec::new();
                for entry in entries {
                    check_context_entry(entry, name, index, &all_names, process, errors)?;
                    if !context.contains(&entry.value) {
                        context.push(entry.value.clone());
                    }
                }
                Some(context)
            }
        };
        specs.push(TaskSpec {
            name: name.value.clone(),
            agent: task.agent.value.clone(),
            description,
            expected_output: task.expected_output.value.clone(),
            context,
            citations: task.citations,
        });
    }
    Ok(specs)
}

fn check_context_entry(
    entry: &Spanned<String>,
    task: &Spanned<String>,
    index: usize,
    all_names: &[&str],
    process: ProcessKind,
    errors: &Errors<'_>,
) -> Result<(), SpecError> {
    match all_names.iter().position(|n| *n == entry.value) {
        None => Err(errors.at_value(
            entry,
            format!(
                "task '{}' takes context from task '{}', which is not declared",
                task.value, entry.value
            ),
            suggest::hint(&entry.value, all_names.iter().copied(), "tasks"),
        )),
        Some(position) if position == index => Err(errors.at_value(
            entry,
            format!("task '{}' takes context from itself", task.value),
            Some("name earlier tasks only".to_string()),
        )),
        Some(position) if position > index && process != ProcessKind::Graph => {
            Err(errors.at_value(
                entry,
                format!(
                    "task '{}' takes context from task '{}', which comes later in the file and has not run yet",
                    task.value, entry.value
                ),
                Some(format!("move '{}' before '{}'", entry.value, task.value)),
            ))
        }
        Some(_) => Ok(()),
    }
}

fn graph_spec(
    graph: &Spanned<RawGraph>,
    tasks: &Spanned<Vec<RawTask>>,
    errors: &Errors<'_>,
) -> Result<GraphSpec, SpecError> {
    let raw = &graph.value;
    let task_names: Vec<&str> = tasks.value.iter().map(|t| t.name.value.as_str()).collect();
    check_task_name(&raw.start, "start", &task_names, errors)?;

    if raw.edges.value.is_empty() {
        return Err(errors.at_value(
            &raw.edges,
            "the graph has no edges".to_string(),
            Some(format!(
                "add at least `{{ from: {}, to: {GRAPH_END} }}`",
                raw.start.value
            )),
        ));
    }
    let mut edges = Vec::new();
    for edge in &raw.edges.value {
        edges.push(edge_spec(edge, &task_names, errors)?);
    }

    let max_iterations = positive(raw.max_iterations.as_ref(), "max_iterations", errors)?
        .unwrap_or(DEFAULT_MAX_ITERATIONS);
    let max_seconds =
        positive(raw.max_seconds.as_ref(), "max_seconds", errors)?.unwrap_or(DEFAULT_MAX_SECONDS);

    // Every task needs a way out, and every task must be reachable from `start`.
    for task in &tasks.value {
        if !edges.iter().any(|e| e.from == task.name.value) {
            return Err(errors.at_value(
                &task.name,
                format!("graph task '{}' has no outgoing edge", task.name.value),
                Some(format!(
                    "add `{{ from: {}, to: {GRAPH_END} }}` or an edge to another task",
                    task.name.value
                )),
            ));
        }
    }
    let mut reached: HashSet<&str> = HashSet::from([raw.start.value.as_str()]);
    let mut queue: VecDeque<&str> = VecDeque::from([raw.start.value.as_str()]);
    while let Some(node) = queue.pop_front() {
        for edge in edges.iter().filter(|e| e.from == node) {
            if edge.to != GRAPH_END && reached.insert(edge.to.as_str()) {
                queue.push_back(edge.to.as_str());
            }
        }
    }
    if let Some(unreached) = tasks
        .value
        .iter()
        .find(|t| !reached.contains(t.name.value.as_str()))
    {
        return Err(errors.at_value(
            &unreached.name,
            format!(
                "graph task '{}' is not reachable from the start task '{}'",
                unreached.name.value, raw.start.value
            ),
            Some("add an edge leading to it, or remove the task".to_string()),
        ));
    }

    Ok(GraphSpec {
        start: raw.start.value.clone(),
        edges,
        max_iterations,
        max_seconds,
    })
}

fn check_task_name(
    name: &Spanned<String>,
    role: &str,
    task_names: &[&str],
    errors: &Errors<'_>,
) -> Result<(), SpecError> {
    if task_names.contains(&name.value.as_str()) {
        Ok(())
    } else {
        Err(errors.at_value(
            name,
            format!("graph {role} '{}' is not a declared task", name.value),
            suggest::hint(&name.value, task_names.iter().copied(), "tasks"),
        ))
    }
}

fn edge_spec(
    edge: &RawEdge,
    task_names: &[&str],
    errors: &Errors<'_>,
) -> Result<EdgeSpec, SpecError> {
    if edge.from.value == GRAPH_END {
        return Err(errors.at_value(
            &edge.from,
            format!("an edge cannot start at '{GRAPH_END}': the run is over there"),
            suggest::hint(GRAPH_END, task_names.iter().copied(), "tasks"),
        ));
    }
    check_task_name(&edge.from, "edge `from`", task_names, errors)?;
    if edge.to.value != GRAPH_END {
        let mut targets = task_names.to_vec();
        targets.push(GRAPH_END);
        if !targets.contains(&edge.to.value.as_str()) {
            return Err(errors.at_value(
                &edge.to,
                format!(
                    "graph edge `to` '{}' is not a declared task nor '{GRAPH_END}'",
                    edge.to.value
                ),
                suggest::hint(&edge.to.value, targets.iter().copied(), "targets"),
            ));
        }
    }
    let when = edge
        .when
        .as_ref()
        .map(|w| predicate(w, errors))
        .transpose()?;
    Ok(EdgeSpec {
        from: edge.from.value.clone(),
        to: edge.to.value.clone(),
        when,
    })
}

fn predicate(when: &Spanned<RawWhen>, errors: &Errors<'_>) -> Result<EdgePredicate, SpecError> {
    let RawWhen {
        output_contains,
        output_not_contains,
        output_matches,
    } = &when.value;
    let set = [
        output_contains.is_some(),
        output_not_contains.is_some(),
        output_matches.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if set != 1 {
        return Err(errors.at_value(
            when,
            format!("`when` must hold exactly one predicate, found {set}"),
            Some("use one of output_contains, output_not_contains, output_matches".to_string()),
        ));
    }
    let non_empty = |value: &Spanned<String>, key: &str| -> Result<String, SpecError> {
        if value.value.is_empty() {
            Err(errors.at_value(
                value,
                format!("`{key}` is empty, so the edge would always or never match"),
                Some(
                    "give the text to look for, or remove `when` for an unconditional edge"
                        .to_string(),
                ),
            ))
        } else {
            Ok(value.value.clone())
        }
    };
    if let Some(needle) = output_contains {
        return Ok(EdgePredicate::OutputContains(non_empty(
            needle,
            "output_contains",
        )?));
    }
    if let Some(needle) = output_not_contains {
        return Ok(EdgePredicate::OutputNotContains(non_empty(
            needle,
            "output_not_contains",
        )?));
    }
    let Some(pattern) = output_matches else {
        return Err(errors.at_value(when, "`when` holds no predicate".to_string(), None));
    };
    let source = non_empty(pattern, "output_matches")?;
    OutputPattern::new(&source)
        .map(EdgePredicate::OutputMatches)
        .map_err(|e| {
            errors.at_value(
                pattern,
                format!("`output_matches` is not a valid regular expression: {e}"),
                Some("see https://docs.rs/regex for the syntax".to_string()),
            )
        })
}

fn positive<T: Copy + PartialEq + Default>(
    value: Option<&Spanned<T>>,
    key: &str,
    errors: &Errors<'_>,
) -> Result<Option<T>, SpecError> {
    match value {
        Some(v) if v.value == T::default() => Err(errors.at_value(
            v,
            format!("graph `{key}` must be at least 1"),
            Some("remove it to use the default, or set a positive number".to_string()),
        )),
        other => Ok(other.map(|v| v.value)),
    }
}

fn kickoff_inputs(
    inputs: Option<&OrderedMap<Spanned<serde_json::Value>>>,
    errors: &Errors<'_>,
) -> Result<BTreeMap<String, String>, SpecError> {
    let mut out = BTreeMap::new();
    for (name, value) in inputs.map(|m| m.0.as_slice()).unwrap_or_default() {
        let text = match &value.value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            serde_json::Value::Null => {
                return Err(errors.at_value(
                    value,
                    format!("kickoff input '{}' has no value", name.value),
                    Some("give it a value, or remove it".to_string()),
                ));
            }
            _ => {
                return Err(errors.at_value(
                    value,
                    format!(
                        "kickoff input '{}' must be a single value (text, number or boolean)",
                        name.value
                    ),
                    None,
                ));
            }
        };
        out.insert(name.value.clone(), text);
    }
    Ok(out)
}
