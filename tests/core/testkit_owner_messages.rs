//! The owner probe's messages: it hands over only its own agent's questions, and usage,
//! questions, ends and restarts reach it once each, in the order of the events, promptly
//! even when the asker was killed, on a paused clock and on worker threads.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{
    self, Call, OwnerMessage, ScriptedModel, Turn, kill_when, probe_children,
};

use crate::research_team::team;
use crate::support::harness::owned_tree;
use crate::support::{catalog, delegator, leaf, spawn_admitted};

/// Rule (owner probe, module docs): the probe is "the owner of one agent under test" and
/// answers *its* questions; an [`OwnerQuestion`](agent_tree::testkit::OwnerQuestion) is the
/// question the `asked` event announced. `OwnerProbe::build` installs the probe as the
/// tree's only question handler, so every top-level agent's question reaches it; with a
/// bystander top-level agent that asked first, the probe still hands over the question of
/// the agent under test (its text, and answering it answers that agent), never the
/// bystander's.
#[tokio::test(start_paused = true)]
async fn the_owner_probe_hands_over_only_its_own_agents_questions() {
    let script = ScriptedModel::new()
        .script(
            "bystander",
            [
                Turn::calls([Call::ask_owner("bystander: lunch?")]),
                Turn::answer("b"),
            ],
        )
        .script(
            "w",
            [
                Turn::calls([Call::ask_owner("w: tabs or spaces?")]),
                Turn::answer("w done"),
            ],
        );
    let catalog = catalog([leaf("bystander"), leaf("w")]);
    let (tree, mut owner) = owned_tree(catalog, script).await;
    let _bystander = spawn_admitted(&tree, SpawnRequest::new("bystander", "idle")).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let w = owner.spawn(&tree, SpawnRequest::new("w", "format")).await;
    let question = owner.expect_question().await;
    assert_eq!(
        (question.agent(), question.text()),
        (w, "w: tabs or spaces?"),
        "the probe handed over another agent's question as its agent's"
    );
}

/// A scenario: the agent under test asks its owner and is killed (by `kill_when`, at its
/// `asked` event) before its question can be answered. Returns the virtual time
/// `expect_question` took.
async fn question_of_a_killed_asker() -> Duration {
    let script = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::ask_owner("still there?")]),
            Turn::answer("never"),
        ],
    );
    let (tree, mut owner) = owned_tree(catalog([leaf("w")]), script).await;
    let mut switch = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::Asked { .. }).then_some(e.agent)
    });
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    assert_eq!(
        switch.fired().await.map(|(a, r)| (a, r.is_ok())),
        Some((w, true))
    );
    let started = tokio::time::Instant::now();
    let question = owner.expect_question().await;
    let took = started.elapsed();
    assert_eq!(question.text(), "still there?");
    drop(question);
    assert_eq!(owner.expect_result().await.status, AgentStatus::Killed);
    took
}

/// A question whose asker was killed at once still reaches the owner probe promptly
/// (the tree's handler closure is called even for a settled asker, so the probe never waits
/// out `EXPECT_WITHIN` on its question channel), then the kill.
#[tokio::test(start_paused = true)]
async fn a_question_whose_asker_was_killed_reaches_the_probe_promptly() {
    let took = question_of_a_killed_asker().await;
    assert!(
        took < Duration::from_secs(60),
        "expect_question took {took:?}"
    );
}

/// The same on two worker threads and a real clock, 20 times, each bounded by 10 s.
#[test]
fn a_question_whose_asker_was_killed_reaches_the_probe_on_worker_threads() {
    for _ in 0..20 {
        let runtime = crate::support::races::runtime_on(2);
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), question_of_a_killed_asker())
                .await
                .expect("the question and the kill reach the probe");
        });
        runtime.shutdown_background();
    }
}

