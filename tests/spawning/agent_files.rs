//! Agent files users already have, read as untrusted input: directories in the formats of
//! public Claude Code (`.claude/agents`) and pi (`.pi/agents`) collections, each with a
//! `README.md` and one malformed file among valid ones (`tests/fixtures/agents/`).
//!
//! Loading keeps every valid file and reports the bad one (file and field); the strict form
//! fails. Tool names as those files write them (`Read`, `*, ext:...`) reach the tools an
//! application registered in lower case; unknown names are reported, ambiguous ones refused.
//! Hostile files (an alias bomb, a link to `/dev/zero`, a FIFO, an oversize file) are refused
//! by name, in bounded time and memory.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_tree::prelude::*;
use agent_tree::protocol::ListField;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{
    CatalogError, LoadedCatalog, MAX_AGENT_FILE_BYTES, SkipReason, ToolProblem, TreeBuilder,
};

use crate::support::harness::{a, ok_tool, results, tools};

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
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "agent-tree-agent-files-{}-{}-{test}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
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

#[test]
fn claude_files_load_and_the_malformed_one_is_reported_with_a_quote_hint() {
    let loaded = Catalog::load_dir(fixture("claude"));
    assert_eq!(
        names(&loaded.catalog),
        [
            "code-reviewer",
            "debugger",
            "docs-writer",
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
    assert_eq!(problem_files(&loaded), [("planner.md".to_owned(), None)]);
    let CatalogError::Yaml { hint, .. } = &loaded.problems[0] else {
        panic!("{:?}", loaded.problems[0]);
    };
    assert_eq!(
        hint.as_deref(),
        Some("quote the value: description: \"Plans multi-step work. Use when: a task...\"")
    );
    let shown = loaded.problems[0].to_string();
    assert!(
        shown.contains("planner.md: invalid YAML in frontmatter: "),
        "{shown}"
    );
    assert!(
        shown.contains("at line 3 column"),
        "the file's line: {shown}"
    );
    assert!(
        shown.ends_with(
            "(quote the value: description: \"Plans multi-step work. Use when: a task...\")"
        ),
        "{shown}"
    );

    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(file_name(&loaded.skipped[0].file), "README.md");
    assert_eq!(loaded.skipped[0].reason, SkipReason::NoFrontmatter);
    assert!(!loaded.is_clean());
}

#[test]
fn pi_files_load_with_star_and_extension_selectors() {
    let loaded = Catalog::load_dir(fixture("pi"));
    assert_eq!(
        names(&loaded.catalog),
        [
            "auditor",
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

    // context-builder.md writes `max_turns: unlimited`.
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

#[test]
fn strict_mode_fails_on_the_malformed_files() {
    let err = Catalog::load_dir_strict(fixture("claude")).unwrap_err();
    assert!(
        matches!(&err, CatalogError::Yaml { file, .. } if file.ends_with("planner.md")),
        "{err:?}"
    );
    let err = Catalog::load_dirs_strict([fixture("claude"), fixture("pi")]).unwrap_err();
    let CatalogError::Many(problems) = err else {
        panic!("two problems, got {err:?}");
    };
    assert_eq!(problems.len(), 2);
    assert!(matches!(&problems[1], CatalogError::Field { field, .. } if field == "max_turns"));
    // A README alone is no problem, strict or not.
    let scratch = Scratch::new("strict-readme");
    scratch.write("README.md", "# Agents\n");
    scratch.write("good.md", GOOD);
    assert_eq!(
        names(&Catalog::load_dir_strict(&scratch.0).unwrap()),
        ["good"]
    );
    // The lenient load of both directories keeps all twelve valid files.
    let both = Catalog::load_dirs([fixture("claude"), fixture("pi")]);
    assert_eq!(both.problems.len(), 2);
    assert_eq!(both.skipped.len(), 2);
    // No name is in both; Claude's broken planner.md defines nothing, so pi's `planner`
    // is the only one.
    assert_eq!(both.catalog.len(), 12);
    assert!(
        both.catalog
            .get("planner")
            .unwrap()
            .prompt
            .starts_with("You are a planning")
    );
}

/// A tree with the user tools an application registers, all in lower case.
async fn tree_with(model: ScriptedModel, catalog: Catalog, registered: &[&'static str]) -> Tree {
    let mut builder: TreeBuilder = Tree::builder().catalog(catalog).model(model);
    for &name in registered {
        builder = builder.tool(ok_tool(name)).expect("tool names are free");
    }
    builder.build().await.expect("the tree builds")
}

#[tokio::test(start_paused = true)]
async fn claude_tool_names_reach_lower_case_registrations_and_unknown_ones_are_reported() {
    let catalog = Catalog::load_dir(fixture("claude")).catalog;
    let registered = ["read", "write", "edit", "grep", "glob", "bash"];
    let model = ScriptedModel::new()
        .script(
            "code-reviewer",
            Script::new([
                Turn::calls([Call::tool(
                    "read",
                    serde_json::json!({"path": "src/lib.rs"}),
                )]),
                Turn::answer("reviewed"),
            ]),
        )
        .script("web-researcher", Script::new([Turn::answer("researched")]));
    let tree = tree_with(model.clone(), catalog.clone(), &registered).await;

    let outcome = tree
        .run(SpawnRequest::new("code-reviewer", "review"))
        .await
        .unwrap();
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
    let outcome = tree
        .run(SpawnRequest::new("web-researcher", "look it up"))
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
async fn a_name_matching_two_registrations_by_case_is_refused() {
    let catalog = Catalog::load_dir(fixture("claude")).catalog;
    let model = ScriptedModel::new().script(
        "test-runner",
        Script::new([
            Turn::calls([Call::tool("READ", serde_json::json!({}))]),
            Turn::answer("ran"),
        ]),
    );
    // `tools: Bash, Read, Edit` with both `read` and `READ` registered.
    let registered = ["read", "READ", "bash"];
    let tree = tree_with(model.clone(), catalog.clone(), &registered).await;
    let outcome = tree
        .run(SpawnRequest::new("test-runner", "test"))
        .await
        .unwrap();
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
        .script("researcher", Script::new([Turn::answer("found")]))
        .script("auditor", Script::new([Turn::answer("audited")]));
    let tree = tree_with(model.clone(), catalog.clone(), &registered).await;
    for agent_type in ["researcher", "auditor"] {
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
    let dir = scratch.0.clone();
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

#[cfg(unix)]
#[test]
fn a_link_to_dev_zero_is_refused_without_reading_and_a_link_to_a_file_is_followed() {
    let scratch = Scratch::new("dev-zero");
    std::os::unix::fs::symlink("/dev/zero", scratch.0.join("zero.md")).unwrap();
    let target = scratch.write("real.txt", GOOD);
    std::os::unix::fs::symlink(&target, scratch.0.join("linked.md")).unwrap();
    let dir = scratch.0.clone();
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

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_hanging() {
    let scratch = Scratch::new("fifo");
    let fifo = scratch.0.join("x.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    scratch.write("good.md", GOOD);
    let dir = scratch.0.clone();
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

#[test]
fn an_oversize_file_is_refused_and_one_at_the_limit_loads() {
    let scratch = Scratch::new("oversize");
    let limit = usize::try_from(MAX_AGENT_FILE_BYTES).unwrap();
    let head = "---\ndescription: Big.\n---\n";
    let at_limit = format!("{head}{}", "x".repeat(limit - head.len()));
    assert_eq!(at_limit.len(), limit);
    scratch.write("at-limit.md", &at_limit);
    scratch.write("over.md", format!("{at_limit}y"));
    let loaded = Catalog::load_dir(&scratch.0);
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
