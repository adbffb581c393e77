//! `Anthropic` against a local server answering in the Messages wire format.

use std::time::{Duration, Instant};

use agent_tree_actors::{Model, TurnSink};
use agent_tree_models::Anthropic;
use agent_tree_protocol::{FinishReason, Message, ModelErrorKind, ToolCall, Usage};
use serde_json::{Value, json};

use crate::common::{first_turn, later_turn, read_tool};
use crate::server::{Reply, Server};

fn adapter(server: &Server) -> Anthropic {
    Anthropic::builder()
        .base_url(&server.base)
        .api_key("sk-ant-test-key")
        .model("claude-test")
        .build()
        .expect("adapter builds")
}

pub(crate) fn streaming(server: &Server) -> Anthropic {
    Anthropic::builder()
        .base_url(&server.base)
        .api_key("sk-ant-test-key")
        .model("claude-test")
        .streaming(true)
        .build()
        .expect("adapter builds")
}

/// A message as Anthropic sends it.
fn message(content: Value, stop: &str, usage: Value) -> Value {
    json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-20250101",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage
    })
}

fn usage(input: u64, output: u64, read: u64, write: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": output,
        "service_tier": "standard"
    })
}

fn text_reply(text: &str) -> Reply {
    Reply::json(
        200,
        message(
            json!([{ "type": "text", "text": text }]),
            "end_turn",
            usage(25, 4, 0, 0),
        ),
    )
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({ "type": "tool_use", "id": id, "name": name, "input": input })
}

fn error_body(kind: &str, text: &str) -> Value {
    json!({ "type": "error", "error": { "type": kind, "message": text } })
}

#[tokio::test]
async fn anthropic_text_answer_and_the_request_it_sent() {
    let server = Server::start(vec![text_reply("Hello there")]).await;
    let model = Anthropic::builder()
        .base_url(&server.base)
        .api_key("sk-ant-test-key")
        .model("claude-test")
        .max_tokens(512)
        .header("anthropic-beta", "test-beta")
        .build()
        .unwrap();
    let response = model.turn(later_turn()).await.expect("answered");
    assert_eq!(response.text, "Hello there");
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(response.usage, Usage::tokens(25, 4));

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test-key");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.headers["anthropic-beta"], "test-beta");
    assert!(!sent.headers.contains_key("authorization"));
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-test",
            "max_tokens": 512,
            "system": "You write short answers.",
            "messages": [
                { "role": "user", "content": "Summarise a.txt and b.txt" },
                { "role": "assistant", "content": [
                    { "type": "text", "text": "Reading both." },
                    { "type": "tool_use", "id": "call_a", "name": "read_file", "input": { "path": "a.txt" } },
                    { "type": "tool_use", "id": "call_b", "name": "read_file", "input": { "path": "b.txt" } }
                ]},
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "call_a", "content": "alpha" },
                    { "type": "tool_result", "tool_use_id": "call_b", "content": "no such file", "is_error": true },
                    { "type": "text", "text": "Be brief." }
                ]}
            ],
            "tools": [{
                "name": "read_file",
                "description": "Reads a file.",
                "input_schema": read_tool().input_schema
            }]
        })
    );
}

#[tokio::test]
async fn anthropic_default_max_tokens_and_no_model_is_refused() {
    let server = Server::start(vec![text_reply("ok")]).await;
    adapter(&server).turn(first_turn()).await.unwrap();
    let sent = server.body(0);
    assert_eq!(sent["max_tokens"], Anthropic::DEFAULT_MAX_TOKENS);
    assert!(sent.get("stream").is_none());
    assert!(sent.get("tools").is_none());
    let unnamed = Anthropic::builder().base_url(&server.base).build().unwrap();
    let error = unnamed.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
}

#[tokio::test]
async fn anthropic_one_and_several_tool_calls() {
    let server = Server::start(vec![
        Reply::json(
            200,
            message(
                json!([
                    { "type": "text", "text": "Let me read it." },
                    tool_use("toolu_01", "read_file", json!({"path": "a.txt"}))
                ]),
                "tool_use",
                usage(300, 50, 0, 0),
            ),
        ),
        Reply::json(
            200,
            message(
                json!([
                    tool_use("toolu_02", "read_file", json!({"path": "b.txt"})),
                    tool_use("toolu_03", "list", json!({}))
                ]),
                "tool_use",
                usage(300, 50, 0, 0),
            ),
        ),
    ])
    .await;
    let model = adapter(&server);
    let one = model.turn(first_turn()).await.unwrap();
    assert_eq!(one.text, "Let me read it.");
    assert_eq!(one.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        one.tool_calls,
        vec![ToolCall::new(
            "toolu_01",
            "read_file",
            json!({"path": "a.txt"})
        )]
    );
    let several = model.turn(first_turn()).await.unwrap();
    assert_eq!(
        several.tool_calls,
        vec![
            ToolCall::new("toolu_02", "read_file", json!({"path": "b.txt"})),
            ToolCall::new("toolu_03", "list", json!({})),
        ]
    );
}

