//! Output retention, read by every reader: with outputs released to the journal once read,
//! every read (the application's, a handle's, a wait's, an owner's tools, a background
//! notice, a grandparent's) gets the exact output back, through resumes, compactions and
//! recoveries, and the event stream, the snapshot and `Tree::outcome` agree on what was
//! released (docs/semantics.md, "Output retention"). `output_retention` holds the budget
//! and age rules; `output_retention_store` what a failing store does to them.

use std::sync::Arc;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Fold, Role};
use agent_tree::testkit::{Call, EventProbe, FnModel, ScriptedModel, Target, Turn};
use agent_tree::{FnTool, JournalConfig, ModelError, ModelRequest, ModelResponse, ToolError};

use crate::journal_steps::{bounded, run_go};
use crate::support::harness::lead_and_worker;
use crate::support::journal::{TempDir, journaled_tree, journaled_tree_with_tool};
use crate::support::scripts::{background_spawns, delegates};
use crate::support::{catalog, delegator, leaf, read_result_call};

/// `tag:` followed by `bytes` bytes of report.
pub(crate) fn report(tag: &str, bytes: usize) -> String {
    format!("{tag}:{}", "r".repeat(bytes))
}

/// The tool results of `agent`'s last model call, whole conversation (every tool message).
pub(crate) fn tool_messages(model: &ScriptedModel, agent: AgentId) -> Vec<String> {
    let log = model.log_of(agent);
    let last = log.last().expect("the agent called its model");
    last.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

/// Records change only by the fold of events: folding the stream rebuilds the snapshot,
/// released outcomes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folding_the_events_rebuilds_the_snapshot_with_released_outcomes() {
    let dir = TempDir::new("retention-fold");
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([("worker", "a"), ("worker", "b")]),
                Turn::calls([Call::wait(
                    [Target::Spawned(0), Target::Spawned(1)],
                    WaitPolicy::AllSettled,
                )]),
                Turn::answer(report("lead", 100)),
            ],
        )
        .script("worker", [Turn::answer(report("w", 300))]);
    let journal = JournalConfig::new(dir.file("j")).keep_read_outputs(350);
    let tree = journaled_tree(model, lead_and_worker(), journal).await;
    let mut events = tree.subscribe();
    for _ in 0..3 {
        run_go(&tree, "lead").await;
    }
    bounded("idle", tree.idle()).await;
    // Outputs are released by the journal's writer, after it wrote them: wait for it.
    tree.flush_journal().await;
    let snapshot = tree.snapshot();
    let mut fold = Fold::new();
    let seen: Vec<Event> = events.drain();
    for event in &seen {
        fold.apply(event).unwrap();
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e.kind, EventKind::Released { .. })),
        "something was released"
    );
    let records: Vec<_> = snapshot.records.iter().map(|r| (**r).clone()).collect();
    assert_eq!(fold.records(), &records[..]);
    assert_eq!(fold.tally(), &snapshot.tally);
    bounded("shutdown", tree.shutdown()).await;
}

/// A released agent resumes on its journaled conversation (its answer in it), and its new
/// run's output is the one read back, never the earlier run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_agent_resumes_and_reads_back_its_new_run() {
    let dir = TempDir::new("retention-resume");
    let first = report("first", 500);
    let second = report("second", 700);
    let model = ScriptedModel::new().script(
        "worker",
        [Turn::answer(first.clone()), Turn::answer(second.clone())],
    );
    let log = model.clone();
    let journal = JournalConfig::new(dir.file("j"))
        .keep_read_outputs(0)
        .retain_conversations(false);
    let tree = journaled_tree(model, catalog([leaf("worker")]), journal).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    assert_eq!(
        bounded("run 1", handle.outcome()).await.text,
        Some(first.clone())
    );
    tree.flush_journal().await;
    assert!(tree.outcome(id).unwrap().released);
    let mut resumed = bounded("resume", tree.resume(id, "again")).await.unwrap();
    let outcome = bounded("run 2", resumed.outcome()).await;
    assert_eq!(outcome.text, Some(second.clone()));
    // The resumed run saw its first answer in its conversation.
    let calls = log.log_of(id);
    assert_eq!(calls.len(), 2);
    assert!(
        calls[1]
            .messages
            .iter()
            .any(|m| m.role == Role::Assistant && m.content == first),
        "the resumed conversation holds the first answer"
    );
    tree.flush_journal().await;
    assert!(tree.outcome(id).unwrap().released, "run 2 read: released");
    let back = bounded("read back", tree.read_outcome(id)).await.unwrap();
    assert_eq!(
        back.text,
        Some(second.clone()),
        "run 2's output, not run 1's"
    );
    // The old handle sees the new run too.
    let old = bounded("old handle", handle.outcome()).await;
    assert_eq!(old.text, Some(second.clone()));
    bounded("shutdown", tree.shutdown()).await;
}

