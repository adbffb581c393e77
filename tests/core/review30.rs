//! Review 30: Claude Code's delegation entries as one rule for every format
//! (`AgentDefinition::apply_delegation_entries`, the serde wrapper, `Catalog::new`,
//! `match_tool_name`), the frontmatter's value builder (`Build`) and the toolbox's name rule.
//! Each failing test is a defect (expected, actual, the claim, the suspected cause); the tests
//! marked GUARD pass and hold claims next to them.

use std::path::Path;

use agent_tree::prelude::*;
use agent_tree::{CatalogError, Toolbox, parse_agent_file};

fn file(frontmatter: &str) -> String {
    format!("---\n{frontmatter}\n---\nYou work.\n")
}

fn parse(frontmatter: &str) -> Result<AgentDefinition, CatalogError> {
    parse_agent_file(Path::new("agents/lead.md"), &file(frontmatter))
}

fn json(text: &str) -> Result<AgentDefinition, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Claim (docs/semantics.md, "Agent files and tool names"): "A definition without
/// `allowed_subagents` gets what they grant (a bare `Agent` every type); beside one, a bare
/// `Agent` defers to it and entries naming other types are an error of `tools`." The same in
/// the `parse_agent_file` table and words.rs module docs ("beside an `allowed_subagents`, a
/// bare `Agent` defers to it").
///
/// Expected: a file (or JSON definition) that writes `allowed_subagents: false` — an explicit
/// "no delegation" — beside `tools: Agent, Read` keeps no delegation (the bare `Agent`
/// defers); and `allowed_subagents: none` beside `tools: Agent(writer)` is an error of `tools`
/// (the entry names another type than the field grants).
/// Actual: the explicit `false` is overridden: the agent may spawn every type
/// (`SubagentAllowance::All`); `none` + `Agent(writer)` silently grants `writer`. An agent its
/// author explicitly denied delegation gets it.
/// Cause: protocol/src/definition.rs `AgentDefinition::apply_delegation_entries` takes
/// `SubagentAllowance::None` (the value of an explicit `false`/`none`, the same as the
/// default) to mean "no `allowed_subagents` field" and replaces it with what the entries
/// grant; neither the serde wrapper nor frontmatter.rs `parse` tells "absent" from "none".
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

/// Claim (as above): "beside one [`allowed_subagents`], a bare `Agent` defers to it and
/// entries naming other types are an error of `tools`"; the `apply_delegation_entries` docs:
/// "a bare `Agent` defers to it, and entries naming types must name the same ones (in any
/// order)".
///
/// Expected: `tools: [Agent, Agent(a)]` with `allowed_subagents: [a]` loads with the
/// allowance `[a]`: the bare `Agent` defers, and the entry naming types names the same one.
/// Actual: refused, "its `Agent(...)` entries grant every type but `allowed_subagents` grants
/// a" — in a file and through serde alike.
/// Cause: protocol/src/words.rs `delegation_entries` folds the bare entry's "every type" into
/// the one allowance it returns (`(_, All) => All`), so `apply_delegation_entries` compares
/// `[a]` against `All` instead of against the types the named entries give.
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

/// Claim (docs/semantics.md, "Agent files and tool names"): "Claude Code grants delegation in
/// `tools`: `Agent` (or its older name `Task`) ... Such entries name no tool." The toolbox
/// accepts a user tool named `Task` (only the orchestration names are reserved).
///
/// Expected: one word in `tools` means one thing: with a registered tool `Task`, a file
/// writing `tools: Task, read` gets either the delegation entry (no tool `Task`) or the tool
/// `Task` (no delegation) — never both.
/// Actual: the agent is offered the user tool `Task` *and* the orchestration tool `Agent`
/// (with every type allowed): `apply_delegation_entries` reads `Task` as the entry, while
/// `match_tool_name` matches it to the registered tool first.
/// Cause: actors/src/policy/capability.rs `match_tool_name` tries the exact registered name
/// before `is_delegation_entry`, while protocol/src/words.rs `delegation_entry` (applied by
/// serde, files and `Catalog::new`) grants delegation for the same name regardless; and
/// actors/src/tool.rs `Toolbox::insert` does not reserve `Task`.
///
/// Fixed by reserving `Task` in the toolbox (an agent file's `Task` is Claude Code's
/// delegation entry): registering it is refused, so the word has one meaning.
#[tokio::test(start_paused = true)]
async fn one_word_task_grants_a_tool_or_delegation_not_both() {
    let refused = Tree::builder()
        .tool(crate::support::harness::ok_tool("Task"))
        .map(|_| ())
        .expect_err("a tool named `Task` is refused");
    assert!(refused.reason.contains("delegation"), "{refused}");
}

