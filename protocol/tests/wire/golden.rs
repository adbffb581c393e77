//! Golden JSON round-trip tests for the protocol crate.
//!
//! Every important wire type has a pretty-printed fixture under `tests/fixtures/`. Each test
//! builds the value in Rust and checks that
//!
//! * `serde_json::to_value(&value)` equals the fixture parsed as a `serde_json::Value`
//!   (structural equality, so formatting and key order do not matter), and
//! * `Type::from_json(fixture)` gives back the same value (and so does decoding `to_json`).
//!
//! It also checks the golden tree snapshot: `check_usage` accepts it and rejects modified
//! copies, and its text and DOT renderings hold the expected lines.
//!
//! Regenerate the fixtures with `UPDATE_GOLDEN=1 cargo test -p agent-tree-protocol --test
//! wire golden::`; review the diff before committing it.

use std::fmt::Debug;
use std::fs;
use std::path::PathBuf;

use agent_tree_protocol::{
    AgentDefinition, AgentId, AgentRecord, AgentStatus, EndReason, Event, EventKind, EventTally,
    Message, ModelErrorKind, Outcome, RequestId, RestartPolicy, Role, SessionId, SettlePolicy,
    SpawnRequest, Strategy, SubagentAllowance, ToolCall, ToolSet, ToolSpec, TreeSnapshot, Usage,
    Wire,
};
use serde_json::{Value, json};

/// Every fixture this file owns; `fixture_directory_holds_exactly_the_golden_files` keeps the
/// directory in step with it.
const FIXTURES: &[&str] = &[
    "agent_definition.json",
    "agent_definition_words.json",
    "spawn_request.json",
    "spawn_request_minimal.json",
    "usage.json",
    "outcome_completed.json",
    "outcome_failed.json",
    "outcome_aborted.json",
    "event_started_root.json",
    "event_spawned.json",
    "event_queued.json",
    "event_dequeued.json",
    "event_completing.json",
    "event_killed.json",
    "event_usage_reported.json",
    "event_restarted.json",
    "event_context_dropped.json",
    "event_completed.json",
    "event_failed.json",
    "event_aborted.json",
    "event_released.json",
    "event_tool_progress.json",
    "event_tally.json",
    "agent_record.json",
    "tree_snapshot.json",
    "message.json",
    "message_tool_result.json",
    "tool_call.json",
    "tool_spec.json",
];

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(name)
}

fn updating() -> bool {
    std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1")
}

/// Reads a fixture, writing it from `value` first when `UPDATE_GOLDEN=1`.
fn fixture_text<T: Wire>(name: &str, value: &T) -> String {
    assert!(FIXTURES.contains(&name), "{name} is missing from FIXTURES");
    let path = fixture_path(name);
    if updating() {
        let mut text = serde_json::to_string_pretty(value).expect("encodes");
        text.push('\n');
        // Write then rename, so a test reading the fixture concurrently never sees half of it.
        let tmp = path.with_extension(format!("{:?}.tmp", std::thread::current().id()));
        fs::write(&tmp, text).unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
        fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
    fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    })
}

/// The value encodes to exactly the fixture's JSON structure.
fn assert_encodes<T: Wire + Debug>(name: &str, value: &T) {
    let text = fixture_text(name, value);
    let expected: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
    let actual = serde_json::to_value(value).expect("encodes");
    assert_eq!(
        actual, expected,
        "{name}: encoding differs from the fixture (UPDATE_GOLDEN=1 regenerates)"
    );
}

