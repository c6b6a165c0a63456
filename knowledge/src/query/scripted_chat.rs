//! Test support: [`ScriptedChat`], a deterministic scripted double of the `ChatModel` port for
//! unit tests of the LLM-backed stages. It answers each call with the next scripted reply and
//! records every request, so tests can inspect prompts and count LLM calls.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse};

/// A deterministic scripted port double: answers each chat call with the next scripted
/// reply and records every request it received (so tests can count LLM calls).
pub(crate) struct ScriptedChat {
    replies: Mutex<Vec<String>>,
    pub(crate) requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedChat {
    pub(crate) fn new(replies: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.iter().rev().map(|s| s.to_string()).collect()),
            requests: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

#[async_trait]
impl ChatModel for ScriptedChat {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        self.requests.lock().unwrap().push(request);
        let content = self.replies.lock().unwrap().pop().ok_or_else(|| {
            ChatError::InvalidResponse("the scripted chat ran out of replies".into())
        })?;
        Ok(ChatResponse {
            content,
            model: "scripted".into(),
            ..ChatResponse::default()
        })
    }
}
