use agent_tree_protocol::{
    DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_PERIOD_MS, RestartPolicy, SubagentAllowance, ToolSet,
};
use proptest::prelude::{Just, any, prop, prop_assert, prop_assert_eq, prop_assume, prop_oneof};
use proptest::proptest;
use proptest::strategy::Strategy as PropStrategy;

use super::*;
use crate::catalog::Catalog;

// The `pub(in crate::catalog)` helpers below are shared with the field table's tests,
// which read each value through a whole file's text, as a loader does.

#[test]
fn an_integer_no_yaml_value_holds_is_its_fields_error_and_text_stays_text() {
    let huge = "123456789012345678901234567890";
    for frontmatter in [
        format!("max_turns: {huge}"),
        format!("max_turns: {huge}\t# many"),
        format!("max_turns:\t-{huge}"),
        format!("max_turns: &m {huge}"),
        format!("max_turns: !custom {huge}"),
    ] {
        let (field, message) = field_err(&frontmatter);
        assert_eq!(field, "max_turns", "{frontmatter:?}");
        assert!(message.contains("e29"), "{frontmatter:?}: {message}");
    }
    // A number, never a string: not a name, not a tool.
    assert_eq!(field_err(&format!("name: {huge}")).0, "name");
    assert_eq!(field_err(&format!("tools: [{huge}]")).0, "tools");
    assert_eq!(
        field_err("max_turns: 0xFFFFFFFFFFFFFFFFFFFF").0,
        "max_turns"
    );
    // In a string, the digits are the string's, whatever the style.
    for (frontmatter, description) in [
        (
            format!("description: |\n  limit: {huge}"),
            format!("limit: {huge}"),
        ),
        (format!("description: !!str |+\n  {huge}"), huge.to_owned()),
        (format!("description: &d >-\n  {huge}"), huge.to_owned()),
        (
            format!("description: this is\n  {huge}\n  more"),
            format!("this is {huge} more"),
        ),
    ] {
        assert_eq!(
            field_ok(&frontmatter).description,
            description,
            "{frontmatter:?}"
        );
    }
}

const FILE: &str = "agents/tester.md";

pub(in crate::catalog) fn parse_ok(text: &str) -> AgentDefinition {
    match parse_agent_file(Path::new(FILE), text) {
        Ok(definition) => definition,
        Err(e) => panic!("{text:?} should parse: {e}"),
    }
}

/// Parses `---\n{frontmatter}\n---\nbody`.
pub(in crate::catalog) fn with_fields(frontmatter: &str) -> Result<AgentDefinition, CatalogError> {
    parse_agent_file(Path::new(FILE), &format!("---\n{frontmatter}\n---\nbody\n"))
}

pub(in crate::catalog) fn field_ok(frontmatter: &str) -> AgentDefinition {
    with_fields(frontmatter).unwrap_or_else(|e| panic!("{frontmatter:?} should parse: {e}"))
}

/// The (field, message) of a single field error.
pub(in crate::catalog) fn field_err(frontmatter: &str) -> (String, String) {
    match with_fields(frontmatter) {
        Err(CatalogError::Field {
            file,
            field,
            message,
        }) => {
            assert_eq!(file, Path::new(FILE));
            (field, message)
        }
        other => panic!("{frontmatter:?}: expected one field error, got {other:?}"),
    }
}

/// The message of a single error about the whole file, without the file's name.
fn file_err(text: &str) -> String {
    match parse_agent_file(Path::new(FILE), text) {
        Err(CatalogError::File { file, message }) => {
            assert_eq!(file, Path::new(FILE));
            message
        }
        Err(e @ CatalogError::Yaml { .. }) => {
            let CatalogError::Yaml { file, source, .. } = &e else {
                unreachable!()
            };
            assert_eq!(file, Path::new(FILE));
            assert_eq!(
                std::error::Error::source(&e).map(ToString::to_string),
                Some(source.to_string()),
                "the YAML error is kept as the source"
            );
            e.to_string()
                .strip_prefix(&format!("{FILE}: "))
                .unwrap()
                .to_owned()
        }
        other => panic!("{text:?}: expected a file error, got {other:?}"),
    }
}

