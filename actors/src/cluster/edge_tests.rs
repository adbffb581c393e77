//! Wiring tests of the edge's id rewriting: the pure [`edge::ids`](super::edge::ids) run
//! against what the runtime really writes into a conversation (the agent's result writers,
//! its errors) and against the registry's admission of a resumed run's earlier children.
//!
//! They live here, beside the pure machines and not among them, because they need the
//! agent and the registry: nothing in `edge/` knows either.
//!
//! * `ids_the_runtime_wrote`: `translate` rewrites the ids the runtime wrote, and only
//!   those, in every text the runtime writes.
//! * `ids_down_foreign_and_back`: a context goes down with foreign ids and comes back up
//!   as the owner wrote it; a resumed run's earlier children are admitted as read-only
//!   seeds.

mod ids_down_foreign_and_back;
mod ids_the_runtime_wrote;