/// Each read of an owner's tool carries the child's whole output to its model, in the set's
/// order, whether the output was held or released (and read back by a task): a set, a wait
/// with a timeout, and the same result twice in one turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reads_released_children_through_sets_timeouts_and_twice_in_a_turn() {
    let dir = TempDir::new("retention-sets");
    let answers: Vec<String> = (0..3).map(|i| report(&format!("w{i}"), 400)).collect();
    let get = |id: &str| read_result_call(id);
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([("w0", "go"), ("w1", "go"), ("w2", "go")]),
                // All three read (released at once: nothing is kept).
                Turn::calls([Call::tool(
                    "wait_subagents",
                    serde_json::json!({ "agent_ids": ["a2", "a3", "a4"] }),
                )]),
                // Read back: a set, a wait with a timeout, and the same result twice.
                Turn::calls([
                    Call::tool(
                        "wait_subagents",
                        serde_json::json!({ "agent_ids": ["a4", "a2", "a3"] }),
                    ),
                    Call::tool(
                        "get_subagent_result",
                        serde_json::json!({ "agent_id": "a3", "wait": true, "timeout_ms": 20_000 }),
                    ),
                    get("a2"),
                    get("a2"),
                ]),
                Turn::answer("read"),
            ],
        )
        .script("w0", [Turn::answer(answers[0].clone())])
        .script("w1", [Turn::answer(answers[1].clone())])
        .script("w2", [Turn::answer(answers[2].clone())]);
    let log = model.clone();
    let journal = JournalConfig::new(dir.file("j")).keep_read_outputs(0);
    let tree = journaled_tree(
        model,
        catalog([
            delegator("lead", &["w0", "w1", "w2"]),
            leaf("w0"),
            leaf("w1"),
            leaf("w2"),
        ]),
        journal,
    )
    .await;
    let outcome = run_go(&tree, "lead").await;
    assert_eq!(outcome.text.as_deref(), Some("read"));
    tree.flush_journal().await;
    for n in 2..5 {
        assert!(
            tree.outcome(AgentId::new(n)).unwrap().released,
            "a{n} released"
        );
    }
    let results = tool_messages(&log, AgentId::new(1));
    // 3 spawns, 1 set, then 4 reads.
    assert_eq!(results.len(), 8, "{results:?}");
    let set = |text: &str| -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        value["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["text"].as_str().unwrap_or("<no text>").to_owned())
            .collect()
    };
    assert_eq!(set(&results[3]), answers, "the first set");
    assert_eq!(
        set(&results[4]),
        [answers[2].clone(), answers[0].clone(), answers[1].clone()],
        "the set of released children, in its order"
    );
    let text = |text: &str| -> String {
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        value["text"].as_str().unwrap_or("<no text>").to_owned()
    };
    assert_eq!(text(&results[5]), answers[1], "the wait with a timeout");
    assert_eq!(text(&results[6]), answers[0], "the first of two reads");
    assert_eq!(text(&results[7]), answers[0], "the second of two reads");
    bounded("shutdown", tree.shutdown()).await;
}

