//! Issue 7: defects found by an independent suite, each shown by a test that fails on the
//! code it was written against. Every test names the defect it shows in its doc comment.
//!
//! 1. A decided (held, `completing`) outcome is replaced by a later abort.
//! 2. Usage recorded after the agent's terminal event (a turn returning as it is killed).
//! 3. Duplicate tool-call ids in one model turn hang the agent or swap results.
//! 4. `Tree::shutdown_agent` strands an owner waiting on the agent it kills.
//! 5. A steer receipted `delivered` is silently dropped.
//! 6. `alive_actors()` not empty right after `Tree::shutdown` returns.
//! 7. A shutdown hook that blocks its thread stretches the shutdown past its grace.
//!
//! Paused-time tests are deterministic; worker-thread tests (`_mt`) loop a race many times
//! with varied timing and assert the correct outcome every time; the defect-7 tests build a
//! real multi-thread runtime by hand. Every wait is bounded, so a hang fails with a message
//! instead of hanging. Some tests pass on the code they were written against (a variant the
//! defect does not reach there); they stay as regression tests.

use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{BoxFuture, FnTool, HookContext, HookError, SteerReceipt, ToolError};
use serde_json::json;

use crate::support::RecordingModel;
use crate::support::harness::a;
use crate::support::lifetimes::{hanging, ms};
use crate::support::{catalog, delegator, leaf, reported_usage, terminal_event};

/// Under paused time a guard costs nothing; on worker threads it is real time.
const GUARD: Duration = Duration::from_secs(3600);
/// The bound of one wait on worker threads (real time).
const REAL_GUARD: Duration = Duration::from_secs(5);

async fn bounded<T>(
    limit: Duration,
    what: &str,
    future: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("hang: timed out after {limit:?} waiting for {what}"),
    }
}

async fn outcome(tree: &Tree, id: AgentId, limit: Duration) -> Outcome {
    let mut handle = tree.handle(id).expect("the agent exists");
    match tokio::time::timeout(limit, handle.outcome()).await {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "hang: {id} never settled within {limit:?}:\n{}",
            tree.snapshot().render_text()
        ),
    }
}

async fn yields(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

// ---------------------------------------------------------------------------------------
// 1. A decided outcome is replaced by a later abort.
// ---------------------------------------------------------------------------------------

/// lead (a1, settle `drain`) spawns a hanging worker (a2) in the background and answers
/// "lead done": it holds in `completing` while the worker drains.
fn drain_tree_parts() -> (RecordingModel, Catalog) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "drain me"),
                    Turn::answer("lead done"),
                ]),
            )
            .script("worker", hanging(1)),
    );
    let catalog = catalog([
        delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
        leaf("worker"),
    ]);
    (model, catalog)
}

async fn until_completing(tree: &Tree, model: &RecordingModel, lead: AgentId) {
    model.until_calls(lead, 2).await;
    bounded(GUARD, "the lead to hold in completing", async {
        while tree.record(lead).map(|r| r.status) != Some(AgentStatus::Completing) {
            tokio::time::sleep(ms(1)).await;
        }
    })
    .await;
}

fn assert_kept_answer(tree: &Tree, lead: AgentId, worker: AgentId, got: &Outcome, how: &str) {
    assert_eq!(
        (got.status, got.text.as_deref()),
        (AgentStatus::Completed, Some("lead done")),
        "defect 1 ({how}): the lead {lead} had decided `completed: lead done` and held in \
         completing; the {how} replaced it with {got:?}"
    );
    let worker = tree.outcome(worker).expect("the worker settled");
    assert_eq!(
        worker.status,
        AgentStatus::Aborted,
        "the {how} cuts the still-running worker: {worker:?}"
    );
}

/// Defect 1: `Tree::abort` of a draining (completing) agent replaces its decided
/// `completed` outcome with `aborted`. Correct: it stays completed with its answer; only the
/// still-running child is cut.
#[tokio::test(start_paused = true)]
async fn d1_abort_of_a_completing_agent_keeps_its_answer() {
    let (model, catalog) = drain_tree_parts();
    let tree = crate::support::harness::tree(model.clone(), catalog, TreeConfig::default()).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    until_completing(&tree, &model, lead).await;
    tree.abort(lead).expect("the lead exists");
    let got = outcome(&tree, lead, GUARD).await;
    assert_kept_answer(&tree, lead, a(2), &got, "abort");
    tree.shutdown().await;
}

/// Defect 1: the owner's end (boss answers; its settle policy aborts its children) reaches a
/// draining child lead that already answered: the lead must stay completed.
#[tokio::test(start_paused = true)]
async fn d1_owner_end_keeps_a_completing_childs_answer() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "boss",
                Script::new([
                    Turn::spawn_background("lead", "lead the work"),
                    Turn::answer("boss done").after(ms(50)),
                ]),
            )
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "drain me"),
                    Turn::answer("lead done"),
                ]),
            )
            .script("worker", hanging(1)),
    );
    let catalog = catalog([
        delegator("boss", &["lead"]),
        delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
        leaf("worker"),
    ]);
    let tree = crate::support::harness::tree(model.clone(), catalog, TreeConfig::default()).await;
    let boss = tree
        .spawn(SpawnRequest::new("boss", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(3), 1).await;
    until_completing(&tree, &model, a(2)).await;
    let boss_out = outcome(&tree, boss, GUARD).await;
    assert!(boss_out.is_completed(), "{boss_out:?}");
    let got = outcome(&tree, a(2), GUARD).await;
    assert_kept_answer(&tree, a(2), a(3), &got, "owner's end");
    tree.shutdown().await;
}

/// Defect 1: a shutdown with a shutdown hook registered reaches a completing agent: it must
/// keep its decided `completed` outcome (its hooks may run, but the answer stands).
#[tokio::test(start_paused = true)]
async fn d1_shutdown_with_a_hook_keeps_a_completing_agents_answer() {
    let (model, catalog) = drain_tree_parts();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model.clone())
        .on_shutdown(|_ctx: HookContext| async move {
            tokio::time::sleep(ms(5)).await;
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    until_completing(&tree, &model, lead).await;
    let report = bounded(GUARD, "shutdown", tree.shutdown()).await;
    assert!(report.killed.is_empty(), "{report:?}");
    let got = tree.outcome(lead).expect("the lead settled");
    assert_kept_answer(&tree, lead, a(2), &got, "shutdown (with a hook)");
}

/// Defect 1: the same with no shutdown hook registered.
#[tokio::test(start_paused = true)]
async fn d1_shutdown_without_hooks_keeps_a_completing_agents_answer() {
    let (model, catalog) = drain_tree_parts();
    let tree = crate::support::harness::tree(model.clone(), catalog, TreeConfig::default()).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    until_completing(&tree, &model, lead).await;
    let report = bounded(GUARD, "shutdown", tree.shutdown()).await;
    assert!(report.killed.is_empty(), "{report:?}");
    let got = tree.outcome(lead).expect("the lead settled");
    assert_kept_answer(&tree, lead, a(2), &got, "shutdown (no hook)");
}

/// Defect 1 on worker threads: the abort of a completing lead races its worker's settle.
/// Whatever the message order, the lead keeps `completed: lead done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_abort_of_a_completing_agent_keeps_its_answer_mt() {
    const RUNS: u64 = 100;
    let mut lost = Vec::new();
    for run in 0..RUNS {
        let (model, catalog) = drain_tree_parts();
        let tree =
            crate::support::harness::tree(model.clone(), catalog, TreeConfig::default()).await;
        let lead = tree
            .spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted")
            .id();
        bounded(REAL_GUARD, "the lead to hold in completing", async {
            while tree.record(lead).map(|r| r.status) != Some(AgentStatus::Completing)
                || model.count_of(a(2)) < 1
            {
                tokio::task::yield_now().await;
            }
        })
        .await;
        yields(run % 7).await;
        tree.abort(lead).expect("the lead exists");
        let got = outcome(&tree, lead, REAL_GUARD).await;
        if got.status != AgentStatus::Completed || got.text.as_deref() != Some("lead done") {
            lost.push((run, got.status));
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        lost.is_empty(),
        "defect 1: {} of {RUNS} aborts replaced a completing lead's decided answer; first: {:?}",
        lost.len(),
        &lost[..lost.len().min(8)]
    );
}

// ---------------------------------------------------------------------------------------
// 3. Duplicate tool-call ids in one turn.
// ---------------------------------------------------------------------------------------

/// A model that gives every tool call of every turn the same id (as some OpenAI-compatible
/// servers send `""` for every call).
#[derive(Clone, Debug)]
struct SameIds {
    inner: RecordingModel,
    id: &'static str,
}

impl Model for SameIds {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let mut response = self.inner.turn(request).await?;
            for call in &mut response.tool_calls {
                call.id = self.id.to_owned();
            }
            Ok(response)
        })
    }
}

