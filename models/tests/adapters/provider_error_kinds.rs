//! A provider's own words for an error map to the kind the tree acts on: a prompt that does
//! not fit is a context-length error however Anthropic or Gemini's OpenAI-compatible
//! endpoint words it, and a rate limit's retry-after too large for a `Duration` is kept as a
//! long wait, not dropped.

use std::time::Duration;

use agent_tree_actors::Model;
use agent_tree_models::OpenAiCompat;
use agent_tree_protocol::ModelErrorKind;
use serde_json::json;

use crate::anthropic::adapter as anthropic;
use crate::common::first_turn;
use crate::server::{Reply, Server};

/// The non-streaming adapter, without a key.
fn openai(server: &Server) -> OpenAiCompat {
    OpenAiCompat::builder()
        .base_url(&server.base)
        .model("gpt-test")
        .streaming(false)
        .build()
        .expect("adapter builds")
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
    let error = openai(&server).turn(first_turn()).await.unwrap_err();
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
    let error = openai(&server).turn(first_turn()).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::ContextLength, "{error}");
}