/// Claim (docs/semantics.md, "Agent files and tool names"): "An integer no YAML value holds
/// (past 64 bits) is read as its digits, so it is its field's error beside the file's other
/// errors"; the frontmatter unit test holds the message containing the digits.
///
/// Expected: `max_turns: <40 digits>` (past 64 bits, and past 128) is refused with a message
/// holding the digits the file wrote, as `max_turns: <30 digits>` is.
/// Actual: "expected a positive integer, found 1.2345678901234568e39": the integer is read as
/// a float, its digits lost (and likewise `tools: [<40 digits>]` is refused as a number while
/// `tools: [<30 digits>]` is a tool name).
/// Cause: actors/src/catalog/frontmatter.rs `Build` only turns `visit_i128`/`visit_u128` into
/// digits; serde_yaml_ng hands an integer past 128 bits to `visit_f64`, which `Build` keeps as
/// a float.
#[test]
///
/// Fixed the other way: the docs now say an integer past 64 bits is read as the float YAML
/// reads one past 128 bits as, so 30 and 40 digits read alike (a number, never a string).
fn an_integer_past_128_bits_is_read_as_its_digits() {
    for digits in [
        "123456789012345678901234567890",
        "1234567890123456789012345678901234567890",
    ] {
        let err = parse(&format!("max_turns: {digits}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_turns"), "{err}");
        assert!(err.contains("found 1.23456789012345"), "{err}");
        let err = parse(&format!("tools: [{digits}]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tools"), "{err}");
    }
}

/// Claim (`parse_agent_file` docs): "Values are never coerced: `max_turns: \"10\"` and
/// `isolated: yes` ... are errors"; semantics.md: an integer past 64 bits "is read as its
/// digits"; `Build`'s own docs: "the string of its digits".
///
/// Expected: `tools: [0xFFFFFFFFFFFFFFFFFFFF]` is either refused (a number, as `tools: [12]`
/// is) or read as what the file wrote, `0xFFFFFFFFFFFFFFFFFFFF`.
/// Actual: the agent gets a tool named `1208925819614629174706175`, a name the file never
/// wrote (the hex integer re-spelled in decimal); `max_turns: 0xFFFFFFFFFFFFFFFFFFFF` is
/// likewise refused as `found "1208925819614629174706175"`.
/// Cause: actors/src/catalog/frontmatter.rs `Build::visit_u128`/`visit_i128` write the parsed
/// value with `to_string()` (decimal) instead of keeping the scalar as written.
#[test]
fn a_huge_hex_integer_is_not_re_spelled_as_a_decimal_name() {
    let read = parse("tools: [0xFFFFFFFFFFFFFFFFFFFF, read]");
    match read {
        Err(_) => {}
        Ok(d) => assert_eq!(
            d.tools,
            ToolSet::only(["0xFFFFFFFFFFFFFFFFFFFF", "read"]),
            "a tool list holding a name the file never wrote"
        ),
    }
}

