//! The owner probe and probe children: an agent under test with a probe as its owner and
//! probes as its children. Their run numbers are the model's `run`, through restarts,
//! resumes and kills.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, ToolCall};
use agent_tree::testkit::{
    self, Call, Fish, OwnerMessage, OwnerProbe, ScriptedModel, Target, Turn, probe_children,
};

use crate::support::harness::owned_tree;
use crate::support::races::on_worker_threads;
use crate::support::scripts::{background_spawns, delegates};
use crate::support::{build_tree, catalog, delegator, leaf};

fn reviewer_catalog() -> Catalog {
    catalog([
        delegator("reviewer", &["evidence-checker"]),
        leaf("evidence-checker"),
    ])
}

/// The guide's story: a reviewer, given this script, spawns an evidence-checker with prompt
/// P, passes the checker's usage up, asks its owner one question, and answers with the
/// checker's finding; the checker is a probe child and the owner a probe.
async fn reviewer_story() {
    let script = ScriptedModel::new().script(
        "reviewer",
        [
            Turn::spawn("evidence-checker", "check claim 3 against the logs"),
            Turn::calls([Call::ask_owner("publish the review?")]),
            Turn::answer("claim 3 holds: the logs show 2.1x"),
        ],
    );
    let log = script.call_log();
    let (model, mut checkers) = probe_children(script, ["evidence-checker"]);
    let builder = Tree::builder().catalog(reviewer_catalog()).model(model);
    let (tree, mut owner) = OwnerProbe::build(builder).await.unwrap();
    let reviewer = owner
        .spawn(&tree, SpawnRequest::new("reviewer", "review"))
        .await;

    let checker = checkers.expect_spawn().await;
    assert_eq!(checker.prompt(), "check claim 3 against the logs");
    let checker_id = checker.id();
    checker.returns("claim 3 holds: the logs show 2.1x", Usage::tokens(40, 8));
    assert_eq!(
        owner.expect_usage().await,
        (checker_id, Usage::tokens(40, 8))
    );
    let question = owner.expect_question().await;
    assert_eq!(
        (question.agent(), question.text()),
        (reviewer, "publish the review?")
    );
    question.answer("yes");
    let outcome = owner.expect_result().await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("claim 3 holds: the logs show 2.1x")
    );
    // The finding reached the reviewer as its spawn's result, and the answer as ask_owner's.
    let calls = log.of(reviewer);
    assert!(calls[1].results[0].content.contains("the logs show 2.1x"));
    assert_eq!(calls[2].results[0].content, "yes");
    assert_eq!(tree.record(reviewer).unwrap().subtree, Usage::tokens(40, 8));
}

/// A probe owner and a probe child drive the agent under test through the guide's story:
/// the child's spawn and prompt, its usage passed up, the agent's question to its owner,
/// and its final answer, each seen in order.
#[tokio::test(start_paused = true)]
async fn the_reviewer_story_with_a_probe_owner_and_a_probe_child() {
    reviewer_story().await;
}

/// The same story on two worker threads, many times: the probes see the same messages
/// however the threads interleave.
#[test]
fn the_reviewer_story_on_worker_threads() {
    on_worker_threads(25, Duration::from_secs(30), reviewer_story);
}

/// The owner probe sees the usage of its agent's whole subtree, billed up its edge, and a
/// question it refuses is an error result for the agent, which carries on.
#[tokio::test(start_paused = true)]
async fn the_owner_sees_its_descendants_usage_restarts_and_a_refusal() {
    let script = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn("mid", "m").usage(Usage::tokens(1, 1)),
                Turn::calls([Call::ask_owner("may I?")]),
                Turn::answer("refused, so done"),
            ],
        )
        .script("mid", delegates("leaf", "l", "m"))
        .script("leaf", [Turn::answer("l").usage(Usage::tokens(7, 3))]);
    let log = script.call_log();
    let catalog = catalog([
        delegator("lead", &["mid"]),
        delegator("mid", &["leaf"]),
        leaf("leaf"),
    ]);
    let (tree, mut owner) = owned_tree(catalog, script).await;
    let lead = owner.spawn(&tree, SpawnRequest::new("lead", "go")).await;
    assert_eq!(owner.expect_usage().await, (lead, Usage::tokens(1, 1)));
    // Two levels down, still billed up the lead's edge.
    let (from, delta) = owner.expect_usage().await;
    assert_eq!(delta, Usage::tokens(7, 3));
    assert_eq!(tree.record(from).unwrap().agent_type, "leaf");
    owner.expect_question().await.refuse("not today");
    assert_eq!(
        owner.expect_result().await.text.as_deref(),
        Some("refused, so done")
    );
    let asked = &log.of(lead)[2].results[0];
    assert!(asked.is_error && asked.content.contains("not today"));
    owner.expect_no_message(Duration::from_secs(60)).await;
}

