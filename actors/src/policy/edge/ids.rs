//! Agent ids in a conversation that crosses the edge: a remote agent's conversation names
//! agents by its hosted tree's ids, and its owner's node keeps it under the owner tree's.
//!
//! A hosted tree is a tree of its own (ids dense from `a0`, fresh for every run), so the
//! results of a remote agent's orchestration tools name its children `a2`, `a3`, … in
//! every run. Its owner's node knows each of them by the id of its mirrored record. The
//! conversation it keeps (journaled, sent down again on a resume, read by the application)
//! must name them by those ids, as a local agent's conversation names its children: else a
//! resumed run reads `a2` for each of several helpers of earlier runs.
//!
//! [`translate`] rewrites the ids where the runtime writes them, and nowhere else:
//!
//! * an orchestration tool call's input: `agent_id`, `agent_ids` and `Agent`'s `resume`;
//! * an orchestration tool's result (found by its call's id): every `agent_id` and
//!   `agent_ids` in it, at any depth (`wait_subagents` lists outcomes), and the ids in its
//!   `error` text (the runtime's refusals name the agent);
//! * a runtime notice (a user message that is a JSON object with a `notice` field):
//!   its `agent_id`.
//!
//! A model's prose, a user tool's input or result and a child's answer text are never
//! touched: an `a7` there is the model's or the tool's, not the runtime's. An id the map
//! does not know is left as it is.
//!
//! # Invariants
//!
//! * Pure: a function of the messages and the map.
//! * Text is rewritten only where an id changed; everything else keeps its bytes (the
//!   runtime writes these JSON texts compact, keys in order, as they are written back).

use std::collections::HashMap;

use agent_tree_protocol::{AgentId, Message, Role, ToolInput};
use serde_json::Value;

use crate::tool::{ORCHESTRATION_TOOLS, RESERVED_TOOLS};

/// Rewrites the agent ids the runtime wrote into `messages` through `map` (a hosted id to
/// the owner's); `earlier` is the conversation before them, where the calls their tool
/// results answer may be. Returns how many ids it rewrote.
pub(crate) fn translate(
    messages: &mut [Message],
    earlier: &[Message],
    map: impl Fn(AgentId) -> Option<AgentId>,
) -> usize {
    let mut rewritten = 0;
    // Which call ids are orchestration tools' (their results carry ids).
    let mut orchestration: HashMap<String, bool> = HashMap::new();
    let note_calls = |m: &Message, into: &mut HashMap<String, bool>| {
        for call in &m.tool_calls {
            into.insert(call.id.clone(), is_orchestration(&call.name));
        }
    };
    for m in earlier {
        note_calls(m, &mut orchestration);
    }
    for m in messages.iter_mut() {
        note_calls(m, &mut orchestration);
        match m.role {
            Role::Assistant => {
                for call in &mut m.tool_calls {
                    if !is_orchestration(&call.name) || !call.input.is_object() {
                        continue;
                    }
                    let mut value = call.input.to_value();
                    let n = rewrite(&mut value, &map, true);
                    if n > 0 {
                        call.input = ToolInput::from(value);
                        rewritten += n;
                    }
                }
            }
            Role::Tool => {
                let ours = m
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| orchestration.get(id))
                    .copied()
                    .unwrap_or(false);
                if ours {
                    rewritten += rewrite_text(&mut m.content, &map, |_| true);
                }
            }
            Role::User => {
                rewritten += rewrite_text(&mut m.content, &map, |v| v.get("notice").is_some());
            }
            _ => {}
        }
    }
    rewritten
}

fn is_orchestration(name: &str) -> bool {
    ORCHESTRATION_TOOLS.contains(&name) || RESERVED_TOOLS.contains(&name)
}

/// Rewrites the ids of `text` if it is a JSON object `which` accepts.
fn rewrite_text(
    text: &mut String,
    map: &impl Fn(AgentId) -> Option<AgentId>,
    which: impl Fn(&Value) -> bool,
) -> usize {
    if !text.starts_with('{') {
        return 0;
    }
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return 0;
    };
    if !value.is_object() || !which(&value) {
        return 0;
    }
    let n = rewrite(&mut value, map, false);
    if n > 0 {
        *text = value.to_string();
    }
    n
}

