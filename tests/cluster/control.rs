//! An owner controls its remote child as a local one: a steer reaches it (queued before it
//! starts, refused once its run is over, receipted only if a turn reads it); an abort or a
//! kill stops its hosted agent at once, by the command, not by a lease, and leaves nothing
//! routed; its questions reach the owner's handler and the answer comes back.

use super::assert_stand_ins_back;
use super::support::{runner_working, shut_down_and_finish};
use super::support::{spawn_runner, within};
use std::time::{Duration, Instant};

use agent_tree::protocol::{AgentDefinition, AgentStatus, SpawnRequest, SubagentAllowance};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree};

use super::worker;
use super::{
    LEASE_MS, Owner, eventually, first_usage, root_tokens, runner, time_to_no_live_agent, tree_of,
    worker_until,
};

/// A steer sent to a remote agent mid-run reaches it: a later turn reads it, and its usage is
/// counted as the worker billed it.
pub(crate) async fn a_steer_reaches_the_remote_agent_mid_run(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = spawn_runner(&tree, "work 4 150").await;
    first_usage(&tree, handle.id()).await;
    tree.steer(handle.id(), "use the fast path").await.unwrap();
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 4 | steered: use the fast path"),
        "{outcome:?}"
    );
    assert_eq!(root_tokens(&tree), 48);
    shut_down_and_finish(&tree, process).await;
}

/// A steer to a remote child the pool has not started yet is receipted `queued` and reaches
/// the remote agent once it runs; a steer to a settled remote child is refused at once.
pub(crate) async fn steers_before_a_remote_agent_starts_are_queued_and_a_settled_one_refuses(
    owner: &mut Owner,
) {
    let (name, process) = owner.worker().await;
    let tree = tree_of(
        owner,
        vec![runner().on_node(&name)],
        ScriptedModel::new(),
        agent_tree::TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut first = tree
        .spawn(SpawnRequest::new("runner", "work 3 100").background())
        .await
        .unwrap();
    let mut second = tree
        .spawn(SpawnRequest::new("runner", "work 2 50").background())
        .await
        .unwrap();
    assert_eq!(
        tree.record(second.id()).unwrap().status,
        AgentStatus::Queued
    );
    let receipt = tree.steer(second.id(), "early").await;
    assert!(
        matches!(receipt, Ok(agent_tree::SteerReceipt::Queued)),
        "{receipt:?}"
    );
    let outcome = within(10, "settles", first.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("done 3"), "{outcome:?}");
    let outcome = within(10, "settles", second.outcome()).await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 2 | steered: early"),
        "{outcome:?}"
    );
    let refused = within(
        2,
        "a steer to a settled remote child returns",
        tree.steer(first.id(), "late"),
    )
    .await;
    assert!(
        matches!(refused, Err(agent_tree::ControlError::WrongStatus(..))),
        "{refused:?}"
    );
    shut_down_and_finish(&tree, process).await;
}

