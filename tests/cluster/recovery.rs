//! A journaled owner tree with remote children, crashed (its journal copied as a kill would
//! leave it, or its process `kill -9`ed) and recovered: a remote child live at the crash
//! comes back interrupted with its journaled usage and resumes on its node; the mirrored
//! records and a settled child's mirror are recovered; the orphaned hosted subtree stops by
//! its lease.

use super::support::finish_idle;
use super::support::{runner_answered, spawn_runner, within};
use std::path::Path;
use std::time::{Duration, Instant};

use agent_tree::cluster::Node;
use agent_tree::protocol::{AgentId, AgentStatus, EndReason};
use agent_tree::testkit::ScriptedModel;
use agent_tree::{Catalog, Tree};

use super::support::shut_down_and_finish;
use super::support::{Dir, messages_sent, owner_tree};
use super::worker::{self, WorkerProcess};
use super::{
    GRACE_MS, LEASE_MS, Owner, eventually, first_usage, mirrored_child_working, root_tokens,
    runner, worker_idle, worker_until,
};

/// What an owner child process is (see [`owner_node`]).
const OWNER_ENV: &str = "AGENT_TREE_CLUSTER_OWNER";

/// A journaled owner tree with a remote child running (at least two of its turns billed),
/// "crashed": its journal copied as a kill would leave it, then the tree dropped without a
/// shutdown; the tree recovered from the copy. The recovered tree, the child, the tokens
/// the root counted before the copy.
async fn crashed_and_recovered(
    owner: &mut Owner,
    dir: &Dir,
) -> (Tree, AgentId, u64, String, WorkerProcess) {
    let (name, mut process) = owner.worker().await;
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let tree = owner_tree(&owner.node, &name, &live).await;
    let id = spawn_runner(&tree, "steps 6 200").await.id();
    first_usage(&tree, id).await;
    assert!(
        eventually(Duration::from_secs(10), || root_tokens(&tree) >= 24).await,
        "two remote turns billed"
    );
    let before = root_tokens(&tree);
    tree.flush_journal().await;
    std::fs::copy(&live, &crashed).unwrap();
    drop(tree);
    // The dropped tree's stand-in was killed: it told the worker to stop.
    let (left, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(left, 0, "the dropped owner's remote subtree still runs");
    let tree = owner_tree(&owner.node, &name, &crashed).await;
    (tree, id, before, name, process)
}

/// A remote child live at the crash comes back `aborted`/`interrupted`, its usage as
/// journaled in the root's totals, and `Tree::resume` runs it afresh on its node.
pub(crate) async fn a_recovered_remote_child_is_interrupted_with_its_usage_and_resumes_on_its_node(
    owner: &mut Owner,
) {
    let dir = Dir::new("recovered");
    let (tree, id, before, _, mut process) = crashed_and_recovered(owner, &dir).await;
    let record = tree.record(id).expect("the remote child's record");
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Interrupted),
        "{record:?}"
    );
    assert_eq!(tree.interrupted(), vec![id]);
    let recovered = root_tokens(&tree);
    assert!(
        recovered >= before && recovered.is_multiple_of(12),
        "recovered {recovered} tokens, {before} counted before the copy"
    );
    assert_eq!(record.subtree.total_tokens(), recovered);
    // It continues on its node the conversation the journal kept of it (its task first, at
    // least two turns), the prompt its next message: six more turns, the model sent the
    // kept messages (odd: the task, then a call and its result per turn) and the prompt.
    let mut resumed = tree
        .resume(id, "work 2 10")
        .await
        .expect("the resume starts");
    let outcome = within(20, "the resumed remote child settles", resumed.outcome()).await;
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let sent = messages_sent(&outcome);
    assert!(sent >= 3 + 1 + 10 && sent.is_multiple_of(2), "{outcome:?}");
    assert_eq!(root_tokens(&tree), recovered + 72);
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    shut_down_and_finish(&tree, process).await;
}

