//! Second review of the journal's recent changes: output retention, conversations kept only
//! in the journal (the default), compaction, and recovery of the tally and the clock. Each
//! test states the rule it holds (docs/semantics.md, "Journal and recovery") and, where it
//! fails, the defect it shows.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventTally, Message, Role, ToolCall};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{
    BoxFuture, Durability, HookContext, HookError, JournalConfig, ModelRequest, ModelResponse,
    read_journal,
};
use parking_lot::Mutex;

use crate::support::journal::{TempDir, crash_copy};
use crate::support::{catalog, delegator, leaf};

/// A generous real-time bound: a hang fails the test instead of sticking the run.
const LIMIT: Duration = Duration::from_secs(30);

async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// A model whose every run takes two turns: a `noop` tool call when the conversation ends
/// in a user message, then an answer naming the agent, the run (answers in its
/// conversation + 1) and how many messages it saw: `a3-run2-m7`. A run that resumed on the
/// wrong conversation answers with the wrong run or count. `pad` bytes make outputs large.
#[derive(Clone, Default)]
struct Steps {
    pad: usize,
}

/// A tree of `worker`s driven by [`Steps`] with `pad`, holding the `noop` tool: the builder,
/// for each test's journal and hooks.
fn steps_tree(pad: usize) -> agent_tree::TreeBuilder {
    Tree::builder()
        .model(Steps { pad })
        .catalog(catalog([leaf("worker")]))
        .tool(noop())
        .unwrap()
}

impl Steps {
    fn expected(agent: u64, run: usize, pad: usize) -> String {
        format!("a{agent}-run{run}-m{}{}", 4 * run - 1, ".".repeat(pad))
    }
}

impl Model for Steps {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let messages = &request.messages;
        let last_is_user = messages.last().is_none_or(|m| m.role == Role::User);
        let response = if last_is_user {
            ModelResponse::calls(vec![ToolCall::new(
                format!("c{}", messages.len()),
                "noop",
                serde_json::json!({}),
            )])
        } else {
            let answers = messages
                .iter()
                .filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
                .count();
            ModelResponse::text(format!(
                "{}-run{}-m{}{}",
                request.agent,
                answers + 1,
                messages.len(),
                ".".repeat(self.pad)
            ))
        };
        Box::pin(async move { Ok(response) })
    }
}

/// A model that always answers `self.0`.
#[derive(Clone)]
struct Fixed(String);

impl Model for Fixed {
    fn turn(&self, _request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let text = self.0.clone();
        Box::pin(async move { Ok(ModelResponse::text(text)) })
    }
}

fn noop() -> impl agent_tree::Tool {
    FnTool::new("noop", "does nothing", |_, _| async { Ok("ok".to_owned()) })
}

fn tally_of(events: &[Event]) -> EventTally {
    let mut tally = EventTally::default();
    for event in events {
        tally.count(&event.kind);
    }
    tally
}

fn add(a: &EventTally, b: &EventTally) -> EventTally {
    // EventTally has public counters only through `count`; rebuild a sum by JSON.
    let a = serde_json::to_value(a).unwrap();
    let b = serde_json::to_value(b).unwrap();
    let mut sum = serde_json::Map::new();
    for (key, value) in a.as_object().unwrap() {
        let other = b.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
        sum.insert(key.clone(), (value.as_u64().unwrap() + other).into());
    }
    serde_json::from_value(serde_json::Value::Object(sum)).unwrap()
}

fn last_event_ms(path: &std::path::Path) -> u64 {
    read_journal(path, None).unwrap().last_ms
}

// ---------------------------------------------------------------------------------------
// 1. A resumed run killed before its first turn boundary.
// ---------------------------------------------------------------------------------------

/// Rule: "a conversation that cannot be read back makes the resume fail, never run on an
/// empty conversation"; a settled agent's conversation is kept in the journal and read back
/// when it is resumed. Whatever happens to a resumed run, the agent's earlier runs stay
/// part of its conversation.
///
/// Defect (suspected): with the default `retain_conversations(false)`, settling run 1
/// empties the in-memory cell (`registry/end.rs` `settle_run`), and `Registry::reopen`
/// clears `conversation_journaled`, handing the read-back conversation to the new run's
/// start only. The cell is written again only at the new run's first turn boundary
/// (`agent/turn.rs` `next_turn`). A run killed before that (here: during its start hook)
/// settles through `Inner::lose`, which journals no conversation, so the cell stays empty
/// and the flag stays false: the next resume runs on an empty conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_killed_before_its_first_turn_keeps_the_earlier_conversation() {
    killed_before_its_first_turn(JournalConfig::new).await;
}

