//! Resuming a remote child: the conversation its node sent up (turn by turn, and before its
//! run's terminal event) is continued on its node, as a local agent's is: with an empty
//! prompt or a new one, twice, after an abort, a restart, a recovery, its node killed and
//! back, by its owner agent's `Agent` tool, over the frame limit (in parts); with no
//! conversation come up, an empty resume is refused with the reason, and a resume that never
//! reached the node keeps the conversation.

use super::lead_and_runner_tree;
use super::support::flaky_restarted_once;
use super::support::lead_settles;
use super::support::{runner_answered, spawn_runner, within};
use std::time::Duration;

use agent_tree::protocol::{AgentId, AgentStatus};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree, TreeConfig};

use super::support::shut_down_and_finish;
use super::support::{Dir, maybe_journaled_tree, messages_sent, owner_tree, resumed_outcome};
use super::worker;
use super::{Owner, eventually, first_usage, root_tokens, runner, worker_idle};

/// A remote child that completed in a journaled tree (the conversation its node sent up
/// journaled at its settle, dropped from memory) is resumed with a new task, as a local one
/// is: the task is the next message of its conversation (the worker's model reads the first
/// task and shows the later ones as steers).
pub(crate) async fn a_settled_remote_child_of_a_journaled_tree_resumes(owner: &mut Owner) {
    let dir = Dir::new("settled-resume");
    let (name, mut process) = owner.worker().await;
    let tree = owner_tree(&owner.node, &name, &dir.file("tree.journal")).await;
    let id = runner_answered(&tree, "work 1 10", "done 1").await;
    let mut resumed = tree
        .resume(id, "work 2 10")
        .await
        .expect("a settled remote child resumes");
    let outcome = within(20, "the resumed remote child settles", resumed.outcome()).await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 1 | steered: work 2 10"),
        "{outcome:?}"
    );
    assert_eq!(root_tokens(&tree), 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 24, 0));
    shut_down_and_finish(&tree, process).await;
}

/// A settled remote child resumed with an empty prompt continues its conversation on its
/// node, as a local one does: its node sent the conversation up before the terminal event,
/// the stand-in's settle kept it, and the resume sends it down again. With a journal the
/// settle wrote it there (and memory dropped it), so this also reads it back. A resume with a
/// prompt continues it too, the prompt the next message.
pub(crate) async fn a_settled_remote_child_resumed_with_an_empty_prompt_continues(
    owner: &mut Owner,
) {
    for journaled in [false, true] {
        let dir = Dir::new("empty-resume-continues");
        let (name, mut process) = owner.worker().await;
        let tree = if journaled {
            owner_tree(&owner.node, &name, &dir.file("tree.journal")).await
        } else {
            Tree::builder()
                .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
                .model(ScriptedModel::new())
                .node(&owner.node)
                .build()
                .await
                .unwrap()
        };
        let id = runner_answered(&tree, "count", "messages 1").await;
        // [count, messages 1]: continued as it was.
        let mut resumed = tree.resume(id, "").await.expect("an empty resume starts");
        let outcome = within(20, "the resumed remote child settles", resumed.outcome()).await;
        assert_eq!(
            outcome.text.as_deref(),
            Some("messages 2"),
            "journaled {journaled}: {outcome:?}"
        );
        // [count, messages 1, messages 2, again].
        let mut again = tree
            .resume(id, "again")
            .await
            .expect("a resume with a prompt starts");
        let outcome = within(20, "the second resume settles", again.outcome()).await;
        assert_eq!(
            outcome.text.as_deref(),
            Some("messages 4"),
            "journaled {journaled}: {outcome:?}"
        );
        tree.shutdown().await;
        assert!(worker_idle(&mut process).0 == 0, "journaled {journaled}");
        process.finish();
    }
}

/// An empty resume of a resumed remote run continues again, with and without a journal:
/// `count` answers 1, 2, 3 messages; each run bills 12 tokens, counted once at the root
/// and once on the worker.
pub(crate) async fn an_empty_resume_of_a_resumed_remote_run_continues_again(owner: &mut Owner) {
    for journaled in [false, true] {
        let dir = Dir::new("twice");
        let (name, mut process) = owner.worker().await;
        let path = dir.file("tree.journal");
        let tree =
            maybe_journaled_tree(&owner.node, &name, journaled.then_some(path.as_path())).await;
        let id = runner_answered(&tree, "count", "messages 1").await;
        for expected in ["messages 2", "messages 3"] {
            let outcome = resumed_outcome(&tree, id, "").await;
            assert_eq!(
                outcome.text.as_deref(),
                Some(expected),
                "journaled {journaled}: {outcome:?}"
            );
        }
        assert_eq!(root_tokens(&tree), 36, "journaled {journaled}");
        let (live, tokens, edges) = worker_idle(&mut process);
        assert_eq!((live, tokens, edges), (0, 36, 0), "journaled {journaled}");
        shut_down_and_finish(&tree, process).await;
    }
}

