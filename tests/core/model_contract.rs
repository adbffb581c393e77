//! The model contract, end to end: error kinds decide retries (rate-limited and transient
//! ones, with backoff and retry-after, under paused time), every failed attempt is billed, a
//! cut-off turn is continued or fails with `length_limit` (its piece never spliced onto a
//! later, different answer), a streamed turn that is aborted keeps its text and is billed
//! what it reported, stream events carry the deltas, and a turn of more tool calls than the
//! cap runs only the cap.

use std::sync::Arc;
use std::time::Duration;

use crate::support::build_tree;
use crate::support::catalog;
use crate::support::steps::{Step, Steps, one_worker};
use agent_tree::prelude::*;
use agent_tree::protocol::{
    EndReason, EventKind, FinishReason, Message, ModelErrorKind, RAW_ARGUMENTS_KEY, Role,
    SubagentAllowance, ToolCall,
};
use agent_tree::testkit::FnModel;
use agent_tree::{BoxFuture, EventStream, ModelError, ModelRequest, ModelResponse, RetryPolicy};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// A tree of one `worker` on `model`, holding a `read` tool that answers `read: ok`.
async fn build(model: &Steps, config: TreeConfig) -> Tree {
    Tree::builder()
        .config(config)
        .catalog(one_worker())
        .model(model.clone())
        .tool(FnTool::new("read", "reads", |_, _| async {
            Ok("read: ok".to_owned())
        }))
        .unwrap()
        .build()
        .await
        .expect("the tree builds")
}

fn retrying(tree: &Tree) -> EventStream {
    tree.subscribe()
}

fn retries(events: &mut EventStream) -> Vec<(u32, u32, ModelErrorKind, u64)> {
    retries_in(events.drain())
}

/// The `Retrying` events of `events`: (turn, attempt, error kind, delay in ms) each.
pub(crate) fn retries_in(
    events: Vec<agent_tree::protocol::Event>,
) -> Vec<(u32, u32, ModelErrorKind, u64)> {
    events
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Retrying {
                turn,
                attempt,
                error_kind,
                delay_ms,
            } => Some((turn, attempt, error_kind, delay_ms)),
            _ => None,
        })
        .collect()
}

/// Rate-limited and transient model errors are retried under the same turn, waiting a
/// retry-after exactly and otherwise backing off with jitter, and every failed attempt is
/// billed its usage.
#[tokio::test(start_paused = true)]
async fn rate_limits_and_transient_failures_are_retried_and_every_attempt_is_billed() {
    let model = Steps::new([
        Step::Fail(
            ModelError::rate_limited("slow down", Some(Duration::from_secs(7)))
                .with_status(429)
                .with_usage(Usage::tokens(5, 0)),
        ),
        Step::Fail(ModelError::transient("connection reset").with_usage(Usage::tokens(3, 1))),
        Step::Respond(ModelResponse::text("done").with_usage(Usage::tokens(10, 2))),
    ]);
    let policy =
        RetryPolicy::default().with_backoff(Duration::from_millis(400), Duration::from_secs(5));
    let tree = build(&model, TreeConfig::default().with_retry(policy)).await;
    let mut events = retrying(&tree);
    let started = tokio::time::Instant::now();
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"), "{outcome:?}");
    // 7 s as the provider asked, then a backoff of the second attempt: 400 ms doubled, with
    // equal jitter, so between 400 and 800 ms.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(7_400) && elapsed <= Duration::from_millis(7_800),
        "{elapsed:?}"
    );
    let retries = retries(&mut events);
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0], (1, 1, ModelErrorKind::RateLimited, 7_000));
    assert_eq!(
        (retries[1].0, retries[1].1, retries[1].2),
        (1, 2, ModelErrorKind::Transient)
    );
    // The same turn, three calls; every attempt billed: 5 + 3 + 10 in, 0 + 1 + 2 out.
    let turns: Vec<u32> = model.seen().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [1, 1, 1]);
    let record = tree.record(AgentId::new(1)).unwrap();
    assert_eq!(record.own, Usage::tokens(18, 3));
    assert!(tree.snapshot().check_usage().is_ok());
}

