//! A routed mock of both providers for the tests that run whole teams through the adapters
//! (`coordinator_and_workers`, `research_desk`): one HTTP server on 127.0.0.1
//! that takes OpenAI Chat Completions and Anthropic Messages requests on the same port and
//! answers each by a script chosen per agent (the `[agent:NAME]` marker of the request's
//! system prompt), so agents running in parallel each get their own replies.
//!
//! Every request is first checked the way the real providers check it; one they would refuse
//! (a tool call without its result, a result without its call, results after text, empty
//! text blocks, a tool name they would not take, ...) is answered with the provider's own
//! 400 (or, for tool-call arguments that are not JSON, llama.cpp's 500) and listed in
//! [`Mock::refusals`], so a defect shows as the provider's refusal.
//!
//! Unlike `server.rs` (replies in order, one per connection), the reply is decided from the
//! request. The builders under "What the providers send" give the replies of each wire
//! format: `an_*` Anthropic, `oa_*` OpenAI, `*_json_*` not streamed, the rest streamed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

// ---------------------------------------------------------------------------------------
// Replies, requests and the server
// ---------------------------------------------------------------------------------------

/// One scripted reply, what a script returns for a request.
#[derive(Clone)]
pub(crate) enum Resp {
    /// A whole body: status, extra headers, content type, body.
    Body(u16, Vec<(String, String)>, String, Vec<u8>),
    /// A server-sent event stream, each piece flushed as its own chunk (1 ms apart), then
    /// ended.
    Sse(Vec<String>),
    /// A stream that stalls after its pieces: the connection kept open, the body never
    /// ended, until the client closes it (counted for [`Mock::until_closed`]).
    SseStall(Vec<String>),
    /// Never answered; the client's close is counted for [`Mock::until_closed`].
    Hang,
    /// Answered with the inner reply once the gate is opened (`Notify::notify_one`).
    Gate(Arc<Notify>, Box<Resp>),
}

impl Resp {
    /// A JSON body with `status`.
    pub(crate) fn json(status: u16, body: Value) -> Resp {
        Resp::raw(status, "application/json", body.to_string().into_bytes())
    }

    /// A body of `content_type` (say, HTML sent as JSON by a broken gateway).
    pub(crate) fn raw(status: u16, content_type: &str, body: Vec<u8>) -> Resp {
        Resp::Body(status, vec![], content_type.into(), body)
    }

    /// The same reply with an extra header (`retry-after`, ...); only on a [`Resp::Body`].
    pub(crate) fn header(self, name: &str, value: &str) -> Resp {
        match self {
            Resp::Body(s, mut h, c, b) => {
                h.push((name.into(), value.into()));
                Resp::Body(s, h, c, b)
            }
            other => other,
        }
    }
}

/// A request as the mock got it (either wire format), with what scripts ask of it.
#[derive(Clone, Debug)]
pub(crate) struct Req {
    /// The request path: `/v1/messages` (Anthropic) or `/v1/chat/completions` (OpenAI).
    pub(crate) path: String,
    /// The JSON body.
    pub(crate) body: Value,
}

impl Req {
    /// Whether the request is Anthropic's (else OpenAI's).
    pub(crate) fn is_anthropic(&self) -> bool {
        self.path.ends_with("/messages")
    }

    /// The system prompt (Anthropic: the top-level `system`; OpenAI: the first message).
    pub(crate) fn system(&self) -> String {
        match &self.body["system"] {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => self.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        }
    }