/// The `slow` tool: sleeps `ms`, answers `slow <tag>`.
fn slow_tool() -> impl agent_tree::Tool {
    FnTool::new(
        "slow",
        "sleeps, then answers",
        |_ctx, input: serde_json::Value| async move {
            let wait = input["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(ms(wait)).await;
            Ok::<String, ToolError>(format!("slow {}", input["tag"].as_str().unwrap_or("?")))
        },
    )
}

fn slow(tag: &str, wait: u64) -> Call {
    Call::tool("slow", json!({ "tag": tag, "ms": wait }))
}

/// The tool results of the request after the turn that made the calls, in order.
fn results_after_calls(model: &RecordingModel, agent: AgentId) -> Vec<String> {
    let requests = model.calls_of(agent);
    let second = requests
        .get(1)
        .unwrap_or_else(|| panic!("{agent} made {} model calls, wanted 2", requests.len()));
    second
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

async fn duplicate_user_tool_ids(id: &'static str, first_ms: u64, second_ms: u64) {
    let recorder = RecordingModel::new(ScriptedModel::new().script(
        "worker",
        Script::new([
            Turn::calls([slow("first", first_ms), slow("second", second_ms)]),
            Turn::answer("worked"),
        ]),
    ));
    let tree = Tree::builder()
        .catalog(catalog([leaf("worker")]))
        .model(SameIds {
            inner: recorder.clone(),
            id,
        })
        .tool(slow_tool())
        .expect("the name is free")
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree
        .spawn(SpawnRequest::new("worker", "two calls, one id"))
        .await
        .expect("admitted");
    let got = tokio::time::timeout(GUARD, handle.outcome()).await;
    let got = got.unwrap_or_else(|_| {
        panic!(
            "defect 3: two tool calls with the same id {id:?} (first {first_ms} ms, second \
             {second_ms} ms) hang the agent: it is {:?} after an hour; it made {} model calls",
            tree.record(a(1)).map(|r| r.status),
            recorder.calls_of(a(1)).len()
        )
    });
    assert!(got.is_completed(), "{got:?}");
    assert_eq!(
        results_after_calls(&recorder, a(1)),
        ["slow first", "slow second"],
        "defect 3: the results of calls with the same id {id:?} must come back by position, in \
         call order"
    );
    tree.shutdown().await;
}

/// Defect 3: two user-tool calls of one turn with the same id `"dup"`, the first finishing
/// first: the first's answer aborts the second's task (its handle was written into the first
/// call's slot), so the agent hangs forever. Correct: both results, in call order.
#[tokio::test(start_paused = true)]
async fn d3_duplicate_ids_first_finishing_first_do_not_hang() {
    duplicate_user_tool_ids("dup", 10, 20).await;
}

/// Defect 3: two user-tool calls with empty ids `""` (as some OpenAI-compatible servers send),
/// the first finishing first.
#[tokio::test(start_paused = true)]
async fn d3_empty_ids_do_not_hang() {
    duplicate_user_tool_ids("", 10, 20).await;
}

/// Defect 3: two user-tool calls with empty ids, the second finishing first: its answer is
/// written into the first call's slot, so the results come back swapped.
#[tokio::test(start_paused = true)]
async fn d3_empty_ids_second_finishing_first_keep_call_order() {
    duplicate_user_tool_ids("", 20, 10).await;
}

/// Defect 3 with orchestration calls: two foreground `Agent` calls of one turn with empty ids.
/// Correct: two children are spawned, and the owner gets both results (in call order) and
/// completes.
#[tokio::test(start_paused = true)]
async fn d3_two_foreground_spawns_with_empty_ids_both_run_and_answer() {
    let recorder = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::calls([
                        Call::spawn("worker", "task A"),
                        Call::spawn("worker", "task B"),
                    ]),
                    Turn::answer("lead done"),
                ]),
            )
            .script(
                "worker",
                Script::new([Turn::answer("worker done").after(ms(10))]),
            ),
    );
    let tree = Tree::builder()
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .model(SameIds {
            inner: recorder.clone(),
            id: "",
        })
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree
        .spawn(SpawnRequest::new("lead", "two children"))
        .await
        .expect("admitted");
    let got = tokio::time::timeout(GUARD, handle.outcome()).await;
    let workers: Vec<AgentId> = tree
        .snapshot()
        .agents()
        .filter(|r| r.agent_type == "worker")
        .map(|r| r.id)
        .collect();
    let got = got.unwrap_or_else(|_| {
        panic!(
            "defect 3: two foreground spawns with empty ids hang the owner (it is {:?}); \
             workers spawned: {workers:?}",
            tree.record(a(1)).map(|r| r.status)
        )
    });
    assert!(got.is_completed(), "{got:?}");
    assert_eq!(
        workers.len(),
        2,
        "defect 3: both calls spawn a child: {workers:?}"
    );
    let prompts: Vec<String> = workers
        .iter()
        .map(|&w| {
            recorder.calls_of(w)[0]
                .messages
                .iter()
                .find(|m| m.role == Role::User)
                .map(|m| m.content.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(prompts, ["task A", "task B"]);
    let results = results_after_calls(&recorder, a(1));
    assert_eq!(results.len(), 2, "{results:?}");
    for (result, worker) in results.iter().zip(&workers) {
        let value: serde_json::Value = serde_json::from_str(result).expect("JSON");
        assert_eq!(value["agent_id"], json!(worker.to_string()), "{results:?}");
        assert_eq!(value["status"], json!("completed"), "{results:?}");
    }
    tree.shutdown().await;
}

/// Defect 3 with two background spawns with the same id: the second must spawn its own child
/// (it is not a replay of the first).
#[tokio::test(start_paused = true)]
async fn d3_two_background_spawns_with_the_same_id_spawn_two_children() {
    let recorder = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::calls([
                        Call::spawn_background("worker", "task A"),
                        Call::spawn_background("worker", "task B"),
                    ]),
                    Turn::answer("lead done"),
                ]),
            )
            .script("worker", Script::new([Turn::answer("worker done")])),
    );
    let tree = Tree::builder()
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .model(SameIds {
            inner: recorder.clone(),
            id: "call",
        })
        .build()
        .await
        .expect("the tree builds");
    let lead = tree
        .spawn(SpawnRequest::new("lead", "two children"))
        .await
        .expect("admitted")
        .id();
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    bounded(GUARD, "idle", tree.idle()).await;
    let workers = tree
        .snapshot()
        .agents()
        .filter(|r| r.agent_type == "worker")
        .count();
    assert_eq!(
        workers,
        2,
        "defect 3: the second call with the same id spawned no child of its own:\n{}",
        tree.snapshot().render_text()
    );
    tree.shutdown().await;
}

