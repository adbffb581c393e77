//! Malformed-input tests for every `Wire` type of the protocol crate.
//!
//! Garbage text, truncated fixtures, wrong JSON types, unknown event kinds and invalid agent
//! ids must all decode to `Err(ProtocolError::Json { what, .. })` where `what` is the type's
//! `Wire::WHAT` and the error's Display names it. Property tests feed arbitrary strings and
//! random mutations (truncation, byte flips, structural splices) of the golden fixtures to
//! every `from_json` and check that nothing panics, and that anything accepted re-encodes to
//! JSON that decodes to the same value.

use std::fmt::Debug;

use agent_tree_protocol::{
    AgentDefinition, AgentId, AgentRecord, AgentStatus, Event, EventTally, Message, ProtocolError,
    SpawnRequest, ToolCall, ToolSpec, TreeSnapshot, Usage, Wire,
};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

macro_rules! fixture {
    ($name:literal) => {
        ($name, include_str!(concat!("../fixtures/", $name)))
    };
}

/// Every golden fixture (name, text).
const FIXTURES: &[(&str, &str)] = &[
    fixture!("agent_definition.json"),
    fixture!("agent_definition_words.json"),
    fixture!("spawn_request.json"),
    fixture!("spawn_request_minimal.json"),
    fixture!("usage.json"),
    fixture!("outcome_completed.json"),
    fixture!("outcome_failed.json"),
    fixture!("outcome_aborted.json"),
    fixture!("event_started_root.json"),
    fixture!("event_queued.json"),
    fixture!("event_usage_reported.json"),
    fixture!("event_restarted.json"),
    fixture!("event_context_dropped.json"),
    fixture!("event_completed.json"),
    fixture!("event_failed.json"),
    fixture!("event_aborted.json"),
    fixture!("event_tally.json"),
    fixture!("agent_record.json"),
    fixture!("tree_snapshot.json"),
    fixture!("message.json"),
    fixture!("message_tool_result.json"),
    fixture!("tool_call.json"),
    fixture!("tool_spec.json"),
];

fn fixture_text(name: &str) -> &'static str {
    FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

fn fixture_value(name: &str) -> Value {
    serde_json::from_str(fixture_text(name)).expect("fixture is JSON")
}

/// Decoding `text` as `T` fails with a JSON error naming `T`; returns the Display text.
fn assert_rejects<T: Wire + Debug>(text: &str) -> String {
    match T::from_json(text) {
        Ok(value) => panic!("{} accepted {text:?} as {value:?}", T::WHAT),
        Err(err @ ProtocolError::Json { what, .. }) => {
            assert_eq!(what, T::WHAT, "wrong `what` for {text:?}");
            let shown = err.to_string();
            let prefix = format!("malformed {}: ", T::WHAT);
            assert!(
                shown.starts_with(&prefix),
                "{shown:?} does not name {:?}",
                T::WHAT
            );
            shown
        }
        Err(other) => panic!("{}: {text:?} gave a non-JSON error {other:?}", T::WHAT),
    }
}

/// Like [`assert_rejects`], and the message gives the cause.
fn assert_rejects_because<T: Wire + Debug>(text: &str, cause: &str) {
    let shown = assert_rejects::<T>(text);
    assert!(
        shown.contains(cause),
        "{shown:?} does not mention {cause:?}"
    );
}

/// Calls `$check::<T>($text)` for every `Wire` type.
macro_rules! for_every_wire_type {
    ($check:ident, $text:expr) => {{
        let text: &str = $text;
        $check::<AgentDefinition>(text);
        $check::<SpawnRequest>(text);
        $check::<Usage>(text);
        $check::<agent_tree_protocol::Outcome>(text);
        $check::<Event>(text);
        $check::<EventTally>(text);
        $check::<AgentRecord>(text);
        $check::<TreeSnapshot>(text);
        $check::<Message>(text);
        $check::<ToolCall>(text);
        $check::<ToolSpec>(text);
        $check::<AgentStatus>(text);
        $check::<AgentId>(text);
    }};
}

