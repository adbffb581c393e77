//! The Anthropic Messages adapter: [`Anthropic`].

use std::time::Duration;

use agent_tree_actors::{BoxFuture, Model, ModelError, ModelRequest, ModelResponse, TurnSink};
use agent_tree_protocol::{
    FinishReason, Message, ModelErrorKind, Role, Sampling, ToolCall, ToolChoice, Usage,
};
use serde_json::{Map, Value, json};

use crate::http;
use crate::settings::{BuildError, Endpoint, Settings};
use crate::sse::SseEvent;
use crate::tools::{count, is_sendable, parse_arguments, text};

/// A [`Model`] on the Anthropic Messages API (`POST {base_url}/messages`).
///
/// Each turn sends the agent's system prompt (as `system`), its conversation (tool results
/// as `tool_result` blocks of a user message, answering the assistant's `tool_use` blocks)
/// its tools and its sampling ([`ModelRequest::sampling`], under the Messages API's names;
/// no seed, which the API lacks), and returns the text, the tool calls, the stop reason and
/// the usage:
/// `input_tokens` as Anthropic reports it (it excludes cached tokens already),
/// `cache_read_input_tokens` as cache reads and `cache_creation_input_tokens` as cache
/// writes. It marks each request's stable prefix for Anthropic's prompt cache (see
/// [`AnthropicBuilder::prompt_caching`]). It never retries: the tree's retry policy does
/// (overloaded, HTTP 529, is `transient`).
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
    prompt_caching: bool,
    endpoint: Endpoint,
}

/// Builds an [`Anthropic`]; made by [`Anthropic::builder`].
///
/// Defaults: base URL [`Anthropic::DEFAULT_BASE_URL`], no key, no default model (a turn
/// whose definition names no model fails with `invalid_request`),
/// [`Anthropic::DEFAULT_MAX_TOKENS`] output tokens (the API requires a limit), API version
/// [`Anthropic::API_VERSION`], timeouts of 10 s to connect, 600 s for a whole call (600 s to
/// the first byte and 120 s between pieces with streaming), prompt caching on, streaming off,
/// responses capped at
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
    prompt_caching: bool,
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
            prompt_caching: true,
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
        let mut body = http::post(&self.endpoint, bytes, stream, error_from_status).await?;
        let max = self.endpoint.max_response_bytes;
        let event_stream = body
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if stream && event_stream {
            http::read_stream::<StreamState>(&mut body, &request.sink, max).await
        } else {
            let whole = http::read_body(&mut body, max, false).await?;
            parse_response(&whole)
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
        let sampling = &request.sampling;
        let max_tokens = self
            .settings
            .output_limit(sampling.max_output_tokens)
            .unwrap_or(Self::DEFAULT_MAX_TOKENS);
        body.insert("max_tokens".into(), json!(max_tokens));
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
            if let Some(choice) = tool_choice(sampling) {
                body.insert("tool_choice".into(), choice);
            }
        }
        if let Some(temperature) = sampling.temperature {
            // The Messages API takes 0 to 1; a tree's sampling may be shared with providers
            // that take up to 2.
            body.insert("temperature".into(), json!(temperature.min(1.0)));
        }
        if let Some(top_p) = sampling.top_p {
            body.insert("top_p".into(), json!(top_p));
        }
        if !sampling.stop.is_empty() {
            body.insert("stop_sequences".into(), json!(sampling.stop));
        }
        // No `seed`: the Messages API has none.
        if self.prompt_caching {
            mark_cache_breakpoints(&mut body);
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

    /// The builder's [`context_window`](AnthropicBuilder::context_window), if set.
    fn context_window(&self, _request: &ModelRequest) -> Option<u32> {
        self.settings.context_window
    }
}

impl AnthropicBuilder {
    /// The API's base URL: up to and including `/v1` (`/messages` is appended), or without
    /// it, as Anthropic's SDKs and Claude Code's `ANTHROPIC_BASE_URL` take it (a base whose
    /// last segment is no version gets `/v1/messages`), or the whole endpoint.
    ///
    /// ```
    /// use agent_tree_models::Anthropic;
    /// for base in [
    ///     "http://127.0.0.1:8080",             // ANTHROPIC_BASE_URL's form
    ///     "http://127.0.0.1:8080/v1",
    ///     "http://127.0.0.1:8080/v1/messages", // the whole endpoint
    /// ] {
    ///     let model = Anthropic::builder().base_url(base).build()?;
    ///     assert_eq!(model.url(), "http://127.0.0.1:8080/v1/messages");
    /// }
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
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

