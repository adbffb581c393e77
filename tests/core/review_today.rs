//! Review of today's changes: `ToolInput` (a tool call's input kept as compact JSON text),
//! the shutdown's kill-token cancel only for hooks on the caller's runtime, and the one-pass
//! `kill_runs`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{JournalEntry, ToolCall, ToolInput};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{FnTool, HookContext, HookError, ToolError};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::harness::{a, results};
use crate::support::races::{REAL_GUARD, bounded, on_worker_threads};
use crate::support::{catalog, delegator, leaf, within};

/// An array nested `depth` deep around `1`.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

// ---- ToolInput: wire compatibility --------------------------------------------------------

#[test]
fn journal_lines_written_before_decode_and_keep_their_input() {
    // A conversation line as the journal wrote it when the input was a `Value`: today's
    // line with the old inputs spliced in (one without an input at all).
    let line = JournalEntry::Conversation {
        agent: a(1),
        run: 1,
        from: 0,
        messages: vec![agent_tree::protocol::Message::assistant(
            "",
            (1..=6)
                .map(|i| ToolCall::new(format!("c{i}"), "t", json!(0)))
                .collect(),
        )]
        .into(),
    };
    let mut old = serde_json::to_value(&line).unwrap();
    let spliced = [
        Some(json!({"b": 1, "a": {"z": [1, 2.5, null], "y": "\u{e9}\n"}})),
        None,
        Some(json!(null)),
        Some(
            json!({"big": 18446744073709551615u64, "neg": -9223372036854775808i64, "f": 1e300, "z": -0.0}),
        ),
        Some(json!("a string")),
        Some(json!([1, "x"])),
    ];
    for (call, input) in old["messages"][0]["tool_calls"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip(spliced)
    {
        let fields = call.as_object_mut().unwrap();
        match input {
            Some(input) => fields.insert("input".to_owned(), input),
            None => fields.remove("input"),
        };
    }
    // Through every decode path: text (spaced, keys out of order), and a `Value`.
    let text = serde_json::to_string_pretty(&old).unwrap();
    let from_text: JournalEntry = serde_json::from_str(&text).expect("an old line decodes");
    let from_value: JournalEntry =
        serde_json::from_value(old.clone()).expect("an old value decodes");
    assert_eq!(from_text, from_value);
    let JournalEntry::Conversation { messages, .. } = &from_text else {
        panic!("a conversation: {from_text:?}")
    };
    let calls = &messages[0].tool_calls;
    let inputs: Vec<Value> = old["messages"][0]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.get("input").cloned().unwrap_or(Value::Null))
        .collect();
    for (call, input) in calls.iter().zip(&inputs) {
        assert_eq!(&call.input.to_value(), input, "{}", call.id);
        assert_eq!(call.input, ToolInput::from(input), "{}", call.id);
    }
    assert_eq!(calls[1].input.as_str(), "null");
    assert_eq!(
        calls[0].input.as_str(),
        r#"{"a":{"y":"é\n","z":[1,2.5,null]},"b":1}"#
    );
    // And back: the line written now decodes to the same entry, and its input is JSON.
    let again = serde_json::to_string(&from_text).unwrap();
    let back: JournalEntry = serde_json::from_str(&again).unwrap();
    assert_eq!(back, from_text);
    let as_value: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        as_value["messages"][0]["tool_calls"][0]["input"]["b"],
        json!(1)
    );
    assert_eq!(serde_json::to_value(&from_text).unwrap(), as_value);
}

