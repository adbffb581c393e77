//! Review of output retention (issue 11 part 4): read outputs released to the journal and
//! read back on demand. Each test states the rule it holds (docs/semantics.md, "Journal and
//! recovery", "Output retention") and, where it fails, the defect it shows.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Fold, Role};
use agent_tree::testkit::{Call, EventProbe, Script, ScriptedModel, Target, Turn};
use agent_tree::{
    BoxFuture, FnTool, JournalConfig, JournalStore, Model, ModelError, ModelRequest, ModelResponse,
    ToolError,
};
use parking_lot::{Condvar, Mutex};

use crate::support::journal::TempDir;
use crate::support::{catalog, delegator, leaf};

/// A generous real-time bound: a hang fails the test instead of sticking the run.
const LIMIT: Duration = Duration::from_secs(30);

async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

fn report(tag: &str, bytes: usize) -> String {
    format!("{tag}:{}", "r".repeat(bytes))
}

/// The tool results of `agent`'s last model call, whole conversation (every tool message).
fn tool_messages(model: &ScriptedModel, agent: AgentId) -> Vec<String> {
    let log = model.log_of(agent);
    let last = log.last().expect("the agent called its model");
    last.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

/// Closed until a test opens it.
type Gate = Arc<(Mutex<bool>, Condvar)>;

/// A store in memory; shared so a test can look at it. Its faults, each off by default:
/// an append carrying `fail_on`'s marker blocks until the gate opens and then fails (a disk
/// that fills up while the line is on its way); `unreadable` fails every one-line read (a
/// bad sector under an old line). It counts its compactions.
#[derive(Clone, Default)]
struct Memory {
    bytes: Arc<Mutex<Vec<u8>>>,
    fail_on: Option<(&'static [u8], Gate)>,
    unreadable: bool,
    replaced: Arc<std::sync::atomic::AtomicUsize>,
}

impl Memory {
    /// Fails the append carrying `marker`, once the gate opens.
    fn failing_on(marker: &'static str) -> Self {
        Memory {
            fail_on: Some((marker.as_bytes(), Arc::default())),
            ..Memory::default()
        }
    }

    /// Writes, but cannot read one line back.
    fn unreadable() -> Self {
        Memory {
            unreadable: true,
            ..Memory::default()
        }
    }

    fn open_gate(&self) {
        if let Some((_, gate)) = &self.fail_on {
            let (lock, cvar) = &**gate;
            *lock.lock() = true;
            cvar.notify_all();
        }
    }

    fn all(&self) -> Vec<u8> {
        self.bytes.lock().clone()
    }
}

impl JournalStore for Memory {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Some((marker, gate)) = &self.fail_on {
            if bytes.windows(marker.len()).any(|w| w == *marker) {
                let (lock, cvar) = &**gate;
                let mut open = lock.lock();
                while !*open {
                    cvar.wait(&mut open);
                }
                return Err(io::Error::other("no space left on device"));
            }
        }
        self.bytes.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        *self.bytes.lock() = bytes.to_vec();
        self.replaced
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read(&self) -> io::Result<Vec<u8>> {
        Ok(self.all())
    }
    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        if self.unreadable {
            return Err(io::Error::other("input/output error"));
        }
        let all = self.all();
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + usize::try_from(len).map_err(io::Error::other)?;
        all.get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
    }
}

// ---------------------------------------------------------------------------------------
// 1. A released output whose line the journal never wrote.
// ---------------------------------------------------------------------------------------

/// Rule: "Without a journal nothing is released (there is nowhere to read it back from),
/// nor once the journal has failed"; a released output "is read back from the journal,
/// exactly". An output may only leave memory when the journal can give it back.
///
/// Defect: an output is released as soon as it is read, while its terminal line is still
/// queued for the writer. When that write then fails, the only copy is gone: the record is
/// `released` and the read-back finds a span (`Writer.outputs`, indexed before the write)
/// past the end of what was written, so `Tree::read_outcome` returns no text.
/// (registry.rs `Inner::output_read`/`release_read_outputs` release without the writer
/// having written the line; journal.rs `Writer::run` indexes a span for an entry whose
/// append then fails.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_released_before_its_line_is_written_is_not_lost_when_the_write_fails() {
    const MARKER: &str = "UNWRITTEN-ANSWER-0123456789";
    let store = Memory::failing_on(MARKER);
    let model = ScriptedModel::new().script("worker", Script::new([Turn::answer(MARKER)]));
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([leaf("worker")]))
        .journal_store(
            JournalConfig::new("memory").keep_read_outputs(0),
            store.clone(),
        )
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    let first = bounded("the outcome", handle.outcome()).await;
    assert_eq!(first.text.as_deref(), Some(MARKER));
    // Now the write carrying the answer fails.
    store.open_gate();
    bounded("the flush", tree.flush_journal()).await;
    assert!(tree.journal_error().is_some(), "the journal failed");
    let again = bounded("the read-back", tree.read_outcome(id))
        .await
        .unwrap();
    assert_eq!(
        again.text.as_deref(),
        Some(MARKER),
        "the answer is gone: memory released it and the journal never had it ({again:?})"
    );
    bounded("shutdown", tree.shutdown()).await;
}

