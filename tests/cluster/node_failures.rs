//! A worker node killed, cut off, frozen or back under its name: a short disconnect is
//! replayed and invisible, a freeze within the lease too; a node down fails its stand-ins
//! (and settles their mirrored descendants) within the reconnect window, not by a lease; a
//! freeze past the lease stops the subtree there and the owner declares it killed; the
//! other workers' children go on.

use super::support::runner_within;
use super::support::spawn_runner_on;
use super::support::{runner_working, shut_down_and_finish};
use super::support::{spawn_runner, within};
use std::time::{Duration, Instant};

use agent_tree::Tree;
use agent_tree::protocol::{AgentId, AgentStatus, EndReason, RestartPolicy};

use super::worker::{self, WorkerProcess};
use super::{
    GRACE_MS, LEASE_MS, Owner, first_usage, mirrored_child_working, root_tokens, runner,
    two_worker_tree, worker_idle, worker_until,
};

/// A worker `kill -9`ed mid-run fails its stand-in with a node-down cause, noticed within the
/// reconnect windows (long before a lease would); the transient child's restart policy
/// applies (restarted once, failing again on the node still down), and the usage billed
/// before the kill stays counted.
pub(crate) async fn a_killed_node_fails_its_stand_ins_and_the_restart_policy_applies(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let tree = owner
        .tree(&name, runner().with_restart(RestartPolicy::Transient))
        .await;
    let handle = spawn_runner(&tree, "work 50 100").await;
    let id = handle.id();
    first_usage(&tree, id).await;
    let killed_at = Instant::now();
    process.kill9();
    let outcome = tree
        .wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled)
        .await;
    let noticed = killed_at.elapsed();
    let outcome = &outcome[0];
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(error.contains("node down"), "{outcome:?}");
    // Transient: restarted once (the node is still down, so it fails again), then the
    // intensity (1 restart) is spent.
    assert_eq!(tree.record(id).unwrap().incarnation, 2);
    // Noticed within the reconnect windows, long before a lease would.
    assert!(
        noticed < Duration::from_millis(LEASE_MS),
        "noticed after {noticed:?}"
    );
    // Usage billed before the kill stays counted.
    assert!(root_tokens(&tree) >= 12);
    tree.shutdown().await;
}

/// A remote child delegating to a helper on its node, and the node killed while the helper
/// works: the helper's mirrored record settles `killed` with the node-down cause, before
/// the stand-in's own failure, and the usage it billed stays in the owner's totals. Its
/// events are in the owner's stream like any agent's.
pub(crate) async fn a_killed_node_settles_its_mirrored_descendants_killed(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut events = tree.subscribe();
    let handle = spawn_runner(&tree, "delegate 50 100").await;
    let id = handle.id();
    let helper = mirrored_child_working(&mut events, id).await;
    process.kill9();
    let outcome = tree
        .wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled)
        .await;
    assert_eq!(outcome[0].status, AgentStatus::Failed, "{outcome:?}");
    let record = tree.record(helper).unwrap();
    assert_eq!(record.status, AgentStatus::Killed, "{record:?}");
    let error = record.outcome.as_ref().and_then(|o| o.error.clone());
    assert!(
        error.as_deref().unwrap_or_default().contains("node down"),
        "{record:?}"
    );
    assert!(record.own.total_tokens() >= 12, "{record:?}");
    // Its end came before its stand-in's, in the owner's stream.
    let mut ended = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        if event.kind.terminal_status().is_some() {
            ended.push(event.agent);
        }
    }
    let at = |a: AgentId| ended.iter().position(|&e| e == a);
    assert!(at(helper) < at(id) && at(helper).is_some(), "{ended:?}");
    let snapshot = tree.snapshot();
    snapshot.check_usage().expect("own and subtree agree");
    assert_eq!(
        snapshot
            .records
            .iter()
            .map(|r| r.own.total_tokens())
            .sum::<u64>(),
        root_tokens(&tree)
    );
    tree.shutdown().await;
}

/// A session closed mid-run is reconnected within the reconnect window and both ends
/// replay what was not acknowledged: the run completes as if nothing happened, every delta
/// counted once.
pub(crate) async fn a_short_disconnect_is_replayed_and_invisible(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    // The worker joined: it reconnects.
    a_run_goes_on_across_a_closed_session(owner, &name, &mut process).await;
    process.finish();
}

