//! The loopback HTTP/1.1 server core every HTTP double of this crate is built on.
//!
//! [`LoopbackServer`] binds `127.0.0.1` on a free port and answers each request with what its
//! handler returns for it. It reads one request per connection (request line, headers, a body of
//! exactly `Content-Length` bytes; no chunked request bodies), records it, writes the [`Reply`]
//! with `Connection: close` and closes. Request heads over [`MAX_HEAD_BYTES`] are answered 431
//! and bodies over [`MAX_BODY_BYTES`] 413, without calling the handler. Dropping the server stops
//! the accept loop and every connection still open.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Largest request head (request line and headers) accepted; a larger one is answered 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest request body accepted (by its `Content-Length`); a larger one is answered 413.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// A request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    /// The request target as sent, query string included.
    pub path: String,
    /// In arrival order, names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query string.
    pub fn path_only(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }

    /// The body parsed as JSON (`None` if it is not JSON).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// A scripted answer. `Content-Length` and `Connection: close` are added when it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    /// Written in order, before `Content-Length`.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    delay: Option<Duration>,
    content_length: bool,
}

impl Reply {
    /// `status` with no headers and no body.
    pub fn empty(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            delay: None,
            content_length: true,
        }
    }

    /// `status` with `body` as `Content-Type: content_type`.
    pub fn typed(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            body: body.into(),
            ..Self::empty(status)
        }
        .header("Content-Type", content_type)
    }

    /// A JSON body.
    pub fn json(status: u16, body: Value) -> Self {
        Self::typed(status, "application/json", body.to_string())
    }

    /// An `application/octet-stream` body.
    pub fn bytes(status: u16, body: Vec<u8>) -> Self {
        Self::typed(status, "application/octet-stream", body)
    }

    /// An HTML page (`text/html; charset=utf-8`).
    pub fn html(status: u16, body: &str) -> Self {
        Self::typed(status, "text/html; charset=utf-8", body)
    }

    /// A JSON error body `{"error": {"message", "type", "code"}}` (the OpenAI error shape).
    pub fn error(status: u16, kind: &str, message: &str) -> Self {
        Self::json(
            status,
            json!({"error": {"message": message, "type": kind, "code": status}}),
        )
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Holds the answer back for `delay` after the request was read (timeouts; a long delay
    /// plays a server that never answers).
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Sends no `Content-Length`: the body ends when the connection closes, so a client cannot
    /// check the size before reading.
    pub fn without_content_length(mut self) -> Self {
        self.content_length = false;
        self
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if self.content_length {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("Connection: close\r\n\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Scripted Status",
    }
}

type Handler = dyn Fn(&Recorded, usize) -> Reply + Send + Sync;

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct LoopbackServer {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Recorded>>>,
    accept_loop: JoinHandle<()>,
}

impl LoopbackServer {
    /// Binds 127.0.0.1 on a free port and serves; `handler` gets each request and its 0-based
    /// sequence number (requests refused for their size are neither numbered nor recorded).
    pub async fn start(
        handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = Arc::clone(&received);
        let accept_loop = tokio::spawn(async move {
            // Dropping the set (when the loop is aborted) aborts the open connections too.
            let mut connections = JoinSet::new();
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        while connections.try_join_next().is_some() {}
                        let handler = Arc::clone(&handler);
                        let log = Arc::clone(&log);
                        connections.spawn(async move {
                            if let Err(e) = serve(stream, handler.as_ref(), &log).await {
                                tracing::debug!(error = %e, "loopback connection ended with an error");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "loopback server stopped accepting");
                        break;
                    }
                }
            }
            while connections.join_next().await.is_some() {}
        });
        Ok(Self {
            addr,
            received,
            accept_loop,
        })
    }

    /// The bound address (127.0.0.1 and the chosen port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.received).clone()
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

/// Locks a test double's state. The state stays consistent even if a holder panicked (every
/// update is a single push or pop), so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one connection brought.
enum Incoming {
    Request(Recorded),
    /// The peer closed before sending a whole head.
    Closed,
    /// Answered without the handler (malformed or too large).
    Refused(Reply),
}

async fn serve(
    mut stream: TcpStream,
    handler: &Handler,
    log: &Mutex<Vec<Recorded>>,
) -> std::io::Result<()> {
    let reply = match read_request(&mut stream).await? {
        Incoming::Closed => return Ok(()),
        Incoming::Refused(reply) => reply,
        Incoming::Request(request) => {
            let sequence = {
                let mut log = lock(log);
                log.push(request.clone());
                log.len() - 1
            };
            handler(&request, sequence)
        }
    };
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    stream.write_all(&reply.to_bytes()).await?;
    stream.flush().await?;
    stream.shutdown().await
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<Incoming> {
    let refuse = |status: u16, message: &str| -> std::io::Result<Incoming> {
        Ok(Incoming::Refused(Reply::error(status, "loopback", message)))
    };
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut searched = 0;
    let head_end = loop {
        if let Some(pos) = buffer[searched..].windows(4).position(|w| w == b"\r\n\r\n") {
            break searched + pos + 4;
        }
        searched = buffer.len().saturating_sub(3);
        if buffer.len() > MAX_HEAD_BYTES {
            return refuse(431, "request head too large");
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Incoming::Closed);
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEAD_BYTES {
        return refuse(431, "request head too large");
    }
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split_whitespace();
    let (Some(method), Some(path)) = (request_line.next(), request_line.next()) else {
        return refuse(400, "malformed request line");
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = match headers.iter().find(|(n, _)| n == "content-length") {
        None => 0,
        Some((_, v)) => match v.parse::<usize>() {
            Ok(length) => length,
            Err(_) => return refuse(400, "bad Content-Length"),
        },
    };
    if length > MAX_BODY_BYTES {
        return refuse(413, "request body too large");
    }
    let mut body = buffer.split_off(head_end);
    body.truncate(length);
    let already = body.len();
    body.resize(length, 0);
    stream.read_exact(&mut body[already..]).await?;
    Ok(Incoming::Request(Recorded {
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends raw bytes and reads the whole response (the server closes after answering).
    async fn exchange(server: &LoopbackServer, raw: &[u8]) -> String {
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        stream.write_all(raw).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        String::from_utf8_lossy(&response).into_owned()
    }

    #[tokio::test]
    async fn records_requests_and_answers_with_the_handlers_reply() {
        let server = LoopbackServer::start(|request, n| {
            Reply::json(201, json!({"n": n, "path": request.path_only()})).header("X-Seen", "yes")
        })
        .await
        .unwrap();
        assert!(server.base_url().starts_with("http://127.0.0.1:"));
        // The body arrives in two writes, the second after the head.
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        stream
            .write_all(b"POST /a/b?x=1 HTTP/1.1\r\nHost: h\r\nX-Key: Value\r\nContent-Length: 11\r\n\r\nhello")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        stream.write_all(b" world").await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 201 Scripted Status\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nX-Seen: yes\r\n"), "{head}");
        assert!(
            head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
            "{head}"
        );
        assert!(head.ends_with("Connection: close"), "{head}");
        assert_eq!(body, r#"{"n":0,"path":"/a/b"}"#);

        let second = exchange(&server, b"GET /c HTTP/1.1\r\n\r\n").await;
        assert!(second.ends_with(r#"{"n":1,"path":"/c"}"#), "{second}");

        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].method, "POST");
        assert_eq!(requests[0].path, "/a/b?x=1");
        assert_eq!(requests[0].header("x-key"), Some("Value"));
        assert_eq!(requests[0].header("X-KEY"), Some("Value"));
        assert_eq!(requests[0].body, b"hello world");
        assert_eq!(requests[1].method, "GET");
        assert!(requests[1].body.is_empty());
    }

    #[tokio::test]
    async fn oversized_heads_and_bodies_are_refused_without_the_handler() {
        let server = LoopbackServer::start(|_, _| Reply::empty(200))
            .await
            .unwrap();
        let huge_head = format!(
            "GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        let response = exchange(&server, huge_head.as_bytes()).await;
        assert!(response.starts_with("HTTP/1.1 431 "), "{response}");

        let huge_body = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY_BYTES + 1
        );
        let response = exchange(&server, huge_body.as_bytes()).await;
        assert!(response.starts_with("HTTP/1.1 413 "), "{response}");
        assert!(response.contains("request body too large"), "{response}");

        let response = exchange(&server, b"NONSENSE\r\n\r\n").await;
        assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
        assert!(
            server.requests().is_empty(),
            "refused requests are not recorded"
        );
    }

    #[tokio::test]
    async fn replies_can_be_delayed_and_sent_without_a_length() {
        let server = LoopbackServer::start(|_, _| {
            Reply::typed(200, "text/plain", "late")
                .after(Duration::from_millis(150))
                .without_content_length()
        })
        .await
        .unwrap();
        let started = std::time::Instant::now();
        let response = exchange(&server, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(!response.contains("Content-Length"), "{response}");
        assert!(response.ends_with("\r\n\r\nlate"), "{response}");
    }

    #[tokio::test]
    async fn dropping_the_server_stops_it_and_its_open_connections() {
        let server =
            LoopbackServer::start(|_, _| Reply::empty(200).after(Duration::from_secs(3600)))
                .await
                .unwrap();
        let addr = server.addr();
        let mut held = TcpStream::connect(addr).await.unwrap();
        held.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        while server.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(server);
        // The held connection is closed without an answer…
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), held.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?} {rest:?}");
        // …and the port no longer accepts.
        let refused = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if TcpStream::connect(addr).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(refused.is_ok(), "the listener is closed");
    }
}
