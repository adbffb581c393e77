//! A coordinator delegating to two workers, from agent files in Claude Code's and pi's
//! formats, on both adapters, against the routed mock of the providers (`routed.rs`, routed
//! by which agent asks, so parallel agents get their own script): retries of rate limits and
//! server errors, a model's mistakes, malformed bodies, steering, aborts, background
//! children, usage and shutdown, as documented.
//!
//! Every request the tree sends is one a provider takes: the mock answers a request the way
//! both providers do when an assistant tool call has no result (a 400), so a child inheriting
//! its owner's context mid-turn, or a resume of a run aborted during a tool call, shows any
//! call left without its result as the provider's refusal. No real sleeps: every wait is on
//! an event (a request arriving, a connection closing, an outcome, a gate).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::{Catalog, Model, RetryPolicy, Tree, TreeConfig};
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{AgentId, AgentStatus, EventKind, SpawnRequest, Usage};
use serde_json::json;
use tokio::sync::Notify;

use crate::common::scratch;
use crate::routed::{
    Mock, Req, Resp, an_json_calls, an_json_text, an_partial, an_text, oa_json_calls, oa_json_text,
    oa_usage,
};

const LONG: &str = "The logs show a burst of 502s from the gateway at 14:02, all from one upstream; the retries doubled the load and the pool ran dry within a minute. Then the health checks failed and the upstream was taken out of rotation, which moved its traffic to the two others, which slowed down too. Nothing else stands out in the window.";

// ---------------------------------------------------------------------------------------
// Agent files and trees
// ---------------------------------------------------------------------------------------

/// A project with a Claude Code coordinator and worker, and a pi worker.
fn project() -> (PathBuf, PathBuf) {
    let root = scratch("project");
    let claude = root.join(".claude/agents");
    let pi = root.join(".pi/agents");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::create_dir_all(&pi).unwrap();
    std::fs::write(
        claude.join("coordinator.md"),
        "---\nname: coordinator\ndescription: Splits the work between two workers\nallowed_subagents: worker-a, worker-b\nmodel: sonnet\ncolor: purple\n---\n[agent:coordinator] You coordinate.\n",
    )
    .unwrap();
    std::fs::write(
        claude.join("worker-a.md"),
        "---\nname: worker-a\ndescription: Looks at the logs\ntools: Read, Grep\nmodel: haiku\ncolor: blue\n---\n[agent:worker-a] You read logs.\n",
    )
    .unwrap();
    std::fs::write(
        pi.join("worker-b.md"),
        "---\nname: worker-b\ndescription: Looks at the metrics\ntools: read, bash\nmodel: claude-haiku-4-5\nthinking: low\n---\n[agent:worker-b] You read metrics.\n",
    )
    .unwrap();
    (claude, pi)
}

fn catalog() -> Catalog {
    let (claude, pi) = project();
    let loaded = Catalog::load_dirs([&claude, &pi]);
    assert!(loaded.is_clean(), "{:?}", loaded.problems);
    loaded.catalog
}

fn fast_retry() -> TreeConfig {
    TreeConfig::default().with_retry(
        RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_millis(1), Duration::from_millis(2)),
    )
}

