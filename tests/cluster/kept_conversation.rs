//! What the owner's node keeps of a remote agent's conversation (it goes up at every turn
//! boundary: `Up::Conversation { from, cut }`, the hosted registry's conversation tap) is
//! what a LOCAL agent keeps in the same situation (the spec: the same worker model and tools
//! in a local tree on the owner's process): run after run, steered, aborted, killed,
//! restarted, shut down mid-turn, its node killed, the owner crashed or recovered.

use super::support::finish_without_failures;
use super::support::{each_side_in_rounds, local_and_remote_rounds};
use super::support::{finish_idle, journaled_side, no_failures};
use super::support::{spawn_runner, within};
use std::path::Path;
use std::time::Duration;

use agent_tree::Tree;
use agent_tree::cluster::Node;
use agent_tree::protocol::{
    AgentDefinition, AgentId, AgentStatus, Message, RestartPolicy, Role, SpawnRequest, WaitPolicy,
};

use super::support::{
    Dir, kept, local_tree, others_first, owner_tree, owner_tree_of, render, replayed, resumed,
    settled,
};
use super::worker;
use super::{Owner, eventually, first_usage, root_tokens, worker_idle};

/// What one side did: each run's outcome text and the conversation kept after it.
type Runs = Vec<(Option<String>, Vec<String>)>;

/// Runs `task` on `tree` (journaled to `path`), then each resume in `resumes`; returns the
/// top agent's id and, per run, its outcome text and the kept conversation.
async fn runs(tree: &Tree, path: &Path, task: &str, resumes: &[&str]) -> (AgentId, Runs) {
    let mut handle = spawn_runner(tree, task).await;
    let id = handle.id();
    let first = settled(&mut handle, "the first run").await;
    let mut out = vec![(first.text.clone(), render(&kept(tree, path, id).await))];
    for prompt in resumes {
        let outcome = resumed(tree, id, prompt).await;
        out.push((outcome.text.clone(), render(&kept(tree, path, id).await)));
    }
    (id, out)
}

/// A remote child keeps, run after run (a first run, an empty resume, one with a prompt,
/// another empty one), exactly the conversation a local agent keeps for the same task: its
/// final answer included (the conversation goes up before the terminal event), a resumed
/// run's replacing the earlier one's (`from` 0: the whole), and the owner's journal holds
/// no conversation of the remote child's mirrored descendants (only depth-1 hosted agents
/// stream theirs). Repeated: the tap and the terminal event race on the hosted side.
pub(crate) async fn a_remote_childs_kept_conversation_is_a_local_agents(owner: &mut Owner) {
    same_as_local(owner, &["count", "steps 3 0", "work 2 0"]).await;
}

/// As above, for a remote child that delegates (`delegate 1 0`: an `Agent` call, whose
/// result names the child it started): the kept conversation is the local agent's. On the
/// worker every hosted tree is fresh, so every run's helper is the hosted tree's `a2`; the
/// owner's node rewrites the ids the runtime wrote into the conversation as it comes up
/// (`cluster::edge::ids`), so the kept conversation (sent down again on a resume) names the
/// four helpers by their mirrored records, `a2`, `a3`, `a4`, `a5`, as a local agent's does.
// regression: it once named `a2` four times, ids of hosted trees that no longer existed.
pub(crate) async fn a_delegating_remote_childs_kept_conversation_is_a_local_agents(
    owner: &mut Owner,
) {
    same_as_local(owner, &["delegate 1 0"]).await;
}