#[test]
fn defaults_and_name_from_the_file_stem() {
    let definition = parse_ok("---\n---\n  You test.  \n");
    assert_eq!(
        definition,
        AgentDefinition::new("tester", "You test."),
        "every omitted field takes the definition's default"
    );
    assert_eq!(definition.max_restarts, DEFAULT_MAX_RESTARTS);
    assert_eq!(definition.restart_period_ms, DEFAULT_RESTART_PERIOD_MS);
    assert_eq!(parse_ok("---\nname: '  spaced  '\n---\n").name, "spaced");
}

#[test]
fn a_field_given_in_two_spellings_is_refused() {
    let (field, message) = field_err("max_turns: 3\nmaxTurns: 4");
    assert_eq!(field, "maxTurns");
    assert_eq!(message, "given twice, also as `max_turns`");
}

#[test]
fn refusals_of_the_definition_check_come_in_file_order_with_the_file_spelling() {
    let err =
        with_fields("node: a@b\nisolated: maybe\nrestart-period-ms: 0\nname: ' '").unwrap_err();
    let CatalogError::Many(errors) = err else {
        panic!("expected several errors, got {err:?}");
    };
    let found: Vec<_> = errors
        .iter()
        .map(|e| match e {
            CatalogError::Field { field, message, .. } => (field.as_str(), message.as_str()),
            other => panic!("not a field error: {other:?}"),
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                "node",
                "expected a node name (no white space around it, no '@'), found \"a@b\""
            ),
            ("isolated", "expected true or false, found \"maybe\""),
            ("restart-period-ms", "expected a positive integer, found 0"),
            ("name", "expected a non-blank name, found \" \""),
        ]
    );
}

#[test]
fn a_field_that_cannot_be_read_is_not_judged_again() {
    // `name: 42` leaves the name blank; only the reading error is reported.
    let (field, message) = field_err("name: 42");
    assert_eq!(
        (field.as_str(), message.as_str()),
        ("name", "expected a string, found 42")
    );
}

#[test]
fn the_loader_and_catalog_new_refuse_the_same_definitions() {
    for frontmatter in [
        "node: a@b",
        "restart_period_ms: 0",
        "name: '  '",
        "max_turns: 1",
        "restart_period_ms: 1",
        "tools: [read, grep]",
    ] {
        let parsed = parse(Path::new(FILE), &format!("---\n{frontmatter}\n---\n"));
        match parsed {
            Ok(parsed) => assert!(
                Catalog::new([parsed.definition]).is_ok(),
                "{frontmatter}: a file's definition enters a catalog"
            ),
            Err(_) => {
                // The same values, built in code, are refused too.
                let mut d = AgentDefinition::new("tester", "");
                match frontmatter {
                    "node: a@b" => d.node = Some("a@b".into()),
                    "restart_period_ms: 0" => d.restart_period_ms = 0,
                    "name: '  '" => d.name = "  ".into(),
                    other => panic!("{other} should parse"),
                }
                assert!(Catalog::new([d]).is_err(), "{frontmatter}");
            }
        }
    }
}

#[test]
fn null_is_the_same_as_omitted() {
    let d = field_ok("name:\nmodel: ~\nmax_turns:\nenabled:\ntools:\nrestart:");
    assert_eq!(d, AgentDefinition::new("tester", "body"));
}

#[test]
fn unknown_fields_are_collected_not_errors() {
    let parsed = parse(
        Path::new(FILE),
        "---\ncolor: blue\nname: x\npermissionMode: ask\nMaxTurns: 3\n1: one\n---\n",
    )
    .unwrap();
    assert_eq!(parsed.definition.name, "x");
    assert_eq!(parsed.definition.max_turns, None, "keys are case-sensitive");
    assert_eq!(parsed.ignored, ["color", "permissionMode", "MaxTurns", "1"]);
}

