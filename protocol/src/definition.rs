//! Agent definitions: what an agent type is allowed to do and how it is supervised.
//!
//! These are plain data, loaded from markdown frontmatter or built in code. The runtime
//! checks a definition once when it enters a catalog; nothing here enforces anything.

use std::fmt;

use serde::de::Deserializer;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::sampling::Sampling;
use crate::words::{self, Keyword, ListField, ListValue, WordsError};

/// A set of tool names with the two special forms users write: every tool, or none.
///
/// Read from JSON, YAML or an agent file by the words rule: `all`
/// and `*` are [`ToolSet::All`], `none`, `""` and `[]` are [`ToolSet::None`], anything else
/// a list of names (`"read, grep"` or `["read", "grep"]`). Keywords ignore ASCII case, so
/// `"All"` is every tool, never a tool named `All`. pi's `"*, ext:mcp/search"` (`*` followed
/// by extension selectors, see [`ExtensionSelector`](crate::ExtensionSelector)) is every tool
/// too: agent-tree has no extension layer, every tool is one the application registered.
///
/// Names are kept as written. The runtime matches each to the application's registered tools
/// by one rule: the exact name, else the one ASCII-case-insensitive match (Claude Code's
/// `Read` gets a tool registered as `read`); `ext:<extension>/<tool>` is matched as `<tool>`.
/// A name matching no registered tool, or several and none exactly, gives no tool and is
/// reported (`Catalog::tool_problems` in `agent-tree-actors`, and a warning when a tree is
/// built). [`ToolSet::contains`] is plain data comparison, exact.
///
/// ```
/// use agent_tree_protocol::ToolSet;
/// let tools: ToolSet = serde_json::from_str(r#""read, grep""#).unwrap();
/// assert_eq!(tools, ToolSet::only(["read", "grep"]));
/// assert!(tools.contains("grep") && !tools.contains("bash"));
/// assert_eq!(serde_json::from_str::<ToolSet>(r#""All""#).unwrap(), ToolSet::All);
/// assert_eq!(serde_json::to_string(&ToolSet::None).unwrap(), r#""none""#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum ToolSet {
    /// Every tool available (`all`, `*`). The default when a definition lists no tools.
    #[default]
    All,
    /// No tool at all (`none`).
    None,
    /// Exactly these tools.
    Only(Vec<String>),
}

impl ToolSet {
    /// Whether the set holds `tool` (names compare exactly; the runtime's matching of names
    /// to registered tools is wider, see [`ToolSet`]).
    ///
    /// ```
    /// use agent_tree_protocol::ToolSet;
    /// assert!(ToolSet::All.contains("anything"));
    /// assert!(!ToolSet::only(["Read"]).contains("read"));
    /// ```
    pub fn contains(&self, tool: &str) -> bool {
        match self {
            ToolSet::All => true,
            ToolSet::None => false,
            ToolSet::Only(names) => names.iter().any(|n| n == tool),
        }
    }

    /// A set of exactly `names` (an empty list means none).
    ///
    /// ```
    /// use agent_tree_protocol::ToolSet;
    /// assert_eq!(ToolSet::only(Vec::<String>::new()), ToolSet::None);
    /// ```
    pub fn only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        if names.is_empty() {
            ToolSet::None
        } else {
            ToolSet::Only(names)
        }
    }
}

impl Serialize for ToolSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolSet::All => serializer.serialize_str(Keyword::All.as_str()),
            ToolSet::None => serializer.serialize_str(Keyword::None.as_str()),
            ToolSet::Only(names) => names.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ToolSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        words::deserialize(deserializer, ListField::Tools, false, ListValue::tool_set)
    }
}

/// Which agent types an agent may spawn (`allowed_subagents`).
///
/// Read by the words rule: omitted, empty, `none` and
/// `false` mean no delegation; `all`, `*` and `true` mean every enabled type; anything else
/// is a list of type names. Never inherited by children.
///
/// ```
/// use agent_tree_protocol::SubagentAllowance;
/// let allowed: SubagentAllowance = serde_json::from_str(r#""writer, Reviewer""#).unwrap();
/// assert_eq!(allowed, SubagentAllowance::only(["writer", "Reviewer"]));
/// assert_eq!(serde_json::from_str::<SubagentAllowance>("true").unwrap(), SubagentAllowance::All);
/// assert_eq!(serde_json::from_str::<SubagentAllowance>(r#""NONE""#).unwrap(), SubagentAllowance::None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SubagentAllowance {
    /// No delegation (the default).
    #[default]
    None,
    /// Any enabled type in the branch's catalog.
    All,
    /// Only these types.
    Only(Vec<String>),
}

