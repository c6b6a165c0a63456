//! The OpenAI-compatible chat-completions client (`POST {base_url}/chat/completions`) over
//! reqwest: bearer key from a named environment variable, JSON mode, tool calls, per-call
//! timeouts, retries under the shared [`RetryPolicy`] (exponential backoff with full jitter,
//! `Retry-After` honoured), and SSE streaming.
//!
//! # What a server's answer becomes
//!
//! Real OpenAI-compatible servers (llama.cpp's `llama-server`, vLLM, hosted APIs) answer in more
//! shapes than the happy path; each has one defined outcome here (tested against
//! `orkeon_testkit::ScriptedLlmServer`, and against a real `llama-server` by the opt-in suite
//! `agents/tests/real_llm.rs`):
//!
//! | the server answers | [`ChatModel::chat`] returns |
//! |---|---|
//! | text, `finish_reason: stop` | the text |
//! | `content` as an array of text parts | the parts joined by newlines |
//! | empty or `null` content and no tool calls | `InvalidResponse` naming the endpoint and the finish reason (an empty answer is never passed on as one) |
//! | tool calls (with or without content beside them) | both, as sent: the runner executes the calls and keeps the content in the conversation |
//! | tool-call arguments that are not JSON | the arguments verbatim ([`ToolCall::arguments`]); the tool then answers the model with an error asking for a JSON object, and the model gets another round |
//! | `finish_reason: length` with text | the text **trimmed** to its last complete sentence, followed by [`TRUNCATION_NOTE`]; a warning is logged. A cut-off half sentence (perhaps with a half marker `[1`) never reaches the output, and the reader sees that the answer was cut |
//! | `finish_reason: length` in JSON mode, or with nothing usable | `InvalidResponse` naming the endpoint and `llm.openai.max_tokens` (a cut JSON object cannot be read) |
//! | `429` (with or without `Retry-After`), `5xx`, transport failures, timeouts | retried under [`RetryPolicy`] (`llm.openai.max_retries`; a `Retry-After` up to 30 s is honoured, else full-jitter backoff); when the retries are spent, the last error naming `POST <endpoint>` and the attempts made. A timeout becomes `Transport` with the endpoint and `llm.openai.timeout_ms` |
//! | other `4xx`, a body that is not JSON | the error at once (another attempt would repeat it), naming the endpoint |
//!
//! Streaming ([`OpenAiChatModel::chat_stream`]) yields text deltas as they come; a stream that
//! ends with `finish_reason: length` yields [`TRUNCATION_NOTE`] as its last delta (what was
//! already yielded cannot be trimmed).

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use orkeon_crews::ports::{
    ChatError, ChatMessage, ChatModel, ChatRequest, ChatResponse, Role, ToolCall, Usage,
};
use orkeon_crews::retry::{Failure, RetryPolicy, retry_after};
use serde_json::{Value, json};
use unicode_segmentation::UnicodeSegmentation;

use super::OpenAiChatSettings;

/// Error bodies are quoted up to this many characters.
const MAX_ERROR_BODY: usize = 2_000;

/// Appended to an answer the server cut off at its token limit (`finish_reason: length`),
/// after the answer was trimmed to its last complete sentence.
pub const TRUNCATION_NOTE: &str = " (answer cut off: the model reached its token limit)";

/// An OpenAI-compatible chat model.
pub struct OpenAiChatModel {
    client: reqwest::Client,
    endpoint: String,
    model: String,
    api_key: Option<String>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    timeout: Duration,
    max_retries: u32,
    json_mode: bool,
    label: Option<String>,
}

impl std::fmt::Debug for OpenAiChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChatModel")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

/// A failed attempt and whether another one may succeed.
type AttemptFailure = Failure<ChatError>;

/// A transport failure (connection, body): worth another attempt.
fn transport_failure(error: reqwest::Error) -> AttemptFailure {
    Failure::retryable(ChatError::Transport(error_chain(&error)))
}