#[test]
fn equal_tool_calls_hash_equal_whatever_their_source_spacing() {
    let a: ToolCall =
        serde_json::from_str(r#"{"id":"c","name":"t","input":{ "x" : 1 , "y":[ ] }}"#).unwrap();
    let b = ToolCall::new("c", "t", json!({"y": [], "x": 1}));
    assert_eq!(a, b);
    let set: HashSet<ToolInput> = [a.input.clone(), b.input.clone()].into_iter().collect();
    assert_eq!(set.len(), 1);
}

/// `serde_json` holds `-0.0 == 0.0`; an input keeps the sign (it is sent back to the model
/// as written), so the two are different inputs, as `ToolInput` documents.
#[test]
fn negative_zero_keeps_its_sign_and_is_its_own_input() {
    let (neg, pos) = (json!({"x": -0.0}), json!({"x": 0.0}));
    assert_eq!(neg, pos, "serde_json's values are equal");
    assert_eq!(ToolInput::from(&neg).as_str(), r#"{"x":-0.0}"#);
    assert_eq!(
        ToolInput::from(&neg).to_value()["x"]
            .as_f64()
            .map(f64::is_sign_negative),
        Some(true)
    );
    assert_ne!(ToolInput::from(&neg), ToolInput::from(&pos));
}

/// A deeply nested input (built in code: a `Value` has no depth limit) is kept as it was
/// given: `to_value` must not turn it into `null` silently.
#[test]
fn a_deeply_nested_input_survives_to_value() {
    let deep = nested(200);
    let input = ToolInput::from(&deep);
    assert_ne!(input.as_str(), "null", "the text was lost at construction");
    assert_eq!(input.to_value(), deep, "to_value of a 200-deep input");
}

/// The same input serialized into a `Value` (the path `serde_json::to_value` of a message
/// takes): it worked while the input was a `Value`.
#[test]
fn a_deeply_nested_call_serializes_to_a_value() {
    let deep = nested(200);
    let call = ToolCall::new("c", "t", deep.clone());
    let value = serde_json::to_value(&call).expect("a call serializes to a Value");
    assert_eq!(value["input"], deep);
}

// ---- ToolInput: a user tool gets the call's value -----------------------------------------

async fn echo_tree(model: ScriptedModel, seen: Arc<Mutex<Vec<Value>>>) -> Tree {
    let tool = FnTool::new("echo", "records its input", move |_ctx, input: Value| {
        let seen = seen.clone();
        async move {
            seen.lock().push(input);
            Ok::<String, ToolError>("ok".to_owned())
        }
    });
    Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .tool(tool)
        .expect("a free name")
        .build()
        .await
        .expect("the tree builds")
}

#[tokio::test(start_paused = true)]
async fn a_user_tool_gets_the_input_the_model_gave() {
    // Whole, up to the depth JSON parsers read back (`ToolInput::MAX_TEXT_DEPTH`); a call
    // nested deeper is not run (`a_call_nested_past_the_text_depth_is_not_run`).
    let inputs = [
        json!({"path": "a.rs", "n": 3, "f": 0.1, "u": "\u{1F600}"}),
        json!(null),
        json!("text"),
        json!([1, 2]),
        nested(ToolInput::MAX_TEXT_DEPTH - 1),
    ];
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::calls(inputs.iter().cloned().map(|i| Call::tool("echo", i))),
            Turn::answer("done"),
        ]),
    );
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let tree = echo_tree(model, seen.clone()).await;
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    within("the run", handle.outcome()).await;
    let mut got = seen.lock().clone();
    // Calls may run at once; compare as sets of text.
    let mut want: Vec<String> = inputs.iter().map(Value::to_string).collect();
    let mut got_text: Vec<String> = got.drain(..).map(|v| v.to_string()).collect();
    want.sort();
    got_text.sort();
    assert_eq!(got_text.len(), want.len());
    for (g, w) in got_text.iter().zip(&want) {
        assert!(g == w, "the tool got {:.60}… for {:.60}…", g, w);
    }
}

// ---- ToolInput: orchestration tools' typed input ------------------------------------------

