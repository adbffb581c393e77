//! Spawning on another node: what comes back (the result, the usage counted once, the
//! hosted subtree mirrored under the owner's ids), what is refused and why (at once, never a
//! hang), placement on the owner's own node, and the limits and policies a remote child is
//! held to as a local one is: `max_subtree_tokens`, a request's settle policy, the pool's
//! queue, a detached child outliving its owner agent.

use super::assert_stand_ins_back;
use super::lead_and_runner_tree;
use super::support::finish_idle;
use super::support::lead_completes;
use super::support::run_within;
use super::support::runner_within;
use super::support::settled_within_10s;
use super::support::shut_down_and_finish;
use super::support::{lead_done, record_of_type};
use super::support::{spawn_runner, within};
use std::time::{Duration, Instant};

use agent_tree::protocol::{AgentDefinition, AgentId, AgentStatus, SpawnRequest};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree, TreeConfig};

use super::worker::WorkerProcess;
use super::{Owner, lead_of, records_of, root_tokens, runner, tree_of, worker_idle, worker_until};

/// A remote child's outcome comes back to its owner, and the turns billed on the worker
/// are counted once at the root; the worker runs nothing after.
pub(crate) async fn a_remote_childs_result_comes_back_and_its_usage_counts_once(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = tree
        .run(SpawnRequest::new("runner", "work 3 20"))
        .await
        .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.text.as_deref(), Some("done 3"));
    // Three turns of 12 tokens each, billed on the worker, counted once at the root.
    assert_eq!(root_tokens(&tree), 36);
    let (live, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!((live, tokens), (0, 36));
    shut_down_and_finish(&tree, process).await;
}

