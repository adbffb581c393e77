//! A local OpenAI-compatible server for `live --mock`: it answers Chat Completions requests
//! (plain or streamed) with scripted but plausible turns, chosen from what each request
//! holds, so the tree delegates for real: the coordinator calls the `Agent` tool for a
//! researcher, then a writer; the researcher calls `read_ticket`; the writer drafts.
//!
//! Usage is made up from the request's size, with cached prompt tokens on later turns and
//! a little reasoning on the coordinator's, in the shape OpenAI reports them.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts the server on a free port of 127.0.0.1; its base URL (`http://127.0.0.1:N/v1`).
pub(crate) async fn start() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Err(error) = serve(socket).await {
                    eprintln!("mock server: {error}");
                }
            });
        }
    });
    Ok(base)
}

/// One scripted turn.
struct Turn {
    text: String,
    calls: Vec<(String, Value)>,
}

impl Turn {
    fn say(text: impl Into<String>) -> Turn {
        Turn {
            text: text.into(),
            calls: Vec::new(),
        }
    }

    fn call(name: &str, arguments: Value) -> Turn {
        Turn {
            text: String::new(),
            calls: vec![(name.to_owned(), arguments)],
        }
    }
}

const TICKET: &str = "Ticket #4127 from Dana Reyes (plan: Team, since 2022)\n\
Subject: Checkout button does nothing\n\
Since Tuesday's release the Pay button on the checkout page does nothing in Safari 17; \
Chrome works. Three customers of hers could not pay; one order was lost. She asks for a \
fix or a workaround today.";

/// The text of the ticket `read_ticket` returns (the example's tool reads it from here).
pub(crate) fn ticket(id: u64) -> Option<&'static str> {
    (id == 4127).then_some(TICKET)
}

/// What an `Agent` tool result says the child answered.
fn child_text(result: &str) -> String {
    serde_json::from_str::<Value>(result)
        .ok()
        .and_then(|v| v["text"].as_str().map(str::to_owned))
        .unwrap_or_else(|| result.to_owned())
}

/// The turn a request gets, from the tools it offers and the results it already holds.
fn script(request: &Value) -> Turn {
    let empty = Vec::new();
    let messages = request["messages"].as_array().unwrap_or(&empty);
    let tools: Vec<&str> = request["tools"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    let results: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if tools.contains(&"Agent") {
        return match results.as_slice() {
            [] => Turn::call(
                "Agent",
                json!({
                    "agent_type": "researcher",
                    "description": "read the ticket",
                    "prompt": format!("Read ticket #4127 and list the facts that matter. {task}"),
                }),
            ),
            [research] => Turn::call(
                "Agent",
                json!({
                    "agent_type": "writer",
                    "description": "draft the reply",
                    "prompt": format!("Draft the reply to Dana Reyes from these facts:\n{}", child_text(research)),
                }),
            ),
            [research, draft, ..] => Turn::say(format!(
                "{}\n\n(Research: {})",
                child_text(draft),
                child_text(research)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("- ")
            )),
        };
    }
    if tools.contains(&"read_ticket") {
        return match results.first() {
            None => Turn::call("read_ticket", json!({ "ticket": 4127 })),
            Some(_) => Turn::say(
                "- Pay button dead in Safari 17 since Tuesday's release; Chrome unaffected\n\
                 - 3 customers blocked, 1 order lost\n\
                 - Customer on the Team plan since 2022\n\
                 - Wants a fix or a workaround today",
            ),
        };
    }
    Turn::say(
        "Hi Dana, thank you for the clear report, and sorry for the lost order. Since \
         Tuesday's release the Pay button fails in Safari 17; Chrome is not affected. Until \
         our fix ships (we are on it today), your customers can pay in Chrome or Firefox. \
         We will write again as soon as the fix is live, and we will help you recover the \
         lost order. - The support team",
    )
}

/// Made-up usage in OpenAI's shape: about four characters a token.
fn usage(request: &Value, turn: &Turn) -> Value {
    let prompt = request.to_string().len() as u64 / 4 + 12;
    let written: usize = turn.text.len()
        + turn
            .calls
            .iter()
            .map(|(n, a)| n.len() + a.to_string().len())
            .sum::<usize>();
    let completion = written as u64 / 4 + 4;
    let later = request["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"));
    let cached = if later { prompt * 2 / 3 / 64 * 64 } else { 0 };
    let delegating = request["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "Agent"));
    let reasoning = if delegating { completion / 3 } else { 0 };
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": { "cached_tokens": cached },
        "completion_tokens_details": { "reasoning_tokens": reasoning }
    })
}