/// A question the owner probe passes over is refused for the agent (the error says it was
/// passed over), and a restart reaches the owner as a `Restarted` message naming the new
/// run.
#[tokio::test(start_paused = true)]
async fn a_question_passed_over_is_refused_and_restarts_are_messages() {
    let script = ScriptedModel::new().script(
        "w",
        [
            Turn::fail("crash"),
            Turn::calls([Call::ask_owner("still there?")]),
            Turn::answer("carried on"),
        ],
    );
    let log = script.call_log();
    let catalog = catalog([leaf("w").with_restart(RestartPolicy::Transient)]);
    let (tree, mut owner) = owned_tree(catalog, script).await;
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    let outcome = owner
        .fish("the end", |message| match message {
            OwnerMessage::Ended(outcome) if outcome.is_completed() => Fish::Catch(outcome),
            // The first run's end, before its restart.
            OwnerMessage::Ended(_) => Fish::Skip,
            OwnerMessage::Restarted { run } => {
                assert_eq!(run, 2);
                Fish::Skip
            }
            // Skipped: dropped, so refused.
            OwnerMessage::Question(_) => Fish::Skip,
            other => Fish::Fail(format!("unexpected {}", other.describe())),
        })
        .await;
    assert_eq!(outcome.text.as_deref(), Some("carried on"), "{outcome:?}");
    let refused = &log.of(w)[2].results[0];
    assert!(refused.is_error && refused.content.contains("passed over"));
    assert_eq!(
        owner.seen(),
        [
            "ended failed (model_error): crash",
            "restarted as run 2",
            "question \"still there?\"",
            "ended completed: carried on"
        ]
    );
}

/// A failed owner expectation panics saying what was expected and listing every message
/// that came instead.
#[tokio::test(start_paused = true)]
#[should_panic(
    expected = "owner probe of a1: expected a question as the next message; seen 1 message:\n  usage 12 tokens from a1"
)]
async fn a_failed_owner_expectation_lists_what_came() {
    let script =
        ScriptedModel::new().script("w", [Turn::answer("done").usage(Usage::tokens(10, 2))]);
    let (tree, mut owner) = owned_tree(catalog([leaf("w")]), script).await;
    owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    owner.expect_question().await;
}

/// Probe children take their prompt, depth and run from the tree and do what the test says:
/// hang, fail, or ask their owner, whose steer reaches the next turn; a hanging child ends
/// when its owner does.
#[tokio::test(start_paused = true)]
async fn probe_children_fail_hang_and_ask_their_owner() {
    let script = ScriptedModel::new().script(
        "lead",
        [
            background_spawns([("checker", "one"), ("checker", "two")]),
            // The wait ends with the second child's question: answer it by steering.
            Turn::calls([Call::wait([Target::Spawned(1)], WaitPolicy::AllSettled)]),
            Turn::calls([Call::steer(Target::Spawned(1), "use the logs")]),
            Turn::calls([Call::result(Target::Spawned(1))]),
            Turn::answer("lead done"),
        ],
    );
    let (model, mut checkers) = probe_children(script, ["checker"]);
    let catalog = catalog([delegator("lead", &["checker"]), leaf("checker")]);
    let (tree, mut owner) = owned_tree(catalog, model).await;
    owner.spawn(&tree, SpawnRequest::new("lead", "go")).await;

    let one = checkers.expect_spawn().await;
    let two = checkers.expect_spawn().await;
    assert_eq!((one.prompt(), two.prompt()), ("one", "two"));
    assert_eq!((one.depth(), one.incarnation()), (2, 1));
    let (one_id, two_id) = (one.id(), two.id());
    one.hangs();
    two.asks("which source?", Usage::ZERO);
    let answered = checkers.expect_turn().await;
    assert_eq!(answered.agent(), two_id);
    assert_eq!(answered.last_message().unwrap().content, "use the logs");
    answered.fail(ModelError::new("gave up"));
    assert_eq!(
        owner.expect_result().await.text.as_deref(),
        Some("lead done")
    );
    // The lead's end stopped the hanging child; the failing one failed.
    assert_eq!(tree.outcome(one_id).unwrap().reason, EndReason::OwnerEnded);
    assert_eq!(
        tree.outcome(two_id).unwrap().error.as_deref(),
        Some("gave up")
    );
    checkers.expect_no_spawn();
}

/// `expect_spawn` accepts only a child's first turn of a run: a later turn of a known child
/// fails the test, naming the agent, run and turn.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a probed child to start, got a2 (checker) run 1 turn 2")]
async fn expect_spawn_refuses_a_later_turn() {
    let script = ScriptedModel::new().script("lead", [Turn::spawn("checker", "c")]);
    let (model, mut checkers) = probe_children(script, ["checker"]);
    let catalog = catalog([delegator("lead", &["checker"]), leaf("checker")]);
    let tree = build_tree(catalog, model).await;
    let _lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let first = checkers.expect_spawn().await;
    let call = ToolCall::new("c1", "no_such_tool", serde_json::json!({}));
    first.into_turn().call_tools(vec![call], Usage::ZERO);
    checkers.expect_spawn().await;
}

