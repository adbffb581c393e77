//! A model turn is a future the agent's actor polls (no task of its own): abort, kill,
//! shutdown, restart and panics meeting a turn that a streaming model wakes many times from
//! another thread, looped on worker threads so every order of wake, poll and control message
//! shows up.
//!
//! The streaming model reports one character of text and its usage so far together (no await
//! between them), so a turn cut off anywhere is billed exactly what it streamed: an agent's
//! own usage is `10` input tokens and one output token per streamed character per call, never
//! a turn counted twice or lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_tree::BoxFuture;
use agent_tree::prelude::*;
use agent_tree::protocol::{AgentRecord, EndReason, Event};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::races_mt::{assert_folds, bounded};
use crate::support::scripts::foreground_spawns_of;
use crate::support::{build_tree, catalog, delegator, leaf, spawn_admitted};

/// Characters a streamed turn sends before it answers.
const CHUNKS: u64 = 40;

/// Input tokens every streamed call reports with its first character.
const INPUT: u64 = 10;

/// Checks the usage sums, then folds `events` and compares with the tree's records.
fn assert_consistent(tree: &Tree, events: &[Event], run: u32) {
    let snapshot = tree.snapshot();
    if let Err(mismatch) = snapshot.check_usage() {
        panic!("run {run}: {mismatch:?}\n{}", snapshot.render_text());
    }
    assert_folds(tree, events, run);
}

/// Answers `lead` from a script; every other agent streams [`CHUNKS`] characters, each
/// sent by a producer task on whatever thread it runs on (a chunk wakes the turn from
/// there), and answers with the text. `panic_at`: the call panics after that many.
/// Written by hand: the test is about streaming from other threads into a turn's poll.
#[derive(Clone)]
struct Streamer {
    lead: ScriptedModel,
    panic_at: Option<u64>,
    /// Streamed characters over all calls, for waits on progress.
    streamed: Arc<watch::Sender<u64>>,
    calls: Arc<AtomicUsize>,
    /// The first `hold_calls` calls wait after this many characters until
    /// [`Streamer::release`].
    hold_at: Option<u64>,
    hold_calls: usize,
    gate: Arc<Semaphore>,
}

impl Streamer {
    fn new(lead: Script) -> Self {
        Streamer {
            lead: ScriptedModel::new().script("lead", lead),
            panic_at: None,
            streamed: Arc::new(watch::channel(0).0),
            calls: Arc::new(AtomicUsize::new(0)),
            hold_at: None,
            hold_calls: 1,
            gate: Arc::new(Semaphore::new(0)),
        }
    }

    /// The first call holds after `chunk` characters until [`Streamer::release`] (a test
    /// makes sure its kill is sent while the turn is in flight; the rest of the stream
    /// still races with it).
    fn holding_at(mut self, chunk: u64) -> Self {
        self.hold_at = Some(chunk);
        self
    }

