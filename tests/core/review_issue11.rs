//! Review of issue 11 (journal and recovery). A "crash" is a copy of the journal taken while
//! the tree runs, after `flush_journal` (as `crash_copy` in `journal_recovery`).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{AgentRecord, JOURNAL_VERSION, JournalEntry, Message, Role, SessionId};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{JournalConfig, JournalStore, read_journal};

use crate::support::harness::ok_tool;
use crate::support::journal::{TempDir, crash_copy};
use crate::support::races::on_worker_threads;
use crate::support::{catalog, delegator, leaf};

async fn build(model: ScriptedModel, catalog: Catalog, path: &Path, config: TreeConfig) -> Tree {
    Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(model)
        .tool(ok_tool("read"))
        .and_then(|b| b.tool(ok_tool("write")))
        .expect("tool names are free")
        .journal(JournalConfig::new(path))
        .build()
        .await
        .unwrap()
}

/// The journal a crash leaves after one completed agent `w`, with `tail` appended (what a
/// write cut off by the crash leaves).
async fn journal_with_tail(dir: &TempDir, tail: &[u8]) -> PathBuf {
    let (live, path) = (dir.file("live.journal"), dir.file("tree.journal"));
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
    let tree = build(model, catalog([leaf("w")]), &live, TreeConfig::default()).await;
    assert!(
        tree.run(SpawnRequest::new("w", "go"))
            .await
            .unwrap()
            .is_completed()
    );
    crash_copy(&tree, &live, &path).await;
    drop(tree);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(tail);
    std::fs::write(&path, &bytes).unwrap();
    path
}

/// Recovers from `path`, runs one more agent, shuts down, and reads the journal back.
async fn recover_run_and_reread(path: &Path) -> Result<usize, String> {
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("again")]));
    let tree = build(model, catalog([leaf("w")]), path, TreeConfig::default()).await;
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
    let next = tree.run(SpawnRequest::new("w", "more")).await.unwrap();
    assert!(next.is_completed());
    tree.shutdown().await;
    drop(tree);
    read_journal(path, None)
        .map(|r| r.records.len())
        .map_err(|e| e.to_string())
}

/// Rule (semantics "Journal and recovery": only the last line may be torn, it is dropped,
/// and "the journal goes on from there"): a journal recovered from a torn last line must
/// stay a journal that can be recovered again.
///
/// Defect: `open_journal` (actors/src/tree.rs, `FileJournal::open` after `read_journal`)
/// opens the file for appending without cutting the torn bytes off, so the recovered tree's
/// first entry is glued onto the torn line. That line is now in the middle of the file, and
/// the next recovery (or `read_journal`) fails: the journal is lost by the recovery itself.
#[tokio::test(start_paused = true)]
async fn a_journal_recovered_from_a_torn_last_line_recovers_again() {
    let dir = TempDir::new("torn-twice");
    let path = journal_with_tail(&dir, b"0badc0de {\"entry\":\"ev").await;
    assert_eq!(recover_run_and_reread(&path).await, Ok(3));
}

/// Rule: as above, for the other torn tail the docs name, "a tail of zero bytes".
///
/// Defect: the same (actors/src/tree.rs `open_journal`): the zeros stay, the next entries
/// are appended after them on the same line, and the second recovery fails on that line.
#[tokio::test(start_paused = true)]
async fn a_journal_recovered_from_a_zero_tail_recovers_again() {
    let dir = TempDir::new("zeros-twice");
    let path = journal_with_tail(&dir, &[0u8; 100]).await;
    assert_eq!(recover_run_and_reread(&path).await, Ok(3));
}

/// Rule (`TreeBuilder::journal`: a journal that holds a tree is recovered from, "the
/// journal goes on from there"; semantics: interrupted top-level agents are resumed with
/// `Tree::resume`): a tree built on the journal of a tree that was shut down gracefully (the
/// ordinary way a process ends) admits new agents and resumes old ones.
///
/// Defect: `Tree::shutdown` journals the root's `completing` event (the old tree "stopped
/// admitting agents"), and `Registry::recover` (actors/src/registry/recover.rs) takes the
/// root record from the fold as it is. The new tree's root stays `completing`, so every
/// `Tree::spawn` and every `Tree::resume` is refused with `OwnerClosed(a0)`: after a clean
/// restart of the process the tree can do nothing.
#[tokio::test(start_paused = true)]
async fn a_tree_recovered_after_a_graceful_shutdown_admits_and_resumes() {
    recovered_after_a_graceful_shutdown().await;
}

