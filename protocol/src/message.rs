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
///
/// ```
/// use agent_tree_protocol::ToolCall;
/// use serde_json::json;
/// let call = ToolCall::new("c1", "grep", json!({ "pattern": "fn main" }));
/// assert_eq!(call.input.to_value(), json!({ "pattern": "fn main" }));
/// // The wire form holds the input as JSON, not as a string.
/// assert_eq!(
///     serde_json::to_string(&call).unwrap(),
///     r#"{"id":"c1","name":"grep","input":{"pattern":"fn main"}}"#
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The model's id for the call; a result answers it by this id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's input.
    #[serde(default)]
    pub input: ToolInput,
}

impl ToolCall {
    /// A call of tool `name` with `input`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        input: impl Into<ToolInput>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            input: input.into(),
        }
    }
}

/// The key under which a model adapter keeps a tool call's arguments when the model wrote
/// text that is not valid JSON (a call cut off at the output limit, most often): the call's
/// input is `{"_raw": "<the text as written>"}`. The runtime never runs such a call; it
/// answers it with an error telling the model what happened ([`ToolInput::raw_arguments`]).
///
/// ```
/// use agent_tree_protocol::{RAW_ARGUMENTS_KEY, ToolInput};
/// let cut = ToolInput::from(serde_json::json!({ RAW_ARGUMENTS_KEY: "{\"path\": \"a" }));
/// assert_eq!(cut.raw_arguments().as_deref(), Some("{\"path\": \"a"));
/// ```
pub const RAW_ARGUMENTS_KEY: &str = "_raw";

/// A tool call's input: one JSON value, held as its compact text.
///
/// A call stays in its agent's conversation for the agent's life (every later turn sends it
/// back to the model), so it is kept compact: as a [`serde_json::Value`], an object of even
/// one field allocates a B-tree node of 632 bytes; as text, a small input is a few dozen.
/// It is built from a `Value` (`From`), read as one ([`to_value`](Self::to_value)) or
/// straight into a typed input ([`parse`](Self::parse)), and serializes as the JSON it
/// holds, so a [`ToolCall`]'s wire form is `"input": {...}`, never a string.
///
/// The text is always the canonical compact JSON of its value (object keys sorted, as
/// `serde_json` writes a `Value`). Two inputs are equal when their texts are: when their
/// values are, except that `-0.0` and `0.0` differ. An input nested deeper than a JSON
/// parser reads back ([`MAX_TEXT_DEPTH`](Self::MAX_TEXT_DEPTH)) is kept as its value too,
/// so every input a model or a tool builds in code survives whole. (An agent does not run a
/// model's call with such an input, nor keep it in its conversation: see
/// [`is_deep`](Self::is_deep).)
///
/// ```
/// use agent_tree_protocol::ToolInput;
/// use serde_json::json;
/// let input = ToolInput::from(json!({ "path": "a.rs", "line": 3 }));
/// assert_eq!(input.as_str(), r#"{"line":3,"path":"a.rs"}"#);
/// assert_eq!(input.to_value()["path"], "a.rs");
/// #[derive(serde::Deserialize)]
/// struct Read { path: String }
/// assert_eq!(input.parse::<Read>().unwrap().path, "a.rs");
/// assert_eq!(ToolInput::default().to_value(), serde_json::Value::Null);
/// ```
#[derive(Clone)]
pub struct ToolInput(Held);

#[derive(Clone)]
enum Held {
    /// The canonical text alone (read back by parsing it).
    Text(Box<serde_json::value::RawValue>),
    /// Nested deeper than `MAX_TEXT_DEPTH`: `serde_json` refuses to parse text nested
    /// past 128 levels, so the value is kept beside its text.
    Deep {
        text: Box<str>,
        value: Box<serde_json::Value>,
    },
}

impl ToolInput {
    /// The deepest nesting (arrays and objects) an input is kept as text alone: below
    /// `serde_json`'s parsing limit of 128 with room for the messages and journal lines it
    /// sits in.
    pub const MAX_TEXT_DEPTH: usize = 96;