/// A lifecycle scenario for the owner probe: the agent under test spawns a child (billed up
/// the edge), asks, is answered, crashes, is restarted, asks again (refused) and completes.
/// Returns what the probe saw.
async fn restart_and_questions_story() -> Vec<String> {
    let script = ScriptedModel::new()
        .script(
            "w",
            [
                Turn::spawn("leaf", "l").usage(Usage::tokens(1, 1)),
                Turn::calls([Call::ask_owner("first?")]),
                Turn::fail("crash"),
                Turn::calls([Call::ask_owner("second?")]).usage(Usage::tokens(2, 0)),
                Turn::answer("done"),
            ],
        )
        .script("leaf", [Turn::answer("l").usage(Usage::tokens(3, 0))]);
    let catalog = catalog([
        delegator("w", &["leaf"]).with_restart(RestartPolicy::Transient),
        leaf("leaf"),
    ]);
    let (tree, mut owner) = owned_tree(catalog, script).await;
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    assert_eq!(owner.expect_usage().await, (w, Usage::tokens(1, 1)));
    assert_eq!(owner.expect_usage().await.1, Usage::tokens(3, 0));
    owner.expect_question().await.answer("yes");
    assert_eq!(owner.expect_result().await.status, AgentStatus::Failed);
    owner
        .expect_message("the restart", |m| {
            matches!(m, OwnerMessage::Restarted { run: 2 })
        })
        .await;
    assert_eq!(owner.expect_usage().await, (w, Usage::tokens(2, 0)));
    let second = owner.expect_question().await;
    assert_eq!(second.text(), "second?");
    second.refuse("no");
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("done"));
    owner.expect_no_message(Duration::from_millis(50)).await;
    let seen = owner.seen().to_vec();
    tree.shutdown().await;
    seen
}

const STORY: [&str; 8] = [
    "usage 2 tokens from a1",
    "usage 3 tokens from a2",
    "question \"first?\"",
    "ended failed (model_error): crash",
    "restarted as run 2",
    "usage 2 tokens from a1",
    "question \"second?\"",
    "ended completed: done",
];

/// Descendants' usage, questions, an end, a restart and the final end reach the
/// owner probe once each and in the order of the events (paused clock).
#[tokio::test(start_paused = true)]
async fn the_owner_probe_sees_a_restart_story_once_each_in_event_order() {
    assert_eq!(restart_and_questions_story().await, STORY);
}

/// The same story, 20 times on two worker threads, each bounded by 10 s of real time.
#[test]
fn the_owner_probe_sees_the_restart_story_in_order_on_worker_threads() {
    for _ in 0..20 {
        let runtime = crate::support::races::runtime_on(2);
        let seen = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), restart_and_questions_story())
                .await
                .expect("the story finishes")
        });
        assert_eq!(seen, STORY);
    }
}

fn lead_script() -> ScriptedModel {
    ScriptedModel::new().script(
        "lead",
        [
            Turn::spawn("searcher", "find papers on X").usage(Usage::tokens(100, 20)),
            Turn::calls([Call::ask_owner("only papers after 2020?")]).usage(Usage::tokens(10, 2)),
            Turn::spawn("summarizer", "summarize the recent ones").usage(Usage::tokens(50, 5)),
            Turn::answer("report: X is well studied").usage(Usage::tokens(20, 4)),
        ],
    )
}

