//! Crew files: the YAML schema, its parsing and its validation into a [`CrewSpec`].
//!
//! A crew file (`*.yaml` / `*.yml`) declares one crew:
//!
//! ```yaml
//! name: support            # optional; defaults to the file stem
//! description: optional
//! process: sequential      # sequential (default) | hierarchical | graph
//! llm: { provider: extractive }   # optional; free-form map handed to the LLM factory
//! manager: { llm: { ... } }       # hierarchical only, optional (defaults to the crew llm)
//! profile: balanced       # optional: the retrieval profile of every knowledge lookup
//!                          # (fast | balanced | quality | corrective | adaptive | a configured
//!                          # one); default: the daemon's `rag.profile`
//! rag:
//!   collections:
//!     product-kb:
//!       sources: [kb/faq.md, "kb/**/*.md"]   # relative to the crew file
//!       chunking: { strategy: recursive, max_tokens: 256, overlap: 32 }   # optional map
//!       profile: fast                        # optional: overrides the crew's for this one
//!       shared: false                        # optional: true lets other crews declare this
//!                                            # collection too (its sources: the union)
//!       ephemeral: false                     # optional: true builds it in memory at each
//!                                            # kickoff, for that run only (never stored)
//! agents:                  # at least one; file order is kept
//!   support:
//!     role: Support agent
//!     goal: Answer from the knowledge base
//!     backstory: optional
//!     knowledge: [product-kb]      # names of `rag.collections`, or maps:
//!     # knowledge: [{ collection: product-kb, profile: corrective, max_passages: 8 }]
//!     tools: [rag_search]          # rag_search | rag_ingest | rag_eval
//!     max_passages: 5              # optional, >= 1: passages in the agent's block (default 6)
//! tasks:                   # at least one; names unique
//!   - name: answer
//!     agent: support
//!     description: "Answer the customer: {{ inputs.question }}"
//!     expected_output: A short answer with [n] citations
//!     context: [earlier_task]      # optional: outputs of these tasks are given to this one
//!     citations: required          # optional: required | optional (overrides the crew's)
//! graph:                   # required for `process: graph`, refused otherwise
//!   start: draft
//!   edges:                 # first matching edge (in file order) wins
//!     - { from: draft, to: review }
//!     - { from: review, to: draft, when: { output_contains: "REVISE" } }
//!     - { from: review, to: end }          # `end` ends the run
//!   max_iterations: 10     # node executions in total (default 10)
//!   max_seconds: 300       # wall-clock budget of the whole graph (default 300)
//! kickoff: { on_load: false, inputs: { question: "..." } }   # optional
//! on_degraded: continue    # continue (default) | fail — a declared collection is empty/failed,
//!                          # or a `citations: required` task cited nothing
//! citations: required      # optional: required | optional; default: required for tasks whose
//!                          # agent has `knowledge:`, optional for the others
//! retry: 1                 # optional, 0-3 (default 0): on a fleet, a run whose daemon died
//!                          # mid-run is queued again this many times instead of ending interrupted
//! ```
//!
//! Rules checked at parse time (each failure is a [`SpecError`] with the file, line and
//! column of the offending value and, where one exists, the nearest valid name):
//!
//! - YAML syntax, unknown fields anywhere, wrong value types, duplicate keys;
//! - names (crew, agents, tasks, collections) are 1–64 characters of `A-Z a-z 0-9 _ - .`,
//!   starting with a letter or digit;
//! - at least one agent and one task; task names unique;
//! - every task names a declared agent; every `knowledge:` entry names a declared
//!   collection; every tool is known;
//! - `context:` names other declared tasks; for `sequential` and `hierarchical` only tasks
//!   that come earlier in the file (their outputs exist by then); for `graph` any other task
//!   (its latest output, once it has run);
//! - `graph:` present exactly when `process: graph`; `manager:` only for `hierarchical`;
//! - graph edges name declared tasks (`to` may also be `end`); `start` is a task; every task
//!   is reachable from `start` and has at least one outgoing edge; `when` holds exactly one
//!   of `output_contains`, `output_not_contains`, `output_matches` (a valid regex);
//!   no task may be called `end` in a graph crew;
//! - `{{ … }}` placeholders in descriptions and expected outputs are closed;
//! - with the host's [`SettingsChecks`] ([`parse_crew_file_checked`]): `llm:` maps (provider
//!   names, keys, required settings), `chunking:` maps (strategy names, numbers in range) and
//!   profile names, each error at the offending key.
//!
//! Task descriptions and expected outputs may use `{{ inputs.NAME }}`;
//! [`CrewSpec::required_inputs`] lists the names and [`template`] renders them.

