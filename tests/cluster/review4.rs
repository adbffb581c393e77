//! The fourth cluster review: the journal with remote children (a crash, recovery, resume,
//! an owner process killed), hosted trees with their own journal, detached and pooled
//! remote spawns. Registered in `scenarios()` like every other scenario.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_tree::JournalConfig;
use agent_tree::cluster::Node;
use agent_tree::protocol::{AgentId, AgentStatus, EndReason, SpawnRequest};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree, TreeConfig};

use super::worker::{self, WorkerArgs, WorkerProcess};
use super::{
    GRACE_MS, LEASE_MS, Owner, first_usage, lead_of, root_tokens, runner, worker_idle, worker_until,
};

/// The journal path a `journaled` worker's hosted trees share (or, `journaled-unique`, the
/// directory their per-edge journals go in).
const JOURNAL_ENV: &str = "AGENT_TREE_CLUSTER_REVIEW4_JOURNAL";
/// What an owner child process is (see [`owner_node`]).
const OWNER_ENV: &str = "AGENT_TREE_CLUSTER_REVIEW4_OWNER";

/// A fresh directory, removed when dropped (the cluster reviews' scenarios share it).
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(name: &str) -> Dir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "agent-tree-cluster-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The worker of the `journaled` modes: the usual hosted tree, with a journal: one file for
/// every hosted tree (`unique` false), or one per edge in that directory.
pub(crate) async fn run_journaled_worker(args: WorkerArgs, unique: bool) {
    let path = PathBuf::from(std::env::var(JOURNAL_ENV).expect("the journal path"));
    let model = std::sync::Arc::new(worker::WorkerModel::default());
    let next = AtomicUsize::new(0);
    worker::run_worker_hosting(args, move || {
        let file = if unique {
            path.join(format!(
                "edge-{}.journal",
                next.fetch_add(1, Ordering::Relaxed)
            ))
        } else {
            path.clone()
        };
        worker::hosted_tree()
            .shared_model(model.clone())
            .journal(JournalConfig::new(file))
    })
    .await;
}

/// A journaled worker, joined.
async fn journaled_worker(
    owner: &mut Owner,
    mode: &str,
    journal: &Path,
) -> (String, WorkerProcess) {
    owner.workers += 1;
    let name = format!("worker-{}", owner.workers);
    let mut command = owner.worker_command(&name, worker::free_port(), mode);
    command.env(JOURNAL_ENV, journal);
    let process = tokio::task::spawn_blocking(move || WorkerProcess::start(command))
        .await
        .unwrap();
    owner
        .node
        .await_peer(&name)
        .await
        .expect("the worker joined");
    (name, process)
}

fn journaled_tree_builder(node: &Node, worker: &str, path: &Path) -> agent_tree::TreeBuilder {
    Tree::builder()
        .catalog(Catalog::new([runner().on_node(worker)]).unwrap())
        .model(ScriptedModel::new())
        .node(node)
        .journal(JournalConfig::new(path))
}

async fn journaled_tree(node: &Node, worker: &str, path: &Path) -> Tree {
    journaled_tree_builder(node, worker, path)
        .build()
        .await
        .expect("the journaled tree builds")
}

