//! Which MCP servers a tree is given, and how each is run, called and restarted: by code
//! ([`McpConfig::server`]) or from Claude Code's `.mcp.json` ([`McpConfig::from_mcp_json`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::McpError;
use crate::names::server_name_problem;

/// The servers a tree is given, by name, and what a server that never comes up does.
///
/// ```
/// use agent_tree_mcp::{McpConfig, ServerConfig, StartFailure};
/// let config = McpConfig::new()
///     .server("fs", ServerConfig::stdio("mcp-server-filesystem", ["/tmp"]))
///     .unwrap()
///     .server("web", ServerConfig::http("http://127.0.0.1:3001/mcp").header("x-team", "a"))
///     .unwrap()
///     .on_start_failure(StartFailure::Report);
/// assert_eq!(config.servers().count(), 2);
/// ```
#[derive(Clone, Debug, Default)]
pub struct McpConfig {
    servers: BTreeMap<String, ServerConfig>,
    on_start_failure: StartFailure,
}

/// What starting the servers does about one that never comes up (its process fails, its
/// handshake or tool listing fails or takes longer than its start timeout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartFailure {
    /// [`McpServers::start`](crate::McpServers::start) fails, naming the server and why.
    #[default]
    Fail,
    /// The others start; the failure is logged and listed in
    /// [`McpServers::failed`](crate::McpServers::failed), and the server offers no tools
    /// (agent files naming them are warned about like any unknown tool).
    Report,
}

/// How one server is reached, and its limits.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// How the server is reached.
    pub transport: Transport,
    /// How long one call may take before it is cancelled and fails.
    pub call_timeout: Duration,
    /// Per-tool call timeouts, by the server's own tool name, over `call_timeout`.
    pub tool_timeouts: BTreeMap<String, Duration>,
    /// How long the server has to come up: start, answer the handshake and list its tools.
    pub start_timeout: Duration,
    /// The restart intensity: at most this many restarts within `restart_period`; past it
    /// the server stays down and its tools fail at once, saying why.
    pub max_restarts: u32,
    /// The window of the restart intensity.
    pub restart_period: Duration,
    /// How often the connection is pinged; a server that does not answer a ping within
    /// [`PING_TIMEOUT`] is restarted. `None`: never pinged.
    pub ping_interval: Option<Duration>,
    /// The most bytes of one call's output the model reads; the rest is cut with a note.
    pub max_output_bytes: usize,
}

/// How a server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// A child process speaking MCP on its standard input and output. It runs in a process
    /// group of its own, which the tree ends (every process of it) when it ends the server.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it, over the tree's own environment.
        env: BTreeMap<String, String>,
        /// Its working directory (the tree's by default).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request (an `authorization` one among them).
        headers: BTreeMap<String, String>,
    },
}

/// The default [`ServerConfig::call_timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The default [`ServerConfig::start_timeout`].
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The default [`ServerConfig::max_restarts`].
pub const DEFAULT_MAX_RESTARTS: u32 = 3;
/// The default [`ServerConfig::restart_period`].
pub const DEFAULT_RESTART_PERIOD: Duration = Duration::from_secs(60);
/// The default [`ServerConfig::ping_interval`].
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long a server has to answer a ping.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// The default [`ServerConfig::max_output_bytes`].
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 100_000;

impl ServerConfig {
    fn with(transport: Transport) -> Self {
        ServerConfig {
            transport,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            tool_timeouts: BTreeMap::new(),
            start_timeout: DEFAULT_START_TIMEOUT,
            max_restarts: DEFAULT_MAX_RESTARTS,
            restart_period: DEFAULT_RESTART_PERIOD,
            ping_interval: Some(DEFAULT_PING_INTERVAL),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// A server run as `command` with `args`, over its standard input and output.
    ///
    /// ```
    /// use agent_tree_mcp::ServerConfig;
    /// let fs = ServerConfig::stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"])
    ///     .env("NODE_ENV", "production");
    /// # let _ = fs;
    /// ```
    pub fn stdio<I, S>(command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ServerConfig::with(Transport::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
        })
    }

    /// A server at a streamable-HTTP `url`.
    pub fn http(url: impl Into<String>) -> Self {
        ServerConfig::with(Transport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        })
    }