mod raw;
mod spanned_value;
pub mod suggest;
pub mod template;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ports::{AgentProfile, CollectionRequest, KnowledgeAttachment};

/// Tools an agent may list under `tools:`.
pub const KNOWN_TOOLS: &[&str] = &["rag_search", "rag_ingest", "rag_eval"];

/// The name a graph edge uses for "the run ends here".
pub const GRAPH_END: &str = "end";

/// Default `graph.max_iterations`.
pub const DEFAULT_MAX_ITERATIONS: usize = 10;

/// Default `graph.max_seconds`.
pub const DEFAULT_MAX_SECONDS: u64 = 300;

/// How a crew's tasks are scheduled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessKind {
    /// Tasks in file order.
    #[default]
    Sequential,
    /// A manager model assigns each task to an agent and reviews the result.
    Hierarchical,
    /// Tasks are nodes of a bounded state graph with conditional edges.
    Graph,
}

impl fmt::Display for ProcessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProcessKind::Sequential => "sequential",
            ProcessKind::Hierarchical => "hierarchical",
            ProcessKind::Graph => "graph",
        })
    }
}

/// What a run does when a declared collection is empty or failed to ingest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DegradedPolicy {
    /// Run anyway and report the run `degraded` with the reason.
    #[default]
    Continue,
    /// Fail the run before any task starts.
    Fail,
}

/// Whether a task's output must cite the passages it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CitationPolicy {
    /// An output that cites nothing (or only markers that resolve to nothing) makes the task
    /// `degraded`; `on_degraded` then decides whether the run goes on.
    Required,
    /// Citations are checked and recorded, never enforced.
    Optional,
}

impl fmt::Display for CitationPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CitationPolicy::Required => "required",
            CitationPolicy::Optional => "optional",
        })
    }
}

/// One validated crew file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrewSpec {
    pub name: String,
    /// The crew file as given to the parser.
    pub file: PathBuf,
    /// The folder relative `rag:` sources resolve against (the crew file's folder).
    pub base_dir: PathBuf,
    pub description: Option<String>,
    pub process: ProcessKind,
    /// Free-form LLM settings for the LLM factory (always a JSON object when present).
    pub llm: Option<serde_json::Value>,
    /// Hierarchical only.
    pub manager: Option<ManagerSpec>,
    pub rag: RagSpec,
    /// In file order.
    pub agents: Vec<AgentSpec>,
    /// In file order.
    pub tasks: Vec<TaskSpec>,
    /// Present exactly when `process` is [`ProcessKind::Graph`].
    pub graph: Option<GraphSpec>,
    pub kickoff: KickoffSpec,
    pub on_degraded: DegradedPolicy,
    /// The crew's `citations:` (tasks may override it); `None`: by agent (see
    /// [`CrewSpec::citation_policy`]).
    pub citations: Option<CitationPolicy>,
    /// The crew's retrieval profile; `None`: the host's default.
    pub profile: Option<String>,
    /// How many times a run may be retried after its daemon died mid-run (fleet on
    /// PostgreSQL: the run's lease ran out), 0 to [`MAX_RETRY`]; 0: it ends interrupted.
    pub retry: u32,
}

/// The most retries a crew may ask for (`retry:`).
pub const MAX_RETRY: u32 = 3;

/// The manager of a hierarchical crew.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ManagerSpec {
    /// Free-form LLM settings; `None` means "use the crew's `llm`".
    pub llm: Option<serde_json::Value>,
}

/// The crew's `rag:` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RagSpec {
    /// In file order.
    pub collections: Vec<CollectionSpec>,
}

/// One `rag.collections` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectionSpec {
    pub name: String,
    /// Paths or glob patterns, relative to the crew file's folder unless absolute.
    pub sources: Vec<String>,
    /// Chunking settings as written (a JSON object); checked by the host's [`SettingsChecks`].
    pub chunking: Option<serde_json::Value>,
    /// This collection's retrieval profile; `None`: the crew's.
    pub profile: Option<String>,
    /// Other crews may declare the same collection with other sources (all of them must say
    /// `shared: true`); its sources are then the union of every declaration.
    pub shared: bool,
    /// A throwaway collection: built in memory at each kickoff for that run alone (shadowing a
    /// stored collection of the same name), dropped when the run ends, never stored.
    pub ephemeral: bool,
}