/// The fixture, and the value's own compact encoding, decode back to the value.
fn assert_decodes<T: Wire + PartialEq + Debug>(name: &str, value: &T) {
    let text = fixture_text(name, value);
    let decoded = T::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(&decoded, value, "{name}: decoding the fixture");
    let again = T::from_json(&value.to_json()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(&again, value, "{name}: decoding to_json");
}

fn assert_golden<T: Wire + PartialEq + Debug>(name: &str, value: &T) {
    assert_encodes(name, value);
    assert_decodes(name, value);
}

// ---------------------------------------------------------------------------------------
// Golden values
// ---------------------------------------------------------------------------------------

fn planner_definition() -> AgentDefinition {
    let mut planner = AgentDefinition::new("planner", "You plan the work and delegate analysis.")
        .with_description("Breaks a task into steps and delegates them")
        .with_tools(ToolSet::only(["read", "grep", "Agent"]))
        .with_disallowed_tools(["bash", "write"])
        .with_allowed_subagents(SubagentAllowance::only(["analyst", "writer"]))
        .with_max_turns(12)
        .in_background()
        .with_restart(RestartPolicy::Transient)
        .with_supervision(Strategy::RestForOne, 3, 10_000)
        .with_settle(SettlePolicy::Drain);
    planner.model = Some("claude-sonnet".to_owned());
    planner.inherit_context = true;
    planner
}

/// The word forms: no tools, every subagent type, isolated and disabled.
fn sandbox_definition() -> AgentDefinition {
    AgentDefinition::new("sandbox", "You run untrusted snippets.")
        .with_tools(ToolSet::None)
        .with_allowed_subagents(SubagentAllowance::All)
        .isolated()
        .with_enabled(false)
        .with_restart(RestartPolicy::Permanent)
        .with_supervision(Strategy::OneForAll, 0, 1)
}

fn full_spawn_request() -> SpawnRequest {
    SpawnRequest::new("analyst", "Summarise the error logs of the last deploy.")
        .with_description("log summary")
        .background()
        .with_request_id(RequestId::derived(AgentId::new(1), 1, "call_7"))
        .detached()
        .with_settle(SettlePolicy::Drain)
}

fn turn_usage() -> Usage {
    Usage::tokens(1_200, 340)
        .with_cache_read(800)
        .with_cache_write(64)
        .with_cost_micros(4_521)
}

fn event(seq: u64, agent: u64, parent: Option<u64>, depth: u32, kind: EventKind) -> Event {
    Event {
        seq,
        agent: AgentId::new(agent),
        parent: parent.map(AgentId::new),
        depth,
        at_ms: seq * 10,
        kind,
    }
}

/// One event per fixture, in tree order.
fn golden_events() -> Vec<(&'static str, Event)> {
    vec![
        (
            "event_started_root.json",
            event(
                1,
                0,
                None,
                0,
                EventKind::Started {
                    agent_type: "root".to_owned(),
                    incarnation: 1,
                },
            ),
        ),
        (
            "event_queued.json",
            event(
                2,
                3,
                Some(0),
                1,
                EventKind::Queued {
                    agent_type: "writer".to_owned(),
                    request_id: Some(RequestId::derived(AgentId::ROOT, 1, "t1c0")),
                    detached: true,
                },
            ),
        ),
        (
            "event_spawned.json",
            event(
                2,
                2,
                Some(1),
                2,
                EventKind::Spawned {
                    agent_type: "analyst".to_owned(),
                    request_id: None,
                    detached: false,
                },
            ),
        ),
        (
            "event_dequeued.json",
            event(2, 3, Some(0), 1, EventKind::Dequeued),
        ),
        (
            "event_completing.json",
            event(5, 1, Some(0), 1, EventKind::Completing),
        ),
        (
            "event_killed.json",
            event(
                9,
                2,
                Some(1),
                2,
                EventKind::settled(Outcome::ended(AgentStatus::Killed, EndReason::Killed)),
            ),
        ),
        (
            "event_released.json",
            event(12, 2, Some(1), 2, EventKind::Released { bytes: 1_048_576 }),
        ),
        (
            "event_tool_progress.json",
            event(
                5,
                2,
                Some(1),
                2,
                EventKind::ToolProgress {
                    call_id: "call_7".to_owned(),
                    tool: "mcp__files__copy".to_owned(),
                    progress: 3.into(),
                    total: Some(10.into()),
                    message: Some("copied 3 of 10 files".to_owned()),
                },
            ),
        ),
        (
            "event_usage_reported.json",
            event(
                3,
                2,
                Some(1),
                2,
                EventKind::UsageReported {
                    delta: turn_usage(),
                },
            ),
        ),
        (
            "event_restarted.json",
            event(4, 3, Some(0), 1, EventKind::Restarted { incarnation: 2 }),
        ),
        (
            "event_context_dropped.json",
            event(5, 2, Some(1), 2, EventKind::ContextDropped),
        ),
        (
            "event_completed.json",
            event(
                6,
                2,
                Some(1),
                2,
                EventKind::settled(Outcome::completed("three risks found")),
            ),
        ),
        (
            "event_failed.json",
            event(
                7,
                3,
                Some(0),
                1,
                EventKind::settled(Outcome::failed(
                    EndReason::Panicked,
                    "tool `grep` panicked: index out of bounds",
                )),
            ),
        ),
        (
            "event_aborted.json",
            event(
                8,
                1,
                Some(0),
                1,
                EventKind::settled(
                    Outcome::ended(AgentStatus::Aborted, EndReason::OwnerEnded)
                        .with_partial("half a plan"),
                ),
            ),
        ),
    ]
}

fn record(id: u64, agent_type: &str, depth: u32, parent: Option<u64>) -> AgentRecord {
    AgentRecord {
        id: AgentId::new(id),
        agent_type: agent_type.to_owned(),
        depth,
        parent: parent.map(AgentId::new),
        children: Vec::new(),
        status: AgentStatus::Completed,
        own: Usage::ZERO,
        subtree: Usage::ZERO,
        incarnation: 1,
        request_id: None,
        detached: false,
        created_ms: 0,
        started_ms: None,
        ended_ms: None,
        outcome: None,
    }
}

/// The writer `a3`: restarted once, detached, aborted with partial output.
fn writer_record() -> AgentRecord {
    let usage = Usage::tokens(40, 10).with_cost_micros(250);
    AgentRecord {
        status: AgentStatus::Aborted,
        own: usage,
        subtree: usage,
        incarnation: 2,
        request_id: Some(RequestId::derived(AgentId::ROOT, 1, "call_3")),
        detached: true,
        created_ms: 2,
        started_ms: Some(10),
        ended_ms: Some(95),
        outcome: Some(
            Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown)
                .with_partial("Draft: the release has"),
        ),
        ..record(3, "writer", 1, Some(0))
    }
}