    /// Sets an environment variable of a stdio server (nothing for an HTTP one).
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets a stdio server's working directory (nothing for an HTTP one).
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Sets a header of an HTTP server's requests (nothing for a stdio one).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.insert(name.into(), value.into());
        }
        self
    }

    /// Sets the timeout of every call.
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the timeout of the calls of one tool, by the server's own name for it (`read`)
    /// or the name it is offered under (`mcp__fs__read`).
    #[must_use]
    pub fn tool_timeout(mut self, tool: impl Into<String>, timeout: Duration) -> Self {
        self.tool_timeouts.insert(tool.into(), timeout);
        self
    }

    /// Sets how long the server has to come up.
    #[must_use]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Sets the restart intensity: at most `max` restarts within `period`.
    #[must_use]
    pub fn restarts(mut self, max: u32, period: Duration) -> Self {
        self.max_restarts = max;
        self.restart_period = period;
        self
    }

    /// Sets how often a quiet connection is pinged (`None`: never).
    #[must_use]
    pub fn ping_interval(mut self, interval: Option<Duration>) -> Self {
        self.ping_interval = interval;
        self
    }

    /// Sets the most bytes of one call's output the model reads.
    #[must_use]
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// The timeout of a call of the server's tool `tool`, offered as `offered`.
    pub(crate) fn timeout_of(&self, tool: &str, offered: &str) -> Duration {
        self.tool_timeouts
            .get(tool)
            .or_else(|| self.tool_timeouts.get(offered))
            .copied()
            .unwrap_or(self.call_timeout)
    }
}

impl McpConfig {
    /// No servers; a server that never comes up fails the start.
    pub fn new() -> Self {
        McpConfig::default()
    }

    /// Adds (or replaces) the server `name`.
    ///
    /// # Errors
    ///
    /// [`McpError::Config`] for a name that is empty, not of `A-Z a-z 0-9 _ -`, or holds
    /// `__` (which would blur it into its tools' names `mcp__<server>__<tool>`), and for a
    /// header HTTP cannot carry.
    pub fn server(
        mut self,
        name: impl Into<String>,
        server: ServerConfig,
    ) -> Result<Self, McpError> {
        let name = name.into();
        if let Some(problem) = server_name_problem(&name) {
            return Err(McpError::config(
                "code",
                format!("mcpServers.{name}"),
                problem,
            ));
        }
        if let Transport::Http { headers, .. } = &server.transport {
            for (key, value) in headers {
                if let Some(problem) = header_problem(key, value) {
                    return Err(McpError::config(
                        "code",
                        format!("mcpServers.{name}.headers.{key}"),
                        problem,
                    ));
                }
            }
        }
        self.servers.insert(name, server);
        Ok(self)
    }

    /// Sets what a server that never comes up does.
    #[must_use]
    pub fn on_start_failure(mut self, failure: StartFailure) -> Self {
        self.on_start_failure = failure;
        self
    }

    /// The servers, by name.
    pub fn servers(&self) -> impl Iterator<Item = (&str, &ServerConfig)> {
        self.servers
            .iter()
            .map(|(name, server)| (name.as_str(), server))
    }

    /// What a server that never comes up does.
    pub fn start_failure(&self) -> StartFailure {
        self.on_start_failure
    }