/// The docs' recovery recipe: a resume with an empty prompt re-runs what the crash cut off.
/// A remote child's conversation came up turn by turn and is in the owner's journal: the
/// empty resume continues it on its node, as a local agent's does (six more turns, the
/// model sent the kept messages: the task, then a call and its result per turn).
pub(crate) async fn a_recovered_remote_child_resumed_with_an_empty_prompt_continues(
    owner: &mut Owner,
) {
    let dir = Dir::new("empty-resume");
    let (tree, id, _, _, process) = crashed_and_recovered(owner, &dir).await;
    let mut handle = tree
        .resume(id, "")
        .await
        .expect("the empty resume of a recovered remote child starts");
    let outcome = within(30, "the resumed remote child settles", handle.outcome()).await;
    let sent = messages_sent(&outcome);
    assert!(sent >= 3 + 10 && sent % 2 == 1, "{outcome:?}");
    shut_down_and_finish(&tree, process).await;
}

/// `Tree::remote_records` of a remote child recovered from the journal: still a remote
/// child (`Some`), its mirror gone with the process that held it (empty), never reported
/// as a local agent (`None`).
pub(crate) async fn a_recovered_remote_child_is_still_remote_with_its_mirror_gone(
    owner: &mut Owner,
) {
    let dir = Dir::new("records");
    let (tree, id, _, _, process) = crashed_and_recovered(owner, &dir).await;
    let records = tree.remote_records(id).await;
    assert_eq!(
        records,
        Some(Vec::new()),
        "a recovered remote child: {records:?}"
    );
    shut_down_and_finish(&tree, process).await;
}

/// A settled remote child's mirror of its hosted subtree is journaled when its edge ends: a
/// tree rebuilt from the journal, compacted or not, reads the `remote_records` the tree
/// that ran it read.
pub(crate) async fn a_recovered_tree_keeps_a_settled_remote_childs_mirror(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    for rotate in [None, Some(1)] {
        let dir = Dir::new("mirror-journaled");
        let path = dir.file("tree.journal");
        let build = || {
            let journal = agent_tree::JournalConfig::new(&path);
            Tree::builder()
                .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
                .model(ScriptedModel::new())
                .node(&owner.node)
                .journal(match rotate {
                    Some(bytes) => journal.rotate_at(bytes),
                    None => journal,
                })
                .build()
        };
        let tree = build().await.expect("the journaled tree builds");
        let id = runner_answered(&tree, "delegate 1 0", "lead done").await;
        let mirror = tree.remote_records(id).await.expect("a remote child");
        assert_eq!(
            mirror
                .iter()
                .map(|r| r.agent_type.as_str())
                .collect::<Vec<_>>(),
            ["root", "runner", "helper"],
            "{mirror:?}"
        );
        tree.shutdown().await;
        drop(tree);
        let journal = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            journal.contains(r#""entry":"checkpoint""#),
            rotate.is_some(),
            "compacted only when it rotates"
        );
        let recovered = build().await.expect("the tree recovers");
        assert_eq!(
            recovered.remote_records(id).await,
            Some(mirror),
            "rotating at {rotate:?}"
        );
        recovered.shutdown().await;
    }
    finish_idle(process);
}

/// The owner's journal holds the mirrored records of a remote child's descendants like any
/// other: recovered after a crash, the helper a remote runner delegated to is there, under
/// the runner, interrupted with the usage it billed, the records' usage adding up; it is
/// not resumed from here (its node's owner would).
pub(crate) async fn a_recovered_tree_keeps_its_mirrored_records(owner: &mut Owner) {
    let dir = Dir::new("mirrored");
    let (name, mut process) = owner.worker().await;
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let tree = owner_tree(&owner.node, &name, &live).await;
    let mut events = tree.subscribe();
    let id = spawn_runner(&tree, "delegate 40 100").await.id();
    let helper = mirrored_child_working(&mut events, id).await;
    // Read before the flush: usage billed after the read is journaled too (the recovered
    // record may hold more), never usage read but not yet flushed.
    let billed = tree.record(helper).unwrap().own;
    tree.flush_journal().await;
    std::fs::copy(&live, &crashed).unwrap();
    drop(tree);
    let (left, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(left, 0, "the dropped owner's remote subtree still runs");
    let tree = owner_tree(&owner.node, &name, &crashed).await;
    let record = tree.record(helper).expect("the mirrored record, recovered");
    assert_eq!(record.parent, Some(id));
    assert_eq!(record.agent_type, "helper");
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Interrupted)
    );
    assert!(
        record.own.total_tokens() >= billed.total_tokens() && billed.total_tokens() > 0,
        "{record:?}, {billed:?} billed before the copy"
    );
    let snapshot = tree.snapshot();
    snapshot.check_usage().expect("own and subtree agree");
    assert_eq!(
        tree.resume(helper, "go on")
            .await
            .err()
            .map(|e| e.to_string()),
        Some(format!("no subagent {helper} of yours")),
        "the application resumes top-level agents only"
    );
    shut_down_and_finish(&tree, process).await;
}

