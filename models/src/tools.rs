//! Tool-call arguments as the providers send them, and small readers of wire JSON shared by
//! both adapters.

use agent_tree_protocol::ToolInput;
use serde_json::{Map, Value, json};

/// The key under which a tool call's arguments are kept when the model wrote text that is
/// not valid JSON (most often a call cut off by the output limit).
///
/// Such a call does not fail the turn: it reaches the runtime with input
/// `{"_raw": "<the text as written>"}`, so the tool (or the runtime, for an orchestration
/// tool) answers it with an error result the model can read and correct. Sent back to a
/// provider in a later turn, the call's input is `{}`: servers parse the arguments of every
/// call in the history (llama.cpp's server answers a 500 to text that is not JSON), and the
/// error result that follows the call tells the model what went wrong.
///
///
/// The key is the protocol's [`RAW_ARGUMENTS_KEY`], re-exported here, so the runtime and
/// the adapters agree on it by construction.
///
/// ```
/// assert_eq!(agent_tree_models::RAW_ARGUMENTS_KEY, agent_tree_protocol::RAW_ARGUMENTS_KEY);
/// ```
pub use agent_tree_protocol::RAW_ARGUMENTS_KEY;

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

/// Whether `input` is what [`parse_arguments`] keeps for arguments that were not JSON:
/// an object of the one string field [`RAW_ARGUMENTS_KEY`].
fn is_raw(input: &ToolInput) -> bool {
    // Cheap test first: the canonical text of such an input starts with its only key.
    if !input.as_str().starts_with(r#"{"_raw":"#) {
        return false;
    }
    match input.to_value() {
        Value::Object(object) => {
            object.len() == 1 && object.get(RAW_ARGUMENTS_KEY).is_some_and(Value::is_string)
        }
        _ => false,
    }
}

/// Whether a call's input is sent back to a provider as it is: an object a model wrote.
/// Else `{}` is sent in its place. A call whose arguments were not JSON (see
/// [`RAW_ARGUMENTS_KEY`]) or not an object is answered by an error result in the
/// conversation; its own arguments must still be an object every server parses, since
/// servers parse the history (llama.cpp) or require an object (Anthropic).
pub(crate) fn is_sendable(input: &ToolInput) -> bool {
    input.is_object() && !is_raw(input)
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
        assert!(is_raw(&broken.into()));
        assert!(!is_raw(&json!({"_raw": "x", "y": 1}).into()));
        assert!(!is_raw(&json!({"_raw": 1}).into()));
    }

    #[test]
    fn only_objects_a_model_wrote_are_sent_back_as_they_are() {
        assert!(is_sendable(&json!({"a": 1}).into()));
        assert!(is_sendable(&json!({}).into()));
        assert!(!is_sendable(&json!({"_raw": "{\"a\": "}).into()));
        assert!(!is_sendable(&Value::Null.into()));
        assert!(!is_sendable(&json!([1]).into()));
        assert!(!is_sendable(&json!("text").into()));
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
