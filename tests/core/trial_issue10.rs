//! Trial of the test kit by a first-time user: a small research team (a `lead` that
//! delegates to a `searcher` and a `summarizer`), loaded from Claude Code style agent files,
//! tested at the message level.
//!
//! No test here is marked `DEFECT`: every behaviour tried matched the guide and the
//! rustdoc of `agent_tree::testkit`. The `should_panic` tests hold the kit's failure texts.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agent_tree::protocol::{AgentStatus, EventKind, Role, SpawnRequest, ToolCall, Usage};
use agent_tree::testkit::{
    Call, CallEnd, EventProbe, FaultyModel, OwnerProbe, Script, ScriptedModel, Turn, experiment,
    hanging_hook, kill_when, pair, probe_children,
};
use agent_tree::{BoxFuture, Catalog, ModelError, Tree};

// ---------------------------------------------------------------------------------------
// The team, as agent files.

const LEAD: &str = "\
---
name: lead
description: Leads a research task.
allowed_subagents: [searcher, summarizer]
strategy: one_for_one
max_restarts: 2
restart_period_ms: 5000
---
You lead research. Delegate searching to `searcher` and summarizing to `summarizer`.
";

const SUMMARIZER: &str = "\
---
name: summarizer
description: Summarizes sources.
---
You summarize what you are given in three sentences.
";

fn searcher(restart: &str) -> String {
    format!(
        "---\nname: searcher\ndescription: Finds sources.\nrestart: {restart}\n---\nYou find sources.\n"
    )
}

static DIRS: AtomicU32 = AtomicU32::new(0);

/// The team's catalog, loaded from a fresh directory of agent files.
fn team(searcher_restart: &str) -> Catalog {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "trial10-team-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lead.md"), LEAD).unwrap();
    std::fs::write(dir.join("searcher.md"), searcher(searcher_restart)).unwrap();
    std::fs::write(dir.join("summarizer.md"), SUMMARIZER).unwrap();
    std::fs::write(dir.join("README.md"), "# the research team\n").unwrap();
    let loaded = Catalog::load_dir(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert_eq!(loaded.catalog.len(), 3);
    loaded.catalog
}

fn agent_call(id: &str, agent_type: &str, prompt: &str) -> ToolCall {
    ToolCall::new(
        id,
        "Agent",
        serde_json::json!({"agent_type": agent_type, "prompt": prompt}),
    )
}

// ---------------------------------------------------------------------------------------
// The lead in isolation, its model driven by the test.

#[tokio::test(start_paused = true)]
async fn lead_delegates_search_then_summary() {
    let (model, mut calls) = pair();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut lead = tree
        .spawn(SpawnRequest::new("lead", "what is known about X?"))
        .await
        .unwrap();

    let turn = calls.expect_turn_of(lead.id()).await;
    assert_eq!(
        (turn.agent_type(), turn.depth(), turn.turn()),
        ("lead", 1, 1)
    );
    assert!(
        turn.tool_names().contains(&"Agent"),
        "{:?}",
        turn.tool_names()
    );
    // Nobody answers a top-level agent's questions here: no `ask_owner`.
    assert!(
        !turn.tool_names().contains(&"ask_owner"),
        "{:?}",
        turn.tool_names()
    );
    assert_eq!(
        turn.request().definition.prompt.lines().next(),
        Some(
            "You lead research. Delegate searching to `searcher` and summarizing to `summarizer`."
        )
    );
    turn.call_tools(
        vec![agent_call("c1", "searcher", "find papers on X")],
        Usage::tokens(100, 20),
    );

    let search = calls.expect_turn().await;
    assert_eq!((search.agent_type(), search.depth()), ("searcher", 2));
    assert_eq!(search.last_message().unwrap().content, "find papers on X");
    // A leaf: it is offered no orchestration tool.
    assert!(!search.tool_names().contains(&"Agent"));
    search.answer_text("3 papers: A, B, C", Usage::tokens(40, 10));

    let turn = calls.expect_turn_of(lead.id()).await;
    assert_eq!(turn.turn(), 2);
    let result = turn.last_message().unwrap();
    assert_eq!(result.role, Role::Tool);
    assert!(
        result.content.contains("3 papers: A, B, C"),
        "{}",
        result.content
    );
    turn.call_tools(
        vec![agent_call("c2", "summarizer", "summarize A, B, C")],
        Usage::tokens(150, 15),
    );

    let summary = calls.expect_turn().await;
    assert_eq!(summary.agent_type(), "summarizer");
    summary.answer_text("X is well studied", Usage::tokens(30, 5));

    let turn = calls.expect_turn_of(lead.id()).await;
    assert!(
        turn.last_message()
            .unwrap()
            .content
            .contains("X is well studied")
    );
    turn.answer_text("report: X is well studied", Usage::tokens(60, 6));

    let outcome = lead.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Completed);
    assert_eq!(outcome.text.as_deref(), Some("report: X is well studied"));
    let record = tree.record(lead.id()).unwrap();
    assert_eq!(record.subtree, Usage::tokens(380, 56));
    calls.expect_no_turn();
    assert_eq!(calls.log().len(), 5);
    tree.shutdown().await;
}