/// `future`, failing the test after a minute of real time instead of hanging it.
async fn bounded<T>(future: impl std::future::Future<Output = T>, what: &str) -> T {
    match tokio::time::timeout(Duration::from_secs(60), future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

async fn tree_on(model: impl Model, config: TreeConfig) -> Tree {
    Tree::builder()
        .config(config)
        .catalog(catalog())
        .model(model)
        .build()
        .await
        .expect("tree builds")
}

fn openai(mock: &Mock, streaming: bool) -> OpenAiCompat {
    OpenAiCompat::builder()
        .base_url(&mock.base)
        .model("m")
        .definition_models(false)
        .streaming(streaming)
        .build()
        .unwrap()
}

fn anthropic(mock: &Mock, streaming: bool) -> Anthropic {
    Anthropic::builder()
        .base_url(&mock.base)
        .api_key("sk-ant-test")
        .model("claude-test")
        .definition_models(false)
        .streaming(streaming)
        .build()
        .unwrap()
}

fn find(tree: &Tree, agent_type: &str) -> agent_tree_protocol::AgentRecord {
    tree.snapshot()
        .agents()
        .find(|r| r.agent_type == agent_type)
        .cloned()
        .unwrap_or_else(|| panic!("no {agent_type} record"))
}

// ---------------------------------------------------------------------------------------
// The scenarios a user runs
// ---------------------------------------------------------------------------------------

/// The main scenario on the OpenAI-compatible adapter: a coordinator starts two background
/// workers, one rate-limited once (`retry-after-ms`), one failing once with a 500; both are
/// retried, and the coordinator's `wait_subagents` reads both answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_on_openai_waits_out_a_rate_limit_and_a_server_error_of_its_workers() {
    let mock = Mock::start(|req, attempt| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => oa_json_calls(
            &[
                ("Agent", json!({"agent_type":"worker-a","prompt":"logs","background":true}).to_string()),
                ("Agent", json!({"agent_type":"worker-b","prompt":"metrics","background":true}).to_string()),
            ],
            (100, 20),
        ),
        ("coordinator", 1) => {
            let ids = req.spawned_ids();
            oa_json_calls(&[("wait_subagents", json!({"agent_ids": ids}).to_string())], (150, 10))
        }
        ("coordinator", _) => oa_json_text("both fine", (200, 5)),
        ("worker-a", _) if attempt == 0 => Resp::json(429, json!({"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}})).header("retry-after-ms", "3"),
        ("worker-a", _) => oa_json_text("logs fine", (40, 4)),
        ("worker-b", _) if attempt == 0 => Resp::json(500, json!({"error":{"message":"The server had an error","type":"server_error"}})),
        ("worker-b", _) => oa_json_text("metrics fine", (30, 3)),
        _ => Resp::json(404, json!({"error":{"message":"?"}})),
    })
    .await;
    let tree = tree_on(openai(&mock, false), fast_retry()).await;
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "check"))
        .await
        .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("both fine"),
        "{}",
        outcome.summary()
    );
    tree.idle().await;
    let snap = tree.snapshot();
    snap.check_usage().unwrap();
    assert_eq!(
        tree.record(AgentId::ROOT).unwrap().subtree,
        Usage::tokens(100 + 150 + 200 + 40 + 30, 20 + 10 + 5 + 4 + 3)
    );
    let last = mock.of("coordinator").pop().unwrap();
    assert_eq!(
        last.text().matches("logs fine").count(),
        1,
        "read once: {}",
        last.text()
    );
    assert_eq!(
        last.text().matches("metrics fine").count(),
        1,
        "read once: {}",
        last.text()
    );
    tree.shutdown().await;
}

/// The same scenario on Anthropic, streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_on_anthropic_streamed_waits_out_its_workers_errors() {
    let mock = Mock::start(|req, attempt| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => an_json_calls(
            &[
                (
                    "Agent",
                    json!({"agent_type":"worker-a","prompt":"logs","background":true}),
                ),
                (
                    "Agent",
                    json!({"agent_type":"worker-b","prompt":"metrics","background":true}),
                ),
            ],
            100,
            20,
        ),
        ("coordinator", 1) => {
            let ids = req.spawned_ids();
            an_json_calls(&[("wait_subagents", json!({"agent_ids": ids}))], 150, 10)
        }
        ("coordinator", _) => an_text("both fine", 200, 5),
        ("worker-a", _) if attempt == 0 => Resp::json(
            429,
            json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}),
        )
        .header("retry-after", "0"),
        ("worker-a", _) => an_text("logs fine", 40, 4),
        ("worker-b", _) if attempt == 0 => Resp::json(
            500,
            json!({"type":"error","error":{"type":"api_error","message":"Internal"}}),
        ),
        ("worker-b", _) => an_json_text("metrics fine", 30, 3),
        _ => Resp::json(
            404,
            json!({"type":"error","error":{"type":"not_found_error","message":"?"}}),
        ),
    })
    .await;
    let tree = tree_on(anthropic(&mock, true), fast_retry()).await;
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "check"))
        .await
        .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("both fine"),
        "{}",
        outcome.summary()
    );
    tree.idle().await;
    tree.snapshot().check_usage().unwrap();
    assert_eq!(
        tree.record(AgentId::ROOT).unwrap().subtree,
        Usage::tokens(100 + 150 + 200 + 40 + 30, 20 + 10 + 5 + 4 + 3)
    );
    tree.shutdown().await;
}

