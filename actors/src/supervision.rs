//! Supervision events, replacing ractor's default (which stops the supervisor when any child
//! ends, even normally).

use agent_tree_protocol::{AgentId, AgentStatus, EndReason, Outcome};
use ractor::SupervisionEvent;

use crate::registry::Registry;

/// Handles a child's supervision event: a child that ended without settling itself is
/// settled here (failed after an actor failure, killed otherwise), and its descendants,
/// which ractor killed with it, are recorded as killed. Returns the child's agent id when
/// the event says it ended.
pub(crate) fn settle_lost_child(registry: &Registry, event: &SupervisionEvent) -> Option<AgentId> {
    let (cell, failure) = match event {
        SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
        SupervisionEvent::ActorFailed(cell, error) => (cell, Some(error.to_string())),
        _ => return None,
    };
    let child = registry.agent_for_actor(cell.get_id())?;
    if registry.status(child).is_some_and(AgentStatus::is_live) {
        let outcome = match failure {
            Some(error) => {
                tracing::warn!(agent = %child, %error, "agent actor failed");
                Outcome::failed(EndReason::ActorFailed, error)
            }
            None => Outcome::ended(AgentStatus::Killed, EndReason::Killed),
        };
        registry.kill_descendants(child);
        registry.settle(child, outcome);
    }
    Some(child)
}