fn error_of(answer: &agent_tree::protocol::Message) -> String {
    let value: Value = serde_json::from_str(&answer.content).expect("a JSON refusal");
    value["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(start_paused = true)]
async fn orchestration_inputs_refuse_non_objects_and_read_nulls_as_absent() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([
                    Call::tool("Agent", json!("spawn a worker")),
                    Call::tool("Agent", json!([1])),
                    Call::tool("Agent", json!({"agent_type": 3, "prompt": "x"})),
                    Call::tool(
                        "Agent",
                        json!({"agent_type": null, "type": "w", "prompt": "go", "description": null, "resume": null, "background": null}),
                    ),
                ]),
                Turn::answer("done"),
            ]),
        )
        .script("w", Script::new([Turn::answer("w done")]));
    let tree = Tree::builder()
        .catalog(catalog([delegator("lead", &["w"]), leaf("w")]))
        .model(model.clone())
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    within("the run", handle.outcome()).await;
    let answers = results(&model, a(1), 1);
    assert_eq!(answers.len(), 4, "{answers:?}");
    for answer in &answers[..2] {
        assert!(answer.is_error, "{answer:?}");
        assert_eq!(
            error_of(answer),
            "invalid input: expected a JSON object of Agent's fields"
        );
    }
    assert!(answers[2].is_error);
    assert!(
        error_of(&answers[2]).starts_with("invalid input: invalid type: integer `3`"),
        "{}",
        answers[2].content
    );
    assert!(
        !answers[2].content.contains("line") && !answers[2].content.contains("column"),
        "no text position: {}",
        answers[2].content
    );
    assert!(
        !answers[3].is_error,
        "nulls are absent: {}",
        answers[3].content
    );
}

// ---- Shutdown: no hook task outlives the call ----------------------------------------------

/// Counts hook futures alive (started, not dropped).
#[derive(Clone, Default)]
struct Live(Arc<AtomicUsize>);

struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Live {
    fn hook(&self) -> impl agent_tree::Hook + use<> {
        let live = self.0.clone();
        move |_ctx: HookContext| {
            let live = live.clone();
            async move {
                live.fetch_add(1, Ordering::SeqCst);
                let _guard = LiveGuard(live);
                // A hook that never returns and ignores its deadline.
                std::future::pending::<()>().await;
                Ok::<(), HookError>(())
            }
        }
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

fn team(workers: usize) -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls((0..workers).map(|i| Call::spawn_background("w", format!("part {i}")))),
                Turn::hang(),
            ]),
        )
        .script("w", Script::new([Turn::hang()]))
}

async fn team_tree(workers: usize, grace: Duration, live: &Live) -> Tree {
    let model = team(workers);
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(grace))
        .catalog(catalog([delegator("lead", &["w"]), leaf("w")]))
        .model(model.clone())
        .on_shutdown(live.hook())
        .build()
        .await
        .unwrap();
    tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    // Every worker has started (its one call hangs).
    while model.calls() < workers + 2 {
        tokio::task::yield_now().await;
    }
    tree
}

#[tokio::test(start_paused = true)]
async fn no_hook_outlives_shutdown_current_thread() {
    let live = Live::default();
    let tree = team_tree(4, Duration::from_millis(5), &live).await;
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.killed.len(), 5, "{report:?}");
    assert!(report.graceful.is_empty(), "{report:?}");
    assert_eq!(report.hook_failures.len(), 5, "{report:?}");
    // The hook tasks were cancelled: let them run once.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(live.count(), 0, "hook futures still alive after shutdown");
    assert!(tree.alive_actors().is_empty());
}

/// Tiny graces on worker threads: the kill can come before (or while) the first agent starts
/// its hooks. A hook started then must still end with the shutdown.
#[test]
fn no_hook_outlives_shutdown_multi_thread() {
    let round = AtomicUsize::new(0);
    on_worker_threads(40, Duration::from_secs(60), || {
        let n = round.fetch_add(1, Ordering::SeqCst) as u64;
        async move {
            let live = Live::default();
            let grace = Duration::from_micros(1 + 50 * (n % 20));
            let tree = team_tree(4, grace, &live).await;
            let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
            assert!(report.graceful.is_empty(), "{report:?}");
            assert!(tree.alive_actors().is_empty(), "run {n}");
            // Tasks on a stopped hook runtime are dropped by its own threads: allow them a
            // bounded moment, never forever.
            bounded(REAL_GUARD, "the hook futures' drop", async {
                while live.count() != 0 {
                    tokio::task::yield_now().await;
                }
            })
            .await;
            drop(tree);
        }
    });
}