impl OpenAiChatModel {
    /// Reads the API key from the environment variable the settings name (never logged).
    pub fn new(settings: &OpenAiChatSettings) -> Result<Self, ChatError> {
        if settings.model.trim().is_empty() {
            return Err(ChatError::NotConfigured(
                "`llm.openai.model` is empty; set the model name the endpoint serves".to_owned(),
            ));
        }
        let base = settings.base_url.trim().trim_end_matches('/');
        let url = reqwest::Url::parse(base).map_err(|e| {
            ChatError::NotConfigured(format!(
                "`llm.openai.base_url` {base:?} is not a URL ({e}); use e.g. https://api.openai.com/v1"
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ChatError::NotConfigured(format!(
                "`llm.openai.base_url` {base:?} must be an http or https URL"
            )));
        }
        let env_name = settings.api_key_env.trim();
        let api_key = if env_name.is_empty() {
            None
        } else {
            match std::env::var(env_name) {
                Ok(key) if !key.trim().is_empty() => Some(key.trim().to_owned()),
                _ => {
                    return Err(ChatError::NotConfigured(format!(
                        "the environment variable {env_name} (named by `llm.openai.api_key_env`) is \
                         not set or empty; export it with the provider's API key, or set \
                         `llm.openai.api_key_env: \"\"` for an endpoint that needs no key"
                    )));
                }
            }
        };
        let timeout = Duration::from_millis(settings.timeout_ms.max(1));
        let client = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| ChatError::Transport(format!("HTTP client setup failed: {e}")))?;
        Ok(Self {
            client,
            endpoint: format!("{base}/chat/completions"),
            model: settings.model.trim().to_owned(),
            api_key,
            temperature: settings.temperature,
            max_tokens: settings.max_tokens,
            timeout,
            max_retries: settings.max_retries,
            json_mode: settings.json_mode,
            label: settings
                .label
                .as_deref()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        })
    }

    /// The label of answers from `model` (the label setting wins).
    fn answer_label(&self, model: &str) -> String {
        match &self.label {
            Some(label) => label.clone(),
            None => format!("openai:{model}"),
        }
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// The JSON body of a chat-completions request.
    fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": request.messages.iter().map(message_json).collect::<Vec<_>>(),
            "stream": stream,
        });
        if let Some(t) = request.temperature.or(self.temperature) {
            body["temperature"] = json!(t);
        }
        if let Some(m) = request.max_tokens.or(self.max_tokens) {
            body["max_tokens"] = json!(m);
        }
        if request.json_mode {
            if self.json_mode {
                body["response_format"] = json!({"type": "json_object"});
            } else {
                tracing::debug!(
                    model = %self.model,
                    "JSON mode requested but disabled by llm.openai.json_mode; sending a plain request"
                );
            }
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(
                request
                    .tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {
                            "name": t.name, "description": t.description, "parameters": t.parameters
                        }})
                    })
                    .collect(),
            );
        }
        body
    }

    /// Runs `attempt` (each run bounded by the timeout), retrying retryable failures under the
    /// shared [`RetryPolicy`] with `max_retries` retries.
    async fn with_retries<T, F, Fut>(&self, mut run_attempt: F) -> Result<T, ChatError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, AttemptFailure>>,
    {
        let timeout = self.timeout;
        let timeout_ms = self.timeout_ms();
        let result = RetryPolicy::new(self.max_retries)
            .run(
                || {
                    let attempt = run_attempt();
                    async move {
                        match tokio::time::timeout(timeout, attempt).await {
                            Ok(outcome) => outcome,
                            Err(_) => Err(Failure::retryable(ChatError::Timeout(timeout_ms))),
                        }
                    }
                },
                |notice| {
                    tracing::warn!(
                        model = %self.model,
                        attempt = notice.attempt,
                        delay_ms = u64::try_from(notice.delay.as_millis()).unwrap_or(u64::MAX),
                        error = %notice.error,
                        "LLM call failed; retrying"
                    );
                },
            )
            .await;
        result.map_err(|gave_up| {
            if gave_up.attempts > 1 {
                tracing::warn!(
                    model = %self.model,
                    endpoint = %self.endpoint,
                    attempts = gave_up.attempts,
                    error = %gave_up.error,
                    "LLM call failed after retries"
                );
            }
            self.naming_endpoint(gave_up.error, gave_up.attempts)
        })
    }

    /// The error the caller gets once the policy stopped trying: it names `POST <endpoint>` and
    /// how many attempts were made; a timeout says which setting bounds it.
    fn naming_endpoint(&self, error: ChatError, attempts: u32) -> ChatError {
        let endpoint = &self.endpoint;
        let tried = if attempts == 1 {
            "1 attempt".to_owned()
        } else {
            format!("{attempts} attempts")
        };
        match error {
            ChatError::Status { status, body } => ChatError::Status {
                status,
                body: format!("{body} (POST {endpoint}, {tried})"),
            },
            ChatError::Timeout(ms) => ChatError::Transport(format!(
                "POST {endpoint} gave no answer within {ms} ms ({tried}); check that the server \
                 is running and not overloaded, or raise `llm.openai.timeout_ms`"
            )),
            ChatError::Transport(text) => {
                ChatError::Transport(format!("POST {endpoint} failed ({tried}): {text}"))
            }
            other => other,
        }
    }

    async fn send_once(&self, body: &Value) -> Result<reqwest::Response, AttemptFailure> {
        let mut builder = self.client.post(&self.endpoint).json(body);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(transport_failure)?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let headers = response.headers();
        let wait = retry_after(|name| headers.get(name).and_then(|v| v.to_str().ok()));
        let text = response.text().await.unwrap_or_default();
        Err(Failure::status(
            ChatError::Status {
                status: status.as_u16(),
                body: truncate(&text, MAX_ERROR_BODY),
            },
            status.as_u16(),
            wait,
        ))
    }

    /// Applies the finish reason and the empty-answer rule (see the module documentation) to a
    /// parsed completion. The returned response's `model` is the answering model, unlabelled.
    fn settle(&self, completion: Completion, json_mode: bool) -> Result<ChatResponse, ChatError> {
        let Completion {
            mut response,
            finish_reason,
        } = completion;
        let endpoint = &self.endpoint;
        let reason = finish_reason.as_deref().unwrap_or("none given");
        let has_text = !response.content.trim().is_empty();
        let has_calls = !response.tool_calls.is_empty();
        if finish_reason.as_deref() == Some("length") {
            let limit = match self.max_tokens {
                Some(n) => format!("`llm.openai.max_tokens` ({n}) or the server's context size"),
                None => "the server's context size or its default token limit".to_owned(),
            };
            if json_mode && !has_calls {
                return Err(ChatError::InvalidResponse(format!(
                    "POST {endpoint} cut the JSON answer off at {limit} (finish_reason: length, \
                     {} completion tokens); a cut JSON object cannot be read — raise the limit",
                    response.usage.completion_tokens
                )));
            }
            if !has_text && !has_calls {
                return Err(ChatError::InvalidResponse(format!(
                    "POST {endpoint} reached {limit} before answering anything (finish_reason: \
                     length); raise the limit or shorten the prompt"
                )));
            }
            if has_text {
                tracing::warn!(
                    endpoint = %endpoint,
                    completion_tokens = response.usage.completion_tokens,
                    "the answer was cut off at the model's token limit; trimmed to its last \
                     complete sentence and marked"
                );
                response.content = trim_truncated(&response.content);
            }
            return Ok(response);
        }
        if !has_text && !has_calls {
            return Err(ChatError::InvalidResponse(format!(
                "POST {endpoint} answered with an empty message and no tool calls \
                 (finish_reason: {reason}); the model produced nothing — check the model and its \
                 chat template (llama-server needs --jinja for tool calls)"
            )));
        }
        Ok(response)
    }

    /// Streams the answer's text deltas (server-sent events). The connection is retried like
    /// [`ChatModel::chat`]; once streaming, each chunk must arrive within the timeout.
    pub async fn chat_stream(
        &self,
        request: ChatRequest,
    ) -> Result<impl Stream<Item = Result<String, ChatError>> + Send + use<>, ChatError> {
        let body = self.request_body(&request, true);
        let response = self.with_retries(|| self.send_once(&body)).await?;
        let state = SseState {
            bytes: Box::pin(
                response
                    .bytes_stream()
                    .map(|chunk| chunk.map(|b| b.to_vec())),
            ),
            buffer: Vec::new(),
            pending: VecDeque::new(),
            done: false,
            idle_timeout: self.timeout,
            endpoint: self.endpoint.clone(),
        };
        Ok(futures::stream::unfold(state, next_delta))
    }
}