// ---------------------------------------------------------------------------------------
// 2. A journal whose read-back fails.
// ---------------------------------------------------------------------------------------

/// Rule (the brief; docs: the output is "read back from the journal ... by an owner's
/// tools"): when the read-back fails, the tree does not hang or panic, and the owner's
/// model is told clearly that the result is not available (an error, or a mark that the
/// output was released), never a plain `completed` with no text, which reads as a child
/// that answered nothing.
///
/// Defect: the owner's second read of a released child gets
/// `{"agent_id":"a2","status":"completed"}`: no text, no error, no `released`
/// (shared.rs `whole_outcome` falls back to the released outcome silently;
/// orchestration/schema.rs `result_value` drops the `released` flag).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_child_cannot_be_read_back_is_told_so() {
    let answer = report("child", 200);
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn("worker", "report"),
                Turn::calls([Call::tool(
                    "get_subagent_result",
                    serde_json::json!({ "agent_id": "a2" }),
                )]),
                Turn::answer("done"),
            ]),
        )
        .script("worker", Script::new([Turn::answer(answer.clone())]));
    let log = model.clone();
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .journal_store(
            JournalConfig::new("memory").keep_read_outputs(0),
            Memory::unreadable(),
        )
        .build()
        .await
        .unwrap();
    let outcome = bounded("the lead", tree.run(SpawnRequest::new("lead", "go")))
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let results = tool_messages(&log, AgentId::new(1));
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains(&answer), "the first read is whole");
    let second: serde_json::Value = serde_json::from_str(&results[1]).unwrap();
    let clear = second.get("text").is_some()
        || second.get("error").is_some()
        || second.get("released").is_some();
    assert!(
        clear,
        "the owner's model is told the child completed with no text and no hint why: {second}"
    );
    bounded("shutdown", tree.shutdown()).await;
}

/// Rule: the application's read of an output that cannot be read back does not hang and
/// says the output is not there (`released` stays set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_read_that_cannot_be_read_back_keeps_released_and_does_not_hang() {
    let model = ScriptedModel::new().script("worker", Script::new([Turn::answer("lost text")]));
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([leaf("worker")]))
        .journal_store(
            JournalConfig::new("memory").keep_read_outputs(0),
            Memory::unreadable(),
        )
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let first = bounded("the outcome", handle.outcome()).await;
    assert_eq!(first.text.as_deref(), Some("lost text"));
    let id = handle.id();
    tree.flush_journal().await;
    let again = bounded("read_outcome", tree.read_outcome(id))
        .await
        .unwrap();
    assert!(again.released && again.text.is_none(), "{again:?}");
    let via_handle = bounded("handle", handle.outcome()).await;
    assert!(via_handle.released, "{via_handle:?}");
    let waited = bounded("wait", tree.wait(&[id], WaitPolicy::AllSettled)).await;
    assert!(waited[0].released, "{waited:?}");
    bounded("shutdown", tree.shutdown()).await;
}

// ---------------------------------------------------------------------------------------
// 3. The fold of the event stream.
// ---------------------------------------------------------------------------------------

