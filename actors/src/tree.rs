//! The tree: the application's handle, the root of every agent's supervision chain.
//!
//! [`Tree`]'s methods are grouped by what a user does with them, one `impl` block per
//! section, in the order the docs show them: building and settings, running agents (the
//! verbs), reading records, the journal, nodes. The builder is `tree/builder.rs`, the
//! handle on one agent `tree/handle.rs`; opening and recovering a journal file is the
//! journal's (`journal/recovery.rs`).

mod builder;
mod handle;

use std::sync::Arc;

use agent_tree_protocol::{
    AgentDefinition, AgentId, AgentRecord, AgentStatus, EndReason, Outcome, SessionId,
    SpawnRequest, TreeSnapshot, Usage, WaitPolicy,
};
pub use builder::TreeBuilder;
pub use handle::AgentHandle;
use handle::taken;
use parking_lot::RwLock;
use ractor::ActorRef;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::config::{SHUTDOWN_KILL_WAIT as KILL_WAIT, TreeConfig};
use crate::error::{ControlError, SpawnError};
use crate::events::EventStream;
use crate::msg::{AgentMsg, SteerReceipt};
use crate::registry::SteerRoute;
use crate::shared::{Branch, SharedRef};
use crate::shutdown::{self, ShutdownReport};
use crate::spawn::{self, SpawnSpec, Spawned};
use crate::wait;

/// A tree of agents: holds the config, the catalog, the model, the tools and the registry,
/// and supervises the top-level agents through its root actor.
///
/// The application is the root supervisor: it may inspect every record and stop any subtree.
///
/// Dropping a `Tree` without [`Tree::shutdown`] aborts every agent (their tokens are
/// cancelled, so no further model call starts) and stops the root actor at once, which kills
/// what is left without running shutdown work. Call [`Tree::shutdown`] for a graceful stop.
/// A journal file is closed either way: the drop (blocking its thread for as long as the
/// writer takes to write and sync what it was handed) or the shutdown returns with the file
/// written, synced and free for another tree; what the dying agents of a dropped tree emit
/// afterwards is not journaled (recovery finds them interrupted, as after a crash).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest, Usage};
/// use agent_tree_actors::testkit::{Script, ScriptedModel, Turn};
///
/// let model = ScriptedModel::new()
///     .script("greeter", Script::new([Turn::answer("hello").usage(Usage::tokens(10, 2))]));
/// let catalog = Catalog::new([AgentDefinition::new("greeter", "Say hello.")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let outcome = tree.run(SpawnRequest::new("greeter", "hi")).await.unwrap();
/// assert_eq!(outcome.text.as_deref(), Some("hello"));
/// assert_eq!(tree.snapshot().root().unwrap().subtree.total_tokens(), 12);
/// tree.shutdown().await;
/// # }
/// ```
#[derive(Debug)]
pub struct Tree {
    pub(crate) shared: SharedRef,
    root: ActorRef<AgentMsg>,
    root_token: CancellationToken,
    /// What new top-level branches start with; existing branches keep their own.
    branch: RwLock<Arc<Branch>>,
    /// What serves the tools of the tree's [`ToolSource`](crate::ToolSource)s: ended by the
    /// shutdown, beside the agents, or killed when the tree is dropped.
    sources: crate::tool::ToolSources,
    /// Set once a shutdown has run; dropping the tree then has nothing left to do.
    stopped: std::sync::atomic::AtomicBool,
}

/// Makes the definition a top agent runs from its catalog definition, given whether it
/// inherits a conversation ([`TopSpawn::adapt`]).
pub(crate) type Adapt<'a> = dyn Fn(&Arc<AgentDefinition>, bool) -> Arc<AgentDefinition> + Sync + 'a;

