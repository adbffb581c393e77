//! Probe children (`testkit::probe_children`): a probed child's prompt, its start, retry
//! and restart as the probe hands them over, and what its owner reads of it.

use agent_tree::prelude::*;
use agent_tree::protocol::{Strategy, ToolCall};
use agent_tree::testkit::{self, Call, ScriptedModel, Target, pair, probe_children};

use crate::research_team::{agent_call, team};
use crate::small_catalogs::{tool_json, triage_catalog};
use crate::support::harness::{contents, owned_tree};
use crate::support::scripts::delegates;
use crate::support::{build_tree, catalog, delegator, leaf, spawn_admitted};

/// Rule (children.rs, `SpawnedChild::prompt`): "The task it was given". A child with
/// `inherit_context` starts with its owner's conversation (agent.rs: context, then the
/// prompt), and `prompt()` still returns the child's own task, not the owner's.
#[tokio::test(start_paused = true)]
async fn a_probe_childs_prompt_is_its_own_task_when_it_inherits_context() {
    let lead =
        ScriptedModel::new().script("lead", delegates("checker", "the child's task", "done"));
    let (model, mut checkers) = probe_children(lead, ["checker"]);
    let catalog = catalog([
        delegator("lead", &["checker"]),
        leaf("checker").with_inherit_context(true),
    ]);
    let tree = build_tree(catalog, model).await;
    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "the lead's task")).await;
    let checker = checkers.expect_spawn().await;
    let prompt = checker.prompt().to_owned();
    checker.returns("ok", Usage::ZERO);
    assert_eq!(lead.outcome().await.text.as_deref(), Some("done"));
    assert_eq!(prompt, "the child's task");
}

/// Rule (`ChildProbe::expect_spawn`): "The next probed call, which must be a child's first
/// turn of a run (a new child, or a restarted one)". A transient failure of a child's first
/// turn is retried by the tree under the same run and turn number; `expect_spawn` refuses
/// that retry rather than handing it over as if the child had started again, so a test can
/// tell a retry from a restart or a second child.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a probed child to start")]
async fn expect_spawn_refuses_a_retry_of_the_same_turn() {
    let lead = ScriptedModel::new().script("lead", delegates("checker", "c", "done"));
    let (model, mut checkers) = probe_children(lead, ["checker"]);
    let catalog = catalog([delegator("lead", &["checker"]), leaf("checker")]);
    let tree = build_tree(catalog, model).await;
    let _lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let first = checkers.expect_spawn().await;
    let id = first.id();
    first.fails(ModelError::transient("connection reset"));
    // Not a start: the same child, run 1, turn 1, attempt 2.
    let retry = checkers.expect_spawn().await;
    let same = (retry.id(), retry.incarnation()) == (id, 1);
    retry.returns("ok", Usage::ZERO);
    assert!(!same, "unreachable when expect_spawn refuses a retry");
}

/// A probed temporary child that fails is not restarted: its owner's `Agent` call reads the
/// failure's text, the owner completes on its next turn, and the child's record says failed.
#[tokio::test(start_paused = true)]
async fn a_failing_searcher_is_an_error_result_for_the_lead() {
    let script = ScriptedModel::new().script(
        "lead",
        delegates(
            "searcher",
            "find papers on X",
            "no sources: the search failed",
        ),
    );
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) = owned_tree(team("temporary"), model).await;
    let lead = owner.spawn(&tree, SpawnRequest::new("lead", "X?")).await;

    let searcher = children.expect_spawn().await;
    let searcher_id = searcher.id();
    searcher.fails(ModelError::new("search index down"));

    let outcome = owner.expect_result().await;
    assert_eq!(outcome.status, AgentStatus::Completed);
    assert_eq!(
        outcome.text.as_deref(),
        Some("no sources: the search failed")
    );
    // A temporary child is not restarted.
    children.expect_no_spawn();

    let second = &lead_log.of(lead)[1];
    let (call, result) = &second.answered_calls()[0];
    assert_eq!(call.name, "Agent");
    assert!(
        result.content.contains("search index down"),
        "{}",
        result.content
    );
    assert_eq!(
        tree.record(searcher_id).unwrap().status,
        AgentStatus::Failed
    );
    println!(
        "the lead saw: {} (is_error: {})",
        result.content, result.is_error
    );
    tree.shutdown().await;
}

