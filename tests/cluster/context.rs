//! The owner tree's ids in a remote child's inherited context, on the child's node. The
//! context names the owner's other children by the owner tree's ids; the child's hosted
//! tree gives its own children ids of its own. They go down as foreign ids (the owner's
//! plus 1,000,000,000), so the child's model, acting on that history, reaches no agent of
//! its own where it meant one of its owner's ("no subagent … of yours", as a local child
//! reaching past its subtree is told), and the owner keeps the conversation as a local
//! child's: the context as the owner wrote it.

use agent_tree::JournalConfig;
use agent_tree::protocol::{
    AgentDefinition, AgentId, Message, Role, SpawnRequest, SubagentAllowance,
};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree};

use super::review4::Dir;
use super::review6::kept;
use super::{Owner, runner, worker_idle};

/// The owner's `a<n>` as the child's node names it.
fn foreign(id: AgentId) -> String {
    format!("a{}", 1_000_000_000 + id.get())
}

/// `lead` (local) runs two local helpers to their end, then a `runner` on the worker that
/// inherits its context; the runner (the worker's `reach` task) starts a helper of its own
/// in the background and steers the first agent its context's delegation results name: the
/// lead's first helper, which is not its own to steer.
pub(crate) async fn a_remote_childs_inherited_context_names_its_owners_agents_apart_from_its_own(
    owner: &mut Owner,
) {
    let dir = Dir::new("context");
    let path = dir.file("owner.jsonl");
    let (name, mut process) = owner.worker().await;
    let lead = AgentDefinition::new("lead", "You lead.")
        .with_allowed_subagents(SubagentAllowance::only(["helper", "runner"]));
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([Call::spawn("helper", "one"), Call::spawn("helper", "two")]),
                Turn::spawn("runner", "go"),
                Turn::answer("the lead is done"),
            ]),
        )
        .script("helper", Script::new([Turn::answer("helped")]));
    let catalog = Catalog::new([
        lead,
        AgentDefinition::new("helper", ""),
        runner().with_inherit_context(true).on_node(&name),
    ])
    .unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .node(&owner.node)
        .journal(JournalConfig::new(&path))
        .build()
        .await
        .unwrap();
    let outcome = tree.run(SpawnRequest::new("lead", "reach")).await.unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("the lead is done"),
        "{outcome:?}"
    );
    let snapshot = tree.snapshot();
    let lead_id = snapshot
        .records
        .iter()
        .find(|r| r.agent_type == "lead")
        .expect("the lead's record")
        .id;
    let first_helper = snapshot
        .records
        .iter()
        .filter(|r| r.agent_type == "helper" && r.parent == Some(lead_id))
        .map(|r| r.id)
        .min()
        .expect("the lead's helpers");
    let runner = snapshot
        .records
        .iter()
        .find(|r| r.agent_type == "runner")
        .expect("the runner's record");
    // Its own helper took no number the context names: the steer reached no agent of its.
    let on_its_node = foreign(first_helper);
    let text = runner.outcome.as_ref().and_then(|o| o.text.clone());
    assert_eq!(
        text,
        Some(format!(
            r#"reached {on_its_node}: {{"error":"no subagent {on_its_node} of yours"}}"#
        )),
        "{runner:?}"
    );
    let mirrored_helper = snapshot
        .records
        .iter()
        .find(|r| r.parent == Some(runner.id))
        .expect("the runner's own helper, mirrored");
    let helper_text = mirrored_helper
        .outcome
        .as_ref()
        .and_then(|o| o.text.clone());
    assert!(
        !helper_text.unwrap_or_default().contains("steered"),
        "the runner's own helper was steered: {mirrored_helper:?}"
    );
    // The owner keeps it as a local child's: the context as the lead had it, and the steer
    // and its refusal naming the lead's helper by the owner's id.
    let runner_kept = kept(&tree, &path, runner.id).await;
    let lead_kept = kept(&tree, &path, lead_id).await;
    let task = runner_kept
        .iter()
        .position(|m| m.role == Role::User && m.content == "go")
        .expect("the runner's task after its context");
    assert!(task > 0, "the runner inherited a context");
    assert_inherited(&runner_kept[..task], &lead_kept, "the context kept");
    let steer = runner_kept
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|c| c.id == "reach-steer")
        .expect("the steer call");
    assert_eq!(
        steer.input.to_value()["agent_id"],
        serde_json::json!(first_helper.to_string())
    );
    let refusal = runner_kept
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("reach-steer"))
        .expect("the steer's result");
    assert_eq!(
        refusal.content,
        format!(r#"{{"error":"no subagent {first_helper} of yours"}}"#)
    );
    tree.shutdown().await;
    assert_eq!(
        worker_idle(&mut process).0,
        0,
        "the worker hosts nothing after"
    );
    process.finish();
}

/// Checks that `inherited` (a child's kept conversation before its task) is `owner`'s kept
/// conversation as it was when the child was spawned: the owner's messages through the turn
/// that spawned it, then each call of that turn as still running (its result not in yet).
pub(crate) fn assert_inherited(inherited: &[Message], owner: &[Message], what: &str) {
    let turn = inherited
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .expect("the owner's spawning turn");
    assert_eq!(inherited[..=turn], owner[..=turn], "{what}");
    let calls = &inherited[turn].tool_calls;
    let pending = &inherited[turn + 1..];
    assert_eq!(pending.len(), calls.len(), "{what}: {pending:?}");
    for (result, call) in pending.iter().zip(calls) {
        assert_eq!(
            (result.role, result.tool_call_id.as_deref()),
            (Role::Tool, Some(call.id.as_str())),
            "{what}"
        );
        assert!(
            result.content.contains("\"status\":\"running\""),
            "{what}: {result:?}"
        );
    }
}
