//! The worker's model: a small deterministic model reading its task, so that a remote
//! run's answers are the same whichever node runs it.
//!
//! [`WorkerModel`] answers each task by its first word:
//!
//! * `work N MS`: N turns, each billing `Usage::tokens(10, 2)`; turns before the last call
//!   the `pause` tool (MS milliseconds); the last answers `done N`, followed by every steer
//!   it was given (`| steered: <text>`).
//! * `fail-first`: the first such task in the process fails (not retryably); later ones
//!   answer `recovered`.
//! * `delegate N MS`: spawns a `helper` with `work N MS`, then answers `lead done`.
//! * `fail-always`: fails every time (not retryably).
//! * `delegate-bg N MS`: spawns a `helper` with `work N MS` in the background, then
//!   answers `lead done` at once (its run is over while the helper runs).
//! * `ask <question>`: asks its owner (`ask_owner`), then answers `answered: <result>`.
//! * `big N`: answers N bytes (`x` repeated).
//! * `count`: answers `messages <n>`, the number of messages the model was sent (a resumed
//!   run that continues its conversation sees the earlier ones).
//! * `steps N MS`: as `work N MS`, but the last turn answers `messages <n>`, as `count`.
//! * `fail-late N MS`: as `steps N MS`, but the last turn of the first such task in the
//!   process fails (not retryably); later ones answer `messages <n>`.
//! * `ask-big N`: asks its owner a question of N bytes (`q` repeated), then answers
//!   `answered: <the result's first 40 bytes>`.
//! * `recall`: each run (a first run, and every resumed one) spawns a `helper` with
//!   `work 1 0`; a run after the first then reads, by the id its conversation gives it, the
//!   first helper (`get_subagent_result`), and answers `recalled <status> <text>, new
//!   helper <same|another>` (whether the new helper's id is the one it read); the first
//!   run answers `first helper`. A spawn its run's end answered with an error (an abort
//!   while the helper worked) started no helper the conversation knows of: the next run
//!   starts one anew. No id is in an answer, so a remote run's answers are a local one's.
//! * `recall-big N`: as `recall`, but each helper's task is `big N`, and a run after the
//!   first answers `recalled <status> <bytes of the text it read> bytes, new helper
//!   <same|another>`.
//! * `poke`: each run spawns a `helper` with `work 1 0`; a run after the first then steers
//!   (`steer_subagent`), aborts (`abort_subagent`) and resumes (`Agent` with `resume`, prompt
//!   `again`) the first helper, by the id its conversation gives it, one call a turn, and
//!   answers `poked steer:<r> abort:<r> resume:<r>`, `<r>` `refused` for a result whose one
//!   field is `error`, else `ok`; the first run answers `first helper`.
//! * `fan N MS`: each run (a first run, and every resumed one) spawns N `helper`s with
//!   `work 2 MS` in the background, all in one turn (past `max_children_per_agent` the
//!   spawn is refused), waits for those it started (`wait_subagents`, `agent_ids`), and
//!   answers `fan <each outcome's status, comma-separated> refused <refused spawns>`.
//! * `burst N MS`: as `fan`, but one background spawn (`work 1 MS`) a turn, N turns in
//!   quick succession (a helper may end, and be noticed, before the next turn), then the
//!   wait, and answers `burst <outcomes> refused <refused spawns>`.
//! * `herd N MS`: each run spawns N background `helper`s with `work 3 MS` in one turn,
//!   steers each (`steer_subagent`, one turn), aborts every second one (`abort_subagent`,
//!   one turn), waits for all, reads the first (`get_subagent_result`), and answers
//!   `herd <each outcome's status> first <its status>`.
//! * `quiz`: each run spawns a background `helper` with `ask what now`, waits for it; when
//!   the wait says it is asking, answers it (`steer_subagent`, `42`) and waits again; answers
//!   `quiz <the helper's answer>`.
//! * `reach` (the first user message: for a runner that inherits its owner's context, the
//!   owner's task): spawns a `helper` with `work 3 300` in the background, then steers
//!   (`steer_subagent`, `hi`) the first agent that a delegation result of the context (a
//!   call not its own) names, and answers `reached <that id>: <the steer's result>`.
//!
//! * `relay` (the first user message, as `reach`): each run spawns a `helper` with `work 1 0`
//!   (calls `relay-spawn-<n>`); a run after the first then reads (`get_subagent_result`) its
//!   own first helper, then the first agent a delegation result of a call not its own names
//!   (`relay-own-<n>`, `relay-theirs-<n>`), and answers `relayed own:<r> theirs:<r>`, `<r>`
//!   the result's `status`, or `refused`; the first run answers `first helper`. No id is in
//!   an answer.
//!
//!   In `fan`, `burst`, `herd` and `quiz` a run's calls are named `<task>-<run>-<stage>-<i>` (`run` counts the
//!   final answers before it), and no id is in an answer.

