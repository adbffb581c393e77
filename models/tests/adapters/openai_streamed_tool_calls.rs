//! Streamed OpenAI-compatible tool calls are assembled by call, as the servers that speak the
//! format send them: calls sharing `index: 0` but carrying distinct ids stay apart (Ollama),
//! and the calls come back in `index` order whichever index arrived first.

use agent_tree_actors::{Model, TurnSink};
use agent_tree_protocol::ToolCall;
use serde_json::{Value, json};

use crate::common::{first_turn, read_tool};
use crate::openai::streaming;
use crate::server::{Reply, Server};

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
    let response = streaming(&server)
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
    let response = streaming(&server)
        .turn(first_turn().with_tools(vec![read_tool()]))
        .await
        .expect("assembled");
    let ids: Vec<&str> = response.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_b"]);
}
