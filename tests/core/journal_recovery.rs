//! Recovery from a journal: every status comes back by the same fold, live agents come back
//! interrupted, a resumed owner re-issuing a lost turn's spawn gets the existing child, and
//! the journal goes on from where it was. A "crash" here is a copy of the journal file taken
//! while the tree runs (everything handed to the writer flushed first).

use std::path::Path;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::protocol::{EndReason, ModelErrorKind};
use agent_tree::testkit::{Call, EventProbe, ScriptedModel, Turn};
use agent_tree::{JournalConfig, read_journal};

use crate::support::harness::{builder, contents, lead_and_worker, spawn_for_id};
use crate::support::journal::{
    TempDir, crash, crash_copy, live_and_crashed, open_journal, records_now, stored_tree,
};
use crate::support::races::on_worker_threads;
use crate::support::scripts::{lead_resuming_its_worker, lead_waiting_on_a_hung_worker};
use crate::support::{catalog, leaf, spawn_admitted};

/// A tree of `config` on the journal at `path`.
async fn build_configured(
    model: ScriptedModel,
    catalog: Catalog,
    path: &Path,
    config: TreeConfig,
) -> Tree {
    builder(model, catalog, config)
        .journal(JournalConfig::new(path))
        .build()
        .await
        .unwrap()
}

/// A tree with the default configuration on the journal at `path`.
async fn build(model: ScriptedModel, catalog: Catalog, path: &Path) -> Tree {
    open_journal(model, catalog, path).await.unwrap()
}

/// The writer's tree recovered from `journal` (its model answering `answer`; with
/// `none_interrupted`, nothing left interrupted), the writer resumed with `prompt`: the run
/// completes, its first model call reading `texts`. The tree.
async fn resumed_writer_read(
    catalog: Catalog,
    journal: &Path,
    answer: &str,
    writer: AgentId,
    prompt: &str,
    texts: &[&str],
    none_interrupted: bool,
) -> Tree {
    let model = ScriptedModel::new().script("writer", [Turn::answer(answer)]);
    let log = model.call_log();
    let tree = build(model, catalog, journal).await;
    if none_interrupted {
        assert!(tree.interrupted().is_empty());
    }
    let mut handle = tree.resume(writer, prompt).await.unwrap();
    assert!(handle.outcome().await.is_completed());
    assert_eq!(
        crate::support::user_texts(&log.of(writer)[0].messages),
        texts
    );
    tree
}

/// A tree recovered from a journal has every record back with its status by the same fold,
/// and the agents that were live at the crash come back interrupted.
#[tokio::test(start_paused = true)]
async fn every_status_comes_back_and_live_agents_come_back_interrupted() {
    every_status_comes_back().await;
}

/// The same crash and recovery on two worker threads, many times: the aborts, the kill,
/// the pool and the journal's writer interleave differently each time.
#[test]
fn every_status_comes_back_on_worker_threads() {
    on_worker_threads(10, Duration::from_secs(30), every_status_comes_back);
}

/// Waits for every agent of `agents` to start its run (its first model turn may begin),
/// in whatever order they do.
async fn started(events: &mut EventProbe, agents: &[AgentId]) {
    let mut left = agents.to_vec();
    while !left.is_empty() {
        let event = events
            .expect_event("the agents' starts", |e| {
                left.contains(&e.agent) && matches!(e.kind, EventKind::Started { .. })
            })
            .await;
        left.retain(|&a| a != event.agent);
    }
}