    /// The servers of a Claude Code `.mcp.json` file (`{"mcpServers": {...}}`), with the
    /// defaults of [`ServerConfig`].
    ///
    /// # Errors
    ///
    /// [`McpError::Config`] naming the file and the field for a file that cannot be read,
    /// is not JSON, or holds a server that is not one (see [`McpConfig::parse_mcp_json`]).
    pub fn from_mcp_json(path: impl AsRef<Path>) -> Result<Self, McpError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| McpError::config(&origin, "(file)", format!("cannot be read: {e}")))?;
        McpConfig::parse_mcp_json(&text, &origin)
    }

    /// The servers of `.mcp.json` text, read as Claude Code reads it: each entry of
    /// `mcpServers` is a stdio server (`command`, `args`, `env`; `type` absent or
    /// `"stdio"`) or a streamable-HTTP one (`type`: `"http"` or `"streamable-http"`, `url`,
    /// `headers`); `${VAR}` and `${VAR:-default}` in any of those strings are read from the
    /// environment. Other fields are ignored. `origin` names the text in errors.
    ///
    /// ```
    /// use agent_tree_mcp::{McpConfig, Transport};
    /// let config = McpConfig::parse_mcp_json(r#"{"mcpServers": {
    ///     "fs": {"command": "mcp-server-filesystem", "args": ["${ROOT:-/tmp}"]},
    ///     "web": {"type": "http", "url": "http://127.0.0.1:3001/mcp"}
    /// }}"#, ".mcp.json").unwrap();
    /// let (name, fs) = config.servers().next().unwrap();
    /// assert_eq!(name, "fs");
    /// assert!(matches!(&fs.transport, Transport::Stdio { args, .. } if args[0] == "/tmp"));
    ///
    /// let bad = McpConfig::parse_mcp_json(r#"{"mcpServers": {"fs": {"args": []}}}"#, ".mcp.json");
    /// assert_eq!(
    ///     bad.unwrap_err().to_string(),
    ///     ".mcp.json: mcpServers.fs.command: a stdio server needs a command (or give `type` and `url`)"
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`McpError::Config`] naming `origin` and the field: not JSON, no `mcpServers`
    /// object, a bad server name, a field of the wrong type, an unknown or SSE `type`, an
    /// unset variable without a default.
    pub fn parse_mcp_json(text: &str, origin: &str) -> Result<Self, McpError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| McpError::config(origin, "(file)", format!("is not JSON: {e}")))?;
        let servers = root
            .get("mcpServers")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                McpError::config(origin, "mcpServers", "expected an object of servers")
            })?;
        let mut config = McpConfig::new();
        for (name, entry) in servers {
            let field = format!("mcpServers.{name}");
            if let Some(problem) = server_name_problem(name) {
                return Err(McpError::config(origin, field, problem));
            }
            let entry = Entry {
                fields: entry
                    .as_object()
                    .ok_or_else(|| McpError::config(origin, &field, "expected an object"))?,
                origin,
                field: &field,
            };
            config.servers.insert(name.clone(), entry.server()?);
        }
        Ok(config)
    }
}

/// One `mcpServers` entry being read.
struct Entry<'a> {
    fields: &'a Map<String, Value>,
    origin: &'a str,
    /// `mcpServers.<name>`.
    field: &'a str,
}

impl Entry<'_> {
    fn server(&self) -> Result<ServerConfig, McpError> {
        let kind = self.string("type")?;
        match kind.as_deref() {
            None | Some("stdio") => {
                let command = self.string("command")?.ok_or_else(|| {
                    self.error("command", "a stdio server needs a command (or give `type` and `url`)")
                })?;
                let mut server = ServerConfig::stdio(command, self.strings("args")?);
                for (key, value) in self.map("env")? {
                    server = server.env(key, value);
                }
                Ok(server)
            }
            Some("http" | "streamable-http" | "streamableHttp") => {
                let url = self
                    .string("url")?
                    .ok_or_else(|| self.error("url", "an HTTP server needs a url"))?;
                let mut server = ServerConfig::http(url);
                for (key, value) in self.map("headers")? {
                    if let Some(problem) = header_problem(&key, &value) {
                        return Err(self.error(&format!("headers.{key}"), problem));
                    }
                    server = server.header(key, value);
                }
                Ok(server)
            }
            Some("sse") => Err(self.error(
                "type",
                "the SSE transport is not supported (MCP replaced it with streamable HTTP: `\"type\": \"http\"`)",
            )),
            Some(other) => Err(self.error(
                "type",
                format!("expected \"stdio\", \"http\" or \"streamable-http\", found {other:?}"),
            )),
        }
    }

    fn error(&self, key: &str, message: impl Into<String>) -> McpError {
        McpError::config(self.origin, format!("{}.{key}", self.field), message)
    }

    /// The string field `key`, its variables expanded.
    fn string(&self, key: &str) -> Result<Option<String>, McpError> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => expand(s).map(Some).map_err(|m| self.error(key, m)),
            Some(other) => {
                Err(self.error(key, format!("expected a string, found {}", kind(other))))
            }
        }
    }

    /// The list of strings `key` (empty when absent), each expanded.
    fn strings(&self, key: &str) -> Result<Vec<String>, McpError> {
        let Some(value) = self.fields.get(key) else {
            return Ok(Vec::new());
        };
        let items = value.as_array().ok_or_else(|| {
            self.error(
                key,
                format!("expected a list of strings, found {}", kind(value)),
            )
        })?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("{key}[{i}]");
                match item {
                    Value::String(s) => expand(s).map_err(|m| self.error(&at, m)),
                    other => {
                        Err(self.error(&at, format!("expected a string, found {}", kind(other))))
                    }
                }
            })
            .collect()
    }

    /// The object of strings `key` (empty when absent), each value expanded.
    fn map(&self, key: &str) -> Result<BTreeMap<String, String>, McpError> {
        let Some(value) = self.fields.get(key) else {
            return Ok(BTreeMap::new());
        };
        let entries = value.as_object().ok_or_else(|| {
            self.error(
                key,
                format!("expected an object of strings, found {}", kind(value)),
            )
        })?;
        entries
            .iter()
            .map(|(name, item)| {
                let at = format!("{key}.{name}");
                match item {
                    Value::String(s) => expand(s)
                        .map(|v| (name.clone(), v))
                        .map_err(|m| self.error(&at, m)),
                    other => {
                        Err(self.error(&at, format!("expected a string, found {}", kind(other))))
                    }
                }
            })
            .collect()
    }
}