use std::sync::atomic::{AtomicBool, Ordering};

use agent_tree::protocol::{Role, ToolCall, Usage};
use agent_tree::{BoxFuture, Model, ModelError, ModelRequest, ModelResponse};

/// The worker's deterministic model (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct WorkerModel {
    failed_once: AtomicBool,
    failed_late: AtomicBool,
}

fn task_of(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

fn steers_of(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .skip(1)
        .map(|m| format!(" | steered: {}", m.content))
        .collect()
}

impl Model for WorkerModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let task = task_of(&request);
            let words: Vec<&str> = task.split_whitespace().collect();
            let usage = Usage::tokens(10, 2);
            let number = |i: usize, default: u64| {
                words.get(i).and_then(|w| w.parse().ok()).unwrap_or(default)
            };
            let pause = |ms: u64, turn: u32| {
                ToolCall::new(
                    format!("pause-{turn}"),
                    "pause",
                    serde_json::json!({ "ms": ms }),
                )
            };
            let mut response = match words.first().copied() {
                Some("work") => {
                    let (turns, ms) = (number(1, 1), number(2, 50));
                    if u64::from(request.turn) < turns {
                        ModelResponse::text_and_calls("", vec![pause(ms, request.turn)])
                    } else {
                        ModelResponse::text(format!("done {turns}{}", steers_of(&request)))
                    }
                }
                Some("fail-first") => {
                    if !self.failed_once.swap(true, Ordering::SeqCst) {
                        return Err(ModelError::new("scripted failure on the worker"));
                    }
                    ModelResponse::text("recovered")
                }
                Some("fail-always") => {
                    return Err(ModelError::new("scripted failure on the worker, always"));
                }
                // `delegate-bg` starts its helper in the background and answers at once.
                Some(word @ ("delegate" | "delegate-bg")) => {
                    if request.turn == 1 {
                        let mut input = serde_json::json!({
                            "subagent_type": "helper",
                            "prompt": format!("work {} {}", number(1, 2), number(2, 50)),
                        });
                        if word == "delegate-bg" {
                            input["background"] = serde_json::Value::Bool(true);
                        }
                        let call = ToolCall::new(format!("{word}-1"), "Agent", input);
                        ModelResponse::text_and_calls("", vec![call])
                    } else {
                        ModelResponse::text("lead done")
                    }
                }
                // `work`, answering with the length of the conversation it was sent: a run
                // that continues an earlier one's conversation counts its messages too.
                Some("steps") => {
                    let (turns, ms) = (number(1, 1), number(2, 50));
                    if u64::from(request.turn) < turns {
                        ModelResponse::text_and_calls("", vec![pause(ms, request.turn)])
                    } else {
                        ModelResponse::text(format!("messages {}", request.messages.len()))
                    }
                }
                Some("fail-late") => {
                    let (turns, ms) = (number(1, 1), number(2, 50));
                    if u64::from(request.turn) < turns {
                        ModelResponse::text_and_calls("", vec![pause(ms, request.turn)])
                    } else if !self.failed_late.swap(true, Ordering::SeqCst) {
                        return Err(ModelError::new("scripted late failure on the worker"));
                    } else {
                        ModelResponse::text(format!("messages {}", request.messages.len()))
                    }
                }
                Some("recall") => recall(&request),
                Some("recall-big") => recall_big(&request, number(1, 1)),
                Some("poke") => poke(&request),
                Some("reach") => reach(&request),
                Some("relay") => relay(&request),
                Some(kind @ ("fan" | "burst" | "herd" | "quiz")) => lead(
                    &request,
                    kind,
                    usize::try_from(number(1, 3)).unwrap_or(3),
                    number(2, 50),
                ),
                Some("count") => {
                    ModelResponse::text(format!("messages {}", request.messages.len()))
                }
                Some("big") => {
                    let n = usize::try_from(number(1, 1)).unwrap_or(1);
                    ModelResponse::text("x".repeat(n))
                }
                Some("ask-big") => {
                    if request.turn == 1 {
                        let n = usize::try_from(number(1, 1)).unwrap_or(1);
                        let call = ToolCall::new(
                            "ask-big-1",
                            "ask_owner",
                            serde_json::json!({ "question": "q".repeat(n) }),
                        );
                        ModelResponse::text_and_calls("", vec![call])
                    } else {
                        let result = request
                            .messages
                            .iter()
                            .rev()
                            .find(|m| m.role == Role::Tool)
                            .map(|m| m.content.chars().take(40).collect::<String>())
                            .unwrap_or_default();
                        ModelResponse::text(format!("answered: {result}"))
                    }
                }
                Some("ask") => {
                    if request.turn == 1 {
                        let question = task.trim_start_matches("ask").trim();
                        let call = ToolCall::new(
                            "ask-1",
                            "ask_owner",
                            serde_json::json!({ "question": question }),
                        );
                        ModelResponse::text_and_calls("", vec![call])
                    } else {
                        let result = request
                            .messages
                            .iter()
                            .rev()
                            .find(|m| m.role == Role::Tool)
                            .map(|m| m.content.clone())
                            .unwrap_or_default();
                        ModelResponse::text(format!("answered: {result}"))
                    }
                }
                _ => ModelResponse::text(format!("unknown task: {task}")),
            };
            response.usage = usage;
            Ok(response)
        })
    }
}