async fn every_status_comes_back() {
    let dir = TempDir::new("statuses");
    let (live, crashed) = live_and_crashed(&dir);
    let model = ScriptedModel::new()
        .script(
            "done",
            [Turn::answer("finished").usage(Usage::tokens(4, 2))],
        )
        .script("broken", [Turn::fail("model down")])
        .script("hung", [Turn::hang()])
        .script("busy", [Turn::hang().usage(Usage::tokens(9, 9))]);
    let types = ["done", "broken", "hung", "busy"];
    let catalog = catalog(types.map(leaf));
    let config = TreeConfig::default().with_max_concurrent(1);
    let tree = build_configured(model.clone(), catalog.clone(), &live, config.clone()).await;
    let mut events = EventProbe::new(&tree);
    let done = tree.run(SpawnRequest::new("done", "a")).await.unwrap();
    assert!(done.is_completed());
    tree.run(SpawnRequest::new("broken", "b")).await.unwrap();
    let aborted = spawn_for_id(&tree, "hung", "c").await;
    started(&mut events, &[aborted]).await;
    tree.abort(aborted).unwrap();
    events.expect_terminated(aborted).await;
    let killed = spawn_for_id(&tree, "hung", "d").await;
    started(&mut events, &[killed]).await;
    tree.kill(killed).unwrap();
    events.expect_terminated(killed).await;
    let running = spawn_for_id(&tree, "busy", "e").await;
    // Background: takes the one pool slot; the next one queues behind it.
    let pooled = spawn_admitted(&tree, SpawnRequest::new("hung", "f").background())
        .await
        .id();
    let queued = spawn_admitted(&tree, SpawnRequest::new("hung", "g").background())
        .await
        .id();
    started(&mut events, &[running, pooled]).await;
    assert_eq!(tree.record(queued).unwrap().status, AgentStatus::Queued);
    crash_copy(&tree, &live, &crashed).await;
    let before = tree.snapshot();
    drop(tree);

    let tree = build_configured(model, catalog, &crashed, config).await;
    let after = tree.snapshot();
    assert_eq!(after.agents().count(), 7);
    let status = |id: AgentId| tree.record(id).unwrap().status;
    assert_eq!(status(AgentId::new(1)), AgentStatus::Completed);
    assert_eq!(
        tree.outcome(AgentId::new(1)).unwrap().text.as_deref(),
        Some("finished")
    );
    assert_eq!(
        tree.outcome(AgentId::new(2)).unwrap().error.as_deref(),
        Some("model down")
    );
    assert_eq!(status(aborted), AgentStatus::Aborted);
    assert_eq!(tree.outcome(aborted).unwrap().reason, EndReason::Aborted);
    assert_eq!(status(killed), AgentStatus::Killed);
    for id in [running, pooled, queued] {
        let outcome = tree.outcome(id).unwrap();
        assert_eq!(
            (outcome.status, outcome.reason),
            (AgentStatus::Aborted, EndReason::Interrupted),
            "{id}"
        );
    }
    assert_eq!(tree.interrupted(), [running, pooled, queued]);
    // Usage spent before the crash is kept, the same totals everywhere.
    assert_eq!(after.records[0].subtree, before.records[0].subtree);
    assert_eq!(after.records[0].subtree, Usage::tokens(4, 2));
    assert_eq!(tree.live(), 0);
    // The tree goes on: new agents get the next ids, and the journal stays one fold.
    let next = tree.run(SpawnRequest::new("done", "again")).await.unwrap();
    assert!(next.is_completed());
    assert_eq!(tree.snapshot().agents().count(), 8);
    // The tally covers the tree's whole life, and its clock went on: nothing recorded
    // before the crash is later than what came after.
    let now = tree.snapshot();
    let admitted = |t: &agent_tree::protocol::EventTally| t.spawned + t.queued;
    assert_eq!(admitted(&now.tally), admitted(&before.tally) + 1);
    assert!(now.tally.total() > before.tally.total());
    let newest = now.record(AgentId::new(8)).unwrap().created_ms;
    for record in &before.records {
        let latest = record
            .ended_ms
            .or(record.started_ms)
            .unwrap_or(record.created_ms);
        assert!(
            latest <= newest,
            "{} at {latest} ms, a8 at {newest} ms",
            record.id
        );
    }
    tree.shutdown().await;
    let replay = read_journal(&crashed, None).unwrap();
    assert_eq!(replay.records, records_now(&tree));
}

/// A run that failed on a model call keeps the failure's kind as data (`error_kind`) in its
/// outcome: in the live record, and in the record the journal's fold gives back.
#[tokio::test(start_paused = true)]
async fn a_model_failures_kind_comes_back_from_the_journal() {
    let dir = TempDir::new("kind");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script("w", [Turn::fail("no such model")]);
    let tree = build(model, catalog([leaf("w")]), &path).await;
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError);
    assert_eq!(
        outcome.error_kind,
        Some(ModelErrorKind::Provider),
        "{outcome:?}"
    );
    let live = tree.record(AgentId::new(1)).unwrap();
    assert_eq!(live.outcome.as_ref(), Some(&outcome));
    tree.shutdown().await;
    drop(tree);
    let replay = read_journal(&path, None).unwrap();
    assert_eq!(replay.records[1].outcome.as_ref(), Some(&outcome));
}

/// The lead's turn 1 spawns a worker in the foreground and waits; the crash comes while the
/// worker's turn hangs. Recovered, the lead is resumed with no prompt: its lost turn is
/// re-run, its spawn (at the same place) returns the existing, interrupted worker instead of
/// a new one, and the lead resumes it through the `Agent` tool to completion.
#[tokio::test(start_paused = true)]
async fn a_resumed_owner_reissuing_a_lost_spawn_gets_the_existing_child() {
    reissued_spawn_after_recovery().await;
}

