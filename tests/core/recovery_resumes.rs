//! What recovery rebuilds for the agents it finds: a tree built on a journal admits and
//! resumes as the old tree would have, and a resumed or restarted agent gets the
//! conversation, the answer, the tool limits and the inherited context it had before the
//! crash or the shutdown. A "crash" is a copy of the journal taken while the tree runs, after
//! `flush_journal` (`crash_copy` in `support::journal`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_tree::JournalConfig;
use agent_tree::prelude::*;
use agent_tree::protocol::{Message, Role};
use agent_tree::testkit::{Call, ScriptedModel, Turn};

use crate::support::harness::{builder, contents, spawn_for_id, with_ok_tools};
use crate::support::journal::{
    Recorded, TempDir, crash, crash_copy, journaled_tree, live_and_crashed, open_journal,
    stored_tree,
};
use crate::support::races::on_worker_threads;
use crate::support::scripts::{lead_resuming_its_worker, lead_waiting_on_a_hung_worker};
use crate::support::{catalog, delegator, leaf, run_admitted, spawn_admitted, unanswered};

/// A tree of `config` on the journal at `path`, with the user tools `read` and `write`.
pub(crate) async fn build_configured(
    model: ScriptedModel,
    catalog: Catalog,
    path: &Path,
    config: TreeConfig,
) -> Tree {
    with_ok_tools(builder(model, catalog, config), &["read", "write"])
        .journal(JournalConfig::new(path))
        .build()
        .await
        .unwrap()
}

/// [`build_configured`] with the default configuration.
pub(crate) async fn build(model: ScriptedModel, catalog: Catalog, path: &Path) -> Tree {
    build_configured(model, catalog, path, TreeConfig::default()).await
}

/// A tree built on the journal of a tree that was shut down gracefully (the ordinary way a
/// process ends) admits new agents and resumes old ones (`TreeBuilder::journal`: "the
/// journal goes on from there"; interrupted top-level agents resume with `Tree::resume`):
/// the old root's `completing` does not carry over into the new tree.
#[tokio::test(start_paused = true)]
async fn a_tree_recovered_after_a_graceful_shutdown_admits_and_resumes() {
    recovered_after_a_graceful_shutdown().await;
}

/// Both scenarios on two worker threads, many times: the shutdown, the crash copy, the
/// recovery, the resumes and the journal's writer interleave differently each time.
#[test]
fn recovery_after_a_shutdown_and_of_a_completing_agent_holds_on_worker_threads() {
    on_worker_threads(10, Duration::from_secs(30), || async {
        recovered_after_a_graceful_shutdown().await;
        completing_agent_after_recovery().await;
    });
}
async fn recovered_after_a_graceful_shutdown() {
    let dir = TempDir::new("after-shutdown");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let tree = build(model, catalog([leaf("w")]), &path).await;
    assert!(
        run_admitted(&tree, SpawnRequest::new("w", "go"))
            .await
            .is_completed()
    );
    tree.shutdown().await;
    drop(tree);

    let model = ScriptedModel::new().script("w", [Turn::answer("again")]);
    let tree = build(model, catalog([leaf("w")]), &path).await;
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
    let resumed = tree.resume(AgentId::new(1), "more").await.map(|h| h.id());
    assert_eq!(resumed, Ok(AgentId::new(1)), "resume after recovery");
    let spawned = tree
        .spawn(SpawnRequest::new("w", "new"))
        .await
        .map(|h| h.id());
    assert_eq!(spawned, Ok(AgentId::new(2)), "spawn after recovery");
    tree.shutdown().await;
}