/// Both scenarios on two worker threads, many times: the shutdown, the crash copy, the
/// recovery, the resumes and the journal's writer interleave differently each time.
#[test]
fn recoveries_after_a_shutdown_and_while_completing_on_worker_threads() {
    on_worker_threads(10, Duration::from_secs(30), || async {
        recovered_after_a_graceful_shutdown().await;
        completing_agent_after_recovery().await;
    });
}

async fn recovered_after_a_graceful_shutdown() {
    let dir = TempDir::new("after-shutdown");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
    let tree = build(model, catalog([leaf("w")]), &path, TreeConfig::default()).await;
    assert!(
        tree.run(SpawnRequest::new("w", "go"))
            .await
            .unwrap()
            .is_completed()
    );
    tree.shutdown().await;
    drop(tree);

    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("again")]));
    let tree = build(model, catalog([leaf("w")]), &path, TreeConfig::default()).await;
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
    let resumed = tree.resume(AgentId::new(1), "more").await.map(|h| h.id());
    assert_eq!(resumed, Ok(AgentId::new(1)), "resume after recovery");
    let spawned = tree
        .spawn(SpawnRequest::new("w", "new"))
        .await
        .map(|h| h.id());
    assert_eq!(spawned, Ok(AgentId::new(2)), "spawn after recovery");
    tree.shutdown().await;
}

/// Guard: recover, run more, crash-copy, recover again (no torn tail): ids continue, the
/// records fold the same, and no id is reused.
#[tokio::test(start_paused = true)]
async fn a_journal_recovered_twice_keeps_ids_and_records() {
    let dir = TempDir::new("twice");
    let (one, two, three) = (
        dir.file("one.journal"),
        dir.file("two.journal"),
        dir.file("three.journal"),
    );
    let model = ScriptedModel::new()
        .script(
            "done",
            Script::new([Turn::answer("ok").usage(Usage::tokens(1, 1))]),
        )
        .script("hung", Script::new([Turn::hang()]));
    let cat = catalog([leaf("done"), leaf("hung")]);
    let tree = build(model.clone(), cat.clone(), &one, TreeConfig::default()).await;
    tree.run(SpawnRequest::new("done", "a")).await.unwrap();
    tree.spawn(SpawnRequest::new("hung", "b")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    crash_copy(&tree, &one, &two).await;
    drop(tree);
    let tree = build(model.clone(), cat.clone(), &two, TreeConfig::default()).await;
    assert_eq!(tree.interrupted(), [AgentId::new(2)]);
    let id = tree
        .spawn(SpawnRequest::new("hung", "c"))
        .await
        .unwrap()
        .id();
    assert_eq!(id, AgentId::new(3));
    tokio::time::sleep(Duration::from_millis(5)).await;
    crash_copy(&tree, &two, &three).await;
    drop(tree);
    let tree = build(model, cat, &three, TreeConfig::default()).await;
    assert_eq!(tree.interrupted(), [AgentId::new(2), AgentId::new(3)]);
    let next = tree.run(SpawnRequest::new("done", "d")).await.unwrap();
    assert!(next.is_completed());
    assert_eq!(tree.snapshot().agents().count(), 4);
    assert_eq!(tree.snapshot().records[0].subtree, Usage::tokens(2, 2));
    tree.shutdown().await;
}

/// Rule (semantics: recovery rebuilds "each agent's request, definition and conversation";
/// `Tree::resume`: "its conversation continues in a new run"): a completed agent resumed
/// after a recovery sees the same conversation it would have seen resumed before the crash,
/// its own final answer included.
///
/// Defect: the conversation is journaled only at turn boundaries, before each model call
/// (actors/src/agent/turn.rs `next_turn`); the final one, recorded by
/// `Registry::settle_run` (actors/src/registry/end.rs) with the last assistant message and
/// any unread steers, is never journaled. After recovery the resumed run's conversation
/// lacks the agent's own answer.
#[tokio::test(start_paused = true)]
async fn a_completed_agent_resumed_after_recovery_keeps_its_final_answer() {
    let dir = TempDir::new("final-answer");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::answer("first answer"), Turn::answer("second answer")]),
    );
    let tree = build(
        model.clone(),
        catalog([leaf("w")]),
        &live,
        TreeConfig::default(),
    )
    .await;
    let first = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(first.text.as_deref(), Some("first answer"));
    crash_copy(&tree, &live, &crashed).await;
    // Resumed in the tree that did not crash: the conversation holds the answer.
    let mut handle = tree.resume(AgentId::new(1), "follow up").await.unwrap();
    handle.outcome().await;
    let expected: Vec<(Role, String)> = model.log_of(AgentId::new(1))[1]
        .messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect();
    assert!(expected.contains(&(Role::Assistant, "first answer".to_owned())));
    tree.shutdown().await;
    drop(tree);

    let after = ScriptedModel::new().script("w", Script::new([Turn::answer("second answer")]));
    let tree = build(
        after.clone(),
        catalog([leaf("w")]),
        &crashed,
        TreeConfig::default(),
    )
    .await;
    let mut handle = tree.resume(AgentId::new(1), "follow up").await.unwrap();
    handle.outcome().await;
    let got: Vec<(Role, String)> = after.log_of(AgentId::new(1))[0]
        .messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect();
    assert_eq!(got, expected, "the resumed conversation after recovery");
    tree.shutdown().await;
}