fn tool_calls(turn: &Turn, n: u64) -> Vec<Value> {
    turn.calls
        .iter()
        .enumerate()
        .map(|(i, (name, arguments))| {
            json!({
                "id": format!("call_{n}_{i}"),
                "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() }
            })
        })
        .collect()
}

/// The whole (not streamed) response.
fn completion(request: &Value, turn: &Turn, n: u64) -> Value {
    let finish = if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut message = json!({ "role": "assistant", "content": turn.text });
    if !turn.calls.is_empty() {
        message["content"] = Value::Null;
        message["tool_calls"] = Value::Array(tool_calls(turn, n));
    }
    json!({
        "id": format!("chatcmpl-mock{n}"),
        "object": "chat.completion",
        "created": 1_735_689_600,
        "model": request["model"],
        "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
        "usage": usage(request, turn)
    })
}

/// The streamed response: text by words, each tool call's arguments in two pieces, then
/// the finish reason, the usage and `[DONE]`.
fn stream(request: &Value, turn: &Turn, n: u64) -> String {
    let chunk = |delta: Value, finish: Value| {
        let body = json!({
            "id": format!("chatcmpl-mock{n}"), "object": "chat.completion.chunk",
            "created": 1_735_689_600, "model": request["model"],
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }]
        });
        format!("data: {body}\n\n")
    };
    let mut out = chunk(json!({ "role": "assistant", "content": "" }), Value::Null);
    for word in turn.text.split_inclusive(' ') {
        out.push_str(&chunk(json!({ "content": word }), Value::Null));
    }
    for (i, call) in tool_calls(turn, n).iter().enumerate() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
        let mut half = arguments.len() / 2;
        while !arguments.is_char_boundary(half) {
            half -= 1;
        }
        out.push_str(&chunk(
            json!({ "tool_calls": [{ "index": i, "id": call["id"], "type": "function",
                    "function": { "name": call["function"]["name"], "arguments": arguments[..half] } }] }),
            Value::Null,
        ));
        out.push_str(&chunk(
            json!({ "tool_calls": [{ "index": i, "function": { "arguments": arguments[half..] } }] }),
            Value::Null,
        ));
    }
    let finish = if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push_str(&chunk(json!({}), json!(finish)));
    let last = json!({
        "id": format!("chatcmpl-mock{n}"), "object": "chat.completion.chunk",
        "created": 1_735_689_600, "model": request["model"], "choices": [],
        "usage": usage(request, turn)
    });
    out.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
    out
}

async fn serve(mut socket: TcpStream) -> std::io::Result<()> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let (path, body) = read_request(&mut socket).await?;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, content_type, reply) = if path.ends_with("/chat/completions")
        && request.is_object()
    {
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let turn = script(&request);
        if request["stream"] == true {
            (200, "text/event-stream", stream(&request, &turn, n))
        } else {
            (
                200,
                "application/json",
                completion(&request, &turn, n).to_string(),
            )
        }
    } else {
        let error = json!({ "error": { "message": "not found", "type": "invalid_request_error" } });
        (404, "application/json", error.to_string())
    };
    let head = format!(
        "HTTP/1.1 {status} Mock\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(reply.as_bytes()).await?;
    socket.shutdown().await
}

/// The request's path and body.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    const MAX: usize = 16 * 1024 * 1024;
    let mut buf = Vec::new();
    let mut piece = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = socket.read(&mut piece).await?;
        if n == 0 || buf.len() > MAX {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&piece[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut piece).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&piece[..n]);
    }
    Ok((path, body))
}
