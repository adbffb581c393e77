//! The line format: `<CRC-32 of the JSON, 8 lower-case hex digits> <JSON>\n`, one
//! [`JournalEntry`] per line; a line nested too deep is refused before it is parsed, and a
//! file holding only what a crash left of a header is told from any other file.

use serde::Deserialize;

use super::JournalEntry;

impl JournalEntry {
    /// The entry as one journal line, newline included.
    ///
    /// ```
    /// use agent_tree_protocol::{JournalEntry, SessionId, JOURNAL_VERSION};
    /// let header = JournalEntry::Header { version: JOURNAL_VERSION, session: SessionId::new("s1") };
    /// let line = header.to_line();
    /// assert!(line.ends_with("{\"entry\":\"header\",\"version\":1,\"session\":\"s1\"}\n"));
    /// assert_eq!(JournalEntry::from_line(line.trim_end()).unwrap(), header);
    /// ```
    pub fn to_line(&self) -> String {
        // Journal entries hold only strings, numbers, maps with string keys and JSON values,
        // which serde_json always encodes.
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{:08x} {json}\n", crc32(json.as_bytes()))
    }

    /// [`JournalEntry::from_line`] of a line's bytes (without its newline): bytes that are
    /// not UTF-8 are no journal line.
    ///
    /// ```
    /// use agent_tree_protocol::{JournalEntry, LineError};
    /// assert_eq!(JournalEntry::from_line_bytes(&[0xff, 0x20]), Err(LineError::NoChecksum));
    /// ```
    ///
    /// # Errors
    ///
    /// As [`JournalEntry::from_line`].
    pub fn from_line_bytes(line: &[u8]) -> Result<Self, LineError> {
        let text = std::str::from_utf8(line).map_err(|_| LineError::NoChecksum)?;
        JournalEntry::from_line(text)
    }

    /// Decodes one line (without its newline).
    ///
    /// # Errors
    ///
    /// [`LineError`]: no checksum, a checksum that does not match, JSON that does not parse,
    /// or an entry or event kind this version does not know.
    pub fn from_line(line: &str) -> Result<Self, LineError> {
        let (sum, json) = line.split_once(' ').ok_or(LineError::NoChecksum)?;
        // Exactly the 8 lower-case digits `to_line` writes: a flipped case bit is corruption
        // too.
        if sum.len() != 8 || !sum.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(LineError::NoChecksum);
        }
        let expected = u32::from_str_radix(sum, 16).map_err(|_| LineError::NoChecksum)?;
        let actual = crc32(json.as_bytes());
        if expected != actual {
            return Err(LineError::Checksum { expected, actual });
        }
        let depth = nesting(json);
        if depth > MAX_LINE_DEPTH {
            return Err(LineError::Json(format!(
                "nested {depth} levels deep, more than the {MAX_LINE_DEPTH} a journal line may"
            )));
        }
        // Checked above, so the parser's own limit (128 levels, which a model's tool input
        // of up to 127 inside a conversation line would pass) is not needed.
        let mut de = serde_json::Deserializer::from_str(json);
        de.disable_recursion_limit();
        let entry = Self::deserialize(&mut de).and_then(|entry| de.end().map(|()| entry));
        entry.map_err(|e| {
            let text = e.to_string();
            if text.contains("unknown variant") {
                LineError::UnknownKind(text)
            } else {
                LineError::Json(text)
            }
        })
    }
}

