use super::*;

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("writer", ""),
        AgentDefinition::new("Writer", ""),
        AgentDefinition::new("Reviewer", ""),
        AgentDefinition::new("old", "").with_enabled(false),
        AgentDefinition::new("general-purpose", ""),
    ])
    .unwrap()
}

#[test]
fn exact_wins_then_unique_case_insensitive() {
    let c = catalog();
    assert_eq!(c.resolve("Writer").unwrap().name, "Writer");
    assert_eq!(c.resolve("writer").unwrap().name, "writer");
    assert_eq!(c.resolve("REVIEWER").unwrap().name, "Reviewer");
}

#[test]
fn blank_unknown_disabled_and_ambiguous_are_refused() {
    let c = catalog();
    assert_eq!(c.resolve("  "), Err(SpawnError::BlankType));
    assert!(matches!(
        c.resolve("WRITER"),
        Err(SpawnError::AmbiguousType { .. })
    ));
    assert!(matches!(c.resolve("old"), Err(SpawnError::DisabledType(_))));
    // No fallback: an unknown name never resolves to general-purpose.
    assert!(matches!(
        c.resolve("wrtier"),
        Err(SpawnError::UnknownType { .. })
    ));
}

#[test]
fn errors_list_only_reachable_types() {
    let c = catalog();
    let caller = AgentDefinition::new("boss", "")
        .with_allowed_subagents(SubagentAllowance::only(["Reviewer"]));
    let err = c.resolve_for(&caller, "nobody").unwrap_err();
    assert_eq!(
        err,
        SpawnError::UnknownType {
            requested: "nobody".into(),
            available: vec!["Reviewer".into()]
        }
    );
    let err = c.resolve_for(&caller, "writer").unwrap_err();
    assert!(matches!(err, SpawnError::NotAllowed { ref allowed, .. } if allowed == &["Reviewer"]));
    assert!(matches!(
        c.resolve_for(&caller, "old"),
        Err(SpawnError::UnknownType { .. })
    ));
}

#[test]
fn allowlist_entries_resolve_like_type_names() {
    // The defect: `[Reviewer]` with a type `reviewer` refused every spawn ("allowed: none").
    let c = Catalog::new([
        AgentDefinition::new("reviewer", ""),
        AgentDefinition::new("writer", ""),
        AgentDefinition::new("Writer", ""),
        AgentDefinition::new("old", "").with_enabled(false),
    ])
    .unwrap();
    let lead = |entries: &[&str]| {
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(entries.iter().copied()))
    };
    let caller = lead(&["Reviewer"]);
    for requested in ["reviewer", "Reviewer", "REVIEWER"] {
        assert_eq!(
            c.resolve_for(&caller, requested).map(|d| d.name.as_str()),
            Ok("reviewer"),
            "{requested}"
        );
    }
    assert_eq!(
        c.resolve_for(&caller, "writer").unwrap_err(),
        SpawnError::NotAllowed {
            requested: "writer".into(),
            allowed: vec!["reviewer".into()],
        }
    );
    // Exact wins in the allowlist too: `[Writer]` permits `Writer`, not `writer`.
    let caller = lead(&["Writer"]);
    assert_eq!(c.resolve_for(&caller, "Writer").unwrap().name, "Writer");
    assert!(matches!(
        c.resolve_for(&caller, "writer"),
        Err(SpawnError::NotAllowed { ref allowed, .. }) if allowed == &["Writer"]
    ));
    // An entry that is ambiguous in the catalog names nothing.
    let caller = lead(&["WRITER"]);
    assert!(matches!(
        c.resolve_for(&caller, "writer"),
        Err(SpawnError::NotAllowed { ref allowed, .. }) if allowed.is_empty()
    ));
    // Entries resolve whatever their case, but a disabled type stays disabled.
    let caller = lead(&["OLD"]);
    assert_eq!(
        c.resolve_for(&caller, "old"),
        Err(SpawnError::DisabledType("old".into()))
    );
}

fn definition_errors(err: CatalogError) -> Vec<(String, &'static str, String)> {
    let leaves = match err {
        CatalogError::Many(errors) => errors,
        one => vec![one],
    };
    leaves
        .into_iter()
        .map(|e| match e {
            CatalogError::Definition {
                name,
                field,
                message,
            } => (name, field, message),
            other => panic!("not a definition error: {other:?}"),
        })
        .collect()
}

#[test]
fn duplicates_are_refused() {
    let err =
        Catalog::new([AgentDefinition::new("a", ""), AgentDefinition::new("a", "")]).unwrap_err();
    assert!(
        matches!(err, CatalogError::Duplicate(ref name) if name == "a"),
        "{err:?}"
    );
}

