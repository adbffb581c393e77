//! The OpenAI-compatible Chat Completions adapter: [`OpenAiCompat`].

use std::time::Duration;

use agent_tree_actors::{BoxFuture, Model, ModelError, ModelRequest, ModelResponse, TurnSink};
use agent_tree_protocol::{
    FinishReason, Message, ModelErrorKind, Role, ToolCall, ToolChoice, Usage,
};
use serde_json::{Map, Value, json};

use crate::http;
use crate::settings::{BuildError, Endpoint, Settings};
use crate::sse::SseEvent;
use crate::tools::{count, is_sendable, parse_arguments, text};

/// A [`Model`] on an OpenAI-compatible Chat Completions endpoint (`POST
/// {base_url}/chat/completions`): OpenAI, and by base URL Ollama
/// (`http://127.0.0.1:11434/v1`), vLLM, llama.cpp server, LM Studio, OpenRouter and other
/// servers speaking the same wire format.
///
/// Each turn sends the agent's system prompt, conversation, tools and sampling
/// ([`ModelRequest::sampling`], under Chat Completions' names), and returns the text,
/// the tool calls (arguments parsed as JSON; see [`RAW_ARGUMENTS_KEY`](crate::RAW_ARGUMENTS_KEY)
/// for arguments that are not), the finish reason and the usage, converted so that
/// `input_tokens` excludes the cached prompt tokens (`prompt_tokens -
/// prompt_tokens_details.cached_tokens`). It never retries: the tree's retry policy does.
///
/// ```no_run
/// use std::time::Duration;
/// use agent_tree_models::OpenAiCompat;
/// let openai = OpenAiCompat::builder()
///     .api_key(std::env::var("OPENAI_API_KEY")?)
///     .model("gpt-4o-mini")
///     .max_tokens(2048)
///     .timeout(Duration::from_secs(120))
///     .streaming(true)
///     .build()?;
/// let local = OpenAiCompat::builder()
///     .base_url("http://127.0.0.1:8080/v1") // llama.cpp server: no key
///     .model("local")
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct OpenAiCompat {
    settings: Settings,
    max_tokens_field: &'static str,
    endpoint: Endpoint,
}

/// Builds an [`OpenAiCompat`]; made by [`OpenAiCompat::builder`].
///
/// Defaults: base URL [`OpenAiCompat::DEFAULT_BASE_URL`], no key, no default model (a turn
/// whose definition names no model fails with `invalid_request`), no output limit of its
/// own, timeouts of 10 s to connect, 600 s for a whole call (600 s to the first byte and
/// 120 s between pieces with streaming), streaming off, responses capped at
/// [`DEFAULT_MAX_RESPONSE_BYTES`](crate::DEFAULT_MAX_RESPONSE_BYTES).
///
/// ```
/// use std::time::Duration;
/// use agent_tree_models::OpenAiCompat;
/// let builder = OpenAiCompat::builder()
///     .base_url("https://openrouter.ai/api/v1")
///     .api_key("sk-or-secret")
///     .model("meta-llama/llama-3.3-70b-instruct")
///     .max_tokens(1024)
///     .timeout(Duration::from_secs(90))
///     .header("X-Title", "agent-tree")
///     .streaming(true)
///     .max_response_bytes(4 << 20);
/// assert!(!format!("{builder:?}").contains("sk-or-secret"));
/// let model = builder.build()?;
/// assert_eq!(model.url(), "https://openrouter.ai/api/v1/chat/completions");
/// # Ok::<(), agent_tree_models::BuildError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct OpenAiCompatBuilder {
    settings: Settings,
    max_tokens_field: &'static str,
}

impl OpenAiCompat {
    /// OpenAI's API.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";

    /// A builder with the defaults.
    ///
    /// ```
    /// let model = agent_tree_models::OpenAiCompat::builder()
    ///     .base_url("http://127.0.0.1:11434/v1")
    ///     .model("llama3.2")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(model.default_model(), Some("llama3.2"));
    /// ```
    pub fn builder() -> OpenAiCompatBuilder {
        OpenAiCompatBuilder {
            settings: Settings::new(Self::DEFAULT_BASE_URL),
            max_tokens_field: "max_tokens",
        }
    }

