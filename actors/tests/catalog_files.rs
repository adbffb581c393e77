//! Catalogs loaded from agent files: `.pi/agents`- and `.claude/agents`-style directories,
//! overrides across directories, and every problem of a malformed directory reported.

use std::fs;
use std::path::{Path, PathBuf};

use agent_tree_actors::{Catalog, CatalogError, SkipReason, SpawnError, parse_agent_file};
use agent_tree_protocol::{
    AgentDefinition, RestartPolicy, SettlePolicy, Strategy, SubagentAllowance, ToolSet, Wire,
};

fn fixture(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents")
        .join(dir)
}

fn names(catalog: &Catalog) -> Vec<&str> {
    catalog.definitions().map(|d| d.name.as_str()).collect()
}

/// A scratch directory removed on drop, unique per process and test.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agent-tree-catalog-files-{}-{test}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }

    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One problem: its file name, for a field error the field as spelled in the file, and the
/// message after the file's name.
#[derive(Debug, PartialEq)]
struct Problem {
    file: String,
    field: Option<String>,
    message: String,
}

fn problems(error: CatalogError) -> Vec<Problem> {
    let leaves = match error {
        CatalogError::Many(errors) => errors,
        single => vec![single],
    };
    leaves
        .into_iter()
        .map(|leaf| {
            let file_name = |file: &Path| file.file_name().unwrap().to_string_lossy().into_owned();
            match leaf {
                CatalogError::Field {
                    file,
                    field,
                    message,
                } => Problem {
                    file: file_name(&file),
                    field: Some(field),
                    message,
                },
                CatalogError::File { file, message } => Problem {
                    file: file_name(&file),
                    field: None,
                    message,
                },
                CatalogError::ReadDir { dir: ref file, .. }
                | CatalogError::ReadFile { ref file, .. }
                | CatalogError::Utf8 { ref file, .. }
                | CatalogError::Yaml { ref file, .. } => {
                    assert!(
                        std::error::Error::source(&leaf).is_some(),
                        "{leaf:?} keeps its source"
                    );
                    let shown = leaf.to_string();
                    Problem {
                        file: file_name(file),
                        field: None,
                        message: shown
                            .strip_prefix(&format!("{}: ", file.display()))
                            .unwrap_or_else(|| panic!("{shown:?} does not start with the file"))
                            .to_owned(),
                    }
                }
                other => panic!("not a file or field error: {other:?}"),
            }
        })
        .collect()
}

#[test]
fn pi_style_directory_loads_its_md_files_in_name_order() {
    let catalog = Catalog::load_dir_strict(fixture("pi")).unwrap();
    // notes.txt is no agent file; drafts/unfinished.md has no frontmatter, so it is skipped.
    assert_eq!(names(&catalog), ["planner", "reviewer", "scout", "worker"]);

    let planner = catalog.get("planner").unwrap();
    assert_eq!(
        **planner,
        AgentDefinition::new(
            "planner",
            "You are a planner. Split the task into independent steps, give each step \
             to a\n`scout` or a `worker`, and merge their results."
        )
        .with_description("Breaks a task into steps and delegates each step.")
        .with_tools(ToolSet::only(["read", "grep", "find"]))
        .with_allowed_subagents(SubagentAllowance::only(["scout", "worker"]))
        .with_max_turns(20)
        .with_restart(RestartPolicy::Transient)
        .with_supervision(Strategy::OneForAll, 3, 10_000)
        .with_settle(SettlePolicy::Drain)
    );

    let scout = catalog.get("scout").unwrap();
    assert_eq!(scout.model.as_deref(), Some("small"));
    assert!(scout.isolated && scout.run_in_background);
    assert_eq!(scout.allowed_subagents, SubagentAllowance::None);

    // worker.md has no `name`: the file stem names it.
    let worker = catalog.get("worker").unwrap();
    assert_eq!(worker.tools, ToolSet::All);
    assert_eq!(worker.disallowed_tools, ["bash"]);
    assert!(worker.inherit_context);
    assert!(!worker.allowed_subagents.allows_any());
}

