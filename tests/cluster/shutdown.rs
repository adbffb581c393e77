//! Shutdowns across nodes: one deadline for the whole tree, whichever nodes are frozen or
//! fine; a remote child that reports in time settles gracefully (aborted for the shutdown,
//! its mirrored descendants as their node reports), one that does not is counted killed and
//! its node named; every delta the worker billed is counted once.

use super::support::spawn_runner_on;
use super::support::{runner_working, shut_down_and_finish};
use super::support::{spawn_runner, within};
use std::time::{Duration, Instant};

use agent_tree::protocol::{
    AgentDefinition, AgentStatus, EndReason, SpawnRequest, SubagentAllowance,
};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree};

use super::{
    Owner, first_usage, mirrored_child_working, root_tokens, runner, two_worker_tree, worker_idle,
    worker_until,
};

/// A shutdown reaching a remote child that delegates on its node: the helper's mirrored
/// record settles as its node reports it (aborted by the shutdown), within the deadline,
/// and nothing of the owner's records is left live.
pub(crate) async fn a_shutdown_settles_mirrored_descendants_as_their_node_reports(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut events = tree.subscribe();
    let handle = spawn_runner(&tree, "delegate 100 100").await;
    let helper = mirrored_child_working(&mut events, handle.id()).await;
    let started = Instant::now();
    tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < tree.config().shutdown_grace + Duration::from_millis(500),
        "took {took:?}"
    );
    let record = tree.record(helper).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Shutdown),
        "{record:?}"
    );
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.live(), 0, "{}", snapshot.render_text());
    snapshot.check_usage().expect("own and subtree agree");
    let (live, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0);
    assert_eq!(
        tokens,
        root_tokens(&tree),
        "every delta the worker billed, once"
    );
    process.finish();
}

/// A tree shutdown with a remote child mid-run returns within its grace: the child settles
/// aborted, no node is reported unreachable, and the worker runs nothing after.
pub(crate) async fn a_shutdown_reaches_the_remote_subtree_within_its_deadline(owner: &mut Owner) {
    let (mut process, tree, handle) = runner_working(owner, "work 100 100").await;
    let started = Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    let grace = tree.config().shutdown_grace;
    assert!(took < grace + Duration::from_millis(500), "took {took:?}");
    assert!(report.unreachable_nodes.is_empty(), "{report:?}");
    let record = tree.record(handle.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0);
    process.finish();
}

/// A tree shutdown while the remote child's node is frozen returns by its deadline (the
/// grace and the kill wait): the child is counted killed and its node reported unreachable;
/// thawed, the worker gets no more grants and its lease stops the subtree.
pub(crate) async fn a_shutdown_counts_a_frozen_node_killed_by_its_deadline(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let grace = Duration::from_millis(800);
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
        .model(ScriptedModel::new())
        .config(agent_tree::TreeConfig::default().with_shutdown_grace(grace))
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let handle = spawn_runner(&tree, "work 100 100").await;
    first_usage(&tree, handle.id()).await;
    process.freeze();
    let started = Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < grace + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(100),
        "the shutdown took {took:?} with a frozen node"
    );
    let record = tree.record(handle.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Killed, "{record:?} {report:?}");
    assert_eq!(
        report.unreachable_nodes,
        std::slice::from_ref(&name),
        "{report:?}"
    );
    process.thaw();
    // Woken, the worker gets no more grants: its lease stops the subtree.
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0, "the frozen node's subtree outlived its lease");
    process.finish();
}

/// `Tree::shutdown_agent` of a local lead whose child is remote: the remote child is shut
/// down by the one deadline, gracefully (its hosted agent settles, nothing is killed), with
/// the reason a local child's shutdown has, and the worker runs nothing after.
pub(crate) async fn shutting_down_a_local_owner_stops_its_remote_child_gracefully(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let lead = AgentDefinition::new("lead", "You lead.")
        .with_allowed_subagents(SubagentAllowance::only(["runner"]));
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("runner", "work 100 100"),
            Turn::answer("the lead is done"),
        ]),
    );
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name), lead]).unwrap())
        .model(model)
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let mut events = tree.subscribe();
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let remote = loop {
        let event = within(10, "the remote runner bills a turn", events.next())
            .await
            .expect("events");
        if event.kind.name() == "usage_reported"
            && event.agent != lead.id()
            && tree
                .record(event.agent)
                .is_some_and(|r| r.agent_type == "runner")
        {
            break event.agent;
        }
    };
    let started = Instant::now();
    let report = tree.shutdown_agent(lead.id()).await.unwrap();
    let took = started.elapsed();
    let grace = tree.config().shutdown_grace;
    assert!(took < grace + Duration::from_millis(500), "took {took:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    assert!(report.graceful.contains(&remote), "{report:?}");
    let record = tree.record(remote).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Shutdown),
        "{record:?}"
    );
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0);
    shut_down_and_finish(&tree, process).await;
}

