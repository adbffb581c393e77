//! Building a tree on a file: what recovers, what starts afresh, and what is refused.
//! Nothing in a file's content makes the build panic, and a file that is no journal is
//! refused, never wiped.

use std::path::Path;

use agent_tree::JournalConfig;
use agent_tree::prelude::*;
use agent_tree::protocol::{AgentRecord, JOURNAL_VERSION, JournalEntry, SessionId};
use agent_tree::testkit::{Call, ScriptedModel, Turn};

use crate::support::journal::{TempDir, open_journal};
use crate::support::{catalog, leaf};

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

/// Building a tree on a checksum-valid journal whose checkpoint is inconsistent (two live
/// records with the same id) fails with a `TreeError`; it does not panic ("Any other bad
/// line ... fail[s] with the file and the line named"; nothing panics on any file content).
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

/// A JSON value nesting `depth` arrays.
fn nested(depth: usize) -> serde_json::Value {
    let mut value = serde_json::json!(0);
    for _ in 0..depth {
        value = serde_json::Value::Array(vec![value]);
    }
    value
}

/// A tree's own journal always recovers, even when it holds a tool call's input nested
/// deeper than a journal line may be parsed ("a tree built on a journal that holds one
/// rebuilds every record"; a call's input is "any JSON value", and `ToolInput` keeps inputs
/// deeper than the parser's limit): what the writer writes, recovery reads back.
#[tokio::test(start_paused = true)]
async fn a_journal_holding_a_deep_tool_input_still_recovers() {
    let dir = TempDir::new("deep-input");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("noop", nested(300))]),
            Turn::answer("done"),
        ],
    );
    let tree = open_journal(model.clone(), catalog([leaf("w")]), &path)
        .await
        .unwrap();
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    tree.shutdown().await;
    drop(tree);

    let again = open_journal(model, catalog([leaf("w")]), &path).await;
    let tree = again.expect("a tree's own journal recovers");
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
}

/// "A file that does not hold one whole line and can be what a crash left of the header
/// (zeros, or the start of a header line) starts afresh; any other such file is refused,
/// never wiped." A header's checksum is written in lower case only, so eight upper-case hex
/// digits (`DEADBEEF`) cannot be the start of a header line.
#[tokio::test(start_paused = true)]
async fn a_file_with_an_upper_case_checksum_is_refused_not_wiped() {
    refused_not_wiped(b"DEADBEEF").await;
}

/// The same rule: a file whose header text goes on with fields no header holds cannot be a
/// torn header (only its first bytes matching is not enough), and is refused, not wiped.
#[tokio::test(start_paused = true)]
async fn a_file_whose_header_holds_other_fields_is_refused_not_wiped() {
    refused_not_wiped(
        br#"0123abcd {"entry":"header","note":"my notes, not a journal: do not delete"}"#,
    )
    .await;
}

/// The start of a real header line (lower-case checksum, the header's own fields) is what a
/// crash leaves, and starts afresh.
#[tokio::test(start_paused = true)]
async fn a_real_torn_header_starts_afresh() {
    let dir = TempDir::new("torn-header");
    let path = dir.file("tree.journal");
    std::fs::write(&path, br#"0123abcd {"entry":"header","version":1,"sess"#).unwrap();
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let tree = open_journal(model, catalog([leaf("w")]), &path)
        .await
        .unwrap();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    tree.shutdown().await;
}

/// Builds on a file holding `bytes`: the build fails and the file still starts with them.
async fn refused_not_wiped(bytes: &[u8]) {
    let dir = TempDir::new("not-a-journal");
    let path = dir.file("tree.journal");
    std::fs::write(&path, bytes).unwrap();
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let built = open_journal(model, catalog([leaf("w")]), &path).await;
    let kept = std::fs::read(&path).unwrap();
    assert!(
        kept.starts_with(bytes),
        "the file was wiped: it holds {:?} (build: {:?})",
        String::from_utf8_lossy(&kept),
        built.as_ref().map(|_| "Ok").map_err(String::as_str)
    );
    assert!(built.is_err(), "a file that is no journal is refused");
}
