//! [`ScriptedChat`]: a deterministic in-process double of the `ChatModel` port for unit tests of
//! LLM-backed stages. It answers each call with the next scripted reply and records every
//! request, so tests can inspect prompts and count LLM calls. No network: for a double behind
//! real HTTP, see [`crate::openai`].

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse};

use crate::http::lock;

/// The name and answer label of [`ScriptedChat`].
pub const SCRIPTED_CHAT_MODEL: &str = "scripted";

/// Answers each chat call with the next scripted reply (then fails with
/// `ChatError::InvalidResponse`) and records every request it received.
#[derive(Debug)]
pub struct ScriptedChat {
    replies: Mutex<Vec<String>>,
    /// Every request received, in call order.
    pub requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedChat {
    /// A double answering `replies` in order.
    pub fn new(replies: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.iter().rev().map(|s| s.to_string()).collect()),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// How many calls it has received.
    pub fn calls(&self) -> usize {
        lock(&self.requests).len()
    }
}

#[async_trait]
impl ChatModel for ScriptedChat {
    fn name(&self) -> String {
        SCRIPTED_CHAT_MODEL.into()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        lock(&self.requests).push(request);
        let content = lock(&self.replies).pop().ok_or_else(|| {
            ChatError::InvalidResponse("the scripted chat ran out of replies".into())
        })?;
        Ok(ChatResponse {
            content,
            model: SCRIPTED_CHAT_MODEL.into(),
            ..ChatResponse::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use orkeon_crews::ports::ChatMessage;

    use super::*;

    #[tokio::test]
    async fn answers_in_order_records_requests_then_runs_out() {
        let chat = ScriptedChat::new(&["one", "two"]);
        assert_eq!(chat.name(), "scripted");
        let ask = |text: &str| ChatRequest::new(vec![ChatMessage::user(text)]);
        let first = chat.chat(ask("a")).await.unwrap();
        assert_eq!(
            (first.content.as_str(), first.model.as_str()),
            ("one", "scripted")
        );
        assert_eq!(chat.chat(ask("b")).await.unwrap().content, "two");
        assert!(matches!(
            chat.chat(ask("c")).await,
            Err(ChatError::InvalidResponse(message)) if message.contains("ran out of replies")
        ));
        assert_eq!(chat.calls(), 3);
        let sent: Vec<String> = chat
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.messages[0].content.clone())
            .collect();
        assert_eq!(sent, ["a", "b", "c"]);
    }
}
