//! The field table: the fields of an agent file's frontmatter, their spellings, and how each
//! one's YAML value is read into an [`AgentDefinition`].
//!
//! Every field has its snake_case name; the multi-word fields also accept the kebab-case and
//! camelCase spellings Claude Code and Pi write: `disallowedTools`/`disallowed-tools`,
//! `allowedSubagents`/`allowed-subagents`, `maxTurns`/`max-turns`,
//! `inheritContext`/`inherit-context`, `runInBackground`/`run-in-background`,
//! `maxRestarts`/`max-restarts` and `restartPeriodMs`/`restart-period-ms`; Claude Code's
//! `background` is `run_in_background`. Sampling has keys of its own, since neither Claude Code
//! nor pi has any: `temperature`, `top_p`, `seed`, `stop` (also `stop_sequences`; one text or
//! a list), `max_output_tokens` (also `max_tokens`), `tool_choice` (`auto`, `required` or
//! `any`, `none`, or a tool's name) and `parallel_tool_calls`, each with its camelCase and
//! kebab-case spellings. Keys are
//! case-sensitive; a key naming no field is no field (the `frontmatter` module ignores it with
//! a warning).
//!
//! Reading a value is its type (never coerced), trimming, and for the list fields the words
//! rule of [`ListValue`], which JSON definitions follow too. A value that cannot be read is
//! refused with a message saying what was expected and what was found, a long string cut. pi's
//! words that agent-tree cannot hold to the letter are read as documented in
//! `docs/semantics.md` and come with a note ([`NoteKind`]): `max_turns: 0` (no turn limit in
//! pi) is no limit of the file's own, `tools: *, ext:...` is every tool, and beside
//! `isolated: true` extension selectors among tool names are dropped, as pi drops them.
//!
//! It never judges whether a value is in range (`restart_period_ms: 0`, a blank name): the catalog's
//! one definition check does, after every field is read. It never sees a file, its text or its
//! frontmatter as a whole, only one key or one value at a time, so it never names a file, never
//! finds a field given twice and never touches the file system.

use agent_tree_protocol::runtime::{ListValue, split_list};
use agent_tree_protocol::{
    AgentDefinition, ExtensionSelector, Keyword, ListField, RestartPolicy, SettlePolicy, Strategy,
    ToolChoice, ToolSet, WordsError,
};
use serde_yaml_ng::Value;

use super::frontmatter::untag;
use super::notes::NoteKind;

/// The fields of the format; see the module documentation for their spellings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Field {
    Name,
    Description,
    Tools,
    DisallowedTools,
    AllowedSubagents,
    Isolated,
    Detached,
    Node,
    Model,
    MaxTurns,
    InheritContext,
    RunInBackground,
    Enabled,
    Restart,
    Strategy,
    MaxRestarts,
    RestartPeriodMs,
    Settle,
    Temperature,
    TopP,
    Seed,
    Stop,
    MaxOutputTokens,
    ToolChoice,
    ParallelToolCalls,
}

impl Field {
    /// The field a key names: its snake_case name, or the kebab-case or camelCase spelling of
    /// a multi-word field. Keys are case-sensitive.
    pub(super) fn from_key(key: &str) -> Option<Field> {
        Some(match key {
            "name" => Field::Name,
            "description" => Field::Description,
            "tools" => Field::Tools,
            "disallowed_tools" | "disallowedTools" | "disallowed-tools" => Field::DisallowedTools,
            // pi's subagent files call it `spawns` (`*`, a list, or omitted: none), with the
            // same words.
            "allowed_subagents" | "allowedSubagents" | "allowed-subagents" | "spawns" => {
                Field::AllowedSubagents
            }
            "isolated" => Field::Isolated,
            "detached" => Field::Detached,
            "node" => Field::Node,
            "model" => Field::Model,
            "max_turns" | "maxTurns" | "max-turns" => Field::MaxTurns,
            "inherit_context" | "inheritContext" | "inherit-context" => Field::InheritContext,
            // Claude Code's subagent files call it `background`.
            "run_in_background" | "runInBackground" | "run-in-background" | "background" => {
                Field::RunInBackground
            }
            "enabled" => Field::Enabled,
            "restart" => Field::Restart,
            "strategy" => Field::Strategy,
            "max_restarts" | "maxRestarts" | "max-restarts" => Field::MaxRestarts,
            "restart_period_ms" | "restartPeriodMs" | "restart-period-ms" => Field::RestartPeriodMs,
            "settle" => Field::Settle,
            // Sampling: neither Claude Code nor pi has keys for it; these are the APIs' own
            // names (`max_tokens` is OpenAI's and Anthropic's word for the output limit).
            "temperature" => Field::Temperature,
            "top_p" | "topP" | "top-p" => Field::TopP,
            "seed" => Field::Seed,
            "stop" | "stop_sequences" | "stopSequences" | "stop-sequences" => Field::Stop,
            "max_output_tokens" | "maxOutputTokens" | "max-output-tokens" | "max_tokens"
            | "maxTokens" | "max-tokens" => Field::MaxOutputTokens,
            "tool_choice" | "toolChoice" | "tool-choice" => Field::ToolChoice,
            "parallel_tool_calls" | "parallelToolCalls" | "parallel-tool-calls" => {
                Field::ParallelToolCalls
            }
            _ => return None,
        })
    }
}

