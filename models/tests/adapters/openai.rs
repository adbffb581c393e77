//! `OpenAiCompat` against a local server answering in the Chat Completions wire format.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_tree_actors::{Model, ModelRequest, TurnSink};
use agent_tree_models::OpenAiCompat;
use agent_tree_protocol::{
    AgentDefinition, AgentId, FinishReason, Message, ModelErrorKind, ToolCall, Usage,
};
use serde_json::{Value, json};

use crate::common::{first_turn, later_turn, read_tool};
use crate::server::{Reply, Server};

fn adapter(server: &Server) -> OpenAiCompat {
    OpenAiCompat::builder()
        .base_url(&server.base)
        .api_key("sk-test-key")
        .model("gpt-test")
        .build()
        .expect("adapter builds")
}

pub(crate) fn streaming(server: &Server) -> OpenAiCompat {
    OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(true)
        .build()
        .expect("adapter builds")
}

/// A completion as OpenAI sends it, with `message` and `finish_reason`.
fn completion(message: Value, finish: &str, usage: Value) -> Value {
    json!({
        "id": "chatcmpl-AbC123",
        "object": "chat.completion",
        "created": 1_735_689_600,
        "model": "gpt-test-2025-01-01",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish
        }],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": "fp_0123456789"
    })
}

fn usage(prompt: u64, completion: u64, cached: u64, reasoning: u64) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": { "cached_tokens": cached, "audio_tokens": 0 },
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0
        }
    })
}

fn text_reply(text: &str) -> Reply {
    Reply::json(
        200,
        completion(
            json!({ "role": "assistant", "content": text, "refusal": null, "annotations": [] }),
            "stop",
            usage(12, 3, 0, 0),
        ),
    )
}

fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
}

fn calls_reply(calls: Vec<Value>) -> Reply {
    Reply::json(
        200,
        completion(
            json!({ "role": "assistant", "content": null, "tool_calls": calls, "refusal": null }),
            "tool_calls",
            usage(80, 40, 0, 0),
        ),
    )
}

#[tokio::test]
async fn openai_text_answer_and_the_request_it_sent() {
    let server = Server::start(vec![text_reply("Hello there")]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .api_key("sk-test-key")
        .model("gpt-test")
        .max_tokens(256)
        .header("x-extra", "extra-value")
        .build()
        .unwrap();

    let response = model.turn(later_turn()).await.expect("answered");
    assert_eq!(response.text, "Hello there");
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(response.usage, Usage::tokens(12, 3));

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test-key");
    assert_eq!(sent.headers["x-extra"], "extra-value");
    assert_eq!(sent.headers["content-type"], "application/json");
    let schema = read_tool().input_schema;
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-test",
            "messages": [
                { "role": "system", "content": "You write short answers." },
                { "role": "user", "content": "Summarise a.txt and b.txt" },
                {
                    "role": "assistant",
                    "content": "Reading both.",
                    "tool_calls": [
                        { "id": "call_a", "type": "function",
                          "function": { "name": "read_file", "arguments": "{\"path\":\"a.txt\"}" } },
                        { "id": "call_b", "type": "function",
                          "function": { "name": "read_file", "arguments": "{\"path\":\"b.txt\"}" } }
                    ]
                },
                { "role": "tool", "tool_call_id": "call_a", "content": "alpha" },
                { "role": "tool", "tool_call_id": "call_b", "content": "Error: no such file" },
                { "role": "user", "content": "Be brief." }
            ],
            "tools": [{
                "type": "function",
                "function": { "name": "read_file", "description": "Reads a file.", "parameters": schema }
            }],
            "max_tokens": 256
        })
    );
}

#[tokio::test]
async fn openai_definition_model_wins_and_no_key_sends_no_authorization() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("default-model")
        .max_completion_tokens(64)
        .build()
        .unwrap();
    let definition = AgentDefinition::new("writer", "").with_model(Some("special-model".into()));
    let request = ModelRequest::new(AgentId::new(1), Arc::new(definition))
        .with_messages(vec![Message::user("hi")]);
    model.turn(request).await.unwrap();
    let sent = &server.requests()[0];
    assert_eq!(sent.body["model"], "special-model");
    assert_eq!(sent.body["max_completion_tokens"], 64);
    assert!(sent.body.get("max_tokens").is_none());
    // No system prompt: no system message.
    assert_eq!(
        sent.body["messages"],
        json!([{ "role": "user", "content": "hi" }])
    );
    assert!(!sent.headers.contains_key("authorization"));

    let unnamed = OpenAiCompat::builder()
        .base_url(&server.base)
        .build()
        .unwrap();
    let error = unnamed.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
}

