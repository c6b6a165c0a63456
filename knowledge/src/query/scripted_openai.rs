//! Test support: a scripted OpenAI-compatible chat-completions server on loopback, and a
//! minimal `ChatModel` that talks to it over real HTTP with reqwest. The server answers each
//! `POST /v1/chat/completions` with the next scripted reply and records every request body.
//! It stands in for a remote LLM in the pipeline's end-to-end tests, and says so: its model is
//! labelled `scripted-openai`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orkeon_crews::ports::{ChatError, ChatModel, ChatRequest, ChatResponse, Role, Usage};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The model label the scripted server reports.
pub(crate) const SCRIPTED_MODEL: &str = "scripted-openai";

pub(crate) struct ScriptedOpenAiServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Vec::new());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let headers = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let length: usize = headers
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(buf[header_end..].to_vec())
}

impl ScriptedOpenAiServer {
    /// Binds 127.0.0.1 on a free port and serves `replies` in order (then HTTP 500).
    pub(crate) async fn start(replies: &[&str]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(
            replies
                .iter()
                .rev()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        ));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let Ok(body) = read_request(&mut stream).await else {
                    continue;
                };
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                recorded.lock().unwrap().push(request);
                let reply = script.lock().unwrap().pop();
                let (status, payload) = match reply {
                    Some(content) => (
                        "200 OK",
                        json!({
                            "id": "scripted",
                            "object": "chat.completion",
                            "model": SCRIPTED_MODEL,
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}],
                            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
                        }),
                    ),
                    None => (
                        "500 Internal Server Error",
                        json!({"error": {"message": "the scripted server ran out of replies"}}),
                    ),
                };
                let body = payload.to_string();
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        Self {
            addr,
            requests,
            task,
        }
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Request bodies received so far.
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for ScriptedOpenAiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A minimal OpenAI-compatible chat client (enough for the scripted server).
pub(crate) struct OpenAiCompatibleChat {
    client: reqwest::Client,
    base_url: String,
}

impl OpenAiCompatibleChat {
    pub(crate) fn new(base_url: String) -> Self {
        Self {
            client: reqwest::Client::new(),
            base_url,
        }
    }
}

#[async_trait]
impl ChatModel for OpenAiCompatibleChat {
    fn name(&self) -> String {
        SCRIPTED_MODEL.into()
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
            tool_calls: Vec::new(),
            model: value["model"].as_str().unwrap_or_default().to_string(),
            usage: Usage {
                prompt_tokens: value["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as u32,
                completion_tokens: value["usage"]["completion_tokens"].as_u64().unwrap_or(0) as u32,
            },
        })
    }
}
