//! Review 24: the journal (crash recovery, torn headers, deep lines, calls closed at a run's
//! end, resumes after a crash). Each test names the rule it holds; passing ones are guards.

use std::path::Path;

use agent_tree::JournalConfig;
use agent_tree::prelude::*;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};

use crate::support::journal::{TempDir, crash_copy};
use crate::support::{catalog, leaf, unanswered};

async fn build(model: ScriptedModel, catalog: Catalog, path: &Path) -> Result<Tree, String> {
    Tree::builder()
        .catalog(catalog)
        .model(model)
        .journal(JournalConfig::new(path))
        .build()
        .await
        .map_err(|e| e.to_string())
}

/// A JSON value nesting `depth` arrays.
fn nested(depth: usize) -> serde_json::Value {
    let mut value = serde_json::json!(0);
    for _ in 0..depth {
        value = serde_json::Value::Array(vec![value]);
    }
    value
}

/// Rule ("Journal and recovery"): "a tree built on a journal that holds one rebuilds every
/// record ..."; "Only the last line may be torn". A tool call's input is "any JSON value"
/// ("An agent's run"), and `ToolInput` keeps inputs deeper than the parser's limit
/// (`Held::Deep`).
///
/// Defect: the writer journals a conversation line holding a 300-deep input (a model that
/// is not an HTTP adapter, here the scripted one, may return one), and every later build on
/// that journal refuses it ("nested ... more than the 256 a journal line may"): the tree's
/// own journal can no longer be opened, and everything in it is lost.
#[tokio::test(start_paused = true)]
async fn a_journal_holding_a_deep_tool_input_still_recovers() {
    let dir = TempDir::new("r24-deep");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::calls([Call::tool("noop", nested(300))]),
            Turn::answer("done"),
        ]),
    );
    let tree = build(model.clone(), catalog([leaf("w")]), &path)
        .await
        .unwrap();
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    tree.shutdown().await;
    drop(tree);

    let again = build(model, catalog([leaf("w")]), &path).await;
    let tree = again.expect("a tree's own journal recovers");
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
}

/// Rule ("Journal and recovery"): "A file that does not hold one whole line and can be what
/// a crash left of the header (zeros, or the start of a header line) starts afresh; any
/// other such file is refused, never wiped."
///
/// Defect: `torn_header` (actors/src/tree.rs) takes any 8 ASCII hex digits as a checksum,
/// upper case included, though `to_line` writes only lower case (and `from_line` refuses
/// upper case as corruption). A file holding `DEADBEEF` cannot be the start of a header
/// line, yet it is truncated to nothing.
#[tokio::test(start_paused = true)]
async fn a_file_that_cannot_be_a_torn_header_is_not_wiped_upper_case() {
    refused_not_wiped(b"DEADBEEF").await;
}

/// Same rule. Defect: `torn_header` compares only the first 18 bytes of the JSON
/// (`{"entry":"header",`); whatever follows is taken as a header's torn rest, so a file
/// whose text goes on with what no header holds is wiped.
#[tokio::test(start_paused = true)]
async fn a_file_that_cannot_be_a_torn_header_is_not_wiped_other_fields() {
    refused_not_wiped(
        br#"0123abcd {"entry":"header","note":"my notes, not a journal: do not delete"}"#,
    )
    .await;
}

