//! The words rule: how the list fields of a definition (`tools`, `disallowed_tools`,
//! `allowed_subagents`) read what users write.
//!
//! There is one rule for every format: JSON and YAML decoded through serde (the
//! `Deserialize` impls of [`ToolSet`], [`SubagentAllowance`] and [`AgentDefinition`]) and agent
//! files (`parse_agent_file` in `agent-tree-actors`) both hand what they read to [`ListValue`],
//! so a value means the same thing wherever it is written.
//!
//! # The rule
//!
//! * A value is a string, a list of strings, or a boolean (which only `allowed_subagents`
//!   takes). Anything else is refused.
//! * A string is a comma-separated list: `"read, grep"` is `["read", "grep"]`; a comma inside
//!   parentheses splits nothing (`"Agent(writer, reviewer), Read"` is two items:
//!   [`split_list`]). The items of a string or of a list are trimmed and blank items dropped;
//!   a list item is never split.
//! * The **keywords** are `all`, `*`, `none`, `true` and `false` ([`Keyword`]), recognised
//!   after trimming and ignoring ASCII case: `All`, `NONE` and `" * "` are keywords. A keyword
//!   is never a name: as the only item it stands for the whole value (`all`, `[all]`,
//!   `"ALL"`), and among names it is refused (`read, all`). So no tool or agent type can be
//!   called `all`, `None` or `True`.
//! * Names keep their case: `Read` is the tool `Read`. (The runtime matches them to what
//!   exists by one rule: the exact name first, else the one ASCII-case-insensitive match; for
//!   agent types, allowlist entries included, in the catalog, and for tool names among the
//!   application's registered tools, so Claude Code's `Read` gets a tool registered as `read`.)
//! * pi's extension selectors ([`ExtensionSelector`]): `ext:<extension>` and
//!   `ext:<extension>/<tool>`. In `tools`, `*` (or `all`) may be followed by selectors only:
//!   `*, ext:mcp/search` reads as every tool ([`ToolSet::All`]), because agent-tree has no
//!   extension layer: every tool is one the application registered, and `*` grants them all
//!   (pi would hide the tools of other extensions; here nothing tells them apart). Among
//!   names, a selector is kept as written (`read, ext:mcp/search`), and the runtime matches
//!   `ext:<extension>/<tool>` as the tool `<tool>`. Any other name beside `*` is refused.
//! * Claude Code's delegation entries in `tools` (`Agent`, `Task`, `Agent(writer, reviewer)`)
//!   name no tool: they grant delegation ([`delegation_entries`]). A definition read through
//!   serde or from an agent file without `allowed_subagents` gets what they grant as its
//!   `allowed_subagents` ([`AgentDefinition::apply_delegation_entries_beside`]); beside a
//!   written one, a bare `Agent` defers to it, and entries naming a type it does not allow
//!   are an error. They stay in `tools` as written (so a definition written back reads back
//!   as itself).
//! * A field left out, or given as null, takes its default.
//!
//! | written | `tools` | `disallowed_tools` | `allowed_subagents` |
//! |---|---|---|---|
//! | `all`, `*` | every tool | refused | every enabled type |
//! | `*, ext:mcp/search` | every tool | refused | refused |
//! | `none` | no tool | refused | none |
//! | `true`, `false` (string or boolean) | refused | refused | every enabled type / none |
//! | `""`, `[]` | no tool | no tool denied | none |
//! | names | those tools | those tools | those types |
//! | left out, null | every tool | no tool denied | none |
//!
//! `disallowed_tools` takes names only, because a deny list must name what it denies.
//!
//! # Invariants
//!
//! * Reading never panics; every refusal is a [`WordsError`] saying what was expected and what
//!   was found.
//! * A value written back (serialized) reads back as itself, for every value this rule reads
//!   and every list [`ListField::check_names`] accepts: names are trimmed, non-blank and never
//!   keywords, and serialization writes lists as lists and the two whole-set values as the
//!   words `all` and `none`.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};

#[cfg(doc)]
use crate::definition::AgentDefinition;
use crate::definition::{SubagentAllowance, ToolSet};

/// One of the list fields the words rule reads.
///
/// ```
/// use agent_tree_protocol::ListField;
/// assert_eq!(ListField::AllowedSubagents.name(), "allowed_subagents");
/// assert_eq!(ListField::Tools.item(), "a tool name");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListField {
    /// `tools`: the tools an agent may use.
    Tools,
    /// `disallowed_tools`: the tools an agent may never use.
    DisallowedTools,
    /// `allowed_subagents`: the agent types an agent may spawn.
    AllowedSubagents,
}

