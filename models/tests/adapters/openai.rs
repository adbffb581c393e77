//! `OpenAiCompat` against a local server answering in the Chat Completions wire format.

use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::{Model, ModelRequest, TurnSink};
use agent_tree_models::OpenAiCompat;
use agent_tree_protocol::{
    AgentDefinition, AgentId, FinishReason, Message, ModelErrorKind, Sampling, ToolCall,
    ToolChoice, Usage,
};
use serde_json::{Value, json};

use crate::common::{
    first_turn, later_turn, read_of, read_tool, times_out_transient, turns_fail_as,
};
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

/// The request's sampling is sent under Chat Completions' own names; its output limit, lower
/// than the builder's ceiling, is the one sent.
#[tokio::test]
async fn openai_sampling_is_sent_under_its_own_names() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .max_tokens(4096)
        .build()
        .unwrap();
    let sampling = Sampling::default()
        .with_temperature(0.2)
        .with_top_p(0.9)
        .with_seed(42)
        .with_stop(["END", "STOP"])
        .with_max_output_tokens(1024)
        .with_tool_choice(ToolChoice::Required)
        .with_parallel_tool_calls(false);
    model
        .turn(later_turn().with_sampling(sampling.clone()))
        .await
        .unwrap();
    let sent = server.body(0);
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["top_p"], 0.9);
    assert_eq!(sent["seed"], 42);
    assert_eq!(sent["stop"], json!(["END", "STOP"]));
    assert_eq!(sent["max_tokens"], 1024, "the request's lower limit wins");
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["parallel_tool_calls"], false);

    for (choice, sent) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (
            ToolChoice::Tool("read_file".into()),
            json!({ "type": "function", "function": { "name": "read_file" } }),
        ),
    ] {
        let request = later_turn().with_sampling(Sampling::default().with_tool_choice(choice));
        model.turn(request).await.unwrap();
        let body = server.requests().pop().unwrap().body;
        assert_eq!(body["tool_choice"], sent);
        assert_eq!(
            body["max_tokens"], 4096,
            "the builder's limit is the fallback"
        );
        for unset in [
            "temperature",
            "top_p",
            "seed",
            "stop",
            "parallel_tool_calls",
        ] {
            assert!(body.get(unset).is_none(), "{unset} is not sent unset");
        }
    }
}

/// Without tools offered, neither `tool_choice` nor `parallel_tool_calls` is sent (servers
/// refuse them); a builder that chose `max_completion_tokens` gets the request's limit (under
/// its ceiling) under that name.
#[tokio::test]
async fn openai_tool_settings_go_only_with_tools() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("o-test")
        .max_completion_tokens(4096)
        .build()
        .unwrap();
    let sampling = Sampling::default()
        .with_max_output_tokens(512)
        .with_tool_choice(ToolChoice::Required)
        .with_parallel_tool_calls(false);
    model
        .turn(first_turn().with_sampling(sampling))
        .await
        .unwrap();
    let sent = server.body(0);
    assert!(sent.get("tool_choice").is_none());
    assert!(sent.get("parallel_tool_calls").is_none());
    assert_eq!(sent["max_completion_tokens"], 512);
    assert!(sent.get("max_tokens").is_none());
}

/// The context window the builder was given is reported to the runtime (so a length
/// continuation never sends what cannot fit) and never sent to the server.
#[tokio::test]
async fn openai_the_context_window_is_reported_never_sent() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let unknown = adapter(&server);
    assert_eq!(unknown.context_window(&first_turn()), None);
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .context_window(32_768)
        .build()
        .unwrap();
    assert_eq!(model.context_window(&later_turn()), Some(32_768));
    model.turn(first_turn()).await.unwrap();
    assert!(!server.body(0).to_string().contains("32768"));
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
    assert_eq!(one.tool_calls, read_of("call_1", "a.txt"));
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