/// How a top-level spawn differs from the application's [`Tree::spawn`]: only a
/// placement's host makes one other than the default.
#[derive(Default)]
pub(crate) struct TopSpawn<'a> {
    /// Makes the definition the agent runs from the catalog's (given whether the agent
    /// inherits a conversation): the host's own copy of it.
    pub(crate) adapt: Option<&'a Adapt<'a>>,
    /// The conversation the agent starts with, before its task (its owner decided it
    /// inherits it), or, with `resumed`, its own conversation, continued: the task is the
    /// next user message, an empty one adds none, and its children never outlive the run.
    pub(crate) inherited: &'a [agent_tree_protocol::Message],
    /// A resumed run: `inherited` is its own conversation.
    pub(crate) resumed: bool,
    /// With `resumed`, continued from another tree: the children of its earlier runs,
    /// which that conversation names, seeded as settled records under it.
    pub(crate) earlier: Option<crate::registry::Earlier<'a>>,
}

/// # Building and settings
///
/// The builder, the tree's session and clock, its config, and the catalog and pool that new
/// top-level work starts with.
impl Tree {
    /// A builder with the default config, an empty catalog and no model.
    pub fn builder() -> TreeBuilder {
        TreeBuilder::default()
    }

    /// The tree's session id.
    pub fn session(&self) -> &SessionId {
        self.shared.registry.session()
    }

    /// The instant (tokio time) every `*_ms` field of records and events counts from.
    pub fn epoch(&self) -> Instant {
        self.shared.registry.epoch()
    }

    /// The tree's config.
    pub fn config(&self) -> &TreeConfig {
        &self.shared.config
    }

    /// The catalog new top-level branches start with.
    pub fn catalog(&self) -> Catalog {
        self.branch.read().catalog.clone()
    }

    /// Replaces the catalog and depth cap that *new* top-level branches start with. Running
    /// branches keep the catalog and cap they started with.
    pub fn set_branch_defaults(&self, catalog: Catalog, max_depth: u32) {
        *self.branch.write() = Arc::new(Branch { catalog, max_depth });
    }

    /// Resizes the pool of top-level background agents; raising it starts queued agents.
    pub fn set_max_concurrent(&self, max: usize) {
        self.shared.registry.set_max_concurrent(max);
        let _ = self.root.cast(AgentMsg::PoolChanged);
    }
}

/// # Running agents
///
/// The application's verbs: start a top-level agent ([`Tree::spawn`], or [`Tree::run`] to
/// wait for its outcome too), resume a settled one, steer, abort, kill or bill any agent, wait
/// for a set of them, and shut the tree or a subtree down under one deadline.
impl Tree {
    /// Starts a top-level agent (depth 1) and returns its handle at once.
    ///
    /// A background request (the request's `background`, else the definition's
    /// `run_in_background`) takes a slot of the `max_concurrent` pool; when the pool is full
    /// it waits, FIFO, with status `queued`.
    ///
    /// # Errors
    ///
    /// A [`SpawnError`] when the type does not resolve or admission refuses the slot.
    pub async fn spawn(&self, request: SpawnRequest) -> Result<AgentHandle, SpawnError> {
        self.spawn_top(request, TopSpawn::default()).await
    }

    /// As [`Tree::spawn`], the way `top` says (a placement's host spawning a remote
    /// owner's child).
    pub(crate) async fn spawn_top(
        &self,
        request: SpawnRequest,
        top: TopSpawn<'_>,
    ) -> Result<AgentHandle, SpawnError> {
        let TopSpawn {
            adapt,
            inherited,
            resumed,
            earlier,
        } = top;
        if let Some(journal) = &self.shared.journal {
            journal.room().await;
        }
        let branch = self.branch.read().clone();
        let mut definition = branch.catalog.resolve(&request.agent_type)?.clone();
        if let Some(adapt) = adapt {
            definition = adapt(&definition, !inherited.is_empty());
        }
        let pooled = request.background.unwrap_or(definition.run_in_background);
        let spawned = spawn::spawn(
            &self.shared,
            SpawnSpec {
                owner: AgentId::ROOT,
                owner_actor: &self.root,
                owner_capabilities: None,
                owner_conversation: inherited,
                definition,
                branch,
                request,
                pooled,
                owner_span: crate::util::SpanSlot::new(self.shared.span.clone()),
                resumed,
                earlier,
            },
        )
        .await;
        if pooled && !matches!(spawned, Ok(Spawned::New { .. })) {
            // Queued while a slot may be free (behind the queue), or a failed start freed
            // its slot: the root starts whoever is at the head.
            let _ = self.root.cast(AgentMsg::PoolChanged);
        }
        let id = match spawned? {
            Spawned::New { id, .. } | Spawned::Queued(id) | Spawned::Existing(id) => id,
        };
        self.handle(id)
            .ok_or(SpawnError::OwnerClosed(AgentId::ROOT))
    }