#[async_trait]
impl ChatModel for OpenAiChatModel {
    fn name(&self) -> String {
        self.answer_label(&self.model)
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ChatError> {
        let body = self.request_body(&request, false);
        let started = std::time::Instant::now();
        // One attempt is the request and its body, bounded together by the timeout.
        let value = self
            .with_retries(|| async {
                let response = self.send_once(&body).await?;
                response.json::<Value>().await.map_err(|e| {
                    if e.is_decode() {
                        Failure::fatal(ChatError::InvalidResponse(format!(
                            "the body from {} is not JSON: {e}",
                            self.endpoint
                        )))
                    } else {
                        transport_failure(e)
                    }
                })
            })
            .await?;
        let completion = parse_completion(&value, &self.model, &self.endpoint)?;
        let mut response = self.settle(completion, request.json_mode)?;
        response.model = self.answer_label(&response.model);
        tracing::debug!(
            model = %response.model,
            prompt_tokens = response.usage.prompt_tokens,
            completion_tokens = response.usage.completion_tokens,
            tool_calls = response.tool_calls.len(),
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "LLM call answered"
        );
        Ok(response)
    }
}

fn message_json(message: &ChatMessage) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut value = json!({"role": role, "content": message.content});
    if !message.tool_calls.is_empty() {
        if message.content.is_empty() {
            value["content"] = Value::Null;
        }
        value["tool_calls"] = Value::Array(
            message
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect(),
        );
    }
    if let Some(id) = &message.tool_call_id {
        value["tool_call_id"] = json!(id);
    }
    value
}