#[tokio::test(start_paused = true)]
async fn a_subtree_shutdown_inside_a_tree_shutdown_leaves_no_hook() {
    // Overlapping: shutdown_agent(lead) and the tree's shutdown, one grace each.
    let live = Live::default();
    let tree = Arc::new(team_tree(4, Duration::from_millis(20), &live).await);
    let t = tree.clone();
    let sub = tokio::spawn(async move { t.shutdown_agent(a(1)).await });
    tokio::task::yield_now().await;
    let report = within("shutdown", tree.shutdown()).await;
    let sub = sub.await.unwrap().unwrap();
    let mut killed: Vec<AgentId> = report.killed.iter().chain(&sub.killed).copied().collect();
    killed.sort();
    killed.dedup();
    assert_eq!(killed.len(), 5, "{report:?} {sub:?}");
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        live.count(),
        0,
        "hook futures still alive after both shutdowns"
    );
    assert!(tree.alive_actors().is_empty());
}

/// A shutdown dropped before its kill: its backstop still ends the hooks a little after
/// the deadline.
#[tokio::test(start_paused = true)]
async fn a_dropped_shutdown_still_ends_its_hooks() {
    let live = Live::default();
    let tree = team_tree(3, Duration::from_millis(20), &live).await;
    let _ = tokio::time::timeout(Duration::from_millis(5), tree.shutdown()).await;
    assert_eq!(live.count(), 4, "every agent runs its hook");
    tokio::time::sleep(
        Duration::from_millis(20) + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(1),
    )
    .await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        live.count(),
        0,
        "hooks of a dropped shutdown outlive its deadline"
    );
}

// ---- kill_runs: the report of a deep chain ------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_deep_chain_overrunning_is_killed_once_each_in_the_report() {
    let depth = 30u64;
    let mut model = ScriptedModel::new();
    model = model.script(
        "c",
        Script::new([
            Turn::calls([Call::spawn_background("c", "deeper")]),
            Turn::hang(),
        ]),
    );
    let live = Live::default();
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(Duration::from_millis(10))
                .with_max_depth(depth as u32),
        )
        .catalog(catalog([
            AgentDefinition::new("c", "").with_allowed_subagents(SubagentAllowance::only(["c"]))
        ]))
        .model(model.clone())
        .on_shutdown(live.hook())
        .build()
        .await
        .unwrap();
    tree.spawn(SpawnRequest::new("c", "go")).await.unwrap();
    for _ in 0..10_000 {
        if tree.snapshot().agents().count() as u64 >= depth {
            break;
        }
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let n = tree.snapshot().agents().count();
    let report = within("shutdown", tree.shutdown()).await;
    let mut killed = report.killed.clone();
    killed.sort();
    killed.dedup();
    assert_eq!(killed.len(), report.killed.len(), "each once: {report:?}");
    assert_eq!(report.killed.len() + report.graceful.len(), n, "{report:?}");
    assert!(tree.alive_actors().is_empty());
    let snapshot = tree.snapshot();
    for id in &report.killed {
        assert_eq!(
            snapshot.record(*id).map(|r| r.status),
            Some(AgentStatus::Killed),
            "{id}"
        );
    }
}

/// A call whose input nests past what JSON parsers read back is not run: its result is an
/// error, and the conversation keeps a `dropped` note in its place (the conversation goes to
/// providers and into the journal). The turn's other calls run.
#[tokio::test(start_paused = true)]
async fn a_call_nested_past_the_text_depth_is_not_run() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::calls([
                Call::tool("echo", nested(ToolInput::MAX_TEXT_DEPTH + 1)),
                Call::tool("echo", json!({"ok": 1})),
            ]),
            Turn::answer("done"),
        ]),
    );
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let tree = echo_tree(model.clone(), seen.clone()).await;
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    within("the run", handle.outcome()).await;
    assert_eq!(
        seen.lock().clone(),
        [json!({"ok": 1})],
        "only the shallow call ran"
    );
    let second = &model.log_of(handle.id())[1].messages;
    let call = &second[1].tool_calls[0];
    assert!(call.input.as_str().contains("dropped"), "{call:?}");
    let result = &second[2];
    assert!(
        result.is_error && result.content.contains("not run"),
        "{result:?}"
    );
}