/// A model error of a kind that is not retryable fails the agent at once (`model_error`,
/// its kind and HTTP status in the error text) and is billed its usage.
#[tokio::test(start_paused = true)]
async fn an_error_that_is_not_retryable_fails_at_once_with_its_kind_and_usage() {
    let model = Steps::new([Step::Fail(
        ModelError::from_status(401, "invalid api key").with_usage(Usage::tokens(4, 0)),
    )]);
    let tree = build(&model, TreeConfig::default()).await;
    let mut events = retrying(&tree);
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError);
    assert_eq!(
        outcome.error.as_deref(),
        Some("auth (HTTP 401): invalid api key")
    );
    assert_eq!(model.calls(), 1);
    assert!(retries(&mut events).is_empty());
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().own,
        Usage::tokens(4, 0)
    );
}

/// Retries stop at the policy's `max_attempts`, and a retry-after longer than `max_wait` is
/// not waited at all; either way the error says why it was not retried further.
#[tokio::test(start_paused = true)]
async fn retries_stop_after_max_attempts_and_a_long_retry_after_is_not_waited() {
    let always = || Step::Fail(ModelError::transient("overloaded").with_status(529));
    let model = Steps::new([always(), always(), always(), always()]);
    let policy = RetryPolicy::default()
        .with_max_attempts(3)
        .with_backoff(Duration::from_millis(10), Duration::from_millis(10));
    let tree = build(&model, TreeConfig::default().with_retry(policy)).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError);
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "transient (HTTP 529): overloaded; gave up after 3 attempts (the retry policy's \
             max_attempts)"
        )
    );
    assert_eq!(model.calls(), 3);

    let model = Steps::new([Step::Fail(ModelError::rate_limited(
        "quota",
        Some(Duration::from_secs(3_600)),
    ))]);
    let tree = build(&model, TreeConfig::default()).await;
    let started = tokio::time::Instant::now();
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "an hour's retry-after is not waited"
    );
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(
        error.ends_with(
            "; not retried: the provider asked to wait 3600s, over the retry policy's \
             max_wait of 60s"
        ),
        "{error}"
    );
    assert_eq!(model.calls(), 1);
}

/// A turn cut off by the length limit is continued (the model is told it was cut off), and
/// the pieces are joined into the answer.
#[tokio::test(start_paused = true)]
async fn a_cut_off_turn_is_continued_and_its_pieces_joined_into_the_answer() {
    let cut = |text: &'static str| {
        Step::Respond(ModelResponse::text(text).with_finish_reason(FinishReason::Length))
    };
    let model = Steps::new([
        cut("The plan: "),
        cut("one, "),
        Step::Respond(ModelResponse::text("two.")),
    ]);
    let tree = build(&model, TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("The plan: one, two."),
        "{outcome:?}"
    );
    let seen = model.seen();
    let last: &Message = seen[1].messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(last.content.contains("cut off"), "{}", last.content);
}

/// Turn 1 is cut off at the length limit ("Part one, "); turn 2 finishes it ("part two.")
/// and takes 10 ms, during which the application steers; turn 3 answers the steer.
fn cut_then_steered() -> FnModel {
    FnModel::new(move |request: ModelRequest| {
        Box::pin(async move {
            match request.turn {
                1 => {
                    let mut cut = ModelResponse::text("Part one, ");
                    cut.finish_reason = FinishReason::Length;
                    Ok(cut)
                }
                2 => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(ModelResponse::text("part two."))
                }
                _ => Ok(ModelResponse::text("Answer to the steer.")),
            }
        })
    })
}

/// A cut-off piece is joined only onto the answer that continues it: when the turn that
/// finishes a cut-off answer is not final (a steer arrived during it: one more turn), the
/// outcome is the last turn's answer, or the whole continued answer followed by it, never
/// half of one answer glued to another ("Part one, Answer to the steer.").
#[tokio::test(start_paused = true)]
async fn a_cut_off_piece_is_not_spliced_onto_a_later_answer() {
    let tree = build_tree(
        crate::support::catalog([crate::support::leaf("w")]),
        cut_then_steered(),
    )
    .await;
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let receipt = tree.steer(handle.id(), "also say hello").await;
    assert!(receipt.is_ok(), "{receipt:?}");
    let got = tokio::time::timeout(crate::support::harness::GUARD, handle.outcome())
        .await
        .unwrap();
    assert!(got.is_completed(), "{got:?}");
    let text = got.text.clone().unwrap_or_default();
    assert!(
        text == "Answer to the steer." || text == "Part one, part two.Answer to the steer.",
        "the outcome splices a cut-off piece onto a different answer: {text:?}"
    );
    tree.shutdown().await;
}

