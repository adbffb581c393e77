//! Conversations kept only in the journal (the default, `retain_conversations(false)`) and
//! read back on each resume: across runs, compactions and recoveries, for an owner
//! resuming its child, after a supervisor's restart, and after a resumed run was killed
//! before its first turn (docs/semantics.md, "Journal and recovery").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Role, ToolCall};
use agent_tree::testkit::{FnModel, Script, ScriptedModel, Turn};
use agent_tree::{HookContext, HookError, JournalConfig, ModelRequest, ModelResponse};
use parking_lot::Mutex;

use crate::journal_steps::{bounded, run_go, step_answer, steps_tree};
use crate::support::harness::{contents, lead_and_worker};
use crate::support::journal::{TempDir, journaled_tree};
use crate::support::{catalog, delegator, leaf, resume_call};

/// Rule: "a conversation that cannot be read back makes the resume fail, never run on an
/// empty conversation"; a settled agent's conversation is kept in the journal and read back
/// when it is resumed. Whatever happens to a resumed run — here it is killed during its start
/// hook, before its first turn boundary — the agent's earlier runs stay part of its
/// conversation, and the next resume runs on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_killed_before_its_first_turn_keeps_the_earlier_conversation() {
    killed_before_its_first_turn(JournalConfig::new).await;
}

/// The same with conversations kept in memory (`retain_conversations(true)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_killed_before_its_first_turn_with_conversations_retained() {
    killed_before_its_first_turn(|path| JournalConfig::new(path).retain_conversations(true)).await;
}

/// The kill, the resumes and the journal's writer in other orders: twenty more runs.
#[test]
fn a_resumed_run_killed_before_its_first_turn_many_times_on_worker_threads() {
    crate::support::races::on_worker_threads(20, Duration::from_secs(30), || {
        killed_before_its_first_turn(JournalConfig::new)
    });
}

async fn killed_before_its_first_turn(config: fn(std::path::PathBuf) -> JournalConfig) {
    let dir = TempDir::new("journal-kill-resumed");
    let starts: Arc<Mutex<HashMap<AgentId, usize>>> = Arc::default();
    let hooked = Arc::new(tokio::sync::Notify::new());
    let (hook_starts, hook_hooked) = (starts.clone(), hooked.clone());
    let tree = steps_tree(0)
        .on_start(move |ctx: HookContext| {
            let n = {
                let mut starts = hook_starts.lock();
                let n = starts.entry(ctx.agent).or_default();
                *n += 1;
                *n
            };
            let hooked = hook_hooked.clone();
            async move {
                if n == 2 {
                    // The second run's start hook never finishes: the run is killed in it.
                    hooked.notify_one();
                    std::future::pending::<()>().await;
                }
                Ok::<(), HookError>(())
            }
        })
        .journal(config(dir.file("j")))
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    let first = bounded("run 1", handle.outcome()).await;
    assert_eq!(first.text, Some(step_answer(id.get(), 1, 0)));
    // Run 2: killed in its start hook, before its first turn boundary.
    let mut second = bounded("resume 2", tree.resume(id, "again")).await.unwrap();
    bounded("the hook", hooked.notified()).await;
    tree.kill(id).unwrap();
    let killed = bounded("run 2", second.outcome()).await;
    assert_eq!(killed.status, AgentStatus::Killed, "{killed:?}");
    // Run 3: continues run 1's conversation (or is refused), never an empty one.
    match bounded("resume 3", tree.resume(id, "third")).await {
        Ok(mut third) => {
            let outcome = bounded("run 3", third.outcome()).await;
            let text = outcome.text.unwrap_or_default();
            assert!(
                text.starts_with(&format!("{id}-run2-")),
                "run 3 ran on a conversation without run 1 in it: it answered {text:?} \
                 (run1 = it saw no earlier answer)"
            );
        }
        Err(error) => {
            // A refusal is acceptable: nothing ran on an empty conversation.
            eprintln!("resume 3 refused: {error}");
        }
    }
    bounded("shutdown", tree.shutdown()).await;
}

/// Rule: a settled agent's conversation, kept only in the journal, reads back whole on each
/// resume: across several runs (each written as a whole line then each turn's addition),
/// compactions between and within runs, and two recoveries (the replay's index of lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_read_back_across_runs_compactions_and_two_recoveries() {
    let dir = TempDir::new("journal-conversations");
    let path = dir.file("j");
    let pad = 600;
    let build = || async {
        steps_tree(pad)
            .journal(
                JournalConfig::new(&path)
                    .rotate_at(8 * 1024)
                    .keep_read_outputs(1024),
            )
            .build()
            .await
            .unwrap()
    };
    let mut runs: HashMap<u64, usize> = HashMap::new();
    let tree = build().await;
    for _ in 0..4 {
        let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
        let id = handle.id().get();
        let outcome = bounded("run 1", handle.outcome()).await;
        assert_eq!(outcome.text, Some(step_answer(id, 1, pad)));
        runs.insert(id, 1);
    }
    resume_all(&tree, &mut runs, pad, "in process 1").await;
    bounded("flush", tree.flush_journal()).await;
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
    // Process 2: recovered; resume every agent twice (concurrently), then recover again.
    let tree = build().await;
    for _ in 0..2 {
        resume_all(&tree, &mut runs, pad, "after recovery 1").await;
    }
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    let tree = build().await;
    resume_all(&tree, &mut runs, pad, "after recovery 2").await;
    bounded("shutdown", tree.shutdown()).await;
}