    /// The most tokens any turn through this adapter may produce: a ceiling, which the
    /// request's [`Sampling::max_output_tokens`] (the definition's or the tree's) may lower,
    /// never raise. With neither, [`Anthropic::DEFAULT_MAX_TOKENS`] (the API requires a
    /// limit).
    ///
    /// ```
    /// let model = agent_tree_models::Anthropic::builder().max_tokens(8192).build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn max_tokens(mut self, max: u32) -> Self {
        self.settings.max_tokens = Some(max);
        self
    }

    /// The whole-call timeout of a call without streaming (default
    /// [`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT), 600 s): the server's queue, prompt
    /// processing and generation together. It also stands in for the
    /// [`first_byte_timeout`](Self::first_byte_timeout) and the
    /// [`chunk_timeout`](Self::chunk_timeout) where those are not set, as the one timeout
    /// of earlier versions did. A call past a timeout fails with a `transient` error (which
    /// the tree retries).
    ///
    /// ```
    /// use std::time::Duration;
    /// let model = agent_tree_models::Anthropic::builder()
    ///     .timeout(Duration::from_secs(120))
    ///     .build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
        self
    }

    /// The longest wait for a connection to the server (default
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT), 10 s): a server that
    /// is down fails fast, whatever the other timeouts.
    ///
    /// ```
    /// use std::time::Duration;
    /// let model = agent_tree_models::Anthropic::builder()
    ///     .connect_timeout(Duration::from_secs(3))
    ///     .build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// With streaming, the longest wait from sending a request to the first byte of its
    /// answer (default [`DEFAULT_FIRST_BYTE_TIMEOUT`](crate::DEFAULT_FIRST_BYTE_TIMEOUT),
    /// 600 s, unless [`timeout`](Self::timeout) is set): what a server spends before it
    /// answers at all. A local server with one slot (llama.cpp) queues a request while it
    /// serves another, then processes the prompt, which for a long prompt on small hardware
    /// takes minutes: this timeout must cover both. The tree bounds the calls in flight per
    /// model, so a request waiting inside the tree is not counted here.
    ///
    /// ```
    /// use std::time::Duration;
    /// let model = agent_tree_models::Anthropic::builder()
    ///     .streaming(true)
    ///     .first_byte_timeout(Duration::from_secs(1800)) // a slow local server
    ///     .chunk_timeout(Duration::from_secs(60))
    ///     .build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.settings.first_byte_timeout = Some(timeout);
        self
    }

    /// With streaming, the longest silence between two pieces of the stream once its first
    /// byte came (default [`DEFAULT_CHUNK_TIMEOUT`](crate::DEFAULT_CHUNK_TIMEOUT), 120 s,
    /// unless [`timeout`](Self::timeout) is set): a stalled stream is cut after it and
    /// retried by the tree, while a long healthy stream is never cut.
    ///
    /// ```
    /// use std::time::Duration;
    /// let model = agent_tree_models::Anthropic::builder()
    ///     .streaming(true)
    ///     .chunk_timeout(Duration::from_secs(30))
    ///     .build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn chunk_timeout(mut self, timeout: Duration) -> Self {
        self.settings.chunk_timeout = Some(timeout);
        self
    }

    /// The model's context window, in tokens (the server's `n_ctx`, the provider's
    /// published window): the runtime then never continues a cut-off answer with a request
    /// that cannot fit. Nothing is sent; unset, the window is unknown and the runtime does
    /// not check. One window for every model the adapter sends to: for models of different
    /// windows give the smallest, or one adapter per model behind a routing `Model`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_tree_actors::{Model, ModelRequest};
    /// use agent_tree_models::Anthropic;
    /// use agent_tree_protocol::{AgentDefinition, AgentId};
    /// // A Claude model of 200 000 tokens.
    /// let model = Anthropic::builder().model("m").context_window(200_000).build()?;
    /// let request = ModelRequest::new(AgentId::new(1), Arc::new(AgentDefinition::new("w", "")));
    /// assert_eq!(model.context_window(&request), Some(200_000));
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.settings.context_window = Some(tokens);
        self
    }

    /// An extra header sent with every request (`anthropic-beta`, a gateway's key). Its
    /// value is treated as a secret: never logged, never shown.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.headers.push((name.into(), value.into()));
        self
    }

    /// Whether to mark the stable prefix of each request for Anthropic's prompt cache
    /// (default on): `cache_control: {"type": "ephemeral"}` on the last tool, on the system
    /// prompt (sent as a text block) and on the conversation's last message (and the
    /// previous turn's), so a run's later turns and agents of the same type read their
    /// common prefix from cache, at a tenth of the input price, after paying a quarter
    /// more to write it once. Turn it off for a server that refuses `cache_control` or a
    /// system prompt given as blocks.
    ///
    /// ```
    /// let model = agent_tree_models::Anthropic::builder().prompt_caching(false).build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn prompt_caching(mut self, on: bool) -> Self {
        self.prompt_caching = on;
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
        let endpoint = Endpoint::new(&self.settings, Some("/v1"), "/messages", auth)?;
        Ok(Anthropic {
            settings: self.settings,
            prompt_caching: self.prompt_caching,
            endpoint,
        })
    }
}