/// Mistakes a model makes (an unknown tool, an unknown agent type, arguments that are not
/// JSON) are each an error result; the coordinator carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_mistakes_are_error_results_and_the_coordinator_carries_on() {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => oa_json_calls(
            &[
                ("frobnicate", "{}".into()),
                (
                    "Agent",
                    json!({"agent_type":"security-auditor","prompt":"x"}).to_string(),
                ),
                (
                    "Agent",
                    r#"{"agent_type": "worker-a", "prompt": "logs"#.into(),
                ),
                (
                    "steer_subagent",
                    r#"{"agent_id": "a9", "message": "hi"}"#.into(),
                ),
            ],
            (10, 1),
        ),
        ("coordinator", _) => oa_json_text("done", (10, 1)),
        _ => oa_json_text("?", (1, 1)),
    })
    .await;
    let tree = tree_on(openai(&mock, false), fast_retry()).await;
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "check"))
        .await
        .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("done"),
        "{}",
        outcome.summary()
    );
    let second = mock.of("coordinator").pop().unwrap();
    let results = second.tool_results();
    eprintln!("results: {results:#?}");
    assert_eq!(results.len(), 4);
    assert!(results[0].contains("frobnicate"));
    assert!(results[1].contains("security-auditor"));
    assert!(results[2].starts_with("Error"));
    assert!(results[3].contains("a9"));
    assert_eq!(tree.snapshot().agents().count(), 1, "the coordinator only");
    tree.shutdown().await;
}

/// A 200 whose body is not JSON, and one with no choices, are `provider` errors, not
/// retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_200_body_is_a_provider_error_not_retried() {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => oa_json_calls(
            &[
                (
                    "Agent",
                    json!({"agent_type":"worker-a","prompt":"logs"}).to_string(),
                ),
                (
                    "Agent",
                    json!({"agent_type":"worker-b","prompt":"metrics"}).to_string(),
                ),
            ],
            (10, 1),
        ),
        ("coordinator", _) => oa_json_text("done", (10, 1)),
        ("worker-a", _) => Resp::raw(
            200,
            "application/json",
            b"<html>Bad gateway</html>".to_vec(),
        ),
        ("worker-b", _) => Resp::json(
            200,
            json!({"id":"x","object":"chat.completion","choices":[],"usage":oa_usage(7,0)}),
        ),
        _ => oa_json_text("?", (1, 1)),
    })
    .await;
    let tree = tree_on(openai(&mock, false), fast_retry()).await;
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "check"))
        .await
        .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("done"),
        "{}",
        outcome.summary()
    );
    let a = find(&tree, "worker-a").outcome.unwrap();
    let b = find(&tree, "worker-b").outcome.unwrap();
    eprintln!("a: {a:?}\nb: {b:?}");
    assert_eq!(a.status, AgentStatus::Failed);
    assert_eq!(b.status, AgentStatus::Failed);
    assert_eq!(mock.of("worker-a").len(), 1, "not retried");
    assert_eq!(find(&tree, "worker-b").own, Usage::tokens(7, 0));
    tree.shutdown().await;
}

