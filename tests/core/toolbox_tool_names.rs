//! The toolbox's name rule: a tool name is 1 to 64 of `A-Z a-z 0-9 _ -`, an orchestration
//! name is reserved, and so is `Task` (an agent file's `Task` is Claude Code's delegation
//! entry), so one word grants a tool or delegation, never both. A refusal says which name
//! and why.

use agent_tree::Toolbox;
use agent_tree::prelude::*;

/// One word in `tools` means one thing: registering a tool named `Task` is refused (the word
/// is Claude Code's delegation entry), so a file's `Task` never grants both a tool and
/// delegation.
#[tokio::test(start_paused = true)]
async fn a_tool_named_task_is_refused_so_the_word_grants_delegation_only() {
    let refused = Tree::builder()
        .tool(crate::support::harness::ok_tool("Task"))
        .map(|_| ())
        .expect_err("a tool named `Task` is refused");
    assert!(refused.reason.contains("delegation"), "{refused}");
}

/// The toolbox refuses a name outside 1 to 64 of `A-Z a-z 0-9 _ -` (and a reserved one),
/// and says which name.
#[test]
fn the_toolbox_refuses_names_outside_the_rule_and_says_which() {
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
