//! Admission is atomic and bounded under a storm: many agents concurrently issue spawn
//! calls (mostly background, some foreground) while the application keeps spawning top-level
//! background agents. Replaying the event stream, at no moment does any agent have more than
//! `max_children_per_agent` live children, the tree more than `max_total_agents` live agents,
//! or the pool more than `max_concurrent` top-level agents running; and every refusal is an
//! error result naming the limit it hit.
//!
//! Randomized from fixed seeds (a seeded PRNG builds the scripts and the application's
//! schedule), on a paused clock, so each seed replays identically.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::support::RecordingModel;
use crate::support::catalog;
use crate::support::harness::{GUARD, Rng, answered_calls};
use crate::support::scripts::answers_after;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};

const MAX_DEPTH: u32 = 3;
const MAX_CHILDREN: usize = 3;
const MAX_TOTAL: usize = 24;
const MAX_CONCURRENT: usize = 4;
const SPAWNER_TYPES: u64 = 8;
const LEAF_TYPES: u64 = 4;
const APP_SPAWNS: usize = 150;

fn spawner(k: u64) -> String {
    format!("spawner{k}")
}

fn leaf(k: u64) -> String {
    format!("leaf{k}")
}

fn random_type(rng: &mut Rng) -> String {
    if rng.chance(40) {
        spawner(rng.below(SPAWNER_TYPES))
    } else {
        leaf(rng.below(LEAF_TYPES))
    }
}

/// A spawner's script: 3–5 turns of spawn bursts (background; a third of the turns also wait
/// on one foreground leaf), each after a short think, then a final answer.
fn spawner_script(rng: &mut Rng) -> Script {
    let mut turns = Vec::new();
    for _ in 0..rng.range(3, 5) {
        let mut calls: Vec<Call> = (0..rng.range(3, 7))
            .map(|_| Call::spawn_background(random_type(rng), "storm"))
            .collect();
        if rng.chance(33) {
            calls.push(Call::spawn(leaf(rng.below(LEAF_TYPES)), "wait for me"));
        }
        turns.push(Turn::calls(calls).after(Duration::from_millis(rng.range(0, 12))));
    }
    turns.push(Turn::answer("spawned").after(Duration::from_millis(rng.range(0, 12))));
    Script::new(turns)
}

fn spawners_and_leaves() -> Catalog {
    let spawners = (0..SPAWNER_TYPES).map(|k| {
        AgentDefinition::new(spawner(k), "").with_allowed_subagents(SubagentAllowance::All)
    });
    let leaves = (0..LEAF_TYPES).map(|k| AgentDefinition::new(leaf(k), ""));
    catalog(spawners.chain(leaves))
}

#[derive(Debug, Default)]
struct Tally {
    attempts: usize,
    admitted: usize,
    child_limit: usize,
    total_limit: usize,
    app_refused: usize,
    not_offered: usize,
    queued: usize,
    peak_children: usize,
    peak_total: usize,
    peak_pool: usize,
}

