//! The research desk, end to end: a `lead` (Claude Code agent file, on the Anthropic
//! adapter, streamed) delegates to a `web-researcher` (Claude Code file, Anthropic) and an
//! `analyst` (pi file, on the OpenAI-compatible adapter, streamed), against the routed mock
//! of both providers on 127.0.0.1 (`routed.rs`, the desk itself in `desk.rs`) that speaks
//! SSE the way the real APIs do (tool_use / tool_calls deltas, usage chunks, 429 with
//! retry-after-ms, HTTP 529 overloaded, an `overloaded_error` event mid-stream) and refuses,
//! with the providers' 400, any request a real provider would refuse (a tool call without
//! its result, a result without its call, results after text, empty text blocks, a tool name
//! a provider would not take).
//!
//! What holds: the whole desk end to end, `maxTurns`, steering during a tool call,
//! mid-stream errors and stalls retried, shutdown with a question open, `fail_fast`, a
//! top-level question to the application, two questions at once, and a crash then a resume
//! from the journal.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::{FnTool, ToolError, Tree};
use agent_tree_models::Anthropic;
use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, EndReason, EventKind, Fold, ModelErrorKind, SpawnRequest,
    Usage,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::scratch;
use crate::desk::{ANALYST, config, desk, desk_script, desk_tree, drain, find, project, read_tool};
use crate::routed::{
    Mock, Resp, an_calls, an_overloaded_event, an_partial, an_text, oa_call, oa_chunk, oa_text,
};

