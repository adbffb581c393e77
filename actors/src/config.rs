//! Tree-wide limits and switches, with their defaults named in one place.
//!
//! A [`TreeConfig`] is built in code or read from a JSON settings file
//! ([`TreeConfig::from_json`], [`TreeConfig::from_json_file`]), whose fields carry units
//! (`shutdown_grace_ms`) and are checked once ([`TreeConfig::validate`]).
//!
//! # Invariants
//!
//! * Every [`ConfigError`] names where the settings came from (the file, `settings` for text,
//!   `config` for a config built in code), and every error about a field names the field as
//!   the settings spell it: a value of the wrong type, an unknown or repeated field, a value
//!   out of range. Only text that is not a JSON object at all has no field to name.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use agent_tree_protocol::{DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_PERIOD_MS, Sampling, Strategy};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// Default cap on depth: root 0, top-level 1, at most depth 5.
pub const DEFAULT_MAX_DEPTH: u32 = 5;
/// Default cap on live children of one agent.
pub const DEFAULT_MAX_CHILDREN_PER_AGENT: usize = 4;
/// Default cap on live agents in the whole tree.
pub const DEFAULT_MAX_TOTAL_AGENTS: usize = 32;
/// Default number of top-level background agents running at once.
pub const DEFAULT_MAX_CONCURRENT: usize = 10;
/// Default grace period of a shutdown: one deadline for the whole subtree.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// How long a shutdown waits, after its deadline, for killed actors to exit; a shutdown
/// hook still running then is cut off too.
pub const SHUTDOWN_KILL_WAIT: Duration = Duration::from_millis(100);
/// Deepest depth at which a definition's `inherit_context` is honoured.
pub const INHERIT_CONTEXT_MAX_DEPTH: u32 = 2;
/// Default cap on children one agent may spawn in its whole life.
pub const DEFAULT_MAX_SPAWNS_PER_AGENT: u32 = 64;
/// Default cap on agents a tree may spawn in its whole life.
pub const DEFAULT_MAX_SPAWNS_PER_TREE: u64 = 10_000;
/// Default cap on tool calls one model turn may make; the calls past it are answered with an
/// error result, never run.
pub const DEFAULT_MAX_TOOL_CALLS_PER_TURN: usize = 64;
/// Default cap on steers one run of an agent may be sent.
pub const DEFAULT_MAX_STEERS_PER_RUN: u32 = 100;
/// Default cap on the size of one steer's text, in bytes.
pub const DEFAULT_MAX_STEER_BYTES: usize = 32 * 1024;
/// Default number of times a turn cut off at the length limit is continued.
pub const DEFAULT_LENGTH_CONTINUATIONS: u32 = 2;
/// The output limit of a model turn when neither the agent's definition nor the application
/// sets one: a model that never stops cannot fill a server's whole context.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;

/// How failed model calls of retryable kinds (rate-limited, transient) are tried again.
///
/// At most `max_attempts` calls per turn in all; between them, a provider's retry-after is
/// waited exactly (unless longer than `max_wait`, which fails the call at once), else an
/// exponential backoff from `initial_backoff`, doubling, capped at `max_backoff`, with equal
/// jitter (each wait is between half and all of the backoff, drawn from the agent, run and
/// turn, so the same tree waits the same). Each failed attempt's usage is billed; a
/// `retrying` event names the attempt and the wait. The waits run on tokio's clock, so paused
/// tests advance through them.
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::{RetryPolicy, TreeConfig};
/// let config = TreeConfig::default().with_retry(
///     RetryPolicy::default()
///         .with_max_attempts(6)
///         .with_backoff(Duration::from_millis(200), Duration::from_secs(10)),
/// );
/// assert_eq!(config.retry.max_attempts, 6);
/// assert_eq!(RetryPolicy::none().max_attempts, 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Calls per turn in all, the first included (1: never retry).
    pub max_attempts: u32,
    /// The first backoff.
    pub initial_backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
    /// The longest retry-after honoured; a longer one fails the call at once.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    /// 4 attempts, backoff from 500 ms to 30 s, retry-after honoured up to 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_wait: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries: every failure fails the agent.
    pub fn none() -> Self {
        RetryPolicy::default().with_max_attempts(1)
    }

    /// Sets the number of calls per turn in all.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Sets the first and the longest backoff.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Sets the longest retry-after honoured.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }
}