/// lead (a1, drain) answers while its worker (a2) runs its shutdown hooks under
/// `Tree::shutdown_agent(a2)`: the worker cannot settle before its hook returns, so an abort
/// that reaches the lead meanwhile always finds it `completing` (no message race).
async fn completing_lead_with_a_stopping_worker() -> (Arc<Tree>, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "drain me"),
                    Turn::answer("lead done").after(ms(10)),
                ]),
            )
            .script("worker", hanging(1)),
    );
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(10)))
        .catalog(catalog([
            delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
            leaf("worker"),
        ]))
        .model(model.clone())
        .on_shutdown(|ctx: HookContext| async move {
            if ctx.agent_type == "worker" {
                tokio::time::sleep(ms(500)).await;
            }
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    (Arc::new(tree), model)
}

/// Defect 1, deterministic: `Tree::abort` of a completing lead whose worker is still in its
/// shutdown hooks. The lead had decided `completed: lead done`; the abort must only cut the
/// worker, not replace the lead's answer.
#[tokio::test(start_paused = true)]
async fn d1_abort_of_a_completing_agent_keeps_its_answer_while_its_child_stops() {
    let (tree, model) = completing_lead_with_a_stopping_worker().await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    let stopping = {
        let tree = tree.clone();
        tokio::spawn(async move { tree.shutdown_agent(a(2)).await })
    };
    until_completing(&tree, &model, lead).await;
    tokio::time::sleep(ms(100)).await;
    assert_eq!(
        tree.record(lead).map(|r| r.status),
        Some(AgentStatus::Completing)
    );
    tree.abort(lead).expect("the lead exists");
    let got = outcome(&tree, lead, GUARD).await;
    let _ = bounded(GUARD, "shutdown_agent", stopping).await;
    assert_eq!(
        (got.status, got.text.as_deref()),
        (AgentStatus::Completed, Some("lead done")),
        "defect 1: the abort replaced a completing lead's decided answer with {got:?}"
    );
    bounded(GUARD, "idle", tree.idle()).await;
}

/// Defect 1, deterministic: the owner's end reaches a completing lead whose worker is still
/// in its shutdown hooks (`Tree::shutdown_agent(worker)`): boss (a1) answers and aborts its
/// children; the lead (a2) had decided `completed: lead done` and must keep it.
#[tokio::test(start_paused = true)]
async fn d1_owner_end_keeps_a_completing_childs_answer_while_its_child_stops() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "boss",
                Script::new([
                    Turn::spawn_background("lead", "lead the work"),
                    Turn::answer("boss done").after(ms(200)),
                ]),
            )
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "drain me"),
                    Turn::answer("lead done").after(ms(10)),
                ]),
            )
            .script("worker", hanging(1)),
    );
    let tree = Arc::new(
        Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(10)))
            .catalog(catalog([
                delegator("boss", &["lead"]),
                delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
                leaf("worker"),
            ]))
            .model(model.clone())
            .on_shutdown(|ctx: HookContext| async move {
                if ctx.agent_type == "worker" {
                    tokio::time::sleep(ms(500)).await;
                }
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds"),
    );
    let boss = tree
        .spawn(SpawnRequest::new("boss", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(3), 1).await;
    let stopping = {
        let tree = tree.clone();
        tokio::spawn(async move { tree.shutdown_agent(a(3)).await })
    };
    until_completing(&tree, &model, a(2)).await;
    let boss_out = outcome(&tree, boss, GUARD).await;
    let got = outcome(&tree, a(2), GUARD).await;
    let _ = bounded(GUARD, "shutdown_agent", stopping).await;
    assert!(boss_out.is_completed(), "{boss_out:?}");
    assert_eq!(
        (got.status, got.text.as_deref()),
        (AgentStatus::Completed, Some("lead done")),
        "defect 1: the owner's end replaced a completing lead's decided answer with {got:?}"
    );
    bounded(GUARD, "idle", tree.idle()).await;
}

/// Defect 1 on worker threads: the owner's end (boss answers) races the draining lead's
/// worker settling; the lead keeps `completed: lead done` every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_owner_end_keeps_a_completing_childs_answer_mt() {
    const RUNS: u64 = 100;
    let mut lost = Vec::new();
    for run in 0..RUNS {
        let model = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "boss",
                    Script::new([
                        Turn::spawn_background("lead", "lead the work"),
                        Turn::answer("boss done").after(ms(3 + run % 2)),
                    ]),
                )
                .script(
                    "lead",
                    Script::new([
                        Turn::spawn_background("worker", "drain me"),
                        Turn::answer("lead done"),
                    ]),
                )
                .script("worker", hanging(1)),
        );
        let tree = crate::support::harness::tree(
            model.clone(),
            catalog([
                delegator("boss", &["lead"]),
                delegator("lead", &["worker"]).with_settle(SettlePolicy::Drain),
                leaf("worker"),
            ]),
            TreeConfig::default(),
        )
        .await;
        let boss = tree
            .spawn(SpawnRequest::new("boss", "go"))
            .await
            .expect("admitted")
            .id();
        let _ = outcome(&tree, boss, REAL_GUARD).await;
        let got = outcome(&tree, a(2), REAL_GUARD).await;
        // Only runs where the lead had answered before the boss did count.
        let answered = model.count_of(a(2)) >= 2;
        if answered
            && (got.status != AgentStatus::Completed || got.text.as_deref() != Some("lead done"))
        {
            lost.push((run, got.status));
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        lost.is_empty(),
        "defect 1: {} of {RUNS} owner ends replaced a completing lead's decided answer; first: \
         {:?}",
        lost.len(),
        &lost[..lost.len().min(8)]
    );
}

// ---------------------------------------------------------------------------------------
// 2. Usage recorded after the terminal event.
// ---------------------------------------------------------------------------------------

/// A model whose first `victim` turn returns (with 1 token of usage) exactly as its agent is
/// killed: inside its poll it has another thread call `Tree::kill` on its agent and keeps its
/// own thread until the record says `killed` (the other worker settles it), then returns
/// `Ready`. This pins the worker-thread race "the turn's future completes while the kill
/// settles the agent" without depending on luck. Every other turn is the scripted model's.
#[derive(Clone, Debug)]
struct ReturnsAsKilled {
    inner: ScriptedModel,
    cell: crate::support::TreeCell,
    returned: Arc<std::sync::atomic::AtomicBool>,
}

impl Model for ReturnsAsKilled {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type != "victim" {
            return self.inner.turn(request);
        }
        let (cell, returned, id) = (self.cell.clone(), self.returned.clone(), request.agent);
        Box::pin(async move {
            let tree = cell.get().expect("the tree is alive");
            // From a plain thread, so the wake-ups land where the other worker finds them.
            let killer = {
                let tree = tree.clone();
                std::thread::spawn(move || tree.kill(id))
            };
            let start = std::time::Instant::now();
            while tree.record(id).map(|r| r.status) != Some(AgentStatus::Killed)
                && start.elapsed() < Duration::from_secs(2)
            {
                std::thread::sleep(Duration::from_micros(50));
            }
            let killed = killer.join().expect("the killer thread");
            assert!(killed.is_ok(), "the kill was refused: {killed:?}");
            returned.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(tree);
            Ok(ModelResponse::text("late answer").with_usage(Usage::tokens(1, 0)))
        })
    }
}

