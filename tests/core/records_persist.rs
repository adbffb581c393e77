//! No record disappears when a sibling branch starts or finishes. Snapshots are taken after
//! every lifecycle event (from the test) and from inside running agents (a user tool), while
//! top-level branches start in sequence and side by side, complete, and are aborted; across
//! all of them, every record once seen stays, with the same place in the tree, and a
//! terminal record keeps its status, outcome and usage.

use std::sync::Arc;
use std::time::Duration;

use agent_tree::EventStream;
use agent_tree::FnTool;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, TreeSnapshot};
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use parking_lot::Mutex;
use serde_json::json;

use crate::support::harness::{spawn_for_id, tree_with_tool};
use crate::support::{TreeCell, catalog, delegator, leaf, record, within};

type Log = Arc<Mutex<Vec<(String, TreeSnapshot)>>>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn scripted() -> ScriptedModel {
    let snap = || Call::tool("snap", json!({}));
    ScriptedModel::new()
        .script(
            "branch",
            [
                Turn::calls([
                    Call::spawn_background("worker", "one"),
                    Call::spawn_background("worker", "two"),
                    snap(),
                ])
                .usage(Usage::tokens(10, 1)),
                Turn::calls([
                    Call::result(Target::Spawned(0)),
                    Call::result(Target::Spawned(1)),
                ])
                .usage(Usage::tokens(10, 1)),
                Turn::spawn("sub", "go deeper").usage(Usage::tokens(10, 1)),
                Turn::calls([snap()]).usage(Usage::tokens(10, 1)),
                Turn::answer("branch done").usage(Usage::tokens(10, 1)),
            ],
        )
        .script(
            "sub",
            [
                Turn::spawn("worker", "deepest").usage(Usage::tokens(5, 1)),
                Turn::answer("sub done").usage(Usage::tokens(5, 1)),
            ],
        )
        .script(
            "worker",
            [
                Turn::calls([snap()])
                    .usage(Usage::tokens(2, 2))
                    .after(ms(30)),
                Turn::answer("worked")
                    .usage(Usage::tokens(2, 2))
                    .after(ms(20)),
            ],
        )
        .script(
            "holder",
            [
                Turn::spawn_background("sleeper", "never ends").usage(Usage::tokens(1, 1)),
                Turn::calls([snap()]).usage(Usage::tokens(1, 1)),
                Turn::hang(),
            ],
        )
        .script("sleeper", [Turn::hang()])
}

/// Reads events, snapshotting after each one, until `done` holds for an event.
async fn snap_until(
    what: &str,
    tree: &Tree,
    events: &mut EventStream,
    log: &Log,
    mut done: impl FnMut(&Event) -> bool,
) {
    within(what, async {
        loop {
            let event = events.next().await.expect("the tree is alive");
            log.lock()
                .push((format!("after event {}", event.seq), tree.snapshot()));
            if done(&event) {
                return;
            }
        }
    })
    .await;
}

fn ends(id: AgentId) -> impl FnMut(&Event) -> bool {
    move |e: &Event| e.agent == id && e.kind.terminal_status().is_some()
}

/// Every record of `before` is in `after`, unchanged where it must not change.
fn assert_kept(before: &(String, TreeSnapshot), after: &(String, TreeSnapshot)) {
    let ((when_a, a), (when_b, b)) = (before, after);
    assert!(
        b.records.len() >= a.records.len(),
        "{when_b} has fewer records than {when_a}"
    );
    for old in &a.records {
        let new = b
            .record(old.id)
            .unwrap_or_else(|| panic!("{} seen {when_a} is gone {when_b}", old.id));
        let place = |r: &agent_tree::protocol::AgentRecord| {
            (
                r.agent_type.clone(),
                r.depth,
                r.parent,
                r.request_id.clone(),
                r.created_ms,
            )
        };
        assert_eq!(
            place(old),
            place(new),
            "{} moved between {when_a} and {when_b}",
            old.id
        );
        assert!(
            new.children.starts_with(&old.children),
            "{}'s children {:?} ({when_a}) became {:?} ({when_b})",
            old.id,
            old.children,
            new.children
        );
        let grew = |x: Usage, y: Usage| {
            y.input_tokens >= x.input_tokens && y.output_tokens >= x.output_tokens
        };
        assert!(
            grew(old.subtree, new.subtree),
            "{}'s subtree shrank",
            old.id
        );
        if old.status.is_terminal() {
            assert_eq!(
                (new.status, &new.outcome, new.ended_ms, new.own, new.subtree),
                (old.status, &old.outcome, old.ended_ms, old.own, old.subtree),
                "settled {} changed between {when_a} and {when_b}",
                old.id
            );
        }
    }
}

