//! How an agent's run ended.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::message::ModelErrorKind;
use crate::status::AgentStatus;

/// Why an agent reached its terminal status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndReason {
    /// The model gave a final answer.
    FinalAnswer,
    /// The agent used all of its `max_turns` without a final answer.
    MaxTurns,
    /// A model call returned an error.
    ModelError,
    /// Agent or model code panicked.
    Panicked,
    /// The agent's actor failed for another reason.
    ActorFailed,
    /// Aborted explicitly (by its owner, the application or a wait policy).
    Aborted,
    /// Aborted because an ancestor was aborted or its owner's run ended.
    OwnerEnded,
    /// Stopped by a shutdown of its subtree.
    Shutdown,
    /// Killed at a shutdown deadline, or its actor disappeared without settling.
    Killed,
    /// A child failed and the supervisor's restart intensity was exceeded.
    Escalated,
    /// A start hook failed.
    HookFailed,
    /// The model's output was cut off at its length limit more often than the tree's
    /// `length_cutoff` policy continues it.
    LengthLimit,
    /// The process running it stopped (a crash) while it was live; its tree was recovered
    /// from the journal with it aborted, to be resumed or abandoned, never silently re-run.
    Interrupted,
}

impl EndReason {
    /// The lowercase name used in text renderings and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            EndReason::FinalAnswer => "final_answer",
            EndReason::MaxTurns => "max_turns",
            EndReason::ModelError => "model_error",
            EndReason::Panicked => "panicked",
            EndReason::ActorFailed => "actor_failed",
            EndReason::Aborted => "aborted",
            EndReason::OwnerEnded => "owner_ended",
            EndReason::Shutdown => "shutdown",
            EndReason::Killed => "killed",
            EndReason::Escalated => "escalated",
            EndReason::HookFailed => "hook_failed",
            EndReason::LengthLimit => "length_limit",
            EndReason::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The settled result of an agent: its terminal status, its answer or partial output, and why
/// it ended.
///
/// ```
/// use agent_tree_protocol::{AgentStatus, EndReason, Outcome};
/// let done = Outcome::completed("42");
/// assert_eq!(done.status, AgentStatus::Completed);
/// let cut = Outcome::ended(AgentStatus::Aborted, EndReason::Aborted).with_partial("4");
/// assert_eq!(cut.partial.as_deref(), Some("4"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// The terminal status.
    pub status: AgentStatus,
    /// Why the agent ended.
    pub reason: EndReason,
    /// The final answer, for a completed agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// What the agent had produced before it ended without a final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// The error, for a failed agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For a run that failed on a model call (reason `model_error`): what kind of failure
    /// it was, as data (`context_length`, `rate_limited`, ...), so a reader decides on it
    /// without parsing [`error`](Self::error). `None` for every other outcome, and absent
    /// from the JSON then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ModelErrorKind>,
    /// Its output (`text` and `partial`) was released from memory under the journal's
    /// retention policy: both are `None` here, and the journal holds them
    /// (`Tree::read_outcome` reads them back). Status, reason and error stay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

impl Outcome {
    /// A completed outcome with its final answer.
    pub fn completed(text: impl Into<String>) -> Self {
        Outcome {
            status: AgentStatus::Completed,
            reason: EndReason::FinalAnswer,
            text: Some(text.into()),
            partial: None,
            error: None,
            error_kind: None,
            released: false,
        }
    }

    /// A failed outcome with its error.
    pub fn failed(reason: EndReason, error: impl Into<String>) -> Self {
        Outcome {
            status: AgentStatus::Failed,
            reason,
            text: None,
            partial: None,
            error: Some(error.into()),
            error_kind: None,
            released: false,
        }
    }

    /// An outcome of `status` for `reason`, with no text.
    pub fn ended(status: AgentStatus, reason: EndReason) -> Self {
        Outcome {
            status,
            reason,
            text: None,
            partial: None,
            error: None,
            error_kind: None,
            released: false,
        }
    }

    /// The same outcome keeping `partial` output (ignored when empty).
    pub fn with_partial(mut self, partial: impl Into<String>) -> Self {
        let partial = partial.into();
        if !partial.is_empty() {
            self.partial = Some(partial);
        }
        self
    }

    /// The same outcome naming the kind of model failure it ended on.
    ///
    /// ```
    /// use agent_tree_protocol::{EndReason, ModelErrorKind, Outcome};
    /// let failed = Outcome::failed(EndReason::ModelError, "context_length: prompt too long")
    ///     .with_error_kind(ModelErrorKind::ContextLength);
    /// assert_eq!(failed.error_kind, Some(ModelErrorKind::ContextLength));
    /// let json = serde_json::to_string(&failed).unwrap();
    /// assert!(json.contains(r#""error_kind":"context_length""#), "{json}");
    /// // Written without it (an older journal), it reads as `None`.
    /// let old: Outcome =
    ///     serde_json::from_str(r#"{"status":"failed","reason":"model_error","error":"x"}"#).unwrap();
    /// assert_eq!(old.error_kind, None);
    /// ```
    #[must_use]
    pub fn with_error_kind(mut self, kind: ModelErrorKind) -> Self {
        self.error_kind = Some(kind);
        self
    }

    /// The bytes of its output (`text` and `partial`): what releasing it frees.
    ///
    /// ```
    /// use agent_tree_protocol::Outcome;
    /// assert_eq!(Outcome::completed("four").output_bytes(), 4);
    /// ```
    pub fn output_bytes(&self) -> usize {
        self.text.as_ref().map_or(0, String::len) + self.partial.as_ref().map_or(0, String::len)
    }

    /// The same outcome with its output released (its `released` field says so).
    ///
    /// ```
    /// use agent_tree_protocol::Outcome;
    /// let released = Outcome::completed("a long answer").into_released();
    /// assert!(released.released && released.text.is_none());
    /// assert!(released.is_completed());
    /// ```
    #[must_use]
    pub fn into_released(mut self) -> Self {
        self.text = None;
        self.partial = None;
        self.released = true;
        self
    }

    /// Whether the agent completed.
    pub fn is_completed(&self) -> bool {
        self.status == AgentStatus::Completed
    }

    /// A one-line summary for tool results and renderings.
    pub fn summary(&self) -> String {
        match (&self.text, &self.error, &self.partial) {
            (Some(text), _, _) => text.clone(),
            (None, Some(error), _) => format!("{} ({}): {error}", self.status, self.reason),
            (None, None, Some(partial)) => {
                format!(
                    "{} ({}); partial output: {partial}",
                    self.status, self.reason
                )
            }
            (None, None, None) if self.released => {
                format!(
                    "{} ({}); output released to the journal",
                    self.status, self.reason
                )
            }
            (None, None, None) => format!("{} ({})", self.status, self.reason),
        }
    }
}