fn usage_after_terminal(events: &[Event], agent: AgentId) -> Vec<u64> {
    let Some(end) = terminal_event(events, agent).map(|e| e.seq) else {
        return Vec::new();
    };
    events
        .iter()
        .filter(|e| {
            e.agent == agent && e.seq > end && matches!(e.kind, EventKind::UsageReported { .. })
        })
        .map(|e| e.seq)
        .collect()
}

/// Defect 2: a model turn that has just returned records its usage after its agent was
/// killed (`Tree::kill`) and settled: a `usage_reported` event follows the `killed` event,
/// and the snapshot at `Tree::idle()` bills less than the events sum. Correct: nothing of an
/// agent is recorded after its terminal event, and the snapshot equals the event sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_turn_returning_as_its_agent_is_killed_records_nothing_after_the_kill() {
    let cell = crate::support::TreeCell::new();
    let returned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let model = ReturnsAsKilled {
        inner: ScriptedModel::new().script(
            "lead",
            Script::new([
                Turn::spawn_background("victim", "be killed").usage(Usage::tokens(10, 0)),
                Turn::answer("lead done")
                    .usage(Usage::tokens(89, 0))
                    .after(ms(50)),
            ]),
        ),
        cell: cell.clone(),
        returned: returned.clone(),
    };
    let tree = Arc::new(
        Tree::builder()
            .catalog(catalog([delegator("lead", &["victim"]), leaf("victim")]))
            .model(model)
            .build()
            .await
            .expect("the tree builds"),
    );
    cell.set(&tree);
    let mut events = tree.subscribe();
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let _ = outcome(&tree, lead, REAL_GUARD).await;
    bounded(REAL_GUARD, "idle", tree.idle()).await;
    let at_idle = tree.snapshot();
    // The victim's turn task has returned; give it a moment to finish its bookkeeping.
    bounded(REAL_GUARD, "the victim's model call to return", async {
        while !returned.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    tokio::time::sleep(ms(20)).await;
    let events = events.drain();
    let victim = a(2);
    assert_eq!(
        tree.record(victim).map(|r| r.status),
        Some(AgentStatus::Killed)
    );
    let late = usage_after_terminal(&events, victim);
    let billed = at_idle.root().expect("root").subtree.total_tokens();
    let reported = reported_usage(&events).total_tokens();
    assert!(
        late.is_empty() && billed == reported,
        "defect 2: usage recorded after {victim} was killed: usage events {late:?} follow its \
         terminal event; the snapshot at idle bills {billed} tokens, the usage events sum to \
         {reported}"
    );
}

/// A model whose `victim` turns return after a varied number of real yields.
#[derive(Clone, Debug)]
struct YieldingVictim {
    inner: ScriptedModel,
    spins: Arc<std::sync::atomic::AtomicU64>,
    started: Arc<tokio::sync::Notify>,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

impl Model for YieldingVictim {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type != "victim" {
            return self.inner.turn(request);
        }
        let spins = self.spins.load(std::sync::atomic::Ordering::SeqCst);
        let (started, in_flight) = (self.started.clone(), self.in_flight.clone());
        in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        struct Done(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let done = Done(in_flight);
        Box::pin(async move {
            let _done = done;
            started.notify_one();
            yields(spins).await;
            Ok(ModelResponse::text("victim done").with_usage(Usage::tokens(1, 0)))
        })
    }
}

/// Defect 2 under a plain race on worker threads: the application kills an agent while its
/// model call returns (varied yields on both sides). Every run, no usage event of the victim
/// may follow its terminal event, and the snapshot at idle must equal the usage events' sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_kill_racing_a_returning_turn_never_bills_after_the_end_mt() {
    const RUNS: u64 = 500;
    let mut bad = Vec::new();
    for run in 0..RUNS {
        let model = YieldingVictim {
            inner: ScriptedModel::new(),
            spins: Arc::new(std::sync::atomic::AtomicU64::new(run % 5)),
            started: Arc::new(tokio::sync::Notify::new()),
            in_flight: Arc::default(),
        };
        let tree = crate::support::harness::tree(
            model.clone(),
            catalog([leaf("victim")]),
            TreeConfig::default(),
        )
        .await;
        let mut events = tree.subscribe();
        let victim = tree
            .spawn(SpawnRequest::new("victim", "race"))
            .await
            .expect("admitted")
            .id();
        bounded(
            REAL_GUARD,
            "the victim's model call",
            model.started.notified(),
        )
        .await;
        yields((run / 5) % 4).await;
        let _ = tree.kill(victim);
        bounded(REAL_GUARD, "idle", tree.idle()).await;
        let at_idle = tree.snapshot();
        bounded(REAL_GUARD, "the victim's model call to end", async {
            while model.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await;
        tokio::time::sleep(ms(2)).await;
        let events = events.drain();
        let late = usage_after_terminal(&events, victim);
        let billed = at_idle.root().expect("root").subtree.total_tokens();
        let reported = reported_usage(&events).total_tokens();
        if !late.is_empty() || billed != reported {
            bad.push((run, late, billed, reported));
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        bad.is_empty(),
        "defect 2: {} of {RUNS} runs recorded usage after the kill (run, late usage seqs, billed \
         at idle, events sum): {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}

// ---------------------------------------------------------------------------------------
// 4. `Tree::shutdown_agent` strands a waiting owner.
// ---------------------------------------------------------------------------------------

/// owner (a1) spawns child (a2) in the foreground; the child's model hangs and its shutdown
/// hook never returns, so `shutdown_agent(a2)` kills it at the deadline (1 s).
async fn owner_waiting_on_a_stuck_child() -> (Arc<Tree>, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "owner",
                Script::new([Turn::spawn("child", "hang"), Turn::answer("owner done")]),
            )
            .script("child", hanging(1)),
    );
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(1)))
        .catalog(catalog([delegator("owner", &["child"]), leaf("child")]))
        .model(model.clone())
        .on_shutdown(|ctx: HookContext| async move {
            if ctx.agent_type == "child" {
                std::future::pending::<()>().await;
            }
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    (Arc::new(tree), model)
}

fn stranded(tree: &Tree, model: &RecordingModel, owner: AgentId) -> String {
    format!(
        "owner {owner} is {:?} after {} model calls; live {}; actors alive {:?}\n{}",
        tree.record(owner).map(|r| r.status),
        model.count_of(owner),
        tree.live(),
        tree.alive_actors(),
        tree.snapshot().render_text()
    )
}

/// Defect 4: `Tree::shutdown_agent(child)` kills the child at the deadline while its owner's
/// turn waits on it (a foreground spawn): the owner must hear of the child's exit and go on
/// (here: complete), and `Tree::idle()` must return. A second `Tree::abort(owner)` must then
/// settle it too.
#[tokio::test(start_paused = true)]
async fn d4_shutdown_agent_of_a_foreground_child_does_not_strand_its_owner() {
    let (tree, model) = owner_waiting_on_a_stuck_child().await;
    let owner = tree
        .spawn(SpawnRequest::new("owner", "delegate"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    let report = bounded(GUARD, "shutdown_agent", tree.shutdown_agent(a(2)))
        .await
        .expect("the child exists");
    assert_eq!(report.killed, [a(2)], "{report:?}");
    let mut handle = tree.handle(owner).expect("the owner exists");
    if tokio::time::timeout(GUARD, handle.outcome()).await.is_err() {
        let before = stranded(&tree, &model, owner);
        tree.abort(owner).expect("the owner exists");
        let after_abort = tokio::time::timeout(GUARD, handle.outcome()).await;
        panic!(
            "defect 4: the owner is stranded after shutdown_agent killed its foreground child: \
             {before}\nafter a second Tree::abort(owner): {}",
            match after_abort {
                Ok(o) => format!("it settled {o:?}"),
                Err(_) => format!("still stranded: {}", stranded(&tree, &model, owner)),
            }
        );
    }
    let got = handle.try_outcome().expect("settled");
    assert!(got.is_completed(), "{got:?}");
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "defect 4: idle never returns: {}",
        stranded(&tree, &model, owner)
    );
}

/// Defect 4: the same with the owner aborted during the child's grace: the owner must settle
/// (aborted) once the child is killed at the deadline, and the tree must go idle.
#[tokio::test(start_paused = true)]
async fn d4_owner_aborted_in_the_grace_of_its_childs_shutdown_still_settles() {
    let (tree, model) = owner_waiting_on_a_stuck_child().await;
    let owner = tree
        .spawn(SpawnRequest::new("owner", "delegate"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    let stopping = {
        let tree = tree.clone();
        tokio::spawn(async move { tree.shutdown_agent(a(2)).await })
    };
    tokio::time::sleep(ms(500)).await;
    tree.abort(owner).expect("the owner exists");
    let report = bounded(GUARD, "shutdown_agent", stopping)
        .await
        .expect("joined")
        .expect("the child exists");
    assert_eq!(report.killed, [a(2)], "{report:?}");
    let mut handle = tree.handle(owner).expect("the owner exists");
    let settled = tokio::time::timeout(GUARD, handle.outcome()).await;
    assert!(
        settled.is_ok(),
        "defect 4: the owner, aborted while its child's shutdown ran, is stranded: {}",
        stranded(&tree, &model, owner)
    );
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "defect 4: idle never returns: {}",
        stranded(&tree, &model, owner)
    );
}

/// Defect 4, the other order of the same race: the shutdown is awaited by the test itself
/// (so it may forget the killed child's actor before the owner reads its exit) and the abort
/// comes from a task.
#[tokio::test(start_paused = true)]
async fn d4_owner_aborted_in_the_grace_still_settles_when_the_shutdown_returns_first() {
    let (tree, model) = owner_waiting_on_a_stuck_child().await;
    let owner = tree
        .spawn(SpawnRequest::new("owner", "delegate"))
        .await
        .expect("admitted")
        .id();
    model.until_calls(a(2), 1).await;
    let aborter = {
        let tree = tree.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(500)).await;
            tree.abort(owner).expect("the owner exists");
        })
    };
    let report = bounded(GUARD, "shutdown_agent", tree.shutdown_agent(a(2)))
        .await
        .expect("the child exists");
    aborter.await.expect("the aborter");
    assert_eq!(report.killed, [a(2)], "{report:?}");
    let mut handle = tree.handle(owner).expect("the owner exists");
    let settled = tokio::time::timeout(GUARD, handle.outcome()).await;
    assert!(
        settled.is_ok(),
        "defect 4: the owner, aborted while its child's shutdown ran, is stranded: {}",
        stranded(&tree, &model, owner)
    );
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "defect 4: idle never returns: {}",
        stranded(&tree, &model, owner)
    );
}

/// Defect 4 on worker threads, looped (even runs: the owner's run goes on; odd runs: the
/// owner is aborted in the child's grace): the owner must never be stranded, and a stranded
/// owner is not even freed by a second `Tree::abort`. (The shutdown forgets the killed child's
/// actor before the owner reads the child's exit from ractor, so the owner never learns that
/// the child it drains for has settled.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_shutdown_agent_never_strands_a_waiting_owner_mt() {
    const RUNS: u64 = 40;
    const PAIRS: usize = 6;
    // Per kind (0: the owners' runs go on, 1: aborted in the grace): owners, stranded.
    let mut tally = [(0usize, 0usize); 2];
    let mut first: Option<String> = None;
    for run in 0..RUNS {
        let kind = (run % 2) as usize;
        let model = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "owner",
                    Script::new([Turn::spawn("child", "hang"), Turn::answer("owner done")]),
                )
                .script("child", hanging(1)),
        );
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(5)))
            .catalog(catalog([delegator("owner", &["child"]), leaf("child")]))
            .model(model.clone())
            .on_shutdown(|ctx: HookContext| async move {
                if ctx.agent_type == "child" {
                    std::future::pending::<()>().await;
                }
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds");
        let mut owners = Vec::new();
        for _ in 0..PAIRS {
            owners.push(
                tree.spawn(SpawnRequest::new("owner", "delegate"))
                    .await
                    .expect("admitted")
                    .id(),
            );
        }
        bounded(
            REAL_GUARD,
            "every child's model call",
            model.until("every child in flight", |calls| {
                calls.iter().filter(|c| c.agent_type == "child").count() == PAIRS
            }),
        )
        .await;
        let children: Vec<AgentId> = owners
            .iter()
            .map(|&o| tree.record(o).expect("owner").children[0])
            .collect();
        yields(run % 4).await;
        let shutdowns = shutdown_each(&tree, &children);
        if kind == 0 {
            bounded(REAL_GUARD, "shutdown_agent", shutdowns).await;
        } else {
            // The owners are aborted in their children's grace.
            let ((), ()) = tokio::join!(bounded(REAL_GUARD, "shutdown_agent", shutdowns), async {
                tokio::time::sleep(Duration::from_millis(1 + run % 3)).await;
                for &owner in &owners {
                    tree.abort(owner).expect("the owner exists");
                }
            });
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), tree.idle()).await;
        let stranded_now: Vec<AgentId> = owners
            .iter()
            .copied()
            .filter(|&o| tree.record(o).is_some_and(|r| r.status.is_live()))
            .collect();
        tally[kind].0 += PAIRS;
        tally[kind].1 += stranded_now.len();
        if let (Some(&owner), None) = (stranded_now.first(), &first) {
            let before = stranded(&tree, &model, owner);
            // A second abort of the stranded owner.
            let _ = tree.abort(owner);
            let mut handle = tree.handle(owner).expect("owner");
            let again = tokio::time::timeout(Duration::from_millis(100), handle.outcome()).await;
            first = Some(format!(
                "run {run}: {before}\nafter a second Tree::abort({owner}): {}",
                if again.is_ok() {
                    "it settled"
                } else {
                    "still stranded"
                }
            ));
        }
        let _ = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        first.is_none(),
        "defect 4: owners stranded after shutdown_agent killed the child they wait on: {} of {} \
         whose run went on, {} of {} aborted in the grace; first: {}",
        tally[0].1,
        tally[0].0,
        tally[1].1,
        tally[1].0,
        first.as_deref().unwrap_or_default()
    );
}

