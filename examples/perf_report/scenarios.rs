//! The performance scenarios, shared by `examples/perf_report` and the criterion benches
//! (`benches/`): each one as agent-tree ("ours"), as raw ractor 0.16 actors and as raw tokio
//! tasks doing the same work, so ratios come from one process.
//!
//! Every function runs one repetition and returns what it measured; the callers repeat and
//! take medians.

#![allow(
    dead_code,
    unreachable_pub,
    missing_debug_implementations,
    missing_docs
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_tree::prelude::*;
use agent_tree::protocol::ToolCall;
use agent_tree::{BoxFuture, Hook, HookContext, HookError};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What is being measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Ours,
    RawRactor,
    RawTokio,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Ours, Variant::RawRactor, Variant::RawTokio];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Ours => "ours",
            Variant::RawRactor => "raw_ractor",
            Variant::RawTokio => "raw_tokio",
        }
    }
}

/// The shape of a tree of `n` nodes, numbered breadth first from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `n` nodes under one owner, started one after another from outside (ours: `n`
    /// top-level agents).
    Wide,
    /// Node `i` owns nodes `4i+1 ..= 4i+4` (those below `n`).
    Fan4,
    /// Node `i` owns node `i+1`.
    Chain,
    /// Node 0 owns every other node, started in one turn (one handler for raw ractor).
    Burst,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Wide => "wide",
            Shape::Fan4 => "fan4",
            Shape::Chain => "chain",
            Shape::Burst => "burst",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        [Shape::Wide, Shape::Fan4, Shape::Chain, Shape::Burst]
            .into_iter()
            .find(|s| s.name() == name)
    }

    /// The children of node `i` in a tree of `n`.
    pub fn children(self, i: usize, n: usize) -> std::ops::Range<usize> {
        let range = match self {
            Shape::Wide => 0..0,
            Shape::Fan4 => 4 * i + 1..4 * i + 5,
            Shape::Chain => i + 1..i + 2,
            Shape::Burst if i == 0 => 1..n,
            Shape::Burst => 0..0,
        };
        range.start.min(n)..range.end.min(n)
    }

    /// How deep a tree of `n` goes (the root node at depth 1).
    pub fn depth(self, n: usize) -> u32 {
        let mut depth = 0;
        let mut level = 0..1usize;
        while level.start < n {
            depth += 1;
            let next = self.children(level.start, n).start.max(level.end)
                ..self.children(level.end - 1, n).end.max(level.end);
            if next.is_empty() {
                break;
            }
            level = next;
        }
        depth.max(1)
    }
}

/// Counts nodes that reached their first turn (ours) or started (raw) and says when all have.
#[derive(Clone)]
pub struct Arrivals {
    count: Arc<AtomicUsize>,
    target: usize,
    done: Arc<parking_lot::Mutex<Option<oneshot::Sender<()>>>>,
}

impl Arrivals {
    pub fn new(target: usize) -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let arrivals = Arrivals {
            count: Arc::new(AtomicUsize::new(0)),
            target,
            done: Arc::new(parking_lot::Mutex::new(Some(tx))),
        };
        (arrivals, rx)
    }

    pub fn arrive(&self) {
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            if let Some(tx) = self.done.lock().take() {
                let _ = tx.send(());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// ours

/// The scenario model: an agent's prompt is `"<shape> <i> <n>"`; its first turn counts its
/// arrival and spawns its children (foreground, all in one turn); a node without children
/// hangs in its first turn until it is cancelled.
pub struct TreeModel {
    arrivals: Arrivals,
}

fn parse_prompt(request: &ModelRequest) -> Option<(Shape, usize, usize)> {
    let prompt = &request.messages.first()?.content;
    let mut words = prompt.split(' ');
    let shape = Shape::parse(words.next()?)?;
    let i = words.next()?.parse().ok()?;
    let n = words.next()?.parse().ok()?;
    Some((shape, i, n))
}

impl Model for TreeModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            if request.turn > 1 {
                return Ok(ModelResponse::text("done"));
            }
            self.arrivals.arrive();
            let Some((shape, i, n)) = parse_prompt(&request) else {
                return std::future::pending().await;
            };
            let children = shape.children(i, n);
            if children.is_empty() {
                return std::future::pending().await;
            }
            let calls = children
                .map(|c| {
                    ToolCall::new(
                        format!("c{c}"),
                        "Agent",
                        json!({ "agent_type": "node", "prompt": format!("{} {c} {n}", shape.name()) }),
                    )
                })
                .collect();
            Ok(ModelResponse::calls(calls))
        })
    }
}

