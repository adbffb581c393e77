//! Every conversation a model is sent has a result for every call, right after the message
//! that made it, as providers require (OpenAI and Anthropic refuse a call left without its
//! result): a child that inherits its owner's context mid-turn gets the owner's pending calls
//! as still running, and a run that ends while its calls are out keeps them answered as not
//! answered, so a resume continues a well-formed conversation.

use crate::support::harness::{a, idle, tree};
use crate::support::{RecordingModel, catalog, unanswered};
use agent_tree::prelude::*;
use agent_tree::protocol::{Message, Role};
use agent_tree::testkit::{Call, ScriptedModel, Turn};

/// Panics naming the place where a call of `messages` has not exactly one result right
/// after its message.
fn assert_every_call_answered(messages: &[Message]) {
    if let Some(problem) = unanswered(messages) {
        panic!("{problem}: {messages:#?}");
    }
}

fn lead_heir_sleeper() -> Catalog {
    catalog([
        AgentDefinition::new("lead", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("heir", "").with_inherit_context(true),
        AgentDefinition::new("sleeper", ""),
    ])
}

#[tokio::test(start_paused = true)]
async fn a_child_inheriting_a_context_mid_turn_sees_its_owners_pending_calls_as_running() {
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([
                    Call::spawn_background("sleeper", "nap"),
                    Call::spawn("heir", "the heir's task"),
                ]),
                Turn::answer("lead done"),
            ],
        )
        .script("heir", [Turn::answer("heir done")])
        .script("sleeper", [Turn::hang()]);
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), lead_heir_sleeper(), TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;

    let heir = tree
        .snapshot()
        .records
        .iter()
        .find(|r| r.agent_type == "heir")
        .map(|r| r.id)
        .expect("the heir");
    let first = model.request(heir, 1);
    assert_every_call_answered(&first.messages);
    let texts: Vec<(Role, &str)> = first
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(texts[0], (Role::User, "go"));
    assert_eq!(texts[1].0, Role::Assistant);
    // Both of the lead's calls, the heir's own spawn among them, as still running.
    assert_eq!(first.messages[1].tool_calls.len(), 2);
    for result in &first.messages[2..4] {
        assert_eq!(result.role, Role::Tool);
        assert!(!result.is_error);
        assert!(
            result.content.contains("\"status\":\"running\""),
            "{result:?}"
        );
    }
    assert_eq!(texts[4], (Role::User, "the heir's task"));
    assert_eq!(texts.len(), 5);
    // The lead's own conversation is its own: its calls got their real results.
    let lead_next = model.request(a(1), 2);
    assert_every_call_answered(&lead_next.messages);
    assert!(
        lead_next
            .messages
            .iter()
            .all(|m| !m.content.contains("handed to a subagent")),
        "{lead_next:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_aborted_while_its_calls_are_out_is_resumed_with_every_call_answered() {
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn("sleeper", "nap"),
                Turn::answer("lead done after the resume"),
            ],
        )
        .script("sleeper", [Turn::hang()]);
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), lead_heir_sleeper(), TreeConfig::default()).await;
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    // The lead waits on its sleeper (a foreground spawn) when it is aborted.
    while tree
        .record(a(2))
        .is_none_or(|r| r.status != AgentStatus::Running)
    {
        tokio::task::yield_now().await;
    }
    tree.abort(lead.id()).unwrap();
    idle(&tree).await;
    assert_eq!(tree.record(a(1)).unwrap().status, AgentStatus::Aborted);

    let mut resumed = tree.resume(a(1), "try again").await.unwrap();
    let outcome = resumed.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("lead done after the resume"));
    let calls = model.calls_of(a(1));
    assert_eq!(calls.len(), 2, "one call a run");
    let request = &calls[1];
    assert_every_call_answered(&request.messages);
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::User],
        "{request:#?}"
    );
    let result = &request.messages[2];
    assert!(result.is_error);
    assert!(result.content.contains("not answered"), "{result:?}");
    assert_eq!(request.messages[3].content, "try again");
}
