//! Control is ownership-scoped, checked exhaustively: in a random tree of more than 100
//! agents, every agent calls `get_subagent_result` (peek), `steer_subagent`, resume (the
//! `Agent` tool with `resume`) and, last, `abort_subagent` on every agent of the tree (plus
//! the root and an id that does not exist), through its own tools. A call is refused with
//! `no subagent aN of yours` exactly when the caller is not the target's owner; the owner's
//! resume is refused too, for the target's status (it is running), which means it passed the
//! ownership check. With `ControlScope::Descendants`, result and steer reach exactly the
//! caller's proper descendants.
//!
//! How the tree is driven: every agent's type is unique and its type script spawns its
//! children in the background, then parks in a long (virtual) think. Once the tree is built,
//! each agent gets its own script for the turns after that: the matrix turn, then the abort
//! turn, which deeper agents take first (their turns end earlier), so no owner aborts a
//! subtree before its agents have made their calls.

use agent_tree::testkit::EventProbe;
use std::collections::HashMap;
use std::time::Duration;

use crate::support::catalog;
use crate::support::harness::{GUARD, Rng, a, idle, status_of};
use crate::support::resume_call;
use crate::support::spawn_admitted;
use agent_tree::ControlScope;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Message};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use serde_json::json;

const NODES: usize = 112;
const TOP_LEVEL: usize = 4;
const MAX_FANOUT: usize = 6;
const MAX_HEIGHT: u32 = 5;
/// Where every agent parks once it has spawned its children.
const BUILT: Duration = Duration::from_secs(1_000);
/// The last turn, long after every abort.
const END: Duration = Duration::from_secs(10_000);
const MISSING: &str = "a100000";

/// A random forest: `parent[i]` is the node's owner (`None` for top-level agents).
struct Shape {
    parent: Vec<Option<usize>>,
    depth: Vec<u32>,
}

fn random_shape(seed: u64) -> Shape {
    let mut rng = Rng::new(seed);
    let mut parent = Vec::with_capacity(NODES);
    let mut depth = Vec::with_capacity(NODES);
    let mut fanout = vec![0usize; NODES];
    for i in 0..NODES {
        if i < TOP_LEVEL {
            parent.push(None);
            depth.push(1);
            continue;
        }
        let open: Vec<usize> = (0..i)
            .filter(|&j| depth[j] < MAX_HEIGHT && fanout[j] < MAX_FANOUT)
            .collect();
        let p = open[rng.below(open.len() as u64) as usize];
        fanout[p] += 1;
        parent.push(Some(p));
        depth.push(depth[p] + 1);
    }
    Shape { parent, depth }
}

fn type_name(i: usize) -> String {
    format!("t{i}")
}

fn noop() -> Call {
    Call::tool("noop", json!({}))
}

fn parked() -> Turn {
    Turn::calls([noop()]).after(BUILT)
}

struct Built {
    tree: Tree,
    model: ScriptedModel,
    /// Node index → agent id.
    ids: Vec<AgentId>,
    shape: Shape,
}

