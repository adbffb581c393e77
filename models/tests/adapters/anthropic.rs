//! `Anthropic` against a local server answering in the Messages wire format.

use std::time::Duration;

use agent_tree_actors::{Model, TurnSink};
use agent_tree_models::Anthropic;
use agent_tree_protocol::{
    FinishReason, Message, ModelErrorKind, Sampling, ToolCall, ToolChoice, Usage,
};
use serde_json::{Value, json};

use crate::common::{
    first_turn, later_turn, read_of, read_tool, times_out_transient, turns_fail_as,
};
use crate::server::{Reply, Server};

/// The non-streaming adapter, with the key `sk-ant-test-key`, for the model `claude-test`.
pub(crate) fn adapter(server: &Server) -> Anthropic {
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
        .prompt_caching(false)
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

/// A base URL in the form Anthropic's SDKs and Claude Code's `ANTHROPIC_BASE_URL` take it,
/// without `/v1`, reaches `/v1/messages` as the `.../v1` and whole-endpoint forms do.
/// Prompt caching (on by default) marks the stable prefix with `cache_control` breakpoints,
/// at most the API's four: the last tool, the system prompt (as a text block), the last
/// message, and the previous turn's last message (the one before the last assistant
/// message), so later turns and same-type siblings read from cache. Nothing else changes.
#[tokio::test]
async fn anthropic_prompt_caching_marks_the_stable_prefix() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let model = adapter(&server);
    model.turn(later_turn()).await.unwrap();
    let cached = json!({ "type": "ephemeral" });
    let sent = server.body(0);
    assert_eq!(
        sent["system"],
        json!([{ "type": "text", "text": "You write short answers.", "cache_control": cached }])
    );
    assert_eq!(
        sent["tools"],
        json!([{
            "name": "read_file",
            "description": "Reads a file.",
            "input_schema": read_tool().input_schema,
            "cache_control": cached
        }])
    );
    assert_eq!(
        sent["messages"],
        json!([
            { "role": "user", "content": [
                { "type": "text", "text": "Summarise a.txt and b.txt", "cache_control": cached }
            ]},
            { "role": "assistant", "content": [
                { "type": "text", "text": "Reading both." },
                { "type": "tool_use", "id": "call_a", "name": "read_file", "input": { "path": "a.txt" } },
                { "type": "tool_use", "id": "call_b", "name": "read_file", "input": { "path": "b.txt" } }
            ]},
            { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "call_a", "content": "alpha" },
                { "type": "tool_result", "tool_use_id": "call_b", "content": "no such file", "is_error": true },
                { "type": "text", "text": "Be brief.", "cache_control": cached }
            ]}
        ])
    );
    let breakpoints = sent.to_string().matches("\"cache_control\"").count();
    assert!(breakpoints <= 4, "{breakpoints} breakpoints");

    // A first turn: the task alone, no tools; its one message is the last.
    model.turn(first_turn()).await.unwrap();
    let sent = server.body(1);
    assert!(sent.get("tools").is_none());
    assert_eq!(
        sent["messages"],
        json!([{ "role": "user", "content": [
            { "type": "text", "text": "Say hello", "cache_control": cached }
        ]}])
    );
}

/// With prompt caching off, no breakpoint is sent and the system prompt is a plain string.
#[tokio::test]
async fn anthropic_prompt_caching_off_sends_no_breakpoints() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let model = Anthropic::builder()
        .base_url(&server.base)
        .model("claude-test")
        .prompt_caching(false)
        .build()
        .unwrap();
    model.turn(later_turn()).await.unwrap();
    let sent = server.body(0);
    assert!(!sent.to_string().contains("cache_control"));
    assert_eq!(sent["system"], "You write short answers.");
    assert_eq!(sent["messages"][0]["content"], "Summarise a.txt and b.txt");
}

