//! Review 20: every conversation a model is sent has a result for every call (runs that end
//! while their calls are out), later runs owning earlier runs' detached children, aborts of
//! held siblings, and the fold of the event stream.
//!
//! Paused tests fix one message order of a current-thread runtime; `_mt` tests loop the
//! races on two worker threads.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Message, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{FnTool, HookContext, JournalConfig, SteerReceipt, ToolError};
use serde_json::json;

use crate::support::RecordingModel;
use crate::support::harness::a;
use crate::support::lifetimes::ms;
use crate::support::{catalog, delegator_of_all, leaf, unanswered};

/// The `slow` tool: sleeps `ms` (tokio time), answers `slow <tag>`.
fn slow_tool() -> impl agent_tree::Tool {
    FnTool::new(
        "slow",
        "sleeps, then answers",
        |_ctx, input: serde_json::Value| async move {
            tokio::time::sleep(ms(input["ms"].as_u64().unwrap_or(0))).await;
            Ok::<String, ToolError>(format!("slow {}", input["tag"].as_str().unwrap_or("?")))
        },
    )
}

fn slow(tag: &str, wait: u64) -> Call {
    Call::tool("slow", json!({ "tag": tag, "ms": wait }))
}

/// `lead` (a1) calls `slow` twice in one turn: `quick` answers after 10 ms, `stuck` after
/// an hour. With `hooks`, the tree has a shutdown hook (it returns at once).
async fn lead_with_calls_out(hooks: bool) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::calls([slow("quick", 10), slow("stuck", 3_600_000)]),
            Turn::answer("lead done after the resume"),
        ]),
    ));
    let mut builder = Tree::builder()
        .catalog(catalog([delegator_of_all("lead")]))
        .model(model.clone())
        .tool(slow_tool())
        .expect("a free name");
    if hooks {
        builder = builder.on_shutdown(|_ctx: HookContext| async move { Ok(()) });
    }
    let tree = builder.build().await.expect("the tree builds");
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(lead.id(), a(1));
    // `quick` has answered; `stuck` is out.
    tokio::time::sleep(ms(50)).await;
    (tree, model)
}

/// Shuts `lead` down while `stuck` is out, resumes it, and returns the conversation its
/// resumed run's first turn was sent.
async fn shut_down_then_resumed(hooks: bool) -> Vec<Message> {
    let (tree, model) = lead_with_calls_out(hooks).await;
    let report = tree.shutdown_agent(a(1)).await.expect("shuts down");
    assert!(report.killed.is_empty(), "{report:?}");
    let record = tree.record(a(1)).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    let mut resumed = tree.resume(a(1), "try again").await.expect("resumes");
    let outcome = resumed.outcome().await;
    let calls = model.calls_of(a(1));
    tree.shutdown().await;
    assert_eq!(
        calls.len(),
        2,
        "one call a run; the resumed run ended {outcome:?}"
    );
    calls[1].messages.to_vec()
}

/// Defect: a run a shutdown ends while its calls are out, in a tree with shutdown hooks,
/// keeps the turn's calls without results (and loses the result `quick` had), so the
/// conversation its resume sends has a call with no result after it, which providers
/// refuse.
///
/// docs/semantics.md, Control: "A run that ends while its turn's calls are out (aborted, shut
/// down, killed) keeps them answered: each gets the result it had, or `{"error":"not
/// answered: ..."}`, before anything else is added (steers it never read), so every
/// conversation a model is sent has a result right after each call".
///
/// `run_shutdown_hooks` (`agent/ending.rs`) replaces the phase `Acting { calls }` with
/// `Stopping`, dropping the call table; when the hooks finish, `end_run` calls `close_calls`,
/// which finds no `Acting` phase and adds nothing.
#[tokio::test(start_paused = true)]
async fn review20_shutdown_with_hooks_keeps_every_call_answered() {
    let messages = shut_down_then_resumed(true).await;
    if let Some(problem) = unanswered(&messages) {
        panic!("the resumed run was sent a call without its result: {problem}: {messages:#?}");
    }
    let quick = messages
        .iter()
        .find(|m| m.role == Role::Tool && m.content == "slow quick");
    assert!(
        quick.is_some(),
        "quick's real result was lost: {messages:#?}"
    );
}

/// Guard (passes): the same without shutdown hooks: `end_run` closes the calls.
#[tokio::test(start_paused = true)]
async fn review20_guard_shutdown_without_hooks_keeps_every_call_answered() {
    let messages = shut_down_then_resumed(false).await;
    assert_eq!(unanswered(&messages), None, "{messages:#?}");
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::User
        ],
        "{messages:#?}"
    );
    assert_eq!(messages[2].content, "slow quick");
    assert!(messages[3].is_error && messages[3].content.contains("not answered"));
}