/// `Tree::shutdown_agent` of each child, one after the other.
async fn shutdown_each(tree: &Tree, children: &[AgentId]) {
    let mut set = Vec::new();
    for &child in children {
        set.push(tree.shutdown_agent(child));
    }
    for shutdown in set {
        let _ = shutdown.await;
    }
}

/// Defect 4, another symptom of the same cause: a *background* child killed by
/// `Tree::shutdown_agent` at its deadline is never noticed in its owner's conversation (no
/// `[subagent aN killed]` notice at the owner's next turn), because the owner never reads the
/// child's exit. Worker threads, looped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_a_background_child_killed_by_shutdown_agent_is_noticed_by_its_owner_mt() {
    const RUNS: u64 = 20;
    let mut missed = Vec::new();
    for run in 0..RUNS {
        // The owner's pause (real time) outlasts the child's 5 ms grace with room to spare,
        // even on a loaded machine: the notice must land before the owner's last turn.
        let recorder = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "owner",
                    Script::new([
                        Turn::spawn_background("child", "hang"),
                        Turn::calls([slow("pause", 250)]),
                        Turn::answer("owner done"),
                    ]),
                )
                .script("child", hanging(1)),
        );
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(5)))
            .catalog(catalog([
                delegator("owner", &["child"]).with_tools(ToolSet::only(["slow"])),
                leaf("child"),
            ]))
            .model(recorder.clone())
            .tool(slow_tool())
            .expect("the name is free")
            .on_shutdown(|ctx: HookContext| async move {
                if ctx.agent_type == "child" {
                    std::future::pending::<()>().await;
                }
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds");
        let owner = tree
            .spawn(SpawnRequest::new("owner", "delegate"))
            .await
            .expect("admitted")
            .id();
        bounded(REAL_GUARD, "the child's model call", async {
            while recorder.calls_of(a(2)).is_empty() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        yields(run % 4).await;
        let _ = bounded(REAL_GUARD, "shutdown_agent", tree.shutdown_agent(a(2))).await;
        let _ = outcome(&tree, owner, REAL_GUARD).await;
        let last = recorder
            .calls_of(owner)
            .last()
            .cloned()
            .expect("the owner's requests");
        let noticed = last
            .messages
            .iter()
            .any(|m| m.role == Role::User && m.content.starts_with("[subagent a2 killed]"));
        if !noticed {
            missed.push(run);
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        missed.is_empty(),
        "defect 4: in {} of {RUNS} runs the owner's last turn never heard that its background \
         child was killed by shutdown_agent: runs {missed:?}",
        missed.len()
    );
}

// ---------------------------------------------------------------------------------------
// 5. A steer receipted `delivered` is then dropped.
// ---------------------------------------------------------------------------------------

const STEER: &str = "late guidance";

fn child_read_the_steer(model: &RecordingModel, child: AgentId) -> bool {
    model.calls_of(child).iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.role == Role::User && m.content == STEER)
    })
}