#[tokio::test]
async fn anthropic_a_base_url_without_v1_reaches_v1_messages() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let root = server.base.strip_suffix("/v1").unwrap().to_owned();
    for base in [
        root.clone(),
        format!("{root}/"),
        server.base.clone(),
        format!("{}/messages", server.base),
    ] {
        let model = Anthropic::builder()
            .base_url(&base)
            .model("claude-test")
            .build()
            .unwrap();
        model.turn(first_turn()).await.expect(&base);
    }
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, vec!["/v1/messages"; 4]);
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

/// The request's sampling is sent under the Messages API's own names: `stop_sequences`,
/// `tool_choice` objects (`any` for required), parallel calls as
/// `disable_parallel_tool_use`; no `seed` (the API has none); a temperature above the API's
/// maximum of 1 is sent as 1. The request's output limit, under the builder's ceiling, is sent.
#[tokio::test]
async fn anthropic_sampling_is_sent_under_its_own_names() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let model = Anthropic::builder()
        .base_url(&server.base)
        .model("claude-test")
        .max_tokens(8192)
        .build()
        .unwrap();
    let sampling = Sampling::default()
        .with_temperature(0.3)
        .with_top_p(0.8)
        .with_seed(7)
        .with_stop(["END"])
        .with_max_output_tokens(2048)
        .with_tool_choice(ToolChoice::Required)
        .with_parallel_tool_calls(false);
    model
        .turn(later_turn().with_sampling(sampling))
        .await
        .unwrap();
    let sent = server.body(0);
    assert_eq!(sent["temperature"], 0.3);
    assert_eq!(sent["top_p"], 0.8);
    assert_eq!(sent["stop_sequences"], json!(["END"]));
    assert_eq!(sent["max_tokens"], 2048, "the request's lower limit wins");
    assert_eq!(
        sent["tool_choice"],
        json!({ "type": "any", "disable_parallel_tool_use": true })
    );
    for absent in ["seed", "stop", "parallel_tool_calls"] {
        assert!(sent.get(absent).is_none(), "{absent}");
    }

    for (sampling, sent) in [
        (
            Sampling::default().with_tool_choice(ToolChoice::Auto),
            json!({ "type": "auto" }),
        ),
        (
            Sampling::default().with_tool_choice(ToolChoice::None),
            json!({ "type": "none" }),
        ),
        (
            Sampling::default()
                .with_tool_choice(ToolChoice::Tool("read_file".into()))
                .with_parallel_tool_calls(true),
            json!({ "type": "tool", "name": "read_file", "disable_parallel_tool_use": false }),
        ),
        (
            Sampling::default().with_parallel_tool_calls(false),
            json!({ "type": "auto", "disable_parallel_tool_use": true }),
        ),
    ] {
        model
            .turn(later_turn().with_sampling(sampling))
            .await
            .unwrap();
        let body = server.requests().pop().unwrap().body;
        assert_eq!(body["tool_choice"], sent);
        assert_eq!(
            body["max_tokens"], 8192,
            "the builder's limit is the fallback"
        );
    }

    // Past the API's range, and without tools: the temperature at its maximum, no tool choice.
    let sampling = Sampling::default()
        .with_temperature(1.5)
        .with_tool_choice(ToolChoice::Required)
        .with_parallel_tool_calls(false);
    model
        .turn(first_turn().with_sampling(sampling))
        .await
        .unwrap();
    let body = server.requests().pop().unwrap().body;
    assert_eq!(body["temperature"], 1.0);
    assert!(body.get("tool_choice").is_none());
    assert!(body.get("tools").is_none());
}

