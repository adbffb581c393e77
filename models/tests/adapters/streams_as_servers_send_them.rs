//! The streaming and parsing paths of both adapters against what real providers and proxies
//! send: content as arrays of parts, JSON bodies under another content type (read whole and
//! bounded by `max_response_bytes`), usage kept through mid-stream errors and `null` fields,
//! calls without index or id, a leading BOM, awkward framing, thinking and ping events,
//! overloaded and cut-off streams.

use agent_tree_actors::{Model, ModelResponse, TurnSink};
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{FinishReason, ModelErrorKind, ToolCall, Usage};
use serde_json::{Value, json};

use crate::anthropic::streaming as anthropic;
use crate::common::{first_turn, read_a_then_write_b, read_of, read_tool};
use crate::openai::streaming as openai;
use crate::server::{Reply, Server};

async fn turn(
    model: &impl Model,
) -> (
    Result<ModelResponse, agent_tree_actors::ModelError>,
    TurnSink,
) {
    let sink = TurnSink::recording();
    let result = model
        .turn(
            first_turn()
                .with_tools(vec![read_tool()])
                .with_sink(sink.clone()),
        )
        .await;
    (result, sink)
}

/// A server answering `body` (a whole JSON response) labelled `text/plain`.
async fn json_labelled_text(body: &Value) -> Server {
    Server::start(vec![Reply::raw(
        200,
        "text/plain; charset=utf-8",
        body.to_string().into_bytes(),
    )])
    .await
}

/// `model`'s turn reads the JSON body as a response: "Hello", 9 tokens in, 1 out.
async fn reads_hello(model: &impl Model) {
    let (result, _) = turn(model).await;
    let response = result.expect("the JSON body is read as such");
    assert_eq!(response.text, "Hello");
    assert_eq!(response.usage, Usage::tokens(9, 1));
}

/// An OpenAI-compatible stream chunk carrying `delta`, finished by `finish` if given.
pub(crate) fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-R23", "object": "chat.completion.chunk", "created": 1_735_689_600,
        "model": "gpt-test",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
    });
    format!("data: {body}\n\n")
}

fn oa_usage_chunk(prompt: u64, completion: u64) -> String {
    let body = json!({
        "id": "chatcmpl-R23", "object": "chat.completion.chunk", "created": 1_735_689_600,
        "model": "gpt-test", "choices": [],
        "usage": { "prompt_tokens": prompt, "completion_tokens": completion,
                   "total_tokens": prompt + completion },
    });
    format!("data: {body}\n\n")
}

fn an_event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn an_start(input: u64, read: u64) -> String {
    an_event(
        "message_start",
        json!({ "type": "message_start", "message": {
            "id": "msg_r23", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": input, "cache_read_input_tokens": read,
                       "cache_creation_input_tokens": 0, "output_tokens": 1 } } }),
    )
}

// ---------------------------------------------------------------------------------------
// What providers and proxies send beside the reference format
// ---------------------------------------------------------------------------------------

