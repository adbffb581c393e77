//! Errors of decoding protocol data.

/// Protocol data that could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// JSON that is malformed or does not have the shape of the named type.
    #[error("malformed {what}: {source}")]
    Json {
        /// The type that was expected.
        what: &'static str,
        /// The parser's error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// An id that is not of its kind's form.
    #[error("invalid {kind} {value:?}")]
    InvalidId {
        /// Which kind of id.
        kind: &'static str,
        /// The text (cut to 64 characters).
        value: String,
    },
}
