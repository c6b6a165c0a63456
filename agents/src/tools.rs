//! The knowledge tools offered to LLMs that support tool calls: `rag_search`, `rag_ingest` and
//! `rag_eval` — their JSON-schema specs, their argument parsing and their execution against the
//! `KnowledgeService` port (and an optional host-registered [`EvalTool`]).
//!
//! A tool call only touches the collections its agent is attached to (anything else is a tool
//! error naming the collection and the attachments). `rag_ingest` upserts (never removes other
//! sources) with paths relative to the crew file's folder; `rag_eval` evaluates an attached
//! collection on a dataset inside that folder.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{
    AugmentRequest, CollectionRequest, KnowledgeAttachment, KnowledgeBlock, KnowledgeService,
    ToolSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

pub const RAG_SEARCH: &str = "rag_search";
pub const RAG_INGEST: &str = "rag_ingest";
pub const RAG_EVAL: &str = "rag_eval";
/// Every tool name an agent may list: the crew schema's one list.
pub use orkeon_crews::spec::KNOWN_TOOLS;

/// The answer of `rag_eval` on a host that registered no [`EvalTool`].
pub const EVAL_UNAVAILABLE: &str = "rag_eval: evaluation is not available in this host (no \
evaluation harness is registered); run `orkeon rag eval` instead";

/// Arguments of `rag_eval`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalRequest {
    /// Path of the golden dataset (YAML) to evaluate, relative to the crew file's folder.
    pub dataset: Option<String>,
    /// Collection to evaluate (one of the agent's); default: the agent's only one.
    pub collection: Option<String>,
    /// Profiles to compare (`fast`, `balanced`, `quality`, …); empty: the host's default.
    pub profiles: Vec<String>,
}

/// What a `rag_eval` call may touch, resolved by the [`ToolExecutor`] before the
/// [`EvalTool`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalScope {
    /// The crew file's folder: the dataset resolves against it and must lie inside it.
    pub crew_dir: PathBuf,
    /// The collection to evaluate, attached to the calling agent.
    pub collection: String,
}

/// A host's evaluation harness, registered on the runner to serve `rag_eval`.
#[async_trait]
pub trait EvalTool: Send + Sync {
    /// Evaluates `scope.collection` on `request.dataset` (inside `scope.crew_dir`) and returns
    /// the report (JSON, with the metrics table), or an error message for the model.
    async fn evaluate(
        &self,
        request: EvalRequest,
        scope: EvalScope,
    ) -> Result<serde_json::Value, String>;
}

/// The specs of the named tools, in the given order; an unknown name is an error listing the
/// known ones.
pub fn tool_specs(names: &[String]) -> Result<Vec<ToolSpec>, String> {
    names.iter().map(|name| tool_spec(name)).collect()
}

/// The spec of one tool.
pub fn tool_spec(name: &str) -> Result<ToolSpec, String> {
    let spec = match name {
        RAG_SEARCH => ToolSpec {
            name: RAG_SEARCH.to_owned(),
            description: "Search the knowledge collections (retrieval only) and return numbered \
                          passages; cite them with their [n] markers."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "collections": {
                        "type": "array", "items": {"type": "string"},
                        "description": "Collections to search; default: the agent's attached knowledge."
                    },
                    "max_passages": {"type": "integer", "minimum": 1, "maximum": 20,
                                     "description": "How many passages to return."}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        },
        RAG_INGEST => ToolSpec {
            name: RAG_INGEST.to_owned(),
            description: "Add or update sources (files or glob patterns, relative to the crew's \
                          folder) in one of your knowledge collections, incrementally: unchanged \
                          sources cost nothing and the collection's other sources are kept."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "collection": {"type": "string", "description": "One of your attached collections."},
                    "sources": {
                        "type": "array", "items": {"type": "string"}, "minItems": 1,
                        "description": "File paths or glob patterns, relative to the crew's folder."
                    }
                },
                "required": ["collection", "sources"],
                "additionalProperties": false
            }),
        },
        RAG_EVAL => ToolSpec {
            name: RAG_EVAL.to_owned(),
            description: "Evaluate retrieval quality (recall@k, MRR, nDCG) of one of your \
                          collections on a golden dataset file in the crew's folder; returns the \
                          metrics table."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "dataset": {"type": "string", "description": "Golden dataset (YAML), relative to the crew's folder."},
                    "collection": {"type": "string", "description": "One of your attached collections; default: your only one."},
                    "profiles": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["dataset"],
                "additionalProperties": false
            }),
        },
        other => {
            return Err(format!(
                "unknown tool `{other}`; known tools: {}",
                KNOWN_TOOLS.join(", ")
            ));
        }
    };
    Ok(spec)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArguments {
    query: String,
    #[serde(default)]
    collections: Vec<String>,
    max_passages: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IngestArguments {
    collection: String,
    sources: Vec<String>,
}

/// What executing a tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The tool message content handed back to the model.
    pub content: String,
    /// For `rag_search`: the passages returned (markers as in `content`).
    pub knowledge: Option<KnowledgeBlock>,
}