/// The control: the same with conversations kept in memory passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_killed_before_its_first_turn_with_conversations_retained() {
    killed_before_its_first_turn(|path| JournalConfig::new(path).retain_conversations(true)).await;
}

/// The kill, the resumes and the journal's writer in other orders: twenty more runs.
#[test]
fn a_resumed_run_killed_before_its_first_turn_many_times_on_worker_threads() {
    crate::support::races::on_worker_threads(20, Duration::from_secs(30), || {
        killed_before_its_first_turn(JournalConfig::new)
    });
}

async fn killed_before_its_first_turn(config: fn(std::path::PathBuf) -> JournalConfig) {
    let dir = TempDir::new("review2-kill-resumed");
    let starts: Arc<Mutex<HashMap<AgentId, usize>>> = Arc::default();
    let hooked = Arc::new(tokio::sync::Notify::new());
    let (hook_starts, hook_hooked) = (starts.clone(), hooked.clone());
    let tree = steps_tree(0)
        .on_start(move |ctx: HookContext| {
            let n = {
                let mut starts = hook_starts.lock();
                let n = starts.entry(ctx.agent).or_default();
                *n += 1;
                *n
            };
            let hooked = hook_hooked.clone();
            async move {
                if n == 2 {
                    // The second run's start hook never finishes: the run is killed in it.
                    hooked.notify_one();
                    std::future::pending::<()>().await;
                }
                Ok::<(), HookError>(())
            }
        })
        .journal(config(dir.file("j")))
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    let first = bounded("run 1", handle.outcome()).await;
    assert_eq!(first.text, Some(Steps::expected(id.get(), 1, 0)));
    // Run 2: killed in its start hook, before its first turn boundary.
    let mut second = bounded("resume 2", tree.resume(id, "again")).await.unwrap();
    bounded("the hook", hooked.notified()).await;
    tree.kill(id).unwrap();
    let killed = bounded("run 2", second.outcome()).await;
    assert_eq!(killed.status, AgentStatus::Killed, "{killed:?}");
    // Run 3: continues run 1's conversation (or is refused), never an empty one.
    match bounded("resume 3", tree.resume(id, "third")).await {
        Ok(mut third) => {
            let outcome = bounded("run 3", third.outcome()).await;
            let text = outcome.text.unwrap_or_default();
            assert!(
                text.starts_with(&format!("{id}-run2-")),
                "run 3 ran on a conversation without run 1 in it: it answered {text:?} \
                 (run1 = it saw no earlier answer)"
            );
        }
        Err(error) => {
            // A refusal is acceptable: nothing ran on an empty conversation.
            eprintln!("resume 3 refused: {error}");
        }
    }
    bounded("shutdown", tree.shutdown()).await;
}

// ---------------------------------------------------------------------------------------
// 2. Conversations across runs, compactions and recoveries.
// ---------------------------------------------------------------------------------------

/// Rule: a settled agent's conversation, kept only in the journal, reads back whole on each
/// resume: across several runs (each written as a whole line then each turn's addition),
/// compactions between and within runs, and two recoveries (the replay's index of lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_read_back_across_runs_compactions_and_two_recoveries() {
    let dir = TempDir::new("review2-conversations");
    let path = dir.file("j");
    let pad = 600;
    let build = || async {
        steps_tree(pad)
            .journal(
                JournalConfig::new(&path)
                    .rotate_at(8 * 1024)
                    .keep_read_outputs(1024),
            )
            .build()
            .await
            .unwrap()
    };
    let mut runs: HashMap<u64, usize> = HashMap::new();
    let tree = build().await;
    for _ in 0..4 {
        let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
        let id = handle.id().get();
        let outcome = bounded("run 1", handle.outcome()).await;
        assert_eq!(outcome.text, Some(Steps::expected(id, 1, pad)));
        runs.insert(id, 1);
    }
    resume_all(&tree, &mut runs, pad, "in process 1").await;
    bounded("flush", tree.flush_journal()).await;
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
    // Process 2: recovered; resume every agent twice (concurrently), then recover again.
    let tree = build().await;
    for _ in 0..2 {
        resume_all(&tree, &mut runs, pad, "after recovery 1").await;
    }
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    let tree = build().await;
    resume_all(&tree, &mut runs, pad, "after recovery 2").await;
    bounded("shutdown", tree.shutdown()).await;
}