/// The `recall` task's turn (see the module docs), read from the conversation alone.
fn recall(request: &ModelRequest) -> ModelResponse {
    let messages = &request.messages;
    // The calls by id, to tell which tool each result answers.
    let call_name = |id: &str| {
        messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .find(|c| c.id == id)
            .map(|c| c.name.clone())
    };
    let field = |m: &agent_tree::protocol::Message, key: &str| {
        serde_json::from_str::<serde_json::Value>(&m.content)
            .ok()
            .and_then(|v| v.get(key).and_then(|f| f.as_str().map(str::to_owned)))
    };
    let helpers: Vec<String> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter(|m| {
            call_name(m.tool_call_id.as_deref().unwrap_or_default()).as_deref() == Some("Agent")
        })
        .filter_map(|m| field(m, "agent_id"))
        .collect();
    let last = messages.last();
    let last_tool = last
        .filter(|m| m.role == Role::Tool)
        .and_then(|m| call_name(m.tool_call_id.as_deref().unwrap_or_default()));
    // An `Agent` call its run's end answered with an error (an abort while the helper
    // worked) started no helper this conversation knows of: the next run starts one anew.
    let spawned = last.is_some_and(|m| field(m, "agent_id").is_some());
    match last_tool.as_deref() {
        Some("Agent") if !spawned => spawn_helper(helpers.len()),
        Some("Agent") if helpers.len() == 1 => ModelResponse::text("first helper"),
        Some("Agent") => {
            let call = ToolCall::new(
                format!("recall-read-{}", helpers.len()),
                "get_subagent_result",
                serde_json::json!({ "agent_id": helpers[0] }),
            );
            ModelResponse::text_and_calls("", vec![call])
        }
        Some("get_subagent_result") => {
            let read = last.expect("a last message");
            let newest = helpers.last().cloned().unwrap_or_default();
            let same = if field(read, "agent_id").as_deref() == Some(newest.as_str()) {
                "same"
            } else {
                "another"
            };
            ModelResponse::text(format!(
                "recalled {} {}, new helper {same}",
                field(read, "status").unwrap_or_default(),
                field(read, "text")
                    .or_else(|| field(read, "error"))
                    .unwrap_or_default(),
            ))
        }
        // A run's first turn: a new helper.
        _ => spawn_helper(helpers.len()),
    }
}

