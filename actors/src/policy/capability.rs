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
//! * A definition's tool names reach registered user tools by one rule, [`match_tool_name`]:
//!   the exact name, else the one ASCII-case-insensitive match (Claude Code's `Read` is a tool
//!   registered as `read`); a name matching several tools ignoring case, none exactly, gives
//!   none of them. A deny (`disallowed_tools`) is wider: it names every tool equal to it
//!   ignoring ASCII case, orchestration tools included, so a deny never misses by case.
//! * Claude Code's whole-server entries `mcp__<server>` and `mcp__<server>__*` name every
//!   registered tool `mcp__<server>__<tool>`, and `mcp__*` every MCP tool, in a grant and in
//!   a deny alike; an exact tool of that name wins.
//! * MCP tools (`mcp__<server>__<tool>`) are held only when named: a definition without a
//!   tool list (every user tool) holds none of them.

use agent_tree_protocol::runtime::is_delegation_entry;
use agent_tree_protocol::{AgentDefinition, ExtensionSelector, ToolSet};

use crate::tool::{AGENT_TOOL, ASK_OWNER_TOOL, ORCHESTRATION_TOOLS, RESERVED_TOOLS};

/// What one tool name of a definition denotes among the registered user tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ToolMatch<'a> {
    /// This registered tool: the exact name, or the only case-insensitive match.
    Tool(&'a str),
    /// An orchestration tool (`Agent`, `ask_owner`, ...), ignoring ASCII case: not a user
    /// tool; the delegation rule decides whether the agent gets it.
    Orchestration,
    /// Several registered tools equal it ignoring ASCII case and none exactly: none is meant
    /// more than another, so none is given.
    Ambiguous(Vec<&'a str>),
    /// A whole server's tools (`mcp__<server>`, `mcp__<server>__*`): every registered
    /// `mcp__<server>__<tool>`, the server's name matched ignoring ASCII case; `mcp__*`:
    /// every MCP tool. Never empty.
    Server(Vec<&'a str>),
    /// No registered tool.
    Unknown,
}

/// What a name denotes among `candidates` by the one rule names follow here (tool names of
/// definitions, tool names in a model's calls): the candidate equal to it, else the one
/// equal to it ignoring ASCII case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NameMatch<'a> {
    /// The candidate equal to the name.
    Exact(&'a str),
    /// The only candidate equal to it ignoring ASCII case.
    Folded(&'a str),
    /// Several equal to it ignoring ASCII case, none exactly.
    Ambiguous(Vec<&'a str>),
    /// None.
    None,
}

/// Matches `name` among `candidates` ([`NameMatch`]).
pub(crate) fn match_name<'a, I>(name: &str, candidates: I) -> NameMatch<'a>
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let candidates = candidates.into_iter();
    if let Some(exact) = candidates.clone().find(|c| *c == name) {
        return NameMatch::Exact(exact);
    }
    let mut folded: Vec<&'a str> = candidates
        .filter(|c| c.eq_ignore_ascii_case(name))
        .collect();
    match folded.len() {
        0 => NameMatch::None,
        1 => NameMatch::Folded(folded.remove(0)),
        _ => NameMatch::Ambiguous(folded),
    }
}

/// The rule matching a definition's tool name `name` to the registered user tools.
///
/// In order: a registered tool named exactly `name`; an orchestration tool named exactly
/// `name`, or a Claude Code delegation entry (`Agent(writer)`, `Task`); the one registered tool equal to `name` ignoring ASCII case (several are
/// [`ToolMatch::Ambiguous`]); an orchestration tool equal to it ignoring ASCII case. pi's
/// `ext:<extension>/<tool>` is matched as `<tool>`; a whole extension (`ext:<extension>`)
/// names no tool here (agent-tree has no extensions), so it is [`ToolMatch::Unknown`].
pub(crate) fn match_tool_name<'a>(name: &str, registered: &[&'a str]) -> ToolMatch<'a> {
    let name = name.trim();
    let name = match ExtensionSelector::parse(name) {
        Some(ExtensionSelector {
            tool: Some(tool), ..
        }) => tool,
        Some(ExtensionSelector { tool: None, .. }) => return ToolMatch::Unknown,
        None => name,
    };
    match match_name(name, registered.iter().copied()) {
        NameMatch::Exact(tool) => ToolMatch::Tool(tool),
        // Claude Code's `Agent(writer, reviewer)` / `Task`: delegation, which the definition's
        // `allowed_subagents` holds (`AgentDefinition::apply_delegation_entries`).
        _ if RESERVED_TOOLS.contains(&name) || is_delegation_entry(name) => {
            ToolMatch::Orchestration
        }
        NameMatch::Folded(tool) => ToolMatch::Tool(tool),
        NameMatch::Ambiguous(tools) => ToolMatch::Ambiguous(tools),
        NameMatch::None if RESERVED_TOOLS.iter().any(|t| t.eq_ignore_ascii_case(name)) => {
            ToolMatch::Orchestration
        }
        NameMatch::None => {
            let server: Vec<&str> = registered
                .iter()
                .copied()
                .filter(|tool| in_server(name, tool))
                .collect();
            if server.is_empty() {
                ToolMatch::Unknown
            } else {
                ToolMatch::Server(server)
            }
        }
    }
}