impl ListField {
    /// The field's name in a definition (snake_case).
    ///
    /// ```
    /// assert_eq!(agent_tree_protocol::ListField::DisallowedTools.name(), "disallowed_tools");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ListField::Tools => "tools",
            ListField::DisallowedTools => "disallowed_tools",
            ListField::AllowedSubagents => "allowed_subagents",
        }
    }

    /// What a value of the field may be, as error messages say it.
    ///
    /// ```
    /// use agent_tree_protocol::ListField;
    /// assert!(ListField::Tools.expected().starts_with("`all`, `none` or tool names"));
    /// ```
    pub fn expected(self) -> &'static str {
        match self {
            ListField::Tools => "`all`, `none` or tool names (a comma-separated string or a list)",
            ListField::DisallowedTools => "tool names (a comma-separated string or a list)",
            ListField::AllowedSubagents => {
                "`all`, `none`, true, false or agent type names (a comma-separated string or a \
                 list)"
            }
        }
    }

    /// What one item of the field's list is, as error messages say it.
    ///
    /// ```
    /// use agent_tree_protocol::ListField;
    /// assert_eq!(ListField::AllowedSubagents.item(), "an agent type name");
    /// ```
    pub fn item(self) -> &'static str {
        match self {
            ListField::Tools | ListField::DisallowedTools => "a tool name",
            ListField::AllowedSubagents => "an agent type name",
        }
    }

    /// Checks a list of names held by a definition built in code: every name must be one the
    /// rule could have read, so that the list reads back as itself once written.
    ///
    /// ```
    /// use agent_tree_protocol::{ListField, WordsError};
    /// let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    /// assert!(ListField::Tools.check_names(&names(&["read", "Bash(git:*)"])).is_ok());
    /// assert!(matches!(
    ///     ListField::Tools.check_names(&names(&["read", "All"])),
    ///     Err(WordsError::KeywordName { index: 2, .. })
    /// ));
    /// assert!(ListField::Tools.check_names(&names(&[" read"])).is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`WordsError::Untrimmed`] for a blank name or one with white space around it,
    /// [`WordsError::KeywordName`] for a keyword; the first one found.
    pub fn check_names(self, names: &[String]) -> Result<(), WordsError> {
        for (i, name) in names.iter().enumerate() {
            let index = i + 1;
            if name.is_empty() || name.trim() != name {
                return Err(WordsError::Untrimmed {
                    field: self,
                    index,
                    name: name.clone(),
                });
            }
            if let Some(word) = Keyword::parse(name) {
                return Err(WordsError::KeywordName {
                    field: self,
                    index,
                    word,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for ListField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A keyword of the list fields: a word that stands for a whole value, never a name.
///
/// ```
/// use agent_tree_protocol::Keyword;
/// assert_eq!(Keyword::parse(" ALL "), Some(Keyword::All));
/// assert_eq!(Keyword::parse("*"), Some(Keyword::Star));
/// assert_eq!(Keyword::parse("allowed"), None);
/// assert_eq!(Keyword::False.to_string(), "false");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Keyword {
    /// `all`: every tool, or every enabled agent type.
    All,
    /// `*`: the same as `all`.
    Star,
    /// `none`: no tool, or no delegation.
    None,
    /// `true`: every enabled agent type (`allowed_subagents` only).
    True,
    /// `false`: no delegation (`allowed_subagents` only).
    False,
}

impl Keyword {
    /// Every keyword.
    ///
    /// ```
    /// use agent_tree_protocol::Keyword;
    /// assert!(Keyword::EVERY.iter().all(|k| Keyword::parse(k.as_str()) == Some(*k)));
    /// ```
    pub const EVERY: [Keyword; 5] = [
        Keyword::All,
        Keyword::Star,
        Keyword::None,
        Keyword::True,
        Keyword::False,
    ];

    /// The keyword `word` is, after trimming and ignoring ASCII case, if any.
    ///
    /// ```
    /// use agent_tree_protocol::Keyword;
    /// assert_eq!(Keyword::parse("None"), Some(Keyword::None));
    /// assert_eq!(Keyword::parse("nothing"), None);
    /// ```
    pub fn parse(word: &str) -> Option<Keyword> {
        let word = word.trim();
        Keyword::EVERY
            .into_iter()
            .find(|k| word.eq_ignore_ascii_case(k.as_str()))
    }

    /// The keyword as written in lowercase.
    ///
    /// ```
    /// assert_eq!(agent_tree_protocol::Keyword::Star.as_str(), "*");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Keyword::All => "all",
            Keyword::Star => "*",
            Keyword::None => "none",
            Keyword::True => "true",
            Keyword::False => "false",
        }
    }
}

impl fmt::Display for Keyword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pi extension selector in a tool list: `ext:<extension>` (every tool of an extension) or
/// `ext:<extension>/<tool>` (one of its tools).
///
/// The prefix `ext:` ignores ASCII case; the extension and the tool must not be blank. In
/// `tools`, `*` followed by selectors only is every tool ([`ToolSet::All`]: agent-tree has no
/// extension layer, every tool is one the application registered, so the selectors cannot
/// narrow anything); a selector among names is kept as a name, and the runtime matches
/// `ext:<extension>/<tool>` as the tool `<tool>`.
///
/// ```
/// use agent_tree_protocol::runtime::ListValue;
/// use agent_tree_protocol::{ExtensionSelector, ToolSet};
/// let search = ExtensionSelector::parse("ext:mcp/search").unwrap();
/// assert_eq!((search.extension, search.tool), ("mcp", Some("search")));
/// assert_eq!(ExtensionSelector::parse("EXT:web").unwrap().tool, None);
/// assert!(ExtensionSelector::parse("read").is_none());
/// assert!(ExtensionSelector::parse("ext:").is_none());
/// assert_eq!(ListValue::Text("*, ext:mcp/search".into()).tool_set()?, ToolSet::All);
/// # Ok::<(), agent_tree_protocol::WordsError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExtensionSelector<'a> {
    /// The extension's name.
    pub extension: &'a str,
    /// The tool, if the selector names one.
    pub tool: Option<&'a str>,
}

impl<'a> ExtensionSelector<'a> {
    /// The selector `name` is (after trimming), if it is one.
    ///
    /// ```
    /// use agent_tree_protocol::ExtensionSelector;
    /// assert_eq!(ExtensionSelector::parse(" ext:mcp ").unwrap().extension, "mcp");
    /// assert!(ExtensionSelector::parse("ext:mcp/").is_none());
    /// ```
    pub fn parse(name: &'a str) -> Option<Self> {
        let name = name.trim();
        let prefix = name.get(..4)?;
        if !prefix.eq_ignore_ascii_case("ext:") {
            return None;
        }
        let rest = &name[4..];
        let (extension, tool) = match rest.split_once('/') {
            Some((extension, tool)) => (extension.trim(), Some(tool.trim())),
            None => (rest.trim(), None),
        };
        if extension.is_empty() || tool.is_some_and(str::is_empty) {
            return None;
        }
        Some(ExtensionSelector { extension, tool })
    }
}

/// A list field's value as a format read it, before the words rule gives it a meaning.
///
/// Every format reduces what it read to one of these shapes (or refuses it, naming what it
/// found: [`WordsError::Shape`], [`WordsError::Item`]), then asks for the field's meaning.
///
/// ```
/// use agent_tree_protocol::runtime::ListValue;
/// use agent_tree_protocol::{SubagentAllowance, ToolSet};
/// assert_eq!(ListValue::Text("read, grep".into()).tool_set()?, ToolSet::only(["read", "grep"]));
/// assert_eq!(ListValue::Text("All".into()).tool_set()?, ToolSet::All);
/// assert_eq!(ListValue::List(vec!["none".into()]).tool_set()?, ToolSet::None);
/// assert_eq!(ListValue::Bool(true).subagent_allowance()?, SubagentAllowance::All);
/// assert!(ListValue::Text("read, all".into()).tool_set().is_err());
/// # Ok::<(), agent_tree_protocol::WordsError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListValue {
    /// A boolean.
    Bool(bool),
    /// A string: a comma-separated list or a keyword.
    Text(String),
    /// A list of strings.
    List(Vec<String>),
}