/// No record disappears when another branch starts, finishes or is aborted: every record
/// once seen stays in its place in the tree, and a terminal record keeps its status,
/// outcome and usage.
#[tokio::test(start_paused = true)]
async fn records_survive_other_branches_starting_and_finishing() {
    let probe = TreeCell::new();
    let log: Log = Arc::default();
    let (tool_probe, tool_log) = (probe.clone(), log.clone());
    let snap = FnTool::new("snap", "snapshots the tree", move |ctx, _| {
        tool_log.lock().push((
            format!("from {} ({})", ctx.agent, ctx.agent_type),
            tool_probe.snapshot(),
        ));
        async { Ok("snapped".to_owned()) }
    });
    let tree = probe.share(
        tree_with_tool(
            catalog([
                delegator("branch", &["worker", "sub"]),
                delegator("sub", &["worker"]),
                delegator("holder", &["sleeper"]),
                leaf("worker"),
                leaf("sleeper"),
            ]),
            scripted(),
            snap,
        )
        .await,
    );
    let mut events = tree.subscribe();

    // Branch A alone, start to finish.
    let a = spawn_for_id(&tree, "branch", "A").await;
    snap_until("branch A", &tree, &mut events, &log, ends(a)).await;

    // Branches B and C side by side; C holds a child that never ends and is aborted once B
    // has finished.
    let b = spawn_for_id(&tree, "branch", "B").await;
    let c = spawn_for_id(&tree, "holder", "C").await;
    snap_until("branch B", &tree, &mut events, &log, ends(b)).await;
    log.lock()
        .push(("before aborting C".into(), tree.snapshot()));
    tree.abort(c).expect("the application may abort a branch");
    snap_until("branch C", &tree, &mut events, &log, ends(c)).await;

    // Branch D after everything else ended.
    let d = spawn_for_id(&tree, "branch", "D").await;
    snap_until("branch D", &tree, &mut events, &log, ends(d)).await;
    within("idle", tree.idle()).await;
    log.lock().push(("at the end".into(), tree.snapshot()));

    let log = log.lock().clone();
    let last = &log.last().expect("snapshots were taken").1;
    let text = last.render_text();
    assert!(log.len() > 50, "only {} snapshots", log.len());
    let from_tools = log.iter().filter(|(w, _)| w.starts_with("from")).count();
    // A, B and D: two from the branch agent and one per worker (3); C: one from the holder.
    assert_eq!(from_tools, 3 * (2 + 3) + 1, "snapshots from inside agents");

    for pair in log.windows(2) {
        assert_kept(&pair[0], &pair[1]);
    }

    // The shape and outcomes at the end: 4 top-level branches, every record terminal.
    assert_eq!(record(last, AgentId::ROOT).children, [a, b, c, d], "{text}");
    assert_eq!(last.agents().count(), 3 * 5 + 2, "{text}");
    for r in last.agents() {
        assert!(r.status.is_terminal(), "{} in\n{text}", r.id);
        assert_eq!(tree.outcome(r.id), r.outcome, "{}", r.id);
    }
    for branch in [a, b, d] {
        assert_eq!(
            record(last, branch).status,
            AgentStatus::Completed,
            "{text}"
        );
    }
    let c_rec = record(last, c);
    assert_eq!(c_rec.status, AgentStatus::Aborted, "{text}");
    assert_eq!(
        c_rec.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Aborted)
    );
    let sleeper = c_rec.children[0];
    assert_eq!(record(last, sleeper).status, AgentStatus::Aborted, "{text}");
    // A's records, read long after A ended and three other branches came and went, are the
    // ones taken when A ended.
    let a_end = log
        .iter()
        .find(|(_, s)| record(s, a).status.is_terminal())
        .map(|(_, s)| s.clone())
        .expect("A ended");
    let a_records: Vec<_> = a_end
        .agents()
        .filter(|r| ancestors_include(&a_end, r.id, a))
        .collect();
    assert_eq!(a_records.len(), 5);
    for r in a_records {
        assert_eq!(last.record(r.id), Some(r), "{} of branch A changed", r.id);
    }
    assert!(last.check_usage().is_ok(), "{text}");

    drop(events);
    crate::support::shutdown(tree).await;
}

/// Whether `ancestor` is `id` or above it.
fn ancestors_include(snapshot: &TreeSnapshot, id: AgentId, ancestor: AgentId) -> bool {
    let mut at = Some(id);
    while let Some(current) = at {
        if current == ancestor {
            return true;
        }
        at = snapshot.record(current).and_then(|r| r.parent);
    }
    false
}
