//! The Anthropic Messages adapter: [`Anthropic`].

use std::time::Duration;

use agent_tree_actors::{BoxFuture, Model, ModelError, ModelRequest, ModelResponse, TurnSink};
use agent_tree_protocol::{FinishReason, Message, ModelErrorKind, Role, ToolCall, Usage};
use serde_json::{Map, Value, json};

use crate::http;
use crate::settings::{BuildError, Endpoint, Settings};
use crate::sse::SseEvent;
use crate::tools::{count, object_input, parse_arguments, text};

/// A [`Model`] on the Anthropic Messages API (`POST {base_url}/messages`).
///
/// Each turn sends the agent's system prompt (as `system`), its conversation (tool results
/// as `tool_result` blocks of a user message, answering the assistant's `tool_use` blocks)
/// and its tools, and returns the text, the tool calls, the stop reason and the usage:
/// `input_tokens` as Anthropic reports it (it excludes cached tokens already),
/// `cache_read_input_tokens` as cache reads and `cache_creation_input_tokens` as cache
/// writes. It never retries: the tree's retry policy does (overloaded, HTTP 529, is
/// `transient`).
///
/// ```no_run
/// use agent_tree_models::Anthropic;
/// let claude = Anthropic::builder()
///     .api_key(std::env::var("ANTHROPIC_API_KEY")?)
///     .model("claude-sonnet-4-5")
///     .max_tokens(4096)
///     .streaming(true)
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Anthropic {
    settings: Settings,
    endpoint: Endpoint,
}

/// Builds an [`Anthropic`]; made by [`Anthropic::builder`].
///
/// Defaults: base URL [`Anthropic::DEFAULT_BASE_URL`], no key, no default model (a turn
/// whose definition names no model fails with `invalid_request`),
/// [`Anthropic::DEFAULT_MAX_TOKENS`] output tokens (the API requires a limit), API version
/// [`Anthropic::API_VERSION`], a 600 s timeout, streaming off, responses capped at
/// [`DEFAULT_MAX_RESPONSE_BYTES`](crate::DEFAULT_MAX_RESPONSE_BYTES).
///
/// ```
/// use std::time::Duration;
/// use agent_tree_models::Anthropic;
/// let builder = Anthropic::builder()
///     .base_url("https://gateway.example.com/anthropic/v1")
///     .api_key("sk-ant-secret")
///     .model("claude-sonnet-4-5")
///     .max_tokens(8192)
///     .timeout(Duration::from_secs(300))
///     .header("anthropic-beta", "some-beta-2025-01-01")
///     .version(Anthropic::API_VERSION)
///     .streaming(true)
///     .max_response_bytes(4 << 20);
/// assert!(!format!("{builder:?}").contains("sk-ant-secret"));
/// let model = builder.build()?;
/// assert_eq!(model.default_model(), Some("claude-sonnet-4-5"));
/// assert_eq!(model.url(), "https://gateway.example.com/anthropic/v1/messages");
/// # Ok::<(), agent_tree_models::BuildError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct AnthropicBuilder {
    settings: Settings,
    version: String,
}

impl Anthropic {
    /// Anthropic's API.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com/v1";
    /// The `anthropic-version` header sent unless the builder sets another.
    pub const API_VERSION: &'static str = "2023-06-01";
    /// The output limit sent unless the builder sets another (`max_tokens` is required).
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;

    /// A builder with the defaults.
    ///
    /// ```
    /// let model = agent_tree_models::Anthropic::builder()
    ///     .api_key("sk-ant-...")
    ///     .model("claude-haiku-4-5")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(model.url(), "https://api.anthropic.com/v1/messages");
    /// assert!(!format!("{model:?}").contains("sk-ant"));
    /// ```
    pub fn builder() -> AnthropicBuilder {
        AnthropicBuilder {
            settings: Settings::new(Self::DEFAULT_BASE_URL),
            version: Self::API_VERSION.to_owned(),
        }
    }

