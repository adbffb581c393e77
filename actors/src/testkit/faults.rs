//! Fault injection: a model or a tool that fails, panics, hangs or is slow by a plan, hooks
//! that hang, panic or fail, and a kill of any agent at a moment the test picks
//! ([`kill_when`]).
//!
//! # Invariants
//!
//! * Faults are deterministic: "at turn n" counts the turns of each agent's run as the
//!   runtime numbers them (every attempt at turn n fails: a retried turn keeps its number),
//!   and a seeded probability draws once per call from (seed, agent, run, turn, attempt), so
//!   the same tree under the same seed fails the same calls, whatever the interleaving, and
//!   a retry of a failed call draws anew.
//! * Every delay (`slow`) that applies to a call is waited, then the first failure, panic or
//!   hang of the plan that applies acts; a call no fault applies to goes to the wrapped model
//!   or tool unchanged (after the delays).

use std::sync::Arc;
use std::time::Duration;

use agent_tree_protocol::{AgentId, ToolSpec};

use crate::error::{ModelError, ToolError};
use crate::hooks::{HookContext, HookError};
use crate::model::{Model, ModelRequest, ModelResponse};
use crate::policy::retry::splitmix64;
use crate::tool::{Tool, ToolContext};
use crate::util::BoxFuture;

/// What a fault does to a call.
#[derive(Clone, Debug)]
enum FaultKind {
    /// The call fails with this error.
    Fail(ModelError),
    /// The call panics.
    Panic,
    /// The call never returns (until the agent is aborted).
    Hang,
    /// The call is delayed by this long, then goes to the wrapped model.
    Slow(Duration),
}

/// When a fault applies.
#[derive(Clone, Debug)]
enum When {
    Turn(u32),
    Always,
    Probability { p: f64, seed: u64 },
}

#[derive(Clone, Debug)]
struct Fault {
    when: When,
    kind: FaultKind,
    agent_type: Option<String>,
    run: Option<u32>,
}

impl Fault {
    fn applies(&self, request: &ModelRequest, attempt: u32) -> bool {
        if self
            .agent_type
            .as_deref()
            .is_some_and(|t| t != request.agent_type())
        {
            return false;
        }
        if self.run.is_some_and(|run| run != request.run) {
            return false;
        }
        match self.when {
            When::Turn(turn) => request.turn == turn,
            When::Always => true,
            When::Probability { p, seed } => {
                // Each field hashed in after the last, so no two (seed, call) pairs share a
                // draw by their bits lining up (a plain xor of the fields let seed `s ^ 3`
                // replay seed `s`'s draws one turn apart).
                let draw = [
                    request.agent.get(),
                    u64::from(request.run),
                    u64::from(request.turn),
                    u64::from(attempt - 1),
                ]
                .into_iter()
                .fold(splitmix64(seed), |h, field| splitmix64(h ^ field));
                // 53 bits of the draw as a fraction in [0, 1).
                ((draw >> 11) as f64 / (1u64 << 53) as f64) < p
            }
        }
    }
}

/// A model wrapped in a fault plan.
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::testkit::{FaultyModel, Script, ScriptedModel, Turn};
/// use agent_tree_actors::ModelError;
///
/// let model = FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
///     .fail_at_turn(1, ModelError::transient("connection reset"))
///     .only_for("w")
///     .fail_with_probability(0.1, 42, ModelError::new("flaky"))
///     .slow(Duration::from_millis(200));
/// # let _ = model;
/// ```
pub struct FaultyModel<M> {
    inner: Arc<M>,
    plan: Vec<Fault>,
    /// Calls so far per (agent, run, turn): the attempt a call is. A leaf lock, only
    /// counted under.
    attempts: Arc<parking_lot::Mutex<Attempts>>,
}

/// Calls so far per (agent, run, turn).
type Attempts = std::collections::HashMap<(AgentId, u32, u32), u32>;