/// Claim (`parse_agent_file` docs): "Values are never coerced" (`max_turns: "10"` is an
/// error, so is the other direction); `name` is "a non-blank string" and `name: 12` is refused
/// ("expected a string, found 12").
///
/// Expected: `name: 123456789012345678901234567890` (a YAML integer, unquoted) is refused as
/// `name: 12` is.
/// Actual: the definition is named `123456789012345678901234567890`: an integer becomes a
/// string because it is large. (The same for `description`: `description: 12345` is refused,
/// a 30-digit one is the description.)
/// Cause: actors/src/catalog/frontmatter.rs `Build` turns an integer past 64 bits into
/// `Value::String`, so the field table (`fields.rs` `apply`) can no longer tell it from a
/// quoted string; the type is decided by the size of the number.
#[test]
fn a_huge_integer_name_is_refused_as_a_small_one_is() {
    assert!(
        parse("name: 12").is_err(),
        "precondition: a number is no name"
    );
    let huge = parse("name: 123456789012345678901234567890");
    assert!(
        huge.is_err(),
        "an unquoted integer became a name: {:?}",
        huge.map(|d| d.name)
    );
}

/// GUARD. Claim (words.rs module docs): "A value written back (serialized) reads back as
/// itself"; delegation entries "stay in `tools` as written (so a definition written back
/// reads back as itself)", and "applying it twice is applying it once".
#[test]
fn guard_definitions_read_with_entries_read_back_as_themselves() {
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

/// GUARD. Claim (`parse_agent_file` docs and frontmatter.rs invariants): anchors and merge
/// keys work, a key given twice is an error, and every problem names the file; a huge
/// integer within 128 bits is its field's error.
#[test]
fn guard_merge_keys_duplicates_and_huge_integers() {
    let merged = parse("base: &b {max_turns: 3, description: d}\n<<: *b\nmax_turns: 4").unwrap();
    assert_eq!(
        (merged.max_turns, merged.description.as_str()),
        (Some(4), "d")
    );
    for frontmatter in ["x: {a: 1, a: 2}", "max_turns: 1\nmax_turns: 2", "<<: [3]"] {
        let err = parse(frontmatter).unwrap_err().to_string();
        assert!(err.contains("agents/lead.md"), "{frontmatter:?}: {err}");
    }
    let err = parse("max_turns: -123456789012345678901234567890\nisolated: yes")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_turns") && err.contains("isolated"),
        "{err}"
    );
}

/// GUARD. Claim (actors/src/tool.rs `ToolNameError`): the toolbox refuses a name outside 1 to
/// 64 of `A-Z a-z 0-9 _ -`, and says which name and why.
#[test]
fn guard_toolbox_name_rule_boundaries() {
    let tool = |name: String| FnTool::new(name, "t", |_ctx, _input| async { Ok(String::new()) });
    let mut tools = Toolbox::new();
    assert!(tools.insert(tool("a".repeat(64))).is_ok());
    assert!(tools.insert(tool("A-z_0".into())).is_ok());
    for bad in [
        String::new(),
        "b".repeat(65),
        "é".into(),
        "a b".into(),
        "Agent".into(),
    ] {
        let err = tools.insert(tool(bad.clone())).unwrap_err();
        assert_eq!(err.name, bad);
    }
}

/// Claim (protocol/src/words.rs `deserialize` docs): inside an `AgentDefinition`, a list
/// field's messages "start with ``field `tools`: ``", and "a format's position (line and
/// column) is added once"; the definition unit tests hold every field error of a JSON
/// definition as "field `tools`: ... at line 1 column N".
///
/// Expected: a JSON definition whose `Agent(...)` entry disagrees with its
/// `allowed_subagents` is refused as every other `tools` error is: "field `tools`: ..." with
/// the line and column in the JSON.
/// Actual: "tools: its `Agent(...)` entries grant w but ..." with no position (serde_json's
/// `line()` is 0), so a caller cannot find the definition in a file of many.
/// Cause: protocol/src/definition.rs `impl Deserialize for AgentDefinition` applies the entries
/// after the derive's deserialize has returned and wraps the error with
/// `de::Error::custom(format_args!("tools: {e}"))`, outside the deserializer that knows the
/// position and not in the words rule's format.
#[test]
fn a_disagreeing_entry_error_of_a_json_definition_is_a_field_error_with_its_position() {
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
    let catalog = Catalog::new([file, json]).unwrap();
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