    /// Which agent asks: the `[agent:NAME]` marker of its system prompt.
    pub(crate) fn agent(&self) -> String {
        let system = self.system();
        let start = system.find("[agent:").map(|i| i + 7).unwrap_or(0);
        system[start..]
            .split(']')
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    /// The conversation's messages.
    pub(crate) fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Assistant messages so far: the turn being asked for (0 = first).
    pub(crate) fn turn(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// The whole request as text, to look for a string in it.
    pub(crate) fn text(&self) -> String {
        self.body.to_string()
    }

    /// What came after the last assistant message, as text (tool results, steers, notices).
    pub(crate) fn pending(&self) -> String {
        let messages = self.messages();
        let last = messages.iter().rposition(|m| m["role"] == "assistant");
        let from = last.map_or(0, |i| i + 1);
        messages[from..]
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every tool result's text in the conversation, in order (both formats).
    pub(crate) fn tool_results(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in self.messages() {
            if m["role"] == "tool" {
                out.push(m["content"].as_str().unwrap_or_default().to_owned());
            }
            for block in m["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" {
                    out.push(match &block["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                }
            }
        }
        out
    }

    /// The agent ids the tool results name (`Agent` results and the like), in order, each
    /// once.
    pub(crate) fn spawned_ids(&self) -> Vec<String> {
        self.tool_results()
            .iter()
            .filter_map(|t| serde_json::from_str::<Value>(t).ok())
            .filter_map(|v| v["agent_id"].as_str().map(str::to_owned))
            .fold(Vec::new(), |mut acc, id| {
                if !acc.contains(&id) {
                    acc.push(id);
                }
                acc
            })
    }

    /// The names of the tools the request offers (both formats).
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                t["name"]
                    .as_str()
                    .or_else(|| t["function"]["name"].as_str())
                    .map(str::to_owned)
            })
            .collect()
    }
}

type Script = Arc<dyn Fn(&Req, usize) -> Resp + Send + Sync>;

/// What the connections of one mock share.
struct Shared {
    script: Script,
    /// Requests so far per (agent, turn).
    attempts: Mutex<HashMap<(String, usize), usize>>,
    requests: Mutex<Vec<Req>>,
    refusals: Mutex<Vec<String>>,
    arrived: Notify,
    closed: AtomicUsize,
    closed_note: Notify,
}

/// The running mock; stops with the test's runtime.
pub(crate) struct Mock {
    /// The base URL for either adapter's `base_url` (`http://127.0.0.1:PORT/v1`).
    pub(crate) base: String,
    shared: Arc<Shared>,
}

impl Mock {
    /// Serves each request a provider would take with `script(request, attempt)`, `attempt`
    /// counting the earlier such requests of the same agent at the same turn (so a retry
    /// gets the next reply); refuses the others with the provider's 400.
    pub(crate) async fn start(
        script: impl Fn(&Req, usize) -> Resp + Send + Sync + 'static,
    ) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            script: Arc::new(script),
            attempts: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            refusals: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            closed: AtomicUsize::new(0),
            closed_note: Notify::new(),
        });
        let s = shared.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, &s).await;
                });
            }
        });
        Mock { base, shared }
    }

    /// Every request so far (refused ones too), in the order they came.
    pub(crate) fn requests(&self) -> Vec<Req> {
        self.shared.requests.lock().clone()
    }

    /// The requests of `agent`, in order.
    pub(crate) fn of(&self, agent: &str) -> Vec<Req> {
        self.requests()
            .into_iter()
            .filter(|r| r.agent() == agent)
            .collect()
    }

    /// What the mock refused as a real provider would (`"agent: why"`, each a 400 it
    /// answered); a test of requests that must all be taken asserts this is empty.
    pub(crate) fn refusals(&self) -> Vec<String> {
        self.shared.refusals.lock().clone()
    }

    /// Waits until `agent` has made `n` requests.
    pub(crate) async fn until(&self, agent: &str, n: usize) {
        loop {
            let note = self.shared.arrived.notified();
            if self.of(agent).len() >= n {
                return;
            }
            note.await;
        }
    }

    /// Waits until the client has closed `n` connections of [`Resp::Hang`] or
    /// [`Resp::SseStall`] replies.
    pub(crate) async fn until_closed(&self, n: usize) {
        loop {
            let note = self.shared.closed_note.notified();
            if self.shared.closed.load(Ordering::SeqCst) >= n {
                return;
            }
            note.await;
        }
    }
}

