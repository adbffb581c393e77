//! Agent files users already have, read as untrusted input: directories in the formats of
//! public Claude Code (`.claude/agents`) and pi (`.pi/agents`) collections, each with a
//! `README.md` and one malformed file among valid ones (`tests/fixtures/agents/`).
//!
//! Loading keeps every valid file and reports the bad one (file and field); the strict form
//! fails. What those tools accept and YAML or agent-tree reads differently (an unquoted value
//! holding `: `, pi's `max_turns: 0`, `*, ext:...` and `isolated`, names differing only in
//! case) loads with a note naming the file and field. A collection kept as category folders
//! (`tests/fixtures/agents/claude-categories`) loads whole. Tool names as those files write
//! them (`Read`, `*, ext:...`) reach the tools an application registered in lower case;
//! unknown names are reported, ambiguous ones refused. Hostile files and directories (an
//! alias bomb, a link to `/dev/zero`, a FIFO, an oversize file, a link loop) are refused or
//! skipped by name, in bounded time and memory.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_tree::prelude::*;
use agent_tree::protocol::ListField;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{
    CatalogError, LoadedCatalog, MAX_AGENT_DIR_DEPTH, MAX_AGENT_FILE_BYTES, NoteKind, SkipReason,
    ToolProblem, TreeBuilder,
};

use crate::support::harness::{a, ok_tool, results, tools};
use crate::support::journal::TempDir;
use crate::support::run_admitted;

fn fixture(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents")
        .join(dir)
}

fn names(catalog: &Catalog) -> Vec<&str> {
    catalog.definitions().map(|d| d.name.as_str()).collect()
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The file every problem names, and the field where there is one.
fn problem_files(loaded: &LoadedCatalog) -> Vec<(String, Option<String>)> {
    loaded
        .problems
        .iter()
        .map(|p| match p {
            CatalogError::Field { file, field, .. } => (file_name(file), Some(field.clone())),
            CatalogError::File { file, .. }
            | CatalogError::Yaml { file, .. }
            | CatalogError::NotAFile { file, .. }
            | CatalogError::TooLarge { file, .. }
            | CatalogError::ReadFile { file, .. }
            | CatalogError::Utf8 { file, .. } => (file_name(file), None),
            other => panic!("not a file problem: {other:?}"),
        })
        .collect()
}

/// A directory under the system's temp dir, unique per process and call, removed on drop.
struct Scratch(TempDir);

impl Scratch {
    fn new(test: &str) -> Self {
        Scratch(TempDir::new(&format!("agent-files-{test}")))
    }

    /// The directory itself.
    fn dir(&self) -> &Path {
        self.0.path()
    }

    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.file(name);
        fs::write(&path, contents).unwrap();
        path
    }
}

/// Runs `load` on another thread and fails the test, instead of hanging it, if it does not
/// return within `limit` (a hung loader thread is left behind; the test binary exits).
fn bounded<T: Send + 'static>(limit: Duration, load: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(load());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("the loader did not return within {limit:?}"))
}

const GOOD: &str = "---\ndescription: A good agent.\n---\nYou are good.\n";

/// The (file, field, kind) of every note.
fn notes(loaded: &LoadedCatalog) -> Vec<(String, String, NoteKind)> {
    loaded
        .notes
        .iter()
        .map(|n| (file_name(&n.file), n.field.clone(), n.kind.clone()))
        .collect()
}

