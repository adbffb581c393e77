//! The lifecycle status of an agent.
//!
//! # Invariants
//!
//! * A terminal status ([`AgentStatus::is_terminal`]) is sticky: [`AgentStatus::advance`]
//!   refuses to move away from it, so a late message can never turn `aborted` into
//!   `completed` or the reverse.
//! * Non-terminal statuses only move forward: `queued → starting → running → completing`,
//!   any of them may end in a terminal status.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where an agent is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentStatus {
    /// Admitted, waiting for a pool slot; no actor exists yet.
    Queued,
    /// The actor is being constructed; no model call has been made.
    Starting,
    /// The agent's loop runs (a model turn or tool calls are in flight).
    Running,
    /// The agent's own run ended; it holds until its children are terminal.
    Completing,
    /// The agent gave a final answer. Terminal.
    Completed,
    /// The model, a tool or the agent's code failed, or it ran out of turns. Terminal.
    Failed,
    /// The agent was aborted (by its owner, the application or a cascade). Terminal.
    Aborted,
    /// The agent did not stop in time and its actor was killed. Terminal.
    Killed,
}

impl AgentStatus {
    /// Whether this status is final.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            AgentStatus::Completed
                | AgentStatus::Failed
                | AgentStatus::Aborted
                | AgentStatus::Killed
        )
    }

    /// Whether the agent is live (admitted and not yet terminal).
    pub const fn is_live(self) -> bool {
        !self.is_terminal()
    }

    fn rank(self) -> u8 {
        match self {
            AgentStatus::Queued => 0,
            AgentStatus::Starting => 1,
            AgentStatus::Running => 2,
            AgentStatus::Completing => 3,
            _ => 4,
        }
    }

    /// The status after moving to `next`, or an error if the move is not allowed.
    ///
    /// ```
    /// use agent_tree_protocol::AgentStatus;
    /// let s = AgentStatus::Running.advance(AgentStatus::Aborted).unwrap();
    /// assert!(s.advance(AgentStatus::Completed).is_err()); // terminal is sticky
    /// ```
    ///
    /// # Errors
    ///
    /// [`StatusTransitionError`] when `self` is terminal or `next` would go backwards.
    #[must_use = "the transition may have been refused"]
    pub fn advance(self, next: AgentStatus) -> Result<AgentStatus, StatusTransitionError> {
        if self.is_terminal() || next.rank() < self.rank() {
            Err(StatusTransitionError {
                from: self,
                to: next,
            })
        } else {
            Ok(next)
        }
    }

    /// The lowercase name used in text renderings and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Queued => "queued",
            AgentStatus::Starting => "starting",
            AgentStatus::Running => "running",
            AgentStatus::Completing => "completing",
            AgentStatus::Completed => "completed",
            AgentStatus::Failed => "failed",
            AgentStatus::Aborted => "aborted",
            AgentStatus::Killed => "killed",
        }
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused status change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("status cannot move from {from} to {to}")]
pub struct StatusTransitionError {
    /// The status the agent has.
    pub from: AgentStatus,
    /// The status that was asked for.
    pub to: AgentStatus,
}

#[cfg(test)]
mod tests {
    use super::AgentStatus::*;
    use super::*;

    const ALL: [AgentStatus; 8] = [
        Queued, Starting, Running, Completing, Completed, Failed, Aborted, Killed,
    ];

    #[test]
    fn terminal_is_sticky() {
        for from in ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in ALL {
                assert!(from.advance(to).is_err(), "{from} -> {to} allowed");
            }
        }
    }

    #[test]
    fn live_statuses_move_forward_or_end() {
        assert!(Running.advance(Queued).is_err());
        assert!(Completing.advance(Running).is_err());
        for from in [Queued, Starting, Running, Completing] {
            for to in [Completed, Failed, Aborted, Killed] {
                assert_eq!(from.advance(to), Ok(to));
            }
        }
    }
}
