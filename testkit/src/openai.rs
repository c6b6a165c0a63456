//! A scripted OpenAI-compatible chat-completions server on loopback, standing in for a remote
//! LLM and saying so: every answer's `model` is [`SCRIPTED_MODEL`]. Plus
//! [`OpenAiCompatibleChat`], a minimal `ChatModel` that talks to it over real HTTP, for crates
//! that have no OpenAI client of their own.
//!
//! The server is a [`LoopbackServer`] whose handler plays rules: the first rule whose
//! `when_contains` occurs in the last user message, else in any message, else the queue of
//! default replies (rules without `when_contains`), else a 500. It serves
//! `POST /v1/chat/completions` and `POST /chat/completions`, plain or streamed (SSE), and
//! records every request body. Besides well-formed text and tool-call answers it plays what real
//! servers also send ([`ScriptReply::Message`]: `null` or empty content, content beside tool
//! calls, malformed tool arguments, `finish_reason: length`; [`ScriptReply::Error`]: 429 with or
//! without `Retry-After`, 5xx; [`ScriptReply::Delayed`]: a slow or silent server).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse, Role, Usage};
use serde_json::{Value, json};

use crate::http::{LoopbackServer, Recorded, Reply, lock};

/// The `model` of every scripted answer.
pub const SCRIPTED_MODEL: &str = "scripted";

/// How [`OpenAiCompatibleChat`] labels the scripted server's answers:
/// `<client name>:<answering model>`.
pub const SCRIPTED_OPENAI_LABEL: &str = "scripted-openai:scripted";

/// One scripted answer rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptRule {
    /// Substring selecting the requests this rule answers; `None`: a default reply.
    pub when_contains: Option<String>,
    pub reply: ScriptReply,
    /// How many requests the rule answers before it is used up; `None`: unlimited.
    pub times: Option<usize>,
}

impl ScriptRule {
    /// A default reply used once.
    pub fn once(reply: ScriptReply) -> Self {
        Self {
            when_contains: None,
            reply,
            times: Some(1),
        }
    }

    /// A reply for every request containing `needle`.
    pub fn when(needle: impl Into<String>, reply: ScriptReply) -> Self {
        Self {
            when_contains: Some(needle.into()),
            reply,
            times: None,
        }
    }

    /// Text replies answered in order, one per request (then the server answers 500).
    pub fn queue(texts: &[&str]) -> Vec<Self> {
        texts
            .iter()
            .map(|text| Self::once(ScriptReply::Text((*text).to_owned())))
            .collect()
    }
}

/// What a rule answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptReply {
    /// An assistant message with this text.
    Text(String),
    /// An assistant message calling one tool.
    ToolCall { name: String, arguments: Value },
    /// An HTTP error with this status (`429` carries `Retry-After: 0`).
    Status(u16),
    /// An assistant message shaped as a real server may send it: `content` (`None`: JSON
    /// `null`), tool calls as `(name, arguments)` with the arguments string sent verbatim
    /// (malformed JSON included), and any `finish_reason` (`stop`, `length`, `tool_calls`).
    Message {
        content: Option<String>,
        tool_calls: Vec<(String, String)>,
        finish_reason: String,
    },
    /// An HTTP error with this status and, when `retry_after` is set, that `Retry-After`
    /// header (no header at all otherwise).
    Error {
        status: u16,
        retry_after: Option<String>,
    },
    /// `reply`, held back for `delay` after the request was read (a slow or silent server).
    Delayed {
        delay: std::time::Duration,
        reply: Box<ScriptReply>,
    },
}