impl SubagentAllowance {
    /// Whether this allowance permits any delegation at all.
    ///
    /// ```
    /// use agent_tree_protocol::SubagentAllowance;
    /// assert!(SubagentAllowance::only(["writer"]).allows_any());
    /// assert!(!SubagentAllowance::None.allows_any());
    /// ```
    pub fn allows_any(&self) -> bool {
        match self {
            SubagentAllowance::None => false,
            SubagentAllowance::All => true,
            SubagentAllowance::Only(names) => !names.is_empty(),
        }
    }

    /// Whether the list names `agent_type` exactly (or the allowance is [`All`]).
    ///
    /// This is plain data comparison. The runtime (`Catalog::resolve_for`) matches each entry
    /// to a catalog type by the rule type names follow — the exact name, else the one
    /// case-insensitive match — so `[Reviewer]` there permits a type `reviewer`.
    ///
    /// [`All`]: SubagentAllowance::All
    ///
    /// ```
    /// use agent_tree_protocol::SubagentAllowance;
    /// let allowed = SubagentAllowance::only(["writer"]);
    /// assert!(allowed.permits("writer"));
    /// assert!(!allowed.permits("Writer"));
    /// ```
    pub fn permits(&self, agent_type: &str) -> bool {
        match self {
            SubagentAllowance::None => false,
            SubagentAllowance::All => true,
            SubagentAllowance::Only(names) => names.iter().any(|n| n == agent_type),
        }
    }

    /// A list allowance of exactly `names` (an empty list means none).
    ///
    /// ```
    /// use agent_tree_protocol::SubagentAllowance;
    /// assert_eq!(SubagentAllowance::only(Vec::<String>::new()), SubagentAllowance::None);
    /// ```
    pub fn only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        if names.is_empty() {
            SubagentAllowance::None
        } else {
            SubagentAllowance::Only(names)
        }
    }
}

impl Serialize for SubagentAllowance {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SubagentAllowance::None => serializer.serialize_str(Keyword::None.as_str()),
            SubagentAllowance::All => serializer.serialize_str(Keyword::All.as_str()),
            SubagentAllowance::Only(names) => names.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for SubagentAllowance {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        words::deserialize(
            deserializer,
            ListField::AllowedSubagents,
            false,
            ListValue::subagent_allowance,
        )
    }
}

/// Erlang's restart types: when a supervisor restarts an agent that ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    /// Always restarted, whatever the exit.
    Permanent,
    /// Restarted only after an abnormal exit (failure, panic, kill).
    Transient,
    /// Never restarted; a failure is reported to the owner (the default).
    #[default]
    Temporary,
}

/// Erlang's restart strategies: which siblings restart with a failed child.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Only the failed child (the default).
    #[default]
    OneForOne,
    /// Every child of the owner.
    OneForAll,
    /// The failed child and every child started after it.
    RestForOne,
}

/// What happens to live children when an agent's own run ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettlePolicy {
    /// Abort them (the default, as `pi-subagents`).
    #[default]
    AbortChildren,
    /// Hold the agent in `completing` until they are terminal (as Pi Durable).
    Drain,
}