#[tokio::test]
async fn openai_one_and_several_tool_calls() {
    let server = Server::start(vec![
        calls_reply(vec![tool_call(
            "call_1",
            "read_file",
            "{\"path\":\"a.txt\"}",
        )]),
        calls_reply(vec![
            tool_call("call_2", "read_file", "{\"path\":\"b.txt\"}"),
            tool_call("call_3", "read_file", "{\"path\": \"c.txt\"}"),
            tool_call("call_4", "list", ""),
        ]),
    ])
    .await;
    let model = adapter(&server);

    let one = model
        .turn(first_turn().with_tools(vec![read_tool()]))
        .await
        .unwrap();
    assert_eq!(
        one.tool_calls,
        vec![ToolCall::new(
            "call_1",
            "read_file",
            json!({"path": "a.txt"})
        )]
    );
    assert_eq!(one.finish_reason, FinishReason::ToolCalls);
    assert_eq!(one.text, "");

    let several = model.turn(first_turn()).await.unwrap();
    assert_eq!(
        several.tool_calls,
        vec![
            ToolCall::new("call_2", "read_file", json!({"path": "b.txt"})),
            ToolCall::new("call_3", "read_file", json!({"path": "c.txt"})),
            ToolCall::new("call_4", "list", json!({})),
        ]
    );
}

#[tokio::test]
async fn openai_malformed_arguments_pass_raw_and_go_back_as_written() {
    let broken = "{\"path\": \"a.txt\"";
    let server = Server::start(vec![
        calls_reply(vec![tool_call("call_1", "read_file", broken)]),
        text_reply("fixed"),
    ])
    .await;
    let model = adapter(&server);
    let response = model
        .turn(first_turn())
        .await
        .expect("the turn does not fail");
    let call = &response.tool_calls[0];
    assert_eq!(call.input.to_value(), json!({ "_raw": broken }));

    // The next turn sends the call back exactly as the model wrote it.
    let next = first_turn().with_messages(vec![
        Message::user("Say hello"),
        Message::assistant("", response.tool_calls.clone()),
        Message::tool_result("call_1", "arguments are not valid JSON", true),
    ]);
    model.turn(next).await.unwrap();
    let sent = server.body(1);
    assert_eq!(sent["messages"][2]["content"], Value::Null);
    assert_eq!(
        sent["messages"][2]["tool_calls"][0]["function"]["arguments"],
        broken
    );
}

#[tokio::test]
async fn openai_rate_limited_with_retry_after() {
    let body = json!({ "error": {
        "message": "Rate limit reached for gpt-test on tokens per min (TPM): Limit 30000.",
        "type": "tokens", "param": null, "code": "rate_limit_exceeded"
    }});
    let server = Server::start(vec![
        Reply::json(429, body.clone()).header("retry-after", "7"),
        Reply::json(429, body).header("retry-after-ms", "1500"),
    ])
    .await;
    let model = adapter(&server);
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::RateLimited);
    assert_eq!(error.status, Some(429));
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    assert!(
        error.message.starts_with("Rate limit reached"),
        "{}",
        error.message
    );
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.retry_after, Some(Duration::from_millis(1500)));
}

#[tokio::test]
async fn openai_context_length_auth_and_server_errors() {
    let server = Server::start(vec![
        Reply::json(
            400,
            json!({ "error": {
                "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"
            }}),
        ),
        // vLLM says it in words only.
        Reply::json(
            400,
            json!({ "object": "error", "message": "This model's maximum context length is 4096 tokens.", "type": "BadRequestError", "code": 400 }),
        ),
        Reply::json(401, json!({ "error": { "message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key" }})),
        Reply::raw(502, "text/html", b"<html>Bad gateway</html>".to_vec()),
    ])
    .await;
    let model = adapter(&server);
    let kinds = [
        ModelErrorKind::ContextLength,
        ModelErrorKind::ContextLength,
        ModelErrorKind::Auth,
        ModelErrorKind::Transient,
    ];
    for kind in kinds {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, kind, "{error}");
        assert!(!error.to_string().contains("sk-test-key"));
    }
}

#[tokio::test]
async fn openai_timeout_is_transient() {
    let server = Server::start(vec![text_reply("late").after(Duration::from_secs(3))]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // Streaming: the same limit on the wait for the head.
    let server = Server::start(vec![text_reply("late").after(Duration::from_secs(3))]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(true)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
}

#[tokio::test]
async fn openai_usage_with_cached_and_reasoning_tokens() {
    let server = Server::start(vec![Reply::json(
        200,
        completion(
            json!({ "role": "assistant", "content": "42" }),
            "stop",
            usage(2006, 300, 1920, 192),
        ),
    )])
    .await;
    let response = adapter(&server).turn(first_turn()).await.unwrap();
    assert_eq!(
        response.usage,
        Usage::tokens(86, 300)
            .with_cache_read(1920)
            .with_reasoning(192)
    );
    // The provider's total is kept: nothing counted twice.
    assert_eq!(response.usage.total_tokens(), 2306);
}

#[tokio::test]
async fn openai_finish_reason_length() {
    let server = Server::start(vec![Reply::json(
        200,
        completion(
            json!({ "role": "assistant", "content": "The first half" }),
            "length",
            usage(10, 16, 0, 0),
        ),
    )])
    .await;
    let response = adapter(&server).turn(first_turn()).await.unwrap();
    assert_eq!(response.finish_reason, FinishReason::Length);
    assert_eq!(response.text, "The first half");
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-S1", "object": "chat.completion.chunk", "created": 1_735_689_600,
        "model": "gpt-test", "system_fingerprint": "fp_1",
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        "usage": null
    });
    format!("data: {body}\n\n")
}

