//! Errors of the runtime, one enum per family.

use std::sync::Arc;
use std::time::Duration;

use agent_tree_protocol::{AgentId, ModelErrorKind, Usage};

/// A spawn (or resume) that was refused, or whose actor could not start.
///
/// A refusal leaves nothing behind: no actor was started and no record was kept. The one
/// exception is [`SpawnError::Startup`]: the agent had been admitted, so its record is kept,
/// settled as failed with reason `actor_failed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The type name did not resolve in the branch's catalog. A disabled or ambiguous type the
    /// caller could not reach anyway is reported this way too, so errors never reveal types
    /// outside its reach.
    #[error("unknown agent type {requested:?}; available: {}", available_list(.available))]
    UnknownType {
        /// The name that was asked for.
        requested: String,
        /// The enabled types the caller may spawn.
        available: Vec<String>,
    },
    /// The name matches several types case-insensitively.
    #[error("agent type {requested:?} is ambiguous: {}", .candidates.join(", "))]
    AmbiguousType {
        /// The name that was asked for.
        requested: String,
        /// The types it matches.
        candidates: Vec<String>,
    },
    /// The type exists but is disabled.
    #[error("agent type {0:?} is disabled")]
    DisabledType(String),
    /// The type name was blank.
    #[error("agent type is blank")]
    BlankType,
    /// The caller's allowlist (`allowed_subagents`) does not name the resolved type.
    #[error("agent type {requested:?} is not allowed here; allowed: {}", available_list(.allowed))]
    NotAllowed {
        /// The resolved type.
        requested: String,
        /// The enabled types the caller may spawn.
        allowed: Vec<String>,
    },
    /// The child would be deeper than the branch's `max_depth` (top-level agents, at depth 1,
    /// are always within it).
    #[error("max_depth {max_depth} reached: a child would be at depth {depth}")]
    DepthLimit {
        /// The child's depth.
        depth: u32,
        /// The branch's cap.
        max_depth: u32,
    },
    /// The owner already has `max_children_per_agent` live children.
    #[error("max_children_per_agent {limit} reached for {owner}")]
    ChildLimit {
        /// The owner.
        owner: AgentId,
        /// The limit.
        limit: usize,
    },
    /// The owner has spawned `max_spawns_per_agent` children in its life.
    #[error("max_spawns_per_agent {limit} reached for {owner}")]
    SpawnBudget {
        /// The owner.
        owner: AgentId,
        /// The limit.
        limit: u32,
    },
    /// The owner's subtree has used `max_subtree_tokens`.
    #[error("max_subtree_tokens {limit} reached for {owner}")]
    UsageBudget {
        /// The owner.
        owner: AgentId,
        /// The limit.
        limit: u64,
    },
    /// The tree has spawned `max_spawns_per_tree` agents in its life.
    #[error("max_spawns_per_tree {limit} reached")]
    TreeSpawnBudget {
        /// The limit.
        limit: u64,
    },
    /// The tree already has `max_total_agents` live agents.
    #[error("max_total_agents {limit} reached")]
    TotalLimit {
        /// The limit.
        limit: usize,
    },
    /// The owner accepts no new children: it is not running (queued, starting, completing or
    /// terminal), it is being aborted, or it is gone.
    #[error("{0} is not accepting new children")]
    OwnerClosed(AgentId),
    /// A resume was refused by ownership or status.
    #[error(transparent)]
    Control(ControlError),
    /// The spawn request's input was malformed.
    #[error("invalid spawn request: {0}")]
    InvalidRequest(String),
    /// The agent's actor could not be started (ractor's error, as text: this enum is `Eq`).
    /// Unlike the refusals, the admitted agent's record is kept, settled as failed.
    #[error("agent actor failed to start: {0}")]
    Startup(String),
}