/// Under an owner probe with probed children, a lead's own usage and its children's reach
/// the owner in order (the turn that asks is billed before its question comes), the owner's
/// answer is the result of the lead's `ask_owner` call, and the lead's record bills its
/// whole subtree.
#[tokio::test(start_paused = true)]
async fn lead_passes_usage_up_and_asks_its_owner() {
    let script = lead_script();
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) = owned_tree(team("temporary"), model).await;
    let lead = owner
        .spawn(&tree, SpawnRequest::new("lead", "what is known about X?"))
        .await;

    assert_eq!(owner.expect_usage().await, (lead, Usage::tokens(100, 20)));

    let searcher = children.expect_spawn().await;
    assert_eq!(
        (
            searcher.agent_type(),
            searcher.depth(),
            searcher.incarnation()
        ),
        ("searcher", 2, 1)
    );
    assert_eq!(searcher.prompt(), "find papers on X");
    let searcher_id = searcher.id();
    searcher.returns("A (2019), B (2022), C (2023)", Usage::tokens(40, 8));
    assert_eq!(
        owner.expect_usage().await,
        (searcher_id, Usage::tokens(40, 8))
    );

    // The lead's own turn that asks is billed before the question comes.
    assert_eq!(owner.expect_usage().await, (lead, Usage::tokens(10, 2)));
    let question = owner.expect_question().await;
    assert_eq!(
        (question.text(), question.agent()),
        ("only papers after 2020?", lead)
    );
    question.answer("yes, 2020 onwards");

    let summarizer = children.expect_spawn().await;
    assert_eq!(summarizer.prompt(), "summarize the recent ones");
    let summarizer_id = summarizer.id();
    summarizer.returns("B and C agree", Usage::tokens(30, 3));
    assert_eq!(owner.expect_usage().await, (lead, Usage::tokens(50, 5)));
    assert_eq!(
        owner.expect_usage().await,
        (summarizer_id, Usage::tokens(30, 3))
    );
    assert_eq!(owner.expect_usage().await, (lead, Usage::tokens(20, 4)));
    let outcome = owner.expect_result().await;
    assert_eq!(outcome.text.as_deref(), Some("report: X is well studied"));
    owner.expect_no_message(Duration::from_secs(10)).await;

    // The lead's third turn read the owner's answer as the result of its `ask_owner` call.
    let third = &lead_log.of(lead)[2];
    let answered = third.answered_calls();
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].0.name, "ask_owner");
    assert!(
        answered[0].1.content.contains("yes, 2020 onwards"),
        "{}",
        answered[0].1.content
    );
    assert!(!answered[0].1.is_error);

    let record = tree.record(lead).unwrap();
    assert_eq!(record.subtree, Usage::tokens(250, 42));
    tree.shutdown().await;
}

/// A transient top-level agent that fails and is restarted shows its owner probe the failed
/// end, "restarted as run 2", then the second run's end, and nothing else.
#[tokio::test(start_paused = true)]
async fn a_transient_lead_restarts_under_its_owner_probe() {
    use agent_tree::protocol::{AgentDefinition, RestartPolicy, SubagentAllowance};
    let catalog = catalog([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["searcher"]))
            .with_restart(RestartPolicy::Transient),
        AgentDefinition::new("searcher", ""),
    ]);
    let model =
        ScriptedModel::new().script("lead", [Turn::fail("crash"), Turn::answer("second run")]);
    let (tree, mut owner) = owned_tree(catalog, model).await;
    owner.spawn(&tree, SpawnRequest::new("lead", "X?")).await;
    let first = owner.expect_result().await;
    assert_eq!(
        (first.status, first.error.as_deref()),
        (AgentStatus::Failed, Some("crash"))
    );
    let next = owner.expect_message("a restart", |_| true).await;
    assert_eq!(next.describe(), "restarted as run 2");
    assert_eq!(
        owner.expect_result().await.text.as_deref(),
        Some("second run")
    );
    assert_eq!(
        owner.seen(),
        [
            "ended failed (model_error): crash",
            "restarted as run 2",
            "ended completed: second run"
        ]
    );
    tree.shutdown().await;
}

/// An owner probe's expectation that meets another message (here usage, not a question)
/// fails the test, saying what it expected.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a question")]
async fn an_owner_probe_expectation_that_fails_lists_what_came() {
    let script = lead_script();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) = owned_tree(team("temporary"), model).await;
    owner.spawn(&tree, SpawnRequest::new("lead", "X?")).await;
    children
        .expect_spawn()
        .await
        .returns("A", Usage::tokens(1, 1));
    // Skipping the lead's first usage: the next message is usage, not a question.
    let _ = owner.expect_question().await;
}