/// The application steers a worker while its model call is in flight: the steer is taken,
/// and an abort then closes the request's connection and settles the worker `aborted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_while_a_model_call_is_in_flight_is_taken_and_an_abort_closes_the_call() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let mock = Mock::start(move |req, _| match (req.agent().as_str(), req.turn()) {
        ("worker-a", 0) => {
            // Answer only after the test has steered (a blocking wait would stall the
            // server; the reply is built later by a hang that the test resolves).
            let _ = &g;
            Resp::Hang
        }
        ("worker-a", _) => oa_json_text("steered answer", (5, 1)),
        _ => oa_json_text("?", (1, 1)),
    })
    .await;
    let tree = tree_on(openai(&mock, false), fast_retry()).await;
    let handle = tree
        .spawn(SpawnRequest::new("worker-a", "logs"))
        .await
        .unwrap();
    mock.until("worker-a", 1).await;
    let receipt = tree.steer(handle.id(), "look at 5xx only").await;
    eprintln!("steer receipt: {receipt:?}");
    assert!(receipt.is_ok());
    tree.abort(handle.id()).unwrap();
    mock.until_closed(1).await;
    tree.idle().await;
    assert_eq!(
        tree.record(handle.id()).unwrap().status,
        AgentStatus::Aborted
    );
    tree.shutdown().await;
}

/// A graceful shutdown while an Anthropic stream hangs after some text: the agent is aborted
/// (reason shutdown), keeps the streamed text and is billed the usage of `message_start`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_hanging_stream_keeps_the_streamed_text_and_its_usage() {
    let mock = Mock::start(|req, _| match req.agent().as_str() {
        "worker-a" => Resp::SseStall(an_partial(77, LONG)),
        _ => an_json_text("?", 1, 1),
    })
    .await;
    let tree = tree_on(
        anthropic(&mock, true),
        fast_retry().with_stream_events(true),
    )
    .await;
    let mut events = tree.subscribe();
    let handle = tree
        .spawn(SpawnRequest::new("worker-a", "logs"))
        .await
        .unwrap();
    mock.until("worker-a", 1).await;
    // Wait until the streamed text reached the agent (a text_delta event: >= 256 bytes).
    while !matches!(
        events.next().await.map(|e| e.kind),
        Some(EventKind::TextDelta { .. })
    ) {}
    let report = tree.shutdown().await;
    eprintln!("report: {report:?}");
    let record = tree.record(handle.id()).unwrap();
    eprintln!("record: {record:?}");
    assert_eq!(record.status, AgentStatus::Aborted);
    assert_eq!(record.outcome.unwrap().partial.as_deref(), Some(LONG));
    assert_eq!(record.own.input_tokens, 77);
    assert!(report.elapsed < Duration::from_secs(1));
}

/// The coordinator on the OpenAI-compatible adapter, the workers on Anthropic: a `Model`
/// routing by agent type, as `docs/models.md` suggests for per-agent choices.
struct Router {
    coordinator: OpenAiCompat,
    workers: Anthropic,
}

impl Model for Router {
    fn turn(
        &self,
        request: agent_tree_actors::ModelRequest,
    ) -> agent_tree_actors::BoxFuture<
        '_,
        Result<agent_tree_actors::ModelResponse, agent_tree_actors::ModelError>,
    > {
        if request.agent_type() == "coordinator" {
            self.coordinator.turn(request)
        } else {
            self.workers.turn(request)
        }
    }
}

/// The reply to a request of either wire format: OpenAI for the coordinator.
fn reply_text(req: &Req, text: &str) -> Resp {
    if !req.is_anthropic() {
        oa_json_text(text, (10, 1))
    } else {
        an_json_text(text, 10, 1)
    }
}

