//! Claude Code's delegation entries in `tools` (`Agent`, `Task`, `Agent(writer, reviewer)`)
//! mean one thing in every format: an agent file, JSON through serde and a catalog read them
//! by one rule. An entry grants its types in every shape of `tools`; beside an
//! `allowed_subagents` a bare `Agent` defers to it, and entries naming types must name the
//! same ones (in any order), else it is an error of `tools`, the field written; an explicit
//! "no delegation" stays none; a definition read with entries reads back as itself; and a
//! registered tool named `task` is that tool, not delegation.

use std::path::Path;

use agent_tree::parse_agent_file;
use agent_tree::prelude::*;

use crate::support::agent_files::{fields_of, json, parse};
use crate::support::catalog;

/// A file that writes both `Agent(...)` entries and `allowed_subagents` must have them
/// agree; an allowance is a set of types, so the same types in another order agree.
#[test]
fn entries_and_allowance_naming_the_same_types_in_another_order_agree() {
    let definition = parse("tools: Agent(a, b), Read\nallowed_subagents: b, a")
        .unwrap_or_else(|e| panic!("the same two types in another order agree: {e}"));
    // The entry stays in `tools` as written, naming no tool.
    assert_eq!(
        definition.allowed_subagents,
        SubagentAllowance::only(["b", "a"])
    );
}

/// A bad `Agent(...)` entry is an error of `tools`, the field the user wrote (never of
/// `allowed_subagents`, which the file does not have).
#[test]
fn a_bad_agent_entry_is_an_error_of_the_field_written() {
    // An entry's types are read by the words rule: `Agent(all)` is every type; a keyword
    // among names is the bad entry.
    let err = parse("tools: Agent(all, a), Read").unwrap_err();
    assert_eq!(fields_of(&err), ["tools"], "{err}");
}

/// There is one rule for every format: the same `tools` value means the same in a
/// definition read from JSON and in an agent file.
#[test]
fn a_tools_value_means_the_same_in_json_and_in_a_file() {
    let from_file = parse("name: lead\ndescription: d\ntools: Agent(a), Read").unwrap();
    let from_json: AgentDefinition = serde_json::from_str(
        r#"{"name":"lead","description":"d","prompt":"You work.","tools":"Agent(a), Read"}"#,
    )
    .unwrap();
    assert_eq!(
        (&from_json.tools, &from_json.allowed_subagents),
        (&from_file.tools, &from_file.allowed_subagents),
    );
}

/// `Agent(writer, reviewer)` grants those types, the comma inside the parentheses splitting
/// nothing, in a string, a YAML list, with tabs and in a CRLF file; `Agents` is a tool, not
/// a delegation entry; `background` is `run_in_background`.
#[test]
fn agent_entries_grant_their_types_in_every_shape_of_tools() {
    for fm in [
        "tools: Agent(a,\tb),\tRead",
        "tools:\n  - Agent(a, b)\n  - Read",
        "tools: [\"Agent(a, b)\", Read]",
        "tools: Task(a), Agent(b), Read",
    ] {
        let d = parse(fm).unwrap();
        // Entries stay in `tools` as written, and match the exact heads `Agent` and `Task`
        // only.
        let ToolSet::Only(names) = &d.tools else {
            panic!("{fm}: {:?}", d.tools)
        };
        assert_eq!(names.last().map(String::as_str), Some("Read"), "{fm}");
        assert_eq!(
            d.allowed_subagents,
            SubagentAllowance::only(["a", "b"]),
            "{fm}"
        );
    }
    let crlf = "---\r\ntools: Agent(a), Read\r\nbackground: true\r\n---\r\nYou work.\r\n";
    let d = parse_agent_file(Path::new("agents/lead.md"), crlf).unwrap();
    assert_eq!(d.allowed_subagents, SubagentAllowance::only(["a"]));
    assert!(d.run_in_background);
    let d = parse("tools: Agents, Read").unwrap();
    assert_eq!(d.tools, ToolSet::only(["Agents", "Read"]));
    assert_eq!(d.allowed_subagents, SubagentAllowance::None);
}

/// A definition's tool names reach the registered tools by the exact name first, and
/// delegation is an explicit capability: with a registered tool `task` (a common to-do
/// tool), a file writing `tools: task, read` gets the tools `task` and `read` and no
/// delegation, which the file never granted.
#[tokio::test(start_paused = true)]
async fn a_file_naming_a_registered_tool_task_gets_that_tool_not_delegation() {
    use agent_tree::testkit::{ScriptedModel, Turn};
    let todo = parse_agent_file(
        Path::new("agents/todo.md"),
        "---\nname: todo\ndescription: Keeps a list.\ntools: task, read\n---\nYou keep a list.\n",
    )
    .unwrap();
    let catalog = catalog([todo, AgentDefinition::new("helper", "You help.")]);
    let model = ScriptedModel::new().script("todo", [Turn::answer("done")]);
    let tree = Tree::builder()
        .config(TreeConfig::default())
        .catalog(catalog)
        .model(model.clone())
        .tool(crate::support::harness::ok_tool("task"))
        .and_then(|b| b.tool(crate::support::harness::ok_tool("read")))
        .unwrap()
        .build()
        .await
        .unwrap();
    tokio::time::timeout(
        crate::support::harness::GUARD,
        tree.run(SpawnRequest::new("todo", "go")),
    )
    .await
    .unwrap()
    .unwrap();
    let offered = crate::support::harness::tools(&model, AgentId::new(1), 0);
    assert!(
        offered.iter().any(|t| t == "task") && !offered.iter().any(|t| t == "Agent"),
        "offered {offered:?}"
    );
}