/// A steer to an agent whose run is over (here: completing, draining a background child) is
/// refused, `WrongStatus` (a receipt is `delivered` only if a turn will read it). Checked
/// on a local agent first, then on the same agent run remotely.
pub(crate) async fn a_steer_to_a_remote_agent_whose_run_is_over_is_refused_as_a_local_one(
    owner: &mut Owner,
) {
    // Local: the drainer answers at once and waits for its helper.
    let model = ScriptedModel::new()
        .script(
            "drainer",
            Script::new([
                Turn::spawn_background("helper", "help"),
                Turn::answer("lead done"),
            ]),
        )
        .script(
            "helper",
            Script::new([Turn::answer("helped").after(Duration::from_millis(1500))]),
        );
    let local = Tree::builder()
        .catalog(
            Catalog::new([
                AgentDefinition::new("drainer", "")
                    .with_allowed_subagents(SubagentAllowance::only(["helper"]))
                    .with_settle(agent_tree::protocol::SettlePolicy::Drain),
                AgentDefinition::new("helper", ""),
            ])
            .unwrap(),
        )
        .model(model)
        .build()
        .await
        .unwrap();
    let id = local
        .spawn(SpawnRequest::new("drainer", "go"))
        .await
        .unwrap()
        .id();
    assert!(
        eventually(Duration::from_secs(3), || local
            .record(id)
            .is_some_and(|r| r.status == AgentStatus::Completing))
        .await
    );
    let receipt = local.steer(id, "too late").await;
    assert!(
        matches!(receipt, Err(agent_tree::ControlError::WrongStatus(..))),
        "local: {receipt:?}"
    );
    local.shutdown().await;

    // Remote: the worker's `drainer` drains the same way.
    let (name, process) = owner.worker().await;
    let tree = tree_of(
        owner,
        vec![AgentDefinition::new("drainer", "").on_node(&name)],
        ScriptedModel::new(),
        agent_tree::TreeConfig::default(),
    )
    .await;
    let mut handle = tree
        .spawn(SpawnRequest::new("drainer", "delegate-bg 4 300"))
        .await
        .unwrap();
    let id = handle.id();
    // Until the mirror shows the hosted drainer completing (its run over).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let completing = tree.remote_records(id).await.is_some_and(|records| {
            records
                .get(1)
                .is_some_and(|r| r.status == AgentStatus::Completing)
        });
        assert!(
            Instant::now() < deadline,
            "the remote drainer never completed its run"
        );
        if completing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receipt = tree.steer(id, "too late").await;
    let outcome = within(10, "settles", handle.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    assert!(
        matches!(receipt, Err(agent_tree::ControlError::WrongStatus(..))),
        "remote: a steer no turn will read was receipted {receipt:?} (the local agent refuses it)"
    );
    shut_down_and_finish(&tree, process).await;
}

/// Steers racing a one-turn remote agent's end (several times, on the multi-thread
/// runtime): every steer returns, and one receipted `delivered` or `queued` is read by a
/// turn (the agent takes another turn for it), as a local agent's is.
pub(crate) async fn a_steer_racing_a_remote_agents_end_is_delivered_only_if_a_turn_reads_it(
    owner: &mut Owner,
) {
    // Local control: the worker's own tree and model, in this process.
    let local = worker::hosted_tree().build().await.unwrap();
    let lost = steers_racing_the_end(&local).await;
    assert!(
        lost.is_empty(),
        "local: steers receipted but never read: {lost:?}"
    );
    local.shutdown().await;
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let lost = steers_racing_the_end(&tree).await;
    assert!(
        lost.is_empty(),
        "remote: steers receipted but never read by a turn ({} of 30): {lost:?}",
        lost.len()
    );
    shut_down_and_finish(&tree, process).await;
}

/// 30 one-turn `runner`s, each steered a few ms after its spawn: the steers receipted
/// (`delivered` or `queued`) whose text the agent's answer does not carry.
async fn steers_racing_the_end(tree: &Tree) -> Vec<String> {
    let mut lost = Vec::new();
    for i in 0..30u64 {
        let mut handle = spawn_runner(tree, "work 1 0").await;
        let id = handle.id();
        tokio::time::sleep(Duration::from_millis(i % 6)).await;
        let text = format!("race {i}");
        let receipt = within(
            2,
            "a steer racing the agent's end returns",
            tree.steer(id, text.clone()),
        )
        .await;
        let outcome = within(10, "settles", handle.outcome()).await;
        let read = outcome.text.as_deref().unwrap_or_default().contains(&text);
        if receipt.is_ok() && !read {
            lost.push(format!("{i}: {receipt:?} -> {:?}", outcome.text));
        }
    }
    lost
}

/// The outcome of a local agent aborted mid-turn: what a remote child's abort must match.
async fn local_abort() -> agent_tree::protocol::Outcome {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let tree = Tree::builder()
        .catalog(Catalog::new([AgentDefinition::new("w", "")]).unwrap())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("w", "hang")).await.unwrap();
    tree.abort(handle.id()).unwrap();
    let outcome = handle.outcome().await;
    tree.shutdown().await;
    outcome
}

