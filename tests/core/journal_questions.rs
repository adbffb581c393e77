//! Questions survive a crash: an agent waiting on its owner's answer comes back waiting (a
//! top-level one has its question put to the application's handler again), the turn that
//! asked it is not re-run, and an answer given before the crash is delivered once, without
//! asking again. A "crash" here is a copy of the journal file taken while the tree runs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role};
use agent_tree::testkit::{Call, EventProbe, ScriptedModel, Turn};
use agent_tree::{FnTool, JournalConfig, Question};
use parking_lot::Mutex;

use crate::support::harness::spawn_for_id;
use crate::support::journal::{TempDir, crash, live_and_crashed};
use crate::support::races::on_worker_threads;
use crate::support::{catalog, delegator, leaf, resume_call};

/// The questions a handler was asked, in order, and a wake-up for each.
#[derive(Default)]
struct AskLog {
    questions: Mutex<Vec<String>>,
    heard: tokio::sync::Notify,
}

impl AskLog {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<String>> {
        self.questions.lock()
    }

    /// Waits until the handler has been asked (a question it was asked before this call
    /// counts: `Notify` keeps one permit).
    async fn heard(&self) {
        self.heard.notified().await;
    }
}

type Asked = Arc<AskLog>;

/// A tree on `path` whose question handler records each question and answers it with
/// `answer`, or never answers (`None`: the human is away).
async fn build(model: ScriptedModel, path: &Path, answer: Option<&'static str>) -> (Tree, Asked) {
    let asked = Asked::default();
    let seen = asked.clone();
    let tree = Tree::builder()
        .catalog(catalog([leaf("writer"), delegator("lead", &["writer"])]))
        .model(model)
        .tool(FnTool::new("lint", "lints", |_, _| {
            std::future::pending::<Result<String, agent_tree::ToolError>>()
        }))
        .expect("a free name")
        .on_question(move |q: Question| {
            seen.lock().push(q.question);
            seen.heard.notify_one();
            async move {
                match answer {
                    Some(answer) => Ok(answer.to_owned()),
                    None => std::future::pending().await,
                }
            }
        })
        .journal(JournalConfig::new(path))
        .build()
        .await
        .unwrap();
    (tree, asked)
}

/// Waits until `agent` has asked (its question is journaled before the event).
async fn asked(events: &mut EventProbe, agent: AgentId) {
    events
        .expect_event("the question", |e| {
            e.agent == agent && matches!(e.kind, EventKind::Asked { .. })
        })
        .await;
}

/// The tool results of `messages`, as (text, is_error).
fn results(messages: &[agent_tree::protocol::Message]) -> Vec<(String, bool)> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.content.clone(), m.is_error))
        .collect()
}

/// A top-level agent waiting on the application's answer at the crash comes back waiting,
/// not interrupted: its question is put to the handler again, the model is not called until
/// the answer comes, and the next turn reads the asking turn once and the answer once. A
/// second crash while it waits again keeps the question again.
#[tokio::test(start_paused = true)]
async fn a_question_waiting_on_the_application_is_put_again_after_a_crash() {
    question_put_again().await;
}

/// The same crashes and recoveries on two worker threads, many times: the handler's task,
/// the agent's start and the journal's writer interleave differently each time.
#[test]
fn a_question_is_put_again_after_a_crash_on_worker_threads() {
    on_worker_threads(10, Duration::from_secs(30), question_put_again);
}

async fn question_put_again() {
    let dir = TempDir::new("question");
    let live = dir.file("live.journal");
    let (first, second) = (dir.file("first.journal"), dir.file("second.journal"));
    let model = ScriptedModel::new().script(
        "writer",
        [Turn::calls([Call::ask_owner("tabs or spaces?")])],
    );
    let (tree, _) = build(model, &live, None).await;
    let mut events = EventProbe::new(&tree);
    let writer = spawn_for_id(&tree, "writer", "the task").await;
    asked(&mut events, writer).await;
    crash(tree, &live, &first).await;

    // Recovered with the human still away: it waits again, and a second crash keeps it.
    let model = ScriptedModel::new();
    let (tree, asked_again) = build(model.clone(), &first, None).await;
    // The build puts the question again: it may be asked before any probe could subscribe,
    // so the handler says when.
    asked_again.heard().await;
    assert_eq!(*asked_again.lock(), ["tabs or spaces?"]);
    assert!(
        tree.interrupted().is_empty(),
        "it waits, it is not interrupted"
    );
    assert_eq!(
        tree.record(writer).map(|r| r.status),
        Some(AgentStatus::Running)
    );
    assert_eq!(model.calls(), 0, "the asking turn is not re-run");
    crash(tree, &first, &second).await;

    let model = ScriptedModel::new().script("writer", [Turn::answer("tabs it is")]);
    let log = model.call_log();
    let (tree, asked_again) = build(model, &second, Some("tabs")).await;
    let mut handle = tree.handle(writer).unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("tabs it is"));
    assert_eq!(*asked_again.lock(), ["tabs or spaces?"]);
    let calls = log.of(writer);
    assert_eq!(calls.len(), 1, "one turn, after the answer");
    let messages = &calls[0].messages;
    assert_eq!(crate::support::user_texts(messages), ["the task"]);
    let asking: Vec<_> = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .collect();
    assert_eq!(asking.len(), 1, "the asking turn, once");
    assert_eq!(asking[0].tool_calls[0].name, "ask_owner");
    assert_eq!(results(messages), [("tabs".to_owned(), false)]);
    tree.shutdown().await;
}