/// The whole desk: agent files of both formats, model aliases, background children
/// with `wait_subagents`, a 429 with `retry-after-ms`, an HTTP 529 and an `overloaded_error`
/// mid-stream (each retried), a child's `ask_owner` answered by the owner's
/// `steer_subagent`, usage per agent and per subtree (every attempt billed), the event stream
/// folded back into the records, a resume of the lead that resumes a child, and shutdown.
/// Every request is checked the way the providers check it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_research_desk_runs_end_to_end_on_both_providers() {
    let mock = Mock::start(desk_script).await;
    let tree = Tree::builder()
        .config(config())
        .catalog(project(ANALYST))
        .model(desk(&mock))
        .tool(read_tool())
        .unwrap()
        .build()
        .await
        .unwrap();
    let mut events = tree.subscribe();
    let mut lead = tree
        .spawn(SpawnRequest::new("lead", "How did Q3 go, by region?"))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(20), lead.outcome())
        .await
        .expect("the desk hangs");
    assert_eq!(
        mock.refusals(),
        Vec::<String>::new(),
        "requests a provider refuses"
    );
    assert_eq!(
        outcome.text.as_deref(),
        Some("DESK REPORT: EMEA 12 (press positive), APAC 9"),
        "{}",
        outcome.summary()
    );

    // Model names of the files reach each provider through the aliases.
    for req in mock.requests() {
        let want = match req.agent().as_str() {
            "lead" => "claude-opus-4-1",
            "web-researcher" => "claude-sonnet-4-5",
            _ => "qwen2.5:7b",
        };
        assert_eq!(req.body["model"], want, "{}", req.agent());
        assert_eq!(req.body["stream"], true);
    }
    // The analyst offered its file's tools (`read` registered; `bash` is not).
    let analyst_req = &mock.of("analyst")[1];
    assert_eq!(analyst_req.tool_names(), ["read", "ask_owner"]);
    // The web researcher: Claude Code's `Read` is `read`; no delegation tools, `ask_owner`.
    let web_req = &mock.of("web-researcher")[0];
    assert_eq!(web_req.tool_names(), ["read", "ask_owner"]);

    let web = find(&tree, "web-researcher");
    let analyst = find(&tree, "analyst");
    let web_outcome = web.outcome.clone().unwrap();
    assert_eq!(
        web_outcome.text.as_deref(),
        Some("WEB-DONE: EMEA press was positive"),
        "the failed attempt's streamed text must not leak into the answer"
    );
    // The answer to its question reached it (the owner's steer).
    assert!(
        mock.of("web-researcher")
            .last()
            .unwrap()
            .text()
            .contains("EMEA only, last 30 days")
    );

    // Usage: every attempt billed (the mid-stream failure's message_start counts).
    assert_eq!(analyst.own, Usage::tokens(650, 50));
    assert_eq!(web.own, Usage::tokens(630, 41));
    let lead_calls = mock.of("lead").len() as u64;
    // Turn 0 (120, 40); the 529 bills nothing; every later call (100, 10).
    let lead_own = Usage::tokens(120 + 100 * (lead_calls - 2), 40 + 10 * (lead_calls - 2));
    let lead_record = tree.record(lead.id()).unwrap();
    assert_eq!(lead_record.own, lead_own);
    assert_eq!(
        lead_record.subtree,
        Usage::tokens(
            lead_own.input_tokens + 650 + 630,
            lead_own.output_tokens + 50 + 41
        )
    );
    tree.snapshot().check_usage().unwrap();

    // The event stream: the retries, the question, the steer.
    let seen = drain(&mut events);
    let retries: Vec<(AgentId, ModelErrorKind, u64)> = seen
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Retrying {
                error_kind,
                delay_ms,
                ..
            } => Some((e.agent, *error_kind, *delay_ms)),
            _ => None,
        })
        .collect();
    assert!(
        retries.contains(&(analyst.id, ModelErrorKind::RateLimited, 20)),
        "{retries:?}"
    );
    assert!(
        retries
            .iter()
            .any(|(a, k, _)| *a == web.id && *k == ModelErrorKind::Transient),
        "{retries:?}"
    );
    assert!(
        retries
            .iter()
            .any(|(a, k, _)| *a == lead.id() && *k == ModelErrorKind::Transient),
        "{retries:?}"
    );
    assert!(seen.iter().any(|e| e.agent == web.id
        && matches!(&e.kind, EventKind::Asked { question } if question == "Which region should I focus on?")));
    assert!(
        seen.iter()
            .any(|e| e.agent == web.id && matches!(e.kind, EventKind::Steered))
    );

    // Resume the lead with a follow-up; it resumes its analyst child.
    let mut again = tree
        .resume(lead.id(), "Now break APAC down by country")
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(20), again.outcome())
        .await
        .expect("the resumed desk hangs");
    assert_eq!(
        mock.refusals(),
        Vec::<String>::new(),
        "requests a provider refuses"
    );
    assert_eq!(
        outcome.text.as_deref(),
        Some("DESK REPORT 2: APAC by country attached"),
        "{}",
        outcome.summary()
    );
    let analyst = tree.record(analyst.id).unwrap();
    assert_eq!(analyst.own, Usage::tokens(1050, 70));
    assert_eq!(analyst.status, AgentStatus::Completed);
    // The resumed analyst continued its own conversation.
    let last = mock.of("analyst").pop().unwrap();
    assert!(last.text().contains("ANALYST-DONE") && last.text().contains("Break APAC down"));

    let report = tree.shutdown().await;
    assert!(report.killed.is_empty(), "{report:?}");
    assert!(tree.alive_actors().is_empty());
    tree.snapshot().check_usage().unwrap();

    // The event stream alone rebuilds every record.
    let mut all = seen;
    all.extend(drain(&mut events));
    let mut fold = Fold::new();
    for e in &all {
        fold.apply(e).unwrap();
    }
    let snapshot = tree.snapshot();
    let records: Vec<AgentRecord> = snapshot.records.iter().map(|r| (**r).clone()).collect();
    assert_eq!(fold.records().len(), records.len());
    for (folded, real) in fold.records().iter().zip(&records) {
        assert_eq!(folded, real);
    }
}