/// Resumes every agent of `runs` at once, each checking its new run's answer.
async fn resume_all(tree: &Tree, runs: &mut HashMap<u64, usize>, pad: usize, when: &str) {
    let mut ids: Vec<u64> = runs.keys().copied().collect();
    ids.sort_unstable();
    let mut futures = Vec::new();
    for id in ids {
        let run = runs[&id] + 1;
        runs.insert(id, run);
        futures.push(async move {
            let mut handle = bounded("resume", tree.resume(AgentId::new(id), "more"))
                .await
                .unwrap_or_else(|e| panic!("a{id} resume {when}: {e}"));
            let outcome = bounded("resumed run", handle.outcome()).await;
            assert_eq!(
                outcome.text,
                Some(Steps::expected(id, run, pad)),
                "a{id} run {run} {when}"
            );
        });
    }
    futures_join(futures).await;
}

async fn futures_join<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    // Poll all at once (no extra crates): a simple select-all loop.
    let mut pending: Vec<_> = set.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut left = false;
        for slot in &mut pending {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(()) => *slot = None,
                    std::task::Poll::Pending => left = true,
                }
            }
        }
        if left {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
}

/// Rule: an owner resumes its settled child (the `Agent` tool's `resume`) on the child's
/// journaled conversation, also after a recovery (the replay's index) and after a
/// compaction rewrote the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_resumes_a_journal_only_child_after_compaction_and_recovery() {
    let dir = TempDir::new("review2-owner-resume");
    let path = dir.file("j");
    let big = "x".repeat(3000);
    let lead_script = |first: bool| {
        let mut turns = Vec::new();
        if first {
            turns.push(Turn::spawn("worker", "dig"));
        } else {
            turns.push(Turn::calls([Call::tool(
                "Agent",
                serde_json::json!({"resume": "a2", "prompt": "dig more"}),
            )]));
        }
        turns.push(Turn::answer("lead done"));
        Script::new(turns)
    };
    let model1 = ScriptedModel::new()
        .script("lead", lead_script(true))
        .script("worker", Script::new([Turn::answer(format!("w1 {big}"))]));
    let config = || JournalConfig::new(&path).rotate_at(4 * 1024);
    let tree = Tree::builder()
        .model(model1)
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .journal(config())
        .build()
        .await
        .unwrap();
    let lead = bounded("lead", tree.run(SpawnRequest::new("lead", "go")))
        .await
        .unwrap();
    assert_eq!(lead.text.as_deref(), Some("lead done"));
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // Process 2: the lead resumes (its conversation is journal-only too) and resumes a2.
    let model2 = ScriptedModel::new()
        .script("lead", lead_script(false))
        .script("worker", Script::new([Turn::answer("w2")]));
    let log = model2.call_log();
    let tree = Tree::builder()
        .model(model2)
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .journal(config())
        .build()
        .await
        .unwrap();
    let mut handle = bounded("resume lead", tree.resume(AgentId::new(1), "again"))
        .await
        .unwrap();
    let outcome = bounded("lead run 2", handle.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    let worker = log.of(AgentId::new(2));
    assert_eq!(worker.len(), 1, "the worker ran once in process 2");
    let contents: Vec<&str> = worker[0]
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(
        contents,
        ["dig", &format!("w1 {big}"), "dig more"],
        "the worker resumed on its journaled conversation"
    );
    let lead_calls = log.of(AgentId::new(1));
    assert!(
        lead_calls[0].messages.iter().any(|m| m.content == "go"),
        "the lead resumed on its journaled conversation: {:?}",
        lead_calls[0].messages
    );
    bounded("shutdown", tree.shutdown()).await;
}