/// An answer given before the crash, while another call of the asking turn still ran, is
/// delivered once after it: the handler is not asked again, and the other call's result
/// says the process restarted before it returned.
#[tokio::test(start_paused = true)]
async fn an_answer_given_before_a_crash_is_delivered_once_without_asking_again() {
    let dir = TempDir::new("answer");
    let (live, crashed) = live_and_crashed(&dir);
    let model = ScriptedModel::new().script(
        "writer",
        [Turn::calls([
            Call::ask_owner("tabs or spaces?"),
            Call::tool("lint", serde_json::json!({})),
        ])],
    );
    let (tree, asked_first) = build(model, &live, Some("tabs")).await;
    let mut events = EventProbe::new(&tree);
    let writer = spawn_for_id(&tree, "writer", "the task").await;
    asked(&mut events, writer).await;
    // The handler answers at once; the lint call never returns. Time stands still until
    // every task is idle: the answer has reached the agent, and the journal, by then.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*asked_first.lock(), ["tabs or spaces?"]);
    crash(tree, &live, &crashed).await;

    let model = ScriptedModel::new().script("writer", [Turn::answer("linted")]);
    let log = model.call_log();
    let (tree, asked_again) = build(model, &crashed, Some("spaces")).await;
    let mut handle = tree.handle(writer).unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("linted"));
    assert!(
        asked_again.lock().is_empty(),
        "answered once, never asked again"
    );
    let calls = log.of(writer);
    assert_eq!(calls.len(), 1);
    let results = results(&calls[0].messages);
    assert_eq!(results[0], ("tabs".to_owned(), false));
    assert!(results[1].1, "the cut-off call is an error: {results:?}");
    assert!(results[1].0.contains("restarted"), "{results:?}");
    tree.shutdown().await;
}

/// A question to an owner agent: after a crash both are interrupted (the owner's run is
/// gone, so no one could answer); the asker keeps its question, and its owner resuming it
/// with a prompt answers it: the asking turn is not re-run, the prompt is its answer.
#[tokio::test(start_paused = true)]
async fn an_owner_resuming_a_recovered_asker_with_a_prompt_answers_its_question() {
    let dir = TempDir::new("owner-question");
    let (live, crashed) = live_and_crashed(&dir);
    let model = ScriptedModel::new()
        .script("lead", [Turn::spawn("writer", "the task"), Turn::hang()])
        .script(
            "writer",
            [Turn::calls([Call::ask_owner("tabs or spaces?")])],
        );
    let (tree, _) = build(model, &live, None).await;
    let mut events = EventProbe::new(&tree);
    let lead = spawn_for_id(&tree, "lead", "lead").await;
    let writer = events
        .expect_event("the writer's question", |e| {
            matches!(e.kind, EventKind::Asked { .. }) && e.agent != lead
        })
        .await
        .agent;
    crash(tree, &live, &crashed).await;

    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([resume_call(&writer.to_string(), "tabs")]),
                Turn::answer("led"),
            ],
        )
        .script("writer", [Turn::answer("tabs it is")]);
    let log = model.call_log();
    let (tree, _) = build(model, &crashed, None).await;
    assert_eq!(tree.interrupted(), [lead, writer]);
    let mut handle = tree.resume(lead, "resume the writer").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("led"));
    let calls = log.of(writer);
    assert_eq!(calls.len(), 1, "the asking turn is not re-run");
    assert_eq!(crate::support::user_texts(&calls[0].messages), ["the task"]);
    assert_eq!(
        results(&calls[0].messages),
        [("tabs".to_owned(), false)],
        "the prompt answers the question"
    );
    tree.shutdown().await;
}