/// Rule (`TreeConfig::attenuate_tools`: "a child's user tools are limited to those its
/// owner holds", a privilege boundary): a child resumed after recovery is as limited as it
/// was before the crash (and as a child resumed without a crash is: `reopen` keeps the
/// spec's `owner_capabilities`).
///
/// Defect: `spec_of` (actors/src/registry/recover.rs, `owner_capabilities: None`) rebuilds
/// every recovered agent's start spec without its owner's capabilities, so the child's
/// resumed run computes its tools unattenuated and is offered (and may call) `write`, which
/// its owner never held.
#[tokio::test(start_paused = true)]
async fn a_child_resumed_after_recovery_stays_attenuated() {
    let dir = TempDir::new("attenuate");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let cat = catalog([
        delegator("lead", &["worker"]).with_tools(ToolSet::only(["read"])),
        leaf("worker").with_tools(ToolSet::only(["read", "write"])),
    ]);
    let config = TreeConfig::default().with_attenuated_tools(true);
    let before = ScriptedModel::new()
        .script("lead", Script::new([Turn::spawn("worker", "dig")]))
        .script("worker", Script::new([Turn::hang()]));
    let tree = build(before.clone(), cat.clone(), &live, config.clone()).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .unwrap()
        .id();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let worker = AgentId::new(2);
    let user_tools = |tools: &[String]| -> Vec<String> {
        tools
            .iter()
            .filter(|t| ["read", "write"].contains(&t.as_str()))
            .cloned()
            .collect()
    };
    assert_eq!(user_tools(&before.log_of(worker)[0].tools), ["read"]);
    crash_copy(&tree, &live, &crashed).await;
    drop(tree);

    let after = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn("worker", "dig"),
                Turn::calls([Call::tool(
                    "Agent",
                    serde_json::json!({"resume": "a2", "prompt": ""}),
                )]),
                Turn::answer("done"),
            ]),
        )
        .script("worker", Script::new([Turn::answer("dug")]));
    let tree = build(after.clone(), cat, &crashed, config).await;
    let mut handle = tree.resume(lead, "").await.unwrap();
    handle.outcome().await;
    let calls = after.log_of(worker);
    assert!(!calls.is_empty(), "the worker was resumed");
    assert_eq!(
        user_tools(&calls[0].tools),
        ["read"],
        "the resumed worker's tools after recovery"
    );
    tree.shutdown().await;
}

/// Rule (semantics, supervision restarts: a restart "re-runs the original spawn request (a
/// fresh conversation, with the context it inherited, if any)"; recovery rebuilds each
/// agent's request for resumes and restarts): a child with `inherit_context` restarted after
/// recovery still gets its owner's context.
///
/// Defect: `spec_of` (actors/src/registry/recover.rs, `context: Vec::new()`) rebuilds the
/// start spec without the inherited context (the journal's `spawn` entry does not carry it),
/// so a restart after recovery re-runs the request with only its prompt.
#[tokio::test(start_paused = true)]
async fn a_restart_after_recovery_keeps_the_inherited_context() {
    let dir = TempDir::new("inherit");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let cat = catalog([
        delegator("lead", &["worker"]),
        leaf("worker")
            .with_inherit_context(true)
            .with_restart(RestartPolicy::Transient),
    ]);
    let before = ScriptedModel::new()
        .script("lead", Script::new([Turn::spawn("worker", "dig")]))
        .script("worker", Script::new([Turn::hang()]));
    let tree = build(before.clone(), cat.clone(), &live, TreeConfig::default()).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "the secret context"))
        .await
        .unwrap()
        .id();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let worker = AgentId::new(2);
    let has_context = |messages: &[Message]| {
        messages
            .iter()
            .any(|m| m.content.contains("the secret context"))
    };
    assert!(has_context(&before.log_of(worker)[0].messages));
    crash_copy(&tree, &live, &crashed).await;
    drop(tree);

    let after = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn("worker", "dig"),
                Turn::calls([Call::tool(
                    "Agent",
                    serde_json::json!({"resume": "a2", "prompt": ""}),
                )]),
                Turn::answer("done"),
            ]),
        )
        // The resumed run fails; the restart re-runs the request and answers.
        .script(
            "worker",
            Script::new([Turn::fail("flaky"), Turn::answer("dug")]),
        );
    let tree = build(after.clone(), cat, &crashed, TreeConfig::default()).await;
    let mut handle = tree.resume(lead, "").await.unwrap();
    handle.outcome().await;
    assert_eq!(
        tree.record(worker).unwrap().incarnation,
        2,
        "restarted once"
    );
    let calls = after.log_of(worker);
    assert_eq!(calls.len(), 2);
    assert!(
        has_context(&calls[1].messages),
        "the restarted run's conversation: {:?}",
        calls[1].messages
    );
    tree.shutdown().await;
}

