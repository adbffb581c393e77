//! The owner probe and probe children: an agent under test with a probe as its owner and
//! probes as its children.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, ToolCall};
use agent_tree::testkit::{
    Call, Fish, OwnerMessage, OwnerProbe, Script, ScriptedModel, Target, Turn, probe_children,
};

use crate::support::races::on_worker_threads;
use crate::support::{catalog, delegator, leaf};

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
        Script::new([
            Turn::spawn("evidence-checker", "check claim 3 against the logs"),
            Turn::calls([Call::ask_owner("publish the review?")]),
            Turn::answer("claim 3 holds: the logs show 2.1x"),
        ]),
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

#[tokio::test(start_paused = true)]
async fn the_reviewer_story_with_a_probe_owner_and_a_probe_child() {
    reviewer_story().await;
}

#[test]
fn the_reviewer_story_on_worker_threads() {
    on_worker_threads(25, Duration::from_secs(30), reviewer_story);
}

#[tokio::test(start_paused = true)]
async fn the_owner_sees_its_descendants_usage_restarts_and_a_refusal() {
    let script = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn("mid", "m").usage(Usage::tokens(1, 1)),
                Turn::calls([Call::ask_owner("may I?")]),
                Turn::answer("refused, so done"),
            ]),
        )
        .script(
            "mid",
            Script::new([Turn::spawn("leaf", "l"), Turn::answer("m")]),
        )
        .script(
            "leaf",
            Script::new([Turn::answer("l").usage(Usage::tokens(7, 3))]),
        );
    let log = script.call_log();
    let catalog = catalog([
        delegator("lead", &["mid"]),
        delegator("mid", &["leaf"]),
        leaf("leaf"),
    ]);
    let (tree, mut owner) = OwnerProbe::build(Tree::builder().catalog(catalog).model(script))
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
async fn a_question_passed_over_is_refused_and_restarts_are_messages() {
    let script = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::fail("crash"),
            Turn::calls([Call::ask_owner("still there?")]),
            Turn::answer("carried on"),
        ]),
    );
    let log = script.call_log();
    let catalog = catalog([leaf("w").with_restart(RestartPolicy::Transient)]);
    let (tree, mut owner) = OwnerProbe::build(Tree::builder().catalog(catalog).model(script))
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
#[should_panic(
    expected = "owner probe of a1: expected a question as the next message; seen 1 message:\n  usage 12 tokens from a1"
)]
async fn a_failed_owner_expectation_lists_what_came() {
    let script = ScriptedModel::new().script(
        "w",
        Script::new([Turn::answer("done").usage(Usage::tokens(10, 2))]),
    );
    let (tree, mut owner) =
        OwnerProbe::build(Tree::builder().catalog(catalog([leaf("w")])).model(script))
            .await
            .unwrap();
    owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    owner.expect_question().await;
}

#[tokio::test(start_paused = true)]
async fn probe_children_fail_hang_and_ask_their_owner() {
    let script = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::calls([
                Call::spawn_background("checker", "one"),
                Call::spawn_background("checker", "two"),
            ]),
            // The wait ends with the second child's question: answer it by steering.
            Turn::calls([Call::wait([Target::Spawned(1)], WaitPolicy::AllSettled)]),
            Turn::calls([Call::steer(Target::Spawned(1), "use the logs")]),
            Turn::calls([Call::result(Target::Spawned(1))]),
            Turn::answer("lead done"),
        ]),
    );
    let (model, mut checkers) = probe_children(script, ["checker"]);
    let catalog = catalog([delegator("lead", &["checker"]), leaf("checker")]);
    let (tree, mut owner) = OwnerProbe::build(Tree::builder().catalog(catalog).model(model))
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a probed child to start, got a2 (checker) run 1 turn 2")]
async fn expect_spawn_refuses_a_later_turn() {
    let script = ScriptedModel::new().script("lead", Script::new([Turn::spawn("checker", "c")]));
    let (model, mut checkers) = probe_children(script, ["checker"]);
    let catalog = catalog([delegator("lead", &["checker"]), leaf("checker")]);
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .unwrap();
    let _lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let first = checkers.expect_spawn().await;
    let call = ToolCall::new("c1", "no_such_tool", serde_json::json!({}));
    first.into_turn().call_tools(vec![call], Usage::ZERO);
    checkers.expect_spawn().await;
}

/// The guide's failure text: the story, then a second question that never comes.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "owner probe of a1: expected a question; seen 3 messages:
  usage 48 tokens from a2
  question \"publish?\"
  ended completed: claim 3 holds")]
async fn the_guides_failing_expectation() {
    let script = ScriptedModel::new().script(
        "reviewer",
        Script::new([
            Turn::spawn("evidence-checker", "check claim 3"),
            Turn::calls([Call::ask_owner("publish?")]),
            Turn::answer("claim 3 holds"),
        ]),
    );
    let (model, mut checkers) = probe_children(script, ["evidence-checker"]);
    let builder = Tree::builder().catalog(reviewer_catalog()).model(model);
    let (tree, mut owner) = OwnerProbe::build(builder).await.unwrap();
    owner
        .spawn(&tree, SpawnRequest::new("reviewer", "review"))
        .await;
    let checker = checkers.expect_spawn().await;
    checker.returns("claim 3 holds", Usage::tokens(40, 8));
    owner.expect_usage().await;
    owner.expect_question().await.answer("yes");
    owner.expect_result().await;
    owner.expect_question().await;
}