/// `maxTurns` from a pi file: an analyst that keeps calling tools fails with reason
/// `max_turns` after exactly that many model calls, and its owner, waiting in a foreground
/// `Agent` call, reads `failed` with the reason and carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_max_turns_from_a_pi_file_fails_it_and_its_owner_carries_on() {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("lead", 0) => an_calls(
            &[(
                "Agent",
                json!({"agent_type":"analyst","prompt":"Sum every CSV"}),
            )],
            50,
            5,
        ),
        ("lead", _) => an_text("the analyst ran out of turns", 50, 5),
        ("analyst", n) => oa_call("read", json!({"path": format!("part{n}.csv")}), 10, 1),
        _ => Resp::json(500, json!({})),
    })
    .await;
    let analyst = ANALYST.replace("thinking: low\n", "thinking: low\nmaxTurns: 2\n");
    let tree = desk_tree(&mock, &analyst).await;
    let outcome = tree
        .run(SpawnRequest::new("lead", "Sum every CSV"))
        .await
        .unwrap();
    assert_eq!(mock.refusals(), Vec::<String>::new());
    assert_eq!(
        outcome.text.as_deref(),
        Some("the analyst ran out of turns")
    );
    let analyst = find(&tree, "analyst");
    let analyst_outcome = analyst.outcome.clone().unwrap();
    assert_eq!(analyst_outcome.status, AgentStatus::Failed);
    assert_eq!(analyst_outcome.reason, EndReason::MaxTurns);
    assert_eq!(mock.of("analyst").len(), 2);
    assert_eq!(analyst.own, Usage::tokens(20, 2));
    let result = &mock.of("lead")[1].tool_results()[0];
    assert!(
        result.contains("failed") && result.contains("max_turns"),
        "{result}"
    );
    tree.shutdown().await;
}

/// The application steers an analyst (OpenAI-compatible, streamed) while its `read`
/// tool call runs: the next request answers the call first (`tool` right after the
/// assistant's `tool_calls`), then the steer, as Chat Completions requires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_while_a_tool_runs_follows_the_calls_answer() {
    let mock = Mock::start(|req, _| match req.turn() {
        0 => oa_call("read", json!({"path":"q3.csv"}), 10, 1),
        _ => oa_text("ANALYST-DONE", 10, 1),
    })
    .await;
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (e, r) = (entered.clone(), release.clone());
    let slow_read = FnTool::new("read", "Reads a file", move |_ctx, _input: Value| {
        let (e, r) = (e.clone(), r.clone());
        async move {
            e.notify_one();
            r.notified().await;
            Ok::<String, ToolError>("region,revenue\nEMEA,12\n".into())
        }
    });
    let tree = Tree::builder()
        .config(config())
        .catalog(project(ANALYST))
        .model(desk(&mock))
        .tool(slow_read)
        .unwrap()
        .build()
        .await
        .unwrap();
    let mut analyst = tree
        .spawn(SpawnRequest::new("analyst", "Q3 by region"))
        .await
        .unwrap();
    entered.notified().await;
    tree.steer(analyst.id(), "Only EMEA, please").await.unwrap();
    release.notify_one();
    let outcome = analyst.outcome().await;
    assert_eq!(mock.refusals(), Vec::<String>::new());
    assert_eq!(
        outcome.text.as_deref(),
        Some("ANALYST-DONE"),
        "{}",
        outcome.summary()
    );
    let second = &mock.of("analyst")[1];
    let roles: Vec<&str> = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert!(second.pending().contains("Only EMEA, please"));
    tree.shutdown().await;
}

/// An OpenAI-compatible gateway (OpenRouter) that fails mid-stream after some text,
/// with an `error` object and `finish_reason: "error"`: retried, and the answer is the retry's
/// text alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_error_mid_stream_is_retried_and_the_answer_is_the_retrys() {
    let mock = Mock::start(|_, attempt| match attempt {
        0 => Resp::Sse(vec![
            oa_chunk(json!({"role":"assistant","content":""}), None),
            oa_chunk(json!({"content":"EMEA was "}), None),
            format!(
                "data: {}\n\n",
                json!({"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"m",
                    "error":{"code":502,"message":"Provider returned error"},
                    "choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]})
            ),
        ]),
        _ => oa_text("ANALYST-DONE: EMEA 12", 40, 4),
    })
    .await;
    let tree = desk_tree(&mock, ANALYST).await;
    let mut events = tree.subscribe();
    let outcome = tree
        .run(SpawnRequest::new("analyst", "Q3 by region"))
        .await
        .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("ANALYST-DONE: EMEA 12"),
        "{}",
        outcome.summary()
    );
    let retried = drain(&mut events).into_iter().any(|e| {
        matches!(
            e.kind,
            EventKind::Retrying {
                error_kind: ModelErrorKind::Transient,
                ..
            }
        )
    });
    assert!(retried);
    assert_eq!(mock.requests().len(), 2);
    tree.shutdown().await;
}