/// Root `a0` with children `a1` (planner, which spawned `a2`, an analyst) and `a3` (writer).
/// Usage is written out literally so that `check_usage` has real sums to check.
fn golden_snapshot() -> TreeSnapshot {
    let root = AgentRecord {
        children: vec![AgentId::new(1), AgentId::new(3)],
        status: AgentStatus::Running,
        subtree: Usage::tokens(290, 60)
            .with_cache_read(50)
            .with_cache_write(10)
            .with_cost_micros(1_850),
        started_ms: Some(0),
        ..record(0, "root", 0, None)
    };
    let planner = AgentRecord {
        children: vec![AgentId::new(2)],
        own: Usage::tokens(100, 20)
            .with_cache_read(50)
            .with_cost_micros(700),
        subtree: Usage::tokens(250, 50)
            .with_cache_read(50)
            .with_cache_write(10)
            .with_cost_micros(1_600),
        request_id: Some(RequestId::derived(AgentId::ROOT, 1, "call_1")),
        created_ms: 1,
        started_ms: Some(2),
        ended_ms: Some(90),
        outcome: Some(Outcome::completed("Plan: 3 steps, 2 risks.")),
        ..record(1, "planner", 1, Some(0))
    };
    let analyst_usage = Usage::tokens(150, 30)
        .with_cache_write(10)
        .with_cost_micros(900);
    let analyst = AgentRecord {
        own: analyst_usage,
        subtree: analyst_usage,
        request_id: Some(RequestId::derived(AgentId::new(1), 1, "call_1")),
        created_ms: 20,
        started_ms: Some(21),
        ended_ms: Some(60),
        outcome: Some(Outcome::completed("2 risks found")),
        ..record(2, "analyst", 2, Some(1))
    };
    TreeSnapshot {
        session: SessionId::new("s1"),
        taken_ms: 100,
        records: [root, planner, analyst, writer_record()]
            .map(std::sync::Arc::new)
            .to_vec(),
        tally: EventTally {
            started: 4,
            restarted: 1,
            usage_reported: 3,
            completed: 2,
            aborted: 1,
            ..EventTally::default()
        },
        peak_live: 2,
    }
}