    /// The model used when an agent's definition names none.
    pub fn default_model(&self) -> Option<&str> {
        self.settings.model.as_deref()
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url.as_str()
    }

    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let stream = self.settings.streaming;
        let body = self.request_body(&request, stream)?;
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| ModelError::new("the request could not be encoded").with_source(e))?;
        tracing::debug!(
            agent = %request.agent,
            turn = request.turn,
            model = body["model"].as_str().unwrap_or_default(),
            stream,
            messages = request.messages.len(),
            tools = request.tools.len(),
            "messages call"
        );
        let mut response = http::post(&self.endpoint, bytes, stream, error_from_status).await?;
        let max = self.endpoint.max_response_bytes;
        let event_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if stream && event_stream {
            http::read_stream::<StreamState>(
                &mut response,
                &request.sink,
                max,
                self.endpoint.timeout,
            )
            .await
        } else {
            let body = http::read_body(&mut response, max, self.endpoint.timeout, false).await?;
            parse_response(&body)
        }
    }

    /// The Messages request of one turn.
    fn request_body(&self, request: &ModelRequest, stream: bool) -> Result<Value, ModelError> {
        let model = self.settings.model_for(request.model()).ok_or_else(|| {
            ModelError::of_kind(
                ModelErrorKind::InvalidRequest,
                "no model: set one on the adapter's builder or in the agent's definition",
            )
        })?;
        let (system, messages) = messages(request);
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert(
            "max_tokens".into(),
            json!(self.settings.max_tokens.unwrap_or(Self::DEFAULT_MAX_TOKENS)),
        );
        if !system.is_empty() {
            body.insert("system".into(), json!(system));
        }
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if stream {
            body.insert("stream".into(), json!(true));
        }
        Ok(Value::Object(body))
    }
}

impl Model for Anthropic {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(self.call(request))
    }
}

impl AnthropicBuilder {
    /// The API's base URL, up to and including `/v1` (`/messages` is appended).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.settings.base_url = url.into();
        self
    }

    /// The API key, sent as `x-api-key`. It is never logged and never shown by `Debug`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.settings.api_key = Some(key.into()).filter(|k: &String| !k.is_empty());
        self
    }

    /// The model of agents whose definition names none (a definition's `model` wins).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.settings.model = Some(model.into());
        self
    }

    /// Sends `to` for agents whose definition names the model `from` (matched ignoring
    /// ASCII case): agent files written for one provider name its models (Claude Code's
    /// `model: sonnet`), which another provider does not know.
    ///
    /// ```
    /// use agent_tree_models::Anthropic;
    /// let adapter = Anthropic::builder()
    ///     .model("qwen2.5:7b")
    ///     .model_alias("sonnet", "qwen2.5:7b")
    ///     .model_alias("haiku", "qwen2.5:3b")
    ///     .build()
    ///     .unwrap();
    /// # let _ = adapter;
    /// ```
    pub fn model_alias(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.settings.model_aliases.push((from.into(), to.into()));
        self
    }

    /// Whether a definition's `model` is sent (the default) or ignored, so every agent runs
    /// on the builder's [`model`](Self::model).
    pub fn definition_models(mut self, honour: bool) -> Self {
        self.settings.definition_models = honour;
        self
    }

    /// The most tokens a turn may produce (default [`Anthropic::DEFAULT_MAX_TOKENS`]).
    pub fn max_tokens(mut self, max: u32) -> Self {
        self.settings.max_tokens = Some(max);
        self
    }

    /// The request timeout: the whole call without streaming; with streaming, the wait for
    /// the response's head and then for each event. A call past it fails with a `transient`
    /// error (which the tree retries). Default 600 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// An extra header sent with every request (`anthropic-beta`, a gateway's key). Its
    /// value is treated as a secret: never logged, never shown.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.headers.push((name.into(), value.into()));
        self
    }

    /// The `anthropic-version` header (default [`Anthropic::API_VERSION`]).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Whether to stream (`stream: true`): text deltas reach the turn's sink as they arrive,
    /// and usage as soon as `message_start` tells it. Default off.
    pub fn streaming(mut self, on: bool) -> Self {
        self.settings.streaming = on;
        self
    }

    /// The largest response read, in bytes (default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`](crate::DEFAULT_MAX_RESPONSE_BYTES)).
    pub fn max_response_bytes(mut self, max: usize) -> Self {
        self.settings.max_response_bytes = max;
        self
    }

    /// The adapter.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] for a base URL that is not `http(s)`, a header, key or version that
    /// is not a valid header value, or an HTTP client that cannot be built.
    pub fn build(self) -> Result<Anthropic, BuildError> {
        let mut auth = vec![("anthropic-version", self.version.clone())];
        if let Some(key) = &self.settings.api_key {
            auth.push(("x-api-key", key.clone()));
        }
        let endpoint = Endpoint::new(&self.settings, "/messages", auth)?;
        Ok(Anthropic {
            settings: self.settings,
            endpoint,
        })
    }
}