/// An aborted remote child's conversation comes up too (the abort is a terminal event of a
/// top agent): an empty resume continues it on its node, as a local aborted agent's
/// does, rather than being refused.
pub(crate) async fn an_aborted_remote_child_resumed_with_an_empty_prompt_continues(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let tree = maybe_journaled_tree(&owner.node, &name, None).await;
    let mut handle = spawn_runner(&tree, "work 3 400").await;
    let id = handle.id();
    first_usage(&tree, id).await;
    tree.abort(id).unwrap();
    let aborted = within(10, "the aborted remote child settles", handle.outcome()).await;
    assert_eq!(aborted.status, AgentStatus::Aborted, "{aborted:?}");
    let outcome = resumed_outcome(&tree, id, "").await;
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    assert!(
        outcome
            .text
            .as_deref()
            .is_some_and(|t| t.starts_with("done 3")),
        "{outcome:?}"
    );
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(tokens, root_tokens(&tree), "usage counted once");
    shut_down_and_finish(&tree, process).await;
}

/// A transient remote child fails once, its owner restarts it (a new incarnation, a new
/// edge), it completes; the empty resume continues the restarted run's conversation (not
/// refused), and usage still matches the worker's.
pub(crate) async fn a_restarted_remote_child_resumed_with_an_empty_prompt_continues(
    owner: &mut Owner,
) {
    let (mut process, tree, id) = flaky_restarted_once(owner).await;
    let outcome = resumed_outcome(&tree, id, "").await;
    assert_eq!(outcome.text.as_deref(), Some("recovered"), "{outcome:?}");
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(tokens, root_tokens(&tree), "usage counted once");
    shut_down_and_finish(&tree, process).await;
}

/// An owner agent resumes its remote child through its `Agent` tool (`resume` with an
/// empty prompt, `docs/semantics.md`): the child continues its conversation on its node.
pub(crate) async fn an_owner_agent_resumes_its_remote_child_with_an_empty_prompt(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("runner", "count"),
            Turn::calls([Call::tool(
                "Agent",
                serde_json::json!({ "resume": "a2", "prompt": "" }),
            )]),
            Turn::answer("lead done"),
        ]),
    );
    let tree = lead_and_runner_tree(owner, &name, model, TreeConfig::default()).await;
    let lead = lead_settles(&tree, 20).await;
    assert_eq!(lead.text.as_deref(), Some("lead done"), "{lead:?}");
    let record = tree.record(AgentId::new(2)).expect("the runner's record");
    assert_eq!(record.agent_type, "runner");
    assert_eq!(
        record.outcome.as_ref().and_then(|o| o.text.as_deref()),
        Some("messages 2"),
        "{record:?}"
    );
    assert_eq!(root_tokens(&tree), 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 24, 0));
    shut_down_and_finish(&tree, process).await;
}

/// A journaled owner tree shut down after its remote child completed, then built again from
/// its journal: the empty resume continues the conversation the journal holds.
pub(crate) async fn a_recovered_tree_continues_a_completed_remote_childs_conversation(
    owner: &mut Owner,
) {
    let dir = Dir::new("recovered-count");
    let (name, process) = owner.worker().await;
    let path = dir.file("tree.journal");
    let tree = maybe_journaled_tree(&owner.node, &name, Some(&path)).await;
    let id = runner_answered(&tree, "count", "messages 1").await;
    tree.shutdown().await;
    drop(tree);
    let tree = maybe_journaled_tree(&owner.node, &name, Some(&path)).await;
    assert_eq!(root_tokens(&tree), 12, "the journaled usage");
    let outcome = resumed_outcome(&tree, id, "").await;
    assert_eq!(outcome.text.as_deref(), Some("messages 2"), "{outcome:?}");
    assert_eq!(root_tokens(&tree), 24);
    shut_down_and_finish(&tree, process).await;
}