/// A resumed remote run reads its first run's helper by the id its conversation gives it,
/// and starts a new helper that is another agent, as a local run does (`recall`). The
/// resumed run's hosted tree is fresh: it holds a settled record of each earlier helper
/// (seeded, `Command::Spawn`'s `earlier`) with the ids the conversation sent down names
/// them by. Another agent runs first, so the runner's ids in the owner's tree are not its
/// hosted tree's, and every id crosses the edge rewritten, both ways.
pub(crate) async fn a_resumed_remote_run_reads_an_earlier_helper_as_a_local_one(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let mut tokens = 0;
    for round in 0..2 {
        let dir = Dir::new("recall");
        let (lp, rp) = (dir.file("local.journal"), dir.file("remote.journal"));
        let local = local_tree(&lp).await;
        let remote = owner_tree(&owner.node, &name, &rp).await;
        for tree in [&local, &remote] {
            others_first(tree, 1).await;
        }
        let resumes = ["", "more", ""];
        let (_, want) = runs(&local, &lp, "recall", &resumes).await;
        let (_, got) = runs(&remote, &rp, "recall", &resumes).await;
        let answers: Vec<String> = got
            .iter()
            .map(|(text, _)| text.clone().unwrap_or_default())
            .collect();
        let recalled = "recalled completed done 1, new helper another";
        assert_eq!(
            answers,
            ["first helper", recalled, recalled, recalled],
            "round {round}: what the remote runs answered"
        );
        assert_eq!(
            want, got,
            "round {round}: the remote runs keep what local ones keep"
        );
        tokens += root_tokens(&remote);
        local.shutdown().await;
        remote.shutdown().await;
    }
    let (live, worker_tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(worker_tokens, tokens, "usage counted once");
    process.finish();
}

async fn same_as_local(owner: &mut Owner, tasks: &[&str]) {
    let (name, mut process) = owner.worker().await;
    let mut failures = Vec::new();
    let mut tokens = 0;
    for &task in tasks {
        for round in 0..3 {
            let dir = Dir::new("same");
            let (lp, rp) = (dir.file("local.journal"), dir.file("remote.journal"));
            let local = local_tree(&lp).await;
            let remote = owner_tree(&owner.node, &name, &rp).await;
            let resumes = ["", "more", ""];
            let (_, want) = runs(&local, &lp, task, &resumes).await;
            let (id, got) = runs(&remote, &rp, task, &resumes).await;
            if want != got {
                failures.push(format!(
                    "{task} (round {round}): local kept {want:#?}\n remote kept {got:#?}"
                ));
            }
            let replay = replayed(&remote, &rp).await;
            let mut others: Vec<AgentId> = replay
                .conversations
                .keys()
                .copied()
                .filter(|a| *a != id)
                .collect();
            others.sort();
            if !others.is_empty() {
                failures.push(format!(
                    "{task}: the owner's journal holds conversations of {others:?} (mirrored \
                     descendants of {id})"
                ));
            }
            tokens += root_tokens(&remote);
            local.shutdown().await;
            remote.shutdown().await;
        }
    }
    let (live, worker_tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(worker_tokens, tokens, "usage counted once");
    process.finish();
    no_failures(&failures);
}

/// A steer delivered to a remote agent mid-run, then an abort: the steer is in the kept
/// conversation (a delivered steer is never lost: the run's end puts it in), and an empty
/// resume's model reads it, as a local agent's does.
pub(crate) async fn a_steer_then_an_abort_is_kept_for_the_resume_as_locally(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut failures = Vec::new();
    for remote in [false, true] {
        for round in 0..3 {
            let (_dir, path, tree) =
                journaled_side(&owner.node, &name, remote, "steer-abort").await;
            let mut handle = spawn_runner(&tree, "work 3 400").await;
            let id = handle.id();
            first_usage(&tree, id).await;
            let receipt = tree.steer(id, "hello").await;
            tree.abort(id).unwrap();
            let aborted = settled(&mut handle, "the aborted run").await;
            let conversation = kept(&tree, &path, id).await;
            let has = conversation
                .iter()
                .any(|m| m.role == Role::User && m.content == "hello");
            if !has || aborted.status != AgentStatus::Aborted {
                failures.push(format!(
                    "remote {remote} round {round}: steer {receipt:?}, {:?}, kept {:#?}",
                    aborted.status,
                    render(&conversation)
                ));
            }
            let outcome = resumed(&tree, id, "").await;
            if !outcome
                .text
                .as_deref()
                .is_some_and(|t| t.contains("steered: hello"))
            {
                failures.push(format!(
                    "remote {remote} round {round}: the resume answered {outcome:?}"
                ));
            }
            tree.shutdown().await;
        }
    }
    finish_without_failures(process, &failures);
}

/// A journaled owner tree (a remote child run, resumed empty, resumed with a prompt) shut
/// down and built again from its journal: the recovered tree keeps the conversation a local
/// tree recovered the same way keeps, and an empty resume of each answers the same.
pub(crate) async fn a_recovered_owner_keeps_every_remote_run_as_a_local_tree(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let dir = Dir::new("recovered");
    let (lp, rp) = (dir.file("local.journal"), dir.file("remote.journal"));
    let local = local_tree(&lp).await;
    let remote = owner_tree(&owner.node, &name, &rp).await;
    let resumes = ["", "again"];
    let (lid, want) = runs(&local, &lp, "steps 2 0", &resumes).await;
    let (rid, got) = runs(&remote, &rp, "steps 2 0", &resumes).await;
    assert_eq!(want, got, "before the recovery");
    local.shutdown().await;
    remote.shutdown().await;
    drop((local, remote));
    let local = local_tree(&lp).await;
    let remote = owner_tree(&owner.node, &name, &rp).await;
    let want = render(&kept(&local, &lp, lid).await);
    let got = render(&kept(&remote, &rp, rid).await);
    assert_eq!(want, got, "recovered");
    let want = resumed(&local, lid, "").await.text;
    let got = resumed(&remote, rid, "").await.text;
    assert_eq!(want, got, "the recovered trees' empty resumes");
    let want = render(&kept(&local, &lp, lid).await);
    let got = render(&kept(&remote, &rp, rid).await);
    assert_eq!(want, got, "after the recovered trees' resumes");
    local.shutdown().await;
    remote.shutdown().await;
    finish_idle(process);
}

/// A remote child whose resumed run's node is killed mid-run: the owner keeps that run's
/// last turn boundary that came up, which continues the earlier run's conversation (its
/// `from` 0 delta is the whole of it); with the node back under its name, an empty resume
/// continues from there: the model is sent the first run's 8 messages, the killed run's
/// turns and its own.
pub(crate) async fn a_node_killed_mid_resumed_run_keeps_the_whole_conversation(owner: &mut Owner) {
    let dir = Dir::new("killed-resumed");
    owner.workers += 1;
    let name = format!("phoenix6-{}", owner.workers);
    let port = worker::free_port();
    let mut old = owner.worker_process(&name, port, "normal", false).await;
    let path = dir.file("tree.journal");
    let tree = owner_tree(&owner.node, &name, &path).await;
    let mut handle = spawn_runner(&tree, "steps 4 100").await;
    let id = handle.id();
    let first = settled(&mut handle, "the first run").await;
    assert_eq!(first.text.as_deref(), Some("messages 7"), "{first:?}");
    let run1 = kept(&tree, &path, id).await;
    assert_eq!(run1.len(), 8, "{:#?}", render(&run1));
    let before = root_tokens(&tree);
    let mut handle = tree.resume(id, "").await.unwrap();
    // Two turns of the resumed run (its tool pauses 100 ms; the model is instant).
    assert!(
        eventually(Duration::from_secs(10), || root_tokens(&tree)
            >= before + 24)
        .await,
        "two resumed turns billed"
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    old.kill9();
    let outcome = settled(&mut handle, "the resumed run of a killed node").await;
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    let run2 = kept(&tree, &path, id).await;
    assert!(
        run2.len() > run1.len() && run2[..run1.len()] == run1[..],
        "the killed resumed run's kept conversation continues the first run's: {:#?}",
        render(&run2)
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut new = owner.worker_process(&name, port, "normal", false).await;
    let outcome = resumed(&tree, id, "").await;
    assert_eq!(
        outcome.text,
        Some(format!("messages {}", run2.len() + 6)),
        "kept {}",
        run2.len()
    );
    tree.shutdown().await;
    let (live, _, edges) = worker_idle(&mut new);
    assert_eq!((live, edges), (0, 0));
    new.finish();
}

/// A transient remote child fails mid-run (after a turn) and its owner restarts it: the
/// restarted incarnation's conversation replaces the failed one's, as a local agent's
/// does; the kept conversation and the empty resume's answer are a local tree's.
pub(crate) async fn a_restarted_remote_child_keeps_only_its_new_incarnation(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let dir = Dir::new("restart");
        let path = dir.file("tree.journal");
        let tree = if remote {
            owner_tree_of(
                &owner.node,
                vec![
                    AgentDefinition::new("flaky", "")
                        .with_restart(RestartPolicy::Transient)
                        .on_node(&name),
                ],
                &path,
            )
            .await
        } else {
            local_tree(&path).await
        };
        let id = tree
            .spawn(SpawnRequest::new("flaky", "fail-late 3 50"))
            .await
            .unwrap()
            .id();
        let outcome = within(20, "settles", tree.wait(&[id], WaitPolicy::AllSettled)).await;
        let incarnation = tree.record(id).unwrap().incarnation;
        let after = render(&kept(&tree, &path, id).await);
        let resumed = resumed(&tree, id, "").await.text;
        let last = render(&kept(&tree, &path, id).await);
        sides.push((outcome[0].text.clone(), incarnation, after, resumed, last));
        tree.shutdown().await;
    }
    assert_eq!(sides[0], sides[1], "local, then remote");
    finish_idle(process);
}

/// Shuts `tree` down after its remote (or local) `steps 4 300` child billed two turns; the
/// tree built again from its journal; what it keeps and its empty resume's answer.
async fn shut_down_mid_run(
    node: Option<(&Node, &str)>,
    path: &Path,
) -> (Vec<String>, Option<String>) {
    let build = async || match node {
        Some((node, name)) => owner_tree(node, name, path).await,
        None => local_tree(path).await,
    };
    let tree = build().await;
    let handle = spawn_runner(&tree, "steps 4 300").await;
    let id = handle.id();
    assert!(
        eventually(Duration::from_secs(10), || root_tokens(&tree) >= 24).await,
        "two turns billed"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    tree.shutdown().await;
    let at_shutdown = render(&kept(&tree, path, id).await);
    drop(tree);
    let tree = build().await;
    let recovered = render(&kept(&tree, path, id).await);
    assert_eq!(at_shutdown, recovered, "recovered as shut down");
    let text = resumed(&tree, id, "").await.text;
    tree.shutdown().await;
    (recovered, text)
}

/// A journaled owner tree shut down while its remote child is mid-turn (in its second
/// turn's tool call): the child's run ends aborted on its node, and the conversation it
/// ended with comes up before its terminal event, so the tree built again from the journal
/// keeps what a local tree shut down the same way keeps, and the empty resume answers the
/// same.
pub(crate) async fn a_shutdown_mid_turn_keeps_what_a_local_shutdown_keeps(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut failures = Vec::new();
    for round in 0..3 {
        let dir = Dir::new("shutdown");
        let (lp, rp) = (dir.file("local.journal"), dir.file("remote.journal"));
        let want = shut_down_mid_run(None, &lp).await;
        let got = shut_down_mid_run(Some((&owner.node, &name)), &rp).await;
        if want != got {
            failures.push(format!("round {round}: local {want:#?}\n remote {got:#?}"));
        }
    }
    finish_without_failures(process, &failures);
}

/// A remote child killed (`Tree::kill`) mid-turn keeps its last turn boundary, as a local
/// agent killed mid-turn does; a steer read mid-run is in it; the empty resume answers as
/// the local one's.
pub(crate) async fn a_killed_remote_child_keeps_its_last_boundary_as_locally(owner: &mut Owner) {
    local_and_remote_rounds(owner, 3, "kill", |tree, path| {
        Box::pin(async move {
            let mut handle = spawn_runner(tree, "work 4 300").await;
            let id = handle.id();
            first_usage(tree, id).await;
            let _ = tree.steer(id, "mid-run").await;
            assert!(
                eventually(Duration::from_secs(10), || root_tokens(tree) >= 24).await,
                "two turns billed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            tree.kill(id).unwrap();
            let killed = settled(&mut handle, "the killed run").await;
            let conversation = render(&kept(tree, path, id).await);
            let text = resumed(tree, id, "").await.text;
            (killed.status, conversation, text)
        })
    })
    .await;
}

/// Aborted at once, right after its spawn and right after a resume with a prompt (where
/// the abort lands differs between a local and a remote agent: it crosses the edge): what
/// is kept is, as for a local agent, a boundary or the end of the aborted run, which
/// continues the earlier run's conversation and the prompt, and each empty resume continues
/// exactly it (`steps 2`: two more messages before its answer).
pub(crate) async fn an_abort_right_after_a_spawn_or_a_resume_keeps_what_a_local_one_keeps(
    owner: &mut Owner,
) {
    each_side_in_rounds(owner, 3, "abort-at-once", |tree, path| {
        Box::pin(async move {
            let mut handle = spawn_runner(tree, "steps 2 100").await;
            let id = handle.id();
            tree.abort(id).unwrap();
            let first = settled(&mut handle, "the aborted run").await;
            let after_spawn = kept(tree, path, id).await;
            let completed = resumed(tree, id, "").await;
            let run2 = kept(tree, path, id).await;
            let mut handle = tree.resume(id, "and then").await.unwrap();
            tree.abort(id).unwrap();
            let second = settled(&mut handle, "the aborted resume").await;
            let after_resume = kept(tree, path, id).await;
            let last = resumed(tree, id, "").await;
            let mut expected_prefix = run2.clone();
            expected_prefix.push(Message::user("and then"));
            let fine = first.status == AgentStatus::Aborted
                && second.status == AgentStatus::Aborted
                && after_spawn.first() == Some(&Message::user("steps 2 100"))
                && completed.text == Some(format!("messages {}", after_spawn.len() + 2))
                && after_resume.len() >= expected_prefix.len()
                && after_resume[..expected_prefix.len()] == expected_prefix[..]
                && last.text == Some(format!("messages {}", after_resume.len() + 2));
            if fine {
                return None;
            }
            Some(format!(
                "{:?} kept {:#?}, then {:?}, kept {:#?} \
                 after the aborted resume ({:?}), then {:?}",
                first.status,
                render(&after_spawn),
                completed.text,
                render(&after_resume),
                second.status,
                last.text
            ))
        })
    })
    .await;
}

/// The owner's process "crashes" mid-run (its journal copied while the remote child is in
/// its third turn): the tree recovered from the copy keeps a turn boundary of that run that
/// came up (a prefix of the conversation the run ended with, task first, at least two
/// turns), and the empty resume continues exactly it.
pub(crate) async fn a_crash_mid_run_recovers_a_boundary_that_came_up(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let dir = Dir::new("crash-copy");
    let (live, copy) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let tree = owner_tree(&owner.node, &name, &live).await;
    let mut handle = spawn_runner(&tree, "steps 4 200").await;
    let id = handle.id();
    assert!(
        eventually(Duration::from_secs(10), || root_tokens(&tree) >= 36).await,
        "three turns billed"
    );
    tree.flush_journal().await;
    std::fs::copy(&live, &copy).unwrap();
    let outcome = settled(&mut handle, "the run").await;
    assert_eq!(outcome.text.as_deref(), Some("messages 7"), "{outcome:?}");
    let whole = kept(&tree, &live, id).await;
    tree.shutdown().await;
    drop(tree);
    let recovered = owner_tree(&owner.node, &name, &copy).await;
    let at_crash = kept(&recovered, &copy, id).await;
    assert!(
        at_crash.len() >= 5 && at_crash.len() % 2 == 1 && whole[..at_crash.len()] == at_crash[..],
        "recovered {:#?} of {:#?}",
        render(&at_crash),
        render(&whole)
    );
    let outcome = resumed(&recovered, id, "").await;
    assert_eq!(
        outcome.text,
        Some(format!("messages {}", at_crash.len() + 6))
    );
    recovered.shutdown().await;
    finish_idle(process);
}