/// What a value reads as before the field gives it a meaning.
enum Reading {
    Bool(bool),
    Word(Keyword),
    Names(Vec<String>),
}

impl ListValue {
    /// Reads the value as `tools`.
    ///
    /// `*` or `all` followed only by pi's extension selectors ([`ExtensionSelector`]) is
    /// every tool, as `*` alone.
    ///
    /// ```
    /// use agent_tree_protocol::runtime::ListValue;
    /// use agent_tree_protocol::ToolSet;
    /// assert_eq!(ListValue::Text("*".into()).tool_set()?, ToolSet::All);
    /// assert_eq!(ListValue::Text("*, ext:mcp/search, ext:web".into()).tool_set()?, ToolSet::All);
    /// assert_eq!(ListValue::Text(String::new()).tool_set()?, ToolSet::None);
    /// assert!(ListValue::Text("true".into()).tool_set().is_err());
    /// assert!(ListValue::Text("*, read".into()).tool_set().is_err());
    /// # Ok::<(), agent_tree_protocol::WordsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`WordsError::Shape`] for a boolean, [`WordsError::Refused`] for `true` or `false`,
    /// [`WordsError::NotAlone`] for a keyword among names (extension selectors after `*` or
    /// `all` excepted).
    pub fn tool_set(self) -> Result<ToolSet, WordsError> {
        const FIELD: ListField = ListField::Tools;
        if self.is_all_with_selectors() {
            return Ok(ToolSet::All);
        }
        Ok(match self.read()? {
            Reading::Bool(b) => return Err(shape(FIELD, b)),
            Reading::Word(Keyword::All | Keyword::Star) => ToolSet::All,
            Reading::Word(Keyword::None) => ToolSet::None,
            Reading::Word(word @ (Keyword::True | Keyword::False)) => {
                return Err(WordsError::Refused { field: FIELD, word });
            }
            Reading::Names(names) => ToolSet::only(names),
        })
    }