/// Both sub-agents at once: two foreground `Agent` calls in one turn run concurrently, so
/// the test takes their turns in whatever order they come.
#[tokio::test(start_paused = true)]
async fn lead_delegates_to_both_at_once() {
    let (model, mut calls) = pair();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();

    calls.expect_turn_of(lead.id()).await.call_tools(
        vec![
            agent_call("c1", "searcher", "find X"),
            agent_call("c2", "summarizer", "summarize what is known of X"),
        ],
        Usage::tokens(10, 1),
    );
    let mut seen = Vec::new();
    for _ in 0..2 {
        let child = calls.expect_turn().await;
        seen.push(child.agent_type().to_owned());
        let text = format!("{} done", child.agent_type());
        child.answer_text(text, Usage::tokens(1, 1));
    }
    seen.sort();
    assert_eq!(seen, ["searcher", "summarizer"]);

    let turn = calls.expect_turn_of(lead.id()).await;
    // Both results come back, one tool message per call.
    let results: Vec<_> = turn
        .messages()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().any(|m| m.tool_call_id.as_deref() == Some("c1") && m.content.contains("searcher done")));
    assert!(
        results
            .iter()
            .any(|m| m.tool_call_id.as_deref() == Some("c2")
                && m.content.contains("summarizer done"))
    );
    turn.answer_text("both", Usage::ZERO);
    assert_eq!(lead.outcome().await.text.as_deref(), Some("both"));
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// The lead between an owner probe and probe children.

fn lead_script() -> ScriptedModel {
    ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("searcher", "find papers on X").usage(Usage::tokens(100, 20)),
            Turn::calls([Call::ask_owner("only papers after 2020?")]).usage(Usage::tokens(10, 2)),
            Turn::spawn("summarizer", "summarize the recent ones").usage(Usage::tokens(50, 5)),
            Turn::answer("report: X is well studied").usage(Usage::tokens(20, 4)),
        ]),
    )
}

#[tokio::test(start_paused = true)]
async fn lead_passes_usage_up_and_asks_its_owner() {
    let script = lead_script();
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) =
        OwnerProbe::build(Tree::builder().catalog(team("temporary")).model(model))
            .await
            .unwrap();
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

#[tokio::test(start_paused = true)]
async fn a_failing_searcher_is_an_error_result_for_the_lead() {
    let script = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("searcher", "find papers on X"),
            Turn::answer("no sources: the search failed"),
        ]),
    );
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) =
        OwnerProbe::build(Tree::builder().catalog(team("temporary")).model(model))
            .await
            .unwrap();
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
    let script = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("searcher", "find papers on X"),
            Turn::answer("done"),
        ]),
    );
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher"]);
    let (tree, mut owner) =
        OwnerProbe::build(Tree::builder().catalog(team("transient")).model(model))
            .await
            .unwrap();
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

// ---------------------------------------------------------------------------------------
// Supervision: a flaky searcher (FaultyModel).

fn team_script() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn("searcher", "find X"), Turn::answer("led")]),
        )
        .script(
            "searcher",
            Script::new([Turn::answer("found").usage(Usage::tokens(5, 1))]),
        )
}