impl ScriptReply {
    /// `self`, held back for `delay` (see [`ScriptReply::Delayed`]).
    pub fn after(self, delay: std::time::Duration) -> Self {
        Self::Delayed {
            delay,
            reply: Box::new(self),
        }
    }
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct ScriptedLlmServer {
    server: LoopbackServer,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ScriptedLlmServer {
    /// Binds 127.0.0.1 on a free port and answers by `rules`.
    pub async fn start(rules: Vec<ScriptRule>) -> std::io::Result<Self> {
        let rules = Mutex::new(
            rules
                .into_iter()
                .filter(|r| r.times != Some(0))
                .collect::<Vec<_>>(),
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let server = LoopbackServer::start(move |request, sequence| {
            answer(request, sequence as u64 + 1, &rules, &recorded)
        })
        .await?;
        tracing::info!(addr = %server.addr(), "scripted OpenAI-compatible LLM server listening (stands in for a remote LLM)");
        Ok(Self { server, requests })
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.base_url())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Every chat-completions request body received so far, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.requests).clone()
    }
}

fn scripted_error(status: u16, message: &str) -> Reply {
    Reply::error(status, "scripted", message)
}

fn answer(
    request: &Recorded,
    id: u64,
    rules: &Mutex<Vec<ScriptRule>>,
    requests: &Mutex<Vec<Value>>,
) -> Reply {
    let path = request.path_only();
    if !(path == "/v1/chat/completions" || path == "/chat/completions") {
        return scripted_error(
            404,
            &format!("the scripted LLM serves only POST /v1/chat/completions, not {path}"),
        );
    }
    if request.method != "POST" {
        return scripted_error(405, "use POST");
    }
    let body: Value = match serde_json::from_slice(&request.body) {
        Ok(v) => v,
        Err(e) => return scripted_error(400, &format!("the body is not JSON: {e}")),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    lock(requests).push(body.clone());
    let Some(reply) = take_reply(&mut lock(rules), &body) else {
        return scripted_error(
            500,
            "no scripted reply matches this request and the default queue is empty",
        );
    };
    let prompt_tokens = message_texts(&body)
        .iter()
        .map(|t| t.split_whitespace().count())
        .sum::<usize>();
    reply_for(reply, stream, id, prompt_tokens)
}

fn reply_for(reply: ScriptReply, stream: bool, id: u64, prompt_tokens: usize) -> Reply {
    match reply {
        ScriptReply::Status(status) => {
            let reply = scripted_error(status, &format!("scripted failure with status {status}"));
            if status == 429 {
                reply.header("Retry-After", "0")
            } else {
                reply
            }
        }
        ScriptReply::Error {
            status,
            retry_after,
        } => {
            let reply = scripted_error(status, &format!("scripted failure with status {status}"));
            match retry_after {
                Some(wait) => reply.header("Retry-After", wait),
                None => reply,
            }
        }
        ScriptReply::Delayed { delay, reply } => {
            reply_for(*reply, stream, id, prompt_tokens).after(delay)
        }
        reply if stream => stream_response(&reply, id),
        reply => completion_response(&reply, id, prompt_tokens),
    }
}

/// Picks and consumes the reply for a request.
fn take_reply(rules: &mut Vec<ScriptRule>, request: &Value) -> Option<ScriptReply> {
    let texts = message_texts(request);
    let last_user = last_user_text(request);
    let matches_in = |rule: &ScriptRule, haystacks: &[&str]| {
        rule.when_contains
            .as_deref()
            .is_some_and(|needle| haystacks.iter().any(|h| h.contains(needle)))
    };
    let all: Vec<&str> = texts.iter().map(String::as_str).collect();
    let index = last_user
        .as_deref()
        .and_then(|last| rules.iter().position(|r| matches_in(r, &[last])))
        .or_else(|| rules.iter().position(|r| matches_in(r, &all)))
        .or_else(|| rules.iter().position(|r| r.when_contains.is_none()))?;
    let reply = rules[index].reply.clone();
    if let Some(times) = rules[index].times.as_mut() {
        *times -= 1;
        if *times == 0 {
            rules.remove(index);
        }
    }
    Some(reply)
}

fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn message_texts(request: &Value) -> Vec<String> {
    request
        .get("messages")
        .and_then(Value::as_array)
        .map(|messages| messages.iter().map(content_text).collect())
        .unwrap_or_default()
}

fn last_user_text(request: &Value) -> Option<String> {
    request
        .get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(content_text)
}

fn tool_call_json(id: u64, name: &str, arguments: &Value) -> Value {
    raw_tool_call_json(&format!("call_scripted_{id}"), name, &arguments.to_string())
}

fn raw_tool_call_json(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments}
    })
}