#[test]
fn a_loaded_catalog_enforces_the_files_allowlists() {
    let catalog = Catalog::load_dir_strict(fixture("pi")).unwrap();
    let planner = catalog.get("planner").unwrap();
    assert_eq!(catalog.resolve_for(planner, "Scout").unwrap().name, "scout");
    assert!(matches!(
        catalog.resolve_for(planner, "reviewer"),
        Err(SpawnError::NotAllowed { .. })
    ));
}

#[test]
fn claude_style_directory_accepts_camel_case_lists_and_extra_keys() {
    let catalog = Catalog::load_dir_strict(fixture("claude")).unwrap();
    assert_eq!(
        names(&catalog),
        ["code-reviewer", "legacy", "orchestrator", "reviewer"]
    );

    let code_reviewer = catalog.get("code-reviewer").unwrap();
    assert_eq!(
        code_reviewer.tools,
        ToolSet::only(["Read", "Grep", "Glob", "Bash"])
    );
    assert_eq!(code_reviewer.model.as_deref(), Some("sonnet"));
    assert!(
        code_reviewer
            .prompt
            .starts_with("You are a senior code reviewer")
    );
    assert!(
        code_reviewer
            .prompt
            .ends_with("3. Begin review immediately")
    );

    let reviewer = catalog.get("reviewer").unwrap();
    assert_eq!(reviewer.tools, ToolSet::only(["Read", "Grep"]));
    assert_eq!(reviewer.disallowed_tools, ["Write", "Edit"]);
    assert_eq!(reviewer.max_turns, Some(5));

    let orchestrator = catalog.get("orchestrator").unwrap();
    assert_eq!(
        orchestrator.description,
        "Coordinates the other agents for large tasks."
    );
    assert_eq!(orchestrator.allowed_subagents, SubagentAllowance::All);
    assert!(orchestrator.run_in_background && !orchestrator.inherit_context);

    assert!(!catalog.get("legacy").unwrap().enabled);
    assert_eq!(
        catalog.resolve("legacy").unwrap_err(),
        SpawnError::DisabledType("legacy".into())
    );
}

#[test]
fn later_directories_override_earlier_ones_by_name() {
    let catalog = Catalog::load_dirs_strict([fixture("pi"), fixture("claude")]).unwrap();
    assert_eq!(
        names(&catalog),
        [
            "planner",
            "scout",
            "worker",
            "code-reviewer",
            "legacy",
            "orchestrator",
            "reviewer"
        ]
    );
    assert_eq!(
        catalog.get("reviewer").unwrap().model.as_deref(),
        Some("opus")
    );

    let reversed = Catalog::load_dirs_strict([fixture("claude"), fixture("pi")]).unwrap();
    assert_eq!(reversed.len(), 7);
    assert_eq!(
        reversed.get("reviewer").unwrap().model.as_deref(),
        Some("small")
    );
}

