//! Ownership-scoped control: which agents an agent's control tools reach ([`reaches`]).
//!
//! A pure rule over a parent lookup the caller provides. It never reads records, never
//! forms the error (the registry gives one text for missing and foreign ids), and never
//! decides resume, which only an immediate owner may do whatever the scope.
//!
//! # Invariants
//!
//! * With [`ControlScope::Children`] an agent reaches exactly its immediate children; with
//!   [`ControlScope::Descendants`], exactly its proper descendants. Never itself, its owner,
//!   siblings or other branches.
//! * The answer does not depend on whether the target exists: missing and foreign ids are
//!   indistinguishable to the caller.

use agent_tree_protocol::AgentId;

use crate::config::ControlScope;

/// Whether `caller` reaches `target` under `scope`, given each agent's parent.
pub(crate) fn reaches(
    scope: ControlScope,
    caller: AgentId,
    target: AgentId,
    parent_of: impl Fn(AgentId) -> Option<AgentId>,
) -> bool {
    let mut cursor = parent_of(target);
    while let Some(parent) = cursor {
        if parent == caller {
            return true;
        }
        if scope == ControlScope::Children {
            return false;
        }
        cursor = parent_of(parent);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// a0 ─ a1 ─ a2 ─ a3, and a0 ─ a4.
    fn parent_of(id: AgentId) -> Option<AgentId> {
        match id.get() {
            1 | 4 => Some(AgentId::ROOT),
            2 => Some(AgentId::new(1)),
            3 => Some(AgentId::new(2)),
            _ => None,
        }
    }

    fn a(n: u64) -> AgentId {
        AgentId::new(n)
    }

    #[test]
    fn children_scope_reaches_only_immediate_children() {
        let s = ControlScope::Children;
        assert!(reaches(s, a(1), a(2), parent_of));
        assert!(!reaches(s, a(1), a(3), parent_of));
        assert!(!reaches(s, a(2), a(1), parent_of));
        assert!(!reaches(s, a(1), a(1), parent_of));
        assert!(!reaches(s, a(1), a(4), parent_of));
        assert!(!reaches(s, a(1), a(99), parent_of));
    }

    #[test]
    fn descendants_scope_reaches_the_whole_subtree_only() {
        let s = ControlScope::Descendants;
        assert!(reaches(s, a(1), a(3), parent_of));
        assert!(!reaches(s, a(3), a(1), parent_of));
        assert!(!reaches(s, a(2), a(4), parent_of));
        assert!(!reaches(s, a(1), a(99), parent_of));
    }
}
