//! `Tree::shutdown_agent(id)` stops only that subtree, under one deadline; siblings keep
//! running and finish. It never strands the child's owner: an owner waiting on it goes on
//! (or settles when aborted), a background child it kills is noticed at the owner's next
//! turn, and the tree goes idle.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, RestartPolicy, Role, Strategy};
use agent_tree::testkit::{ScriptedModel, Turn};
use agent_tree::{ControlError, HookContext, HookError};
use parking_lot::Mutex;

use crate::shutdown_one_deadline::fan_out;
use crate::support::harness::a;
use crate::support::lifetimes::{
    hanging, ms, shutdown_agent_in_a_task, spawned, spawned_with_a2_called,
};
use crate::support::races::{GUARD, REAL_GUARD, bounded, outcome, slow, slow_tool, yields};
use crate::support::run_within;
use crate::support::{CallEnd, RecordingModel, catalog, delegator, leaf, spawn_admitted, within};

#[tokio::test(start_paused = true)]
async fn shutdown_agent_stops_only_that_subtree() {
    let scripted = ScriptedModel::new()
        .script("lead", fan_out("worker", 2))
        .script("worker", hanging(1))
        .script(
            "other",
            [
                Turn::spawn_background("helper", "help"),
                Turn::answer("other done").after(Duration::from_secs(5)),
                // The helper's completion arrives during that turn: one more to read it.
                Turn::answer("other done"),
            ],
        )
        .script(
            "helper",
            [Turn::answer("helped").after(Duration::from_secs(3))],
        );
    let model = RecordingModel::new(scripted);
    let hooked: Arc<Mutex<BTreeSet<AgentId>>> = Arc::default();
    let seen = hooked.clone();
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(Duration::from_secs(1))
                .with_root_supervision(Strategy::OneForOne, 5, Duration::from_secs(5)),
        )
        .catalog(catalog([
            delegator("lead", &["worker"]).with_restart(RestartPolicy::Permanent),
            leaf("worker"),
            delegator("other", &["helper"]),
            leaf("helper"),
        ]))
        .model(model.clone())
        .on_shutdown(move |ctx: HookContext| {
            let seen = seen.clone();
            async move {
                seen.lock().insert(ctx.agent);
                Ok::<(), HookError>(())
            }
        })
        .build()
        .await
        .expect("the tree builds");
    // lead a1 → a2, a3; other a4 → helper a5.
    spawn_admitted(&tree, SpawnRequest::new("lead", "team")).await;
    model.until_all_calls(&[a(2), a(3)], 1).await;
    let mut other = spawn_admitted(&tree, SpawnRequest::new("other", "independent")).await;
    model.until_calls(a(5), 1).await;
    let mut events = tree.subscribe();

    let report = within("subtree shutdown", tree.shutdown_agent(a(1)))
        .await
        .expect("a1 exists");
    assert_eq!(
        report.graceful.iter().copied().collect::<BTreeSet<_>>(),
        [a(1), a(2), a(3)].into(),
        "{report:?}"
    );
    assert!(report.killed.is_empty());
    assert_eq!(*hooked.lock(), [a(1), a(2), a(3)].into());
    // The lead is permanent, but a shutdown restarts nothing.
    assert_eq!(tree.record(a(1)).expect("rec").incarnation, 1);
    assert_eq!(tree.record(a(1)).expect("rec").status, AgentStatus::Aborted);
    // The sibling subtree runs on, its model calls untouched.
    for id in [a(4), a(5)] {
        assert_eq!(tree.record(id).expect("rec").status, AgentStatus::Running);
        let calls = model.calls_of(id);
        assert!(
            calls.iter().all(|c| c.end != CallEnd::Dropped),
            "{id}: {calls:?}"
        );
    }
    let alive: BTreeSet<AgentId> = tree.alive_actors().into_iter().collect();
    assert_eq!(alive, [a(4), a(5)].into());
    let outcome = within("other", other.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("other done"));
    assert_eq!(
        tree.outcome(a(5)).expect("helper").text.as_deref(),
        Some("helped")
    );
    let events = events.drain();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Restarted { .. })),
        "{events:?}"
    );
    // The tree itself still runs.
    let again = run_within(&tree, "another agent", SpawnRequest::new("helper", "again")).await;
    assert_eq!(again.text.as_deref(), Some("helped"));
    // Only agents can be shut down one by one.
    assert_eq!(
        tree.shutdown_agent(AgentId::ROOT).await.unwrap_err(),
        ControlError::NotYours(AgentId::ROOT)
    );
    assert!(tree.shutdown_agent(a(99)).await.is_err());
    tree.shutdown().await;
    assert!(tree.alive_actors().is_empty());
}

