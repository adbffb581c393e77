//! Sending one request and reading its answer, as both adapters do: the error mapping of
//! the HTTP layer (timeouts and dropped connections are transient, a status is its kind),
//! `retry-after`, and reading bodies within a size limit.
//!
//! Nothing here retries: the tree's retry policy does. Dropping any future of this module
//! drops reqwest's request or body, which closes the connection.

use std::time::{Duration, SystemTime};

use agent_tree_actors::{ModelError, ModelResponse, TurnSink};
use agent_tree_protocol::{ModelErrorKind, Usage};
use bytes::Bytes;
use reqwest::header::HeaderMap;

use crate::settings::Endpoint;
use crate::sse::{SseEvent, SseParser};

/// The most of an error response's body read (its message is cut to
/// [`ModelError::MAX_MESSAGE`] anyway).
const ERROR_BODY_BYTES: usize = 64 * 1024;

/// How a provider reads a failed response: its status and body into a [`ModelError`] (the
/// retry-after is added here).
pub(crate) type ErrorMapper = fn(u16, &str) -> ModelError;

/// A response being read, each wait for a piece of its body bounded by the call's timeouts.
pub(crate) struct Body {
    response: reqwest::Response,
    /// The longest wait for the next piece.
    wait: Duration,
    /// The longest wait for each piece after it.
    then: Duration,
    /// What did not come if `wait` runs out, for the error.
    waiting_for: &'static str,
    /// The same for `then`.
    then_waiting_for: &'static str,
}

const NO_FIRST_BYTE: &str = "no first byte of the response";
const NO_RESPONSE: &str = "no response";
const STALLED: &str = "the stream stalled: nothing";

impl Body {
    /// The response's headers.
    pub(crate) fn headers(&self) -> &HeaderMap {
        self.response.headers()
    }

    /// The next piece of the body, within the wait for it; `None` at its end.
    pub(crate) async fn next_chunk(&mut self) -> Result<Option<Bytes>, ModelError> {
        let wait = std::mem::replace(&mut self.wait, self.then);
        let waiting_for = std::mem::replace(&mut self.waiting_for, self.then_waiting_for);
        match tokio::time::timeout(wait, self.response.chunk()).await {
            Ok(chunk) => chunk.map_err(request_error),
            Err(_) => Err(timed_out(waiting_for, wait)),
        }
    }
}

/// POSTs `body` to `endpoint` and returns the response once its status is a success.
///
/// Without streaming, the endpoint's whole-call timeout bounds the call (reqwest's request
/// timeout, body included). With streaming, the first-byte timeout bounds the wait for the
/// response's head and then for the first piece of its body together (wherever the server
/// spends its queueing and prompt processing), but never leaves that piece less than a
/// chunk timeout; the chunk timeout bounds each later wait. Connecting is bounded by the
/// client's connect timeout, within those.
pub(crate) async fn post(
    endpoint: &Endpoint,
    body: Vec<u8>,
    stream: bool,
    on_error: ErrorMapper,
) -> Result<Body, ModelError> {
    let timeouts = endpoint.timeouts;
    let mut builder = endpoint
        .client
        .post(endpoint.url.clone())
        .headers(endpoint.headers.clone())
        .body(body);
    let (head_wait, what) = if stream {
        (timeouts.first_byte, NO_FIRST_BYTE)
    } else {
        builder = builder.timeout(timeouts.whole);
        (timeouts.whole, NO_RESPONSE)
    };
    let started = tokio::time::Instant::now();
    let sent = match tokio::time::timeout(head_wait, builder.send()).await {
        Ok(sent) => sent,
        Err(_) => return Err(timed_out(what, head_wait)),
    };
    let response = sent.map_err(request_error)?;
    let mut body = if stream {
        // The first piece may come well after the head (a server that answers the head
        // at once and then processes the prompt): it has what is left of the first-byte
        // timeout, and at least one chunk's wait.
        let left = timeouts.first_byte.saturating_sub(started.elapsed());
        Body {
            response,
            wait: left.max(timeouts.chunk),
            then: timeouts.chunk,
            waiting_for: NO_FIRST_BYTE,
            then_waiting_for: STALLED,
        }
    } else {
        Body {
            response,
            wait: timeouts.whole,
            then: timeouts.whole,
            waiting_for: NO_RESPONSE,
            then_waiting_for: NO_RESPONSE,
        }
    };
    let status = body.response.status();
    if status.is_success() {
        return Ok(body);
    }
    let retry_after = retry_after(body.headers(), SystemTime::now());
    // A body that cannot be read is no reason to lose the status: map what was read.
    let text = read_body(&mut body, ERROR_BODY_BYTES, true)
        .await
        .unwrap_or_default();
    let mut error = on_error(status.as_u16(), &String::from_utf8_lossy(&text));
    if let Some(wait) = retry_after {
        error = error.with_retry_after(wait);
    }
    tracing::debug!(status = status.as_u16(), kind = %error.kind, "model call refused");
    Err(error)
}