/// A turn still cut off after its allowed continuations fails with reason `length_limit`,
/// its pieces kept as partial output; with no continuations the first cut-off fails.
#[tokio::test(start_paused = true)]
async fn a_turn_cut_off_past_the_continuations_fails_with_length_limit() {
    let cut = |text: &'static str| {
        Step::Respond(ModelResponse::text(text).with_finish_reason(FinishReason::Length))
    };
    let model = Steps::new([cut("a"), cut("b"), cut("c")]);
    let config = TreeConfig::default().with_length_continuations(1);
    let tree = build(&model, config).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.status, AgentStatus::Failed);
    assert_eq!(outcome.reason, EndReason::LengthLimit);
    assert_eq!(outcome.partial.as_deref(), Some("ab"));
    assert_eq!(model.calls(), 2);

    // With no continuations, the first cut-off fails.
    let model = Steps::new([cut("a")]);
    let tree = build(&model, TreeConfig::default().with_length_continuations(0)).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::LengthLimit);
}

/// The `text_delta` and `retrying` events of `events`, in order, as
/// `delta <turn>.<attempt> <text>` and `retrying <turn>.<attempt>`.
fn stream_and_retries(events: &mut EventStream) -> Vec<String> {
    events
        .drain()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::TextDelta {
                turn,
                attempt,
                text,
            } => Some(format!("delta {turn}.{attempt} {text}")),
            EventKind::Retrying { turn, attempt, .. } => Some(format!("retrying {turn}.{attempt}")),
            _ => None,
        })
        .collect()
}

/// Everything a failed attempt streamed is announced before its `retrying` event, under
/// its attempt's number, and the next attempt's text under the next number: nothing of a
/// failed attempt comes after its `retrying`.
#[tokio::test(start_paused = true)]
async fn a_failed_attempts_streamed_text_is_announced_before_its_retrying_event() {
    let long = "x".repeat(300);
    let model = Steps::new([
        Step::StreamThenFail(
            vec![long.clone(), "Half ".into(), "an ".into()],
            ModelError::transient("connection reset"),
        ),
        Step::Stream(vec!["Whole ", "answer"], Usage::tokens(5, 2)),
    ]);
    let tree = build(&model, TreeConfig::default().with_stream_events(true)).await;
    let mut events = tree.subscribe();
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("Whole answer"), "{outcome:?}");
    assert_eq!(
        stream_and_retries(&mut events),
        [
            // 300 bytes reach an event at once; the tail was held back, and is announced
            // before the retry.
            format!("delta 1.1 {long}"),
            "delta 1.1 Half an ".to_owned(),
            "retrying 1.1".to_owned(),
            "delta 1.2 Whole answer".to_owned(),
        ]
    );
}

/// A streamed turn that fails after its retries keeps what it streamed as partial output,
/// as an aborted one does: the text of its last attempt that streamed any (the server died
/// after 6 KB; the retries, refused, streamed nothing). The outcome names the failure's
/// kind.
#[tokio::test(start_paused = true)]
async fn a_failed_streamed_turn_keeps_its_last_streamed_attempts_text_as_partial() {
    let pieces: Vec<String> = (0..6).map(|i| format!("{i}").repeat(1024)).collect();
    let streamed = pieces.concat();
    let refused = || Step::Fail(ModelError::transient("connection refused"));
    let model = Steps::new([
        Step::StreamThenFail(pieces, ModelError::transient("connection reset")),
        refused(),
        refused(),
        refused(),
    ]);
    let tree = build(&model, TreeConfig::default().with_stream_events(true)).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(model.calls(), 4);
    assert_eq!(outcome.reason, EndReason::ModelError);
    assert_eq!(outcome.error_kind, Some(ModelErrorKind::Transient));
    assert_eq!(outcome.partial.as_deref(), Some(streamed.as_str()));

    // Without events on, the same; of two attempts that streamed, the later one's text.
    let model = Steps::new([
        Step::StreamThenFail(
            vec!["An earlier try".into()],
            ModelError::transient("reset"),
        ),
        Step::StreamThenFail(
            vec!["Half an answer".into()],
            ModelError::transient("reset"),
        ),
        Step::Fail(ModelError::from_status(400, "bad request")),
    ]);
    let tree = build(&model, TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.error_kind, Some(ModelErrorKind::InvalidRequest));
    assert_eq!(outcome.partial.as_deref(), Some("Half an answer"));
}