    fn release(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    fn panicking_at(mut self, chunk: u64) -> Self {
        self.panic_at = Some(chunk);
        self
    }

    /// Until `n` characters were streamed over all calls.
    async fn until_streamed(&self, n: u64) {
        let mut seen = self.streamed.subscribe();
        bounded("the stream", seen.wait_for(|&s| s >= n))
            .await
            .expect("the model lives");
    }
}

impl Model for Streamer {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type() == "lead" {
            return self.lead.turn(request);
        }
        let held = self.calls.fetch_add(1, Ordering::SeqCst) < self.hold_calls;
        let hold_at = self.hold_at.filter(|_| held);
        Box::pin(async move {
            let (tx, mut rx) = mpsc::channel::<()>(1);
            // The producer: its sends wake the turn from its thread; it ends when the turn
            // is dropped (its receiver goes).
            tokio::spawn(async move {
                for _ in 0..CHUNKS {
                    if tx.send(()).await.is_err() {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            });
            let mut text = String::new();
            for n in 1..=CHUNKS {
                rx.recv().await.expect("the producer sends every chunk");
                text.push('x');
                request.sink.text("x");
                request.sink.usage(Usage::tokens(INPUT, n));
                self.streamed.send_modify(|s| *s += 1);
                if self.panic_at == Some(n) {
                    panic!("the stream broke at {n}");
                }
                if hold_at == Some(n) {
                    let _permit = self.gate.acquire().await.expect("the gate stays open");
                }
                // Some chunks are taken without waiting for the next poll message.
                if n % 3 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            Ok(ModelResponse::text(text).with_usage(Usage::tokens(INPUT, CHUNKS)))
        })
    }
}

/// A worker's own usage matches what it streamed in `calls` calls, each billed once: every
/// call that streamed anything bills its input once and one output token per character.
fn assert_billed_once(record: &AgentRecord, calls: u64, run: u32) {
    let own = record.own;
    let streamed_calls = own.input_tokens / INPUT;
    assert_eq!(own.input_tokens % INPUT, 0, "run {run}: {own:?}");
    assert!(streamed_calls <= calls, "run {run}: {calls} calls, {own:?}");
    assert!(
        own.output_tokens <= streamed_calls * CHUNKS && own.output_tokens >= streamed_calls,
        "run {run}: {streamed_calls} calls billed, {own:?}"
    );
}

/// The application aborts a streaming agent at a random point of its stream: it ends aborted
/// with the streamed text as its partial output and billed exactly what it streamed, or (the
/// stream won) completed and billed its response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_meets_a_streaming_turn_on_worker_threads() {
    for run in 0..150u32 {
        let model = Streamer::new(Script::new([]));
        let tree = build_tree(catalog([leaf("worker")]), model.clone()).await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let at = u64::from(run) % (CHUNKS + 5);
        if at > 0 {
            model.until_streamed(at.min(CHUNKS)).await;
        }
        let _ = tree.abort(worker.id());
        let outcome = bounded("the worker", worker.outcome()).await;
        let record = tree.record(worker.id()).expect("the worker");
        match outcome.reason {
            EndReason::Aborted => {
                let partial = outcome.partial.as_deref().unwrap_or_default();
                let streamed = partial.len() as u64;
                let billed = if streamed == 0 {
                    Usage::ZERO
                } else {
                    Usage::tokens(INPUT, streamed)
                };
                assert_eq!(record.own, billed, "run {run}: partial {partial:?}");
                assert!(streamed >= at.min(CHUNKS), "run {run}: {streamed} < {at}");
            }
            EndReason::FinalAnswer => {
                assert_eq!(outcome.text.as_deref().map(str::len), Some(CHUNKS as usize));
                assert_eq!(record.own, Usage::tokens(INPUT, CHUNKS), "run {run}");
            }
            other => panic!("run {run}: {other:?} {outcome:?}"),
        }
        bounded("idle", tree.idle()).await;
        tree.shutdown().await;
        assert!(tree.alive_actors().is_empty(), "run {run}");
        assert_consistent(&tree, &all.drain(), run);
    }
}

/// `Tree::kill` while the turn streams: the actor goes with its turn, which bills what it
/// streamed when it is dropped, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_meets_a_streaming_turn_on_worker_threads() {
    let mut killed = 0;
    for run in 0..150u32 {
        let before = 1 + u64::from(run) % (CHUNKS - 1);
        let model = Streamer::new(Script::new([])).holding_at(before);
        let tree = build_tree(catalog([leaf("worker")]), model.clone()).await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        model.until_streamed(before).await;
        let _ = tree.kill(worker.id());
        model.release();
        let outcome = bounded("the worker", worker.outcome()).await;
        assert!(
            matches!(outcome.reason, EndReason::Killed | EndReason::FinalAnswer),
            "run {run}: {outcome:?}"
        );
        killed += usize::from(outcome.reason == EndReason::Killed);
        bounded("idle", tree.idle()).await;
        let record = tree.record(worker.id()).expect("the worker");
        assert_billed_once(&record, 1, run);
        // Whatever it reported before the kill is billed: nothing is lost to the kill.
        assert_eq!(record.own.input_tokens, INPUT, "run {run}: {record:?}");
        assert!(record.own.output_tokens >= before, "run {run}: {record:?}");
        if outcome.is_completed() {
            assert_eq!(record.own, Usage::tokens(INPUT, CHUNKS), "run {run}");
        }
        tree.shutdown().await;
        assert!(tree.alive_actors().is_empty(), "run {run}");
        assert_consistent(&tree, &all.drain(), run);
    }
    // The kill met a turn in flight in most runs (it is sent while the turn holds).
    assert!(killed > 100, "{killed} of 150 runs killed mid-turn");
}

/// `Tree::kill` of a lead whose three workers stream: they die with it (ractor's kill
/// cascade) and are settled killed in its owner's transaction (or, having answered first,
/// completed), each billed at least what it had reported before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_cascade_meets_streaming_turns_on_worker_threads() {
    for run in 0..100u32 {
        let before = 1 + u64::from(run) % (CHUNKS - 1);
        let mut model = Streamer::new(Script::new([
            foreground_spawns_of("worker", ["one", "two", "three"]),
            Turn::answer("lead done"),
        ]))
        .holding_at(before);
        model.hold_calls = 3;
        let tree = build_tree(
            catalog([delegator("lead", &["worker"]), leaf("worker")]),
            model.clone(),
        )
        .await;
        let mut all = tree.subscribe();
        let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        model.until_streamed(3 * before).await;
        tree.kill(lead.id()).expect("the lead runs");
        model.release();
        let outcome = bounded("the lead", lead.outcome()).await;
        assert_eq!(outcome.reason, EndReason::Killed, "run {run}: {outcome:?}");
        bounded("idle", tree.idle()).await;
        let snapshot = tree.snapshot();
        let workers: Vec<_> = snapshot
            .agents()
            .filter(|r| r.agent_type == "worker")
            .collect();
        assert_eq!(workers.len(), 3, "run {run}");
        for record in workers {
            // A worker can still answer between the kill's signal and the lead's actor
            // acting on it (the gate is opened right after the signal is sent).
            match record.status {
                AgentStatus::Killed => {}
                AgentStatus::Completed => {
                    assert_eq!(record.own, Usage::tokens(INPUT, CHUNKS), "run {run}");
                }
                _ => panic!("run {run}: {record:?}"),
            }
            assert_billed_once(record, 1, run);
            assert_eq!(record.own.input_tokens, INPUT, "run {run}: {record:?}");
            assert!(record.own.output_tokens >= before, "run {run}: {record:?}");
        }
        tree.shutdown().await;
        assert!(tree.alive_actors().is_empty(), "run {run}");
        assert_consistent(&tree, &all.drain(), run);
    }
}