impl ToolResult {
    fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            knowledge: None,
        }
    }
}

/// Executes the knowledge tools for one agent.
#[derive(Clone)]
pub struct ToolExecutor {
    pub knowledge: Option<Arc<dyn KnowledgeService>>,
    pub eval: Option<Arc<dyn EvalTool>>,
    /// The calling agent (named in errors).
    pub agent: String,
    /// The agent's knowledge attachments: the only collections its tool calls may touch (and
    /// the default of `rag_search`, whose lookups use their profiles).
    pub attachments: Vec<KnowledgeAttachment>,
    pub default_max_passages: usize,
    /// The crew file's folder: `rag_ingest` sources and `rag_eval` datasets resolve against
    /// it. `None` (a host without crew files): those two tools are refused.
    pub crew_dir: Option<PathBuf>,
}

impl ToolExecutor {
    /// Runs one tool call. Problems the model can fix (bad arguments, unknown tool, a failed
    /// retrieval) come back as a tool message saying what went wrong, not as a task failure.
    pub async fn execute(&self, name: &str, arguments: &str) -> ToolResult {
        let outcome = match name {
            RAG_SEARCH => self.search(arguments).await,
            RAG_INGEST => self.ingest(arguments).await,
            RAG_EVAL => self.eval(arguments).await,
            other => Err(format!(
                "unknown tool `{other}`; known tools: {}",
                KNOWN_TOOLS.join(", ")
            )),
        };
        outcome.unwrap_or_else(|message| {
            tracing::warn!(tool = name, error = %message, "tool call failed");
            ToolResult::text(format!("error: {message}"))
        })
    }

    /// Refuses a collection the agent is not attached to.
    fn check_attached(&self, tool: &str, collection: &str) -> Result<(), String> {
        if self.attachments.iter().any(|a| a.collection == collection) {
            return Ok(());
        }
        Err(format!(
            "{tool}: collection '{collection}' is not attached to agent '{}' (attached: {}); a tool may only touch its agent's collections",
            self.agent,
            self.attached_list()
        ))
    }

    /// The attached collection names, for messages.
    fn attached_list(&self) -> String {
        if self.attachments.is_empty() {
            "none".to_owned()
        } else {
            let names: Vec<&str> = self
                .attachments
                .iter()
                .map(|a| a.collection.as_str())
                .collect();
            names.join(", ")
        }
    }

    fn crew_dir(&self, tool: &str) -> Result<&PathBuf, String> {
        self.crew_dir.as_ref().ok_or_else(|| {
            format!("{tool}: this host runs no crew file, so there is no crew folder to resolve paths against")
        })
    }

    fn service(&self, tool: &str) -> Result<&Arc<dyn KnowledgeService>, String> {
        self.knowledge
            .as_ref()
            .ok_or_else(|| format!("{tool}: no knowledge service is available in this host"))
    }