/// Rewrites the ids in `value`'s `agent_id`, `agent_ids` (and, in an input, `resume`)
/// fields at any depth, and in its `error` texts.
fn rewrite(value: &mut Value, map: &impl Fn(AgentId) -> Option<AgentId>, input: bool) -> usize {
    let mut n = 0;
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                n += match (key.as_str(), field) {
                    ("agent_id", Value::String(s)) => rewrite_id(s, map),
                    ("resume", Value::String(s)) if input => rewrite_id(s, map),
                    ("agent_ids", Value::Array(ids)) => ids
                        .iter_mut()
                        .map(|id| match id {
                            Value::String(s) => rewrite_id(s, map),
                            _ => 0,
                        })
                        .sum(),
                    ("error", Value::String(s)) if !input => rewrite_prose(s, map),
                    (_, field) => rewrite(field, map, input),
                };
            }
        }
        Value::Array(items) => {
            for item in items {
                n += rewrite(item, map, input);
            }
        }
        _ => {}
    }
    n
}

fn rewrite_id(text: &mut String, map: &impl Fn(AgentId) -> Option<AgentId>) -> usize {
    match text.trim().parse::<AgentId>().ok().and_then(map) {
        Some(to) => {
            *text = to.to_string();
            1
        }
        None => 0,
    }
}

/// The ids in a refusal's text: every word that is an agent id (`a` and digits, one
/// spelling), as the runtime's refusals name agents.
fn rewrite_prose(text: &mut String, map: &impl Fn(AgentId) -> Option<AgentId>) -> usize {
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    let mut rest = text.as_str();
    while let Some(start) = rest.find('a') {
        let word_start = start == 0 || !is_word(rest[..start].chars().next_back());
        let len = rest[start + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - start - 1);
        let end = start + 1 + len;
        let word_end = !is_word(rest[end..].chars().next());
        let mapped = (word_start && word_end && len > 0)
            .then(|| rest[start..end].parse::<AgentId>().ok())
            .flatten()
            .and_then(map);
        out.push_str(&rest[..start]);
        match mapped {
            Some(to) => {
                out.push_str(&to.to_string());
                n += 1;
            }
            None => out.push_str(&rest[start..end]),
        }
        rest = &rest[end..];
    }
    if n > 0 {
        out.push_str(rest);
        *text = out;
    }
    n
}