/// How the lead's first run is ended in [`ended_while_calls_are_out`].
#[derive(Clone, Copy, Debug)]
enum End {
    Abort,
    SteerThenAbort,
    Shutdown,
    Kill,
}

/// One trial: `lead` (a1) calls `slow` (`quick`), starts a foreground `asker` that asks it a
/// question, and calls `slow` (`stuck`) in one turn; once that turn returned (and, with
/// `asked`, the asker's question turn too) and `delay` yields later it is ended by `end`,
/// then resumed. Returns the conversation its resumed run's first turn was sent
/// (`None`: the lead ended before its first turn returned).
async fn ended_while_calls_are_out(end: End, delay: u64, asked: bool) -> Option<Vec<Message>> {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([Turn::calls([
                    slow("quick", 0),
                    Call::spawn("asker", "ask me"),
                    slow("stuck", 3_600_000),
                ])]),
            )
            .script(
                "asker",
                Script::new([
                    Turn::calls([crate::support::ask("which?")]),
                    Turn::answer("ok"),
                ]),
            ),
    )
    .with_hook(|request| {
        (request.agent == AgentId::new(1)
            && request
                .messages
                .last()
                .is_some_and(|m| m.content == "again"))
        .then(|| Ok(ModelResponse::text("lead done after the resume")))
    });
    let tree = Tree::builder()
        .catalog(catalog([delegator_of_all("lead"), leaf("asker")]))
        .model(model.clone())
        .tool(slow_tool())
        .expect("a free name")
        .build()
        .await
        .expect("the tree builds");
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    model
        .until("the lead's first turn to return", |calls| {
            calls
                .iter()
                .any(|c| c.agent == a(1) && c.end == agent_tree::testkit::CallEnd::Returned)
        })
        .await;
    if asked {
        model
            .until("the asker's question", |calls| {
                calls
                    .iter()
                    .any(|c| c.agent == a(2) && c.end == agent_tree::testkit::CallEnd::Returned)
            })
            .await;
    }
    for _ in 0..delay {
        tokio::task::yield_now().await;
    }
    match end {
        End::Abort => tree.abort(lead.id()).unwrap(),
        End::SteerThenAbort => {
            let _ = tree.steer(lead.id(), "a late steer").await;
            tree.abort(lead.id()).unwrap();
        }
        End::Shutdown => {
            tree.shutdown_agent(lead.id()).await.unwrap();
        }
        End::Kill => {
            let _ = tree.kill(lead.id());
        }
    }
    crate::races_mt::bounded("the lead's first run", tree.idle()).await;
    let first_turn_returned = model
        .calls_of(a(1))
        .first()
        .is_some_and(|c| c.end == agent_tree::testkit::CallEnd::Returned);
    let mut resumed = tree.resume(a(1), "again").await.expect("resumes");
    let outcome = crate::races_mt::bounded("the resumed lead", resumed.outcome()).await;
    assert!(outcome.is_completed(), "{outcome:?}");
    let calls = model.calls_of(a(1));
    tree.shutdown().await;
    if !first_turn_returned {
        return None;
    }
    Some(calls.last().unwrap().messages.to_vec())
}

/// Guard (passes): every way an abort, a steer then an abort, a shutdown without hooks or a
/// kill ends a run while its calls are out (one answered, one a question's wait, one
/// stuck), on worker threads: the resumed run is sent every call with exactly one result,
/// and the result `quick` had is kept (not for a kill, which keeps the last turn boundary).
#[test]
fn review20_guard_every_end_with_calls_out_keeps_them_answered_mt() {
    let ends = [End::Abort, End::SteerThenAbort, End::Shutdown, End::Kill];
    let mut trial = 0u64;
    crate::support::races::on_worker_threads(160, Duration::from_secs(20), || {
        trial += 1;
        let end = ends[(trial % 4) as usize];
        let delay = (trial * 7) % 40;
        let asked = !trial.is_multiple_of(3);
        async move {
            let Some(messages) = ended_while_calls_are_out(end, delay, asked).await else {
                return;
            };
            if let Some(problem) = unanswered(&messages) {
                panic!("trial {trial} ({end:?}, delay {delay}): {problem}: {messages:#?}");
            }
            let quicks = messages
                .iter()
                .filter(|m| m.role == Role::Tool && m.content == "slow quick")
                .count();
            assert!(
                quicks <= 1,
                "trial {trial}: quick's result twice: {messages:#?}"
            );
        }
    });
}

