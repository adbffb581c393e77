//! An incremental parser of server-sent events (the WHATWG event-stream format), as both
//! providers stream: bytes go in as they arrive, split anywhere (inside a line, inside a
//! UTF-8 character, between `\r` and `\n`), and whole events come out.
//!
//! Lines end with `\n`, `\r\n` or `\r`; a blank line ends an event; `data:` lines are joined
//! with `\n`; `event:` names the event; comments (`:` lines, the keep-alives) and the `id`
//! and `retry` fields are skipped; a byte-order mark starting the stream is dropped. A line
//! or an event's data longer than the limit is an
//! error rather than unbounded memory. An event not ended by a blank line when the stream
//! ends is dropped, as the format says.

/// One event of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, empty when there was none.
    pub(crate) event: String,
    /// The `data:` lines, joined with `\n`.
    pub(crate) data: String,
}

/// A line or an event longer than the parser's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooLarge;

/// The parser's state between pieces of input.
#[derive(Debug)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    /// The last byte seen was a `\r`: a `\n` right after it ends no second line.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    max: usize,
    /// No line has ended yet: the first may start with a byte-order mark.
    first_line: bool,
}

impl SseParser {
    /// A parser holding lines and events to at most `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            max,
            first_line: true,
        }
    }

    /// Feeds `bytes`; every event they complete is pushed to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.extend_line(&rest[..end])?;
                    self.after_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    self.end_line(out)?;
                }
                None => {
                    self.extend_line(rest)?;
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), TooLarge> {
        if self.line.len() + bytes.len() > self.max {
            return Err(TooLarge);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        let mut line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.first_line) && line.starts_with(b"\xEF\xBB\xBF") {
            // The format's decoder drops a byte-order mark that starts the stream.
            line.drain(..3);
        }
        if line.is_empty() {
            if self.has_data {
                // The last data line's `\n` is not part of the data.
                self.data.pop();
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            self.has_data = false;
            return Ok(());
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > self.max {
                    return Err(TooLarge);
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => value.clone_into(&mut self.event),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            parser.push(chunk, &mut out).unwrap();
        }
        out
    }

    /// A byte-order mark starting the stream is dropped, split anywhere; one later is data.
    #[test]
    fn a_leading_byte_order_mark_is_dropped() {
        let input = "\u{feff}data: a\n\ndata: \u{feff}b\n\n".as_bytes();
        for piece in 1..input.len() {
            let events = parse_in_pieces(input, piece);
            let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["a", "\u{feff}b"], "pieces of {piece}");
        }
    }

    #[test]
    fn events_come_out_whole_however_the_bytes_are_split() {
        let input = "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\n\
                     data: h\u{e9}llo\r\ndata: world\r\n\r\nid: 3\nretry: 10\ndata:[DONE]\r\r"
            .as_bytes();
        let expected = vec![
            SseEvent {
                event: "message_start".into(),
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: String::new(),
                data: "h\u{e9}llo\nworld".into(),
            },
            SseEvent {
                event: String::new(),
                data: "[DONE]".into(),
            },
        ];
        for piece in 1..=input.len() {
            assert_eq!(parse_in_pieces(input, piece), expected, "pieces of {piece}");
        }
    }

    #[test]
    fn an_unfinished_event_is_dropped_and_a_long_line_refused() {
        assert!(parse_in_pieces(b"data: {\"cut", 4).is_empty());
        let mut parser = SseParser::new(8);
        let mut out = Vec::new();
        assert_eq!(parser.push(b"data: 0123456789", &mut out), Err(TooLarge));
        let mut parser = SseParser::new(11);
        assert_eq!(
            parser.push(b"data: 01234\ndata: 56789\n", &mut out),
            Err(TooLarge)
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut parser = SseParser::new(64);
        let mut out = Vec::new();
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
        for chunk in garbage.chunks(13) {
            let _ = parser.push(chunk, &mut out);
        }
    }
}