impl<M> std::fmt::Debug for FaultyModel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyModel")
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl<M: Model> FaultyModel<M> {
    /// `inner` with no faults yet.
    pub fn new(inner: M) -> Self {
        FaultyModel {
            inner: Arc::new(inner),
            plan: Vec::new(),
            attempts: Arc::default(),
        }
    }

    fn with(mut self, when: When, kind: FaultKind) -> Self {
        self.plan.push(Fault {
            when,
            kind,
            agent_type: None,
            run: None,
        });
        self
    }

    /// Fails turn `turn` of every run with `error` (every attempt at it, when the tree
    /// retries a transient error).
    pub fn fail_at_turn(self, turn: u32, error: ModelError) -> Self {
        self.with(When::Turn(turn), FaultKind::Fail(error))
    }

    /// Fails each call with `probability`, drawn from `seed` and the call's agent, run,
    /// turn and attempt (a retry draws anew).
    pub fn fail_with_probability(self, probability: f64, seed: u64, error: ModelError) -> Self {
        self.with(
            When::Probability {
                p: probability,
                seed,
            },
            FaultKind::Fail(error),
        )
    }

    /// Panics at turn `turn` of every run.
    pub fn panic_at_turn(self, turn: u32) -> Self {
        self.with(When::Turn(turn), FaultKind::Panic)
    }

    /// Hangs at turn `turn` of every run.
    pub fn hang_at_turn(self, turn: u32) -> Self {
        self.with(When::Turn(turn), FaultKind::Hang)
    }

    /// Delays every call by `delay`. Delays add up, and a failure, panic or hang that also
    /// applies acts after them, whichever was added first.
    pub fn slow(self, delay: Duration) -> Self {
        self.with(When::Always, FaultKind::Slow(delay))
    }

    /// Limits the fault added last to agents of `agent_type`.
    pub fn only_for(mut self, agent_type: impl Into<String>) -> Self {
        if let Some(last) = self.plan.last_mut() {
            last.agent_type = Some(agent_type.into());
        }
        self
    }

    /// Limits the fault added last to run `run` of each agent (1 for the first): "fails
    /// once, then recovers after its restart" is `.fail_at_turn(1, e).only_in_run(1)`.
    pub fn only_in_run(mut self, run: u32) -> Self {
        if let Some(last) = self.plan.last_mut() {
            last.run = Some(run);
        }
        self
    }
}

impl<M: Model> Model for FaultyModel<M> {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let attempt = {
            let mut attempts = self.attempts.lock();
            let n = attempts
                .entry((request.agent, request.run, request.turn))
                .or_insert(0);
            *n += 1;
            *n
        };
        // Faults combine: every delay that applies is waited, then the first failure, panic
        // or hang that applies acts (in the order they were added).
        let mut delay = Duration::ZERO;
        let mut fault = None;
        for f in self.plan.iter().filter(|f| f.applies(&request, attempt)) {
            match &f.kind {
                FaultKind::Slow(by) => delay = delay.saturating_add(*by),
                kind => {
                    fault.get_or_insert_with(|| kind.clone());
                }
            }
        }
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            match fault {
                Some(FaultKind::Fail(error)) => Err(error),
                Some(FaultKind::Panic) => {
                    panic!("injected panic in {} turn {}", request.agent, request.turn)
                }
                Some(FaultKind::Hang) => std::future::pending().await,
                Some(FaultKind::Slow(_)) | None => self.inner.turn(request).await,
            }
        })
    }
}

/// A tool wrapped in a fault: every call of it fails, panics, hangs or is slow.
///
/// ```
/// use agent_tree_actors::testkit::FaultyTool;
/// use agent_tree_actors::{FnTool, Tool};
/// let read = FnTool::new("read", "reads", |_, _| async { Ok("text".to_owned()) });
/// let broken = FaultyTool::failing(read, "disk on fire");
/// assert_eq!(broken.spec().name, "read");
/// ```
pub struct FaultyTool<T> {
    inner: T,
    kind: ToolFault,
}

#[derive(Clone, Debug)]
enum ToolFault {
    Fail(String),
    Panic,
    Hang,
    Slow(Duration),
}