/// The owner side of [`a_killed_journaled_owner_process_orphans_stop_by_lease_and_recovery_resumes`]:
/// a child process with its own node and a journaled tree placing a runner on the worker;
/// it prints `worker ready <id>` (the line `WorkerProcess::start` waits for) once the
/// remote child billed a turn and the journal is flushed, then runs until killed.
#[test]
#[ignore = "an owner node, started as a child process by `nodes_as_child_processes`"]
fn owner_node() {
    let Ok(args) = std::env::var(OWNER_ENV) else {
        return;
    };
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    let [name, port, worker_name, worker_addr, journal] = &args[..] else {
        panic!("owner arguments: {args:?}");
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let node = Node::start(worker::node_config(
            name,
            port.parse().unwrap(),
            LEASE_MS,
            GRACE_MS,
        ))
        .await
        .unwrap();
        node.join(worker_addr.parse().unwrap(), worker_name)
            .await
            .expect("the owner joins the worker");
        let tree = owner_tree(&node, worker_name, Path::new(journal)).await;
        let id = spawn_runner(&tree, "steps 4 500").await.id();
        first_usage(&tree, id).await;
        tree.flush_journal().await;
        println!("worker ready {id}");
        std::future::pending::<()>().await;
    });
}

/// A journaled owner process is `kill -9`ed with a remote child running: the worker's
/// orphaned subtree stops by its lease (the owner's session closed, no grant comes), and
/// another owner recovers the journal: the child interrupted with its journaled usage (at
/// most what the worker billed), resumed on the same worker.
pub(crate) async fn a_killed_journaled_owner_process_orphans_stop_by_lease_and_recovery_resumes(
    owner: &mut Owner,
) {
    let dir = Dir::new("owner-killed");
    let journal = dir.file("owner.journal");
    owner.workers += 1;
    let name = format!("worker-{}", owner.workers);
    let worker_port = worker::free_port();
    let mut process = owner
        .worker_process(&name, worker_port, "normal", false)
        .await;
    let owner_args = format!(
        "owner-process-{} {} {name} 127.0.0.1:{worker_port} {}",
        owner.workers,
        worker::free_port(),
        journal.display()
    );
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--ignored",
            "--exact",
            "recovery::owner_node",
            "--nocapture",
        ])
        .env(OWNER_ENV, owner_args);
    let mut crashed_owner = tokio::task::spawn_blocking(move || WorkerProcess::start(command))
        .await
        .unwrap();
    let (live, _) = process.stats();
    assert!(live >= 1, "the crashed owner's child runs on the worker");
    let killed = Instant::now();
    crashed_owner.kill9();
    let (live, billed) = worker_until(&mut process, |(live, _)| live == 0);
    let stopped = killed.elapsed();
    assert_eq!(
        live, 0,
        "the orphaned hosted subtree still runs after {stopped:?}"
    );
    assert!(
        stopped < Duration::from_millis(LEASE_MS + GRACE_MS + 1_000),
        "the orphaned subtree stopped only after {stopped:?}"
    );
    let tree = owner_tree(&owner.node, &name, &journal).await;
    let id = AgentId::new(1);
    let record = tree.record(id).expect("the remote child's record");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Interrupted),
        "{record:?}"
    );
    let recovered = root_tokens(&tree);
    assert!(
        recovered >= 12 && recovered <= billed,
        "recovered {recovered} tokens, the worker billed {billed}"
    );
    // It continues the conversation journaled of it (its task at least), the prompt its
    // next message: the model reads the first task (`steps 4 500`, not `more`), four turns.
    let mut resumed = tree.resume(id, "more").await.expect("the resume starts");
    let outcome = within(20, "the resumed remote child settles", resumed.outcome()).await;
    let sent = messages_sent(&outcome);
    assert!(sent >= 1 + 1 + 6 && sent.is_multiple_of(2), "{outcome:?}");
    assert_eq!(root_tokens(&tree), recovered + 48);
    shut_down_and_finish(&tree, process).await;
}