/// The type a fixture decodes to, by its name.
macro_rules! with_fixture_type {
    ($name:expr, $check:ident, $text:expr) => {{
        let name: &str = $name;
        let text: &str = $text;
        match name {
            n if n.starts_with("agent_definition") => $check::<AgentDefinition>(text),
            n if n.starts_with("spawn_request") => $check::<SpawnRequest>(text),
            "usage.json" => $check::<Usage>(text),
            n if n.starts_with("outcome_") => $check::<agent_tree_protocol::Outcome>(text),
            "event_tally.json" => $check::<EventTally>(text),
            n if n.starts_with("event_") => $check::<Event>(text),
            "agent_record.json" => $check::<AgentRecord>(text),
            "tree_snapshot.json" => $check::<TreeSnapshot>(text),
            n if n.starts_with("message") => $check::<Message>(text),
            "tool_call.json" => $check::<ToolCall>(text),
            "tool_spec.json" => $check::<ToolSpec>(text),
            other => panic!("fixture {other} has no type"),
        }
    }};
}

// ---------------------------------------------------------------------------------------
// Garbage and truncation
// ---------------------------------------------------------------------------------------

#[test]
fn garbage_text_is_rejected_by_every_type() {
    let garbage = [
        "",
        "   \n\t",
        "not json",
        "{",
        "}",
        "[",
        "[1,",
        "{\"a\":}",
        "{'single': 1}",
        "{\"unterminated",
        "\"unterminated",
        "nul",
        "tru",
        "NaN",
        "0x10",
        "-",
        "1e",
        "{} {}",
        "{}}",
        "\"a1\" \"a2\"",
        "\u{feff}{}",
        "\0",
        "{\"seq\":1,}",
        "\u{fffd}\u{fffd}",
    ];
    for text in garbage {
        for_every_wire_type!(assert_rejects, text);
    }
}

#[test]
fn every_truncation_of_every_fixture_is_rejected() {
    for (name, text) in FIXTURES {
        let text = text.trim_end();
        for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            with_fixture_type!(name, assert_rejects, &text[..cut]);
        }
        // Also compacted, where the cut lands inside tokens more often.
        let compact = fixture_value(name).to_string();
        for cut in (0..compact.len()).filter(|&i| compact.is_char_boundary(i)) {
            with_fixture_type!(name, assert_rejects, &compact[..cut]);
        }
    }
}