/// One agent type: its prompt, its capabilities and its supervision.
///
/// ```
/// use agent_tree_protocol::{AgentDefinition, SubagentAllowance};
/// let planner = AgentDefinition::new("planner", "You plan.")
///     .with_allowed_subagents(SubagentAllowance::only(["analyst", "writer"]));
/// assert!(planner.allowed_subagents.permits("writer"));
/// assert!(planner.enabled);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AgentDefinition {
    /// The type name agents are spawned by.
    pub name: String,
    /// What the type is for (shown to models choosing a type).
    pub description: String,
    /// The system prompt.
    pub prompt: String,
    /// Tools the agent may use (before the tree adds or removes orchestration tools).
    pub tools: ToolSet,
    /// Tools the agent may never use; an explicit deny always wins. Read by the words rule:
    /// names only, as a list or a comma-separated string.
    pub disallowed_tools: Vec<String>,
    /// Which types it may spawn.
    pub allowed_subagents: SubagentAllowance,
    /// An isolated agent never delegates, whatever else it says.
    pub isolated: bool,
    /// The model name to ask for, if not the tree's default.
    pub model: Option<String>,
    /// The most model turns one run may take (depth-scaled default when absent).
    pub max_turns: Option<u32>,
    /// Whether the child sees its owner's conversation.
    pub inherit_context: bool,
    /// Whether spawns of this type run in the background unless the request says otherwise.
    pub run_in_background: bool,
    /// A disabled type cannot be spawned.
    pub enabled: bool,
    /// The restart type.
    pub restart: RestartPolicy,
    /// The strategy this agent applies to its own children.
    pub strategy: Strategy,
    /// Restart intensity: at most this many restarts of its children...
    pub max_restarts: u32,
    /// ...within this window, in milliseconds.
    pub restart_period_ms: u64,
    /// What happens to live children when its run ends.
    pub settle: SettlePolicy,
    /// Agents of this type are detached: an ordinary abort cascade from their owner skips
    /// them, and they are supervised by the root. Only a definition or the application's
    /// [`SpawnRequest`](crate::SpawnRequest) can detach an agent, never a model.
    pub detached: bool,
    /// The node agents of this type run on (the name a node joined the tree with), when not
    /// this one: the application's placement, never a model's (see `docs/cluster.md`). Needs
    /// the runtime's `cluster` feature and a node attached to the tree; a spawn placed on a
    /// node the tree cannot reach is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// How its model is asked to generate (temperature, output limit, tool choice, ...):
    /// laid over the tree's [`Sampling`] field by field. Unset by default.
    #[serde(skip_serializing_if = "Sampling::is_unset")]
    pub sampling: Sampling,
}

impl<'de> Deserialize<'de> for AgentDefinition {
    /// The fields (by the words rule for the list fields; a field left out or null takes
    /// its default), then Claude Code's delegation entries in `tools` applied beside the
    /// `allowed_subagents` written, if one was
    /// ([`AgentDefinition::apply_delegation_entries_beside`]). Their disagreement is an error
    /// of ``field `tools` ``, found once the whole definition is read: it carries no line
    /// and column.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut definition = DefinitionFields::deserialize(deserializer)?;
        let written = definition.allowed_subagents != unwritten_allowance();
        if !written {
            definition.allowed_subagents = SubagentAllowance::None;
        }
        definition
            .apply_delegation_entries_beside(written)
            .map_err(|e| serde::de::Error::custom(format_args!("field `tools`: {e}")))?;
        Ok(definition)
    }
}

/// How serde reads an [`AgentDefinition`]'s fields (its `Deserialize` impl then applies the
/// delegation entries). A private mirror, so the function serde writes for it is no public
/// path around that step.
#[derive(Deserialize)]
#[serde(remote = "AgentDefinition", default = "AgentDefinition::default")]
struct DefinitionFields {
    name: String,
    description: String,
    prompt: String,
    #[serde(deserialize_with = "words::tools_field")]
    tools: ToolSet,
    #[serde(deserialize_with = "words::disallowed_tools_field")]
    disallowed_tools: Vec<String>,
    #[serde(
        deserialize_with = "words::allowed_subagents_field_or_unwritten",
        default = "unwritten_allowance"
    )]
    allowed_subagents: SubagentAllowance,
    isolated: bool,
    model: Option<String>,
    max_turns: Option<u32>,
    inherit_context: bool,
    run_in_background: bool,
    enabled: bool,
    restart: RestartPolicy,
    strategy: Strategy,
    max_restarts: u32,
    restart_period_ms: u64,
    settle: SettlePolicy,
    detached: bool,
    node: Option<String>,
    sampling: Sampling,
}

/// What `allowed_subagents` reads as while a definition is deserialized and the field was
/// left out (or null): an empty `Only`, which no written value reads as (the words rule
/// makes an empty list `None`), told apart then and made `None`.
pub(crate) fn unwritten_allowance() -> SubagentAllowance {
    SubagentAllowance::Only(Vec::new())
}

/// The default restart intensity (Erlang's default).
pub const DEFAULT_MAX_RESTARTS: u32 = 1;
/// The default restart period in milliseconds (Erlang's default, 5 s).
pub const DEFAULT_RESTART_PERIOD_MS: u64 = 5_000;