/// Rule: a child restarted by its supervisor (transient, run 1 failed) and then settled is
/// resumed by its owner on its last run's conversation (run 2's), read back from the
/// journal: not run 1's, not a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_then_settled_child_resumes_on_its_last_runs_conversation() {
    let dir = TempDir::new("review2-restarted");
    // The worker fails its first run (a model error), is restarted, answers, and is
    // resumed by the lead.
    struct Worker {
        calls: AtomicUsize,
        seen: Arc<Mutex<Vec<Vec<Message>>>>,
    }
    impl Model for Worker {
        fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
            if request.agent_type() == "lead" {
                let tools = request
                    .messages
                    .iter()
                    .filter(|m| m.role == Role::Tool)
                    .count();
                let response = match tools {
                    0 => ModelResponse::calls(vec![ToolCall::new(
                        "s1",
                        "Agent",
                        serde_json::json!({"agent_type": "worker", "prompt": "dig"}),
                    )]),
                    1 => ModelResponse::calls(vec![ToolCall::new(
                        "s2",
                        "Agent",
                        serde_json::json!({"resume": "a2", "prompt": "more"}),
                    )]),
                    _ => ModelResponse::text("lead done"),
                };
                return Box::pin(async move { Ok(response) });
            }
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen.lock().push(request.messages.to_vec());
            Box::pin(async move {
                match n {
                    0 => Err(ModelError::new("boom")),
                    1 => Ok(ModelResponse::text("second run answer")),
                    _ => Ok(ModelResponse::text("resumed answer")),
                }
            })
        }
    }
    let seen: Arc<Mutex<Vec<Vec<Message>>>> = Arc::default();
    let tree = Tree::builder()
        .model(Worker {
            calls: AtomicUsize::new(0),
            seen: seen.clone(),
        })
        .catalog(catalog([
            delegator("lead", &["worker"]),
            leaf("worker").with_restart(RestartPolicy::Transient),
        ]))
        .journal(JournalConfig::new(dir.file("j")))
        .build()
        .await
        .unwrap();
    let outcome = bounded("lead", tree.run(SpawnRequest::new("lead", "go")))
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let contents: Vec<&str> = seen[2].iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["dig", "second run answer", "more"]);
    bounded("shutdown", tree.shutdown()).await;
}

// ---------------------------------------------------------------------------------------
// 3. The tally and the clock after recoveries and compactions.
// ---------------------------------------------------------------------------------------

/// Rule: "recovery rebuilds ... the event tally"; the tally covers the tree's whole life:
/// after two recoveries and compactions, `snapshot.tally` equals the count of every event
/// the trees ever emitted (each tree's subscriber from its build, plus the events recovery
/// emitted before anyone could subscribe: the root's `resumed` and `started`), and the
/// journal's own replay agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tally_is_the_count_of_every_event_across_two_recoveries_and_compactions() {
    let dir = TempDir::new("review2-tally");
    let path = dir.file("j");
    let build = || async {
        steps_tree(400)
            .journal(
                JournalConfig::new(&path)
                    .rotate_at(6 * 1024)
                    .keep_read_outputs(500),
            )
            .build()
            .await
            .unwrap()
    };
    let mut total = EventTally::default();
    for process in 0..3 {
        let tree = build().await;
        let start = tree.snapshot().tally;
        if process == 0 {
            assert_eq!(
                start.total(),
                0,
                "a new tree has counted nothing: {start:?}"
            );
        } else {
            // Recovery of a shut-down tree: the root's resumed and started only.
            assert_eq!(
                start.total(),
                total.total() + 2,
                "process {process}: the recovered tally goes on from the journal's \
                 ({start:?} vs {total:?})"
            );
        }
        total = start.clone();
        let mut events = tree.subscribe();
        for _ in 0..3 {
            bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
                .await
                .unwrap();
        }
        let first = AgentId::new(1);
        let mut resumed = bounded("resume", tree.resume(first, "again"))
            .await
            .unwrap();
        bounded("resumed", resumed.outcome()).await;
        bounded("flush", tree.flush_journal()).await;
        let now = tree.snapshot().tally;
        let seen = tally_of(&events.drain());
        assert_eq!(
            now,
            add(&total, &seen),
            "process {process}: the tally is what it started with plus every event since"
        );
        let replayed = read_journal(&path, None).unwrap();
        assert_eq!(
            replayed.tally, now,
            "process {process}: the journal's count equals the tree's"
        );
        bounded("shutdown", tree.shutdown()).await;
        let after = tree.snapshot().tally;
        let seen = tally_of(&events.drain());
        assert_eq!(
            after,
            add(&now, &seen),
            "process {process}: shutdown's events"
        );
        assert_eq!(read_journal(&path, None).unwrap().tally, after);
        total = after;
        drop(tree);
    }
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
}