/// A completed agent resumed after a recovery sees the conversation it would have seen
/// resumed before the crash, its own final answer included (recovery rebuilds "each agent's
/// request, definition and conversation"; `Tree::resume`: "its conversation continues in a
/// new run"): a run's final conversation is journaled when the run settles.
#[tokio::test(start_paused = true)]
async fn a_completed_agent_resumed_after_recovery_keeps_its_final_answer() {
    let dir = TempDir::new("final-answer");
    let (live, crashed) = live_and_crashed(&dir);
    let model = ScriptedModel::new().script(
        "w",
        [Turn::answer("first answer"), Turn::answer("second answer")],
    );
    let tree = build(model.clone(), catalog([leaf("w")]), &live).await;
    let first = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(first.text.as_deref(), Some("first answer"));
    crash_copy(&tree, &live, &crashed).await;
    // Resumed in the tree that did not crash: the conversation holds the answer.
    let mut handle = tree.resume(AgentId::new(1), "follow up").await.unwrap();
    handle.outcome().await;
    let expected: Vec<(Role, String)> = model.log_of(AgentId::new(1))[1]
        .messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect();
    assert!(expected.contains(&(Role::Assistant, "first answer".to_owned())));
    tree.shutdown().await;
    drop(tree);

    let after = ScriptedModel::new().script("w", [Turn::answer("second answer")]);
    let tree = build(after.clone(), catalog([leaf("w")]), &crashed).await;
    let mut handle = tree.resume(AgentId::new(1), "follow up").await.unwrap();
    handle.outcome().await;
    let got: Vec<(Role, String)> = after.log_of(AgentId::new(1))[0]
        .messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect();
    assert_eq!(got, expected, "the resumed conversation after recovery");
    tree.shutdown().await;
}

/// A child resumed after recovery is as limited as it was before the crash, and as a child
/// resumed without a crash is (`TreeConfig::attenuate_tools`: "a child's user tools are
/// limited to those its owner holds", a privilege boundary): its recovered start spec keeps
/// its owner's capabilities.
#[tokio::test(start_paused = true)]
async fn a_child_resumed_after_recovery_stays_attenuated() {
    let dir = TempDir::new("attenuate");
    let (live, crashed) = live_and_crashed(&dir);
    let cat = catalog([
        delegator("lead", &["worker"]).with_tools(ToolSet::only(["read"])),
        leaf("worker").with_tools(ToolSet::only(["read", "write"])),
    ]);
    let config = TreeConfig::default().with_attenuated_tools(true);
    let before = lead_waiting_on_a_hung_worker();
    let tree = build_configured(before.clone(), cat.clone(), &live, config.clone()).await;
    let lead = spawn_for_id(&tree, "lead", "go").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let worker = AgentId::new(2);
    let user_tools = |tools: &[String]| -> Vec<String> {
        tools
            .iter()
            .filter(|t| ["read", "write"].contains(&t.as_str()))
            .cloned()
            .collect()
    };
    assert_eq!(user_tools(&before.log_of(worker)[0].tools), ["read"]);
    crash(tree, &live, &crashed).await;

    let after = lead_resuming_its_worker("done").script("worker", [Turn::answer("dug")]);
    let tree = build_configured(after.clone(), cat, &crashed, config).await;
    let mut handle = tree.resume(lead, "").await.unwrap();
    handle.outcome().await;
    let calls = after.log_of(worker);
    assert!(!calls.is_empty(), "the worker was resumed");
    assert_eq!(
        user_tools(&calls[0].tools),
        ["read"],
        "the resumed worker's tools after recovery"
    );
    tree.shutdown().await;
}

/// A child with `inherit_context` restarted after recovery still gets its owner's context
/// (a restart "re-runs the original spawn request (a fresh conversation, with the context it
/// inherited, if any)"; recovery rebuilds each agent's request for resumes and restarts).
#[tokio::test(start_paused = true)]
async fn a_restart_after_recovery_keeps_the_inherited_context() {
    let dir = TempDir::new("inherit");
    let (live, crashed) = live_and_crashed(&dir);
    let cat = catalog([
        delegator("lead", &["worker"]),
        leaf("worker")
            .with_inherit_context(true)
            .with_restart(RestartPolicy::Transient),
    ]);
    let before = lead_waiting_on_a_hung_worker();
    let tree = build(before.clone(), cat.clone(), &live).await;
    let lead = spawn_for_id(&tree, "lead", "the secret context").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let worker = AgentId::new(2);
    let has_context = |messages: &[Message]| {
        messages
            .iter()
            .any(|m| m.content.contains("the secret context"))
    };
    assert!(has_context(&before.log_of(worker)[0].messages));
    crash(tree, &live, &crashed).await;

    let after = lead_resuming_its_worker("done")
        // The resumed run fails; the restart re-runs the request and answers.
        .script("worker", [Turn::fail("flaky"), Turn::answer("dug")]);
    let tree = build(after.clone(), cat, &crashed).await;
    let mut handle = tree.resume(lead, "").await.unwrap();
    handle.outcome().await;
    assert_eq!(
        tree.record(worker).unwrap().incarnation,
        2,
        "restarted once"
    );
    let calls = after.log_of(worker);
    assert_eq!(calls.len(), 2);
    assert!(
        has_context(&calls[1].messages),
        "the restarted run's conversation: {:?}",
        calls[1].messages
    );
    tree.shutdown().await;
}