/// Rule: records change only by the fold of events; folding the stream rebuilds the
/// snapshot, released outcomes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folding_the_events_rebuilds_the_snapshot_with_released_outcomes() {
    let dir = TempDir::new("review-retention-fold");
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([
                    Call::spawn_background("worker", "a"),
                    Call::spawn_background("worker", "b"),
                ]),
                Turn::calls([Call::wait(
                    [Target::Spawned(0), Target::Spawned(1)],
                    WaitPolicy::AllSettled,
                )]),
                Turn::answer(report("lead", 100)),
            ]),
        )
        .script("worker", Script::new([Turn::answer(report("w", 300))]));
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(350))
        .build()
        .await
        .unwrap();
    let mut events = tree.subscribe();
    for _ in 0..3 {
        bounded("a lead", tree.run(SpawnRequest::new("lead", "go")))
            .await
            .unwrap();
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

// ---------------------------------------------------------------------------------------
// 4. Resume of a released agent.
// ---------------------------------------------------------------------------------------

/// Rule: a released agent resumes on its journaled conversation (its answer in it), and its
/// new run's output is the one read back, never the earlier run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_agent_resumes_and_reads_back_its_new_run() {
    let dir = TempDir::new("review-retention-resume");
    let first = report("first", 500);
    let second = report("second", 700);
    let model = ScriptedModel::new().script(
        "worker",
        Script::new([Turn::answer(first.clone()), Turn::answer(second.clone())]),
    );
    let log = model.clone();
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([leaf("worker")]))
        .journal(
            JournalConfig::new(dir.file("j"))
                .keep_read_outputs(0)
                .retain_conversations(false),
        )
        .build()
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------------------
// 5. Owners' tools over released children: sets, timeouts, twice in one turn, notices.
// ---------------------------------------------------------------------------------------

/// Rule: each read of an owner's tool carries the child's whole output to its model, in
/// the set's order, whether the output was held or released (and read back by a task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reads_released_children_through_sets_timeouts_and_twice_in_a_turn() {
    let dir = TempDir::new("review-retention-sets");
    let answers: Vec<String> = (0..3).map(|i| report(&format!("w{i}"), 400)).collect();
    let get = |id: &str| Call::tool("get_subagent_result", serde_json::json!({ "agent_id": id }));
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([
                    Call::spawn_background("w0", "go"),
                    Call::spawn_background("w1", "go"),
                    Call::spawn_background("w2", "go"),
                ]),
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
            ]),
        )
        .script("w0", Script::new([Turn::answer(answers[0].clone())]))
        .script("w1", Script::new([Turn::answer(answers[1].clone())]))
        .script("w2", Script::new([Turn::answer(answers[2].clone())]));
    let log = model.clone();
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([
            delegator("lead", &["w0", "w1", "w2"]),
            leaf("w0"),
            leaf("w1"),
            leaf("w2"),
        ]))
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(0))
        .build()
        .await
        .unwrap();
    let outcome = bounded("the lead", tree.run(SpawnRequest::new("lead", "go")))
        .await
        .unwrap();
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

/// Rule: a background child's end notice carries its whole output (a read); a later
/// `get_subagent_result` reads it back whole once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_notice_then_a_result_of_a_released_child() {
    let dir = TempDir::new("review-retention-notice");
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
            Script::new([
                Turn::spawn_background("worker", "go"),
                Turn::calls([Call::tool("gate", serde_json::json!({}))]),
                Turn::calls([Call::tool("gate", serde_json::json!({}))]),
                Turn::calls([Call::tool(
                    "get_subagent_result",
                    serde_json::json!({ "agent_id": "a2" }),
                )]),
                Turn::answer("done"),
            ]),
        )
        .script("worker", Script::new([Turn::answer(answer.clone())]));
    let log = model.clone();
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .tool(gate)
        .unwrap()
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(0))
        .build()
        .await
        .unwrap();
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