/// A transient searcher whose first run fails is restarted by the lead, and the lead's
/// foreground `Agent` call gets the second run's result.
#[tokio::test(start_paused = true)]
async fn a_transient_searcher_is_restarted_under_the_probe() {
    let script =
        ScriptedModel::new().script("lead", delegates("searcher", "find papers on X", "done"));
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher"]);
    let (tree, mut owner) = owned_tree(team("transient"), model).await;
    let lead = owner.spawn(&tree, SpawnRequest::new("lead", "X?")).await;

    let first = children.expect_spawn().await;
    let id = first.id();
    first.fails(ModelError::new("crash"));
    let second = children.expect_spawn().await;
    assert_eq!((second.id(), second.incarnation()), (id, 2));
    assert_eq!(second.prompt(), "find papers on X");
    second.returns("A, B", Usage::tokens(4, 1));

    assert_eq!(owner.expect_usage().await, (id, Usage::tokens(4, 1)));
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("done"));
    let (_, result) = &lead_log.of(lead)[1].answered_calls()[0];
    assert!(result.content.contains("A, B"), "{}", result.content);
    tree.shutdown().await;
}

/// A transient error at a probed child's first turn is retried: the retry is a turn, not a
/// spawn (`expect_spawn` would refuse it).
#[tokio::test(start_paused = true)]
async fn a_transient_child_error_is_retried_as_a_turn_not_a_spawn() {
    let script = ScriptedModel::new().script("lead", delegates("searcher", "find X", "led"));
    let (model, mut children) = probe_children(script, ["searcher"]);
    let tree = build_tree(team("temporary"), model).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let first = children.expect_spawn().await;
    let id = first.id();
    first.fails(ModelError::transient("connection reset"));
    let retry = children.expect_turn().await;
    assert_eq!(
        (retry.agent(), retry.incarnation(), retry.turn()),
        (id, 1, 1)
    );
    retry.answer_text("found", Usage::tokens(1, 1));
    assert_eq!(lead.outcome().await.text.as_deref(), Some("led"));
    assert_eq!(children.log().count_of(id), 2);
    tree.shutdown().await;
}

/// A probed child asks its driven owner: the owner's model reads the question as a notice
/// naming the tool to answer with (`steer_subagent`); the foreground `Agent` call had
/// already returned `"status":"asking"`; the steer reaches the child as its next message,
/// and the owner reads the child's result with `get_subagent_result`.
#[tokio::test(start_paused = true)]
async fn a_probed_childs_question_reaches_a_driven_owner_who_answers_by_a_steer() {
    // The lead driven by the test, its children probed.
    let (driven, mut calls) = pair();
    let (model, mut children) = probe_children(driven, ["searcher"]);
    let tree = build_tree(team("temporary"), model).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    calls
        .expect_turn_of(lead.id())
        .await
        .call_tools(vec![agent_call("c1", "searcher", "find X")], Usage::ZERO);
    children
        .expect_spawn()
        .await
        .asks("which years?", Usage::tokens(1, 1));
    // The lead's model reads the question as a notice, which names the tool to answer with.
    let turn = calls.expect_turn_of(lead.id()).await;
    let notice: serde_json::Value =
        serde_json::from_str(&turn.last_message().unwrap().content).unwrap();
    assert_eq!(notice["notice"], "question");
    assert_eq!(notice["question"], "which years?");
    assert_eq!(notice["answer_with"], "steer_subagent");
    let child = notice["agent_id"].as_str().unwrap().to_owned();
    turn.call_tools(
        vec![ToolCall::new(
            "c2",
            "steer_subagent",
            serde_json::json!({"agent_id": child, "message": "2020 onwards"}),
        )],
        Usage::ZERO,
    );
    let next = children.expect_turn().await;
    assert_eq!(next.last_message().unwrap().content, "2020 onwards");
    next.answer_text("B, C", Usage::tokens(2, 1));
    // The foreground `Agent` call had already returned `"status":"asking"` when the child
    // asked; the lead's third turn is the steer's receipt, and it reads the result itself.
    let turn = calls.expect_turn_of(lead.id()).await;
    assert!(turn.last_message().unwrap().content.contains("delivered"));
    let asking = turn
        .messages()
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c1"))
        .unwrap();
    assert!(
        asking.content.contains("\"status\":\"asking\""),
        "{}",
        asking.content
    );
    turn.call_tools(
        vec![ToolCall::new(
            "c3",
            "get_subagent_result",
            serde_json::json!({"agent_id": child, "wait": true}),
        )],
        Usage::ZERO,
    );
    let turn = calls.expect_turn_of(lead.id()).await;
    assert!(turn.last_message().unwrap().content.contains("B, C"));
    turn.answer_text("done", Usage::ZERO);
    assert_eq!(lead.outcome().await.text.as_deref(), Some("done"));
    tree.shutdown().await;
}