/// The same crash, recovery and resume on two worker threads, many times: the resumes
/// (the lead's by the application, the worker's by the lead) and the journal's writer
/// interleave differently each time.
#[test]
fn a_reissued_spawn_after_recovery_on_worker_threads() {
    on_worker_threads(20, Duration::from_secs(30), reissued_spawn_after_recovery);
}

async fn reissued_spawn_after_recovery() {
    let dir = TempDir::new("reissue");
    let (live, crashed) = live_and_crashed(&dir);
    let catalog = lead_and_worker();
    let before = lead_waiting_on_a_hung_worker();
    let before_log = before.call_log();
    let tree = build(before, catalog.clone(), &live).await;
    let lead = spawn_for_id(&tree, "lead", "find it").await;
    // The crash comes once the worker's hanging turn has begun.
    before_log.until_calls(AgentId::new(2), 1).await;
    assert_eq!(tree.snapshot().agents().count(), 2);
    crash(tree, &live, &crashed).await;

    let after = lead_resuming_its_worker("found it").script("worker", [Turn::answer("dug")]);
    let log = after.call_log();
    let tree = build(after, catalog, &crashed).await;
    assert_eq!(tree.interrupted(), [AgentId::new(1), AgentId::new(2)]);
    let mut handle = tree.resume(lead, "").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("found it"));
    assert_eq!(tree.snapshot().agents().count(), 2, "no second worker");
    let calls = log.of(lead);
    // The lost turn was re-run on the journaled conversation, with no new prompt.
    assert_eq!(calls[0].messages.len(), 1);
    assert_eq!(calls[0].messages[0].content, "find it");
    let reissued = &calls[1].results[0].content;
    assert!(
        reissued.contains("\"agent_id\":\"a2\"") && reissued.contains("interrupted"),
        "{reissued}"
    );
    assert!(
        calls[2].results[0].content.contains("dug"),
        "{:?}",
        calls[2].results
    );
    // The worker's resumed run continued its own conversation, also with no new prompt.
    let worker = log.of(AgentId::new(2));
    assert_eq!(worker[0].messages.len(), 1);
    tree.shutdown().await;
}

/// A write cut off mid-line at the journal's end is dropped and the rest recovers; a
/// corrupt line anywhere else refuses the build, naming the file and the line.
#[tokio::test(start_paused = true)]
async fn a_torn_journal_recovers_and_a_corrupt_one_is_refused_naming_file_and_line() {
    let dir = TempDir::new("bad");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let tree = build(model.clone(), catalog([leaf("w")]), &path).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    tree.shutdown().await;
    drop(tree);
    let good = std::fs::read(&path).unwrap();

    // A write cut off mid-line: dropped, the rest recovers.
    let torn = dir.file("torn.journal");
    let mut bytes = good.clone();
    bytes.extend_from_slice(b"0badc0de {\"entry\":\"ev");
    std::fs::write(&torn, &bytes).unwrap();
    let tree = build(model.clone(), catalog([leaf("w")]), &torn).await;
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
    drop(tree);

    // A flipped byte in line 3.
    let corrupt = dir.file("corrupt.journal");
    let mut bytes = good;
    let third = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(1)
        .map(|(i, _)| i + 20)
        .unwrap();
    bytes[third] ^= 0x04;
    std::fs::write(&corrupt, &bytes).unwrap();
    let error = open_journal(model, catalog([leaf("w")]), &corrupt)
        .await
        .unwrap_err();
    assert!(
        error.starts_with(&format!(
            "journal {}:3: checksum mismatch",
            corrupt.display()
        )),
        "{error}"
    );
}

/// An agent admitted and journaled (its request, prompt included) but cut off before its
/// first turn boundary (here its start hook is still running) has no conversation in the
/// journal: recovery rebuilds the one its first run starts with from its request, so a
/// resume with no prompt sends the model its task, as the first run would have.
#[tokio::test(start_paused = true)]
async fn an_agent_cut_off_before_its_first_turn_resumes_with_its_task() {
    let dir = TempDir::new("task");
    let (live, crashed) = live_and_crashed(&dir);
    let catalog = catalog([leaf("writer")]);
    let tree = Tree::builder()
        .catalog(catalog.clone())
        .model(ScriptedModel::new().script("writer", [Turn::answer("unused")]))
        .on_start(|_: agent_tree::HookContext| std::future::pending())
        .journal(JournalConfig::new(&live))
        .build()
        .await
        .unwrap();
    let writer = spawn_for_id(&tree, "writer", "the task").await;
    crash(tree, &live, &crashed).await;

    let model = ScriptedModel::new().script("writer", [Turn::answer("written")]);
    let log = model.call_log();
    let tree = build(model, catalog, &crashed).await;
    assert_eq!(tree.interrupted(), [writer]);
    let mut handle = tree.resume(writer, "").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("written"));
    let calls = log.of(writer);
    assert_eq!(crate::support::user_texts(&calls[0].messages), ["the task"]);
    assert_eq!(calls[0].messages.len(), 1, "the task, once");
    tree.shutdown().await;
}