#[tokio::test]
async fn anthropic_rate_limited_with_retry_after() {
    let server = Server::start(vec![
        Reply::json(
            429,
            error_body(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        )
        .header("retry-after", "12"),
    ])
    .await;
    let error = adapter(&server).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::RateLimited);
    assert_eq!(error.status, Some(429));
    assert_eq!(error.retry_after, Some(Duration::from_secs(12)));
    assert!(error.message.starts_with("Number of request tokens"));
}

#[tokio::test]
async fn anthropic_overloaded_context_length_and_auth_errors() {
    let server = Server::start(vec![
        Reply::json(529, error_body("overloaded_error", "Overloaded")),
        Reply::json(
            400,
            error_body(
                "invalid_request_error",
                "prompt is too long: 208310 tokens > 200000 maximum",
            ),
        ),
        Reply::json(401, error_body("authentication_error", "invalid x-api-key")),
        Reply::json(
            400,
            error_body("invalid_request_error", "tools.0.input_schema: required"),
        ),
    ])
    .await;
    let model = adapter(&server);
    for kind in [
        ModelErrorKind::Transient,
        ModelErrorKind::ContextLength,
        ModelErrorKind::Auth,
        ModelErrorKind::InvalidRequest,
    ] {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, kind, "{error}");
        assert!(!error.to_string().contains("sk-ant-test-key"));
    }
}

#[tokio::test]
async fn anthropic_timeout_is_transient() {
    let server = Server::start(vec![text_reply("late").after(Duration::from_secs(3))]).await;
    let model = Anthropic::builder()
        .base_url(&server.base)
        .model("claude-test")
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn anthropic_usage_with_cache_reads_and_writes() {
    let server = Server::start(vec![Reply::json(
        200,
        message(
            json!([{ "type": "text", "text": "42" }]),
            "end_turn",
            usage(18, 220, 2048, 512),
        ),
    )])
    .await;
    let response = adapter(&server).turn(first_turn()).await.unwrap();
    assert_eq!(
        response.usage,
        Usage::tokens(18, 220)
            .with_cache_read(2048)
            .with_cache_write(512)
    );
    assert_eq!(response.usage.total_tokens(), 18 + 220 + 2048 + 512);
}

#[tokio::test]
async fn anthropic_stop_reason_max_tokens_is_length() {
    let server = Server::start(vec![Reply::json(
        200,
        message(
            json!([{ "type": "thinking", "thinking": "hm", "signature": "x" }, { "type": "text", "text": "The first half" }]),
            "max_tokens",
            usage(10, 16, 0, 0),
        ),
    )])
    .await;
    let response = adapter(&server).turn(first_turn()).await.unwrap();
    assert_eq!(response.finish_reason, FinishReason::Length);
    assert_eq!(response.text, "The first half");
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start(usage: Value) -> String {
    event(
        "message_start",
        json!({ "type": "message_start", "message": {
            "id": "msg_S1", "type": "message", "role": "assistant", "content": [],
            "model": "claude-test", "stop_reason": null, "stop_sequence": null, "usage": usage
        }}),
    )
}

fn delta(index: u64, delta: Value) -> String {
    event(
        "content_block_delta",
        json!({ "type": "content_block_delta", "index": index, "delta": delta }),
    )
}

fn block_start(index: u64, block: Value) -> String {
    event(
        "content_block_start",
        json!({ "type": "content_block_start", "index": index, "content_block": block }),
    )
}

fn block_stop(index: u64) -> String {
    event(
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": index }),
    )
}

fn message_end(stop: &str, output: u64) -> Vec<String> {
    vec![
        event(
            "message_delta",
            json!({ "type": "message_delta",
                    "delta": { "stop_reason": stop, "stop_sequence": null },
                    "usage": { "output_tokens": output } }),
        ),
        event("message_stop", json!({ "type": "message_stop" })),
    ]
}

#[tokio::test]
async fn anthropic_streaming_text_tool_calls_and_usage() {
    let mut events = vec![
        message_start(usage(40, 1, 1000, 200)),
        block_start(0, json!({ "type": "text", "text": "" })),
        event("ping", json!({ "type": "ping" })),
        delta(0, json!({ "type": "text_delta", "text": "Hel" })),
        delta(0, json!({ "type": "text_delta", "text": "lo, wörld" })),
        block_stop(0),
        block_start(
            1,
            json!({ "type": "tool_use", "id": "toolu_x", "name": "read_file", "input": {} }),
        ),
        delta(1, json!({ "type": "input_json_delta", "partial_json": "" })),
        delta(
            1,
            json!({ "type": "input_json_delta", "partial_json": "{\"path\": \"a" }),
        ),
        delta(
            1,
            json!({ "type": "input_json_delta", "partial_json": "\"}" }),
        ),
        block_stop(1),
        block_start(
            2,
            json!({ "type": "tool_use", "id": "toolu_y", "name": "list", "input": {} }),
        ),
        block_stop(2),
    ];
    events.extend(message_end("tool_use", 87));
    // CRLF line ends, split inside events and inside the multi-byte `ö`.
    let whole = events.concat().replace('\n', "\r\n").into_bytes();
    let split = whole.iter().position(|&b| b == 0xc3).unwrap() + 1;
    let end = whole.len() - 3;
    let pieces = [
        &whole[..11],
        &whole[11..split],
        &whole[split..end],
        &whole[end..],
    ];
    let server = Server::start(vec![Reply::sse(pieces)]).await;
    let sink = TurnSink::recording();
    let response = streaming(&server)
        .turn(first_turn().with_sink(sink.clone()))
        .await
        .expect("assembled");
    let expected = Usage::tokens(40, 87)
        .with_cache_read(1000)
        .with_cache_write(200);
    assert_eq!(sink.streamed_text(), "Hello, wörld");
    assert_eq!(sink.reported_usage(), expected);
    assert_eq!(response.text, "Hello, wörld");
    assert_eq!(response.usage, expected);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("toolu_x", "read_file", json!({"path": "a"})),
            ToolCall::new("toolu_y", "list", json!({})),
        ]
    );
    assert_eq!(server.body(0)["stream"], true);
}

