//! The seam a plug-in that runs agents elsewhere meets the core through: where an agent runs
//! and what starts in its place. The `cluster` feature's node is the one implementation;
//! without it no tree has a placement and nothing below is ever called.
//!
//! The core asks a tree's [`Placement`] four things, and nothing else of the plug-in:
//!
//! * whether a node is the tree's own ([`Placement::is_here`]): an agent placed there is an
//!   agent like any other;
//! * whether an agent can be placed on another node now ([`Placement::reaches`]), checked
//!   at admission so a spawn that cannot start is refused, not failed;
//! * to start, in an agent's place, the actor that stands for it ([`Placement::start`]):
//!   admitted, linked and settled like any agent, so restart, wait, control and shutdown
//!   do not know it is remote;
//! * what it kept of a run's remote records, when a tree is recovered from its journal
//!   ([`Placement::recovered`]).
//!
//! The records of the agents below a remote child arrive the other way, from the actor
//! that stands for it, through the registry's mirrored records (`registry/mirror.rs`: no
//! actor here, folded from the events it reports, settled with it); a resumed run continued
//! from another tree brings its earlier children as settled seeds (`registry::Earlier`);
//! and a tree's top agents' conversations can be tapped (`Registry::tap_conversation`).
//! That actor's own messages travel inside [`AgentMsg::Placed`], which agents ignore.
//!
//! Those entry points are the plug-in's: in a build without one they are never called,
//! which three `cfg_attr(not(feature = "cluster"), allow(dead_code))` lines say (on
//! `AgentMsg::Placed`, `Registry::set_conversation_tap` and the mirrored records' entry
//! points).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ractor::{ActorCell, ActorRef};

use crate::agent::AgentArgs;
use crate::msg::AgentMsg;
use crate::shared::SharedRef;

/// What [`Placement::start`] returns: the started actor, or why it did not start.
pub(crate) type Started<'a> =
    Pin<Box<dyn Future<Output = Result<ActorRef<AgentMsg>, String>> + Send + 'a>>;

/// Where a tree's agents run when their definition or request names a node (see the module
/// docs). Held by the tree's shared state, set once when the tree is built.
///
/// A plug-in reaches its own implementation from the shared state by upcasting to
/// [`Any`] and downcasting.
pub(crate) trait Placement: Any + Send + Sync + fmt::Debug {
    /// Whether `node` is the tree's own node.
    fn is_here(&self, node: &str) -> bool;

    /// Whether an agent can be placed on `node` (another node) now.
    fn reaches(&self, node: &str) -> bool;

    /// Starts, linked under `supervisor`, the actor that stands on this node for the run
    /// `args` admitted, placed on `node`.
    fn start(&self, args: AgentArgs, node: Arc<str>, supervisor: ActorCell) -> Started<'_>;

    /// Takes what a recovered journal kept for the placement (read before any agent runs).
    fn recovered(&self, replay: &agent_tree_protocol::Replay);
}

/// The other node `node` is, if it is not the tree's own: with no placement, every named
/// node is another (and refused at admission).
pub(crate) fn elsewhere(shared: &SharedRef, node: &str) -> bool {
    shared.placement.as_ref().is_none_or(|p| !p.is_here(node))
}