/// Which agents an agent's control tools (result, steer, resume, abort) reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlScope {
    /// Only its immediate children (the default).
    #[default]
    Children,
    /// Any of its descendants.
    Descendants,
}

/// Limits and switches of one tree.
///
/// ```
/// use agent_tree_actors::TreeConfig;
/// let config = TreeConfig::default().with_max_depth(3);
/// assert_eq!(config.max_depth, 3);
/// assert_eq!(config.max_children_per_agent, 4);
///
/// let config = TreeConfig::from_json(r#"{"max_depth": 2, "shutdown_grace_ms": 500}"#).unwrap();
/// assert_eq!(config.shutdown_grace.as_millis(), 500);
/// assert!(TreeConfig::from_json(r#"{"max_total_agents": 0}"#).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TreeConfig {
    /// Deepest depth an agent may have (0 or 1 disables nesting).
    pub max_depth: u32,
    /// Live children one agent may have at once.
    pub max_children_per_agent: usize,
    /// Live (queued or running) agents the tree may have at once.
    pub max_total_agents: usize,
    /// Top-level background agents running at once (the rest wait, FIFO).
    pub max_concurrent: usize,
    /// Children one agent may spawn in its whole life, if limited (by default
    /// [`DEFAULT_MAX_SPAWNS_PER_AGENT`]).
    pub max_spawns_per_agent: Option<u32>,
    /// Agents the whole tree may spawn in its life, the application's included.
    pub max_spawns_per_tree: u64,
    /// Tool calls one model turn may make; the calls past it get an error result.
    pub max_tool_calls_per_turn: usize,
    /// Steers one run of an agent may be sent (by its owner or the application).
    pub max_steers_per_run: u32,
    /// The largest steer, in bytes of text.
    pub max_steer_bytes: usize,
    /// How failed model calls are retried.
    pub retry: RetryPolicy,
    /// How many times a turn cut off at the length limit (without tool calls) is continued
    /// (the model is asked to go on, and the pieces are joined into one answer) before the
    /// agent fails with reason `length_limit`; 0 fails at the first cut-off.
    pub length_continuations: u32,
    /// Whether text a model streams reaches event subscribers as `text_delta` events.
    pub stream_events: bool,
    /// Tokens (input + output) a subtree may use before its root may spawn no more, if
    /// limited.
    pub max_subtree_tokens: Option<u64>,
    /// Which agents the control tools reach.
    pub control_scope: ControlScope,
    /// Whether a child's user tools are limited to those its owner holds.
    pub attenuate_tools: bool,
    /// The one deadline a shutdown gives a whole subtree.
    pub shutdown_grace: Duration,
    /// The root's strategy for top-level agents.
    pub root_strategy: Strategy,
    /// The root's restart intensity: at most this many restarts...
    pub root_max_restarts: u32,
    /// ...within this window.
    pub root_restart_period: Duration,
    /// The application's sampling for every agent; a definition's own fields win
    /// ([`Sampling::or`]). By default only an output limit,
    /// [`DEFAULT_MAX_OUTPUT_TOKENS`].
    pub sampling: Sampling,
    /// Model calls in flight at once per model name (a definition's `model`; definitions
    /// naming none share one bound), across the whole tree, if bounded (by default not).
    /// A turn waits for its place inside the tree before each attempt, so a model's
    /// timeout measures the server's work, never a queue in the tree; see
    /// [`TreeConfig::with_max_model_calls`].
    pub max_model_calls: Option<usize>,
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig {
            max_depth: DEFAULT_MAX_DEPTH,
            max_children_per_agent: DEFAULT_MAX_CHILDREN_PER_AGENT,
            max_total_agents: DEFAULT_MAX_TOTAL_AGENTS,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            max_spawns_per_agent: Some(DEFAULT_MAX_SPAWNS_PER_AGENT),
            max_spawns_per_tree: DEFAULT_MAX_SPAWNS_PER_TREE,
            max_tool_calls_per_turn: DEFAULT_MAX_TOOL_CALLS_PER_TURN,
            max_steers_per_run: DEFAULT_MAX_STEERS_PER_RUN,
            max_steer_bytes: DEFAULT_MAX_STEER_BYTES,
            retry: RetryPolicy::default(),
            length_continuations: DEFAULT_LENGTH_CONTINUATIONS,
            stream_events: false,
            max_subtree_tokens: None,
            control_scope: ControlScope::Children,
            attenuate_tools: false,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            root_strategy: Strategy::OneForOne,
            root_max_restarts: DEFAULT_MAX_RESTARTS,
            root_restart_period: Duration::from_millis(DEFAULT_RESTART_PERIOD_MS),
            sampling: Sampling::default().with_max_output_tokens(DEFAULT_MAX_OUTPUT_TOKENS),
            max_model_calls: None,
        }
    }
}

