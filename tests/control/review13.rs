//! Review 13: end notices taken back when a result is read (7165a1e), blank tasks refused
//! except on resume (c20cf2f), pi's `spawns` and model lists in agent files (e8f04f8).

use std::path::Path;
use std::time::Duration;

use crate::support::RecordingModel;
use crate::support::harness::{a, idle, tree};
use agent_tree::prelude::*;
use agent_tree::protocol::Role;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("slow", ""),
        AgentDefinition::new("quick", ""),
    ])
    .unwrap()
}

fn noop() -> Call {
    Call::tool("noop", json!({}))
}

fn noticed(messages: &[agent_tree::protocol::Message], id: &str, text: &str) -> bool {
    messages.iter().any(|m| {
        m.role == Role::User
            && m.content
                .starts_with(&format!(r#"{{"agent_id":"{id}","notice":"subagent_ended""#))
            && m.content.contains(text)
    })
}

/// A peek (no wait) while the child still runs reads nothing: when the child then ends
/// during a later model turn whose tools do not read it, the notice arrives.
#[tokio::test(start_paused = true)]
async fn review13_a_peek_while_running_does_not_take_back_the_later_notice() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::spawn_background("slow", "take your time"),
                Turn::calls([Call::peek(a(2))]),
                Turn::calls([noop()]).after(Duration::from_millis(600)),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "slow",
            Script::new([Turn::answer("slow done").after(Duration::from_millis(300))]),
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let fourth = &model.calls_of(a(1))[3].messages;
    assert!(noticed(fourth, "a2", "slow done"), "{fourth:#?}");
    tree.shutdown().await;
}

/// A result read once, the child resumed in the background, and ending again during a
/// model turn that does not read it: the second end is noticed.
#[tokio::test(start_paused = true)]
async fn review13_a_resumed_child_ending_again_is_noticed_after_its_first_result_was_read() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::spawn_background("quick", "one"),
                Turn::calls([Call::result(a(2))]).after(Duration::from_millis(50)),
                Turn::calls([Call::tool(
                    "Agent",
                    json!({ "resume": "a2", "prompt": "again", "background": true }),
                )]),
                Turn::calls([noop()]).after(Duration::from_millis(200)),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "quick",
            Script::new([
                Turn::answer("first done"),
                Turn::answer("second done").after(Duration::from_millis(50)),
            ]),
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let calls = model.calls_of(a(1));
    let fifth = &calls[4].messages;
    assert!(noticed(fifth, "a2", "second done"), "{fifth:#?}");
    assert!(
        !noticed(fifth, "a2", "first done"),
        "the read result is not noticed"
    );
    tree.shutdown().await;
}

/// A child that ended during its owner's model turn, resumed by that turn's first call
/// and awaited by its second: the first run's result never reached the model by a tool
/// (the wait answers the second run's), so its notice must not be taken back.
#[tokio::test(start_paused = true)]
async fn review13_a_first_runs_notice_is_not_taken_back_by_a_read_of_the_second_run() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::spawn_background("quick", "one"),
                Turn::calls([
                    Call::tool(
                        "Agent",
                        json!({ "resume": "a2", "prompt": "again", "background": true }),
                    ),
                    Call::tool(
                        "get_subagent_result",
                        json!({ "agent_id": "a2", "wait": true }),
                    ),
                ])
                .after(Duration::from_millis(50)),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "quick",
            Script::new([Turn::answer("first done"), Turn::answer("second done")]),
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let calls = model.calls_of(a(1));
    let third = &calls[2].messages;
    let resumed_ok = third
        .iter()
        .any(|m| m.role == Role::Tool && m.content.contains("second done"));
    if resumed_ok {
        let first_seen = third.iter().any(|m| m.content.contains("first done"));
        assert!(
            first_seen,
            "the first run's result never reached the model: {third:#?}"
        );
    }
    tree.shutdown().await;
}

/// An empty resume of a settled top agent (Tree::resume) and of a child (the Agent tool)
/// continues the conversation: the blank-task refusal is for new agents only.
#[tokio::test(start_paused = true)]
async fn review13_empty_resumes_still_continue() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::spawn("quick", "one"),
                Turn::calls([Call::tool("Agent", json!({ "resume": "a2", "prompt": "" }))]),
                Turn::answer("boss done"),
                Turn::answer("boss again"),
            ]),
        )
        .script(
            "quick",
            Script::new([Turn::answer("first done"), Turn::answer("second done")]),
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let third = &model.calls_of(a(1))[2].messages;
    assert!(
        third
            .iter()
            .any(|m| m.role == Role::Tool && m.content.contains("second done")),
        "the child's empty resume did not run: {third:#?}"
    );
    let mut handle = tree
        .resume(a(1), "")
        .await
        .expect("an empty resume is taken");
    let again = handle.outcome().await;
    assert_eq!(again.text.as_deref(), Some("boss again"), "{again:?}");
    // Blank tasks for new agents are refused; whitespace-only too.
    for blank in ["", "  \n\t"] {
        let err = tree
            .spawn(SpawnRequest::new("quick", blank))
            .await
            .unwrap_err();
        assert!(matches!(err, SpawnError::InvalidRequest(_)), "{err:?}");
    }
    tree.shutdown().await;
}

/// A background top agent queued for a pool slot starts from its kept spec with its task.
#[tokio::test(start_paused = true)]
async fn review13_a_queued_spawn_starts_with_its_task() {
    let scripted = ScriptedModel::new().script(
        "slow",
        Script::new([Turn::answer("done").after(Duration::from_millis(100))]),
    );
    let model = RecordingModel::new(scripted);
    let mut config = TreeConfig::default();
    config.max_concurrent = 1;
    let tree = tree(model.clone(), catalog(), config).await;
    let mut first = SpawnRequest::new("slow", "first task");
    first.background = Some(true);
    let mut second = SpawnRequest::new("slow", "second task");
    second.background = Some(true);
    let mut h1 = tree.spawn(first).await.unwrap();
    let mut h2 = tree.spawn(second).await.unwrap();
    assert_eq!(tree.record(h2.id()).unwrap().status, AgentStatus::Queued);
    assert!(h1.outcome().await.is_completed());
    assert!(h2.outcome().await.is_completed());
    idle(&tree).await;
    let calls = model.calls_of(h2.id());
    assert!(
        calls[0]
            .messages
            .iter()
            .any(|m| m.role == Role::User && m.content == "second task"),
        "{:#?}",
        calls[0].messages
    );
    tree.shutdown().await;
}

fn parse(front: &str) -> Result<AgentDefinition, String> {
    let text = format!("---\nname: lead\n{front}\n---\nYou lead.\n");
    agent_tree::parse_agent_file(Path::new("lead.md"), &text).map_err(|e| e.to_string())
}

/// pi's `spawns` and model lists.
#[test]
fn review13_pi_spawns_and_model_lists() {
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