/// A graceful shutdown of a lead waiting on three streaming workers, at a random point of
/// their streams: nobody is killed (an agent in its turn settles on the shutdown's order
/// alone), and every worker is billed what it streamed, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_meets_streaming_turns_on_worker_threads() {
    for run in 0..100u32 {
        let model = Streamer::new(Script::new([
            foreground_spawns_of("worker", ["one", "two", "three"]),
            Turn::answer("lead done"),
        ]));
        let tree = build_tree(
            catalog([delegator("lead", &["worker"]), leaf("worker")]),
            model.clone(),
        )
        .await;
        let mut all = tree.subscribe();
        let _lead = spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        model
            .until_streamed(1 + u64::from(run) % (3 * CHUNKS))
            .await;
        let report = bounded("the shutdown", tree.shutdown()).await;
        assert!(report.killed.is_empty(), "run {run}: {report:?}");
        let snapshot = tree.snapshot();
        for record in snapshot.agents() {
            assert!(
                matches!(
                    record.outcome.as_ref().map(|o| o.reason),
                    Some(EndReason::Shutdown | EndReason::FinalAnswer | EndReason::OwnerEnded)
                ),
                "run {run}: {record:?}"
            );
            if record.agent_type == "worker" {
                assert_billed_once(record, 1, run);
            }
        }
        assert!(tree.alive_actors().is_empty(), "run {run}");
        assert_consistent(&tree, &all.drain(), run);
    }
}