/// The `recall` turn that starts a helper, the conversation knowing of `known` before it.
fn spawn_helper(known: usize) -> ModelResponse {
    let call = ToolCall::new(
        format!("recall-spawn-{known}"),
        "Agent",
        serde_json::json!({ "subagent_type": "helper", "prompt": "work 1 0" }),
    );
    ModelResponse::text_and_calls("", vec![call])
}

/// The `recall-big N` task's turn (see the module docs).
fn recall_big(request: &ModelRequest, bytes: u64) -> ModelResponse {
    let mut response = recall(request);
    for call in &mut response.tool_calls {
        if call.name == "Agent" {
            call.input = serde_json::json!({
                "subagent_type": "helper",
                "prompt": format!("big {bytes}"),
            })
            .into();
        }
    }
    if response.tool_calls.is_empty() && response.text.starts_with("recalled") {
        let read = request
            .messages
            .last()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(&m.content).ok());
        let field = |key: &str| {
            read.as_ref()
                .and_then(|v| v.get(key).and_then(|f| f.as_str().map(str::to_owned)))
        };
        let same = response
            .text
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_owned();
        response = ModelResponse::text(format!(
            "recalled {} {} bytes, new helper {same}",
            field("status").unwrap_or_default(),
            field("text").map_or(0, |t| t.len()),
        ));
    }
    response
}

/// The tool results in `messages` whose call ids start with `prefix` (`this: true`), or
/// whose call ids do not (`this: false`: another task's, such as an inherited context's).
fn results_of<'a>(
    messages: &'a [agent_tree::protocol::Message],
    prefix: &'a str,
    this: bool,
) -> impl DoubleEndedIterator<Item = &'a agent_tree::protocol::Message> {
    messages.iter().filter(move |m| {
        m.role == Role::Tool
            && m.tool_call_id
                .as_deref()
                .is_some_and(|id| id.starts_with(prefix) == this)
    })
}

/// The agent a tool result names (its `agent_id`), if it names one.
fn agent_id_of(result: &agent_tree::protocol::Message) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(&result.content)
        .ok()
        .and_then(|v| v.get("agent_id")?.as_str().map(str::to_owned))
}

/// The call id the conversation's last message answers, if it is a tool result ("" if not).
fn last_answered(messages: &[agent_tree::protocol::Message]) -> String {
    messages
        .last()
        .filter(|m| m.role == Role::Tool)
        .and_then(|m| m.tool_call_id.clone())
        .unwrap_or_default()
}

/// Whether a tool result is a refusal: an object whose one field is `error`.
fn is_refusal(result: &serde_json::Value) -> bool {
    result
        .as_object()
        .is_some_and(|o| o.len() == 1 && o.contains_key("error"))
}

/// The `poke` task's turn (see the module docs), read from the conversation alone.
fn poke(request: &ModelRequest) -> ModelResponse {
    let messages = &request.messages;
    let helpers: Vec<String> = results_of(messages, "poke-spawn-", true)
        .filter_map(agent_id_of)
        .collect();
    let n = helpers.len();
    let last = last_answered(messages);
    let verdict = |prefix: &str| {
        let refused = results_of(messages, prefix, true)
            .next_back()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(&m.content).ok())
            .is_some_and(|v| is_refusal(&v));
        if refused { "refused" } else { "ok" }
    };
    let call = |stage: &str, name: &str, input: serde_json::Value| {
        ModelResponse::text_and_calls(
            "",
            vec![ToolCall::new(format!("poke-{stage}-{n}"), name, input)],
        )
    };
    let first = helpers.first().cloned().unwrap_or_default();
    if last.starts_with("poke-spawn-") && n == 1 {
        ModelResponse::text("first helper")
    } else if last.starts_with("poke-spawn-") {
        call(
            "steer",
            "steer_subagent",
            serde_json::json!({ "agent_id": first, "message": "hi" }),
        )
    } else if last.starts_with("poke-steer-") {
        call(
            "abort",
            "abort_subagent",
            serde_json::json!({ "agent_id": first }),
        )
    } else if last.starts_with("poke-abort-") {
        call(
            "resume",
            "Agent",
            serde_json::json!({ "resume": first, "prompt": "again" }),
        )
    } else if last.starts_with("poke-resume-") {
        ModelResponse::text(format!(
            "poked steer:{} abort:{} resume:{}",
            verdict("poke-steer-"),
            verdict("poke-abort-"),
            verdict("poke-resume-")
        ))
    } else {
        call(
            "spawn",
            "Agent",
            serde_json::json!({ "subagent_type": "helper", "prompt": "work 1 0" }),
        )
    }
}

