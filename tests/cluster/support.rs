//! Scaffolding the scenarios share beyond the harness: a temporary directory, and what the
//! scenarios comparing a remote agent with a local one (the spec) need: the same worker
//! model and tools in a local tree on the owner's process, and what a tree keeps of an
//! agent's conversation, read from its journal (`agent_tree::protocol::replay`), which
//! holds each agent's last conversation as its cell does.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_tree::cluster::Node;
use agent_tree::protocol::{AgentDefinition, AgentId, Message, Outcome, SpawnRequest};
use agent_tree::testkit::ScriptedModel;
use agent_tree::{AgentHandle, Catalog, JournalConfig, Tree};

use super::worker;
use super::worker::WorkerProcess;
use super::{Owner, first_usage, runner, worker_idle};

/// A fresh directory, removed when dropped.
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

/// What a `steps` or `count` run answered: how many messages its last turn was sent.
pub(crate) fn messages_sent(outcome: &agent_tree::protocol::Outcome) -> usize {
    outcome
        .text
        .as_deref()
        .and_then(|t| t.strip_prefix("messages "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a count of messages: {outcome:?}"))
}

/// An owner tree placing `runner` on `worker`, journaled to `journal`.
pub(crate) async fn owner_tree(node: &Node, worker: &str, journal: &Path) -> Tree {
    owner_tree_of(node, vec![runner().on_node(worker)], journal).await
}

/// An owner tree of `definitions` (placed as they say), journaled to `journal`.
pub(crate) async fn owner_tree_of(
    node: &Node,
    definitions: Vec<AgentDefinition>,
    journal: &Path,
) -> Tree {
    owner_tree_journaled(node, definitions, Some(JournalConfig::new(journal))).await
}

/// An owner tree of `definitions` (placed as they say), journaled as `journal` says.
pub(crate) async fn owner_tree_journaled(
    node: &Node,
    definitions: Vec<AgentDefinition>,
    journal: Option<JournalConfig>,
) -> Tree {
    let mut builder = Tree::builder()
        .catalog(Catalog::new(definitions).unwrap())
        .model(ScriptedModel::new())
        .node(node);
    if let Some(journal) = journal {
        builder = builder.journal(journal);
    }
    builder.build().await.expect("the owner tree builds")
}

/// The spec: a local tree with the worker's catalog, model and tools, journaled.
pub(crate) async fn local_tree(journal: &Path) -> Tree {
    local_tree_journaled(JournalConfig::new(journal)).await
}

/// The spec, journaled as `journal` says.
pub(crate) async fn local_tree_journaled(journal: JournalConfig) -> Tree {
    worker::hosted_tree()
        .journal(journal)
        .build()
        .await
        .expect("the local tree builds")
}

/// The tree of one side, journaled as `journal` says: remote (an owner tree placing
/// `runner` on the named worker of the node) or, with no side, the local spec.
pub(crate) async fn side_tree(side: Option<(&Node, &str)>, journal: JournalConfig) -> Tree {
    match side {
        Some((node, name)) => {
            owner_tree_journaled(node, vec![runner().on_node(name)], Some(journal)).await
        }
        None => local_tree_journaled(journal).await,
    }
}

/// The journal at `path` replayed (after `tree`'s journal is flushed).
pub(crate) async fn replayed(tree: &Tree, path: &Path) -> agent_tree::protocol::Replay {
    tree.flush_journal().await;
    let bytes = std::fs::read(path).expect("the journal file");
    agent_tree::protocol::replay(&bytes, None)
        .unwrap_or_else(|e| panic!("the journal {} replays: {e}", path.display()))
}

/// The conversation `tree` keeps for `id`, as its journal holds it.
pub(crate) async fn kept(tree: &Tree, path: &Path, id: AgentId) -> Vec<Message> {
    replayed(tree, path)
        .await
        .conversations
        .get(&id)
        .map(|(_, m)| m.to_vec())
        .unwrap_or_default()
}

/// A compact rendering of a conversation: role and content per message, tool calls by name.
pub(crate) fn render(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            let calls: Vec<String> = m.tool_calls.iter().map(|c| c.name.clone()).collect();
            let content: String = m.content.chars().take(60).collect();
            format!("{:?}:{content}{calls:?}", m.role)
        })
        .collect()
}