/// A parsed chat-completion body: the response (its `model` the answering model, unlabelled)
/// and the first choice's finish reason.
#[derive(Debug)]
struct Completion {
    response: ChatResponse,
    finish_reason: Option<String>,
}

/// Reads a chat-completion body: the first choice's content (a string, or an array of text
/// parts) and tool calls, its finish reason, usage, and the model that answered (falling back to
/// the requested one).
fn parse_completion(
    value: &Value,
    requested_model: &str,
    endpoint: &str,
) -> Result<Completion, ChatError> {
    let choice = value.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message")).ok_or_else(|| {
        ChatError::InvalidResponse(format!(
            "no `choices[0].message` in the answer of POST {endpoint}: {}",
            truncate(&value.to_string(), 500)
        ))
    })?;
    let finish_reason = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let content = match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (index, call) in calls.iter().enumerate() {
            let function = call.get("function").ok_or_else(|| {
                ChatError::InvalidResponse(format!(
                    "tool call {index} in the answer of POST {endpoint} has no `function`"
                ))
            })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ChatError::InvalidResponse(format!(
                        "tool call {index} in the answer of POST {endpoint} has no name"
                    ))
                })?;
            let arguments = match function.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => "{}".to_owned(),
                Some(other) => other.to_string(),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("call_{index}"));
            tool_calls.push(ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            });
        }
    }
    let usage = value.get("usage").map_or_else(Usage::default, |u| Usage {
        prompt_tokens: token_count(u, "prompt_tokens"),
        completion_tokens: token_count(u, "completion_tokens"),
    });
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(requested_model)
        .to_owned();
    Ok(Completion {
        response: ChatResponse {
            content,
            tool_calls,
            model,
            usage,
        },
        finish_reason,
    })
}

/// An answer cut off at the token limit: its complete sentences (all of it when it has none)
/// followed by [`TRUNCATION_NOTE`].
fn trim_truncated(text: &str) -> String {
    let sentences: Vec<&str> = text.trim_end().split_sentence_bounds().collect();
    let complete = |sentence: &str| {
        sentence
            .trim_end()
            .trim_end_matches(['"', '\'', '\u{201d}', '\u{2019}', ')'])
            .ends_with(['.', '!', '?', '\u{2026}'])
    };
    let kept = match sentences.last() {
        Some(last) if sentences.len() > 1 && !complete(last) => {
            sentences[..sentences.len() - 1].concat()
        }
        _ => sentences.concat(),
    };
    format!("{}{TRUNCATION_NOTE}", kept.trim_end())
}