/// owner (a1) spawns child (a2) in the foreground; the child's model hangs and its shutdown
/// hook never returns, so `shutdown_agent(a2)` kills it at the deadline (1 s).
async fn owner_waiting_on_a_stuck_child() -> (Arc<Tree>, RecordingModel) {
    let (tree, model) = owners_of_stuck_children(Duration::from_secs(1)).await;
    (Arc::new(tree), model)
}

/// A tree of `owner`s that each spawn a `child` in the foreground, then answer; a child's
/// model hangs and its shutdown hook never returns, so a shutdown kills it at the deadline
/// (`grace`).
async fn owners_of_stuck_children(grace: Duration) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "owner",
                [Turn::spawn("child", "hang"), Turn::answer("owner done")],
            )
            .script("child", hanging(1)),
    );
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(grace))
        .catalog(catalog([delegator("owner", &["child"]), leaf("child")]))
        .model(model.clone())
        .on_shutdown(a_childs_hook_never_returns)
        .build()
        .await
        .expect("the tree builds");
    (tree, model)
}

/// A shutdown hook that never returns for a `child`, and returns at once for anyone else.
async fn a_childs_hook_never_returns(ctx: HookContext) -> Result<(), HookError> {
    if ctx.agent_type == "child" {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// The owner, aborted while its child's shutdown ran, settles, and the tree goes idle.
async fn aborted_owner_settles_and_tree_idles(tree: &Tree, model: &RecordingModel, owner: AgentId) {
    let mut handle = tree.handle(owner).expect("the owner exists");
    let settled = tokio::time::timeout(GUARD, handle.outcome()).await;
    assert!(
        settled.is_ok(),
        "the owner, aborted while its child's shutdown ran, is stranded: {}",
        stranded(tree, model, owner)
    );
    tree_idles(tree, model, owner).await;
}

/// The tree goes idle within the guard.
async fn tree_idles(tree: &Tree, model: &RecordingModel, owner: AgentId) {
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "idle never returns: {}",
        stranded(tree, model, owner)
    );
}

fn stranded(tree: &Tree, model: &RecordingModel, owner: AgentId) -> String {
    format!(
        "owner {owner} is {:?} after {} model calls; live {}; actors alive {:?}\n{}",
        tree.record(owner).map(|r| r.status),
        model.count_of(owner),
        tree.live(),
        tree.alive_actors(),
        tree.snapshot().render_text()
    )
}

/// `Tree::shutdown_agent(child)` kills the child at the deadline while its owner's
/// turn waits on it (a foreground spawn): the owner must hear of the child's exit and go on
/// (here: complete), and `Tree::idle()` must return. A second `Tree::abort(owner)` must then
/// settle it too.
#[tokio::test(start_paused = true)]
async fn shutdown_agent_of_a_foreground_child_does_not_strand_its_owner() {
    let (tree, model) = owner_waiting_on_a_stuck_child().await;
    let owner = spawned_with_a2_called(&tree, &model, "owner", "delegate").await;
    let report = bounded(GUARD, "shutdown_agent", tree.shutdown_agent(a(2)))
        .await
        .expect("the child exists");
    assert_eq!(report.killed, [a(2)], "{report:?}");
    let mut handle = tree.handle(owner).expect("the owner exists");
    if tokio::time::timeout(GUARD, handle.outcome()).await.is_err() {
        let before = stranded(&tree, &model, owner);
        tree.abort(owner).expect("the owner exists");
        let after_abort = tokio::time::timeout(GUARD, handle.outcome()).await;
        panic!(
            "the owner is stranded after shutdown_agent killed its foreground child: \
             {before}\nafter a second Tree::abort(owner): {}",
            match after_abort {
                Ok(o) => format!("it settled {o:?}"),
                Err(_) => format!("still stranded: {}", stranded(&tree, &model, owner)),
            }
        );
    }
    let got = handle.try_outcome().expect("settled");
    assert!(got.is_completed(), "{got:?}");
    tree_idles(&tree, &model, owner).await;
}

/// the same with the owner aborted during the child's grace: the owner must settle
/// (aborted) once the child is killed at the deadline, and the tree must go idle.
#[tokio::test(start_paused = true)]
async fn owner_aborted_in_the_grace_of_its_childs_shutdown_still_settles() {
    let (tree, model) = owner_waiting_on_a_stuck_child().await;
    let owner = spawned_with_a2_called(&tree, &model, "owner", "delegate").await;
    let stopping = shutdown_agent_in_a_task(&tree, a(2));
    tokio::time::sleep(ms(500)).await;
    tree.abort(owner).expect("the owner exists");
    let report = bounded(GUARD, "shutdown_agent", stopping)
        .await
        .expect("joined")
        .expect("the child exists");
    assert_eq!(report.killed, [a(2)], "{report:?}");
    aborted_owner_settles_and_tree_idles(&tree, &model, owner).await;
}

/// The other order of the same race: the shutdown is awaited by the test itself
/// (so it may forget the killed child's actor before the owner reads its exit) and the abort
/// comes from a task.
#[tokio::test(start_paused = true)]
async fn owner_aborted_in_the_grace_still_settles_when_the_shutdown_returns_first() {
    let (tree, model) = owner_waiting_on_a_stuck_child().await;
    let owner = spawned_with_a2_called(&tree, &model, "owner", "delegate").await;
    let aborter = {
        let tree = tree.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(500)).await;
            tree.abort(owner).expect("the owner exists");
        })
    };
    let report = bounded(GUARD, "shutdown_agent", tree.shutdown_agent(a(2)))
        .await
        .expect("the child exists");
    aborter.await.expect("the aborter");
    assert_eq!(report.killed, [a(2)], "{report:?}");
    aborted_owner_settles_and_tree_idles(&tree, &model, owner).await;
}