/// A remote child whose answer is over the frame limit (9 MiB) sends its conversation up in
/// parts, so an empty resume continues it (its spawn goes down in parts too: the model is
/// sent its task and its answer); one whose answer is over the body limit (25 MiB) cannot,
/// so an empty resume is refused with the reason, with or without a journal on the owner's
/// tree. A journal must not turn "no conversation came up" into "an empty conversation to
/// continue".
pub(crate) async fn an_empty_resume_continues_a_conversation_over_the_frame_limit_in_parts(
    owner: &mut Owner,
) {
    let mut failures = Vec::new();
    for journaled in [false, true] {
        let dir = Dir::new("over-limit");
        let (name, mut process) = owner.worker().await;
        let path = dir.file("tree.journal");
        let tree =
            maybe_journaled_tree(&owner.node, &name, journaled.then_some(path.as_path())).await;
        for (bytes, continues) in [(9_437_184usize, true), (26_214_400, false)] {
            let mut handle = spawn_runner(&tree, format!("big {bytes}")).await;
            let id = handle.id();
            let first = within(
                30,
                "the remote child with a large answer settles",
                handle.outcome(),
            )
            .await;
            assert_eq!(first.status, AgentStatus::Completed, "{:?}", first.error);
            let what = format!("journaled {journaled}, {bytes} bytes");
            match (tree.resume(id, "").await, continues) {
                (Ok(mut resumed), true) => {
                    let outcome =
                        tokio::time::timeout(Duration::from_secs(30), resumed.outcome()).await;
                    match outcome {
                        Ok(o) if o.text.as_ref().map(String::len) == Some(bytes) => {}
                        Ok(o) => failures.push(format!(
                            "{what}: the empty resume ran as {:?} {:?} ({:?} bytes)",
                            o.status,
                            o.error,
                            o.text.as_ref().map(String::len)
                        )),
                        Err(_) => failures.push(format!("{what}: no settle within 30 s")),
                    }
                }
                (Err(error), true) => {
                    failures.push(format!("{what}: the empty resume was refused: {error}"));
                }
                (Err(error), false) => {
                    let error = error.to_string();
                    if !error.contains("resume it with a prompt") {
                        failures.push(format!("{what}: refused, but {error:?}"));
                    }
                }
                (Ok(_), false) => failures.push(format!(
                    "{what}: the empty resume started, with no conversation come up"
                )),
            }
        }
        tree.shutdown().await;
        let _ = worker_idle(&mut process);
        process.finish();
    }
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

/// A remote child whose node was killed mid-run: what came up of its conversation, turn by
/// turn, is kept (and journaled, when the owner's tree has a journal), as a local agent's
/// last turn boundary is; with its node back under its name, an empty resume continues it
/// there: four more turns, the model sent the kept messages (the task, then a call and its
/// result per turn: at least two turns' worth, odd) and its own.
pub(crate) async fn an_empty_resume_after_the_remote_childs_node_was_killed_continues_there_back(
    owner: &mut Owner,
) {
    for journaled in [false, true] {
        let dir = Dir::new("node-killed");
        owner.workers += 1;
        let name = format!("phoenix-{}", owner.workers);
        let port = worker::free_port();
        let mut old = owner.worker_process(&name, port, "normal", false).await;
        let path = dir.file("tree.journal");
        let tree =
            maybe_journaled_tree(&owner.node, &name, journaled.then_some(path.as_path())).await;
        let mut handle = spawn_runner(&tree, "steps 4 500").await;
        let id = handle.id();
        assert!(
            eventually(Duration::from_secs(10), || root_tokens(&tree) >= 24).await,
            "two remote turns billed"
        );
        old.kill9();
        let outcome = within(
            10,
            "the remote child of a killed node settles",
            handle.outcome(),
        )
        .await;
        assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
        // Back only after the reconnect window (300 ms): a new process under the name.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let mut new = owner.worker_process(&name, port, "normal", false).await;
        let outcome = resumed_outcome(&tree, id, "").await;
        assert_eq!(
            outcome.status,
            AgentStatus::Completed,
            "journaled {journaled}: {outcome:?}"
        );
        let sent = messages_sent(&outcome);
        assert!(
            sent >= 3 + 6 && sent % 2 == 1,
            "journaled {journaled}: {outcome:?}"
        );
        tree.shutdown().await;
        let (live, _, edges) = worker_idle(&mut new);
        assert_eq!((live, edges), (0, 0));
        new.finish();
    }
}

/// A resume whose spawn cannot go down (its prompt is over the body limit) fails without
/// running on the node; it must not erase the conversation the owner kept from the run
/// before: the next empty resume still continues it (`count` answers 2), as a local
/// agent's failed run leaves its conversation for a resume.
pub(crate) async fn a_resume_that_never_reached_its_node_keeps_the_conversation(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = maybe_journaled_tree(&owner.node, &name, None).await;
    let id = runner_answered(&tree, "count", "messages 1").await;
    let big = "p".repeat(25 * 1024 * 1024);
    let failed = resumed_outcome(&tree, id, &big).await;
    assert_eq!(failed.status, AgentStatus::Failed, "{:?}", failed.error);
    assert!(
        failed
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("body limit"),
        "{:?}",
        failed.error
    );
    let outcome = match tree.resume(id, "").await {
        Ok(mut resumed) => within(20, "the empty resume settles", resumed.outcome()).await,
        Err(error) => panic!(
            "the conversation kept from run 1 was erased by a resume that never reached \
             node {name}: {error}"
        ),
    };
    assert_eq!(outcome.text.as_deref(), Some("messages 2"), "{outcome:?}");
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    shut_down_and_finish(&tree, process).await;
}
