//! A tool call's input (`ToolInput`, kept as compact JSON text): journal lines that hold it
//! as a JSON value decode, equal inputs hash equal, the sign of zero and deep nesting
//! survive, a user tool gets the value the model gave, orchestration tools read their typed
//! fields strictly, and a call nested past what parsers read back is not run.

use std::collections::HashSet;
use std::sync::Arc;

use agent_tree::prelude::*;
use agent_tree::protocol::{JournalEntry, ToolCall, ToolInput};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{FnTool, ToolError};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::harness::{a, results};
use crate::support::{build_tree, catalog, delegator, leaf, within};

/// An array nested `depth` deep around `1`.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// A journal line holding each call's input as a JSON value (any value, or none at all)
/// decodes through every path (spaced text with keys out of order, a `Value`) to the same
/// entry; each input keeps its value, held as compact text with sorted keys, and is written
/// back as JSON.
#[test]
fn journal_lines_holding_inputs_as_json_values_decode_and_keep_their_input() {
    // A conversation line as the journal writes it, with inputs spliced in as a line held
    // them while an input was a `Value` (one without an input at all).
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

/// Two calls with equal inputs are equal and hash equal, whatever the spacing and key order
/// of the text they came from.
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

/// The same deeply nested input serializes into a `Value` inside its call (the path
/// `serde_json::to_value` of a message takes), whole.
#[test]
fn a_deeply_nested_call_serializes_to_a_value() {
    let deep = nested(200);
    let call = ToolCall::new("c", "t", deep.clone());
    let value = serde_json::to_value(&call).expect("a call serializes to a Value");
    assert_eq!(value["input"], deep);
}

/// A tree with the user tool `echo`, which records each input it is given in `seen`.
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

/// A user tool gets the input the model gave, whole: objects, `null`, strings, arrays and
/// nesting up to the depth JSON parsers read back (`ToolInput::MAX_TEXT_DEPTH`).
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
        [
            Turn::calls(inputs.iter().cloned().map(|i| Call::tool("echo", i))),
            Turn::answer("done"),
        ],
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

/// The `error` field of a JSON refusal.
fn error_of(answer: &agent_tree::protocol::Message) -> String {
    let value: Value = serde_json::from_str(&answer.content).expect("a JSON refusal");
    value["error"].as_str().unwrap_or_default().to_owned()
}

/// The orchestration tools read a typed input: a string or an array is refused as "not a
/// JSON object of Agent's fields", a field of the wrong type is refused with serde's message
/// and no text position, and a `null` field reads as absent.
#[tokio::test(start_paused = true)]
async fn orchestration_inputs_refuse_non_objects_and_read_nulls_as_absent() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
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
            ],
        )
        .script("w", [Turn::answer("w done")]);
    let tree = build_tree(
        catalog([delegator("lead", &["w"]), leaf("w")]),
        model.clone(),
    )
    .await;
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
/// A call whose input nests past what JSON parsers read back is not run: its result is an
/// error, and the conversation keeps a `dropped` note in its place (the conversation goes to
/// providers and into the journal). The turn's other calls run.
#[tokio::test(start_paused = true)]
async fn a_call_nested_past_the_text_depth_is_not_run() {
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("echo", nested(ToolInput::MAX_TEXT_DEPTH + 1)),
                Call::tool("echo", json!({"ok": 1})),
            ]),
            Turn::answer("done"),
        ],
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