/// Rule (descendants scope): a grandparent reading a grandchild's released result gets it
/// back whole, by `get_subagent_result` and by a set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandparent_reads_a_released_grandchild_back() {
    let dir = TempDir::new("review-retention-descendants");
    let answer = report("grandchild", 900);
    let model = ScriptedModel::new()
        .script(
            "top",
            Script::new([
                Turn::spawn("mid", "delegate"),
                Turn::calls([
                    Call::tool(
                        "get_subagent_result",
                        serde_json::json!({ "agent_id": "a3" }),
                    ),
                    Call::tool(
                        "wait_subagents",
                        serde_json::json!({ "agent_ids": ["a2", "a3"] }),
                    ),
                ]),
                Turn::answer("top done"),
            ]),
        )
        .script(
            "mid",
            Script::new([Turn::spawn("leafy", "work"), Turn::answer("mid done")]),
        )
        .script("leafy", Script::new([Turn::answer(answer.clone())]));
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
    let outcome = bounded("top", tree.run(SpawnRequest::new("top", "go")))
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------------------
// 6. Partial outputs and errors.
// ---------------------------------------------------------------------------------------

/// A worker that says something and calls a tool that never answers: aborted, it keeps
/// what it said as partial output.
struct Talker;

impl Model for Talker {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
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
    }
}

/// Rule: an aborted agent's partial output is released like a text and read back whole;
/// a failed agent's error stays in memory (the record keeps status, reason and error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_output_is_released_and_read_back_and_an_error_stays() {
    let dir = TempDir::new("review-retention-partial");
    let (called_tx, mut called_rx) = tokio::sync::watch::channel(false);
    let hang = FnTool::new("hang", "never answers", move |_, _| {
        called_tx.send_replace(true);
        async {
            std::future::pending::<()>().await;
            Ok::<_, ToolError>(String::new())
        }
    });
    let tree = Tree::builder()
        .model(Talker)
        .catalog(catalog([leaf("worker")]))
        .tool(hang)
        .unwrap()
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(0))
        .build()
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------------------
// 7. Compaction and recovery.
// ---------------------------------------------------------------------------------------

/// Rule: releases, a recovery, more work (with compactions between releases and reads, and
/// a resume of a released agent), a second recovery: every output reads back exactly, and
/// released ones stay released across both recoveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_survive_two_recoveries_with_compactions_and_resumes_between() {
    let dir = TempDir::new("review-retention-twice");
    let path = dir.file("j");
    let config = || {
        JournalConfig::new(&path)
            .keep_read_outputs(0)
            .rotate_at(24 * 1024)
    };
    let answer = |n: u64, run: u32| report(&format!("a{n}-run{run}"), 2500);
    // Each worker answers with its id and run, so a wrong line shows.
    struct ById;
    impl Model for ById {
        fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
            let run = request
                .messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count() as u32
                + 1;
            let text = report(&format!("{}-run{run}", request.agent), 2500);
            Box::pin(async move { Ok(ModelResponse::text(text)) })
        }
    }
    let build = || async {
        Tree::builder()
            .model(ById)
            .catalog(catalog([leaf("worker")]))
            .journal(config())
            .build()
            .await
            .unwrap()
    };
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
    for _ in 0..6 {
        let outcome = bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
            .await
            .unwrap();
        let id = snapshot_last(&tree);
        assert_eq!(outcome.text, Some(answer(id, 1)));
        expected.push((id, answer(id, 1)));
    }
    tree.flush_journal().await;
    check(&tree, &expected, "in phase 1");
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // Phase 2: recovered; more work; resume two released agents.
    let tree = build().await;
    check(&tree, &expected, "after recovery 1");
    for (n, text) in &expected {
        let back = bounded("read back", tree.read_outcome(AgentId::new(*n)))
            .await
            .unwrap();
        assert_eq!(back.text.as_ref(), Some(text), "a{n} after recovery 1");
    }
    for _ in 0..6 {
        let outcome = bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
            .await
            .unwrap();
        let id = snapshot_last(&tree);
        assert_eq!(outcome.text, Some(answer(id, 1)));
        expected.push((id, answer(id, 1)));
    }
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
    for (n, text) in &expected {
        let back = bounded("read back", tree.read_outcome(AgentId::new(*n)))
            .await
            .unwrap();
        assert_eq!(back.text.as_ref(), Some(text), "a{n} in phase 2");
    }
    bounded("flush", tree.flush_journal()).await;
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // Phase 3: recovered again.
    let tree = build().await;
    check(&tree, &expected, "after recovery 2");
    for (n, text) in &expected {
        let back = bounded("read back", tree.read_outcome(AgentId::new(*n)))
            .await
            .unwrap();
        assert_eq!(back.text.as_ref(), Some(text), "a{n} after recovery 2");
    }
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