pub(crate) async fn settled(handle: &mut agent_tree::AgentHandle, what: &str) -> Outcome {
    tokio::time::timeout(Duration::from_secs(30), handle.outcome())
        .await
        .unwrap_or_else(|_| panic!("{what} settles"))
}

/// Runs `n` `count` runners on `tree` to their end first, so the ids of the runner that
/// follows differ between the owner's tree and its node.
pub(crate) async fn others_first(tree: &Tree, n: usize) {
    for _ in 0..n {
        let mut other = tree
            .spawn(SpawnRequest::new("runner", "count"))
            .await
            .unwrap();
        settled(&mut other, "an agent before the runner").await;
    }
}

/// Resumes `id` with `prompt` and waits (at most 30 s) for the resumed run's outcome.
pub(crate) async fn resumed(tree: &Tree, id: AgentId, prompt: &str) -> Outcome {
    resumed_within(30, tree, id, prompt).await
}

/// An owner tree placing `runner` on `worker`; journaled to `journal` when given.
pub(crate) async fn maybe_journaled_tree(
    node: &Node,
    worker: &str,
    journal: Option<&Path>,
) -> Tree {
    owner_tree_journaled(
        node,
        vec![runner().on_node(worker)],
        journal.map(JournalConfig::new),
    )
    .await
}

/// Resumes `id` with `prompt` and waits (at most 20 s) for the resumed run's outcome.
pub(crate) async fn resumed_outcome(tree: &Tree, id: AgentId, prompt: &str) -> Outcome {
    resumed_within(20, tree, id, prompt).await
}

/// Resumes `id` with `prompt` and waits (at most `secs`) for the resumed run's outcome.
async fn resumed_within(secs: u64, tree: &Tree, id: AgentId, prompt: &str) -> Outcome {
    let mut handle = tree
        .resume(id, prompt)
        .await
        .unwrap_or_else(|e| panic!("the resume ({prompt:?}) of {id} starts: {e}"));
    within(
        secs,
        &format!("the resumed run ({prompt:?}) of {id} settles"),
        handle.outcome(),
    )
    .await
}

/// `future`'s output, or a panic saying `what` did not happen within `secs` seconds.
pub(crate) async fn within<T>(
    secs: u64,
    what: &str,
    future: impl std::future::Future<Output = T>,
) -> T {
    tokio::time::timeout(Duration::from_secs(secs), future)
        .await
        .unwrap_or_else(|_| panic!("{what} (within {secs} s)"))
}

/// A `runner` spawned on `tree` with `prompt`.
pub(crate) async fn spawn_runner(
    tree: &Tree,
    prompt: impl Into<String>,
) -> agent_tree::AgentHandle {
    tree.spawn(SpawnRequest::new("runner", prompt))
        .await
        .expect("the runner spawns")
}

/// A `runner` spawned on `tree` with `prompt` and run to its end, which answers `expected`.
pub(crate) async fn runner_answered(tree: &Tree, prompt: &str, expected: &str) -> AgentId {
    let mut handle = spawn_runner(tree, prompt).await;
    let outcome = handle.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some(expected), "{outcome:?}");
    handle.id()
}

/// Asserts the worker `process` ends up hosting no live agent and no edge, and ends it.
pub(crate) fn finish_idle(mut process: WorkerProcess) {
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
}