    /// Reads the value as `disallowed_tools`: tool names only.
    ///
    /// ```
    /// use agent_tree_protocol::runtime::ListValue;
    /// assert_eq!(ListValue::Text("bash, write".into()).tool_names()?, ["bash", "write"]);
    /// assert!(ListValue::Text("all".into()).tool_names().is_err());
    /// # Ok::<(), agent_tree_protocol::WordsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`WordsError::Shape`] for a boolean, [`WordsError::Refused`] for any keyword, alone or
    /// among names.
    pub fn tool_names(self) -> Result<Vec<String>, WordsError> {
        const FIELD: ListField = ListField::DisallowedTools;
        let names = match self {
            ListValue::Bool(b) => return Err(shape(FIELD, b)),
            ListValue::Text(text) => items(split_list(&text)),
            ListValue::List(list) => items(list.iter().map(String::as_str)),
        };
        match names.iter().find_map(|n| Keyword::parse(n)) {
            Some(word) => Err(WordsError::Refused { field: FIELD, word }),
            None => Ok(names),
        }
    }

    /// Reads the value as `allowed_subagents`.
    ///
    /// ```
    /// use agent_tree_protocol::runtime::ListValue;
    /// use agent_tree_protocol::SubagentAllowance;
    /// assert_eq!(ListValue::Text("TRUE".into()).subagent_allowance()?, SubagentAllowance::All);
    /// assert_eq!(ListValue::Bool(false).subagent_allowance()?, SubagentAllowance::None);
    /// assert_eq!(
    ///     ListValue::List(vec!["Reviewer".into()]).subagent_allowance()?,
    ///     SubagentAllowance::only(["Reviewer"])
    /// );
    /// # Ok::<(), agent_tree_protocol::WordsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`WordsError::NotAlone`] for a keyword among names.
    pub fn subagent_allowance(self) -> Result<SubagentAllowance, WordsError> {
        Ok(match self.read()? {
            Reading::Bool(true) | Reading::Word(Keyword::All | Keyword::Star | Keyword::True) => {
                SubagentAllowance::All
            }
            Reading::Bool(false) | Reading::Word(Keyword::None | Keyword::False) => {
                SubagentAllowance::None
            }
            Reading::Names(names) => SubagentAllowance::only(names),
        })
    }

    /// Whether the value is pi's `*, ext:...`: one `*` or `all` first, then at least one
    /// extension selector and nothing else.
    fn is_all_with_selectors(&self) -> bool {
        let names = match self {
            ListValue::Bool(_) => return false,
            ListValue::Text(text) => items(split_list(text)),
            ListValue::List(list) => items(list.iter().map(String::as_str)),
        };
        match names.split_first() {
            Some((first, rest)) => {
                matches!(Keyword::parse(first), Some(Keyword::All | Keyword::Star))
                    && !rest.is_empty()
                    && rest.iter().all(|n| ExtensionSelector::parse(n).is_some())
            }
            None => false,
        }
    }