impl<T> std::fmt::Debug for FaultyTool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyTool")
            .field("fault", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<T: Tool> FaultyTool<T> {
    /// `inner`, every call of which fails with `message`.
    pub fn failing(inner: T, message: impl Into<String>) -> Self {
        FaultyTool {
            inner,
            kind: ToolFault::Fail(message.into()),
        }
    }

    /// `inner`, every call of which panics.
    pub fn panicking(inner: T) -> Self {
        FaultyTool {
            inner,
            kind: ToolFault::Panic,
        }
    }

    /// `inner`, every call of which hangs until the agent is aborted.
    pub fn hanging(inner: T) -> Self {
        FaultyTool {
            inner,
            kind: ToolFault::Hang,
        }
    }

    /// `inner`, every call of which is delayed by `delay`.
    pub fn slow(inner: T, delay: Duration) -> Self {
        FaultyTool {
            inner,
            kind: ToolFault::Slow(delay),
        }
    }
}

impl<T: Tool> Tool for FaultyTool<T> {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    fn call(
        &self,
        context: ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'_, Result<String, ToolError>> {
        let kind = self.kind.clone();
        Box::pin(async move {
            match kind {
                ToolFault::Fail(message) => Err(ToolError::new(message)),
                ToolFault::Panic => panic!("injected panic in tool {}", self.inner.spec().name),
                ToolFault::Hang => std::future::pending().await,
                ToolFault::Slow(delay) => {
                    tokio::time::sleep(delay).await;
                    self.inner.call(context, input).await
                }
            }
        })
    }
}

/// A start or shutdown hook that never finishes (a shutdown's deadline cuts it off).
pub fn hanging_hook() -> impl Fn(HookContext) -> BoxFuture<'static, Result<(), HookError>> {
    |_| Box::pin(std::future::pending())
}

/// A hook that panics.
pub fn panicking_hook() -> impl Fn(HookContext) -> BoxFuture<'static, Result<(), HookError>> {
    |context: HookContext| {
        Box::pin(async move { panic!("injected panic in {}'s hook", context.agent) })
    }
}

/// A hook that fails with `message`.
pub fn failing_hook(
    message: impl Into<String>,
) -> impl Fn(HookContext) -> BoxFuture<'static, Result<(), HookError>> {
    let message = message.into();
    move |_| {
        let message = message.clone();
        Box::pin(async move { Err(HookError(message)) })
    }
}

/// Kills the agent `pick` names at the first event it picks: "kill the worker as its second
/// run starts", "kill whoever reports usage first". The kill is [`Tree::kill`](crate::Tree::kill)
/// (Erlang's `exit(Pid, kill)`), sent when the switch reads the event: the agent may have
/// taken the steps its actor had already been sent (it cannot start another model call or
/// tool in between on a paused current-thread runtime, where the switch runs as soon as the
/// emitting actor yields). The switch holds the tree weakly and fires at most once.
///
/// ```
/// use agent_tree_actors::testkit::{kill_when, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, AgentStatus, EventKind, SpawnRequest};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
/// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let mut switch = kill_when(&tree, |e| matches!(e.kind, EventKind::Started { .. }).then_some(e.agent));
/// let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
/// assert_eq!(switch.fired().await, Some((w.id(), Ok(()))));
/// assert_eq!(w.outcome().await.status, AgentStatus::Killed);
/// # });
/// ```
pub fn kill_when(
    tree: &crate::Tree,
    mut pick: impl FnMut(&agent_tree_protocol::Event) -> Option<agent_tree_protocol::AgentId>
    + Send
    + 'static,
) -> KillSwitch {
    let mut events = tree.subscribe();
    let shared = Arc::downgrade(&tree.shared);
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Some(agent) = pick(&event) else { continue };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let _ = sender.send((agent, shared.registry.kill(agent)));
            return;
        }
    });
    KillSwitch {
        receiver,
        task,
        fired: None,
    }
}

/// The switch [`kill_when`] set: whether and whom it killed. Dropping it disarms it.
#[derive(Debug)]
pub struct KillSwitch {
    receiver: tokio::sync::oneshot::Receiver<Killed>,
    task: tokio::task::JoinHandle<()>,
    /// What the receiver gave, once it has (a oneshot is read once).
    fired: Option<Option<Killed>>,
}

/// What a [`KillSwitch`] did: the agent it killed, and the kill's result.
pub type Killed = (
    agent_tree_protocol::AgentId,
    Result<(), crate::ControlError>,
);

impl KillSwitch {
    /// How long [`KillSwitch::fired`] waits (virtual time under a paused clock).
    pub const EXPECT_WITHIN: Duration = Duration::from_secs(3600);

    /// Waits until the switch fires: the agent it killed and the kill's result (an error
    /// when the agent had no running actor by then). `None` when it does not fire within
    /// [`KillSwitch::EXPECT_WITHIN`], or the tree ended first.
    pub async fn fired(&mut self) -> Option<Killed> {
        if self.fired.is_none() {
            let fired = tokio::time::timeout(Self::EXPECT_WITHIN, &mut self.receiver).await;
            match fired {
                Ok(fired) => self.fired = Some(fired.ok()),
                Err(_) => return None,
            }
        }
        self.fired.clone().flatten()
    }
}

impl Drop for KillSwitch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