/// One agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSpec {
    pub name: String,
    pub role: String,
    pub goal: String,
    pub backstory: Option<String>,
    /// The `rag.collections` this agent retrieves from, each with its effective profile (the
    /// attachment's, else the collection's, else the crew's; `None`: the host's default).
    pub knowledge: Vec<KnowledgeAttachment>,
    /// Names from [`KNOWN_TOOLS`].
    pub tools: Vec<String>,
    /// Passages in the agent's knowledge block; `None`: the runner's default.
    pub max_passages: Option<usize>,
}

impl AgentSpec {
    /// The agent as the [`crate::ports::TaskRunner`] port sees it.
    pub fn profile(&self) -> AgentProfile {
        AgentProfile {
            name: self.name.clone(),
            role: self.role.clone(),
            goal: self.goal.clone(),
            backstory: self.backstory.clone(),
            knowledge: self.knowledge.clone(),
            tools: self.tools.clone(),
            max_passages: self.max_passages,
        }
    }
}

/// One task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSpec {
    pub name: String,
    /// The agent named in the file (hierarchical managers may reassign it).
    pub agent: String,
    /// May contain `{{ inputs.NAME }}` placeholders.
    pub description: String,
    /// May contain `{{ inputs.NAME }}` placeholders.
    pub expected_output: String,
    /// Tasks whose outputs this task receives; `None` means "the previous task's output".
    pub context: Option<Vec<String>>,
    /// The task's `citations:`; `None`: the crew's, else by agent.
    pub citations: Option<CitationPolicy>,
}

/// The `graph:` block of a `process: graph` crew.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphSpec {
    pub start: String,
    /// In file order; for a given `from`, the first edge whose predicate holds wins.
    pub edges: Vec<EdgeSpec>,
    /// Node executions in total.
    pub max_iterations: usize,
    /// Wall-clock budget of the whole graph, in seconds.
    pub max_seconds: u64,
}

impl GraphSpec {
    /// The edges leaving `task`, in file order.
    pub fn edges_from<'a>(&'a self, task: &'a str) -> impl Iterator<Item = &'a EdgeSpec> + 'a {
        self.edges.iter().filter(move |e| e.from == task)
    }
}

/// One graph edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeSpec {
    pub from: String,
    /// A task name or [`GRAPH_END`].
    pub to: String,
    /// `None` means the edge always matches.
    pub when: Option<EdgePredicate>,
}

impl EdgeSpec {
    /// Whether this edge is taken after its `from` task produced `output`.
    pub fn matches(&self, output: &str) -> bool {
        self.when.as_ref().is_none_or(|p| p.holds(output))
    }
}

/// A condition on the output of an edge's `from` task.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgePredicate {
    OutputContains(String),
    OutputNotContains(String),
    OutputMatches(OutputPattern),
}

impl EdgePredicate {
    /// Whether the predicate holds for `output`.
    pub fn holds(&self, output: &str) -> bool {
        match self {
            EdgePredicate::OutputContains(needle) => output.contains(needle.as_str()),
            EdgePredicate::OutputNotContains(needle) => !output.contains(needle.as_str()),
            EdgePredicate::OutputMatches(pattern) => pattern.regex().is_match(output),
        }
    }
}

/// A compiled `output_matches` regular expression (compared and serialised by its source).
#[derive(Debug, Clone)]
pub struct OutputPattern(regex::Regex);

impl OutputPattern {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        regex::Regex::new(pattern).map(OutputPattern)
    }

    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq for OutputPattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for OutputPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The `kickoff:` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KickoffSpec {
    /// Run the crew as soon as it is loaded.
    pub on_load: bool,
    /// Default inputs (scalars as written, converted to strings).
    pub inputs: BTreeMap<String, String>,
}

impl CrewSpec {
    /// The agent called `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The task called `name`.
    pub fn task(&self, name: &str) -> Option<&TaskSpec> {
        self.tasks.iter().find(|t| t.name == name)
    }

    /// The citation policy of `task` performed by `agent`: the task's `citations:`, else the
    /// crew's, else `required` when the agent has `knowledge:` and `optional` otherwise.
    pub fn citation_policy(&self, task: &TaskSpec, agent: &AgentSpec) -> CitationPolicy {
        task.citations.or(self.citations).unwrap_or({
            if agent.knowledge.is_empty() {
                CitationPolicy::Optional
            } else {
                CitationPolicy::Required
            }
        })
    }