/// Every run of the searcher fails: two restarts (the lead's intensity), then the lead
/// escalates.
#[tokio::test(start_paused = true)]
async fn a_searcher_that_always_fails_escalates() {
    let model = FaultyModel::new(team_script())
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("searcher");
    let tree = Tree::builder()
        .catalog(team("transient"))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let restarts = events
        .receive_n(2, "a restart", |e| {
            matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    assert!(restarts.iter().all(|e| e.depth == 2));
    let outcome = events.expect_terminated(lead.id()).await;
    assert_eq!(outcome.status, AgentStatus::Failed);
    assert_eq!(outcome.reason.as_str(), "escalated");
    tree.shutdown().await;
}

/// A searcher that fails with probability 0.5 (seed 3): it is restarted at least once and
/// the lead still completes with the answer.
#[tokio::test(start_paused = true)]
async fn a_flaky_searcher_recovers() {
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn("searcher", "find X"), Turn::answer("led")]),
        )
        // Each run walks on through the script (the cursor survives restarts): enough turns.
        .script(
            "searcher",
            Script::new([
                Turn::answer("found"),
                Turn::answer("found"),
                Turn::answer("found"),
            ]),
        );
    let log = scripted.call_log();
    let seed = SEED;
    let model = FaultyModel::new(scripted)
        .fail_with_probability(0.5, seed, ModelError::new("flaky"))
        .only_for("searcher");
    let tree = Tree::builder()
        .catalog(team("transient"))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let outcome = events.expect_terminated(lead.id()).await;
    let restarts = events
        .seen()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Restarted { .. }))
        .count();
    println!(
        "seed {seed}: {restarts} restarts, lead {:?}, {} calls",
        outcome.status,
        log.len()
    );
    assert!(restarts >= 1);
    assert_eq!(outcome.text.as_deref(), Some("led"));
    tree.shutdown().await;
}

const SEED: u64 = 3;

// ---------------------------------------------------------------------------------------
// A kill at a chosen moment.

/// The doc's recipe: kill the searcher as its first turn's usage is billed. It is
/// transient, so it restarts; its second run answers and the lead reads that answer.
#[tokio::test(start_paused = true)]
async fn kill_the_searcher_as_its_first_usage_is_billed() {
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn("searcher", "find X"), Turn::answer("led")]),
        )
        .script(
            "searcher",
            Script::new([
                // An unknown tool: an error result, and the searcher would take a second turn.
                Turn::calls([Call::tool("web_search", serde_json::json!({"q": "X"}))])
                    .usage(Usage::tokens(5, 1)),
                Turn::answer("found after the restart"),
            ]),
        );
    let log = scripted.call_log();
    let tree = Tree::builder()
        .catalog(team("transient"))
        .model(scripted)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let mut switch = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::UsageReported { .. } if e.depth == 2).then_some(e.agent)
    });
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();

    let (killed, result) = switch.fired().await.expect("the switch fires");
    assert_eq!(result, Ok(()));
    let restarted = events
        .expect_event("the searcher's restart", |e| {
            matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    assert_eq!(restarted.agent, killed);

    let outcome = lead.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("led"));
    let searcher_calls = log.of(killed);
    // Run 1 made exactly one model call: the kill came before its second turn.
    assert_eq!(
        searcher_calls.iter().filter(|c| c.incarnation == 1).count(),
        1,
        "{searcher_calls:#?}"
    );
    let second_run: Vec<_> = searcher_calls
        .iter()
        .filter(|c| c.incarnation == 2)
        .collect();
    assert_eq!(second_run.len(), 1);
    assert_eq!(second_run[0].end, CallEnd::Returned);
    let (_, result) = &log.of(lead.id())[1].answered_calls()[0];
    assert!(
        result.content.contains("found after the restart"),
        "{}",
        result.content
    );
    assert_eq!(tree.record(killed).unwrap().subtree, Usage::tokens(5, 1));
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// A shutdown deadline.

#[tokio::test(start_paused = true)]
async fn shutdown_cuts_a_hanging_hook_off_at_one_deadline() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn_background("searcher", "find X"), Turn::hang()]),
        )
        .script("searcher", Script::new([Turn::hang()]));
    let log = model.call_log();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .on_shutdown(hanging_hook())
        .build()
        .await
        .unwrap();
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    // Both are in their hanging turn.
    log.until("both hang", |calls| calls.len() == 3).await;
    let searcher = log
        .calls()
        .iter()
        .find(|c| c.agent_type == "searcher")
        .unwrap()
        .agent;

    let started = tokio::time::Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    println!("{report:?}");
    assert!(report.killed.contains(&lead.id()), "{report:?}");
    assert!(report.killed.contains(&searcher), "{report:?}");
    // ONE deadline for the whole subtree, not one per level.
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let ends: Vec<_> = log
        .calls()
        .iter()
        .map(|c| (c.agent_type.clone(), c.turn, c.end))
        .collect();
    assert_eq!(
        ends,
        [
            ("lead".to_owned(), 1, CallEnd::Returned),
            ("lead".to_owned(), 2, CallEnd::Dropped),
            ("searcher".to_owned(), 1, CallEnd::Dropped),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// A small experiment: the searcher's failure rate against the lead's intensity of 2.

fn setup(p: f64) -> impl Fn(u64) -> BoxFuture<'static, (Tree, SpawnRequest)> + Copy {
    move |seed: u64| -> BoxFuture<'static, (Tree, SpawnRequest)> {
        Box::pin(async move {
            let scripted = ScriptedModel::new()
                .script(
                    "lead",
                    Script::new([Turn::spawn("searcher", "find X"), Turn::answer("led")]),
                )
                .script(
                    "searcher",
                    Script::new((0..4).map(|_| Turn::answer("found").usage(Usage::tokens(5, 1)))),
                );
            let model = FaultyModel::new(scripted)
                .fail_with_probability(p, seed, ModelError::new("flaky"))
                .only_for("searcher");
            let tree = Tree::builder()
                .catalog(team("transient"))
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("lead", "X?"))
        })
    }
}