/// A shutdown hook that never finishes (the deadline cuts it).
pub struct HangingHook;

impl Hook for HangingHook {
    fn run(&self, _: HookContext) -> BoxFuture<'static, Result<(), HookError>> {
        Box::pin(std::future::pending())
    }
}

/// A tree for `n` agents of `shape`.
pub async fn our_tree(shape: Shape, n: usize, arrivals: Arrivals, hanging_hooks: bool) -> Tree {
    let node = AgentDefinition::new("node", "").with_allowed_subagents(SubagentAllowance::All);
    let catalog = Catalog::new([node]).expect("valid catalog");
    let config = TreeConfig::default()
        .with_max_depth(shape.depth(n) + 1)
        .with_max_children_per_agent(n + 1)
        .with_max_total_agents(n + 1)
        .with_unlimited_spawns_per_agent()
        .with_max_spawns_per_tree(n as u64 + 1)
        .with_max_tool_calls_per_turn(n + 1)
        .with_steer_limits(u32::MAX, usize::MAX);
    let mut builder = Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(TreeModel { arrivals });
    if hanging_hooks {
        builder = builder.on_shutdown(HangingHook);
    }
    builder.build().await.expect("tree")
}

/// The prompts of the agents of `shape` started from outside: every node's for `Wide`, else
/// node 0's (the rest start from the tree's own turns). Written before a measurement starts,
/// as an application has its prompts before it spawns (raw nodes are handed their numbers).
pub fn top_prompts(shape: Shape, n: usize) -> Vec<String> {
    let roots = if shape == Shape::Wide { 0..n } else { 0..1 };
    roots.map(|i| format!("{} {i} {n}", shape.name())).collect()
}

/// Starts the agents of `prompts` (from [`top_prompts`]) on `tree`, one after another;
/// returns once the last is admitted.
pub async fn start_ours(tree: &Tree, prompts: Vec<String>) {
    for prompt in prompts {
        tree.spawn(SpawnRequest::new("node", prompt))
            .await
            .expect("admitted");
    }
}

/// What one repetition of a tree scenario measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct TreeRun {
    /// From the first spawn until every node is in its first turn (started, raw).
    pub spawn: Duration,
    /// From the shutdown call until it returned.
    pub shutdown: Duration,
    /// Agents the shutdown killed (ours only).
    pub killed: usize,
}

/// Spawns a tree of `n` nodes of `shape`, waits until every node is in its first turn, then
/// shuts it down.
pub async fn tree_run(variant: Variant, shape: Shape, n: usize) -> TreeRun {
    match variant {
        Variant::Ours => ours_tree_run(shape, n, false).await,
        Variant::RawRactor => raw_ractor_tree_run(shape, n).await,
        Variant::RawTokio => raw_tokio_tree_run(shape, n).await,
    }
}

/// [`tree_run`] for agent-tree, optionally with a shutdown hook on every agent that hangs.
pub async fn ours_tree_run(shape: Shape, n: usize, hanging_hooks: bool) -> TreeRun {
    let (arrivals, all_in) = Arrivals::new(n);
    let tree = our_tree(shape, n, arrivals, hanging_hooks).await;
    let prompts = top_prompts(shape, n);
    let start = Instant::now();
    start_ours(&tree, prompts).await;
    all_in.await.expect("every agent arrives");
    let spawn = start.elapsed();
    let start = Instant::now();
    let report = tree.shutdown().await;
    let shutdown = start.elapsed();
    TreeRun {
        spawn,
        shutdown,
        killed: report.killed.len(),
    }
}

// ---------------------------------------------------------------------------------------
// raw ractor

/// A raw ractor node: starts (counting its arrival), spawns its children linked under itself
/// in `post_start`, and in `post_stop` stops its children and waits for them.
pub struct RawNode;

pub struct RawArgs {
    pub shape: Shape,
    pub i: usize,
    pub n: usize,
    pub arrivals: Arrivals,
}

pub enum RawMsg {
    Ping(RpcReplyPort<()>),
    Delta(u64),
}

// With ractor's `cluster` feature on in the build, ractor has no blanket `Message` impl.
#[cfg(feature = "cluster")]
impl ractor::Message for RawMsg {}

pub struct RawState {
    args: RawArgs,
    parent: Option<ActorRef<RawMsg>>,
    tokens: u64,
    top: Option<mpsc::UnboundedSender<u64>>,
}

