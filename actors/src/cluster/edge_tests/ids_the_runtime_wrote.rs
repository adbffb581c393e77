//! `ids::translate` rewrites to the owner tree's the hosted agent ids the runtime wrote in a
//! remote agent's conversation, and only those: never the words of a model, a child or an
//! owner next to them. Pinned where the runtime's texts carry such words: a failed child's
//! `error`, a notice's fields, an `ask_owner` answer, a steer, refusals that quote what a
//! model wrote, nested and non-string fields, word boundaries in prose, multi-byte text,
//! huge and odd ids, and odd JSON.
//!
//! The runtime's texts are built with the runtime's own functions where it can
//! (`result_text`, `result_value`, `set_result`, `ControlError`, `SpawnError`), so a test
//! reads what the runtime really writes.

use agent_tree_protocol::{
    AgentId, AgentStatus, EndReason, Message, Outcome, Role, ToolCall, ToolInput, WaitPolicy,
};
use serde_json::json;

use crate::agent::orchestration::{result_text, result_value, set_result};
use crate::cluster::edge::ids::translate;
use crate::error::{ControlError, SpawnError};

pub(super) fn id(n: u64) -> AgentId {
    AgentId::new(n)
}

/// Hosted `a1` (the remote top) is the owner's `a4`, `a2` its `a7`, `a3` its `a9`; every
/// other id (`a0` among them) is unknown.
fn map(hosted: AgentId) -> Option<AgentId> {
    match hosted.get() {
        1 => Some(id(4)),
        2 => Some(id(7)),
        3 => Some(id(9)),
        _ => None,
    }
}

pub(super) fn tool(call: &str, content: impl Into<String>) -> Message {
    Message::tool_result(call, content, false)
}

pub(super) fn refusal(call: &str, error: impl ToString) -> Message {
    Message::tool_result(
        call,
        json!({ "error": error.to_string() }).to_string(),
        true,
    )
}

fn calls(calls: Vec<ToolCall>) -> Vec<Message> {
    vec![Message::assistant("", calls)]
}

/// The messages' contents and inputs, to compare a whole conversation before and after.
fn texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| {
            std::iter::once(m.content.clone())
                .chain(m.tool_calls.iter().map(|c| c.input.as_str().to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// A child's words inside the runtime's results and notices.
// ---------------------------------------------------------------------------------------

/// A failed child's `error` is the child's (its model provider's, its hook's, its panic's),
/// not one of the runtime's refusals: an `a3` in it is not an id of this tree.
#[test]
fn a_failed_childs_error_inside_a_wait_result_is_not_rewritten() {
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "wait_subagents",
        json!({ "agent_ids": ["a2", "a3"] }),
    )]);
    let provider = "model error: invalid_request (HTTP 400): tool_use a3 has no tool_result";
    let outcomes = [
        (id(2), Outcome::completed("done")),
        (id(3), Outcome::failed(EndReason::ModelError, provider)),
    ];
    let mut messages = vec![tool("c1", set_result(WaitPolicy::AllSettled, &outcomes))];
    translate(&mut messages, &earlier, map);
    let owners = [
        (id(7), Outcome::completed("done")),
        (id(9), Outcome::failed(EndReason::ModelError, provider)),
    ];
    assert_eq!(
        messages[0].content,
        set_result(WaitPolicy::AllSettled, &owners)
    );
}

#[test]
fn a_failed_childs_error_inside_a_get_result_is_not_rewritten() {
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "get_subagent_result",
        json!({ "agent_id": "a2" }),
    )]);
    let hook = "start hook failed: seat a3 of team a2 is taken";
    let outcome = Outcome::failed(EndReason::HookFailed, hook);
    let mut messages = vec![tool("c1", result_text(id(2), Some(&outcome)))];
    translate(&mut messages, &earlier, map);
    assert_eq!(messages[0].content, result_text(id(7), Some(&outcome)));
}