/// Anthropic's prompt-cache breakpoint: the prefix up to the block it marks is cached (for
/// five minutes, renewed by each read).
fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

/// Marks the stable prefix of a request for Anthropic's prompt cache, with at most the four
/// breakpoints the API allows, in its cache order (tools, system, messages):
///
/// 1. the last tool: every agent of a type offered the same tools reads them from cache;
/// 2. the system prompt, made a text block: so do same-type siblings, whose conversations
///    differ;
/// 3. the last message: the next turn of this run reads the whole conversation so far;
/// 4. the message before the last assistant message, which was the last message of the
///    previous turn: this turn reads what that turn wrote, however many blocks (tool calls
///    and results) came since (the API looks back only 20 blocks from a breakpoint).
///
/// A prefix shorter than the model's minimum (1024 tokens, more on small models) is simply
/// not cached.
fn mark_cache_breakpoints(body: &mut Map<String, Value>) {
    if let Some(last) = body
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|tools| tools.last_mut())
    {
        last["cache_control"] = ephemeral();
    }
    if let Some(Value::String(system)) = body.get("system") {
        let block = json!([{ "type": "text", "text": system, "cache_control": ephemeral() }]);
        body.insert("system".into(), block);
    }
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return;
    };
    let last = messages.len().checked_sub(1);
    let previous_turn = last.and_then(|last| {
        messages[..last]
            .iter()
            .rposition(|m| m["role"] == "assistant")
            .and_then(|assistant| assistant.checked_sub(1))
    });
    for index in [previous_turn, last].into_iter().flatten() {
        mark_last_block(&mut messages[index]);
    }
}

/// Puts a cache breakpoint on a message's last content block (a text content becomes one
/// text block).
fn mark_last_block(message: &mut Value) {
    if let Some(text) = message["content"].as_str() {
        message["content"] = json!([{ "type": "text", "text": text }]);
    }
    if let Some(block) = message["content"]
        .as_array_mut()
        .and_then(|blocks| blocks.last_mut())
    {
        block["cache_control"] = ephemeral();
    }
}

/// The Messages `tool_choice` of a request's sampling: `auto`, `any` (required), `tool`
/// (named) or `none`, with `disable_parallel_tool_use` when parallel calls are set (an
/// `auto` choice carries it when no choice is set); `None` when neither is set.
fn tool_choice(sampling: &Sampling) -> Option<Value> {
    let parallel = sampling.parallel_tool_calls;
    let mut choice = match &sampling.tool_choice {
        Some(ToolChoice::None) => return Some(json!({ "type": "none" })),
        Some(ToolChoice::Auto) => json!({ "type": "auto" }),
        Some(ToolChoice::Required) => json!({ "type": "any" }),
        Some(ToolChoice::Tool(name)) => json!({ "type": "tool", "name": name }),
        // No choice (or one this version has no word for): the API's default, `auto`,
        // written only to carry the parallel setting.
        _ if parallel.is_some() => json!({ "type": "auto" }),
        _ => return None,
    };
    if let Some(parallel) = parallel {
        choice["disable_parallel_tool_use"] = json!(!parallel);
    }
    Some(choice)
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
        // `input` must be an object; a call cut off or written wrong goes back as `{}`
        // (its error result follows).
        let input = if is_sendable(&call.input) {
            call.input.to_value()
        } else {
            Value::Object(Map::new())
        };
        content.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": input,
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
        // A server refusing what it cannot parse with a 5xx (Anthropic-compatible servers
        // such as llama.cpp's): the same body again gets the same answer.
        _ if status >= 500 && http::says_unparseable(message) => {
            error.with_kind(ModelErrorKind::InvalidRequest)
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