/// The boss's model for [`detached_question_around_owner_runs`]: its first turn starts a
/// detached background `kid`; a turn whose last message is a question notice steers the kid
/// `blue`; any other turn plays the boss's script (answers, each after 2 ms).
fn boss_hook(request: &ModelRequest) -> Option<Result<ModelResponse, ModelError>> {
    use agent_tree::protocol::ToolCall;
    if request.agent != AgentId::new(1) {
        return None;
    }
    let last = request.messages.last()?;
    if request.messages.len() == 1 {
        let call = ToolCall::new(
            "spawn",
            "Agent",
            json!({ "agent_type": "kid", "prompt": "detached work", "background": true }),
        );
        return Some(Ok(ModelResponse::calls(vec![call])));
    }
    if last.role == Role::User && last.content.contains("\"notice\":\"question\"") {
        let call = ToolCall::new(
            "steer",
            "steer_subagent",
            json!({ "agent_id": "a2", "message": "blue" }),
        );
        return Some(Ok(ModelResponse::calls(vec![call])));
    }
    // Any other turn: the boss's script.
    None
}

/// One trial: `boss` (a1) starts a detached `kid` (a2) and answers; the kid asks it a
/// question after `delay`; with `resume`, the boss is resumed as soon as its first run
/// ended. Returns the result the kid's question got.
async fn detached_question_around_owner_runs(delay: Duration, resume: bool) -> Message {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "kid",
                Script::new([
                    Turn::calls([crate::support::ask("which colour?")]).after(delay),
                    Turn::answer("kid done"),
                ]),
            )
            .script(
                "boss",
                Script::new((0..4).map(|_| Turn::answer("boss done").after(ms(2)))),
            ),
    )
    .with_hook(boss_hook);
    let tree = Tree::builder()
        .catalog(catalog([delegator_of_all("boss"), leaf("kid").detached()]))
        .model(model.clone())
        .build()
        .await
        .expect("the tree builds");
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let first = crate::races_mt::bounded("the boss's first run", boss.outcome()).await;
    assert!(first.is_completed(), "{first:?}");
    let second = if resume {
        Some(tree.resume(a(1), "again").await.expect("resumes"))
    } else {
        None
    };
    let mut kid = tree.handle(a(2)).expect("the kid");
    let kid_outcome = match tokio::time::timeout(Duration::from_secs(5), kid.outcome()).await {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "the kid's question was never answered nor refused (resume {resume}, delay \
             {delay:?}):\n{}",
            tree.snapshot().render_text()
        ),
    };
    assert!(kid_outcome.is_completed(), "{kid_outcome:?}");
    if let Some(mut second) = second {
        crate::races_mt::bounded("the boss's second run", second.outcome()).await;
    }
    let answer = model.calls_of(a(2))[1].results[0].clone();
    tree.shutdown().await;
    answer
}

/// Guard (passes): a detached child's question racing the end of its owner's run, and the
/// owner's resume, on worker threads: it reaches a run that answers it, or is refused at
/// once; it never waits forever.
#[test]
fn review20_guard_detached_question_around_owner_runs_mt() {
    let mut trial = 0u64;
    crate::support::races::on_worker_threads(160, Duration::from_secs(20), || {
        trial += 1;
        let delay = Duration::from_micros((trial % 16) * 500);
        let resume = trial.is_multiple_of(2);
        async move {
            let answer = detached_question_around_owner_runs(delay, resume).await;
            assert!(
                answer.is_error || answer.content.contains("blue"),
                "trial {trial}: {answer:?}"
            );
        }
    });
}

