//! The adapters inside a real tree: the tree's retry policy retries a server error (the
//! adapters never do), and an abort drops the HTTP request (the server sees its connection
//! closed). Real time throughout: paused time would fire the client's timeouts.

use std::time::Duration;

use agent_tree_actors::Model;
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{AgentStatus, SpawnRequest, Usage};
use serde_json::json;

use crate::common::{first_turn, tree};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_abort_drops_the_http_request() {
    let server = Server::start(vec![Reply::hang()]).await;
    abort_closes_the_connection(openai(&server, false), &server).await;
    let server = Server::start(vec![Reply::hang()]).await;
    abort_closes_the_connection(openai(&server, true), &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_abort_drops_the_http_request() {
    let server = Server::start(vec![Reply::hang()]).await;
    abort_closes_the_connection(anthropic(&server, false), &server).await;
    let server = Server::start(vec![Reply::hang()]).await;
    abort_closes_the_connection(anthropic(&server, true), &server).await;
}

#[tokio::test]
async fn dropping_the_turn_future_closes_the_connection() {
    for streaming in [false, true] {
        let server = Server::start(vec![Reply::hang()]).await;
        let model = openai(&server, streaming);
        let call = tokio::spawn(async move { model.turn(first_turn()).await });
        server.until_received(1).await;
        call.abort();
        assert!(server.until_closed(Duration::from_secs(5)).await);

        let server = Server::start(vec![Reply::hang()]).await;
        let model = anthropic(&server, streaming);
        let call = tokio::spawn(async move { model.turn(first_turn()).await });
        server.until_received(1).await;
        call.abort();
        assert!(server.until_closed(Duration::from_secs(5)).await);
    }
}