/// The `subagent_ended` notice is `result_value` plus `notice`: the module's doc says a
/// notice has its `agent_id` rewritten, and nothing else.
#[test]
fn a_subagent_ended_notice_rewrites_its_agent_id_and_not_the_childs_error() {
    let outcome = Outcome::failed(EndReason::Panicked, "model panicked: index a3 out of range")
        .with_partial("a2 was half done");
    let notice = |agent| {
        let mut notice = result_value(agent, Some(&outcome));
        notice["notice"] = json!("subagent_ended");
        notice.to_string()
    };
    let mut messages = vec![Message::user(notice(id(2)))];
    let n = translate(&mut messages, &[], map);
    assert_eq!(messages[0].content, notice(id(7)));
    assert_eq!(n, 1);
}

#[test]
fn a_completed_childs_text_and_partial_are_never_rewritten() {
    let earlier = calls(vec![
        ToolCall::new("c1", "Agent", json!({ "agent_type": "w", "prompt": "p" })),
        ToolCall::new("c2", "get_subagent_result", json!({ "agent_id": "a3" })),
    ]);
    let done = Outcome::completed(r#"a3 said {"agent_id":"a2"} to a2"#);
    let cut = Outcome::ended(AgentStatus::Aborted, EndReason::Aborted).with_partial("a2 a3");
    let mut messages = vec![
        tool("c1", result_text(id(2), Some(&done))),
        tool("c2", result_text(id(3), Some(&cut))),
    ];
    assert_eq!(translate(&mut messages, &earlier, map), 2);
    assert_eq!(messages[0].content, result_text(id(7), Some(&done)));
    assert_eq!(messages[1].content, result_text(id(9), Some(&cut)));
}

/// The `question` notice and a wait answered with a child's question: the question is the
/// child's text.
#[test]
fn a_question_is_the_childs_text_and_only_its_agent_id_is_rewritten() {
    let question = |agent: AgentId| {
        json!({
            "notice": "question",
            "agent_id": agent,
            "question": "may a3 overwrite a2's file? {\"agent_id\":\"a2\"}",
            "answer_with": "steer_subagent",
        })
        .to_string()
    };
    let asking = |agent: AgentId| {
        json!({ "agent_id": agent, "status": "asking", "question": "ask a2 first?" }).to_string()
    };
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "wait_subagents",
        json!({ "agent_ids": ["a2"] }),
    )]);
    let mut messages = vec![tool("c1", asking(id(2))), Message::user(question(id(3)))];
    assert_eq!(translate(&mut messages, &earlier, map), 2);
    assert_eq!(messages[0].content, asking(id(7)));
    assert_eq!(messages[1].content, question(id(9)));
}

// ---------------------------------------------------------------------------------------
// An owner's words: the answer to `ask_owner`, and steers.
// ---------------------------------------------------------------------------------------

/// `ask_owner`'s result is the owner's answer (a steer, `questions.rs` `answer_question`,
/// or the application's handler): prose, even when it is a JSON object. It is written by
/// the owner's model in the owner's ids, so rewriting it as hosted ids is doubly wrong.
#[test]
fn an_ask_owner_answer_is_the_owners_text_and_is_not_rewritten() {
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "ask_owner",
        json!({ "question": "which file?" }),
    )]);
    let answer = r#"{"agent_id":"a2","hint":"ask a3"}"#;
    let error_answer = r#"{"error":"a2 is wrong, use a3"}"#;
    let mut messages = vec![
        tool("c1", answer),
        Message::assistant(
            "",
            vec![ToolCall::new("c2", "ask_owner", json!({ "question": "?" }))],
        ),
        tool("c2", error_answer),
    ];
    let n = translate(&mut messages, &earlier, map);
    assert_eq!(messages[0].content, answer);
    assert_eq!(messages[2].content, error_answer);
    assert_eq!(n, 0);
}

/// A steer enters the conversation as a plain user message (`turn.rs`, `Inbound::Steer`):
/// the owner's model's text. The runtime's notices are `subagent_ended` and `question`
/// only, built so a foreign text "cannot pose as a notice about another agent"
/// (`children.rs`).
#[test]
fn a_steer_that_is_json_with_a_notice_field_is_not_a_runtime_notice() {
    let steer = r#"{"agent_id":"a2","notice":"fyi: a2 is yours now"}"#;
    let odd = r#"{"agent_id":"a3","notice":null}"#;
    let mut messages = vec![Message::user(steer), Message::user(odd)];
    let n = translate(&mut messages, &[], map);
    assert_eq!(messages[0].content, steer);
    assert_eq!(messages[1].content, odd);
    assert_eq!(n, 0);
}