/// The system text and the Messages conversation.
///
/// Messages API rules followed here: there is no system role (the definition's prompt and
/// any system message go into `system`, joined by blank lines); tool results are
/// `tool_result` blocks of a user message, first in it; consecutive user-side messages (tool
/// results, steers, notices) are one user message; empty text blocks are not sent; an
/// assistant message is its text block, then its `tool_use` blocks.
fn messages(request: &ModelRequest) -> (String, Vec<Value>) {
    let mut system: Vec<&str> = Vec::new();
    if !request.system().is_empty() {
        system.push(request.system());
    }
    let mut out = Vec::new();
    // The user-side blocks not yet emitted: tool results, then text.
    let mut results: Vec<Value> = Vec::new();
    let mut texts: Vec<Value> = Vec::new();
    let flush = |out: &mut Vec<Value>, results: &mut Vec<Value>, texts: &mut Vec<Value>| {
        if results.is_empty() && texts.len() == 1 {
            let text = texts.pop().map(|t| t["text"].clone()).unwrap_or_default();
            out.push(json!({ "role": "user", "content": text }));
        } else if !results.is_empty() || !texts.is_empty() {
            let content: Vec<Value> = results.drain(..).chain(texts.drain(..)).collect();
            out.push(json!({ "role": "user", "content": content }));
        }
    };
    for message in request.messages.iter() {
        match message.role {
            Role::System => {
                if !message.content.is_empty() {
                    system.push(&message.content);
                }
            }
            Role::User => {
                if !message.content.is_empty() {
                    texts.push(json!({ "type": "text", "text": message.content }));
                }
            }
            Role::Tool => results.push(tool_result(message)),
            Role::Assistant => {
                flush(&mut out, &mut results, &mut texts);
                if let Some(assistant) = assistant(message) {
                    out.push(assistant);
                }
            }
        }
    }
    flush(&mut out, &mut results, &mut texts);
    (system.join("\n\n"), out)
}

fn tool_result(message: &Message) -> Value {
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": message.tool_call_id.as_deref().unwrap_or_default(),
    });
    if !message.content.is_empty() {
        block["content"] = json!(message.content);
    }
    if message.is_error {
        block["is_error"] = json!(true);
    }
    block
}

fn assistant(message: &Message) -> Option<Value> {
    let mut content = Vec::new();
    if !message.content.is_empty() {
        content.push(json!({ "type": "text", "text": message.content }));
    }
    for call in &message.tool_calls {
        content.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": object_input(&call.input),
        }));
    }
    (!content.is_empty()).then(|| json!({ "role": "assistant", "content": content }))
}

/// The usage of a Messages `usage` object: every field as Anthropic reports it (its
/// `input_tokens` already excludes cached tokens).
pub(crate) fn usage(usage: &Value) -> Usage {
    Usage::tokens(
        count(usage.get("input_tokens")),
        count(usage.get("output_tokens")),
    )
    .with_cache_read(count(usage.get("cache_read_input_tokens")))
    .with_cache_write(count(usage.get("cache_creation_input_tokens")))
}

fn stop_reason(reason: Option<&str>, has_calls: bool) -> FinishReason {
    match reason {
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("refusal") => FinishReason::ContentFilter,
        Some("tool_use") => FinishReason::ToolCalls,
        _ if has_calls => FinishReason::ToolCalls,
        None | Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some(_) => FinishReason::Other,
    }
}

/// A whole (not streamed) response.
pub(crate) fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let value: Value = serde_json::from_slice(body).map_err(unreadable)?;
    if text(value.get("type")) == Some("error") {
        return Err(body_error(value.get("error").unwrap_or(&Value::Null)));
    }
    let usage = value.get("usage").map(usage).unwrap_or_default();
    let Some(blocks) = value.get("content").and_then(Value::as_array) else {
        return Err(ModelError::new("the response has no content").with_usage(usage));
    };
    let mut answer = String::new();
    let mut calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match text(block.get("type")) {
            Some("text") => answer.push_str(text(block.get("text")).unwrap_or_default()),
            Some("tool_use") => {
                let name = text(block.get("name")).unwrap_or_default();
                let input = match block.get("input") {
                    Some(Value::String(raw)) => parse_arguments(raw, name),
                    Some(input) => input.clone(),
                    None => Value::Object(Map::new()),
                };
                let id = text(block.get("id"))
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| format!("toolu_{i}"), str::to_owned);
                calls.push(ToolCall::new(id, name, input));
            }
            // Thinking blocks and others are not part of the answer.
            _ => {}
        }
    }
    let finish = stop_reason(text(value.get("stop_reason")), !calls.is_empty());
    Ok(ModelResponse::text_and_calls(answer, calls)
        .with_usage(usage)
        .with_finish_reason(finish))
}