/// An agent `completing` at the crash (its answer given, its `drain` children still
/// running) keeps its answer after recovery ("An outcome already decided stays": the agent
/// settles with the outcome it held; recovery rebuilds every settled outcome): the held
/// outcome is journaled.
#[tokio::test(start_paused = true)]
async fn a_completing_agent_keeps_its_answer_after_recovery() {
    completing_agent_after_recovery().await;
}

async fn completing_agent_after_recovery() {
    let dir = TempDir::new("completing");
    let (live, crashed) = live_and_crashed(&dir);
    let cat = catalog([
        delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
        leaf("worker"),
    ]);
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn_background("worker", "dig"),
                Turn::answer("lead's answer"),
            ],
        )
        .script("worker", [Turn::hang()]);
    let tree = build(model.clone(), cat.clone(), &live).await;
    let mut events = agent_tree::testkit::EventProbe::new(&tree);
    let lead = spawn_for_id(&tree, "lead", "go").await;
    events
        .expect_event("the lead completing", |e| {
            e.agent == lead && e.kind == agent_tree::protocol::EventKind::Completing
        })
        .await;
    assert_eq!(tree.record(lead).unwrap().status, AgentStatus::Completing);
    crash(tree, &live, &crashed).await;

    let tree = build(model, cat, &crashed).await;
    let outcome = tree.outcome(lead).unwrap();
    let kept = [outcome.text.as_deref(), outcome.partial.as_deref()];
    assert!(
        kept.contains(&Some("lead's answer")),
        "the held answer after recovery: {outcome:?}"
    );
    tree.shutdown().await;
}

/// With `retain_conversations(false)`, an agent settled before a crash, in a journal
/// compacted by rotation, is resumed on the recovered tree with its whole conversation, read
/// back from the recovered file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_rotation_and_recovery_reads_the_conversation_back() {
    let dir = TempDir::new("rotated");
    let (live, crashed) = live_and_crashed(&dir);
    let model = ScriptedModel::new().script(
        "w",
        [Turn::answer("first answer"), Turn::answer("second answer")],
    );
    let config = |path: &PathBuf| {
        JournalConfig::new(path)
            .retain_conversations(false)
            .rotate_at(2_000)
    };
    let tree = journaled_tree(model.clone(), catalog([leaf("w")]), config(&live)).await;
    for i in 0..6 {
        run_admitted(&tree, SpawnRequest::new("w", format!("go {i}"))).await;
    }
    tree.flush_journal().await;
    std::fs::copy(&live, &crashed).unwrap();
    drop(tree);

    let model = ScriptedModel::new().script("w", [Turn::answer("again")]);
    let log = model.call_log();
    let tree = journaled_tree(model, catalog([leaf("w")]), config(&crashed)).await;
    let mut resumed = tree.resume(AgentId::new(2), "follow up").await.unwrap();
    assert_eq!(resumed.outcome().await.text.as_deref(), Some("again"));
    let call = &log.of(AgentId::new(2))[0];
    let texts = contents(&call.messages);
    assert_eq!(texts, ["go 1", "first answer", "follow up"]);
    tree.shutdown().await;
}

