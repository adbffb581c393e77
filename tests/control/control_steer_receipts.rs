//! Steering: the sender gets a receipt (`Delivered` when the agent's session exists,
//! `Queued` while it waits for a pool slot); steers sent before the session exists are
//! delivered in order at its first turn; a steer enters the conversation at the next turn
//! boundary with one `steered` event each; a settled agent refuses steers, naming its status.
//! A steer to a completing agent is refused, and one delivered during what turns out to be
//! the last turn is read in one more turn (or refused). A `delivered` steer is never lost,
//! from a tool or the application, even as the agent's run ends (paused time, and looped on
//! worker threads). An agent queued for a pool slot starts with its task.

use agent_tree::testkit::EventProbe;
use std::time::Duration;

use crate::control_resume_rules::boss_slow_and_quick;
use crate::support::harness::{a, idle, outcome_of, started, tree};
use crate::support::lifetimes::steers_of;
use crate::support::lifetimes::{ms, spawned};
use crate::support::races::{GUARD, REAL_GUARD, bounded, outcome};
use crate::support::{RecordingModel, catalog, delegator_of_all, leaf, spawn_admitted};
use agent_tree::SteerReceipt;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

fn worker_and_blocker() -> Catalog {
    catalog([
        AgentDefinition::new("worker", ""),
        AgentDefinition::new("blocker", ""),
    ])
}

#[tokio::test(start_paused = true)]
async fn a_running_agent_gets_the_steer_at_its_next_turn_boundary() {
    let scripted = ScriptedModel::new().script(
        "worker",
        [
            Turn::calls([Call::tool("noop", json!({}))]).after(Duration::from_millis(50)),
            Turn::answer("steered and done"),
        ],
    );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), worker_and_blocker(), TreeConfig::default()).await;
    let mut events = EventProbe::new(&tree);
    let worker = spawn_admitted(&tree, SpawnRequest::new("worker", "task")).await;
    events.expect_event("a start", started(worker.id())).await;
    assert_eq!(
        tree.steer(worker.id(), "use the fast path").await.unwrap(),
        SteerReceipt::Delivered
    );
    let outcome = outcome_of(&tree, worker.id()).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());

    let requests = model.calls_of(worker.id());
    assert_eq!(requests.len(), 2);
    assert!(
        !requests[0]
            .messages
            .iter()
            .any(|m| m.content == "use the fast path"),
        "a steer must not enter an in-flight turn"
    );
    let last = requests[1].messages.last().unwrap();
    assert_eq!(
        (last.role, last.content.as_str()),
        (Role::User, "use the fast path")
    );
    let steered = steers_of(&events.drain(), worker.id());
    assert_eq!(steered, 1);

    let refused = tree.steer(worker.id(), "too late").await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "a1 cannot take this now: it is completed"
    );
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn steers_to_a_queued_agent_are_queued_and_delivered_in_order_at_its_first_turn() {
    let scripted = ScriptedModel::new()
        .script(
            "blocker",
            [Turn::answer("done").after(Duration::from_millis(100))],
        )
        .script("worker", [Turn::answer("worked")]);
    let model = RecordingModel::new(scripted.clone());
    let tree = tree(
        model.clone(),
        worker_and_blocker(),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut events = tree.subscribe();
    let blocker = spawn_admitted(&tree, SpawnRequest::new("blocker", "hold").background()).await;
    let queued = spawn_admitted(&tree, SpawnRequest::new("worker", "the task").background()).await;
    assert_eq!(
        tree.record(queued.id()).unwrap().status,
        AgentStatus::Queued
    );
    for text in ["first", "second", "third"] {
        assert_eq!(
            tree.steer(queued.id(), text).await.unwrap(),
            SteerReceipt::Queued,
            "{text}"
        );
    }
    let outcome = outcome_of(&tree, queued.id()).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    assert_eq!(model.calls_of(blocker.id()).len(), 1);

    let first = &model.calls_of(queued.id())[0].messages;
    let texts: Vec<&str> = first.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["the task", "first", "second", "third"]);
    assert!(first.iter().all(|m| m.role == Role::User));
    let steered = steers_of(&events.drain(), queued.id());
    assert_eq!(steered, 3);
    assert_eq!(scripted.calls_by(queued.id()), 1);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn steering_the_root_or_an_unknown_id_is_refused_alike() {
    let model = ScriptedModel::new();
    let tree = tree(model, worker_and_blocker(), TreeConfig::default()).await;
    for id in [a(0), a(42)] {
        let err = tree.steer(id, "hello").await.unwrap_err();
        assert_eq!(err.to_string(), format!("no subagent {id} of yours"));
    }
    tree.shutdown().await;
}

/// A steer to a draining (completing) agent is refused: no turn would ever read it.
#[tokio::test(start_paused = true)]
async fn a_steer_to_a_completing_agent_is_refused() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("slow", "x"),
                Turn::answer("boss done"),
            ],
        )
        .script("slow", [Turn::answer("slow").after(Duration::from_secs(1))]);
    let catalog = catalog([
        delegator_of_all("boss").with_settle(SettlePolicy::Drain),
        AgentDefinition::new("slow", ""),
    ]);
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let h = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tree.record(h.id()).unwrap().status,
        agent_tree::protocol::AgentStatus::Completing
    );
    let receipt = tree.steer(h.id(), "please also do X").await;
    assert!(
        receipt.is_err(),
        "receipt {receipt:?} but no turn will ever read it"
    );
}