    /// The input as a JSON value.
    pub fn to_value(&self) -> serde_json::Value {
        match &self.0 {
            // Written from a `Value` no deeper than the parser's limit: it parses back.
            Held::Text(raw) => serde_json::from_str(raw.get()).unwrap_or(serde_json::Value::Null),
            Held::Deep { value, .. } => (**value).clone(),
        }
    }

    /// The input parsed into `T`, straight from its text.
    ///
    /// # Errors
    ///
    /// When the input does not have `T`'s shape.
    pub fn parse<'de, T: Deserialize<'de>>(&'de self) -> Result<T, serde_json::Error> {
        match &self.0 {
            Held::Text(raw) => serde_json::from_str(raw.get()),
            Held::Deep { value, .. } => T::deserialize(&**value),
        }
    }

    /// The input's compact JSON text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Held::Text(raw) => raw.get(),
            Held::Deep { text, .. } => text,
        }
    }

    /// The text a model wrote as the call's arguments, when it was not valid JSON: the
    /// input is exactly `{"_raw": "<text>"}` ([`RAW_ARGUMENTS_KEY`]), as an adapter passes
    /// such a call on. `None` for any other input.
    ///
    /// ```
    /// use agent_tree_protocol::ToolInput;
    /// use serde_json::json;
    /// let cut = ToolInput::from(json!({ "_raw": "{\"prompt\": \"Summ" }));
    /// assert_eq!(cut.raw_arguments().as_deref(), Some("{\"prompt\": \"Summ"));
    /// assert_eq!(ToolInput::from(json!({ "_raw": "x", "more": 1 })).raw_arguments(), None);
    /// assert_eq!(ToolInput::from(json!({ "_raw": 1 })).raw_arguments(), None);
    /// assert_eq!(ToolInput::from(json!({ "path": "a.rs" })).raw_arguments(), None);
    /// ```
    pub fn raw_arguments(&self) -> Option<String> {
        // The canonical text sorts keys: a one-key object under `_raw` starts so.
        if !self.as_str().starts_with("{\"_raw\":") {
            return None;
        }
        match self.to_value() {
            serde_json::Value::Object(mut fields) if fields.len() == 1 => {
                match fields.remove(RAW_ARGUMENTS_KEY)? {
                    serde_json::Value::String(text) => Some(text),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Whether the input is a JSON object (as most tools' inputs are).
    pub fn is_object(&self) -> bool {
        self.as_str().starts_with('{')
    }

    /// Whether the input nests deeper than [`MAX_TEXT_DEPTH`](Self::MAX_TEXT_DEPTH) (and is
    /// kept beside its value). An agent answers a model's call with such an input with an
    /// error and keeps `{"dropped": ...}` in its place: its conversation goes to providers
    /// and into the journal, whose readers stop at about 128 levels.
    ///
    /// ```
    /// use agent_tree_protocol::ToolInput;
    /// let mut deep = serde_json::json!(1);
    /// for _ in 0..=ToolInput::MAX_TEXT_DEPTH {
    ///     deep = serde_json::json!([deep]);
    /// }
    /// assert!(ToolInput::from(deep).is_deep());
    /// assert!(!ToolInput::from(serde_json::json!({ "a": [1] })).is_deep());
    /// ```
    pub fn is_deep(&self) -> bool {
        matches!(self.0, Held::Deep { .. })
    }

    /// The input of `value`: its canonical text, and the value itself only when it is
    /// nested deeper than the text can be read back (copied then, if borrowed).
    fn of(value: std::borrow::Cow<'_, serde_json::Value>) -> Self {
        if deeper_than(&value, ToolInput::MAX_TEXT_DEPTH) {
            // A `Value` always serializes, and its compact text is valid JSON.
            let text = serde_json::to_string(&*value).unwrap_or_else(|_| "null".to_owned());
            return ToolInput(Held::Deep {
                text: text.into_boxed_str(),
                value: Box::new(value.into_owned()),
            });
        }
        // Written straight into the raw value: text serialized from a `Value` is JSON, so it
        // is not parsed again to check it.
        let raw = serde_json::value::to_raw_value(&*value).unwrap_or_else(|_| null_raw());
        ToolInput(Held::Text(raw))
    }
}

impl Default for ToolInput {
    /// `null`: a call that gave no input.
    fn default() -> Self {
        ToolInput::from(serde_json::Value::Null)
    }
}

impl From<serde_json::Value> for ToolInput {
    fn from(value: serde_json::Value) -> Self {
        ToolInput::of(std::borrow::Cow::Owned(value))
    }
}

impl From<&serde_json::Value> for ToolInput {
    fn from(value: &serde_json::Value) -> Self {
        ToolInput::of(std::borrow::Cow::Borrowed(value))
    }
}

/// Whether `value` nests arrays and objects more than `limit` deep (walked without
/// recursion, and no further than the limit).
fn deeper_than(value: &serde_json::Value, limit: usize) -> bool {
    // Only arrays and objects are stacked, and the value itself is not: a flat input (an
    // object of scalars, most tools' inputs) is walked without allocating.
    let mut stack: Vec<(&serde_json::Value, usize)> = Vec::new();
    let mut next = Some((value, 0usize));
    while let Some((value, depth)) = next.take().or_else(|| stack.pop()) {
        // An array or object, even an empty one, is one level deeper than its holder.
        let inside = depth + 1;
        let nested = |item: &&serde_json::Value| item.is_array() || item.is_object();
        match value {
            serde_json::Value::Array(items) => {
                if inside > limit {
                    return true;
                }
                stack.extend(items.iter().filter(nested).map(|item| (item, inside)));
            }
            serde_json::Value::Object(fields) => {
                if inside > limit {
                    return true;
                }
                stack.extend(fields.values().filter(nested).map(|field| (field, inside)));
            }
            _ => {}
        }
    }
    false
}

fn null_raw() -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string("null".to_owned())
        .unwrap_or_else(|_| unreachable!("`null` is JSON"))
}

impl PartialEq for ToolInput {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ToolInput {}

impl std::hash::Hash for ToolInput {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl std::fmt::Debug for ToolInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for ToolInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ToolInput {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Held::Text(raw) => raw.serialize(serializer),
            Held::Deep { value, .. } => value.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ToolInput {
    /// Any JSON value, from any format: read as a `Value` and written compact, so the text
    /// is canonical whatever the source's spacing and key order.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(ToolInput::from)
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_input_is_canonical_whatever_its_source() {
        let written = r#"{"id":"c1","name":"t","input":{ "b": 1, "a": [1, 2.5, null] }}"#;
        let call: ToolCall = serde_json::from_str(written).unwrap();
        assert_eq!(call.input.as_str(), r#"{"a":[1,2.5,null],"b":1}"#);
        assert_eq!(
            call,
            ToolCall::new("c1", "t", json!({"a": [1, 2.5, null], "b": 1}))
        );
        assert_ne!(
            call,
            ToolCall::new("c1", "t", json!({"a": [1, 2.5], "b": 1}))
        );
    }

    #[test]
    fn a_tool_input_keeps_its_json_on_the_wire() {
        let call = ToolCall::new("c1", "t", json!({"q": "a \"quoted\" \u{e9}", "n": 1e300}));
        let text = serde_json::to_string(&call).unwrap();
        let back: ToolCall = serde_json::from_str(&text).unwrap();
        assert_eq!(back, call);
        // As a `Value` too: the input is an object, not a string holding one.
        let value = serde_json::to_value(&call).unwrap();
        assert_eq!(value["input"]["n"], json!(1e300));
        let again: ToolCall = serde_json::from_value(value).unwrap();
        assert_eq!(again, call);
    }

    #[test]
    fn a_missing_input_is_null_and_every_json_value_is_an_input() {
        let call: ToolCall = serde_json::from_str(r#"{"id":"c1","name":"t"}"#).unwrap();
        assert_eq!(call.input, ToolInput::default());
        assert_eq!(call.input.as_str(), "null");
        for value in [
            json!(null),
            json!(true),
            json!(-3),
            json!("s"),
            json!([]),
            json!({}),
        ] {
            let input = ToolInput::from(&value);
            assert_eq!(input.to_value(), value);
            assert_eq!(input.is_object(), value.is_object());
        }
    }
}