/// A shutdown while a child waits for its owner's answer to `ask_owner` and the
/// owner's model call (Anthropic, streamed) hangs: quick, nobody killed, both aborted with
/// reason `shutdown`, usage still adding up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_a_question_is_open_aborts_both_quickly() {
    let never = Arc::new(Notify::new());
    let n = never.clone();
    let mock = Mock::start(move |req, _| match (req.agent().as_str(), req.turn()) {
        ("lead", 0) => an_calls(
            &[(
                "Agent",
                json!({"agent_type":"web-researcher","prompt":"press","background":true}),
            )],
            50,
            5,
        ),
        ("lead", _) => Resp::Gate(n.clone(), Box::new(an_text("never", 1, 1))),
        ("web-researcher", 0) => {
            an_calls(&[("ask_owner", json!({"question":"Which region?"}))], 30, 3)
        }
        _ => an_text("unexpected", 1, 1),
    })
    .await;
    let tree = desk_tree(&mock, ANALYST).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "Q3 press"))
        .await
        .unwrap();
    let mut events = tree.subscribe();
    loop {
        let e = events.next().await.unwrap();
        if matches!(e.kind, EventKind::Asked { .. }) {
            break;
        }
    }
    mock.until("lead", 2).await;
    let report = tokio::time::timeout(Duration::from_secs(5), tree.shutdown())
        .await
        .expect("shutdown hangs");
    assert!(report.killed.is_empty(), "{report:?}");
    assert!(report.elapsed < Duration::from_secs(2), "{report:?}");
    for record in tree.snapshot().agents() {
        let outcome = record.outcome.clone().unwrap();
        assert_eq!(outcome.status, AgentStatus::Aborted, "{record:?}");
        assert_eq!(outcome.reason, EndReason::Shutdown, "{record:?}");
    }
    assert_eq!(
        tree.record(lead.id()).unwrap().subtree,
        Usage::tokens(80, 8)
    );
    tree.snapshot().check_usage().unwrap();
    drop(never);
}

/// `wait_subagents` with `fail_fast`: one child's provider refuses its request for
/// good (a 400 "prompt is too long", not retried), the other child is aborted, and the lead
/// reads both outcomes; the aborted child's streamed usage stays billed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_after_a_permanent_error_aborts_the_other_child_and_keeps_its_usage() {
    let hold = Arc::new(Notify::new());
    let h = hold.clone();
    let mock = Mock::start(move |req, _| match (req.agent().as_str(), req.turn()) {
        ("lead", 0) => an_calls(
            &[
                ("Agent", json!({"agent_type":"analyst","prompt":"sum","background":true})),
                ("Agent", json!({"agent_type":"web-researcher","prompt":"press","background":true})),
            ],
            50,
            5,
        ),
        ("lead", 1) => {
            let ids = req.spawned_ids();
            an_calls(&[("wait_subagents", json!({"agent_ids": ids, "policy": "fail_fast"}))], 50, 5)
        }
        ("lead", _) => an_text("one failed, the other was stopped", 50, 5),
        ("analyst", _) => Resp::json(
            400,
            json!({"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}),
        ),
        ("web-researcher", _) => Resp::Gate(h.clone(), Box::new(an_text("late", 1, 1))),
        _ => an_text("?", 1, 1),
    })
    .await;
    let tree = desk_tree(&mock, ANALYST).await;
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(mock.refusals(), Vec::<String>::new());
    assert_eq!(
        outcome.text.as_deref(),
        Some("one failed, the other was stopped"),
        "{}",
        outcome.summary()
    );
    let analyst = find(&tree, "analyst").outcome.unwrap();
    assert_eq!(analyst.status, AgentStatus::Failed);
    assert!(
        analyst
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("context_length"),
        "{analyst:?}"
    );
    assert_eq!(mock.of("analyst").len(), 1, "a 400 is not retried");
    let web = find(&tree, "web-researcher").outcome.unwrap();
    assert_eq!(web.status, AgentStatus::Aborted);
    let waited = mock.of("lead")[2].tool_results().pop().unwrap();
    assert!(
        waited.contains("failed") && waited.contains("aborted"),
        "{waited}"
    );
    tree.shutdown().await;
    drop(hold);
}

/// A top-level lead asks the application (`TreeBuilder::on_question`): it is offered
/// `ask_owner`, the handler's answer is the call's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_level_lead_asks_the_application() {
    let mock = Mock::start(|req, _| match req.turn() {
        0 => an_calls(
            &[("ask_owner", json!({"question":"Which quarter?"}))],
            20,
            2,
        ),
        _ => an_text("Q3 it is", 20, 2),
    })
    .await;
    let tree = Tree::builder()
        .config(config())
        .catalog(project(ANALYST))
        .model(desk(&mock))
        .on_question(|q: agent_tree_actors::Question| async move {
            assert_eq!(q.question, "Which quarter?");
            Ok::<String, String>("Q3".into())
        })
        .build()
        .await
        .unwrap();
    let outcome = tree.run(SpawnRequest::new("lead", "report")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("Q3 it is"));
    assert!(
        mock.of("lead")[0]
            .tool_names()
            .contains(&"ask_owner".to_owned())
    );
    assert_eq!(mock.of("lead")[1].tool_results(), ["Q3"]);
    tree.shutdown().await;
}