/// Rule: "its clock goes on from the journal's last event, so every `*_ms` after recovery
/// is later than every one before", and `Tree::epoch` is "the instant every `*_ms` field
/// of records and events counts from": on a paused clock, after two recoveries (one from a
/// compacted file), new events are not earlier than any before, and `epoch + taken_ms` is
/// now.
#[tokio::test(start_paused = true)]
async fn the_clock_goes_on_across_recoveries_on_a_paused_clock_and_epoch_agrees() {
    let dir = TempDir::new("review2-clock");
    let path = dir.file("j");
    let model = || Fixed("a".repeat(3000));
    let build = || async {
        Tree::builder()
            .model(model())
            .catalog(catalog([leaf("worker")]))
            .journal(JournalConfig::new(&path).rotate_at(4 * 1024))
            .build()
            .await
            .unwrap()
    };
    let mut last = 0;
    for process in 0..3 {
        let tree = build().await;
        let snapshot = tree.snapshot();
        let max_before = snapshot
            .agents()
            .flat_map(|r| [Some(r.created_ms), r.ended_ms])
            .flatten()
            .max()
            .unwrap_or(0);
        assert!(
            snapshot.taken_ms >= max_before && snapshot.taken_ms >= last,
            "process {process}: the clock starts at {} before {max_before}/{last}",
            snapshot.taken_ms
        );
        let now = tokio::time::Instant::now();
        let epoch_now = tree.epoch() + Duration::from_millis(tree.snapshot().taken_ms);
        assert!(
            epoch_now <= now && now - epoch_now < Duration::from_millis(2),
            "process {process}: epoch + taken_ms is not now"
        );
        let mut events = tree.subscribe();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
        }
        tree.flush_journal().await;
        for event in events.drain() {
            assert!(
                event.at_ms >= max_before,
                "process {process}: event {} at {} ms, before {max_before} ms of an earlier \
                 process",
                event.seq,
                event.at_ms
            );
        }
        tree.shutdown().await;
        last = last_event_ms(&path);
        drop(tree);
    }
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
}

// ---------------------------------------------------------------------------------------
// 4. Retention with every policy, torn tails, and concurrency.
// ---------------------------------------------------------------------------------------

/// Rule: with `Durability::EveryEntry` too, read outputs are released once the journal has
/// written them (at the latest at `Tree::flush_journal`) and read back exactly, by the
/// application and by an owner's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_durability_releases_and_reads_back() {
    let dir = TempDir::new("review2-every-entry");
    let answer = |i: usize| format!("w{i}:{}", "e".repeat(700));
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn("worker", "one"),
                Turn::calls([Call::tool(
                    "get_subagent_result",
                    serde_json::json!({ "agent_id": "a2" }),
                )]),
                Turn::answer("lead done"),
            ]),
        )
        .script("worker", Script::new([Turn::answer(answer(2))]));
    let log = model.call_log();
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .journal(
            JournalConfig::new(dir.file("j"))
                .durability(Durability::EveryEntry)
                .keep_read_outputs(0),
        )
        .build()
        .await
        .unwrap();
    let outcome = bounded("lead", tree.run(SpawnRequest::new("lead", "go")))
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("lead done"));
    bounded("flush", tree.flush_journal()).await;
    let snapshot = tree.snapshot();
    for id in [1u64, 2] {
        let held = snapshot
            .record(AgentId::new(id))
            .unwrap()
            .outcome
            .clone()
            .unwrap();
        assert!(held.released, "a{id} released: {held:?}");
    }
    let calls = log.of(AgentId::new(1));
    let second = &calls[2].results[0].content;
    assert!(
        second.contains(&answer(2)),
        "the owner's re-read is whole: {second}"
    );
    let back = bounded("read", tree.read_outcome(AgentId::new(2)))
        .await
        .unwrap();
    assert_eq!(back.text, Some(answer(2)));
    bounded("shutdown", tree.shutdown()).await;
}