/// Guard (passes): the registry folds events with `apply_owned` (and writes `started` without
/// its agent type) while nobody listens. A subscriber that comes mid-run, folding what it
/// receives onto a snapshot taken at the same instant, ends with the tree's records and
/// tally, through a restart, a resume and a shutdown; every `started` event it gets names
/// its agent's type; one that came earlier and left mid-run got a dense run of events up
/// to the instant it left.
#[tokio::test(start_paused = true)]
async fn review20_guard_late_and_leaving_subscribers_fold_to_the_records() {
    use agent_tree::protocol::{EventKind, Strategy, apply};
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([
                    Call::spawn_background("flaky", "a"),
                    Call::spawn_background("worker", "b"),
                ])
                .usage(Usage::tokens(5, 1)),
                Turn::answer("first").after(ms(30)),
                Turn::answer("lead resumed").usage(Usage::tokens(3, 1)),
            ]),
        )
        .script(
            "flaky",
            Script::new([
                Turn::fail("boom").after(ms(5)),
                Turn::answer("flaky ok")
                    .after(ms(10))
                    .usage(Usage::tokens(2, 2)),
            ]),
        )
        .script(
            "worker",
            Script::new([Turn::answer("worker ok")
                .after(ms(20))
                .usage(Usage::tokens(1, 1))]),
        );
    let tree = Tree::builder()
        .catalog(catalog([
            delegator_of_all("lead").with_supervision(Strategy::OneForOne, 3, 5_000),
            leaf("flaky").with_restart(RestartPolicy::Transient),
            leaf("worker"),
        ]))
        .model(model)
        .build()
        .await
        .expect("the tree builds");
    // Nobody listens for the first events.
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    tokio::time::sleep(ms(2)).await;
    let mut early = tree.subscribe();
    tokio::time::sleep(ms(6)).await;
    // The same instant (no await between): what the early one leaves with.
    let at_leaving = tree.snapshot();
    let left_with = early.drain();
    drop(early);
    tokio::time::sleep(ms(5)).await;
    // The same instant: a late subscriber and the records it starts from.
    let start = tree.snapshot();
    let mut late = tree.subscribe();
    let outcome = crate::support::harness::outcome_of(&tree, lead.id()).await;
    assert!(outcome.is_completed(), "{outcome:?}");
    let mut resumed = tree.resume(lead.id(), "again").await.unwrap();
    resumed.outcome().await;
    tree.shutdown().await;
    let end = tree.snapshot();
    let events = late.drain();

    let mut records = start.records.clone();
    let mut tally = start.tally.clone();
    for event in &events {
        apply(&mut records, event).unwrap_or_else(|e| panic!("{e}: {event:?}"));
        tally.count(&event.kind);
        if let EventKind::Started { agent_type, .. } = &event.kind {
            if !event.agent.is_root() {
                assert!(!agent_type.is_empty(), "{event:?}");
            }
        }
    }
    assert_eq!(records, end.records);
    assert_eq!(tally, end.tally);
    assert_eq!(
        events.first().map(|e| e.seq),
        Some(start.tally.total() + 1),
        "the late subscriber starts at the next event"
    );

    // The early subscriber got a dense run of events from when it subscribed up to the
    // instant it left.
    assert!(!left_with.is_empty());
    let first_seq = left_with[0].seq;
    assert!(
        first_seq > 1,
        "events before the early subscriber are not sent to it"
    );
    assert_eq!(
        left_with.last().map(|e| e.seq),
        Some(at_leaving.tally.total()),
        "the early subscriber got every event up to when it left"
    );
    for pair in left_with.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1, "dense");
    }
}

/// Defect (the same cause, the application's ordinary path): `Tree::shutdown` of a journaled
/// tree with a shutdown hook while `lead`'s calls are out and a steer waits for its next
/// turn; a new tree recovers the journal and resumes `lead`. The conversation its resumed
/// run is sent has the turn's calls without results, the steer right after them, and
/// `quick`'s real result lost: a provider refuses it, so the journaled conversation can
/// never be resumed.
///
/// docs/semantics.md, Control: "A run that ends while its turn's calls are out (aborted, shut
/// down, killed) keeps them answered: each gets the result it had, or `{"error":"not
/// answered: ..."}`, before anything else is added (steers it never read)"; Journal and
/// recovery: the journal holds "each agent's conversation ... at the end of each run".
#[tokio::test(start_paused = true)]
async fn review20_tree_shutdown_with_hooks_journals_calls_without_results() {
    let dir = crate::support::journal::TempDir::new("review20");
    let path = dir.file("journal");
    let model = RecordingModel::new(ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::calls([slow("quick", 10), slow("stuck", 3_600_000)]),
            Turn::answer("lead done after the resume"),
        ]),
    ));
    let build = |path: std::path::PathBuf, model: RecordingModel| async move {
        Tree::builder()
            .catalog(catalog([delegator_of_all("lead")]))
            .model(model)
            .tool(slow_tool())
            .expect("a free name")
            .on_shutdown(|_ctx: HookContext| async move { Ok(()) })
            .journal(JournalConfig::new(path))
            .build()
            .await
            .expect("the tree builds")
    };
    let tree = build(path.clone(), model.clone()).await;
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    tokio::time::sleep(ms(50)).await;
    let receipt = tree.steer(lead.id(), "a steer during the calls").await;
    assert!(
        matches!(receipt, Ok(SteerReceipt::Delivered)),
        "{receipt:?}"
    );
    tree.shutdown().await;
    drop((lead, tree));

    let tree = build(path, model.clone()).await;
    let mut resumed = tree.resume(a(1), "again").await.expect("resumes");
    let outcome = resumed.outcome().await;
    let calls = model.calls_of(a(1));
    tree.shutdown().await;
    assert_eq!(calls.len(), 2, "the resumed run ended {outcome:?}");
    let messages = calls[1].messages.to_vec();
    if let Some(problem) = unanswered(&messages) {
        panic!(
            "the recovered, resumed run was sent a call without its result: {problem}: {messages:#?}"
        );
    }
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::User,
            Role::User
        ],
        "{messages:#?}"
    );
    assert_eq!(messages[2].content, "slow quick", "{messages:#?}");
}