    /// Splits, trims and drops blanks, and finds a lone keyword.
    fn read(self) -> Result<Reading, WordsError> {
        let names = match self {
            ListValue::Bool(b) => return Ok(Reading::Bool(b)),
            ListValue::Text(text) => items(split_list(&text)),
            ListValue::List(list) => items(list.iter().map(String::as_str)),
        };
        match names.iter().find_map(|n| Keyword::parse(n)) {
            None => Ok(Reading::Names(names)),
            Some(word) if names.len() == 1 => Ok(Reading::Word(word)),
            Some(word) => Err(WordsError::NotAlone { word, names }),
        }
    }
}

/// The items of a comma-separated list, a comma inside parentheses not splitting one:
/// Claude Code's `Agent(writer, reviewer), Read` is two items.
///
/// ```
/// use agent_tree_protocol::runtime::split_list;
/// let items: Vec<&str> = split_list("Agent(writer, reviewer), Read").collect();
/// assert_eq!(items, ["Agent(writer, reviewer)", " Read"]);
/// assert_eq!(split_list("a,,b").count(), 3);
/// // An unclosed parenthesis keeps the rest as one item.
/// assert_eq!(split_list("Task(a, b").count(), 1);
/// ```
pub fn split_list(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut depth = 0usize;
        for (i, c) in text.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    rest = Some(&text[i + 1..]);
                    return Some(&text[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

/// Claude Code's delegation entries among `tools` names: `Agent` (or its older name `Task`)
/// alone, or with subagent types in parentheses (`Agent(writer, reviewer)`, read by the words
/// rule of `allowed_subagents`, so `Agent(*)` is every type; empty parentheses are the bare
/// entry). The head is matched exactly: `task` or `Agents` is a tool's name. `None` when
/// there is no entry.
///
/// # Errors
///
/// The words rule's refusal of an entry's types (`Agent(all, writer)`).
pub(crate) fn delegation_entries(
    names: &[String],
) -> Result<Option<DelegationEntries>, WordsError> {
    let mut entries: Option<DelegationEntries> = None;
    for name in names {
        let Some(types) = delegation_entry(name) else {
            continue;
        };
        let found = entries.get_or_insert(DelegationEntries {
            bare: false,
            named: None,
        });
        let Some(types) = types else {
            found.bare = true;
            continue;
        };
        let entry = ListValue::Text(types.to_owned()).subagent_allowance()?;
        found.named = Some(match (found.named.take(), entry) {
            (None, entry) => entry,
            (Some(SubagentAllowance::All), _) | (_, SubagentAllowance::All) => {
                SubagentAllowance::All
            }
            (Some(SubagentAllowance::None), entry) => entry,
            (Some(before), SubagentAllowance::None) => before,
            (Some(SubagentAllowance::Only(mut types)), SubagentAllowance::Only(more)) => {
                for t in more {
                    if !types.contains(&t) {
                        types.push(t);
                    }
                }
                SubagentAllowance::Only(types)
            }
        });
    }
    Ok(entries)
}

/// What a definition's delegation entries say ([`delegation_entries`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DelegationEntries {
    /// A bare `Agent` or `Task` is among them: the agent may delegate.
    pub(crate) bare: bool,
    /// What the entries naming types grant together, if any names types.
    pub(crate) named: Option<SubagentAllowance>,
}

impl DelegationEntries {
    /// What they grant alone (no `allowed_subagents` beside them): every type for a bare
    /// entry, else the named types.
    pub(crate) fn grants(&self) -> SubagentAllowance {
        match (&self.named, self.bare) {
            (_, true) | (None, false) => SubagentAllowance::All,
            (Some(named), false) => named.clone(),
        }
    }
}

/// Whether the tool name `name` is a Claude Code delegation entry (`Agent`, `Task`,
/// `Agent(writer, reviewer)`): it names no tool.
///
/// ```
/// use agent_tree_protocol::runtime::is_delegation_entry;
/// assert!(is_delegation_entry("Agent(writer, reviewer)") && is_delegation_entry(" Task "));
/// assert!(!is_delegation_entry("task") && !is_delegation_entry("Agent(writer"));
/// ```
pub fn is_delegation_entry(name: &str) -> bool {
    delegation_entry(name).is_some()
}

/// `name` as a delegation entry: `None` if it is none, `Some(None)` for a bare one (or empty
/// parentheses), `Some(Some(types))` for one naming types.
fn delegation_entry(name: &str) -> Option<Option<&str>> {
    let name = name.trim();
    let (head, types) = match name.split_once('(') {
        Some((head, tail)) => (head.trim_end(), Some(tail.strip_suffix(')')?)),
        None => (name, None),
    };
    if !matches!(head, "Agent" | "Task") {
        return None;
    }
    Some(types.filter(|t| !t.trim().is_empty()))
}

/// Trimmed, non-blank items.
fn items<'a>(raw: impl Iterator<Item = &'a str>) -> Vec<String> {
    raw.map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// An allowance in words: `every type`, `no type`, or the types.
fn allowance_words(allowance: &SubagentAllowance) -> String {
    match allowance {
        SubagentAllowance::All => "every type".into(),
        SubagentAllowance::None => "no type".into(),
        SubagentAllowance::Only(types) => types.join(", "),
    }
}

fn shape(field: ListField, found: impl fmt::Display) -> WordsError {
    WordsError::Shape {
        field,
        found: found.to_string(),
    }
}

/// A list field's value the words rule refuses.
///
/// The message says what was expected and what was found; it does not name the field, which
/// the caller knows (and may spell differently: `allowedSubagents`).
///
/// ```
/// use agent_tree_protocol::runtime::ListValue;
/// let err = ListValue::Text("read, all".into()).tool_set().unwrap_err();
/// assert_eq!(err.to_string(), "`all` must stand alone, found it among names: read, all");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WordsError {
    /// The value is not of a shape the field takes (a number, a mapping, or a boolean where
    /// only `allowed_subagents` takes one).
    #[error("expected {}, found {found}", .field.expected())]
    Shape {
        /// The field.
        field: ListField,
        /// What was found, as the format describes it.
        found: String,
    },
    /// A list item is not a string.
    #[error("expected {} in list item {index}, found {found}", .field.item())]
    Item {
        /// The field.
        field: ListField,
        /// The item's position, from 1.
        index: usize,
        /// What was found, as the format describes it.
        found: String,
    },
    /// A keyword among names: `read, all`.
    #[error("`{word}` must stand alone, found it among names: {}", .names.join(", "))]
    NotAlone {
        /// The keyword.
        word: Keyword,
        /// Every item, the keyword included.
        names: Vec<String>,
    },
    /// A keyword the field does not take: `true` or `false` as `tools`, any keyword in
    /// `disallowed_tools`.
    #[error("{}", refused_message(*.field, *.word))]
    Refused {
        /// The field.
        field: ListField,
        /// The keyword.
        word: Keyword,
    },
    /// A definition's delegation is written twice, and the two disagree: Claude Code's
    /// `Agent(...)` entries in `tools` name a type
    /// `allowed_subagents` does not allow.
    #[error(
        "its `Agent(...)` entries grant {} but `allowed_subagents` allows {}: write the subagent types in one of them",
        allowance_words(.entries),
        allowance_words(.allowed)
    )]
    Disagrees {
        /// What the entries grant.
        entries: SubagentAllowance,
        /// What `allowed_subagents` grants.
        allowed: SubagentAllowance,
    },
    /// A name in a list built in code is a keyword ([`ListField::check_names`]).
    #[error("list item {index} is the keyword `{word}`, which is never {}", .field.item())]
    KeywordName {
        /// The field.
        field: ListField,
        /// The item's position, from 1.
        index: usize,
        /// The keyword.
        word: Keyword,
    },
    /// A name in a list built in code is blank or has white space around it
    /// ([`ListField::check_names`]).
    #[error(
        "expected {} in list item {index}, found {name:?}: names are trimmed and never blank",
        .field.item()
    )]
    Untrimmed {
        /// The field.
        field: ListField,
        /// The item's position, from 1.
        index: usize,
        /// The name as given.
        name: String,
    },
}