/// Asserts no failure was collected, listing them one a line.
pub(crate) fn no_failures(failures: &[String]) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One side's journaled tree in a fresh directory named `dir`: remote (an owner tree placing
/// `runner` on `worker`) or the local spec; the directory, the journal's path and the tree.
pub(crate) async fn journaled_side(
    node: &Node,
    worker: &str,
    remote: bool,
    dir: &str,
) -> (Dir, PathBuf, Tree) {
    let dir = Dir::new(dir);
    let path = dir.file("tree.journal");
    let tree = side_tree(remote.then_some((node, worker)), JournalConfig::new(&path)).await;
    (dir, path, tree)
}

/// A `runner` spawned on `tree` with `prompt`, placed on `node`.
pub(crate) async fn spawn_runner_on(
    tree: &Tree,
    prompt: &str,
    node: &str,
) -> agent_tree::AgentHandle {
    tree.spawn(SpawnRequest::new("runner", prompt).on_node(node))
        .await
        .expect("the runner spawns")
}

/// `request` run on `tree` to its end, within `secs` s (`what` naming it); its outcome.
pub(crate) async fn run_within(
    secs: u64,
    what: &str,
    tree: &Tree,
    request: SpawnRequest,
) -> Outcome {
    within(secs, what, tree.run(request))
        .await
        .unwrap_or_else(|e| panic!("{what}: the spawn is refused: {e}"))
}

/// `lead` run on `tree` with the task `go`, to its end within `secs` s.
pub(crate) async fn lead_settles(tree: &Tree, secs: u64) -> Outcome {
    run_within(
        secs,
        "the lead settles",
        tree,
        SpawnRequest::new("lead", "go"),
    )
    .await
}

/// [`lead_settles`], checked to have completed.
pub(crate) async fn lead_completes(tree: &Tree, secs: u64) -> Outcome {
    let outcome = lead_settles(tree, secs).await;
    assert_eq!(
        outcome.status,
        agent_tree::protocol::AgentStatus::Completed,
        "{outcome:?}"
    );
    outcome
}

/// Collects in `failures` a line naming `round` when the local side (`sides[0]`) and the
/// remote one (`sides[1]`) differ.
pub(crate) fn compare_sides<T: PartialEq + std::fmt::Debug>(
    round: u32,
    sides: &[T],
    failures: &mut Vec<String>,
) {
    if sides[0] != sides[1] {
        failures.push(format!(
            "round {round}: local {:#?}\n remote {:#?}",
            sides[0], sides[1]
        ));
    }
}

/// [`finish_idle`] of `process`, then [`no_failures`] of `failures`.
pub(crate) fn finish_without_failures(process: WorkerProcess, failures: &[String]) {
    finish_idle(process);
    no_failures(failures);
}

/// A `runner` run on `tree` with `prompt`, to its end within `secs` s (`what` naming it).
pub(crate) async fn runner_within(tree: &Tree, secs: u64, what: &str, prompt: &str) -> Outcome {
    run_within(secs, what, tree, SpawnRequest::new("runner", prompt)).await
}

/// A fresh worker, an owner tree placing `runner` on it, and a `runner` spawned there with
/// `prompt`, once it billed its first usage: the worker's process, the tree and the
/// runner's handle.
pub(crate) async fn runner_working(
    owner: &mut Owner,
    prompt: &str,
) -> (WorkerProcess, Tree, AgentHandle) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let handle = spawn_runner(&tree, prompt).await;
    first_usage(&tree, handle.id()).await;
    (process, tree, handle)
}

/// Shuts `tree` down, then waits for the worker `process` to end.
pub(crate) async fn shut_down_and_finish(tree: &Tree, process: WorkerProcess) {
    tree.shutdown().await;
    process.finish();
}

/// `lead` run on `tree` with `prompt`, checked to answer `the lead is done`: the tree's
/// snapshot then.
pub(crate) async fn lead_done(tree: &Tree, prompt: &str) -> agent_tree::protocol::TreeSnapshot {
    let outcome = tree.run(SpawnRequest::new("lead", prompt)).await.unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("the lead is done"),
        "{outcome:?}"
    );
    tree.snapshot()
}