/// The tool calls of a [`ScriptReply::Message`], with ids `call_scripted_<id>_<index>`.
fn message_tool_calls(id: u64, tool_calls: &[(String, String)]) -> Vec<Value> {
    tool_calls
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            raw_tool_call_json(&format!("call_scripted_{id}_{index}"), name, arguments)
        })
        .collect()
}

fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn completion_response(reply: &ScriptReply, id: u64, prompt_tokens: usize) -> Reply {
    let (message, finish_reason, completion_tokens) = match reply {
        ScriptReply::Text(text) => (
            json!({"role": "assistant", "content": text}),
            "stop",
            text.split_whitespace().count(),
        ),
        ScriptReply::ToolCall { name, arguments } => (
            json!({"role": "assistant", "content": null,
                   "tool_calls": [tool_call_json(id, name, arguments)]}),
            "tool_calls",
            1,
        ),
        ScriptReply::Message {
            content,
            tool_calls,
            finish_reason,
        } => {
            let mut message = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                message["tool_calls"] = Value::Array(message_tool_calls(id, tool_calls));
            }
            let tokens = content
                .as_deref()
                .map_or(0, |c| c.split_whitespace().count())
                + tool_calls.len();
            (message, finish_reason.as_str(), tokens)
        }
        ScriptReply::Status(status) | ScriptReply::Error { status, .. } => {
            return scripted_error(*status, "scripted status");
        }
        ScriptReply::Delayed { reply, .. } => {
            return completion_response(reply, id, prompt_tokens);
        }
    };
    Reply::json(
        200,
        json!({
            "id": format!("chatcmpl-scripted-{id}"),
            "object": "chat.completion",
            "created": unix_time(),
            "model": SCRIPTED_MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens
            }
        }),
    )
}