fn grep_call() -> ToolCall {
    ToolCall::new(
        "call_1",
        "grep",
        json!({"pattern": "ERROR", "paths": ["app.log", "db.log"], "max": 20}),
    )
}

fn agent_call() -> ToolCall {
    ToolCall::new(
        "call_2",
        "Agent",
        json!({"agent_type": "analyst", "prompt": "Summarise the logs", "background": true}),
    )
}

// ---------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------

#[test]
fn agent_definition_golden() {
    assert_golden("agent_definition.json", &planner_definition());
    assert_golden("agent_definition_words.json", &sandbox_definition());
}

#[test]
fn agent_definition_fixture_uses_lists_and_words() {
    // The list and word forms are part of the format, not an accident of serde.
    let text = fixture_text("agent_definition.json", &planner_definition());
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["tools"], json!(["read", "grep", "Agent"]));
    assert_eq!(v["allowed_subagents"], json!(["analyst", "writer"]));
    assert_eq!(v["restart"], json!("transient"));
    assert_eq!(v["strategy"], json!("rest_for_one"));
    assert_eq!(v["settle"], json!("drain"));
    let text = fixture_text("agent_definition_words.json", &sandbox_definition());
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["tools"], json!("none"));
    assert_eq!(v["allowed_subagents"], json!("all"));
    assert_eq!(v["model"], Value::Null);
}