/// A background child's end notice carries its whole output (a read); a later
/// `get_subagent_result` reads it back whole once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_childs_notice_and_later_result_carry_its_whole_output() {
    let dir = TempDir::new("retention-notice");
    let answer = report("bg", 600);
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let gate = FnTool::new("gate", "waits for the worker", move |_, _| {
        let mut done = done_rx.clone();
        async move {
            let _ = done.wait_for(|&d| d).await;
            Ok::<_, ToolError>("open".to_owned())
        }
    });
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn_background("worker", "go"),
                Turn::calls([Call::tool("gate", serde_json::json!({}))]),
                Turn::calls([Call::tool("gate", serde_json::json!({}))]),
                Turn::calls([read_result_call("a2")]),
                Turn::answer("done"),
            ],
        )
        .script("worker", [Turn::answer(answer.clone())]);
    let log = model.clone();
    let journal = JournalConfig::new(dir.file("j")).keep_read_outputs(0);
    let tree = journaled_tree_with_tool(model, lead_and_worker(), gate, journal).await;
    let mut probe = EventProbe::new(&tree);
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    // The gates open once the worker's output is released: it is released once read, and
    // the end notice the lead took in is that read, so the notice is in the lead's
    // conversation at its next turn and the read back comes after it. (Its terminal event
    // precedes the notice: on two worker threads, gating on it let the lead reach its read
    // before the notice.)
    bounded(
        "the worker's release",
        probe.expect_event("a2 released", |e| {
            e.agent == AgentId::new(2) && matches!(e.kind, EventKind::Released { .. })
        }),
    )
    .await;
    done_tx.send_replace(true);
    let outcome = bounded("the lead", lead.outcome()).await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("done"),
        "{outcome:?}\n{:#?}",
        log.log_of(AgentId::new(1))
            .iter()
            .map(|c| (
                c.turn,
                c.messages
                    .iter()
                    .map(|m| (m.role, m.content.chars().take(90).collect::<String>()))
                    .collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>()
    );
    let last = log.log_of(AgentId::new(1)).pop().unwrap();
    let notice = last
        .messages
        .iter()
        .find(|m| m.role == Role::User && m.content.contains("subagent_ended"))
        .expect("the end was noticed");
    assert!(notice.content.contains(&answer), "the notice is whole");
    tree.flush_journal().await;
    assert!(tree.outcome(AgentId::new(2)).unwrap().released);
    let results = tool_messages(&log, AgentId::new(1));
    let read = results.last().unwrap();
    assert!(
        read.contains(&answer),
        "the result is read back whole: {read}"
    );
    bounded("shutdown", tree.shutdown()).await;
}

/// With the descendants scope, a grandparent reading a grandchild's released result gets it
/// back whole, by `get_subagent_result` and by a set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandparent_reads_a_released_grandchild_back() {
    let dir = TempDir::new("retention-descendants");
    let answer = report("grandchild", 900);
    let model = ScriptedModel::new()
        .script(
            "top",
            [
                Turn::spawn("mid", "delegate"),
                Turn::calls([
                    read_result_call("a3"),
                    Call::tool(
                        "wait_subagents",
                        serde_json::json!({ "agent_ids": ["a2", "a3"] }),
                    ),
                ]),
                Turn::answer("top done"),
            ],
        )
        .script("mid", delegates("leafy", "work", "mid done"))
        .script("leafy", [Turn::answer(answer.clone())]);
    let log = model.clone();
    let tree = Tree::builder()
        .config(TreeConfig::default().with_control_scope(agent_tree::ControlScope::Descendants))
        .model(model)
        .catalog(catalog([
            delegator("top", &["mid"]),
            delegator("mid", &["leafy"]),
            leaf("leafy"),
        ]))
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(0))
        .build()
        .await
        .unwrap();
    let outcome = run_go(&tree, "top").await;
    assert_eq!(outcome.text.as_deref(), Some("top done"));
    tree.flush_journal().await;
    assert!(
        tree.outcome(AgentId::new(3)).unwrap().released,
        "mid read it"
    );
    let results = tool_messages(&log, AgentId::new(1));
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[1].contains(&answer),
        "get_subagent_result: {}",
        results[1]
    );
    assert!(results[2].contains(&answer), "the set: {}", results[2]);
    assert!(results[2].contains("mid done"), "the set: {}", results[2]);
    bounded("shutdown", tree.shutdown()).await;
}
/// A worker that says something and calls a tool that never answers: aborted, it keeps
/// what it said as partial output.
fn talker() -> FnModel {
    FnModel::new(move |request: ModelRequest| {
        let turn = request.turn;
        Box::pin(async move {
            if turn == 1 {
                let mut response = ModelResponse::calls(vec![agent_tree::protocol::ToolCall::new(
                    "c1",
                    "hang",
                    serde_json::json!({}),
                )]);
                response.text = report("half", 800);
                Ok(response)
            } else {
                Err(ModelError::new("second turn failed"))
            }
        })
    })
}