fn refused_message(field: ListField, word: Keyword) -> String {
    match field {
        ListField::DisallowedTools => format!(
            "expected tool names, found `{word}`: a deny list names every tool it denies \
             (leave the field out to deny none)"
        ),
        ListField::Tools => format!("expected `all`, `none` or tool names, found `{word}`"),
        ListField::AllowedSubagents => {
            format!("expected `all`, `none` or agent type names, found `{word}`")
        }
    }
}

// ---- serde ----------------------------------------------------------------------------------

/// Deserializes a list field by the words rule; null is the field's default.
///
/// With `named`, messages start with ``field `tools`: `` (as inside an [`AgentDefinition`]).
/// The message is built once, where the value is read, so a format's position (line and
/// column) is added once.
///
/// [`AgentDefinition`]: crate::AgentDefinition
pub(crate) fn deserialize<'de, D, T>(
    deserializer: D,
    field: ListField,
    named: bool,
    read: fn(ListValue) -> Result<T, WordsError>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default,
{
    deserializer.deserialize_any(WordsVisitor {
        field,
        named,
        read,
        null: T::default,
    })
}

/// `tools` of an [`AgentDefinition`](crate::AgentDefinition).
pub(crate) fn tools_field<'de, D: Deserializer<'de>>(d: D) -> Result<ToolSet, D::Error> {
    deserialize(d, ListField::Tools, true, ListValue::tool_set)
}