/// A collection's unquoted `description: ... Use when: ...` loads as Claude Code loads it: the
/// value is re-quoted, read as written, and the loader says so (a note, not a problem).
#[test]
fn claude_files_load_and_an_unquoted_colon_value_is_requoted_and_noted() {
    let loaded = Catalog::load_dir(fixture("claude"));
    assert_eq!(
        names(&loaded.catalog),
        [
            "code-reviewer",
            "debugger",
            "docs-writer",
            "planner",
            "security-auditor",
            "test-runner",
            "web-researcher"
        ]
    );
    let reviewer = loaded.catalog.get("code-reviewer").unwrap();
    assert_eq!(
        reviewer.tools,
        ToolSet::only(["Read", "Grep", "Glob", "Bash"])
    );
    assert_eq!(reviewer.model.as_deref(), Some("sonnet"));
    let auditor = loaded.catalog.get("security-auditor").unwrap();
    assert_eq!(
        auditor.description,
        "Use when: a change touches authentication, parsing of untrusted input, or secrets."
    );
    assert_eq!(auditor.tools, ToolSet::All, "no `tools` is every tool");
    assert_eq!(loaded.catalog.get("docs-writer").unwrap().model, None);

    // planner.md writes `description: Plans multi-step work. Use when: ...` unquoted.
    let planner = loaded.catalog.get("planner").unwrap();
    assert_eq!(
        planner.description,
        "Plans multi-step work. Use when: a task touches more than three files."
    );
    assert_eq!(planner.tools, ToolSet::only(["Read", "Grep", "Glob"]));
    assert!(loaded.is_clean(), "{:?}", loaded.problems);
    assert_eq!(
        notes(&loaded),
        [(
            "planner.md".to_owned(),
            "description".to_owned(),
            NoteKind::Requoted { line: 3 }
        )]
    );
    let shown = loaded.notes[0].to_string();
    assert!(
        shown.ends_with(
            "planner.md: field `description`: re-quoted the value on line 3, which holds `: ` \
             (unquoted, YAML reads it as a mapping and refuses it; pi and Claude Code read it \
             as text): quote it to silence this note"
        ),
        "{shown}"
    );

    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(file_name(&loaded.skipped[0].file), "README.md");
    assert_eq!(loaded.skipped[0].reason, SkipReason::NoFrontmatter);
}

/// pi's files load as pi means them: `*, ext:...` is every tool (noted as widened: there are
/// no extensions to narrow), `max_turns: 0` is no turn limit of the file's own (noted), and an
/// isolated agent's extension selectors are dropped, as pi drops them (noted).
#[test]
fn pi_files_load_as_pi_means_them_and_each_difference_is_noted() {
    let loaded = Catalog::load_dir(fixture("pi"));
    assert_eq!(
        names(&loaded.catalog),
        [
            "auditor",
            "explorer",
            "planner",
            "researcher",
            "reviewer",
            "scout",
            "worker"
        ]
    );
    let catalog = &loaded.catalog;
    // `tools: "*, ext:pi-web-access/web_search, ext:pi-web-access/fetch_content"`.
    assert_eq!(catalog.get("researcher").unwrap().tools, ToolSet::All);
    assert_eq!(
        catalog.get("scout").unwrap().tools,
        ToolSet::only(["read", "grep", "find", "ls", "bash"])
    );
    let auditor = catalog.get("auditor").unwrap();
    assert_eq!(auditor.disallowed_tools, ["write", "edit"]);
    assert_eq!(auditor.max_turns, Some(30));
    assert!(catalog.get("reviewer").unwrap().isolated);
    assert_eq!(catalog.get("worker").unwrap().tools, ToolSet::All);
    // explorer.md: `isolated: true`, `max_turns: 0`, `tools: read, ..., ext:.../web_search`.
    let explorer = catalog.get("explorer").unwrap();
    assert!(explorer.isolated);
    assert_eq!(explorer.max_turns, None, "the depth-scaled default");
    assert_eq!(
        explorer.tools,
        ToolSet::only(["read", "grep", "find", "ls"])
    );
    assert_eq!(
        notes(&loaded),
        [
            (
                "explorer.md".to_owned(),
                "tools".to_owned(),
                NoteKind::SelectorsDropped {
                    selectors: vec!["ext:pi-web-access/web_search".into()]
                }
            ),
            (
                "explorer.md".to_owned(),
                "max_turns".to_owned(),
                NoteKind::UnlimitedTurns
            ),
            (
                "researcher.md".to_owned(),
                "tools".to_owned(),
                NoteKind::SelectorsWidened {
                    selectors: vec![
                        "ext:pi-web-access/web_search".into(),
                        "ext:pi-web-access/fetch_content".into()
                    ]
                }
            ),
        ]
    );

    // context-builder.md writes `max_turns: unlimited`, a word pi does not have either.
    assert_eq!(
        problem_files(&loaded),
        [(
            "context-builder.md".to_owned(),
            Some("max_turns".to_owned())
        )]
    );
    assert_eq!(
        loaded.problems[0].to_string(),
        format!(
            "{}: field `max_turns`: expected a positive integer, found \"unlimited\"",
            fixture("pi").join("context-builder.md").display()
        )
    );
    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(file_name(&loaded.skipped[0].file), "README.md");
}

