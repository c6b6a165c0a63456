//! Prompt templates (minijinja): the system and task messages an agent sends for one task.
//!
//! The built-in templates are `config/prompts/system.j2` and `config/prompts/task.j2`, compiled
//! into the binary; a directory given to [`PromptTemplates::load`] overrides them file by file
//! (and may add partials the overrides `{% include %}`).

use std::path::Path;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use orkeon_crews::ports::prompt_convention::{CONTEXT_HEADER, QUESTION_PREFIX};
use orkeon_crews::ports::{ChatMessage, KnowledgeBlock, TaskAssignment, TaskError, ToolSpec};
use serde::Serialize;

/// Template rendering the system message.
pub const SYSTEM_TEMPLATE: &str = "system.j2";
/// Template rendering the user (task) message.
pub const TASK_TEMPLATE: &str = "task.j2";

const BUILT_IN: &[(&str, &str)] = &[
    (
        SYSTEM_TEMPLATE,
        include_str!("../../config/prompts/system.j2"),
    ),
    (TASK_TEMPLATE, include_str!("../../config/prompts/task.j2")),
];

/// The loaded prompt templates.
#[derive(Debug)]
pub struct PromptTemplates {
    env: Environment<'static>,
}

#[derive(Serialize)]
struct TemplateContext<'a> {
    agent: AgentView<'a>,
    crew: &'a str,
    run_id: &'a str,
    task: TaskView<'a>,
    inputs: &'a std::collections::BTreeMap<String, String>,
    context: Vec<EarlierOutputView<'a>>,
    knowledge: Option<KnowledgeView<'a>>,
    tools: Vec<ToolView<'a>>,
    convention: ConventionView,
}

#[derive(Serialize)]
struct AgentView<'a> {
    name: &'a str,
    role: &'a str,
    goal: &'a str,
    backstory: Option<&'a str>,
    tools: &'a [String],
}

#[derive(Serialize)]
struct TaskView<'a> {
    name: &'a str,
    description: &'a str,
    expected_output: &'a str,
}

#[derive(Serialize)]
struct EarlierOutputView<'a> {
    task: &'a str,
    agent: &'a str,
    output: &'a str,
}

#[derive(Serialize)]
struct KnowledgeView<'a> {
    text: &'a str,
    passages: usize,
    /// Whether `text` already starts with the `Context:` header.
    has_header: bool,
}

#[derive(Serialize)]
struct ToolView<'a> {
    name: &'a str,
    description: &'a str,
}

#[derive(Serialize)]
struct ConventionView {
    context_header: &'static str,
    question_prefix: &'static str,
}