/// A remote run (`work 10 60`) whose session the owner's side closes after its first
/// usage: the node that joined reconnects within the reconnect window, both ends replay
/// what was not acknowledged, and the run completes with every delta counted once.
pub(crate) async fn a_run_goes_on_across_a_closed_session(
    owner: &Owner,
    name: &str,
    process: &mut WorkerProcess,
) {
    let tree = owner.tree(name, runner()).await;
    let mut handle = spawn_runner(&tree, "work 10 60").await;
    first_usage(&tree, handle.id()).await;
    assert_eq!(owner.node.disconnect(name).await, 1);
    let outcome = handle.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("done 10"), "{outcome:?}");
    let (_, tokens) = worker_until(process, |(live, _)| live == 0);
    assert_eq!(tokens, 120);
    assert_eq!(
        root_tokens(&tree),
        120,
        "every delta counted once across the reconnect"
    );
    assert!(owner.node.reaches(name), "the worker is back");
    tree.shutdown().await;
}

/// A worker frozen for a third of its lease and thawed: the run completes, every delta of
/// its turns counted once.
pub(crate) async fn a_freeze_within_the_lease_is_invisible(owner: &mut Owner) {
    let (mut process, tree, mut handle) = runner_working(owner, "work 6 60").await;
    process.freeze();
    tokio::time::sleep(Duration::from_millis(LEASE_MS / 3)).await;
    process.thaw();
    let outcome = handle.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("done 6"), "{outcome:?}");
    let (_, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(tokens, 72);
    assert_eq!(
        root_tokens(&tree),
        72,
        "every delta of the frozen worker's turns counted"
    );
    shut_down_and_finish(&tree, process).await;
}

/// A worker frozen past its lease: the owner declares the remote child killed ("node
/// unreachable: lease expired") no earlier than the lease, and counts nothing after; thawed,
/// the worker stops its subtree before any further turn.
pub(crate) async fn a_freeze_beyond_the_lease_stops_the_subtree_and_the_owner_declares_it(
    owner: &mut Owner,
) {
    let (mut process, tree, mut handle) = runner_working(owner, "work 100 100").await;
    let frozen_at = Instant::now();
    process.freeze();
    let outcome = handle.outcome().await;
    let declared = frozen_at.elapsed();
    assert_eq!(outcome.status, AgentStatus::Killed, "{outcome:?}");
    assert_eq!(outcome.reason, EndReason::Killed);
    assert_eq!(
        outcome.error.as_deref(),
        Some("node unreachable: lease expired")
    );
    assert!(
        declared >= Duration::from_millis(LEASE_MS),
        "declared after {declared:?}, before a lease"
    );
    let billed = root_tokens(&tree);
    process.thaw();
    // The worker wakes past its lease: it stops its subtree before any turn.
    let (live, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0, "no agent outlives its lease on the worker");
    assert!(tokens >= billed);
    assert_eq!(
        root_tokens(&tree),
        billed,
        "nothing is added after the declaration"
    );
    shut_down_and_finish(&tree, process).await;
}