/// The crash-recovery test's first life: the lead has spawned both researchers, and waits
/// on them (`wait_subagents`) while their provider calls hang. Returns the lead's id.
fn first_life(journal: PathBuf) -> AgentId {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let lead = runtime.block_on(async {
        let never = Arc::new(Notify::new());
        let n = never.clone();
        let mock = Mock::start(move |req, _| match (req.agent().as_str(), req.turn()) {
            ("lead", 0) => an_calls(
                &[
                    ("Agent", json!({"agent_type":"analyst","prompt":"Compute Q3 revenue by region","background":true})),
                    ("Agent", json!({"agent_type":"web-researcher","prompt":"Q3 press","background":true})),
                ],
                120,
                40,
            ),
            ("lead", _) => {
                let ids = req.spawned_ids();
                an_calls(&[("wait_subagents", json!({"agent_ids": ids}))], 100, 10)
            }
            _ => Resp::Gate(n.clone(), Box::new(an_text("never", 1, 1))),
        })
        .await;
        let tree = Tree::builder()
            .config(config())
            .catalog(project(ANALYST))
            .model(desk(&mock))
            .tool(read_tool())
            .unwrap()
            .journal(
                agent_tree_actors::JournalConfig::new(&journal)
                    .durability(agent_tree_actors::Durability::EveryEntry),
            )
            .build()
            .await
            .unwrap();
        let lead = tree
            .spawn(SpawnRequest::new("lead", "How did Q3 go?"))
            .await
            .unwrap()
            .id();
        mock.until("lead", 2).await;
        mock.until("analyst", 1).await;
        mock.until("web-researcher", 1).await;
        // Let the lead's wait begin, and the journal write what it was handed.
        tokio::time::sleep(Duration::from_millis(100)).await;
        tree.flush_journal().await;
        // The process dies: nothing of the tree runs again (no drop, no shutdown).
        std::mem::forget(tree);
        std::mem::forget(never);
        lead
    });
    runtime.shutdown_background();
    lead
}