    /// Every `{{ inputs.NAME }}` used by a task description or expected output.
    pub fn required_inputs(&self) -> BTreeSet<String> {
        self.tasks
            .iter()
            .flat_map(|t| {
                template::input_names(&t.description)
                    .into_iter()
                    .chain(template::input_names(&t.expected_output))
            })
            .collect()
    }

    /// The file's `kickoff.inputs`, overridden by `given`.
    pub fn effective_inputs(&self, given: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut inputs = self.kickoff.inputs.clone();
        inputs.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
        inputs
    }

    /// The names of the `rag:` collections declared `ephemeral: true`.
    pub fn ephemeral_collections(&self) -> Vec<String> {
        self.rag
            .collections
            .iter()
            .filter(|c| c.ephemeral)
            .map(|c| c.name.clone())
            .collect()
    }

    /// The `rag:` collections as requests for the knowledge service, resolved against
    /// [`CrewSpec::base_dir`].
    pub fn collection_requests(&self) -> Vec<CollectionRequest> {
        self.rag
            .collections
            .iter()
            .map(|c| CollectionRequest {
                name: c.name.clone(),
                base_dir: self.base_dir.clone(),
                sources: c.sources.clone(),
                chunking: c.chunking.clone(),
            })
            .collect()
    }
}

/// Why a crew file was refused: where (file, line, column), what, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: PathBuf,
    /// 1-based; `None` when the problem concerns the whole file.
    pub line: Option<usize>,
    /// 1-based, in characters.
    pub column: Option<usize>,
    pub message: String,
    /// The nearest valid name or the list of valid values, when there is one.
    pub hint: Option<String>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": {}", self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecError {}

/// A problem the host found inside a free-form value: where (map keys from the value's root;
/// empty for the value as a whole), what, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingProblem {
    pub path: Vec<String>,
    pub message: String,
    pub hint: Option<String>,
}

/// What the crews crate cannot know by itself and asks the host: whether an `llm:` map builds
/// a model, whether a `chunking:` map is a chunker, and which retrieval profiles exist.
pub trait SettingsChecks {
    /// A crew's (or manager's) `llm:` map, as written.
    fn llm(&self, value: &serde_json::Value) -> Result<(), SettingProblem>;
    /// A collection's `chunking:` map, as written.
    fn chunking(&self, value: &serde_json::Value) -> Result<(), SettingProblem>;
    /// Known retrieval profile names.
    fn profiles(&self) -> Vec<String>;
}

/// Structure only: every `llm:`/`chunking:` map and profile name is accepted (the host checks
/// them at kickoff). For tools and tests that have no host.
pub struct StructureOnly;

impl SettingsChecks for StructureOnly {
    fn llm(&self, _: &serde_json::Value) -> Result<(), SettingProblem> {
        Ok(())
    }
    fn chunking(&self, _: &serde_json::Value) -> Result<(), SettingProblem> {
        Ok(())
    }
    fn profiles(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Reads and validates the crew file at `path` (structure only; see
/// [`parse_crew_file_checked`]).
pub fn parse_crew_file(path: &Path) -> Result<CrewSpec, SpecError> {
    parse_crew_file_checked(path, &StructureOnly)
}

/// Reads and validates the crew file at `path`, with the host's `checks`.
pub fn parse_crew_file_checked(
    path: &Path,
    checks: &dyn SettingsChecks,
) -> Result<CrewSpec, SpecError> {
    let text = std::fs::read_to_string(path).map_err(|e| SpecError {
        file: path.to_path_buf(),
        line: None,
        column: None,
        message: format!("cannot read the crew file: {e}"),
        hint: Some("check that the file exists, is readable and is UTF-8 text".to_string()),
    })?;
    parse_crew_str_checked(&text, path, checks)
}

/// Validates crew YAML `text` (structure only); `path` names the file in errors, gives the
/// default crew name (its stem) and the folder relative sources resolve against.
pub fn parse_crew_str(text: &str, path: &Path) -> Result<CrewSpec, SpecError> {
    parse_crew_str_checked(text, path, &StructureOnly)
}

/// Validates crew YAML `text` with the host's `checks`.
pub fn parse_crew_str_checked(
    text: &str,
    path: &Path,
    checks: &dyn SettingsChecks,
) -> Result<CrewSpec, SpecError> {
    let options = serde_saphyr::options! { with_snippet: false };
    let raw: raw::RawCrew = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| validate::yaml_error(path, &e))?;
    validate::validate(raw, path, checks)
}

#[cfg(test)]
mod tests;