#[tokio::test]
async fn anthropic_streamed_malformed_tool_input_passes_raw() {
    let mut events = vec![
        message_start(usage(40, 1, 0, 0)),
        block_start(
            0,
            json!({ "type": "tool_use", "id": "toolu_x", "name": "read_file", "input": {} }),
        ),
        delta(
            0,
            json!({ "type": "input_json_delta", "partial_json": "{\"path\": " }),
        ),
        block_stop(0),
    ];
    events.extend(message_end("tool_use", 9));
    let server = Server::start(vec![Reply::sse(events), text_reply("ok")]).await;
    let model = streaming(&server);
    let response = model
        .turn(first_turn())
        .await
        .expect("the turn does not fail");
    assert_eq!(
        response.tool_calls[0].input.to_value(),
        json!({ "_raw": "{\"path\": " })
    );
    // Sent back as an object, as the Messages API requires.
    let next = first_turn().with_messages(vec![
        Message::user("Say hello"),
        Message::assistant("", response.tool_calls.clone()),
        Message::tool_result("toolu_x", "arguments are not valid JSON", true),
    ]);
    model.turn(next).await.unwrap();
    assert_eq!(
        server.body(1)["messages"][1]["content"][0]["input"],
        json!({ "_raw": "{\"path\": " })
    );
}

#[tokio::test]
async fn anthropic_streaming_errors_fail_cleanly() {
    let server = Server::start(vec![
        // Overloaded mid-stream: transient, usage so far kept.
        Reply::sse([
            message_start(usage(40, 1, 0, 0)),
            block_start(0, json!({ "type": "text", "text": "" })),
            delta(0, json!({ "type": "text_delta", "text": "part" })),
            event("error", error_body("overloaded_error", "Overloaded")),
        ]),
        // Cut off.
        Reply::sse([message_start(usage(40, 1, 0, 0))]).cut(),
        // Ended without a stop.
        Reply::sse([message_start(usage(40, 1, 0, 0))]),
        Reply::sse(["event: message_start\ndata: {oops\n\n"]),
    ])
    .await;
    let model = streaming(&server);
    let sink = TurnSink::recording();
    let error = model
        .turn(first_turn().with_sink(sink.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert_eq!(error.usage, Usage::tokens(40, 1));
    assert_eq!(sink.streamed_text(), "part");
    for kind in [
        ModelErrorKind::Transient,
        ModelErrorKind::Transient,
        ModelErrorKind::Provider,
    ] {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, kind, "{error}");
    }
}

#[tokio::test]
async fn anthropic_garbage_and_oversized_bodies_are_provider_errors() {
    let server = Server::start(vec![
        Reply::raw(200, "application/json", b"{\"content\": [".to_vec()),
        Reply::json(200, json!({ "type": "message" })),
        Reply::raw(200, "application/json", vec![b' '; 64 * 1024]),
    ])
    .await;
    let model = Anthropic::builder()
        .base_url(&server.base)
        .model("claude-test")
        .max_response_bytes(16 * 1024)
        .build()
        .unwrap();
    for _ in 0..3 {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Provider, "{error}");
    }
}