async fn build(seed: u64, scope: ControlScope) -> Built {
    let shape = random_shape(seed);
    let mut model = ScriptedModel::new();
    let mut definitions = Vec::new();
    for i in 0..NODES {
        let children = (0..NODES).filter(|&c| shape.parent[c] == Some(i));
        let mut first = vec![noop()];
        first.extend(children.map(|c| Call::spawn_background(type_name(c), "build")));
        model = model.script(
            type_name(i),
            Script::new([
                Turn::calls(first).usage(Usage::tokens(1, 1)),
                parked(),
                Turn::hang(),
            ]),
        );
        definitions.push(
            AgentDefinition::new(type_name(i), "").with_allowed_subagents(SubagentAllowance::All),
        );
    }
    let config = TreeConfig::default()
        .with_max_depth(MAX_HEIGHT + 2)
        .with_max_children_per_agent(MAX_FANOUT)
        .with_max_total_agents(NODES + 16)
        .with_max_tool_calls_per_turn(4 * NODES)
        .with_control_scope(scope);
    let tree = crate::support::harness::tree(model.clone(), catalog(definitions), config).await;
    let mut events = EventProbe::new(&tree);
    for i in 0..TOP_LEVEL {
        spawn_admitted(&tree, SpawnRequest::new(type_name(i), "build").background()).await;
    }
    // Every agent has started and reported its first turn (its usage): it is parked (or
    // about to be).
    events
        .receive_n(NODES, "every agent's first usage", |e| {
            matches!(e.kind, EventKind::UsageReported { .. })
        })
        .await;

    let snapshot = tree.snapshot();
    assert_eq!(snapshot.agents().count(), NODES);
    let by_type: HashMap<&str, AgentId> = snapshot
        .agents()
        .map(|r| (r.agent_type.as_str(), r.id))
        .collect();
    let ids: Vec<AgentId> = (0..NODES).map(|i| by_type[type_name(i).as_str()]).collect();
    for i in 0..NODES {
        let record = snapshot.record(ids[i]).unwrap();
        assert_eq!(
            record.parent,
            Some(shape.parent[i].map_or(a(0), |p| ids[p]))
        );
        assert_eq!(record.depth, shape.depth[i]);
        assert_eq!(record.status, AgentStatus::Running);
    }
    Built {
        tree,
        model,
        ids,
        shape,
    }
}

fn targets(ids: &[AgentId]) -> Vec<String> {
    let mut targets: Vec<String> = ids.iter().map(ToString::to_string).collect();
    targets.push("a0".into());
    targets.push(MISSING.into());
    targets
}

fn peek(target: &str) -> Call {
    Call::peek(Target::Raw(target.to_owned()))
}

fn steer(target: &str) -> Call {
    Call::steer(Target::Raw(target.to_owned()), "matrix")
}

fn resume(target: &str) -> Call {
    resume_call(target, "matrix")
}

fn abort(target: &str) -> Call {
    Call::tool("abort_subagent", json!({ "agent_id": target }))
}

