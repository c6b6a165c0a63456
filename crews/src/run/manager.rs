//! The hierarchical manager's dialogue: asking a chat model which agent should do a task
//! and whether a result is acceptable, and reading its JSON answers tolerantly. Every way
//! the manager can be unavailable or unusable ends in a documented default with a reason.

use std::sync::Arc;

use crate::ports::{ChatMessage, ChatModel, ChatRequest, TaskOutput};
use crate::spec::{CrewSpec, TaskSpec};

/// Label of the offline model, which cannot plan or review.
const EXTRACTIVE: &str = "extractive";

/// Who does a task, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Assignment {
    pub agent: String,
    pub reason: String,
}

/// A manager's verdict on a task output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Review {
    pub approved: bool,
    pub feedback: String,
    /// Recorded as a manager decision.
    pub reason: String,
}

/// The manager model if it can plan: `None` when there is none or it is the extractive one.
pub(super) fn planning_model(
    manager: Option<&Arc<dyn ChatModel>>,
) -> Result<&Arc<dyn ChatModel>, String> {
    match manager {
        None => Err("no manager model is configured".to_string()),
        Some(model) if model.name().trim().eq_ignore_ascii_case(EXTRACTIVE) => {
            Err(format!("the manager model '{}' cannot plan", model.name()))
        }
        Some(model) => Ok(model),
    }
}

fn system_prompt(crew: &CrewSpec) -> String {
    let agents: Vec<String> = crew
        .agents
        .iter()
        .map(|a| format!("- {}: {} (goal: {})", a.name, a.role, a.goal))
        .collect();
    format!(
        "You manage the crew '{}'. Its agents are:\n{}\nAnswer with one JSON object and nothing else.",
        crew.name,
        agents.join("\n")
    )
}

/// Asks `model` which agent should perform `task` (whose texts are already rendered);
/// falls back to the task's `agent` field with the reason when the answer is unusable.
pub(super) async fn assign(
    model: &Arc<dyn ChatModel>,
    crew: &CrewSpec,
    task: &TaskSpec,
    description: &str,
    expected_output: &str,
) -> Assignment {
    let request = ChatRequest {
        temperature: Some(0.0),
        max_tokens: Some(200),
        json_mode: true,
        ..ChatRequest::new(vec![
            ChatMessage::system(system_prompt(crew)),
            ChatMessage::user(format!(
                "Which agent should perform this task?\nTask: {}\nDescription: {description}\nExpected output: {expected_output}\n\
                 Answer {{\"agent\": \"<agent name>\", \"reason\": \"<one sentence>\"}}.",
                task.name
            )),
        ])
    };
    let fallback = |why: String| Assignment {
        agent: task.agent.clone(),
        reason: format!("{why}; following the task's agent field"),
    };
    let answer = match model.chat(request).await {
        Ok(answer) => answer,
        Err(e) => return fallback(format!("the manager call failed ({e})")),
    };
    let Some(object) = json_object(&answer.content) else {
        return fallback(format!(
            "the manager answer is not a JSON object ({})",
            excerpt(&answer.content)
        ));
    };
    let Some(named) = object.get("agent").and_then(|v| v.as_str()) else {
        return fallback("the manager answer has no \"agent\" text".to_string());
    };
    let Some(agent) = crew
        .agents
        .iter()
        .find(|a| a.name == named.trim() || a.name.eq_ignore_ascii_case(named.trim()))
    else {
        return fallback(format!(
            "the manager named agent '{named}', which this crew does not declare"
        ));
    };
    let why = object
        .get("reason")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .unwrap_or("no reason given");
    Assignment {
        agent: agent.name.clone(),
        reason: format!("assigned by manager {}: {why}", model.name()),
    }
}

/// Asks `model` whether `output` fulfils `task`; an unusable answer approves, with the
/// reason.
pub(super) async fn review(
    model: &Arc<dyn ChatModel>,
    crew: &CrewSpec,
    task: &TaskSpec,
    expected_output: &str,
    output: &TaskOutput,
) -> Review {
    let request = ChatRequest {
        temperature: Some(0.0),
        max_tokens: Some(400),
        json_mode: true,
        ..ChatRequest::new(vec![
            ChatMessage::system(system_prompt(crew)),
            ChatMessage::user(format!(
                "Review the result of task '{}' by agent '{}'.\nExpected output: {expected_output}\nResult:\n{}\n\
                 Answer {{\"approved\": true|false, \"feedback\": \"<what to change, if anything>\"}}.",
                task.name, output.agent, output.output
            )),
        ])
    };
    let approve_by_default = |why: String| Review {
        approved: true,
        feedback: String::new(),
        reason: format!("{why}; approved by default"),
    };
    let answer = match model.chat(request).await {
        Ok(answer) => answer,
        Err(e) => return approve_by_default(format!("the review call failed ({e})")),
    };
    let Some(object) = json_object(&answer.content) else {
        return approve_by_default(format!(
            "the review answer is not a JSON object ({})",
            excerpt(&answer.content)
        ));
    };
    let Some(approved) = object.get("approved").and_then(tolerant_bool) else {
        return approve_by_default("the review answer has no usable \"approved\"".to_string());
    };
    let feedback = object
        .get("feedback")
        .and_then(|v| v.as_str())
        .map(|f| f.trim().to_string())
        .unwrap_or_default();
    let reason = if approved {
        format!("approved by manager {}", model.name())
    } else {
        format!(
            "rejected by manager {}: {}; retrying once with the feedback",
            model.name(),
            if feedback.is_empty() {
                "no feedback given"
            } else {
                &feedback
            }
        )
    };
    Review {
        approved,
        feedback,
        reason,
    }
}

fn tolerant_bool(value: &serde_json::Value) -> Option<bool> {
    match value {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "approved" | "approve" => Some(true),
            "false" | "no" | "rejected" | "reject" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// The first JSON object in `text` (bare, fenced in ``` or surrounded by prose).
pub(super) fn json_object(text: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    for (start, _) in text.match_indices('{') {
        let mut stream =
            serde_json::Deserializer::from_str(&text[start..]).into_iter::<serde_json::Value>();
        if let Some(Ok(serde_json::Value::Object(map))) = stream.next() {
            return Some(map);
        }
    }
    None
}

fn excerpt(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return "empty".to_string();
    }
    let short: String = trimmed.chars().take(80).collect();
    if short.len() < trimmed.len() {
        format!("'{short}…'")
    } else {
        format!("'{short}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_objects_tolerantly() {
        assert_eq!(
            json_object("{\"agent\": \"writer\"}").unwrap()["agent"],
            "writer"
        );
        assert_eq!(
            json_object("Sure!\n```json\n{\"agent\": \"editor\", \"reason\": \"x\"}\n```\nDone.")
                .unwrap()["agent"],
            "editor"
        );
        assert_eq!(
            json_object("{not json} then {\"approved\": false}").unwrap()["approved"],
            false
        );
        assert!(json_object("no object here").is_none());
        assert!(json_object("[1, 2]").is_none());
    }

    #[test]
    fn reads_booleans_tolerantly() {
        assert_eq!(tolerant_bool(&serde_json::json!(true)), Some(true));
        assert_eq!(tolerant_bool(&serde_json::json!("No")), Some(false));
        assert_eq!(tolerant_bool(&serde_json::json!("approved")), Some(true));
        assert_eq!(tolerant_bool(&serde_json::json!("maybe")), None);
        assert_eq!(tolerant_bool(&serde_json::json!(1)), None);
    }
}