    /// Starts a top-level agent and waits for its outcome (synced to the journal first,
    /// with [`Durability::EveryEntry`](crate::Durability)).
    ///
    /// # Errors
    ///
    /// As [`Tree::spawn`].
    pub async fn run(&self, request: SpawnRequest) -> Result<Outcome, SpawnError> {
        let mut handle = self.spawn(request).await?;
        Ok(handle.outcome().await)
    }

    /// A handle on any agent of the tree.
    pub fn handle(&self, id: AgentId) -> Option<AgentHandle> {
        let settled = self.shared.registry.watch(id)?;
        Some(AgentHandle::new(id, settled, &self.shared))
    }

    /// Resumes a settled top-level agent with a new prompt: its conversation continues in a
    /// new run, with the definition, catalog and depth cap its branch started with; children
    /// spawned during that run are aborted when it ends. A refused resume changes nothing.
    ///
    /// An empty prompt adds no message: the conversation continues as it is. For an agent a
    /// crash interrupted ([`Tree::interrupted`]) that re-runs the turn the crash cut off,
    /// and the spawns it re-issues (at the same places) find the children the lost turn
    /// started; one the crash cut off before its first turn continues from its task, as its
    /// first run would have started. One a crash cut off waiting on its owner's answer to
    /// `ask_owner` does not re-run the asking turn: with an empty prompt it puts the
    /// question again, and a prompt is the answer (top-level agents waiting on the
    /// application are resumed so when the tree is built, with a question handler). For an
    /// agent that gave its final answer, the model is asked again with that
    /// answer last, which Anthropic's API reads as a prefill to continue: give a prompt to
    /// ask for something new.
    ///
    /// # Errors
    ///
    /// [`SpawnError::Control`] when the agent is not top-level or is still live (running or
    /// queued), or an admission refusal.
    pub async fn resume(
        &self,
        id: AgentId,
        prompt: impl Into<String>,
    ) -> Result<AgentHandle, SpawnError> {
        let ticket = spawn::reopen(&self.shared, id, AgentId::ROOT, prompt.into(), None).await?;
        spawn::start(&self.shared, ticket, &self.root).await?;
        self.handle(id)
            .ok_or(SpawnError::OwnerClosed(AgentId::ROOT))
    }

    /// Steers any agent: the text enters its conversation at its next turn boundary, or
    /// answers its pending `ask_owner` question if it asked the application. A steer to an
    /// agent whose session does not exist yet (queued, or starting) waits, in order, and is
    /// delivered when it starts.
    ///
    /// # Errors
    ///
    /// [`ControlError::NotYours`] for an unknown id or the root, [`ControlError::WrongStatus`]
    /// for a settled agent.
    pub async fn steer(
        &self,
        id: AgentId,
        text: impl Into<String>,
    ) -> Result<SteerReceipt, ControlError> {
        if id.is_root() {
            return Err(ControlError::NotYours(id));
        }
        let text = text.into();
        match self
            .shared
            .registry
            .route_steer(id, text.clone(), &self.shared.config)?
        {
            SteerRoute::Queued => Ok(SteerReceipt::Queued),
            SteerRoute::Actor(cell) => {
                let actor = ActorRef::<AgentMsg>::from(cell);
                let gone = || {
                    let status = self
                        .shared
                        .registry
                        .status(id)
                        .unwrap_or(AgentStatus::Completed);
                    ControlError::WrongStatus(id, status)
                };
                crate::msg::ask(&actor, |reply| AgentMsg::Steer {
                    text,
                    from: AgentId::ROOT,
                    reply: Some(reply),
                })
                .await
                .ok_or_else(gone)?
            }
        }
    }

    /// Aborts an agent and its whole non-detached subtree at once.
    ///
    /// # Errors
    ///
    /// [`ControlError::NotYours`] for an unknown id.
    pub fn abort(&self, id: AgentId) -> Result<(), ControlError> {
        if id.is_root() {
            return Err(ControlError::NotYours(id));
        }
        self.shared.registry.abort(id, EndReason::Aborted)
    }