async fn serve(mut socket: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let recorded = crate::server::read_request(&mut socket).await?;
    let req = Req {
        path: recorded.path,
        body: recorded.body,
    };
    let refused = match unparseable(&req) {
        Some(why) => Some((why.clone(), llama_500(&why))),
        None => refusal(&req).map(|why| (why.clone(), provider_400(&req, &why))),
    };
    let mut resp = match refused {
        Some((why, resp)) => {
            shared
                .refusals
                .lock()
                .push(format!("{}: {why}", req.agent()));
            resp
        }
        None => {
            let attempt = {
                let mut map = shared.attempts.lock();
                let n = map.entry((req.agent(), req.turn())).or_insert(0);
                *n += 1;
                *n - 1
            };
            (shared.script)(&req, attempt)
        }
    };
    shared.requests.lock().push(req);
    shared.arrived.notify_waiters();
    while let Resp::Gate(gate, inner) = resp {
        gate.notified().await;
        resp = *inner;
    }
    match resp {
        Resp::Gate(..) => unreachable!("opened above"),
        Resp::Hang => {
            until_client_closes(&mut socket, shared).await;
            Ok(())
        }
        Resp::Body(status, headers, content_type, body) => {
            let mut head = format!(
                "HTTP/1.1 {status} Mock\r\nconnection: close\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (n, v) in headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(&body).await?;
            socket.shutdown().await
        }
        Resp::SseStall(pieces) => {
            write_sse(&mut socket, pieces, Duration::ZERO).await?;
            until_client_closes(&mut socket, shared).await;
            Ok(())
        }
        Resp::Sse(pieces) => {
            write_sse(&mut socket, pieces, Duration::from_millis(1)).await?;
            socket.write_all(b"0\r\n\r\n").await?;
            let mut sink = [0u8; 64];
            let _ = tokio::time::timeout(Duration::from_millis(1), socket.read(&mut sink)).await;
            socket.shutdown().await
        }
    }
}

/// The head of an event stream and `pieces`, each its own chunk, `gap` after each.
async fn write_sse(
    socket: &mut TcpStream,
    pieces: Vec<String>,
    gap: Duration,
) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    socket.write_all(head.as_bytes()).await?;
    for piece in pieces {
        socket
            .write_all(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes())
            .await?;
        socket.flush().await?;
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
    }
    Ok(())
}

/// Reads (and drops) until the client closes the connection, then counts the close.
async fn until_client_closes(socket: &mut TcpStream, shared: &Shared) {
    let mut sink = [0u8; 1024];
    while let Ok(n) = socket.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
    shared.closed.fetch_add(1, Ordering::SeqCst);
    shared.closed_note.notify_waiters();
}

/// The provider's 400 for a request it refuses for `why`, in the request's wire format.
fn provider_400(req: &Req, why: &str) -> Resp {
    if req.is_anthropic() {
        Resp::json(
            400,
            json!({"type":"error","error":{"type":"invalid_request_error","message":why}}),
        )
    } else {
        Resp::json(
            400,
            json!({"error":{"message":why,"type":"invalid_request_error","param":"messages","code":null}}),
        )
    }
}

/// llama.cpp's server (`llama-server --jinja`) parses the arguments of every tool call in
/// an OpenAI-compatible request's history to render its chat template; text that is not
/// JSON fails the request with a 500. Why it would, if it would.
fn unparseable(req: &Req) -> Option<String> {
    if req.is_anthropic() {
        return None;
    }
    for m in req.messages() {
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
            if let Err(error) = serde_json::from_str::<Value>(arguments) {
                return Some(format!(
                    "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] {error}"
                ));
            }
        }
    }
    None
}

/// llama.cpp's 500 for a request it fails to render.
fn llama_500(why: &str) -> Resp {
    Resp::json(
        500,
        json!({"error":{"code":500,"message":why,"type":"server_error"}}),
    )
}