/// A steer receipted `delivered` and not read by a turn yet survives a crash: the resumed
/// run reads it once, after the journaled conversation. Once read it is part of the
/// conversation, so a later recovery and resume do not deliver it again.
#[tokio::test(start_paused = true)]
async fn a_receipted_steer_survives_a_crash_and_is_read_once() {
    let dir = TempDir::new("steer");
    let (live, crashed) = live_and_crashed(&dir);
    let catalog = catalog([leaf("writer")]);
    let before = ScriptedModel::new().script("writer", [Turn::hang()]);
    let tree = build(before, catalog.clone(), &live).await;
    let writer = spawn_for_id(&tree, "writer", "the task").await;
    assert_eq!(
        tree.steer(writer, "use blue").await,
        Ok(agent_tree::SteerReceipt::Delivered)
    );
    crash(tree, &live, &crashed).await;

    let tree = resumed_writer_read(
        catalog.clone(),
        &crashed,
        "done",
        writer,
        "",
        &["the task", "use blue"],
        false,
    )
    .await;
    tree.shutdown().await;
    drop(tree);

    let tree = resumed_writer_read(
        catalog,
        &crashed,
        "more done",
        writer,
        "more",
        &["the task", "use blue", "more"],
        true,
    )
    .await;
    tree.shutdown().await;
}

/// A steer recovery kept stays unread until a turn reads it, even when the agent is
/// resumed with a new prompt (whose conversation is journaled before any turn) and the
/// process crashes again before that resumed run's first turn.
#[tokio::test(start_paused = true)]
async fn a_kept_steer_stays_unread_across_a_resume_with_a_prompt_and_a_second_crash() {
    let dir = TempDir::new("steer-twice");
    let (live, first, second) = (
        dir.file("live.journal"),
        dir.file("first.journal"),
        dir.file("second.journal"),
    );
    let catalog = catalog([leaf("writer")]);
    let before = ScriptedModel::new().script("writer", [Turn::hang()]);
    let tree = build(before, catalog.clone(), &live).await;
    let writer = spawn_for_id(&tree, "writer", "the task").await;
    tree.steer(writer, "use blue").await.unwrap();
    crash(tree, &live, &first).await;

    // Resumed with a prompt, and cut off again before its first turn (a start hook).
    let tree = Tree::builder()
        .catalog(catalog.clone())
        .model(ScriptedModel::new())
        .on_start(|_: agent_tree::HookContext| std::future::pending())
        .journal(JournalConfig::new(&first))
        .build()
        .await
        .unwrap();
    tree.resume(writer, "go on").await.unwrap();
    crash(tree, &first, &second).await;

    let tree = resumed_writer_read(
        catalog,
        &second,
        "done",
        writer,
        "",
        &["the task", "go on", "use blue"],
        false,
    )
    .await;
    tree.shutdown().await;
}

