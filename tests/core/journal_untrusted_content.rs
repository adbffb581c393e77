//! What the journal is handed from outside never costs the tree its journal or the user a
//! file: a model's deeply nested tool input (as deep as a provider adapter parses) is written
//! so that the journal still recovers, and a journal path holding a file that is no journal
//! is refused and left as it was, never taken for a torn header and wiped.

use agent_tree::JournalConfig;
use agent_tree::prelude::*;
use agent_tree::protocol::ToolCall;
use agent_tree::testkit::{FnModel, ScriptedModel};
use serde_json::{Value, json};

use crate::support::harness::{GUARD, a};
use crate::support::journal::{TempDir, journaled_tree};
use crate::support::{catalog, leaf};

/// An array nested `depth` deep around `1`.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// A model whose first turn calls tool `probe` with an input nested `depth` deep (what an
/// adapter parses from a provider's arguments string, well within `serde_json`'s limit of
/// 128), and whose second answers.
fn deep_call(depth: usize) -> FnModel {
    FnModel::new(move |request: ModelRequest| async move {
        if request.turn == 1 {
            let input = json!({ "payload": nested(depth) });
            Ok(ModelResponse::calls(vec![ToolCall::new(
                "c1", "probe", input,
            )]))
        } else {
            Ok(ModelResponse::text("done"))
        }
    })
}

/// A model's input never makes the journal unrecoverable: a tool input nested 126 deep (an
/// OpenAI adapter parses such `arguments` without complaint) is kept in the conversation and
/// written into the journal's `conversation` line, whose extra levels of wrapping do not put
/// the line past the reader's limit: a tree built on that journal recovers the agent.
#[tokio::test(start_paused = true)]
async fn a_deeply_nested_tool_input_does_not_make_the_journal_unreadable() {
    // What a provider adapter would hand over: text parsed by serde_json.
    let text = serde_json::to_string(&json!({ "payload": nested(125) })).unwrap();
    assert!(
        serde_json::from_str::<Value>(&text).is_ok(),
        "a model can send it"
    );
    let dir = TempDir::new("journal-deep-input");
    let path = dir.file("tree.journal");
    let journal = JournalConfig::new(&path);
    let tree = journaled_tree(deep_call(125), catalog([leaf("w")]), journal).await;
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    tree.shutdown().await;
    drop(tree);
    let reopened = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(deep_call(125))
        .journal(JournalConfig::new(&path))
        .build()
        .await;
    assert!(
        reopened.is_ok(),
        "a journal holding a model's deeply nested tool input cannot be recovered: {}",
        reopened.err().map(|e| e.to_string()).unwrap_or_default()
    );
    let tree = reopened.unwrap();
    assert_eq!(
        tree.record(a(1)).map(|r| r.status),
        Some(AgentStatus::Completed)
    );
    tree.shutdown().await;
}

/// A journal path holding a file that is not a journal is refused naming the file, with or
/// without a trailing newline: only bytes that could be the start of a header line (or
/// zeros) are a torn header, so a tree pointed at the wrong file (a key, a minified JSON,
/// any text without a newline) leaves it as it was.
#[tokio::test(start_paused = true)]
async fn a_file_that_is_no_journal_is_refused_not_wiped() {
    let dir = TempDir::new("journal-not-a-journal");
    let path = dir.file("settings.json");
    let original = br#"{"api_key":"sk-not-a-journal","region":"eu"}"#;
    std::fs::write(&path, original).unwrap();
    let built = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(ScriptedModel::new())
        .journal(JournalConfig::new(&path))
        .build()
        .await;
    let refused = built.is_err();
    if let Ok(tree) = built {
        tree.shutdown().await;
    }
    let now = std::fs::read(&path).unwrap();
    assert!(
        refused && now == original,
        "a file that holds no journal was {} and now reads {:?}",
        if refused {
            "refused"
        } else {
            "taken as a journal"
        },
        String::from_utf8_lossy(&now[..now.len().min(80)])
    );
}