impl Default for AgentDefinition {
    fn default() -> Self {
        AgentDefinition {
            name: String::new(),
            description: String::new(),
            prompt: String::new(),
            tools: ToolSet::All,
            disallowed_tools: Vec::new(),
            allowed_subagents: SubagentAllowance::None,
            isolated: false,
            model: None,
            max_turns: None,
            inherit_context: false,
            run_in_background: false,
            enabled: true,
            restart: RestartPolicy::Temporary,
            strategy: Strategy::OneForOne,
            max_restarts: DEFAULT_MAX_RESTARTS,
            restart_period_ms: DEFAULT_RESTART_PERIOD_MS,
            settle: SettlePolicy::AbortChildren,
            detached: false,
            node: None,
            sampling: Sampling::default(),
        }
    }
}

impl AgentDefinition {
    /// A definition of type `name` with a system prompt and every other field defaulted.
    pub fn new(name: impl Into<String>, prompt: impl Into<String>) -> Self {
        AgentDefinition {
            name: name.into(),
            prompt: prompt.into(),
            ..AgentDefinition::default()
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the tool allowlist.
    pub fn with_tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the tool denylist.
    pub fn with_disallowed_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.disallowed_tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Sets which types it may spawn.
    pub fn with_allowed_subagents(mut self, allowed: SubagentAllowance) -> Self {
        self.allowed_subagents = allowed;
        self
    }

    /// Makes what Claude Code's delegation entries in `tools` (`Agent`, `Task`,
    /// `Agent(writer, reviewer)`) grant
    /// the definition's `allowed_subagents` when it has none (`None`, as a definition built
    /// in code without one has): a bare `Agent` grants every type, else the named types.
    /// Beside an `allowed_subagents`, a bare `Agent` defers to it, and entries naming types
    /// may name only types it allows. The entries stay in `tools`, where the
    /// runtime offers no tool for them; applying it twice is applying it once. Readers
    /// that know whether `allowed_subagents` was written (`none` written is not `none` left
    /// out), agent files and serde, call [`AgentDefinition::apply_delegation_entries_beside`];
    /// a catalog checks each definition with it, as written.
    ///
    /// ```
    /// use agent_tree_protocol::{AgentDefinition, SubagentAllowance, ToolSet};
    /// let mut lead = AgentDefinition::new("lead", "You lead.")
    ///     .with_tools(ToolSet::only(["Agent(writer, reviewer)", "Read"]));
    /// lead.apply_delegation_entries()?;
    /// assert_eq!(lead.allowed_subagents, SubagentAllowance::only(["writer", "reviewer"]));
    /// let mut planner = AgentDefinition::new("planner", "You plan.")
    ///     .with_tools(ToolSet::only(["Read", "Agent"]))
    ///     .with_allowed_subagents(SubagentAllowance::only(["writer"]));
    /// planner.apply_delegation_entries()?;
    /// assert_eq!(planner.allowed_subagents, SubagentAllowance::only(["writer"]));
    /// # Ok::<(), agent_tree_protocol::WordsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The words rule's refusal of an entry's types, or [`WordsError::Disagrees`] when
    /// entries name a type `allowed_subagents` does not allow; the definition is unchanged
    /// then.
    pub fn apply_delegation_entries(&mut self) -> Result<(), WordsError> {
        let written = self.allowed_subagents != SubagentAllowance::None;
        self.apply_delegation_entries_beside(written)
    }

    /// As [`AgentDefinition::apply_delegation_entries`], told whether `allowed_subagents`
    /// was written (`allowed_subagents: none` beside `tools: Agent, Read` keeps `none`).
    ///
    /// ```
    /// use agent_tree_protocol::{AgentDefinition, SubagentAllowance, ToolSet};
    /// let mut solo = AgentDefinition::new("solo", "")
    ///     .with_tools(ToolSet::only(["Agent", "Read"]));
    /// solo.apply_delegation_entries_beside(true)?;
    /// assert_eq!(solo.allowed_subagents, SubagentAllowance::None);
    /// # Ok::<(), agent_tree_protocol::WordsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`AgentDefinition::apply_delegation_entries`].
    pub fn apply_delegation_entries_beside(
        &mut self,
        allowed_written: bool,
    ) -> Result<(), WordsError> {
        let ToolSet::Only(names) = &self.tools else {
            return Ok(());
        };
        let Some(entries) = crate::words::delegation_entries(names)? else {
            return Ok(());
        };
        if !allowed_written {
            self.allowed_subagents = entries.grants();
            return Ok(());
        }
        let Some(named) = entries.named else {
            // A bare `Agent` defers to what is written.
            return Ok(());
        };
        // The written allowance is the authority: entries may name only types it allows.
        let agrees = match (&self.allowed_subagents, &named) {
            (_, SubagentAllowance::None) | (SubagentAllowance::All, _) => true,
            // Types are matched to the catalog ignoring ASCII case (the exact name first), so
            // `Agent(Writer)` is the `writer` an allowance names.
            (SubagentAllowance::Only(allowed), SubagentAllowance::Only(named)) => named
                .iter()
                .all(|t| allowed.iter().any(|a| a.eq_ignore_ascii_case(t))),
            (SubagentAllowance::None | SubagentAllowance::Only(_), SubagentAllowance::All) => false,
            (SubagentAllowance::None, SubagentAllowance::Only(_)) => false,
        };
        if agrees {
            Ok(())
        } else {
            Err(WordsError::Disagrees {
                entries: named,
                allowed: self.allowed_subagents.clone(),
            })
        }
    }

    /// Marks it isolated (never delegates).
    pub fn isolated(mut self) -> Self {
        self.isolated = true;
        self
    }

    /// Sets `max_turns`.
    pub fn with_max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = Some(max_turns);
        self
    }

    /// Makes spawns of this type run in the background by default.
    pub fn in_background(mut self) -> Self {
        self.run_in_background = true;
        self
    }

    /// Sets whether the type can be spawned.
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets the restart type.
    pub fn with_restart(mut self, restart: RestartPolicy) -> Self {
        self.restart = restart;
        self
    }

    /// Sets the strategy applied to its children and the restart intensity.
    pub fn with_supervision(
        mut self,
        strategy: Strategy,
        max_restarts: u32,
        restart_period_ms: u64,
    ) -> Self {
        self.strategy = strategy;
        self.max_restarts = max_restarts;
        self.restart_period_ms = restart_period_ms;
        self
    }

    /// Sets the settle policy.
    pub fn with_settle(mut self, settle: SettlePolicy) -> Self {
        self.settle = settle;
        self
    }

    /// Makes agents of this type detached from ordinary abort cascades.
    ///
    /// ```
    /// use agent_tree_protocol::AgentDefinition;
    /// assert!(AgentDefinition::new("cron", "").detached().detached);
    /// ```
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }

