//! What a tool result the model reads is made of, from an MCP `CallToolResult`: its text,
//! its structured content as JSON, its images, audio and other blobs described (never their
//! bytes), all cut to a size cap.
//!
//! Pure: it reads the result as JSON, so every content type a server may send, including
//! ones this crate does not know yet, becomes a line the model can read.

use serde_json::Value;

/// The text the model reads for `result` (an MCP `CallToolResult` as JSON), cut to at most
/// `cap` bytes (plus a note saying how much was cut), and whether the server marked it an
/// error (`isError`).
pub(crate) fn tool_output(result: &Value, cap: usize) -> (String, bool) {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let mut parts: Vec<String> = Vec::new();
    if let Some(blocks) = result.get("content").and_then(Value::as_array) {
        parts.extend(blocks.iter().map(block));
    }
    // Structured content is read as JSON where the content carries no text: a server
    // sends its text for the model beside it (the spec's advice), and that is read once.
    if let Some(structured) = result.get("structuredContent") {
        if !has_text(result) {
            parts.push(structured.to_string());
        }
    }
    let mut text = parts.join("\n");
    if text.is_empty() && is_error {
        text = "the MCP tool failed without saying why".to_owned();
    }
    (cut(text, cap), is_error)
}

/// One content block as a line of text.
fn block(block: &Value) -> String {
    let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or("");
    match field("type") {
        "text" => field("text").to_owned(),
        "image" | "audio" => format!(
            "[{} {}, {}]",
            field("type"),
            or_unknown(field("mimeType")),
            decoded_size(field("data"))
        ),
        "resource_link" => {
            let name = field("name");
            let named = if name.is_empty() {
                String::new()
            } else {
                format!(" ({name})")
            };
            format!("[resource link {}{named}]", field("uri"))
        }
        "resource" => resource(block.get("resource").unwrap_or(&Value::Null)),
        other => format!("[{} content]", or_unknown(other)),
    }
}

/// An embedded resource: its text under its URI, or a description of its blob.
fn resource(resource: &Value) -> String {
    let field = |name: &str| resource.get(name).and_then(Value::as_str).unwrap_or("");
    match resource.get("text").and_then(Value::as_str) {
        Some(text) => format!("[resource {}]\n{text}", field("uri")),
        None => format!(
            "[resource {}: {}, {}]",
            field("uri"),
            or_unknown(field("mimeType")),
            decoded_size(field("blob"))
        ),
    }
}

/// Whether `result`'s content holds a text block.
fn has_text(result: &Value) -> bool {
    result
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        })
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "of unknown type" } else { s }
}

/// The size of base64 `data` once decoded, as `N bytes`.
fn decoded_size(data: &str) -> String {
    let data = data.trim_end_matches('=');
    format!(
        "{} bytes",
        data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1)
    )
}

/// `text` cut to at most `cap` bytes at a character boundary, ending in `…` when cut (for
/// text that is no tool output: a tool's description).
pub(crate) fn shortened(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// `text` cut to at most `cap` bytes at a character boundary, with a note of what was cut.
pub(crate) fn cut(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("\n[output cut: {} of {total} bytes shown]", end));
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Text blocks are read as they are, one per line; an `isError` result is an error.
    #[test]
    fn text_is_read_and_is_error_marks_an_error() {
        let result =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(tool_output(&result, 100), ("a\nb".to_owned(), false));
        let failed =
            json!({"content": [{"type": "text", "text": "no such file"}], "isError": true});
        assert_eq!(tool_output(&failed, 100), ("no such file".to_owned(), true));
        let silent = json!({"content": [], "isError": true});
        assert!(tool_output(&silent, 100).1);
        assert!(!tool_output(&silent, 100).0.is_empty());
    }

    /// Images, audio and blobs are described by type and size, never dumped; links and
    /// embedded text resources are named by URI.
    #[test]
    fn blobs_are_described_not_dumped() {
        let result = json!({"content": [
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "AAA=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"},
            {"type": "resource", "resource": {"uri": "file:///b.txt", "text": "bee"}},
            {"type": "resource", "resource": {"uri": "file:///c.bin", "blob": "AAAAAA==", "mimeType": "application/zip"}},
            {"type": "hologram"}
        ]});
        let (text, _) = tool_output(&result, 1000);
        assert_eq!(
            text,
            "[image image/png, 3 bytes]\n[audio audio/wav, 2 bytes]\n\
             [resource link file:///a.txt (a.txt)]\n[resource file:///b.txt]\nbee\n\
             [resource file:///c.bin: application/zip, 4 bytes]\n[hologram content]"
        );
    }

    /// Structured content is read as JSON where the content has no text; beside text (the
    /// server's words for the model, maybe the same JSON) it is not read again.
    #[test]
    fn structured_content_is_json_where_no_text_says_it() {
        let both = json!({"content": [{"type": "text", "text": "42 it is"}], "structuredContent": {"answer": 42}});
        assert_eq!(tool_output(&both, 100).0, "42 it is");
        let only = json!({"structuredContent": {"answer": 42}});
        assert_eq!(tool_output(&only, 100).0, "{\"answer\":42}");
        let image = json!({"content": [{"type": "image", "data": "", "mimeType": "image/png"}], "structuredContent": [1]});
        assert_eq!(
            tool_output(&image, 100).0,
            "[image image/png, 0 bytes]\n[1]"
        );
    }

    /// Output past the cap is cut at a character boundary, saying how much was shown.
    #[test]
    fn output_is_cut_to_the_cap() {
        let result = json!({"content": [{"type": "text", "text": "é".repeat(100)}]});
        let (text, _) = tool_output(&result, 11);
        assert_eq!(
            text,
            format!("{}\n[output cut: 10 of 200 bytes shown]", "é".repeat(5))
        );
    }
}