fn token_count(usage: &Value, key: &str) -> u32 {
    usage
        .get(key)
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max_chars).collect();
    cut.push('…');
    cut
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The response body as owned chunks (copied out of reqwest's buffers; deltas are small).
type ByteStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>, reqwest::Error>> + Send>>;

struct SseState {
    bytes: ByteStream,
    buffer: Vec<u8>,
    pending: VecDeque<Result<String, ChatError>>,
    done: bool,
    idle_timeout: Duration,
    endpoint: String,
}

/// Produces the next text delta of an SSE chat-completions stream.
async fn next_delta(mut state: SseState) -> Option<(Result<String, ChatError>, SseState)> {
    loop {
        if let Some(item) = state.pending.pop_front() {
            return Some((item, state));
        }
        if state.done {
            return None;
        }
        match tokio::time::timeout(state.idle_timeout, state.bytes.next()).await {
            Err(_) => {
                state.done = true;
                let ms = u64::try_from(state.idle_timeout.as_millis()).unwrap_or(u64::MAX);
                let error = ChatError::Transport(format!(
                    "the stream from POST {} sent nothing for {ms} ms; check the server or raise \
                     `llm.openai.timeout_ms`",
                    state.endpoint
                ));
                return Some((Err(error), state));
            }
            Ok(None) => {
                state.buffer.push(b'\n');
                drain_lines(&mut state);
                state.done = true;
            }
            Ok(Some(Err(e))) => {
                state.done = true;
                let error = ChatError::Transport(format!(
                    "the stream from POST {} broke: {}",
                    state.endpoint,
                    error_chain(&e)
                ));
                return Some((Err(error), state));
            }
            Ok(Some(Ok(chunk))) => {
                state.buffer.extend_from_slice(&chunk);
                drain_lines(&mut state);
            }
        }
    }
}

/// Moves every complete `data:` line of the buffer into `pending`.
fn drain_lines(state: &mut SseState) {
    while let Some(newline) = state.buffer.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = state.buffer.drain(..=newline).collect();
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches(['\n', '\r']);
        let Some(payload) = line.strip_prefix("data:") else {
            continue; // comments, `event:`/`id:` fields and blank separators
        };
        let payload = payload.trim();
        if payload == "[DONE]" {
            state.done = true;
            state.buffer.clear();
            return;
        }
        match serde_json::from_str::<Value>(payload) {
            Ok(event) => {
                if let Some(error) = event.get("error") {
                    state
                        .pending
                        .push_back(Err(ChatError::InvalidResponse(format!(
                            "the stream reported an error: {error}"
                        ))));
                    state.done = true;
                    return;
                }
                let choice = event.get("choices").and_then(|c| c.get(0));
                let delta = choice
                    .and_then(|c| c.get("delta"))
                    .and_then(|d| d.get("content"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !delta.is_empty() {
                    state.pending.push_back(Ok(delta.to_owned()));
                }
                if choice
                    .and_then(|c| c.get("finish_reason"))
                    .and_then(Value::as_str)
                    == Some("length")
                {
                    tracing::warn!(
                        endpoint = %state.endpoint,
                        "the streamed answer was cut off at the model's token limit"
                    );
                    state.pending.push_back(Ok(TRUNCATION_NOTE.to_owned()));
                }
            }
            Err(e) => {
                state
                    .pending
                    .push_back(Err(ChatError::InvalidResponse(format!(
                        "a stream event is not JSON ({e}): {}",
                        truncate(payload, 200)
                    ))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! These tests talk to `orkeon_testkit::ScriptedLlmServer`, a scripted OpenAI-compatible
    //! server on loopback standing in for a remote LLM.

    use orkeon_testkit::{LoopbackServer, Reply, ScriptReply, ScriptRule, ScriptedLlmServer};

    use super::*;

    fn settings(server: &ScriptedLlmServer) -> OpenAiChatSettings {
        OpenAiChatSettings {
            base_url: server.base_url(),
            model: "test-model".into(),
            api_key_env: String::new(),
            temperature: Some(0.2),
            max_tokens: Some(128),
            timeout_ms: 5_000,
            max_retries: 2,
            json_mode: true,
            label: None,
        }
    }

    fn question() -> ChatRequest {
        ChatRequest::new(vec![
            ChatMessage::system("Answer briefly."),
            ChatMessage::user("How long do refunds take?"),
        ])
    }

    #[tokio::test]
    async fn plain_chat_sends_the_request_and_reads_answer_usage_and_model() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::when(
            "refunds",
            ScriptReply::Text("Refunds take 14 days [1].".into()),
        )])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        assert_eq!(model.name(), "openai:test-model");
        let mut request = question();
        request.temperature = Some(0.7);
        let response = model.chat(request).await.unwrap();
        assert_eq!(response.content, "Refunds take 14 days [1].");
        assert_eq!(
            response.model, "openai:scripted",
            "labelled by the answering model"
        );
        assert!(response.usage.prompt_tokens > 0 && response.usage.completion_tokens == 5);
        assert!(response.tool_calls.is_empty());

        let body = &server.requests()[0];
        assert_eq!(body["model"], "test-model");
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 128);
        assert!(
            (body["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6,
            "request wins"
        );
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Answer briefly."})
        );
        assert_eq!(body["messages"][1]["role"], "user");
        assert!(body.get("response_format").is_none());
        assert!(body.get("tools").is_none());
    }

    #[tokio::test]
    async fn json_mode_sets_response_format_only_when_enabled() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::when(
            "refunds",
            ScriptReply::Text("{\"answer\": \"14 days\"}".into()),
        )])
        .await
        .unwrap();
        let mut request = question();
        request.json_mode = true;
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let response = model.chat(request.clone()).await.unwrap();
        assert_eq!(response.content, "{\"answer\": \"14 days\"}");
        assert_eq!(
            server.requests()[0]["response_format"],
            json!({"type": "json_object"})
        );

        let disabled = OpenAiChatModel::new(&OpenAiChatSettings {
            json_mode: false,
            label: Some("local-llm".into()),
            ..settings(&server)
        })
        .unwrap();
        let response = disabled.chat(request).await.unwrap();
        assert_eq!(response.model, "local-llm");
        assert!(server.requests()[1].get("response_format").is_none());
    }

    #[tokio::test]
    async fn tool_calls_are_offered_and_parsed() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::once(ScriptReply::ToolCall {
            name: "rag_search".into(),
            arguments: json!({"query": "refund window"}),
        })])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let mut request = question();
        request.tools = crate::tools::tool_specs(&["rag_search".into()]).unwrap();
        let response = model.chat(request).await.unwrap();
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].name, "rag_search");
        let args: Value = serde_json::from_str(&response.tool_calls[0].arguments).unwrap();
        assert_eq!(args, json!({"query": "refund window"}));
        let body = &server.requests()[0];
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["tools"][0]["function"]["name"], "rag_search");
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["required"],
            json!(["query"])
        );
    }

    #[tokio::test]
    async fn a_429_is_retried_and_then_succeeds() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::Status(429)),
            ScriptRule::once(ScriptReply::Text("after the rate limit".into())),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(response.content, "after the rate limit");
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test]
    async fn persistent_500s_exhaust_the_retries_and_report_the_status() {
        let server = ScriptedLlmServer::start(vec![ScriptRule {
            when_contains: None,
            reply: ScriptReply::Status(500),
            times: None,
        }])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let err = model.chat(question()).await.unwrap_err();
        match err {
            ChatError::Status { status, body } => {
                assert_eq!(status, 500);
                assert!(body.contains("scripted failure"), "{body}");
                assert!(
                    body.contains(&format!("POST {}/chat/completions", server.base_url())),
                    "the error names the endpoint: {body}"
                );
                assert!(body.contains("3 attempts"), "{body}");
            }
            other => panic!("expected a status error, got {other:?}"),
        }
        assert_eq!(server.requests().len(), 3, "one call and two retries");
    }

    #[tokio::test]
    async fn a_client_error_is_not_retried() {
        let server = ScriptedLlmServer::start(vec![ScriptRule {
            when_contains: None,
            reply: ScriptReply::Status(400),
            times: None,
        }])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        assert!(matches!(
            model.chat(question()).await,
            Err(ChatError::Status { status: 400, .. })
        ));
        assert_eq!(server.requests().len(), 1);
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        // A loopback server that reads the request and holds its answer back for an hour.
        let server =
            LoopbackServer::start(|_, _| Reply::empty(200).after(Duration::from_secs(3600)))
                .await
                .unwrap();
        let model = OpenAiChatModel::new(&OpenAiChatSettings {
            base_url: format!("{}/v1", server.base_url()),
            model: "m".into(),
            api_key_env: String::new(),
            timeout_ms: 200,
            max_retries: 0,
            ..OpenAiChatSettings::default()
        })
        .unwrap();
        let err = model.chat(question()).await.unwrap_err();
        let ChatError::Transport(text) = &err else {
            panic!("expected a transport error naming the endpoint, got {err:?}");
        };
        assert!(
            text.contains(&format!("POST {}/v1/chat/completions", server.base_url())),
            "{text}"
        );
        assert!(
            text.contains("200 ms") && text.contains("llm.openai.timeout_ms"),
            "{text}"
        );
        assert!(text.contains("1 attempt"), "{text}");
    }

    #[test]
    fn a_missing_key_variable_is_named() {
        let err = OpenAiChatModel::new(&OpenAiChatSettings {
            api_key_env: "ORKEON_TEST_KEY_THAT_IS_NEVER_SET".into(),
            ..OpenAiChatSettings::default()
        })
        .unwrap_err();
        assert!(matches!(err, ChatError::NotConfigured(_)));
        let text = err.to_string();
        assert!(text.contains("ORKEON_TEST_KEY_THAT_IS_NEVER_SET"), "{text}");
        assert!(text.contains("llm.openai.api_key_env"), "{text}");
    }

    #[test]
    fn bad_settings_are_rejected_with_the_key() {
        let err = OpenAiChatModel::new(&OpenAiChatSettings {
            base_url: "not a url".into(),
            api_key_env: String::new(),
            ..OpenAiChatSettings::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("llm.openai.base_url"), "{err}");
        let err = OpenAiChatModel::new(&OpenAiChatSettings {
            model: " ".into(),
            api_key_env: String::new(),
            ..OpenAiChatSettings::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("llm.openai.model"), "{err}");
    }

    #[tokio::test]
    async fn streaming_yields_the_text_in_deltas() {
        let text = "Refunds take fourteen days from the purchase [1].";
        let server =
            ScriptedLlmServer::start(vec![ScriptRule::once(ScriptReply::Text(text.into()))])
                .await
                .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let stream = model.chat_stream(question()).await.unwrap();
        let deltas: Vec<String> = stream.map(|d| d.unwrap()).collect().await;
        assert!(deltas.len() > 1, "{deltas:?}");
        assert_eq!(deltas.concat(), text);
        assert_eq!(server.requests()[0]["stream"], true);
    }

    fn message(content: Option<&str>, calls: &[(&str, &str)], finish: &str) -> ScriptReply {
        ScriptReply::Message {
            content: content.map(str::to_owned),
            tool_calls: calls
                .iter()
                .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()))
                .collect(),
            finish_reason: finish.to_owned(),
        }
    }

    #[tokio::test]
    async fn an_empty_answer_is_an_error_naming_the_endpoint() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(message(None, &[], "stop")),
            ScriptRule::once(message(Some("  \n"), &[], "stop")),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        for _ in 0..2 {
            let err = model.chat(question()).await.unwrap_err();
            let ChatError::InvalidResponse(text) = &err else {
                panic!("expected InvalidResponse, got {err:?}");
            };
            assert!(text.contains("empty message"), "{text}");
            assert!(text.contains(&server.base_url()), "{text}");
            assert!(text.contains("finish_reason: stop"), "{text}");
        }
        assert_eq!(server.requests().len(), 2, "an empty answer is not retried");
    }

    #[tokio::test]
    async fn content_beside_tool_calls_is_kept_and_sent_back_with_them() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(message(
                Some("Let me look that up."),
                &[("rag_search", r#"{"query": "refund window"}"#)],
                "tool_calls",
            )),
            ScriptRule::once(ScriptReply::Text("Refunds take 14 days [1].".into())),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let first = model.chat(question()).await.unwrap();
        assert_eq!(first.content, "Let me look that up.");
        assert_eq!(first.tool_calls.len(), 1);
        assert_eq!(first.tool_calls[0].name, "rag_search");

        // The runner's next request: the assistant turn (content and calls) and the tool answer.
        let mut follow_up = question();
        follow_up.messages.push(ChatMessage {
            role: Role::Assistant,
            content: first.content.clone(),
            tool_call_id: None,
            tool_calls: first.tool_calls.clone(),
        });
        follow_up.messages.push(ChatMessage {
            role: Role::Tool,
            content: "[1] Refunds take 14 days.".into(),
            tool_call_id: Some(first.tool_calls[0].id.clone()),
            tool_calls: Vec::new(),
        });
        let second = model.chat(follow_up).await.unwrap();
        assert_eq!(second.content, "Refunds take 14 days [1].");
        let sent = &server.requests()[1]["messages"];
        assert_eq!(sent[2]["content"], "Let me look that up.");
        assert_eq!(sent[2]["tool_calls"][0]["function"]["name"], "rag_search");
        assert_eq!(
            sent[2]["tool_calls"][0]["id"],
            json!(first.tool_calls[0].id)
        );
        assert_eq!(sent[3]["role"], "tool");
        assert_eq!(sent[3]["tool_call_id"], json!(first.tool_calls[0].id));
    }

    #[tokio::test]
    async fn malformed_tool_arguments_are_passed_on_verbatim() {
        let raw = r#"{"query": "refund window", "max_passages": }"#;
        let server = ScriptedLlmServer::start(vec![ScriptRule::once(message(
            None,
            &[("rag_search", raw)],
            "tool_calls",
        ))])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(response.content, "");
        assert_eq!(response.tool_calls[0].arguments, raw);
        assert!(serde_json::from_str::<Value>(raw).is_err());
    }

    #[tokio::test]
    async fn a_cut_off_answer_is_trimmed_to_its_last_sentence_and_marked() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(message(
                Some("Refunds take 14 days [1]. Express shipping costs 12 euros [2"),
                &[],
                "length",
            )),
            ScriptRule::once(message(Some("Refunds take fourteen"), &[], "length")),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(
            response.content,
            format!("Refunds take 14 days [1].{TRUNCATION_NOTE}")
        );
        let response = model.chat(question()).await.unwrap();
        assert_eq!(
            response.content,
            format!("Refunds take fourteen{TRUNCATION_NOTE}"),
            "with no complete sentence the whole text is kept, and marked"
        );
    }

    #[tokio::test]
    async fn a_cut_off_json_answer_or_an_answer_of_nothing_is_an_error() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(message(Some(r#"{"verdict": "rel"#), &[], "length")),
            ScriptRule::once(message(None, &[], "length")),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let mut request = question();
        request.json_mode = true;
        let err = model.chat(request).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ChatError::InvalidResponse(_)), "{err:?}");
        assert!(text.contains("cut the JSON answer off"), "{text}");
        assert!(text.contains("llm.openai.max_tokens` (128)"), "{text}");
        assert!(text.contains(&server.base_url()), "{text}");

        let err = model.chat(question()).await.unwrap_err();
        assert!(matches!(err, ChatError::InvalidResponse(_)), "{err:?}");
        assert!(
            err.to_string().contains("before answering anything"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn cut_off_tool_calls_are_returned_as_sent() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::once(message(
            None,
            &[("rag_search", r#"{"query": "refund"#)],
            "length",
        ))])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(response.tool_calls[0].arguments, r#"{"query": "refund"#);
    }

    #[tokio::test]
    async fn a_streamed_answer_cut_off_ends_with_the_note() {
        let server = ScriptedLlmServer::start(vec![ScriptRule::once(message(
            Some("Refunds take 14"),
            &[],
            "length",
        ))])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let stream = model.chat_stream(question()).await.unwrap();
        let deltas: Vec<String> = stream.map(|d| d.unwrap()).collect().await;
        assert_eq!(deltas.last().map(String::as_str), Some(TRUNCATION_NOTE));
        assert_eq!(deltas.concat(), format!("Refunds take 14{TRUNCATION_NOTE}"));
    }

    #[tokio::test]
    async fn content_parts_are_joined() {
        let server = LoopbackServer::start(|_, _| {
            Reply::json(
                200,
                json!({"model": "parts", "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": [
                        {"type": "text", "text": "Refunds take 14 days [1]."},
                        {"type": "text", "text": "Ask support to start one."}]}}]}),
            )
        })
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&OpenAiChatSettings {
            base_url: format!("{}/v1", server.base_url()),
            api_key_env: String::new(),
            ..OpenAiChatSettings::default()
        })
        .unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(
            response.content,
            "Refunds take 14 days [1].\nAsk support to start one."
        );
        assert_eq!(response.model, "openai:parts");
    }

    #[tokio::test]
    async fn a_429_without_retry_after_backs_off_and_succeeds() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::Error {
                status: 429,
                retry_after: None,
            }),
            ScriptRule::once(ScriptReply::Error {
                status: 503,
                retry_after: Some("1".into()),
            }),
            ScriptRule::once(ScriptReply::Text("after the rate limit".into())),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&settings(&server)).unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(response.content, "after the rate limit");
        assert_eq!(server.requests().len(), 3, "429, then 503, then the answer");
    }

    #[tokio::test]
    async fn persistent_429s_report_the_status_and_the_endpoint() {
        let server = ScriptedLlmServer::start(vec![ScriptRule {
            when_contains: None,
            reply: ScriptReply::Status(429),
            times: None,
        }])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&OpenAiChatSettings {
            max_retries: 1,
            ..settings(&server)
        })
        .unwrap();
        let err = model.chat(question()).await.unwrap_err();
        let ChatError::Status { status: 429, body } = &err else {
            panic!("expected a 429 status error, got {err:?}");
        };
        assert!(
            body.contains(&server.base_url()) && body.contains("2 attempts"),
            "{body}"
        );
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test]
    async fn a_timed_out_attempt_is_retried() {
        let server = ScriptedLlmServer::start(vec![
            ScriptRule::once(ScriptReply::Text("too late".into()).after(Duration::from_secs(3600))),
            ScriptRule::once(ScriptReply::Text("on the second attempt".into())),
        ])
        .await
        .unwrap();
        let model = OpenAiChatModel::new(&OpenAiChatSettings {
            timeout_ms: 300,
            max_retries: 1,
            ..settings(&server)
        })
        .unwrap();
        let response = model.chat(question()).await.unwrap();
        assert_eq!(response.content, "on the second attempt");
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn trimming_keeps_complete_sentences_only() {
        assert_eq!(
            trim_truncated("One [1]. Two (see [2])! Three \"quoted.\" Four is cut"),
            format!("One [1]. Two (see [2])! Three \"quoted.\"{TRUNCATION_NOTE}")
        );
        assert_eq!(
            trim_truncated("All complete [1]. "),
            format!("All complete [1].{TRUNCATION_NOTE}")
        );
    }
}
