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
    /// Abort `idler` from `flaky`'s failing call instead (before the plan stops `idler`).
    early: bool,
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
        if self.early && request.agent == AgentId::new(2) && request.incarnation == 1 {
            drop(Guard {
                cell: self.cell.clone(),
                seen: self.seen.clone(),
            });
            return Box::pin(std::future::ready(Err(ModelError::new("boom"))));
        }
        if self.early && request.agent == AgentId::new(1) && request.incarnation == 1 {
            return Box::pin(std::future::pending());
        }
        if !self.early && request.agent == AgentId::new(1) && request.incarnation == 1 {
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
async fn abort_on_drop_tree(
    delay: Duration,
    early: bool,
) -> (Arc<Tree>, Arc<Mutex<Option<(bool, u64)>>>) {
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
        early,
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
    early: bool,
) -> Option<(bool, usize, AgentRecord)> {
    let (tree, seen) = abort_on_drop_tree(delay, early).await;
    let mut all = tree.subscribe();
    let idler = tree.spawn(SpawnRequest::new("idler", "go")).await.unwrap();
    let flaky = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    assert_eq!((idler.id(), flaky.id()), (AgentId::new(1), AgentId::new(2)));
    if tokio::time::timeout(Duration::from_secs(10), tree.idle())
        .await
        .is_err()
    {
        let events = all.drain();
        for e in &events {
            eprintln!("{} {} {:?}", e.seq, e.agent, e.kind);
        }
        panic!(
            "run {run}: idle hung: {:?} {}",
            seen.lock().unwrap(),
            tree.snapshot().render_text()
        );
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
    Some((
        aborted,
        restarts_after(&events, AgentId::new(1), accepted),
        record,
    ))
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
    let (aborted, restarted, record) = held_sibling_aborted(Duration::from_millis(100), 0, false)
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
        let Some((aborted, restarted, record)) = held_sibling_aborted(delay, run, false).await
        else {
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

/// `boss` (a1, may start `kid`) starts a detached background `kid` (a2) in its first run and
/// answers; `kid` follows `kid_script`. Returns the tree once `boss`'s first run completed.
async fn boss_with_detached_kid(
    boss_later: Vec<Turn>,
    kid_script: Script,
) -> (Tree, ScriptedModel) {
    let boss = std::iter::once(Turn::spawn_background("kid", "detached work").usage(U))
        .chain(std::iter::once(Turn::answer("boss run 1 done").usage(U)))
        .chain(boss_later);
    let model = ScriptedModel::new()
        .script("boss", Script::new(boss))
        .script("kid", kid_script);
    let tree = Tree::builder()
        .catalog(catalog([
            crate::support::delegator("boss", &["kid"]),
            leaf("kid").detached(),
        ]))
        .model(model.clone())
        .build()
        .await
        .expect("builds");
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let first = boss.outcome().await;
    assert!(first.is_completed(), "{first:?}");
    assert_eq!(boss.id(), AgentId::new(1));
    let kid = tree.record(AgentId::new(2)).expect("the kid");
    assert!(kid.status.is_live() && kid.detached, "{kid:?}");
    (tree, model)
}

/// Defect: a detached child that outlives its owner's run is not heard of by the owner's
/// resumed run. The kid ends while the resumed `boss` is in a model turn that answers
/// without tool calls; the notice of its end must reach the boss's conversation and give it
/// one more turn. The boss's resumed run never hears of it: its actor's child table starts
/// empty (`Children::default()` in `AgentState::new`), and `on_child_ended`
/// (`agent/children.rs`) drops the `ChildEnded` the kid's settle sends to the owner's current
/// actor (`let Some(entry) = self.children.get(child) else { return; }`).
///
/// docs/semantics.md, Lifetimes: "Ownership stays with the spawner: records, control,
/// billing, and its owner (its current incarnation) hears when it ends"; Control: "A
/// background child's completion reaches its owner's conversation as a JSON notice ... at
/// the owner's next turn boundary, unless the owner read or awaited that result"; An
/// agent's run: "A turn without tool calls ends the run, unless something arrived during it
/// that the model has not read: ... a child's completion notice".
#[tokio::test(start_paused = true)]
async fn a_resumed_owner_hears_of_its_detached_child_ending() {
    let (tree, model) = boss_with_detached_kid(
        vec![
            Turn::answer("boss run 2, first answer")
                .usage(U)
                .after(Duration::from_secs(2)),
            Turn::answer("boss run 2, after the notice").usage(U),
        ],
        Script::new([Turn::answer("kid done")
            .usage(U)
            .after(Duration::from_secs(1))]),
    )
    .await;
    let (boss, kid) = (AgentId::new(1), AgentId::new(2));
    let mut resumed = tree.resume(boss, "carry on").await.expect("resumes");
    let outcome = resumed.outcome().await;
    let kid_outcome = tree.outcome(kid).expect("the kid settled");
    assert_eq!(kid_outcome.text.as_deref(), Some("kid done"));
    let run2: Vec<_> = model
        .log_of(boss)
        .into_iter()
        .skip(2)
        .map(|c| c.messages)
        .collect();
    let noticed = run2.iter().any(|messages| {
        messages
            .iter()
            .any(|m| m.content.contains("subagent_ended") && m.content.contains("a2"))
    });
    tree.shutdown().await;
    assert!(
        noticed,
        "the resumed boss never heard that its detached kid ended (it made {} call(s) in its \
         resumed run and ended {:?})",
        run2.len(),
        outcome
    );
}

/// Defect: a detached child's `ask_owner` while its owner's resumed run waits on it. The
/// question must reach that run (its wait answered `asking`, the boss's steer answering the
/// kid). It goes to the actor the kid was started under (`AgentState::owner`, used by
/// `ask_owner` in `agent/orchestration.rs`: `state.owner.cast(asked)`), which is the boss's
/// first run's, stopped: the kid gets "the owner is gone" at once. (Had it reached the
/// current actor, `on_asked` drops questions of children not in the run's table.)
///
/// docs/semantics.md, Control: "`ask_owner {question}`: the child waits; the question
/// reaches its direct owner (an `asked` event, and a notice in an agent owner's conversation
/// at its next turn boundary) ... If the owner is waiting on that child, the wait is answered
/// at once with `{"status": "asking", "question": ...}`"; Lifetimes: a detached child's
/// owner stays the spawner (its current incarnation).
#[tokio::test(start_paused = true)]
async fn a_detached_childs_question_reaches_its_owners_resumed_run() {
    use agent_tree::testkit::{Call, Target};
    let (tree, model) = boss_with_detached_kid(
        vec![
            Turn::calls([Call::result(Target::Id(AgentId::new(2)))]).usage(U),
            Turn::calls([Call::steer(Target::Id(AgentId::new(2)), "blue")]).usage(U),
            Turn::answer("boss run 2 done").usage(U),
        ],
        Script::new([
            Turn::calls([crate::support::ask("which colour?")])
                .usage(U)
                .after(Duration::from_secs(1)),
            Turn::answer("kid done").usage(U),
        ]),
    )
    .await;
    let (boss, kid) = (AgentId::new(1), AgentId::new(2));
    let mut resumed = tree
        .resume(boss, "wait for your kid")
        .await
        .expect("resumes");
    let outcome = crate::races_mt::bounded("the resumed boss", resumed.outcome()).await;
    let kid_calls = model.log_of(kid);
    let answer = kid_calls
        .get(1)
        .and_then(|call| call.results.first().cloned())
        .expect("the kid's second call has its question's result");
    let boss_calls = model.log_of(boss);
    tree.shutdown().await;
    assert!(
        !answer.is_error && answer.content.contains("blue"),
        "the kid's question never reached its owner's resumed run: it got {:?}; the boss's \
         wait got {:?}; the boss ended {outcome:?}",
        answer.content,
        boss_calls.get(3).map(|c| c.results.clone()),
    );
}

/// Guard (passes): the application aborts `idler` before the plan stops it (from `flaky`'s
/// failing call, before `flaky`'s exit is recorded): `hold_and_abort` finds the abort and
/// does not hold `idler`, whose exit is final; the plan goes on and restarts `flaky` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_before_the_plan_stops_a_sibling_is_final_mt() {
    for run in 0..100u32 {
        let (aborted, restarted, record) =
            held_sibling_aborted(Duration::from_millis(1), run, true)
                .await
                .expect("flaky failed");
        assert!(aborted, "run {run}");
        assert_eq!(
            (restarted, record.status, record.incarnation),
            (0, AgentStatus::Aborted, 1),
            "run {run}: {record:?}"
        );
    }
}