/// The owner probe's run numbers follow the model's `run` through a failure and restart, a
/// resume, a kill and its restart, and a restart of a resumed run.
#[tokio::test(start_paused = true)]
async fn the_owner_probes_runs_follow_restarts_resumes_and_kills() {
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::fail("crash"),       // run 1
            Turn::answer("two"),       // run 2 (restart)
            Turn::hang(),              // run 3 (resume), killed
            Turn::answer("four"),      // run 4 (restart)
            Turn::fail("crash again"), // run 5 (resume)
            Turn::answer("six"),       // run 6 (restart)
        ],
    );
    let catalog = catalog([AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)]);
    let (tree, mut owner) = testkit::OwnerProbe::build(
        Tree::builder()
            .catalog(catalog)
            .config(TreeConfig::default().with_root_supervision(
                agent_tree::protocol::Strategy::OneForOne,
                10,
                Duration::from_secs(5),
            ))
            .model(model.clone()),
    )
    .await
    .unwrap();
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    let mut restarts = Vec::new();
    let take = |m: &testkit::OwnerMessage, restarts: &mut Vec<u32>| {
        if let testkit::OwnerMessage::Restarted { run } = m {
            restarts.push(*run);
        }
    };
    /// Waits for the owner's next `restarted` message and notes its run in `restarts`.
    async fn next_restart(owner: &mut testkit::OwnerProbe, restarts: &mut Vec<u32>) {
        let m = owner
            .expect_message("restart", |m| {
                matches!(m, testkit::OwnerMessage::Restarted { .. })
            })
            .await;
        if let testkit::OwnerMessage::Restarted { run } = m {
            restarts.push(run);
        }
    }
    // run 1 fails, restarted as 2, which completes.
    let m = owner
        .expect_message("end 1", |m| matches!(m, testkit::OwnerMessage::Ended(_)))
        .await;
    take(&m, &mut restarts);
    next_restart(&mut owner, &mut restarts).await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("two"));
    tree.idle().await;
    // run 3: resumed, killed while hanging, restarted as 4.
    tree.resume(w, "three").await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(w).unwrap();
    let killed = owner.expect_result().await;
    assert_eq!(killed.status, AgentStatus::Killed, "{killed:?}");
    next_restart(&mut owner, &mut restarts).await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("four"));
    tree.idle().await;
    // run 5: resumed, fails, restarted as 6.
    tree.resume(w, "five").await.unwrap();
    assert_eq!(owner.expect_result().await.status, AgentStatus::Failed);
    next_restart(&mut owner, &mut restarts).await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("six"));
    let runs: Vec<u32> = model.log_of(w).iter().map(|c| c.run).collect();
    assert_eq!(runs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(restarts, [2, 4, 6], "seen: {:?}", owner.seen());
    tree.shutdown().await;
}

/// A probed child resumed by its owner starts a run (run 2, turn 1, same incarnation) the
/// probe reads through `expect_spawn`, with the resume's prompt.
#[tokio::test(start_paused = true)]
async fn a_probe_child_resumed_by_its_owner_is_a_new_run_with_the_resumes_prompt() {
    let lead = ScriptedModel::new().script(
        "lead",
        [
            Turn::spawn("checker", "first"),
            Turn::calls([testkit::Call::spawn("checker", "again")
                .with_field("resume", serde_json::json!("a2"))]),
            Turn::answer("verified"),
        ],
    );
    let (model, mut checkers) = testkit::probe_children(lead, ["checker"]);
    let catalog = catalog([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["checker"])),
        AgentDefinition::new("checker", ""),
    ]);
    let tree = build_tree(catalog, model).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let first = checkers.expect_spawn().await;
    assert_eq!(
        (first.id(), first.run(), first.prompt()),
        (AgentId::new(2), 1, "first")
    );
    first.returns("one", Usage::tokens(1, 1));
    let second = checkers.expect_spawn().await;
    assert_eq!(
        (
            second.id(),
            second.incarnation(),
            second.run(),
            second.prompt()
        ),
        (AgentId::new(2), 1, 2, "again")
    );
    second.returns("two", Usage::tokens(1, 1));
    assert_eq!(lead.outcome().await.text.as_deref(), Some("verified"));
    let runs: Vec<(u32, u32)> = checkers
        .log()
        .calls()
        .iter()
        .map(|c| (c.run, c.turn))
        .collect();
    assert_eq!(runs, [(1, 1), (2, 1)]);
    tree.shutdown().await;
}
