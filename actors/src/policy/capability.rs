//! Which tools an agent is offered: its definition's user tools and, when delegation is
//! allowed, the orchestration tools; and its default `max_turns` at a depth.
//!
//! Pure functions of the definition, the depth, the branch's cap and (in attenuation mode)
//! the owner's tools. They never resolve agent types (the catalog does), never build tool
//! specs for the model, and never run or refuse a call: the agent checks what it holds.
//!
//! # Invariants
//!
//! * Orchestration tools are offered only when the definition opts in (`allowed_subagents`),
//!   the agent is below its branch's depth cap, it is not isolated, and its policy does not
//!   deny `Agent`. An explicit deny always wins, also over an allowlist.
//! * With an explicit tool allowlist and delegation allowed, `Agent` is inferred: it need not
//!   be listed.

use agent_tree_protocol::AgentDefinition;

use crate::tool::{AGENT_TOOL, ASK_OWNER_TOOL, ORCHESTRATION_TOOLS};

/// The tools one agent holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct Capabilities {
    /// User tools, in toolbox order.
    pub(crate) user_tools: Vec<String>,
    /// Orchestration tools, in [`ORCHESTRATION_TOOLS`] order.
    pub(crate) orchestration: Vec<&'static str>,
    /// Whether it may ask its owner (`ask_owner`).
    pub(crate) ask_owner: bool,
}

impl Capabilities {
    /// Whether the agent may spawn children.
    #[cfg(test)]
    pub(crate) fn can_delegate(&self) -> bool {
        self.orchestration.contains(&AGENT_TOOL)
    }

    /// Whether the agent holds `tool` (user or orchestration).
    pub(crate) fn holds(&self, tool: &str) -> bool {
        self.orchestration.contains(&tool)
            || (tool == ASK_OWNER_TOOL && self.ask_owner)
            || self.user_tools.iter().any(|t| t == tool)
    }
}

/// Whether `definition` at `depth` may delegate in a branch capped at `max_depth`.
pub(crate) fn may_delegate(definition: &AgentDefinition, depth: u32, max_depth: u32) -> bool {
    definition.allowed_subagents.allows_any()
        && depth < max_depth
        && !definition.isolated
        && !denies(definition, AGENT_TOOL)
}

fn denies(definition: &AgentDefinition, tool: &str) -> bool {
    definition.disallowed_tools.iter().any(|t| t == tool)
}

/// The capabilities of `definition` at `depth`, given the user tools the tree has.
///
/// With `owner` set (attenuation mode), user tools are further limited to those the owner
/// holds. `ask_owner` is offered only where someone answers: an owner agent (below depth 1),
/// or, for a top-level agent, the application's question handler (`app_answers`).
pub(crate) fn capabilities<'a>(
    definition: &AgentDefinition,
    depth: u32,
    max_depth: u32,
    available: impl IntoIterator<Item = &'a str>,
    owner: Option<&Capabilities>,
    app_answers: bool,
) -> Capabilities {
    let user_tools = available
        .into_iter()
        .filter(|name| definition.tools.contains(name) && !denies(definition, name))
        .filter(|name| owner.is_none_or(|o| o.holds(name)))
        .map(str::to_owned)
        .collect();
    // An allowlist need not name the orchestration tools (they are inferred with
    // `allowed_subagents`); a deny of any one of them removes it.
    let orchestration = if may_delegate(definition, depth, max_depth) {
        ORCHESTRATION_TOOLS
            .into_iter()
            .filter(|tool| !denies(definition, tool))
            .collect()
    } else {
        Vec::new()
    };
    Capabilities {
        user_tools,
        orchestration,
        ask_owner: !denies(definition, ASK_OWNER_TOOL) && (depth > 1 || app_answers),
    }
}

/// Default `max_turns` at `depth`: `max(6, 30 − 5·(depth − 1))`.
pub(crate) fn default_max_turns(depth: u32) -> u32 {
    30u32.saturating_sub(5 * depth.saturating_sub(1)).max(6)
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{SubagentAllowance, ToolSet};

    use super::*;

    const TOOLS: [&str; 3] = ["read", "write", "bash"];

    fn delegator() -> AgentDefinition {
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All)
    }

    #[test]
    fn opt_in_is_required() {
        let plain = AgentDefinition::new("worker", "");
        let caps = capabilities(&plain, 1, 5, TOOLS, None, true);
        assert!(caps.orchestration.is_empty());
        assert_eq!(caps.user_tools, TOOLS);
        assert_eq!(
            capabilities(&delegator(), 1, 5, TOOLS, None, true).orchestration,
            ORCHESTRATION_TOOLS
        );
    }

    #[test]
    fn none_at_the_cap_isolated_or_denied() {
        assert!(!capabilities(&delegator(), 5, 5, TOOLS, None, true).can_delegate());
        assert!(capabilities(&delegator(), 4, 5, TOOLS, None, true).can_delegate());
        for max_depth in [0, 1] {
            assert!(!capabilities(&delegator(), 1, max_depth, TOOLS, None, true).can_delegate());
        }
        assert!(!capabilities(&delegator().isolated(), 1, 5, TOOLS, None, true).can_delegate());
        let denied = delegator().with_disallowed_tools(["Agent"]);
        assert!(
            capabilities(&denied, 1, 5, TOOLS, None, true)
                .orchestration
                .is_empty()
        );
    }

    #[test]
    fn agent_is_inferred_into_an_allowlist() {
        let def = delegator().with_tools(ToolSet::only(["read"]));
        let caps = capabilities(&def, 1, 5, TOOLS, None, true);
        assert_eq!(caps.user_tools, ["read"]);
        assert!(caps.can_delegate());
        let denied = def.with_disallowed_tools(["Agent"]);
        assert!(!capabilities(&denied, 1, 5, TOOLS, None, true).can_delegate());
    }

    #[test]
    fn attenuation_intersects_with_the_owner() {
        let owner = Capabilities {
            user_tools: vec!["read".into()],
            orchestration: vec![],
            ask_owner: true,
        };
        let caps = capabilities(
            &AgentDefinition::new("w", ""),
            2,
            5,
            TOOLS,
            Some(&owner),
            true,
        );
        assert_eq!(caps.user_tools, ["read"]);
    }

    #[test]
    fn max_turns_shrinks_with_depth() {
        assert_eq!(default_max_turns(1), 30);
        assert_eq!(default_max_turns(2), 25);
        assert_eq!(default_max_turns(5), 10);
        assert_eq!(default_max_turns(6), 6);
        assert_eq!(default_max_turns(40), 6);
    }

    #[test]
    fn ask_owner_is_offered_only_where_someone_answers() {
        let plain = AgentDefinition::new("w", "");
        assert!(!capabilities(&plain, 1, 5, TOOLS, None, false).ask_owner);
        assert!(capabilities(&plain, 1, 5, TOOLS, None, true).ask_owner);
        assert!(capabilities(&plain, 2, 5, TOOLS, None, false).ask_owner);
        let denied = plain.with_disallowed_tools([ASK_OWNER_TOOL]);
        assert!(!capabilities(&denied, 2, 5, TOOLS, None, true).ask_owner);
    }
}
