//! The owner edge across nodes, as pure machines: what each end of an edge between an
//! owner's node and its remote child's node decides, with `now` passed in.
//!
//! The frames are the protocol's (`agent_tree_protocol::{Frame, Down, Up}`); the failure
//! semantics these machines implement are stated in `docs/cluster.md`. Nothing here sends
//! anything, and nothing here knows tokio, ractor or the registry: the ractor_cluster wiring
//! around it (the rest of [`crate::cluster`]: the host actor, the stand-in, the hosted side)
//! calls in the way the test link (`sim`) does. Like the wiring, it is compiled only with the
//! feature `cluster`.
//!
//! # Layout
//!
//! * [`seq`]: exactly-once delivery per direction: the [`seq::Outbox`] (numbers, keeps
//!   until acknowledged, replays after a reconnect, bounded), the [`seq::Inbox`] (applies
//!   each number once, refuses gaps), and the [`seq::Endpoint`] that is both for one end.
//! * [`lease`]: the lease the child's node holds from the owner's node: when the child's
//!   side must stop its subtree, and when the owner's side declares it killed.
//! * [`mirror`]: the owner's side's records of the hosted subtree, folded from its events
//!   with the journal's fold; late events reported; terminal reports checked.
//! * [`presence`]: whether the child's node is still there and the same process (the
//!   reconnect window, the boot id): a crash told from a short disconnect.
//! * `shutdown` (tests only): one shutdown deadline across nodes, who reported and who is
//!   counted killed, as a machine the fake link's tests hold; the wiring counts the same
//!   with the owner's own deadline and kill (`docs/cluster.md`).
//! * [`size`]: the size guard refusing an oversized frame before it is sent.
//! * [`ids`]: the agent ids in a remote agent's conversation, rewritten from its hosted
//!   tree's to its owner tree's as the conversation comes up.
//! * `sim` (tests only): a deterministic fake link on a virtual clock, and the edge's
//!   scenario tests over it (`sim/scenarios.rs`); `bodies_in_parts` (tests only): bodies
//!   over the frame limit crossing the link as their parts.
//!
//! # Invariants
//!
//! * Pure, as all of `crate::policy`: no clock, no I/O, no tasks; a peer's frames are
//!   untrusted input and never panic a machine (they are errors or reported values).
//! * Usage counts exactly once on the owner's side: a hosted usage event is folded only
//!   when the inbox applies its frame, which it does once per number; what the mirror
//!   cannot fold (after a terminal status, after a declaration) is returned, not dropped.
//! * A hosted subtree never outlives, by more than its lease, the last time its owner's
//!   node heard from it; the owner's node gives it up only `grace` after that.

#[cfg(test)]
mod bodies_in_parts;
pub(crate) mod ids;
pub(crate) mod lease;
pub(crate) mod mirror;
pub(crate) mod presence;
pub(crate) mod seq;
#[cfg(test)]
mod shutdown;
#[cfg(test)]
mod sim;
pub(crate) mod size;
