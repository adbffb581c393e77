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
//! * a delegation tool call's input: its top-level `agent_id` and `agent_ids`, and
//!   `Agent`'s `resume` (the fields the runtime reads);
//! * a delegation tool's result (found by its call's id): a refusal (an object whose one
//!   field is `error`: the runtime's text, which names agents) has the ids in its text
//!   rewritten, whole unquoted words only; any other result (an outcome, a receipt,
//!   `wait_subagents`' list) its `agent_id` and `agent_ids` at any depth, never the child's
//!   own `text`, `error` or `partial`;
//! * a runtime notice (`subagent_ended`, `question`: a user message that is a JSON object
//!   with that `notice`): its top-level `agent_id`.
//!
//! A model's prose, a steer, a user tool's input or result, an `ask_owner` answer (the
//! owner's own text, in the owner's ids) and a child's answer or error are never touched:
//! an `a7` there is theirs, not the runtime's. An id the map does not know is left as it is.
//!
//! # Ids from the owner's tree, on the child's node
//!
//! What goes down is the other way round. A remote child's context (its owner's
//! conversation, inherited; or, resumed, its own kept one) names agents by the owner tree's
//! ids, and its hosted tree gives its own children ids dense from its root: the two would
//! meet (`a2` the owner's helper in the context, `a2` the child's own helper), and the
//! child's model, acting on that history, would reach its own child where it meant another.
//! So every id the runtime wrote into that context goes down [`foreign`]: the owner's `aN` is
//! `a(FOREIGN_BASE + N)` on the child's node, an id no hosted tree reaches, which its
//! registry knows as no agent ("no subagent … of yours", as for a local child reaching past
//! its own subtree). The children of a resumed run's earlier runs are seeded instead (their
//! own records, `registry/mirror.rs`). On the way up, [`owner_of_foreign`] undoes it for
//! the ids the stand-in sent ([`into_hosted`]), so the owner's kept copy names them as the
//! owner wrote them (an id its model made up stays as written).
//!
//! # Invariants
//!
//! * Pure: a function of the messages and the map.
//! * Text is rewritten only where an id changed; everything else keeps its bytes (the
//!   runtime writes these JSON texts compact, keys in order, as they are written back).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};

use agent_tree_protocol::{AgentId, Message, Role, ToolInput};
use serde_json::{Map, Value};

use crate::tool::{AGENT_TOOL, ORCHESTRATION_TOOLS};

/// Where the owner tree's ids start on a child's node ([`foreign`]): past any id a hosted
/// tree gives (a billion agents in one tree is far beyond memory), and short enough to read.
pub(crate) const FOREIGN_BASE: u64 = 1_000_000_000;

/// The owner tree's id `owner` as a remote child's node names it in the context it was sent
/// (see the module docs); `None` past `u64`'s end (left as written).
pub(crate) fn foreign(owner: AgentId) -> Option<AgentId> {
    owner.get().checked_add(FOREIGN_BASE).map(AgentId::new)
}

/// The owner tree's id that hosted id `hosted` stands for, if it is [`foreign`].
pub(crate) fn owner_of_foreign(hosted: AgentId) -> Option<AgentId> {
    hosted.get().checked_sub(FOREIGN_BASE).map(AgentId::new)
}

/// Rewrites a remote child's context, as it goes down to its node, to [`foreign`] ids:
/// every id the runtime wrote, except those of `seeded` (a resumed run's earlier children,
/// which its admission there renames to their seeds). Returns the owner's ids it rewrote,
/// the only ones its conversation coming back up is to have back ([`owner_of_foreign`]).
///
/// An id whose foreign spelling would be an id the context keeps as written (one past
/// `u64`'s end when made foreign: only a model makes those up) is kept as written too, so
/// no two ids come back as one.
pub(crate) fn into_hosted(context: &mut [Message], seeded: &[AgentId]) -> HashSet<AgentId> {
    // Every id the runtime wrote, first (a pass that rewrites nothing).
    let named = RefCell::new(BTreeSet::new());
    translate(context, &[], |owner| {
        named.borrow_mut().insert(owner);
        None
    });
    // Highest first: whether an id's foreign spelling is kept as written is known by then.
    let mut kept = HashSet::new();
    let mut mapped = HashSet::new();
    for owner in named.into_inner().into_iter().rev() {
        if seeded.contains(&owner) {
            continue;
        }
        match foreign(owner) {
            Some(hosted) if !kept.contains(&hosted) => mapped.insert(owner),
            _ => kept.insert(owner),
        };
    }
    translate(context, &[], |owner| {
        mapped.contains(&owner).then(|| foreign(owner)).flatten()
    });
    mapped
}

/// Renames, in `messages`, the agent ids `map` maps (a resumed run's earlier children, by
/// the owner's ids, to their seeds in its hosted tree): [`translate`] as a plain function,
/// for the registry's admission.
pub(crate) fn rename(messages: &mut [Message], map: &dyn Fn(AgentId) -> Option<AgentId>) {
    translate(messages, &[], map);
}