    /// The model used when an agent's definition names none.
    pub fn default_model(&self) -> Option<&str> {
        self.settings.model.as_deref()
    }

    /// The URL requests go to.
    ///
    /// ```
    /// let model = agent_tree_models::OpenAiCompat::builder().build().unwrap();
    /// assert_eq!(model.url(), "https://api.openai.com/v1/chat/completions");
    /// ```
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
            "chat completions call"
        );
        let mut body = http::post(&self.endpoint, bytes, stream, error_from_status).await?;
        let max = self.endpoint.max_response_bytes;
        if stream && !is_json(body.headers()) {
            http::read_stream::<StreamState>(&mut body, &request.sink, max).await
        } else {
            // A server that ignored `stream` answered with one JSON body: read it as such.
            let whole = http::read_body(&mut body, max, false).await?;
            parse_response(&whole)
        }
    }

    /// The Chat Completions request of one turn.
    fn request_body(&self, request: &ModelRequest, stream: bool) -> Result<Value, ModelError> {
        let model = self
            .settings
            .model_for(request.model())
            .ok_or_else(no_model)?;
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert("messages".into(), Value::Array(messages(request)));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.input_schema,
                        }
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        self.insert_sampling(&mut body, request);
        if stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({ "include_usage": true }));
        }
        Ok(Value::Object(body))
    }
}

impl OpenAiCompat {
    /// The request's sampling, each field set under its Chat Completions name; the
    /// builder's output limit where the request sets none. Tool choice and parallel calls
    /// only with tools offered (servers refuse them without).
    fn insert_sampling(&self, body: &mut Map<String, Value>, request: &ModelRequest) {
        let sampling = &request.sampling;
        if let Some(temperature) = sampling.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        if let Some(top_p) = sampling.top_p {
            body.insert("top_p".into(), json!(top_p));
        }
        if let Some(seed) = sampling.seed {
            body.insert("seed".into(), json!(seed));
        }
        if !sampling.stop.is_empty() {
            body.insert("stop".into(), json!(sampling.stop));
        }
        if let Some(max) = self.settings.output_limit(sampling.max_output_tokens) {
            body.insert(self.max_tokens_field.into(), json!(max));
        }
        if request.tools.is_empty() {
            return;
        }
        if let Some(choice) = sampling.tool_choice.as_ref().and_then(tool_choice) {
            body.insert("tool_choice".into(), choice);
        }
        if let Some(parallel) = sampling.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
    }
}

/// A tool choice as Chat Completions writes it (`None` for a choice it has no word for).
fn tool_choice(choice: &ToolChoice) -> Option<Value> {
    Some(match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::None => json!("none"),
        ToolChoice::Tool(name) => json!({ "type": "function", "function": { "name": name } }),
        _ => return None,
    })
}

impl Model for OpenAiCompat {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(self.call(request))
    }

    /// The builder's [`context_window`](OpenAiCompatBuilder::context_window), if set.
    fn context_window(&self, _request: &ModelRequest) -> Option<u32> {
        self.settings.context_window
    }
}