#[test]
fn agent_definition_loose_forms_decode() {
    // Omitted fields take the documented defaults.
    let minimal = AgentDefinition::from_json(r#"{"name": "planner", "prompt": "p"}"#).unwrap();
    assert_eq!(minimal, AgentDefinition::new("planner", "p"));
    assert_eq!(minimal.tools, ToolSet::All);
    assert_eq!(minimal.allowed_subagents, SubagentAllowance::None);
    // Comma lists, `*` and booleans, as users write them in frontmatter.
    let loose = AgentDefinition::from_json(
        r#"{"name": "planner", "prompt": "p", "tools": " read, grep ,",
            "allowed_subagents": "analyst, writer"}"#,
    )
    .unwrap();
    assert_eq!(loose.tools, ToolSet::only(["read", "grep"]));
    assert_eq!(
        loose.allowed_subagents,
        SubagentAllowance::only(["analyst", "writer"])
    );
    let star =
        AgentDefinition::from_json(r#"{"name": "x", "tools": "*", "allowed_subagents": true}"#)
            .unwrap();
    assert_eq!(star.tools, ToolSet::All);
    assert_eq!(star.allowed_subagents, SubagentAllowance::All);
    let denied =
        AgentDefinition::from_json(r#"{"name": "x", "allowed_subagents": false}"#).unwrap();
    assert_eq!(denied.allowed_subagents, SubagentAllowance::None);
}

#[test]
fn spawn_request_golden() {
    assert_golden("spawn_request.json", &full_spawn_request());
    assert_golden(
        "spawn_request_minimal.json",
        &SpawnRequest::new("writer", "Draft the release notes.").foreground(),
    );
}

#[test]
fn spawn_request_aliases_and_forged_fields() {
    let aliased = SpawnRequest::from_json(
        r#"{"subagent_type": "writer", "prompt": "Draft the release notes.",
            "run_in_background": false}"#,
    )
    .unwrap();
    assert_eq!(
        aliased,
        SpawnRequest::new("writer", "Draft the release notes.").foreground()
    );
    let typed = SpawnRequest::from_json(r#"{"type": "writer", "prompt": "p"}"#).unwrap();
    assert_eq!(typed, SpawnRequest::new("writer", "p"));
    // A model cannot place the child in the tree: such fields are dropped.
    let forged = SpawnRequest::from_json(
        r#"{"agent_type": "writer", "prompt": "p", "depth": 0, "parent": "a0", "root": true}"#,
    )
    .unwrap();
    assert_eq!(forged, SpawnRequest::new("writer", "p"));
    assert!(!forged.to_json().contains("depth"));
}

#[test]
fn usage_golden() {
    assert_golden("usage.json", &turn_usage());
    // Omitted counters are zero.
    assert_eq!(
        Usage::from_json(r#"{"input_tokens": 7}"#).unwrap(),
        Usage::tokens(7, 0)
    );
}

#[test]
fn outcome_golden() {
    let completed = Outcome::completed("The release plan has 3 steps.");
    let failed = Outcome::failed(EndReason::ModelError, "HTTP 529: overloaded")
        .with_error_kind(ModelErrorKind::Transient);
    let aborted =
        Outcome::ended(AgentStatus::Aborted, EndReason::OwnerEnded).with_partial("Step 1 done");
    assert_golden("outcome_completed.json", &completed);
    assert_golden("outcome_failed.json", &failed);
    assert_golden("outcome_aborted.json", &aborted);
    assert_eq!(
        aborted.summary(),
        "aborted (owner_ended); partial output: Step 1 done"
    );
    assert_eq!(
        failed.summary(),
        "failed (model_error): HTTP 529: overloaded"
    );
    // Written before outcomes carried their kind: read without one.
    let older = Outcome::from_json(
        r#"{"status": "failed", "reason": "model_error", "error": "HTTP 529: overloaded"}"#,
    )
    .unwrap();
    assert_eq!(older.error_kind, None);
    assert_eq!(older.with_error_kind(ModelErrorKind::Transient), failed);
}

#[test]
fn events_encode_to_golden() {
    for (name, event) in golden_events() {
        assert_encodes(name, &event);
    }
}

#[test]
fn event_fixtures_use_flat_event_tag() {
    // The kind is flattened into the event: `"event": "<name>"` beside `seq`, `agent`, ...
    for (name, event) in golden_events() {
        let text = fixture_text(name, &event);
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["event"], json!(event.kind.name()), "{name}");
        assert_eq!(v["agent"], json!(event.agent.to_string()), "{name}");
        assert_eq!(v["seq"], json!(event.seq), "{name}");
    }
}

#[test]
fn events_decode_from_golden() {
    for (name, event) in golden_events() {
        assert_decodes(name, &event);
    }
}

/// A `text_delta` names the attempt that streamed it; one journaled before attempts were
/// numbered reads as the first attempt's, and the strict decoding still refuses strangers.
#[test]
fn a_text_delta_names_its_attempt_and_an_older_one_reads_as_the_first() {
    let event = Event::from_json(
        r#"{"seq":4,"agent":"a1","parent":"a0","depth":1,"at_ms":9,"event":"text_delta","turn":2,"text":"Hel"}"#,
    )
    .unwrap();
    assert_eq!(
        event.kind,
        EventKind::TextDelta {
            turn: 2,
            attempt: 1,
            text: "Hel".into()
        }
    );
    let retried = Event {
        kind: EventKind::TextDelta {
            turn: 2,
            attempt: 3,
            text: "lo".into(),
        },
        ..event
    };
    let json = retried.to_json();
    assert!(json.contains(r#""attempt":3"#), "{json}");
    assert_eq!(Event::from_json(&json).unwrap(), retried);
    assert!(
        Event::from_json(
            r#"{"seq":4,"agent":"a1","parent":"a0","depth":1,"at_ms":9,"event":"text_delta","turn":2,"text":"x","try":2}"#
        )
        .is_err()
    );
}

#[test]
fn event_tally_golden() {
    let mut tally = EventTally::default();
    let events = golden_events();
    for (_, event) in &events {
        tally.count(&event.kind);
    }
    assert_eq!(tally.total(), events.len() as u64);
    assert_eq!(
        tally,
        EventTally {
            spawned: 1,
            queued: 1,
            dequeued: 1,
            completing: 1,
            started: 1,
            usage_reported: 1,
            steered: 0,
            asked: 0,
            resumed: 0,
            context_dropped: 1,
            restarted: 1,
            completed: 1,
            failed: 1,
            aborted: 1,
            killed: 1,
            retrying: 0,
            text_delta: 0,
            tool_progress: 1,
            released: 1,
        }
    );
    assert_golden("event_tally.json", &tally);
}

#[test]
fn agent_record_golden() {
    assert_golden("agent_record.json", &writer_record());
}

#[test]
fn tree_snapshot_golden() {
    assert_golden("tree_snapshot.json", &golden_snapshot());
}

#[test]
fn message_golden() {
    let assistant = Message::assistant(
        "I will look at the logs first.",
        vec![grep_call(), agent_call()],
    );
    assert_golden("message.json", &assistant);
    let result = Message::tool_result("call_1", "grep: db.log: no such file", true);
    assert_eq!(result.role, Role::Tool);
    assert_golden("message_tool_result.json", &result);
}

#[test]
fn tool_call_golden() {
    let call = ToolCall::new(
        "call_9",
        "read",
        json!({"path": "src/lib.rs", "range": [1, 40], "options": {"follow": null, "ratio": 0.5}}),
    );
    assert_golden("tool_call.json", &call);
}

#[test]
fn tool_spec_golden() {
    let spec = ToolSpec::new(
        "grep",
        "Search files for a pattern.",
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "paths": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["pattern"]
        }),
    );
    assert_golden("tool_spec.json", &spec);
}

#[test]
fn fixture_directory_holds_exactly_the_golden_files() {
    if updating() {
        // Other tests are (re)writing the files right now; the next plain run checks them.
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut on_disk: Vec<String> = fs::read_dir(&dir)
        .expect("fixtures directory")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = FIXTURES.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(on_disk, expected);
}

// ---------------------------------------------------------------------------------------
// The golden snapshot's invariants and renderings
// ---------------------------------------------------------------------------------------

fn decoded_snapshot() -> TreeSnapshot {
    let text = fixture_text("tree_snapshot.json", &golden_snapshot());
    TreeSnapshot::from_json(&text).expect("golden snapshot decodes")
}

fn record_mut(snapshot: &mut TreeSnapshot, id: u64) -> &mut AgentRecord {
    let record = snapshot
        .records
        .iter_mut()
        .find(|r| r.id == AgentId::new(id))
        .expect("record exists");
    std::sync::Arc::make_mut(record)
}

#[test]
fn check_usage_accepts_golden_snapshot() {
    assert_eq!(decoded_snapshot().check_usage(), Ok(()));
    assert_eq!(golden_snapshot().check_usage(), Ok(()));
    let snapshot = golden_snapshot();
    assert_eq!(snapshot.root().expect("root").subtree, snapshot.total_own());
}

#[test]
fn check_usage_rejects_modified_snapshots() {
    // A leaf's own usage no longer matches its subtree.
    let mut s = decoded_snapshot();
    record_mut(&mut s, 2).own.output_tokens += 1;
    let err = s.check_usage().expect_err("leaf own changed");
    assert_eq!(err.agent, AgentId::new(2));
    assert!(
        err.to_string().starts_with("usage of a2 does not add up"),
        "{err}"
    );

    // A leaf changed consistently, so its parent's subtree no longer adds up.
    let mut s = decoded_snapshot();
    record_mut(&mut s, 2).own.cost_micros += 1;
    record_mut(&mut s, 2).subtree.cost_micros += 1;
    assert_eq!(
        s.check_usage().expect_err("parent sum").agent,
        AgentId::new(1)
    );

    // A child listed by a0 claims another parent.
    let mut s = decoded_snapshot();
    record_mut(&mut s, 3).parent = Some(AgentId::new(1));
    assert_eq!(
        s.check_usage().expect_err("parent link").agent,
        AgentId::ROOT
    );

    // A child that does not exist.
    let mut s = decoded_snapshot();
    record_mut(&mut s, 1).children.push(AgentId::new(9));
    assert_eq!(
        s.check_usage().expect_err("missing child").agent,
        AgentId::new(1)
    );

    // a3 dropped from the root's children with the root's subtree adjusted: every record adds
    // up on its own, but the root no longer covers all own usage.
    let mut s = decoded_snapshot();
    let planner_subtree = record_mut(&mut s, 1).subtree;
    let root = record_mut(&mut s, 0);
    root.children.retain(|c| *c != AgentId::new(3));
    root.subtree = planner_subtree;
    let err = s.check_usage().expect_err("root total");
    assert_eq!(err.agent, AgentId::ROOT);
    assert_eq!(err.children, golden_snapshot().total_own());
}

#[test]
fn snapshot_queries() {
    let s = decoded_snapshot();
    let order: Vec<String> = s.depth_first().iter().map(|r| r.id.to_string()).collect();
    assert_eq!(order, ["a0", "a1", "a2", "a3"]);
    assert_eq!(s.agents().count(), 3);
    assert_eq!(s.live(), 0);
    assert_eq!(s.depth_histogram_line(), "d1=2 d2=1");
    assert_eq!(s.root().expect("root").agent_type, "root");
}

#[test]
fn render_text_of_golden_snapshot() {
    let text = decoded_snapshot().render_text();
    let expected = [
        "tree agents=3 live=0 usage=0/410",
        "- [d1] planner #a1 parent=a0 status=completed usage=170/360",
        "  - [d2] analyst #a2 parent=a1 status=completed usage=190/190",
        "- [d1] writer #a3 parent=a0 status=aborted usage=50/50 incarnation=2 detached",
        "depth histogram: d1=2 d2=1",
        "event tally: started=4 completed=2 failed=0 aborted=1 killed=0 restarted=1 queued=0 \
         resumed=0 usage_reported=3 steered=0 asked=0 context_dropped=0 spawned=0 dequeued=0 completing=0 retrying=0 text_delta=0 released=0",
        "max concurrent agents: 2",
    ];
    for line in expected {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }
    // Nothing else, in this order (depth-first, the root itself not listed).
    assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{text}");
    assert_eq!(text, golden_snapshot().to_string());
}

#[test]
fn render_text_is_the_same_for_snapshots_differing_only_in_session_and_time() {
    // Two identical runs differ in their (random) session id and in when the snapshot was
    // taken; neither may show in the text, or two runs could never be compared.
    let one = decoded_snapshot();
    let other = TreeSnapshot {
        session: SessionId::new("a-completely-different-session"),
        taken_ms: one.taken_ms + 12_345,
        ..one.clone()
    };
    assert_ne!(one, other);
    assert_ne!(one.to_json(), other.to_json(), "the JSON keeps the session");
    assert_eq!(one.render_text(), other.render_text());
    assert_eq!(one.to_string(), other.to_string());
    assert_eq!(one.to_dot(), other.to_dot());
    for text in [one.render_text(), one.to_dot()] {
        assert!(!text.contains(one.session.as_str()), "{text}");
        assert!(!text.contains(other.session.as_str()), "{text}");
    }
}

#[test]
fn to_dot_of_golden_snapshot() {
    let dot = decoded_snapshot().to_dot();
    assert!(dot.starts_with("digraph agent_tree {\n"), "{dot}");
    assert!(dot.ends_with("}\n"), "{dot}");
    for edge in ["  a0 -> a1;", "  a0 -> a3;", "  a1 -> a2;"] {
        assert!(
            dot.lines().any(|l| l == edge),
            "missing edge {edge:?} in:\n{dot}"
        );
    }
    assert_eq!(dot.matches("->").count(), 3, "{dot}");
    assert!(
        dot.contains(r#"  a1 [label="planner a1\ncompleted d1\nown=170 subtree=360"];"#),
        "{dot}"
    );
    assert!(
        dot.contains(r#"  a3 [label="writer a3\naborted d1\nown=50 subtree=50"];"#),
        "{dot}"
    );
}