/// A settings file or config that is not valid.
///
/// ```
/// use agent_tree_actors::{ConfigError, TreeConfig};
/// let err = TreeConfig::from_json(r#"{"max_depth": -1}"#).unwrap_err();
/// assert!(matches!(&err, ConfigError::Field { field, .. } if field == "max_depth"));
/// assert_eq!(
///     err.to_string(),
///     "settings: field `max_depth`: invalid value: integer `-1`, expected u32 at line 1 column 16"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a JSON object of settings: malformed outside any field's value
    /// (`{"max_depth": 2,}`), not an object (`[]`), or followed by more text.
    #[error("{origin}: {source}")]
    Json {
        /// The file, or `settings` for text.
        origin: String,
        /// The parser's error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A field could not be read: its value has the wrong type or is malformed, or the field
    /// is unknown or given twice.
    #[error("{origin}: field `{field}`: {source}")]
    Field {
        /// The file, or `settings` for text.
        origin: String,
        /// The field, as written in the settings.
        field: String,
        /// The parser's error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A field has a value outside its range.
    #[error("{origin}: field `{field}`: {message}")]
    Invalid {
        /// The file, or `settings` for text.
        origin: String,
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Declares [`Settings`], its field names and the reading of one field's value.
macro_rules! settings {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// The settings file's shape: every field optional (null is absent), units in the
        /// names.
        #[derive(Debug, Default)]
        struct Settings {
            $($field: Option<$ty>,)*
        }

        /// Every field of [`Settings`], in declaration order.
        const SETTINGS_FIELDS: &[&str] = &[$(stringify!($field)),*];

        impl Settings {
            /// Reads the value of `field` (one of [`SETTINGS_FIELDS`]) from `map`.
            fn read_value<'de, A: MapAccess<'de>>(
                &mut self,
                field: &str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                match field {
                    $(stringify!($field) => self.$field = map.next_value()?,)*
                    other => return Err(de::Error::unknown_field(other, SETTINGS_FIELDS)),
                }
                Ok(())
            }
        }
    };
}

settings! {
    max_depth: u32,
    max_children_per_agent: usize,
    max_total_agents: usize,
    max_concurrent: usize,
    max_spawns_per_agent: u32,
    max_spawns_per_tree: u64,
    max_tool_calls_per_turn: usize,
    max_steers_per_run: u32,
    max_steer_bytes: usize,
    model_retry_attempts: u32,
    model_retry_initial_ms: u64,
    model_retry_max_ms: u64,
    model_retry_max_wait_ms: u64,
    length_continuations: u32,
    stream_events: bool,
    max_subtree_tokens: u64,
    control_scope: ControlScope,
    attenuate_tools: bool,
    shutdown_grace_ms: u64,
    root_strategy: Strategy,
    root_max_restarts: u32,
    root_restart_period_ms: u64,
    sampling: Sampling,
    max_model_calls: usize,
}

/// Reads [`Settings`], keeping in `current` the field whose key or value is being read, so
/// an error can name it.
///
/// The parser's error is kept whole (its line and column are added once, where it arose);
/// the field's name is added around it by [`TreeConfig::parse`], not inside it.
struct SettingsSeed<'a> {
    current: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for SettingsSeed<'_> {
    type Value = Settings;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Settings, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SettingsSeed<'_> {
    type Value = Settings;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Settings, A::Error> {
        let mut settings = Settings::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let field = SETTINGS_FIELDS.iter().copied().find(|f| *f == key);
            *self.current = Some(key);
            let Some(field) = field else {
                let key = self.current.as_deref().unwrap_or_default();
                return Err(de::Error::unknown_field(key, SETTINGS_FIELDS));
            };
            if seen.contains(&field) {
                return Err(de::Error::duplicate_field(field));
            }
            seen.push(field);
            settings.read_value(field, &mut map)?;
            // Past the value: a later error (a missing `,`, a trailing comma) belongs to no
            // field.
            *self.current = None;
        }
        Ok(settings)
    }
}