    /// Places agents of this type on the node named `node` (see [`AgentDefinition::node`]).
    ///
    /// ```
    /// use agent_tree_protocol::AgentDefinition;
    /// let sandboxed = AgentDefinition::new("runner", "You run builds.").on_node("builder-1");
    /// assert_eq!(sandboxed.node.as_deref(), Some("builder-1"));
    /// ```
    pub fn on_node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Sets the model name to ask for (`None`: the tree's default).
    ///
    /// ```
    /// use agent_tree_protocol::AgentDefinition;
    /// let d = AgentDefinition::new("w", "").with_model(Some("gpt-4o-mini".into()));
    /// assert_eq!(d.model.as_deref(), Some("gpt-4o-mini"));
    /// ```
    pub fn with_model(mut self, model: Option<String>) -> Self {
        self.model = model;
        self
    }

    /// The same definition with its own sampling (laid over the tree's).
    ///
    /// ```
    /// use agent_tree_protocol::{AgentDefinition, Sampling, ToolChoice};
    /// let def = AgentDefinition::new("lookup", "Look things up.")
    ///     .with_sampling(Sampling::default().with_temperature(0.0).with_tool_choice(ToolChoice::Required));
    /// assert_eq!(def.sampling.temperature, Some(0.0));
    /// ```
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Sets whether the child sees its owner's conversation.
    pub fn with_inherit_context(mut self, inherit: bool) -> Self {
        self.inherit_context = inherit;
        self
    }
}

impl fmt::Display for AgentDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowance(json: &str) -> SubagentAllowance {
        serde_json::from_str(json).unwrap()
    }