/// Rule (semantics, lifetimes: "An outcome already decided stays: once a run has ended (the
/// agent holds its outcome while its children drain or settle), an abort, its owner's end or
/// a shutdown only cuts what still runs, and the agent settles with the outcome it held";
/// recovery rebuilds every settled outcome): an agent `completing` (its answer given, its
/// `drain` children still running) at the crash keeps its answer after recovery.
///
/// Defect: the `completing` event carries no outcome and the held outcome is journaled
/// nowhere (its final conversation neither, see above), so recovery
/// (actors/src/registry/recover.rs) settles it `aborted`/`interrupted` with no text and no
/// partial: the answer the model gave (and was billed for) is gone, and a resume re-runs it.
#[tokio::test(start_paused = true)]
async fn a_completing_agent_keeps_its_answer_after_recovery() {
    completing_agent_after_recovery().await;
}

async fn completing_agent_after_recovery() {
    let dir = TempDir::new("completing");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let cat = catalog([
        delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
        leaf("worker"),
    ]);
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn_background("worker", "dig"),
                Turn::answer("lead's answer"),
            ]),
        )
        .script("worker", Script::new([Turn::hang()]));
    let tree = build(model.clone(), cat.clone(), &live, TreeConfig::default()).await;
    let mut events = agent_tree::testkit::EventProbe::new(&tree);
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .unwrap()
        .id();
    events
        .expect_event("the lead completing", |e| {
            e.agent == lead && e.kind == agent_tree::protocol::EventKind::Completing
        })
        .await;
    assert_eq!(tree.record(lead).unwrap().status, AgentStatus::Completing);
    crash_copy(&tree, &live, &crashed).await;
    drop(tree);

    let tree = build(model, cat, &crashed, TreeConfig::default()).await;
    let outcome = tree.outcome(lead).unwrap();
    let kept = [outcome.text.as_deref(), outcome.partial.as_deref()];
    assert!(
        kept.contains(&Some("lead's answer")),
        "the held answer after recovery: {outcome:?}"
    );
    tree.shutdown().await;
}

/// Guard: compaction (rotation) followed by recovery keeps the spawns, the conversations and
/// the request ids: a resumed owner re-issuing its lost turn's spawn still gets the existing
/// child.
#[tokio::test(start_paused = true)]
async fn rotation_then_recovery_keeps_request_ids() {
    let dir = TempDir::new("rotate");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let cat = catalog([delegator("lead", &["worker"]), leaf("worker")]);
    let before = ScriptedModel::new()
        .script("lead", Script::new([Turn::spawn("worker", "dig")]))
        .script("worker", Script::new([Turn::hang()]));
    let tree = Tree::builder()
        .catalog(cat.clone())
        .model(before)
        .journal(JournalConfig::new(&live).rotate_at(256))
        .build()
        .await
        .unwrap();
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .unwrap()
        .id();
    tokio::time::sleep(Duration::from_millis(5)).await;
    // The writer answers a flush before it rotates after that batch: a second flush is
    // answered after the rotation.
    tree.flush_journal().await;
    crash_copy(&tree, &live, &crashed).await;
    drop(tree);
    let text = std::fs::read_to_string(&crashed).unwrap();
    assert!(
        text.contains("\"entry\":\"checkpoint\""),
        "compacted: {text}"
    );

    let after = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn("worker", "dig"), Turn::answer("done")]),
        )
        .script("worker", Script::new([Turn::answer("dug")]));
    let tree = build(after, cat, &crashed, TreeConfig::default()).await;
    assert_eq!(tree.interrupted(), [AgentId::new(1), AgentId::new(2)]);
    let mut handle = tree.resume(lead, "").await.unwrap();
    handle.outcome().await;
    assert_eq!(tree.snapshot().agents().count(), 2, "no second worker");
    tree.shutdown().await;
}