#[test]
fn fixtures_of_another_shape_are_rejected() {
    // Types with required fields or denied unknown fields refuse other types' fixtures.
    for name in ["usage.json", "tool_call.json", "spawn_request.json"] {
        let text = fixture_text(name);
        if name != "spawn_request.json" {
            assert_rejects::<SpawnRequest>(text);
        }
        assert_rejects::<agent_tree_protocol::Outcome>(text);
        assert_rejects::<Event>(text);
        assert_rejects::<AgentRecord>(text);
        assert_rejects::<TreeSnapshot>(text);
        assert_rejects::<Message>(text);
        assert_rejects::<ToolSpec>(text);
        assert_rejects::<AgentStatus>(text);
        assert_rejects::<AgentId>(text);
        if name != "usage.json" {
            assert_rejects::<Usage>(text);
            assert_rejects::<EventTally>(text);
        }
        if name != "tool_call.json" {
            assert_rejects::<ToolCall>(text);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Wrong types, per type
// ---------------------------------------------------------------------------------------

#[test]
fn agent_definition_wrong_types() {
    for text in [
        "null",
        "\"planner\"",
        "42",
        "[1]",
        r#"{"name": 5}"#,
        r#"{"prompt": ["p"]}"#,
        r#"{"max_turns": -1}"#,
        r#"{"max_turns": "ten"}"#,
        r#"{"max_restarts": 4294967296}"#,
        r#"{"restart_period_ms": 1.5}"#,
        r#"{"tools": [1, 2]}"#,
        r#"{"tools": {"read": true}}"#,
        r#"{"allowed_subagents": 3}"#,
        r#"{"allowed_subagents": [true]}"#,
        // The words rule: a deny list names tools, and a keyword never sits among names.
        r#"{"disallowed_tools": "all"}"#,
        r#"{"disallowed_tools": ["bash", "None"]}"#,
        r#"{"disallowed_tools": true}"#,
        r#"{"tools": "read, all"}"#,
        r#"{"tools": "true"}"#,
        r#"{"allowed_subagents": "writer, *"}"#,
        r#"{"restart": "sometimes"}"#,
        r#"{"strategy": "one_for_some"}"#,
        r#"{"settle": null}"#,
        r#"{"enabled": "yes"}"#,
        r#"{"isolated": 1}"#,
        r#"{"name": "a", "name": "b"}"#,
    ] {
        assert_rejects::<AgentDefinition>(text);
    }
    assert_rejects_because::<AgentDefinition>(
        r#"{"tools": true}"#,
        "field `tools`: expected `all`, `none` or tool names",
    );
    assert_rejects_because::<AgentDefinition>(r#"{"restart": "sometimes"}"#, "sometimes");
}

#[test]
fn spawn_request_wrong_types() {
    for text in [
        "null",
        "[]",
        r#"{"agent_type": 1, "prompt": "p"}"#,
        r#"{"agent_type": "a", "prompt": null}"#,
        r#"{"agent_type": "a", "prompt": "p", "background": "yes"}"#,
        r#"{"agent_type": "a", "prompt": "p", "settle": "later"}"#,
        r#"{"agent_type": "a", "prompt": "p", "detached": 1}"#,
        r#"{"agent_type": "a", "prompt": "p", "request_id": 7}"#,
        r#"{"agent_type": "a", "prompt": "p", "description": {}}"#,
    ] {
        assert_rejects::<SpawnRequest>(text);
    }
    assert_rejects_because::<SpawnRequest>(r#"{"prompt": "p"}"#, "missing field `agent_type`");
    assert_rejects_because::<SpawnRequest>(r#"{"agent_type": "a"}"#, "missing field `prompt`");
    assert_rejects_because::<SpawnRequest>(
        r#"{"agent_type": "a", "type": "b", "prompt": "p"}"#,
        "duplicate field",
    );
}

#[test]
fn usage_wrong_types() {
    for text in [
        "null",
        "0",
        r#"{"input_tokens": -1}"#,
        r#"{"input_tokens": 1.5}"#,
        r#"{"input_tokens": "1"}"#,
        r#"{"input_tokens": null}"#,
        r#"{"cost_micros": 18446744073709551616}"#,
        r#"{"input_tokens": 1, "input_tokens": 2}"#,
        "[1, 2, 3, 4, 5, 6, 7]",
    ] {
        assert_rejects::<Usage>(text);
    }
    assert_rejects_because::<Usage>(r#"{"tokens": 1}"#, "unknown field `tokens`");
}

#[test]
fn outcome_wrong_types() {
    use agent_tree_protocol::Outcome;
    for text in [
        "null",
        "\"completed\"",
        r#"{"status": "completed"}"#,
        r#"{"reason": "final_answer"}"#,
        r#"{"status": "completed", "reason": "final_answer", "text": 5}"#,
        r#"{"status": "Completed", "reason": "final_answer"}"#,
        r#"{"status": 4, "reason": "final_answer"}"#,
    ] {
        assert_rejects::<Outcome>(text);
    }
    assert_rejects_because::<Outcome>(
        r#"{"status": "done", "reason": "final_answer"}"#,
        "unknown variant `done`",
    );
    assert_rejects_because::<Outcome>(
        r#"{"status": "failed", "reason": "tired"}"#,
        "unknown variant `tired`",
    );
    assert_rejects_because::<Outcome>(
        r#"{"status": "completed", "reason": "final_answer", "extra": 1}"#,
        "unknown field `extra`",
    );
}

#[test]
fn event_tally_wrong_types() {
    for text in [
        "null",
        "[-1]",
        r#"{"started": -1}"#,
        r#"{"started": "1"}"#,
        r#"{"started": 1.0}"#,
    ] {
        assert_rejects::<EventTally>(text);
    }
    assert_rejects_because::<EventTally>(r#"{"explosions": 1}"#, "unknown field `explosions`");
}

/// The fixture `name` with `edit` applied, as JSON text.
fn edited(name: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut value = fixture_value(name);
    edit(&mut value);
    value.to_string()
}

/// One change to a fixture's JSON.
type Edit = Box<dyn FnOnce(&mut Value)>;

#[test]
fn agent_record_wrong_types() {
    let cases: [(&str, Edit); 10] = [
        ("status", Box::new(|v| v["status"] = json!("sleeping"))),
        ("depth", Box::new(|v| v["depth"] = json!(-1))),
        ("own", Box::new(|v| v["own"]["input_tokens"] = json!("x"))),
        (
            "subtree",
            Box::new(|v| v["subtree"] = json!([1, 2, 3, 4, 5, 6, 7])),
        ),
        ("children", Box::new(|v| v["children"] = json!("a1"))),
        ("incarnation", Box::new(|v| v["incarnation"] = Value::Null)),
        (
            "outcome",
            Box::new(|v| v["outcome"]["reason"] = json!("bored")),
        ),
        ("detached", Box::new(|v| v["detached"] = json!("true"))),
        (
            "missing id",
            Box::new(|v| {
                v.as_object_mut().expect("object").remove("id");
            }),
        ),
        (
            "missing created_ms",
            Box::new(|v| {
                v.as_object_mut().expect("object").remove("created_ms");
            }),
        ),
    ];
    for (label, edit) in cases {
        let text = edited("agent_record.json", edit);
        let shown = assert_rejects::<AgentRecord>(&text);
        assert!(!shown.is_empty(), "{label}");
    }
    // A record cannot grow fields that would place it elsewhere.
    assert_rejects_because::<AgentRecord>(
        &edited("agent_record.json", |v| v["root"] = json!(true)),
        "unknown field `root`",
    );
}

#[test]
fn tree_snapshot_wrong_types() {
    for text in [
        "null",
        "[]",
        &edited("tree_snapshot.json", |v| v["records"] = json!({})),
        &edited("tree_snapshot.json", |v| v["peak_live"] = json!(-1)),
        &edited("tree_snapshot.json", |v| v["session"] = json!(1)),
        &edited("tree_snapshot.json", |v| v["tally"]["started"] = json!("4")),
        &edited("tree_snapshot.json", |v| {
            v["records"][2]["status"] = json!("zombie")
        }),
        &edited("tree_snapshot.json", |v| {
            v["records"][1]["own"]["bogus"] = json!(1)
        }),
        &edited("tree_snapshot.json", |v| {
            v.as_object_mut().expect("object").remove("records");
        }),
    ] {
        assert_rejects::<TreeSnapshot>(text);
    }
    assert_rejects_because::<TreeSnapshot>(
        &edited("tree_snapshot.json", |v| v["events"] = json!([])),
        "unknown field `events`",
    );
}

#[test]
fn message_and_tool_wrong_types() {
    for text in [
        r#"{"role": "robot", "content": "hi"}"#,
        r#"{"role": "user", "content": 5}"#,
        r#"{"content": "no role"}"#,
        r#"{"role": "assistant", "tool_calls": "grep"}"#,
        r#"{"role": "assistant", "tool_calls": [{"id": "c"}]}"#,
        r#"{"role": "tool", "tool_call_id": 3}"#,
        r#"{"role": "tool", "is_error": "no"}"#,
        r#"{"role": "user", "name": "bob"}"#,
        r#"{"role": "assistant", "tool_calls": [{"id": "c", "name": "n", "input": 1e400}]}"#,
    ] {
        assert_rejects::<Message>(text);
    }
    for text in [
        r#"{"name": "grep", "input": {}}"#,
        r#"{"id": 1, "name": "grep"}"#,
        r#"{"id": "c", "name": "grep", "type": "function"}"#,
        "[\"c\"]",
    ] {
        assert_rejects::<ToolCall>(text);
    }
    for text in [
        r#"{"name": "grep", "description": "d"}"#,
        r#"{"name": 5, "description": "d", "input_schema": {}}"#,
        r#"{"name": "grep", "description": null, "input_schema": {}}"#,
    ] {
        assert_rejects::<ToolSpec>(text);
    }
}

#[test]
fn agent_status_wrong_values() {
    for text in [
        "\"done\"",
        "\"Completed\"",
        "\"\"",
        "3",
        "null",
        "[\"completed\"]",
    ] {
        assert_rejects::<AgentStatus>(text);
    }
    assert_rejects_because::<AgentStatus>("\"paused\"", "unknown variant `paused`");
}

// ---------------------------------------------------------------------------------------
// Events and agent ids
// ---------------------------------------------------------------------------------------

#[test]
fn unknown_or_broken_event_kinds_are_rejected() {
    let kinds: [(&str, Value); 6] = [
        ("unknown kind", json!("exploded")),
        ("wrong case", json!("Completed")),
        ("empty kind", json!("")),
        ("number kind", json!(3)),
        ("null kind", Value::Null),
        ("kind object", json!({"completed": null})),
    ];
    for (label, kind) in kinds {
        let text = edited("event_completed.json", |v| v["event"] = kind);
        let shown = assert_rejects::<Event>(&text);
        assert!(!shown.is_empty(), "{label}");
    }
    for text in [
        edited("event_completed.json", |v| {
            v.as_object_mut().expect("object").remove("event");
        }),
        edited("event_failed.json", |v| {
            v.as_object_mut().expect("object").remove("outcome");
        }),
        edited("event_failed.json", |v| {
            v["outcome"]["reason"] = json!("tired")
        }),
        edited("event_failed.json", |v| v["reason"] = json!("panicked")),
        edited("event_completed.json", |v| v["outcome"] = json!("done")),
        edited("event_started_root.json", |v| v["incarnation"] = json!("1")),
        edited("event_usage_reported.json", |v| {
            v["delta"]["surprise"] = json!(1)
        }),
        edited("event_usage_reported.json", |v| v["delta"] = json!(12)),
        edited("event_queued.json", |v| v["seq"] = json!(-1)),
        edited("event_queued.json", |v| v["depth"] = json!("1")),
    ] {
        assert_rejects::<Event>(&text);
    }
}

#[test]
fn event_errors_name_their_cause() {
    assert_rejects_because::<Event>(
        &edited("event_completed.json", |v| v["event"] = json!("exploded")),
        "unknown variant `exploded`",
    );
    assert_rejects_because::<Event>(
        &edited("event_failed.json", |v| {
            v.as_object_mut().expect("object").remove("outcome");
        }),
        "missing field `outcome`",
    );
    assert_rejects_because::<Event>(
        &edited("event_failed.json", |v| {
            v["outcome"]["status"] = json!("completed")
        }),
        "outcome status `completed` does not match event `failed`",
    );
    assert_rejects_because::<Event>(
        &edited("event_completed.json", |v| v["depth_override"] = json!(0)),
        "unknown field `depth_override`",
    );
}

const BAD_IDS: [&str; 11] = [
    "b1",
    "a",
    "",
    "a-1",
    "A1",
    "a1x",
    " a1",
    "a1 ",
    "a 1",
    "a99999999999999999999999",
    "\u{00e0}1",
];

#[test]
fn invalid_agent_ids_are_rejected_everywhere() {
    for bad in BAD_IDS {
        let quoted = json!(bad).to_string();
        assert_rejects_because::<AgentId>(&quoted, "invalid agent id");

        let why = format!("invalid agent id {bad:?}");
        for (field, name) in [
            ("agent", "event_completed.json"),
            ("parent", "event_completed.json"),
            ("agent", "event_started_root.json"),
        ] {
            let text = edited(name, |v| v[field] = json!(bad));
            assert_rejects_because::<Event>(&text, &why);
        }
        for field in ["id", "parent"] {
            let text = edited("agent_record.json", |v| v[field] = json!(bad));
            assert_rejects_because::<AgentRecord>(&text, &why);
        }
        let text = edited("tree_snapshot.json", |v| {
            v["records"][0]["children"][1] = json!(bad)
        });
        assert_rejects_because::<TreeSnapshot>(&text, &why);
        let text = edited("tree_snapshot.json", |v| v["records"][2]["id"] = json!(bad));
        assert_rejects_because::<TreeSnapshot>(&text, &why);
    }
}

#[test]
fn agent_ids_of_the_wrong_json_type_are_rejected() {
    for wrong in [
        json!(1),
        json!(null),
        json!(["a1"]),
        json!({"id": "a1"}),
        json!(true),
    ] {
        assert_rejects::<AgentId>(&wrong.to_string());
        let text = edited("event_completed.json", |v| v["agent"] = wrong.clone());
        assert_rejects::<Event>(&text);
        let text = edited("agent_record.json", |v| v["id"] = wrong.clone());
        assert_rejects::<AgentRecord>(&text);
    }
    // `parent: null` is the root's parent, so only non-null wrong types are errors there.
    let text = edited("agent_record.json", |v| v["parent"] = json!(0));
    assert_rejects::<AgentRecord>(&text);
}

#[test]
fn long_invalid_ids_are_cut_in_the_message() {
    let long = format!("b{}", "9".repeat(200));
    let shown = assert_rejects::<AgentId>(&json!(long).to_string());
    assert!(shown.contains(&long[..64]), "{shown}");
    assert!(!shown.contains(&long[..65]), "{shown}");
}

// ---------------------------------------------------------------------------------------
// Properties: no input panics; whatever is accepted re-encodes faithfully
// ---------------------------------------------------------------------------------------

/// Decodes `text` as `T`; if accepted, re-encodes it and decodes that to the same value.
fn decode_roundtrip<T: Wire + PartialEq + Debug>(text: &str) {
    if let Ok(value) = T::from_json(text) {
        let again = T::from_json(&value.to_json())
            .unwrap_or_else(|e| panic!("{} re-encoding of {value:?} fails: {e}", T::WHAT));
        assert_eq!(again, value, "{} changed through to_json", T::WHAT);
    }
}

/// Decodes `text` as `T`; if accepted, re-encodes it. (For types holding JSON values,
/// whose floats are not guaranteed to re-parse bit-exact.)
fn decode_reencode<T: Wire + Debug>(text: &str) {
    if let Ok(value) = T::from_json(text) {
        assert!(!value.to_json().is_empty(), "{value:?}");
    }
}

fn decode_with_every_type(text: &str) {
    decode_roundtrip::<AgentDefinition>(text);
    decode_roundtrip::<SpawnRequest>(text);
    decode_roundtrip::<Usage>(text);
    decode_roundtrip::<agent_tree_protocol::Outcome>(text);
    decode_roundtrip::<Event>(text);
    decode_roundtrip::<EventTally>(text);
    decode_roundtrip::<AgentRecord>(text);
    decode_roundtrip::<AgentStatus>(text);
    decode_roundtrip::<AgentId>(text);
    decode_reencode::<Message>(text);
    decode_reencode::<ToolCall>(text);
    decode_reencode::<ToolSpec>(text);
    decode_roundtrip::<TreeSnapshot>(text);
    if let Ok(snapshot) = TreeSnapshot::from_json(text) {
        // Checking a decoded snapshot must not panic either, whatever it holds.
        let _ = snapshot.check_usage();
        let _ = snapshot.depth_histogram_line();
        let _ = snapshot.total_own();
    }
}

/// Bytes likely to turn JSON into other, still plausible JSON.
const SPLICE: &[u8] = b"{}[]\",:0129-.eE ntfa\\";

fn mutate(text: &str, flips: &[(Index, u8)], splices: &[(Index, Index)]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for (at, byte) in flips {
        let i = at.index(bytes.len());
        bytes[i] ^= byte | 1;
    }
    for (at, with) in splices {
        let i = at.index(bytes.len());
        bytes[i] = SPLICE[with.index(SPLICE.len())];
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        decode_with_every_type(&text);
    }

    #[test]
    fn json_like_strings_never_panic(text in "[\\[\\]{}\":,a0-9 .eE+-]{0,48}") {
        decode_with_every_type(&text);
    }

    #[test]
    fn truncated_fixtures_never_panic(which in any::<Index>(), cut in any::<Index>()) {
        let (_, text) = FIXTURES[which.index(FIXTURES.len())];
        let bytes = &text.as_bytes()[..cut.index(text.len())];
        decode_with_every_type(&String::from_utf8_lossy(bytes));
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in any::<Index>(),
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 0..4),
        splices in prop::collection::vec((any::<Index>(), any::<Index>()), 0..4),
        cut in prop::option::of(any::<Index>()),
    ) {
        let (_, text) = FIXTURES[which.index(FIXTURES.len())];
        let mut bytes = mutate(text, &flips, &splices);
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        decode_with_every_type(&String::from_utf8_lossy(&bytes));
    }
}