/// An aborted agent's partial output is released like a text and read back whole; a failed
/// agent's error stays in memory (the record keeps status, reason and error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_output_is_released_and_read_back_and_an_error_stays() {
    let dir = TempDir::new("retention-partial");
    let (called_tx, mut called_rx) = tokio::sync::watch::channel(false);
    let hang = FnTool::new("hang", "never answers", move |_, _| {
        called_tx.send_replace(true);
        async {
            std::future::pending::<()>().await;
            Ok::<_, ToolError>(String::new())
        }
    });
    let journal = JournalConfig::new(dir.file("j")).keep_read_outputs(0);
    let tree = journaled_tree_with_tool(talker(), catalog([leaf("worker")]), hang, journal).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    bounded("the tool call", called_rx.wait_for(|&c| c))
        .await
        .unwrap();
    tree.abort(id).unwrap();
    let outcome = bounded("the abort", handle.outcome()).await;
    assert_eq!(outcome.status, AgentStatus::Aborted);
    assert_eq!(outcome.partial, Some(report("half", 800)), "{outcome:?}");
    tree.flush_journal().await;
    let held = tree.outcome(id).unwrap();
    assert!(held.released && held.partial.is_none(), "{held:?}");
    assert_eq!(held.status, AgentStatus::Aborted);
    let back = bounded("read back", tree.read_outcome(id)).await.unwrap();
    assert_eq!(back, outcome, "read back exactly");
    bounded("shutdown", tree.shutdown()).await;
}

/// Releases, a recovery, more work (with compactions between releases and reads, and a
/// resume of a released agent), a second recovery: every output reads back exactly, and
/// released ones stay released across both recoveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_survive_two_recoveries_with_compactions_and_resumes_between() {
    let dir = TempDir::new("retention-twice");
    let path = dir.file("j");
    let config = || {
        JournalConfig::new(&path)
            .keep_read_outputs(0)
            .rotate_at(24 * 1024)
    };
    /// What a worker `a<n>` answers in its run `run`.
    fn answer(n: u64, run: u32) -> String {
        report(&format!("a{n}-run{run}"), 2500)
    }
    /// Runs six workers one after another, each answering its first run, and notes what
    /// each answered in `expected`.
    async fn run_six_workers(tree: &Tree, expected: &mut Vec<(u64, String)>) {
        for _ in 0..6 {
            let outcome = run_go(tree, "worker").await;
            let id = snapshot_last(tree);
            assert_eq!(outcome.text, Some(answer(id, 1)));
            expected.push((id, answer(id, 1)));
        }
    }
    /// Asserts every output in `expected` reads back whole from `tree`; `when` names the
    /// phase.
    async fn assert_reads_back(tree: &Tree, expected: &[(u64, String)], when: &str) {
        for (n, text) in expected {
            let back = bounded("read back", tree.read_outcome(AgentId::new(*n)))
                .await
                .unwrap();
            assert_eq!(back.text.as_ref(), Some(text), "a{n} {when}");
        }
    }
    // Each worker answers with its id and run, so a wrong line shows.
    fn by_id() -> FnModel {
        FnModel::new(move |request: ModelRequest| {
            let run = request
                .messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count() as u32
                + 1;
            let text = report(&format!("{}-run{run}", request.agent), 2500);
            Box::pin(async move { Ok(ModelResponse::text(text)) })
        })
    }
    let build = || async { journaled_tree(by_id(), catalog([leaf("worker")]), config()).await };
    let mut expected: Vec<(u64, String)> = Vec::new();
    let check = |tree: &Tree, expected: &[(u64, String)], when: &str| {
        let snapshot = tree.snapshot();
        for (n, _) in expected {
            let outcome = snapshot
                .record(AgentId::new(*n))
                .unwrap()
                .outcome
                .clone()
                .unwrap();
            assert!(outcome.released, "a{n} released {when}");
        }
    };
    // Phase 1.
    let tree = build().await;
    run_six_workers(&tree, &mut expected).await;
    tree.flush_journal().await;
    check(&tree, &expected, "in phase 1");
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // Phase 2: recovered; more work; resume two released agents.
    let tree = build().await;
    check(&tree, &expected, "after recovery 1");
    assert_reads_back(&tree, &expected, "after recovery 1").await;
    run_six_workers(&tree, &mut expected).await;
    for n in [1u64, 3] {
        let mut resumed = bounded("resume", tree.resume(AgentId::new(n), "again"))
            .await
            .unwrap();
        let outcome = bounded("resumed", resumed.outcome()).await;
        assert_eq!(outcome.text, Some(answer(n, 2)), "a{n} resumed");
        for entry in expected.iter_mut().filter(|(m, _)| *m == n) {
            entry.1 = answer(n, 2);
        }
    }
    tree.flush_journal().await;
    check(&tree, &expected, "in phase 2");
    assert_reads_back(&tree, &expected, "in phase 2").await;
    bounded("flush", tree.flush_journal()).await;
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // Phase 3: recovered again.
    let tree = build().await;
    check(&tree, &expected, "after recovery 2");
    assert_reads_back(&tree, &expected, "after recovery 2").await;
    bounded("shutdown", tree.shutdown()).await;
}
/// The child a lead's first tool result names.
fn child_of(request: &ModelRequest) -> String {
    let first = request
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("the spawn's result");
    let value: serde_json::Value = serde_json::from_str(&first.content).unwrap();
    value["agent_id"].as_str().unwrap().to_owned()
}