/// A checksum-valid journal: a header and one checkpoint of `records`.
fn crafted(path: &Path, records: Vec<AgentRecord>) {
    let mut text = JournalEntry::Header {
        version: JOURNAL_VERSION,
        session: SessionId::new("crafted"),
    }
    .to_line();
    text += &JournalEntry::Checkpoint {
        seq: 3,
        records,
        tally: Default::default(),
        at_ms: 0,
    }
    .to_line();
    std::fs::write(path, text).unwrap();
}

/// Rule (semantics: "Any other bad line ... fail[s] with the file and the line named";
/// nothing panics on any file content): building a tree on a checksum-valid journal whose
/// checkpoint is inconsistent fails with a `TreeError`, it does not panic.
///
/// Defect: replay checks a checkpoint only for its root record (protocol/src/journal.rs,
/// `JournalEntry::Checkpoint` in `Replay::take`), and `Registry::recover`
/// (actors/src/registry/recover.rs) trusts that records are dense by id. A checkpoint
/// holding two live records with id `a1` makes recovery emit `aborted` for `a1` twice; the
/// fold refuses the second and `Inner::emit_as` (actors/src/registry.rs,
/// `debug_assert!(false, "registry event refused by the fold")`) panics inside
/// `TreeBuilder::build` (in a release build the record at index 2 silently stays live).
#[tokio::test(start_paused = true)]
async fn a_checkpoint_with_a_repeated_id_fails_the_build_without_panicking() {
    let dir = TempDir::new("crafted");
    let path = dir.file("tree.journal");
    let live = AgentRecord {
        id: AgentId::new(1),
        agent_type: "w".into(),
        depth: 1,
        parent: Some(AgentId::ROOT),
        status: AgentStatus::Running,
        ..AgentRecord::root()
    };
    let mut root = AgentRecord::root();
    root.children = vec![AgentId::new(1), AgentId::new(1)];
    crafted(&path, vec![root, live.clone(), live]);
    let built = tokio::spawn(async move {
        Tree::builder()
            .catalog(catalog([leaf("w")]))
            .model(ScriptedModel::new())
            .journal(JournalConfig::new(&path))
            .build()
            .await
            .map(|tree| tree.snapshot().agents().count())
            .map_err(|e| e.to_string())
    })
    .await;
    match built {
        Ok(result) => assert!(
            result.is_err(),
            "an inconsistent checkpoint was accepted: {result:?}"
        ),
        Err(panic) => panic!("the build panicked on a crafted journal: {panic}"),
    }
}

/// A store whose writes panic (a bug in a store of the application's own,
/// `TreeBuilder::journal_store`).
struct PanickingStore;

impl JournalStore for PanickingStore {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        // The header goes through; the first entries do not.
        if bytes.windows(8).any(|w| w == b"\"header\"") {
            return Ok(());
        }
        panic!("store bug");
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        0
    }
    fn read(&self) -> io::Result<Vec<u8>> {
        Ok(Vec::new())
    }
}

/// Rule (semantics: when the journal stops, "the tree goes on, and nothing waits on the
/// journal any more"): a writer that is gone never holds new work back.
///
/// Defect: when the writer thread dies (a panic in the store), `Backlog::failed` is never set
/// and the entries it took are never released (actors/src/journal.rs, `Writer::run` has no
/// unwind guard; `JournalTap::room` waits for `queued < bound` forever): with a bound of 1,
/// `Tree::spawn` hangs for good, and `journal_error` says nothing.
// Real time: the writer is a thread of its own, so a paused clock would time the wait out
// before the thread has even run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_writer_does_not_hold_work_back_forever() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .journal_store(
            JournalConfig::new("unused.journal").max_queue(1),
            PanickingStore,
        )
        .build()
        .await
        .unwrap();
    let run = tokio::time::timeout(
        Duration::from_secs(60),
        tree.run(SpawnRequest::new("w", "a")),
    )
    .await;
    assert!(
        run.is_ok(),
        "the run waited for a dead journal writer (journal_error: {:?})",
        tree.journal_error()
    );
    tree.shutdown().await;
}