/// An SSE body: a role chunk, the text in word-sized deltas (or one tool-call delta), a finish
/// chunk and `[DONE]`.
fn stream_response(reply: &ScriptReply, id: u64) -> Reply {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": format!("chatcmpl-scripted-{id}"),
            "object": "chat.completion.chunk",
            "created": unix_time(),
            "model": SCRIPTED_MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let finish = match reply {
        ScriptReply::Text(text) => {
            for piece in text.split_inclusive(' ') {
                events.push(chunk(json!({"content": piece}), None));
            }
            "stop"
        }
        ScriptReply::ToolCall { name, arguments } => {
            let mut call = tool_call_json(id, name, arguments);
            call["index"] = json!(0);
            events.push(chunk(json!({"tool_calls": [call]}), None));
            "tool_calls"
        }
        ScriptReply::Message {
            content,
            tool_calls,
            finish_reason,
        } => {
            for piece in content.as_deref().unwrap_or_default().split_inclusive(' ') {
                events.push(chunk(json!({"content": piece}), None));
            }
            for (index, mut call) in message_tool_calls(id, tool_calls).into_iter().enumerate() {
                call["index"] = json!(index);
                events.push(chunk(json!({"tool_calls": [call]}), None));
            }
            finish_reason.as_str()
        }
        ScriptReply::Status(status) | ScriptReply::Error { status, .. } => {
            return scripted_error(*status, "scripted status");
        }
        ScriptReply::Delayed { reply, .. } => return stream_response(reply, id),
    };
    events.push(chunk(json!({}), Some(finish)));
    let mut body = String::new();
    for event in events {
        body.push_str(&format!("data: {event}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    Reply::typed(200, "text/event-stream", body).header("Cache-Control", "no-cache")
}

/// A minimal OpenAI-compatible chat client (plain completions, text answers): enough to drive
/// [`ScriptedLlmServer`] from a crate that has no OpenAI client. Its answers are labelled
/// `scripted-openai:<answering model>` ([`SCRIPTED_OPENAI_LABEL`] for the scripted server).
#[derive(Debug, Clone)]
pub struct OpenAiCompatibleChat {
    client: reqwest::Client,
    base_url: String,
}

impl OpenAiCompatibleChat {
    /// The client's name (its `ChatModel::name`).
    pub const NAME: &str = "scripted-openai";

    /// A client of `base_url` (e.g. [`ScriptedLlmServer::base_url`]).
    pub fn new(base_url: String) -> Self {
        Self {
            client: reqwest::Client::new(),
            base_url,
        }
    }
}

#[async_trait]
impl ChatModel for OpenAiCompatibleChat {
    fn name(&self) -> String {
        Self::NAME.into()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                    Role::Tool => "tool",
                };
                json!({"role": role, "content": m.content})
            })
            .collect();
        let mut body = json!({"model": "test-model", "messages": messages});
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = request.max_tokens {
            body["max_tokens"] = json!(m);
        }
        if request.json_mode {
            body["response_format"] = json!({"type": "json_object"});
        }
        let response = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .json(&body)
            .send()
            .await
            .map_err(|e| ChatError::Transport(e.to_string()))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| ChatError::Transport(e.to_string()))?;
        if status != 200 {
            return Err(ChatError::Status { status, body: text });
        }
        let value: Value =
            serde_json::from_str(&text).map_err(|e| ChatError::InvalidResponse(e.to_string()))?;
        let content = value["choices"][0]["message"]["content"]
            .as_str()
            .ok_or_else(|| ChatError::InvalidResponse("no choices[0].message.content".into()))?
            .to_string();
        Ok(ChatResponse {
            content,
            model: format!(
                "{}:{}",
                Self::NAME,
                value["model"].as_str().unwrap_or_default()
            ),
            usage: Usage {
                prompt_tokens: value["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as u32,
                completion_tokens: value["usage"]["completion_tokens"].as_u64().unwrap_or(0) as u32,
            },
            ..ChatResponse::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use orkeon_crews::ports::ChatMessage;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    fn request(messages: Value) -> Value {
        json!({"model": "m", "messages": messages})
    }

    #[test]
    fn rules_prefer_the_last_user_message_then_any_message_then_defaults() {
        let mut rules = vec![
            ScriptRule::when("system-only", ScriptReply::Text("any".into())),
            ScriptRule::when("refund", ScriptReply::Text("last-user".into())),
            ScriptRule::once(ScriptReply::Text("default-1".into())),
            ScriptRule::once(ScriptReply::Text("default-2".into())),
        ];
        let req = request(json!([
            {"role": "system", "content": "system-only"},
            {"role": "user", "content": "about a refund"}
        ]));
        assert_eq!(
            take_reply(&mut rules, &req),
            Some(ScriptReply::Text("last-user".into()))
        );
        let req = request(json!([
            {"role": "system", "content": "system-only"},
            {"role": "user", "content": "hello"}
        ]));
        assert_eq!(
            take_reply(&mut rules, &req),
            Some(ScriptReply::Text("any".into()))
        );
        let req = request(json!([{"role": "user", "content": "hello"}]));
        assert_eq!(
            take_reply(&mut rules, &req),
            Some(ScriptReply::Text("default-1".into()))
        );
        assert_eq!(
            take_reply(&mut rules, &req),
            Some(ScriptReply::Text("default-2".into()))
        );
        assert_eq!(take_reply(&mut rules, &req), None);
    }

    #[tokio::test]
    async fn answers_over_http_with_content_length_and_records_requests() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::once(ScriptReply::Text(
            "hello there".into(),
        ))])
        .await
        .unwrap();
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let raw = format!(
            "POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, payload) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}", payload.len())),
            "{head}"
        );
        let value: Value = serde_json::from_str(payload).unwrap();
        assert_eq!(value["model"], "scripted");
        assert_eq!(value["choices"][0]["message"]["content"], "hello there");
        assert_eq!(
            server.requests(),
            vec![serde_json::from_str::<Value>(body).unwrap()]
        );

        // The queue is empty now: a 500 says so.
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 500"), "{response}");
        assert!(response.contains("no scripted reply matches"), "{response}");
    }

    async fn post(server: &ScriptedLlmServer, stream: bool) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", server.base_url()))
            .json(&json!({"model": "m", "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn messages_carry_null_content_raw_tool_arguments_and_the_finish_reason() {
        let message = ScriptReply::Message {
            content: None,
            tool_calls: vec![("rag_search".into(), "{\"query\": \"refu".into())],
            finish_reason: "length".into(),
        };
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(message.clone()),
            ScriptRule::once(message),
        ])
        .await
        .unwrap();
        let value: Value = post(&server, false).await.json().await.unwrap();
        let choice = &value["choices"][0];
        assert_eq!(choice["finish_reason"], "length");
        assert!(choice["message"]["content"].is_null());
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "rag_search");
        assert_eq!(call["function"]["arguments"], "{\"query\": \"refu");

        let text = post(&server, true).await.text().await.unwrap();
        assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
        assert!(text.contains("refu"), "{text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }

    #[tokio::test]
    async fn errors_send_retry_after_only_when_scripted() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::Error {
                status: 429,
                retry_after: None,
            }),
            ScriptRule::once(ScriptReply::Error {
                status: 503,
                retry_after: Some("2".into()),
            }),
        ])
        .await
        .unwrap();
        let first = post(&server, false).await;
        assert_eq!(first.status().as_u16(), 429);
        assert!(first.headers().get("retry-after").is_none());
        let second = post(&server, false).await;
        assert_eq!(second.status().as_u16(), 503);
        assert_eq!(second.headers()["retry-after"], "2");
    }

    #[tokio::test]
    async fn the_client_sends_the_request_and_labels_the_answer() {
        let server = ScriptedLlmServer::start(ScriptRule::queue(&["first", "second"]))
            .await
            .unwrap();
        let chat = OpenAiCompatibleChat::new(server.base_url());
        assert_eq!(chat.name(), "scripted-openai");
        let mut request = ChatRequest::new(vec![
            ChatMessage::system("Be brief."),
            ChatMessage::user("one two three"),
        ]);
        request.temperature = Some(0.5);
        request.json_mode = true;
        let response = chat.chat(request.clone()).await.unwrap();
        assert_eq!(response.content, "first");
        assert_eq!(response.model, SCRIPTED_OPENAI_LABEL);
        assert_eq!(
            SCRIPTED_OPENAI_LABEL,
            format!("{}:{SCRIPTED_MODEL}", OpenAiCompatibleChat::NAME)
        );
        assert_eq!(response.usage.prompt_tokens, 5);
        assert_eq!(response.usage.completion_tokens, 1);
        assert_eq!(chat.chat(request.clone()).await.unwrap().content, "second");
        // The queue is used up: the 500 is reported with its status.
        match chat.chat(request).await {
            Err(ChatError::Status { status: 500, body }) => {
                assert!(body.contains("default queue is empty"), "{body}")
            }
            other => panic!("expected a 500, got {other:?}"),
        }

        let sent = &server.requests()[0];
        assert_eq!(
            sent["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(sent["messages"][1]["role"], "user");
        assert_eq!(sent["temperature"], 0.5);
        assert_eq!(sent["response_format"], json!({"type": "json_object"}));
        assert!(sent.get("max_tokens").is_none());
    }
}