/// Reads the whole body, at most `max` bytes (`truncate`: keep the first `max` bytes and
/// stop; else a body past `max` is a [`ModelErrorKind::Provider`] error).
pub(crate) async fn read_body(
    body: &mut Body,
    max: usize,
    truncate: bool,
) -> Result<Vec<u8>, ModelError> {
    let mut read = Vec::new();
    while let Some(chunk) = body.next_chunk().await? {
        if read.len() + chunk.len() > max {
            if truncate {
                read.extend_from_slice(&chunk[..max - read.len()]);
                return Ok(read);
            }
            return Err(too_large(max));
        }
        read.extend_from_slice(&chunk);
    }
    Ok(read)
}

/// What a provider makes of its event stream: each adapter's stream state, which
/// [`read_stream`] feeds.
pub(crate) trait StreamDecoder: Default {
    /// Takes one event, reporting text and usage to `sink` as they come; an error ends the
    /// stream. `max` bounds the text and arguments held.
    fn apply(&mut self, event: &SseEvent, sink: &TurnSink, max: usize) -> Result<(), ModelError>;
    /// The provider said the response is complete (nothing after it is read).
    fn is_done(&self) -> bool;
    /// The usage known so far, which an error raised mid-stream carries.
    fn usage(&self) -> Usage;
    /// The response, once the stream ended (an error if it ended before it was complete).
    fn finish(self) -> Result<ModelResponse, ModelError>;
    /// The response from one whole JSON body, as a request without streaming gets it.
    fn parse_whole(body: &[u8]) -> Result<ModelResponse, ModelError>;
}

/// Reads a streamed response with decoder `D` until it is done or the body ends, each wait
/// for a piece bounded by the body's timeouts, its events bounded by `max`. A body whose
/// first byte (past white space) is `{` is one JSON response under another content type,
/// never an event stream: it is read whole and parsed as one
/// ([`StreamDecoder::parse_whole`]).
pub(crate) async fn read_stream<D: StreamDecoder>(
    body: &mut Body,
    sink: &TurnSink,
    max: usize,
) -> Result<ModelResponse, ModelError> {
    let mut parser = SseParser::new(max);
    let mut decoder = D::default();
    let mut events = Vec::new();
    let mut sniffed = false;
    while !decoder.is_done() {
        let chunk = match body.next_chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => return Err(error.with_usage(decoder.usage())),
        };
        if !sniffed {
            if let Some(&first) = chunk.iter().find(|b| !b.is_ascii_whitespace()) {
                sniffed = true;
                if first == b'{' {
                    let whole = read_rest(body, chunk.to_vec(), max).await?;
                    return D::parse_whole(&whole);
                }
            }
        }
        parser
            .push(&chunk, &mut events)
            .map_err(|_| too_large(max).with_usage(decoder.usage()))?;
        for event in events.drain(..) {
            // Errors raised mid-stream carry the usage known so far.
            if let Err(error) = decoder.apply(&event, sink, max) {
                return Err(error.with_usage(decoder.usage()));
            }
            if decoder.is_done() {
                break;
            }
        }
    }
    decoder.finish()
}

/// The rest of a body whose first bytes are `read`, the whole at most `max` bytes.
async fn read_rest(body: &mut Body, mut read: Vec<u8>, max: usize) -> Result<Vec<u8>, ModelError> {
    if read.len() > max {
        return Err(too_large(max));
    }
    while let Some(chunk) = body.next_chunk().await? {
        if read.len() + chunk.len() > max {
            return Err(too_large(max));
        }
        read.extend_from_slice(&chunk);
    }
    Ok(read)
}

/// The error of a response larger than `max` bytes.
pub(crate) fn too_large(max: usize) -> ModelError {
    ModelError::new(format!("the response is larger than {max} bytes"))
}

/// The error of a wait that took longer than `timeout`; `what` says what did not come.
pub(crate) fn timed_out(what: &str, timeout: Duration) -> ModelError {
    ModelError::transient(format!("{what} within {} ms", timeout.as_millis()))
}

