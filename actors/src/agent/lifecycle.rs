//! An agent's lifecycle: the one state enum, owned by its actor.
//!
//! ```text
//! Idle ─► Starting (start hooks) ─► Thinking (model turn) ─► Acting (tool calls) ─► Thinking …
//!   │            │                       │ final answer, failure, abort  │
//!   │            ▼                       ▼                               ▼
//!   └──────► Ending { outcome } (children abort or drain) ─► Done (settled, actor stopping)
//!                 ▲
//! any live phase ─┴─ Stopping { held } (a shutdown's hooks under its deadline)
//! ```
//!
//! Each phase carries what it needs (the hook task, the turn, the call table, the outcome
//! held while children end), so a combination such as "acting with no calls" or "ending
//! without an outcome" cannot be written down. A decided outcome is never replaced: once a
//! run has ended (`Ending`), an abort or a shutdown only cuts what still runs, and the agent
//! settles with the outcome it held.

use agent_tree_protocol::Outcome;
use tokio::task::AbortHandle;

use super::calls::Calls;

/// Where an agent's run is.
#[derive(Debug)]
pub(super) enum Phase {
    /// Constructed; the first turn (or the start hooks) begin in `post_start`.
    Idle,
    /// The start hooks run; the first model call waits for them.
    Starting { task: AbortHandle },
    /// A model turn is in flight (a future the actor polls).
    Thinking { turn: u32 },
    /// The tool calls of turn `turn` are being answered.
    Acting { turn: u32, calls: Calls },
    /// A shutdown reached the agent: its shutdown hooks run (bounded by the deadline), then
    /// the run ends as aborted, or with `held`, the outcome the run had already ended with.
    Stopping {
        task: AbortHandle,
        held: Option<Box<Outcome>>,
    },
    /// The run ended with `outcome`; waiting for its children's outcomes before settling.
    /// (Outcomes are boxed here: a running agent's phase stays small.)
    Ending { outcome: Box<Outcome> },
    /// Settled; the actor is stopping.
    Done,
}

/// What follows a shutdown's hooks.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterHooks {
    /// The run had ended: settle once the children have.
    Settle,
    /// The run ends now, aborted by the shutdown.
    EndRun,
}

impl Phase {
    /// Settled: nothing more happens in this run.
    pub(super) fn is_done(&self) -> bool {
        matches!(self, Phase::Done)
    }

    /// The run is over: no more model turns, so steers are refused and questions to it go
    /// unanswered.
    pub(super) fn run_over(&self) -> bool {
        matches!(
            self,
            Phase::Ending { .. } | Phase::Done | Phase::Stopping { .. }
        )
    }

    /// The outcome the run ended with, while the agent waits to settle.
    pub(super) fn held(&self) -> Option<&Outcome> {
        match self {
            Phase::Ending { outcome } => Some(outcome),
            Phase::Stopping { held, .. } => held.as_deref(),
            _ => None,
        }
    }

    /// Whether a result of turn `turn` is the one this phase waits for.
    pub(super) fn thinking(&self, turn: u32) -> bool {
        matches!(self, Phase::Thinking { turn: t } if *t == turn)
    }

    /// The call table of turn `turn`, while it is being answered.
    pub(super) fn calls_mut(&mut self, turn: u32) -> Option<&mut Calls> {
        match self {
            Phase::Acting { turn: t, calls } if *t == turn => Some(calls),
            _ => None,
        }
    }

    /// The call table of the current turn, whichever it is.
    pub(super) fn current_calls(&mut self) -> Option<&mut Calls> {
        match self {
            Phase::Acting { calls, .. } => Some(calls),
            _ => None,
        }
    }

    /// Settles: `Ending` becomes `Done`, handing back the outcome it held. Any other phase is
    /// left as it is (`None`): only a run that ended can settle.
    #[must_use = "the outcome must be recorded and the owner told"]
    pub(super) fn settle(&mut self) -> Option<Outcome> {
        if !matches!(self, Phase::Ending { .. }) {
            return None;
        }
        match std::mem::replace(self, Phase::Done) {
            Phase::Ending { outcome } => Some(*outcome),
            _ => None,
        }
    }

    /// The shutdown hooks finished: out of `Stopping`, to `Ending` with the outcome the run
    /// had already ended with, or (the run goes on until now) to `Idle`, for `end_run`. `None`
    /// outside `Stopping`.
    #[must_use = "the run must end or settle"]
    pub(super) fn hooks_finished(&mut self) -> Option<AfterHooks> {
        let Phase::Stopping { held, .. } = self else {
            return None;
        };
        Some(match held.take() {
            Some(outcome) => {
                *self = Phase::Ending { outcome };
                AfterHooks::Settle
            }
            None => {
                *self = Phase::Idle;
                AfterHooks::EndRun
            }
        })
    }

    /// Aborts the phase's own task (start or shutdown hooks), if it has one.
    pub(super) fn abort_task(&self) {
        if let Phase::Starting { task } | Phase::Stopping { task, .. } = self {
            task.abort();
        }
    }
}
