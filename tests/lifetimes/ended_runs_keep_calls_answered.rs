//! A run that ends while its turn's calls are out (aborted, shut down, killed) keeps them
//! answered: each gets the result it had, or `not answered`, before anything else is added
//! (steers it never read), so every conversation a model is sent, a resume's and a journaled
//! tree's after recovery too, has a result right after each call, with or without shutdown
//! hooks.
//!
//! Paused tests fix one message order of a current-thread runtime; `_mt` tests loop the
//! races on two worker threads.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Message, Role};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
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
        [
            Turn::calls([slow("quick", 10), slow("stuck", 3_600_000)]),
            Turn::answer("lead done after the resume"),
        ],
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

/// A run a subtree shutdown ends while its calls are out, in a tree with shutdown hooks,
/// keeps every call answered: each gets the result it had (`quick`'s) or `not answered`
/// before anything else is added, so the conversation its resume sends has a result right
/// after each call, as providers require.
// regression: running the shutdown hooks once dropped the turn's call table, so no call was
// answered.
#[tokio::test(start_paused = true)]
async fn a_subtree_shutdown_with_hooks_keeps_every_call_answered() {
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

/// Checks that `messages` have `roles`, in order (naming the conversation if not).
fn assert_roles(messages: &[Message], roles: &[Role]) {
    let got: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(got, roles, "{messages:#?}");
}

/// The same without shutdown hooks: the resumed run is sent the task, the turn's calls,
/// `quick`'s result, `stuck` answered `not answered`, then the new prompt.
#[tokio::test(start_paused = true)]
async fn a_subtree_shutdown_without_hooks_keeps_every_call_answered() {
    let messages = shut_down_then_resumed(false).await;
    assert_eq!(unanswered(&messages), None, "{messages:#?}");
    assert_roles(
        &messages,
        &[
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::User,
        ],
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
                [Turn::calls([
                    slow("quick", 0),
                    Call::spawn("asker", "ask me"),
                    slow("stuck", 3_600_000),
                ])],
            )
            .script(
                "asker",
                [
                    Turn::calls([crate::support::ask("which?")]),
                    Turn::answer("ok"),
                ],
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

/// Every way an abort, a steer then an abort, a shutdown without hooks or a kill ends a run
/// while its calls are out (one answered, one a question's wait, one stuck), on worker
/// threads: the resumed run is sent every call with exactly one result, and the result
/// `quick` had is kept (not for a kill, which keeps the last turn boundary).
#[test]
fn every_end_with_calls_out_keeps_them_answered_mt() {
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

/// The application's ordinary path: `Tree::shutdown` of a journaled tree with a shutdown hook
/// while `lead`'s calls are out and a steer waits for its next turn; a new tree recovers the
/// journal and resumes `lead`. The conversation its resumed run is sent has each call's
/// result (`quick`'s real one kept) before the unread steer, so the journaled conversation
/// can be resumed against any provider.
// regression: the hooks once dropped the call table, and the journal kept the calls without
// results.
#[tokio::test(start_paused = true)]
async fn a_journaled_tree_shutdown_with_hooks_keeps_every_call_answered() {
    let dir = crate::support::journal::TempDir::new("journaled_calls_answered");
    let path = dir.file("journal");
    let model = RecordingModel::new(ScriptedModel::new().script(
        "lead",
        [
            Turn::calls([slow("quick", 10), slow("stuck", 3_600_000)]),
            Turn::answer("lead done after the resume"),
        ],
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
    assert_roles(
        &messages,
        &[
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::User,
            Role::User,
        ],
    );
    assert_eq!(messages[2].content, "slow quick", "{messages:#?}");
}
