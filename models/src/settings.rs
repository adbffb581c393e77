//! What both adapters' builders set, checked once at `build()` into an [`Endpoint`]: the
//! HTTP client, the URL, the headers (the key among them, marked sensitive) and the limits.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// The largest response an adapter reads, in bytes, unless the builder sets another limit:
/// a whole JSON body, one streamed event, and the text plus tool-call arguments a stream
/// assembles are each held to it. A response past it fails the turn with a
/// [`Provider`](agent_tree_protocol::ModelErrorKind::Provider) error instead of growing
/// memory without bound.
///
/// ```
/// assert_eq!(agent_tree_models::DEFAULT_MAX_RESPONSE_BYTES, 16 * 1024 * 1024);
/// ```
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The default whole-call timeout of a call without streaming: queueing, prompt processing
/// and generation together.
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(agent_tree_models::DEFAULT_TIMEOUT, Duration::from_secs(600));
/// ```
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The default longest wait for a connection to be made.
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(agent_tree_models::DEFAULT_CONNECT_TIMEOUT, Duration::from_secs(10));
/// ```
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The default longest wait, in a streamed call, for the first byte of the answer: the time
/// a server spends before it answers at all (a busy server's queue, then its prompt
/// processing, which on a local server takes minutes for a long prompt).
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(agent_tree_models::DEFAULT_FIRST_BYTE_TIMEOUT, Duration::from_secs(600));
/// ```
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(600);

/// The default longest silence, in a streamed call, between two pieces of the stream once
/// it has begun: a healthy stream sends tokens (or keep-alives) far more often.
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(agent_tree_models::DEFAULT_CHUNK_TIMEOUT, Duration::from_secs(120));
/// ```
pub const DEFAULT_CHUNK_TIMEOUT: Duration = Duration::from_secs(120);

/// An adapter that could not be built from its builder's settings.
///
/// ```
/// use agent_tree_models::{BuildError, OpenAiCompat};
/// let err = OpenAiCompat::builder().base_url("not a url").build().unwrap_err();
/// assert!(matches!(err, BuildError::BaseUrl { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The base URL is not an absolute `http` or `https` URL.
    #[error("invalid base URL {url:?}: {reason}")]
    BaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An extra header (or the API key, as a header value) is not a valid HTTP header. The
    /// value is never shown: it may be a secret.
    #[error("invalid header {name:?} (its value is not shown)")]
    Header {
        /// The header's name.
        name: String,
    },
    /// The HTTP client could not be built (its TLS setup failed).
    #[error("the HTTP client could not be built: {0}")]
    Client(#[source] reqwest::Error),
}

/// The settings both builders share.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) max_tokens: Option<u32>,
    /// The whole-call timeout; also the first-byte and chunk timeouts where those are not
    /// set (as the one timeout of earlier versions was).
    pub(crate) timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) first_byte_timeout: Option<Duration>,
    pub(crate) chunk_timeout: Option<Duration>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) streaming: bool,
    pub(crate) max_response_bytes: usize,
    /// Model names as definitions write them (`sonnet`, from a Claude Code file) → the names
    /// this provider knows.
    pub(crate) model_aliases: Vec<(String, String)>,
    /// Whether a definition's `model` is sent at all (else the builder's always is).
    pub(crate) definition_models: bool,
    /// The model's context window in tokens, when the application knows it: reported to
    /// the runtime, never sent.
    pub(crate) context_window: Option<u32>,
}

impl Settings {
    /// The output limit a turn is sent: the request's and the builder's, the lower where
    /// both are set. The builder's `max_tokens` is a ceiling for every call through the
    /// adapter (a provider's or a budget's), which a definition or the tree may lower, never
    /// raise.
    pub(crate) fn output_limit(&self, requested: Option<u32>) -> Option<u32> {
        match (requested, self.max_tokens) {
            (Some(requested), Some(ceiling)) => Some(requested.min(ceiling)),
            (requested, ceiling) => requested.or(ceiling),
        }
    }

    /// The model a turn asks for: the definition's (through the aliases, matched ignoring
    /// ASCII case) unless definitions' models are ignored, else the builder's.
    pub(crate) fn model_for<'a>(&'a self, definition: Option<&'a str>) -> Option<&'a str> {
        match definition.filter(|_| self.definition_models) {
            Some(name) => Some(
                self.model_aliases
                    .iter()
                    .find(|(from, _)| from.eq_ignore_ascii_case(name))
                    .map_or(name, |(_, to)| to.as_str()),
            ),
            None => self.model.as_deref(),
        }
    }

    /// The timeouts in force: each set one, else the whole-call `timeout` where that is
    /// set, else its default.
    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            whole: self.timeout.unwrap_or(DEFAULT_TIMEOUT),
            first_byte: self
                .first_byte_timeout
                .or(self.timeout)
                .unwrap_or(DEFAULT_FIRST_BYTE_TIMEOUT),
            chunk: self
                .chunk_timeout
                .or(self.timeout)
                .unwrap_or(DEFAULT_CHUNK_TIMEOUT),
        }
    }

    pub(crate) fn new(base_url: &str) -> Self {
        Settings {
            base_url: base_url.to_owned(),
            api_key: None,
            model: None,
            max_tokens: None,
            timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            first_byte_timeout: None,
            chunk_timeout: None,
            headers: Vec::new(),
            streaming: false,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            model_aliases: Vec::new(),
            definition_models: true,
            context_window: None,
        }
    }
}