/// Rule: outputs whose lines the previous process wrote are read back exactly after a
/// recovery that cut a torn tail off the file (the replay's index of outputs), and the new
/// process's own lines (appended after the cut) read back too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_of_the_previous_process_read_back_after_a_torn_tail_was_cut() {
    let dir = TempDir::new("review2-torn");
    let live = dir.file("live");
    let crashed = dir.file("crashed");
    let answer = |n: u64| format!("a{n}:{}", "t".repeat(900));
    struct ById;
    impl Model for ById {
        fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
            let text = format!("{}:{}", request.agent, "t".repeat(900));
            Box::pin(async move { Ok(ModelResponse::text(text)) })
        }
    }
    let build = |path: std::path::PathBuf| async move {
        Tree::builder()
            .model(ById)
            .catalog(catalog([leaf("worker")]))
            .journal(JournalConfig::new(path).keep_read_outputs(0))
            .build()
            .await
            .unwrap()
    };
    let tree = build(live.clone()).await;
    for _ in 0..3 {
        bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
            .await
            .unwrap();
    }
    // Released, some before the crash, one left read only in memory... all flushed.
    crash_copy(&tree, &live, &crashed).await;
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // A write cut off by the crash.
    let mut bytes = std::fs::read(&crashed).unwrap();
    bytes.extend_from_slice(b"0badc0de {\"entry\":\"event\",\"event\":{\"seq\":");
    std::fs::write(&crashed, &bytes).unwrap();
    let tree = build(crashed.clone()).await;
    for n in 1..=3u64 {
        let back = bounded("read back", tree.read_outcome(AgentId::new(n)))
            .await
            .unwrap();
        assert_eq!(back.text, Some(answer(n)), "a{n} after the cut");
    }
    for _ in 0..2 {
        bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
            .await
            .unwrap();
    }
    bounded("flush", tree.flush_journal()).await;
    for n in 1..=5u64 {
        assert!(
            tree.outcome(AgentId::new(n)).unwrap().released,
            "a{n} released"
        );
        let back = bounded("read back", tree.read_outcome(AgentId::new(n)))
            .await
            .unwrap();
        assert_eq!(back.text, Some(answer(n)), "a{n} in process 2");
    }
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // And the file as process 2 left it recovers whole.
    let replay = read_journal(&crashed, None).unwrap();
    assert_eq!(replay.torn, None);
    assert_eq!(replay.outcomes().filter(|(id, _)| !id.is_root()).count(), 5);
}

/// A store that takes its time for each append: the writer is behind.
#[derive(Clone, Default)]
struct Slow {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl Slow {
    fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(3));
        self.bytes.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn replace(&self, bytes: &[u8]) -> std::io::Result<()> {
        *self.bytes.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.bytes.lock().clone())
    }
}

impl agent_tree::JournalStore for Slow {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        Slow::append(self, bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        *self.bytes.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.bytes.lock().clone())
    }
}

