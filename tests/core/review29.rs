//! Review 29: Claude Code's delegation entries in an agent file's `tools`, the words rule
//! across formats, and the huge-integer preprocessing of frontmatter. Each failing test is a
//! defect (expected, actual, the claim, the suspected cause); the tests marked GUARD pass and
//! hold claims next to them.

use std::path::Path;

use agent_tree::prelude::*;
use agent_tree::{CatalogError, parse_agent_file};

const HUGE: &str = "123456789012345678901234567890";

fn file(frontmatter: &str) -> String {
    format!("---\n{frontmatter}\n---\nYou work.\n")
}

fn parse(frontmatter: &str) -> Result<AgentDefinition, CatalogError> {
    parse_agent_file(Path::new("agents/lead.md"), &file(frontmatter))
}

/// The fields a (possibly combined) catalog error names.
fn fields_of(err: &CatalogError) -> Vec<String> {
    match err {
        CatalogError::Many(all) => all.iter().flat_map(fields_of).collect(),
        CatalogError::Field { field, .. } => vec![field.clone()],
        _ => vec![],
    }
}

/// Claim (frontmatter.rs `parse_agent_file` docs): "A file that writes both [an `Agent(...)`
/// entry and `allowed_subagents`] must have them agree, or it is an error of `tools`." An
/// allowance is a set of types: the words rule reads `b, a` as the types a and b.
///
/// Expected: `tools: Agent(a, b)` with `allowed_subagents: b, a` loads (both grant a and b).
/// Actual: refused, "its `Agent(...)` entries grant a, b but `allowed_subagents` grants b, a".
/// Cause: frontmatter.rs `parse` compares the two `SubagentAllowance::Only` lists with `==`,
/// which is order- (and duplicate-) sensitive.
#[test]
fn delegation_written_twice_in_another_order_agrees() {
    let definition = parse("tools: Agent(a, b), Read\nallowed_subagents: b, a")
        .unwrap_or_else(|e| panic!("the same two types in another order agree: {e}"));
    // (Since the fix, the entry stays in `tools` as written, naming no tool.)
    assert_eq!(
        definition.allowed_subagents,
        SubagentAllowance::only(["b", "a"])
    );
}

/// Claim (docs/semantics.md, Agent files): "every error names the file and the field"; the
/// `parse_agent_file` docs make a bad `Agent(...)` entry "an error of `tools`".
///
/// Expected: a file with only `tools: Agent(all), Read` (no `allowed_subagents` field) is
/// refused with an error naming the field `tools`, the field the user wrote.
/// Actual: the error names the field `allowed_subagents`, which the file does not have
/// ("field `allowed_subagents`: list item 1 is the keyword `all`").
/// Cause: fields.rs `delegation_entries` builds the allowance with `SubagentAllowance::only`
/// (keywords unchecked) and the definition check that later refuses it
/// (`catalog::check`) reports it against `allowed_subagents`.
#[test]
fn a_bad_agent_entry_is_an_error_of_the_field_written() {
    // (Since the fix, an entry's types are read by the words rule: `Agent(all)` is every
    // type; a keyword among names is the bad entry.)
    let err = parse("tools: Agent(all, a), Read").unwrap_err();
    assert_eq!(fields_of(&err), ["tools"], "{err}");
}

/// Claim (protocol/src/words.rs module docs): "There is one rule for every format: JSON and
/// YAML decoded through serde ... and agent files ... both hand what they read to
/// [`Written`], so a value means the same thing wherever it is written"; the rule's own
/// list splitting is written for `"Agent(writer, reviewer), Read"`.
///
/// Expected: the same `tools` value means the same in a definition read from JSON and in an
/// agent file.
/// Actual: the file reads `Agent(a), Read` as the tool Read and the subagent type a; the
/// JSON definition reads it as two tools, one named `Agent(a)` (a name no toolbox can hold)
/// and grants no delegation at all.
/// Cause: the delegation entries are taken out only by actors/src/catalog/fields.rs
/// `delegation_entries` (agent files), not by the words rule (`Written`) that serde uses.
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

/// Claim (frontmatter.rs `quote_huge_integers` docs): "The lines of a block scalar
/// (`description: |`) are its text, kept as written"; `parse_agent_file`: "Values are never
/// coerced". A YAML node may carry an anchor or a tag before its block indicator.
///
/// Expected: `description: !!str |` / `description: &d |` followed by a line holding a huge
/// integer is that text.
/// Actual: the line is rewritten to `"1234..."`, so the description holds quote marks the
/// file does not.
/// Cause: frontmatter.rs `scalar_value` returns `!!str |` / `&d |` whole, and
/// `is_block_indicator` does not see the block scalar (its properties are not skipped).
#[test]
fn a_tagged_or_anchored_block_scalar_is_kept_as_written() {
    for opener in ["!!str |", "&d |"] {
        let definition = parse(&format!("description: {opener}\n  {HUGE}")).unwrap();
        assert_eq!(definition.description, HUGE, "{opener}");
    }
}