#[test]
fn every_field_error_of_a_file_is_reported_in_order() {
    let err =
        with_fields("max_turns: ten\ncolor: red\nisolated: maybe\nrestart: never").unwrap_err();
    let CatalogError::Many(errors) = err else {
        panic!("expected several errors, got {err:?}");
    };
    let fields: Vec<_> = errors
        .iter()
        .map(|e| match e {
            CatalogError::Field { field, .. } => field.as_str(),
            other => panic!("not a field error: {other:?}"),
        })
        .collect();
    assert_eq!(fields, ["max_turns", "isolated", "restart"]);
}

#[test]
fn frontmatter_errors_are_file_errors() {
    assert_eq!(file_err(""), "missing frontmatter: the file is empty");
    assert_eq!(
        file_err("You review.\n---\nname: x\n---\n"),
        "missing frontmatter: the first line must be `---`"
    );
    assert_eq!(
        file_err(" ---\nname: x\n---\n"),
        "missing frontmatter: the first line must be `---`"
    );
    assert_eq!(
        file_err("---\nname: x\nbody"),
        "unterminated frontmatter: no closing `---` line"
    );
    assert_eq!(
        file_err("---"),
        "unterminated frontmatter: no closing `---` line"
    );
    assert_eq!(
        file_err("---\n- a\n- b\n---\n"),
        "frontmatter must be a mapping of `field: value` lines, found a list"
    );
    assert_eq!(
        file_err("---\njust words\n---\n"),
        "frontmatter must be a mapping of `field: value` lines, found \"just words\""
    );
}

#[test]
fn yaml_errors_give_the_line_in_the_file() {
    let message = file_err("---\nname: x\ntools: [read, write\nmodel: m\n---\n");
    assert!(
        message.starts_with("invalid YAML in frontmatter: "),
        "{message}"
    );
    // The flow sequence opens on line 3 of the file; line 4 cannot continue it.
    assert!(message.contains("at line 4 column 6"), "{message}");
    assert!(message.contains("at line 3 column 8"), "{message}");
    let message = file_err("---\nname: x\n\nname: y\n---\n");
    assert!(
        message.contains("duplicate entry with key \"name\""),
        "{message}"
    );
    assert!(message.contains("line 2"), "{message}");
}

#[test]
fn bom_crlf_and_fence_spaces_are_accepted() {
    let d = parse_ok("\u{feff}---\r\nname: x\r\nmax_turns: 2\r\n---  \r\nYou test.\r\n");
    assert_eq!((d.name.as_str(), d.max_turns), ("x", Some(2)));
    assert_eq!(d.prompt, "You test.");
}

#[test]
fn the_body_starts_after_the_first_closing_fence() {
    let d = parse_ok("---\nname: x\n---\nPart one.\n---\nPart two.\n");
    assert_eq!(d.prompt, "Part one.\n---\nPart two.");
}

#[test]
fn anchors_and_merge_keys() {
    let d = field_ok("base: &base {max_turns: 4, isolated: true}\n<<: *base\nmodel: m");
    assert_eq!(d.max_turns, Some(4));
    assert!(d.isolated);
}

#[test]
fn a_blank_file_stem_without_a_name_is_refused() {
    let err = parse_agent_file(Path::new(" .md"), "---\n---\n").unwrap_err();
    assert!(
        matches!(err, CatalogError::Field { ref field, .. } if field == "name"),
        "{err:?}"
    );
    assert_eq!(
        parse_agent_file(Path::new(" .md"), "---\nname: ok\n---\n")
            .unwrap()
            .name,
        "ok"
    );
}