/// Crash recovery from the journal: The desk's process dies while the lead waits on its two
/// researchers; a tree built on the journal comes back with the three `interrupted`, the
/// usage billed before the crash, and `Tree::resume(lead, "")` re-runs the lead on its
/// journaled conversation: every request of the second life is one a provider takes.
#[test]
fn after_a_crash_the_desk_resumes_from_the_journal() {
    let dir = scratch("journal");
    let journal = dir.join("desk.journal");
    let lead = first_life(journal.clone());
    // The first life's tree was leaked, not dropped, so in this process it still holds the
    // journal's lock (one tree per journal), which a dead process's would not: the second
    // life recovers from a copy of the file, as a new process would from the file itself.
    let journal = {
        let copy = dir.join("desk-recovered.journal");
        std::fs::copy(&journal, &copy).unwrap();
        copy
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mock = Mock::start(|req, _| match (req.agent().as_str(), req.pending()) {
            ("lead", p) if p.contains("ANALYST-DONE") && p.contains("WEB-DONE") => {
                an_text("RECOVERED REPORT", 100, 10)
            }
            ("lead", p) if p.contains("interrupted") || p.contains("aborted") => {
                let ids = req.spawned_ids();
                an_calls(
                    &[
                        ("Agent", json!({"agent_type":"analyst","resume":ids[0],"prompt":"Please finish"})),
                        ("Agent", json!({"agent_type":"web-researcher","resume":ids[1],"prompt":"Please finish"})),
                    ],
                    100,
                    10,
                )
            }
            ("lead", _) => {
                let ids = req.spawned_ids();
                an_calls(&[("wait_subagents", json!({"agent_ids": ids}))], 100, 10)
            }
            ("analyst", _) => oa_text("ANALYST-DONE", 30, 3),
            ("web-researcher", _) => an_text("WEB-DONE", 30, 3),
            _ => Resp::json(500, json!({})),
        })
        .await;
        let tree = Tree::builder()
            .config(config())
            .catalog(project(ANALYST))
            .model(desk(&mock))
            .tool(read_tool())
            .unwrap()
            .journal(agent_tree_actors::JournalConfig::new(&journal))
            .build()
            .await
            .unwrap();
        let interrupted = tree.interrupted();
        assert_eq!(interrupted.len(), 3, "{:?}", tree.snapshot().render_text());
        // Billed before the crash: the lead's two turns.
        assert_eq!(tree.record(lead).unwrap().subtree, Usage::tokens(220, 50));
        let mut resumed = tree.resume(lead, "").await.unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(20), resumed.outcome())
            .await
            .expect("the recovered desk hangs");
        assert_eq!(mock.refusals(), Vec::<String>::new(), "requests a provider refuses");
        assert_eq!(outcome.text.as_deref(), Some("RECOVERED REPORT"), "{}", outcome.summary());
        tree.snapshot().check_usage().unwrap();
        tree.shutdown().await;
    });
}

/// Two children ask their owner at about the same time (one on each adapter) while
/// the lead waits on both: each question reaches the lead (as a wait's `asking` or a
/// notice), each answer reaches its child, nothing hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_questions_at_once_each_reach_the_owner_and_get_their_answer() {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("lead", 0) => an_calls(
            &[
                (
                    "Agent",
                    json!({"agent_type":"analyst","prompt":"sum","background":true}),
                ),
                (
                    "Agent",
                    json!({"agent_type":"web-researcher","prompt":"press","background":true}),
                ),
            ],
            10,
            1,
        ),
        ("lead", _) => {
            let ids = req.spawned_ids();
            let text = req.text();
            if text.contains("ANALYST-DONE") && text.contains("WEB-DONE") {
                return an_text("both answered", 10, 1);
            }
            // Answer every question of the pending part (a wait's `asking`, or a notice).
            let pending = req.pending();
            let mut calls = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                let needle = format!("\\\"agent_id\\\":\\\"{id}\\\"");
                let asked = pending.split("agent_id").count() > 1
                    && pending.contains(&needle)
                    && (pending.contains("asking") || pending.contains("\\\"question\\\""));
                let answered_before = text.matches(&format!("ANSWER-{i}")).count() > 0;
                let still_open = pending.split('}').any(|part| {
                    part.contains(&needle)
                        && (part.contains("asking")
                            || part.contains("\\\"notice\\\":\\\"question\\\""))
                });
                if asked && still_open && !answered_before {
                    calls.push((
                        "steer_subagent",
                        json!({"agent_id": id, "message": format!("ANSWER-{i}")}),
                    ));
                }
            }
            if calls.is_empty() {
                an_calls(&[("wait_subagents", json!({"agent_ids": ids}))], 10, 1)
            } else {
                an_calls(&calls, 10, 1)
            }
        }
        ("analyst", 0) => oa_call("ask_owner", json!({"question":"Which currency?"}), 10, 1),
        ("analyst", _) => {
            assert!(req.text().contains("ANSWER-0"), "the analyst's answer");
            oa_text("ANALYST-DONE", 10, 1)
        }
        ("web-researcher", 0) => an_calls(
            &[("ask_owner", json!({"question":"Which outlets?"}))],
            10,
            1,
        ),
        ("web-researcher", _) => {
            assert!(req.text().contains("ANSWER-1"), "the researcher's answer");
            an_text("WEB-DONE", 10, 1)
        }
        _ => Resp::json(500, json!({})),
    })
    .await;
    let tree = desk_tree(&mock, ANALYST).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), lead.outcome()).await;
    let log: Vec<String> = mock
        .of("lead")
        .iter()
        .map(|r| r.pending().chars().take(400).collect())
        .collect();
    let outcome =
        outcome.unwrap_or_else(|_| panic!("hangs; the lead was sent:\n{}", log.join("\n")));
    assert_eq!(mock.refusals(), Vec::<String>::new());
    assert_eq!(
        outcome.text.as_deref(),
        Some("both answered"),
        "{}\n{}",
        outcome.summary(),
        log.join("\n")
    );
    tree.shutdown().await;
}