/// Rule: many resumes and reads at once on two worker threads, with a writer that is
/// behind (a slow store, a small queue: backpressure) and compactions: each resumed run
/// continues its own whole conversation, and every read returns the exact output of the
/// run it reads. Twenty iterations, to catch ordering races.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resumes_and_reads_behind_a_slow_writer() {
    for iteration in 0..20 {
        let pad = 200;
        let tree = Arc::new(
            steps_tree(pad)
                .journal_store(
                    JournalConfig::new("memory")
                        .max_queue(4)
                        .keep_read_outputs(0)
                        .rotate_at(16 * 1024),
                    Slow::default(),
                )
                .build()
                .await
                .unwrap(),
        );
        let mut ids = Vec::new();
        for _ in 0..3 {
            let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
            bounded("run 1", handle.outcome()).await;
            ids.push(handle.id());
        }
        let mut tasks = Vec::new();
        for &id in &ids {
            let resumer = tree.clone();
            tasks.push(tokio::spawn(async move {
                let tree = resumer;
                for run in 2..=4 {
                    let mut handle = bounded("resume", tree.resume(id, "more"))
                        .await
                        .unwrap_or_else(|e| panic!("iteration {iteration}: {id} resume: {e}"));
                    let outcome = bounded("resumed", handle.outcome()).await;
                    assert_eq!(
                        outcome.text,
                        Some(Steps::expected(id.get(), run, pad)),
                        "iteration {iteration}: {id} run {run}"
                    );
                    let back = bounded("read", tree.read_outcome(id)).await.unwrap();
                    assert_eq!(
                        back.text,
                        Some(Steps::expected(id.get(), run, pad)),
                        "iteration {iteration}: {id} read back after run {run}"
                    );
                }
            }));
            let reader = tree.clone();
            let others = ids.clone();
            tasks.push(tokio::spawn(async move {
                let tree = reader;
                for _ in 0..10 {
                    for &other in &others {
                        if let Some(outcome) = tree.read_outcome(other).await {
                            if let Some(text) = outcome.text {
                                assert!(
                                    text.starts_with(&format!("{other}-run")),
                                    "iteration {iteration}: {other} read {text}"
                                );
                            }
                        }
                    }
                    tokio::task::yield_now().await;
                }
            }));
        }
        for task in tasks {
            bounded("a task", task).await.unwrap();
        }
        bounded("flush", tree.flush_journal()).await;
        for &id in &ids {
            let back = bounded("read", tree.read_outcome(id)).await.unwrap();
            assert_eq!(back.text, Some(Steps::expected(id.get(), 4, pad)));
        }
        let tree = Arc::try_unwrap(tree).expect("one tree");
        bounded("shutdown", tree.shutdown()).await;
    }
}

/// A slow store in memory that says when the writer thread has let it go (it ends).
#[derive(Clone, Default)]
struct Watched {
    slow: Slow,
    gone: Arc<std::sync::atomic::AtomicBool>,
}

struct WatchedStore(Watched);

impl Drop for WatchedStore {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::SeqCst);
    }
}

impl agent_tree::JournalStore for WatchedStore {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.slow.append(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.slow.replace(bytes)
    }
    fn size(&self) -> u64 {
        self.0.slow.size()
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        self.0.slow.read()
    }
}

/// Rule: the writer's call back onto the tree's runtime (a release waiting for its line)
/// after the tree and its runtime are gone neither panics nor hangs: the writer writes
/// everything it was handed, then ends, and what it wrote replays whole.
#[test]
fn the_writers_call_back_after_the_tree_and_its_runtime_are_gone_is_harmless() {
    let watched = Watched::default();
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let store = WatchedStore(watched.clone());
        runtime.block_on(async {
            let tree = Tree::builder()
                .model(Fixed("x".repeat(5000)))
                .catalog(catalog([leaf("worker")]))
                .journal_store(
                    JournalConfig::new("memory")
                        .keep_read_outputs(0)
                        .durability(Durability::EveryEntry),
                    store,
                )
                .build()
                .await
                .unwrap();
            // Read at settle, while the slow writer is behind: each release waits for its
            // line, and the writer calls back once it is written, after the tree is gone.
            for _ in 0..5 {
                let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
                let _ = handle.outcome().await;
            }
            assert!(tree.journal_backlog() > 0, "the writer is behind");
            drop(tree);
        });
        drop(runtime);
    }
    let deadline = std::time::Instant::now() + LIMIT;
    while !watched.gone.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer thread never ended after its tree and runtime were dropped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let bytes = watched.slow.read().unwrap();
    let replay = agent_tree::protocol::replay(&bytes, None).unwrap();
    assert_eq!(replay.torn, None);
    let settled: Vec<_> = replay
        .outcomes()
        .filter(|(id, _)| !id.is_root())
        .map(|(id, outcome)| (id, outcome.status))
        .collect();
    assert_eq!(
        settled.len(),
        5,
        "the writer wrote everything it was handed (a panic in its call back would stop \
         it): {settled:?}\n{replay}"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Compaction.
// ---------------------------------------------------------------------------------------

/// Rule (`rotate_at`): "Past `rotate_at` bytes the file is compacted", now "only past
/// rotate_at and past twice what the last compaction left". A tree whose live state is
/// small (a few settled agents) and which then produces only dead events (usage reports,
/// turn after turn of one long-running agent whose conversation is rewritten at compaction)
/// keeps its file bounded: it compacts again and again, the file never grows past a small
/// multiple of rotate_at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_of_mostly_dead_events_keeps_compacting() {
    let dir = TempDir::new("review2-dead");
    let path = dir.file("j");
    let rotate = 16 * 1024u64;
    // Many agents that answer small: each leaves a record and a small output (live), and
    // lines of spawn, conversation and events (mostly dead after compaction).
    let model = Fixed("ok".into());
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([leaf("worker")]))
        .journal(JournalConfig::new(&path).rotate_at(rotate))
        .build()
        .await
        .unwrap();
    let mut largest = 0u64;
    for _ in 0..300 {
        bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
            .await
            .unwrap();
        bounded("flush", tree.flush_journal()).await;
        largest = largest.max(std::fs::metadata(&path).unwrap().len());
    }
    let replay = read_journal(&path, None).unwrap();
    assert_eq!(replay.outcomes().count(), 300);
    // Compacted content of 300 small agents: what a compaction would leave now.
    let live = std::fs::metadata(&path).unwrap().len();
    assert!(
        largest <= 2 * live.max(rotate) + rotate,
        "the file grew to {largest} bytes with {live} bytes at the end, rotate_at {rotate}"
    );
    bounded("shutdown", tree.shutdown()).await;
}