// ---------------------------------------------------------------------------------------
// Refusals: the runtime's text, quoting what a model wrote.
// ---------------------------------------------------------------------------------------

/// `rewrite_prose`'s doc: "every word that is an agent id". `a3` in `a2a3`, and `a2` in
/// `0xaa2`, are not words: they follow a word character. Both are what a model wrote, quoted
/// by `ControlError::NotYoursText`.
#[test]
fn ids_glued_to_an_earlier_id_or_an_a_in_a_refusal_are_not_words() {
    let earlier = calls(vec![
        ToolCall::new("c1", "abort_subagent", json!({ "agent_id": "a2a3" })),
        ToolCall::new("c2", "abort_subagent", json!({ "agent_id": "0xaa2" })),
        ToolCall::new("c3", "abort_subagent", json!({ "agent_id": "a1a2 aa3" })),
    ]);
    let mut messages = vec![
        refusal("c1", ControlError::NotYoursText("a2a3".into())),
        refusal("c2", ControlError::NotYoursText("0xaa2".into())),
        refusal("c3", ControlError::NotYoursText("a1a2 aa3".into())),
    ];
    let before = texts(&messages);
    let n = translate(&mut messages, &earlier, map);
    assert_eq!(texts(&messages), before);
    assert_eq!(n, 0);
}

/// A refusal that quotes the model's agent type: `"a2"` there is a type name the model
/// asked for (its call's input keeps it), not an agent.
#[test]
fn a_refusal_quoting_the_models_agent_type_keeps_the_type_name() {
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "Agent",
        json!({ "agent_type": "a2", "prompt": "p" }),
    )]);
    let error = SpawnError::UnknownType {
        requested: "a2".into(),
        available: vec!["writer".into()],
    };
    let mut messages = vec![refusal("c1", &error)];
    let before = texts(&messages);
    let n = translate(&mut messages, &earlier, map);
    assert_eq!(texts(&messages), before);
    assert_eq!(n, 0);
}

/// The runtime's refusals naming agents, `a1` (the remote top itself) among them.
#[test]
fn the_runtimes_refusals_name_agents_and_are_rewritten() {
    let earlier = calls(vec![
        ToolCall::new("c1", "abort_subagent", json!({ "agent_id": "a2" })),
        ToolCall::new(
            "c2",
            "steer_subagent",
            json!({ "agent_id": "a3", "message": "m" }),
        ),
        ToolCall::new("c3", "ask_owner", json!({ "question": "q" })),
        ToolCall::new("c4", "get_subagent_result", json!({ "agent_id": "a0" })),
    ]);
    let mut messages = vec![
        refusal(
            "c1",
            ControlError::WrongStatus(id(2), AgentStatus::Completed),
        ),
        refusal("c2", ControlError::NoTurnsLeft(id(3))),
        refusal("c3", ControlError::NoTurnsLeft(id(1))),
        refusal("c4", ControlError::NotYours(id(0))),
    ];
    // `ask_owner`'s refusals are not a delegation tool's: the owner's side writes them
    // (the stand-in's "{owner} has ended and cannot answer" names the owner in the owner
    // tree's ids), so c3's is kept.
    assert_eq!(translate(&mut messages, &earlier, map), 2);
    assert_eq!(
        messages[0].content,
        json!({ "error": ControlError::WrongStatus(id(7), AgentStatus::Completed).to_string() })
            .to_string()
    );
    assert_eq!(
        messages[1].content,
        r#"{"error":"a9 is in its last turn and cannot read a steer"}"#
    );
    assert_eq!(
        messages[2].content,
        r#"{"error":"a1 is in its last turn and cannot read a steer"}"#
    );
    // Unknown: kept.
    assert_eq!(
        messages[3].content,
        r#"{"error":"no subagent a0 of yours"}"#
    );
    assert!(messages.iter().all(|m| m.is_error));
}