/// On worker threads, looped (even runs: the owner's run goes on; odd runs: the
/// owner is aborted in the child's grace): the owner must never be stranded, and a stranded
/// owner is not even freed by a second `Tree::abort`. (The shutdown forgets the killed child's
/// actor before the owner reads the child's exit from ractor, so the owner never learns that
/// the child it drains for has settled.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_agent_never_strands_a_waiting_owner_mt() {
    const RUNS: u64 = 40;
    const PAIRS: usize = 6;
    // Per kind (0: the owners' runs go on, 1: aborted in the grace): owners, stranded.
    let mut tally = [(0usize, 0usize); 2];
    let mut first: Option<String> = None;
    for run in 0..RUNS {
        let kind = (run % 2) as usize;
        let (tree, model) = owners_of_stuck_children(ms(5)).await;
        let mut owners = Vec::new();
        for _ in 0..PAIRS {
            owners.push(spawned(&tree, "owner", "delegate").await);
        }
        bounded(
            REAL_GUARD,
            "every child's model call",
            model.until("every child in flight", |calls| {
                calls.iter().filter(|c| c.agent_type == "child").count() == PAIRS
            }),
        )
        .await;
        let children: Vec<AgentId> = owners
            .iter()
            .map(|&o| tree.record(o).expect("owner").children[0])
            .collect();
        yields(run % 4).await;
        let shutdowns = shutdown_each(&tree, &children);
        if kind == 0 {
            bounded(REAL_GUARD, "shutdown_agent", shutdowns).await;
        } else {
            // The owners are aborted in their children's grace.
            let ((), ()) = tokio::join!(bounded(REAL_GUARD, "shutdown_agent", shutdowns), async {
                tokio::time::sleep(Duration::from_millis(1 + run % 3)).await;
                for &owner in &owners {
                    tree.abort(owner).expect("the owner exists");
                }
            });
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), tree.idle()).await;
        let stranded_now: Vec<AgentId> = owners
            .iter()
            .copied()
            .filter(|&o| tree.record(o).is_some_and(|r| r.status.is_live()))
            .collect();
        tally[kind].0 += PAIRS;
        tally[kind].1 += stranded_now.len();
        if let (Some(&owner), None) = (stranded_now.first(), &first) {
            let before = stranded(&tree, &model, owner);
            // A second abort of the stranded owner.
            let _ = tree.abort(owner);
            let mut handle = tree.handle(owner).expect("owner");
            let again = tokio::time::timeout(Duration::from_millis(100), handle.outcome()).await;
            first = Some(format!(
                "run {run}: {before}\nafter a second Tree::abort({owner}): {}",
                if again.is_ok() {
                    "it settled"
                } else {
                    "still stranded"
                }
            ));
        }
        let _ = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        first.is_none(),
        "owners stranded after shutdown_agent killed the child they wait on: {} of {} \
         whose run went on, {} of {} aborted in the grace; first: {}",
        tally[0].1,
        tally[0].0,
        tally[1].1,
        tally[1].0,
        first.as_deref().unwrap_or_default()
    );
}