/// The highest agent id in the tree's snapshot.
fn snapshot_last(tree: &Tree) -> u64 {
    tree.snapshot().agents().map(|r| r.id.get()).max().unwrap()
}

/// With `keep_read_outputs(0)` and readers of every kind at once (handles, waits,
/// `read_outcome`, `outcome`, owners' tools) on two worker threads, every read that returns
/// a whole output returns the exact one, `Tree::outcome` is either whole or marked released,
/// and at the end every output is released and reads back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_with_nothing_kept_always_get_the_exact_output() {
    for iteration in 0..30 {
        let dir = TempDir::new("retention-race");
        fn echo() -> FnModel {
            FnModel::new(move |request: ModelRequest| {
                let response = match (request.agent_type(), request.turn) {
                    ("lead", 1) => ModelResponse::calls(vec![agent_tree::protocol::ToolCall::new(
                        "c1",
                        "Agent",
                        serde_json::json!({ "agent_type": "worker", "prompt": "x" }),
                    )]),
                    ("lead", 2) => {
                        // Read the child again: released by the first read.
                        let child = child_of(&request);
                        ModelResponse::calls(vec![
                            agent_tree::protocol::ToolCall::new(
                                "c2",
                                "get_subagent_result",
                                serde_json::json!({ "agent_id": child }),
                            ),
                            agent_tree::protocol::ToolCall::new(
                                "c3",
                                "wait_subagents",
                                serde_json::json!({ "agent_ids": [child] }),
                            ),
                        ])
                    }
                    ("lead", _) => {
                        let child = child_of(&request);
                        let ok = request
                            .messages
                            .iter()
                            .filter(|m| m.role == Role::Tool)
                            .all(|m| m.content.contains(&format!("{child}:")));
                        ModelResponse::text(format!("{}:{ok}", request.agent))
                    }
                    _ => ModelResponse::text(format!("{}:{}", request.agent, "x".repeat(300))),
                };
                Box::pin(async move { Ok(response) })
            })
        }
        let tree = Arc::new(
            journaled_tree(
                echo(),
                lead_and_worker(),
                JournalConfig::new(dir.file("j")).keep_read_outputs(0),
            )
            .await,
        );
        let expected = |id: AgentId| format!("{id}:{}", "x".repeat(300));
        // Workers read by the application, leads whose tools read their workers.
        let mut workers = Vec::new();
        for _ in 0..4 {
            workers.push(tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap());
        }
        let mut leads = Vec::new();
        for _ in 0..3 {
            leads.push(tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap());
        }
        let mut tasks = tokio::task::JoinSet::new();
        for handle in &workers {
            let id = handle.id();
            let mut mine = handle.clone();
            tasks.spawn(async move {
                let outcome = mine.outcome().await;
                assert_eq!(outcome.text, Some(expected(id)), "handle of {id}");
            });
            let tree = tree.clone();
            tasks.spawn(async move {
                let outcome = tree.wait(&[id], WaitPolicy::AllSettled).await;
                assert_eq!(outcome[0].text, Some(expected(id)), "wait of {id}");
                for _ in 0..3 {
                    let back = tree.read_outcome(id).await.unwrap();
                    assert_eq!(back.text, Some(expected(id)), "read_outcome of {id}");
                    let held = tree.outcome(id).unwrap();
                    assert!(
                        held.released || held.text == Some(expected(id)),
                        "outcome of {id}: {held:?}"
                    );
                }
            });
        }
        for handle in &leads {
            let mut mine = handle.clone();
            let id = handle.id();
            tasks.spawn(async move {
                let outcome = mine.outcome().await;
                assert_eq!(
                    outcome.text,
                    Some(format!("{id}:true")),
                    "every read of the lead's worker was whole"
                );
            });
        }
        while let Some(joined) = bounded("the readers", tasks.join_next()).await {
            if let Err(error) = joined {
                panic!("iteration {iteration}: {error}");
            }
        }
        bounded("idle", tree.idle()).await;
        tree.flush_journal().await;
        let snapshot = tree.snapshot();
        for record in snapshot.agents() {
            let outcome = record.outcome.clone().unwrap();
            assert!(
                outcome.released,
                "iteration {iteration}: {} read but held",
                record.id
            );
            let back = bounded("read back", tree.read_outcome(record.id))
                .await
                .unwrap();
            assert!(
                back.text
                    .as_deref()
                    .is_some_and(|t| t.starts_with(&format!("{}:", record.id))),
                "iteration {iteration}: {} read back {back:?}",
                record.id
            );
        }
        let tree = Arc::try_unwrap(tree).expect("no other holder");
        bounded("shutdown", tree.shutdown()).await;
    }
}