#[test]
fn prose_ids_next_to_multi_byte_text_are_words_only_between_non_word_characters() {
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "abort_subagent",
        json!({ "agent_id": "x" }),
    )]);
    let text = "é a2 ü, a2é, 日a2, a2日, «a3», a2—a3, 😀a2😀, a";
    let mut messages = vec![refusal("c1", ControlError::NotYoursText(text.into()))];
    let n = translate(&mut messages, &earlier, map);
    assert_eq!(
        messages[0].content,
        json!({ "error": ControlError::NotYoursText(
            "é a7 ü, a2é, 日a2, a2日, «a9», a7—a9, 😀a7😀, a".into()
        ).to_string() })
        .to_string()
    );
    assert_eq!(n, 5);
}

#[test]
fn huge_and_misspelt_ids_are_left_as_they_are() {
    let ids = [
        "a18446744073709551616",
        "a99999999999999999999999999999",
        "a18446744073709551615",
        "a02",
        "a+2",
        "A2",
        "a",
        "a-2",
    ];
    let earlier = calls(
        ids.iter()
            .enumerate()
            .map(|(i, s)| {
                ToolCall::new(format!("c{i}"), "abort_subagent", json!({ "agent_id": s }))
            })
            .chain([ToolCall::new(
                "w",
                "wait_subagents",
                json!({ "agent_ids": ids }),
            )])
            .collect(),
    );
    let mut messages: Vec<Message> = ids
        .iter()
        .enumerate()
        .map(|(i, s)| refusal(&format!("c{i}"), ControlError::NotYoursText((*s).into())))
        .collect();
    let mut all = earlier.clone();
    let before = texts(&messages);
    let inputs = texts(&all);
    assert_eq!(translate(&mut all, &[], map), 0);
    assert_eq!(texts(&all), inputs);
    assert_eq!(translate(&mut messages, &earlier, map), 0);
    assert_eq!(texts(&messages), before);
}

// ---------------------------------------------------------------------------------------
// Call inputs.
// ---------------------------------------------------------------------------------------

/// The module's doc: an input's `agent_id`, `agent_ids` and `Agent`'s `resume`: the fields
/// the runtime reads (`TargetInput`, `SetInput`, `AgentInput`, all top-level). Anything
/// deeper is the model's own data, which the runtime ignores.
#[test]
fn ids_nested_inside_a_call_input_are_the_models_and_are_kept() {
    let input = json!({
        "agent_type": "w",
        "prompt": "p",
        "context": { "agent_id": "a2", "agent_ids": ["a3"], "resume": "a2" },
    });
    let mut messages = calls(vec![ToolCall::new("c1", "Agent", input.clone())]);
    let n = translate(&mut messages, &[], map);
    assert_eq!(
        messages[0].tool_calls[0].input.as_str(),
        ToolInput::from(input).as_str()
    );
    assert_eq!(n, 0);
}

/// `resume` is `Agent`'s field alone (the doc: "`Agent`'s `resume`").
#[test]
fn resume_is_rewritten_only_in_agent_calls() {
    let mut messages = calls(vec![
        ToolCall::new(
            "c1",
            "steer_subagent",
            json!({ "agent_id": "a2", "message": "m", "resume": "a3" }),
        ),
        ToolCall::new("c2", "Agent", json!({ "resume": "a3", "prompt": "again" })),
    ]);
    let n = translate(&mut messages, &[], map);
    assert_eq!(
        messages[0].tool_calls[0].input.as_str(),
        r#"{"agent_id":"a7","message":"m","resume":"a3"}"#
    );
    assert_eq!(
        messages[0].tool_calls[1].input.as_str(),
        r#"{"prompt":"again","resume":"a9"}"#
    );
    assert_eq!(n, 2);
}