/// Resumes every agent of `runs` at once, each checking its new run's answer.
async fn resume_all(tree: &Tree, runs: &mut HashMap<u64, usize>, pad: usize, when: &str) {
    let mut ids: Vec<u64> = runs.keys().copied().collect();
    ids.sort_unstable();
    let mut futures = Vec::new();
    for id in ids {
        let run = runs[&id] + 1;
        runs.insert(id, run);
        futures.push(async move {
            let mut handle = bounded("resume", tree.resume(AgentId::new(id), "more"))
                .await
                .unwrap_or_else(|e| panic!("a{id} resume {when}: {e}"));
            let outcome = bounded("resumed run", handle.outcome()).await;
            assert_eq!(
                outcome.text,
                Some(step_answer(id, run, pad)),
                "a{id} run {run} {when}"
            );
        });
    }
    futures_join(futures).await;
}

async fn futures_join<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    // Poll all at once (no extra crates): a simple select-all loop.
    let mut pending: Vec<_> = set.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut left = false;
        for slot in &mut pending {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(()) => *slot = None,
                    std::task::Poll::Pending => left = true,
                }
            }
        }
        if left {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
}

/// Rule: an owner resumes its settled child (the `Agent` tool's `resume`) on the child's
/// journaled conversation, also after a recovery (the replay's index) and after a
/// compaction rewrote the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_resumes_a_journal_only_child_after_compaction_and_recovery() {
    let dir = TempDir::new("journal-owner-resume");
    let path = dir.file("j");
    let big = "x".repeat(3000);
    let lead_script = |first: bool| {
        let mut turns = Vec::new();
        if first {
            turns.push(Turn::spawn("worker", "dig"));
        } else {
            turns.push(Turn::calls([resume_call("a2", "dig more")]));
        }
        turns.push(Turn::answer("lead done"));
        Script::new(turns)
    };
    let model1 = ScriptedModel::new()
        .script("lead", lead_script(true))
        .script("worker", [Turn::answer(format!("w1 {big}"))]);
    let config = || JournalConfig::new(&path).rotate_at(4 * 1024);
    let journal = config();
    let tree = journaled_tree(model1, lead_and_worker(), journal).await;
    let lead = run_go(&tree, "lead").await;
    assert_eq!(lead.text.as_deref(), Some("lead done"));
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // Process 2: the lead resumes (its conversation is journal-only too) and resumes a2.
    let model2 = ScriptedModel::new()
        .script("lead", lead_script(false))
        .script("worker", [Turn::answer("w2")]);
    let log = model2.call_log();
    let journal = config();
    let tree = journaled_tree(model2, lead_and_worker(), journal).await;
    let mut handle = bounded("resume lead", tree.resume(AgentId::new(1), "again"))
        .await
        .unwrap();
    let outcome = bounded("lead run 2", handle.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    let worker = log.of(AgentId::new(2));
    assert_eq!(worker.len(), 1, "the worker ran once in process 2");
    let contents = contents(&worker[0].messages);
    assert_eq!(
        contents,
        ["dig", &format!("w1 {big}"), "dig more"],
        "the worker resumed on its journaled conversation"
    );
    let lead_calls = log.of(AgentId::new(1));
    assert!(
        lead_calls[0].messages.iter().any(|m| m.content == "go"),
        "the lead resumed on its journaled conversation: {:?}",
        lead_calls[0].messages
    );
    bounded("shutdown", tree.shutdown()).await;
}

/// Rule: a child restarted by its supervisor (transient, run 1 failed) and then settled is
/// resumed by its owner on its last run's conversation (run 2's), read back from the
/// journal: not run 1's, not a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_then_settled_child_resumes_on_its_last_runs_conversation() {
    let dir = TempDir::new("journal-restarted");
    // The worker fails its first run (a model error), is restarted, answers, and is
    // resumed by the lead.
    let model = FnModel::new(|request: ModelRequest| async move {
        if request.agent_type() == "lead" {
            let tools = request
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .count();
            let response = match tools {
                0 => ModelResponse::calls(vec![ToolCall::new(
                    "s1",
                    "Agent",
                    serde_json::json!({"agent_type": "worker", "prompt": "dig"}),
                )]),
                1 => ModelResponse::calls(vec![ToolCall::new(
                    "s2",
                    "Agent",
                    serde_json::json!({"resume": "a2", "prompt": "more"}),
                )]),
                _ => ModelResponse::text("lead done"),
            };
            return Ok(response);
        }
        match request.run {
            1 => Err(ModelError::new("boom")),
            2 => Ok(ModelResponse::text("second run answer")),
            _ => Ok(ModelResponse::text("resumed answer")),
        }
    });
    let journal = JournalConfig::new(dir.file("j"));
    let tree = journaled_tree(
        model.clone(),
        catalog([
            delegator("lead", &["worker"]),
            leaf("worker").with_restart(RestartPolicy::Transient),
        ]),
        journal,
    )
    .await;
    let outcome = run_go(&tree, "lead").await;
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    let seen = model.of(AgentId::new(2));
    assert_eq!(seen.len(), 3, "{seen:?}");
    let contents = contents(&seen[2].messages);
    assert_eq!(contents, ["dig", "second run answer", "more"]);
    bounded("shutdown", tree.shutdown()).await;
}