/// A strict load fails on the first problem (file and field) and never on a note or a
/// README; a lenient load of several directories keeps every valid file, a later
/// directory's type overriding an earlier one of the same name.
#[test]
fn strict_mode_fails_on_problems_and_never_on_notes() {
    // The Claude Code directory has notes and no problem.
    let claude = Catalog::load_dir_strict(fixture("claude")).unwrap();
    assert_eq!(claude.len(), 7);
    let err = Catalog::load_dir_strict(fixture("pi")).unwrap_err();
    assert!(
        matches!(&err, CatalogError::Field { file, field, .. }
            if file.ends_with("context-builder.md") && field == "max_turns"),
        "{err:?}"
    );
    let err = Catalog::load_dirs_strict([fixture("claude"), fixture("pi")]).unwrap_err();
    assert!(
        matches!(&err, CatalogError::Field { field, .. } if field == "max_turns"),
        "one problem, as itself: {err:?}"
    );
    // A README alone is no problem, strict or not.
    let scratch = Scratch::new("strict-readme");
    scratch.write("README.md", "# Agents\n");
    scratch.write("good.md", GOOD);
    assert_eq!(
        names(&Catalog::load_dir_strict(scratch.dir()).unwrap()),
        ["good"]
    );
    // The lenient load of both directories keeps all thirteen valid files.
    let both = Catalog::load_dirs([fixture("claude"), fixture("pi")]);
    assert_eq!(both.problems.len(), 1);
    assert_eq!(both.skipped.len(), 2);
    assert_eq!(both.notes.len(), 4);
    // `planner` is in both: the later directory's (pi's) overrides Claude Code's.
    assert_eq!(both.catalog.len(), 13);
    assert!(
        both.catalog
            .get("planner")
            .unwrap()
            .prompt
            .starts_with("You are a planning")
    );
}