impl OpenAiCompatBuilder {
    /// The API's base URL, up to and including `/v1` (`/chat/completions` is appended).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.settings.base_url = url.into();
        self
    }

    /// The API key, sent as `Authorization: Bearer <key>`. Optional: local servers need
    /// none. It is never logged and never shown by `Debug`.
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
    /// use agent_tree_models::OpenAiCompat;
    /// let adapter = OpenAiCompat::builder()
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

    /// The most tokens any turn through this adapter may produce, sent as `max_tokens`
    /// (which every compatible server reads): a ceiling, which the request's
    /// [`Sampling::max_output_tokens`](agent_tree_protocol::Sampling::max_output_tokens)
    /// (the definition's or the tree's) may lower, never raise. With neither, no limit is
    /// sent and the server's default applies.
    ///
    /// ```
    /// let model = agent_tree_models::OpenAiCompat::builder().max_tokens(1024).build()?;
    /// # let _ = model;
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn max_tokens(mut self, max: u32) -> Self {
        self.settings.max_tokens = Some(max);
        self.max_tokens_field = "max_tokens";
        self
    }

    /// As [`max_tokens`](Self::max_tokens), sent as `max_completion_tokens`: what OpenAI's
    /// reasoning models require (they refuse `max_tokens`). The request's own limit is sent
    /// under this name too.
    pub fn max_completion_tokens(mut self, max: u32) -> Self {
        self.settings.max_tokens = Some(max);
        self.max_tokens_field = "max_completion_tokens";
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
    /// let model = agent_tree_models::OpenAiCompat::builder()
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
    /// let model = agent_tree_models::OpenAiCompat::builder()
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
    /// let model = agent_tree_models::OpenAiCompat::builder()
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
    /// let model = agent_tree_models::OpenAiCompat::builder()
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
    /// use agent_tree_models::OpenAiCompat;
    /// use agent_tree_protocol::{AgentDefinition, AgentId};
    /// // A llama.cpp server started with `-c 32768`.
    /// let model = OpenAiCompat::builder().model("m").context_window(32_768).build()?;
    /// let request = ModelRequest::new(AgentId::new(1), Arc::new(AgentDefinition::new("w", "")));
    /// assert_eq!(model.context_window(&request), Some(32_768));
    /// # Ok::<(), agent_tree_models::BuildError>(())
    /// ```
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.settings.context_window = Some(tokens);
        self
    }

    /// An extra header sent with every request (OpenRouter's `HTTP-Referer`, a gateway's
    /// key). Its value is treated as a secret: never logged, never shown.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.headers.push((name.into(), value.into()));
        self
    }

    /// Whether to stream (`stream: true` with `stream_options.include_usage`): text deltas
    /// reach the turn's sink as they arrive. Default off.
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
    /// A [`BuildError`] for a base URL that is not `http(s)`, a header or key that is not a
    /// valid header value, or an HTTP client that cannot be built.
    pub fn build(self) -> Result<OpenAiCompat, BuildError> {
        let auth = self
            .settings
            .api_key
            .iter()
            .map(|key| ("authorization", format!("Bearer {key}")))
            .collect();
        let endpoint = Endpoint::new(&self.settings, None, "/chat/completions", auth)?;
        Ok(OpenAiCompat {
            settings: self.settings,
            max_tokens_field: self.max_tokens_field,
            endpoint,
        })
    }
}

fn no_model() -> ModelError {
    ModelError::of_kind(
        ModelErrorKind::InvalidRequest,
        "no model: set one on the adapter's builder or in the agent's definition",
    )
}

fn is_json(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// The conversation as Chat Completions messages: the system prompt first.
fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if !request.system().is_empty() {
        out.push(json!({ "role": "system", "content": request.system() }));
    }
    out.extend(request.messages.iter().map(message));
    out
}

fn message(message: &Message) -> Value {
    match message.role {
        Role::System => json!({ "role": "system", "content": message.content }),
        Role::User => json!({ "role": "user", "content": message.content }),
        Role::Assistant if message.tool_calls.is_empty() => {
            json!({ "role": "assistant", "content": message.content })
        }
        Role::Assistant => {
            let calls: Vec<Value> = message
                .tool_calls
                .iter()
                .map(|call| {
                    // Servers parse the arguments of every call in the history: a call
                    // cut off or written wrong goes back as `{}` (its error result follows).
                    let arguments = if is_sendable(&call.input) {
                        call.input.as_str()
                    } else {
                        "{}"
                    };
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": { "name": call.name, "arguments": arguments },
                    })
                })
                .collect();
            let content = if message.content.is_empty() {
                Value::Null
            } else {
                json!(message.content)
            };
            json!({ "role": "assistant", "content": content, "tool_calls": calls })
        }
        Role::Tool => {
            // Chat Completions has no error flag on a tool result: the text says it.
            let content = if message.is_error {
                format!("Error: {}", message.content)
            } else {
                message.content.clone()
            };
            json!({
                "role": "tool",
                "tool_call_id": message.tool_call_id.as_deref().unwrap_or_default(),
                "content": content,
            })
        }
    }
}