#[test]
fn failure_rate_sweep() {
    let mut escalated = Vec::new();
    for p in [0.0, 0.4, 0.9] {
        let rows = experiment::run_trials(12, 1, setup(p));
        assert_eq!(rows.len(), 12);
        assert_eq!(
            rows,
            experiment::run_trials(12, 1, setup(p)),
            "same seeds, same rows"
        );
        print!("p = {p}\n{}", experiment::to_csv(&rows));
        let n = rows
            .iter()
            .filter(|r| r.status == AgentStatus::Failed)
            .count();
        if p == 0.0 {
            assert!(
                rows.iter()
                    .all(|r| r.restarts == 0 && r.status == AgentStatus::Completed)
            );
            assert!(rows.iter().all(|r| r.tokens == 6), "{rows:?}");
        }
        for r in &rows {
            if r.status == AgentStatus::Failed {
                assert_eq!(r.escalations, 1, "{r:?}");
                assert_eq!(r.reason.as_ref().map(|r| r.as_str()), Some("escalated"));
            }
        }
        escalated.push(n);
    }
    assert!(
        escalated[0] <= escalated[1] && escalated[1] <= escalated[2],
        "{escalated:?}"
    );
    assert!(escalated[2] > 0);
}

// ---------------------------------------------------------------------------------------
// Failure messages and less-travelled paths.

#[tokio::test(start_paused = true)]
async fn a_searcher_asks_the_lead() {
    // The lead driven by the test, its children probed.
    let (driven, mut calls) = pair();
    let (model, mut children) = probe_children(driven, ["searcher"]);
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
async fn a_transient_lead_restarts_under_its_owner_probe() {
    use agent_tree::protocol::{AgentDefinition, RestartPolicy, SubagentAllowance};
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["searcher"]))
            .with_restart(RestartPolicy::Transient),
        AgentDefinition::new("searcher", ""),
    ])
    .unwrap();
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([Turn::fail("crash"), Turn::answer("second run")]),
    );
    let (tree, mut owner) = OwnerProbe::build(Tree::builder().catalog(catalog).model(model))
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a question")]
async fn owner_probe_failure_lists_what_came() {
    let script = lead_script();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) =
        OwnerProbe::build(Tree::builder().catalog(team("temporary")).model(model))
            .await
            .unwrap();
    owner.spawn(&tree, SpawnRequest::new("lead", "X?")).await;
    children
        .expect_spawn()
        .await
        .returns("A", Usage::tokens(1, 1));
    // Skipping the lead's first usage: the next message is usage, not a question.
    let _ = owner.expect_question().await;
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "searcher")]
async fn a_dropped_turn_fails_the_test() {
    let (model, mut calls) = pair();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    calls
        .expect_turn_of(lead.id())
        .await
        .call_tools(vec![agent_call("c1", "searcher", "find X")], Usage::ZERO);
    let searcher = calls.expect_turn().await;
    drop(searcher);
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "searcher")]
async fn a_turn_never_taken_fails_the_test() {
    let (model, mut calls) = pair();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    calls
        .expect_turn_of(lead.id())
        .await
        .call_tools(vec![agent_call("c1", "searcher", "find X")], Usage::ZERO);
    tokio::time::sleep(Duration::from_millis(1)).await;
    drop(calls);
}