/// The notices the runtime writes into a conversation (`agent/children.rs`,
/// `agent/questions.rs`).
const NOTICES: [&str; 2] = ["subagent_ended", "question"];

/// Rewrites the agent ids the runtime wrote into `messages` through `map` (a hosted id to
/// the owner's); `earlier` is the conversation before them, where the calls their tool
/// results answer may be. Returns how many ids it rewrote.
pub(crate) fn translate(
    messages: &mut [Message],
    earlier: &[Message],
    map: impl Fn(AgentId) -> Option<AgentId>,
) -> usize {
    let mut rewritten = 0;
    // Which call ids are delegation tools' (their results carry ids).
    let mut delegation: HashMap<String, bool> = HashMap::new();
    let note_calls = |m: &Message, into: &mut HashMap<String, bool>| {
        for call in &m.tool_calls {
            into.insert(
                call.id.clone(),
                ORCHESTRATION_TOOLS.contains(&call.name.as_str()),
            );
        }
    };
    for m in earlier {
        note_calls(m, &mut delegation);
    }
    for m in messages.iter_mut() {
        note_calls(m, &mut delegation);
        match m.role {
            Role::Assistant => {
                for call in &mut m.tool_calls {
                    if !ORCHESTRATION_TOOLS.contains(&call.name.as_str()) || !call.input.is_object()
                    {
                        continue;
                    }
                    let mut value = call.input.to_value();
                    let resume = call.name == AGENT_TOOL;
                    let n = value
                        .as_object_mut()
                        .map_or(0, |fields| rewrite_input(fields, &map, resume));
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
                    .and_then(|id| delegation.get(id))
                    .copied()
                    .unwrap_or(false);
                if ours {
                    rewritten += rewrite_text(&mut m.content, |fields| match refusal(fields) {
                        Some(text) => rewrite_prose(text, &map),
                        None => rewrite_result(fields, &map),
                    });
                }
            }
            Role::User => {
                rewritten += rewrite_text(&mut m.content, |fields| {
                    let notice = fields.get("notice").and_then(Value::as_str);
                    if notice.is_some_and(|n| NOTICES.contains(&n)) {
                        fields
                            .get_mut("agent_id")
                            .map_or(0, |id| rewrite_value("agent_id", id, &map))
                    } else {
                        0
                    }
                });
            }
            _ => {}
        }
    }
    rewritten
}

/// Rewrites `text` through `rewrite` if it is a JSON object, writing it back only when an
/// id changed.
fn rewrite_text(
    text: &mut String,
    rewrite: impl FnOnce(&mut Map<String, Value>) -> usize,
) -> usize {
    if !text.starts_with('{') {
        return 0;
    }
    let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(text) else {
        return 0;
    };
    let n = rewrite(&mut fields);
    if n > 0 {
        *text = Value::Object(fields).to_string();
    }
    n
}

/// A runtime refusal's text: the one field of `{"error": …}`.
fn refusal(fields: &mut Map<String, Value>) -> Option<&mut String> {
    if fields.len() != 1 {
        return None;
    }
    match fields.get_mut("error") {
        Some(Value::String(text)) => Some(text),
        _ => None,
    }
}

/// A call input's top-level `agent_id`, `agent_ids` and (`resume`: an `Agent` call's)
/// `resume`.
fn rewrite_input(
    fields: &mut Map<String, Value>,
    map: &impl Fn(AgentId) -> Option<AgentId>,
    resume: bool,
) -> usize {
    fields
        .iter_mut()
        .map(|(key, field)| match key.as_str() {
            "agent_id" | "agent_ids" => rewrite_value(key, field, map),
            "resume" if resume => rewrite_value(key, field, map),
            _ => 0,
        })
        .sum()
}

/// A result's `agent_id` and `agent_ids` at any depth; every other string (a child's text,
/// error, partial output) is left alone.
fn rewrite_result(
    fields: &mut Map<String, Value>,
    map: &impl Fn(AgentId) -> Option<AgentId>,
) -> usize {
    fields
        .iter_mut()
        .map(|(key, field)| match (key.as_str(), field) {
            (key @ ("agent_id" | "agent_ids"), field) => rewrite_value(key, field, map),
            (_, Value::Object(inner)) => rewrite_result(inner, map),
            (_, Value::Array(items)) => items
                .iter_mut()
                .map(|item| match item {
                    Value::Object(inner) => rewrite_result(inner, map),
                    _ => 0,
                })
                .sum(),
            _ => 0,
        })
        .sum()
}

/// An id field as the runtime reads it: `agent_ids` an array of strings, any other a
/// string (a value of another shape is refused there, and kept here).
fn rewrite_value(key: &str, value: &mut Value, map: &impl Fn(AgentId) -> Option<AgentId>) -> usize {
    match (key, value) {
        ("agent_ids", Value::Array(ids)) => ids
            .iter_mut()
            .map(|id| match id {
                Value::String(text) => rewrite_id(text, map),
                _ => 0,
            })
            .sum(),
        ("agent_ids", _) => 0,
        (_, Value::String(text)) => rewrite_id(text, map),
        _ => 0,
    }
}

/// An id field: the runtime reads it trimmed, and only the id is rewritten (what pads it
/// stays, so a context goes down and comes back byte for byte).
fn rewrite_id(text: &mut String, map: &impl Fn(AgentId) -> Option<AgentId>) -> usize {
    let trimmed = text.trim();
    match trimmed.parse::<AgentId>().ok().and_then(map) {
        Some(to) => {
            let start = trimmed.as_ptr() as usize - text.as_ptr() as usize;
            let end = start + trimmed.len();
            text.replace_range(start..end, &to.to_string());
            1
        }
        None => 0,
    }
}

/// The ids in a refusal's text: every word that is an agent id (`a` and digits, one
/// spelling, between characters that are not word characters), as the runtime's refusals
/// name agents. A quoted word (`"a2"`, `` `a2` ``) is what a model wrote, quoted back (an
/// agent type it asked for): kept.
fn rewrite_prose(text: &mut String, map: &impl Fn(AgentId) -> Option<AgentId>) -> usize {
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    let mut copied = 0;
    let mut words = text.char_indices().peekable();
    let mut before: Option<char> = None;
    while let Some((start, c)) = words.next() {
        if c != 'a' || !separates(before) {
            before = Some(c);
            continue;
        }
        let mut end = start + 1;
        while let Some(&(i, d)) = words.peek() {
            if !d.is_ascii_digit() {
                break;
            }
            end = i + 1;
            words.next();
        }
        let after = text[end..].chars().next();
        before = text[..end].chars().next_back();
        if end == start + 1 || !separates(after) {
            continue;
        }
        let Some(to) = text[start..end].parse::<AgentId>().ok().and_then(map) else {
            continue;
        };
        out.push_str(&text[copied..start]);
        out.push_str(&to.to_string());
        copied = end;
        n += 1;
    }
    if n > 0 {
        out.push_str(&text[copied..]);
        *text = out;
    }
    n
}

/// Whether `c` may stand beside an id word: the text's end, or neither a word character nor
/// a quote.
fn separates(c: Option<char>) -> bool {
    !c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"' || c == '`')
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

    /// A context going down names the owner's agents by foreign ids (all but the seeded
    /// ones), and coming back up by the owner's again, byte for byte; a child's own text
    /// and a model's prose keep what they say.
    #[test]
    fn a_context_goes_down_foreign_and_comes_back_as_it_was() {
        let calls = vec![
            ToolCall::new(
                "c1",
                "Agent",
                json!({ "agent_type": "w", "prompt": "p a2" }),
            ),
            ToolCall::new(
                "c2",
                "steer_subagent",
                json!({ "agent_id": "a3", "message": "a2" }),
            ),
        ];
        let context = vec![
            Message::user("lead a2"),
            Message::assistant("about a2", calls),
            tool(
                "c1",
                json!({ "agent_id": "a2", "status": "completed", "text": "a3" }).to_string(),
            ),
            tool(
                "c2",
                json!({ "error": "a3 cannot take this now: it is completed" }).to_string(),
            ),
            Message::user(
                json!({ "notice": "subagent_ended", "agent_id": "a5", "status": "failed" })
                    .to_string(),
            ),
        ];
        let mut down = context.clone();
        // a5 is an earlier child of a resumed run: its admission seeds it.
        assert_eq!(
            into_hosted(&mut down, &[id(5)]),
            HashSet::from([id(2), id(3)])
        );
        assert_eq!(down[0].content, "lead a2");
        assert_eq!(down[1].content, "about a2");
        assert_eq!(
            down[1].tool_calls[1].input.to_value()["agent_id"],
            json!("a1000000003")
        );
        assert_eq!(
            down[2].content,
            r#"{"agent_id":"a1000000002","status":"completed","text":"a3"}"#
        );
        assert_eq!(
            down[3].content,
            r#"{"error":"a1000000003 cannot take this now: it is completed"}"#
        );
        assert_eq!(
            down[4].content, context[4].content,
            "seeded: left to admission"
        );
        let mut up = down;
        translate(&mut up, &[], owner_of_foreign);
        assert_eq!(up, context);
    }

    #[test]
    fn foreign_ids_are_past_every_hosted_one_and_map_back() {
        assert_eq!(foreign(id(0)), Some(id(FOREIGN_BASE)));
        assert_eq!(owner_of_foreign(id(FOREIGN_BASE + 7)), Some(id(7)));
        assert_eq!(owner_of_foreign(id(FOREIGN_BASE - 1)), None);
        assert_eq!(foreign(id(u64::MAX)), None);
        // A node two edges down: the owner's foreign id is foreign again, and comes back.
        let twice = foreign(foreign(id(4)).unwrap()).unwrap();
        assert_eq!(
            owner_of_foreign(owner_of_foreign(twice).unwrap()),
            Some(id(4))
        );
    }
}
