//! Tool-call arguments as the providers send them, and small readers of wire JSON shared by
//! both adapters.

use agent_tree_protocol::ToolInput;
use serde_json::{Map, Value, json};

/// The key under which a tool call's arguments are kept when the model wrote text that is
/// not valid JSON.
///
/// Such a call does not fail the turn: it reaches the runtime with input
/// `{"_raw": "<the text as written>"}`, so the tool (or the runtime, for an orchestration
/// tool) answers it with an error result the model can read and correct. Sent back to an
/// OpenAI-compatible provider in a later turn, the call's arguments are the raw text again,
/// exactly as the model wrote them.
///
/// ```
/// assert_eq!(agent_tree_models::RAW_ARGUMENTS_KEY, "_raw");
/// ```
pub const RAW_ARGUMENTS_KEY: &str = "_raw";

/// A tool call's input from the arguments text a model wrote: its JSON, `{}` for no text,
/// and `{"_raw": text}` for text that is not JSON.
pub(crate) fn parse_arguments(raw: &str, tool: &str) -> Value {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str(trimmed) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(tool, %error, "tool call arguments are not valid JSON; passed as `_raw`");
            json!({ RAW_ARGUMENTS_KEY: raw })
        }
    }
}

/// The text kept by [`parse_arguments`] for arguments that were not JSON, if `input` is one.
#[cfg_attr(not(feature = "openai"), allow(dead_code))]
pub(crate) fn raw_arguments(input: &ToolInput) -> Option<String> {
    if !input.as_str().starts_with(r#"{"_raw":"#) {
        return None;
    }
    let Value::Object(mut object) = input.to_value() else {
        return None;
    };
    if object.len() != 1 {
        return None;
    }
    match object.remove(RAW_ARGUMENTS_KEY)? {
        Value::String(text) => Some(text),
        _ => None,
    }
}

/// An input as a JSON object, as Anthropic requires: an object as is, null as `{}`, any
/// other value under [`RAW_ARGUMENTS_KEY`] as its JSON text.
#[cfg_attr(not(feature = "anthropic"), allow(dead_code))]
pub(crate) fn object_input(input: &ToolInput) -> Value {
    if input.is_object() {
        return input.to_value();
    }
    match input.as_str() {
        "null" => Value::Object(Map::new()),
        other => json!({ RAW_ARGUMENTS_KEY: other }),
    }
}

/// A token count from wire JSON: a non-negative integer (or a float, truncated); anything
/// else, or nothing, is 0.
pub(crate) fn count(value: Option<&Value>) -> u64 {
    match value {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f > 0.0).map(|f| f as u64))
            .unwrap_or(0),
        _ => 0,
    }
}

/// A string from wire JSON, if it is one.
pub(crate) fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_or_keep_their_raw_text() {
        assert_eq!(
            parse_arguments(r#"{"path":"a"}"#, "read"),
            json!({"path": "a"})
        );
        assert_eq!(parse_arguments("  ", "read"), json!({}));
        let broken = parse_arguments(r#"{"path": "a"#, "read");
        assert_eq!(broken, json!({"_raw": "{\"path\": \"a"}));
        assert_eq!(
            raw_arguments(&broken.into()).as_deref(),
            Some("{\"path\": \"a")
        );
        assert_eq!(raw_arguments(&json!({"_raw": "x", "y": 1}).into()), None);
        assert_eq!(raw_arguments(&json!({"_raw": 1}).into()), None);
    }

    #[test]
    fn inputs_become_objects() {
        assert_eq!(object_input(&Value::Null.into()), json!({}));
        assert_eq!(object_input(&json!([1]).into()), json!({"_raw": "[1]"}));
        assert_eq!(object_input(&json!({"a": 1}).into()), json!({"a": 1}));
    }

    #[test]
    fn counts_are_lenient() {
        assert_eq!(count(Some(&json!(12))), 12);
        assert_eq!(count(Some(&json!(12.9))), 12);
        assert_eq!(count(Some(&json!(-4))), 0);
        assert_eq!(count(Some(&json!("12"))), 0);
        assert_eq!(count(None), 0);
    }
}