/// Mistral (magistral) and other compatible servers stream `delta.content` as an array of
/// parts: the streamed path reads its text parts, as the non-streamed path reads an array
/// (`content_text`), so the answer is kept.
#[tokio::test]
async fn openai_streamed_content_as_an_array_of_parts_is_read() {
    let events = [
        oa_chunk(
            json!({ "role": "assistant", "content": [{ "type": "text", "text": "Hel" }] }),
            None,
        ),
        oa_chunk(
            json!({ "content": [{ "type": "text", "text": "lo" }] }),
            None,
        ),
        oa_chunk(json!({}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let (result, sink) = turn(&openai(&server)).await;
    let response = result.expect("a complete stream");
    assert_eq!(response.text, "Hello");
    assert_eq!(sink.streamed_text(), "Hello");
}

/// A server that ignores `stream` and answers one JSON body is read as such (docs/models.md),
/// whatever its content type: a body labelled `text/plain` (as several small servers and
/// proxies label it) is one response, not an event stream without events.
#[tokio::test]
async fn openai_json_body_not_labelled_json_is_read_when_streaming() {
    let body = json!({
        "id": "chatcmpl-R23", "object": "chat.completion", "model": "gpt-test",
        "choices": [{ "index": 0, "finish_reason": "stop",
                      "message": { "role": "assistant", "content": "Hello" } }],
        "usage": { "prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10 },
    });
    let server = json_labelled_text(&body).await;
    reads_hello(&openai(&server)).await;
}

/// The same for the Anthropic adapter, which shares the stream reader: a Messages response
/// body labelled `text/plain` while streaming was asked for is read as one.
#[tokio::test]
async fn anthropic_json_body_not_labelled_json_is_read_when_streaming() {
    let body = json!({
        "id": "msg_R23", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{ "type": "text", "text": "Hello" }],
        "stop_reason": "end_turn",
        "usage": { "input_tokens": 9, "output_tokens": 1 },
    });
    let server = json_labelled_text(&body).await;
    reads_hello(&anthropic(&server)).await;
}

/// Errors raised mid-stream carry the usage known so far (docs/models.md): a server that
/// reports usage on every chunk (vLLM's `continuous_usage_stats`, several gateways) and then
/// sends an `error` object fails the call with that usage.
#[tokio::test]
async fn openai_mid_stream_error_carries_the_usage_known_so_far() {
    let with_usage = {
        let body = json!({
            "id": "chatcmpl-R23", "object": "chat.completion.chunk", "model": "gpt-test",
            "choices": [{ "index": 0, "delta": { "content": "Hel" }, "finish_reason": null }],
            "usage": { "prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32 },
        });
        format!("data: {body}\n\n")
    };
    let error = format!(
        "data: {}\n\n",
        json!({ "error": { "message": "upstream overloaded", "type": "server_error", "code": 502 } })
    );
    let server = Server::start(vec![Reply::sse([with_usage, error])]).await;
    let (result, sink) = turn(&openai(&server)).await;
    let error = result.expect_err("the stream failed");
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert_eq!(sink.reported_usage(), Usage::tokens(30, 2));
    assert_eq!(
        error.usage,
        Usage::tokens(30, 2),
        "the error carries the usage known"
    );
}

/// An unreadable stream event (a proxy's truncated line, an HTML error page spliced in) is a
/// `provider` error, and like every error raised mid-stream it carries the usage known so far:
/// the input `message_start` reported.
#[tokio::test]
async fn anthropic_unreadable_event_carries_the_usage_known_so_far() {
    let events = [
        an_start(40, 0),
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_del\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let (result, _) = turn(&anthropic(&server)).await;
    let error = result.expect_err("unreadable event");
    assert_eq!(error.kind, ModelErrorKind::Provider);
    assert_eq!(
        error.usage,
        Usage::tokens(40, 1),
        "the error carries the usage known"
    );
}

/// `message_delta.usage` is Anthropic's `MessageDeltaUsage`, whose `input_tokens` and cache
/// fields are optional (`null`, as SDK-serialising gateways and proxies send them): a field
/// left out or `null` keeps what `message_start` said, so input and cache reads stay on the
/// bill (`message_start` gives input and cache, `message_delta` the cumulative output).
#[tokio::test]
async fn anthropic_null_usage_fields_in_message_delta_keep_what_message_start_said() {
    let events = [
        an_start(25, 1000),
        an_event(
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0,
            "content_block": { "type": "text", "text": "" } }),
        ),
        an_event(
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0,
            "delta": { "type": "text_delta", "text": "Hi" } }),
        ),
        an_event(
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        an_event(
            "message_delta",
            json!({ "type": "message_delta",
            "delta": { "stop_reason": "end_turn", "stop_sequence": null },
            "usage": { "input_tokens": null, "cache_creation_input_tokens": null,
                       "cache_read_input_tokens": null, "output_tokens": 12 } }),
        ),
        an_event("message_stop", json!({ "type": "message_stop" })),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let (result, sink) = turn(&anthropic(&server)).await;
    let response = result.expect("complete");
    assert_eq!(response.text, "Hi");
    let expected = Usage::tokens(25, 12).with_cache_read(1000);
    assert_eq!(response.usage, expected);
    assert_eq!(sink.reported_usage(), expected);
}

/// Tool calls are assembled tolerating servers that send no index (docs/models.md): a server
/// that streams whole calls without `index` (and without ids), two in one delta, gives two
/// calls, each with its own name and arguments, never one merged call.
#[tokio::test]
async fn openai_two_calls_without_index_or_id_stay_two_calls() {
    let events = [
        oa_chunk(
            json!({ "role": "assistant", "tool_calls": [
                { "type": "function", "function": { "name": "read_file", "arguments": "{\"path\":\"a\"}" } },
                { "type": "function", "function": { "name": "write_file", "arguments": "{\"path\":\"b\"}" } },
            ] }),
            None,
        ),
        oa_chunk(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let (result, _) = turn(&openai(&server)).await;
    let response = result.expect("complete");
    assert_eq!(
        response.tool_calls,
        read_a_then_write_b(["call_0", "call_1"])
    );
}

/// An event stream is read as the WHATWG format says, which strips one leading U+FEFF BOM:
/// an OpenAI-compatible server that prefixes its stream with a BOM keeps its first event, the
/// first piece of the answer.
#[tokio::test]
async fn a_leading_bom_of_an_event_stream_is_stripped() {
    let events = [
        format!(
            "\u{feff}{}",
            oa_chunk(json!({ "role": "assistant", "content": "Hel" }), None)
        ),
        oa_chunk(json!({ "content": "lo" }), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let (result, sink) = turn(&openai(&server)).await;
    let response = result.expect("complete");
    assert_eq!(response.text, "Hello");
    assert_eq!(sink.streamed_text(), "Hello");
}

// ---------------------------------------------------------------------------------------
// Framing, event kinds and streams that end early
// ---------------------------------------------------------------------------------------

/// An OpenAI stream in awkward framing: CRLF and bare CR endings, `data:` without a space,
/// comments, `id:`/`retry:`/`event:` fields, pieces split mid-UTF-8 and between `\r` and
/// `\n`; two calls interleaved by index, id and name only in their first delta, arguments
/// split across many deltas; finish in a chunk of its own; usage in a final `choices: []`
/// chunk; `[DONE]` with no trailing blank line.
#[tokio::test]
async fn openai_awkward_framing_and_interleaved_calls_are_read_exactly() {
    let mut stream = String::new();
    stream.push_str(": keep-alive\r\n\r\n");
    stream.push_str("id: 1\r\nretry: 100\r\nevent: chunk\r\n");
    stream.push_str(
        &oa_chunk(
            json!({ "role": "assistant", "content": "h\u{e9}\u{1f600}" }),
            None,
        )
        .replace("\n", "\r\n"),
    );
    stream.push_str(
        &oa_chunk(json!({ "content": null, "refusal": null }), None)
            .replace("data: ", "data:")
            .replace("\n", "\r"),
    );
    let deltas = [
        json!({ "index": 1, "id": "call_b", "type": "function", "function": { "name": "write_file", "arguments": "" } }),
        json!({ "index": 0, "id": "call_a", "type": "function", "function": { "name": "read_file", "arguments": "{\"pa" } }),
        json!({ "index": 1, "function": { "arguments": "{\"path\":" } }),
        json!({ "index": 0, "function": { "arguments": "th\":\"\u{e9}" } }),
        json!({ "index": 1, "function": { "arguments": "\"b\"}" } }),
        json!({ "index": 0, "function": { "arguments": "\"}" } }),
    ];
    for d in deltas {
        stream.push_str(&oa_chunk(json!({ "tool_calls": [d] }), None));
    }
    stream.push_str(&format!(
        "data: {}\n\n",
        json!({ "id": "x", "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] })
    ));
    stream.push_str(&oa_usage_chunk(50, 20));
    stream.push_str("data: [DONE]");
    let bytes = stream.into_bytes();
    // Split at awkward places: every 7 bytes, which lands mid-`data:`, mid-character, mid-CRLF.
    let pieces: Vec<Vec<u8>> = bytes.chunks(7).map(<[u8]>::to_vec).collect();
    let server = Server::start(vec![Reply::sse(pieces)]).await;
    let (result, sink) = turn(&openai(&server)).await;
    let response = result.expect("complete");
    assert_eq!(response.text, "h\u{e9}\u{1f600}");
    assert_eq!(sink.streamed_text(), "h\u{e9}\u{1f600}");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_a", "read_file", json!({"path": "\u{e9}"})),
            ToolCall::new("call_b", "write_file", json!({"path": "b"})),
        ]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage::tokens(50, 20));
}

/// An Anthropic stream with `ping`, a thinking block, text, and a tool_use whose
/// `input_json_delta` pieces split inside a key and a multi-byte character, cut into 5-byte
/// pieces: text and input exact, thinking dropped, usage start + cumulative delta.
#[tokio::test]
async fn anthropic_thinking_ping_and_split_json_are_read_exactly() {
    let mut stream = String::new();
    stream.push_str(&an_start(40, 0));
    stream.push_str(&an_event("ping", json!({ "type": "ping" })));
    stream.push_str(&an_event(
        "content_block_start",
        json!({ "type": "content_block_start", "index": 0,
        "content_block": { "type": "thinking", "thinking": "" } }),
    ));
    stream.push_str(&an_event(
        "content_block_delta",
        json!({ "type": "content_block_delta", "index": 0,
        "delta": { "type": "thinking_delta", "thinking": "secret plan" } }),
    ));
    stream.push_str(&an_event(
        "content_block_delta",
        json!({ "type": "content_block_delta", "index": 0,
        "delta": { "type": "signature_delta", "signature": "sig" } }),
    ));
    stream.push_str(&an_event(
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": 0 }),
    ));
    stream.push_str(&an_event(
        "content_block_start",
        json!({ "type": "content_block_start", "index": 1,
        "content_block": { "type": "text", "text": "" } }),
    ));
    stream.push_str(&an_event(
        "content_block_delta",
        json!({ "type": "content_block_delta", "index": 1,
        "delta": { "type": "text_delta", "text": "Reading \u{e9}." } }),
    ));
    stream.push_str(&an_event(
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": 1 }),
    ));
    stream.push_str(&an_event("content_block_start", json!({ "type": "content_block_start", "index": 2,
        "content_block": { "type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {} } })));
    for piece in ["", "{\"pa", "th\": \"\u{e9}", "\u{1f600}\"", "}"] {
        stream.push_str(&an_event(
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 2,
            "delta": { "type": "input_json_delta", "partial_json": piece } }),
        ));
    }
    stream.push_str(&an_event(
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": 2 }),
    ));
    stream.push_str(&an_event("message_delta", json!({ "type": "message_delta",
        "delta": { "stop_reason": "tool_use", "stop_sequence": null }, "usage": { "output_tokens": 77 } })));
    stream.push_str(&an_event("message_stop", json!({ "type": "message_stop" })));
    let pieces: Vec<Vec<u8>> = stream.into_bytes().chunks(5).map(<[u8]>::to_vec).collect();
    let server = Server::start(vec![Reply::sse(pieces)]).await;
    let (result, sink) = turn(&anthropic(&server)).await;
    let response = result.expect("complete");
    assert_eq!(response.text, "Reading \u{e9}.");
    assert_eq!(sink.streamed_text(), "Reading \u{e9}.");
    assert_eq!(response.tool_calls, read_of("toolu_1", "\u{e9}\u{1f600}"));
    assert_eq!(response.usage, Usage::tokens(40, 77));
    assert_eq!(sink.reported_usage(), Usage::tokens(40, 77));
}

/// An `overloaded_error` event mid-stream is `transient` (docs: "also mid-stream") and
/// carries the usage of `message_start`; a stream cut off mid-block is `transient` too.
#[tokio::test]
async fn anthropic_overloaded_mid_stream_and_cut_mid_block_are_transient() {
    let overloaded = [
        an_start(40, 0),
        an_event(
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0,
            "content_block": { "type": "text", "text": "" } }),
        ),
        an_event(
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0,
            "delta": { "type": "text_delta", "text": "Hel" } }),
        ),
        an_event(
            "error",
            json!({ "type": "error",
            "error": { "type": "overloaded_error", "message": "Overloaded" } }),
        ),
    ];
    let cut = [
        an_start(40, 0),
        an_event("content_block_start", json!({ "type": "content_block_start", "index": 0,
            "content_block": { "type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {} } })),
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pa\"}}\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(overloaded), Reply::sse(cut).cut()]).await;
    let model = anthropic(&server);
    let (result, _) = turn(&model).await;
    let error = result.expect_err("overloaded");
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert_eq!(error.usage, Usage::tokens(40, 1));
    let (result, _) = turn(&model).await;
    let error = result.expect_err("cut off");
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert_eq!(error.usage, Usage::tokens(40, 1));
}

/// An OpenAI stream that ends (cleanly, chunked end) without a finish reason or `[DONE]`
/// is `transient`, with the usage reported.
#[tokio::test]
async fn openai_stream_without_finish_is_transient() {
    let events = [oa_chunk(json!({ "content": "Hel" }), None)];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let (result, sink) = turn(&openai(&server)).await;
    let error = result.expect_err("incomplete");
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert_eq!(sink.streamed_text(), "Hel");
}

// ---------------------------------------------------------------------------------------
// JSON bodies in a stream, within and past `max_response_bytes`
// ---------------------------------------------------------------------------------------

const MAX: usize = 1024;

fn anthropic_message(text: &str) -> Vec<u8> {
    json!({
        "id": "msg_r29", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": { "input_tokens": 5, "output_tokens": 7 },
    })
    .to_string()
    .into_bytes()
}

fn openai_completion(text: &str) -> Vec<u8> {
    json!({
        "id": "chatcmpl-R29", "object": "chat.completion", "created": 1_735_689_600,
        "model": "gpt-test",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": text },
                      "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12 },
    })
    .to_string()
    .into_bytes()
}

/// `max_response_bytes` is "the largest response read, in bytes", a stream's too: a stream
/// body that is one JSON response (a proxy that ignored `stream`) is read whole and refused
/// past the bound like any other body. A 4 KiB JSON body labelled `text/event-stream`, with
/// `max_response_bytes(1024)`, is a `provider` error on both adapters (as the same body
/// labelled `application/json` is), its first piece counted too.
#[tokio::test]
async fn a_json_body_in_a_stream_is_bounded_by_max_response_bytes() {
    let text = "x".repeat(4 * MAX);
    let server = Server::start(vec![
        Reply::raw(200, "text/event-stream", anthropic_message(&text)),
        Reply::raw(200, "text/event-stream", openai_completion(&text)),
    ])
    .await;
    let anthropic = Anthropic::builder()
        .base_url(&server.base)
        .api_key("sk-ant-test-key")
        .model("claude-test")
        .streaming(true)
        .max_response_bytes(MAX)
        .build()
        .unwrap();
    let openai = OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(true)
        .max_response_bytes(MAX)
        .build()
        .unwrap();
    let results = [
        ("anthropic", anthropic.turn(first_turn()).await),
        ("openai", openai.turn(first_turn()).await),
    ];
    for (adapter, result) in results {
        match result {
            Ok(response) => panic!(
                "{adapter}: a {}-byte body read past max_response_bytes {MAX}: {} bytes of text",
                4 * MAX,
                response.text.len()
            ),
            Err(error) => assert_eq!(error.kind, ModelErrorKind::Provider, "{adapter}: {error}"),
        }
    }
}

/// A body whose first byte (past white space) is `{` is one JSON response under another
/// content type, never an event stream: within the bound it is read whole and parsed as one,
/// on both adapters.
#[tokio::test]
async fn a_json_body_in_a_stream_within_the_bound_is_one_response() {
    let server = Server::start(vec![
        Reply::raw(200, "text/event-stream", anthropic_message("hello")),
        Reply::raw(200, "text/event-stream", openai_completion("hello")),
    ])
    .await;
    let anthropic = crate::anthropic::streaming(&server);
    let openai = crate::openai::streaming(&server);
    assert_eq!(anthropic.turn(first_turn()).await.unwrap().text, "hello");
    assert_eq!(openai.turn(first_turn()).await.unwrap().text, "hello");
}