#[test]
fn hostile_yaml_is_an_error_not_a_crash() {
    let deep = format!("---\nname: {}\n---\n", "[".repeat(100_000));
    assert_eq!(
        file_err(&deep),
        "frontmatter opens more than 1000 `[` or `{` without closing them"
    );
    let deep = format!("---\nname: {}\n---\n", "{".repeat(500));
    assert!(file_err(&deep).contains("recursion limit exceeded"));
    let balanced = format!("---\ndescription: '{}'\n---\n", "[]".repeat(5_000));
    assert_eq!(parse_ok(&balanced).description.len(), 10_000);
    let mut bomb = String::from("---\na: &a [x,x,x,x,x,x,x,x,x]\n");
    for (name, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"]
        .iter()
        .zip(["a", "b", "c", "d", "e", "f", "g", "h"])
    {
        let refs = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    bomb.push_str("---\n");
    assert_eq!(
        file_err(&bomb),
        "frontmatter expands to more than 10000 YAML nodes through YAML aliases (`*name`); \
             agent files need no aliases"
    );
}

/// A "billion laughs" shaped to pass the parser's own repetition limit (which counts
/// alias jumps per event, so wide levels raise it): 41 KiB, 10^12 nodes once expanded.
fn wide_bomb() -> String {
    let mut bomb = format!(
        "---\nname: laughs\na: &a [{}]\n",
        vec!["lol"; 2_600].join(",")
    );
    for (name, prev) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
        let refs = vec![format!("*{prev}"); 2_600].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    bomb.push_str("---\nYou laugh.\n");
    bomb
}

#[test]
fn an_alias_bomb_is_refused_in_bounded_time_and_memory() {
    let bomb = wide_bomb();
    assert!(bomb.len() > 40_000 && bomb.len() < 50_000, "{}", bomb.len());
    let started = std::time::Instant::now();
    let message = file_err(&bomb);
    assert!(
        message.starts_with("frontmatter expands to more than 10000 YAML nodes"),
        "{message}"
    );
    // Microseconds in a release build; generous for a debug build on a busy machine.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // Few nodes, but each a long string repeated through aliases: the byte budget.
    let long = "x".repeat(100_000);
    let strings = format!(
        "---\na: &a '{long}'\nb: [{}]\n---\n",
        vec!["*a"; 20].join(",")
    );
    assert_eq!(
        file_err(&strings),
        "frontmatter expands to more than 1048576 bytes through YAML aliases (`*name`); \
             agent files need no aliases"
    );
    // A few aliases within the budget still work.
    let d = field_ok("x: &t 3\nmax_turns: *t\nm: &m big\nmodel: *m");
    assert_eq!((d.max_turns, d.model.as_deref()), (Some(3), Some("big")));
    // Tagged values are counted too, and still ignored as tags.
    let tagged = field_ok("k: !t [a, !u b]\nj: !m {a: 1}\nmax_turns: !n 4");
    assert_eq!(tagged.max_turns, Some(4));
}

#[test]
fn a_frontmatter_of_many_plain_nodes_within_the_budget_parses() {
    let items = vec!["x"; MAX_FRONTMATTER_NODES - 10].join(",");
    let d = field_ok(&format!("ignored: [{items}]\nmax_turns: 2"));
    assert_eq!(d.max_turns, Some(2));
    let items = vec!["x"; MAX_FRONTMATTER_NODES].join(",");
    assert!(file_err(&format!("---\nignored: [{items}]\n---\n")).contains("10000 YAML nodes"));
}

#[test]
fn a_value_that_cannot_be_requoted_gets_a_hint_to_quote_it() {
    // The value goes on over the next line: not a single-line value, so not re-quoted.
    let err = with_fields("name: x\ndescription: a: b\n  and more").unwrap_err();
    assert!(matches!(&err, CatalogError::Yaml { hint: Some(h), .. }
            if h == "quote the value: description: \"a: b\""));
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!(
            "{FILE}: invalid YAML in frontmatter: mapping values"
        )),
        "{shown}"
    );
    assert!(
        shown.ends_with("at line 3 column 15 (quote the value: description: \"a: b\")"),
        "{shown}"
    );
    // Quotes and backslashes in the value are escaped; a long value is cut.
    let message =
        file_err("---\ndescription: Use when: the user says \"go\\now\"\n  and more\n---\n");
    assert!(
        message
            .ends_with(r#"(quote the value: description: "Use when: the user says \"go\\now\"")"#),
        "{message}"
    );
    let message = file_err(&format!(
        "---\ndescription: a: {}\n more\n---\n",
        "b".repeat(100)
    ));
    assert!(message.ends_with("bbbbbbb...\")"), "{message}");
    // Not a top-level `key: value` line: the general advice.
    let message = file_err("---\nlist:\n  - a: b: c\n---\n");
    assert!(
        message.ends_with("(a value holding `: ` must be quoted)"),
        "{message}"
    );
    // Re-quoting fixes the value but another error remains: the file's own error, with
    // its line and hint, is reported.
    let message = file_err("---\ndescription: a: b\ntools: [read\n---\n");
    assert!(message.contains("mapping values"), "{message}");
    assert!(
        message.ends_with("at line 2 column 15 (quote the value: description: \"a: b\")"),
        "{message}"
    );
    // Other YAML errors get no hint.
    let err = with_fields("tools: [read").unwrap_err();
    assert!(
        matches!(err, CatalogError::Yaml { hint: None, .. }),
        "{err:?}"
    );
}

/// The notes of `text`, as (field, kind).
pub(in crate::catalog) fn notes_of(text: &str) -> (AgentDefinition, Vec<(String, NoteKind)>) {
    let (definition, notes) = parse_agent_file_with_notes(Path::new(FILE), text)
        .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"));
    for note in &notes {
        assert_eq!(note.file, Path::new(FILE));
    }
    let notes = notes.into_iter().map(|n| (n.field, n.kind)).collect();
    (definition, notes)
}

#[test]
fn a_value_with_a_colon_space_is_requoted_and_reported() {
    // As contains-studio writes descriptions: one long line, `: ` and quotes in it, and
    // escapes (`\n`) that a plain YAML value keeps as written.
    let description = r#"Use this agent for reviews. Triggers on: code review, PR. Examples:\n\n<example>\nContext: a PR\nuser: "Review it"\n</example>"#;
    let text = format!(
        "---\nname: reviewer\ndescription: {description}\ncolor: purple\ntools: Read, Grep\n---\nYou review.\n"
    );
    let (reviewer, notes) = notes_of(&text);
    assert_eq!(reviewer.description, description, "the text as written");
    assert_eq!(reviewer.tools, ToolSet::only(["Read", "Grep"]));
    assert_eq!(
        notes,
        [("description".to_owned(), NoteKind::Requoted { line: 3 })]
    );
    // Each such line is re-quoted, and noted with its own key and line; a comment after
    // the value stays a comment; a value ending in a colon is one too.
    let (d, notes) = notes_of(
        "---\ndescription: When: asked # a comment: ignored\nmodel: small\nexamples: Steps:\n---\n",
    );
    assert_eq!(d.description, "When: asked");
    assert_eq!(d.model.as_deref(), Some("small"));
    assert_eq!(
        notes,
        [
            ("description".to_owned(), NoteKind::Requoted { line: 2 }),
            ("examples".to_owned(), NoteKind::Requoted { line: 4 }),
        ]
    );
    // Backslashes and quotes read back as written.
    let (d, _) = notes_of("---\ndescription: a: \"b\" \\ c\\\n---\n");
    assert_eq!(d.description, r#"a: "b" \ c\"#);
    // A re-quoted value is read by its field like any string: its errors are its field's.
    let (field, message) = field_err("max_turns: ten: 10");
    assert_eq!(field, "max_turns");
    assert_eq!(message, "expected a positive integer, found \"ten: 10\"");
    // A file that parses as written gets no note.
    assert!(notes_of("---\ndescription: 'a: b'\n---\n").1.is_empty());
}

#[test]
fn only_top_level_plain_single_line_values_are_requoted() {
    for (yaml, requoted) in [
        ("description: a: b", Some("description: \"a: b\"")),
        ("description: a:\tb", Some("description: \"a:\tb\"")),
        (
            "run-in_background2: a: b",
            Some("run-in_background2: \"a: b\""),
        ),
        (
            "description: a: b  # c: d",
            Some("description: \"a: b\" # c: d"),
        ),
        ("description: -x: y", Some("description: \"-x: y\"")),
        ("description: a#b: c", Some("description: \"a#b: c\"")),
        // Indented, quoted, flow, block, alias, anchor, tag, sequence: not plain or not
        // top-level; a colon without a space after it is no mapping.
        ("  description: a: b", None),
        ("description: 'a: b", None),
        ("description: \"a: b", None),
        ("description: [a: b]", None),
        ("description: {a: b}", None),
        ("description: |", None),
        ("description: &x a: b", None),
        ("description: *x: b", None),
        ("description: !t a: b", None),
        ("description: - a: b", None),
        ("description: http://x", None),
        ("description:a: b", None),
        ("\"description\": a: b", None),
        ("de scription: a: b", None),
        ("description:", None),
        ("# description: a: b", None),
    ] {
        assert_eq!(
            requote_line(yaml).map(|(_, line)| line).as_deref(),
            requoted,
            "{yaml:?}"
        );
    }
    // A value that goes on over the next (indented) line is not single-line; a comment or
    // a blank line between does not make it go on.
    assert_eq!(requote("description: a: b\n  more\n"), None);
    let (text, lines) = requote("description: a: b\n\n  # note\nmodel: m\n").unwrap();
    assert_eq!(text, "description: \"a: b\"\n\n  # note\nmodel: m\n");
    assert_eq!(
        lines,
        [Requoted {
            key: "description".into(),
            line: 2
        }]
    );
    // Nothing inside a flow collection opened on an earlier line.
    assert_eq!(requote("tools: [read,\nx: a: b]\n"), None);
    assert!(requote("tools: [read]\nx: a: b\n").is_some());
    // Lines are kept one for one.
    let yaml = "a: 1\nb: x: y\r\nc: 3";
    assert_eq!(
        requote(yaml).unwrap().0.lines().count(),
        yaml.lines().count()
    );
}

#[test]
fn crlf_line_ends_are_read_as_lf_in_the_frontmatter_and_the_prompt() {
    let d = parse_ok(
        "---\r\nname: x\r\ndescription: |\r\n  One.\r\n  Two.\r\n---\r\nLine one.\r\n\r\nLine two.\r\n",
    );
    assert_eq!(d.description, "One.\nTwo.");
    assert_eq!(d.prompt, "Line one.\n\nLine two.");
    // A re-quoted value in a CRLF file has no carriage return either.
    let (d, notes) = notes_of("---\r\ndescription: a: b\r\n---\r\nYou.\r\n");
    assert_eq!(d.description, "a: b");
    assert_eq!(notes.len(), 1);
    // A lone CR is no line end of a CRLF file, and is kept.
    assert_eq!(parse_ok("---\n---\nA\rB\n").prompt, "A\rB");
}

/// Every leaf error names `FILE` and is a field or file error.
fn assert_leaves_name_the_file(error: &CatalogError) {
    match error {
        CatalogError::Field { file, field, .. } => {
            assert_eq!(file, Path::new(FILE));
            assert!(!field.is_empty());
        }
        CatalogError::File { file, .. } | CatalogError::Yaml { file, .. } => {
            assert_eq!(file, Path::new(FILE));
        }
        CatalogError::Many(errors) => {
            assert!(errors.len() > 1);
            for e in errors {
                assert!(!matches!(e, CatalogError::Many(_)), "nested Many");
                assert_leaves_name_the_file(e);
            }
        }
        other => panic!("unexpected error {other:?}"),
    }
}

fn yamlish_value() -> impl PropStrategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("~".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        "[a-z*_, -]{0,20}",
        "\\[[a-z0-9*, ]{0,20}\\]",
        "\\{[a-z0-9:, ]{0,20}\\}",
        "'[^'\n]{0,20}'",
        "[!&*|>%@`\"'#:\\[\\]{}, a-z0-9\t-]{0,20}",
    ]
}

fn any_key() -> impl PropStrategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "name",
            "description",
            "tools",
            "disallowed_tools",
            "disallowedTools",
            "allowed_subagents",
            "allowed-subagents",
            "isolated",
            "model",
            "max_turns",
            "maxTurns",
            "inherit_context",
            "run_in_background",
            "enabled",
            "restart",
            "strategy",
            "max_restarts",
            "restart_period_ms",
            "settle",
            "color",
            "<<",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z_-]{1,12}",
    ]
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        if let Err(e) = parse_agent_file(Path::new(FILE), &text) {
            assert_leaves_name_the_file(&e);
        }
    }

    #[test]
    fn arbitrary_frontmatter_never_panics(
        yaml in any::<String>(),
        fence in prop::sample::select(vec!["---\n", "---\r\n", "\u{feff}---\n"]),
    ) {
        let text = format!("{fence}{yaml}\n---\nbody");
        if let Err(e) = parse_agent_file(Path::new(FILE), &text) {
            assert_leaves_name_the_file(&e);
        }
    }

    #[test]
    fn arbitrary_fields_never_panic(
        fields in prop::collection::vec((any_key(), yamlish_value()), 0..8),
    ) {
        let yaml: String =
            fields.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        let text = format!("---\n{yaml}---\nbody");
        match parse_agent_file(Path::new(FILE), &text) {
            Ok(definition) => prop_assert!(!definition.name.trim().is_empty()),
            Err(e) => assert_leaves_name_the_file(&e),
        }
    }

    #[test]
    fn a_requoted_value_reads_back_as_written(
        head in "[a-zA-Z][a-zA-Z\"\\\\ .,()<>/*&!|'-]{0,12}",
        tail in "[a-zA-Z\"\\\\ :.,()<>/*&!|'-]{0,24}[a-zA-Z.)\"]",
    ) {
        let value = format!("{head}: {tail}");
        let definition = with_fields(&format!("name: x\ndescription: {value}"));
        prop_assert_eq!(definition.ok().map(|d| d.description), Some(value.clone()), "{}", value);
    }

    #[test]
    fn written_definitions_read_back(
        name in "[a-zA-Z][a-zA-Z0-9_-]{0,12}",
        tools in prop::collection::vec("[A-Za-z][A-Za-z0-9_]{0,8}", 1..4),
        subagents in prop::collection::vec("[a-z][a-z0-9-]{0,8}", 0..4),
        max_turns in 1u32..,
        restart in prop::sample::select(vec![
            RestartPolicy::Permanent, RestartPolicy::Transient, RestartPolicy::Temporary,
        ]),
        isolated in any::<bool>(),
        prompt in "[a-zA-Z .]{0,40}",
    ) {
        // Words YAML or the format read as something other than a name.
        let words = ["all", "none", "true", "false", "null"];
        prop_assume!(tools.iter().all(|t| !words.contains(&t.to_lowercase().as_str())));
        prop_assume!(subagents.iter().all(|s| !words.contains(&s.as_str())));
        let restart_word = match restart {
            RestartPolicy::Permanent => "permanent",
            RestartPolicy::Transient => "transient",
            RestartPolicy::Temporary => "temporary",
        };
        let text = format!(
            "---\nname: '{name}'\ntools: {}\nallowedSubagents: [{}]\nmaxTurns: {max_turns}\n\
             restart: {restart_word}\nisolated: {isolated}\n---\n{prompt}\n",
            tools.join(", "),
            subagents.join(", "),
        );
        let mut expected = AgentDefinition::new(name.clone(), prompt.trim())
            .with_tools(ToolSet::only(tools.clone()))
            .with_allowed_subagents(SubagentAllowance::only(subagents.clone()))
            .with_max_turns(max_turns)
            .with_restart(restart);
        expected.isolated = isolated;
        prop_assert_eq!(parse_agent_file(Path::new(FILE), &text).unwrap(), expected);
    }
}

#[test]
fn an_unquoted_star_gets_a_hint_to_quote_it() {
    for (line, quoted) in [
        ("tools: *, ext:mcp/search", "tools: \"*, ext:mcp/search\""),
        ("tools: *", "tools: \"*\""),
    ] {
        let message = file_err(&format!("---\nname: x\n{line}\n---\n"));
        assert!(
            message.ends_with(&format!("(quote the value: {quoted})")),
            "{message}"
        );
    }
}