/// A run aborted while its call is out keeps the call closed in its journaled conversation:
/// after a crash and recovery, a resume with an empty prompt sends the model a conversation
/// with a result for every call, the aborted turn's call included.
#[tokio::test(start_paused = true)]
async fn an_aborted_runs_open_call_is_closed_across_recovery() {
    let dir = TempDir::new("closed-call");
    let (live, crashed) = live_and_crashed(&dir);
    let model = ScriptedModel::new().script(
        "w",
        [Turn::calls([Call::tool(
            "slow",
            serde_json::json!({"x": 1}),
        )])],
    );
    let log = model.call_log();
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .tool(FnTool::new("slow", "never returns", |_, _| async {
            std::future::pending::<()>().await;
            Ok("never".to_owned())
        }))
        .unwrap()
        .journal(JournalConfig::new(&live))
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let id = handle.id();
    log.until_calls(id, 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    tree.abort(id).unwrap();
    assert_eq!(handle.outcome().await.status, AgentStatus::Aborted);
    crash(tree, &live, &crashed).await;

    let after = ScriptedModel::new().script("w", [Turn::answer("resumed")]);
    let after_log = after.call_log();
    let tree = open_journal(after, catalog([leaf("w")]), &crashed)
        .await
        .unwrap();
    let mut handle = tree.resume(id, "").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("resumed"));
    let calls = after_log.of(id);
    assert_eq!(
        unanswered(&calls[0].messages),
        None,
        "{:?}",
        calls[0].messages
    );
    assert!(
        calls[0].messages.iter().any(|m| !m.tool_calls.is_empty()),
        "the aborted turn's call is in the conversation: {:?}",
        calls[0].messages
    );
    tree.shutdown().await;
}

/// A resume's prompt survives a crash that lands after its `resumed` event was written and
/// before its first turn's conversation line ("A process kill loses only what was queued and
/// not yet written"; recovery rebuilds "each agent's request ... and conversation"; "A
/// resume with an empty prompt ... continues as journaled, so the turn the crash cut off is
/// re-run"): the re-run turn holds the task the agent was resumed with, as a spawn's line
/// holds its prompt before its admission event.
#[tokio::test(start_paused = true)]
async fn a_resumes_prompt_survives_a_crash_before_its_first_turn() {
    let dir = TempDir::new("resume-prompt");
    let crashed = dir.file("crashed.journal");
    let store = Recorded::default();
    let model = ScriptedModel::new().script(
        "w",
        [Turn::answer("first answer"), Turn::answer("second answer")],
    );
    let journal = JournalConfig::new(&crashed);
    let tree = stored_tree(model, catalog([leaf("w")]), journal, store.clone()).await;
    let mut handle = spawn_admitted(&tree, SpawnRequest::new("w", "task one")).await;
    let id = handle.id();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("first answer"));
    let mut handle = tree.resume(id, "task two").await.unwrap();
    assert_eq!(
        handle.outcome().await.text.as_deref(),
        Some("second answer")
    );
    tree.shutdown().await;
    drop(tree);

    // The crash: right after the resume's `resumed` event, before its run's first turn
    // boundary wrote anything.
    let bytes = store.bytes();
    let text = String::from_utf8(bytes).unwrap();
    let mut kept = String::new();
    for line in text.split_inclusive('\n') {
        kept.push_str(line);
        if line.contains("\"resumed\"") {
            break;
        }
    }
    assert!(
        kept.contains("\"resumed\""),
        "the resume's event was written: {kept}"
    );
    std::fs::write(&crashed, kept).unwrap();

    let after = ScriptedModel::new().script("w", [Turn::answer("third answer")]);
    let log = after.call_log();
    let tree = open_journal(after, catalog([leaf("w")]), &crashed)
        .await
        .unwrap();
    assert_eq!(tree.interrupted(), [id], "the resumed run was interrupted");
    let mut handle = tree.resume(id, "").await.unwrap();
    handle.outcome().await;
    let calls = log.of(id);
    let messages = &calls[0].messages;
    assert!(
        messages.iter().any(|m| m.content == "task two"),
        "the re-run turn lost the task it was resumed with: {messages:?}"
    );
    tree.shutdown().await;
}
