//! Admission: whether a new child may take a slot now ([`admit`]: owner open, depth, width,
//! total, spawn and usage budgets), and whether a top-level background agent runs or queues
//! for a pool slot ([`slot`]).
//!
//! Pure functions over a view of the registry ([`OwnerView`] and counts). They never reserve,
//! count or queue anything themselves: the registry runs them under its lock and makes the
//! reservation in the same step, so check and reservation are one atomic step.
//!
//! # Invariants
//!
//! * A refusal names the limit it hit and leaves nothing behind.
//! * Nested children never take a pool slot: a parent holding a slot while waiting on a
//!   queued child would deadlock. Only top-level background agents queue.

use agent_tree_protocol::{AgentId, AgentStatus};

use crate::config::TreeConfig;
use crate::error::SpawnError;

/// What admission needs to know about the would-be owner.
#[derive(Clone, Debug)]
pub(crate) struct OwnerView {
    pub(crate) id: AgentId,
    pub(crate) depth: u32,
    pub(crate) status: AgentStatus,
    /// Whether the owner is being aborted.
    pub(crate) cancelled: bool,
    pub(crate) live_children: usize,
    /// Children it has spawned in its life.
    pub(crate) spawned: u32,
    /// Tokens (input + output) its subtree has used.
    pub(crate) subtree_tokens: u64,
}

/// Whether a new top-level background agent runs now or waits for a pool slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// It runs at once (nested children, foreground top-level agents, free pool slots).
    Run,
    /// It waits, FIFO, for a pool slot.
    Queue,
}

/// Checks the limits for one new child of `owner`, returning the child's depth.
/// `spawned_total` is how many agents the tree has spawned in its life (0 for a resume,
/// which spawns nothing).
pub(crate) fn admit(
    config: &TreeConfig,
    max_depth: u32,
    owner: &OwnerView,
    live_total: usize,
    spawned_total: u64,
) -> Result<u32, SpawnError> {
    if owner.status != AgentStatus::Running || owner.cancelled {
        return Err(SpawnError::OwnerClosed(owner.id));
    }
    let depth = owner.depth + 1;
    // Top-level agents (depth 1) are always within the cap; `max_depth` 0 or 1 only disables
    // nesting.
    if depth > 1 && depth > max_depth {
        return Err(SpawnError::DepthLimit { depth, max_depth });
    }
    if !owner.id.is_root() {
        if owner.live_children >= config.max_children_per_agent {
            return Err(SpawnError::ChildLimit {
                owner: owner.id,
                limit: config.max_children_per_agent,
            });
        }
        if let Some(limit) = config.max_spawns_per_agent {
            if owner.spawned >= limit {
                return Err(SpawnError::SpawnBudget {
                    owner: owner.id,
                    limit,
                });
            }
        }
        if let Some(limit) = config.max_subtree_tokens {
            if owner.subtree_tokens >= limit {
                return Err(SpawnError::UsageBudget {
                    owner: owner.id,
                    limit,
                });
            }
        }
    }
    if live_total >= config.max_total_agents {
        return Err(SpawnError::TotalLimit {
            limit: config.max_total_agents,
        });
    }
    if spawned_total >= config.max_spawns_per_tree {
        return Err(SpawnError::TreeSpawnBudget {
            limit: config.max_spawns_per_tree,
        });
    }
    Ok(depth)
}

/// Where a new agent goes: only top-level background agents are pooled, and one queues
/// behind anyone already queued even when a slot is free (FIFO: a freed slot belongs to the
/// queue's head, not to a newcomer).
pub(crate) fn slot(
    top_level_background: bool,
    pool_running: usize,
    max_concurrent: usize,
    queued: usize,
) -> Slot {
    if top_level_background && (pool_running >= max_concurrent || queued > 0) {
        Slot::Queue
    } else {
        Slot::Run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(id: u64, depth: u32) -> OwnerView {
        OwnerView {
            id: AgentId::new(id),
            depth,
            status: AgentStatus::Running,
            cancelled: false,
            live_children: 0,
            spawned: 0,
            subtree_tokens: 0,
        }
    }

    #[test]
    fn depth_cap_holds_for_nested_children_only() {
        let c = TreeConfig::default().with_max_depth(3);
        assert_eq!(admit(&c, 3, &owner(2, 2), 0, 0), Ok(3));
        assert_eq!(
            admit(&c, 3, &owner(3, 3), 0, 0),
            Err(SpawnError::DepthLimit {
                depth: 4,
                max_depth: 3
            })
        );
        for cap in [0, 1] {
            assert_eq!(
                admit(&c, cap, &owner(0, 0), 0, 0),
                Ok(1),
                "top level at cap {cap}"
            );
            assert!(
                admit(&c, cap, &owner(1, 1), 0, 0).is_err(),
                "nesting at cap {cap}"
            );
        }
    }

    #[test]
    fn width_total_and_budgets() {
        let c = TreeConfig::default()
            .with_max_spawns_per_agent(2)
            .with_max_subtree_tokens(100);
        let mut o = owner(1, 1);
        o.live_children = 4;
        assert!(matches!(
            admit(&c, 5, &o, 0, 0),
            Err(SpawnError::ChildLimit { limit: 4, .. })
        ));
        o.live_children = 0;
        assert!(matches!(
            admit(&c, 5, &o, 32, 0),
            Err(SpawnError::TotalLimit { limit: 32 })
        ));
        o.spawned = 2;
        assert!(matches!(
            admit(&c, 5, &o, 0, 0),
            Err(SpawnError::SpawnBudget { limit: 2, .. })
        ));
        o.spawned = 0;
        o.subtree_tokens = 100;
        assert!(matches!(
            admit(&c, 5, &o, 0, 0),
            Err(SpawnError::UsageBudget { limit: 100, .. })
        ));
    }

    #[test]
    fn closed_owners_take_no_children() {
        let c = TreeConfig::default();
        for status in [
            AgentStatus::Completing,
            AgentStatus::Completed,
            AgentStatus::Aborted,
        ] {
            let mut o = owner(1, 1);
            o.status = status;
            assert_eq!(
                admit(&c, 5, &o, 0, 0),
                Err(SpawnError::OwnerClosed(AgentId::new(1)))
            );
        }
        let mut o = owner(1, 1);
        o.cancelled = true;
        assert_eq!(
            admit(&c, 5, &o, 0, 0),
            Err(SpawnError::OwnerClosed(AgentId::new(1)))
        );
    }

    #[test]
    fn only_top_level_background_agents_queue() {
        assert_eq!(slot(true, 10, 10, 0), Slot::Queue);
        assert_eq!(slot(true, 9, 10, 0), Slot::Run);
        assert_eq!(slot(false, 10, 10, 5), Slot::Run);
    }

    #[test]
    fn a_newcomer_queues_behind_the_queue_even_with_a_free_slot() {
        assert_eq!(slot(true, 9, 10, 1), Slot::Queue);
    }

    #[test]
    fn the_tree_lifetime_spawn_budget_counts_every_spawn() {
        let c = TreeConfig::default().with_max_spawns_per_tree(10);
        let o = owner(1, 1);
        assert!(admit(&c, 5, &o, 0, 9).is_ok());
        assert_eq!(
            admit(&c, 5, &o, 0, 10),
            Err(SpawnError::TreeSpawnBudget { limit: 10 })
        );
        // The root's spawns count too.
        assert!(admit(&c, 5, &owner(0, 0), 0, 10).is_err());
    }
}