async fn storm(seed: u64) -> Tally {
    let mut rng = Rng::new(seed);
    let mut scripted = ScriptedModel::new();
    for k in 0..SPAWNER_TYPES {
        scripted = scripted.script(spawner(k), spawner_script(&mut rng));
    }
    for k in 0..LEAF_TYPES {
        let think = Duration::from_millis(3 + 7 * k);
        scripted = scripted.script(leaf(k), Script::new(answers_after("leaf", think)));
    }
    let model = RecordingModel::new(scripted);
    let config = TreeConfig::default()
        .with_max_depth(MAX_DEPTH)
        .with_max_children_per_agent(MAX_CHILDREN)
        .with_max_total_agents(MAX_TOTAL)
        .with_max_concurrent(MAX_CONCURRENT);
    let tree = crate::support::harness::tree(model.clone(), spawners_and_leaves(), config).await;
    let mut events = tree.subscribe();
    let mut tally = Tally::default();

    // The application's part of the storm: top-level background spawners on a random beat.
    for _ in 0..APP_SPAWNS {
        tally.attempts += 1;
        let request = SpawnRequest::new(spawner(rng.below(SPAWNER_TYPES)), "top").background();
        match tree.spawn(request).await {
            Ok(_) => tally.admitted += 1,
            Err(error) => {
                let text = error.to_string();
                assert_eq!(
                    text,
                    format!("max_total_agents {MAX_TOTAL} reached"),
                    "seed {seed}"
                );
                tally.app_refused += 1;
            }
        }
        let pause = rng.range(0, 6);
        if pause > 0 {
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
    tokio::time::timeout(GUARD, tree.idle())
        .await
        .expect("the storm never settled");

    // Replay the events: live children per owner, live agents, running pooled agents.
    let mut live: HashSet<AgentId> = HashSet::new();
    let mut children: HashMap<AgentId, usize> = HashMap::new();
    let mut running_pool: HashSet<AgentId> = HashSet::new();
    let mut last_seq = 0;
    for e in events.drain() {
        assert_eq!(e.seq, last_seq + 1, "events are dense");
        last_seq = e.seq;
        let owner = e.parent.expect("agents have owners");
        match &e.kind {
            EventKind::Queued { .. } | EventKind::Started { .. } => {
                if matches!(e.kind, EventKind::Queued { .. }) {
                    tally.queued += 1;
                }
                if live.insert(e.agent) {
                    let n = children.entry(owner).or_default();
                    *n += 1;
                    if !owner.is_root() {
                        tally.peak_children = tally.peak_children.max(*n);
                        assert!(
                            *n <= MAX_CHILDREN,
                            "seed {seed}: {owner} has {n} live children"
                        );
                    }
                }
                if matches!(e.kind, EventKind::Started { .. }) && e.depth == 1 {
                    running_pool.insert(e.agent);
                    tally.peak_pool = tally.peak_pool.max(running_pool.len());
                    assert!(
                        running_pool.len() <= MAX_CONCURRENT,
                        "seed {seed}: {} pooled agents running",
                        running_pool.len()
                    );
                }
                tally.peak_total = tally.peak_total.max(live.len());
                assert!(live.len() <= MAX_TOTAL, "seed {seed}: {} live", live.len());
            }
            kind if kind.terminal_status().is_some() => {
                assert!(
                    live.remove(&e.agent),
                    "seed {seed}: {} ended twice",
                    e.agent
                );
                *children.get_mut(&owner).unwrap() -= 1;
                running_pool.remove(&e.agent);
            }
            _ => {}
        }
    }
    assert!(live.is_empty());
    let snapshot = tree.snapshot();
    assert!(
        snapshot.peak_live <= MAX_TOTAL,
        "seed {seed}: peak {}",
        snapshot.peak_live
    );
    assert_eq!(snapshot.live(), 0);

    // Every spawn an agent asked for: admitted (its child exists, under it) or refused with an
    // error naming the limit.
    let child_limit =
        |owner: AgentId| format!("max_children_per_agent {MAX_CHILDREN} reached for {owner}");
    let total_limit = format!("max_total_agents {MAX_TOTAL} reached");
    for request in model.calls() {
        for (call, result) in answered_calls(&request) {
            assert_eq!(result.role, Role::Tool);
            if call.name != "Agent" {
                continue;
            }
            if !result.is_error {
                tally.attempts += 1;
                tally.admitted += 1;
                let child = crate::support::harness::spawned_id(&result);
                let record = snapshot.record(child).expect("the admitted child exists");
                assert_eq!(record.parent, Some(request.agent), "seed {seed}");
                assert_eq!(record.depth, request.depth + 1);
            } else if crate::support::error_text(&result.content)
                == "tool \"Agent\" is not available to this agent"
            {
                // At the depth cap the tool is not offered at all: not an admission.
                assert_eq!(request.depth, MAX_DEPTH, "seed {seed}");
                tally.not_offered += 1;
            } else if crate::support::error_text(&result.content) == child_limit(request.agent) {
                tally.attempts += 1;
                tally.child_limit += 1;
            } else if crate::support::error_text(&result.content) == total_limit {
                tally.attempts += 1;
                tally.total_limit += 1;
            } else {
                panic!("seed {seed}: refusal naming no limit: {}", result.content);
            }
        }
    }
    // Children whose admission no model call ever saw: their owner was aborted (its own owner
    // ended) after its spawn calls were answered and before its next turn.
    let seen = tally.admitted;
    let seen_ids: HashSet<AgentId> = model
        .calls()
        .iter()
        .flat_map(answered_calls)
        .filter(|(call, result)| call.name == "Agent" && !result.is_error)
        .map(|(_, result)| crate::support::harness::spawned_id(&result))
        .collect();
    for record in snapshot.agents() {
        let owner = record.parent.expect("agents have owners");
        if owner.is_root() {
            continue;
        }
        let owner_record = snapshot.record(owner).expect("owner record");
        if !seen_ids.contains(&record.id) {
            assert_eq!(
                owner_record.status,
                AgentStatus::Aborted,
                "seed {seed}: {} unseen by {owner}, which {}",
                record.id,
                owner_record.status
            );
            tally.admitted += 1;
        }
    }
    assert!(tally.admitted >= seen);
    assert_eq!(snapshot.agents().count(), tally.admitted, "seed {seed}");
    tree.shutdown().await;
    tally
}

/// However many spawns race, no agent ever has more than `max_children_per_agent` live
/// children, the tree more than `max_total_agents` live agents or the pool more than
/// `max_concurrent` running, and every refusal names the limit it hit.
#[tokio::test(start_paused = true)]
async fn a_spawn_storm_never_exceeds_any_limit_and_every_refusal_names_its_limit() {
    let mut attempts = 0;
    for seed in [1, 0x5eed, 20_240_611] {
        let tally = storm(seed).await;
        // The storm must actually press on every limit, or it proves nothing.
        assert!(tally.child_limit > 0, "seed {seed}: {tally:?}");
        assert!(
            tally.total_limit + tally.app_refused > 0,
            "seed {seed}: {tally:?}"
        );
        assert!(tally.queued > 0, "seed {seed}: {tally:?}");
        assert_eq!(tally.peak_pool, MAX_CONCURRENT, "seed {seed}: {tally:?}");
        assert_eq!(tally.peak_children, MAX_CHILDREN, "seed {seed}: {tally:?}");
        assert!(tally.peak_total > MAX_TOTAL / 2, "seed {seed}: {tally:?}");
        eprintln!("seed {seed}: {tally:?}");
        attempts += tally.attempts;
    }
    assert!(attempts >= 1_000, "only {attempts} spawn attempts");
}
