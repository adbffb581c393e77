//! Review 19: restarts held by a strategy, explicit aborts, questions, resumes and the first
//! poll in `post_start`.
//!
//! Paused tests fix one message order of a current-thread runtime; `_mt` tests loop the
//! races on two worker threads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_tree::BoxFuture;
use agent_tree::prelude::*;
use agent_tree::protocol::{AgentRecord, Event, EventKind, Strategy};
use agent_tree::testkit::{Script, ScriptedModel, Turn};

use crate::races_mt::assert_folds;
use crate::support::TreeCell;
use crate::support::{catalog, leaf};

const U: Usage = Usage::tokens(7, 3);

fn restarts_after(events: &[Event], agent: AgentId, accepted: u64) -> usize {
    events
        .iter()
        .filter(|e| {
            e.agent == agent && e.seq > accepted && matches!(e.kind, EventKind::Restarted { .. })
        })
        .count()
}

/// A model that plays `scripted`, except that `idler`'s (a1's) first run hangs with a guard
/// that, when the hanging call is dropped (its actor cancelled the turn: the plan's stop),
/// has the application abort `idler` too, and records whether the abort was accepted and
/// the event count then.
#[derive(Clone)]
struct AbortOnDrop {
    scripted: ScriptedModel,
    cell: TreeCell,
    seen: Arc<Mutex<Option<(bool, u64)>>>,
}

struct Guard {
    cell: TreeCell,
    seen: Arc<Mutex<Option<(bool, u64)>>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(tree) = self.cell.get() {
            let aborted = tree.abort(AgentId::new(1)).is_ok();
            let accepted = tree.snapshot().tally.total();
            *self.seen.lock().unwrap() = Some((aborted, accepted));
        }
    }
}

impl Model for AbortOnDrop {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent == AgentId::new(1) && request.incarnation == 1 {
            let guard = Guard {
                cell: self.cell.clone(),
                seen: self.seen.clone(),
            };
            return Box::pin(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                unreachable!()
            });
        }
        self.scripted.turn(request)
    }
}

/// The root supervises `idler` (a1, transient) and `flaky` (a2, transient, fails after
/// `delay`) one-for-all. Returns the tree and what the guard saw.
async fn abort_on_drop_tree(delay: Duration) -> (Arc<Tree>, Arc<Mutex<Option<(bool, u64)>>>) {
    let scripted = ScriptedModel::new()
        .script(
            "flaky",
            Script::new([
                Turn::fail("boom").after(delay),
                Turn::answer("flaky again").usage(U),
                Turn::answer("flaky third").usage(U),
            ]),
        )
        .script(
            "idler",
            Script::new([
                Turn::answer("idler again").usage(U),
                Turn::answer("idler third").usage(U),
            ]),
        );
    let cell = TreeCell::new();
    let seen: Arc<Mutex<Option<(bool, u64)>>> = Arc::default();
    let model = AbortOnDrop {
        scripted,
        cell: cell.clone(),
        seen: seen.clone(),
    };
    let config =
        TreeConfig::default().with_root_supervision(Strategy::OneForAll, 5, Duration::from_secs(5));
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog([
            leaf("flaky").with_restart(RestartPolicy::Transient),
            leaf("idler").with_restart(RestartPolicy::Transient),
        ]))
        .model(model)
        .build()
        .await
        .expect("builds");
    let tree = Arc::new(tree);
    cell.set(&tree);
    (tree, seen)
}

/// One trial: `flaky` fails, the plan stops `idler`, and the application aborts `idler`
/// while it is being stopped (from the drop of its cancelled turn, on its own actor before
/// it settles). Returns whether the abort was accepted and how many `restarted` events of
/// `idler` followed it, with its record at idle.
async fn held_sibling_aborted(
    delay: Duration,
    run: u32,
) -> Option<(bool, usize, AgentRecord)> {
    let (tree, seen) = abort_on_drop_tree(delay).await;
    let mut all = tree.subscribe();
    let idler = tree.spawn(SpawnRequest::new("idler", "go")).await.unwrap();
    let flaky = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    assert_eq!((idler.id(), flaky.id()), (AgentId::new(1), AgentId::new(2)));
    if tokio::time::timeout(Duration::from_secs(10), tree.idle()).await.is_err() {
        let events = all.drain();
        for e in &events { eprintln!("{} {} {:?}", e.seq, e.agent, e.kind); }
        panic!("run {run}: idle hung: {:?} {}", seen.lock().unwrap(), tree.snapshot().render_text());
    }
    let seen = *seen.lock().unwrap();
    let record = tree.record(idler.id()).unwrap();
    drop((flaky, idler));
    let tree = Arc::try_unwrap(tree).expect("one strong reference");
    tree.shutdown().await;
    let events = all.drain();
    assert_folds(&tree, &events, run);
    // None: the plan stopped `idler` before its first model call (no guard to drop).
    let (aborted, accepted) = seen?;
    Some((aborted, restarts_after(&events, AgentId::new(1), accepted), record))
}

/// Defect: an explicit `Tree::abort` of a sibling that its owner's one-for-all plan is
/// stopping (held for the restart) is ignored: the sibling is restarted anyway.
///
/// docs/semantics.md, Supervision restarts: "a sibling that something else ends for good
/// meanwhile (a shutdown, an explicit abort) is not restarted, and the plan goes on"; and
/// "An abort is the owner's or the application's intent (like OTP's `terminate_child`) and
/// never restarts".
///
/// `Registry::hold_and_abort` sets `held` and `abort_reason`; the application's
/// `Registry::abort` then finds `abort_reason` set and the token cancelled and changes
/// nothing (`get_or_insert`, `told`), and it releases a deferred exit only when it is not
/// held (`let release = entry.deferred && !entry.held;`, `registry/end.rs`). `held` is never
/// cleared, so `Inner::settle` defers the exit (`restart::deferred`: `exit.held || ...`) and
/// the plan restarts `idler` after the application's abort was accepted. (A shutdown that
/// lands then is honoured: `begin_shutdown` marks the run `under_shutdown` or releases it.)
#[tokio::test(start_paused = true)]
async fn an_explicit_abort_of_a_held_sibling_is_not_restarted() {
    let (aborted, restarted, record) = held_sibling_aborted(Duration::from_millis(100), 0)
        .await
        .expect("idler's first turn was dropped");
    assert!(aborted, "the abort was accepted");
    assert_eq!(
        (restarted, record.status, record.incarnation),
        (0, AgentStatus::Aborted, 1),
        "idler was restarted after the application's abort was accepted: {record:?}"
    );
}

/// The same on worker threads, many times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_abort_of_a_held_sibling_is_not_restarted_mt() {
    let (mut failures, mut trials) = (Vec::new(), 0);
    for run in 0..150u32 {
        let delay = Duration::from_micros(u64::from(run % 5) * 200);
        let Some((aborted, restarted, record)) = held_sibling_aborted(delay, run).await else {
            continue;
        };
        trials += 1;
        if aborted && (restarted > 0 || record.incarnation > 1) {
            failures.push(run);
        }
    }
    assert!(
        failures.is_empty(),
        "idler restarted after an accepted abort in {} of {trials} trials: {failures:?}",
        failures.len()
    );
}