/// The usage of a Chat Completions `usage` object, by the [`Usage`] contract: cached prompt
/// tokens are taken out of `input_tokens` into `cache_read_tokens`; reasoning tokens are
/// the part of the output spent reasoning; OpenRouter's `cost` (US dollars) is kept in
/// micro-dollars.
pub(crate) fn usage(usage: &Value) -> Usage {
    let prompt = count(usage.get("prompt_tokens"));
    let output = count(usage.get("completion_tokens"));
    let cached = match usage.pointer("/prompt_tokens_details/cached_tokens") {
        Some(cached) => count(Some(cached)),
        // DeepSeek reports its cache hits apart.
        None => count(usage.get("prompt_cache_hit_tokens")),
    };
    let reasoning = count(usage.pointer("/completion_tokens_details/reasoning_tokens"));
    let cost = usage
        .get("cost")
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite() && *c > 0.0)
        .map_or(0, |dollars| (dollars * 1e6).round() as u64);
    Usage::tokens(prompt.saturating_sub(cached), output)
        .with_cache_read(cached)
        .with_reasoning(reasoning.min(output))
        .with_cost_micros(cost)
}

fn finish_reason(reason: Option<&str>, has_calls: bool) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        _ if has_calls => FinishReason::ToolCalls,
        None | Some("stop" | "eos" | "end_turn" | "stop_sequence") => FinishReason::Stop,
        Some(_) => FinishReason::Other,
    }
}

/// The text of a message's `content`: a string, or the text parts of an array.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| text(part.get("text")))
            .collect(),
        _ => String::new(),
    }
}

/// A whole (not streamed) response.
pub(crate) fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let value: Value = serde_json::from_slice(body).map_err(unreadable)?;
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        return Err(body_error(error));
    }
    let usage = value.get("usage").map(usage).unwrap_or_default();
    let Some(choice) = value.get("choices").and_then(|c| c.get(0)) else {
        return Err(ModelError::new("the response has no choices").with_usage(usage));
    };
    let message = choice.get("message").unwrap_or(&Value::Null);
    let calls: Vec<ToolCall> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let function = call.get("function").unwrap_or(&Value::Null);
                    let name = text(function.get("name")).unwrap_or_default();
                    let input = match function.get("arguments") {
                        Some(Value::String(raw)) => parse_arguments(raw, name),
                        // A few servers send the arguments as an object already.
                        Some(object @ Value::Object(_)) => object.clone(),
                        _ => Value::Object(Map::new()),
                    };
                    let id = text(call.get("id"))
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| format!("call_{i}"), str::to_owned);
                    ToolCall::new(id, name, input)
                })
                .collect()
        })
        .unwrap_or_default();
    let finish = finish_reason(text(choice.get("finish_reason")), !calls.is_empty());
    Ok(
        ModelResponse::text_and_calls(content_text(message.get("content")), calls)
            .with_usage(usage)
            .with_finish_reason(finish),
    )
}

fn unreadable(error: serde_json::Error) -> ModelError {
    ModelError::new(format!("the response is not readable JSON: {error}")).with_source(error)
}

/// The error of a failed HTTP response, from its status and body
/// (`{"error": {"message", "type", "code"}}` when the server follows OpenAI).
pub(crate) fn error_from_status(status: u16, body: &str) -> ModelError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let detail = parsed.as_ref().and_then(|v| v.get("error"));
    let message = detail
        .and_then(|d| text(d.get("message")).or_else(|| d.as_str()))
        .unwrap_or(body);
    let error = ModelError::from_status(status, message.trim());
    let word = |name| detail.and_then(|d| text(d.get(name))).unwrap_or_default();
    if status == 429
        && (word("code") == "insufficient_quota" || word("type") == "insufficient_quota")
    {
        // Out of credit: waiting does not help, so it is not a rate limit to retry.
        error.with_kind(ModelErrorKind::Provider)
    } else if (400..500).contains(&status) && status != 429 && context_length(detail, message) {
        error.with_kind(ModelErrorKind::ContextLength)
    } else if status >= 500 && http::says_unparseable(message) {
        // The server refuses what it cannot parse (llama.cpp: 500 "Failed to parse tool
        // call arguments as JSON"): the same body again gets the same answer.
        error.with_kind(ModelErrorKind::InvalidRequest)
    } else {
        error
    }
}