fn is_word(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::ToolCall;
    use serde_json::json;

    use super::*;

    fn id(n: u64) -> AgentId {
        AgentId::new(n)
    }

    /// Hosted `a2` is the owner's `a7`, hosted `a3` its `a9`.
    fn map(hosted: AgentId) -> Option<AgentId> {
        match hosted.get() {
            2 => Some(id(7)),
            3 => Some(id(9)),
            _ => None,
        }
    }

    fn tool(call: &str, content: String) -> Message {
        let mut m = Message::user(content);
        m.role = Role::Tool;
        m.tool_call_id = Some(call.into());
        m
    }

    #[test]
    fn orchestration_inputs_results_and_notices_are_rewritten() {
        let calls = vec![
            ToolCall::new(
                "c1",
                "Agent",
                json!({ "agent_type": "w", "prompt": "a2 a3" }),
            ),
            ToolCall::new("c2", "wait_subagents", json!({ "agent_ids": ["a2", "a3"] })),
            ToolCall::new("c3", "Agent", json!({ "resume": "a3", "prompt": "again" })),
            ToolCall::new(
                "c4",
                "steer_subagent",
                json!({ "agent_id": "a5", "message": "m" }),
            ),
        ];
        let mut messages = vec![
            Message::assistant("I will ask a2", calls),
            tool(
                "c1",
                json!({ "agent_id": "a2", "status": "running" }).to_string(),
            ),
            tool(
                "c2",
                json!({ "policy": "all_settled", "outcomes": [
                    { "agent_id": "a2", "status": "completed", "text": "a3 said a2" },
                    { "agent_id": "a3", "status": "failed", "error": "boom" },
                ]})
                .to_string(),
            ),
            tool(
                "c4",
                json!({ "error": "no subagent a5 of yours" }).to_string(),
            ),
            Message::user(
                json!({ "notice": "subagent_ended", "agent_id": "a3", "status": "completed" })
                    .to_string(),
            ),
            Message::user("steered: look at a2"),
        ];
        let n = translate(&mut messages, &[], map);
        // c1's prompt is the model's text: untouched; the steer is text too.
        assert_eq!(messages[0].content, "I will ask a2");
        assert_eq!(
            messages[0].tool_calls[0].input.as_str(),
            r#"{"agent_type":"w","prompt":"a2 a3"}"#
        );
        assert_eq!(
            messages[0].tool_calls[1].input.as_str(),
            r#"{"agent_ids":["a7","a9"]}"#
        );
        assert_eq!(
            messages[0].tool_calls[2].input.as_str(),
            r#"{"prompt":"again","resume":"a9"}"#
        );
        // Unknown to the map: kept.
        assert_eq!(
            messages[0].tool_calls[3].input.as_str(),
            r#"{"agent_id":"a5","message":"m"}"#
        );
        assert_eq!(
            messages[1].content,
            r#"{"agent_id":"a7","status":"running"}"#
        );
        assert_eq!(
            messages[2].content,
            json!({ "policy": "all_settled", "outcomes": [
                { "agent_id": "a7", "status": "completed", "text": "a3 said a2" },
                { "agent_id": "a9", "status": "failed", "error": "boom" },
            ]})
            .to_string()
        );
        assert_eq!(
            messages[3].content,
            r#"{"error":"no subagent a5 of yours"}"#
        );
        assert_eq!(
            messages[4].content,
            r#"{"agent_id":"a9","notice":"subagent_ended","status":"completed"}"#
        );
        assert_eq!(messages[5].content, "steered: look at a2");
        assert_eq!(n, 7);
    }

    #[test]
    fn a_result_whose_call_came_earlier_is_found_and_user_tools_are_left_alone() {
        let earlier = vec![Message::assistant(
            "",
            vec![
                ToolCall::new("c1", "get_subagent_result", json!({ "agent_id": "a2" })),
                ToolCall::new("c2", "lookup", json!({ "agent_id": "a2" })),
            ],
        )];
        let mut messages = vec![
            tool(
                "c1",
                json!({ "agent_id": "a2", "status": "running" }).to_string(),
            ),
            tool("c2", json!({ "agent_id": "a2" }).to_string()),
            tool("c9", json!({ "agent_id": "a2" }).to_string()),
        ];
        assert_eq!(translate(&mut messages, &earlier, map), 1);
        assert_eq!(
            messages[0].content,
            r#"{"agent_id":"a7","status":"running"}"#
        );
        assert_eq!(messages[1].content, r#"{"agent_id":"a2"}"#);
        assert_eq!(messages[2].content, r#"{"agent_id":"a2"}"#);
    }

    #[test]
    fn ids_in_a_refusal_are_whole_words_only() {
        let mut text = "a2 cannot take this now: a20 is not a2x, (a3), ba2, a02".to_owned();
        assert_eq!(rewrite_prose(&mut text, &map), 2);
        assert_eq!(
            text,
            "a7 cannot take this now: a20 is not a2x, (a9), ba2, a02"
        );
        let mut none = "nothing here".to_owned();
        assert_eq!(rewrite_prose(&mut none, &map), 0);
        assert_eq!(none, "nothing here");
        let mut tail = "ends with a".to_owned();
        assert_eq!(rewrite_prose(&mut tail, &map), 0);
        assert_eq!(tail, "ends with a");
    }

    #[test]
    fn text_that_is_not_json_or_not_a_notice_is_kept_byte_for_byte() {
        let mut messages = vec![
            Message::user(r#"{"agent_id":"a2"}"#),
            tool("c1", r#"{"agent_id": "a2"}"#.into()),
            Message::user("{not json a2"),
        ];
        assert_eq!(translate(&mut messages, &[], map), 0);
        assert_eq!(messages[0].content, r#"{"agent_id":"a2"}"#);
    }
}