/// A journaled owner tree with a remote child running (at least two of its turns billed),
/// "crashed": its journal copied as a kill would leave it, then the tree dropped without a
/// shutdown; the tree recovered from the copy. The recovered tree, the child, the tokens
/// the root counted before the copy.
/// What a `steps` or `count` run answered: how many messages its last turn was sent.
pub(crate) fn messages_sent(outcome: &agent_tree::protocol::Outcome) -> usize {
    outcome
        .text
        .as_deref()
        .and_then(|t| t.strip_prefix("messages "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a count of messages: {outcome:?}"))
}

async fn crashed_and_recovered(
    owner: &mut Owner,
    dir: &Dir,
) -> (Tree, AgentId, u64, String, WorkerProcess) {
    let (name, mut process) = owner.worker().await;
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let tree = journaled_tree(&owner.node, &name, &live).await;
    let id = tree
        .spawn(SpawnRequest::new("runner", "steps 6 200"))
        .await
        .unwrap()
        .id();
    first_usage(&tree, id).await;
    assert!(
        super::eventually(Duration::from_secs(10), || root_tokens(&tree) >= 24).await,
        "two remote turns billed"
    );
    let before = root_tokens(&tree);
    tree.flush_journal().await;
    std::fs::copy(&live, &crashed).unwrap();
    drop(tree);
    // The dropped tree's stand-in was killed: it told the worker to stop.
    let (left, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(left, 0, "the dropped owner's remote subtree still runs");
    let tree = journaled_tree(&owner.node, &name, &crashed).await;
    (tree, id, before, name, process)
}

/// A remote child live at the crash comes back `aborted`/`interrupted`, its usage as
/// journaled in the root's totals, and `Tree::resume` runs it afresh on its node.
pub(crate) async fn review4_a_recovered_remote_child_is_interrupted_with_its_usage_and_resumes_on_its_node(
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
    let outcome = tokio::time::timeout(Duration::from_secs(20), resumed.outcome())
        .await
        .expect("the resumed remote child settles");
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let sent = messages_sent(&outcome);
    assert!(sent >= 3 + 1 + 10 && sent.is_multiple_of(2), "{outcome:?}");
    assert_eq!(root_tokens(&tree), recovered + 72);
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    tree.shutdown().await;
    process.finish();
}

/// The docs' recovery recipe: a resume with an empty prompt re-runs what the crash cut off.
/// A remote child's conversation came up turn by turn and is in the owner's journal: the
/// empty resume continues it on its node, as a local agent's does (six more turns, the
/// model sent the kept messages: the task, then a call and its result per turn).
pub(crate) async fn review4_a_recovered_remote_child_resumed_with_an_empty_prompt_continues(
    owner: &mut Owner,
) {
    let dir = Dir::new("empty-resume");
    let (tree, id, _, _, process) = crashed_and_recovered(owner, &dir).await;
    let mut handle = tree
        .resume(id, "")
        .await
        .expect("the empty resume of a recovered remote child starts");
    let outcome = tokio::time::timeout(Duration::from_secs(30), handle.outcome())
        .await
        .expect("the resumed remote child settles");
    let sent = messages_sent(&outcome);
    assert!(sent >= 3 + 10 && sent % 2 == 1, "{outcome:?}");
    tree.shutdown().await;
    process.finish();
}

/// The owner's journal holds the mirrored records of a remote child's descendants like any
/// other: recovered after a crash, the helper a remote runner delegated to is there, under
/// the runner, interrupted with the usage it billed, the records' usage adding up; it is
/// not resumed from here (its node's owner would).
pub(crate) async fn a_recovered_tree_keeps_its_mirrored_records(owner: &mut Owner) {
    let dir = Dir::new("mirrored");
    let (name, mut process) = owner.worker().await;
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let tree = journaled_tree(&owner.node, &name, &live).await;
    let mut events = tree.subscribe();
    let id = tree
        .spawn(SpawnRequest::new("runner", "delegate 40 100"))
        .await
        .unwrap()
        .id();
    let helper = super::mirrored_child_working(&mut events, id).await;
    // Read before the flush: usage billed after the read is journaled too (the recovered
    // record may hold more), never usage read but not yet flushed.
    let billed = tree.record(helper).unwrap().own;
    tree.flush_journal().await;
    std::fs::copy(&live, &crashed).unwrap();
    drop(tree);
    let (left, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(left, 0, "the dropped owner's remote subtree still runs");
    let tree = journaled_tree(&owner.node, &name, &crashed).await;
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
    tree.shutdown().await;
    process.finish();
}

/// `Tree::remote_records` of a remote child recovered from the journal: still a remote
/// child (`Some`), its mirror gone with the process that held it (empty), never reported
/// as a local agent (`None`).
pub(crate) async fn review4_a_recovered_remote_child_is_still_remote_with_its_mirror_gone(
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
    tree.shutdown().await;
    process.finish();
}

/// A remote child that completed in a journaled tree (the conversation its node sent up
/// journaled at its settle, dropped from memory) is resumed with a new task, as a local one
/// is: the task is the next message of its conversation (the worker's model reads the first
/// task and shows the later ones as steers).
pub(crate) async fn review4_a_settled_remote_child_of_a_journaled_tree_resumes(owner: &mut Owner) {
    let dir = Dir::new("settled-resume");
    let (name, mut process) = owner.worker().await;
    let tree = journaled_tree(&owner.node, &name, &dir.file("tree.journal")).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 1 10"))
        .await
        .unwrap();
    let id = handle.id();
    let first = handle.outcome().await;
    assert_eq!(first.text.as_deref(), Some("done 1"), "{first:?}");
    let mut resumed = tree
        .resume(id, "work 2 10")
        .await
        .expect("a settled remote child resumes");
    let outcome = tokio::time::timeout(Duration::from_secs(20), resumed.outcome())
        .await
        .expect("the resumed remote child settles");
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 1 | steered: work 2 10"),
        "{outcome:?}"
    );
    assert_eq!(root_tokens(&tree), 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 24, 0));
    tree.shutdown().await;
    process.finish();
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
            journaled_tree(&owner.node, &name, &dir.file("tree.journal")).await
        } else {
            Tree::builder()
                .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
                .model(ScriptedModel::new())
                .node(&owner.node)
                .build()
                .await
                .unwrap()
        };
        let mut handle = tree
            .spawn(SpawnRequest::new("runner", "count"))
            .await
            .unwrap();
        let id = handle.id();
        let first = handle.outcome().await;
        assert_eq!(first.text.as_deref(), Some("messages 1"), "{first:?}");
        // [count, messages 1]: continued as it was.
        let mut resumed = tree.resume(id, "").await.expect("an empty resume starts");
        let outcome = tokio::time::timeout(Duration::from_secs(20), resumed.outcome())
            .await
            .expect("the resumed remote child settles");
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
        let outcome = tokio::time::timeout(Duration::from_secs(20), again.outcome())
            .await
            .expect("the second resume settles");
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

/// The owner side of [`review4_a_killed_journaled_owner_process_orphans_stop_by_lease_and_recovery_resumes`]:
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
        let tree = journaled_tree(&node, worker_name, Path::new(journal)).await;
        let id = tree
            .spawn(SpawnRequest::new("runner", "steps 4 500"))
            .await
            .unwrap()
            .id();
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
pub(crate) async fn review4_a_killed_journaled_owner_process_orphans_stop_by_lease_and_recovery_resumes(
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
        "review4-owner-{} {} {name} 127.0.0.1:{worker_port} {}",
        owner.workers,
        worker::free_port(),
        journal.display()
    );
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--ignored", "--exact", "review4::owner_node", "--nocapture"])
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
    let tree = journaled_tree(&owner.node, &name, &journal).await;
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
    let outcome = tokio::time::timeout(Duration::from_secs(20), resumed.outcome())
        .await
        .expect("the resumed remote child settles");
    let sent = messages_sent(&outcome);
    assert!(sent >= 1 + 1 + 6 && sent.is_multiple_of(2), "{outcome:?}");
    assert_eq!(root_tokens(&tree), recovered + 48);
    tree.shutdown().await;
    process.finish();
}

async fn two_sequential_runs(owner: &mut Owner, mode: &str, journal: &Path) {
    let (name, mut process) = journaled_worker(owner, mode, journal).await;
    let tree = owner.tree(&name, runner()).await;
    for run in 1..=2 {
        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            tree.run(SpawnRequest::new("runner", "work 2 10")),
        )
        .await
        .unwrap_or_else(|_| panic!("remote run {run} hung"))
        .unwrap();
        assert_eq!(
            (outcome.status, outcome.text.as_deref()),
            (AgentStatus::Completed, Some("done 2")),
            "remote run {run}: {outcome:?}"
        );
        // The edge of this run ends (its hosted tree shut down, its journal closed) before
        // the next spawn.
        let (live, _, edges) = worker_idle(&mut process);
        assert_eq!((live, edges), (0, 0), "after run {run}");
    }
    assert_eq!(root_tokens(&tree), 48);
    tree.shutdown().await;
    process.finish();
}