fn available_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// An ownership-scoped control operation that was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The target is not an agent the caller may control (its child; its descendant under
    /// `ControlScope::Descendants`), or does not exist. Both cases give this same error, so
    /// ids cannot be probed.
    #[error("no subagent {0} of yours")]
    NotYours(AgentId),
    /// As [`ControlError::NotYours`], for an id that is not even well-formed (kept as
    /// written, cut to 64 characters).
    #[error("no subagent {0} of yours")]
    NotYoursText(String),
    /// The agent is not running any more (or not yet) and cannot take this operation.
    #[error("{0} cannot take this now: it is {1}")]
    WrongStatus(AgentId, agent_tree_protocol::AgentStatus),
    /// The agent is a remote child's descendant, mirrored from the node it runs on: its
    /// owner there controls it; here, control the remote child it runs under.
    #[error("{0} runs under a remote child on another node and is controlled there")]
    Remote(AgentId),
    /// The agent is a child of an earlier run of a resumed agent that another node's tree
    /// owns (this tree hosts the resumed run): it settled there, and here its result can be
    /// read, but it cannot be resumed (a steer or an abort is refused as for any settled
    /// agent: [`ControlError::WrongStatus`]).
    #[error(
        "{0} is a child of an earlier run, kept on its owner's node: its result can be read, but it cannot be steered, aborted or resumed from this run"
    )]
    EarlierRun(AgentId),
    /// The agent is in the last model turn its `max_turns` allows: no turn is left to read
    /// a steer, so it is refused rather than receipted and never read.
    #[error("{0} is in its last turn and cannot read a steer")]
    NoTurnsLeft(AgentId),
    /// The steer (or an answer given by a steer) is empty or only whitespace: it would
    /// enter the conversation as a message that says nothing, which a provider may refuse.
    #[error("a steer to {0} is empty: it must say something")]
    EmptySteer(AgentId),
    /// The steer is larger than the tree's `max_steer_bytes`.
    #[error("a steer of {bytes} bytes is over the limit of {limit} (max_steer_bytes)")]
    SteerTooLarge {
        /// The agent steered.
        agent: AgentId,
        /// The steer's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// This run of the agent has had the tree's `max_steers_per_run` steers.
    #[error("{agent} has had {limit} steers this run (max_steers_per_run)")]
    TooManySteers {
        /// The agent steered.
        agent: AgentId,
        /// The limit.
        limit: u32,
    },
}

/// A model call that failed: what kind of failure, the provider's HTTP status and
/// retry-after where there were any, the usage the provider reported for the failed call,
/// and the underlying error.
///
/// The kind decides what the runtime does (see [`Model`](crate::Model)): rate-limited and
/// transient failures are retried by the tree's [`RetryPolicy`](crate::RetryPolicy), every
/// other kind fails the agent with reason `model_error`. The usage is billed either way.
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::ModelError;
/// use agent_tree_protocol::{ModelErrorKind, Usage};
///
/// let err = ModelError::from_status(429, "slow down")
///     .with_retry_after(Duration::from_secs(2))
///     .with_usage(Usage::tokens(12, 0));
/// assert_eq!(err.kind, ModelErrorKind::RateLimited);
/// assert!(err.is_retryable());
/// assert_eq!(err.to_string(), "model error: rate_limited (HTTP 429): slow down");
///
/// // An error built from text alone is a provider error, shown as its text.
/// assert_eq!(ModelError::new("boom").to_string(), "model error: boom");
/// assert!(!ModelError::new("boom").is_retryable());
/// ```
#[derive(Clone, Debug, thiserror::Error)]
#[error("model error: {}", self.describe())]
#[non_exhaustive]
pub struct ModelError {
    /// What kind of failure it was.
    pub kind: ModelErrorKind,
    /// What went wrong, as the provider or adapter said it.
    pub message: String,
    /// The HTTP status of the response, if there was one.
    pub status: Option<u16>,
    /// How long the provider asked to wait before trying again (`retry-after`).
    pub retry_after: Option<Duration>,
    /// What the provider reported the failed call used; billed like a turn's usage.
    pub usage: Usage,
    /// The underlying error (the HTTP client's, the decoder's), if any.
    #[source]
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for ModelError {
    /// Errors are equal when every field but the underlying error is.
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.message == other.message
            && self.status == other.status
            && self.retry_after == other.retry_after
            && self.usage == other.usage
    }
}

impl ModelError {
    /// A [`ModelErrorKind::Provider`] error with `message`: not retried.
    pub fn new(message: impl Into<String>) -> Self {
        ModelError::of_kind(ModelErrorKind::Provider, message)
    }

    /// An error of `kind` with `message`.
    ///
    /// ```
    /// use agent_tree_actors::ModelError;
    /// use agent_tree_protocol::ModelErrorKind;
    /// let err = ModelError::of_kind(ModelErrorKind::Transient, "connection reset");
    /// assert!(err.is_retryable());
    /// assert_eq!(err.to_string(), "model error: transient: connection reset");
    /// ```
    pub fn of_kind(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        ModelError {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
            usage: Usage::ZERO,
            source: None,
        }
    }

