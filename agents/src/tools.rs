//! The knowledge tools offered to LLMs that support tool calls: `rag_search`, `rag_ingest` and
//! `rag_eval` — their JSON-schema specs, their argument parsing and their execution against the
//! `KnowledgeService` port (and an optional host-registered [`EvalTool`]).

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
    /// Path of the golden dataset (YAML) to evaluate.
    pub dataset: Option<String>,
    /// Collection to evaluate against.
    pub collection: Option<String>,
    /// Profiles to compare (`fast`, `balanced`, `quality`, …); empty: the host's default.
    pub profiles: Vec<String>,
}

/// A host's evaluation harness, registered on the runner to serve `rag_eval`.
#[async_trait]
pub trait EvalTool: Send + Sync {
    /// Runs the evaluation and returns its report (JSON), or an error message for the model.
    async fn evaluate(&self, request: EvalRequest) -> Result<serde_json::Value, String>;
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
            description: "Ingest sources (files or glob patterns) into a knowledge collection, \
                          incrementally: unchanged sources cost nothing."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "collection": {"type": "string", "description": "Collection to ingest into."},
                    "sources": {
                        "type": "array", "items": {"type": "string"}, "minItems": 1,
                        "description": "File paths or glob patterns."
                    }
                },
                "required": ["collection", "sources"],
                "additionalProperties": false
            }),
        },
        RAG_EVAL => ToolSpec {
            name: RAG_EVAL.to_owned(),
            description: "Evaluate retrieval quality (recall@k, MRR) on a golden dataset."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "dataset": {"type": "string", "description": "Golden dataset file."},
                    "collection": {"type": "string"},
                    "profiles": {"type": "array", "items": {"type": "string"}}
                },
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
    /// The agent's knowledge attachments (the default of `rag_search`; their profiles apply).
    pub attachments: Vec<KnowledgeAttachment>,
    pub default_max_passages: usize,
    /// Folder relative `rag_ingest` sources resolve against.
    pub ingest_base_dir: PathBuf,
    /// Added to every `[n]` marker `rag_search` returns, so its passages never collide with
    /// markers the conversation already uses.
    pub marker_offset: u32,
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
            return Err(
                "rag_search: no collection named and the agent has no attached knowledge; pass `collections`"
                    .to_owned(),
            );
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
        let block = offset_markers(block, self.marker_offset);
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
        let service = self.service(RAG_INGEST)?;
        let statuses = service
            .bootstrap(vec![CollectionRequest {
                name: args.collection.clone(),
                base_dir: self.ingest_base_dir.clone(),
                sources: args.sources,
                chunking: None,
            }])
            .await
            .map_err(|e| format!("rag_ingest into {}: {e}", args.collection))?;
        serde_json::to_string(&statuses)
            .map(ToolResult::text)
            .map_err(|e| format!("rag_ingest: the report could not be serialised: {e}"))
    }

    async fn eval(&self, arguments: &str) -> Result<ToolResult, String> {
        let Some(eval) = self.eval.as_ref() else {
            return Ok(ToolResult::text(EVAL_UNAVAILABLE));
        };
        let request: EvalRequest = parse_arguments(RAG_EVAL, arguments)?;
        let report = eval.evaluate(request).await?;
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

/// Shifts every `[n]` passage marker of a block (line starts and citations) by `offset`.
pub fn offset_markers(mut block: KnowledgeBlock, offset: u32) -> KnowledgeBlock {
    if offset == 0 {
        return block;
    }
    for citation in &mut block.citations {
        citation.marker += offset;
    }
    block.text = block
        .text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if let Some(rest) = trimmed.strip_prefix('[')
                && let Some(close) = rest.find(']')
                && let Ok(marker) = rest[..close].parse::<u32>()
            {
                let indent = &line[..line.len() - trimmed.len()];
                return format!("{indent}[{}]{}", marker + offset, &rest[close + 1..]);
            }
            line.to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n");
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::ports::KnowledgeCitation;

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

    #[test]
    fn markers_shift_in_text_and_citations() {
        let block = KnowledgeBlock {
            text: "[1] (source: a.md) Alpha.\ncontinued [1] inline\n[2] Beta.".into(),
            citations: vec![KnowledgeCitation {
                marker: 1,
                collection: "c".into(),
                chunk_id: "x".into(),
                source_id: "a.md".into(),
                snippet: String::new(),
                score: 0.5,
                score_origin: "vector".into(),
                start: 0,
                end: 1,
            }],
            trace: serde_json::Value::Null,
        };
        let shifted = offset_markers(block, 3);
        assert_eq!(
            shifted.text,
            "[4] (source: a.md) Alpha.\ncontinued [1] inline\n[5] Beta."
        );
        assert_eq!(shifted.citations[0].marker, 4);
    }

    #[tokio::test]
    async fn eval_without_a_registered_harness_says_so() {
        let executor = ToolExecutor {
            knowledge: None,
            eval: None,
            attachments: vec![],
            default_max_passages: 4,
            ingest_base_dir: PathBuf::from("."),
            marker_offset: 0,
        };
        let result = executor.execute(RAG_EVAL, "{}").await;
        assert_eq!(result.content, EVAL_UNAVAILABLE);
        let result = executor.execute(RAG_SEARCH, "{\"query\": \"x\"}").await;
        assert!(
            result
                .content
                .starts_with("error: rag_search: no collection named"),
            "{}",
            result.content
        );
        let result = executor.execute(RAG_SEARCH, "not json").await;
        assert!(result.content.contains("not valid"), "{}", result.content);
    }

    struct FixedReportEval;

    #[async_trait]
    impl EvalTool for FixedReportEval {
        async fn evaluate(&self, request: EvalRequest) -> Result<serde_json::Value, String> {
            Ok(json!({"dataset": request.dataset, "profiles": request.profiles}))
        }
    }

    #[tokio::test]
    async fn a_registered_eval_tool_receives_the_parsed_request() {
        let executor = ToolExecutor {
            knowledge: None,
            eval: Some(Arc::new(FixedReportEval)),
            attachments: vec![],
            default_max_passages: 4,
            ingest_base_dir: PathBuf::from("."),
            marker_offset: 0,
        };
        let result = executor
            .execute(
                RAG_EVAL,
                r#"{"dataset": "golden.yaml", "profiles": ["fast"]}"#,
            )
            .await;
        let report: serde_json::Value = serde_json::from_str(&result.content).unwrap();
        assert_eq!(
            report,
            json!({"dataset": "golden.yaml", "profiles": ["fast"]})
        );
    }
}
