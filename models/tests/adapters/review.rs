//! Review of issue 9 (the adapters): each test here fails against the code as it landed
//! and names the behaviour promised.

use std::time::Duration;

use agent_tree_actors::{Model, TurnSink};
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{ModelErrorKind, ToolCall};
use serde_json::{Value, json};

use crate::common::{first_turn, read_tool};
use crate::server::{Reply, Server};

fn openai(server: &Server, streaming: bool) -> OpenAiCompat {
    OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(streaming)
        .build()
        .expect("adapter builds")
}

fn anthropic(server: &Server) -> Anthropic {
    Anthropic::builder()
        .base_url(&server.base)
        .api_key("sk-ant-test-key")
        .model("claude-test")
        .build()
        .expect("adapter builds")
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-S1", "object": "chat.completion.chunk", "created": 1_735_689_600,
        "model": "gpt-test",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
    });
    format!("data: {body}\n\n")
}

fn call_delta(index: u64, id: &str, name: &str, arguments: &str) -> String {
    chunk(
        json!({ "tool_calls": [{ "index": index, "id": id, "type": "function",
                                 "function": { "name": name, "arguments": arguments } }] }),
        None,
    )
}

/// Ollama's OpenAI-compatible stream gives every tool call of a turn `index: 0` (each whole,
/// with its own id): two calls with distinct ids are two calls, not one call named
/// `read_filewrite_file` with the arguments of both run together.
#[tokio::test]
async fn openai_streamed_calls_reusing_index_zero_with_distinct_ids_stay_apart() {
    let events = [
        call_delta(0, "call_a", "read_file", "{\"path\":\"a\"}"),
        call_delta(0, "call_b", "write_file", "{\"path\":\"b\"}"),
        chunk(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let response = openai(&server, true)
        .turn(
            first_turn()
                .with_tools(vec![read_tool()])
                .with_sink(TurnSink::recording()),
        )
        .await
        .expect("assembled");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_a", "read_file", json!({"path": "a"})),
            ToolCall::new("call_b", "write_file", json!({"path": "b"})),
        ]
    );
}

/// Streamed tool calls are the message's calls in `index` order, whichever index the
/// server happened to send first (results go back, and calls run, in call order).
#[tokio::test]
async fn openai_streamed_tool_calls_come_back_in_index_order() {
    let events = [
        call_delta(1, "call_b", "read_file", "{\"path\":\"b\"}"),
        call_delta(0, "call_a", "read_file", "{\"path\":\"a\"}"),
        chunk(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::sse(events)]).await;
    let response = openai(&server, true)
        .turn(first_turn().with_tools(vec![read_tool()]))
        .await
        .expect("assembled");
    let ids: Vec<&str> = response.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_b"]);
}

/// Anthropic's own words for a prompt that does not fit: "input length and `max_tokens`
/// exceed context limit: 178959 + 64000 > 200000" is a context-length error, not a plain
/// invalid request.
#[tokio::test]
async fn anthropic_input_and_max_tokens_over_the_context_limit_is_context_length() {
    let body = json!({
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again"
        }
    });
    let server = Server::start(vec![Reply::json(400, body)]).await;
    let error = anthropic(&server).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::ContextLength, "{error}");
}

/// A retry-after too large to hold in a `Duration` still asks for a long wait (past any
/// `max_wait`, so the call fails at once): it is not dropped, which would have the tree
/// retry after a short backoff as if the provider had said nothing.
#[tokio::test]
async fn openai_a_huge_retry_after_is_kept_as_a_long_wait() {
    let body = json!({ "error": { "message": "slow down", "type": "requests", "code": "rate_limit_exceeded" } });
    let server = Server::start(vec![
        Reply::json(429, body).header("retry-after", "99999999999999999999"),
    ])
    .await;
    let error = openai(&server, false).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::RateLimited);
    assert!(
        error
            .retry_after
            .is_some_and(|wait| wait > Duration::from_secs(86_400)),
        "retry-after: {:?}",
        error.retry_after
    );
}

/// Gemini's OpenAI-compatible endpoint says a prompt does not fit as "The input token count
/// (1200293) exceeds the maximum number of tokens allowed (1048576)": a context-length
/// error, so the application can compact instead of seeing a plain invalid request.
#[tokio::test]
async fn openai_gemini_input_token_count_over_the_maximum_is_context_length() {
    let body = json!({
        "error": {
            "code": 400,
            "message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
            "status": "INVALID_ARGUMENT"
        }
    });
    let server = Server::start(vec![Reply::json(400, body)]).await;
    let error = openai(&server, false).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::ContextLength, "{error}");
}