/// A probed child that fails restarts under its owner's one_for_one; the probe sees
/// its restarted first turn through `expect_spawn` (incarnation 2), with the same prompt.
#[tokio::test(start_paused = true)]
async fn a_probed_child_that_fails_restarts_and_expect_spawn_hands_over_its_new_run() {
    let lead = ScriptedModel::new().script("triage", delegates("tech", "fix login", "fixed"));
    let (model, mut techs) = testkit::probe_children(lead, ["tech"]);
    let catalog = catalog([
        AgentDefinition::new("triage", "")
            .with_allowed_subagents(SubagentAllowance::only(["tech"]))
            .with_supervision(Strategy::OneForOne, 3, 5_000),
        AgentDefinition::new("tech", "").with_restart(RestartPolicy::Transient),
    ]);
    let tree = build_tree(catalog, model).await;
    let mut triage = spawn_admitted(&tree, SpawnRequest::new("triage", "ticket")).await;
    let first = techs.expect_spawn().await;
    assert_eq!((first.incarnation(), first.run()), (1, 1));
    first.fails(ModelError::new("segfault"));
    let second = techs.expect_spawn().await;
    assert_eq!((second.incarnation(), second.run()), (2, 2));
    assert_eq!(second.prompt(), "fix login");
    second.returns("driver updated", Usage::tokens(3, 1));
    let outcome = triage.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("fixed"));
    tree.shutdown().await;
}

/// Docs/testing.md: "a foreground `Agent` call returns `{"status": "asking", ...}`"
/// when a probe child asks; the owner's steer is the answer; the owner reads the result
/// later with `get_subagent_result`.
#[tokio::test(start_paused = true)]
async fn a_probed_childs_question_is_an_asking_result_of_a_foreground_agent_call() {
    let (owner_model, mut owner_calls) = testkit::pair();
    let (model, mut techs) = testkit::probe_children(owner_model, ["tech"]);
    let tree = build_tree(triage_catalog(), model).await;
    let mut triage = spawn_admitted(&tree, SpawnRequest::new("triage", "ticket")).await;
    owner_calls
        .expect_turn_of(triage.id())
        .await
        .calls([Call::spawn("tech", "crash on login")], Usage::tokens(5, 1));
    let tech = techs.expect_spawn().await;
    let tech_id = tech.id();
    tech.asks("which OS?", Usage::tokens(2, 1));

    let t2 = owner_calls.expect_turn_of(triage.id()).await;
    // The Agent call's result is the tool message; a question notice follows it (the
    // model reads the question twice).
    let result = t2
        .messages()
        .iter()
        .rfind(|m| m.role == agent_tree::protocol::Role::Tool)
        .unwrap();
    let result = tool_json(&result.content);
    assert_eq!(result["status"], "asking", "{result}");
    assert_eq!(result["question"], "which OS?", "{result}");
    t2.calls(
        [Call::steer(Target::Spawned(0), "linux")],
        Usage::tokens(5, 1),
    );

    let tech2 = techs.expect_turn().await;
    assert_eq!(tech2.agent(), tech_id);
    assert!(tech2.last_message().unwrap().content.contains("linux"));
    tech2.answer_text("reinstall the driver", Usage::tokens(2, 1));

    let t3 = owner_calls.expect_turn_of(triage.id()).await;
    t3.calls([Call::result(Target::Spawned(0))], Usage::tokens(5, 1));
    let t4 = owner_calls.expect_turn_of(triage.id()).await;
    let all = contents(t4.messages()).join("\n");
    assert!(all.contains("reinstall the driver"), "{all}");
    t4.answer_text("done", Usage::ZERO);
    assert_eq!(triage.outcome().await.text.as_deref(), Some("done"));
    tree.shutdown().await;
}