#[test]
fn a_missing_directory_fails_load_dir_but_is_skipped_by_load_dirs() {
    let missing = fixture("no-such-directory");
    let err = Catalog::load_dir_strict(&missing).unwrap_err();
    assert!(
        matches!(&err, CatalogError::ReadDir { dir, source }
            if dir == &missing && source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "{}: cannot read agent directory: ",
            missing.display()
        )),
        "{err}"
    );
    // The io::Error is the source, not only text.
    let source = std::error::Error::source(&err).expect("a source");
    assert!(
        source.downcast_ref::<std::io::Error>().is_some(),
        "{source:?}"
    );
    let catalog = Catalog::load_dirs_strict([&missing, &fixture("pi"), &missing]).unwrap();
    assert_eq!(catalog.len(), 4);
    assert!(
        Catalog::load_dirs_strict(Vec::<PathBuf>::new())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn every_problem_of_a_malformed_directory_is_reported_with_file_and_field() {
    let err = Catalog::load_dir_strict(fixture("malformed")).unwrap_err();
    let text = err.to_string();
    let found = problems(err);
    let summary: Vec<(&str, Option<&str>)> = found
        .iter()
        .map(|p| (p.file.as_str(), p.field.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            ("bad-turns.md", Some("max_turns")),
            ("bad-yaml.md", None),
            ("blank-name.md", Some("name")),
            ("dup-b.md", Some("name")),
            ("list-frontmatter.md", None),
            ("many-fields.md", Some("isolated")),
            ("many-fields.md", Some("restart")),
            ("many-fields.md", Some("allowedSubagents")),
            ("many-fields.md", Some("tools")),
            ("unterminated.md", None),
            ("wrong-tools.md", Some("disallowed-tools")),
        ]
    );

    let message = |file: &str, field: Option<&str>| {
        &found
            .iter()
            .find(|p| p.file == file && p.field.as_deref() == field)
            .unwrap()
            .message
    };
    assert_eq!(
        message("bad-turns.md", Some("max_turns")),
        "expected a positive integer, found \"ten\""
    );
    let yaml = message("bad-yaml.md", None);
    assert!(yaml.starts_with("invalid YAML in frontmatter: "), "{yaml}");
    assert!(yaml.contains("line 4"), "the line of the file: {yaml}");
    assert!(
        message("dup-b.md", Some("name")).contains("\"writer\" is already defined in")
            && message("dup-b.md", Some("name")).contains("dup-a.md"),
        "a duplicate names both files"
    );
    assert_eq!(
        message("many-fields.md", Some("isolated")),
        "expected true or false, found \"yes\""
    );
    assert_eq!(
        message("many-fields.md", Some("restart")),
        "expected one of `permanent`, `transient`, `temporary`, found \"always\""
    );
    assert!(message("list-frontmatter.md", None).contains("must be a mapping"));
    assert!(message("unterminated.md", None).starts_with("unterminated frontmatter"));

    // The rendered error carries every file and field too.
    assert!(
        text.contains("bad-turns.md: field `max_turns`: expected a positive integer"),
        "{text}"
    );
    assert!(
        text.contains("wrong-tools.md: field `disallowed-tools`"),
        "{text}"
    );
}

#[test]
fn the_lenient_load_of_a_malformed_directory_keeps_every_valid_file() {
    let loaded = Catalog::load_dir(fixture("malformed"));
    assert_eq!(names(&loaded.catalog), ["fine", "writer"]);
    let strict = problems(Catalog::load_dir_strict(fixture("malformed")).unwrap_err());
    let lenient: Vec<Problem> = loaded.problems.into_iter().flat_map(problems).collect();
    assert_eq!(
        lenient, strict,
        "the same problems, flat, in the same order"
    );
    assert_eq!(loaded.skipped.len(), 1);
    assert!(loaded.skipped[0].file.ends_with("no-frontmatter.md"));
    assert_eq!(loaded.skipped[0].reason, SkipReason::NoFrontmatter);
}

#[test]
fn load_dirs_reports_the_problems_of_every_directory_in_order() {
    let scratch = ScratchDir::new("every-directory");
    scratch.write("late.md", "---\nsettle: wait\n---\n");
    let err = Catalog::load_dirs_strict([fixture("malformed"), fixture("pi"), scratch.0.clone()])
        .unwrap_err();
    let found = problems(err);
    assert_eq!(found.len(), 12);
    assert_eq!(found[0].file, "bad-turns.md");
    let last = found.last().unwrap();
    assert_eq!(
        (last.file.as_str(), last.field.as_deref()),
        ("late.md", Some("settle"))
    );
}

#[test]
fn one_problem_is_returned_as_itself() {
    let scratch = ScratchDir::new("one-problem");
    scratch.write("good.md", "---\n---\nYou are good.");
    let bad = scratch.write("bad.md", "---\nmaxTurns: -2\n---\n");
    let err = Catalog::load_dir_strict(&scratch.0).unwrap_err();
    assert!(
        matches!(&err, CatalogError::Field { file, field, message }
            if file == &bad && field == "maxTurns"
                && message == "expected a positive integer, found -2"),
        "{err:?}"
    );
}

#[test]
fn unreadable_hidden_and_odd_entries() {
    let scratch = ScratchDir::new("odd-entries");
    scratch.write("valid.md", "---\n---\nYou are valid.");
    scratch.write(".hidden.md", "not an agent file, and hidden");
    scratch.write("backup.md~", "not an agent file");
    fs::create_dir(scratch.0.join("folder.md")).unwrap();
    let binary = scratch.write("binary.md", b"---\nname: \xff\xfe\n---\n");
    #[cfg(unix)]
    std::os::unix::fs::symlink(scratch.0.join("gone"), scratch.0.join("dangling.md")).unwrap();

    let found = problems(Catalog::load_dir_strict(&scratch.0).unwrap_err());
    assert_eq!(found[0].file, "binary.md");
    assert!(
        found[0].message.starts_with("not valid UTF-8"),
        "{:?}",
        found[0]
    );
    #[cfg(unix)]
    {
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].file, "dangling.md");
        assert!(found[1].message.starts_with("cannot read file: "));
    }

    fs::remove_file(binary).unwrap();
    #[cfg(unix)]
    fs::remove_file(scratch.0.join("dangling.md")).unwrap();
    assert_eq!(
        names(&Catalog::load_dir_strict(&scratch.0).unwrap()),
        ["valid"]
    );
}