/// A tool call cut off by the output limit reaches the runtime as `{"_raw": text}`, and
/// goes back to the server as arguments `"{}"`: servers parse the arguments of every call in
/// the history (llama.cpp answers a 500 to text that is not JSON), and the error result
/// that follows the call tells the model what happened.
#[tokio::test]
async fn openai_a_cut_off_call_is_sent_back_as_an_empty_object() {
    let broken = "{\"path\": \"a.t";
    let cut_off = Reply::json(
        200,
        completion(
            json!({ "role": "assistant", "content": null,
                    "tool_calls": [tool_call("call_1", "read_file", broken)] }),
            "length",
            usage(80, 16, 0, 0),
        ),
    );
    let server = Server::start(vec![cut_off, text_reply("fixed")]).await;
    let model = adapter(&server);
    let response = model
        .turn(first_turn())
        .await
        .expect("the turn does not fail");
    assert_eq!(response.finish_reason, FinishReason::Length);
    let call = &response.tool_calls[0];
    assert_eq!(call.input.to_value(), json!({ "_raw": broken }));

    let next = first_turn().with_messages(vec![
        Message::user("Say hello"),
        Message::assistant("", response.tool_calls.clone()),
        Message::tool_result("call_1", "the call was cut off by the output limit", true),
    ]);
    model.turn(next).await.unwrap();
    let sent = server.body(1);
    assert_eq!(sent["messages"][2]["content"], Value::Null);
    assert_eq!(
        sent["messages"][2]["tool_calls"][0]["function"],
        json!({ "name": "read_file", "arguments": "{}" })
    );
    assert_eq!(
        sent["messages"][3],
        json!({ "role": "tool", "tool_call_id": "call_1",
                "content": "Error: the call was cut off by the output limit" })
    );
}

/// An input that is JSON but not an object (a model that wrote `[1]` or `"text"`) is sent
/// back as `"{}"` too: the servers that render the history read arguments as an object.
#[tokio::test]
async fn openai_arguments_that_are_not_an_object_are_sent_back_as_an_empty_object() {
    let server = Server::start(vec![text_reply("ok")]).await;
    let next = first_turn().with_messages(vec![
        Message::user("Say hello"),
        Message::assistant(
            "",
            vec![
                ToolCall::new("call_1", "read_file", json!(["a.txt"])),
                ToolCall::new("call_2", "read_file", json!({ "path": "b.txt" })),
            ],
        ),
        Message::tool_result("call_1", "expected an object", true),
        Message::tool_result("call_2", "beta", false),
    ]);
    adapter(&server).turn(next).await.unwrap();
    let calls = &server.body(0)["messages"][2]["tool_calls"];
    assert_eq!(calls[0]["function"]["arguments"], "{}");
    assert_eq!(calls[1]["function"]["arguments"], "{\"path\":\"b.txt\"}");
}

/// A server that cannot parse the request says so with a 5xx (llama.cpp: 500 "Failed to
/// parse tool call arguments as JSON"): the same body again gets the same answer, so it is
/// `invalid_request`, never retried; other 5xx stay `transient`.
#[tokio::test]
async fn openai_a_server_refusing_what_it_cannot_parse_is_an_invalid_request() {
    let server = Server::start(vec![
        Reply::json(
            500,
            json!({ "error": {
                "code": 500,
                "message": "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, column 13: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal",
                "type": "server_error"
            }}),
        ),
        Reply::json(500, json!({ "error": { "message": "Invalid JSON in request body", "type": "server_error" } })),
        Reply::json(502, json!({ "error": { "message": "failed to parse the upstream response", "type": "server_error" } })),
        Reply::json(500, json!({ "error": { "message": "The server had an error", "type": "server_error" } })),
    ])
    .await;
    let model = adapter(&server);
    for kind in [
        ModelErrorKind::InvalidRequest,
        ModelErrorKind::InvalidRequest,
        ModelErrorKind::Transient,
        ModelErrorKind::Transient,
    ] {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, kind, "{error}");
        assert_eq!(error.is_retryable(), kind == ModelErrorKind::Transient);
    }
    assert_eq!(server.requests().len(), 4);
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
    turns_fail_as(&model, &kinds, "sk-test-key").await;
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
    times_out_transient(&model).await;

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