/// The first record of `agent_type` in `snapshot`.
pub(crate) fn record_of_type<'s>(
    snapshot: &'s agent_tree::protocol::TreeSnapshot,
    agent_type: &str,
) -> &'s agent_tree::protocol::AgentRecord {
    snapshot
        .records
        .iter()
        .find(|r| r.agent_type == agent_type)
        .unwrap_or_else(|| panic!("no {agent_type} record"))
}

/// A fresh worker and an owner tree of a transient `flaky` placed on it, where a `flaky`
/// spawned to `fail-first` failed once, was restarted and answered `recovered` (checked):
/// the worker's process, the tree and the flaky's id.
pub(crate) async fn flaky_restarted_once(owner: &mut Owner) -> (WorkerProcess, Tree, AgentId) {
    let (name, process) = owner.worker().await;
    let tree = flaky_tree(owner, &name).await;
    let id = tree
        .spawn(SpawnRequest::new("flaky", "fail-first"))
        .await
        .unwrap()
        .id();
    let outcome = settled_within_10s(&tree, id).await;
    assert_eq!(outcome[0].text.as_deref(), Some("recovered"), "{outcome:?}");
    assert_eq!(tree.record(id).unwrap().incarnation, 2);
    (process, tree, id)
}

/// An owner tree of a transient `flaky` placed on `worker`.
pub(crate) async fn flaky_tree(owner: &Owner, worker: &str) -> Tree {
    super::tree_of(
        owner,
        vec![
            AgentDefinition::new("flaky", "")
                .with_restart(agent_tree::protocol::RestartPolicy::Transient)
                .on_node(worker),
        ],
        ScriptedModel::new(),
        agent_tree::TreeConfig::default(),
    )
    .await
}

/// The outcomes of a wait on `id` alone (every one settled), within 10 s.
pub(crate) async fn settled_within_10s(tree: &Tree, id: AgentId) -> Vec<Outcome> {
    within(
        10,
        "settles",
        tree.wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
}

/// With a fresh worker, runs `side` for `rounds` rounds on a local then a remote journaled
/// side (each in a fresh directory named `dir`, its tree shut down after), recording each
/// round where what the two sides returned differs; then checks the worker idle and that no
/// round differed.
pub(crate) async fn local_and_remote_rounds<T, F>(
    owner: &mut Owner,
    rounds: u32,
    dir: &str,
    mut side: F,
) where
    T: PartialEq + std::fmt::Debug,
    F: for<'a> FnMut(&'a Tree, &'a Path) -> agent_tree::BoxFuture<'a, T>,
{
    let (name, process) = owner.worker().await;
    let mut failures = Vec::new();
    for round in 0..rounds {
        let mut sides = Vec::new();
        for remote in [false, true] {
            let (_dir, path, tree) = journaled_side(&owner.node, &name, remote, dir).await;
            sides.push(side(&tree, &path).await);
            tree.shutdown().await;
        }
        compare_sides(round, &sides, &mut failures);
    }
    finish_without_failures(process, &failures);
}

/// With a fresh worker, runs `side` for `rounds` rounds on a local then a remote journaled
/// side (each in a fresh directory named `dir`, its tree shut down after), recording what
/// went wrong where `side` says so, named by side and round; then checks the worker idle
/// and that nothing went wrong.
pub(crate) async fn each_side_in_rounds<F>(owner: &mut Owner, rounds: u32, dir: &str, mut side: F)
where
    F: for<'a> FnMut(&'a Tree, &'a Path) -> agent_tree::BoxFuture<'a, Option<String>>,
{
    let (name, process) = owner.worker().await;
    let mut failures = Vec::new();
    for round in 0..rounds {
        for remote in [false, true] {
            let (_dir, path, tree) = journaled_side(&owner.node, &name, remote, dir).await;
            if let Some(wrong) = side(&tree, &path).await {
                failures.push(format!("remote {remote} round {round}: {wrong}"));
            }
            tree.shutdown().await;
        }
    }
    finish_without_failures(process, &failures);
}
