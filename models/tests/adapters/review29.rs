//! Review 29: the shared stream reader (`http::read_stream`) of both adapters. The test
//! marked GUARD passes and holds the JSON-body sniff the change extended to Anthropic.

use agent_tree_actors::Model;
use agent_tree_protocol::ModelErrorKind;
use serde_json::json;

use crate::common::first_turn;
use crate::server::{Reply, Server};

use agent_tree_models::{Anthropic, OpenAiCompat};

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

/// Claim (models/src/http.rs `read_stream`): "each wait for a piece bounded by `idle`, its
/// events bounded by `max`"; `read_rest`: "The rest of a body whose first bytes are `body`,
/// the whole at most `max` bytes"; the builders' `max_response_bytes`: "The largest
/// response read, in bytes". A stream body that is one JSON response (a proxy that ignored
/// `stream`) is read whole: it must be refused past `max` like any other body.
///
/// Expected: a 4 KiB JSON body labelled `text/event-stream`, with `max_response_bytes(1024)`,
/// is a Provider error "the response is larger than 1024 bytes", on both adapters (as the
/// same body labelled `application/json` is).
/// Actual: it is parsed and answered in full (the 4 KiB text comes back): only the pieces
/// after the first are counted against `max`.
/// Cause: models/src/http.rs `read_rest` checks `body.len() + chunk.len() > max` for the
/// later chunks only; the first chunk (`chunk.to_vec()` from `read_stream`'s sniff) is never
/// checked, and a small body arrives as one chunk.
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

/// GUARD. Claim (models/src/http.rs `read_stream`): "A body whose first byte (past white
/// space) is `{` is one JSON response under another content type, never an event stream: it
/// is read whole and parsed as one" — now on Anthropic too, within the bound.
#[tokio::test]
async fn guard_a_json_body_in_a_stream_within_the_bound_is_one_response() {
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