    fn tools(json: &str) -> ToolSet {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    /// The definition decoded from `{"name": "x", <field>}`.
    fn definition(field: &str) -> Result<AgentDefinition, String> {
        serde_json::from_str(&format!(r#"{{"name": "x", {field}}}"#)).map_err(|e| e.to_string())
    }

    #[test]
    fn allowance_words_and_booleans() {
        for none in [
            "false",
            "\"none\"",
            "\"None\"",
            "\"NONE\"",
            "\"false\"",
            "\"False\"",
            "\"\"",
            "\" , \"",
            "[]",
            "[\" \"]",
            "[\"none\"]",
            "[\"FALSE\"]",
            "null",
        ] {
            assert_eq!(allowance(none), SubagentAllowance::None, "{none}");
        }
        for all in [
            "true",
            "\"all\"",
            "\"All\"",
            "\"ALL\"",
            "\"*\"",
            "\" * \"",
            "\"true\"",
            "\"TRUE\"",
            "[\"all\"]",
            "[\"*\"]",
            "[\"True\"]",
        ] {
            assert_eq!(allowance(all), SubagentAllowance::All, "{all}");
        }
        assert_eq!(
            allowance("\"writer, reviewer\""),
            SubagentAllowance::only(["writer", "reviewer"])
        );
        assert_eq!(
            allowance("[\" Writer \", \"\", \"a,b\"]"),
            SubagentAllowance::only(["Writer", "a,b"])
        );
        for refused in [
            "\"writer, all\"",
            "[\"writer\", \"none\"]",
            "[true]",
            "3",
            "{}",
        ] {
            assert!(
                serde_json::from_str::<SubagentAllowance>(refused).is_err(),
                "{refused}"
            );
        }
    }

    #[test]
    fn tool_set_words_in_json() {
        assert_eq!(tools("\"read, write\""), ToolSet::only(["read", "write"]));
        for all in [
            "\"all\"",
            "\"All\"",
            "\"ALL\"",
            "\"*\"",
            "[\"all\"]",
            "[\" * \"]",
        ] {
            assert_eq!(tools(all), ToolSet::All, "{all}");
        }
        for none in ["\"none\"", "\"None\"", "\"\"", "[]", "[\"\"]", "[\"NONE\"]"] {
            assert_eq!(tools(none), ToolSet::None, "{none}");
        }
        assert_eq!(tools("null"), ToolSet::All, "null is the default");
        // Names keep their case and list items are never split.
        assert_eq!(
            tools("[\"Read\", \"Bash(git:*)\", \"a,b\"]"),
            ToolSet::only(["Read", "Bash(git:*)", "a,b"])
        );
        for refused in [
            "true",
            "false",
            "\"true\"",
            "\"False\"",
            "\"read, all\"",
            "[\"read\", \"*\"]",
            "[1]",
            "3",
            "{}",
        ] {
            assert!(
                serde_json::from_str::<ToolSet>(refused).is_err(),
                "{refused}"
            );
        }
    }

    #[test]
    fn definition_fields_read_by_the_words_rule_and_errors_name_the_field() {
        let d = definition(r#""tools": "All", "allowed_subagents": "Reviewer""#).unwrap();
        assert_eq!(
            d.tools,
            ToolSet::All,
            "`All` is the keyword, not a tool named All"
        );
        assert_eq!(d.allowed_subagents, SubagentAllowance::only(["Reviewer"]));
        let d = definition(r#""disallowed_tools": "bash, write", "tools": null"#).unwrap();
        assert_eq!(d.disallowed_tools, ["bash", "write"]);
        assert_eq!(d.tools, ToolSet::All);
        assert!(
            definition(r#""disallowed_tools": null"#)
                .unwrap()
                .disallowed_tools
                .is_empty()
        );

        let err = definition(r#""tools": "read, all""#).unwrap_err();
        assert_eq!(
            err,
            "field `tools`: `all` must stand alone, found it among names: read, all \
             at line 1 column 34"
        );
        let err = definition(r#""disallowed_tools": ["bash", "None"]"#).unwrap_err();
        assert!(
            err.starts_with("field `disallowed_tools`: expected tool names, found `none`"),
            "{err}"
        );
        let err = definition(r#""allowed_subagents": ["writer", 3]"#).unwrap_err();
        assert!(
            err.starts_with(
                "field `allowed_subagents`: expected an agent type name in list item 2, found 3"
            ),
            "{err}"
        );
        let err = definition(r#""tools": true"#).unwrap_err();
        assert!(
            err.starts_with(
                "field `tools`: expected `all`, `none` or tool names (a comma-separated string \
                 or a list), found true"
            ),
            "{err}"
        );
        // One position, added once.
        assert_eq!(err.matches(" at line ").count(), 1, "{err}");
    }

    #[test]
    fn written_words_read_back_as_themselves() {
        for value in [ToolSet::All, ToolSet::None, ToolSet::only(["read", "Grep"])] {
            let json = serde_json::to_string(&value).unwrap();
            assert_eq!(tools(&json), value, "{json}");
        }
        for value in [
            SubagentAllowance::All,
            SubagentAllowance::None,
            SubagentAllowance::only(["writer"]),
        ] {
            let json = serde_json::to_string(&value).unwrap();
            assert_eq!(allowance(&json), value, "{json}");
        }
    }
}