impl fmt::Debug for Settings {
    /// The key and the extra headers' values are never shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("timeouts", &self.timeouts())
            .field("connect_timeout", &self.connect_timeout)
            .field("headers", &header_names)
            .field("streaming", &self.streaming)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("model_aliases", &self.model_aliases)
            .field("definition_models", &self.definition_models)
            .field("context_window", &self.context_window)
            .finish()
    }
}

/// How long each part of a call may take (connecting is the client's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// A call without streaming, from sending to the end of the body.
    pub(crate) whole: Duration,
    /// A streamed call, from sending to the first piece of the body.
    pub(crate) first_byte: Duration,
    /// A streamed call, each later wait for a piece of the body.
    pub(crate) chunk: Duration,
}

/// Where and how an adapter sends its requests: built once, shared by every turn.
pub(crate) struct Endpoint {
    pub(crate) client: reqwest::Client,
    pub(crate) url: reqwest::Url,
    pub(crate) headers: HeaderMap,
    pub(crate) timeouts: Timeouts,
    pub(crate) max_response_bytes: usize,
}

impl fmt::Debug for Endpoint {
    /// Only the URL and the limits: headers carry the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url.as_str())
            .field("timeouts", &self.timeouts)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The endpoint of `settings` at `path` below the base URL (below `version` too, when
    /// the base URL ends in no version: see [`endpoint_url`]), with `auth` headers (each
    /// marked sensitive, so it is never logged by the HTTP stack) before the extra ones.
    pub(crate) fn new(
        settings: &Settings,
        version: Option<&str>,
        path: &str,
        auth: Vec<(&'static str, String)>,
    ) -> Result<Endpoint, BuildError> {
        let url = endpoint_url(&settings.base_url, version, path)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (name, value) in auth {
            let mut value = HeaderValue::from_str(&value).map_err(|_| BuildError::Header {
                name: name.to_owned(),
            })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static(name), value);
        }
        for (name, value) in &settings.headers {
            let bad = || BuildError::Header { name: name.clone() };
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
            // Extra headers may be keys too (Azure's `api-key`, a proxy's token).
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        Ok(Endpoint {
            client: client(settings.connect_timeout)?,
            url,
            headers,
            timeouts: settings.timeouts(),
            max_response_bytes: settings.max_response_bytes.max(1),
        })
    }
}

/// `base` with `path` appended (a trailing slash of `base` is not doubled). A base URL
/// copied as the whole endpoint (`.../v1/chat/completions`) is taken as meant. With a
/// `version` (`/v1`), a base URL whose last segment is no version (`v` and digits) gets it
/// first: the form the provider's SDKs take (`ANTHROPIC_BASE_URL=http://127.0.0.1:8080`).
fn endpoint_url(base: &str, version: Option<&str>, path: &str) -> Result<reqwest::Url, BuildError> {
    let bad = |reason: String| BuildError::BaseUrl {
        url: base.to_owned(),
        reason,
    };
    let trimmed = base.trim().trim_end_matches('/');
    let joined = match trimmed.strip_suffix(path) {
        Some(endpoint) => format!("{endpoint}{path}"),
        None => match version {
            Some(version) if !ends_in_version(trimmed) => format!("{trimmed}{version}{path}"),
            _ => format!("{trimmed}{path}"),
        },
    };
    let url = reqwest::Url::parse(&joined).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if url.cannot_be_a_base() || url.host_str().is_none() {
        return Err(bad("no host".to_owned()));
    }
    Ok(url)
}

/// Whether a URL's last path segment is an API version (`v1`, `v2`, ...). A URL with no
/// path ends in its host, which is none.
fn ends_in_version(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some((_, last)) = after_scheme.rsplit_once('/') else {
        return false;
    };
    last.strip_prefix('v')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// The HTTP client: rustls with ring, HTTP/1.1, no retries, no redirects, a connect
/// timeout (the call's other timeouts are set per request). Installs ring as the
/// process's rustls provider when none is installed yet (an application that installed its
/// own keeps it).
fn client(connect_timeout: Duration) -> Result<reqwest::Client, BuildError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one meanwhile, which is as good. rustls
        // 0.23.48 deprecates ring's provider (no post-quantum key exchange); ring keeps the
        // default build free of aws-lc's C build, and an application that wants aws-lc-rs
        // installs it as the default before building a model (it is kept).
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let _ = provider.install_default();
    }
    reqwest::Client::builder()
        // The tree's retry policy retries; the client does not (reqwest's default retries
        // HTTP/2 refusals, which cannot occur on HTTP/1.1, but say it anyway).
        .retry(reqwest::retry::never())
        // A redirect would carry the key headers to wherever it points: a 3xx is an error.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .user_agent(concat!("agent-tree-models/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(BuildError::Client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_without_doubled_slashes() {
        let url = endpoint_url("http://127.0.0.1:8080/v1/", None, "/chat/completions").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1/chat/completions");
        assert!(endpoint_url("ftp://x/v1", None, "/m").is_err());
        assert!(endpoint_url("127.0.0.1:8080", None, "/m").is_err());
        assert!(endpoint_url("", None, "/m").is_err());
        assert!(endpoint_url("", Some("/v1"), "/m").is_err());
    }

