use super::*;

fn text(s: &str) -> ListValue {
    ListValue::Text(s.to_owned())
}

fn list(items: &[&str]) -> ListValue {
    ListValue::List(items.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn every_keyword_in_every_case_and_with_spaces() {
    for (written, keyword) in [
        ("all", Keyword::All),
        ("ALL", Keyword::All),
        (" All ", Keyword::All),
        ("*", Keyword::Star),
        (" * ", Keyword::Star),
        ("none", Keyword::None),
        ("NoNe", Keyword::None),
        ("true", Keyword::True),
        ("TRUE", Keyword::True),
        ("false", Keyword::False),
        ("False", Keyword::False),
    ] {
        assert_eq!(Keyword::parse(written), Some(keyword), "{written:?}");
    }
    for name in [
        "al", "alll", "**", "nothing", "yes", "no", "null", "", "a ll",
    ] {
        assert_eq!(Keyword::parse(name), None, "{name:?}");
    }
}

#[test]
fn tools_words() {
    for all in ["all", "All", "ALL", "*", " * "] {
        assert_eq!(text(all).tool_set(), Ok(ToolSet::All), "{all:?}");
        assert_eq!(list(&[all]).tool_set(), Ok(ToolSet::All), "[{all:?}]");
    }
    for none in ["none", "None", "", " , ", ","] {
        assert_eq!(text(none).tool_set(), Ok(ToolSet::None), "{none:?}");
    }
    assert_eq!(list(&[]).tool_set(), Ok(ToolSet::None));
    assert_eq!(list(&["", " "]).tool_set(), Ok(ToolSet::None));
    assert_eq!(list(&["NONE"]).tool_set(), Ok(ToolSet::None));
    for word in ["true", "False"] {
        assert!(
            matches!(text(word).tool_set(), Err(WordsError::Refused { .. })),
            "{word}"
        );
    }
    assert_eq!(
        text("true").tool_set().unwrap_err().to_string(),
        "expected `all`, `none` or tool names, found `true`"
    );
    assert!(matches!(
        ListValue::Bool(true).tool_set(),
        Err(WordsError::Shape { .. })
    ));
}

#[test]
fn tools_lists() {
    assert_eq!(
        text(" read ,, Grep ,").tool_set(),
        Ok(ToolSet::only(["read", "Grep"]))
    );
    // A list item is never split, and keeps its case.
    assert_eq!(
        list(&[" Read ", "a,b", "Bash(git:*)"]).tool_set(),
        Ok(ToolSet::only(["Read", "a,b", "Bash(git:*)"]))
    );
    for among in [text("read, all"), list(&["read", "*"]), text("None, x")] {
        assert!(
            matches!(among.clone().tool_set(), Err(WordsError::NotAlone { .. })),
            "{among:?}"
        );
    }
    assert_eq!(
        text("read, ALL").tool_set().unwrap_err().to_string(),
        "`all` must stand alone, found it among names: read, ALL"
    );
}

#[test]
fn pi_star_with_extension_selectors() {
    for all in [
        text("*, ext:mcp/search"),
        text(" ALL , ext:web , EXT:mcp/search"),
        list(&["*", "ext:mcp"]),
        list(&["all", "ext:a/b", "ext:c"]),
    ] {
        assert_eq!(all.clone().tool_set(), Ok(ToolSet::All), "{all:?}");
    }
    // Anything but selectors beside `*` is still refused, and so is `*` after them.
    for refused in [
        text("*, read"),
        text("*, ext:mcp, read"),
        text("ext:mcp, *"),
        text("none, ext:mcp"),
        text("*, ext:"),
        text("*, *"),
    ] {
        assert!(
            matches!(refused.clone().tool_set(), Err(WordsError::NotAlone { .. })),
            "{refused:?}"
        );
    }
    // Among names a selector is a name, kept as written.
    assert_eq!(
        text("read, ext:mcp/search").tool_set(),
        Ok(ToolSet::only(["read", "ext:mcp/search"]))
    );
    // Only `tools` reads selectors after `*`.
    assert!(text("*, ext:mcp").subagent_allowance().is_err());
    assert_eq!(
        text("*, ext:mcp").tool_names(),
        Err(WordsError::Refused {
            field: ListField::DisallowedTools,
            word: Keyword::Star
        })
    );
}

#[test]
fn extension_selectors() {
    for (written, extension, tool) in [
        ("ext:mcp", "mcp", None),
        ("Ext:mcp/search", "mcp", Some("search")),
        (" ext: mcp / search ", "mcp", Some("search")),
        ("ext:a/b/c", "a", Some("b/c")),
    ] {
        assert_eq!(
            ExtensionSelector::parse(written),
            Some(ExtensionSelector { extension, tool }),
            "{written:?}"
        );
    }
    for not in [
        "",
        "ext",
        "ext:",
        "ext: ",
        "ext:/x",
        "ext:x/",
        "extension:x",
        "é:x",
    ] {
        assert_eq!(ExtensionSelector::parse(not), None, "{not:?}");
    }
}

#[test]
fn disallowed_tools_take_names_only() {
    assert_eq!(
        text("bash, write").tool_names(),
        Ok(vec!["bash".into(), "write".into()])
    );
    assert_eq!(text("").tool_names(), Ok(vec![]));
    assert_eq!(list(&[]).tool_names(), Ok(vec![]));
    for keyword in Keyword::EVERY {
        let upper = keyword.as_str().to_uppercase();
        for written in [text(keyword.as_str()), list(&["read", &upper])] {
            assert_eq!(
                written.tool_names(),
                Err(WordsError::Refused {
                    field: ListField::DisallowedTools,
                    word: keyword
                })
            );
        }
    }
    assert!(ListValue::Bool(false).tool_names().is_err());
}

#[test]
fn allowed_subagents_words_and_booleans() {
    for all in ["all", "*", "true", "True", "ALL"] {
        assert_eq!(text(all).subagent_allowance(), Ok(SubagentAllowance::All));
        assert_eq!(
            list(&[all]).subagent_allowance(),
            Ok(SubagentAllowance::All)
        );
    }
    for none in ["none", "false", "FALSE", "", " "] {
        assert_eq!(text(none).subagent_allowance(), Ok(SubagentAllowance::None));
    }
    assert_eq!(list(&[]).subagent_allowance(), Ok(SubagentAllowance::None));
    assert_eq!(
        ListValue::Bool(true).subagent_allowance(),
        Ok(SubagentAllowance::All)
    );
    assert_eq!(
        ListValue::Bool(false).subagent_allowance(),
        Ok(SubagentAllowance::None)
    );
    assert_eq!(
        text("writer, Reviewer").subagent_allowance(),
        Ok(SubagentAllowance::only(["writer", "Reviewer"]))
    );
    assert!(matches!(
        list(&["writer", "true"]).subagent_allowance(),
        Err(WordsError::NotAlone {
            word: Keyword::True,
            ..
        })
    ));
}

#[test]
fn checked_names_read_back_as_themselves() {
    let names: Vec<String> = vec!["read".into(), "Bash(git:*)".into(), "a,b".into()];
    assert_eq!(ListField::Tools.check_names(&names), Ok(()));
    assert_eq!(
        ListValue::List(names.clone()).tool_set(),
        Ok(ToolSet::Only(names))
    );
    for (bad, index) in [(vec!["a", ""], 2), (vec![" a"], 1), (vec!["a", "b\t"], 2)] {
        let bad: Vec<String> = bad.into_iter().map(str::to_owned).collect();
        assert!(
            matches!(
                ListField::AllowedSubagents.check_names(&bad),
                Err(WordsError::Untrimmed { index: i, .. }) if i == index
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        ListField::Tools.check_names(&["x".into(), "All".into()]),
        Err(WordsError::KeywordName {
            field: ListField::Tools,
            index: 2,
            word: Keyword::All
        })
    );
}

/// Claude Code's delegation entries: `Agent` or `Task`, bare or naming types, which the words
/// rule of `allowed_subagents` reads; the head is matched exactly.
#[test]
fn delegation_entries_grant_what_they_name() {
    let names = [
        "Agent(writer, reviewer)".to_owned(),
        "Read".to_owned(),
        "Task(writer)".to_owned(),
    ];
    let entries = delegation_entries(&names).unwrap().unwrap();
    assert_eq!(
        entries.named,
        Some(SubagentAllowance::only(["writer", "reviewer"]))
    );
    assert!(!entries.bare);
    let bare = delegation_entries(&["Agent".to_owned()]).unwrap().unwrap();
    assert_eq!(bare.grants(), SubagentAllowance::All);
    assert!(
        delegation_entries(&["task".to_owned(), "Agents".to_owned()])
            .unwrap()
            .is_none()
    );
    assert!(delegation_entries(&["Agent(all, writer)".to_owned()]).is_err());
}