/// A stalled stream (Anthropic: `message_start`, some text, then silence) is cut after
/// the adapter's `timeout` of silence and retried; the stalled attempt's `message_start`
/// usage is billed, its text is not the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_is_cut_and_retried() {
    let mock = Mock::start(|_, attempt| match attempt {
        0 => Resp::SseStall(an_partial(70, "Half an ans")),
        _ => an_text("WEB-DONE", 80, 8),
    })
    .await;
    let claude = Anthropic::builder()
        .base_url(&mock.base)
        .api_key("k")
        .model("claude-test")
        .definition_models(false)
        .streaming(true)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let tree = Tree::builder()
        .config(config())
        .catalog(project(ANALYST))
        .model(claude)
        .build()
        .await
        .unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        tree.run(SpawnRequest::new("web-researcher", "press")),
    )
    .await
    .expect("a stalled stream hangs the agent")
    .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("WEB-DONE"),
        "{}",
        outcome.summary()
    );
    let record = find(&tree, "web-researcher");
    assert_eq!(record.own, Usage::tokens(150, 9));
    tree.shutdown().await;
}

/// The `text_delta` events of an agent's turn 0, joined, when its first attempt streams
/// `failed_text` and then fails mid-stream (overloaded), and the retry answers `WEB-DONE`.
async fn deltas_across_a_retry(failed_text: String) -> String {
    let mock = Mock::start(move |_, attempt| match attempt {
        0 => {
            let mut pieces = an_partial(10, &failed_text);
            pieces.push(an_overloaded_event());
            Resp::Sse(pieces)
        }
        _ => an_text("WEB-DONE", 10, 1),
    })
    .await;
    let tree = desk_tree(&mock, ANALYST).await;
    let mut events = tree.subscribe();
    let outcome = tree
        .run(SpawnRequest::new("web-researcher", "press"))
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("WEB-DONE"));
    tree.shutdown().await;
    drain(&mut events)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::TextDelta { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

/// The text a failed attempt streamed reaches `text_delta` subscribers, short or long, then
/// the retry's: the turn's deltas, joined, are the failed attempt's text then the answer,
/// so a subscriber that wants the turn's text alone also watches `retrying`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempts_streamed_text_reaches_text_delta_subscribers_before_the_retrys() {
    let short = deltas_across_a_retry("x".repeat(100)).await;
    let long = deltas_across_a_retry("y".repeat(300)).await;
    assert_eq!(short, format!("{}WEB-DONE", "x".repeat(100)));
    assert_eq!(long, format!("{}WEB-DONE", "y".repeat(300)));
}
