//! A scripted OpenAI-compatible chat-completions server on loopback, for tests and offline
//! demos. It stands in for a remote LLM and says so: every answer's `model` is `scripted`.
//!
//! A small HTTP/1.1 responder on tokio (one request per connection, `Connection: close`,
//! exact `Content-Length`). Replies come from rules: the first rule whose `when_contains` occurs
//! in the last user message, else in any message, else the queue of default replies (rules
//! without `when_contains`), else a 500. Every request body is recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The `model` of every scripted answer.
pub const SCRIPTED_MODEL: &str = "scripted";

const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

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
}

/// What a rule answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptReply {
    /// An assistant message with this text.
    Text(String),
    /// An assistant message calling one tool.
    ToolCall {
        name: String,
        arguments: serde_json::Value,
    },
    /// An HTTP error with this status (`429` carries `Retry-After: 0`).
    Status(u16),
}

#[derive(Debug, Default)]
struct ScriptState {
    rules: Vec<ScriptRule>,
    requests: Vec<Value>,
    answered: u64,
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct ScriptedLlmServer {
    addr: SocketAddr,
    state: Arc<Mutex<ScriptState>>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl ScriptedLlmServer {
    /// Binds 127.0.0.1 on a free port and serves `POST /v1/chat/completions` and
    /// `POST /chat/completions`.
    pub async fn start(rules: Vec<ScriptRule>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(ScriptState {
            rules: rules.into_iter().filter(|r| r.times != Some(0)).collect(),
            ..ScriptState::default()
        }));
        let loop_state = Arc::clone(&state);
        let accept_loop = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let state = Arc::clone(&loop_state);
                        tokio::spawn(async move {
                            if let Err(e) = serve_connection(stream, state).await {
                                tracing::debug!(error = %e, "scripted LLM connection ended with an error");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "scripted LLM server stopped accepting");
                        break;
                    }
                }
            }
        });
        tracing::info!(%addr, "scripted OpenAI-compatible LLM server listening (stands in for a remote LLM)");
        Ok(Self {
            addr,
            state,
            accept_loop,
        })
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received so far, in arrival order.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        lock(&self.state).requests.clone()
    }
}

impl Drop for ScriptedLlmServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

fn lock(state: &Mutex<ScriptState>) -> MutexGuard<'_, ScriptState> {
    // The state stays consistent even if a holder panicked: every update is a single push/pop.
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An HTTP response ready to write.
struct HttpResponse {
    status: u16,
    content_type: &'static str,
    extra_headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl HttpResponse {
    fn json(status: u16, body: &Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            extra_headers: Vec::new(),
            body: body.to_string().into_bytes(),
        }
    }

    fn error(status: u16, message: &str) -> Self {
        Self::json(
            status,
            &json!({"error": {"message": message, "type": "scripted", "code": status}}),
        )
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason_phrase(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.extra_headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Scripted Status",
    }
}

async fn serve_connection(
    stream: TcpStream,
    state: Arc<Mutex<ScriptState>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let response = match read_request(&mut reader).await? {
        Some((method, path, body)) => answer(&method, &path, &body, &state),
        None => return Ok(()),
    };
    let stream = reader.get_mut();
    stream.write_all(&response.to_bytes()).await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// Reads one request: method, path and body (`None` if the peer closed before a request line).
async fn read_request(
    reader: &mut BufReader<TcpStream>,
) -> std::io::Result<Option<(String, String, Vec<u8>)>> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).await? == 0 {
        return Ok(None);
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();

    let mut content_length = 0usize;
    let mut head_bytes = request_line.len();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await?;
        head_bytes += n;
        if n == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if head_bytes > MAX_HEAD_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "request head too large",
            ));
        }
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            content_length = value.trim().parse().map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "bad Content-Length")
            })?;
        }
    }
    if content_length > MAX_BODY_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "request body too large",
        ));
    }
    let mut body = vec![0u8; content_length];
    reader.read_exact(&mut body).await?;
    Ok(Some((method, path, body)))
}

fn answer(method: &str, path: &str, body: &[u8], state: &Mutex<ScriptState>) -> HttpResponse {
    let path = path.split('?').next().unwrap_or_default();
    if !(path == "/v1/chat/completions" || path == "/chat/completions") {
        return HttpResponse::error(
            404,
            &format!("the scripted LLM serves only POST /v1/chat/completions, not {path}"),
        );
    }
    if method != "POST" {
        return HttpResponse::error(405, "use POST");
    }
    let request: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return HttpResponse::error(400, &format!("the body is not JSON: {e}")),
    };
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (reply, id) = {
        let mut state = lock(state);
        state.requests.push(request.clone());
        state.answered += 1;
        let id = state.answered;
        (take_reply(&mut state.rules, &request), id)
    };
    let Some(reply) = reply else {
        return HttpResponse::error(
            500,
            "no scripted reply matches this request and the default queue is empty",
        );
    };
    let prompt_tokens = message_texts(&request)
        .iter()
        .map(|t| t.split_whitespace().count())
        .sum::<usize>();
    match reply {
        ScriptReply::Status(status) => {
            let mut response =
                HttpResponse::error(status, &format!("scripted failure with status {status}"));
            if status == 429 {
                response.extra_headers.push(("Retry-After", "0".to_owned()));
            }
            response
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
    json!({
        "id": format!("call_scripted_{id}"),
        "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()}
    })
}

fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn completion_response(reply: &ScriptReply, id: u64, prompt_tokens: usize) -> HttpResponse {
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
        ScriptReply::Status(status) => return HttpResponse::error(*status, "scripted status"),
    };
    HttpResponse::json(
        200,
        &json!({
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
fn stream_response(reply: &ScriptReply, id: u64) -> HttpResponse {
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
        ScriptReply::Status(status) => return HttpResponse::error(*status, "scripted status"),
    };
    events.push(chunk(json!({}), Some(finish)));
    let mut body = String::new();
    for event in events {
        body.push_str(&format!("data: {event}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    HttpResponse {
        status: 200,
        content_type: "text/event-stream",
        extra_headers: vec![("Cache-Control", "no-cache".to_owned())],
        body: body.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
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
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
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
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 500"), "{response}");
        assert!(response.contains("no scripted reply matches"), "{response}");
    }
}