/// A worker whose factory gives every hosted tree a journal of its own: spawns work, usage
/// counts once.
pub(crate) async fn review4_hosted_trees_with_a_journal_per_edge_serve_spawns(owner: &mut Owner) {
    let dir = Dir::new("hosted-unique");
    two_sequential_runs(owner, "journaled-unique", &dir.0).await;
}

/// A worker whose factory sets one journal path (the natural "a journal for this node"):
/// its second hosted tree, one after the other, would recover the first's journal, whose
/// ids and event numbers are not the new edge's. The node refuses that spawn with the
/// reason (never a hang): each hosted tree needs a journal of its own.
pub(crate) async fn review4_hosted_trees_journaling_to_one_file_refuse_a_second_spawn(
    owner: &mut Owner,
) {
    let dir = Dir::new("hosted-shared");
    let journal = dir.file("node.journal");
    let (name, mut process) = journaled_worker(owner, "journaled", &journal).await;
    let tree = owner.tree(&name, runner()).await;
    let first = tree
        .run(SpawnRequest::new("runner", "work 2 10"))
        .await
        .unwrap();
    assert_eq!(first.text.as_deref(), Some("done 2"), "{first:?}");
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        tree.run(SpawnRequest::new("runner", "work 2 10")),
    )
    .await
    .expect("the second run settles")
    .unwrap();
    assert_eq!(second.status, AgentStatus::Failed, "{second:?}");
    let error = second.error.unwrap_or_default();
    assert!(error.contains("not fresh"), "{error}");
    assert_eq!(root_tokens(&tree), 24);
    tree.shutdown().await;
    process.finish();
}