/// What every MCP tool's name starts with (`mcp__<server>__<tool>`).
const MCP_PREFIX: &str = "mcp__";

/// `name` after `prefix`, the prefix matched ignoring ASCII case.
fn after_prefix<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}

/// The server of an MCP tool's name (`mcp__<server>__<tool>`, neither part empty).
fn mcp_server(name: &str) -> Option<&str> {
    let (server, tool) = after_prefix(name, MCP_PREFIX)?.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some(server)
}

/// Whether `tool` is one of the tools a whole-server entry names: `mcp__<server>` or
/// `mcp__<server>__*` every `mcp__<server>__<tool>` (the server's name equal ignoring ASCII
/// case), `mcp__*` every MCP tool.
fn in_server(entry: &str, tool: &str) -> bool {
    let (Some(named), Some(server)) = (after_prefix(entry, MCP_PREFIX), mcp_server(tool)) else {
        return false;
    };
    if named == "*" {
        return true;
    }
    let named = named.strip_suffix("__*").unwrap_or(named);
    !named.is_empty()
        && !named.contains("__")
        && !named.contains('*')
        && named.eq_ignore_ascii_case(server)
}

/// Whether the deny name `denied` denies the tool `tool`: equal ignoring ASCII case (pi's
/// `ext:<extension>/<tool>` as `<tool>`). Claude Code's delegation entries (`Task`,
/// `Agent(writer)`) deny the `Agent` tool, as they grant it.
pub(crate) fn deny_names(denied: &str, tool: &str) -> bool {
    let denied = denied.trim();
    if is_delegation_entry(denied) {
        return tool == AGENT_TOOL;
    }
    let denied = match ExtensionSelector::parse(denied) {
        Some(ExtensionSelector {
            tool: Some(tool), ..
        }) => tool,
        _ => denied,
    };
    denied.eq_ignore_ascii_case(tool) || in_server(denied, tool)
}