/// A transient worker killed mid-stream is restarted by its lead and streams again to the
/// end: both incarnations are billed, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_a_cut_off_turn_on_worker_threads() {
    let mut restarted = 0;
    for run in 0..100u32 {
        let before = 1 + u64::from(run) % (CHUNKS - 1);
        let model = Streamer::new(Script::new([
            Turn::spawn("worker", "go"),
            Turn::answer("lead done"),
        ]))
        .holding_at(before);
        let tree = build_tree(
            catalog([
                delegator("lead", &["worker"]),
                leaf("worker").with_restart(RestartPolicy::Transient),
            ]),
            model.clone(),
        )
        .await;
        let mut all = tree.subscribe();
        let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        let worker = AgentId::new(2);
        model.until_streamed(before).await;
        let _ = tree.kill(worker);
        model.release();
        let outcome = bounded("the lead", lead.outcome()).await;
        assert!(outcome.is_completed(), "run {run}: {outcome:?}");
        bounded("idle", tree.idle()).await;
        let record = tree.record(worker).expect("the worker");
        assert_eq!(record.status, AgentStatus::Completed, "run {run}");
        let calls = model.calls.load(Ordering::SeqCst) as u64;
        assert_eq!(calls, u64::from(record.incarnation), "run {run}");
        restarted += usize::from(calls == 2);
        assert_billed_once(&record, calls, run);
        // The last incarnation streamed to the end; a killed one streamed at least one
        // character (it was killed after it had).
        assert_eq!(
            record.own.input_tokens,
            INPUT * calls,
            "run {run}: {record:?}"
        );
        tree.shutdown().await;
        assert_consistent(&tree, &all.drain(), run);
    }
    assert!(
        restarted > 70,
        "{restarted} of 100 runs restarted after a kill mid-turn"
    );
}

/// A stream that panics partway fails its agent `panicked`, billed what it streamed; an
/// abort racing the panic ends it aborted instead, billed the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_stream_on_worker_threads() {
    const AT: u64 = 7;
    for run in 0..150u32 {
        let model = Streamer::new(Script::new([])).panicking_at(AT);
        let tree = build_tree(catalog([leaf("worker")]), model.clone()).await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let race = run % 2 == 0;
        if race {
            model.until_streamed(1 + u64::from(run) % AT).await;
            let _ = tree.abort(worker.id());
        }
        let outcome = bounded("the worker", worker.outcome()).await;
        let record = tree.record(worker.id()).expect("the worker");
        match outcome.reason {
            EndReason::Panicked => {
                assert_eq!(record.own, Usage::tokens(INPUT, AT), "run {run}");
                assert_eq!(outcome.partial.as_deref().map(str::len), Some(AT as usize));
            }
            EndReason::Aborted if race => {
                let streamed = outcome.partial.as_deref().map_or(0, str::len) as u64;
                assert!((1..=AT).contains(&streamed), "run {run}: {outcome:?}");
                assert_eq!(record.own, Usage::tokens(INPUT, streamed), "run {run}");
            }
            other => panic!("run {run}: {other:?} {outcome:?}"),
        }
        bounded("idle", tree.idle()).await;
        tree.shutdown().await;
        assert_consistent(&tree, &all.drain(), run);
    }
}

/// Steers arriving while the turn streams (control messages interleaved with the turn's
/// polls): each is read at a later turn, every turn streams to its end, and the agent is
/// billed exactly its calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steers_interleave_with_a_streaming_turn_on_worker_threads() {
    for run in 0..100u32 {
        let model = Streamer::new(Script::new([]));
        let tree = Arc::new(build_tree(catalog([leaf("worker")]), model.clone()).await);
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let id = worker.id();
        let steerer = {
            let tree = tree.clone();
            tokio::spawn(async move {
                let mut accepted = 0;
                for n in 0..(run % 4) {
                    if tree.steer(id, format!("steer {n}")).await.is_ok() {
                        accepted += 1;
                    }
                    tokio::task::yield_now().await;
                }
                accepted
            })
        };
        let outcome = bounded("the worker", worker.outcome()).await;
        let _accepted = steerer.await.expect("the steerer");
        assert!(outcome.is_completed(), "run {run}: {outcome:?}");
        bounded("idle", tree.idle()).await;
        let calls = model.calls.load(Ordering::SeqCst) as u64;
        let record = tree.record(id).expect("the worker");
        assert_eq!(
            record.own,
            Usage::tokens(INPUT * calls, CHUNKS * calls),
            "run {run}: {calls} calls"
        );
        tree.shutdown().await;
        assert_consistent(&tree, &all.drain(), run);
    }
}