impl Actor for RawNode {
    type Msg = RawMsg;
    type State = RawState;
    type Arguments = (
        RawArgs,
        Option<ActorRef<RawMsg>>,
        Option<mpsc::UnboundedSender<u64>>,
    );

    async fn pre_start(
        &self,
        _: ActorRef<RawMsg>,
        (args, parent, top): Self::Arguments,
    ) -> Result<RawState, ActorProcessingErr> {
        Ok(RawState {
            args,
            parent,
            tokens: 0,
            top,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<RawMsg>,
        state: &mut RawState,
    ) -> Result<(), ActorProcessingErr> {
        let RawArgs {
            shape,
            i,
            n,
            ref arrivals,
            ..
        } = state.args;
        arrivals.arrive();
        for c in shape.children(i, n) {
            let args = RawArgs {
                shape,
                i: c,
                n,
                arrivals: arrivals.clone(),
            };
            Actor::spawn_linked(
                None,
                RawNode,
                (args, Some(myself.clone()), None),
                myself.get_cell(),
            )
            .await?;
        }
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<RawMsg>,
        message: RawMsg,
        state: &mut RawState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RawMsg::Ping(reply) => {
                let _ = reply.send(());
            }
            RawMsg::Delta(tokens) => {
                state.tokens += tokens;
                match (&state.parent, &state.top) {
                    (Some(parent), _) => parent.cast(RawMsg::Delta(tokens))?,
                    (None, Some(top)) => {
                        let _ = top.send(state.tokens);
                    }
                    (None, None) => {}
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<RawMsg>,
        _: ractor::SupervisionEvent,
        _: &mut RawState,
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<RawMsg>,
        _: &mut RawState,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children_and_wait(None, None).await;
        Ok(())
    }
}

/// A raw node with no children of its own, started and waited for: linked under `parent`
/// (which its usage deltas go to) if given, reporting deltas on `top` if given. Holders,
/// chain links and chain roots.
async fn raw_single(
    parent: Option<&ActorRef<RawMsg>>,
    top: Option<mpsc::UnboundedSender<u64>>,
) -> ActorRef<RawMsg> {
    let (arrivals, arrived) = Arrivals::new(1);
    let args = RawArgs {
        shape: Shape::Wide,
        i: 0,
        n: 1,
        arrivals,
    };
    let node = match parent {
        Some(parent) => {
            Actor::spawn_linked(
                None,
                RawNode,
                (args, Some(parent.clone()), top),
                parent.get_cell(),
            )
            .await
            .expect("node")
            .0
        }
        None => {
            Actor::spawn(None, RawNode, (args, None, top))
                .await
                .expect("node")
                .0
        }
    };
    arrived.await.expect("node started");
    node
}

/// Starts the raw ractor nodes of `shape` under `holder`: every node for `Wide` (one after
/// another, from here), else node 0, which spawns the rest.
async fn start_raw_ractor(holder: &ActorRef<RawMsg>, shape: Shape, n: usize, arrivals: &Arrivals) {
    let roots = if shape == Shape::Wide { 0..n } else { 0..1 };
    for i in roots {
        let args = RawArgs {
            shape,
            i,
            n,
            arrivals: arrivals.clone(),
        };
        Actor::spawn_linked(None, RawNode, (args, None, None), holder.get_cell())
            .await
            .expect("node");
    }
}

async fn raw_ractor_tree_run(shape: Shape, n: usize) -> TreeRun {
    let (arrivals, all_in) = Arrivals::new(n);
    let holder = raw_single(None, None).await;
    let start = Instant::now();
    start_raw_ractor(&holder, shape, n, &arrivals).await;
    all_in.await.expect("every node starts");
    let spawn = start.elapsed();
    let start = Instant::now();
    holder.stop_and_wait(None, None).await.expect("stops");
    TreeRun {
        spawn,
        shutdown: start.elapsed(),
        killed: 0,
    }
}

// ---------------------------------------------------------------------------------------
// raw tokio

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A raw tokio node: a task that counts its arrival, spawns its children's tasks, waits for
/// its token, then for its children.
fn raw_task(
    shape: Shape,
    i: usize,
    n: usize,
    arrivals: Arrivals,
    token: CancellationToken,
) -> Task {
    Box::pin(async move {
        arrivals.arrive();
        let children: Vec<_> = shape
            .children(i, n)
            .map(|c| tokio::spawn(raw_task(shape, c, n, arrivals.clone(), token.child_token())))
            .collect();
        token.cancelled().await;
        for child in children {
            let _ = child.await;
        }
    })
}

/// Starts the raw tokio tasks of `shape` under `token`: every node's for `Wide`, else node
/// 0's, which spawns the rest.
fn start_raw_tokio(
    shape: Shape,
    n: usize,
    arrivals: &Arrivals,
    token: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let roots = if shape == Shape::Wide { 0..n } else { 0..1 };
    roots
        .map(|i| tokio::spawn(raw_task(shape, i, n, arrivals.clone(), token.child_token())))
        .collect()
}

async fn raw_tokio_tree_run(shape: Shape, n: usize) -> TreeRun {
    let (arrivals, all_in) = Arrivals::new(n);
    let token = CancellationToken::new();
    let start = Instant::now();
    let tasks = start_raw_tokio(shape, n, &arrivals, &token);
    all_in.await.expect("every task starts");
    let spawn = start.elapsed();
    let start = Instant::now();
    token.cancel();
    for task in tasks {
        let _ = task.await;
    }
    TreeRun {
        spawn,
        shutdown: start.elapsed(),
        killed: 0,
    }
}

// ---------------------------------------------------------------------------------------
// memory

/// The resident set of this process, in bytes (Linux; 0 elsewhere).
pub fn resident_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Bytes of resident memory per idle node: `n` nodes of `shape` started and idle (in their
/// first turn), measured in this process (run it in a fresh one).
pub async fn memory_per_node(variant: Variant, shape: Shape, n: usize) -> usize {
    let (arrivals, all_in) = Arrivals::new(n);
    let before;
    let keep: Box<dyn std::any::Any + Send> = match variant {
        Variant::Ours => {
            let tree = our_tree(shape, n, arrivals, false).await;
            before = resident_bytes();
            // The prompts are the agents' own memory (each moves into its conversation).
            start_ours(&tree, top_prompts(shape, n)).await;
            all_in.await.expect("every agent arrives");
            Box::new(tree)
        }
        Variant::RawRactor => {
            let holder = raw_single(None, None).await;
            before = resident_bytes();
            start_raw_ractor(&holder, shape, n, &arrivals).await;
            all_in.await.expect("every node starts");
            Box::new(holder)
        }
        Variant::RawTokio => {
            let token = CancellationToken::new();
            before = resident_bytes();
            let tasks = start_raw_tokio(shape, n, &arrivals, &token);
            all_in.await.expect("every task starts");
            Box::new((token, tasks))
        }
    };
    // Let every node settle into its idle state.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = resident_bytes();
    drop(keep);
    after.saturating_sub(before) / n
}

// ---------------------------------------------------------------------------------------
// usage, steering, snapshot

/// A chain of `depth` nodes, for usage and steering: ours (agents in their first turn), and
/// raw ractor nodes. Returns the leaf's id.
pub async fn our_chain(depth: usize) -> (Tree, AgentId) {
    let (arrivals, all_in) = Arrivals::new(depth);
    let tree = our_tree(Shape::Chain, depth, arrivals, false).await;
    start_ours(&tree, top_prompts(Shape::Chain, depth)).await;
    all_in.await.expect("every agent arrives");
    let leaf = tree
        .snapshot()
        .agents()
        .filter(|r| r.depth as usize == depth)
        .map(|r| r.id)
        .next()
        .expect("a leaf");
    (tree, leaf)
}

/// A raw ractor chain of `depth` nodes whose root reports every usage delta it receives on the
/// returned channel. Returns the root and the leaf.
pub async fn raw_chain(
    depth: usize,
) -> (
    ActorRef<RawMsg>,
    ActorRef<RawMsg>,
    mpsc::UnboundedReceiver<u64>,
) {
    let (top_tx, top_rx) = mpsc::unbounded_channel();
    let root = raw_single(None, Some(top_tx)).await;
    let mut leaf = root.clone();
    for _ in 1..depth {
        leaf = raw_single(Some(&leaf), None).await;
    }
    (root, leaf, top_rx)
}

/// A raw tokio chain of `depth` tasks relaying usage deltas to the returned receiver.
pub fn tokio_chain(depth: usize) -> (mpsc::UnboundedSender<u64>, mpsc::UnboundedReceiver<u64>) {
    let (top_tx, top_rx) = mpsc::unbounded_channel::<u64>();
    let mut up = top_tx;
    for _ in 1..depth {
        let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
        let parent = up;
        tokio::spawn(async move {
            let mut total = 0;
            while let Some(delta) = rx.recv().await {
                total += delta;
                let _ = parent.send(delta);
            }
            let _ = total;
        });
        up = tx;
    }
    (up, top_rx)
}

/// `reps` usage deltas from the leaf of a chain of `depth`, each until it reached the top.
pub async fn usage_run(variant: Variant, depth: usize, reps: usize) -> Duration {
    match variant {
        Variant::Ours => {
            let (tree, leaf) = our_chain(depth).await;
            let start = Instant::now();
            for _ in 0..reps {
                tree.charge(leaf, Usage::tokens(1, 1)).expect("live leaf");
            }
            let elapsed = start.elapsed();
            let total = tree.record(AgentId::ROOT).expect("root").subtree;
            assert_eq!(
                total.input_tokens as usize, reps,
                "every delta reached the root"
            );
            tree.shutdown().await;
            elapsed
        }
        Variant::RawRactor => {
            let (root, leaf, mut top) = raw_chain(depth).await;
            let start = Instant::now();
            for _ in 0..reps {
                leaf.cast(RawMsg::Delta(1)).expect("cast");
                top.recv().await.expect("reaches the top");
            }
            let elapsed = start.elapsed();
            root.stop_and_wait(None, None).await.expect("stops");
            elapsed
        }
        Variant::RawTokio => {
            let (leaf, mut top) = tokio_chain(depth);
            let start = Instant::now();
            for _ in 0..reps {
                leaf.send(1).expect("send");
                top.recv().await.expect("reaches the top");
            }
            start.elapsed()
        }
    }
}

/// `reps` steers to a running agent, each awaited, against ractor `call`s and a tokio
/// request/reply.
pub async fn steer_run(variant: Variant, reps: usize) -> Duration {
    match variant {
        Variant::Ours => {
            let (tree, leaf) = our_chain(1).await;
            let start = Instant::now();
            for _ in 0..reps {
                tree.steer(leaf, "go on").await.expect("delivered");
            }
            let elapsed = start.elapsed();
            tree.shutdown().await;
            elapsed
        }
        Variant::RawRactor => {
            let (root, _leaf, _top) = raw_chain(1).await;
            let start = Instant::now();
            for _ in 0..reps {
                root.call(RawMsg::Ping, None).await.expect("replies");
            }
            let elapsed = start.elapsed();
            root.stop_and_wait(None, None).await.expect("stops");
            elapsed
        }
        Variant::RawTokio => {
            let (tx, mut rx) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
            let server = tokio::spawn(async move {
                while let Some(reply) = rx.recv().await {
                    let _ = reply.send(());
                }
            });
            let start = Instant::now();
            for _ in 0..reps {
                let (reply, answer) = oneshot::channel();
                tx.send(reply).expect("send");
                answer.await.expect("replies");
            }
            let elapsed = start.elapsed();
            drop(tx);
            let _ = server.await;
            elapsed
        }
    }
}

/// A live fan-out-4 tree of `n` agents (records out of id order across parents), for
/// snapshot measurements.
pub async fn fan4_tree(n: usize) -> Tree {
    let (arrivals, all_in) = Arrivals::new(n);
    let tree = our_tree(Shape::Fan4, n, arrivals, false).await;
    start_ours(&tree, top_prompts(Shape::Fan4, n)).await;
    all_in.await.expect("every agent arrives");
    tree
}

/// Nanoseconds per record of one `tree.snapshot()`.
pub fn snapshot_ns_per_record(tree: &Tree) -> f64 {
    let start = Instant::now();
    let snapshot = tree.snapshot();
    let elapsed = start.elapsed();
    elapsed.as_nanos() as f64 / snapshot.records.len() as f64
}

/// Nanoseconds per record of one depth-first walk of a snapshot (the order of its text
/// rendering).
pub fn walk_ns_per_record(tree: &Tree) -> f64 {
    let snapshot = tree.snapshot();
    let start = Instant::now();
    let walked = snapshot.depth_first().len();
    let elapsed = start.elapsed();
    std::hint::black_box(walked);
    elapsed.as_nanos() as f64 / snapshot.records.len() as f64
}

/// Nanoseconds per record of rendering a snapshot as text.
pub fn render_ns_per_record(tree: &Tree) -> f64 {
    let snapshot = tree.snapshot();
    let start = Instant::now();
    let text = snapshot.render_text();
    let elapsed = start.elapsed();
    std::hint::black_box(text.len());
    elapsed.as_nanos() as f64 / snapshot.agents().count() as f64
}
