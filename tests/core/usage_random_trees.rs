//! The usage invariant on random trees: for random shapes (depth ≤ 4, width ≤ 3) with random
//! per-turn usage, foreground and background spawns, and leaves that fail or panic, at
//! quiescence every record is terminal with the expected status and own usage,
//! `snapshot.check_usage()` holds, and the root's subtree equals the sum of every
//! `usage_reported` event's delta. Usage near `u64::MAX` saturates and the sum still holds.

use std::time::Duration;

use crate::support::harness::tree;
use crate::support::{build_tree, run_within};
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, TreeSnapshot};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use proptest::prelude::*;

const MAX_DEPTH: u32 = 4;
const MAX_WIDTH: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Answer,
    Fail,
    Panic,
}

/// One agent of a generated tree.
#[derive(Clone, Debug)]
struct Node {
    /// Usage of turn 1 (spawns), turn 2 (background reads) and the final turn.
    usage: [Usage; 3],
    /// Virtual time each turn takes.
    delay_ms: u64,
    /// How a leaf ends (inner nodes always answer).
    ending: Ending,
    /// Children, with whether each is spawned in the background.
    children: Vec<(Node, bool)>,
}

fn usage() -> impl Strategy<Value = Usage> {
    (0u64..1_000, 0u64..500, 0u64..50, 0u64..5_000).prop_map(|(i, o, cache, cost)| {
        Usage::tokens(i, o)
            .with_cost_micros(cost)
            .with_cache_read(cache)
    })
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![6 => Just(Ending::Answer), 1 => Just(Ending::Fail), 1 => Just(Ending::Panic)]
}

fn node(level: u32) -> BoxedStrategy<Node> {
    let children = if level >= MAX_DEPTH {
        Just(Vec::new()).boxed()
    } else {
        prop::collection::vec((node(level + 1), any::<bool>()), 0..=MAX_WIDTH).boxed()
    };
    ([usage(), usage(), usage()], 0u64..40, ending(), children)
        .prop_map(|(usage, delay_ms, ending, children)| Node {
            usage,
            delay_ms,
            ending: if children.is_empty() {
                ending
            } else {
                Ending::Answer
            },
            children,
        })
        .boxed()
}

/// A node flattened: its type name, definition, script and what it should end as.
struct Flat {
    name: String,
    definition: AgentDefinition,
    script: Script,
    expected_own: Usage,
    expected_status: AgentStatus,
    expected_reason: EndReason,
}

fn flatten(node: &Node, out: &mut Vec<Flat>) -> String {
    let name = format!("n{}", out.len());
    out.push(Flat {
        name: name.clone(),
        definition: AgentDefinition::new(&name, "generated"),
        script: Script::default(),
        expected_own: Usage::ZERO,
        expected_status: AgentStatus::Completed,
        expected_reason: EndReason::FinalAnswer,
    });
    let at = out.len() - 1;
    let child_names: Vec<String> = node.children.iter().map(|(c, _)| flatten(c, out)).collect();
    let delay = Duration::from_millis(node.delay_ms);
    let mut turns = Vec::new();
    let mut own = Usage::ZERO;
    if !node.children.is_empty() {
        let spawns = node
            .children
            .iter()
            .zip(&child_names)
            .map(|((_, bg), child)| {
                if *bg {
                    Call::spawn_background(child, "go")
                } else {
                    Call::spawn(child, "go")
                }
            });
        turns.push(Turn::calls(spawns).usage(node.usage[0]).after(delay));
        own += node.usage[0];
        let reads: Vec<Call> = node
            .children
            .iter()
            .enumerate()
            .filter(|(_, (_, bg))| *bg)
            .map(|(k, _)| Call::result(Target::Spawned(k)))
            .collect();
        if !reads.is_empty() {
            turns.push(Turn::calls(reads).usage(node.usage[1]).after(delay));
            own += node.usage[1];
        }
    }
    let flat = &mut out[at];
    match node.ending {
        Ending::Answer => {
            turns.push(
                Turn::answer(format!("{name} done"))
                    .usage(node.usage[2])
                    .after(delay),
            );
            own += node.usage[2];
        }
        Ending::Fail => {
            turns.push(Turn::fail("generated failure").after(delay));
            flat.expected_status = AgentStatus::Failed;
            flat.expected_reason = EndReason::ModelError;
        }
        Ending::Panic => {
            turns.push(Turn::panic("generated panic").after(delay));
            flat.expected_status = AgentStatus::Failed;
            flat.expected_reason = EndReason::Panicked;
        }
    }
    if !child_names.is_empty() {
        flat.definition = flat
            .definition
            .clone()
            .with_allowed_subagents(SubagentAllowance::only(child_names));
    }
    flat.script = Script::new(turns);
    flat.expected_own = own;
    name
}

