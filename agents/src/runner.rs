//! [`AgentTaskRunner`]: performs one task as one agent — retrieves the agent's knowledge block,
//! renumbers it into the run's citation ledger (`TaskAssignment::run_passages`), renders the
//! prompt, calls the chat model with the agent's tools and executes the tool calls it asks for
//! (their passages join the ledger too), then checks the output's markers against the ledger:
//! resolving ones are kept, dangling ones removed, an output citing nothing has no citations.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use orkeon_crews::ports::{
    AugmentRequest, ChatMessage, ChatModel, ChatRequest, KnowledgeBlock, KnowledgeCitation,
    KnowledgeService, Role, TaskAssignment, TaskError, TaskOutput, TaskRunner,
};

use crate::citations::CitationLedger;
use crate::prompts::PromptTemplates;
use crate::tools::{EvalTool, ToolExecutor, tool_specs};

/// Passages retrieved for an agent's knowledge block by default.
pub const DEFAULT_MAX_PASSAGES: usize = 6;
/// Tool-call rounds allowed per task by default.
pub const DEFAULT_MAX_TOOL_ROUNDS: usize = 4;

/// The `TaskRunner` of Orkeon's agents.
#[derive(Clone)]
pub struct AgentTaskRunner {
    chat: Arc<dyn ChatModel>,
    knowledge: Option<Arc<dyn KnowledgeService>>,
    templates: Arc<PromptTemplates>,
    eval: Option<Arc<dyn EvalTool>>,
    max_passages: usize,
    max_tool_rounds: usize,
    crew_dir: Option<PathBuf>,
}

impl AgentTaskRunner {
    pub fn new(
        chat: Arc<dyn ChatModel>,
        knowledge: Option<Arc<dyn KnowledgeService>>,
        templates: Arc<PromptTemplates>,
    ) -> Self {
        Self {
            chat,
            knowledge,
            templates,
            eval: None,
            max_passages: DEFAULT_MAX_PASSAGES,
            max_tool_rounds: DEFAULT_MAX_TOOL_ROUNDS,
            crew_dir: None,
        }
    }

    /// Passages in the knowledge block of agents that set no `max_passages` (and the default of
    /// `rag_search`), at least one.
    pub fn with_max_passages(mut self, n: usize) -> Self {
        self.max_passages = n.max(1);
        self
    }

    /// Tool-call rounds before the model is asked to answer without tools.
    pub fn with_max_tool_rounds(mut self, n: usize) -> Self {
        self.max_tool_rounds = n;
        self
    }

    /// Serves `rag_eval` with the host's evaluation harness.
    pub fn with_eval_tool(mut self, eval: Arc<dyn EvalTool>) -> Self {
        self.eval = Some(eval);
        self
    }

    /// The crew file's folder: `rag_ingest` sources and `rag_eval` datasets resolve against it
    /// (never the process's working directory). Unset: those tools are refused.
    pub fn with_crew_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crew_dir = Some(dir.into());
        self
    }

    async fn knowledge_block(
        &self,
        a: &TaskAssignment,
    ) -> Result<Option<KnowledgeBlock>, TaskError> {
        if a.agent.knowledge.is_empty() {
            return Ok(None);
        }
        let Some(service) = self.knowledge.as_ref() else {
            tracing::warn!(
                agent = %a.agent.name,
                collections = ?a.agent.collections(),
                "agent has knowledge attached but this host has no knowledge service; running without it"
            );
            return Ok(None);
        };
        let query = if a.expected_output.trim().is_empty() {
            a.description.clone()
        } else {
            format!("{}\n{}", a.description, a.expected_output)
        };
        let request = AugmentRequest {
            attachments: a.agent.knowledge.clone(),
            query,
            max_passages: a.agent.max_passages.unwrap_or(self.max_passages).max(1),
        };
        let block = service.augment(&request).await?;
        tracing::debug!(
            run_id = %a.run_id,
            agent = %a.agent.name,
            task = %a.task_name,
            passages = block.citations.len(),
            "knowledge block retrieved"
        );
        Ok(Some(block))
    }
}