fn unreadable(error: serde_json::Error) -> ModelError {
    ModelError::new(format!("the response is not readable JSON: {error}")).with_source(error)
}

/// The error of a failed HTTP response (`{"type": "error", "error": {"type", "message"}}`).
pub(crate) fn error_from_status(status: u16, body: &str) -> ModelError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let detail = parsed.as_ref().and_then(|v| v.get("error"));
    let message = detail
        .and_then(|d| text(d.get("message")))
        .unwrap_or(body)
        .trim();
    let kind_word = detail.and_then(|d| text(d.get("type"))).unwrap_or_default();
    let error = ModelError::from_status(status, message);
    match kind_word {
        "overloaded_error" => error.with_kind(ModelErrorKind::Transient),
        "rate_limit_error" => error.with_kind(ModelErrorKind::RateLimited),
        _ if (400..500).contains(&status)
            && status != 429
            && http::says_context_length(message) =>
        {
            error.with_kind(ModelErrorKind::ContextLength)
        }
        _ => error,
    }
}

/// The error of an `error` event in a stream (or a 200 body of type `error`).
fn body_error(error: &Value) -> ModelError {
    let message = text(error.get("message")).unwrap_or("the provider reported an error");
    let kind = match text(error.get("type")).unwrap_or_default() {
        "overloaded_error" | "api_error" | "timeout_error" => ModelErrorKind::Transient,
        "rate_limit_error" => ModelErrorKind::RateLimited,
        "authentication_error" | "permission_error" => ModelErrorKind::Auth,
        _ if http::says_context_length(message) => ModelErrorKind::ContextLength,
        "invalid_request_error" | "not_found_error" => ModelErrorKind::InvalidRequest,
        _ => ModelErrorKind::Provider,
    };
    let mut message = message.to_owned();
    if message.len() > ModelError::MAX_MESSAGE {
        let mut end = ModelError::MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    ModelError::of_kind(kind, message)
}

/// A content block being assembled from stream events.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        /// The input given whole at the block's start, if not `{}`.
        start: Option<Value>,
        json: String,
    },
    Other,
}

/// What a stream has told so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    blocks: Vec<(u64, Block)>,
    stop: Option<String>,
    usage: Usage,
    stopped: bool,
    held: usize,
}

