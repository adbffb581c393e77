//! Workers whose hosted trees journal: each hosted tree needs a journal of its own (one per
//! edge serves spawns; one file for the node refuses the second spawn with the reason), and
//! a hosted journal that dropped a settled agent's conversation from memory does not stop
//! its owner resuming it.

use super::support::runner_within;
use super::support::{spawn_runner, within};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_tree::JournalConfig;
use agent_tree::protocol::{AgentStatus, SpawnRequest};

use super::support::shut_down_and_finish;
use super::support::{Dir, maybe_journaled_tree, resumed_outcome};
use super::worker::{self, WorkerArgs, WorkerProcess};
use super::{Owner, root_tokens, runner, worker_idle};

/// The journal path a `journaled` worker's hosted trees share (or, `journaled-unique`, the
/// directory their per-edge journals go in).
const JOURNAL_ENV: &str = "AGENT_TREE_CLUSTER_WORKER_JOURNAL";

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
    shut_down_and_finish(&tree, process).await;
}

/// A worker whose factory gives every hosted tree a journal of its own: spawns work, usage
/// counts once.
pub(crate) async fn hosted_trees_with_a_journal_per_edge_serve_spawns(owner: &mut Owner) {
    let dir = Dir::new("hosted-unique");
    two_sequential_runs(owner, "journaled-unique", &dir.0).await;
}

/// A worker whose factory sets one journal path (the natural "a journal for this node"):
/// its second hosted tree, one after the other, would recover the first's journal, whose
/// ids and event numbers are not the new edge's. The node refuses that spawn with the
/// reason (never a hang): each hosted tree needs a journal of its own.
pub(crate) async fn hosted_trees_journaling_to_one_file_refuse_a_second_spawn(owner: &mut Owner) {
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
    let second = runner_within(&tree, 20, "the second run settles", "work 2 10").await;
    assert_eq!(second.status, AgentStatus::Failed, "{second:?}");
    let error = second.error.unwrap_or_default();
    assert!(error.contains("not fresh"), "{error}");
    assert_eq!(root_tokens(&tree), 24);
    shut_down_and_finish(&tree, process).await;
}

/// A worker whose hosted trees each journal to a file of their own drops a settled top
/// agent's conversation from memory at its settle; it went up before (turn by turn, and as
/// the run ended), so the owner's node has it: the empty resume continues it (`count`
/// answers 2), one with a prompt too (4); usage counts once.
pub(crate) async fn a_hosted_journal_that_dropped_the_conversation_still_resumes_it(
    owner: &mut Owner,
) {
    let dir = Dir::new("hosted-journal");
    let (name, mut process) = journaled_worker(owner, "journaled-unique", &dir.0).await;
    let tree = maybe_journaled_tree(&owner.node, &name, None).await;
    let mut handle = spawn_runner(&tree, "count").await;
    let id = handle.id();
    let first = within(20, "the remote child settles", handle.outcome()).await;
    assert_eq!(first.text.as_deref(), Some("messages 1"), "{first:?}");
    let outcome = resumed_outcome(&tree, id, "").await;
    assert_eq!(outcome.text.as_deref(), Some("messages 2"), "{outcome:?}");
    let outcome = resumed_outcome(&tree, id, "count").await;
    assert_eq!(outcome.text.as_deref(), Some("messages 4"), "{outcome:?}");
    assert_eq!(root_tokens(&tree), 36);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, tokens, edges), (0, 36, 0));
    shut_down_and_finish(&tree, process).await;
}