/// The error reqwest reported for a request or a body read. Everything but a request that
/// could not even be built is worth retrying: timeouts, refused or dropped connections,
/// a body cut short.
pub(crate) fn request_error(error: reqwest::Error) -> ModelError {
    // The URL is left out: a base URL may carry credentials.
    let error = error.without_url();
    let what = if error.is_timeout() {
        "the request timed out"
    } else if error.is_connect() {
        "could not connect"
    } else if error.is_body() || error.is_decode() {
        "the response was cut off"
    } else if error.is_builder() {
        "the request is malformed"
    } else {
        "the request failed"
    };
    // What the layers below said (`tcp connect error: Connection refused`), for the reader.
    let mut message = what.to_owned();
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        cause = inner.source();
    }
    let kind = if error.is_builder() {
        ModelErrorKind::InvalidRequest
    } else {
        ModelErrorKind::Transient
    };
    ModelError::of_kind(kind, message).with_source(error)
}

/// How long the provider asked to wait: `retry-after-ms` (milliseconds, OpenAI), else
/// `retry-after` as seconds or as an HTTP date (a date past is no wait).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // A wait too long for a `Duration` is the longest one, so the tree's `max_wait` refuses
    // it at once instead of retrying after a short backoff; a negative or NaN one is none.
    let seconds = |secs: f64| {
        if secs.is_nan() || secs < 0.0 {
            None
        } else {
            Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
        }
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Some(wait) = seconds(ms / 1000.0) {
            return Some(wait);
        }
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if value.bytes().all(|b| b.is_ascii_digit()) && !value.is_empty() {
        // Digits past u64: a wait of centuries.
        return Some(Duration::MAX);
    }
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Whether a failed call's text says the prompt does not fit the context window, in the
/// words the common servers use.
pub(crate) fn says_context_length(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length exceeded",
        "exceeds the context window",
        "exceed_context_size",
        "exceeds the available context size",
        "context window",
        "prompt is too long",
        "input is too long",
        "too many tokens",
        // Anthropic: "input length and `max_tokens` exceed context limit: ..."
        "exceed context limit",
        // Gemini's OpenAI endpoint: "The input token count (N) exceeds the maximum number
        // of tokens allowed (M)"
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Whether a server error's text says the server could not parse the request: llama.cpp's
/// "Failed to parse tool call arguments as JSON" (a 500), and the like. Sending the same
/// body again gets the same answer, so such a 5xx is an invalid request, not a transient
/// failure. A proxy that could not parse its upstream's *response* says nothing about the
/// request, and stays transient.
pub(crate) fn says_unparseable(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    let unparseable = [
        "failed to parse",
        "could not parse",
        "couldn't parse",
        "unable to parse",
        "cannot parse",
        "invalid json",
        "not valid json",
        "malformed json",
        "json parse error",
        "json.exception.parse_error",
    ]
    .iter()
    .any(|needle| text.contains(needle));
    unparseable && !text.contains("response") && !text.contains("upstream")
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_in_every_spelling() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let at = |pairs: &[(&'static str, &str)]| retry_after(&headers(pairs), now);
        assert_eq!(at(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(
            at(&[("retry-after", " 1.5 ")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            at(&[("retry-after-ms", "250"), ("retry-after", "9")]),
            Some(Duration::from_millis(250))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(at(&[("retry-after", &date)]), Some(Duration::from_secs(30)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(at(&[("retry-after", &past)]), Some(Duration::ZERO));
        assert_eq!(at(&[("retry-after", "soon")]), None);
        assert_eq!(at(&[("retry-after", "-3")]), None);
        assert_eq!(at(&[("retry-after-ms", "NaN")]), None);
        assert_eq!(at(&[]), None);
    }

    #[test]
    fn context_length_words() {
        assert!(says_context_length(
            "This model's maximum context length is 4096 tokens. However, you requested 5000"
        ));
        assert!(says_context_length(
            "prompt is too long: 210000 tokens > 200000 maximum"
        ));
        assert!(!says_context_length("invalid tool schema"));
    }

    #[test]
    fn unparseable_request_words() {
        assert!(says_unparseable(
            "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] \
             parse error at line 1, column 131: syntax error while parsing value"
        ));
        assert!(says_unparseable("Invalid JSON in request body"));
        assert!(says_unparseable("failed to parse messages"));
        assert!(!says_unparseable("failed to parse the upstream response"));
        assert!(!says_unparseable("internal server error"));
    }
}
