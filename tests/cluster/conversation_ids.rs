//! The agent ids in a remote agent's kept conversation are the owner tree's, under load. The owner keeps a remote agent's conversation under its own tree's ids: the hosted
//! edge sends every event emitted before a tapped conversation ahead of it (each tap
//! carries the last event's sequence number, `Side::on_hosted` merges by `Hosted::order`),
//! so every child the conversation names is mirrored (the stand-in's `mirrored` map) when
//! it is rewritten (`cluster::edge::ids`). These scenarios make a remote lead spawn, wait
//! for, steer, abort and answer many helpers in quick succession (the worker model's
//! `fan`, `burst`, `herd` and `quiz` tasks), and check:
//!
//! * every id the runtime wrote into the kept conversation (orchestration inputs and
//!   results, a refusal's words, `subagent_ended` and `question` notices) is a record of
//!   the owner's tree under the remote agent (the remote agent itself only in a refusal);
//! * the kept conversation and the answers are a local tree's for the same task (the
//!   spec; where timing decides what a conversation holds, only the answers);
//! * nothing hangs, and the worker ends idle with the usage counted once.
//!
//! Two `count` agents run first on each side, so the remote lead is `a3` in the owner's
//! tree and its helpers `a4`.. while on its node they are `a2`..: an id left as the hosted
//! tree's names another agent (or none) in the owner's tree.

use super::support::no_failures;
use super::support::spawn_runner;
use std::path::Path;

use agent_tree::Tree;
use agent_tree::protocol::{AgentId, Message, Role};
use serde_json::Value;

use super::support::{Dir, kept, local_tree, others_first, owner_tree, render, resumed, settled};
use super::{Owner, first_usage, root_tokens, worker_idle};

/// Where an id was written, and the id as written.
#[derive(Debug)]
struct Named {
    at: String,
    id: String,
}