/// The `reach` task's turn (see the module docs), read from the conversation alone.
fn reach(request: &ModelRequest) -> ModelResponse {
    let messages = &request.messages;
    let result = |prefix: &str| {
        results_of(messages, prefix, true)
            .next()
            .map(|m| m.content.clone())
    };
    // The first agent a delegation result of the context names (its calls are not this
    // run's, which are all `reach-…`).
    let theirs = results_of(messages, "reach-", false)
        .find_map(agent_id_of)
        .unwrap_or_default();
    let call = |id: &str, name: &str, input: serde_json::Value| {
        ModelResponse::text_and_calls("", vec![ToolCall::new(id, name, input)])
    };
    if result("reach-spawn").is_none() {
        call(
            "reach-spawn",
            "Agent",
            serde_json::json!({
                "subagent_type": "helper",
                "prompt": "work 3 300",
                "background": true,
            }),
        )
    } else if let Some(steered) = result("reach-steer") {
        ModelResponse::text(format!("reached {theirs}: {steered}"))
    } else {
        call(
            "reach-steer",
            "steer_subagent",
            serde_json::json!({ "agent_id": theirs, "message": "hi" }),
        )
    }
}

/// The `relay` task's turn (see the module docs), read from the conversation alone.
fn relay(request: &ModelRequest) -> ModelResponse {
    let messages = &request.messages;
    let own: Vec<String> = results_of(messages, "relay-spawn-", true)
        .filter_map(agent_id_of)
        .collect();
    let theirs = results_of(messages, "relay-", false)
        .find_map(agent_id_of)
        .unwrap_or_default();
    let n = own.len();
    let last = last_answered(messages);
    let verdict = |prefix: &str| {
        results_of(messages, prefix, true)
            .next_back()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(&m.content).ok())
            .map(|v| match v.get("status").and_then(|s| s.as_str()) {
                Some(status) => status.to_owned(),
                None => "refused".to_owned(),
            })
            .unwrap_or_default()
    };
    let call = |stage: &str, name: &str, input: serde_json::Value| {
        ModelResponse::text_and_calls(
            "",
            vec![ToolCall::new(format!("relay-{stage}-{n}"), name, input)],
        )
    };
    if last.starts_with("relay-spawn-") && n == 1 {
        ModelResponse::text("first helper")
    } else if last.starts_with("relay-spawn-") {
        call(
            "own",
            "get_subagent_result",
            serde_json::json!({ "agent_id": own[0] }),
        )
    } else if last.starts_with("relay-own-") {
        call(
            "theirs",
            "get_subagent_result",
            serde_json::json!({ "agent_id": theirs }),
        )
    } else if last.starts_with("relay-theirs-") {
        ModelResponse::text(format!(
            "relayed own:{} theirs:{}",
            verdict("relay-own-"),
            verdict("relay-theirs-")
        ))
    } else {
        call(
            "spawn",
            "Agent",
            serde_json::json!({ "subagent_type": "helper", "prompt": "work 1 0" }),
        )
    }
}