    #[test]
    fn debug_never_shows_the_key_or_header_values() {
        let mut settings = Settings::new("http://127.0.0.1/v1");
        settings.api_key = Some("sk-secret-123".into());
        settings
            .headers
            .push(("api-key".into(), "hidden-456".into()));
        let shown = format!("{settings:?}");
        assert!(!shown.contains("sk-secret-123") && !shown.contains("hidden-456"));
        assert!(shown.contains("<redacted>") && shown.contains("api-key"));
        let endpoint = Endpoint::new(
            &settings,
            None,
            "/x",
            vec![("authorization", "Bearer sk-secret-123".into())],
        )
        .unwrap();
        assert!(!format!("{endpoint:?}").contains("sk-secret"));
    }

    #[test]
    fn a_bad_header_is_refused_without_its_value() {
        let mut settings = Settings::new("http://127.0.0.1/v1");
        settings
            .headers
            .push(("x-token".into(), "bad\nvalue".into()));
        let err = Endpoint::new(&settings, None, "/x", Vec::new()).unwrap_err();
        assert!(matches!(&err, BuildError::Header { name } if name == "x-token"));
        assert!(!err.to_string().contains("bad"));
    }

    #[test]
    fn definition_models_go_through_the_aliases_or_are_ignored() {
        let mut settings = Settings::new("http://127.0.0.1:1/v1");
        settings.model = Some("qwen2.5:7b".into());
        assert_eq!(settings.model_for(Some("sonnet")), Some("sonnet"));
        assert_eq!(settings.model_for(None), Some("qwen2.5:7b"));
        settings
            .model_aliases
            .push(("sonnet".into(), "qwen2.5:14b".into()));
        assert_eq!(settings.model_for(Some("Sonnet")), Some("qwen2.5:14b"));
        assert_eq!(settings.model_for(Some("haiku")), Some("haiku"));
        settings.definition_models = false;
        assert_eq!(settings.model_for(Some("sonnet")), Some("qwen2.5:7b"));
    }

    #[test]
    fn the_whole_call_timeout_stands_in_for_the_timeouts_not_set() {
        let mut settings = Settings::new("http://127.0.0.1/v1");
        let defaults = Timeouts {
            whole: DEFAULT_TIMEOUT,
            first_byte: DEFAULT_FIRST_BYTE_TIMEOUT,
            chunk: DEFAULT_CHUNK_TIMEOUT,
        };
        assert_eq!(settings.timeouts(), defaults);
        settings.timeout = Some(Duration::from_secs(30));
        let thirty = Duration::from_secs(30);
        assert_eq!(
            settings.timeouts(),
            Timeouts {
                whole: thirty,
                first_byte: thirty,
                chunk: thirty
            }
        );
        settings.first_byte_timeout = Some(Duration::from_secs(900));
        settings.chunk_timeout = Some(Duration::from_secs(5));
        assert_eq!(
            settings.timeouts(),
            Timeouts {
                whole: thirty,
                first_byte: Duration::from_secs(900),
                chunk: Duration::from_secs(5)
            }
        );
    }

    #[test]
    fn a_base_url_without_its_version_gets_the_one_given() {
        let at = |base| {
            endpoint_url(base, Some("/v1"), "/messages")
                .unwrap()
                .to_string()
        };
        for base in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
            "http://127.0.0.1:8080/v1/messages",
        ] {
            assert_eq!(at(base), "http://127.0.0.1:8080/v1/messages", "{base}");
        }
        assert_eq!(
            at("https://api.deepseek.com/anthropic"),
            "https://api.deepseek.com/anthropic/v1/messages"
        );
        assert_eq!(
            at("https://gateway.example.com/anthropic/v1"),
            "https://gateway.example.com/anthropic/v1/messages"
        );
        // A whole endpoint is taken as meant, version or not.
        assert_eq!(
            at("https://gateway.example.com/messages"),
            "https://gateway.example.com/messages"
        );
        assert_eq!(at("http://v1:8080"), "http://v1:8080/v1/messages");
        assert_eq!(at("http://h/api/v2"), "http://h/api/v2/messages");
    }

    #[test]
    fn a_base_url_copied_as_the_whole_endpoint_is_taken_as_meant() {
        for base in [
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
            "http://127.0.0.1:8080/v1/chat/completions",
            "http://127.0.0.1:8080/v1/chat/completions/",
        ] {
            let url = endpoint_url(base, None, "/chat/completions").unwrap();
            assert_eq!(
                url.as_str(),
                "http://127.0.0.1:8080/v1/chat/completions",
                "{base}"
            );
        }
    }
}