/// A lead that spawns a detached remote runner doing `task` in the background and answers
/// at once: the tree, the runner (live after its lead's run ended) and the worker.
async fn detached_runner_after_its_lead(
    owner: &mut Owner,
    task: &str,
) -> (Tree, AgentId, WorkerProcess) {
    let (name, process) = owner.worker().await;
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn_background("runner", task),
            Turn::answer("lead done"),
        ]),
    );
    let tree = super::tree_of(
        owner,
        vec![runner().on_node(&name).detached(), lead_of(&["runner"])],
        model,
        TreeConfig::default(),
    )
    .await;
    let lead = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(lead.text.as_deref(), Some("lead done"), "{lead:?}");
    let runner = super::records_of(&tree, "runner")
        .pop()
        .expect("the runner's record")
        .id;
    (tree, runner, process)
}

/// A detached remote child whose owner agent has ended asks its owner: as a local agent's
/// `ask_owner` does (refused at once, "the owner is gone"), it gets an answer and ends;
/// it must not wait forever for an owner that no longer exists.
pub(crate) async fn review4_a_detached_remote_child_asking_its_ended_owner_is_answered(
    owner: &mut Owner,
) {
    let (tree, runner, mut process) = detached_runner_after_its_lead(owner, "ask what now?").await;
    let mut handle = tree.handle(runner).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome()).await;
    let Ok(outcome) = outcome else {
        let record = tree.record(runner).unwrap();
        panic!(
            "the detached remote child still waits for its gone owner's answer after 10 s: {:?}",
            record.status
        );
    };
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    assert!(
        outcome
            .text
            .as_deref()
            .is_some_and(|t| t.starts_with("answered:")),
        "{outcome:?}"
    );
    tree.shutdown().await;
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
}

/// A detached remote child outlives its owner agent: it runs on after the lead's run
/// ended, completes, and its usage is counted once at the root (untested so far).
pub(crate) async fn review4_a_detached_remote_child_outlives_its_owner_and_counts_once(
    owner: &mut Owner,
) {
    let (tree, runner, mut process) = detached_runner_after_its_lead(owner, "work 4 100").await;
    assert!(
        tree.record(runner).unwrap().status.is_live(),
        "the detached remote child runs on after its owner"
    );
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        tree.handle(runner).unwrap().outcome(),
    )
    .await
    .expect("the detached remote child settles");
    assert_eq!(outcome.text.as_deref(), Some("done 4"), "{outcome:?}");
    assert_eq!(root_tokens(&tree), 48);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 48, 0));
    tree.shutdown().await;
    process.finish();
}

/// Top-level background remote spawns under `max_concurrent(1)`: one runs, the others wait
/// `queued` for the slot, each starts its stand-in when it gets it, all complete, and the
/// root's totals equal the sum of the records (snapshot and `render_text` agree, untested
/// so far).
pub(crate) async fn review4_pooled_background_remote_spawns_queue_and_count_once(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let tree = super::tree_of(
        owner,
        vec![runner().on_node(&name)],
        ScriptedModel::new(),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let handle = tree
            .spawn(SpawnRequest::new("runner", "work 2 100").background())
            .await
            .unwrap();
        ids.push(handle.id());
    }
    assert_eq!(tree.record(ids[2]).unwrap().status, AgentStatus::Queued);
    assert!(
        owner.node.stats().stand_ins <= 1,
        "one pool slot, one stand-in"
    );
    let outcomes = tokio::time::timeout(
        Duration::from_secs(30),
        tree.wait(&ids, agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("the pooled remote children settle");
    for outcome in &outcomes {
        assert_eq!(outcome.text.as_deref(), Some("done 2"), "{outcome:?}");
    }
    let snapshot = tree.snapshot();
    let sum: u64 = snapshot.records.iter().map(|r| r.own.total_tokens()).sum();
    assert_eq!(root_tokens(&tree), 72);
    assert_eq!(sum, 72, "the records' own usage sums to the root's");
    let text = snapshot.render_text();
    assert!(text.contains("runner"), "{text}");
    for id in &ids {
        let mirror = tree
            .remote_records(*id)
            .await
            .expect("a remote child's mirror");
        assert_eq!(mirror[1].subtree.total_tokens(), 24);
    }
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 72, 0));
    tree.shutdown().await;
    process.finish();
}