/// A run a supervisor restarted starts its incarnation afresh from its task; cut off by a
/// crash before its first turn boundary (its start hook still running), it is resumed with
/// that fresh start, not with the failed run's conversation.
#[tokio::test(start_paused = true)]
async fn a_restarted_run_cut_off_before_its_first_turn_resumes_from_its_task() {
    let dir = TempDir::new("restarted");
    let (live, crashed) = live_and_crashed(&dir);
    let catalog = catalog([leaf("flaky").with_restart(RestartPolicy::Transient)]);
    let model = ScriptedModel::new().script(
        "flaky",
        [
            Turn::calls([Call::tool("noop", serde_json::json!({}))]),
            Turn::fail("boom"),
        ],
    );
    let hooks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runs = hooks.clone();
    let tree = Tree::builder()
        .config(TreeConfig::default().with_retry(agent_tree::RetryPolicy::none()))
        .catalog(catalog.clone())
        .model(model)
        .tool(agent_tree::FnTool::new(
            "noop",
            "does nothing",
            |_, _| async { Ok("ok".to_owned()) },
        ))
        .unwrap()
        // The first run starts; the restarted one never gets past its start hook.
        .on_start(move |_: agent_tree::HookContext| {
            let first = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            async move {
                if !first {
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
        .journal(JournalConfig::new(&live))
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let flaky = spawn_for_id(&tree, "flaky", "the task").await;
    events
        .expect_event("the restart", |e| {
            e.agent == flaky && matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    crash(tree, &live, &crashed).await;

    let model = ScriptedModel::new().script("flaky", [Turn::answer("fresh")]);
    let log = model.call_log();
    let tree = build(model, catalog, &crashed).await;
    assert_eq!(tree.interrupted(), [flaky]);
    let mut handle = tree.resume(flaky, "").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("fresh"));
    let messages = &log.of(flaky)[0].messages;
    assert_eq!(crate::support::user_texts(messages), ["the task"]);
    assert_eq!(
        messages.len(),
        1,
        "the restarted incarnation's start: its task alone"
    );
    tree.shutdown().await;
}

/// The journal's store, counting the times its whole content is read: a compaction reads
/// it as a stream and copies the lines it keeps, so a journal far larger than memory
/// compacts in the memory of what it keeps.
struct NeverWhole {
    file: agent_tree::FileJournal,
    whole_reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl agent_tree::JournalStore for NeverWhole {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.append(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync()
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.replace(bytes)
    }
    fn replace_with(
        &mut self,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.file.replace_with(write)
    }
    fn size(&self) -> u64 {
        self.file.size()
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        self.whole_reads
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.file.read()
    }
    fn reader(&self) -> std::io::Result<Box<dyn agent_tree::JournalReader>> {
        self.file.reader()
    }
    fn read_range(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        self.file.read_range(offset, len)
    }
}

/// Recovery and compaction keep each settled agent's conversation in the journal, as the
/// places of its lines: the journal is read as a stream (a compaction never reads it
/// whole, and copies the lines it keeps), the replay of a journal of settled agents holds
/// none of their conversations, and a resume reads its agent's back, whole, from the
/// compacted file.
#[tokio::test(start_paused = true)]
async fn settled_conversations_stay_in_the_journal_through_compaction_and_recovery() {
    let dir = TempDir::new("stream");
    let path = dir.file("tree.journal");
    let catalog = catalog([leaf("writer")]);
    let answer = |i: usize| format!("draft {i}: {}", "y".repeat(2048));
    let mut model = ScriptedModel::new();
    model = model.script("writer", [Turn::answer(answer(0))]);
    let whole_reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let store = NeverWhole {
        file: agent_tree::FileJournal::open(&path).unwrap(),
        whole_reads: whole_reads.clone(),
    };
    let journal = JournalConfig::new(&path).rotate_at(8 << 10);
    let tree = stored_tree(model, catalog.clone(), journal, store).await;
    let mut writers = Vec::new();
    for i in 0..6 {
        let task = format!("chapter {i}: {}", "x".repeat(2048));
        let mut handle = tree.spawn(SpawnRequest::new("writer", task)).await.unwrap();
        handle.outcome().await;
        writers.push(handle.id());
    }
    tree.shutdown().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"entry\":\"checkpoint\""), "compacted");
    assert_eq!(
        whole_reads.load(std::sync::atomic::Ordering::Acquire),
        0,
        "a compaction reads the journal as a stream"
    );

    let replay = read_journal(&path, None).unwrap();
    assert!(
        replay.conversations.is_empty(),
        "no settled agent's conversation is read: {:?}",
        replay.conversations.keys().collect::<Vec<_>>()
    );
    let mut file = std::fs::File::open(&path).unwrap();
    for (i, writer) in writers.iter().enumerate() {
        let (_, messages) = replay
            .read_conversation(&mut file, *writer)
            .unwrap()
            .expect("journaled");
        assert!(messages[0].content.starts_with(&format!("chapter {i}:")));
        assert_eq!(messages.last().unwrap().content, answer(0));
    }

    let model = ScriptedModel::new().script("writer", [Turn::answer("revised")]);
    let log = model.call_log();
    let tree = build(model, catalog, &path).await;
    let mut handle = tree.resume(writers[3], "revise it").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("revised"));
    let calls = log.of(writers[3]);
    let texts = contents(&calls[0].messages);
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(texts[0].starts_with("chapter 3:"));
    assert_eq!(texts[1], answer(0));
    assert_eq!(texts[2], "revise it");
    tree.shutdown().await;
}