/// The receipt the lead's `steer_subagent` call got, read from its third request.
fn steer_receipt(model: &RecordingModel, lead: AgentId) -> Option<String> {
    let requests = model.calls_of(lead);
    let third = requests.get(2)?;
    let result = third.messages.iter().rev().find(|m| m.role == Role::Tool)?;
    if result.is_error {
        return Some(format!("error: {}", result.content));
    }
    let value: serde_json::Value = serde_json::from_str(&result.content).ok()?;
    value["receipt"].as_str().map(str::to_owned)
}

/// lead spawns a worker in the background, steers it after `steer_after`, then waits for it;
/// the worker answers after `answer_after` (and, if it got the steer, once more).
async fn steer_race(steer_after: Duration, answer_after: Duration) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "work"),
                    Turn::calls([Call::steer(agent_tree::testkit::Target::Spawned(0), STEER)])
                        .after(steer_after),
                    // Wait for the worker, so its end is its own, not the lead's abort.
                    Turn::calls([Call::result(agent_tree::testkit::Target::Spawned(0))]),
                    Turn::answer("lead done"),
                ]),
            )
            .script(
                "worker",
                Script::new([
                    Turn::answer("worker done").after(answer_after),
                    Turn::answer("worker read the steer"),
                ]),
            ),
    );
    let tree = crate::support::harness::tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        TreeConfig::default(),
    )
    .await;
    (tree, model)
}

/// Defect 5, deterministic: the lead's `steer_subagent` reaches the worker in the instant its
/// run ends (both turns return at the same virtual instant): the tool answers `delivered`,
/// yet the steer never enters the worker's conversation. Correct: a `delivered` receipt means
/// a later request of the worker carries the steer (or the call is refused).
#[tokio::test(start_paused = true)]
async fn d5_a_delivered_steer_from_a_tool_is_read() {
    let mut lost = Vec::new();
    for answer_after in 98..=102u64 {
        let (tree, model) = steer_race(ms(100), ms(answer_after)).await;
        let lead = tree
            .spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted")
            .id();
        let _ = outcome(&tree, lead, GUARD).await;
        bounded(GUARD, "idle", tree.idle()).await;
        let receipt = steer_receipt(&model, lead);
        if receipt.as_deref() == Some("delivered") && !child_read_the_steer(&model, a(2)) {
            lost.push(answer_after);
        }
        tree.shutdown().await;
    }
    assert!(
        lost.is_empty(),
        "defect 5: the steer was receipted `delivered` but never reached the worker's \
         conversation (worker answering at {lost:?} ms, steer at 100 ms)"
    );
}

/// Defect 5 under load on worker threads: in each tree 16 leads steer their workers while
/// the workers' runs end at about the same time. Every `delivered` receipt must be followed by
/// the worker reading the steer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_a_delivered_steer_from_a_tool_is_never_lost_mt() {
    const RUNS: u64 = 200;
    const LEADS: usize = 16;
    let (mut delivered, mut lost) = (0, Vec::new());
    for run in 0..RUNS {
        // Tokio's timer ticks in milliseconds: equal delays fire in the same tick.
        let steer_after = ms(2 + run % 2);
        let answer_after = ms(2 + run / 2 % 2);
        let (tree, model) = steer_race(steer_after, answer_after).await;
        let mut leads = Vec::new();
        for _ in 0..LEADS {
            leads.push(
                tree.spawn(SpawnRequest::new("lead", "go"))
                    .await
                    .expect("admitted")
                    .id(),
            );
        }
        for &lead in &leads {
            let _ = outcome(&tree, lead, REAL_GUARD).await;
        }
        bounded(REAL_GUARD, "idle", tree.idle()).await;
        for &lead in &leads {
            let worker = tree.record(lead).expect("lead").children[0];
            if steer_receipt(&model, lead).as_deref() == Some("delivered") {
                delivered += 1;
                if !child_read_the_steer(&model, worker) {
                    lost.push((run, worker));
                }
            }
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        lost.is_empty(),
        "defect 5: {} of {delivered} `delivered` steers (of {} sent) never reached the worker's \
         conversation: (run, worker) {:?}",
        lost.len(),
        RUNS as usize * LEADS,
        &lost[..lost.len().min(10)]
    );
}

/// Defect 5 through the application's `Tree::steer`, on worker threads: a `Delivered`
/// receipt must be followed by the agent reading the steer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_a_delivered_steer_from_the_application_is_never_lost_mt() {
    const RUNS: u64 = 150;
    let (mut delivered, mut lost) = (0, Vec::new());
    for run in 0..RUNS {
        let model = RecordingModel::new(ScriptedModel::new().script(
            "worker",
            Script::new([
                Turn::answer("worker done").after(Duration::from_micros(500 + (run % 7) * 150)),
                Turn::answer("worker read the steer"),
            ]),
        ));
        let tree = crate::support::harness::tree(
            model.clone(),
            catalog([leaf("worker")]),
            TreeConfig::default(),
        )
        .await;
        let worker = tree
            .spawn(SpawnRequest::new("worker", "work"))
            .await
            .expect("admitted")
            .id();
        tokio::time::sleep(Duration::from_micros(400 + (run / 7 % 5) * 150)).await;
        let receipt = bounded(REAL_GUARD, "the steer", tree.steer(worker, STEER)).await;
        let _ = outcome(&tree, worker, REAL_GUARD).await;
        if matches!(receipt, Ok(SteerReceipt::Delivered)) {
            delivered += 1;
            if !child_read_the_steer(&model, worker) {
                lost.push(run);
            }
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        lost.is_empty(),
        "defect 5: {} of {delivered} `Delivered` application steers (of {RUNS} runs) were never \
         read: runs {lost:?}",
        lost.len()
    );
}

