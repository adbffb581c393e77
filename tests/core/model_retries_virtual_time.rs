//! Model retries in virtual time: a retry-after is waited exactly, a rate limit without one
//! backs off with jitter, every failed attempt is billed, and giving up says why.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind, ModelErrorKind};
use agent_tree::testkit::{self, EventProbe, FaultyModel, ScriptedModel, Turn};

use crate::small_catalogs::one_worker;
use crate::support::build_tree;

/// A retry-after is waited exactly; a rate limit without one backs off from 500 ms
/// with equal jitter; every failed attempt is billed; the turn number stays.
#[tokio::test(start_paused = true)]
async fn rate_limits_are_retried_in_virtual_time_and_every_attempt_is_billed() {
    let (model, mut calls) = testkit::pair();
    let tree = build_tree(one_worker(), model).await;
    let mut events = EventProbe::new(&tree);
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();

    let first = calls.expect_turn_of(w.id()).await;
    assert_eq!(first.turn(), 1);
    first.fail(
        ModelError::rate_limited("slow down", Some(Duration::from_secs(2)))
            .with_status(429)
            .with_usage(Usage::tokens(5, 0)),
    );
    let second = calls.expect_turn_of(w.id()).await;
    assert_eq!(second.turn(), 1, "a retry keeps the turn number");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "retry-after waited exactly"
    );
    second.fail(ModelError::rate_limited("slow down", None).with_usage(Usage::tokens(5, 0)));
    let third = calls.expect_turn_of(w.id()).await;
    let backoff = started.elapsed() - Duration::from_secs(2);
    assert!(
        backoff >= Duration::from_millis(250) && backoff <= Duration::from_millis(1000),
        "{backoff:?}"
    );
    third.answer_text("done", Usage::tokens(10, 2));
    assert_eq!(w.outcome().await.text.as_deref(), Some("done"));

    let all = events.drain();
    // "The failed attempt's usage, if any, was reported before" each `retrying`.
    for (i, e) in all.iter().enumerate() {
        if matches!(e.kind, EventKind::Retrying { .. }) {
            assert!(
                matches!(all[i - 1].kind, EventKind::UsageReported { delta } if delta == Usage::tokens(5, 0)),
                "{:?}",
                all[i - 1]
            );
        }
    }
    let retries = crate::model_contract::retries_in(all);
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0], (1, 1, ModelErrorKind::RateLimited, 2000));
    // delay_ms is the wait truncated to ms; tokio's timer rounds the sleep up to the next ms.
    assert!(
        backoff.as_millis().abs_diff(u128::from(retries[1].3)) <= 1,
        "{backoff:?} {retries:?}"
    );
    assert_eq!(tree.record(w.id()).unwrap().own, Usage::tokens(20, 2));
    tree.shutdown().await;
}

/// A model call that is not retried fails with the two "not retried" texts of docs/semantics.md.
#[tokio::test(start_paused = true)]
async fn a_retry_gives_up_with_the_documented_texts() {
    // Every attempt of turn 1 rate-limited: gives up after 4.
    let model = FaultyModel::new(ScriptedModel::new().script("w", [Turn::answer("ok")]))
        .fail_at_turn(1, ModelError::rate_limited("429", None));
    let tree = build_tree(one_worker(), model).await;
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert_eq!(outcome.reason, EndReason::ModelError);
    let error = outcome.error.unwrap();
    assert!(
        error.ends_with("; gave up after 4 attempts (the retry policy's max_attempts)"),
        "{error}"
    );
    // 3 backoffs: ≤ 0.5 + 1 + 2 s.
    assert!(
        started.elapsed() <= Duration::from_millis(3500),
        "{:?}",
        started.elapsed()
    );
    tree.shutdown().await;

    // A retry-after over max_wait fails at once.
    let (model, mut calls) = testkit::pair();
    let tree = crate::support::harness::tree(
        model,
        one_worker(),
        TreeConfig::default().with_retry(RetryPolicy::default()),
    )
    .await;
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    calls
        .expect_turn()
        .await
        .fail(ModelError::rate_limited("quota", Some(Duration::from_secs(3600))).with_status(429));
    let outcome = w.outcome().await;
    let error = outcome.error.unwrap();
    assert!(
        error.contains(
            "not retried: the provider asked to wait 3600s, over the retry policy's max_wait of 60s"
        ),
        "{error}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    calls.expect_no_turn();
    tree.shutdown().await;
}