/// Guard: the start of a real header line (lower-case checksum, the header's own fields) is
/// what a crash leaves, and starts afresh.
#[tokio::test(start_paused = true)]
async fn a_real_torn_header_starts_afresh() {
    let dir = TempDir::new("r24-torn-ok");
    let path = dir.file("tree.journal");
    std::fs::write(&path, br#"0123abcd {"entry":"header","version":1,"sess"#).unwrap();
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
    let tree = build(model, catalog([leaf("w")]), &path).await.unwrap();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    tree.shutdown().await;
}

async fn refused_not_wiped(bytes: &[u8]) {
    let dir = TempDir::new("r24-torn");
    let path = dir.file("tree.journal");
    std::fs::write(&path, bytes).unwrap();
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
    let built = build(model, catalog([leaf("w")]), &path).await;
    let kept = std::fs::read(&path).unwrap();
    assert!(
        kept.starts_with(bytes),
        "the file was wiped: it holds {:?} (build: {:?})",
        String::from_utf8_lossy(&kept),
        built.as_ref().map(|_| "Ok").map_err(String::as_str)
    );
    assert!(built.is_err(), "a file that is no journal is refused");
}

/// Guard (close_calls): a run aborted while its call is out keeps the call closed in its
/// journaled conversation; after a crash and recovery, a resume with an empty prompt sends
/// the model a conversation with a result for every call.
#[tokio::test(start_paused = true)]
async fn an_aborted_runs_open_call_is_closed_across_recovery() {
    let dir = TempDir::new("r24-close");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::calls([Call::tool(
            "slow",
            serde_json::json!({"x": 1}),
        )])]),
    );
    let log = model.call_log();
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .tool(FnTool::new("slow", "never returns", |_, _| async {
            std::future::pending::<()>().await;
            Ok("never".to_owned())
        }))
        .unwrap()
        .journal(JournalConfig::new(&live))
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let id = handle.id();
    log.until_calls(id, 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    tree.abort(id).unwrap();
    assert_eq!(handle.outcome().await.status, AgentStatus::Aborted);
    crash_copy(&tree, &live, &crashed).await;
    drop(tree);

    let after = ScriptedModel::new().script("w", Script::new([Turn::answer("resumed")]));
    let after_log = after.call_log();
    let tree = build(after, catalog([leaf("w")]), &crashed).await.unwrap();
    let mut handle = tree.resume(id, "").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("resumed"));
    let calls = after_log.of(id);
    assert_eq!(
        unanswered(&calls[0].messages),
        None,
        "{:?}",
        calls[0].messages
    );
    assert!(
        calls[0].messages.iter().any(|m| !m.tool_calls.is_empty()),
        "the aborted turn's call is in the conversation: {:?}",
        calls[0].messages
    );
    tree.shutdown().await;
}

/// An in-memory store: what it was given, readable by the test.
#[derive(Clone, Default)]
struct Memory(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

impl agent_tree::JournalStore for Memory {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        *self.0.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.lock().len() as u64
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.0.lock().clone())
    }
}

/// Rule ("Journal and recovery"): "A process kill loses only what was queued and not yet
/// written"; recovery rebuilds "each agent's request ... and conversation"; "A resume with
/// an empty prompt adds no message: the conversation continues as journaled, so the turn
/// the crash cut off is re-run".
///
/// Crash point: after a resume's `resumed` event was written, before its first turn
/// boundary's conversation line (a kill between two lines the writer wrote in order).
///
/// Defect: a resume's prompt is journaled nowhere but in that first conversation line
/// (`Registry::reopen` emits the event; the prompt lives in the actor until its first
/// turn), unlike a spawn's, which its `spawn` line holds before its admission event. After
/// the crash the resume `Tree::resume` accepted is gone: the agent is interrupted, and
/// resuming it with an empty prompt re-runs the earlier run's conversation, whose last
/// message is its old answer, without the task it was resumed with.
#[tokio::test(start_paused = true)]
async fn a_resumes_prompt_survives_a_crash_before_its_first_turn() {
    let dir = TempDir::new("r24-resume-prompt");
    let crashed = dir.file("crashed.journal");
    let store = Memory::default();
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::answer("first answer"), Turn::answer("second answer")]),
    );
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .journal_store(JournalConfig::new(&crashed), store.clone())
        .build()
        .await
        .unwrap();
    let mut handle = tree
        .spawn(SpawnRequest::new("w", "task one"))
        .await
        .unwrap();
    let id = handle.id();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("first answer"));
    let mut handle = tree.resume(id, "task two").await.unwrap();
    assert_eq!(
        handle.outcome().await.text.as_deref(),
        Some("second answer")
    );
    tree.shutdown().await;
    drop(tree);

    // The crash: right after the resume's `resumed` event, before its run's first turn
    // boundary wrote anything.
    let bytes = store.0.lock().clone();
    let text = String::from_utf8(bytes).unwrap();
    let mut kept = String::new();
    for line in text.split_inclusive('\n') {
        kept.push_str(line);
        if line.contains("\"resumed\"") {
            break;
        }
    }
    assert!(
        kept.contains("\"resumed\""),
        "the resume's event was written: {kept}"
    );
    std::fs::write(&crashed, kept).unwrap();

    let after = ScriptedModel::new().script("w", Script::new([Turn::answer("third answer")]));
    let log = after.call_log();
    let tree = build(after, catalog([leaf("w")]), &crashed).await.unwrap();
    assert_eq!(tree.interrupted(), [id], "the resumed run was interrupted");
    let mut handle = tree.resume(id, "").await.unwrap();
    handle.outcome().await;
    let calls = log.of(id);
    let messages = &calls[0].messages;
    assert!(
        messages.iter().any(|m| m.content == "task two"),
        "the re-run turn lost the task it was resumed with: {messages:?}"
    );
    tree.shutdown().await;
}