/// A cut-off answer is continued only when the continuation fits the model's context window:
/// the prompt the model last reported (every token of the cut turn, cached ones included)
/// plus the next request's output limit. One that would not fit fails `length_limit` at
/// once, saying why, and keeps the text so far; no request is sent that cannot fit.
#[tokio::test(start_paused = true)]
async fn a_cut_off_turn_is_continued_only_when_the_continuation_fits_the_context_window() {
    let cut = |usage: Usage| {
        Step::Respond(
            ModelResponse::text("The plan: ")
                .with_usage(usage)
                .with_finish_reason(FinishReason::Length),
        )
    };
    let config = || {
        TreeConfig::default()
            .with_sampling(agent_tree::protocol::Sampling::default().with_max_output_tokens(512))
    };
    // 1 000 + 300 cached + 200 out = 1 500, + 512 = 2 012 > 2 000.
    let model =
        Steps::new([cut(Usage::tokens(1_000, 200).with_cache_read(300))]).with_window(2_000);
    let tree = build(&model, config()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::LengthLimit, "{outcome:?}");
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "the model's output was cut off at its length limit, and continuing would not fit \
             the 2000-token context: the prompt reached 1500 tokens and the reply may take 512"
        )
    );
    assert_eq!(outcome.partial.as_deref(), Some("The plan: "));
    assert_eq!(model.calls(), 1, "no continuation was sent");

    // 1 000 + 200 + 512 fits 2 000: continued and joined.
    let model = Steps::new([
        cut(Usage::tokens(1_000, 200)),
        Step::Respond(ModelResponse::text("done.")),
    ])
    .with_window(2_000);
    let tree = build(&model, config()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("The plan: done."),
        "{outcome:?}"
    );
}

/// A worker that streams "Half an answer" and reports usage 7/3, then hangs, aborted once
/// it has: its outcome and its own usage.
async fn abort_mid_stream() -> (Outcome, Usage) {
    let ready = Arc::new(Notify::new());
    let model = Steps::new([Step::StreamThenHang(
        vec!["Half ", "an ", "answer"],
        Some(Usage::tokens(7, 3)),
        ready.clone(),
    )]);
    let tree = build(&model, TreeConfig::default()).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    ready.notified().await;
    tree.abort(handle.id()).unwrap();
    let outcome = handle.outcome().await;
    let own = tree.record(handle.id()).unwrap().own;
    tree.shutdown().await;
    (outcome, own)
}

/// A streaming turn that is aborted keeps the text it streamed as partial output and is
/// billed the usage it reported.
#[tokio::test(start_paused = true)]
async fn an_aborted_streaming_turn_keeps_its_text_and_is_billed_what_it_reported() {
    let (outcome, own) = abort_mid_stream().await;
    assert_eq!(outcome.status, AgentStatus::Aborted);
    assert_eq!(outcome.partial.as_deref(), Some("Half an answer"));
    assert_eq!(own, Usage::tokens(7, 3));
}

/// With stream events on, a turn's text reaches subscribers as `text_delta` events in
/// batched pieces and the response is billed once; stream events are off by default.
#[tokio::test(start_paused = true)]
async fn stream_events_carry_the_deltas_in_pieces_and_the_response_bills_once() {
    let long: &'static str = Box::leak("x".repeat(200).into_boxed_str());
    let model = Steps::new([Step::Stream(vec![long, long, "tail"], Usage::tokens(9, 9))]);
    let tree = build(&model, TreeConfig::default().with_stream_events(true)).await;
    let mut events = tree.subscribe();
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert!(outcome.is_completed());
    let deltas: Vec<String> = events
        .drain()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::TextDelta {
                turn: 1,
                attempt: 1,
                text,
            } => Some(text),
            _ => None,
        })
        .collect();
    // 400 bytes reach 256 at the second piece; the tail comes at the end of the call.
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert_eq!(deltas[0].len(), 400);
    assert_eq!(deltas[1], "tail");
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().own,
        Usage::tokens(9, 9)
    );

    // Off by default: no delta events.
    let model = Steps::new([Step::Stream(vec![long, long], Usage::ZERO)]);
    let tree = build(&model, TreeConfig::default()).await;
    let mut events = tree.subscribe();
    tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert!(
        !events
            .drain()
            .iter()
            .any(|e| matches!(e.kind, EventKind::TextDelta { .. }))
    );
}