    async fn search(&self, arguments: &str) -> Result<ToolResult, String> {
        let args: SearchArguments = parse_arguments(RAG_SEARCH, arguments)?;
        if args.query.trim().is_empty() {
            return Err("rag_search: `query` is empty; say what to search for".to_owned());
        }
        let collections = if args.collections.is_empty() {
            self.attachments
                .iter()
                .map(|a| a.collection.clone())
                .collect()
        } else {
            args.collections
        };
        if collections.is_empty() {
            return Err(format!(
                "rag_search: agent '{}' has no attached knowledge to search",
                self.agent
            ));
        }
        for collection in &collections {
            self.check_attached(RAG_SEARCH, collection)?;
        }
        let max_passages = args
            .max_passages
            .unwrap_or(self.default_max_passages)
            .clamp(1, 20);
        let service = self.service(RAG_SEARCH)?;
        let request = AugmentRequest {
            attachments: collections
                .iter()
                .map(|name| {
                    self.attachments
                        .iter()
                        .find(|a| &a.collection == name)
                        .cloned()
                        .unwrap_or_else(|| KnowledgeAttachment::named(name.clone()))
                })
                .collect(),
            query: args.query.clone(),
            max_passages,
        };
        let block = service
            .augment(&request)
            .await
            .map_err(|e| format!("rag_search over {}: {e}", collections.join(", ")))?;
        tracing::debug!(
            query = %args.query,
            passages = block.citations.len(),
            "rag_search tool answered"
        );
        let content = if block.text.trim().is_empty() {
            format!(
                "No passages found in {} for this query.",
                collections.join(", ")
            )
        } else {
            block.text.clone()
        };
        Ok(ToolResult {
            content,
            knowledge: Some(block),
        })
    }

    async fn ingest(&self, arguments: &str) -> Result<ToolResult, String> {
        let args: IngestArguments = parse_arguments(RAG_INGEST, arguments)?;
        if args.collection.trim().is_empty() || args.sources.is_empty() {
            return Err("rag_ingest: give a `collection` name and at least one source".to_owned());
        }
        self.check_attached(RAG_INGEST, &args.collection)?;
        let base_dir = self.crew_dir(RAG_INGEST)?.clone();
        let service = self.service(RAG_INGEST)?;
        let status = service
            .upsert_sources(CollectionRequest {
                name: args.collection.clone(),
                base_dir,
                sources: args.sources,
                chunking: None,
            })
            .await
            .map_err(|e| format!("rag_ingest into {}: {e}", args.collection))?;
        serde_json::to_string(&status)
            .map(ToolResult::text)
            .map_err(|e| format!("rag_ingest: the report could not be serialised: {e}"))
    }

    async fn eval(&self, arguments: &str) -> Result<ToolResult, String> {
        let Some(eval) = self.eval.as_ref() else {
            return Ok(ToolResult::text(EVAL_UNAVAILABLE));
        };
        let request: EvalRequest = parse_arguments(RAG_EVAL, arguments)?;
        if request
            .dataset
            .as_deref()
            .is_none_or(|d| d.trim().is_empty())
        {
            return Err(
                "rag_eval: give a `dataset` (a golden YAML file in the crew's folder)".to_owned(),
            );
        }
        let collection = match &request.collection {
            Some(collection) => {
                self.check_attached(RAG_EVAL, collection)?;
                collection.clone()
            }
            None => match self.attachments.as_slice() {
                [only] => only.collection.clone(),
                _ => {
                    return Err(format!(
                        "rag_eval: name the `collection` to evaluate, one of agent '{}''s: {}",
                        self.agent,
                        self.attached_list()
                    ));
                }
            },
        };
        let scope = EvalScope {
            crew_dir: self.crew_dir(RAG_EVAL)?.clone(),
            collection,
        };
        let report = eval.evaluate(request, scope).await?;
        Ok(ToolResult::text(report.to_string()))
    }
}