impl PromptTemplates {
    /// The built-in templates, overridden by same-named `*.j2` files in `dir` (every `*.j2`
    /// file there is loaded, so overrides can include partials of their own).
    pub fn load(dir: Option<&Path>) -> Result<Self, TaskError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);

        for (name, source) in BUILT_IN {
            env.add_template_owned(name.to_string(), source.to_string())
                .map_err(|e| {
                    TaskError::Template(format!("built-in prompt template {name}: {e:#}"))
                })?;
        }
        if let Some(dir) = dir {
            let entries = std::fs::read_dir(dir).map_err(|e| {
                TaskError::Template(format!(
                    "prompt template folder {} cannot be read: {e}; fix the path or remove the setting",
                    dir.display()
                ))
            })?;
            let mut paths = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| {
                    TaskError::Template(format!("listing {} failed: {e}", dir.display()))
                })?;
                let path = entry.path();
                if path.is_file() && path.extension().is_some_and(|ext| ext == "j2") {
                    paths.push(path);
                }
            }
            paths.sort();
            for path in paths {
                let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned)
                else {
                    continue;
                };
                let source = std::fs::read_to_string(&path).map_err(|e| {
                    TaskError::Template(format!(
                        "prompt template {} cannot be read: {e}",
                        path.display()
                    ))
                })?;
                env.add_template_owned(name, source).map_err(|e| {
                    TaskError::Template(format!(
                        "prompt template {} does not compile: {e:#}",
                        path.display()
                    ))
                })?;
                tracing::debug!(template = %path.display(), "prompt template override loaded");
            }
        }
        Ok(Self { env })
    }

    /// The system and user messages for a task, offering no tools.
    pub fn render_task(
        &self,
        a: &TaskAssignment,
        knowledge: Option<&KnowledgeBlock>,
    ) -> Result<Vec<ChatMessage>, TaskError> {
        self.render_task_with_tools(a, knowledge, &[])
    }

    /// The system and user messages for a task; the system message lists `tools`.
    pub fn render_task_with_tools(
        &self,
        a: &TaskAssignment,
        knowledge: Option<&KnowledgeBlock>,
        tools: &[ToolSpec],
    ) -> Result<Vec<ChatMessage>, TaskError> {
        let context = TemplateContext {
            agent: AgentView {
                name: &a.agent.name,
                role: &a.agent.role,
                goal: &a.agent.goal,
                backstory: a
                    .agent
                    .backstory
                    .as_deref()
                    .filter(|b| !b.trim().is_empty()),
                tools: &a.agent.tools,
            },
            crew: &a.crew,
            run_id: &a.run_id,
            task: TaskView {
                name: &a.task_name,
                description: &a.description,
                expected_output: &a.expected_output,
            },
            inputs: &a.inputs,
            context: a
                .context
                .iter()
                .map(|c| EarlierOutputView {
                    task: &c.task,
                    agent: &c.agent,
                    output: &c.output,
                })
                .collect(),
            knowledge: knowledge.map(|k| KnowledgeView {
                text: k.text.trim_end(),
                passages: k
                    .citations
                    .len()
                    .max(usize::from(!k.text.trim().is_empty())),
                has_header: k.text.trim_start().starts_with(CONTEXT_HEADER),
            }),
            tools: tools
                .iter()
                .map(|t| ToolView {
                    name: &t.name,
                    description: &t.description,
                })
                .collect(),
            convention: ConventionView {
                context_header: CONTEXT_HEADER,
                question_prefix: QUESTION_PREFIX,
            },
        };
        let system = self.render(SYSTEM_TEMPLATE, &context, a)?;
        let user = self.render(TASK_TEMPLATE, &context, a)?;
        Ok(vec![ChatMessage::system(system), ChatMessage::user(user)])
    }

    fn render(
        &self,
        name: &str,
        context: &TemplateContext<'_>,
        a: &TaskAssignment,
    ) -> Result<String, TaskError> {
        let template = self.env.get_template(name).map_err(|e| {
            TaskError::Template(format!("prompt template {name} is missing: {e:#}"))
        })?;
        let rendered = template.render(context).map_err(|e| {
            TaskError::Template(format!(
                "prompt template {name} failed for task `{}` of agent `{}`: {e:#}",
                a.task_name, a.agent.name
            ))
        })?;
        Ok(rendered.trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::ports::{AgentProfile, KnowledgeCitation, TaskOutput};

    fn assignment() -> TaskAssignment {
        TaskAssignment {
            run_id: "run-1".into(),
            crew: "support".into(),
            agent: AgentProfile {
                name: "support".into(),
                role: "Support agent".into(),
                goal: "Answer from the knowledge base".into(),
                backstory: Some("Ten years on the help desk.".into()),
                knowledge: vec![orkeon_crews::ports::KnowledgeAttachment::named(
                    "product-kb",
                )],
                tools: vec![],
                max_passages: None,
            },
            task_name: "answer".into(),
            description: "Answer the customer: how long do refunds take?".into(),
            expected_output: "A short answer with [n] citations".into(),
            inputs: Default::default(),
            context: vec![TaskOutput {
                task: "triage".into(),
                agent: "triager".into(),
                output: "The customer asks about refunds.".into(),
                model: "extractive".into(),
                ..TaskOutput::default()
            }],
            run_passages: vec![],
        }
    }

    fn block() -> KnowledgeBlock {
        let citation = |marker: u32, source: &str| KnowledgeCitation {
            marker,
            collection: "product-kb".into(),
            chunk_id: format!("c{marker}"),
            source_id: source.into(),
            snippet: String::new(),
            score: 1.0,
            score_origin: "hybrid".into(),
            start: 0,
            end: 10,
            untrusted: false,
        };
        KnowledgeBlock {
            text: "[1] (source: kb/refunds.md) Refunds take 14 days.\n[2] (source: kb/faq.md) Shipping is free.".into(),
            citations: vec![citation(1, "kb/refunds.md"), citation(2, "kb/faq.md")],
            trace: serde_json::Value::Null,
        }
    }

    #[test]
    fn renders_role_goal_backstory_context_and_knowledge_in_the_convention() {
        let templates = PromptTemplates::load(None).unwrap();
        let messages = templates
            .render_task(&assignment(), Some(&block()))
            .unwrap();
        assert_eq!(messages.len(), 2);
        let system = &messages[0].content;
        assert!(system.contains("You are Support agent"), "{system}");
        assert!(
            system.contains("Your goal: Answer from the knowledge base"),
            "{system}"
        );
        assert!(system.contains("Ten years on the help desk."), "{system}");
        assert!(system.contains("[1]"), "citation instruction: {system}");

        let user = &messages[1].content;
        assert!(
            user.contains("## triage (by triager)\nThe customer asks about refunds."),
            "{user}"
        );
        assert!(
            user.contains("Expected output: A short answer with [n] citations"),
            "{user}"
        );
        assert!(
            user.contains("Context:\n[1] (source: kb/refunds.md) Refunds take 14 days.\n[2] (source: kb/faq.md) Shipping is free.\n\nQuestion: Answer the customer: how long do refunds take?"),
            "{user}"
        );
        assert!(
            user.ends_with("Question: Answer the customer: how long do refunds take?"),
            "{user}"
        );
    }

    #[test]
    fn the_rendered_task_is_readable_by_the_extractive_model() {
        let templates = PromptTemplates::load(None).unwrap();
        let messages = templates
            .render_task(&assignment(), Some(&block()))
            .unwrap();
        let parsed = crate::llm::extractive::grounded_prompt::parse(&messages[1].content);
        assert_eq!(parsed.passages.len(), 2);
        assert_eq!(parsed.passages[0].text, "Refunds take 14 days.");
        assert_eq!(
            parsed.question,
            "Answer the customer: how long do refunds take?"
        );
    }

    #[test]
    fn without_knowledge_there_is_no_context_section() {
        let templates = PromptTemplates::load(None).unwrap();
        let mut a = assignment();
        a.agent.backstory = None;
        a.context.clear();
        let messages = templates.render_task(&a, None).unwrap();
        assert!(!messages[0].content.contains("Background"));
        assert!(!messages[0].content.contains("[1]"));
        assert!(!messages[1].content.contains("Context:"));
        assert!(!messages[1].content.contains("earlier tasks"));
        assert!(messages[1].content.starts_with("Task: Answer the customer"));
    }

    #[test]
    fn empty_knowledge_says_nothing_was_found() {
        let templates = PromptTemplates::load(None).unwrap();
        let empty = KnowledgeBlock::default();
        let messages = templates.render_task(&assignment(), Some(&empty)).unwrap();
        assert!(
            messages[1]
                .content
                .contains("Context:\n(no passages were found"),
            "{}",
            messages[1].content
        );
    }

    #[test]
    fn tools_are_listed_in_the_system_message() {
        let templates = PromptTemplates::load(None).unwrap();
        let tools = crate::tools::tool_specs(&["rag_search".to_owned()]).unwrap();
        let messages = templates
            .render_task_with_tools(&assignment(), None, &tools)
            .unwrap();
        assert!(
            messages[0].content.contains("- rag_search: "),
            "{}",
            messages[0].content
        );
    }

    #[test]
    fn an_override_dir_replaces_a_template_and_may_include_partials() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("system.j2"),
            "{% include 'persona.j2' %} Goal={{ agent.goal }}",
        )
        .unwrap();
        std::fs::write(dir.path().join("persona.j2"), "Persona={{ agent.role }}.").unwrap();
        let templates = PromptTemplates::load(Some(dir.path())).unwrap();
        let messages = templates
            .render_task(&assignment(), Some(&block()))
            .unwrap();
        assert_eq!(
            messages[0].content,
            "Persona=Support agent. Goal=Answer from the knowledge base"
        );
        // task.j2 was not overridden: the built-in still renders the knowledge block.
        assert!(messages[1].content.contains("[2] (source: kb/faq.md)"));
    }

    #[test]
    fn override_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("task.j2"), "{% if %}").unwrap();
        let err = PromptTemplates::load(Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("task.j2"), "{err}");

        std::fs::write(dir.path().join("task.j2"), "{{ agent.nickname }}").unwrap();
        let templates = PromptTemplates::load(Some(dir.path())).unwrap();
        let err = templates
            .render_task(&assignment(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("task.j2") && err.contains("answer"), "{err}");

        let missing = dir.path().join("nope");
        let err = PromptTemplates::load(Some(&missing))
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope"), "{err}");
    }
}