/// A steer that arrives during the turn that turns out to be the last is read: the model
/// gets one more turn with it (a `steered` event), or the steer is refused.
#[tokio::test(start_paused = true)]
async fn a_delivered_steer_is_read_or_refused() {
    let model = ScriptedModel::new().script(
        "worker",
        [
            Turn::answer("done").after(Duration::from_millis(100)),
            Turn::answer("done, with X"),
        ],
    );
    let catalog = catalog([AgentDefinition::new("worker", "")]);
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let mut h = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let receipt = tree.steer(h.id(), "also do X").await;
    let _ = h.outcome().await;
    let mut steered = 0;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.next()).await {
        if matches!(e.kind, EventKind::Steered) {
            steered += 1;
        }
    }
    assert!(
        receipt.is_err() || (model.calls_by(h.id()) == 2 && steered == 1),
        "receipt {receipt:?}, but model calls {} and steered events {steered}",
        model.calls_by(h.id())
    );
}

// ------------------------------------------------------------------------------------------
// A `delivered` steer is read, never lost: from a tool or the application, in the instant
// the agent's run ends, under load on worker threads, and during its last allowed turn.
// ------------------------------------------------------------------------------------------

const STEER: &str = "late guidance";

fn child_read_the_steer(model: &RecordingModel, child: AgentId) -> bool {
    model.calls_of(child).iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.role == Role::User && m.content == STEER)
    })
}

/// The receipt the lead's `steer_subagent` call got, read from its third request.
fn steer_receipt(model: &RecordingModel, lead: AgentId) -> Option<String> {
    let requests = model.calls_of(lead);
    let third = requests.get(2)?;
    let result = third.messages.iter().rev().find(|m| m.role == Role::Tool)?;
    if result.is_error {
        return Some(format!("error: {}", result.content));
    }
    let value: serde_json::Value = serde_json::from_str(&result.content).ok()?;
    value["receipt"].as_str().map(str::to_owned)
}

/// lead spawns a worker in the background, steers it after `steer_after`, then waits for it;
/// the worker answers after `answer_after` (and, if it got the steer, once more).
async fn steer_race(steer_after: Duration, answer_after: Duration) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    Turn::spawn_background("worker", "work"),
                    Turn::calls([Call::steer(agent_tree::testkit::Target::Spawned(0), STEER)])
                        .after(steer_after),
                    // Wait for the worker, so its end is its own, not the lead's abort.
                    Turn::calls([Call::result(agent_tree::testkit::Target::Spawned(0))]),
                    Turn::answer("lead done"),
                ],
            )
            .script(
                "worker",
                [
                    Turn::answer("worker done").after(answer_after),
                    Turn::answer("worker read the steer"),
                ],
            ),
    );
    let tree = crate::support::lead_and_worker_tree(&model).await;
    (tree, model)
}

/// Deterministic: a `delivered` receipt from the lead's `steer_subagent` means a later
/// request of the worker carries the steer (or the call is refused), also when the steer
/// reaches the worker in the instant its run ends (both turns return at the same virtual
/// instant).
#[tokio::test(start_paused = true)]
async fn a_delivered_steer_from_a_tool_is_read() {
    let mut lost = Vec::new();
    for answer_after in 98..=102u64 {
        let (tree, model) = steer_race(ms(100), ms(answer_after)).await;
        let lead = spawned(&tree, "lead", "go").await;
        let _ = outcome(&tree, lead, GUARD).await;
        bounded(GUARD, "idle", tree.idle()).await;
        let receipt = steer_receipt(&model, lead);
        if receipt.as_deref() == Some("delivered") && !child_read_the_steer(&model, a(2)) {
            lost.push(answer_after);
        }
        tree.shutdown().await;
    }
    assert!(
        lost.is_empty(),
        "the steer was receipted `delivered` but never reached the worker's \
         conversation (worker answering at {lost:?} ms, steer at 100 ms)"
    );
}