/// The `released` event's `bytes` are the output's (text plus partial), it is emitted once,
/// and `Tree::outcome` and the snapshot agree once the release happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_released_event_counts_the_output_and_outcome_agrees_with_the_snapshot() {
    let dir = TempDir::new("retention-bytes");
    let text = report("é", 1234);
    let model = ScriptedModel::new().script("worker", [Turn::answer(text.clone())]);
    let journal = JournalConfig::new(dir.file("j")).keep_read_outputs(0);
    let tree = journaled_tree(model, catalog([leaf("worker")]), journal).await;
    let mut probe = EventProbe::new(&tree);
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    assert_eq!(
        bounded("outcome", handle.outcome()).await.text,
        Some(text.clone())
    );
    let event = bounded("released", async {
        probe
            .expect_event("released", |e| matches!(e.kind, EventKind::Released { .. }))
            .await
    })
    .await;
    assert_eq!(
        (event.agent, event.kind.clone()),
        (
            id,
            EventKind::Released {
                bytes: text.len() as u64
            }
        )
    );
    let held = tree.outcome(id).unwrap();
    let in_snapshot = tree.snapshot().record(id).unwrap().outcome.clone().unwrap();
    assert_eq!(held, in_snapshot);
    assert!(held.released && held.text.is_none());
    assert_eq!(tree.snapshot().tally.released, 1, "released once");
    // Reading again releases nothing more.
    bounded("read back", tree.read_outcome(id)).await.unwrap();
    bounded("handle", handle.outcome()).await;
    assert_eq!(tree.snapshot().tally.released, 1, "still released once");
    bounded("shutdown", tree.shutdown()).await;
}
