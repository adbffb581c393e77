//! Tree-wide limits and switches, with their defaults named in one place.
//!
//! A [`TreeConfig`] is built in code or read from a JSON settings file
//! ([`TreeConfig::from_json`], [`TreeConfig::from_json_file`]), whose fields carry units
//! (`shutdown_grace_ms`) and are checked once ([`TreeConfig::validate`]).

use std::path::Path;
use std::time::Duration;

use agent_tree_protocol::{DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_PERIOD_MS, Strategy};
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
    /// Children one agent may spawn in its whole life, if limited.
    pub max_spawns_per_agent: Option<u32>,
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
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig {
            max_depth: DEFAULT_MAX_DEPTH,
            max_children_per_agent: DEFAULT_MAX_CHILDREN_PER_AGENT,
            max_total_agents: DEFAULT_MAX_TOTAL_AGENTS,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            max_spawns_per_agent: None,
            max_subtree_tokens: None,
            control_scope: ControlScope::Children,
            attenuate_tools: false,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            root_strategy: Strategy::OneForOne,
            root_max_restarts: DEFAULT_MAX_RESTARTS,
            root_restart_period: Duration::from_millis(DEFAULT_RESTART_PERIOD_MS),
        }
    }
}

/// A settings file or config that is not valid.
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
    /// The JSON is malformed or has unknown or mistyped fields.
    #[error("{origin}: {source}")]
    Json {
        /// The file, or `settings` for text.
        origin: String,
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

/// The settings file's shape: every field optional, units in the names.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    max_depth: Option<u32>,
    max_children_per_agent: Option<usize>,
    max_total_agents: Option<usize>,
    max_concurrent: Option<usize>,
    max_spawns_per_agent: Option<u32>,
    max_subtree_tokens: Option<u64>,
    control_scope: Option<ControlScope>,
    attenuate_tools: Option<bool>,
    shutdown_grace_ms: Option<u64>,
    root_strategy: Option<Strategy>,
    root_max_restarts: Option<u32>,
    root_restart_period_ms: Option<u64>,
}

impl TreeConfig {
    /// Reads settings from JSON text; absent fields keep their defaults.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Json`] for malformed JSON or unknown fields, [`ConfigError::Invalid`]
    /// for values out of range.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        Self::parse(text, "settings")
    }

    /// Reads a JSON settings file; absent fields keep their defaults.
    ///
    /// # Errors
    ///
    /// As [`TreeConfig::from_json`], plus [`ConfigError::Read`]; errors name the file.
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let s: Settings = serde_json::from_str(text).map_err(|source| ConfigError::Json {
            origin: origin.to_owned(),
            source,
        })?;
        let d = TreeConfig::default();
        let config = TreeConfig {
            max_depth: s.max_depth.unwrap_or(d.max_depth),
            max_children_per_agent: s.max_children_per_agent.unwrap_or(d.max_children_per_agent),
            max_total_agents: s.max_total_agents.unwrap_or(d.max_total_agents),
            max_concurrent: s.max_concurrent.unwrap_or(d.max_concurrent),
            max_spawns_per_agent: s.max_spawns_per_agent,
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