#[test]
fn what_a_file_refuses_is_refused_in_code_naming_definition_and_field() {
    for (definition, field, message) in [
        (
            AgentDefinition::new(" ", ""),
            "name",
            "expected a non-blank name, found \" \"",
        ),
        (
            AgentDefinition::new("", ""),
            "name",
            "expected a non-blank name, found \"\"",
        ),
        (
            AgentDefinition::new(" x", ""),
            "name",
            "expected a name without white space around it, found \" x\"",
        ),
        (
            AgentDefinition::new("a\nb", ""),
            "name",
            "expected a name without control characters, found \"a\\nb\"",
        ),
        (
            AgentDefinition::new("x", "").with_max_turns(0),
            "max_turns",
            "expected a positive integer, found 0",
        ),
        (
            AgentDefinition::new("x", "").with_supervision(Default::default(), 1, 0),
            "restart_period_ms",
            "expected a positive integer, found 0",
        ),
        (
            AgentDefinition::new("x", "").with_tools(ToolSet::only(["read", "All"])),
            "tools",
            "list item 2 is the keyword `all`, which is never a tool name",
        ),
        (
            AgentDefinition::new("x", "").with_tools(ToolSet::only([" read"])),
            "tools",
            "expected a tool name in list item 1, found \" read\": names are trimmed and \
                 never blank",
        ),
        (
            AgentDefinition::new("x", "").with_disallowed_tools(["bash", "*"]),
            "disallowed_tools",
            "list item 2 is the keyword `*`, which is never a tool name",
        ),
        (
            AgentDefinition::new("x", "")
                .with_allowed_subagents(SubagentAllowance::only(["writer", ""])),
            "allowed_subagents",
            "expected an agent type name in list item 2, found \"\": names are trimmed and \
                 never blank",
        ),
        (
            AgentDefinition::new("x", "").with_model(Some("  ".into())),
            "model",
            "expected a model name without white space around it, found \"  \" (leave the \
                 model out for the tree's default)",
        ),
        (
            AgentDefinition::new("x", "").with_model(Some("Inherit".into())),
            "model",
            "expected a model name, found \"Inherit\", which means the tree's default \
                 (leave the model out)",
        ),
    ] {
        let name = definition.name.clone();
        let err = Catalog::new([AgentDefinition::new("fine", ""), definition]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("agent definition {name:?}: field `{field}`: {message}")
        );
        assert_eq!(
            definition_errors(err),
            [(name, field, message.to_owned())],
            "{field}"
        );
    }
}

#[test]
fn every_refused_field_of_every_definition_is_reported() {
    let err = Catalog::new([
        AgentDefinition::new("a", "").with_max_turns(0),
        AgentDefinition::new("b", ""),
        AgentDefinition::new("", "").with_supervision(
            agent_tree_protocol::Strategy::OneForOne,
            agent_tree_protocol::DEFAULT_MAX_RESTARTS,
            0,
        ),
    ])
    .unwrap_err();
    let found: Vec<_> = definition_errors(err)
        .into_iter()
        .map(|(name, field, _)| (name, field))
        .collect();
    assert_eq!(
        found,
        [
            ("a".to_owned(), "max_turns"),
            (String::new(), "name"),
            (String::new(), "restart_period_ms"),
        ]
    );
}

#[test]
fn tool_problems_name_the_definition_field_and_tool() {
    let c = Catalog::new([
        AgentDefinition::new("claude", "")
            .with_tools(ToolSet::only([
                "Read",
                "WebFetch",
                "Agent",
                "Grep",
                "ext:web",
                "ext:mcp/search",
            ]))
            .with_disallowed_tools(["Write", "Bassh", "agent"]),
        AgentDefinition::new("all", "").with_disallowed_tools(["bash"]),
    ])
    .unwrap();
    let problems = c.tool_problems(["read", "grep", "GREP", "write", "bash"]);
    let found: Vec<(&str, ListField, &str, bool)> = problems
        .iter()
        .map(|p| match p {
            ToolProblem::Unknown {
                agent_type,
                field,
                tool,
                ..
            } => (agent_type.as_str(), *field, tool.as_str(), false),
            ToolProblem::Ambiguous {
                agent_type,
                field,
                tool,
                ..
            } => (agent_type.as_str(), *field, tool.as_str(), true),
        })
        .collect();
    assert_eq!(
        found,
        [
            ("claude", ListField::Tools, "WebFetch", false),
            ("claude", ListField::Tools, "Grep", true),
            ("claude", ListField::Tools, "ext:web", false),
            ("claude", ListField::Tools, "ext:mcp/search", false),
            ("claude", ListField::DisallowedTools, "Bassh", false),
        ]
    );
    assert_eq!(
        problems[1].to_string(),
        "agent type \"claude\": field `tools` names \"Grep\", which matches several \
             registered tools ignoring case (grep, GREP), so none is given; write one exactly"
    );
    assert!(
        problems[2]
            .to_string()
            .ends_with("agent-tree has no extensions: name the tools")
    );
    assert!(
        problems[3]
            .to_string()
            .ends_with("(registered: read, grep, GREP, write, bash)")
    );
    let other = c.tool_problems(["search", "bash", "Bassh", "webfetch", "grep", "web"]);
    let tools: Vec<String> = other
        .into_iter()
        .map(|p| match p {
            ToolProblem::Unknown { tool, .. } | ToolProblem::Ambiguous { tool, .. } => tool,
        })
        .collect();
    assert_eq!(tools, ["Read", "ext:web", "Write"]);
}

#[test]
fn the_check_accepts_the_defaults_and_every_valid_field() {
    assert_eq!(check(&AgentDefinition::new("x", "")), []);
    let full = AgentDefinition::new("x", "p")
        .with_tools(ToolSet::only(["read", "Bash(git:*)"]))
        .with_disallowed_tools(["write"])
        .with_allowed_subagents(SubagentAllowance::only(["writer"]))
        .with_max_turns(1)
        .with_supervision(Default::default(), 0, 1);
    assert_eq!(check(&full), []);
}