/// The runtime reads an id trimmed (`parse_id`): a padded id names the same agent, and is
/// rewritten to the owner's id, its padding kept (the bytes around an id are the model's;
/// a context sent down foreign comes back as it was written).
#[test]
fn a_padded_id_in_an_input_is_rewritten_as_the_runtime_reads_it() {
    let mut messages = calls(vec![
        ToolCall::new("c1", "abort_subagent", json!({ "agent_id": " a2\n" })),
        ToolCall::new(
            "c2",
            "wait_subagents",
            json!({ "agent_ids": ["\ta3 ", " a0 "] }),
        ),
    ]);
    assert_eq!(translate(&mut messages, &[], map), 2);
    assert_eq!(
        messages[0].tool_calls[0].input.as_str(),
        r#"{"agent_id":" a7\n"}"#
    );
    assert_eq!(
        messages[0].tool_calls[1].input.as_str(),
        r#"{"agent_ids":["\ta9 "," a0 "]}"#
    );
}

#[test]
fn non_string_ids_in_an_input_are_kept_and_do_not_panic() {
    let inputs = [
        json!({ "agent_id": 2 }),
        json!({ "agent_id": null }),
        json!({ "agent_id": ["a2"] }),
        json!({ "agent_ids": "a2" }),
        json!({ "agent_ids": [2, null, ["a2"], { "x": "a3" }] }),
        json!({ "agent_ids": [] }),
        json!({ "resume": 3 }),
        json!("a2"),
        json!(["a2"]),
        json!(null),
        json!(1.5e300),
        json!({ "agent_id": "a2", "timeout_ms": u64::MAX, "wait": 1.0e-300 }),
    ];
    let mut messages = calls(
        inputs
            .iter()
            .enumerate()
            .map(|(i, v)| ToolCall::new(format!("c{i}"), "get_subagent_result", v.clone()))
            .collect(),
    );
    let before = texts(&messages);
    assert_eq!(translate(&mut messages, &[], map), 1);
    let after = texts(&messages);
    let last = before.len() - 1;
    assert_eq!(after[..last], before[..last]);
    assert_eq!(
        after[last],
        ToolInput::from(json!({ "agent_id": "a7", "timeout_ms": u64::MAX, "wait": 1.0e-300 }))
            .as_str()
    );
}

#[test]
fn a_mixed_agent_ids_list_rewrites_its_known_strings_only() {
    let mut messages = calls(vec![ToolCall::new(
        "c1",
        "wait_subagents",
        json!({ "agent_ids": ["a2", 3, null, "a5", "a3"], "policy": "fail_fast" }),
    )]);
    assert_eq!(translate(&mut messages, &[], map), 2);
    assert_eq!(
        messages[0].tool_calls[0].input.as_str(),
        r#"{"agent_ids":["a7",3,null,"a5","a9"],"policy":"fail_fast"}"#
    );
}

