//! Agent files as people keep them on disk: a malformed file is reported naming the file
//! and the field, and Claude Code's own spellings (`background`, `Agent(...)` in `tools`)
//! mean what they mean there.

use agent_tree_actors::Catalog;

use crate::common::scratch;
use crate::desk::{ANALYST, WEB};

/// The agent files `files` (`(file name, text)`), written to a fresh directory named
/// `name`, loaded.
fn loaded_from(name: &str, files: &[(&str, &str)]) -> agent_tree_actors::LoadedCatalog {
    let dir = scratch(name);
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    Catalog::load_dir(&dir)
}

/// Loading malformed agent files: each error names the file and the field.
#[test]
fn each_malformed_agent_file_is_reported_naming_the_file_and_the_field() {
    let loaded = loaded_from(
        "malformed",
        &[
            (
                "bad-yaml.md",
                "---\nname: bad-yaml\ndescription: [unclosed\n---\nx\n",
            ),
            ("no-name.md", "---\ndescription: Has no name\n---\nx\n"),
            (
                "tools-number.md",
                "---\nname: tools-number\ntools: 5\n---\nx\n",
            ),
            (
                "tools-map.md",
                "---\nname: tools-map\ntools:\n  read: true\n---\nx\n",
            ),
            (
                "tools-list-mixed.md",
                "---\nname: tools-list-mixed\ntools: [Read, 7]\n---\nx\n",
            ),
            ("dup-1.md", "---\nname: twin\n---\nx\n"),
            ("dup-2.md", "---\nname: twin\n---\ny\n"),
            ("name-number.md", "---\nname: 42\n---\nx\n"),
            (
                "desc-list.md",
                "---\nname: desc-list\ndescription: [a, b]\n---\nx\n",
            ),
        ],
    );
    for p in &loaded.problems {
        eprintln!("problem: {p}");
    }
    let names: Vec<_> = loaded
        .catalog
        .definitions()
        .map(|d| d.name.clone())
        .collect();
    eprintln!("loaded: {names:?}");
    let text: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
    let has = |file: &str, field: &str| text.iter().any(|t| t.contains(file) && t.contains(field));
    assert!(has("bad-yaml.md", "line"));
    assert!(has("tools-number.md", "`tools`"));
    assert!(has("tools-map.md", "`tools`"));
    assert!(has("tools-list-mixed.md", "`tools`"));
    assert!(has("dup-2.md", "dup-1.md"));
    assert!(has("name-number.md", "`name`"));
    assert!(has("desc-list.md", "`description`"));
}

/// Claude Code's subagent frontmatter `background: true` ("always run this subagent as a
/// background task") is read as the crate's `run_in_background`, or at least reported as a
/// load problem naming the key; it is never silently dropped, which would run the agent in
/// the foreground.
#[test]
fn claude_codes_background_field_is_never_silently_dropped() {
    let loaded = loaded_from(
        "background",
        &[(
            "watcher.md",
            "---\nname: watcher\ndescription: Watches the deploy in the background\ntools: Read, Bash\nbackground: true\n---\nYou watch.\n",
        )],
    );
    let watcher = loaded.catalog.resolve("watcher").unwrap();
    assert!(
        watcher.run_in_background || !loaded.problems.is_empty(),
        "Claude Code's `background: true` was silently ignored: run_in_background = {}, problems = {:?}",
        watcher.run_in_background,
        loaded.problems
    );
}

/// Claude Code grants and restricts delegation in `tools`: `Agent(web-researcher, analyst)`
/// (older: `Task(...)`). A lead written so may start exactly those types, or a tool problem
/// names the whole entry and points at `allowed_subagents`; the desk never silently becomes a
/// single agent.
#[test]
fn claude_codes_agent_tool_syntax_delegates_or_is_explained() {
    let loaded = loaded_from(
        "agent-syntax",
        &[
            (
                "lead.md",
                "---\nname: lead\ndescription: Runs the desk\ntools: Agent(web-researcher, analyst), Read\nmodel: opus\n---\nYou lead.\n",
            ),
            ("web-researcher.md", WEB),
            ("analyst.md", ANALYST),
        ],
    );
    let lead = loaded.catalog.resolve("lead").unwrap().clone();
    let delegates = lead.allowed_subagents != agent_tree_protocol::SubagentAllowance::default();
    let hints: Vec<String> = loaded
        .catalog
        .tool_problems(["read"])
        .iter()
        .map(ToString::to_string)
        .filter(|p| p.contains("\"lead\""))
        .collect();
    let explained = hints
        .iter()
        .any(|p| p.contains("Agent(web-researcher, analyst)") && p.contains("allowed_subagents"));
    assert!(
        delegates || explained,
        "`tools: Agent(web-researcher, analyst), Read` gave the lead no delegation; \
         load problems {:?}; its tool problems: {hints:#?}",
        loaded.problems
    );
}