/// Why an HTTP request cannot carry header `name: value`, if it cannot.
fn header_problem(name: &str, value: &str) -> Option<String> {
    if let Err(e) = http::HeaderName::try_from(name) {
        return Some(format!("not a header name HTTP can carry: {e}"));
    }
    if let Err(e) = http::HeaderValue::try_from(value) {
        return Some(format!("not a header value HTTP can carry: {e}"));
    }
    None
}

/// A JSON value's kind, for errors.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `text` with `${VAR}` and `${VAR:-default}` read from the environment.
fn expand(text: &str) -> Result<String, String> {
    expand_with(text, |name| std::env::var(name).ok())
}

/// [`expand`] with the environment given.
fn expand_with(text: &str, var: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`${{` without a closing `}}` in {text:?}"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (var(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "the environment variable {name} is not set (write ${{{name}:-default}} for a default)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `${VAR}` reads the environment, `${VAR:-default}` falls back; an unset variable
    /// without a default is an error naming it.
    #[test]
    fn variables_are_expanded_as_claude_code_does() {
        let env = |name: &str| (name == "HOME").then(|| "/home/a".to_owned());
        assert_eq!(expand_with("${HOME}/x", env).unwrap(), "/home/a/x");
        assert_eq!(expand_with("${ROOT:-/tmp}", env).unwrap(), "/tmp");
        assert_eq!(expand_with("a$b{c}", env).unwrap(), "a$b{c}");
        assert!(
            expand_with("${TOKEN}", env)
                .unwrap_err()
                .contains("TOKEN is not set")
        );
        assert!(expand_with("${HOME", env).is_err());
    }

    /// A malformed `.mcp.json` is refused naming the file and the field.
    #[test]
    fn a_malformed_file_names_the_file_and_field() {
        let cases = [
            ("[]", "f: mcpServers: expected an object of servers"),
            (
                r#"{"mcpServers": {"a__b": {"command": "x"}}}"#,
                "f: mcpServers.a__b: a server's name",
            ),
            (
                r#"{"mcpServers": {"fs": {"command": 3}}}"#,
                "f: mcpServers.fs.command: expected a string, found a number",
            ),
            (
                r#"{"mcpServers": {"fs": {"command": "x", "args": ["a", 1]}}}"#,
                "f: mcpServers.fs.args[1]: expected a string, found a number",
            ),
            (
                r#"{"mcpServers": {"fs": {"command": "x", "env": {"K": true}}}}"#,
                "f: mcpServers.fs.env.K: expected a string, found a boolean",
            ),
            (
                r#"{"mcpServers": {"w": {"type": "sse", "url": "http://x"}}}"#,
                "f: mcpServers.w.type: the SSE transport is not supported",
            ),
            (
                r#"{"mcpServers": {"w": {"type": "http"}}}"#,
                "f: mcpServers.w.url: an HTTP server needs a url",
            ),
            (
                r#"{"mcpServers": {"w": {"type": "ws"}}}"#,
                "f: mcpServers.w.type: expected \"stdio\"",
            ),
            ("{", "f: (file): is not JSON"),
        ];
        for (text, expected) in cases {
            let error = McpConfig::parse_mcp_json(text, "f")
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(expected), "{text}: {error}");
        }
    }

    /// Both transports are read with their fields; unknown fields are ignored.
    #[test]
    fn both_transports_are_read() {
        let config = McpConfig::parse_mcp_json(
            r#"{"mcpServers": {
                "fs": {"type": "stdio", "command": "srv", "args": ["a"], "env": {"K": "v"}, "oauth": {}},
                "web": {"type": "http", "url": "http://h/mcp", "headers": {"Authorization": "Bearer t"}}
            }}"#,
            "f",
        )
        .unwrap();
        let servers: Vec<_> = config.servers().collect();
        assert_eq!(
            servers[0].1.transport,
            Transport::Stdio {
                command: "srv".into(),
                args: vec!["a".into()],
                env: BTreeMap::from([("K".into(), "v".into())]),
                cwd: None,
            }
        );
        assert_eq!(
            servers[1].1.transport,
            Transport::Http {
                url: "http://h/mcp".into(),
                headers: BTreeMap::from([("Authorization".into(), "Bearer t".into())]),
            }
        );
    }

    /// `${VAR}` and `${VAR:-default}` are expanded in an HTTP server's url and headers as
    /// in a stdio server's command, args and env; an unset variable without a default is
    /// refused naming the field it is in.
    #[test]
    fn variables_are_expanded_in_every_field_claude_code_expands() {
        let home = std::env::var("HOME").expect("HOME is set");
        let config = McpConfig::parse_mcp_json(
            r#"{"mcpServers": {
                "fs": {"command": "${HOME}/bin/srv", "args": ["${AGENT_TREE_UNSET_X:-a}"],
                       "env": {"K": "${HOME}"}},
                "web": {"type": "http", "url": "${AGENT_TREE_UNSET_X:-http://h}/mcp",
                        "headers": {"Authorization": "Bearer ${AGENT_TREE_UNSET_X:-t}", "x-home": "${HOME}"}}
            }}"#,
            "f",
        )
        .unwrap();
        let servers: Vec<_> = config.servers().collect();
        assert_eq!(
            servers[0].1.transport,
            Transport::Stdio {
                command: format!("{home}/bin/srv"),
                args: vec!["a".into()],
                env: BTreeMap::from([("K".into(), home.clone())]),
                cwd: None,
            }
        );
        assert_eq!(
            servers[1].1.transport,
            Transport::Http {
                url: "http://h/mcp".into(),
                headers: BTreeMap::from([
                    ("Authorization".into(), "Bearer t".into()),
                    ("x-home".into(), home),
                ]),
            }
        );
        let unset = McpConfig::parse_mcp_json(
            r#"{"mcpServers": {"web": {"type": "http", "url": "http://h",
                "headers": {"Authorization": "Bearer ${AGENT_TREE_UNSET_X}"}}}}"#,
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(
            unset.starts_with("f: mcpServers.web.headers.Authorization: the environment variable AGENT_TREE_UNSET_X is not set"),
            "{unset}"
        );
    }

    /// A header that HTTP cannot carry (a name with a space, a value with a line break) is
    /// refused when the configuration is read, naming its field, not when the server
    /// starts.
    #[test]
    fn a_header_http_cannot_carry_is_refused_naming_its_field() {
        for (headers, field) in [
            (
                r#"{"bad name": "v"}"#,
                "f: mcpServers.web.headers.bad name: ",
            ),
            (r#"{"x-ok": "a\nb"}"#, "f: mcpServers.web.headers.x-ok: "),
        ] {
            let text = format!(
                r#"{{"mcpServers": {{"web": {{"type": "http", "url": "http://h", "headers": {headers}}}}}}}"#
            );
            let error = McpConfig::parse_mcp_json(&text, "f").map(|_| ());
            assert!(
                matches!(&error, Err(e) if e.to_string().starts_with(field)),
                "{headers}: {error:?}"
            );
        }
    }
}