impl StreamState {
    fn apply(&mut self, event: &SseEvent, sink: &TurnSink, max: usize) -> Result<(), ModelError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let value: Value = serde_json::from_str(data).map_err(unreadable)?;
        let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
        match text(value.get("type")).unwrap_or(event.event.as_str()) {
            "message_start" => {
                if let Some(reported) = value.pointer("/message/usage") {
                    self.usage = usage(reported);
                    sink.usage(self.usage);
                }
            }
            "content_block_start" => {
                let block = value.get("content_block").unwrap_or(&Value::Null);
                let block = match text(block.get("type")) {
                    Some("text") => {
                        let start = text(block.get("text")).unwrap_or_default();
                        self.push_text(start, sink, max)?;
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: text(block.get("id")).unwrap_or_default().to_owned(),
                        name: text(block.get("name")).unwrap_or_default().to_owned(),
                        start: block
                            .get("input")
                            .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                            .cloned(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let delta = value.get("delta").unwrap_or(&Value::Null);
                match text(delta.get("type")) {
                    Some("text_delta") => {
                        let piece = text(delta.get("text")).unwrap_or_default();
                        self.push_text(piece, sink, max)?;
                    }
                    Some("input_json_delta") => {
                        let piece = text(delta.get("partial_json")).unwrap_or_default();
                        self.hold(piece.len(), max)?;
                        if let Some((_, Block::ToolUse { json, .. })) =
                            self.blocks.iter_mut().rev().find(|(i, _)| *i == index)
                        {
                            json.push_str(piece);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(reason.to_owned());
                }
                if let Some(reported) = value.get("usage").filter(|u| u.is_object()) {
                    // Cumulative counts; a field left out (or null, as gateways write the
                    // optional ones) keeps what message_start said.
                    let mut merged = self.usage;
                    let field = |name| {
                        reported
                            .get(name)
                            .filter(|v| !v.is_null())
                            .map(|v| count(Some(v)))
                    };
                    if let Some(n) = field("input_tokens") {
                        merged.input_tokens = n;
                    }
                    if let Some(n) = field("output_tokens") {
                        merged.output_tokens = n;
                    }
                    if let Some(n) = field("cache_read_input_tokens") {
                        merged.cache_read_tokens = n;
                    }
                    if let Some(n) = field("cache_creation_input_tokens") {
                        merged.cache_write_tokens = n;
                    }
                    self.usage = merged;
                    sink.usage(merged);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let error = body_error(value.get("error").unwrap_or(&Value::Null));
                return Err(error.with_usage(self.usage));
            }
            // `ping`, `content_block_stop` and events added later.
            _ => {}
        }
        Ok(())
    }

    fn push_text(&mut self, piece: &str, sink: &TurnSink, max: usize) -> Result<(), ModelError> {
        if piece.is_empty() {
            return Ok(());
        }
        self.hold(piece.len(), max)?;
        self.text.push_str(piece);
        sink.text(piece);
        Ok(())
    }

    fn hold(&mut self, bytes: usize, max: usize) -> Result<(), ModelError> {
        self.held += bytes;
        if self.held > max {
            return Err(http::too_large(max).with_usage(self.usage));
        }
        Ok(())
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.stopped && self.stop.is_none() {
            return Err(
                ModelError::transient("the stream ended before the response was complete")
                    .with_usage(self.usage),
            );
        }
        let calls: Vec<ToolCall> = self
            .blocks
            .into_iter()
            .filter_map(|(i, block)| match block {
                Block::ToolUse {
                    id,
                    name,
                    start,
                    json,
                } => {
                    let input = match start {
                        Some(input) if json.trim().is_empty() => input,
                        _ => parse_arguments(&json, &name),
                    };
                    let id = if id.is_empty() {
                        format!("toolu_{i}")
                    } else {
                        id
                    };
                    Some(ToolCall::new(id, name, input))
                }
                Block::Text | Block::Other => None,
            })
            .collect();
        let finish = stop_reason(self.stop.as_deref(), !calls.is_empty());
        Ok(ModelResponse::text_and_calls(self.text, calls)
            .with_usage(self.usage)
            .with_finish_reason(finish))
    }
}

impl http::StreamDecoder for StreamState {
    fn apply(&mut self, event: &SseEvent, sink: &TurnSink, max: usize) -> Result<(), ModelError> {
        StreamState::apply(self, event, sink, max)
    }

    /// `message_stop` came.
    fn is_done(&self) -> bool {
        self.stopped
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    /// Complete at `message_stop`, or at the end of the body after a stop reason.
    fn finish(self) -> Result<ModelResponse, ModelError> {
        StreamState::finish(self)
    }

    fn parse_whole(body: &[u8]) -> Result<ModelResponse, ModelError> {
        parse_response(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_keeps_anthropic_fields_apart() {
        let reported = json!({
            "input_tokens": 20, "output_tokens": 150,
            "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 300
        });
        assert_eq!(
            usage(&reported),
            Usage::tokens(20, 150)
                .with_cache_read(1800)
                .with_cache_write(300)
        );
    }

    #[test]
    fn errors_by_type() {
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            error_from_status(529, overloaded).kind,
            ModelErrorKind::Transient
        );
        let long = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        let error = error_from_status(400, long);
        assert_eq!(error.kind, ModelErrorKind::ContextLength);
        assert!(error.message.starts_with("prompt is too long"));
        assert_eq!(error_from_status(401, "nope").kind, ModelErrorKind::Auth);
    }

    #[test]
    fn stop_reasons() {
        assert_eq!(stop_reason(Some("max_tokens"), false), FinishReason::Length);
        assert_eq!(stop_reason(Some("tool_use"), true), FinishReason::ToolCalls);
        assert_eq!(stop_reason(Some("end_turn"), false), FinishReason::Stop);
        assert_eq!(
            stop_reason(Some("refusal"), false),
            FinishReason::ContentFilter
        );
        assert_eq!(stop_reason(Some("pause_turn"), false), FinishReason::Other);
    }

    #[test]
    fn garbage_never_panics() {
        for body in [
            &b"{"[..],
            b"{\"content\": [1, {\"type\": \"tool_use\", \"input\": 3}]}",
            b"{\"content\": \"x\"}",
            b"7",
        ] {
            let _ = parse_response(body);
        }
    }
}