/// The context window the builder was given is reported to the runtime, never sent.
#[tokio::test]
async fn anthropic_the_context_window_is_reported_never_sent() {
    let server = Server::start(vec![text_reply("ok")]).await;
    assert_eq!(adapter(&server).context_window(&first_turn()), None);
    let model = Anthropic::builder()
        .base_url(&server.base)
        .model("claude-test")
        .context_window(200_000)
        .build()
        .unwrap();
    assert_eq!(model.context_window(&first_turn()), Some(200_000));
    model.turn(first_turn()).await.unwrap();
    assert!(!server.body(0).to_string().contains("200000"));
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
    assert_eq!(one.tool_calls, read_of("toolu_01", "a.txt"));
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
    let kinds = [
        ModelErrorKind::Transient,
        ModelErrorKind::ContextLength,
        ModelErrorKind::Auth,
        ModelErrorKind::InvalidRequest,
    ];
    turns_fail_as(&model, &kinds, "sk-ant-test-key").await;
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
    times_out_transient(&model).await;
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

/// A streamed tool call cut off by the output limit reaches the runtime as
/// `{"_raw": text}`, and goes back as `input: {}`: the Messages API takes only an object,
/// and the error result that follows the call tells the model what happened.
#[tokio::test]
async fn anthropic_a_cut_off_call_is_sent_back_as_an_empty_object() {
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
    events.extend(message_end("max_tokens", 9));
    let server = Server::start(vec![Reply::sse(events), text_reply("ok")]).await;
    let model = streaming(&server);
    let response = model
        .turn(first_turn())
        .await
        .expect("the turn does not fail");
    assert_eq!(response.finish_reason, FinishReason::Length);
    assert_eq!(
        response.tool_calls[0].input.to_value(),
        json!({ "_raw": "{\"path\": " })
    );
    let next = first_turn().with_messages(vec![
        Message::user("Say hello"),
        Message::assistant("", response.tool_calls.clone()),
        Message::tool_result("toolu_x", "the call was cut off by the output limit", true),
    ]);
    model.turn(next).await.unwrap();
    assert_eq!(
        server.body(1)["messages"][1]["content"][0],
        json!({ "type": "tool_use", "id": "toolu_x", "name": "read_file", "input": {} })
    );
}

/// An Anthropic-compatible server (llama.cpp's `/v1/messages`) refusing with a 5xx what it
/// cannot parse: `invalid_request`, never retried.
#[tokio::test]
async fn anthropic_a_server_refusing_what_it_cannot_parse_is_an_invalid_request() {
    let server = Server::start(vec![Reply::json(
        500,
        error_body(
            "api_error",
            "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101]",
        ),
    )])
    .await;
    let error = adapter(&server).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest, "{error}");
    assert_eq!(error.status, Some(500));
}

/// The first event may take as long as the first-byte timeout (a queued request, then its
/// prompt), longer than the chunk timeout; once the stream has begun, a silence past the
/// chunk timeout cuts it, `transient`, with the usage `message_start` reported. Paused time.
#[tokio::test(start_paused = true)]
async fn anthropic_a_slow_first_byte_is_waited_for_and_a_stalled_stream_is_cut() {
    let server = Server::start(vec![Reply::sse_timed([
        (Duration::from_secs(300), message_start(usage(40, 1, 0, 0))),
        (
            Duration::ZERO,
            block_start(0, json!({ "type": "text", "text": "" })),
        ),
        (
            Duration::ZERO,
            delta(0, json!({ "type": "text_delta", "text": "Hal" })),
        ),
        (
            Duration::from_secs(200),
            delta(0, json!({ "type": "text_delta", "text": "f" })),
        ),
    ])])
    .await;
    let model = Anthropic::builder()
        .base_url(&server.base)
        .model("claude-test")
        .streaming(true)
        .chunk_timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let sink = TurnSink::recording();
    let started = tokio::time::Instant::now();
    let error = model
        .turn(first_turn().with_sink(sink.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert!(error.message.contains("stalled"), "{error}");
    assert_eq!(error.usage, Usage::tokens(40, 1));
    assert_eq!(sink.streamed_text(), "Hal");
    assert_eq!(started.elapsed().as_secs(), 300 + 120);
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
