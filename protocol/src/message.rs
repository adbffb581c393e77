//! The conversation an agent has with its model, and the tool calls in it.

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The agent's definition prompt.
    System,
    /// The task, a steer, an owner's answer or a child's completion notice.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The model's id for the call; a result answers it by this id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's input.
    #[serde(default)]
    pub input: serde_json::Value,
}

impl ToolCall {
    /// A call of tool `name` with `input`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: serde_json::Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            input,
        }
    }
}

/// One message of a conversation.
///
/// Built with [`Message::system`], [`Message::user`], [`Message::assistant`] and
/// [`Message::tool_result`]; new fields may be added, so it cannot be built with a literal.
///
/// ```
/// use agent_tree_protocol::{Message, Role};
/// let m = Message::tool_result("c1", "no such file", true);
/// assert_eq!((m.role, m.tool_call_id.as_deref(), m.is_error), (Role::Tool, Some("c1"), true));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// Its text.
    #[serde(default)]
    pub content: String,
    /// The tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message: whether the tool reported an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl Message {
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::plain(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::plain(Role::User, content)
    }

    /// An assistant message with optional tool calls.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message {
            tool_calls,
            ..Message::plain(Role::Assistant, content)
        }
    }

    /// A tool result answering `call_id`.
    pub fn tool_result(
        call_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Message {
            tool_call_id: Some(call_id.into()),
            is_error,
            ..Message::plain(Role::Tool, content)
        }
    }
}

/// A tool as offered to the model: its name, what it does, and its input's JSON schema.
///
/// ```
/// use agent_tree_protocol::ToolSpec;
/// let spec = ToolSpec::new("read", "Reads a file.", serde_json::json!({"type": "object"}));
/// assert_eq!(spec.name, "read");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its input.
    pub input_schema: serde_json::Value,
}

impl ToolSpec {
    /// A tool `name` doing `description`, whose input follows `input_schema`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: serde_json::Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }
}

/// Why a model turn stopped producing output, as the provider reported it.
///
/// The runtime reads one of them: a turn that stopped at [`FinishReason::Length`] without
/// tool calls is not taken as a final answer (see `TreeConfig::length_cutoff` in the runtime).
///
/// ```
/// use agent_tree_protocol::FinishReason;
/// assert_eq!(serde_json::to_string(&FinishReason::ToolCalls).unwrap(), r#""tool_calls""#);
/// assert_eq!(FinishReason::default(), FinishReason::Stop);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The model finished its message (OpenAI `stop`, Anthropic `end_turn`/`stop_sequence`).
    #[default]
    Stop,
    /// The model stopped to call tools (`tool_calls`, `tool_use`).
    ToolCalls,
    /// The output was cut off at the token limit (`length`, `max_tokens`).
    Length,
    /// The provider withheld or cut the output by its content policy (`content_filter`,
    /// `refusal`).
    ContentFilter,
    /// Any other reason the provider gave.
    Other,
}

/// What kind of failure a model call was, as the runtime decides what to do with it.
///
/// The runtime retries [`RateLimited`](ModelErrorKind::RateLimited) and
/// [`Transient`](ModelErrorKind::Transient) failures by the tree's retry policy; every other
/// kind fails the agent at once with reason `model_error`.
///
/// ```
/// use agent_tree_protocol::ModelErrorKind;
/// assert!(ModelErrorKind::from_status(429).is_retryable());
/// assert_eq!(ModelErrorKind::from_status(503), ModelErrorKind::Transient);
/// assert_eq!(ModelErrorKind::from_status(401), ModelErrorKind::Auth);
/// assert!(!ModelErrorKind::from_status(400).is_retryable());
/// assert_eq!(ModelErrorKind::RateLimited.as_str(), "rate_limited");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The provider refused for rate or quota (HTTP 429); may carry a retry-after.
    RateLimited,
    /// A failure worth retrying: a timeout, a dropped connection, HTTP 408, 409 or 5xx, an
    /// overloaded provider (Anthropic's 529).
    Transient,
    /// The prompt does not fit the model's context window.
    ContextLength,
    /// The key is missing, wrong or lacks permission (HTTP 401, 403).
    Auth,
    /// The request was malformed or named something that does not exist (HTTP 400, 404,
    /// 422): retrying the same request cannot help.
    InvalidRequest,
    /// Anything else the provider or the adapter reported (an unreadable response, a
    /// refusal), and the kind of errors built without one.
    Provider,
}

impl ModelErrorKind {
    /// The kind an HTTP status means, by the rules above (any other status is
    /// [`Provider`](ModelErrorKind::Provider)).
    pub const fn from_status(status: u16) -> Self {
        match status {
            429 => ModelErrorKind::RateLimited,
            408 | 409 | 425 | 500..=599 => ModelErrorKind::Transient,
            401 | 403 => ModelErrorKind::Auth,
            413 => ModelErrorKind::ContextLength,
            400 | 404 | 405 | 415 | 422 => ModelErrorKind::InvalidRequest,
            _ => ModelErrorKind::Provider,
        }
    }

    /// Whether the runtime's retry policy applies to this kind.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ModelErrorKind::RateLimited | ModelErrorKind::Transient
        )
    }

    /// The snake_case name used in JSON and error texts.
    pub const fn as_str(self) -> &'static str {
        match self {
            ModelErrorKind::RateLimited => "rate_limited",
            ModelErrorKind::Transient => "transient",
            ModelErrorKind::ContextLength => "context_length",
            ModelErrorKind::Auth => "auth",
            ModelErrorKind::InvalidRequest => "invalid_request",
            ModelErrorKind::Provider => "provider",
        }
    }
}

impl std::fmt::Display for ModelErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