    /// Kills an agent's actor at once, as Erlang's `exit(Pid, kill)`: no shutdown hooks, no
    /// graceful settle. Its live descendants die with it (ractor kills linked actors) and are
    /// recorded `killed`; the agent itself is recorded `killed` and its owner decides on a
    /// restart as for any crash (permanent and transient agents restart).
    ///
    /// # Errors
    ///
    /// [`ControlError::NotYours`] for an unknown id or the root; [`ControlError::WrongStatus`]
    /// for an agent without a running actor (settled, queued or still starting).
    pub fn kill(&self, id: AgentId) -> Result<(), ControlError> {
        self.shared.registry.kill(id)
    }

    /// Bills usage spent on an agent's behalf outside its model turns (a tool that calls a
    /// model itself, an embedding lookup) to the agent: it is added to the agent's `own` and to
    /// the `subtree` of the agent and every ancestor in one step, with a `usage` event, and
    /// counts against `max_subtree_tokens` like a turn's usage. It costs one registry
    /// transaction whatever the agent's depth.
    ///
    /// ```
    /// # tokio_test_block_on(async {
    /// use agent_tree_actors::testkit::{Script, ScriptedModel, Turn};
    /// use agent_tree_actors::{Catalog, Tree};
    /// use agent_tree_protocol::{AgentDefinition, AgentId, SpawnRequest, Usage};
    ///
    /// let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    /// let tree = Tree::builder()
    ///     .catalog(Catalog::new([AgentDefinition::new("w", "")]).unwrap())
    ///     .model(model)
    ///     .build()
    ///     .await
    ///     .unwrap();
    /// let agent = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap().id();
    /// tree.charge(agent, Usage::tokens(10, 5)).unwrap();
    /// assert_eq!(tree.record(AgentId::ROOT).unwrap().subtree, Usage::tokens(10, 5));
    /// tree.shutdown().await;
    /// assert!(tree.charge(agent, Usage::tokens(1, 1)).is_err(), "settled: nothing more is billed");
    /// # });
    /// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ControlError::NotYours`] for an unknown id or the root (no agent: usage is charged
    /// to the agent that spent it, and reaches the root's subtree total from there),
    /// [`ControlError::WrongStatus`] for an agent that is not live (its usage is final once
    /// it settled).
    pub fn charge(&self, id: AgentId, usage: Usage) -> Result<(), ControlError> {
        if id.is_root() {
            return Err(ControlError::NotYours(id));
        }
        self.shared.registry.charge(id, usage)
    }

    /// Waits for every agent of `ids` under `policy` and returns their outcomes in order:
    /// `all_settled` waits for all; `fail_fast` aborts the rest of the set at the first
    /// outcome that is not `completed`. Cancelling the wait leaves the agents running.
    /// With [`Durability::EveryEntry`](crate::Durability) the outcomes are synced to the
    /// journal before they are returned.
    pub async fn wait(&self, ids: &[AgentId], policy: WaitPolicy) -> Vec<Outcome> {
        let outcomes = wait::wait_set(&self.shared.registry, ids, policy).await;
        let mut whole = Vec::with_capacity(outcomes.len());
        for (&id, outcome) in ids.iter().zip(outcomes) {
            whole.push(taken(&self.shared, id, outcome).await);
        }
        whole
    }

    /// Waits until no agent is live.
    pub async fn idle(&self) {
        self.shared.registry.idle().await;
    }