/// The guide's own owner-probe story, expecting a second question after the result, fails
/// with the text the guide shows: what was expected, and every message seen.
#[tokio::test(start_paused = true)]
#[should_panic(
    expected = "owner probe of a1: expected a question; seen 3 messages:\n  usage 48 tokens from a2\n  question \"publish?\"\n  ended completed: claim 3 holds"
)]
async fn the_owner_probe_failure_text_is_the_one_the_guide_shows() {
    use agent_tree::protocol::{AgentDefinition, SubagentAllowance};
    let catalog = catalog([
        AgentDefinition::new("reviewer", "")
            .with_allowed_subagents(SubagentAllowance::only(["evidence-checker"])),
        AgentDefinition::new("evidence-checker", ""),
    ]);
    let script = ScriptedModel::new().script(
        "reviewer",
        [
            Turn::spawn("evidence-checker", "check claim 3"),
            Turn::calls([Call::ask_owner("publish?")]),
            Turn::answer("claim 3 holds"),
        ],
    );
    let (model, mut checkers) = probe_children(script, ["evidence-checker"]);
    let (tree, mut owner) = owned_tree(catalog, model).await;
    owner
        .spawn(&tree, SpawnRequest::new("reviewer", "review the report"))
        .await;
    checkers
        .expect_spawn()
        .await
        .returns("claim 3 holds", Usage::tokens(40, 8));
    owner.expect_usage().await;
    owner.expect_question().await.answer("yes");
    owner.expect_result().await;
    owner.expect_question().await;
}

/// A question the owner probe fishes past is refused: the lead's model reads an error.
#[tokio::test(start_paused = true)]
async fn a_question_fished_past_is_refused() {
    let script = lead_script();
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) = owned_tree(team("temporary"), model).await;
    let lead = owner.spawn(&tree, SpawnRequest::new("lead", "X?")).await;
    children
        .expect_spawn()
        .await
        .returns("A", Usage::tokens(1, 1));
    // Fish for the summarizer's spawn... by waiting on the probe children after skipping all.
    let summarizer = tokio::spawn(async move {
        let s = children.expect_spawn().await;
        s.returns("sum", Usage::ZERO);
        children
    });
    let outcome = owner
        .fish("the end", |m| match m {
            agent_tree::testkit::OwnerMessage::Ended(outcome) => {
                agent_tree::testkit::Fish::Catch(outcome.clone())
            }
            _ => agent_tree::testkit::Fish::Skip,
        })
        .await;
    let _children = summarizer.await.unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed);
    let (call, result) = &lead_log.of(lead)[2].answered_calls()[0];
    assert_eq!(call.name, "ask_owner");
    assert!(result.is_error, "{result:?}");
    assert!(
        result.content.contains("passed over this question"),
        "{}",
        result.content
    );
    tree.shutdown().await;
}

/// Rule (actors/src/testkit/owner.rs, `OwnerMessage::Restarted`): "The agent's supervisor
/// restarted it as run `run`" (described "restarted as run N"); docs/semantics.md: "A model
/// request's `incarnation` counts restarts only; its `run` counts restarts and resumes".
/// After run 1, a resume (run 2) that fails and is restarted is `Restarted { run: 3 }`, as
/// the model's next call says run 3.
#[tokio::test(start_paused = true)]
async fn the_owner_probes_restart_after_a_resume_names_the_run() {
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::answer("one"),
            Turn::fail("crash"),
            Turn::answer("three"),
        ],
    );
    let catalog = catalog([AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)]);
    let (tree, mut owner) = owned_tree(catalog, model.clone()).await;
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("one"));
    tree.idle().await;
    tree.resume(w, "again").await.unwrap();
    let failed = owner.expect_result().await;
    assert_eq!(failed.status, AgentStatus::Failed, "{failed:?}");
    let restarted = owner
        .expect_message("a restart", |m| {
            matches!(m, testkit::OwnerMessage::Restarted { .. })
        })
        .await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("three"));
    let runs: Vec<u32> = model.log_of(w).iter().map(|c| c.run).collect();
    assert_eq!(runs, [1, 2, 3]);
    let testkit::OwnerMessage::Restarted { run } = restarted else {
        unreachable!()
    };
    assert_eq!(
        run, 3,
        "the restarted run's number (its model calls say run 3)"
    );
    tree.shutdown().await;
}