fn snapshot_last(tree: &Tree) -> u64 {
    tree.snapshot().agents().map(|r| r.id.get()).max().unwrap()
}

// ---------------------------------------------------------------------------------------
// 8. Many concurrent readers, nothing kept.
// ---------------------------------------------------------------------------------------

/// Rule: with `keep_read_outputs(0)` and readers of every kind at once (handles, waits,
/// `read_outcome`, `outcome`, owners' tools) on two worker threads, every read that returns
/// a whole output returns the exact one, `Tree::outcome` is either whole or marked
/// released, and at the end every output is released and reads back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_with_nothing_kept_always_get_the_exact_output() {
    for iteration in 0..30 {
        let dir = TempDir::new("review-retention-race");
        struct Echo;
        impl Model for Echo {
            fn turn(
                &self,
                request: ModelRequest,
            ) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
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
            }
        }
        let tree = Arc::new(
            Tree::builder()
                .model(Echo)
                .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
                .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(0))
                .build()
                .await
                .unwrap(),
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

// ---------------------------------------------------------------------------------------
// 9. The released event and the budget.
// ---------------------------------------------------------------------------------------

/// Rule: the `released` event's `bytes` are the output's (text plus partial), and
/// `Tree::outcome` and the snapshot agree once the release happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_released_event_counts_the_output_and_outcome_agrees_with_the_snapshot() {
    let dir = TempDir::new("review-retention-bytes");
    let text = report("é", 1234);
    let model = ScriptedModel::new().script("worker", Script::new([Turn::answer(text.clone())]));
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([leaf("worker")]))
        .journal(JournalConfig::new(dir.file("j")).keep_read_outputs(0))
        .build()
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------------------
// 10. Compaction after the flush.
// ---------------------------------------------------------------------------------------

/// Rule: "`Tree::shutdown` ends with a flush": once it returns, the journal is what a new
/// tree recovers from, and nothing rewrites it any more (a tree built on the same file
/// right after must not have the file renamed away under it).
///
/// Defect: the writer answers the flush, then compacts (`Writer::run` calls
/// `maybe_rotate` after the batch whose `Flush` it already answered). Retained outputs
/// live in the journal only, so once they outweigh `rotate_at` the compacted file is
/// itself past `rotate_at` and every batch compacts, the shutdown's flush batch included:
/// the journal is rewritten (for a file, renamed over) after `shutdown` returned. A tree
/// recovered from the file at that moment appends to the old inode and indexes spans of
/// the old layout (`releases_survive_two_recoveries...` fails now and then for this).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_rewrites_the_journal_after_shutdown_returned() {
    let store = Memory::default();
    let model =
        ScriptedModel::new().script("worker", Script::new([Turn::answer(report("w", 4000))]));
    let tree = Tree::builder()
        .model(model)
        .catalog(catalog([leaf("worker")]))
        .journal_store(
            JournalConfig::new("memory")
                .keep_read_outputs(0)
                .rotate_at(8 * 1024),
            store.clone(),
        )
        .build()
        .await
        .unwrap();
    for _ in 0..4 {
        bounded("a worker", tree.run(SpawnRequest::new("worker", "go")))
            .await
            .unwrap();
    }
    bounded("shutdown", tree.shutdown()).await;
    let at_shutdown = store.replaced.load(std::sync::atomic::Ordering::SeqCst);
    assert!(at_shutdown > 0, "compacted while running");
    let bytes = store.all();
    // Real time is what is tested: the writer thread, left alone, must not touch it again.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let now = store.replaced.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            now, at_shutdown,
            "the journal was compacted again after shutdown returned"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.all(), bytes, "the journal changed after shutdown");
}