    /// Shuts the whole tree down: every agent is told at once, runs its shutdown hooks, and
    /// settles (children before owners) under one deadline, the config's `shutdown_grace`,
    /// whatever the tree's depth and width; whatever is alive at the deadline is killed. It
    /// returns after at most the grace plus a small constant. Records stay readable; the tree
    /// admits no new agent afterwards.
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(self.shared.config.shutdown_grace)
            .await
    }

    /// As [`Tree::shutdown`], under a deadline `within` from now instead of the config's
    /// grace (a hosted tree shuts down by its remote owner's deadline).
    pub(crate) async fn shutdown_within(&self, within: std::time::Duration) -> ShutdownReport {
        let deadline = deadline_in(within);
        let (report, ()) = tokio::join!(
            shutdown::run(&self.shared.registry, AgentId::ROOT, deadline),
            self.sources.shutdown(deadline),
        );
        let report = self.with_unreachable_nodes(report);
        // The root's stop shares the one small bound after the deadline.
        let _ = tokio::time::timeout_at(deadline + KILL_WAIT, self.root.stop_and_wait(None, None))
            .await;
        self.shared.registry.settle_root();
        self.stopped
            .store(true, std::sync::atomic::Ordering::Release);
        // Everything the shutdown emitted is on disk before it returns (outside the grace:
        // agents are done by now), and the file is free for another tree.
        self.flush_journal().await;
        if let Some(journal) = &self.shared.journal {
            journal.close().await;
        }
        report
    }

    /// Shuts down the subtree of `id` (detached descendants included) the same way, under
    /// its own deadline.
    ///
    /// # Errors
    ///
    /// [`ControlError::NotYours`] for an unknown id or the root (use [`Tree::shutdown`]).
    pub async fn shutdown_agent(&self, id: AgentId) -> Result<ShutdownReport, ControlError> {
        if id.is_root() || self.shared.registry.status(id).is_none() {
            return Err(ControlError::NotYours(id));
        }
        self.shared.registry.refuse_mirrored(id)?;
        let deadline = deadline_in(self.shared.config.shutdown_grace);
        let report = shutdown::run(&self.shared.registry, id, deadline).await;
        Ok(self.with_unreachable_nodes(report))
    }

    /// `report` with the other nodes that did not report by its deadline: those of the
    /// remote children it counted killed. (Looked up only in a tree with a node attached:
    /// every other tree's report stays as it is, at no cost.)
    fn with_unreachable_nodes(&self, report: ShutdownReport) -> ShutdownReport {
        if self.shared.placement.is_some() {
            let nodes: std::collections::BTreeSet<String> = report
                .killed
                .iter()
                .filter_map(|&id| crate::spawn::remote_placement(&self.shared, id))
                .map(|node| node.to_string())
                .collect();
            return ShutdownReport {
                unreachable_nodes: nodes.into_iter().collect(),
                ..report
            };
        }
        report
    }
}

/// # Reading records
///
/// What the tree holds, read without changing it: every record at once, one record or
/// outcome, the event stream from now on, how many agents are live, which agents a crash
/// interrupted. (Taking an outcome counts as reading it for a journal's retention policy.)
impl Tree {
    /// The authoritative snapshot of every record.
    pub fn snapshot(&self) -> TreeSnapshot {
        self.shared.registry.snapshot()
    }

    /// One agent's record.
    pub fn record(&self, id: AgentId) -> Option<AgentRecord> {
        self.shared.registry.record(id)
    }

    /// One agent's outcome, once settled, as held in memory. Reading never removes it; in
    /// a journaled tree it counts as read for the retention policy
    /// ([`JournalConfig::keep_read_outputs`](crate::JournalConfig::keep_read_outputs)), and
    /// an output released before is not in it (its `released` says so:
    /// [`Tree::read_outcome`] reads it back).
    pub fn outcome(&self, id: AgentId) -> Option<Outcome> {
        self.shared.registry.read_outcome(id)
    }