/// Sets `field` of `definition` from a non-null `value`, or says why it cannot be read; the
/// note, when the value was read differently from its letter (pi's `max_turns: 0` and
/// `tools: *, ext:...`).
///
/// Only reading happens here: types, trimming and the words rule. Whether a value is in range
/// (`restart_period_ms: 0`, a blank name) is for the definition check, which runs afterwards.
pub(super) fn apply(
    definition: &mut AgentDefinition,
    field: Field,
    value: &Value,
) -> Result<Option<NoteKind>, String> {
    match field {
        Field::Name => {
            let name = string(value)?;
            // A blank name is kept as written, so the check's refusal shows it.
            let trimmed = name.trim();
            definition.name = if trimmed.is_empty() { name } else { trimmed }.to_owned();
        }
        Field::Description => definition.description = string(value)?.trim().to_owned(),
        Field::Tools => {
            definition.tools = words(value, ListField::Tools, ListValue::tool_set)?;
            let selectors = selectors_after_star(value);
            if definition.tools == ToolSet::All && !selectors.is_empty() {
                return Ok(Some(NoteKind::SelectorsWidened { selectors }));
            }
        }
        Field::DisallowedTools => {
            definition.disallowed_tools =
                words(value, ListField::DisallowedTools, ListValue::tool_names)?;
        }
        Field::AllowedSubagents => {
            definition.allowed_subagents = words(
                value,
                ListField::AllowedSubagents,
                ListValue::subagent_allowance,
            )?;
        }
        Field::Isolated => definition.isolated = boolean(value)?,
        Field::Detached => definition.detached = boolean(value)?,
        Field::Node => {
            let node = string(value)?.trim();
            definition.node = (!node.is_empty()).then(|| node.to_owned());
        }
        Field::Model => {
            // pi writes a model with its fallbacks (`claude-haiku-4-5, haiku, flash`): the
            // first is the model (no provider takes the list as a name; the rest are for a
            // `model_alias` to map, or lost).
            let model = string(value)?.split(',').next().unwrap_or_default().trim();
            // Claude Code's `inherit` means "the main conversation's model": the default.
            let default = model.is_empty() || model.eq_ignore_ascii_case("inherit");
            definition.model = (!default).then(|| model.to_owned());
        }
        Field::MaxTurns => {
            // pi's `0` is "no turn limit": no limit of the file's own, as the field left out
            // (the definition check still refuses `Some(0)` from code or JSON).
            let turns: u32 = integer(value, "a positive integer")?;
            if turns == 0 {
                definition.max_turns = None;
                return Ok(Some(NoteKind::UnlimitedTurns));
            }
            definition.max_turns = Some(turns);
        }
        Field::InheritContext => definition.inherit_context = boolean(value)?,
        Field::RunInBackground => definition.run_in_background = boolean(value)?,
        Field::Enabled => definition.enabled = boolean(value)?,
        Field::Restart => {
            definition.restart = word(
                value,
                &[
                    ("permanent", RestartPolicy::Permanent),
                    ("transient", RestartPolicy::Transient),
                    ("temporary", RestartPolicy::Temporary),
                ],
            )?;
        }
        Field::Strategy => {
            definition.strategy = word(
                value,
                &[
                    ("one_for_one", Strategy::OneForOne),
                    ("one_for_all", Strategy::OneForAll),
                    ("rest_for_one", Strategy::RestForOne),
                ],
            )?;
        }
        Field::MaxRestarts => {
            definition.max_restarts = integer(value, "a non-negative integer")?;
        }
        Field::RestartPeriodMs => {
            definition.restart_period_ms = integer(value, "a positive integer")?;
        }
        Field::Settle => {
            definition.settle = word(
                value,
                &[
                    ("abort_children", SettlePolicy::AbortChildren),
                    ("drain", SettlePolicy::Drain),
                ],
            )?;
        }
        Field::Temperature => definition.sampling.temperature = Some(number(value)?),
        Field::TopP => definition.sampling.top_p = Some(number(value)?),
        Field::Seed => definition.sampling.seed = Some(integer(value, "a non-negative integer")?),
        Field::Stop => {
            // One text or a list of texts, kept as written (a stop sequence's spaces count).
            definition.sampling.stop = match untag(value) {
                Value::Sequence(items) => items
                    .iter()
                    .map(|item| string(item).map(str::to_owned))
                    .collect::<Result<_, _>>()?,
                other => vec![string(other)?.to_owned()],
            };
        }
        Field::MaxOutputTokens => {
            definition.sampling.max_output_tokens = Some(integer(value, "a positive integer")?);
        }
        Field::ToolChoice => {
            let text = string(value)?;
            definition.sampling.tool_choice = Some(
                ToolChoice::parse(text)
                    .ok_or_else(|| expected("auto, required, none or a tool's name", value))?,
            );
        }
        Field::ParallelToolCalls => {
            definition.sampling.parallel_tool_calls = Some(boolean(value)?);
        }
    }
    Ok(None)
}