/// A collection kept as category folders (`01-core-development/`, ...) loads whole, as
/// Claude Code loads it: every subfolder's agents, READMEs skipped, hidden folders
/// (`.claude-plugin/`) and other files ignored, in reading order.
#[test]
fn a_directory_of_category_subfolders_loads_every_agent() {
    let dir = fixture("claude-categories");
    let loaded = Catalog::load_dir(&dir);
    assert!(loaded.is_clean(), "{:?}", loaded.problems);
    assert_eq!(
        names(&loaded.catalog),
        [
            "api-designer",
            "backend-developer",
            "rust-engineer",
            "code-reviewer",
            "debugger",
            "whimsy-injector"
        ]
    );
    assert_eq!(
        loaded
            .catalog
            .get("rust-engineer")
            .unwrap()
            .model
            .as_deref(),
        Some("opus")
    );
    assert_eq!(loaded.catalog.get("code-reviewer").unwrap().model, None);
    // contains-studio's one-line description with `Context: ...` and `user: "..."` in it.
    let whimsy = loaded.catalog.get("whimsy-injector").unwrap();
    assert!(
        whimsy
            .description
            .ends_with(r#"user: "We finished the onboarding screens"\nassistant: "I'll use the whimsy-injector agent to add moments of delight."\n</example>"#),
        "{}",
        whimsy.description
    );
    assert_eq!(
        notes(&loaded),
        [(
            "whimsy-injector.md".to_owned(),
            "description".to_owned(),
            NoteKind::Requoted { line: 3 }
        )]
    );
    let skipped: Vec<PathBuf> = loaded
        .skipped
        .iter()
        .map(|s| s.file.strip_prefix(&dir).unwrap().to_owned())
        .collect();
    assert_eq!(
        skipped,
        [
            PathBuf::from("01-core-development/README.md"),
            PathBuf::from("README.md")
        ]
    );
}

/// A collection's folders are one namespace: the same type in two folders is a duplicate,
/// reported naming both files, and the first read (`a/` before `b/`) is loaded.
#[test]
fn the_same_type_in_two_subfolders_is_a_duplicate_naming_both_files() {
    let scratch = Scratch::new("subfolder-duplicate");
    for sub in ["a", "b", "b/deeper"] {
        fs::create_dir_all(scratch.dir().join(sub)).unwrap();
    }
    scratch.write("a/reviewer.md", "---\nmodel: first\n---\nYou review.\n");
    let second = scratch.write("b/deeper/reviewer.md", "---\nmodel: second\n---\n");
    scratch.write("b/writer.md", GOOD);
    scratch.write("top.md", GOOD);
    let loaded = Catalog::load_dir(scratch.dir());
    assert_eq!(names(&loaded.catalog), ["reviewer", "writer", "top"]);
    assert_eq!(
        loaded.catalog.get("reviewer").unwrap().model.as_deref(),
        Some("first")
    );
    assert_eq!(
        problem_files(&loaded),
        [("reviewer.md".to_owned(), Some("name".to_owned()))]
    );
    let CatalogError::Field { file, message, .. } = &loaded.problems[0] else {
        panic!("{:?}", loaded.problems[0]);
    };
    assert_eq!(file, &second);
    assert_eq!(
        message,
        &format!(
            "agent type \"reviewer\" is already defined in {}",
            scratch.dir().join("a/reviewer.md").display()
        )
    );
}

/// Links to directories are followed, but a directory is read once: a link back into the
/// tree (a loop) ends at once, listed as skipped, and nothing is loaded twice.
#[cfg(unix)]
#[test]
fn a_link_back_into_the_agent_directory_is_read_once() {
    let scratch = Scratch::new("link-loop");
    fs::create_dir_all(scratch.dir().join("team")).unwrap();
    scratch.write("team/lead.md", GOOD);
    std::os::unix::fs::symlink(scratch.dir(), scratch.dir().join("team/loop")).unwrap();
    let elsewhere = Scratch::new("link-target");
    elsewhere.write("shared.md", GOOD);
    std::os::unix::fs::symlink(elsewhere.dir(), scratch.dir().join("linked")).unwrap();
    let dir = scratch.dir().to_path_buf();
    let loaded = bounded(Duration::from_secs(60), move || Catalog::load_dir(dir));
    assert!(loaded.is_clean(), "{:?}", loaded.problems);
    assert_eq!(names(&loaded.catalog), ["shared", "lead"]);
    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(loaded.skipped[0].file, scratch.dir().join("team/loop"));
    assert_eq!(loaded.skipped[0].reason, SkipReason::AlreadyRead);
}

/// Subfolders deeper than `MAX_AGENT_DIR_DEPTH` are skipped and listed, never read.
#[test]
fn a_subfolder_too_deep_is_skipped_and_listed() {
    let scratch = Scratch::new("too-deep");
    let mut deepest = scratch.dir().to_path_buf();
    for level in 1..=MAX_AGENT_DIR_DEPTH + 1 {
        deepest = deepest.join(format!("l{level}"));
        fs::create_dir(&deepest).unwrap();
        fs::write(deepest.join(format!("agent-{level}.md")), GOOD).unwrap();
    }
    let loaded = Catalog::load_dir(scratch.dir());
    assert_eq!(loaded.catalog.len(), MAX_AGENT_DIR_DEPTH);
    assert!(
        loaded
            .catalog
            .get(&format!("agent-{MAX_AGENT_DIR_DEPTH}"))
            .is_some()
    );
    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(loaded.skipped[0].file, deepest);
    assert_eq!(loaded.skipped[0].reason, SkipReason::TooDeep);
}

/// Two types whose names differ only in case load (each resolves by its exact name) and the
/// loader warns: a note on the later file naming the other, in one directory or across two.
#[test]
fn names_differing_only_in_case_load_with_a_note() {
    let user = Scratch::new("case-user");
    let project = Scratch::new("case-project");
    let first = user.write("Reviewer.md", "---\ndescription: Reviews.\n---\n");
    let second = project.write("reviewer.md", "---\ndescription: Also reviews.\n---\n");
    let loaded = Catalog::load_dirs([user.dir(), project.dir()]);
    assert!(loaded.is_clean());
    assert_eq!(names(&loaded.catalog), ["Reviewer", "reviewer"]);
    assert_eq!(
        notes(&loaded),
        [(
            "reviewer.md".to_owned(),
            "name".to_owned(),
            NoteKind::CaseTwin {
                name: "reviewer".into(),
                other: "Reviewer".into(),
                other_file: first.clone(),
            }
        )]
    );
    assert_eq!(loaded.notes[0].file, second);
    assert!(matches!(
        loaded.catalog.resolve("REVIEWER"),
        Err(SpawnError::AmbiguousType { .. })
    ));
    // In one directory too, named by the `name` field.
    project.write("x.md", "---\nname: REVIEWER\n---\n");
    let loaded = Catalog::load_dir(project.dir());
    assert_eq!(names(&loaded.catalog), ["reviewer", "REVIEWER"]);
    assert!(matches!(
        &notes(&loaded)[..],
        [(file, field, NoteKind::CaseTwin { name, other, .. })]
            if file == "x.md" && field == "name" && name == "REVIEWER" && other == "reviewer"
    ));
}

/// A file saved with CRLF line ends loads as if saved with LF: no carriage return reaches the
/// prompt or a value.
#[test]
fn a_crlf_file_loads_without_carriage_returns() {
    let scratch = Scratch::new("crlf");
    scratch.write(
        "windows.md",
        "---\r\nname: windows\r\ndescription: |\r\n  Saved on Windows.\r\n  Twice.\r\ntools: Read, Grep\r\n---\r\n\r\nYou were saved with CRLF.\r\n\r\nStill you.\r\n",
    );
    let loaded = Catalog::load_dir_strict(scratch.dir()).unwrap();
    let windows = loaded.get("windows").unwrap();
    assert_eq!(windows.prompt, "You were saved with CRLF.\n\nStill you.");
    assert_eq!(windows.description, "Saved on Windows.\nTwice.");
    assert_eq!(windows.tools, ToolSet::only(["Read", "Grep"]));
}

/// An agent file sets its own sampling with the APIs' own key names, and a value out of range
/// is refused naming the file and the field.
#[test]
fn sampling_keys_in_a_file_are_the_agents_sampling_and_out_of_range_is_refused() {
    let scratch = Scratch::new("sampling");
    scratch.write(
        "picker.md",
        "---\nname: picker\ndescription: Picks one.\ntemperature: 0.2\ntop_p: 0.9\nseed: 7\nstop: [\"END\"]\nmax_tokens: 300\ntool_choice: required\nparallel_tool_calls: false\n---\nPick.\n",
    );
    let loaded = Catalog::load_dir_strict(scratch.dir()).unwrap();
    let sampling = &loaded.get("picker").unwrap().sampling;
    assert_eq!(sampling.temperature, Some(0.2));
    assert_eq!(sampling.top_p, Some(0.9));
    assert_eq!(sampling.seed, Some(7));
    assert_eq!(sampling.stop, ["END"]);
    assert_eq!(sampling.max_output_tokens, Some(300));
    assert_eq!(
        sampling.tool_choice,
        Some(agent_tree::protocol::ToolChoice::Required)
    );
    assert_eq!(sampling.parallel_tool_calls, Some(false));

    scratch.write(
        "hot.md",
        "---\nname: hot\ndescription: Too hot.\ntemperature: 3\n---\nBurn.\n",
    );
    let err = Catalog::load_dir_strict(scratch.dir())
        .unwrap_err()
        .to_string();
    assert!(err.contains("hot.md"), "{err}");
    assert!(err.contains("`temperature`"), "{err}");
}

/// A tree with the user tools an application registers, all in lower case.
async fn tree_with(model: ScriptedModel, catalog: Catalog, registered: &[&'static str]) -> Tree {
    let mut builder: TreeBuilder = Tree::builder().catalog(catalog).model(model);
    for &name in registered {
        builder = builder.tool(ok_tool(name)).expect("tool names are free");
    }
    builder.build().await.expect("the tree builds")
}

/// Tool names as Claude Code files write them (`Read`, `Bash`) reach the tools the
/// application registered in lower case, and names no registration matches are reported
/// with their agent type and field, not offered.
#[tokio::test(start_paused = true)]
async fn claude_tool_names_reach_lower_case_registrations_and_unknown_ones_are_reported() {
    let catalog = Catalog::load_dir(fixture("claude")).catalog;
    let registered = ["read", "write", "edit", "grep", "glob", "bash"];
    let model = ScriptedModel::new()
        .script(
            "code-reviewer",
            [
                Turn::calls([Call::tool(
                    "read",
                    serde_json::json!({"path": "src/lib.rs"}),
                )]),
                Turn::answer("reviewed"),
            ],
        )
        .script("web-researcher", [Turn::answer("researched")]);
    let tree = tree_with(model.clone(), catalog.clone(), &registered).await;

    let outcome = run_admitted(&tree, SpawnRequest::new("code-reviewer", "review")).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    // `tools: Read, Grep, Glob, Bash` gives exactly those, by their registered names.
    let offered = tools(&model, a(1), 0);
    let user: Vec<&str> = offered
        .iter()
        .map(String::as_str)
        .filter(|t| registered.contains(t))
        .collect();
    assert_eq!(user, ["bash", "glob", "grep", "read"]);
    let read = results(&model, a(1), 1);
    assert!(!read[0].is_error, "{}", read[0].content);
    assert_eq!(read[0].content, "read: ok");

    // `tools: WebFetch, WebSearch, Read` runs with `read`, and the two others are reported.
    let outcome = run_admitted(&tree, SpawnRequest::new("web-researcher", "look it up")).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    let offered = tools(&model, a(2), 0);
    assert!(offered.iter().any(|t| t == "read"), "{offered:?}");
    assert!(!offered.iter().any(|t| t == "bash"), "{offered:?}");
    let problems = catalog.tool_problems(registered);
    let unknown: Vec<(&str, ListField, &str)> = problems
        .iter()
        .map(|p| match p {
            ToolProblem::Unknown {
                agent_type,
                field,
                tool,
                ..
            } => (agent_type.as_str(), *field, tool.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        unknown,
        [
            ("web-researcher", ListField::Tools, "WebFetch"),
            ("web-researcher", ListField::Tools, "WebSearch"),
        ]
    );
    assert!(
        problems[0]
            .to_string()
            .contains("names \"WebFetch\", which is no registered tool"),
        "{}",
        problems[0]
    );
    tree.shutdown().await;
}

/// A tool name that matches two registrations differing only in case is offered as neither:
/// a call to either is an error result, and the ambiguity is reported with its candidates.
#[tokio::test(start_paused = true)]
async fn a_name_matching_two_registrations_by_case_is_refused() {
    let catalog = Catalog::load_dir(fixture("claude")).catalog;
    let model = ScriptedModel::new().script(
        "test-runner",
        [
            Turn::calls([Call::tool("READ", serde_json::json!({}))]),
            Turn::answer("ran"),
        ],
    );
    // `tools: Bash, Read, Edit` with both `read` and `READ` registered.
    let registered = ["read", "READ", "bash"];
    let tree = tree_with(model.clone(), catalog.clone(), &registered).await;
    let outcome = run_admitted(&tree, SpawnRequest::new("test-runner", "test")).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    let offered = tools(&model, a(1), 0);
    assert!(offered.iter().any(|t| t == "bash"), "{offered:?}");
    assert!(
        !offered.iter().any(|t| t.eq_ignore_ascii_case("read")),
        "neither `read` nor `READ`: {offered:?}"
    );
    // A call to one of them anyway is an error result.
    assert!(results(&model, a(1), 1)[0].is_error);
    let ambiguous: Vec<_> = catalog
        .tool_problems(registered)
        .into_iter()
        .filter(|p| matches!(p, ToolProblem::Ambiguous { agent_type, .. } if agent_type == "test-runner"))
        .collect();
    assert_eq!(
        ambiguous,
        [ToolProblem::Ambiguous {
            agent_type: "test-runner".into(),
            field: ListField::Tools,
            tool: "Read".into(),
            candidates: vec!["read".into(), "READ".into()],
        }]
    );
    tree.shutdown().await;
}

/// pi's `*` (with `ext:` selectors) grants every registered tool, less the file's
/// `disallowed_tools`; an isolated agent drops its extension tools as pi does, and unknown
/// names are reported.
#[tokio::test(start_paused = true)]
async fn pi_star_with_extension_selectors_gets_every_registered_tool() {
    let catalog = Catalog::load_dir(fixture("pi")).catalog;
    let registered = [
        "read",
        "bash",
        "web_search",
        "fetch_content",
        "write",
        "edit",
    ];
    let model = ScriptedModel::new()
        .script("researcher", [Turn::answer("found")])
        .script("auditor", [Turn::answer("audited")])
        .script("explorer", [Turn::answer("mapped")]);
    let tree = tree_with(model.clone(), catalog.clone(), &registered).await;
    for agent_type in ["researcher", "auditor", "explorer"] {
        let outcome = tree.run(SpawnRequest::new(agent_type, "go")).await.unwrap();
        assert!(outcome.is_completed(), "{}", outcome.summary());
    }
    let user = |n: u64| -> Vec<String> {
        let mut user: Vec<String> = tools(&model, a(n), 0)
            .into_iter()
            .filter(|t| registered.contains(&t.as_str()))
            .collect();
        user.sort();
        user
    };
    assert_eq!(
        user(1),
        [
            "bash",
            "edit",
            "fetch_content",
            "read",
            "web_search",
            "write"
        ]
    );
    // `tools: read, grep, find, bash` with `disallowed_tools: write, edit`.
    assert_eq!(user(2), ["bash", "read"]);
    // Isolated, its `ext:pi-web-access/web_search` dropped as pi drops it: no `web_search`.
    assert_eq!(user(3), ["read"]);
    let unknown: Vec<String> = catalog
        .tool_problems(registered)
        .into_iter()
        .filter_map(|p| match p {
            ToolProblem::Unknown {
                agent_type, tool, ..
            } if agent_type == "auditor" => Some(tool),
            _ => None,
        })
        .collect();
    assert_eq!(unknown, ["grep", "find"]);
    tree.shutdown().await;
}

/// Frontmatter whose YAML aliases expand past a bounded number of nodes is refused, naming
/// its file, in bounded time, and the directory's other files still load.
#[test]
fn an_alias_bomb_is_refused_naming_its_file_in_bounded_time() {
    let scratch = Scratch::new("alias-bomb");
    let mut bomb = format!(
        "---\nname: laughs\na: &a [{}]\n",
        vec!["lol"; 2_600].join(",")
    );
    for (name, prev) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
        let refs = vec![format!("*{prev}"); 2_600].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    bomb.push_str("---\nYou laugh.\n");
    assert!(bomb.len() > 40 * 1024, "{}", bomb.len());
    scratch.write("bomb.md", &bomb);
    scratch.write("good.md", GOOD);
    let dir = scratch.dir().to_path_buf();
    let started = Instant::now();
    let loaded = bounded(Duration::from_secs(60), move || Catalog::load_dir(dir));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(names(&loaded.catalog), ["good"]);
    assert_eq!(problem_files(&loaded), [("bomb.md".to_owned(), None)]);
    let shown = loaded.problems[0].to_string();
    assert!(
        shown.ends_with(
            "bomb.md: frontmatter expands to more than 10000 YAML nodes through YAML aliases \
             (`*name`); agent files need no aliases"
        ),
        "{shown}"
    );
}

/// A link to something other than a regular file (`/dev/zero`) is refused as not a file,
/// without being read, while a link to a regular file is followed and loads.
#[cfg(unix)]
#[test]
fn a_link_to_dev_zero_is_refused_without_reading_and_a_link_to_a_file_is_followed() {
    let scratch = Scratch::new("dev-zero");
    std::os::unix::fs::symlink("/dev/zero", scratch.dir().join("zero.md")).unwrap();
    let target = scratch.write("real.txt", GOOD);
    std::os::unix::fs::symlink(&target, scratch.dir().join("linked.md")).unwrap();
    let dir = scratch.dir().to_path_buf();
    let loaded = bounded(Duration::from_secs(60), move || Catalog::load_dir(dir));
    assert_eq!(names(&loaded.catalog), ["linked"]);
    assert_eq!(problem_files(&loaded), [("zero.md".to_owned(), None)]);
    assert!(
        matches!(
            &loaded.problems[0],
            CatalogError::NotAFile {
                kind: "character device",
                ..
            }
        ),
        "{:?}",
        loaded.problems[0]
    );
    assert!(
        loaded.problems[0]
            .to_string()
            .ends_with("zero.md: not a regular file (character device); agent files are regular files or links to them"),
        "{}",
        loaded.problems[0]
    );
}

/// A FIFO among agent files is refused as not a file without ever being opened, so loading
/// never blocks on it.
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_hanging() {
    let scratch = Scratch::new("fifo");
    let fifo = scratch.dir().join("x.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    scratch.write("good.md", GOOD);
    let dir = scratch.dir().to_path_buf();
    // Opening a FIFO for reading blocks until a writer comes: the loader must never open it.
    let loaded = bounded(Duration::from_secs(20), move || Catalog::load_dir(dir));
    assert_eq!(names(&loaded.catalog), ["good"]);
    assert_eq!(problem_files(&loaded), [("x.md".to_owned(), None)]);
    assert!(
        matches!(&loaded.problems[0], CatalogError::NotAFile { file, kind: "FIFO" } if file == &fifo),
        "{:?}",
        loaded.problems[0]
    );
}

/// An agent file larger than `MAX_AGENT_FILE_BYTES` is refused naming the limit, while one
/// of exactly that size loads.
#[test]
fn an_oversize_file_is_refused_and_one_at_the_limit_loads() {
    let scratch = Scratch::new("oversize");
    let limit = usize::try_from(MAX_AGENT_FILE_BYTES).unwrap();
    let head = "---\ndescription: Big.\n---\n";
    let at_limit = format!("{head}{}", "x".repeat(limit - head.len()));
    assert_eq!(at_limit.len(), limit);
    scratch.write("at-limit.md", &at_limit);
    scratch.write("over.md", format!("{at_limit}y"));
    let loaded = Catalog::load_dir(scratch.dir());
    assert_eq!(names(&loaded.catalog), ["at-limit"]);
    assert_eq!(problem_files(&loaded), [("over.md".to_owned(), None)]);
    assert!(
        matches!(&loaded.problems[0], CatalogError::TooLarge { limit, .. } if *limit == 256 * 1024),
        "{:?}",
        loaded.problems[0]
    );
    assert!(
        loaded.problems[0]
            .to_string()
            .ends_with("over.md: larger than the 262144 bytes an agent file may have")
    );
}