#[tokio::test]
async fn openai_streaming_text_tool_calls_and_usage() {
    let usage_chunk = json!({
        "id": "chatcmpl-S1", "object": "chat.completion.chunk", "created": 1_735_689_600,
        "model": "gpt-test", "choices": [], "usage": usage(500, 60, 384, 20)
    });
    let events = [
        chunk(
            json!({ "role": "assistant", "content": "", "refusal": null }),
            None,
        ),
        chunk(json!({ "content": "Hel" }), None),
        chunk(json!({ "content": "lo, wörld" }), None),
        chunk(
            json!({ "tool_calls": [{ "index": 0, "id": "call_x", "type": "function",
                                     "function": { "name": "read_file", "arguments": "" } }] }),
            None,
        ),
        chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "{\"pa" } }] }),
            None,
        ),
        chunk(
            json!({ "tool_calls": [{ "index": 1, "id": "call_y", "type": "function",
                                     "function": { "name": "read_file", "arguments": "{\"path\":" } }] }),
            None,
        ),
        chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "th\":\"a\"}" } }] }),
            None,
        ),
        chunk(
            json!({ "tool_calls": [{ "index": 1, "function": { "arguments": "\"b\"}" } }] }),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        format!(": keep-alive\n\ndata: {usage_chunk}\n\n"),
        "data: [DONE]\n\n".to_owned(),
    ];
    // Split the stream at awkward places: inside events, inside the multi-byte `ö`.
    let whole = events.concat().into_bytes();
    let split = whole.iter().position(|&b| b == 0xc3).unwrap() + 1;
    let end = whole.len() - 9;
    let pieces = [
        &whole[..7],
        &whole[7..split],
        &whole[split..end],
        &whole[end..],
    ];
    let server = Server::start(vec![Reply::sse(pieces)]).await;

    let sink = TurnSink::recording();
    let response = streaming(&server)
        .turn(
            first_turn()
                .with_tools(vec![read_tool()])
                .with_sink(sink.clone()),
        )
        .await
        .expect("assembled");
    let expected_usage = Usage::tokens(116, 60)
        .with_cache_read(384)
        .with_reasoning(20);
    assert_eq!(sink.streamed_text(), "Hello, wörld");
    assert_eq!(sink.reported_usage(), expected_usage);
    assert_eq!(response.text, "Hello, wörld");
    assert_eq!(response.usage, expected_usage);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_x", "read_file", json!({"path": "a"})),
            ToolCall::new("call_y", "read_file", json!({"path": "b"})),
        ]
    );
    let sent = server.body(0);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({ "include_usage": true }));
}

#[tokio::test]
async fn openai_streaming_cut_off_or_garbage_fails_cleanly() {
    let server = Server::start(vec![
        // Cut before any finish reason: transient, the text so far was streamed.
        Reply::sse([chunk(json!({ "content": "partial" }), None)]).cut(),
        // The body ends cleanly but without a finish reason or [DONE].
        Reply::sse([chunk(json!({ "content": "partial" }), None)]),
        // An event that is not JSON.
        Reply::sse(["data: {not json\n\n"]),
        // An error event mid-stream.
        Reply::sse([
            chunk(json!({ "content": "x" }), None),
            "data: {\"error\": {\"message\": \"upstream overloaded\", \"code\": 502}}\n\n"
                .to_owned(),
        ]),
    ])
    .await;
    let model = streaming(&server);
    let sink = TurnSink::recording();
    let error = model
        .turn(first_turn().with_sink(sink.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert_eq!(sink.streamed_text(), "partial");
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Provider, "{error}");
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert_eq!(error.message, "upstream overloaded");
}

#[tokio::test]
async fn openai_garbage_and_oversized_bodies_are_provider_errors() {
    let server = Server::start(vec![
        Reply::raw(200, "application/json", b"{\"choices\": [".to_vec()),
        Reply::raw(200, "text/html", b"<html>hi</html>".to_vec()),
        Reply::json(200, json!({ "object": "chat.completion", "choices": [] })),
        Reply::raw(200, "application/json", vec![b' '; 64 * 1024]),
    ])
    .await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .max_response_bytes(16 * 1024)
        .build()
        .unwrap();
    for _ in 0..4 {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Provider, "{error}");
    }
}

#[tokio::test]
async fn openai_redirects_are_not_followed_so_the_key_stays_put() {
    let elsewhere = Server::start(vec![text_reply("followed")]).await;
    let location = format!("{}/chat/completions", elsewhere.base);
    let server = Server::start(vec![
        Reply::raw(307, "text/plain", Vec::new()).header("location", &location),
    ])
    .await;
    let error = adapter(&server).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.status, Some(307));
    assert_eq!(error.kind, ModelErrorKind::Provider);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(elsewhere.requests().is_empty());
}