/// `kill -9` of one worker fails only its own stand-ins: the other worker's child runs to
/// its end, steered, and is counted exactly as that worker billed it.
pub(crate) async fn killing_one_worker_does_not_disturb_the_other_workers_children(
    owner: &mut Owner,
) {
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let tree = two_worker_tree(owner, agent_tree::TreeConfig::default()).await;
    let ha = spawn_runner_on(&tree, "work 50 100", &a).await;
    let mut hb = spawn_runner_on(&tree, "work 10 80", &b).await;
    first_usage(&tree, ha.id()).await;
    first_usage(&tree, hb.id()).await;
    pa.kill9();
    let outcome = within(
        5,
        "the killed worker's child settles",
        tree.wait(&[ha.id()], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await;
    assert_eq!(outcome[0].status, AgentStatus::Failed, "{outcome:?}");
    assert!(
        outcome[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains(&format!("node down: {a}")),
        "{outcome:?}"
    );
    tree.steer(hb.id(), "still here").await.unwrap();
    let outcome = within(10, "the other worker's child settles", hb.outcome()).await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 10 | steered: still here"),
        "{outcome:?}"
    );
    let (lb, tb, eb) = worker_idle(&mut pb);
    assert_eq!((lb, eb), (0, 0));
    assert_eq!(tb, 120);
    assert_eq!(tree.record(hb.id()).unwrap().subtree.total_tokens(), 120);
    tree.shutdown().await;
    pb.finish();
}

/// A fresh worker name `phoenix-<n>`, for a worker started again under its name.
fn phoenix_name(owner: &mut Owner) -> String {
    owner.workers += 1;
    format!("phoenix-{}", owner.workers)
}

/// A `runner` spawned on `tree` with `prompt`, once it billed its first usage.
async fn runner_started(tree: &Tree, prompt: &str) -> agent_tree::AgentHandle {
    let handle = spawn_runner(tree, prompt).await;
    first_usage(tree, handle.id()).await;
    handle
}

/// The outcome of the old stand-in `id` of a killed worker, within 10 s.
async fn old_stand_in_settled(tree: &Tree, id: AgentId) -> Vec<agent_tree::protocol::Outcome> {
    within(
        10,
        "the old stand-in settles",
        tree.wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
}

/// A new spawn on `tree` runs on `new`, the worker's new process, which runs nothing of the
/// old edge; then the tree is shut down and `new` ends.
async fn new_process_serves_a_fresh_spawn(tree: &Tree, mut new: WorkerProcess) {
    let fresh = runner_within(tree, 10, "a new spawn settles", "work 2 20").await;
    assert_eq!(fresh.text.as_deref(), Some("done 2"), "{fresh:?}");
    let (live, tokens, edges) = worker_idle(&mut new);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(tokens, 24, "the new process ran something of the old edge");
    tree.shutdown().await;
    new.finish();
}

/// A worker `kill -9`ed and started again under the same name (new process, same port),
/// back 800 ms later, after the reconnect window (300 ms): the old stand-in fails with a node-down cause (not the
/// lease), and a new spawn runs on the new process, which runs nothing of the old edge.
pub(crate) async fn a_worker_restarted_under_its_name_fails_the_old_stand_in_and_serves_new_spawns(
    owner: &mut Owner,
) {
    let name = phoenix_name(owner);
    let port = worker::free_port();
    let mut old = owner.worker_process(&name, port, "normal", false).await;
    let tree = owner.tree(&name, runner()).await;
    let handle = runner_started(&tree, "work 100 100").await;
    let killed_at = Instant::now();
    old.kill9();
    // Back only after the reconnect window (300 ms).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let new = owner.worker_process(&name, port, "normal", false).await;
    let outcome = old_stand_in_settled(&tree, handle.id()).await;
    let took = killed_at.elapsed();
    assert_eq!(
        outcome[0].status,
        AgentStatus::Failed,
        "{outcome:?} after {took:?}"
    );
    assert!(
        outcome[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("node down"),
        "{outcome:?}"
    );
    new_process_serves_a_fresh_spawn(&tree, new).await;
}

/// A worker `kill -9`ed and back under the same name within the reconnect window (its
/// node was up already, it only had to join): the old stand-in must fail with a node-down
/// cause (the new process has another boot id), within about the window, not wait for its
/// lease; a new spawn then runs on the new process.
pub(crate) async fn a_worker_back_under_its_name_within_the_window_fails_the_old_stand_in_as_node_down(
    owner: &mut Owner,
) {
    let name = phoenix_name(owner);
    let mut old = owner
        .worker_process(&name, worker::free_port(), "normal", false)
        .await;
    // The replacement's node is up, not joined yet.
    let mut new = owner
        .worker_process(&name, worker::free_port(), "normal", true)
        .await;
    let tree = owner.tree(&name, runner()).await;
    let handle = runner_started(&tree, "work 100 100").await;
    let killed_at = Instant::now();
    old.kill9();
    let new = tokio::task::spawn_blocking(move || {
        new.join();
        new
    })
    .await
    .unwrap();
    let back = killed_at.elapsed();
    let outcome = old_stand_in_settled(&tree, handle.id()).await;
    let took = killed_at.elapsed();
    new_process_serves_a_fresh_spawn(&tree, new).await;
    assert!(
        outcome[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("node down")
            && took < Duration::from_millis(LEASE_MS),
        "the new process was back after {back:?}; the old stand-in settled after {took:?} \
         with {:?} / {:?} (the lease is {LEASE_MS} ms + {GRACE_MS} ms)",
        outcome[0].status,
        outcome[0].error
    );
}