/// A streamed OpenAI-compatible answer: "Hello" and a finish.
fn hello_stream() -> Vec<String> {
    vec![
        chunk(json!({ "role": "assistant", "content": "Hel" }), None),
        chunk(json!({ "content": "lo" }), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
}

/// A streamed call's first byte may take as long as the first-byte timeout (a busy
/// one-slot server queues the request, then processes its prompt), longer than the chunk
/// timeout, whether the server holds back the head or sends the head at once and then
/// nothing until its first token. Paused time: the waits are exact and instant.
#[tokio::test(start_paused = true)]
async fn openai_a_slow_first_byte_is_within_the_first_byte_timeout() {
    let five_minutes = Duration::from_secs(300);
    let late_head = Reply::sse(hello_stream()).after(five_minutes);
    let mut pieces: Vec<(Duration, String)> = hello_stream()
        .into_iter()
        .map(|p| (Duration::ZERO, p))
        .collect();
    pieces[0].0 = five_minutes;
    let late_body = Reply::sse_timed(pieces);
    let server = Server::start(vec![late_head, late_body]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(true)
        .build()
        .unwrap();
    for _ in 0..2 {
        let started = tokio::time::Instant::now();
        let response = model
            .turn(first_turn())
            .await
            .expect("within the first-byte timeout");
        assert_eq!(response.text, "Hello");
        assert!(started.elapsed() >= five_minutes);
    }
}

/// Past the first-byte timeout a streamed call fails `transient`, at that timeout, whether
/// the head or the first piece of the body is late.
#[tokio::test(start_paused = true)]
async fn openai_no_first_byte_within_its_timeout_is_transient() {
    let late = Duration::from_secs(400);
    let mut pieces: Vec<(Duration, String)> = hello_stream()
        .into_iter()
        .map(|p| (Duration::ZERO, p))
        .collect();
    pieces[0].0 = late;
    let server = Server::start(vec![
        Reply::sse(hello_stream()).after(late),
        Reply::sse_timed(pieces),
    ])
    .await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(true)
        .first_byte_timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    for _ in 0..2 {
        let started = tokio::time::Instant::now();
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
        assert!(error.message.contains("first byte"), "{error}");
        assert_eq!(started.elapsed().as_secs(), 300);
    }
}

/// Once a stream has begun, a silence longer than the chunk timeout cuts it (`transient`,
/// the text so far streamed), while pieces closer together never do, however long the
/// whole stream takes.
#[tokio::test(start_paused = true)]
async fn openai_a_stream_silent_past_the_chunk_timeout_is_cut() {
    let minute = Duration::from_secs(60);
    let steady: Vec<(Duration, String)> = (0..20)
        .map(|_| (minute, chunk(json!({ "content": "." }), None)))
        .chain([(minute, chunk(json!({}), Some("stop")))])
        .collect();
    let stalled = vec![
        (Duration::ZERO, chunk(json!({ "content": "Hal" }), None)),
        (
            Duration::from_secs(200),
            chunk(json!({ "content": "f" }), Some("stop")),
        ),
    ];
    let server = Server::start(vec![Reply::sse_timed(steady), Reply::sse_timed(stalled)]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(true)
        .chunk_timeout(Duration::from_secs(90))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let response = model.turn(first_turn()).await.expect("a steady stream");
    assert_eq!(response.text, ".".repeat(20));
    assert!(started.elapsed() >= Duration::from_secs(20 * 60));

    let sink = TurnSink::recording();
    let started = tokio::time::Instant::now();
    let error = model
        .turn(first_turn().with_sink(sink.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert!(error.message.contains("stalled"), "{error}");
    assert_eq!(started.elapsed().as_secs(), 90);
    assert_eq!(sink.streamed_text(), "Hal");
}

/// Without streaming, the whole-call timeout bounds the call (the server answers only
/// once it has generated everything); the first-byte and chunk timeouts do not apply.
#[tokio::test(start_paused = true)]
async fn openai_a_call_without_streaming_is_bounded_by_the_whole_call_timeout() {
    let server = Server::start(vec![
        text_reply("slow but in time").after(Duration::from_secs(500)),
        text_reply("too late").after(Duration::from_secs(700)),
    ])
    .await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .first_byte_timeout(Duration::from_secs(60))
        .chunk_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let response = model.turn(first_turn()).await.expect("within 600 s");
    assert_eq!(response.text, "slow but in time");
    let started = tokio::time::Instant::now();
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Transient, "{error}");
    assert_eq!(started.elapsed().as_secs(), 600);
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

/// The builder's output limit is a ceiling for every call through the adapter: a request
/// (a definition's or the tree's sampling) may lower it, never raise it, and a request that
/// sets none is sent the builder's.
#[tokio::test]
async fn the_builders_output_limit_is_a_ceiling_a_request_never_raises() {
    let server = Server::start(vec![text_reply("a"), text_reply("b"), text_reply("c")]).await;
    let model = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .max_tokens(300)
        .build()
        .unwrap();
    for limit in [Some(4096), Some(100), None] {
        let sampling = match limit {
            Some(limit) => Sampling::default().with_max_output_tokens(limit),
            None => Sampling::default(),
        };
        model
            .turn(later_turn().with_sampling(sampling))
            .await
            .unwrap();
    }
    let sent: Vec<_> = (0..3)
        .map(|i| server.body(i)["max_tokens"].clone())
        .collect();
    assert_eq!(sent, [json!(300), json!(100), json!(300)]);
}