/// A tree shutdown while one worker is frozen and the other is fine: the one deadline
/// holds for both; the fine worker's child settles gracefully (aborted for the shutdown),
/// the frozen one's is counted killed.
pub(crate) async fn a_shutdown_with_one_worker_frozen_and_one_fine_holds_the_one_deadline(
    owner: &mut Owner,
) {
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let grace = Duration::from_millis(800);
    let tree = two_worker_tree(
        owner,
        agent_tree::TreeConfig::default().with_shutdown_grace(grace),
    )
    .await;
    let ha = spawn_runner_on(&tree, "work 100 100", &a).await;
    let hb = spawn_runner_on(&tree, "work 100 100", &b).await;
    first_usage(&tree, ha.id()).await;
    first_usage(&tree, hb.id()).await;
    pa.freeze();
    let started = Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    pa.thaw();
    assert!(
        took < grace + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(150),
        "the shutdown took {took:?} with one frozen node: {report:?}"
    );
    let ra = tree.record(ha.id()).unwrap();
    let rb = tree.record(hb.id()).unwrap();
    assert_eq!(ra.status, AgentStatus::Killed, "frozen: {ra:?} {report:?}");
    assert!(report.killed.contains(&ha.id()), "{report:?}");
    assert_eq!(rb.status, AgentStatus::Aborted, "fine: {rb:?} {report:?}");
    assert_eq!(
        rb.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Shutdown),
        "{rb:?}"
    );
    assert!(report.graceful.contains(&hb.id()), "{report:?}");
    assert_eq!(
        report.unreachable_nodes,
        std::slice::from_ref(&a),
        "the frozen node did not report by the deadline, the fine one did: {report:?}"
    );
    let (lb, tb, _) = worker_idle(&mut pb);
    assert_eq!(lb, 0);
    assert_eq!(
        tb,
        rb.subtree.total_tokens(),
        "the fine worker billed {tb}, its owner counted {}",
        rb.subtree.total_tokens()
    );
    let (la, _, _) = worker_idle(&mut pa);
    assert_eq!(la, 0, "the frozen node's subtree outlived its lease");
    pa.finish();
    pb.finish();
}

/// After a graceful shutdown mid-run the root holds exactly what the worker billed (the
/// example checks this on each of its runs too).
pub(crate) async fn a_graceful_shutdown_mid_run_counts_every_delta_the_worker_billed(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let mut mismatches = Vec::new();
    let mut before = 0;
    for i in 0..4u64 {
        let tree = owner.tree(&name, runner()).await;
        let handle = spawn_runner(&tree, "work 8 60").await;
        first_usage(&tree, handle.id()).await;
        tokio::time::sleep(Duration::from_millis(37 * i)).await;
        tree.shutdown().await;
        let (live, billed, _) = worker_idle(&mut process);
        assert_eq!(live, 0);
        let counted = root_tokens(&tree);
        if billed - before != counted {
            mismatches.push(format!("{i}: worker {} root {counted}", billed - before));
        }
        before = billed;
    }
    assert!(mismatches.is_empty(), "{mismatches:?}");
    process.finish();
}

/// Shutdowns racing spawns on two workers (multi-thread runtime, several rounds, random
/// small delays): each returns by its deadline, every remote child settles, the workers
/// end with nothing live, and each worker billed exactly what the owner counted.
pub(crate) async fn shutdowns_racing_spawns_on_two_workers_hold_deadline_and_usage(
    owner: &mut Owner,
) {
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let grace = Duration::from_millis(1000);
    let mut problems = Vec::new();
    let (mut billed_a, mut billed_b) = (0, 0);
    for round in 0..6u64 {
        let tree = two_worker_tree(
            owner,
            agent_tree::TreeConfig::default().with_shutdown_grace(grace),
        )
        .await;
        let ha = spawn_runner_on(&tree, "work 6 30", &a).await;
        let hb = spawn_runner_on(&tree, "work 6 30", &b).await;
        tokio::time::sleep(Duration::from_millis((round * 17) % 120)).await;
        let started = Instant::now();
        let report = tree.shutdown().await;
        let took = started.elapsed();
        if took > grace + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(150) {
            problems.push(format!("{round}: the shutdown took {took:?}"));
        }
        let (ra, rb) = (tree.record(ha.id()).unwrap(), tree.record(hb.id()).unwrap());
        if !ra.status.is_terminal() || !rb.status.is_terminal() {
            problems.push(format!(
                "{round}: not settled {:?} {:?}",
                ra.status, rb.status
            ));
        }
        if !report.killed.is_empty() {
            problems.push(format!("{round}: killed {report:?}"));
        }
        let (la, ta, ea) = worker_idle(&mut pa);
        let (lb, tb, eb) = worker_idle(&mut pb);
        if (la, ea, lb, eb) != (0, 0, 0, 0) {
            problems.push(format!("{round}: workers not idle {la} {ea} {lb} {eb}"));
        }
        let (ca, cb) = (ra.subtree.total_tokens(), rb.subtree.total_tokens());
        if (ta - billed_a, tb - billed_b) != (ca, cb) {
            problems.push(format!(
                "{round}: worker a billed {} (owner {ca}, {:?}), worker b billed {} (owner {cb}, {:?})",
                ta - billed_a,
                ra.status,
                tb - billed_b,
                rb.status
            ));
        }
        (billed_a, billed_b) = (ta, tb);
    }
    assert!(problems.is_empty(), "{problems:#?}");
    pa.finish();
    pb.finish();
}