/// The registered user tools `tools` grants, by [`match_tool_name`], in registration order.
fn granted<'a>(tools: &ToolSet, registered: &[&'a str]) -> Vec<&'a str> {
    match tools {
        // MCP tools only by name: a server's tools are whatever it lists, so no definition
        // gets them without asking.
        ToolSet::All => registered
            .iter()
            .copied()
            .filter(|tool| mcp_server(tool).is_none())
            .collect(),
        ToolSet::None => Vec::new(),
        ToolSet::Only(names) => {
            let named: Vec<&str> = names
                .iter()
                .flat_map(|n| match match_tool_name(n, registered) {
                    ToolMatch::Tool(tool) => vec![tool],
                    ToolMatch::Server(tools) => tools,
                    _ => Vec::new(),
                })
                .collect();
            registered
                .iter()
                .copied()
                .filter(|t| named.contains(t))
                .collect()
        }
    }
}

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
    definition
        .disallowed_tools
        .iter()
        .any(|denied| deny_names(denied, tool))
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
    let registered: Vec<&str> = available.into_iter().collect();
    let user_tools = granted(&definition.tools, &registered)
        .into_iter()
        .filter(|name| !denies(definition, name))
        .filter(|name| owner.is_none_or(|o| o.holds(name)))
        .map(str::to_owned)
        .collect();
    // An allowlist need not name the orchestration tools (they are inferred with
    // `allowed_subagents`); a deny of any one of them removes it.
    let orchestration = if may_delegate(definition, depth, max_depth) {
        // Sized once: collected from a filter, the list would grow twice.
        let mut tools = Vec::with_capacity(ORCHESTRATION_TOOLS.len());
        tools.extend(
            ORCHESTRATION_TOOLS
                .into_iter()
                .filter(|tool| !denies(definition, tool)),
        );
        tools
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

    /// Claude Code's whole-server entries `mcp__<server>` and `mcp__<server>__*` grant (and
    /// deny) every tool of that server, and only its, `mcp__*` every MCP tool; an
    /// unregistered server names nothing.
    #[test]
    fn a_whole_mcp_server_entry_names_every_tool_of_that_server() {
        let registered = [
            "mcp__fs__read",
            "mcp__fs__write",
            "mcp__fsx__read",
            "mcp__web__get",
        ];
        assert_eq!(
            match_tool_name("mcp__fs", &registered),
            ToolMatch::Server(vec!["mcp__fs__read", "mcp__fs__write"])
        );
        assert_eq!(
            match_tool_name("MCP__FS", &registered),
            ToolMatch::Server(vec!["mcp__fs__read", "mcp__fs__write"])
        );
        assert_eq!(
            match_tool_name("mcp__none", &registered),
            ToolMatch::Unknown
        );
        assert_eq!(match_tool_name("mcp__", &registered), ToolMatch::Unknown);
        assert_eq!(
            match_tool_name("mcp__web__get", &registered),
            ToolMatch::Tool("mcp__web__get")
        );
        let only =
            AgentDefinition::new("w", "").with_tools(ToolSet::only(["mcp__fs", "mcp__web__get"]));
        assert_eq!(
            capabilities(&only, 1, 5, registered, None, true).user_tools,
            ["mcp__fs__read", "mcp__fs__write", "mcp__web__get"]
        );
        let denied = AgentDefinition::new("w", "")
            .with_tools(ToolSet::only(["mcp__*"]))
            .with_disallowed_tools(["mcp__fs"]);
        assert_eq!(
            capabilities(&denied, 1, 5, registered, None, true).user_tools,
            ["mcp__fsx__read", "mcp__web__get"]
        );
    }

    /// An agent holds an MCP tool only when its definition names it (or its server): a
    /// definition without a tool list holds every other user tool and no MCP tool.
    #[test]
    fn mcp_tools_are_held_only_when_named() {
        let registered = ["read", "mcp__fs__read", "mcp__web__get"];
        let every = AgentDefinition::new("w", "");
        assert_eq!(
            capabilities(&every, 1, 5, registered, None, true).user_tools,
            ["read"]
        );
        let named = AgentDefinition::new("w", "").with_tools(ToolSet::only(["read", "mcp__web"]));
        assert_eq!(
            capabilities(&named, 1, 5, registered, None, true).user_tools,
            ["read", "mcp__web__get"]
        );
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
    fn exact_wins_then_the_one_case_insensitive_match() {
        let registered = ["read", "bash", "Grep", "grep", "GREP"];
        assert_eq!(
            match_tool_name("read", &registered),
            ToolMatch::Tool("read")
        );
        assert_eq!(
            match_tool_name("Read", &registered),
            ToolMatch::Tool("read")
        );
        assert_eq!(
            match_tool_name(" BASH ", &registered),
            ToolMatch::Tool("bash")
        );
        assert_eq!(
            match_tool_name("Grep", &registered),
            ToolMatch::Tool("Grep")
        );
        assert_eq!(
            match_tool_name("grep", &registered),
            ToolMatch::Tool("grep")
        );
        assert_eq!(
            match_tool_name("gREP", &registered),
            ToolMatch::Ambiguous(vec!["Grep", "grep", "GREP"])
        );
        assert_eq!(match_tool_name("WebFetch", &registered), ToolMatch::Unknown);
        assert_eq!(match_tool_name("", &registered), ToolMatch::Unknown);
        assert_eq!(match_tool_name("read", &[]), ToolMatch::Unknown);
        // Case folding is ASCII only: `ſ` (long s) is not `s`.
        assert_eq!(match_tool_name("baſh", &registered), ToolMatch::Unknown);
    }

    #[test]
    fn orchestration_names_are_not_user_tools() {
        let registered = ["read", "agent"];
        for name in [
            "Agent",
            "ask_owner",
            "get_subagent_result",
            "ASK_OWNER",
            "Wait_Subagents",
        ] {
            assert_eq!(
                match_tool_name(name, &registered),
                ToolMatch::Orchestration,
                "{name}"
            );
        }
        // A registered tool named exactly wins (`agent` is not reserved; `Agent` is).
        assert_eq!(
            match_tool_name("agent", &registered),
            ToolMatch::Tool("agent")
        );
    }

    #[test]
    fn pi_extension_selectors_name_their_tool() {
        let registered = ["read", "search"];
        assert_eq!(
            match_tool_name("ext:mcp/search", &registered),
            ToolMatch::Tool("search")
        );
        assert_eq!(
            match_tool_name("ext:mcp/Search", &registered),
            ToolMatch::Tool("search")
        );
        assert_eq!(match_tool_name("ext:mcp", &registered), ToolMatch::Unknown);
        assert!(deny_names("ext:mcp/search", "search"));
        assert!(!deny_names("ext:mcp", "mcp"));
    }

    #[test]
    fn claude_code_names_reach_lower_case_registrations() {
        let claude = AgentDefinition::new("reviewer", "").with_tools(ToolSet::only([
            "Read", "Write", "Edit", "Bash", "Glob", "Grep",
        ]));
        let caps = capabilities(&claude, 1, 5, TOOLS, None, true);
        // In registration order, whatever the order the file lists them in.
        assert_eq!(caps.user_tools, ["read", "write", "bash"]);
        let ambiguous = ["read", "READ", "bash"];
        let caps = capabilities(&claude, 1, 5, ambiguous, None, true);
        assert_eq!(caps.user_tools, ["bash"], "ambiguous `Read` gives neither");
        let exact = AgentDefinition::new("r", "").with_tools(ToolSet::only(["READ"]));
        assert_eq!(
            capabilities(&exact, 1, 5, ambiguous, None, true).user_tools,
            ["READ"]
        );
    }

    #[test]
    fn a_deny_ignores_case_and_wins() {
        let def = AgentDefinition::new("w", "").with_disallowed_tools(["BASH", "Write"]);
        assert_eq!(
            capabilities(&def, 1, 5, TOOLS, None, true).user_tools,
            ["read"]
        );
        let both = ["read", "READ"];
        let def = AgentDefinition::new("w", "").with_disallowed_tools(["Read"]);
        assert!(
            capabilities(&def, 1, 5, both, None, true)
                .user_tools
                .is_empty()
        );
        // An orchestration deny ignores case too, and still wins over an allowlist.
        let denied = delegator()
            .with_tools(ToolSet::only(["read", "Agent"]))
            .with_disallowed_tools(["agent", "ASK_OWNER"]);
        let caps = capabilities(&denied, 1, 5, TOOLS, None, true);
        assert!(!caps.can_delegate() && !caps.ask_owner);
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