/// A local lead's remote child and the helper it delegates to on its node: the runner is
/// the lead's child in the owner's tree, the helper a mirrored record under it (an id of the
/// owner's tree, its own usage split from the runner's), usage counted once across the
/// edge; the mirrored helper is controlled on its own node, never from the owner's.
pub(crate) async fn a_local_agent_delegates_to_a_remote_subtree(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let snapshot = lead_done(&tree, "go").await;
    // The remote runner is the lead's child in the owner's tree.
    let remote = record_of_type(&snapshot, "runner");
    assert_eq!(remote.status, AgentStatus::Completed);
    assert_eq!(
        snapshot.records[remote.parent.unwrap().get() as usize].agent_type,
        "lead"
    );
    // The runner's two turns and its hosted helper's two, counted once.
    let (_, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(tokens, 48);
    assert_eq!(remote.subtree.total_tokens(), 48);
    assert_eq!(root_tokens(&tree), 48);
    // The hosted subtree as the stand-in mirrored it: the runner and its helper.
    let mirror = tree
        .remote_records(remote.id)
        .await
        .expect("a remote child's mirror");
    let hosted: Vec<(&str, AgentStatus, u64)> = mirror
        .iter()
        .skip(1)
        .map(|r| (r.agent_type.as_str(), r.status, r.own.total_tokens()))
        .collect();
    assert_eq!(
        hosted,
        [
            ("runner", AgentStatus::Completed, 24),
            ("helper", AgentStatus::Completed, 24)
        ]
    );
    assert_eq!(mirror[1].subtree.total_tokens(), 48);
    assert!(
        tree.remote_records(AgentId::new(1)).await.is_none(),
        "the lead is local"
    );
    // The hosted helper is in the owner's own records too: a mirrored record under the
    // runner, with an id of the owner's tree, its own usage split from the runner's.
    let helper = snapshot
        .records
        .iter()
        .find(|r| r.agent_type == "helper")
        .expect("the helper's mirrored record in the owner's snapshot");
    assert_eq!(helper.parent, Some(remote.id));
    assert_eq!(remote.children, [helper.id]);
    assert_eq!(helper.depth, remote.depth + 1);
    assert!(helper.id > remote.id, "{helper:?}");
    assert_eq!(helper.status, AgentStatus::Completed);
    assert_eq!(helper.own.total_tokens(), 24);
    assert_eq!(remote.own.total_tokens(), 24);
    snapshot
        .check_usage()
        .expect("own and subtree agree across the edge");
    assert!(snapshot.render_text().contains("helper"));
    // It is controlled on its own node, not from here.
    assert_eq!(
        tree.steer(helper.id, "hello").await,
        Err(agent_tree::ControlError::Remote(helper.id))
    );
    assert_eq!(
        tree.abort(helper.id),
        Err(agent_tree::ControlError::Remote(helper.id))
    );
    assert_eq!(
        tree.kill(helper.id),
        Err(agent_tree::ControlError::Remote(helper.id))
    );
    assert!(
        tree.shutdown_agent(helper.id).await.is_err(),
        "a mirrored record is shut down through its remote owner"
    );
    shut_down_and_finish(&tree, process).await;
}

/// A spawn that cannot go down fails at once: a task over the body limit, even in parts,
/// never reaches the wire; a definition placed on a node with no session, or a request
/// placed on an unknown node, is refused naming it.
pub(crate) async fn a_spawn_that_cannot_go_down_is_refused_at_once(owner: &mut Owner) {
    // A task too large even in parts never reaches the wire: the spawn fails, at once.
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let huge = "x".repeat(agent_tree::protocol::DEFAULT_MAX_BODY_BYTES + 1);
    let outcome = tree.run(SpawnRequest::new("runner", huge)).await.unwrap();
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    assert!(
        outcome
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("body limit"),
        "{outcome:?}"
    );
    shut_down_and_finish(&tree, process).await;

    let tree = owner.tree("nowhere", runner()).await;
    let error = tree
        .spawn(SpawnRequest::new("runner", "work 1 1"))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no session to that node"),
        "{error}"
    );
    let error = tree
        .spawn(SpawnRequest::new("runner", "work 1 1").on_node("elsewhere"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("elsewhere"), "{error}");
    tree.shutdown().await;
}

/// A definition the worker does not have: the stand-in fails at once, saying the worker
/// refused the spawn; it never hangs; the worker's edge ends.
pub(crate) async fn a_spawn_the_worker_cannot_run_fails_with_its_cause(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, AgentDefinition::new("ghost", "")).await;
    // A spawn in one frame, and one in parts (a 9 MiB task).
    // regression: the refusal of a spawn in parts once named its last part, which the
    // stand-in did not take as its spawn's, and it hung.
    for task in ["haunt".to_owned(), "h".repeat(9 << 20)] {
        let outcome = run_within(
            10,
            "a refused remote spawn settles",
            &tree,
            SpawnRequest::new("ghost", task),
        )
        .await;
        assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
        let error = outcome.error.as_deref().unwrap_or_default();
        assert!(error.contains("refused the spawn"), "{outcome:?}");
        assert!(error.contains("ghost"), "{outcome:?}");
    }
    assert_stand_ins_back(owner, 2, stand_ins, "a stand-in is still routed").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let edges = loop {
        let (_, _, edges) = process.stats_with_edges();
        if edges == 0 || Instant::now() > deadline {
            break edges;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(edges, 0, "the refused spawn's hosted edge never ended");
    shut_down_and_finish(&tree, process).await;
}

/// A worker whose factory's tree does not build: the spawn fails with that cause, at once.
pub(crate) async fn a_worker_whose_tree_does_not_build_fails_the_spawn_with_that_cause(
    owner: &mut Owner,
) {
    let (name, process) = owner.worker_in_mode("broken").await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = runner_within(
        &tree,
        5,
        "a remote spawn on a broken worker settles",
        "work 1 1",
    )
    .await;
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(error.contains("did not build"), "{outcome:?}");
    shut_down_and_finish(&tree, process).await;
}

/// A definition placed on the owner's own node runs as a local agent: no stand-in, no edge.
pub(crate) async fn placement_on_the_owners_own_node_runs_locally(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let model = ScriptedModel::new().script("runner", Script::new([Turn::answer("ran here")]));
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node("owner")]).unwrap())
        .model(model)
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let mut handle = spawn_runner(&tree, "go").await;
    assert_eq!(owner.node.stats().stand_ins, stand_ins);
    let outcome = within(5, "settles", handle.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("ran here"), "{outcome:?}");
    let outcome = tree
        .run(SpawnRequest::new("runner", "go").on_node("owner"))
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    tree.shutdown().await;
}

/// `max_subtree_tokens` counts a remote child's usage: a lead whose remote child used more
/// than the budget may spawn no more.
pub(crate) async fn max_subtree_tokens_counts_remote_usage(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("runner", "work 3 20"),
            Turn::spawn("runner", "work 1 1"),
            Turn::answer("the lead is done"),
        ]),
    );
    let tree = lead_and_runner_tree(
        owner,
        &name,
        model.clone(),
        agent_tree::TreeConfig::default().with_max_subtree_tokens(30),
    )
    .await;
    lead_completes(&tree, 20).await;
    let runners = records_of(&tree, "runner");
    assert_eq!(
        runners.len(),
        1,
        "the second spawn is over the budget the first remote child used: {runners:?}"
    );
    let lead = records_of(&tree, "lead");
    assert_eq!(lead[0].subtree.total_tokens(), 36, "{lead:?}");
    let (_, tokens, _) = worker_idle(&mut process);
    assert_eq!(tokens, 36);
    shut_down_and_finish(&tree, process).await;
}