fn parse_arguments<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: &str,
) -> Result<T, String> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(text).map_err(|e| {
        format!("{tool}: the arguments are not valid ({e}); send a JSON object matching the tool's schema")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_function_schemas_and_unknown_names_fail() {
        let specs =
            tool_specs(&["rag_search".into(), "rag_ingest".into(), "rag_eval".into()]).unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].parameters["required"], json!(["query"]));
        let err = tool_specs(&["web_search".into()]).unwrap_err();
        assert!(err.contains("web_search") && err.contains("rag_search, rag_ingest, rag_eval"));
    }

    #[test]
    fn every_tool_this_module_serves_is_in_the_schemas_one_list() {
        for name in [RAG_SEARCH, RAG_INGEST, RAG_EVAL] {
            assert!(KNOWN_TOOLS.contains(&name), "{name}");
            assert!(tool_spec(name).is_ok(), "{name}");
        }
        for name in KNOWN_TOOLS {
            assert!(tool_spec(name).is_ok(), "{name} has no spec");
        }
    }

    fn executor_for(attached: &[&str], eval: Option<Arc<dyn EvalTool>>) -> ToolExecutor {
        ToolExecutor {
            knowledge: None,
            eval,
            agent: "support".into(),
            attachments: attached
                .iter()
                .map(|c| KnowledgeAttachment::named(*c))
                .collect(),
            default_max_passages: 4,
            crew_dir: Some(PathBuf::from("/srv/crews")),
        }
    }

    #[tokio::test]
    async fn eval_without_a_registered_harness_says_so() {
        let executor = executor_for(&[], None);
        let result = executor.execute(RAG_EVAL, "{}").await;
        assert_eq!(result.content, EVAL_UNAVAILABLE);
        let result = executor.execute(RAG_SEARCH, "{\"query\": \"x\"}").await;
        assert_eq!(
            result.content,
            "error: rag_search: agent 'support' has no attached knowledge to search"
        );
        let result = executor.execute(RAG_SEARCH, "not json").await;
        assert!(result.content.contains("not valid"), "{}", result.content);
    }

    struct EchoEval;

    #[async_trait]
    impl EvalTool for EchoEval {
        async fn evaluate(
            &self,
            request: EvalRequest,
            scope: EvalScope,
        ) -> Result<serde_json::Value, String> {
            Ok(json!({
                "dataset": request.dataset,
                "profiles": request.profiles,
                "collection": scope.collection,
                "crew_dir": scope.crew_dir,
            }))
        }
    }

    #[tokio::test]
    async fn a_registered_eval_tool_receives_the_request_and_its_scope() {
        let executor = executor_for(&["kb"], Some(Arc::new(EchoEval)));
        let result = executor
            .execute(
                RAG_EVAL,
                r#"{"dataset": "golden.yaml", "profiles": ["fast"]}"#,
            )
            .await;
        let report: serde_json::Value = serde_json::from_str(&result.content).unwrap();
        assert_eq!(
            report,
            json!({"dataset": "golden.yaml", "profiles": ["fast"], "collection": "kb", "crew_dir": "/srv/crews"})
        );
        let result = executor.execute(RAG_EVAL, "{}").await;
        assert!(
            result.content.contains("give a `dataset`"),
            "{}",
            result.content
        );
        // Two attachments and none named: the model is asked to choose.
        let result = executor_for(&["kb", "faq"], Some(Arc::new(EchoEval)))
            .execute(RAG_EVAL, r#"{"dataset": "golden.yaml"}"#)
            .await;
        assert_eq!(
            result.content,
            "error: rag_eval: name the `collection` to evaluate, one of agent 'support''s: kb, faq"
        );
    }

    #[tokio::test]
    async fn a_tool_touching_a_collection_its_agent_is_not_attached_to_errors() {
        let executor = executor_for(&["kb", "faq"], Some(Arc::new(EchoEval)));
        let calls = [
            (
                RAG_SEARCH,
                r#"{"query": "x", "collections": ["kb", "hr-private"]}"#,
            ),
            (
                RAG_INGEST,
                r#"{"collection": "hr-private", "sources": ["a.md"]}"#,
            ),
            (
                RAG_EVAL,
                r#"{"dataset": "golden.yaml", "collection": "hr-private"}"#,
            ),
        ];
        for (tool, arguments) in calls {
            let result = executor.execute(tool, arguments).await;
            assert_eq!(
                result.content,
                format!(
                    "error: {tool}: collection 'hr-private' is not attached to agent 'support' (attached: kb, faq); a tool may only touch its agent's collections"
                )
            );
            assert!(result.knowledge.is_none());
        }
    }

    #[tokio::test]
    async fn rag_ingest_and_rag_eval_need_a_crew_folder() {
        let mut executor = executor_for(&["kb"], Some(Arc::new(EchoEval)));
        executor.crew_dir = None;
        for (tool, arguments) in [
            (RAG_INGEST, r#"{"collection": "kb", "sources": ["a.md"]}"#),
            (RAG_EVAL, r#"{"dataset": "golden.yaml"}"#),
        ] {
            let result = executor.execute(tool, arguments).await;
            assert!(
                result.content.contains("no crew folder"),
                "{tool}: {}",
                result.content
            );
        }
    }
}