/// A model's prose and a user tool's input and result are never touched, even when they
/// look like the runtime's.
#[test]
fn a_models_prose_and_user_tools_are_never_touched() {
    let mut messages = vec![
        Message::assistant(
            r#"{"agent_id":"a2","notice":"subagent_ended"}"#,
            vec![ToolCall::new(
                "c1",
                "lookup",
                json!({ "agent_id": "a2", "error": "a3" }),
            )],
        ),
        tool("c1", r#"{"agent_id":"a2","error":"a3"}"#),
        Message::system(r#"{"agent_id":"a2","notice":"x"}"#),
    ];
    let before = texts(&messages);
    assert_eq!(translate(&mut messages, &[], map), 0);
    assert_eq!(texts(&messages), before);
}

// ---------------------------------------------------------------------------------------
// Finding the call a result answers.
// ---------------------------------------------------------------------------------------

/// A model's call ids need not be unique (`orchestration.rs`): a result answers the latest
/// call of its id before it.
#[test]
fn a_reused_call_id_answers_its_latest_call() {
    let earlier = vec![
        Message::assistant(
            "",
            vec![ToolCall::new(
                "call_0",
                "Agent",
                json!({ "agent_type": "w", "prompt": "p" }),
            )],
        ),
        tool("call_0", r#"{"agent_id":"a7","status":"running"}"#),
    ];
    let mut messages = vec![
        Message::assistant(
            "",
            vec![ToolCall::new("call_0", "lookup", json!({ "q": "a2" }))],
        ),
        tool("call_0", r#"{"agent_id":"a2"}"#),
        Message::assistant(
            "",
            vec![ToolCall::new(
                "call_0",
                "get_subagent_result",
                json!({ "agent_id": "a2" }),
            )],
        ),
        tool("call_0", result_text(id(2), None)),
    ];
    assert_eq!(translate(&mut messages, &earlier, map), 2);
    assert_eq!(messages[1].content, r#"{"agent_id":"a2"}"#);
    assert_eq!(messages[3].content, result_text(id(7), None));
}

#[test]
fn a_result_of_an_unknown_call_is_left_alone() {
    let mut orphan = tool("x", result_text(id(2), None));
    orphan.tool_call_id = None;
    let mut messages = vec![tool("nowhere", result_text(id(2), None)), orphan];
    let before = texts(&messages);
    assert_eq!(translate(&mut messages, &[], map), 0);
    assert_eq!(texts(&messages), before);
}

// ---------------------------------------------------------------------------------------
// Bytes: kept when nothing changed; the runtime's own bytes when something did.
// ---------------------------------------------------------------------------------------

#[test]
fn odd_json_texts_are_kept_byte_for_byte_and_do_not_panic() {
    let deep = format!(
        "{{\"agent_id\":\"a2\",\"x\":{}{}}}",
        "[".repeat(300),
        "]".repeat(300)
    );
    let odd = [
        "{".to_owned(),
        "{}".to_owned(),
        r#"{"agent_id":"#.to_owned(),
        r#"{"agent_id":"a2"} trailing"#.to_owned(),
        r#"{"agent_id":"a2","agent_id":"a5"}"#.to_owned(),
        r#"{"agent_id" : "a5", "status":"running"}"#.to_owned(),
        r#"{"n":1e400,"agent_id":"a2"}"#.to_owned(),
        "{\"agent_id\":\"a2\u{0}\"}".to_owned(),
        r#" {"agent_id":"a2"}"#.to_owned(),
        r#"["a2"]"#.to_owned(),
        "\u{feff}{\"agent_id\":\"a2\"}".to_owned(),
        deep,
    ];
    let earlier = calls(
        (0..odd.len())
            .map(|i| ToolCall::new(format!("c{i}"), "get_subagent_result", json!({})))
            .collect(),
    );
    let mut messages: Vec<Message> = odd
        .iter()
        .enumerate()
        .map(|(i, t)| tool(&format!("c{i}"), t.clone()))
        .chain(odd.iter().map(|t| Message::user(t.clone())))
        .collect();
    let before = texts(&messages);
    // `{"agent_id":"a2","agent_id":"a5"}`: serde_json keeps the last (`a5`, unknown).
    assert_eq!(translate(&mut messages, &earlier, map), 0);
    assert_eq!(texts(&messages), before);
}

/// When an id changed, the text is written back as the runtime writes it: the child's text
/// with escapes and multi-byte characters comes back byte for byte.
#[test]
fn a_rewritten_result_keeps_every_other_byte_of_the_runtimes_text() {
    let text = "a2\u{0}\u{1f}\t\n\"\\/é😀\u{2028}\u{7f} a3 {\"agent_id\":\"a2\"}";
    let outcome = Outcome::completed(text);
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "Agent",
        json!({ "agent_type": "w", "prompt": "p" }),
    )]);
    let mut messages = vec![tool("c1", result_text(id(3), Some(&outcome)))];
    assert_eq!(translate(&mut messages, &earlier, map), 1);
    assert_eq!(messages[0].content, result_text(id(9), Some(&outcome)));
    assert_eq!(messages[0].role, Role::Tool);
    assert!(!messages[0].is_error);
}

#[test]
fn a_result_naming_only_unknown_ids_keeps_its_bytes_even_when_not_compact() {
    let earlier = calls(vec![ToolCall::new(
        "c1",
        "wait_subagents",
        json!({ "agent_ids": ["a0", "a5"] }),
    )]);
    let text = "{\"outcomes\": [ {\"status\":\"completed\", \"agent_id\":\"a0\"}, {\"agent_id\":\"a5\"} ], \"policy\":\"all_settled\"}";
    let mut messages = vec![tool("c1", text)];
    assert_eq!(translate(&mut messages, &earlier, map), 0);
    assert_eq!(messages[0].content, text);
}