    /// One agent's outcome, once settled, whole: an output the journal's retention policy
    /// released from memory is read back from the journal (one line, without blocking an
    /// actor). It counts as read, like [`Tree::outcome`].
    ///
    /// ```
    /// # use agent_tree_actors::{Catalog, JournalConfig, Tree};
    /// # use agent_tree_actors::testkit::{Script, ScriptedModel, Turn};
    /// # use agent_tree_protocol::{AgentDefinition, SpawnRequest};
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// # let path = std::env::temp_dir().join(format!("agent-tree-doc-read-outcome-{}", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// let model = ScriptedModel::new().script("writer", Script::new([Turn::answer("a long report")]));
    /// let catalog = Catalog::new([AgentDefinition::new("writer", "You write.")])?;
    /// let tree = Tree::builder()
    ///     .model(model)
    ///     .catalog(catalog)
    ///     // Keep no read output in memory: each is released once read.
    ///     .journal(JournalConfig::new(&path).keep_read_outputs(0))
    ///     .build()
    ///     .await?;
    /// let mut writer = tree.spawn(SpawnRequest::new("writer", "report")).await?;
    /// assert_eq!(writer.outcome().await.text.as_deref(), Some("a long report"));
    /// // Read, so released once the journal holds it (at the next read or settle, or
    /// // flush): memory holds the status only; the journal holds the text.
    /// tree.flush_journal().await;
    /// assert!(tree.outcome(writer.id()).unwrap().released);
    /// let whole = tree.read_outcome(writer.id()).await.unwrap();
    /// assert_eq!(whole.text.as_deref(), Some("a long report"));
    /// # tree.shutdown().await;
    /// # let _ = std::fs::remove_file(&path);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_outcome(&self, id: AgentId) -> Option<Outcome> {
        let outcome = self.shared.registry.read_outcome(id)?;
        Some(self.shared.whole_outcome(id, outcome).await)
    }

    /// Subscribes to every lifecycle event from now on.
    pub fn subscribe(&self) -> EventStream {
        self.shared.registry.subscribe()
    }

    /// Live agents (admitted, not yet terminal).
    pub fn live(&self) -> usize {
        self.shared.registry.live()
    }

    /// The agents a crash interrupted and recovery settled `aborted` (reason
    /// `interrupted`), not resumed since, in id order: what the application (top-level
    /// ones, [`Tree::resume`]) or their owners resume or abandon.
    pub fn interrupted(&self) -> Vec<AgentId> {
        self.snapshot()
            .agents()
            .filter(|r| {
                r.outcome
                    .as_ref()
                    .is_some_and(|o| o.reason == EndReason::Interrupted)
            })
            .map(|r| r.id)
            .collect()
    }

    /// Agents whose ractor actor is still alive, asked of ractor rather than read from the
    /// records.
    pub fn alive_actors(&self) -> Vec<AgentId> {
        self.shared.registry.alive_actors()
    }
}

/// # The journal
///
/// A journaled tree's writer ([`TreeBuilder::journal`]): everything handed to it written and
/// synced on demand, how far it is behind, and why it stopped if it did. Without a journal
/// these do nothing.
impl Tree {
    /// Writes and syncs everything the journal has been handed so far, whatever its
    /// durability policy, and finishes a compaction that is due (a no-op without a
    /// journal). [`Tree::shutdown`] ends with it: after it the writer leaves the file alone.
    ///
    /// The journal is handed every event before any subscriber or waiter sees it, so
    /// whatever the application has seen when it calls this (an event on its stream, an
    /// outcome, a record) is durable once it returns.
    pub async fn flush_journal(&self) {
        if let Some(journal) = &self.shared.journal {
            journal.flush().await;
            // Everything is written now: read outputs that waited for their lines go, and
            // their `released` events are written too (none once the tree has shut down).
            if self.shared.registry.release_due() {
                journal.flush().await;
            }
        }
    }

    /// Entries handed to the journal and not yet written (0 without a journal): how far
    /// the writer is behind.
    pub fn journal_backlog(&self) -> usize {
        self.shared.journal.as_ref().map_or(0, |j| j.queued())
    }

    /// Why the journal stopped, if its writer met an I/O error (the tree goes on without it;
    /// the error is also logged).
    pub fn journal_error(&self) -> Option<String> {
        self.shared.journal.as_ref().and_then(|j| j.error())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if !self.stopped.load(std::sync::atomic::Ordering::Acquire) {
            self.root_token.cancel();
            self.root.stop(None);
            self.sources.kill();
            // The journal file is free once the drop returns: what was handed over is
            // written and synced, the rest (what the dying agents emit) is dropped, as a
            // crash would, and the lock released.
            if let Some(journal) = &self.shared.journal {
                journal.close_now();
            }
        }
    }
}

/// The instant `within` from now. A grace past any clock's reach (`Duration::MAX`, which the
/// config accepts) is a deadline a century away, never an overflow.
fn deadline_in(within: std::time::Duration) -> Instant {
    const FAR: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
    Instant::now() + within.min(FAR)
}