/// pi's extension selectors after a leading `*` or `all` (`*, ext:mcp/search`), as written, if
/// the `tools` value is that; else none.
fn selectors_after_star(value: &Value) -> Vec<String> {
    let items: Vec<&str> = match untag(value) {
        Value::String(text) => split_list(text).map(str::trim).collect(),
        Value::Sequence(items) => items.iter().filter_map(|i| untag(i).as_str()).collect(),
        _ => return Vec::new(),
    };
    let mut items = items.into_iter().filter(|i| !i.is_empty());
    match items.next().and_then(Keyword::parse) {
        Some(Keyword::All | Keyword::Star) => {}
        _ => return Vec::new(),
    }
    items
        .filter(|i| ExtensionSelector::parse(i).is_some())
        .map(str::to_owned)
        .collect()
}

/// pi gives an isolated agent no extension tool: an isolated definition's extension selectors
/// among its tool names ([`ExtensionSelector`]) are dropped, and the note says which. (`*`
/// followed by selectors is already every tool, and has its own note.)
pub(super) fn drop_selectors_if_isolated(definition: &mut AgentDefinition) -> Option<NoteKind> {
    if !definition.isolated {
        return None;
    }
    let ToolSet::Only(names) = &definition.tools else {
        return None;
    };
    let (selectors, kept): (Vec<String>, Vec<String>) = names
        .iter()
        .cloned()
        .partition(|n| ExtensionSelector::parse(n).is_some());
    if selectors.is_empty() {
        return None;
    }
    definition.tools = ToolSet::only(kept);
    Some(NoteKind::SelectorsDropped { selectors })
}

/// `expected {what}, found {value}`.
fn expected(what: &str, found: &Value) -> String {
    format!("expected {what}, found {}", describe(found))
}

/// A value as an error message shows it: scalars as written (strings quoted, long ones cut),
/// collections by kind.
pub(super) fn describe(value: &Value) -> String {
    /// Longest string shown whole, in characters.
    const SHOWN: usize = 60;
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => match s.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{:?}...", &s[..cut]),
            None => format!("{s:?}"),
        },
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(tagged) => describe(&tagged.value),
    }
}

fn string(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| expected("a string", value))
}

/// A number, integer or not (the definition check judges its range).
fn number(value: &Value) -> Result<f64, String> {
    value.as_f64().ok_or_else(|| expected("a number", value))
}

fn boolean(value: &Value) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| expected("true or false", value))
}

/// A non-negative integer that fits `T`; `what` is what the field takes (the definition
/// check judges its range).
fn integer<T: TryFrom<u64>>(value: &Value, what: &str) -> Result<T, String> {
    match value.as_u64() {
        Some(n) => {
            T::try_from(n).map_err(|_| format!("expected {what}, found {n}, which is too large"))
        }
        None => Err(expected(what, value)),
    }
}

/// One of `choices`, ignoring case and taking `-` for `_`.
fn word<T: Copy>(value: &Value, choices: &[(&str, T)]) -> Result<T, String> {
    let normalized = value
        .as_str()
        .map(|s| s.trim().to_lowercase().replace('-', "_"));
    normalized
        .and_then(|w| choices.iter().find(|(name, _)| *name == w))
        .map(|&(_, choice)| choice)
        .ok_or_else(|| {
            let names: Vec<String> = choices
                .iter()
                .map(|(name, _)| format!("`{name}`"))
                .collect();
            expected(&format!("one of {}", names.join(", ")), value)
        })
}

