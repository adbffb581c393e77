//! The adapters inside a real tree: the tree's retry policy retries a server error (the
//! adapters never do), and an abort drops the HTTP request (the server sees its connection
//! closed). Real time throughout: paused time would fire the client's timeouts.

use std::time::Duration;

use agent_tree_actors::Model;
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{AgentStatus, SpawnRequest, Usage};
use serde_json::json;

use crate::common::{first_turn, tree};
use crate::routed::{Mock, Resp, oa_json_text, oa_usage};
use crate::server::{Reply, Server};

fn openai(server: &Server, streaming: bool) -> OpenAiCompat {
    OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(streaming)
        .build()
        .unwrap()
}

fn anthropic(server: &Server, streaming: bool) -> Anthropic {
    Anthropic::builder()
        .base_url(&server.base)
        .api_key("sk-ant-test-key")
        .model("claude-test")
        .streaming(streaming)
        .build()
        .unwrap()
}

/// Runs one `writer` agent on `model` and checks it completed with `answer` after exactly
/// two calls, billed `usage`.
async fn completes_on_the_second_attempt(model: impl Model, server: &Server, usage: Usage) {
    let tree = tree(model).await;
    let outcome = tree
        .run(SpawnRequest::new("writer", "Say hello"))
        .await
        .expect("admitted");
    assert!(outcome.is_completed(), "{}", outcome.summary());
    assert_eq!(outcome.text.as_deref(), Some("Hello after a retry"));
    assert_eq!(server.requests().len(), 2, "one failed attempt, one retry");
    tree.idle().await;
    let snapshot = tree.snapshot();
    snapshot.check_usage().expect("usage adds up");
    let writer = snapshot
        .agents()
        .find(|r| r.agent_type == "writer")
        .unwrap();
    assert_eq!(writer.own, usage);
    tree.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_server_error_then_success_through_a_tree() {
    let server = Server::start(vec![
        Reply::json(500, json!({ "error": { "message": "The server had an error", "type": "server_error" } })),
        Reply::json(
            200,
            json!({
                "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "gpt-test",
                "choices": [{ "index": 0, "finish_reason": "stop",
                              "message": { "role": "assistant", "content": "Hello after a retry" } }],
                "usage": { "prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35 }
            }),
        ),
    ])
    .await;
    completes_on_the_second_attempt(openai(&server, false), &server, Usage::tokens(30, 5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_overloaded_then_success_through_a_tree() {
    let server = Server::start(vec![
        Reply::json(529, json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } })),
        Reply::json(
            200,
            json!({
                "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{ "type": "text", "text": "Hello after a retry" }],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": { "input_tokens": 30, "output_tokens": 5 }
            }),
        ),
    ])
    .await;
    completes_on_the_second_attempt(anthropic(&server, false), &server, Usage::tokens(30, 5)).await;
}

/// A server that cannot parse a request says so with a 500 (llama.cpp: "Failed to parse
/// tool call arguments as JSON"): the agent fails at once with `model_error`, the same body
/// is never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_server_cannot_parse_is_not_retried() {
    let server = Server::start(vec![
        Reply::json(
            500,
            json!({ "error": { "code": 500, "type": "server_error",
                "message": "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, column 13" } }),
        ),
        Reply::json(500, json!({ "error": { "message": "unreachable" } })),
    ])
    .await;
    let tree = tree(openai(&server, false)).await;
    let outcome = tree
        .run(SpawnRequest::new("writer", "Say hello"))
        .await
        .expect("admitted");
    assert_eq!(outcome.status, AgentStatus::Failed, "{}", outcome.summary());
    assert!(
        outcome.summary().contains("Failed to parse"),
        "{}",
        outcome.summary()
    );
    assert_eq!(server.requests().len(), 1, "not retried");
    tree.shutdown().await;
}

/// A tool call cut off by the output limit (`finish_reason: length`, arguments that are not
/// JSON) is answered with an error result, and the next turn is one llama.cpp's server
/// takes: the call goes back with arguments `"{}"`, so the agent carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_call_does_not_break_the_next_turn() {
    let mock = Mock::start(|req, _| match req.turn() {
        0 => Resp::json(
            200,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{ "index": 0, "finish_reason": "length",
                              "message": { "role": "assistant", "content": null, "tool_calls": [
                                  { "id": "call_0", "type": "function",
                                    "function": { "name": "read_file", "arguments": "{\"path\": \"a.t" } }
                              ] } }],
                "usage": oa_usage(20, 16)
            }),
        ),
        _ => oa_json_text("done", (40, 2)),
    })
    .await;
    let model = OpenAiCompat::builder()
        .base_url(&mock.base)
        .model("gpt-test")
        .build()
        .unwrap();
    let tree = tree(model).await;
    let outcome = tree
        .run(SpawnRequest::new("writer", "Say hello"))
        .await
        .expect("admitted");
    assert_eq!(mock.refusals(), Vec::<String>::new());
    assert!(outcome.is_completed(), "{}", outcome.summary());
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let second = mock.requests().pop().unwrap();
    let messages = second.messages();
    let call = messages
        .iter()
        .find_map(|m| m["tool_calls"].get(0))
        .expect("the call is in the history");
    assert_eq!(call["function"]["arguments"], "{}");
    assert_eq!(second.tool_results().len(), 1, "the call is answered");
    assert!(second.tool_results()[0].starts_with("Error"));
    tree.shutdown().await;
}

/// Starts one agent on `model` against a server that never answers, aborts it once the
/// request has arrived, and checks the server sees the connection closed.
async fn abort_closes_the_connection(model: impl Model, server: &Server) {
    let tree = tree(model).await;
    let handle = tree
        .spawn(SpawnRequest::new("writer", "Say hello"))
        .await
        .expect("admitted");
    server.until_received(1).await;
    assert!(
        !server.until_closed(Duration::from_millis(200)).await,
        "the request is in flight, its connection open"
    );
    tree.abort(handle.id()).expect("abort");
    assert!(
        server.until_closed(Duration::from_secs(5)).await,
        "the abort closed the connection"
    );
    tree.idle().await;
    let record = tree.record(handle.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted);
    tree.shutdown().await;
}

/// [`abort_closes_the_connection`] of the adapter `adapter` builds for a hanging server, not
/// streaming, then streaming.
async fn abort_closes_the_connection_streaming_or_not<M: Model + 'static>(
    adapter: impl Fn(&Server, bool) -> M,
) {
    for streaming in [false, true] {
        let server = Server::start(vec![Reply::hang()]).await;
        abort_closes_the_connection(adapter(&server, streaming), &server).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_abort_drops_the_http_request() {
    abort_closes_the_connection_streaming_or_not(openai).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_abort_drops_the_http_request() {
    abort_closes_the_connection_streaming_or_not(anthropic).await;
}

#[tokio::test]
async fn dropping_the_turn_future_closes_the_connection() {
    for streaming in [false, true] {
        let server = Server::start(vec![Reply::hang()]).await;
        dropped_turn_closes_the_connection(openai(&server, streaming), &server).await;
        let server = Server::start(vec![Reply::hang()]).await;
        dropped_turn_closes_the_connection(anthropic(&server, streaming), &server).await;
    }
}

/// A turn of `model`, whose server `server` never answers, dropped once the server has the
/// request: the server sees the connection closed within 5 s.
async fn dropped_turn_closes_the_connection<M: Model + 'static>(model: M, server: &Server) {
    let call = tokio::spawn(async move { model.turn(first_turn()).await });
    server.until_received(1).await;
    call.abort();
    assert!(server.until_closed(Duration::from_secs(5)).await);
}