/// `SpawnRequest::with_settle` overrides the definition's settle policy for that run
/// (`PendingStart::settle`): a remote runner asked to drain keeps its background helper
/// until it completes, as a local one would, instead of aborting it at its run's end.
pub(crate) async fn a_spawn_requests_settle_policy_applies_to_a_remote_child(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let id = tree
        .spawn(
            SpawnRequest::new("runner", "delegate-bg 3 100")
                .with_settle(agent_tree::protocol::SettlePolicy::Drain),
        )
        .await
        .unwrap()
        .id();
    let outcome = settled_within_10s(&tree, id).await;
    assert_eq!(outcome[0].text.as_deref(), Some("lead done"), "{outcome:?}");
    let mirror = tree
        .remote_records(id)
        .await
        .expect("a remote child's mirror");
    let helper = mirror
        .iter()
        .find(|r| r.agent_type == "helper")
        .expect("the hosted helper");
    assert_eq!(
        helper.status,
        AgentStatus::Completed,
        "the drained helper was {:?} ({:?}): the request's settle policy did not cross the edge",
        helper.status,
        helper.outcome.as_ref().map(|o| o.reason)
    );
    shut_down_and_finish(&tree, process).await;
}

/// Top-level background remote spawns under `max_concurrent(1)`: one runs, the others wait
/// `queued` for the slot, each starts its stand-in when it gets it, all complete, and the
/// root's totals equal the sum of the records (snapshot and `render_text` agree).
pub(crate) async fn pooled_background_remote_spawns_queue_and_count_once(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = tree_of(
        owner,
        vec![runner().on_node(&name)],
        ScriptedModel::new(),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let handle = tree
            .spawn(SpawnRequest::new("runner", "work 2 100").background())
            .await
            .unwrap();
        ids.push(handle.id());
    }
    assert_eq!(tree.record(ids[2]).unwrap().status, AgentStatus::Queued);
    assert!(
        owner.node.stats().stand_ins <= 1,
        "one pool slot, one stand-in"
    );
    let outcomes = within(
        30,
        "the pooled remote children settle",
        tree.wait(&ids, agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await;
    for outcome in &outcomes {
        assert_eq!(outcome.text.as_deref(), Some("done 2"), "{outcome:?}");
    }
    let snapshot = tree.snapshot();
    let sum: u64 = snapshot.records.iter().map(|r| r.own.total_tokens()).sum();
    assert_eq!(root_tokens(&tree), 72);
    assert_eq!(sum, 72, "the records' own usage sums to the root's");
    let text = snapshot.render_text();
    assert!(text.contains("runner"), "{text}");
    for id in &ids {
        let mirror = tree
            .remote_records(*id)
            .await
            .expect("a remote child's mirror");
        assert_eq!(mirror[1].subtree.total_tokens(), 24);
    }
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 72, 0));
    shut_down_and_finish(&tree, process).await;
}

/// A lead that spawns a detached remote runner doing `task` in the background and answers
/// at once: the tree, the runner (live after its lead's run ended) and the worker.
async fn detached_runner_after_its_lead(
    owner: &mut Owner,
    task: &str,
) -> (Tree, AgentId, WorkerProcess) {
    let (name, process) = owner.worker().await;
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn_background("runner", task),
            Turn::answer("lead done"),
        ]),
    );
    let tree = tree_of(
        owner,
        vec![runner().on_node(&name).detached(), lead_of(&["runner"])],
        model,
        TreeConfig::default(),
    )
    .await;
    let lead = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(lead.text.as_deref(), Some("lead done"), "{lead:?}");
    let runner = records_of(&tree, "runner")
        .pop()
        .expect("the runner's record")
        .id;
    (tree, runner, process)
}

/// A detached remote child whose owner agent has ended asks its owner: as a local agent's
/// `ask_owner` does (refused at once, "the owner is gone"), it gets an answer and ends;
/// it must not wait forever for an owner that no longer exists.
pub(crate) async fn a_detached_remote_child_asking_its_ended_owner_is_answered(owner: &mut Owner) {
    let (tree, runner, process) = detached_runner_after_its_lead(owner, "ask what now?").await;
    let mut handle = tree.handle(runner).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome()).await;
    let Ok(outcome) = outcome else {
        let record = tree.record(runner).unwrap();
        panic!(
            "the detached remote child still waits for its gone owner's answer after 10 s: {:?}",
            record.status
        );
    };
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    assert!(
        outcome
            .text
            .as_deref()
            .is_some_and(|t| t.starts_with("answered:")),
        "{outcome:?}"
    );
    tree.shutdown().await;
    finish_idle(process);
}

/// A detached remote child outlives its owner agent: it runs on after the lead's run
/// ended, completes, and its usage is counted once at the root.
pub(crate) async fn a_detached_remote_child_outlives_its_owner_and_counts_once(owner: &mut Owner) {
    let (tree, runner, mut process) = detached_runner_after_its_lead(owner, "work 4 100").await;
    assert!(
        tree.record(runner).unwrap().status.is_live(),
        "the detached remote child runs on after its owner"
    );
    let outcome = within(
        20,
        "the detached remote child settles",
        tree.handle(runner).unwrap().outcome(),
    )
    .await;
    assert_eq!(outcome.text.as_deref(), Some("done 4"), "{outcome:?}");
    assert_eq!(root_tokens(&tree), 48);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 48, 0));
    shut_down_and_finish(&tree, process).await;
}