/// `disallowed_tools` of an [`AgentDefinition`](crate::AgentDefinition).
pub(crate) fn disallowed_tools_field<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<String>, D::Error> {
    deserialize(d, ListField::DisallowedTools, true, ListValue::tool_names)
}

/// `allowed_subagents` of an [`AgentDefinition`](crate::AgentDefinition).
/// Deserializes `allowed_subagents` inside an [`AgentDefinition`] by the words rule, a null
/// read as left out: its delegation entries tell a written allowance from one left out.
///
/// [`AgentDefinition`]: crate::AgentDefinition
pub(crate) fn allowed_subagents_field_or_unwritten<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<SubagentAllowance, D::Error> {
    d.deserialize_any(WordsVisitor {
        field: ListField::AllowedSubagents,
        named: true,
        read: ListValue::subagent_allowance,
        null: crate::definition::unwritten_allowance,
    })
}

struct WordsVisitor<T> {
    field: ListField,
    named: bool,
    read: fn(ListValue) -> Result<T, WordsError>,
    /// What null reads as (the field's default).
    null: fn() -> T,
}

impl<T> WordsVisitor<T> {
    fn error<E: de::Error>(&self, error: WordsError) -> E {
        if self.named {
            E::custom(format_args!("field `{}`: {error}", self.field))
        } else {
            E::custom(error)
        }
    }

    fn apply<E: de::Error>(&self, written: ListValue) -> Result<T, E> {
        (self.read)(written).map_err(|e| self.error(e))
    }

    fn shape<E: de::Error>(&self, found: impl fmt::Display) -> Result<T, E> {
        Err(self.error(shape(self.field, found)))
    }
}

impl<'de, T: Default> Visitor<'de> for WordsVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field.expected())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        self.apply(ListValue::Bool(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        self.apply(ListValue::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<T, E> {
        self.apply(ListValue::Text(v))
    }

    fn visit_char<E: de::Error>(self, v: char) -> Result<T, E> {
        self.apply(ListValue::Text(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.shape(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.shape(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.shape(v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok((self.null)())
    }

    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Ok((self.null)())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element_seed(ItemSeed {
            words: &self,
            index: names.len() + 1,
        })? {
            names.push(name);
        }
        self.apply(ListValue::List(names))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _map: A) -> Result<T, A::Error> {
        self.shape("a mapping")
    }
}

/// One list item: a string, or an error naming its position.
struct ItemSeed<'a, T> {
    words: &'a WordsVisitor<T>,
    index: usize,
}

impl<'de, T> DeserializeSeed<'de> for ItemSeed<'_, T> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<T> ItemSeed<'_, T> {
    fn not_a_name<E: de::Error>(&self, found: impl fmt::Display) -> E {
        self.words.error(WordsError::Item {
            field: self.words.field,
            index: self.index,
            found: found.to_string(),
        })
    }
}

impl<'de, T> Visitor<'de> for ItemSeed<'_, T> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.words.field.item())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_char<E: de::Error>(self, v: char) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Err(self.not_a_name(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Err(self.not_a_name(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Err(self.not_a_name(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Err(self.not_a_name(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Err(self.not_a_name("null"))
    }

    fn visit_none<E: de::Error>(self) -> Result<String, E> {
        Err(self.not_a_name("null"))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<String, A::Error> {
        Err(self.not_a_name("a list"))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _map: A) -> Result<String, A::Error> {
        Err(self.not_a_name("a mapping"))
    }
}

#[cfg(test)]
mod tests;