/// Why a real provider would refuse this request with a 400, if it would.
fn refusal(req: &Req) -> Option<String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    for name in req.tool_names() {
        if !name_ok(&name) {
            return Some(format!(
                "tools: name {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
        }
    }
    if req.body["model"].as_str().is_none_or(str::is_empty) {
        return Some("model: field required".into());
    }
    let messages = req.messages();
    if req.is_anthropic() {
        if req.body["max_tokens"].as_u64().is_none() {
            return Some("max_tokens: field required".into());
        }
        let breakpoints = req.text().matches("\"cache_control\"").count();
        if breakpoints > 4 {
            return Some(format!(
                "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
            ));
        }
        if messages.first().is_none_or(|m| m["role"] != "user") {
            return Some("messages: first message must use the \"user\" role".into());
        }
        for (i, m) in messages.iter().enumerate() {
            match &m["content"] {
                Value::String(s) if s.trim().is_empty() => {
                    return Some(format!(
                        "messages.{i}: text content blocks must be non-empty"
                    ));
                }
                Value::Array(blocks) => {
                    if blocks.is_empty() {
                        return Some(format!("messages.{i}: content must be non-empty"));
                    }
                    let mut seen_other = false;
                    for b in blocks {
                        if b["type"] == "text"
                            && b["text"].as_str().is_none_or(|t| t.trim().is_empty())
                        {
                            return Some(format!(
                                "messages.{i}: text content blocks must contain non-whitespace text"
                            ));
                        }
                        if b["type"] == "tool_result" {
                            if seen_other {
                                return Some(format!(
                                    "messages.{i}: tool_result blocks must come first in the content"
                                ));
                            }
                            let id = b["tool_use_id"].as_str().unwrap_or_default();
                            let asked = i > 0
                                && messages[i - 1]["content"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    .any(|p| p["type"] == "tool_use" && p["id"] == id);
                            if !asked {
                                return Some(format!(
                                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                                ));
                            }
                        } else {
                            seen_other = true;
                        }
                        if b["type"] == "tool_use" && !b["input"].is_object() {
                            return Some(format!(
                                "messages.{i}: tool_use.input: Input should be a valid dictionary"
                            ));
                        }
                    }
                }
                _ => {}
            }
            if m["role"] == "assistant" {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] != "tool_use" {
                        continue;
                    }
                    let id = b["id"].as_str().unwrap_or_default();
                    let answered = messages.get(i + 1).is_some_and(|n| {
                        n["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|p| p["type"] == "tool_result" && p["tool_use_id"] == id)
                    });
                    if !answered {
                        return Some(format!(
                            "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {id}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
                        ));
                    }
                }
            }
        }
    } else {
        for (i, m) in messages.iter().enumerate() {
            if m["role"] == "tool" {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                let owner = messages[..i].iter().rev().find(|p| p["role"] != "tool");
                let ok = owner.is_some_and(|p| {
                    p["role"] == "assistant"
                        && p["tool_calls"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["id"] == id)
                });
                if !ok {
                    return Some(format!(
                        "messages.[{i}].role: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
                    ));
                }
            }
            if m["role"] == "assistant" {
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    if !call["function"]["arguments"].is_string() {
                        return Some(format!(
                            "messages.[{i}].tool_calls.function.arguments: expected a string"
                        ));
                    }
                    let id = call["id"].as_str().unwrap_or_default();
                    let answered = messages[i + 1..]
                        .iter()
                        .take_while(|n| n["role"] == "tool")
                        .any(|n| n["tool_call_id"] == id);
                    if !answered {
                        return Some(format!(
                            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {id}"
                        ));
                    }
                }
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// What the providers send
// ---------------------------------------------------------------------------------------

/// One server-sent event (`event: NAME` and its `data`), as Anthropic frames them.
pub(crate) fn sse(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Anthropic's `message_start` event, billing `input` tokens (and one output token).
pub(crate) fn an_start(input: u64) -> String {
    sse(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":input,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}),
    )
}

/// The end of an Anthropic stream: `message_delta` with `stop` and `output` tokens, then
/// `message_stop`.
pub(crate) fn an_end(stop: &str, output: u64) -> Vec<String> {
    vec![
        sse(
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":output}}),
        ),
        sse("message_stop", json!({"type":"message_stop"})),
    ]
}

/// The opening of an Anthropic stream cut short: `message_start` billing `input`, a text
/// block and one delta of `text` (a test adds an `error` event, or stalls after it).
pub(crate) fn an_partial(input: u64, text: &str) -> Vec<String> {
    vec![
        an_start(input),
        sse(
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        sse(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        ),
    ]
}

/// A streamed Anthropic answer, the text in two deltas (a `ping` before them).
pub(crate) fn an_text(text: &str, input: u64, output: u64) -> Resp {
    let (a, b) = text.split_at(text.len() / 2);
    let mut v = vec![
        an_start(input),
        sse(
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        sse("ping", json!({"type":"ping"})),
        sse(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":a}}),
        ),
        sse(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":b}}),
        ),
        sse(
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
    ];
    v.extend(an_end("end_turn", output));
    Resp::Sse(v)
}

/// A streamed Anthropic turn: a short text, then tool_use blocks whose input comes in
/// `input_json_delta` pieces.
pub(crate) fn an_calls(calls: &[(&str, Value)], input: u64, output: u64) -> Resp {
    static N: AtomicUsize = AtomicUsize::new(0);
    let mut v = an_partial(input, "On it.");
    v.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    for (i, (name, input)) in calls.iter().enumerate() {
        let index = i + 1;
        let id = format!("toolu_{:04}", N.fetch_add(1, Ordering::SeqCst));
        v.push(sse("content_block_start", json!({"type":"content_block_start","index":index,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}})));
        let text = input.to_string();
        let (a, b) = text.split_at(text.len() / 2);
        for piece in ["", a, b] {
            v.push(sse("content_block_delta", json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":piece}})));
        }
        v.push(sse(
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        ));
    }
    v.extend(an_end("tool_use", output));
    Resp::Sse(v)
}

/// The `error` event of an overloaded Anthropic stream.
pub(crate) fn an_overloaded_event() -> String {
    sse(
        "error",
        json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
    )
}

/// An Anthropic stream that fails mid-way with `overloaded_error`, after some text.
pub(crate) fn an_overloaded_mid_stream(input: u64) -> Resp {
    let mut v = an_partial(input, "Searching the press archive");
    v.push(an_overloaded_event());
    Resp::Sse(v)
}

/// Anthropic's HTTP 529 (overloaded).
pub(crate) fn an_529() -> Resp {
    Resp::json(
        529,
        json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
    )
}

/// An Anthropic answer not streamed.
pub(crate) fn an_json_text(text: &str, input: u64, output: u64) -> Resp {
    Resp::json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{ "type": "text", "text": text }],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": { "input_tokens": input, "output_tokens": output }
        }),
    )
}

/// An Anthropic turn calling tools, not streamed.
pub(crate) fn an_json_calls(calls: &[(&str, Value)], input: u64, output: u64) -> Resp {
    let content: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, input))| json!({"type":"tool_use","id":format!("toolu_{i}"),"name":name,"input":input}))
        .collect();
    Resp::json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": "tool_use", "stop_sequence": null,
            "usage": { "input_tokens": input, "output_tokens": output }
        }),
    )
}