/// Every id the runtime wrote into `messages`: orchestration inputs' `agent_id`,
/// `agent_ids` and `resume`; their results' `agent_id` and `agent_ids` at any depth, and a
/// refusal's words shaped like an id; the notices' `agent_id`.
fn named_ids(messages: &[Message]) -> Vec<Named> {
    let mut out = Vec::new();
    let mut delegation = std::collections::HashSet::new();
    fn fields(value: &Value, at: &str, out: &mut Vec<Named>) {
        match value {
            Value::Object(map) => {
                for (key, field) in map {
                    match (key.as_str(), field) {
                        ("agent_id" | "resume", Value::String(id)) => out.push(Named {
                            at: format!("{at}.{key}"),
                            id: id.clone(),
                        }),
                        ("agent_ids", Value::Array(ids)) => {
                            for id in ids.iter().filter_map(Value::as_str) {
                                out.push(Named {
                                    at: format!("{at}.agent_ids"),
                                    id: id.to_owned(),
                                });
                            }
                        }
                        ("text" | "error" | "partial" | "question", _) => {}
                        (_, inner) => fields(inner, &format!("{at}.{key}"), out),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    fields(item, at, out);
                }
            }
            _ => {}
        }
    }
    for (i, m) in messages.iter().enumerate() {
        for call in &m.tool_calls {
            if agent_tree::ORCHESTRATION_TOOLS.contains(&call.name.as_str()) {
                delegation.insert(call.id.clone());
                let value = call.input.to_value();
                if let Value::Object(map) = &value {
                    for key in ["agent_id", "agent_ids", "resume"] {
                        if let Some(field) = map.get(key) {
                            let wrapped = serde_json::json!({ key: field });
                            fields(&wrapped, &format!("#{i} {} input", call.name), &mut out);
                        }
                    }
                }
            }
        }
        let parsed = serde_json::from_str::<Value>(&m.content).ok();
        match (m.role, parsed) {
            (Role::Tool, Some(value))
                if m.tool_call_id
                    .as_ref()
                    .is_some_and(|id| delegation.contains(id)) =>
            {
                let at = format!("#{i} result of {}", m.tool_call_id.as_deref().unwrap());
                match value.as_object() {
                    Some(map) if map.len() == 1 && map.contains_key("error") => {
                        let text = map["error"].as_str().unwrap_or_default();
                        for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
                            let shaped = word.len() > 1
                                && word.starts_with('a')
                                && word[1..].bytes().all(|b| b.is_ascii_digit());
                            if shaped {
                                out.push(Named {
                                    at: format!("{at} (refusal)"),
                                    id: word.to_owned(),
                                });
                            }
                        }
                    }
                    _ => fields(&value, &at, &mut out),
                }
            }
            (Role::User, Some(value))
                if value
                    .get("notice")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n == "subagent_ended" || n == "question") =>
            {
                if let Some(id) = value.get("agent_id").and_then(Value::as_str) {
                    out.push(Named {
                        at: format!("#{i} {} notice", value["notice"]),
                        id: id.to_owned(),
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The ids of `messages` that are not records of `tree` under `top` (`top` itself only in
/// a refusal), each with where it was written and what it names in the tree.
fn strangers(tree: &Tree, top: AgentId, messages: &[Message]) -> Vec<String> {
    let under = |id: AgentId| {
        let mut at = tree.record(id).and_then(|r| r.parent);
        while let Some(parent) = at {
            if parent == top {
                return true;
            }
            at = tree.record(parent).and_then(|r| r.parent);
        }
        false
    };
    named_ids(messages)
        .into_iter()
        .filter(|named| {
            let Ok(id) = named.id.parse::<AgentId>() else {
                return true;
            };
            let itself = id == top && named.at.ends_with("(refusal)");
            !(itself || under(id))
        })
        .map(|named| {
            let what = named
                .id
                .parse::<AgentId>()
                .ok()
                .and_then(|id| tree.record(id))
                .map_or("no record".to_owned(), |r| {
                    format!("{} under {:?}", r.agent_type, r.parent)
                });
            format!("{} at {} ({what})", named.id, named.at)
        })
        .collect()
}

/// What one side did: each run's answer, the conversation kept after it, and the ids in it
/// that are not under the lead.
struct Side {
    answers: Vec<Option<String>>,
    conversations: Vec<Vec<Message>>,
    strangers: Vec<Vec<String>>,
}

/// Two `count` agents, then `task` and each of `resumes` on `tree` (journaled to `path`).
async fn side(tree: &Tree, path: &Path, task: &str, resumes: &[&str]) -> Side {
    others_first(tree, 2).await;
    let mut handle = spawn_runner(tree, task).await;
    let id = handle.id();
    let mut answers = vec![settled(&mut handle, "the first run").await.text];
    let mut conversations = vec![kept(tree, path, id).await];
    for prompt in resumes {
        answers.push(resumed(tree, id, prompt).await.text);
        conversations.push(kept(tree, path, id).await);
    }
    let strangers = conversations
        .iter()
        .map(|c| strangers(tree, id, c))
        .collect();
    Side {
        answers,
        conversations,
        strangers,
    }
}

/// How much of a local run a remote one must match.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// Nothing: timing decides (which helpers a full lead refuses, which notices it reads).
    Timing,
    /// The answers.
    Answers,
    /// The answers and every kept conversation.
    Whole,
}

/// Runs `task` (with `resumes`) `rounds` times on a local and a remote tree. Fails with
/// every id of the remote kept conversation that is not under the lead, every answer that
/// is not `expected`, and what differs from the local run as `spec` says.
async fn against_local(
    owner: &mut Owner,
    task: &str,
    resumes: &[&str],
    rounds: usize,
    spec: Spec,
    expected: impl Fn(&[Option<String>]) -> bool,
) {
    let (name, mut process) = owner.worker().await;
    let mut failures = Vec::new();
    let mut tokens = 0;
    for round in 0..rounds {
        let dir = Dir::new("conversation-ids");
        let (lp, rp) = (dir.file("local.journal"), dir.file("remote.journal"));
        let local = local_tree(&lp).await;
        let remote = owner_tree(&owner.node, &name, &rp).await;
        let want = side(&local, &lp, task, resumes).await;
        let got = side(&remote, &rp, task, resumes).await;
        for (run, strangers) in want.strangers.iter().enumerate() {
            if !strangers.is_empty() {
                failures.push(format!(
                    "{task} round {round} run {run}: the LOCAL check is wrong: {strangers:#?}"
                ));
            }
        }
        for (run, strangers) in got.strangers.iter().enumerate() {
            if !strangers.is_empty() {
                failures.push(format!(
                    "{task} round {round} run {run}: the remote kept conversation names \
                     agents that are not under the lead in the owner's tree: {strangers:#?}\n \
                     kept {:#?}",
                    render(&got.conversations[run])
                ));
            }
        }
        if (spec != Spec::Timing && want.answers != got.answers) || !expected(&got.answers) {
            failures.push(format!(
                "{task} round {round}: answers local {:?}, remote {:?}; the remote kept {:#?}",
                want.answers,
                got.answers,
                got.conversations.last().map(|c| render(c))
            ));
        }
        if spec == Spec::Whole {
            for (run, (w, g)) in want
                .conversations
                .iter()
                .zip(&got.conversations)
                .enumerate()
            {
                if w != g {
                    let first = w
                        .iter()
                        .zip(g.iter())
                        .position(|(a, b)| a != b)
                        .unwrap_or(w.len().min(g.len()));
                    failures.push(format!(
                        "{task} round {round} run {run}: the kept conversations differ from \
                         message {first} (local {} messages, remote {}): local {:?}\n remote {:?}",
                        w.len(),
                        g.len(),
                        w.get(first),
                        g.get(first)
                    ));
                }
            }
        }
        tokens += root_tokens(&remote);
        local.shutdown().await;
        remote.shutdown().await;
    }
    let (live, worker_tokens, edges) = worker_idle(&mut process);
    process.finish();
    assert_eq!((live, edges), (0, 0), "the worker ends idle");
    no_failures(&failures);
    assert_eq!(worker_tokens, tokens, "usage counted once");
}

/// A remote lead spawns three background helpers in one turn, waits for them with
/// `wait_subagents`, and answers; resumed twice (each run spawns three more; the resumed
/// runs' hosted trees hold the earlier ones as seeds). The kept conversation names the
/// helpers by their mirrored records' ids and is the local agent's.
pub(crate) async fn a_fan_of_helpers_in_one_turn_is_kept_as_locally(owner: &mut Owner) {
    against_local(
        owner,
        "fan 3 300",
        &["", "more"],
        3,
        Spec::Whole,
        |answers| {
            answers
                .iter()
                .all(|a| a.as_deref() == Some("fan completed,completed,completed refused 0"))
        },
    )
    .await;
}

/// A remote lead spawns five helpers in one turn: the fifth is refused
/// (`max_children_per_agent 4 reached for <the lead>`), the refusal naming the lead by its
/// owner's id; the rest as above.
pub(crate) async fn a_refused_fifth_helper_names_the_lead_as_locally(owner: &mut Owner) {
    against_local(owner, "fan 5 300", &[""], 2, Spec::Whole, |answers| {
        answers
            .iter()
            .all(|a| a.as_deref() == Some("fan completed,completed,completed,completed refused 1"))
    })
    .await;
}

/// A remote lead spawns eight instant helpers, one a turn, in quick succession (each may
/// end, and its `subagent_ended` notice come in, before the next turn), waits for all, and
/// answers; resumed once. Which notices a run reads, and which spawns a lead with four
/// helpers not yet ended is refused, is timing: only the ids (every one a record under the
/// lead, the refusals' the lead itself) and the answers' shape are checked.
pub(crate) async fn a_burst_of_helpers_across_turns_names_only_mirrored_records(owner: &mut Owner) {
    against_local(owner, "burst 8 0", &["again"], 3, Spec::Timing, |answers| {
        // Which spawns a full lead refuses (four helpers not yet ended) is timing.
        answers.iter().all(|a| {
            let a = a.as_deref().unwrap_or_default();
            let words: Vec<&str> = a.split(' ').collect();
            let done = words
                .get(1)
                .map_or(0, |w| w.split(',').filter(|s| *s == "completed").count());
            let refused: usize = words.get(3).and_then(|w| w.parse().ok()).unwrap_or(99);
            words.first() == Some(&"burst") && done + refused == 8 && done >= 4
        })
    })
    .await;
}

/// A remote lead spawns four helpers, steers each, aborts every second one, waits for all
/// and reads the first: the steer and abort inputs and results, the wait's outcomes and the
/// read name mirrored records, as a local lead's conversation names its helpers.
pub(crate) async fn steered_and_aborted_helpers_are_kept_as_locally(owner: &mut Owner) {
    against_local(owner, "herd 4 300", &[""], 3, Spec::Whole, |answers| {
        answers.iter().all(|a| {
            a.as_deref() == Some("herd completed,aborted,completed,aborted first completed")
        })
    })
    .await;
}

/// A remote lead's helper asks its owner (the lead): the lead's wait is answered with the
/// question, the `question` notice comes in, the lead answers with a steer and waits again.
/// The notice, the asking result and the steer name the helper by its mirrored record.
pub(crate) async fn a_helpers_question_to_a_remote_lead_names_it_by_the_owners_id(
    owner: &mut Owner,
) {
    against_local(owner, "quiz", &["", "again"], 3, Spec::Answers, |answers| {
        answers
            .iter()
            .all(|a| a.as_deref() == Some("quiz answered: 42"))
    })
    .await;
}

/// Three remote leads on one worker at once in one owner tree, each spawning six instant
/// helpers a turn at a time (each hosted tree names its helpers `a2`.. too; their mirrored
/// records interleave in the owner's tree), then each resumed at once: every lead's kept
/// conversation names only its own helpers. Then one aborted mid-burst and resumed: the
/// conversation its abort settled with, and the resumed run's, name only its own.
pub(crate) async fn concurrent_remote_leads_name_only_their_own_helpers(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let mut failures = Vec::new();
    let dir = Dir::new("concurrent-leads");
    let path = dir.file("remote.journal");
    let tree = owner_tree(&owner.node, &name, &path).await;
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(spawn_runner(&tree, "burst 6 0").await);
    }
    let ids: Vec<AgentId> = handles.iter().map(agent_tree::AgentHandle::id).collect();
    for handle in &mut handles {
        settled(handle, "a concurrent lead").await;
    }
    tokio::join!(
        resumed(&tree, ids[0], "again"),
        resumed(&tree, ids[1], "again"),
        resumed(&tree, ids[2], "again"),
    );
    for &id in &ids {
        let conversation = kept(&tree, &path, id).await;
        let wrong = strangers(&tree, id, &conversation);
        if !wrong.is_empty() || named_ids(&conversation).len() < 12 {
            failures.push(format!(
                "lead {id}: {wrong:#?}\n kept {:#?}",
                render(&conversation)
            ));
        }
    }
    // One aborted mid-burst (its helpers instant, its turns quick), then resumed.
    let mut handle = spawn_runner(&tree, "burst 8 30").await;
    let id = handle.id();
    first_usage(&tree, id).await;
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let _ = tree.abort(id);
    let aborted = settled(&mut handle, "the aborted lead").await;
    let at_abort = kept(&tree, &path, id).await;
    let wrong = strangers(&tree, id, &at_abort);
    if !wrong.is_empty() {
        failures.push(format!(
            "the aborted lead ({:?}): {wrong:#?}\n kept {:#?}",
            aborted.status,
            render(&at_abort)
        ));
    }
    let again = resumed(&tree, id, "").await;
    let conversation = kept(&tree, &path, id).await;
    let wrong = strangers(&tree, id, &conversation);
    if !wrong.is_empty() {
        failures.push(format!(
            "the aborted lead resumed ({:?}): {wrong:#?}\n kept {:#?}",
            again.text,
            render(&conversation)
        ));
    }
    let tokens = root_tokens(&tree);
    tree.shutdown().await;
    let (live, worker_tokens, edges) = worker_idle(&mut process);
    process.finish();
    assert_eq!((live, edges), (0, 0), "the worker ends idle");
    no_failures(&failures);
    assert_eq!(worker_tokens, tokens, "usage counted once");
}
