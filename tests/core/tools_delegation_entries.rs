//! Claude Code's delegation entries in `tools` (`Agent`, `Task`, `Agent(writer, reviewer)`)
//! end to end: serde (JSON, YAML) and agent files, the serde `remote = "Self"` wrapper and
//! its `unwritten_allowance` sentinel, `Catalog::new`, `Catalog::tool_problems`, and what a
//! scripted model is offered in a real tree. Each test states the rule it holds and the doc
//! line that promises it.

use std::path::Path;

use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{CatalogError, parse_agent_file};

use crate::support::catalog;
use crate::support::harness::{GUARD, tools, tree_with_ok_tools};
use crate::support::run_admitted;

fn file(name: &str, frontmatter: &str) -> String {
    format!("---\nname: {name}\ndescription: d\n{frontmatter}\n---\nYou work.\n")
}

fn parse(frontmatter: &str) -> Result<AgentDefinition, CatalogError> {
    parse_agent_file(Path::new("agents/lead.md"), &file("lead", frontmatter))
}

fn json(text: &str) -> AgentDefinition {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A tree with `lead` plus `writer` and `reviewer`, the user tools `read` and `bash`; `lead`'s
/// model spawns `spawn` (if any) then answers. Returns the model (for its log) and the tool
/// result of the spawn, if one was made.
async fn run_lead(lead: AgentDefinition, spawn: Option<&str>) -> (ScriptedModel, Vec<String>) {
    let catalog = catalog([
        lead,
        AgentDefinition::new("writer", "You write.").with_description("writes"),
        AgentDefinition::new("reviewer", "You review.").with_description("reviews"),
    ]);
    let mut turns = Vec::new();
    if let Some(agent_type) = spawn {
        turns.push(Turn::spawn(agent_type, "go"));
    }
    turns.push(Turn::answer("done"));
    let model = ScriptedModel::new()
        .script("lead", Script::new(turns))
        .script("writer", [Turn::answer("written")])
        .script("reviewer", [Turn::answer("reviewed")]);
    let tree = tree_with_ok_tools(model.clone(), catalog, &["read", "bash"]).await;
    tokio::time::timeout(
        GUARD,
        run_admitted(&tree, SpawnRequest::new("lead", "lead")),
    )
    .await
    .expect("the run succeeds");
    let log = model.log_of(AgentId::new(1));
    let results = if spawn.is_some() {
        log.get(1)
            .map(|c| {
                c.results
                    .iter()
                    .map(|m| format!("{}{}", if m.is_error { "ERROR: " } else { "" }, m.content))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    (model, results)
}

/// Doc (words.rs module docs, the table): "left out, null | every tool | no tool denied |
/// none", and "A field left out, or given as null, takes its default"; `words::deserialize`:
/// "null is the field's default". docs/semantics.md: "A definition without
/// `allowed_subagents` gets what they grant (a bare `Agent` every type)".
///
/// Rule: `"allowed_subagents": null` (JSON) and `allowed_subagents: ~` (YAML through
/// serde_yaml_ng) beside `tools: [Agent, Read]` read as the field left out: the bare `Agent`
/// grants every type, as it does in an agent file with `allowed_subagents: ~` and in JSON
/// without the field; end to end, the lead is offered `Agent` and may spawn `writer`. The
/// same text means the same delegation in a file and through serde.
#[tokio::test(start_paused = true)]
async fn a_null_allowed_subagents_beside_a_bare_agent_is_left_out() {
    let left_out = json(r#"{"name": "lead", "tools": ["Agent", "Read"]}"#);
    let from_file = parse("tools: Agent, Read\nallowed_subagents: ~").unwrap();
    let from_json =
        json(r#"{"name": "lead", "tools": ["Agent", "Read"], "allowed_subagents": null}"#);
    let from_yaml: AgentDefinition =
        serde_yaml_ng::from_str("name: lead\ntools: [Agent, Read]\nallowed_subagents: ~\n")
            .unwrap();
    assert_eq!(
        left_out.allowed_subagents,
        SubagentAllowance::All,
        "reference"
    );
    assert_eq!(
        from_file.allowed_subagents,
        SubagentAllowance::All,
        "reference"
    );
    assert_eq!(
        (
            from_json.allowed_subagents.clone(),
            from_yaml.allowed_subagents.clone()
        ),
        (SubagentAllowance::All, SubagentAllowance::All),
        "null must read as left out (JSON null, YAML ~)"
    );
    let (model, results) = run_lead(from_json, Some("writer")).await;
    let offered = tools(&model, AgentId::new(1), 0);
    assert!(offered.iter().any(|t| t == "Agent"), "offered {offered:?}");
    assert!(
        results.iter().all(|r| !r.starts_with("ERROR")),
        "{results:?}"
    );
}

/// Doc (definition.rs, the `remote = "Self"` comment): "The derives write inherent
/// functions; the trait impls below wrap them, so a definition read through serde has Claude
/// Code's delegation entries applied, as a file's has"; `unwritten_allowance`: "an empty
/// `Only`, which no written value reads as ... told apart then and made `None`". words.rs:
/// "one rule for every format: JSON and YAML decoded through serde (the `Deserialize` impls
/// of ... [`AgentDefinition`])".
///
/// Rule: an application decoding a definition inside its own config the usual way —
/// `#[serde(deserialize_with = "AgentDefinition::deserialize")]`, or
/// `AgentDefinition::deserialize(d)` inside its own `Deserialize` impl — gets the same
/// definition as `serde_json::from_str::<AgentDefinition>`: the bare `Agent` grants every
/// type, and the internal `unwritten_allowance` sentinel never leaks.
#[test]
fn the_public_deserialize_path_applies_the_entries_and_hides_the_sentinel() {
    #[derive(serde::Deserialize)]
    struct AppConfig {
        #[serde(deserialize_with = "AgentDefinition::deserialize")]
        agent: AgentDefinition,
    }
    let text = r#"{"agent": {"name": "lead", "tools": ["Agent", "Read"]}}"#;
    let config: AppConfig = serde_json::from_str(text).unwrap();
    let direct = json(r#"{"name": "lead", "tools": ["Agent", "Read"]}"#);
    assert_eq!(
        config.agent.allowed_subagents, direct.allowed_subagents,
        "the same JSON through `AgentDefinition::deserialize` and through `from_str`"
    );
}

/// Doc (docs/semantics.md, "Agent files and tool names"): "Claude Code grants delegation in
/// `tools`: `Agent` (or its older name `Task`)"; "A deny names every tool equal to it ignoring
/// case, orchestration tools included"; `Catalog::tool_problems`: "Orchestration tool names
/// (`Agent`, ...) are never problems". Claude Code's own `disallowedTools: Task` removes the
/// (then) Task tool, i.e. delegation.
///
/// Rule: a Claude Code file with `tools: Task, Read` and `disallowed_tools: Task` — the
/// entry granting delegation by its older name, the deny taking it away by the same name —
/// gives an agent no `Agent` tool, and `tool_problems` stays quiet about the deny (`Task`
/// names delegation in `tools`, so it names it in `disallowed_tools`).
#[tokio::test(start_paused = true)]
async fn a_deny_of_task_denies_the_delegation_task_grants() {
    let lead = parse("tools: Task, Read\ndisallowed_tools: Task").unwrap();
    let catalog = catalog([lead.clone()]);
    let problems = catalog.tool_problems(["read", "bash"]);
    let (model, _) = run_lead(lead, None).await;
    let offered = tools(&model, AgentId::new(1), 0);
    assert!(
        !offered.iter().any(|t| t == "Agent"),
        "`disallowed_tools: Task` must take away the delegation `Task` grants; offered \
         {offered:?}"
    );
    assert!(problems.is_empty(), "{problems:?}");
}

/// Doc (docs/semantics.md, "Agent files and tool names"): "beside a written one (`none`
/// included), ... entries naming a type it does not allow are an error of `tools`";
/// `parse_agent_file`: "[`CatalogError::Field`] for a malformed field"; frontmatter.rs
/// `parse`: "Fields whose value could not be read: they kept their default, which the
/// definition check must not be asked to judge".
///
/// Rule: `tools: Agent(writer), Read` with a malformed `allowed_subagents: 5` is one error,
/// of `allowed_subagents` (expected names, found 5): `tools` is fine, and nothing was written
/// the entries could disagree with. An unread field's default is never judged as if written.
#[test]
fn an_unreadable_allowed_subagents_does_not_make_tools_an_error() {
    let err = parse("tools: Agent(writer), Read\nallowed_subagents: 5").unwrap_err();
    let fields: Vec<String> = match &err {
        CatalogError::Many(all) => all.iter().map(field_of).collect(),
        one => vec![field_of(one)],
    };
    assert_eq!(fields, ["allowed_subagents"], "{err}");
}

fn field_of(err: &CatalogError) -> String {
    match err {
        CatalogError::Field { field, .. } => field.clone(),
        other => format!("{other:?}"),
    }
}

/// Doc (words.rs module docs): "Names keep their case ... (The runtime matches them to what
/// exists by one rule: the exact name first, else the one ASCII-case-insensitive match; for
/// agent types, allowlist entries included, in the catalog"; docs/semantics.md: "entries
/// naming a type it does not allow are an error of `tools`".
///
/// Rule: `tools: Agent(Writer), Read` beside `allowed_subagents: [writer]` names the type
/// `writer`, which the allowance allows (by the rule every type name follows, `Writer` and
/// `writer` are the one type `writer`): the file loads, and the lead may spawn `writer`.
#[tokio::test(start_paused = true)]
async fn entries_and_allowance_naming_one_type_in_two_cases_agree() {
    let lead = parse("tools: Agent(Writer), Read\nallowed_subagents: [writer]")
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, results) = run_lead(lead, Some("writer")).await;
    assert!(
        results.iter().all(|r| !r.starts_with("ERROR")),
        "{results:?}"
    );
}

/// Doc (docs/semantics.md): "A definition without `allowed_subagents` gets what they
/// grant (... else the named types)"; "orchestration names ... are left to the delegation
/// rule"; `Catalog::tool_problems`: orchestration names "are never problems". A Claude Code
/// file, its JSON and its YAML round trips: `Agent(writer)` grants `writer` only (spawning
/// `reviewer` is refused), the model is offered `Agent` and no tool named after the entry,
/// and `tool_problems` is quiet.
#[tokio::test(start_paused = true)]
async fn a_named_entry_grants_only_its_types_in_every_format() {
    let lead = parse("tools: Agent(writer), Task, Read").unwrap();
    // A bare `Task` beside `Agent(writer)` grants every type.
    assert_eq!(lead.allowed_subagents, SubagentAllowance::All);
    let back: AgentDefinition =
        serde_json::from_str(&serde_json::to_string(&lead).unwrap()).unwrap();
    assert_eq!(back, lead);
    let back: AgentDefinition =
        serde_yaml_ng::from_str(&serde_yaml_ng::to_string(&lead).unwrap()).unwrap();
    assert_eq!(back, lead);

    let only = parse("tools: Agent(writer), Read").unwrap();
    assert_eq!(only.allowed_subagents, SubagentAllowance::only(["writer"]));
    let catalog = catalog([only.clone()]);
    assert!(catalog.tool_problems(["read"]).is_empty());
    let (model, results) = run_lead(only, Some("reviewer")).await;
    let offered = tools(&model, AgentId::new(1), 0);
    assert!(offered.iter().any(|t| t == "Agent"), "{offered:?}");
    assert!(offered.iter().any(|t| t == "read"), "{offered:?}");
    assert!(!offered.iter().any(|t| t.contains('(')), "{offered:?}");
    assert!(
        results.iter().any(|r| r.starts_with("ERROR")),
        "{results:?}"
    );
}

/// Doc (docs/semantics.md, "Delegation"/"Agent files and tool names"): an explicit
/// deny always wins, and an isolated agent never delegates, whatever else it says.
#[tokio::test(start_paused = true)]
async fn a_deny_and_isolation_win_over_delegation_entries() {
    for frontmatter in [
        "tools: Agent(writer), Read\ndisallowed_tools: Agent",
        "tools: Agent, Read\nisolated: true",
    ] {
        let lead = parse(frontmatter).unwrap();
        let (model, _) = run_lead(lead, None).await;
        let offered = tools(&model, AgentId::new(1), 0);
        assert!(
            !offered.iter().any(|t| t == "Agent"),
            "{frontmatter}: {offered:?}"
        );
    }
}

/// Doc (`Catalog::new`, Errors): "[`CatalogError::Definition`] for each refused field of each
/// definition, naming the definition and the field"; docs/semantics.md: "a catalog checks
/// every definition against its allowance as it stands (a definition built in code writes its
/// own, so entries naming types it does not allow are an error there too)".
///
/// Rule: a definition built in code with `tools: [Agent(writer), Read]` (no allowance
/// written) and `max_turns: 0` is refused for both fields: `tools` (the entry names a type the
/// allowance does not allow) and `max_turns` (at least 1), as a file with the same two faults
/// reports both.
#[test]
fn a_catalog_reports_every_refused_field_beside_a_disagreeing_entry() {
    let lead = AgentDefinition::new("lead", "You lead.")
        .with_tools(ToolSet::only(["Agent(writer)", "Read"]))
        .with_max_turns(0);
    let err = Catalog::new([lead]).unwrap_err();
    let fields: Vec<&str> = match &err {
        CatalogError::Many(all) => all
            .iter()
            .map(|e| match e {
                CatalogError::Definition { field, .. } => *field,
                _ => "?",
            })
            .collect(),
        CatalogError::Definition { field, .. } => vec![*field],
        _ => vec!["?"],
    };
    assert_eq!(fields, ["tools", "max_turns"], "{err}");
    // (A file's `max_turns: 0` is pi's "no turn limit", read as the default: `-1` is the
    // file's fault in that field.)
    let from_file = parse("tools: Agent(writer), Read\nallowed_subagents: none\nmax_turns: -1")
        .unwrap_err()
        .to_string();
    assert!(
        from_file.contains("tools") && from_file.contains("max_turns"),
        "reference: {from_file}"
    );
}

/// Doc (docs/semantics.md, "Agent files and tool names"): `Catalog::load_dirs` loads
/// the Claude Code and pi fixture directories (their broken files aside) beside a lead whose `tools` holds
/// `Agent(code-reviewer)`: no problem of the lead's file, the lead's allowance is that type, `tool_problems`
/// says nothing of the entry, and in a tree the lead spawns `code-reviewer` and is refused
/// `scout` (a pi type outside the allowance).
#[tokio::test(start_paused = true)]
async fn a_claude_lead_beside_the_fixture_directories_spawns_only_its_named_type() {
    let dir = std::env::temp_dir().join(format!(
        "agent-tree-delegation-entries-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lead.md"),
        file("lead", "tools: Agent(code-reviewer), Read"),
    )
    .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
    let loaded = Catalog::load_dirs([fixtures.join("claude"), fixtures.join("pi"), dir.clone()]);
    let _ = std::fs::remove_dir_all(&dir);
    // The fixtures hold deliberately broken files (claude/planner.md, pi/context-builder.md).
    let ours: Vec<_> = loaded
        .problems
        .iter()
        .filter(|p| p.to_string().contains("lead.md"))
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
    let catalog = loaded.catalog;
    let lead = catalog.get("lead").unwrap();
    assert_eq!(
        lead.allowed_subagents,
        SubagentAllowance::only(["code-reviewer"])
    );
    let problems: Vec<String> = catalog
        .tool_problems(["read"])
        .into_iter()
        .map(|p| p.to_string())
        .filter(|p| p.contains("lead"))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn("scout", "go"),
                Turn::spawn("code-reviewer", "go"),
                Turn::answer("done"),
            ],
        )
        .script("code-reviewer", [Turn::answer("reviewed")]);
    let tree = tree_with_ok_tools(model.clone(), catalog, &["read"]).await;
    tokio::time::timeout(
        GUARD,
        run_admitted(&tree, SpawnRequest::new("lead", "lead")),
    )
    .await
    .unwrap();
    let log = model.log_of(AgentId::new(1));
    assert!(log[1].results[0].is_error, "{:?}", log[1].results);
    assert!(!log[2].results[0].is_error, "{:?}", log[2].results);
    assert!(
        tools(&model, AgentId::new(1), 0)
            .iter()
            .any(|t| t == "Agent")
    );
}