#[test]
fn parse_agent_file_needs_no_file_system() {
    let path = Path::new("/nowhere/.claude/agents/ghost.md");
    let ghost = parse_agent_file(path, "---\ndescription: Not on disk.\n---\nBoo.").unwrap();
    assert_eq!(ghost.name, "ghost");
    assert_eq!(ghost.prompt, "Boo.");
    let err = parse_agent_file(path, "no frontmatter").unwrap_err();
    assert!(matches!(err, CatalogError::File { ref file, .. } if file == path));
}

/// Reads `field: value` through an agent file and `"field": json` through JSON; both must
/// agree (the same value, or both refused).
fn both_formats(field: &str, yaml: &str, json: &str) -> Result<AgentDefinition, (String, String)> {
    let file = parse_agent_file(
        Path::new("agents/x.md"),
        &format!("---\n{field}: {yaml}\n---\n"),
    );
    let decoded = AgentDefinition::from_json(&format!(r#"{{"name": "x", "{field}": {json}}}"#));
    match (file, decoded) {
        (Ok(from_file), Ok(from_json)) => {
            assert_eq!(from_file, from_json, "{field}: {yaml} / {json}");
            Ok(from_file)
        }
        (Err(file), Err(json)) => Err((file.to_string(), json.to_string())),
        (file, json) => panic!("{field}: {yaml} / {json:?} disagree: {file:?}"),
    }
}

#[test]
fn files_and_json_read_every_word_and_list_alike() {
    let words: &[(&str, &str)] = &[
        ("all", r#""all""#),
        ("All", r#""All""#),
        ("ALL", r#""ALL""#),
        ("'*'", r#""*""#),
        ("none", r#""none""#),
        ("None", r#""None""#),
        ("'true'", r#""true""#),
        ("'TRUE'", r#""TRUE""#),
        ("'false'", r#""false""#),
        ("'False'", r#""False""#),
        ("true", "true"),
        ("false", "false"),
        ("''", r#""""#),
        ("[]", "[]"),
        ("[All]", r#"["All"]"#),
        ("[' * ']", r#"[" * "]"#),
        ("['none']", r#"["none"]"#),
        ("read, Grep", r#""read, Grep""#),
        ("' read ,, Grep ,'", r#"" read ,, Grep ,""#),
        ("[Read, 'a,b', ' ']", r#"["Read", "a,b", " "]"#),
        ("read, all", r#""read, all""#),
        ("[read, NONE]", r#"["read", "NONE"]"#),
        ("[read, 3]", r#"["read", 3]"#),
        ("[true]", "[true]"),
        ("3", "3"),
        ("{a: b}", r#"{"a": "b"}"#),
    ];
    let mut accepted = 0;
    for field in ["tools", "disallowed_tools", "allowed_subagents"] {
        for (yaml, json) in words {
            accepted += usize::from(both_formats(field, yaml, json).is_ok());
        }
    }
    assert!(
        accepted > 30,
        "the table must accept as well as refuse: {accepted}"
    );

    // The defect: `All` is the keyword in JSON too, never a tool named `All`.
    let d = both_formats("tools", "All", r#""All""#).unwrap();
    assert_eq!(d.tools, ToolSet::All);
    let d = both_formats("tools", "[]", "[]").unwrap();
    assert_eq!(d.tools, ToolSet::None);
    let d = both_formats("disallowed_tools", "bash, write", r#""bash, write""#).unwrap();
    assert_eq!(d.disallowed_tools, ["bash", "write"]);
    let d = both_formats("allowed_subagents", "true", "true").unwrap();
    assert_eq!(d.allowed_subagents, SubagentAllowance::All);
    // Both formats give the words rule's message; JSON adds the field and the position.
    let (file, json) = both_formats("tools", "read, all", r#""read, all""#).unwrap_err();
    let rule = "`all` must stand alone, found it among names: read, all";
    assert_eq!(file, format!("agents/x.md: field `tools`: {rule}"));
    assert!(
        json.starts_with(&format!(
            "malformed agent definition: field `tools`: {rule} at line 1"
        )),
        "{json}"
    );
}

#[test]
fn catalog_new_refuses_what_a_file_refuses_with_the_same_message() {
    let scratch = ScratchDir::new("same-check");
    for (frontmatter, json, field) in [
        ("node: a@b", r#"{"name": "x", "node": "a@b"}"#, "node"),
        (
            "restart_period_ms: 0",
            r#"{"name": "x", "restart_period_ms": 0}"#,
            "restart_period_ms",
        ),
        ("name: ' '", r#"{"name": " "}"#, "name"),
    ] {
        scratch.write("x.md", format!("---\n{frontmatter}\n---\n"));
        let from_file = problems(Catalog::load_dir_strict(&scratch.0).unwrap_err());
        assert_eq!(from_file.len(), 1, "{from_file:?}");
        assert_eq!(from_file[0].field.as_deref(), Some(field));
        // The same definition decoded from JSON (or built in code) is refused by Catalog::new.
        let decoded = AgentDefinition::from_json(json).expect("JSON decodes: the check judges");
        let err = Catalog::new([decoded.clone()]).unwrap_err();
        match err {
            CatalogError::Definition {
                name,
                field: refused,
                message,
            } => {
                assert_eq!((name, refused), (decoded.name, field));
                assert_eq!(message, from_file[0].message, "{field}");
            }
            other => panic!("{frontmatter}: {other:?}"),
        }
    }
    // One word means something in a file only: pi's `max_turns: 0` ("no turn limit") is
    // read as the field left out, with a note; a definition holding 0 is still refused.
    scratch.write("x.md", "---\nmax_turns: 0\n---\n");
    let loaded = Catalog::load_dir(&scratch.0);
    assert!(loaded.is_clean());
    assert_eq!(loaded.catalog.get("x").unwrap().max_turns, None);
    assert_eq!(loaded.notes.len(), 1);
    let decoded = AgentDefinition::from_json(r#"{"name": "x", "max_turns": 0}"#).unwrap();
    assert!(Catalog::new([decoded]).is_err());
}

#[test]
fn allowlist_entries_from_files_resolve_case_insensitively() {
    let scratch = ScratchDir::new("allowlist-case");
    scratch.write(
        "lead.md",
        "---\nallowed_subagents: [Reviewer]\n---\nYou lead.",
    );
    scratch.write("reviewer.md", "---\n---\nYou review.");
    scratch.write("writer.md", "---\n---\nYou write.");
    let catalog = Catalog::load_dir_strict(&scratch.0).unwrap();
    let lead = catalog.get("lead").unwrap();
    // Before the fix: "agent type \"reviewer\" is not allowed here; allowed: none".
    assert_eq!(
        catalog.resolve_for(lead, "reviewer").unwrap().name,
        "reviewer"
    );
    let err = catalog.resolve_for(lead, "writer").unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent type \"writer\" is not allowed here; allowed: reviewer"
    );
}