fn context_length(detail: Option<&Value>, message: &str) -> bool {
    let field = |name| {
        detail
            .and_then(|d| d.get(name))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    http::says_context_length(&field("code"))
        || http::says_context_length(&field("type"))
        || http::says_context_length(message)
}

/// The error an `error` object in a 200 body or a stream means (no HTTP status to go by).
fn body_error(error: &Value) -> ModelError {
    let message = text(error.get("message"))
        .or_else(|| error.as_str())
        .unwrap_or("the provider reported an error")
        .to_owned();
    let code = error.get("code");
    let words = format!(
        "{} {}",
        code.map(Value::to_string).unwrap_or_default(),
        text(error.get("type")).unwrap_or_default()
    );
    let kind = match code.and_then(Value::as_u64) {
        Some(429) => ModelErrorKind::RateLimited,
        Some(status @ 400..=599) => ModelErrorKind::from_status(status as u16),
        _ if words.contains("rate_limit") => ModelErrorKind::RateLimited,
        _ if words.contains("server_error") || words.contains("overloaded") => {
            ModelErrorKind::Transient
        }
        _ => ModelErrorKind::Provider,
    };
    let kind = if kind != ModelErrorKind::RateLimited && context_length(Some(error), &message) {
        ModelErrorKind::ContextLength
    } else {
        kind
    };
    let mut message = message;
    if message.len() > ModelError::MAX_MESSAGE {
        let mut end = ModelError::MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    ModelError::of_kind(kind, message)
}

/// A tool call being assembled from stream deltas.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// What a stream has told so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    calls: Vec<PartialCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    done: bool,
    /// Bytes of text and arguments held, against the response limit.
    held: usize,
}

impl StreamState {
    fn apply(&mut self, event: &SseEvent, sink: &TurnSink, max: usize) -> Result<(), ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(unreadable)?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(body_error(error));
        }
        if let Some(reported) = chunk.get("usage").filter(|u| u.is_object()) {
            let reported = usage(reported);
            sink.usage(reported);
            self.usage = Some(reported);
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(());
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        // A string, or (Mistral and others) an array of parts, as a whole message's content.
        let piece = match delta.get("content") {
            Some(Value::String(piece)) => std::borrow::Cow::Borrowed(piece.as_str()),
            parts @ Some(Value::Array(_)) => std::borrow::Cow::Owned(content_text(parts)),
            _ => std::borrow::Cow::Borrowed(""),
        };
        if !piece.is_empty() {
            self.hold(piece.len(), max)?;
            self.text.push_str(&piece);
            sink.text(&piece);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.apply_call(call, max)?;
            }
        }
        if let Some(reason) = text(choice.get("finish_reason")) {
            self.finish = Some(reason.to_owned());
        }
        Ok(())
    }

    fn apply_call(&mut self, delta: &Value, max: usize) -> Result<(), ModelError> {
        let index = delta.get("index").and_then(Value::as_u64);
        let id = text(delta.get("id")).filter(|id| !id.is_empty());
        let position = match (index, id) {
            // The call at that index, unless it has another id: some servers (Ollama) send
            // every call at index 0, told apart only by their ids.
            (Some(index), Some(id)) => self
                .calls
                .iter()
                .rposition(|c| c.index == Some(index) && (c.id.is_empty() || c.id == id)),
            (Some(index), None) => self.calls.iter().rposition(|c| c.index == Some(index)),
            // Without an index: the call of the same id, else a new one when an id comes,
            // else the last one.
            (None, Some(id)) => self.calls.iter().position(|c| c.id == id),
            // Else the last one, unless this delta names another function after that one's
            // arguments began: a new call (several whole calls in one delta).
            (None, None) => {
                let name = delta
                    .get("function")
                    .and_then(|f| text(f.get("name")))
                    .unwrap_or_default();
                self.calls.len().checked_sub(1).filter(|&last| {
                    let last = &self.calls[last];
                    name.is_empty()
                        || last.name.is_empty()
                        || last.name == name
                        || last.arguments.is_empty()
                })
            }
        };
        let position = position.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        let function = delta.get("function").unwrap_or(&Value::Null);
        let name = text(function.get("name")).unwrap_or_default();
        let arguments = match function.get("arguments") {
            Some(Value::String(piece)) => piece.clone(),
            Some(object @ Value::Object(_)) => object.to_string(),
            _ => String::new(),
        };
        self.hold(name.len() + arguments.len(), max)?;
        let call = &mut self.calls[position];
        if let Some(id) = id {
            id.clone_into(&mut call.id);
        }
        // The name comes once; a server that repeats it in every delta is not doubled.
        if call.name.is_empty() {
            name.clone_into(&mut call.name);
        } else if name != call.name {
            call.name.push_str(name);
        }
        call.arguments.push_str(&arguments);
        Ok(())
    }

    fn hold(&mut self, bytes: usize, max: usize) -> Result<(), ModelError> {
        self.held += bytes;
        if self.held > max {
            return Err(http::too_large(max));
        }
        Ok(())
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        let usage = self.usage.unwrap_or_default();
        if !self.done && self.finish.is_none() {
            return Err(
                ModelError::transient("the stream ended before the response was complete")
                    .with_usage(usage),
            );
        }
        // In index order (calls may arrive interleaved); a stable sort keeps the arrival
        // order of calls that share an index.
        let mut calls = self.calls;
        calls.sort_by_key(|c| c.index.unwrap_or(u64::MAX));
        let calls: Vec<ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| {
                let input = parse_arguments(&call.arguments, &call.name);
                let id = if call.id.is_empty() {
                    format!("call_{i}")
                } else {
                    call.id
                };
                ToolCall::new(id, call.name, input)
            })
            .collect();
        let finish = finish_reason(self.finish.as_deref(), !calls.is_empty());
        Ok(ModelResponse::text_and_calls(self.text, calls)
            .with_usage(usage)
            .with_finish_reason(finish))
    }
}