#[async_trait]
impl TaskRunner for AgentTaskRunner {
    async fn run_task(&self, a: TaskAssignment) -> Result<TaskOutput, TaskError> {
        let mut ledger = CitationLedger::from_passages(&a.run_passages);
        let mut passages: Vec<KnowledgeCitation> = Vec::new();
        let mut traces: Vec<serde_json::Value> = Vec::new();
        let block = self.knowledge_block(&a).await?.map(|block| {
            let block = ledger.admit_block(block);
            passages.extend(block.citations.iter().cloned());
            traces.push(serde_json::json!({"via": "knowledge", "trace": block.trace}));
            block
        });
        let tools = tool_specs(&a.agent.tools).map_err(|e| {
            TaskError::Other(format!(
                "agent `{}` of crew `{}`: {e}",
                a.agent.name, a.crew
            ))
        })?;
        let mut messages = self
            .templates
            .render_task_with_tools(&a, block.as_ref(), &tools)?;

        let mut rounds = 0usize;
        let output = loop {
            let offer_tools = !tools.is_empty() && rounds < self.max_tool_rounds;
            let request = ChatRequest {
                messages: messages.clone(),
                tools: if offer_tools {
                    tools.clone()
                } else {
                    Vec::new()
                },
                ..ChatRequest::default()
            };
            let response = self.chat.chat(request).await?;
            if response.tool_calls.is_empty() || !offer_tools {
                if response.content.trim().is_empty() && !response.tool_calls.is_empty() {
                    return Err(TaskError::Other(format!(
                        "model {} kept calling tools after {} rounds and gave no answer for task `{}`",
                        self.chat.name(),
                        rounds,
                        a.task_name
                    )));
                }
                break response.content;
            }
            rounds += 1;
            tracing::debug!(
                run_id = %a.run_id,
                agent = %a.agent.name,
                round = rounds,
                calls = response.tool_calls.len(),
                "executing tool calls"
            );
            messages.push(ChatMessage {
                role: Role::Assistant,
                content: response.content.clone(),
                tool_call_id: None,
                tool_calls: response.tool_calls.clone(),
            });
            for call in &response.tool_calls {
                // Passages found are renumbered into the run's ledger below.
                let executor = ToolExecutor {
                    knowledge: self.knowledge.clone(),
                    eval: self.eval.clone(),
                    agent: a.agent.name.clone(),
                    attachments: a.agent.knowledge.clone(),
                    default_max_passages: self.max_passages,
                    crew_dir: self.crew_dir.clone(),
                };
                let result = executor.execute(&call.name, &call.arguments).await;
                let mut content = result.content;
                if let Some(found) = result.knowledge {
                    let (found, map) = ledger.admit_block_mapped(found);
                    content = CitationLedger::renumber_text(&content, &map);
                    for passage in found.citations {
                        if !passages.iter().any(|p| p.marker == passage.marker) {
                            passages.push(passage);
                        }
                    }
                    traces.push(serde_json::json!({
                        "via": call.name,
                        "arguments": call.arguments,
                        "trace": found.trace,
                    }));
                }
                messages.push(ChatMessage {
                    role: Role::Tool,
                    content,
                    tool_call_id: Some(call.id.clone()),
                    tool_calls: Vec::new(),
                });
            }
        };

        let check = ledger.check_output(&output);
        if !check.dangling_markers.is_empty() {
            tracing::warn!(
                run_id = %a.run_id,
                agent = %a.agent.name,
                task = %a.task_name,
                dangling = ?check.dangling_markers,
                "the output cites markers that resolve to no passage; removed"
            );
        }
        Ok(TaskOutput {
            task: a.task_name.clone(),
            agent: a.agent.name.clone(),
            output: check.text,
            citations: check.cited,
            model: self.chat.name(),
            passages,
            retrieval_trace: traces,
            dangling_markers: check.dangling_markers,
            uncited: check.uncited,
            degraded: None,
            groundedness: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use orkeon_crews::ports::{
        AgentProfile, CollectionRequest, CollectionState, CollectionStatus, KnowledgeAttachment,
        KnowledgeError,
    };
    use orkeon_testkit::{ScriptReply, ScriptRule, ScriptedLlmServer};
    use serde_json::json;

    use super::*;
    use crate::llm::extractive::{ExtractiveModel, NO_CONTEXT_ANSWER};
    use crate::llm::openai::OpenAiChatModel;
    use crate::llm::{ExtractiveSettings, OpenAiChatSettings};
    use crate::tools::EVAL_UNAVAILABLE;

    /// A `KnowledgeService` port double over a fixed in-memory passage list: ranks passages by
    /// how many query words they share and numbers the best ones. Records every call.
    struct InMemoryPassagesKnowledge {
        collection: String,
        passages: Vec<(String, String)>,
        augment_calls: Mutex<Vec<(Vec<String>, String, usize)>>,
        bootstrap_calls: Mutex<Vec<CollectionRequest>>,
        upsert_calls: Mutex<Vec<CollectionRequest>>,
    }

    impl InMemoryPassagesKnowledge {
        fn new(collection: &str, passages: &[(&str, &str)]) -> Self {
            Self {
                collection: collection.into(),
                passages: passages
                    .iter()
                    .map(|(s, t)| (s.to_string(), t.to_string()))
                    .collect(),
                augment_calls: Mutex::new(Vec::new()),
                bootstrap_calls: Mutex::new(Vec::new()),
                upsert_calls: Mutex::new(Vec::new()),
            }
        }
    }

    fn words(text: &str) -> BTreeSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_lowercase)
            .collect()
    }

    #[async_trait]
    impl KnowledgeService for InMemoryPassagesKnowledge {
        async fn bootstrap(
            &self,
            collections: Vec<CollectionRequest>,
        ) -> Result<Vec<CollectionStatus>, KnowledgeError> {
            let statuses = collections
                .iter()
                .map(|c| CollectionStatus {
                    name: c.name.clone(),
                    state: CollectionState::Ready,
                    report: json!({"sources": c.sources.len()}),
                    reason: None,
                })
                .collect();
            self.bootstrap_calls.lock().unwrap().extend(collections);
            Ok(statuses)
        }

        async fn upsert_sources(
            &self,
            request: CollectionRequest,
        ) -> Result<CollectionStatus, KnowledgeError> {
            let status = CollectionStatus {
                name: request.name.clone(),
                state: CollectionState::Ready,
                report: json!({"sources": request.sources.len()}),
                reason: None,
            };
            self.upsert_calls.lock().unwrap().push(request);
            Ok(status)
        }

        async fn augment(
            &self,
            request: &AugmentRequest,
        ) -> Result<KnowledgeBlock, KnowledgeError> {
            let collections: Vec<String> = request
                .attachments
                .iter()
                .map(|a| a.collection.clone())
                .collect();
            let (query, max_passages) = (request.query.as_str(), request.max_passages);
            self.augment_calls.lock().unwrap().push((
                collections.to_vec(),
                query.to_owned(),
                max_passages,
            ));
            if !collections.contains(&self.collection) {
                return Err(KnowledgeError::Retrieval {
                    collection: collections.join(","),
                    source: format!("unknown collection; known: {}", self.collection).into(),
                });
            }
            let query_words = words(query);
            let mut ranked: Vec<(usize, usize)> = self
                .passages
                .iter()
                .enumerate()
                .map(|(i, (_, text))| (words(text).intersection(&query_words).count(), i))
                .filter(|(overlap, _)| *overlap > 0)
                .collect();
            ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            ranked.truncate(max_passages);
            let mut block = KnowledgeBlock::default();
            for (rank, (overlap, index)) in ranked.iter().enumerate() {
                let marker = rank as u32 + 1;
                let (source, text) = &self.passages[*index];
                block
                    .text
                    .push_str(&format!("[{marker}] (source: {source}) {text}\n"));
                block.citations.push(KnowledgeCitation {
                    marker,
                    collection: self.collection.clone(),
                    chunk_id: format!("{source}#0"),
                    source_id: source.clone(),
                    snippet: text.clone(),
                    score: *overlap as f32,
                    score_origin: "word-overlap".into(),
                    start: 0,
                    end: text.len(),
                    untrusted: false,
                });
            }
            Ok(block)
        }
    }

    fn product_kb() -> Arc<InMemoryPassagesKnowledge> {
        Arc::new(InMemoryPassagesKnowledge::new(
            "product-kb",
            &[
                (
                    "kb/shipping.md",
                    "Standard shipping takes 3 to 5 business days. Express shipping costs 12 euros.",
                ),
                (
                    "kb/refunds.md",
                    "Customers can request a refund within 30 days of purchase. The office closes at six.",
                ),
                (
                    "kb/warranty.md",
                    "The warranty covers manufacturing defects for two years.",
                ),
            ],
        ))
    }

    fn assignment(tools: &[&str]) -> TaskAssignment {
        TaskAssignment {
            run_id: "run-7".into(),
            crew: "support".into(),
            agent: AgentProfile {
                name: "support".into(),
                role: "Support agent".into(),
                goal: "Answer from the knowledge base".into(),
                backstory: None,
                knowledge: vec![KnowledgeAttachment::named("product-kb")],
                tools: tools.iter().map(|t| t.to_string()).collect(),
                max_passages: None,
            },
            task_name: "answer".into(),
            description: "How many days do customers have to request a refund?".into(),
            expected_output: "A short answer".into(),
            inputs: Default::default(),
            context: vec![],
            run_passages: vec![],
        }
    }

    fn templates() -> Arc<PromptTemplates> {
        Arc::new(PromptTemplates::load(None).unwrap())
    }

    fn scripted_model(server: &ScriptedLlmServer) -> Arc<dyn ChatModel> {
        Arc::new(
            OpenAiChatModel::new(&OpenAiChatSettings {
                base_url: server.base_url(),
                model: "tool-model".into(),
                api_key_env: String::new(),
                timeout_ms: 5_000,
                max_retries: 0,
                ..OpenAiChatSettings::default()
            })
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn extractive_run_cites_the_retrieved_passage() {
        let kb = product_kb();
        let runner = AgentTaskRunner::new(
            Arc::new(ExtractiveModel::new(&ExtractiveSettings {
                max_sentences: 1,
            })),
            Some(kb.clone() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_max_passages(2);
        let output = runner.run_task(assignment(&[])).await.unwrap();

        let calls = kb.augment_calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, vec!["product-kb".to_string()]);
        assert_eq!(
            calls[0].1,
            "How many days do customers have to request a refund?\nA short answer"
        );
        assert_eq!(calls[0].2, 2);

        assert_eq!(
            output.output,
            "Customers can request a refund within 30 days of purchase. [1]"
        );
        assert_eq!(output.model, "extractive");
        assert_eq!(output.task, "answer");
        assert_eq!(output.agent, "support");
        assert_eq!(output.citations.len(), 1, "only the cited passage is kept");
        assert_eq!(output.citations[0].marker, 1);
        assert_eq!(output.citations[0].source_id, "kb/refunds.md");
    }

    #[tokio::test]
    async fn the_agents_max_passages_sizes_its_block() {
        let kb = product_kb();
        let runner = AgentTaskRunner::new(
            Arc::new(ExtractiveModel::default()),
            Some(kb.clone() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_max_passages(6);
        let mut a = assignment(&[]);
        a.agent.max_passages = Some(1);
        runner.run_task(a).await.unwrap();
        // Without one, the runner's default applies.
        runner.run_task(assignment(&[])).await.unwrap();
        let sizes: Vec<usize> = kb
            .augment_calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.2)
            .collect();
        assert_eq!(sizes, [1, 6]);
    }

    #[tokio::test]
    async fn without_attached_knowledge_nothing_is_retrieved() {
        let kb = product_kb();
        let runner = AgentTaskRunner::new(
            Arc::new(ExtractiveModel::default()),
            Some(kb.clone() as Arc<dyn KnowledgeService>),
            templates(),
        );
        let mut a = assignment(&[]);
        a.agent.knowledge.clear();
        let output = runner.run_task(a).await.unwrap();
        assert!(kb.augment_calls.lock().unwrap().is_empty());
        assert_eq!(output.output, NO_CONTEXT_ANSWER);
        assert!(output.citations.is_empty());
    }

    #[tokio::test]
    async fn retrieval_failures_fail_the_task() {
        let runner = AgentTaskRunner::new(
            Arc::new(ExtractiveModel::default()),
            Some(product_kb() as Arc<dyn KnowledgeService>),
            templates(),
        );
        let mut a = assignment(&[]);
        a.agent.knowledge = vec![KnowledgeAttachment::named("missing-kb")];
        let err = runner.run_task(a).await.unwrap_err();
        assert!(matches!(err, TaskError::Knowledge(_)), "{err:?}");
        assert!(err.to_string().contains("missing-kb"), "{err}");
    }

    #[tokio::test]
    async fn an_unknown_tool_is_an_error_naming_it() {
        let runner = AgentTaskRunner::new(Arc::new(ExtractiveModel::default()), None, templates());
        let err = runner
            .run_task(assignment(&["web_search"]))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("web_search") && text.contains("rag_search"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn rag_search_tool_round_trip_through_the_openai_client() {
        // A scripted OpenAI-compatible server stands in for the LLM: it first asks for
        // rag_search, then answers citing the passage the tool returned.
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::ToolCall {
                name: "rag_search".into(),
                arguments: json!({"query": "warranty defects years"}),
            }),
            ScriptRule::once(ScriptReply::Text(
                "The warranty lasts two years [2].".into(),
            )),
        ])
        .await
        .unwrap();
        let kb = product_kb();
        let runner = AgentTaskRunner::new(
            scripted_model(&server),
            Some(kb.clone() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_max_passages(1);
        let output = runner.run_task(assignment(&["rag_search"])).await.unwrap();

        // The knowledge block holds [1] (refunds); the tool's passage continues at [2].
        assert_eq!(output.output, "The warranty lasts two years [2].");
        assert_eq!(output.model, "openai:tool-model");
        assert_eq!(output.citations.len(), 1);
        assert_eq!(output.citations[0].marker, 2);
        assert_eq!(output.citations[0].source_id, "kb/warranty.md");

        let calls = kb.augment_calls.lock().unwrap().clone();
        assert_eq!(
            calls[1],
            (
                vec!["product-kb".to_string()],
                "warranty defects years".to_string(),
                1
            )
        );

        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0]["tools"][0]["function"]["name"], "rag_search");
        let first_user = requests[0]["messages"][1]["content"].as_str().unwrap();
        assert!(
            first_user.contains("[1] (source: kb/refunds.md)"),
            "{first_user}"
        );
        let messages = requests[1]["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[2]["role"], "assistant");
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["name"],
            "rag_search"
        );
        let call_id = messages[2]["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(messages[3]["tool_call_id"], call_id);
        let tool_text = messages[3]["content"].as_str().unwrap();
        assert!(
            tool_text.starts_with("[2] (source: kb/warranty.md) The warranty covers"),
            "{tool_text}"
        );
    }

    #[tokio::test]
    async fn rag_ingest_upserts_from_the_crew_folder_and_rag_eval_reports_unavailable() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::ToolCall {
                name: "rag_ingest".into(),
                arguments: json!({"collection": "product-kb", "sources": ["notes/*.md"]}),
            }),
            ScriptRule::once(ScriptReply::ToolCall {
                name: "rag_eval".into(),
                arguments: json!({}),
            }),
            ScriptRule::once(ScriptReply::Text("Ingested the notes.".into())),
        ])
        .await
        .unwrap();
        let kb = product_kb();
        let runner = AgentTaskRunner::new(
            scripted_model(&server),
            Some(kb.clone() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_crew_dir("/srv/crews");
        let output = runner
            .run_task(assignment(&["rag_ingest", "rag_eval"]))
            .await
            .unwrap();
        assert_eq!(output.output, "Ingested the notes.");
        assert!(
            output.citations.is_empty(),
            "nothing cited: no citation is attached"
        );
        assert!(output.uncited);
        assert_eq!(output.passages.len(), 2, "the passages given are reported");

        assert!(
            kb.bootstrap_calls.lock().unwrap().is_empty(),
            "a tool never replaces the collection's sources"
        );
        let upserts = kb.upsert_calls.lock().unwrap().clone();
        assert_eq!(upserts.len(), 1);
        assert_eq!(upserts[0].name, "product-kb");
        assert_eq!(upserts[0].sources, vec!["notes/*.md".to_string()]);
        assert_eq!(upserts[0].base_dir, PathBuf::from("/srv/crews"));

        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        let messages = requests[2]["messages"].as_array().unwrap();
        let ingest_result: serde_json::Value =
            serde_json::from_str(messages[3]["content"].as_str().unwrap()).unwrap();
        assert_eq!(ingest_result["state"], "ready");
        assert_eq!(messages[5]["content"], EVAL_UNAVAILABLE);
    }

    #[tokio::test]
    async fn a_marker_that_resolves_to_nothing_is_removed_and_cites_nothing() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::once(ScriptReply::Text(
            "Refunds take 30 days [9].".into(),
        ))])
        .await
        .unwrap();
        let runner = AgentTaskRunner::new(
            scripted_model(&server),
            Some(product_kb() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_max_passages(2);
        let output = runner.run_task(assignment(&[])).await.unwrap();
        assert_eq!(output.output, "Refunds take 30 days.");
        assert!(output.citations.is_empty());
        assert_eq!(output.dangling_markers, vec![9]);
        assert!(output.uncited);
    }

    #[tokio::test]
    async fn the_block_and_tool_passages_are_numbered_in_the_runs_ledger() {
        // Earlier in the run: [1] warranty (the same chunk the tool finds again) and [2]
        // another passage. The task's block (refunds) continues at [3]; the tool's warranty
        // passage keeps its [1].
        let kb = product_kb();
        let warranty = kb
            .augment(&AugmentRequest {
                attachments: vec![KnowledgeAttachment::named("product-kb")],
                query: "warranty defects years".into(),
                max_passages: 1,
            })
            .await
            .unwrap()
            .citations
            .remove(0);
        let mut other = warranty.clone();
        other.chunk_id = "elsewhere#3".into();
        other.marker = 2;
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::ToolCall {
                name: "rag_search".into(),
                arguments: json!({"query": "warranty defects years"}),
            }),
            ScriptRule::once(ScriptReply::Text(
                "Refunds within 30 days [3]; the warranty lasts two years [1].".into(),
            )),
        ])
        .await
        .unwrap();
        let runner = AgentTaskRunner::new(
            scripted_model(&server),
            Some(kb.clone() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_max_passages(1);
        let mut a = assignment(&["rag_search"]);
        a.run_passages = vec![warranty.clone(), other];
        let output = runner.run_task(a).await.unwrap();

        let requests = server.requests();
        let first_user = requests[0]["messages"][1]["content"].as_str().unwrap();
        assert!(
            first_user.contains("[3] (source: kb/refunds.md)"),
            "{first_user}"
        );
        assert!(!first_user.contains("[1] (source: kb/refunds.md)"));
        let tool_text = requests[1]["messages"][3]["content"].as_str().unwrap();
        assert!(
            tool_text.starts_with("[1] (source: kb/warranty.md)"),
            "{tool_text}"
        );
        let cited: Vec<(u32, &str)> = output
            .citations
            .iter()
            .map(|c| (c.marker, c.source_id.as_str()))
            .collect();
        assert_eq!(cited, [(1, "kb/warranty.md"), (3, "kb/refunds.md")]);
        let given: Vec<u32> = output.passages.iter().map(|p| p.marker).collect();
        assert_eq!(given, [3, 1]);
        assert_eq!(output.retrieval_trace.len(), 2, "block and tool traces");
        assert!(!output.uncited && output.dangling_markers.is_empty());
    }

    #[tokio::test]
    async fn tool_rounds_are_bounded() {
        let server = ScriptedLlmServer::start(vec![ScriptRule {
            when_contains: None,
            reply: ScriptReply::ToolCall {
                name: "rag_search".into(),
                arguments: json!({"query": "again"}),
            },
            times: None,
        }])
        .await
        .unwrap();
        let runner = AgentTaskRunner::new(
            scripted_model(&server),
            Some(product_kb() as Arc<dyn KnowledgeService>),
            templates(),
        )
        .with_max_tool_rounds(2);
        let err = runner
            .run_task(assignment(&["rag_search"]))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("kept calling tools after 2 rounds"),
            "{err}"
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        assert!(requests[1].get("tools").is_some());
        assert!(
            requests[2].get("tools").is_none(),
            "the last call offers no tools"
        );
    }
}