/// Under load on worker threads: in each tree 16 leads steer their workers while
/// the workers' runs end at about the same time. Every `delivered` receipt must be followed by
/// the worker reading the steer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_steer_from_a_tool_is_never_lost_mt() {
    const RUNS: u64 = 200;
    const LEADS: usize = 16;
    let (mut delivered, mut lost) = (0, Vec::new());
    for run in 0..RUNS {
        // Tokio's timer ticks in milliseconds: equal delays fire in the same tick.
        let steer_after = ms(2 + run % 2);
        let answer_after = ms(2 + run / 2 % 2);
        let (tree, model) = steer_race(steer_after, answer_after).await;
        let mut leads = Vec::new();
        for _ in 0..LEADS {
            leads.push(spawned(&tree, "lead", "go").await);
        }
        for &lead in &leads {
            let _ = outcome(&tree, lead, REAL_GUARD).await;
        }
        bounded(REAL_GUARD, "idle", tree.idle()).await;
        for &lead in &leads {
            let worker = tree.record(lead).expect("lead").children[0];
            if steer_receipt(&model, lead).as_deref() == Some("delivered") {
                delivered += 1;
                if !child_read_the_steer(&model, worker) {
                    lost.push((run, worker));
                }
            }
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        lost.is_empty(),
        "{} of {delivered} `delivered` steers (of {} sent) never reached the worker's \
         conversation: (run, worker) {:?}",
        lost.len(),
        RUNS as usize * LEADS,
        &lost[..lost.len().min(10)]
    );
}

/// Through the application's `Tree::steer`, on worker threads: a `Delivered`
/// receipt must be followed by the agent reading the steer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_steer_from_the_application_is_never_lost_mt() {
    const RUNS: u64 = 150;
    let (mut delivered, mut lost) = (0, Vec::new());
    for run in 0..RUNS {
        let model = RecordingModel::new(ScriptedModel::new().script(
            "worker",
            [
                Turn::answer("worker done").after(Duration::from_micros(500 + (run % 7) * 150)),
                Turn::answer("worker read the steer"),
            ],
        ));
        let tree = crate::support::harness::tree(
            model.clone(),
            catalog([leaf("worker")]),
            TreeConfig::default(),
        )
        .await;
        let worker = spawned(&tree, "worker", "work").await;
        tokio::time::sleep(Duration::from_micros(400 + (run / 7 % 5) * 150)).await;
        let receipt = bounded(REAL_GUARD, "the steer", tree.steer(worker, STEER)).await;
        let _ = outcome(&tree, worker, REAL_GUARD).await;
        if matches!(receipt, Ok(SteerReceipt::Delivered)) {
            delivered += 1;
            if !child_read_the_steer(&model, worker) {
                lost.push(run);
            }
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        lost.is_empty(),
        "{} of {delivered} `Delivered` application steers (of {RUNS} runs) were never \
         read: runs {lost:?}",
        lost.len()
    );
}

/// A deterministic variant: a steer receipted `Delivered` during an agent's last allowed
/// turn (`max_turns`) is never silently lost when the run ends: it is read, or the steer is
/// refused.
#[tokio::test(start_paused = true)]
async fn a_steer_delivered_during_the_last_allowed_turn_is_not_silently_lost() {
    let model = RecordingModel::new(
        ScriptedModel::new().script("worker", [Turn::answer("worker done").after(ms(100))]),
    );
    let mut worker = leaf("worker");
    worker.max_turns = Some(1);
    let tree =
        crate::support::harness::tree(model.clone(), catalog([worker]), TreeConfig::default())
            .await;
    let id = spawned(&tree, "worker", "work").await;
    tokio::time::sleep(ms(50)).await;
    let receipt = tree.steer(id, STEER).await;
    let got = outcome(&tree, id, GUARD).await;
    assert!(
        !matches!(receipt, Ok(SteerReceipt::Delivered)) || child_read_the_steer(&model, id),
        "the steer was receipted {receipt:?}, then {id} settled {:?} without ever \
         reading it",
        got.status
    );
    tree.shutdown().await;
}

/// A background top agent queued for a pool slot starts from its kept spec, with its task as
/// its first user message.
#[tokio::test(start_paused = true)]
async fn a_queued_background_agent_starts_with_its_task() {
    let scripted = ScriptedModel::new().script(
        "slow",
        [Turn::answer("done").after(Duration::from_millis(100))],
    );
    let model = RecordingModel::new(scripted);
    let mut config = TreeConfig::default();
    config.max_concurrent = 1;
    let tree = tree(model.clone(), boss_slow_and_quick(), config).await;
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