/// A definition without `allowed_subagents` gets what its entries grant; beside one, a bare
/// `Agent` defers to it and entries naming other types are an error of `tools`. An explicit
/// `allowed_subagents: false` beside `tools: Agent, Read` keeps no delegation (in a file and
/// in JSON alike), and `allowed_subagents: none` beside `Agent(writer)` is an error.
#[test]
fn an_explicit_no_delegation_beside_a_bare_agent_entry_is_kept() {
    let from_file = parse("tools: Agent, Read\nallowed_subagents: false").unwrap();
    let from_json =
        json(r#"{"name": "lead", "tools": ["Agent", "Read"], "allowed_subagents": false}"#)
            .unwrap();
    assert_eq!(
        (
            from_file.allowed_subagents,
            from_json.allowed_subagents.clone()
        ),
        (SubagentAllowance::None, SubagentAllowance::None),
        "`allowed_subagents: false` beside a bare `Agent`: the entry must defer to it"
    );
    let named = parse("tools: Agent(writer)\nallowed_subagents: none");
    assert!(
        named.is_err(),
        "`Agent(writer)` beside `allowed_subagents: none` names another type than the field \
         grants, which the docs make an error of `tools`; got {:?}",
        named.map(|d| d.allowed_subagents)
    );
}

/// Beside an `allowed_subagents`, a bare `Agent` defers to it and entries naming types must
/// name the same ones: `tools: [Agent, Agent(a)]` with `allowed_subagents: [a]` loads with
/// the allowance `[a]`, in a file and through serde alike.
#[test]
fn a_bare_agent_beside_a_named_entry_defers_to_an_agreeing_allowance() {
    let from_file = parse("tools: [Agent, Agent(a), Read]\nallowed_subagents: [a]");
    let from_json = json(
        r#"{"name": "lead", "tools": ["Agent", "Agent(a)", "Read"], "allowed_subagents": ["a"]}"#,
    );
    assert_eq!(
        (
            from_file
                .map(|d| d.allowed_subagents)
                .map_err(|e| e.to_string()),
            from_json.map(|d| d.allowed_subagents)
        ),
        (
            Ok(SubagentAllowance::only(["a"])),
            Ok(SubagentAllowance::only(["a"]))
        )
    );
}

/// A value written back (serialized) reads back as itself: delegation entries stay in
/// `tools` as written, and applying them twice is applying them once.
#[test]
fn definitions_read_with_entries_read_back_as_themselves() {
    for text in [
        r#"{"name": "a", "tools": "Agent(writer, reviewer), Read"}"#,
        r#"{"name": "a", "tools": ["Task", "Agent(w)"]}"#,
        r#"{"name": "a", "tools": "Agent(none), Read"}"#,
        r#"{"name": "a", "tools": "Agent(b, a, b)", "allowed_subagents": "a, b"}"#,
        r#"{"name": "a", "tools": ["Agent", "grep"], "allowed_subagents": ["w"]}"#,
        r#"{"name": "a", "tools": ["Agent(a), Read"]}"#,
        r#"{"name": "a", "tools": "*, ext:mcp/search", "disallowed_tools": "Agent"}"#,
    ] {
        let read = json(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let written = serde_json::to_string(&read).unwrap();
        assert_eq!(json(&written).as_ref(), Ok(&read), "{text} -> {written}");
        let mut again = read.clone();
        again.apply_delegation_entries().unwrap();
        assert_eq!(again, read, "{text}: applied twice");
    }
}

/// A JSON definition whose `Agent(...)` entry disagrees with its `allowed_subagents` is
/// refused as every other `tools` error is: "field `tools`: ...".
#[test]
fn a_disagreeing_entry_of_a_json_definition_is_an_error_of_the_field_tools() {
    let err = serde_json::from_str::<AgentDefinition>(
        "{\"name\": \"x\",\n \"tools\": [\"Agent(w)\"],\n \"allowed_subagents\": [\"r\"]}",
    )
    .unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("field `tools`: "), "{message}");
    // Not kept: a line and column. The disagreement is found once the whole definition is
    // read, after serde_json's position is gone; the `Deserialize` impl's docs say so.
}

/// A written `none` beside a bare `Agent` stays `none` once the definition is in a catalog
/// too (the catalog checks entries against the allowance as it stands, never re-reads it as
/// left out), read from a file and through serde alike; a definition built in code with
/// entries its allowance does not allow is refused by the catalog.
#[test]
fn a_written_none_stays_none_in_a_catalog() {
    let file = parse("tools: Agent, Read\nallowed_subagents: none").unwrap();
    let json: AgentDefinition =
        serde_json::from_str(r#"{"name":"json","tools":"Agent, Read","allowed_subagents":"none"}"#)
            .unwrap();
    let catalog = catalog([file, json]);
    for definition in catalog.definitions() {
        assert_eq!(
            definition.allowed_subagents,
            SubagentAllowance::None,
            "{}",
            definition.name
        );
    }
    let coded = AgentDefinition::new("coded", "").with_tools(ToolSet::only(["Agent(w)"]));
    let err = Catalog::new([coded]).unwrap_err();
    assert!(err.to_string().contains("tools"), "{err}");
}