/// CRC-32 (IEEE) of `bytes`.
fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &byte in bytes {
        crc = TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The deepest a journal line may nest (arrays and objects) to be read: a conversation line
/// wraps each tool input in a few levels of its own, and the runtime keeps no input nested
/// deeper than `ToolInput::MAX_TEXT_DEPTH` (96), so every line it writes is well within it
/// (a line written by an older build, with an input up to a parser's 127, too); a deeper
/// line is refused before it is parsed.
pub(crate) const MAX_LINE_DEPTH: usize = 256;

/// How deep the arrays and objects of JSON text `json` nest (its strings skipped).
fn nesting(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `bytes` (a whole file without a newline) can be what a crash left of a journal's
/// header line: zeros (space allocated, never written), or a prefix of
/// `<crc32 in lower-case hex> {"entry":"header","version":<digits>,"session":"<text>"}`, the
/// one line a new journal starts with ([`JournalEntry::to_line`] of a header). Anything
/// else is some other file, which a tree opening it refuses instead of wiping it.
///
/// ```
/// use agent_tree_protocol::runtime::torn_header;
/// use agent_tree_protocol::{JournalEntry, SessionId, JOURNAL_VERSION};
/// let header = JournalEntry::Header { version: JOURNAL_VERSION, session: SessionId::new("s1") };
/// let line = header.to_line();
/// for cut in 1..line.len() {
///     assert!(torn_header(&line.as_bytes()[..cut]));
/// }
/// assert!(torn_header(&[0, 0, 0]));
/// assert!(!torn_header(b"DEADBEEF"));
/// assert!(!torn_header(br#"0123abcd {"entry":"header","note":"mine"}"#));
/// ```
pub fn torn_header(bytes: &[u8]) -> bool {
    if bytes.iter().all(|&b| b == 0) {
        return true;
    }
    // The line's parts in order: each literal is matched as far as the bytes go, and the
    // bytes may end anywhere.
    let mut rest = bytes;
    let lower_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    let crc = rest.iter().take(8).take_while(|b| lower_hex(b)).count();
    if crc < rest.len().min(8) {
        return false;
    }
    rest = &rest[crc..];
    // A literal: `Ok` with the bytes after it when they match it whole and go on;
    // `Err(true)` when they end inside it (or right at its end); `Err(false)` when they
    // differ from it.
    fn literal<'a>(rest: &'a [u8], text: &[u8]) -> Result<&'a [u8], bool> {
        let n = rest.len().min(text.len());
        if rest[..n] != text[..n] {
            return Err(false);
        }
        if rest.len() <= text.len() {
            return Err(true);
        }
        Ok(&rest[text.len()..])
    }
    let rest = match literal(rest, br#" {"entry":"header","version":"#) {
        Ok(rest) => rest,
        Err(torn) => return torn,
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == rest.len() {
        return true;
    }
    if digits == 0 {
        return false;
    }
    let rest = match literal(&rest[digits..], br#","session":""#) {
        Ok(rest) => rest,
        Err(torn) => return torn,
    };
    // The session's text (escapes taken whole), then its closing `"}`.
    let mut at = 0;
    while at < rest.len() {
        match rest[at] {
            b'\\' => at += 2,
            b'"' => return literal(&rest[at..], br#""}"#).is_err_and(|torn| torn),
            _ => at += 1,
        }
    }
    true
}

/// Why one line does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The line does not start with 8 hex digits and a space.
    #[error("not a journal line (no checksum)")]
    NoChecksum,
    /// The checksum does not match: the line was changed after it was written.
    #[error("checksum mismatch (line says {expected:08x}, content is {actual:08x}): corrupted")]
    Checksum {
        /// The checksum on the line.
        expected: u32,
        /// The checksum of its content.
        actual: u32,
    },
    /// The checksum matches but the JSON is not an entry.
    #[error("malformed entry: {0}")]
    Json(String),
    /// An entry or event kind this version does not know.
    #[error("an entry or event kind this version does not know (written by a newer one?): {0}")]
    UnknownKind(String),
}

#[cfg(test)]
mod tests {
    use super::{JournalEntry, LineError, MAX_LINE_DEPTH, crc32, nesting};

    fn line(json: &str) -> String {
        format!("{:08x} {json}", crc32(json.as_bytes()))
    }

    /// The checksum is CRC-32 (IEEE): its check value.
    #[test]
    fn the_checksum_is_crc32_ieee() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    /// Brackets inside strings (escaped quotes included) do not count; arrays and objects do.
    #[test]
    fn nesting_counts_arrays_and_objects_outside_strings() {
        assert_eq!(nesting(r#"{"a":"[[{{\"]]","b":[[1],{"c":[]}]}"#), 4);
        assert_eq!(nesting(r#""[[[""#), 0);
        assert_eq!(nesting("[]"), 1);
    }

    /// A line past the depth limit is refused before it is parsed, whatever its checksum
    /// says (no parser recursion, so no stack to exhaust); one within it but past the
    /// parser's own 128 levels is read.
    #[test]
    fn a_line_too_deep_is_refused_unparsed_and_one_past_128_is_read() {
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_LINE_DEPTH + 1),
            "]".repeat(MAX_LINE_DEPTH + 1)
        );
        assert!(matches!(
            JournalEntry::from_line(&line(&deep)),
            Err(LineError::Json(text)) if text.contains("levels deep")
        ));
        let input = format!("{}1{}", "[".repeat(140), "]".repeat(140));
        let json = format!(
            r#"{{"entry":"conversation","agent":"a1","run":1,"from":0,"messages":[{{"role":"assistant","tool_calls":[{{"id":"c","name":"t","input":{input}}}]}}]}}"#
        );
        match JournalEntry::from_line(&line(&json)) {
            Ok(JournalEntry::Conversation { messages, .. }) => {
                assert_eq!(messages[0].tool_calls[0].input.as_str(), input);
            }
            other => panic!("not read back: {other:?}"),
        }
    }
}
