//! Every pure decision of the runtime, apart from the plumbing that carries it out.
//!
//! Nothing here knows tokio, ractor or the registry: each decision is a plain function, or a
//! small state machine, over the facts it is handed, and returns what to do. The actors and
//! the registry gather the facts, call in, and carry the answer out. So every rule is
//! unit-tested in its module without a runtime, and time is a value: where a decision depends
//! on it, `now` is passed in as a [`Duration`](std::time::Duration) since an epoch the caller
//! picks (the registry's, on tokio's clock, so paused-time tests stay exact). Nothing here
//! reads a clock.
//!
//! # Layout
//!
//! * [`admission`]: whether a new child may take a slot now (depth, width, total, budgets),
//!   and whether a top-level background agent runs or queues for a pool slot.
//! * [`capability`]: which tools an agent is offered, and its default `max_turns`.
//! * [`continuation`]: whether a turn cut off at the output limit is continued (the
//!   continuations left, and whether the next request fits the model's context window).
//! * [`control`]: which agents an agent's control tools reach.
//! * [`restart`]: whether an exit is restarted, whether it waits for its owner's decision,
//!   and the restart intensity window.
//! * [`retention`]: which read outputs a journaled tree releases from memory.
//! * [`retry`]: whether a failed model call is tried again, and after how long.
//! * [`settle`]: what a run's end does to the agent's live children (abort or drain), and
//!   which settled children the owner's conversation hears of.
//! * [`strategy`]: which siblings a restart strategy stops and restarts, and one owner's
//!   restart exchange as a machine of steps (stop, release, restart, retry, escalate).
//! * [`wait`]: which members of a waited set a wait policy aborts.
//!
//! # Invariants
//!
//! * Pure: a decision reads only its arguments and writes only its own state (the machines'
//!   `&mut self`); the same facts give the same answer.
//! * No I/O, no locks, no clock, no tasks: anything that waits is the caller's.
//! * Every module says what it decides and what it never does, and states its own invariants.
//!
//! The owner edge's machines across nodes (exactly-once delivery, the lease, the mirror of a
//! remote subtree, the shutdown deadline across nodes, the frame size guard) are as pure, but
//! belong to the `cluster` feature: they are `cluster::edge`, compiled only with it.

pub(crate) mod admission;
pub(crate) mod capability;
pub(crate) mod continuation;
pub(crate) mod control;
pub(crate) mod restart;
pub(crate) mod retention;
pub(crate) mod retry;
pub(crate) mod settle;
pub(crate) mod strategy;
pub(crate) mod wait;
