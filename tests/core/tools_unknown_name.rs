//! A tool call the agent cannot make (a name no tool has, a registered tool outside the
//! agent's allowlist, an orchestration tool an agent without delegation calls anyway, a tool
//! that panics) gives an error tool result, never a crash: the other calls of the same turn
//! still run, the agent takes its next turn and completes, and nothing is spawned.

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{FnTool, ToolError};
use serde_json::json;

use crate::support::run_within;
use crate::support::{RecordingModel, catalog, leaf, read_result_call, spawn_admitted, within};

fn scripted() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "reader",
            [
                Turn::calls([
                    Call::tool("no_such_tool", json!({ "x": 1 })),
                    Call::tool("read", json!({ "path": "notes.txt" })),
                    Call::tool("write", json!({ "path": "notes.txt" })),
                    Call::tool("", json!("not even an object")),
                    Call::tool("explode", json!({})),
                ]),
                Turn::answer("reader done"),
            ],
        )
        .script(
            "plain",
            [
                Turn::calls([
                    Call::spawn("reader", "sneak a child in"),
                    Call::tool(
                        "steer_subagent",
                        json!({ "agent_id": "a1", "message": "hi" }),
                    ),
                    read_result_call("a1"),
                ]),
                Turn::answer("plain done"),
            ],
        )
}

/// A tool call the agent cannot make (an unknown name, a tool outside its allowlist, an
/// orchestration tool without delegation, a tool that panics) is an error result, never a
/// crash: the turn's other calls run and the agent completes.
#[tokio::test(start_paused = true)]
async fn calls_the_agent_cannot_make_are_error_results() {
    let model = RecordingModel::new(scripted());
    let tree = Tree::builder()
        .catalog(catalog([
            leaf("reader").with_tools(ToolSet::only(["read", "explode"])),
            leaf("plain"),
        ]))
        .model(model.clone())
        .tool(FnTool::new("read", "reads a file", |_, input| async move {
            Ok(format!("contents of {}", input["path"]))
        }))
        .expect("free name")
        .tool(FnTool::new("write", "writes a file", |_, _| async {
            Ok::<_, ToolError>("written".to_owned())
        }))
        .expect("free name")
        .tool(FnTool::new("explode", "panics", |_, _| async {
            if true {
                panic!("tool blew up");
            }
            Ok::<_, ToolError>(String::new())
        }))
        .expect("free name")
        .build()
        .await
        .expect("tree builds");

    let mut reader = spawn_admitted(&tree, SpawnRequest::new("reader", "read")).await;
    let outcome = within("reader", reader.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("reader done"), "{outcome:?}");
    let turn2 = model.request(reader.id(), 2);
    let result = |call: &str| turn2.tool_result(call).expect("every call is answered");

    let unknown = result("call_1_0");
    assert!(unknown.is_error, "{unknown:?}");
    assert!(unknown.content.contains("no_such_tool"), "{unknown:?}");
    let read = result("call_1_1");
    assert!(!read.is_error, "{read:?}");
    assert_eq!(read.content, "contents of \"notes.txt\"");
    let write = result("call_1_2");
    assert!(write.is_error, "a tool outside the allowlist: {write:?}");
    assert!(write.content.contains("write"), "{write:?}");
    let blank = result("call_1_3");
    assert!(blank.is_error, "{blank:?}");
    let explode = result("call_1_4");
    assert!(explode.is_error, "{explode:?}");
    assert!(explode.content.contains("tool blew up"), "{explode:?}");
    assert_eq!(crate::support::tool_results(&turn2.messages).len(), 5);

    // An agent without delegation calling orchestration tools by name.
    let plain = run_within(&tree, "plain", SpawnRequest::new("plain", "try")).await;
    assert_eq!(plain.text.as_deref(), Some("plain done"), "{plain:?}");
    let snapshot = tree.snapshot();
    let plain_id = crate::support::only_of_type(&snapshot, "plain");
    let turn2 = model.request(plain_id, 2);
    for call in ["call_1_0", "call_1_1", "call_1_2"] {
        let r = turn2.tool_result(call).expect("answered");
        assert!(r.is_error, "{call}: {r:?}");
    }
    let offered = model.request(plain_id, 1).tools;
    assert!(
        offered
            .iter()
            .all(|t| !agent_tree::ORCHESTRATION_TOOLS.contains(&t.as_str())),
        "no orchestration tools offered to plain: {offered:?}"
    );
    assert!(
        snapshot
            .record(plain_id)
            .expect("record")
            .children
            .is_empty()
    );
    assert_eq!(snapshot.agents().count(), 2, "{}", snapshot.render_text());
    assert!(
        snapshot
            .agents()
            .all(|r| r.status == AgentStatus::Completed)
    );
    assert!(
        model
            .request(reader.id(), 1)
            .tools
            .iter()
            .all(|t| t == "read" || t == "explode" || t == "ask_owner"),
        "reader is offered only its allowlist (and ask_owner, which every agent holds)"
    );

    within("shutdown", tree.shutdown()).await;
}