/// `Tree::shutdown_agent` of each child, one after the other.
async fn shutdown_each(tree: &Tree, children: &[AgentId]) {
    let mut set = Vec::new();
    for &child in children {
        set.push(tree.shutdown_agent(child));
    }
    for shutdown in set {
        let _ = shutdown.await;
    }
}

/// Another symptom of the same cause: a *background* child killed by
/// `Tree::shutdown_agent` at its deadline is never noticed in its owner's conversation (no
/// `subagent_ended` notice at the owner's next turn), because the owner never reads the
/// child's exit. Worker threads, looped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_child_killed_by_shutdown_agent_is_noticed_by_its_owner_mt() {
    const RUNS: u64 = 20;
    let mut missed = Vec::new();
    for run in 0..RUNS {
        // The owner's pause (real time) outlasts the child's 5 ms grace with room to spare,
        // even on a loaded machine: the notice must land before the owner's last turn.
        let recorder = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "owner",
                    [
                        Turn::spawn_background("child", "hang"),
                        Turn::calls([slow("pause", 250)]),
                        Turn::answer("owner done"),
                    ],
                )
                .script("child", hanging(1)),
        );
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(5)))
            .catalog(catalog([
                delegator("owner", &["child"]).with_tools(ToolSet::only(["slow"])),
                leaf("child"),
            ]))
            .model(recorder.clone())
            .tool(slow_tool())
            .expect("the name is free")
            .on_shutdown(a_childs_hook_never_returns)
            .build()
            .await
            .expect("the tree builds");
        let owner = spawned(&tree, "owner", "delegate").await;
        bounded(REAL_GUARD, "the child's model call", async {
            while recorder.calls_of(a(2)).is_empty() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        yields(run % 4).await;
        let _ = bounded(REAL_GUARD, "shutdown_agent", tree.shutdown_agent(a(2))).await;
        let _ = outcome(&tree, owner, REAL_GUARD).await;
        let last = recorder
            .calls_of(owner)
            .last()
            .cloned()
            .expect("the owner's requests");
        let noticed = last.messages.iter().any(|m| {
            m.role == Role::User
                && m.content
                    .starts_with(r#"{"agent_id":"a2","notice":"subagent_ended","reason":"killed","status":"killed""#)
        });
        if !noticed {
            missed.push(run);
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        missed.is_empty(),
        "in {} of {RUNS} runs the owner's last turn never heard that its background \
         child was killed by shutdown_agent: runs {missed:?}",
        missed.len()
    );
}