/// Defect 5, a deterministic variant: a steer delivered during an agent's last allowed turn
/// (`max_turns`) is receipted `Delivered`, then the run ends over it unread and nothing says
/// so. Correct: never silently lost (read, or the steer refused).
#[tokio::test(start_paused = true)]
async fn d5_a_steer_delivered_during_the_last_allowed_turn_is_not_silently_lost() {
    let model = RecordingModel::new(ScriptedModel::new().script(
        "worker",
        Script::new([Turn::answer("worker done").after(ms(100))]),
    ));
    let mut worker = leaf("worker");
    worker.max_turns = Some(1);
    let tree =
        crate::support::harness::tree(model.clone(), catalog([worker]), TreeConfig::default())
            .await;
    let id = tree
        .spawn(SpawnRequest::new("worker", "work"))
        .await
        .expect("admitted")
        .id();
    tokio::time::sleep(ms(50)).await;
    let receipt = tree.steer(id, STEER).await;
    let got = outcome(&tree, id, GUARD).await;
    assert!(
        !matches!(receipt, Ok(SteerReceipt::Delivered)) || child_read_the_steer(&model, id),
        "defect 5: the steer was receipted {receipt:?}, then {id} settled {:?} without ever \
         reading it",
        got.status
    );
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 6. `alive_actors()` not empty right after `Tree::shutdown` returns.
// ---------------------------------------------------------------------------------------

/// One random tree: `leads` leads, each with background workers; models that answer soon,
/// later or hang; shutdown hooks that return at once, take a few ms, or hang (killed at the
/// deadline); some agents settle just before the shutdown starts.
async fn random_tree(rng: &mut crate::support::harness::Rng) -> (Tree, RecordingModel) {
    let workers = rng.range(0, 4) as usize;
    let lead_then = match rng.below(3) {
        0 => Turn::hang(),
        1 => Turn::answer("lead done").after(ms(rng.range(0, 3))),
        _ => Turn::calls([Call::wait(
            (0..workers).map(agent_tree::testkit::Target::Spawned),
            WaitPolicy::AllSettled,
        )]),
    };
    let worker_turn = match rng.below(3) {
        0 => Turn::hang(),
        _ => Turn::answer("worker done").after(ms(rng.range(0, 3))),
    };
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::calls(
                        (0..workers).map(|i| Call::spawn_background("worker", format!("w{i}"))),
                    ),
                    lead_then,
                    Turn::answer("lead done"),
                ]),
            )
            .script("worker", Script::new([worker_turn]))
            .script("quick", Script::new([Turn::answer("quick done")])),
    );
    let hang_hook = rng.chance(40);
    let seed = rng.next_u64();
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(ms(rng.range(5, 20)))
                .with_max_total_agents(256),
        )
        .catalog(catalog([
            delegator("lead", &["worker"]).with_settle(if rng.chance(50) {
                SettlePolicy::Drain
            } else {
                SettlePolicy::AbortChildren
            }),
            leaf("worker"),
            leaf("quick"),
        ]))
        .model(model.clone())
        .on_shutdown(move |ctx: HookContext| async move {
            let n = ctx.agent.get().wrapping_mul(seed | 1) >> 7;
            match n % 4 {
                0 if hang_hook => std::future::pending::<()>().await,
                1 => tokio::time::sleep(ms(n % 3)).await,
                2 => tokio::task::yield_now().await,
                _ => {}
            }
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    (tree, model)
}

/// Defect 6: right after `tree.shutdown().await` returns, `tree.alive_actors()` must be
/// empty: shutdown returns only when every actor of the tree has exited. Worker threads, many
/// trees of varied shape, some with hanging models and hooks, some agents settling just
/// before the shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_no_actor_is_alive_when_shutdown_returns_mt() {
    const TREES: u64 = 300;
    let mut rng = crate::support::harness::Rng::new(7);
    let mut bad = Vec::new();
    for run in 0..TREES {
        let (tree, _model) = random_tree(&mut rng).await;
        for _ in 0..rng.range(1, 4) {
            tree.spawn(SpawnRequest::new("lead", "go"))
                .await
                .expect("admitted");
        }
        if rng.chance(50) {
            // One settles just before the shutdown begins.
            let _ = bounded(
                REAL_GUARD,
                "quick",
                tree.run(SpawnRequest::new("quick", "now")),
            )
            .await;
        }
        yields(rng.range(0, 40)).await;
        if rng.chance(30) {
            tokio::time::sleep(ms(rng.range(1, 3))).await;
        }
        let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            let statuses: Vec<_> = alive
                .iter()
                .map(|&id| (id, tree.record(id).map(|r| r.status)))
                .collect();
            bad.push(format!(
                "tree {run}: alive {statuses:?} (report {report:?})"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "defect 6: {} of {TREES} shutdowns returned with actors still alive; first: {}",
        bad.len(),
        bad.first().map(String::as_str).unwrap_or_default()
    );
}

/// Defect 6, the simplest shape: an agent that settled an instant ago (its actor still
/// stopping) must not be alive once `shutdown` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_an_agent_that_just_settled_is_not_alive_after_shutdown_mt() {
    const RUNS: u64 = 200;
    let mut bad = Vec::new();
    for run in 0..RUNS {
        let model = ScriptedModel::new().script("quick", Script::new([Turn::answer("done")]));
        let tree =
            crate::support::harness::tree(model, catalog([leaf("quick")]), TreeConfig::default())
                .await;
        let _ = bounded(
            REAL_GUARD,
            "quick",
            tree.run(SpawnRequest::new("quick", "now")),
        )
        .await;
        yields(run % 3).await;
        let _ = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push((run, alive));
        }
    }
    assert!(
        bad.is_empty(),
        "defect 6: {} of {RUNS} shutdowns returned with an actor alive: {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}

// ---------------------------------------------------------------------------------------
// 7. A shutdown hook that blocks its thread.
// ---------------------------------------------------------------------------------------

/// What one blocking-hook shutdown did.
#[derive(Debug)]
#[allow(dead_code)] // read through `Debug` in the failure messages
struct BlockedShutdown {
    took: Duration,
    killed: Vec<AgentId>,
    alive_after: Vec<AgentId>,
}

/// lead (a1) with four hanging workers (a2..a5); the shutdown hooks of `blocking` block their
/// thread for 2 s (`std::thread::sleep`, not an await); grace 300 ms; a real multi-thread
/// runtime of `workers` worker threads. The shutdown is awaited by a task on the runtime
/// (`spawned`) or from `block_on`.
fn blocking_hook_shutdown(
    workers: usize,
    blocking: &'static [u64],
    spawned: bool,
) -> BlockedShutdown {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(async move {
        let model = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "lead",
                    Script::new([
                        Turn::calls(
                            (0..4).map(|i| Call::spawn_background("worker", format!("w{i}"))),
                        ),
                        Turn::hang(),
                    ]),
                )
                .script("worker", hanging(1)),
        );
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(300)))
            .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
            .model(model.clone())
            .on_shutdown(move |ctx: HookContext| async move {
                if blocking.contains(&ctx.agent.get()) {
                    std::thread::sleep(Duration::from_secs(2));
                }
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds");
        tree.spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted");
        bounded(
            REAL_GUARD,
            "every worker's model call",
            model.until_all_calls(&[a(2), a(3), a(4), a(5)], 1),
        )
        .await;
        let tree = Arc::new(tree);
        let start = std::time::Instant::now();
        let (killed, alive_after) = if spawned {
            let tree = tree.clone();
            tokio::spawn(async move {
                let killed = tree.shutdown().await.killed;
                (killed, tree.alive_actors())
            })
            .await
            .expect("the shutdown task")
        } else {
            let killed = tree.shutdown().await.killed;
            (killed, tree.alive_actors())
        };
        BlockedShutdown {
            took: start.elapsed(),
            killed,
            alive_after,
        }
    });
    // Do not wait for a blocked worker thread.
    runtime.shutdown_background();
    result
}