/// `Tree::abort` of a remote child: the hosted agent is aborted (promptly, by the abort
/// command, not by a lease), and the owner's outcome says what a local abort says.
pub(crate) async fn aborting_a_remote_child_aborts_its_hosted_agent_as_a_local_abort(
    owner: &mut Owner,
) {
    let local = local_abort().await;
    let stand_ins = owner.node.stats().stand_ins;
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = spawn_runner(&tree, "work 100 100").await;
    let id = handle.id();
    first_usage(&tree, id).await;
    tree.abort(id).unwrap();
    let outcome = within(5, "an aborted remote child settles", handle.outcome()).await;
    assert_eq!(
        (outcome.status, outcome.reason),
        (local.status, local.reason),
        "{outcome:?} vs the local {local:?}"
    );
    let took = time_to_no_live_agent(&mut process);
    assert!(
        took < Duration::from_millis(LEASE_MS / 2),
        "the hosted agent stopped only after {took:?}"
    );
    // A steer to the settled remote child is refused like a local one's.
    assert!(matches!(
        tree.steer(id, "too late").await,
        Err(agent_tree::ControlError::WrongStatus(..))
    ));
    assert_stand_ins_back(
        owner,
        2,
        stand_ins,
        "the stand-in of a settled child is still routed",
    )
    .await;
    shut_down_and_finish(&tree, process).await;
}

/// `Tree::kill` of a remote child settles its record killed and removes its stand-in from
/// the node (`Node::stats().stand_ins` back to what it was).
pub(crate) async fn killing_a_remote_child_removes_its_stand_in(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = spawn_runner(&tree, "work 100 100").await;
    first_usage(&tree, handle.id()).await;
    assert_eq!(owner.node.stats().stand_ins, stand_ins + 1);
    tree.kill(handle.id()).unwrap();
    let outcome = within(5, "a killed remote child settles", handle.outcome()).await;
    assert_eq!(outcome.status, AgentStatus::Killed, "{outcome:?}");
    assert_stand_ins_back(owner, 3, stand_ins, "the killed stand-in is still routed").await;
    shut_down_and_finish(&tree, process).await;
}

/// `Tree::kill` of a remote child stops its hosted agent at once (the stand-in's end tells
/// the hosted side), not only when the hosted side's lease lapses (up to a lease later,
/// billing turns nobody counts meanwhile).
pub(crate) async fn killing_a_remote_child_stops_its_hosted_agent_before_the_lease(
    owner: &mut Owner,
) {
    let (mut process, tree, mut handle) = runner_working(owner, "work 100 100").await;
    tree.kill(handle.id()).unwrap();
    let killed_at = Instant::now();
    let outcome = within(5, "a killed remote child settles", handle.outcome()).await;
    assert_eq!(outcome.status, AgentStatus::Killed, "{outcome:?}");
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    let took = killed_at.elapsed();
    assert_eq!(live, 0);
    assert!(
        took < Duration::from_millis(LEASE_MS / 2),
        "the hosted agent ran on for {took:?} after its owner's kill (the lease is {LEASE_MS} ms)"
    );
    shut_down_and_finish(&tree, process).await;
}

/// A remote agent's `ask_owner` reaches the owner tree's question handler and the answer
/// comes back to it; with no handler on the owner's side, the question is refused, as a
/// local one would be.
pub(crate) async fn a_remote_question_reaches_its_owner_and_the_answer_comes_back(
    owner: &mut Owner,
) {
    let (name, process) = owner.worker().await;
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
        .model(ScriptedModel::new())
        .on_question(|q: agent_tree::Question| async move {
            Ok(format!("yes, {} may {}", q.agent_type, q.question))
        })
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let outcome = tree
        .run(SpawnRequest::new("runner", "ask deploy"))
        .await
        .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let text = outcome.text.unwrap_or_default();
    assert!(text.starts_with("answered: "), "{text}");
    assert!(text.contains("yes, runner may deploy"), "{text}");
    tree.shutdown().await;
    // No handler on the owner's side: the question is refused, as a local one would be.
    let tree = owner.tree(&name, runner()).await;
    let outcome = tree
        .run(SpawnRequest::new("runner", "ask deploy"))
        .await
        .unwrap();
    let text = outcome.text.unwrap_or_default();
    assert!(text.contains("no one answers questions"), "{text}");
    shut_down_and_finish(&tree, process).await;
}