/// Steering a worker from the application while its (streamed) call is in flight: the steer
/// is delivered and read at the next turn, which the worker gets although its first turn was
/// its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_during_a_streamed_answer_is_read_at_one_more_turn() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let mock = Mock::start(move |req, _| match (req.agent().as_str(), req.turn()) {
        ("worker-a", 0) => Resp::Gate(g.clone(), Box::new(an_text("first answer", 20, 2))),
        ("worker-a", _) => an_text("steered answer", 30, 3),
        _ => reply_text(req, "?"),
    })
    .await;
    let tree = tree_on(anthropic(&mock, true), fast_retry()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("worker-a", "logs"))
        .await
        .unwrap();
    mock.until("worker-a", 1).await;
    let receipt = tree.steer(handle.id(), "look at 5xx only").await;
    eprintln!("receipt {receipt:?}");
    assert!(receipt.is_ok());
    gate.notify_one();
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("steered answer"),
        "{}",
        outcome.summary()
    );
    let second = mock.of("worker-a").pop().unwrap();
    assert!(second.text().contains("look at 5xx only"));
    assert_eq!(tree.record(handle.id()).unwrap().own, Usage::tokens(50, 5));
    tree.shutdown().await;
}

/// Background child control through the model-facing tools: a timed-out wait answers
/// `running`, an abort, then the result says `aborted`; the aborted child's streamed usage
/// is billed to the coordinator's subtree. The abort is answered only once the worker's
/// stream has reached the tree (its first `text_delta` event, after more than
/// `TurnSink::EVENT_BYTES` of text): its usage is in hand, and its connection is open to
/// be closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_children_are_controlled_through_the_model_facing_tools() {
    let streaming = Arc::new(Notify::new());
    let gate = Arc::clone(&streaming);
    let mock = Mock::start(move |req, _| {
        let id = req.spawned_ids().first().cloned().unwrap_or_default();
        match (req.agent().as_str(), req.turn()) {
            ("coordinator", 0) => oa_json_calls(
                &[(
                    "Agent",
                    json!({"agent_type":"worker-b","prompt":"metrics","background":true})
                        .to_string(),
                )],
                (10, 1),
            ),
            ("coordinator", 1) => oa_json_calls(
                &[(
                    "get_subagent_result",
                    json!({"agent_id": id, "wait": true, "timeout_ms": 1}).to_string(),
                )],
                (10, 1),
            ),
            ("coordinator", 2) => Resp::Gate(
                Arc::clone(&gate),
                Box::new(oa_json_calls(
                    &[("abort_subagent", json!({"agent_id": id}).to_string())],
                    (10, 1),
                )),
            ),
            ("coordinator", 3) => oa_json_calls(
                &[(
                    "get_subagent_result",
                    json!({"agent_id": id, "wait": true}).to_string(),
                )],
                (10, 1),
            ),
            ("coordinator", _) => oa_json_text("aborted it", (10, 1)),
            ("worker-b", _) => Resp::SseStall(an_partial(77, LONG)),
            _ => reply_text(req, "?"),
        }
    })
    .await;
    let router = Router {
        coordinator: openai(&mock, false),
        workers: anthropic(&mock, true),
    };
    let tree = tree_on(router, fast_retry().with_stream_events(true)).await;
    let mut events = tree.subscribe();
    let opener = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if event.depth == 2 && matches!(event.kind, EventKind::TextDelta { .. }) {
                streaming.notify_one();
                return;
            }
        }
    });
    let outcome = bounded(
        tree.run(SpawnRequest::new("coordinator", "check")),
        "the run",
    )
    .await
    .unwrap();
    opener.abort();
    assert_eq!(
        outcome.text.as_deref(),
        Some("aborted it"),
        "{}",
        outcome.summary()
    );
    let last = mock.of("coordinator").pop().unwrap();
    let results = last.tool_results();
    assert!(results[1].contains("running"), "{}", results[1]);
    assert!(results[3].contains("aborted"), "{}", results[3]);
    bounded(mock.until_closed(1), "the worker's stream closed").await;
    bounded(tree.idle(), "the tree idle").await;
    let worker = find(&tree, "worker-b");
    assert_eq!(worker.status, AgentStatus::Aborted);
    assert_eq!(worker.own, Usage::tokens(77, 1));
    tree.snapshot().check_usage().unwrap();
    tree.shutdown().await;
}

