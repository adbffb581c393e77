//! Streamed OpenAI-compatible tool calls are assembled by call, as the servers that speak the
//! format send them: calls sharing `index: 0` but carrying distinct ids stay apart (Ollama),
//! and the calls come back in `index` order whichever index arrived first.

use agent_tree_actors::{Model, ModelRequest, TurnSink};
use agent_tree_protocol::ToolCall;
use serde_json::json;

use crate::common::{first_turn, read_a_then_write_b, read_tool};
use crate::openai::streaming;
use crate::server::{Reply, Server};
use crate::streams_as_servers_send_them::oa_chunk as chunk;

fn call_delta(index: u64, id: &str, name: &str, arguments: &str) -> String {
    chunk(
        json!({ "tool_calls": [{ "index": index, "id": id, "type": "function",
                                 "function": { "name": name, "arguments": arguments } }] }),
        None,
    )
}

/// The tool calls the streaming adapter assembles for `request` from a server answering one
/// stream of `deltas`, then the `tool_calls` finish and `[DONE]`.
async fn calls_streamed(
    deltas: impl IntoIterator<Item = String>,
    request: ModelRequest,
) -> Vec<ToolCall> {
    let mut events: Vec<String> = deltas.into_iter().collect();
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push("data: [DONE]\n\n".to_owned());
    let server = Server::start(vec![Reply::sse(events)]).await;
    let response = streaming(&server).turn(request).await.expect("assembled");
    response.tool_calls
}

/// Ollama's OpenAI-compatible stream gives every tool call of a turn `index: 0` (each whole,
/// with its own id): two calls with distinct ids are two calls, not one call named
/// `read_filewrite_file` with the arguments of both run together.
#[tokio::test]
async fn openai_streamed_calls_reusing_index_zero_with_distinct_ids_stay_apart() {
    let events = [
        call_delta(0, "call_a", "read_file", "{\"path\":\"a\"}"),
        call_delta(0, "call_b", "write_file", "{\"path\":\"b\"}"),
    ];
    let request = first_turn()
        .with_tools(vec![read_tool()])
        .with_sink(TurnSink::recording());
    let calls = calls_streamed(events, request).await;
    assert_eq!(calls, read_a_then_write_b(["call_a", "call_b"]));
}

/// Streamed tool calls are the message's calls in `index` order, whichever index the
/// server happened to send first (results go back, and calls run, in call order).
#[tokio::test]
async fn openai_streamed_tool_calls_come_back_in_index_order() {
    let events = [
        call_delta(1, "call_b", "read_file", "{\"path\":\"b\"}"),
        call_delta(0, "call_a", "read_file", "{\"path\":\"a\"}"),
    ];
    let calls = calls_streamed(events, first_turn().with_tools(vec![read_tool()])).await;
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_b"]);
}