/// The `fan`, `burst`, `herd` and `quiz` tasks' turn (see the module docs), read from the
/// conversation alone.
fn lead(request: &ModelRequest, kind: &str, n: usize, ms: u64) -> ModelResponse {
    use serde_json::{Value, json};
    let messages = &request.messages;
    // This run: the final answers before it.
    let run = messages
        .iter()
        .filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
        .count();
    let prefix = format!("{kind}-{run}-");
    let parsed = |m: &agent_tree::protocol::Message| {
        serde_json::from_str::<Value>(&m.content).unwrap_or(Value::Null)
    };
    // This run's tool results, by stage: (call id, parsed result).
    let results = |stage: &str| -> Vec<Value> {
        let stage = format!("{prefix}{stage}-");
        results_of(messages, &stage, true).map(parsed).collect()
    };
    let spawns = results("spawn");
    let helpers: Vec<String> = spawns
        .iter()
        .filter(|v| !is_refusal(v))
        .filter_map(|v| v.get("agent_id").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let refusals = spawns.iter().filter(|v| is_refusal(v)).count();
    // The stage of this run's last call answered (a notice may have come in after it).
    let stage = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Tool)
        .find_map(|m| {
            m.tool_call_id
                .as_deref()
                .filter(|id| id.starts_with(&prefix))
        })
        .and_then(|id| id.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split('-').next())
        .unwrap_or("")
        .to_owned();
    let calls = |stage: &str, name: &str, inputs: Vec<Value>| {
        let calls = inputs
            .into_iter()
            .enumerate()
            .map(|(i, input)| ToolCall::new(format!("{prefix}{stage}-{i}"), name, input))
            .collect();
        ModelResponse::text_and_calls("", calls)
    };
    let spawn =
        |task: String| json!({ "subagent_type": "helper", "prompt": task, "background": true });
    let wait = |stage: &str| {
        calls(
            stage,
            "wait_subagents",
            vec![json!({ "agent_ids": helpers.clone() })],
        )
    };
    let statuses = |v: Option<&Value>| -> String {
        v.and_then(|v| v.get("outcomes"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|o| o.get("status").and_then(Value::as_str).unwrap_or("?"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let last_wait = |stage: &str| results(stage).last().cloned();
    match (kind, stage.as_str()) {
        ("fan", "") => calls(
            "spawn",
            "Agent",
            (0..n).map(|_| spawn(format!("work 2 {ms}"))).collect(),
        ),
        ("fan" | "burst", "spawn") if kind == "fan" || spawns.len() >= n => wait("wait"),
        ("burst", "" | "spawn") => ModelResponse::text_and_calls(
            "",
            vec![ToolCall::new(
                format!("{prefix}spawn-{}", spawns.len()),
                "Agent",
                spawn(format!("work 1 {ms}")),
            )],
        ),
        ("fan" | "burst", "wait") => ModelResponse::text(format!(
            "{kind} {} refused {refusals}",
            statuses(last_wait("wait").as_ref())
        )),
        ("herd", "") => calls(
            "spawn",
            "Agent",
            (0..n).map(|_| spawn(format!("work 3 {ms}"))).collect(),
        ),
        ("herd", "spawn") => calls(
            "steer",
            "steer_subagent",
            helpers
                .iter()
                .map(|id| json!({ "agent_id": id, "message": "hi" }))
                .collect(),
        ),
        ("herd", "steer") => calls(
            "abort",
            "abort_subagent",
            helpers
                .iter()
                .skip(1)
                .step_by(2)
                .map(|id| json!({ "agent_id": id }))
                .collect(),
        ),
        ("herd", "abort") => wait("wait"),
        ("herd", "wait") => calls(
            "read",
            "get_subagent_result",
            vec![json!({ "agent_id": helpers.first().cloned().unwrap_or_default() })],
        ),
        ("herd", "read") => {
            let first = results("read")
                .last()
                .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default();
            ModelResponse::text(format!(
                "herd {} first {first}",
                statuses(last_wait("wait").as_ref())
            ))
        }
        ("quiz", "") => calls("spawn", "Agent", vec![spawn("ask what now".to_owned())]),
        ("quiz", "spawn") => wait("wait"),
        ("quiz", "wait") => {
            let asking = last_wait("wait").is_some_and(|v| {
                v.get("status").and_then(Value::as_str) == Some("asking")
                    || v.get("outcomes").is_none()
            });
            if asking {
                calls(
                    "steer",
                    "steer_subagent",
                    vec![json!({
                        "agent_id": helpers.first().cloned().unwrap_or_default(),
                        "message": "42",
                    })],
                )
            } else {
                ModelResponse::text(format!("quiz {}", answer_of(last_wait("wait").as_ref())))
            }
        }
        ("quiz", "steer") => wait("again"),
        ("quiz", "again") => {
            ModelResponse::text(format!("quiz {}", answer_of(last_wait("again").as_ref())))
        }
        _ => ModelResponse::text(format!("{kind} lost at stage {stage:?}")),
    }
}

/// The first outcome's text in a `wait_subagents` result.
fn answer_of(result: Option<&serde_json::Value>) -> String {
    result
        .and_then(|v| v.get("outcomes"))
        .and_then(|o| o.get(0))
        .and_then(|o| o.get("text"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?")
        .to_owned()
}