/// A graceful shutdown while the coordinator waits on two children whose calls hang (one
/// streamed, one not): quick, everyone aborted with reason shutdown, connections closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_the_coordinator_waits_aborts_everyone_and_closes_connections() {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => oa_json_calls(
            &[
                (
                    "Agent",
                    json!({"agent_type":"worker-a","prompt":"logs"}).to_string(),
                ),
                (
                    "Agent",
                    json!({"agent_type":"worker-b","prompt":"metrics"}).to_string(),
                ),
            ],
            (10, 1),
        ),
        _ => Resp::Hang,
    })
    .await;
    let router = Router {
        coordinator: openai(&mock, false),
        workers: anthropic(&mock, true),
    };
    let tree = tree_on(router, fast_retry()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("coordinator", "check"))
        .await
        .unwrap();
    mock.until("worker-a", 1).await;
    mock.until("worker-b", 1).await;
    let report = tree.shutdown().await;
    eprintln!("{report:?}");
    assert_eq!(report.graceful.len(), 3);
    assert!(report.killed.is_empty());
    let outcome = handle.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Aborted);
    mock.until_closed(2).await;
    assert_eq!(
        tree.snapshot().root().unwrap().subtree,
        Usage::tokens(10, 1)
    );
}

/// A project whose worker inherits its owner's context (`inherit_context: true`, a field
/// `parse_agent_file` documents).
fn inheriting_catalog() -> Catalog {
    let dir = scratch("inherit");
    std::fs::write(
        dir.join("coordinator.md"),
        "---\nname: coordinator\ndescription: Delegates\nallowed_subagents: heir\n---\n[agent:coordinator] You coordinate.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("heir.md"),
        "---\nname: heir\ndescription: Continues with its owner's context\ninherit_context: true\n---\n[agent:heir] You continue.\n",
    )
    .unwrap();
    Catalog::load_dir_strict(&dir).unwrap()
}

async fn inherit_context_reaches_the_provider(streaming: bool) {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => oa_json_calls(
            &[(
                "Agent",
                json!({"agent_type":"heir","prompt":"go on from here"}).to_string(),
            )],
            (10, 1),
        ),
        ("coordinator", _) => oa_json_text("done", (10, 1)),
        _ => reply_text(req, "heir done"),
    })
    .await;
    let workers = anthropic(&mock, streaming);
    let tree = Tree::builder()
        .config(fast_retry())
        .catalog(inheriting_catalog())
        .model(Router {
            coordinator: openai(&mock, false),
            workers,
        })
        .build()
        .await
        .unwrap();
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "the plan"))
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let heir = find(&tree, "heir");
    let heir_outcome = heir.outcome.unwrap();
    assert_eq!(
        heir_outcome.status,
        AgentStatus::Completed,
        "the inheriting child's request was refused: {:?}\nits request: {}",
        heir_outcome.error,
        mock.of("heir")[0].body["messages"]
    );
    tree.shutdown().await;
}

/// A child with `inherit_context: true` is sent its owner's conversation with every call
/// answered: the owner's `Agent` call that spawns this very child (still running) is
/// answered as running, so a real provider takes the request (both refuse a call without its
/// result with a 400). Here the child is on Anthropic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inheriting_childs_request_has_every_call_answered_anthropic() {
    inherit_context_reaches_the_provider(false).await;
}

/// The same on the OpenAI-compatible adapter: every assistant message with `tool_calls` in
/// the child's request is followed by the `tool` messages answering them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inheriting_childs_request_has_every_call_answered_openai() {
    let mock = Mock::start(|req, _| match (req.agent().as_str(), req.turn()) {
        ("coordinator", 0) => oa_json_calls(
            &[(
                "Agent",
                json!({"agent_type":"heir","prompt":"go on from here"}).to_string(),
            )],
            (10, 1),
        ),
        ("coordinator", _) => oa_json_text("done", (10, 1)),
        _ => oa_json_text("heir done", (10, 1)),
    })
    .await;
    let tree = Tree::builder()
        .config(fast_retry())
        .catalog(inheriting_catalog())
        .model(openai(&mock, false))
        .build()
        .await
        .unwrap();
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "the plan"))
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let heir = find(&tree, "heir").outcome.unwrap();
    assert_eq!(
        heir.status,
        AgentStatus::Completed,
        "the inheriting child's request was refused: {:?}\nits request: {}",
        heir.error,
        mock.of("heir")[0].body["messages"]
    );
    tree.shutdown().await;
}