/// A list field read by the words rule: the YAML value as [`ListValue`], then `read`.
fn words<T>(
    value: &Value,
    field: ListField,
    read: fn(ListValue) -> Result<T, WordsError>,
) -> Result<T, String> {
    written(value, field)
        .and_then(read)
        .map_err(|e| e.to_string())
}

/// A YAML value in the shapes the words rule reads, or the rule's refusal of its shape.
fn written(value: &Value, field: ListField) -> Result<ListValue, WordsError> {
    match value {
        Value::Bool(b) => Ok(ListValue::Bool(*b)),
        Value::String(s) => Ok(ListValue::Text(s.clone())),
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match untag(item) {
                Value::String(s) => Ok(s.clone()),
                other => Err(WordsError::Item {
                    field,
                    index: i + 1,
                    found: describe(other),
                }),
            })
            .collect::<Result<_, _>>()
            .map(ListValue::List),
        other => Err(WordsError::Shape {
            field,
            found: describe(other),
        }),
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::SubagentAllowance;

    use super::*;
    use crate::catalog::frontmatter::tests::{
        field_err, field_ok, notes_of, parse_ok, with_fields,
    };

    #[test]
    fn model_inherit_means_the_default() {
        for text in [
            "---\nmodel: inherit\n---\n",
            "---\nmodel: Inherit\n---\n",
            "---\nmodel: ''\n---\n",
        ] {
            assert_eq!(parse_ok(text).model, None, "{text:?}");
        }
        assert_eq!(
            parse_ok("---\nmodel: opus\n---\n").model.as_deref(),
            Some("opus")
        );
    }

    #[test]
    fn a_model_with_fallbacks_is_its_first() {
        // pi's `model: <preferred>, <fallback>, …`.
        assert_eq!(
            field_ok("model: claude-haiku-4-5, haiku, flash")
                .model
                .as_deref(),
            Some("claude-haiku-4-5")
        );
        assert_eq!(
            field_ok("model: ' , haiku'").model,
            None,
            "a blank first is the default"
        );
        assert_eq!(field_ok("model: inherit, opus").model, None);
    }

    #[test]
    fn node_places_the_type_and_blank_means_here() {
        assert_eq!(
            field_ok("node: ' builder-1 '").node.as_deref(),
            Some("builder-1")
        );
        assert_eq!(field_ok("node: ''").node, None);
        assert_eq!(field_ok("name: x").node, None);
        assert_eq!(field_err("node: 3").0, "node");
        // A code-built definition is checked the same way.
        for bad in ["a@b", " w", ""] {
            let definition = AgentDefinition::new("x", "").on_node(bad);
            assert!(
                crate::Catalog::new([definition]).is_err(),
                "node {bad:?} should be refused"
            );
        }
    }

    #[test]
    fn every_field_in_snake_case() {
        let text = "---
name: reviewer
description: Reviews changes.
tools: read, grep
disallowed_tools: [bash]
allowed_subagents: analyst, writer
isolated: true
model: large
max_turns: 12
inherit_context: true
run_in_background: true
enabled: false
restart: permanent
strategy: rest_for_one
max_restarts: 0
restart_period_ms: 250
settle: drain
---

You review.

Twice.
";
        let expected = AgentDefinition::new("reviewer", "You review.\n\nTwice.")
            .with_description("Reviews changes.")
            .with_tools(ToolSet::only(["read", "grep"]))
            .with_disallowed_tools(["bash"])
            .with_allowed_subagents(SubagentAllowance::only(["analyst", "writer"]))
            .isolated()
            .with_model(Some("large".into()))
            .with_max_turns(12)
            .with_inherit_context(true)
            .in_background()
            .with_enabled(false)
            .with_restart(RestartPolicy::Permanent)
            .with_supervision(Strategy::RestForOne, 0, 250)
            .with_settle(SettlePolicy::Drain);
        assert_eq!(parse_ok(text), expected);
    }

    #[test]
    fn aliases_of_claude_code_and_pi() {
        for (spelling, check) in [
            ("disallowedTools: bash", "disallowed"),
            ("disallowed-tools: bash", "disallowed"),
            ("allowedSubagents: all", "allowed"),
            ("allowed-subagents: all", "allowed"),
            ("maxTurns: 3", "turns"),
            ("max-turns: 3", "turns"),
            ("inheritContext: true", "context"),
            ("inherit-context: true", "context"),
            ("runInBackground: true", "background"),
            ("run-in-background: true", "background"),
            ("maxRestarts: 7", "restarts"),
            ("max-restarts: 7", "restarts"),
            ("restartPeriodMs: 9", "period"),
            ("restart-period-ms: 9", "period"),
        ] {
            let d = field_ok(spelling);
            let applied = match check {
                "disallowed" => d.disallowed_tools == ["bash"],
                "allowed" => d.allowed_subagents == SubagentAllowance::All,
                "turns" => d.max_turns == Some(3),
                "context" => d.inherit_context,
                "background" => d.run_in_background,
                "restarts" => d.max_restarts == 7,
                "period" => d.restart_period_ms == 9,
                _ => unreachable!(),
            };
            assert!(applied, "{spelling} was not applied: {d:?}");
        }
    }

    #[test]
    fn tool_sets() {
        for (value, tools) in [
            ("read, write", ToolSet::only(["read", "write"])),
            ("' read ,, write '", ToolSet::only(["read", "write"])),
            (
                "[Read, 'Bash(git:*)']",
                ToolSet::only(["Read", "Bash(git:*)"]),
            ),
            ("all", ToolSet::All),
            ("ALL", ToolSet::All),
            ("'*'", ToolSet::All),
            ("[all]", ToolSet::All),
            ("none", ToolSet::None),
            ("''", ToolSet::None),
            ("[]", ToolSet::None),
            ("~", ToolSet::All),
        ] {
            assert_eq!(field_ok(&format!("tools: {value}")).tools, tools, "{value}");
        }
        assert_eq!(field_ok("").tools, ToolSet::All, "omitted means every tool");
    }

    #[test]
    fn tool_set_errors() {
        assert_eq!(
            field_err("tools: true"),
            (
                "tools".into(),
                "expected `all`, `none` or tool names (a comma-separated string or a list), \
                 found true"
                    .into()
            )
        );
        assert_eq!(
            field_err("tools: read, all").1,
            "`all` must stand alone, found it among names: read, all"
        );
        assert_eq!(
            field_err("tools: [read, 3]").1,
            "expected a tool name in list item 2, found 3"
        );
        assert!(field_err("tools: {a: b}").1.ends_with("found a mapping"));
    }

    #[test]
    fn disallowed_tools_take_names_only() {
        assert_eq!(
            field_ok("disallowed_tools: bash, write").disallowed_tools,
            ["bash", "write"]
        );
        assert!(field_ok("disallowed_tools: ''").disallowed_tools.is_empty());
        for word in ["all", "'*'", "none", "[read, None]"] {
            let (field, message) = field_err(&format!("disallowedTools: {word}"));
            assert_eq!(field, "disallowedTools");
            assert!(
                message.starts_with("expected tool names, found `"),
                "{message}"
            );
        }
    }

    #[test]
    fn subagent_allowances() {
        for value in ["~", "''", "none", "None", "false", "'false'", "[]", "[' ']"] {
            assert_eq!(
                field_ok(&format!("allowed_subagents: {value}")).allowed_subagents,
                SubagentAllowance::None,
                "{value}"
            );
        }
        for value in ["all", "'*'", "true", "'true'", "True", "[all]"] {
            assert_eq!(
                field_ok(&format!("allowed_subagents: {value}")).allowed_subagents,
                SubagentAllowance::All,
                "{value}"
            );
        }
        assert_eq!(
            field_ok("allowed_subagents: writer, reviewer").allowed_subagents,
            SubagentAllowance::only(["writer", "reviewer"])
        );
        assert_eq!(
            field_ok("allowed_subagents: [writer]").allowed_subagents,
            SubagentAllowance::only(["writer"])
        );
        assert_eq!(field_ok("").allowed_subagents, SubagentAllowance::None);
        // pi's spelling, with its words.
        assert_eq!(
            field_ok("spawns: plan, review").allowed_subagents,
            SubagentAllowance::only(["plan", "review"])
        );
        assert_eq!(
            field_ok("spawns: '*'").allowed_subagents,
            SubagentAllowance::All
        );
        assert_eq!(
            field_err("allowed_subagents: 3").1,
            "expected `all`, `none`, true, false or agent type names (a comma-separated string \
             or a list), found 3"
        );
        assert_eq!(
            field_err("allowed_subagents: writer, true").1,
            "`true` must stand alone, found it among names: writer, true"
        );
    }

    #[test]
    fn every_keyword_in_every_list_field() {
        for (written, tools) in [
            ("all", Some(ToolSet::All)),
            ("All", Some(ToolSet::All)),
            ("'*'", Some(ToolSet::All)),
            ("[All]", Some(ToolSet::All)),
            ("none", Some(ToolSet::None)),
            ("NONE", Some(ToolSet::None)),
            ("[None]", Some(ToolSet::None)),
            ("'true'", None),
            ("'False'", None),
            ("true", None),
            ("false", None),
        ] {
            let read = with_fields(&format!("tools: {written}")).map(|d| d.tools);
            match tools {
                Some(tools) => assert_eq!(read.unwrap(), tools, "{written}"),
                None => assert!(read.is_err(), "{written}: {read:?}"),
            }
        }
        assert_eq!(
            field_err("tools: 'True'").1,
            "expected `all`, `none` or tool names, found `true`"
        );
        for written in [
            "all", "ALL", "'*'", "none", "None", "'true'", "'FALSE'", "true", "false",
        ] {
            let (field, message) = field_err(&format!("disallowed_tools: {written}"));
            assert_eq!(field, "disallowed_tools");
            assert!(
                message.starts_with("expected tool names"),
                "{written}: {message}"
            );
        }
        for (written, allowed) in [
            ("all", SubagentAllowance::All),
            ("ALL", SubagentAllowance::All),
            ("'*'", SubagentAllowance::All),
            ("true", SubagentAllowance::All),
            ("'TRUE'", SubagentAllowance::All),
            ("['True']", SubagentAllowance::All),
            ("none", SubagentAllowance::None),
            ("NONE", SubagentAllowance::None),
            ("false", SubagentAllowance::None),
            ("'False'", SubagentAllowance::None),
            ("['false']", SubagentAllowance::None),
            ("[Reviewer]", SubagentAllowance::only(["Reviewer"])),
        ] {
            assert_eq!(
                field_ok(&format!("allowed_subagents: {written}")).allowed_subagents,
                allowed,
                "{written}"
            );
        }
        assert_eq!(
            field_err("allowed_subagents: [writer, '*']").1,
            "`*` must stand alone, found it among names: writer, *"
        );
        // A YAML boolean is a value, not a list item (as `[true]` in JSON).
        assert_eq!(
            field_err("allowed_subagents: [true]").1,
            "expected an agent type name in list item 1, found true"
        );
        assert_eq!(
            field_err("allowed_subagents: [writer, ~]").1,
            "expected an agent type name in list item 2, found nothing"
        );
    }

    #[test]
    fn integers() {
        for (value, found) in [
            ("ten", "\"ten\""),
            ("'10'", "\"10\""),
            ("-3", "-3"),
            ("1.5", "1.5"),
            ("[1]", "a list"),
        ] {
            assert_eq!(
                field_err(&format!("max_turns: {value}")),
                (
                    "max_turns".into(),
                    format!("expected a positive integer, found {found}")
                ),
                "{value}"
            );
        }
        assert_eq!(
            field_err("max_turns: 4294967296").1,
            "expected a positive integer, found 4294967296, which is too large"
        );
        assert_eq!(field_ok("max_turns: 4294967295").max_turns, Some(u32::MAX));
        assert_eq!(field_ok("max_restarts: 0").max_restarts, 0);
        assert_eq!(
            field_err("max_restarts: -1").1,
            "expected a non-negative integer, found -1"
        );
        assert_eq!(
            field_err("restart_period_ms: 0").1,
            "expected a positive integer, found 0"
        );
        assert_eq!(
            field_ok("restart_period_ms: 18446744073709551615").restart_period_ms,
            u64::MAX
        );
    }

    #[test]
    fn pis_zero_turns_is_no_limit_of_the_files_own_and_reported() {
        for spelling in ["max_turns", "maxTurns", "max-turns"] {
            let (d, notes) = notes_of(&format!("---\n{spelling}: 0\n---\n"));
            assert_eq!(
                d.max_turns, None,
                "the depth-scaled default, as when left out"
            );
            assert_eq!(notes, [(spelling.to_owned(), NoteKind::UnlimitedTurns)]);
        }
        // In code and JSON, `Some(0)` is still refused: only a file's word means "no limit".
        assert!(crate::Catalog::new([AgentDefinition::new("x", "").with_max_turns(0)]).is_err());
        assert!(notes_of("---\nmax_turns: 1\n---\n").1.is_empty());
    }

    #[test]
    fn pis_star_with_extension_selectors_is_every_tool_and_reported_as_widened() {
        for tools in [
            "'*, ext:mcp/search, ext:web'",
            "[all, ext:mcp/search, ext:web]",
            "\"ALL,ext:mcp/search , ext:web\"",
        ] {
            let (d, notes) = notes_of(&format!("---\ntools: {tools}\n---\n"));
            assert_eq!(d.tools, ToolSet::All, "{tools}");
            assert_eq!(
                notes,
                [(
                    "tools".to_owned(),
                    NoteKind::SelectorsWidened {
                        selectors: vec!["ext:mcp/search".into(), "ext:web".into()]
                    }
                )],
                "{tools}"
            );
        }
        // `*` alone, and selectors among names, are read as written: no note.
        for tools in ["'*'", "all", "read, ext:mcp/search"] {
            assert!(
                notes_of(&format!("---\ntools: {tools}\n---\n"))
                    .1
                    .is_empty(),
                "{tools}"
            );
        }
    }

    #[test]
    fn an_isolated_agent_loses_its_extension_selectors_as_in_pi_and_it_is_reported() {
        let (d, notes) =
            notes_of("---\ntools: read, ext:mcp/search, grep, ext:web\nisolated: true\n---\n");
        assert!(d.isolated);
        assert_eq!(d.tools, ToolSet::only(["read", "grep"]));
        assert_eq!(
            notes,
            [(
                "tools".to_owned(),
                NoteKind::SelectorsDropped {
                    selectors: vec!["ext:mcp/search".into(), "ext:web".into()]
                }
            )]
        );
        // Only selectors: no tool is left, as pi gives no built-in tool to such a list.
        let (d, _) = notes_of("---\nisolated: true\ntools: ext:mcp/search\n---\n");
        assert_eq!(d.tools, ToolSet::None);
        // Not isolated, or isolated without selectors: tools as written, no note.
        let (d, notes) = notes_of("---\ntools: read, ext:mcp/search\n---\n");
        assert_eq!(d.tools, ToolSet::only(["read", "ext:mcp/search"]));
        assert!(notes.is_empty());
        let (d, notes) = notes_of("---\ntools: read, grep\nisolated: true\n---\n");
        assert_eq!(d.tools, ToolSet::only(["read", "grep"]));
        assert!(notes.is_empty());
        // `*` with selectors beside `isolated` is every tool, with its own note.
        let (d, notes) = notes_of("---\ntools: '*, ext:web'\nisolated: true\n---\n");
        assert_eq!(d.tools, ToolSet::All);
        assert!(matches!(
            &notes[..],
            [(_, NoteKind::SelectorsWidened { .. })]
        ));
    }

    #[test]
    fn sampling_keys_set_the_definitions_sampling() {
        let mut definition = AgentDefinition::default();
        let read = |definition: &mut AgentDefinition, key: &str, yaml: &str| {
            let field = Field::from_key(key).unwrap_or_else(|| panic!("{key} is a field"));
            let value: Value = serde_yaml_ng::from_str(yaml).unwrap();
            apply(definition, field, &value).unwrap();
        };
        read(&mut definition, "temperature", "0");
        read(&mut definition, "topP", "0.9");
        read(&mut definition, "seed", "42");
        read(&mut definition, "stop", "[\"END\", \"\\n\\n\"]");
        read(&mut definition, "max_tokens", "256");
        read(&mut definition, "tool_choice", "any");
        read(&mut definition, "parallel-tool-calls", "false");
        let sampling = &definition.sampling;
        assert_eq!(sampling.temperature, Some(0.0));
        assert_eq!(sampling.top_p, Some(0.9));
        assert_eq!(sampling.seed, Some(42));
        assert_eq!(sampling.stop, ["END", "\n\n"]);
        assert_eq!(sampling.max_output_tokens, Some(256));
        assert_eq!(sampling.tool_choice, Some(ToolChoice::Required));
        assert_eq!(sampling.parallel_tool_calls, Some(false));
        read(&mut definition, "stop_sequences", "STOP");
        read(&mut definition, "toolChoice", "lookup");
        assert_eq!(definition.sampling.stop, ["STOP"]);
        assert_eq!(
            definition.sampling.tool_choice,
            Some(ToolChoice::Tool("lookup".into()))
        );
        let value: Value = serde_yaml_ng::from_str("hot").unwrap();
        let err = apply(&mut definition, Field::Temperature, &value).unwrap_err();
        assert!(err.contains("expected a number"), "{err}");
    }

    #[test]
    fn booleans_and_strings_are_not_coerced() {
        assert_eq!(
            field_err("isolated: yes"),
            (
                "isolated".into(),
                "expected true or false, found \"yes\"".into()
            )
        );
        assert_eq!(field_err("enabled: 1").1, "expected true or false, found 1");
        assert_eq!(
            field_err("description: 42"),
            ("description".into(), "expected a string, found 42".into())
        );
        assert_eq!(field_ok("model: !custom big").model.as_deref(), Some("big"));
        assert_eq!(
            field_err("max_turns: !custom big").1,
            "expected a positive integer, found \"big\""
        );
        assert_eq!(
            field_err("name: '  '").1,
            "expected a non-blank name, found \"  \""
        );
        assert_eq!(
            field_ok("model: '  '").model,
            None,
            "blank model means the default"
        );
        assert!(!field_ok("enabled: false").enabled);
    }

    #[test]
    fn claude_code_delegation_entries_in_tools_are_the_subagent_allowance() {
        use agent_tree_protocol::ToolSet;
        let lead = field_ok("tools: Agent(web-researcher, analyst), Read");
        // The entry stays in `tools` as written (no tool is offered for it).
        assert_eq!(
            lead.tools,
            ToolSet::only(["Agent(web-researcher, analyst)", "Read"])
        );
        assert_eq!(
            lead.allowed_subagents,
            SubagentAllowance::only(["web-researcher", "analyst"])
        );
        for (tools, allowed) in [
            ("Task, Read", SubagentAllowance::All),
            ("Agent()", SubagentAllowance::All),
            ("Agent(*)", SubagentAllowance::All),
            ("Agent(a), Agent(*)", SubagentAllowance::All),
            // (In a YAML flow list, YAML itself splits `Task(b, a)`: quoted, it is one item.)
            (
                r#"[Agent(a), "Task(b, a)"]"#,
                SubagentAllowance::only(["a", "b"]),
            ),
        ] {
            assert_eq!(
                field_ok(&format!("tools: {tools}")).allowed_subagents,
                allowed,
                "{tools}"
            );
        }
        // A bare entry beside `allowed_subagents` defers to it.
        assert_eq!(
            field_ok("tools: Read, Agent\nallowed_subagents: a").allowed_subagents,
            SubagentAllowance::only(["a"])
        );
        // Without such an entry `tools` reads as ever, and delegation is not granted.
        let plain = field_ok("tools: read, grep");
        assert_eq!(plain.tools, ToolSet::only(["read", "grep"]));
        assert_eq!(plain.allowed_subagents, SubagentAllowance::None);
        // Said twice, it must say one thing.
        assert_eq!(
            field_ok("tools: Agent(a)\nallowed_subagents: a").allowed_subagents,
            SubagentAllowance::only(["a"])
        );
        assert_eq!(
            field_ok("tools: Agent(a, b)\nallowed_subagents: [b, a, b]").allowed_subagents,
            SubagentAllowance::only(["b", "a", "b"])
        );
        let (field, message) = field_err("allowedSubagents: b\ntools: Agent(a), Read");
        assert_eq!(field, "tools");
        assert!(
            message.contains("grant a but `allowed_subagents` allows b"),
            "{message}"
        );
        // An entry's types are read by the words rule, and its errors are `tools`'s.
        assert_eq!(field_err("tools: Agent(all, a), Read").0, "tools");
        // Only the exact heads: a tool named `task` or `Agents` is a tool.
        let tools = field_ok("tools: task, Agents");
        assert_eq!(tools.tools, ToolSet::only(["task", "Agents"]));
        assert_eq!(tools.allowed_subagents, SubagentAllowance::None);
        // Claude Code's `background` is `run_in_background`.
        assert!(field_ok("background: true").run_in_background);
    }

    #[test]
    fn words_of_enums() {
        assert_eq!(
            field_ok("strategy: one-for-all").strategy,
            Strategy::OneForAll
        );
        assert_eq!(
            field_ok("strategy: One_For_One").strategy,
            Strategy::OneForOne
        );
        assert_eq!(
            field_ok("restart: transient").restart,
            RestartPolicy::Transient
        );
        assert_eq!(
            field_ok("restart: Temporary").restart,
            RestartPolicy::Temporary
        );
        assert_eq!(
            field_ok("settle: abort-children").settle,
            SettlePolicy::AbortChildren
        );
        assert_eq!(
            field_err("restart: always"),
            (
                "restart".into(),
                "expected one of `permanent`, `transient`, `temporary`, found \"always\"".into()
            )
        );
        assert_eq!(
            field_err("strategy: 1").1,
            "expected one of `one_for_one`, `one_for_all`, `rest_for_one`, found 1"
        );
        assert_eq!(
            field_err("settle: wait").1,
            "expected one of `abort_children`, `drain`, found \"wait\""
        );
    }

    #[test]
    fn long_strings_are_cut_in_messages() {
        let long = "x".repeat(500);
        let message = field_err(&format!("max_turns: {long}")).1;
        assert!(message.len() < 120, "{message}");
        assert!(message.ends_with("\"..."), "{message}");
        // Cutting respects character boundaries.
        let wide = "é".repeat(100);
        assert!(field_err(&format!("max_turns: {wide}")).1.contains('é'));
    }
}