impl TreeConfig {
    /// Reads settings from JSON text; absent (or null) fields keep their defaults.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Field`] for a field of the wrong type, unknown or given twice,
    /// [`ConfigError::Invalid`] for a value out of range (each naming the field), and
    /// [`ConfigError::Json`] for text that is not a JSON object. Errors name `settings` as
    /// their origin.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        Self::parse(text, "settings")
    }

    /// Reads a JSON settings file; absent fields keep their defaults.
    ///
    /// # Errors
    ///
    /// As [`TreeConfig::from_json`], plus [`ConfigError::Read`]; errors name the file as their
    /// origin.
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut current = None;
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let read = SettingsSeed {
            current: &mut current,
        }
        .deserialize(&mut deserializer)
        .and_then(|settings| deserializer.end().map(|()| settings));
        let s = read.map_err(|source| match current.take() {
            Some(field) => ConfigError::Field {
                origin: origin.to_owned(),
                field,
                source,
            },
            None => ConfigError::Json {
                origin: origin.to_owned(),
                source,
            },
        })?;
        let d = TreeConfig::default();
        let config = TreeConfig {
            max_depth: s.max_depth.unwrap_or(d.max_depth),
            max_children_per_agent: s.max_children_per_agent.unwrap_or(d.max_children_per_agent),
            max_total_agents: s.max_total_agents.unwrap_or(d.max_total_agents),
            max_concurrent: s.max_concurrent.unwrap_or(d.max_concurrent),
            max_spawns_per_agent: s.max_spawns_per_agent.or(d.max_spawns_per_agent),
            max_spawns_per_tree: s.max_spawns_per_tree.unwrap_or(d.max_spawns_per_tree),
            max_tool_calls_per_turn: s
                .max_tool_calls_per_turn
                .unwrap_or(d.max_tool_calls_per_turn),
            max_steers_per_run: s.max_steers_per_run.unwrap_or(d.max_steers_per_run),
            max_steer_bytes: s.max_steer_bytes.unwrap_or(d.max_steer_bytes),
            retry: RetryPolicy {
                max_attempts: s.model_retry_attempts.unwrap_or(d.retry.max_attempts),
                initial_backoff: s
                    .model_retry_initial_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.retry.initial_backoff),
                max_backoff: s
                    .model_retry_max_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.retry.max_backoff),
                max_wait: s
                    .model_retry_max_wait_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.retry.max_wait),
            },
            length_continuations: s.length_continuations.unwrap_or(d.length_continuations),
            stream_events: s.stream_events.unwrap_or(d.stream_events),
            max_subtree_tokens: s.max_subtree_tokens,
            control_scope: s.control_scope.unwrap_or(d.control_scope),
            attenuate_tools: s.attenuate_tools.unwrap_or(d.attenuate_tools),
            shutdown_grace: s
                .shutdown_grace_ms
                .map(Duration::from_millis)
                .unwrap_or(d.shutdown_grace),
            root_strategy: s.root_strategy.unwrap_or(d.root_strategy),
            root_max_restarts: s.root_max_restarts.unwrap_or(d.root_max_restarts),
            root_restart_period: s
                .root_restart_period_ms
                .map(Duration::from_millis)
                .unwrap_or(d.root_restart_period),
            sampling: s
                .sampling
                .map_or(d.sampling.clone(), |own| own.or(&d.sampling)),
            max_model_calls: s.max_model_calls.or(d.max_model_calls),
        };
        config.check(origin)?;
        Ok(config)
    }

    /// Checks every limit is in range.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check("config")
    }

    fn check(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |field, message: &str| ConfigError::Invalid {
            origin: origin.to_owned(),
            field,
            message: message.to_owned(),
        };
        if self.max_children_per_agent == 0 {
            return Err(invalid("max_children_per_agent", "must be at least 1"));
        }
        if self.max_total_agents == 0 {
            return Err(invalid("max_total_agents", "must be at least 1"));
        }
        if self.max_concurrent == 0 {
            return Err(invalid("max_concurrent", "must be at least 1"));
        }
        if self.shutdown_grace.is_zero() {
            return Err(invalid("shutdown_grace_ms", "must be more than 0"));
        }
        if self.root_restart_period.is_zero() {
            return Err(invalid("root_restart_period_ms", "must be more than 0"));
        }
        if self.max_spawns_per_tree == 0 {
            return Err(invalid("max_spawns_per_tree", "must be at least 1"));
        }
        if self.max_tool_calls_per_turn == 0 {
            return Err(invalid("max_tool_calls_per_turn", "must be at least 1"));
        }
        if self.max_steer_bytes == 0 {
            return Err(invalid("max_steer_bytes", "must be at least 1"));
        }
        if self.max_model_calls == Some(0) {
            return Err(invalid("max_model_calls", "must be at least 1"));
        }
        if let Err(error) = self.sampling.check() {
            return Err(ConfigError::Invalid {
                origin: origin.to_owned(),
                field: "sampling",
                message: error.to_string(),
            });
        }
        if self.retry.max_attempts == 0 {
            return Err(invalid("model_retry_attempts", "must be at least 1"));
        }
        if self.retry.initial_backoff > self.retry.max_backoff {
            return Err(invalid(
                "model_retry_initial_ms",
                "must not be more than model_retry_max_ms",
            ));
        }
        Ok(())
    }

    /// Sets the depth cap.
    pub fn with_max_depth(mut self, max_depth: u32) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// Sets the cap on live children per agent.
    pub fn with_max_children_per_agent(mut self, max: usize) -> Self {
        self.max_children_per_agent = max;
        self
    }

    /// Sets the cap on live agents in the tree.
    pub fn with_max_total_agents(mut self, max: usize) -> Self {
        self.max_total_agents = max;
        self
    }

    /// Sets the pool size for top-level background agents.
    pub fn with_max_concurrent(mut self, max: usize) -> Self {
        self.max_concurrent = max;
        self
    }

    /// Limits how many children one agent may spawn in its life.
    pub fn with_max_spawns_per_agent(mut self, max: u32) -> Self {
        self.max_spawns_per_agent = Some(max);
        self
    }

    /// Removes the cap on children one agent may spawn in its life.
    pub fn with_unlimited_spawns_per_agent(mut self) -> Self {
        self.max_spawns_per_agent = None;
        self
    }

    /// Sets the cap on agents the tree may spawn in its life.
    pub fn with_max_spawns_per_tree(mut self, max: u64) -> Self {
        self.max_spawns_per_tree = max;
        self
    }

    /// Sets the cap on tool calls per model turn.
    pub fn with_max_tool_calls_per_turn(mut self, max: usize) -> Self {
        self.max_tool_calls_per_turn = max;
        self
    }

    /// Sets the caps on steers per run and on one steer's size in bytes.
    pub fn with_steer_limits(mut self, per_run: u32, max_bytes: usize) -> Self {
        self.max_steers_per_run = per_run;
        self.max_steer_bytes = max_bytes;
        self
    }

    /// Sets how failed model calls are retried.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how many times a turn cut off at the length limit is continued.
    pub fn with_length_continuations(mut self, continuations: u32) -> Self {
        self.length_continuations = continuations;
        self
    }

    /// Turns `text_delta` events on or off.
    pub fn with_stream_events(mut self, on: bool) -> Self {
        self.stream_events = on;
        self
    }

    /// Limits the tokens a subtree may use before it may spawn no more.
    pub fn with_max_subtree_tokens(mut self, max: u64) -> Self {
        self.max_subtree_tokens = Some(max);
        self
    }

    /// Sets which agents the control tools reach.
    pub fn with_control_scope(mut self, scope: ControlScope) -> Self {
        self.control_scope = scope;
        self
    }

    /// Turns tool attenuation on or off.
    pub fn with_attenuated_tools(mut self, on: bool) -> Self {
        self.attenuate_tools = on;
        self
    }

    /// Sets the root's strategy and restart intensity for top-level agents.
    pub fn with_root_supervision(
        mut self,
        strategy: Strategy,
        max_restarts: u32,
        period: Duration,
    ) -> Self {
        self.root_strategy = strategy;
        self.root_max_restarts = max_restarts;
        self.root_restart_period = period;
        self
    }

    /// Sets the shutdown grace period.
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Bounds the model calls in flight at once to `max` per model name, across the whole
    /// tree (settings key `max_model_calls`). A local server serving a few requests at a
    /// time is given no more; the rest wait inside the tree, in the order they asked, each
    /// before its attempt (a retry's backoff holds no place), so an adapter's timeout never
    /// counts a wait in the tree. An abort, kill or shutdown of a waiting agent ends its wait
    /// at once. Unbounded by default.
    ///
    /// ```
    /// use agent_tree_actors::TreeConfig;
    /// let config = TreeConfig::default().with_max_model_calls(1);
    /// assert_eq!(config.max_model_calls, Some(1));
    /// assert_eq!(TreeConfig::default().max_model_calls, None);
    /// let config = TreeConfig::from_json(r#"{"max_model_calls": 2}"#).unwrap();
    /// assert_eq!(config.max_model_calls, Some(2));
    /// assert!(TreeConfig::from_json(r#"{"max_model_calls": 0}"#).is_err());
    /// ```
    pub fn with_max_model_calls(mut self, max: usize) -> Self {
        self.max_model_calls = Some(max);
        self
    }

    /// The same config with the application's sampling for every agent (a definition's own
    /// fields win). Replaces the default, output limit included: keep one
    /// (`.with_max_output_tokens(..)`) unless the provider's own default is meant.
    ///
    /// ```
    /// use agent_tree_actors::TreeConfig;
    /// use agent_tree_protocol::Sampling;
    /// let config = TreeConfig::default()
    ///     .with_sampling(Sampling::default().with_temperature(0.0).with_max_output_tokens(256));
    /// assert_eq!(config.sampling.max_output_tokens, Some(256));
    /// let config = TreeConfig::from_json(r#"{"sampling": {"seed": 7}}"#).unwrap();
    /// assert_eq!(config.sampling.seed, Some(7));
    /// assert_eq!(config.sampling.max_output_tokens, Some(agent_tree_actors::DEFAULT_MAX_OUTPUT_TOKENS));
    /// ```
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_errors_name_the_field() {
        let err = TreeConfig::from_json(r#"{"max_concurrent": 0}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "settings: field `max_concurrent`: must be at least 1"
        );
        let err = TreeConfig::from_json(r#"{"max_dept": 2}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `max_dept`"),
            "{err}"
        );
        let err = TreeConfig::from_json(r#"{"max_depth": "deep"}"#).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        assert!(TreeConfig::from_json("{").is_err());
    }

    /// A settings file in the temp dir, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "agent-tree-config-{}-{name}.json",
                std::process::id()
            ));
            std::fs::write(&path, text).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_mistyped_value_names_its_field_and_the_file() {
        // The defect: `"max_depth": -1` gave serde's message without the field's name.
        for (i, (text, field, cause)) in [
            (
                r#"{"max_depth": -1}"#,
                "max_depth",
                "invalid value: integer `-1`",
            ),
            (
                r#"{"max_depth": 2, "max_children_per_agent": "four"}"#,
                "max_children_per_agent",
                "invalid type: string \"four\"",
            ),
            (
                r#"{"max_total_agents": true}"#,
                "max_total_agents",
                "invalid type: boolean",
            ),
            (
                r#"{"max_concurrent": 1.5}"#,
                "max_concurrent",
                "invalid type: floating point",
            ),
            (
                r#"{"max_spawns_per_agent": [1]}"#,
                "max_spawns_per_agent",
                "invalid type: sequence",
            ),
            (
                r#"{"max_subtree_tokens": {}}"#,
                "max_subtree_tokens",
                "invalid type: map",
            ),
            (
                r#"{"control_scope": "everyone"}"#,
                "control_scope",
                "unknown variant `everyone`",
            ),
            (
                r#"{"attenuate_tools": "yes"}"#,
                "attenuate_tools",
                "invalid type: string",
            ),
            (
                r#"{"shutdown_grace_ms": -5}"#,
                "shutdown_grace_ms",
                "invalid value: integer `-5`",
            ),
            (r#"{"root_strategy": 3}"#, "root_strategy", "expected value"),
            (
                r#"{"root_max_restarts": 4294967296}"#,
                "root_max_restarts",
                "invalid value",
            ),
            (
                r#"{"root_restart_period_ms": "5s"}"#,
                "root_restart_period_ms",
                "invalid type",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let file = TempFile::new(&format!("mistyped-{i}"), text);
            let err = TreeConfig::from_json_file(&file.0).unwrap_err();
            let shown = err.to_string();
            let prefix = format!("{}: field `{field}`: {cause}", file.0.display());
            assert!(
                shown.starts_with(&prefix),
                "{shown:?} should start with {prefix:?}"
            );
            assert!(shown.contains(" at line 1 column "), "{shown}");
            assert_eq!(shown.matches(" at line ").count(), 1, "{shown}");
            // The parser's error is kept as the source, not only as text.
            let source = std::error::Error::source(&err).expect("a source");
            assert!(
                source.downcast_ref::<serde_json::Error>().is_some(),
                "{source:?}"
            );
            let from_text = TreeConfig::from_json(text).unwrap_err().to_string();
            assert!(
                from_text.starts_with(&format!("settings: field `{field}`: {cause}")),
                "{from_text}"
            );
        }
    }

    #[test]
    fn unknown_and_repeated_fields_are_named() {
        let err = TreeConfig::from_json(r#"{"max_depth": 2, "max_dept": 2}"#).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "settings: field `max_dept`: unknown field `max_dept`, expected one of"
            ),
            "{err}"
        );
        let err = TreeConfig::from_json(r#"{"max_depth": 2, "max_depth": 3}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("settings: field `max_depth`: duplicate field `max_depth`"),
            "{err}"
        );
    }

    #[test]
    fn only_text_that_is_no_settings_object_has_no_field() {
        for text in [
            "{",
            "[]",
            "42",
            r#"{"max_depth": 2} x"#,
            r#"{"max_depth": 2,}"#,
        ] {
            let err = TreeConfig::from_json(text).unwrap_err();
            assert!(matches!(err, ConfigError::Json { .. }), "{text}: {err:?}");
            assert!(err.to_string().starts_with("settings: "), "{err}");
        }
        assert!(
            TreeConfig::from_json("7")
                .unwrap_err()
                .to_string()
                .contains("expected a JSON object of settings")
        );
    }

    #[test]
    fn null_keeps_the_default() {
        let c = TreeConfig::from_json(r#"{"max_depth": null, "shutdown_grace_ms": null}"#).unwrap();
        assert_eq!(c, TreeConfig::default());
    }

    #[test]
    fn settings_keep_defaults_for_absent_fields() {
        let c =
            TreeConfig::from_json(r#"{"control_scope": "descendants", "attenuate_tools": true}"#)
                .unwrap();
        assert_eq!(c.control_scope, ControlScope::Descendants);
        assert!(c.attenuate_tools);
        assert_eq!(c.max_total_agents, DEFAULT_MAX_TOTAL_AGENTS);
        assert_eq!(c.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
    }
}