/// One Chat Completions stream chunk carrying `delta`.
pub(crate) fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    let data = json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen2.5:7b",
        "choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    format!("data: {data}\n\n")
}

/// Chat Completions' `usage` object.
pub(crate) fn oa_usage(prompt: u64, completion: u64) -> Value {
    json!({ "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion })
}

/// The last chunk of a Chat Completions stream: no choices, the usage
/// (`stream_options.include_usage`).
pub(crate) fn oa_usage_chunk(prompt: u64, completion: u64) -> String {
    let data = json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen2.5:7b",
        "choices":[],"usage":oa_usage(prompt, completion)});
    format!("data: {data}\n\n")
}

/// A streamed Chat Completions turn calling one tool, its arguments in three deltas, usage
/// in the last chunk.
pub(crate) fn oa_call(name: &str, args: Value, prompt: u64, completion: u64) -> Resp {
    static N: AtomicUsize = AtomicUsize::new(0);
    let id = format!("call_{:04}", N.fetch_add(1, Ordering::SeqCst));
    let text = args.to_string();
    let (a, b) = text.split_at(text.len() / 2);
    Resp::Sse(vec![
        oa_chunk(
            json!({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}),
            None,
        ),
        oa_chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments":a}}]}),
            None,
        ),
        oa_chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments":b}}]}),
            None,
        ),
        oa_chunk(json!({}), Some("tool_calls")),
        oa_usage_chunk(prompt, completion),
        "data: [DONE]\n\n".into(),
    ])
}

/// A streamed Chat Completions answer, the text in two deltas, usage in the last chunk.
pub(crate) fn oa_text(text: &str, prompt: u64, completion: u64) -> Resp {
    let (a, b) = text.split_at(text.len() / 2);
    Resp::Sse(vec![
        oa_chunk(json!({"role":"assistant","content":""}), None),
        oa_chunk(json!({"content":a}), None),
        oa_chunk(json!({"content":b}), None),
        oa_chunk(json!({}), Some("stop")),
        oa_usage_chunk(prompt, completion),
        "data: [DONE]\n\n".into(),
    ])
}

/// A Chat Completions 429 with `retry-after-ms: 20`.
pub(crate) fn oa_429() -> Resp {
    Resp::json(
        429,
        json!({"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}),
    )
    .header("retry-after-ms", "20")
}

/// A Chat Completions reply calling tools, not streamed; each call's `arguments` is JSON
/// *text*, as sent (so a test can send text that is not JSON).
pub(crate) fn oa_json_calls(calls: &[(&str, String)], usage: (u64, u64)) -> Resp {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({ "id": format!("call_{i}"), "type": "function",
                    "function": { "name": name, "arguments": args } })
        })
        .collect();
    Resp::json(
        200,
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{ "index": 0, "finish_reason": "tool_calls",
                          "message": { "role": "assistant", "content": null, "tool_calls": calls } }],
            "usage": oa_usage(usage.0, usage.1)
        }),
    )
}

/// A Chat Completions answer, not streamed.
pub(crate) fn oa_json_text(text: &str, usage: (u64, u64)) -> Resp {
    Resp::json(
        200,
        json!({
            "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{ "index": 0, "finish_reason": "stop",
                          "message": { "role": "assistant", "content": text } }],
            "usage": oa_usage(usage.0, usage.1)
        }),
    )
}
