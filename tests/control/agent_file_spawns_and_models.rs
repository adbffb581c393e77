//! Agent files as pi writes them: `spawns` is `allowed_subagents` under pi's name (given
//! twice is refused, an unquoted `*` asks to be quoted), and a `model` that lists several
//! models names the first, trimmed.

use std::path::Path;

use agent_tree::prelude::*;

fn parse(front: &str) -> Result<AgentDefinition, String> {
    let text = format!("---\nname: lead\n{front}\n---\nYou lead.\n");
    agent_tree::parse_agent_file(Path::new("lead.md"), &text).map_err(|e| e.to_string())
}

/// pi's `spawns` field is `allowed_subagents` by another name: giving both is refused, an
/// unquoted `*` is refused with a hint to quote it, and the same words give the same
/// allowance. A `model` list names its first entry, trimmed (`inherit` first means none).
#[test]
fn pis_spawns_reads_as_allowed_subagents_and_a_model_list_names_its_first_entry() {
    // Both spellings of one field: refused, naming the first.
    let err = parse("spawns: plan\nallowed_subagents: review").unwrap_err();
    assert!(err.contains("given twice"), "{err}");
    let err = parse("allowed_subagents: review\nspawns: plan").unwrap_err();
    assert!(err.contains("given twice"), "{err}");
    // Unquoted `*`: YAML reads an alias; the error says to quote it.
    let err = parse("spawns: *").unwrap_err();
    assert!(err.contains(r#"quote the value: spawns: "*""#), "{err}");
    // The same words as allowed_subagents.
    for (value, expected) in [
        ("'*'", SubagentAllowance::All),
        ("all", SubagentAllowance::All),
        ("none", SubagentAllowance::None),
        ("false", SubagentAllowance::None),
        (
            "[plan, review]",
            SubagentAllowance::only(["plan", "review"]),
        ),
        ("plan, review", SubagentAllowance::only(["plan", "review"])),
    ] {
        let definition = parse(&format!("spawns: {value}")).unwrap();
        assert_eq!(definition.allowed_subagents, expected, "spawns: {value}");
    }
    // Model lists: the first entry, trimmed.
    for (value, expected) in [
        ("claude-haiku-4-5, haiku, flash", Some("claude-haiku-4-5")),
        ("'  sonnet  ,  opus '", Some("sonnet")),
        ("opus,", Some("opus")),
        ("inherit, opus", None),
        ("openai/gpt-5", Some("openai/gpt-5")),
    ] {
        let definition = parse(&format!("model: {value}")).unwrap();
        assert_eq!(definition.model.as_deref(), expected, "model: {value}");
    }
}