/// Tool calls of one turn past `max_tool_calls_per_turn` never run: each gets an error
/// result, while the calls within the cap run.
#[tokio::test(start_paused = true)]
async fn tool_calls_past_the_per_turn_cap_get_an_error_result_and_never_run() {
    let call = |id: &str| agent_tree::protocol::ToolCall::new(id, "read", serde_json::json!({}));
    let model = Steps::new([
        Step::Respond(ModelResponse::calls(vec![
            call("c1"),
            call("c2"),
            call("c3"),
        ])),
        Step::Respond(ModelResponse::text("done")),
    ]);
    let tree = build(
        &model,
        TreeConfig::default().with_max_tool_calls_per_turn(2),
    )
    .await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert!(outcome.is_completed());
    let seen = model.seen();
    let results: Vec<&Message> = seen[1]
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .collect();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].content, "read: ok");
    assert_eq!(results[1].content, "read: ok");
    assert!(results[2].is_error);
    assert!(
        results[2].content.contains("too many tool calls"),
        "{}",
        results[2].content
    );
}

/// A call whose arguments the output limit cut off (an adapter passes it as
/// `{"_raw": <the text as written>}`) is not run, for an orchestration tool as for any: the
/// model gets an error result saying its call was cut off, that nothing ran and how to go
/// on, and its next turn can recover.
#[tokio::test(start_paused = true)]
async fn a_tool_call_cut_off_at_the_output_limit_is_not_run_and_the_model_is_told() {
    let cut = ToolCall::new(
        "c1",
        "Agent",
        serde_json::json!({ RAW_ARGUMENTS_KEY: r#"{"agent_type": "worker", "prompt": "Summarise the fi"# }),
    );
    let model = Steps::new([
        Step::Respond(ModelResponse::calls(vec![cut]).with_finish_reason(FinishReason::Length)),
        Step::Respond(ModelResponse::text("Said in fewer words.")),
    ]);
    let catalog = catalog([
        AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", "You work."),
    ]);
    let tree = build_tree(catalog, model.clone()).await;
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("Said in fewer words."),
        "{outcome:?}"
    );
    assert_eq!(model.calls(), 2, "no worker ran");
    assert_eq!(tree.snapshot().agents().count(), 1, "no worker was spawned");
    let seen = model.seen();
    let result = seen[1].messages.last().unwrap();
    assert_eq!((result.role, result.is_error), (Role::Tool, true));
    assert_eq!(result.tool_call_id.as_deref(), Some("c1"));
    assert_eq!(
        result.content,
        r#"{"error":"your call to `Agent` was cut off at the output length limit before its arguments were complete, so nothing was run: call it again with shorter arguments (or say it in fewer words)"}"#
    );
}

/// A call whose arguments were not valid JSON in a turn that was not cut off is not run
/// either: the model is told its arguments were not JSON.
#[tokio::test(start_paused = true)]
async fn a_tool_call_with_arguments_that_are_not_json_is_not_run() {
    let broken = ToolCall::new(
        "c1",
        "read",
        serde_json::json!({ RAW_ARGUMENTS_KEY: "{path: a.rs}" }),
    );
    let model = Steps::new([
        Step::Respond(
            ModelResponse::calls(vec![broken]).with_finish_reason(FinishReason::ToolCalls),
        ),
        Step::Respond(ModelResponse::text("done")),
    ]);
    let tree = build(&model, TreeConfig::default()).await;
    tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    let seen = model.seen();
    let result = seen[1].messages.last().unwrap();
    assert!(result.is_error);
    assert_eq!(
        result.content,
        r#"{"error":"the arguments of your call to `read` were not valid JSON, so nothing was run: call it again with its arguments as a JSON object"}"#
    );
}

/// An abort racing a turn in its retry backoff, on worker threads: the agent is aborted, the
/// model is never called after the abort is seen, and every attempt the model failed is
/// billed exactly once.
#[test]
fn an_abort_races_a_retrying_turn_on_worker_threads() {
    let runtime = crate::support::races::runtime_on(2);
    for round in 0..60u64 {
        runtime.block_on(async {
            let failing =
                || Step::Fail(ModelError::transient("reset").with_usage(Usage::tokens(5, 0)));
            let model = Steps::new((0..8).map(|_| failing()));
            let policy = RetryPolicy::default()
                .with_max_attempts(8)
                .with_backoff(Duration::from_micros(50), Duration::from_micros(200));
            let tree = build(&model, TreeConfig::default().with_retry(policy)).await;
            let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
            for _ in 0..(round % 7) {
                tokio::task::yield_now().await;
            }
            let _ = tree.abort(handle.id());
            let outcome = handle.outcome().await;
            let calls = model.calls() as u64;
            assert!(
                matches!(outcome.status, AgentStatus::Aborted | AgentStatus::Failed),
                "round {round}: {outcome:?}"
            );
            let own = tree.record(handle.id()).unwrap().own;
            assert_eq!(own.input_tokens, 5 * calls, "round {round}: {calls} calls");
            tokio::task::yield_now().await;
            assert_eq!(
                model.calls() as u64,
                calls,
                "round {round}: called after settling"
            );
            tree.shutdown().await;
        });
    }
}

/// The streamed text survives an abort whichever reaches the agent first, the turn task's
/// report or the abort itself: on worker threads, many times.
#[test]
fn streamed_text_is_the_partial_output_whatever_arrives_first_on_worker_threads() {
    let runtime = crate::support::races::runtime_on(2);
    for round in 0..80 {
        runtime.block_on(async {
            let (outcome, own) = abort_mid_stream().await;
            assert_eq!(outcome.status, AgentStatus::Aborted, "round {round}");
            assert_eq!(
                outcome.partial.as_deref(),
                Some("Half an answer"),
                "round {round}"
            );
            assert_eq!(own, Usage::tokens(7, 3), "round {round}");
        });
    }
}

/// A boss that spawns one background worker and then hangs; the worker streams, says so,
/// and hangs.
/// Written by hand: it streams through the request's sink.
struct BossAndStreamingWorker {
    ready: Arc<Notify>,
    boss_turns: Mutex<u32>,
}

impl Model for BossAndStreamingWorker {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            if request.agent_type() == "worker" {
                request.sink.text("streamed ");
                request.sink.text("so far");
                request.sink.usage(Usage::tokens(2, 2));
                self.ready.notify_one();
                return std::future::pending().await;
            }
            let first = {
                let mut turns = self.boss_turns.lock();
                *turns += 1;
                *turns == 1
            };
            if first {
                let spawn = agent_tree::protocol::ToolCall::new(
                    "c1",
                    "Agent",
                    serde_json::json!({"agent_type": "worker", "prompt": "go", "background": true}),
                );
                return Ok(ModelResponse::calls(vec![spawn]));
            }
            std::future::pending().await
        })
    }
}

/// An abort that reaches a streaming child through its owner's cascade (its token, not a
/// message of its own): the child's turn may report first, and its streamed text is still
/// its partial output.
#[tokio::test(start_paused = true)]
async fn a_cascaded_abort_keeps_the_childs_streamed_text() {
    let ready = Arc::new(Notify::new());
    let model = BossAndStreamingWorker {
        ready: ready.clone(),
        boss_turns: Mutex::new(0),
    };
    let catalog = catalog([
        AgentDefinition::new("boss", "")
            .with_allowed_subagents(agent_tree::protocol::SubagentAllowance::All),
        AgentDefinition::new("worker", ""),
    ]);
    let tree = build_tree(catalog, model).await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    ready.notified().await;
    tree.abort(boss.id()).unwrap();
    boss.outcome().await;
    tree.idle().await;
    let child = tree.outcome(AgentId::new(2)).unwrap();
    assert_eq!(child.status, AgentStatus::Aborted, "{child:?}");
    assert_eq!(
        child.partial.as_deref(),
        Some("streamed so far"),
        "{child:?}"
    );
    assert_eq!(
        tree.record(AgentId::new(2)).unwrap().own,
        Usage::tokens(2, 2)
    );
}