fn refused(result: &Message, target: &str) -> bool {
    result.is_error && result.content == format!(r#"{{"error":"no subagent {target} of yours"}}"#)
}

/// Checks `results` against the calls `op` made on every target, given who may reach whom.
fn check(
    op: &str,
    caller: AgentId,
    results: &[Message],
    targets: &[String],
    reaches: impl Fn(&str) -> bool,
    allowed: impl Fn(&Message, &str) -> bool,
) -> usize {
    assert_eq!(results.len(), targets.len(), "{caller} {op}");
    let mut passed = 0;
    for (result, target) in results.iter().zip(targets) {
        if reaches(target) {
            assert!(
                allowed(result, target),
                "{caller} {op} {target} (its own): {}",
                result.content
            );
            passed += 1;
        } else {
            assert!(
                refused(result, target),
                "{caller} {op} {target} (not its own) was not refused: {}",
                result.content
            );
        }
    }
    passed
}

/// A `get_subagent_result` call of each of `targets`, then a steer of each.
fn peeks_then_steers(targets: &[String]) -> Vec<Call> {
    let mut calls: Vec<Call> = targets.iter().map(|t| peek(t)).collect();
    calls.extend(targets.iter().map(|t| steer(t)));
    calls
}

#[tokio::test(start_paused = true)]
async fn only_the_owner_reaches_its_children_with_every_control_tool() {
    let Built {
        tree,
        model,
        ids,
        shape,
    } = build(0xC0FFEE, ControlScope::Children).await;
    let targets = targets(&ids);
    let ops = targets.len();
    for (i, &id) in ids.iter().enumerate() {
        let mut matrix = peeks_then_steers(&targets);
        matrix.extend(targets.iter().map(|t| resume(t)));
        // Deeper agents take their abort turn first.
        let wait = Duration::from_secs(100 * u64::from(MAX_HEIGHT + 1 - shape.depth[i]));
        model.script_agent(
            id,
            Script::new([
                Turn::hang(),
                parked(),
                Turn::calls(matrix),
                Turn::calls(targets.iter().map(|t| abort(t))).after(wait),
                Turn::answer("done").after(END),
                // The aborted children's ends, noticed during that turn, get one more.
                Turn::answer("done"),
            ]),
        );
    }
    idle(&tree).await;

    let owner: HashMap<String, AgentId> = (0..NODES)
        .map(|i| (ids[i].to_string(), shape.parent[i].map_or(a(0), |p| ids[p])))
        .collect();
    let mut owned = 0;
    for &caller in &ids {
        let log = model.log_of(caller);
        assert!(
            (5..=6).contains(&log.len()),
            "{caller} took {} turns",
            log.len()
        );
        let is_child = |t: &str| owner.get(t) == Some(&caller);
        let matrix = &log[3].results;
        assert_eq!(matrix.len(), 3 * ops);
        let n = check(
            "peek",
            caller,
            &matrix[..ops],
            &targets,
            is_child,
            |r, _| !r.is_error && status_of(r) == "running",
        );
        check(
            "steer",
            caller,
            &matrix[ops..2 * ops],
            &targets,
            is_child,
            |r, _| !r.is_error && r.content.contains("\"receipt\":\"delivered\""),
        );
        check(
            "resume",
            caller,
            &matrix[2 * ops..],
            &targets,
            is_child,
            |r, t| {
                r.is_error
                    && crate::support::error_text(&r.content)
                        == format!("{t} cannot take this now: it is running")
            },
        );
        check(
            "abort",
            caller,
            &log[4].results,
            &targets,
            is_child,
            |r, _| !r.is_error && status_of(r) == "aborting",
        );
        owned += n;
    }
    assert_eq!(
        owned,
        NODES - TOP_LEVEL,
        "every non-top-level agent has one owner"
    );

    // Every owned agent was aborted by its owner; the top-level agents completed.
    let snapshot = tree.snapshot();
    for (i, &id) in ids.iter().enumerate() {
        let record = snapshot.record(id).unwrap();
        let expected = if shape.parent[i].is_some() {
            AgentStatus::Aborted
        } else {
            AgentStatus::Completed
        };
        assert_eq!(record.status, expected, "{id}");
    }
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn in_descendants_scope_result_and_steer_reach_exactly_the_callers_subtree() {
    let Built {
        tree,
        model,
        ids,
        shape,
    } = build(0xDE5C, ControlScope::Descendants).await;
    let targets = targets(&ids);
    let ops = targets.len();
    for &id in &ids {
        let matrix = peeks_then_steers(&targets);
        model.script_agent(
            id,
            Script::new([
                Turn::hang(),
                parked(),
                Turn::calls(matrix),
                Turn::answer("done").after(END),
            ]),
        );
    }
    tokio::time::timeout(GUARD, tree.idle()).await.unwrap();

    let index: HashMap<String, usize> = (0..NODES).map(|i| (ids[i].to_string(), i)).collect();
    let is_ancestor = |caller: usize, target: usize| {
        let mut cursor = shape.parent[target];
        while let Some(p) = cursor {
            if p == caller {
                return true;
            }
            cursor = shape.parent[p];
        }
        false
    };
    let mut reached = 0;
    let mut deep = 0;
    for (i, &caller) in ids.iter().enumerate() {
        let log = model.log_of(caller);
        // As in the sibling test: a steer that lands during the last turn (every agent's
        // ends at the same instant) gets one more.
        assert!(
            (4..=5).contains(&log.len()),
            "{caller} took {} turns",
            log.len()
        );
        let matrix = &log[3].results;
        assert_eq!(matrix.len(), 2 * ops);
        let reaches = |t: &str| index.get(t).is_some_and(|&j| is_ancestor(i, j));
        reached += check("peek", caller, &matrix[..ops], &targets, reaches, |r, _| {
            !r.is_error && status_of(r) == "running"
        });
        check(
            "steer",
            caller,
            &matrix[ops..],
            &targets,
            reaches,
            |r, _| !r.is_error && r.content.contains("\"receipt\":\"delivered\""),
        );
        deep += (0..NODES)
            .filter(|&j| is_ancestor(i, j) && shape.parent[j] != Some(i))
            .count();
    }
    assert!(
        deep > 0,
        "the tree has grandchildren, so the wider scope is exercised"
    );
    assert!(reached > NODES - TOP_LEVEL);
    tree.shutdown().await;
}