/// Claim (as above, and the commit "huge integers quoted only where they are values"): a
/// valid file is read as written; the rewrite exists only for integers "no YAML value
/// holds", which would otherwise make the file invalid YAML.
///
/// Expected: a plain multi-line description (valid YAML, a string: "this is 1234... more")
/// is read as written.
/// Actual: its continuation line is taken for a value and quoted, so the description is
/// `this is "1234..." more`.
/// Cause: frontmatter.rs `quote_huge_integers` / `scalar_value` treat any line whose text is
/// digits as a value; a continuation line of a plain (or folded flow) scalar is text.
#[test]
fn a_plain_multi_line_description_is_kept_as_written() {
    let definition = parse(&format!("description: this is\n  {HUGE}\n  more")).unwrap();
    assert_eq!(definition.description, format!("this is {HUGE} more"));
}

/// Claim (frontmatter.rs `quote_huge_integers` docs): a huge integer value, "a trailing
/// `# comment` kept", is "its field's error ... beside the file's other field errors"
/// (docs/semantics.md: "every file's errors are reported together"). YAML separates a
/// comment from a value by any white space, a tab included.
///
/// Expected: `max_turns: <huge>\t# many` and `isolated: maybe` are two field errors.
/// Actual: the whole file is refused as invalid YAML (`CatalogError::Yaml`, "invalid type:
/// integer ... as u128"), and `isolated` is not reported.
/// Cause: frontmatter.rs `scalar_value` finds a comment only after a space (`" #"`) and
/// takes a value only after `": "`, so tab-separated values and comments are left unquoted.
#[test]
fn a_huge_integer_before_a_tab_and_a_comment_is_a_field_error() {
    let err = parse(&format!("max_turns: {HUGE}\t# many\nisolated: maybe")).unwrap_err();
    let mut fields = fields_of(&err);
    fields.sort();
    assert_eq!(fields, ["isolated", "max_turns"], "{err}");
}

/// GUARD. Claim (`parse_agent_file` docs): `Agent(writer, reviewer)` grants those types, the
/// comma inside the parentheses splitting nothing, in a string, a YAML list, with tabs and a
/// CRLF file; `Agents` is a tool, not a delegation entry; `background` is
/// `run_in_background`.
#[test]
fn guard_claude_code_tools_entries_in_every_shape() {
    for fm in [
        "tools: Agent(a,\tb),\tRead",
        "tools:\n  - Agent(a, b)\n  - Read",
        "tools: [\"Agent(a, b)\", Read]",
        "tools: Task(a), Agent(b), Read",
    ] {
        let d = parse(fm).unwrap();
        // (Since review 29's fix, entries stay in `tools` as written, and match the exact
        // heads `Agent` and `Task` only.)
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

/// Claim (docs/semantics.md, Agent files): "A definition's tool names reach the
/// application's registered tools by one rule (`match_tool_name`): the exact name, else the
/// one ASCII-case-insensitive match"; words.rs: "Names keep their case"; DESIGN.md:
/// "Delegation is an explicit capability". The toolbox accepts a tool named `task` (a to-do
/// tool is a common one), and Claude Code's delegation entry is `Task`/`Agent`.
///
/// Expected: with a registered tool `task`, an agent file writing `tools: task, read` gives
/// the agent the tools `task` and `read`, and no delegation (the file grants none).
/// Actual: `task` is read as Claude Code's `Task` entry: the agent is offered no `task`
/// tool, and instead gets `Agent` with every type allowed — a delegation capability the
/// file's author never wrote, and a registered tool no file can ever grant.
/// Cause: actors/src/catalog/fields.rs `delegation_entries` matches `agent`/`task` ignoring
/// ASCII case (`eq_ignore_ascii_case`) while registered names are matched exactly first.
#[tokio::test(start_paused = true)]
async fn a_file_naming_a_registered_tool_task_gets_that_tool_not_delegation() {
    use agent_tree::testkit::{Script, ScriptedModel, Turn};
    let todo = parse_agent_file(
        Path::new("agents/todo.md"),
        "---\nname: todo\ndescription: Keeps a list.\ntools: task, read\n---\nYou keep a list.\n",
    )
    .unwrap();
    let catalog = Catalog::new([todo, AgentDefinition::new("helper", "You help.")]).unwrap();
    let model = ScriptedModel::new().script("todo", Script::new([Turn::answer("done")]));
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