async fn run_case(tree_shape: Node) -> Result<(), TestCaseError> {
    let mut flat = Vec::new();
    flatten(&tree_shape, &mut flat);
    let model = flat.iter().fold(ScriptedModel::new(), |model, f| {
        model.script(f.name.clone(), f.script.clone())
    });
    let tree = tree(
        model,
        crate::support::catalog(flat.iter().map(|f| f.definition.clone())),
        TreeConfig::default().with_max_total_agents(64),
    )
    .await;
    let mut events = tree.subscribe();

    let outcome = run_within(&tree, "the generated tree", SpawnRequest::new("n0", "go")).await;
    prop_assert_eq!(outcome.status, flat[0].expected_status);
    let events = crate::support::events_at_idle(&tree, &mut events).await;
    let snapshot: TreeSnapshot = tree.snapshot();
    let text = snapshot.render_text();

    prop_assert_eq!(snapshot.agents().count(), flat.len(), "{}", text);
    for r in snapshot.agents() {
        prop_assert!(
            r.status.is_terminal(),
            "{} is {} in\n{}",
            r.id,
            r.status,
            text
        );
        let expected = flat
            .iter()
            .find(|f| f.name == r.agent_type)
            .expect("every record is of a generated type");
        prop_assert_eq!(r.status, expected.expected_status, "{} in\n{}", r.id, text);
        let reason = r.outcome.as_ref().map(|o| o.reason);
        prop_assert_eq!(reason, Some(expected.expected_reason), "{}", r.id);
        prop_assert_eq!(r.own, expected.expected_own, "own usage of {}", r.id);
    }
    if let Err(mismatch) = snapshot.check_usage() {
        return Err(TestCaseError::fail(format!("{mismatch}\n{text}")));
    }
    let root = snapshot.root().expect("root record");
    let expected_total: Usage = flat.iter().map(|f| f.expected_own).sum();
    prop_assert_eq!(root.subtree, expected_total, "{}", text);
    prop_assert_eq!(
        root.subtree,
        crate::support::reported_usage(&events),
        "{}",
        text
    );
    prop_assert_eq!(
        snapshot.tally.usage_reported,
        events
            .iter()
            .filter(|e| e.kind.name() == "usage_reported")
            .count() as u64
    );
    crate::support::within("shutdown", tree.shutdown()).await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// On random trees with random usage, failures and panics, every record settles as
    /// expected, `subtree == own + Σ children.subtree` holds everywhere, and the root's
    /// subtree is the sum of every `usage_reported` delta.
    #[test]
    fn usage_adds_up_on_random_trees(tree_shape in node(1)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime builds");
        runtime.block_on(run_case(tree_shape))?;
    }
}

/// Usage near `u64::MAX` saturates everywhere (own, subtree, the root), and the events still
/// sum to the root's total: no panic, no wrap.
#[tokio::test(start_paused = true)]
async fn huge_usage_saturates_and_the_events_still_sum_to_the_total() {
    let huge = Usage::tokens(u64::MAX - 1, u64::MAX - 1);
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([Call::spawn("worker", "w")]).usage(huge),
                Turn::answer("lead done").usage(huge),
            ],
        )
        .script("worker", [Turn::answer("done").usage(huge)]);
    let tree = build_tree(
        crate::support::catalog([
            crate::support::delegator("lead", &["worker"]),
            crate::support::leaf("worker"),
        ]),
        model,
    )
    .await;
    let mut events = tree.subscribe();
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    assert!(
        tokio::time::timeout(crate::support::harness::GUARD, lead.outcome())
            .await
            .unwrap()
            .is_completed()
    );
    let root = tree.record(AgentId::ROOT).unwrap().subtree;
    assert_eq!(root.input_tokens, u64::MAX);
    assert_eq!(crate::support::reported_usage(&events.drain()), root);
    tree.shutdown().await;
}