    /// A transient failure (a timeout, a dropped connection): retried.
    pub fn transient(message: impl Into<String>) -> Self {
        ModelError::of_kind(ModelErrorKind::Transient, message)
    }

    /// A rate-limit refusal, with the wait the provider asked for if it gave one: retried.
    pub fn rate_limited(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        ModelError {
            retry_after,
            ..ModelError::of_kind(ModelErrorKind::RateLimited, message)
        }
    }

    /// The error an HTTP response with `status` means ([`ModelErrorKind::from_status`]),
    /// with `body` (cut to [`ModelError::MAX_MESSAGE`] bytes) as its message.
    ///
    /// ```
    /// use agent_tree_actors::ModelError;
    /// use agent_tree_protocol::ModelErrorKind;
    /// let err = ModelError::from_status(503, "x".repeat(10_000));
    /// assert_eq!((err.kind, err.status), (ModelErrorKind::Transient, Some(503)));
    /// assert!(err.message.len() <= ModelError::MAX_MESSAGE);
    /// ```
    pub fn from_status(status: u16, body: impl Into<String>) -> Self {
        let mut body = body.into();
        cut_to(&mut body, ModelError::MAX_MESSAGE);
        ModelError {
            status: Some(status),
            ..ModelError::of_kind(ModelErrorKind::from_status(status), body)
        }
    }

    /// The longest message [`ModelError::from_status`] keeps of a response body, in bytes.
    pub const MAX_MESSAGE: usize = 1024;

    /// The same error with an HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// The same error with the wait the provider asked for.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// The same error with the usage the provider reported for the failed call.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The same error with its underlying cause, kept as [`std::error::Error::source`].
    ///
    /// ```
    /// use agent_tree_actors::ModelError;
    /// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out");
    /// let err = ModelError::transient("request timed out").with_source(io);
    /// assert!(std::error::Error::source(&err).unwrap().to_string().contains("read timed out"));
    /// ```
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error of another kind.
    pub fn with_kind(mut self, kind: ModelErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Whether the runtime retries this error ([`ModelErrorKind::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// The error as an agent's outcome shows it: the message alone for a plain provider
    /// error, else the kind and status first (`rate_limited (HTTP 429): slow down`).
    pub fn describe(&self) -> String {
        match (self.kind, self.status) {
            (ModelErrorKind::Provider, None) => self.message.clone(),
            (kind, None) => format!("{kind}: {}", self.message),
            (kind, Some(status)) => format!("{kind} (HTTP {status}): {}", self.message),
        }
    }
}

/// Cuts `text` to at most `max` bytes at a character boundary, marking the cut with `...`
/// (which the `max` bytes include).
pub(crate) fn cut_to(text: &mut String, max: usize) {
    const MARK: &str = "...";
    if text.len() > max {
        let mut end = max.saturating_sub(MARK.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(MARK);
    }
}

/// A tool call that failed; the model sees the message as an error result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong.
    pub message: String,
}

impl ToolError {
    /// A tool error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }
}

/// A tree that could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// The tree was built without a model.
    #[error("a tree needs a model")]
    NoModel,
    /// The root actor could not be started.
    #[error("root actor failed to start: {0}")]
    Startup(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The journal cannot be read, recovered or opened for writing.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// Another tree holds the journal file (one tree per journal).
    #[error(transparent)]
    JournalInUse(#[from] crate::journal::JournalInUseError),
}

#[cfg(test)]
mod tests {
    use super::cut_to;

    #[test]
    fn a_cut_text_with_its_mark_stays_within_the_bound() {
        for max in [0, 2, 3, 4, 64, 512] {
            for text in ["a".repeat(600), "é".repeat(300), "x".repeat(max)] {
                let mut cut = text.clone();
                cut_to(&mut cut, max);
                if text.len() <= max {
                    assert_eq!(cut, text, "a text within the bound is kept whole");
                } else {
                    assert!(cut.len() <= max.max(3), "{max}: {} bytes", cut.len());
                    assert!(cut.ends_with("..."), "{max}: {cut:?}");
                    assert!(text.starts_with(cut.trim_end_matches("...")));
                }
            }
        }
    }
}