/// An agent aborted while one of its tool calls runs keeps a conversation with that call
/// answered, so `Tree::resume` (and a model's `Agent {resume}`) sends a
/// request the provider takes, and the resumed run completes. Here on Anthropic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_an_abort_mid_tool_has_every_call_answered() {
    let mock = Mock::start(|req, _| match req.turn() {
        0 => an_json_calls(&[("Read", json!({"path": "/var/log/app.log"}))], 10, 1),
        _ => an_json_text("resumed fine", 10, 1),
    })
    .await;
    let started = Arc::new(Notify::new());
    let s = started.clone();
    let read = agent_tree_actors::FnTool::new("read", "Reads a file", move |_ctx, _input| {
        let s = s.clone();
        async move {
            s.notify_one();
            std::future::pending::<Result<String, agent_tree_actors::ToolError>>().await
        }
    });
    let tree = Tree::builder()
        .config(fast_retry())
        .catalog(catalog())
        .model(anthropic(&mock, false))
        .tool(read)
        .unwrap()
        .build()
        .await
        .unwrap();
    let handle = tree
        .spawn(SpawnRequest::new("worker-a", "logs"))
        .await
        .unwrap();
    started.notified().await;
    tree.abort(handle.id()).unwrap();
    tree.idle().await;
    assert_eq!(
        tree.record(handle.id()).unwrap().status,
        AgentStatus::Aborted
    );
    let mut resumed = tree.resume(handle.id(), "go on").await.unwrap();
    let outcome = resumed.outcome().await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("resumed fine"),
        "{}\nrequest: {}",
        outcome.summary(),
        mock.requests().last().unwrap().body["messages"]
    );
    tree.shutdown().await;
}

/// A shutdown while a worker waits out a 429's `retry-after: 30` (within `max_wait`): the
/// wait is cut at once, and the worker ends aborted by the shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_cuts_a_retry_after_wait_at_once() {
    let mock = Mock::start(|_, _| {
        Resp::json(429, json!({"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}))
            .header("retry-after", "30")
    })
    .await;
    let tree = tree_on(anthropic(&mock, false), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let handle = tree
        .spawn(SpawnRequest::new("worker-a", "logs"))
        .await
        .unwrap();
    let delay = loop {
        if let Some(EventKind::Retrying { delay_ms, .. }) = events.next().await.map(|e| e.kind) {
            break delay_ms;
        }
    };
    assert_eq!(delay, 30_000);
    let report = tree.shutdown().await;
    assert!(report.elapsed < Duration::from_secs(1), "{report:?}");
    let record = tree.record(handle.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted);
    assert_eq!(mock.requests().len(), 1);
}

/// A retry-after beyond `max_wait` fails at once, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_beyond_max_wait_fails_at_once_saying_why() {
    let mock = Mock::start(|_, _| {
        Resp::json(429, json!({"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}))
            .header("retry-after", "3600")
    })
    .await;
    let tree = tree_on(openai(&mock, true), TreeConfig::default()).await;
    let outcome = tree
        .run(SpawnRequest::new("worker-b", "metrics"))
        .await
        .unwrap();
    let error = outcome.error.clone().unwrap_or_default();
    eprintln!("{error}");
    assert_eq!(outcome.status, AgentStatus::Failed);
    assert!(
        error.contains("rate_limited (HTTP 429)") && error.contains("3600"),
        "{error}"
    );
    assert_eq!(mock.requests().len(), 1);
    tree.shutdown().await;
}