const D7_BOUND: Duration = Duration::from_millis(1300);

/// Defect 7: one shutdown hook (a3's) blocks its thread for 2 s; the shutdown, with a 300 ms
/// grace, must return within the grace plus 1 s, with no actor left alive. Real 2-worker
/// runtime; awaited from a task and from `block_on` (one run each).
#[test]
fn d7_one_blocking_shutdown_hook_does_not_stretch_the_grace() {
    let mut over = Vec::new();
    for spawned in [true, false] {
        let got = blocking_hook_shutdown(2, &[3], spawned);
        if got.took > D7_BOUND || !got.alive_after.is_empty() {
            over.push(format!(
                "awaited {}: {got:?}",
                if spawned {
                    "in a task"
                } else {
                    "from block_on"
                }
            ));
        }
    }
    assert!(
        over.is_empty(),
        "defect 7: a hook blocking its thread for 2 s stretched the 300 ms grace past \
         {D7_BOUND:?}: {over:?}"
    );
}

/// Defect 7, as many blocking hooks as worker threads (a2's and a3's on a 2-worker runtime):
/// the deadline's timer cannot fire while both workers are blocked, so the shutdown takes as
/// long as the hooks and returns with actors still alive. Correct: grace + 1 s at most, no
/// actor alive (a hook must not be able to hold the runtime the shutdown needs).
#[test]
fn d7_blocking_hooks_on_every_worker_do_not_stretch_the_grace() {
    let got = blocking_hook_shutdown(2, &[2, 3], true);
    assert!(
        got.took <= D7_BOUND && got.alive_after.is_empty(),
        "defect 7: two hooks blocking their threads for 2 s (2 workers) stretched the 300 ms \
         grace: {got:?}"
    );
}

/// Defect 7 on a one-worker multi-thread runtime: one blocking hook holds the only worker.
#[test]
fn d7_a_blocking_hook_on_a_one_worker_runtime_does_not_stretch_the_grace() {
    let got = blocking_hook_shutdown(1, &[3], false);
    assert!(
        got.took <= D7_BOUND && got.alive_after.is_empty(),
        "defect 7: a hook blocking its thread for 2 s (1 worker) stretched the 300 ms grace: \
         {got:?}"
    );
}

/// Defect 6, paused time: leads (with and without workers, drain or not) settle at the very
/// instant the shutdown begins. Every actor must have exited when `shutdown` returns.
#[tokio::test(start_paused = true)]
async fn d6_agents_settling_as_the_shutdown_begins_are_not_alive_after_it() {
    let mut bad = Vec::new();
    for variant in 0..24u64 {
        let workers = (variant % 3) as usize;
        let model = ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::calls(
                        (0..workers).map(|i| Call::spawn_background("worker", format!("w{i}"))),
                    ),
                    Turn::answer("lead done").after(ms(10)),
                ]),
            )
            .script(
                "worker",
                Script::new([Turn::answer("worker done").after(ms(10 - variant / 12))]),
            );
        let settle = if variant / 3 % 2 == 0 {
            SettlePolicy::Drain
        } else {
            SettlePolicy::AbortChildren
        };
        let builder = Tree::builder()
            .catalog(catalog([
                delegator("lead", &["worker"]).with_settle(settle),
                leaf("worker"),
            ]))
            .model(model);
        let builder = if variant / 6 % 2 == 0 {
            builder.on_shutdown(|_ctx: HookContext| async move { Ok::<(), HookError>(()) })
        } else {
            builder
        };
        let tree = builder.build().await.expect("the tree builds");
        tree.spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted");
        tokio::time::sleep(ms(10)).await;
        let report = bounded(GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push(format!(
                "variant {variant}: alive {alive:?}, report {report:?}"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "defect 6: shutdown returned with actors alive: {bad:#?}"
    );
}

/// lead (a1) with `workers` hanging workers, each with `subs` hanging sub-workers.
async fn killable_team(workers: usize, subs: usize) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::calls(
                        (0..workers).map(|i| Call::spawn_background("worker", format!("w{i}"))),
                    ),
                    Turn::hang(),
                ]),
            )
            .script(
                "worker",
                Script::new([
                    Turn::calls((0..subs).map(|i| Call::spawn_background("sub", format!("s{i}")))),
                    Turn::hang(),
                ]),
            )
            .script("sub", hanging(1)),
    );
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_max_total_agents(512)
                .with_max_children_per_agent(64),
        )
        .catalog(catalog([
            delegator("lead", &["worker"]),
            delegator("worker", &["sub"]),
            leaf("sub"),
        ]))
        .model(model.clone())
        .build()
        .await
        .expect("the tree builds");
    (tree, model)
}

/// Defect 6: `Tree::kill(lead)` records the lead's descendants `killed` at once, while ractor
/// is still killing their actors; a shutdown that starts right then skips them (they are
/// terminal) and returns while their actors still run. Correct: no actor alive when
/// `shutdown` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_descendants_of_a_killed_agent_are_not_alive_after_shutdown_mt() {
    const RUNS: u64 = 300;
    let mut bad = Vec::new();
    for run in 0..RUNS {
        let (workers, subs) = (4 + (run % 4) as usize, (run % 3) as usize);
        let (tree, model) = killable_team(workers, subs).await;
        tree.spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted");
        let total = 1 + workers + workers * subs;
        bounded(
            REAL_GUARD,
            "every agent's model call",
            model.until("every agent in flight", |calls| {
                calls.len() >= total + 1 + workers * usize::from(subs > 0)
            }),
        )
        .await;
        tree.kill(a(1)).expect("the lead runs");
        bounded(REAL_GUARD, "idle", tree.idle()).await;
        yields(run % 3).await;
        let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push(format!("run {run}: alive {alive:?} (report {report:?})"));
        }
    }
    assert!(
        bad.is_empty(),
        "defect 6: {} of {RUNS} shutdowns returned with actors of a killed subtree alive; \
         first: {}",
        bad.len(),
        bad.first().map(String::as_str).unwrap_or_default()
    );
}

/// Defect 6, paused time: the same right after `Tree::kill(lead)`.
#[tokio::test(start_paused = true)]
async fn d6_descendants_of_a_killed_agent_are_not_alive_after_shutdown() {
    let mut bad = Vec::new();
    for variant in 0..6u64 {
        let (workers, subs) = (3 + variant as usize, (variant % 3) as usize);
        let (tree, model) = killable_team(workers, subs).await;
        tree.spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted");
        let total = 1 + workers + workers * subs;
        model
            .until("every agent in flight", |calls| {
                calls.len() >= total + 1 + workers * usize::from(subs > 0)
            })
            .await;
        tree.kill(a(1)).expect("the lead runs");
        bounded(GUARD, "idle", tree.idle()).await;
        let report = bounded(GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push(format!(
                "variant {variant}: alive {alive:?} (report {report:?})"
            ));
        }
    }
    assert!(bad.is_empty(), "defect 6: {bad:#?}");
}