// ---------------------------------------------------------------------------------------
// 6. The retention budget across a resume.
// ---------------------------------------------------------------------------------------

/// Rule: "Read outputs stay up to `JournalConfig::keep_read_outputs(bytes)` ...; past
/// either, the oldest read go first". A resumed agent's earlier output is no longer in
/// memory (the `resumed` fold clears its outcome), so it takes none of the budget: two
/// outputs that fit the budget stay, whichever runs they come from.
///
/// Defect (suspected): the resumed agent's earlier read stays in `Inner::read_outputs` and
/// its bytes in `read_bytes` (registry.rs `Inner::output_read` pushes the new run's read
/// beside it; only `release_read_outputs` drops a stale entry, when it reaches the front).
/// The budget then counts an output that is gone, and a2's output, which fits, is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_agents_earlier_output_takes_none_of_the_budget() {
    let dir = TempDir::new("review2-budget");
    let text = "b".repeat(1000);
    let tree = Tree::builder()
        .model(Fixed(text.clone()))
        .catalog(catalog([leaf("worker")]))
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(2100))
        .build()
        .await
        .unwrap();
    let mut a1 = tree
        .spawn(SpawnRequest::new("worker", "one"))
        .await
        .unwrap();
    let mut a2 = tree
        .spawn(SpawnRequest::new("worker", "two"))
        .await
        .unwrap();
    bounded("idle", tree.idle()).await;
    // Read a2 first, then a1: both fit (2000 of 2100 bytes).
    assert_eq!(bounded("a2", a2.outcome()).await.text, Some(text.clone()));
    assert_eq!(bounded("a1", a1.outcome()).await.text, Some(text.clone()));
    bounded("flush", tree.flush_journal()).await;
    assert!(
        !tree
            .snapshot()
            .record(a2.id())
            .unwrap()
            .outcome
            .clone()
            .unwrap()
            .released
    );
    // a1 runs again: its first output leaves memory with the resume; its second is read.
    let mut again = bounded("resume", tree.resume(a1.id(), "again"))
        .await
        .unwrap();
    assert_eq!(
        bounded("a1 run 2", again.outcome()).await.text,
        Some(text.clone())
    );
    bounded("flush", tree.flush_journal()).await;
    let snapshot = tree.snapshot();
    let held: usize = snapshot
        .agents()
        .filter_map(|r| r.outcome.as_ref())
        .filter(|o| !o.released)
        .map(|o| o.text.as_ref().map_or(0, String::len))
        .sum();
    let a2_now = snapshot.record(a2.id()).unwrap().outcome.clone().unwrap();
    assert!(
        !a2_now.released,
        "a2 was released with only {held} bytes of read outputs in memory after it (budget \
         2100): the resumed a1's first output is still counted"
    );
    bounded("shutdown", tree.shutdown()).await;
}