/// `run_trials` builds its own runtime per trial, so it cannot be called from a
/// `#[tokio::test]` (documented: "Call it from synchronous code").
#[tokio::test(start_paused = true)]
#[should_panic(expected = "Cannot start a runtime from within a runtime")]
async fn run_trials_refuses_an_async_caller() {
    let rows = experiment::run_trials(2, 1, setup(0.0));
    assert_eq!(rows.len(), 2);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a model call of a1, got a2 (searcher) run 1 turn 1")]
async fn expect_turn_of_names_the_other_caller() {
    let (model, mut calls) = pair();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    calls
        .expect_turn_of(lead.id())
        .await
        .call_tools(vec![agent_call("c1", "searcher", "find X")], Usage::ZERO);
    let _ = calls.expect_turn_of(lead.id()).await;
}

/// The guide's own owner-probe story, expecting a second question after the result.
#[tokio::test(start_paused = true)]
#[should_panic(
    expected = "owner probe of a1: expected a question; seen 3 messages:\n  usage 48 tokens from a2\n  question \"publish?\"\n  ended completed: claim 3 holds"
)]
async fn the_guides_owner_failure_text() {
    use agent_tree::protocol::{AgentDefinition, SubagentAllowance};
    let catalog = Catalog::new([
        AgentDefinition::new("reviewer", "")
            .with_allowed_subagents(SubagentAllowance::only(["evidence-checker"])),
        AgentDefinition::new("evidence-checker", ""),
    ])
    .unwrap();
    let script = ScriptedModel::new().script(
        "reviewer",
        Script::new([
            Turn::spawn("evidence-checker", "check claim 3"),
            Turn::calls([Call::ask_owner("publish?")]),
            Turn::answer("claim 3 holds"),
        ]),
    );
    let (model, mut checkers) = probe_children(script, ["evidence-checker"]);
    let (tree, mut owner) = OwnerProbe::build(Tree::builder().catalog(catalog).model(model))
        .await
        .unwrap();
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

/// A transient error at a probed child's first turn is retried: the retry is a turn, not a
/// spawn (`expect_spawn` would refuse it).
#[tokio::test(start_paused = true)]
async fn a_transient_child_error_is_retried() {
    let script = ScriptedModel::new().script(
        "lead",
        Script::new([Turn::spawn("searcher", "find X"), Turn::answer("led")]),
    );
    let (model, mut children) = probe_children(script, ["searcher"]);
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
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

/// `fail_at_turn` with a transient error fails every attempt at the turn.
#[tokio::test(start_paused = true)]
async fn fail_at_turn_fails_every_retry() {
    let scripted = team_script();
    let log = scripted.call_log();
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::transient("connection reset"))
        .only_for("searcher");
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let outcome = events.expect_terminated(lead.id()).await;
    assert_eq!(outcome.text.as_deref(), Some("led"));
    let searcher = events.seen().iter().find(|e| e.depth == 2).unwrap().agent;
    let record = tree.record(searcher).unwrap();
    assert_eq!(record.status, AgentStatus::Failed);
    // The scripted model never saw a searcher call: every attempt failed in the wrapper.
    assert_eq!(log.count_of(searcher), 0);
    tree.shutdown().await;
}

/// A question the owner probe fishes past is refused: the lead's model reads an error.
#[tokio::test(start_paused = true)]
async fn a_question_fished_past_is_refused() {
    let script = lead_script();
    let lead_log = script.call_log();
    let (model, mut children) = probe_children(script, ["searcher", "summarizer"]);
    let (tree, mut owner) =
        OwnerProbe::build(Tree::builder().catalog(team("temporary")).model(model))
            .await
            .unwrap();
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

/// "Dropping it disarms it."
#[tokio::test(start_paused = true)]
async fn a_dropped_kill_switch_is_disarmed() {
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(team_script())
        .build()
        .await
        .unwrap();
    let switch = kill_when(&tree, |e| (e.depth == 2).then_some(e.agent));
    drop(switch);
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    assert_eq!(lead.outcome().await.status, AgentStatus::Completed);
    tree.shutdown().await;
}