impl http::StreamDecoder for StreamState {
    fn apply(&mut self, event: &SseEvent, sink: &TurnSink, max: usize) -> Result<(), ModelError> {
        StreamState::apply(self, event, sink, max)
    }

    /// `[DONE]` came.
    fn is_done(&self) -> bool {
        self.done
    }

    fn usage(&self) -> Usage {
        self.usage.unwrap_or_default()
    }

    /// Complete at `[DONE]`, or at the end of the body after a finish reason.
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
    fn usage_takes_cached_tokens_out_of_the_input() {
        let reported = json!({
            "prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
            "prompt_tokens_details": { "cached_tokens": 1000 },
            "completion_tokens_details": { "reasoning_tokens": 256 }
        });
        let u = usage(&reported);
        assert_eq!(
            u,
            Usage::tokens(200, 300)
                .with_cache_read(1000)
                .with_reasoning(256)
        );
        assert_eq!(u.total_tokens(), 1500);
        assert_eq!(
            usage(&json!({"prompt_tokens": 5, "cost": 0.0012})).cost_micros,
            1200
        );
        assert_eq!(usage(&json!("garbage")), Usage::ZERO);
    }

    #[test]
    fn finish_reasons() {
        assert_eq!(finish_reason(Some("length"), false), FinishReason::Length);
        assert_eq!(finish_reason(Some("stop"), true), FinishReason::ToolCalls);
        assert_eq!(finish_reason(None, false), FinishReason::Stop);
        assert_eq!(finish_reason(Some("weird"), false), FinishReason::Other);
    }

    #[test]
    fn garbage_bodies_are_provider_errors_never_panics() {
        for body in [
            &b"not json"[..],
            b"[]",
            b"{\"choices\": 3}",
            b"{\"choices\": [{\"message\": {\"tool_calls\": [7, {\"function\": 1}]}}]}",
            b"null",
        ] {
            match parse_response(body) {
                Ok(_) => {}
                Err(e) => assert_eq!(e.kind, ModelErrorKind::Provider, "{e}"),
            }
        }
        let error = error_from_status(400, "{\"error\": {\"code\": \"context_length_exceeded\"}}");
        assert_eq!(error.kind, ModelErrorKind::ContextLength);
        assert_eq!(
            error_from_status(502, "<html>").kind,
            ModelErrorKind::Transient
        );
    }
}
