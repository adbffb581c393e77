//! Trees across nodes with real nodes: each worker node is this test binary re-run as a
//! child process (`worker_node`, told what to be by `AGENT_TREE_CLUSTER_WORKER`), joined to
//! the owner's node on 127.0.0.1. One node server per process, so every scenario runs in
//! the one test, serially, against the one owner node.
//!
//! The scenarios are filed by behaviour, one module each (spawning, control, supervision,
//! node failures, shutdown, scale, the frame limit, recovery, hosted journals, resume, the
//! kept conversation, earlier children, the ids in a kept conversation, the inherited
//! context, TLS); `support` holds what several of them share beyond this harness.
//!
//! Built only with the `cluster` feature (`cargo test --features cluster --test cluster`).

mod at_scale;
mod context;
mod control;
mod conversation_ids;
mod earlier_children;
mod frame_limit;
mod hosted_journals;
mod kept_conversation;
mod node_failures;
mod recovery;
mod resume;
mod shutdown;
mod spawning;
mod supervision;
mod support;
mod tls;
#[path = "../../examples/cluster/worker.rs"]
mod worker;
#[allow(
    clippy::wildcard_imports,
    reason = "the scenarios, run by name in `scenarios`"
)]
use {
    at_scale::*, context::*, control::*, conversation_ids::*, earlier_children::*, frame_limit::*,
    hosted_journals::*, kept_conversation::*, node_failures::*, recovery::*, resume::*,
    shutdown::*, spawning::*, supervision::*, tls::*,
};

use std::time::{Duration, Instant};

use agent_tree::cluster::Node;
use agent_tree::protocol::{AgentDefinition, AgentId, SubagentAllowance};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{Catalog, Tree};
use worker::{WorkerArgs, WorkerProcess};

const WORKER_ENV: &str = "AGENT_TREE_CLUSTER_WORKER";
/// `broken`: the worker hosts with a factory whose tree does not build (no model).
const WORKER_MODE_ENV: &str = "AGENT_TREE_CLUSTER_WORKER_MODE";
const LEASE_MS: u64 = 3_000;
const GRACE_MS: u64 = 500;

/// The worker side: runs only when the owner's test starts this binary as a worker.
#[test]
#[ignore = "a worker node, started as a child process by `nodes_as_child_processes`"]
fn worker_node() {
    let Ok(args) = std::env::var(WORKER_ENV) else {
        return;
    };
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    let args = WorkerArgs::parse(&args).expect("worker arguments");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match std::env::var(WORKER_MODE_ENV).as_deref() {
        Ok("broken") => runtime.block_on(worker::run_worker_hosting(args, Tree::builder)),
        Ok(mode @ ("journaled" | "journaled-unique")) => runtime.block_on(
            hosted_journals::run_journaled_worker(args, mode == "journaled-unique"),
        ),
        _ => runtime.block_on(worker::run_worker(args)),
    }
}

struct Owner {
    node: Node,
    port: u16,
    workers: u32,
}

impl Owner {
    async fn start() -> Owner {
        let port = worker::free_port();
        let node = Node::start(worker::node_config("owner", port, LEASE_MS, GRACE_MS))
            .await
            .expect("the owner's node starts");
        Owner {
            node,
            port,
            workers: 0,
        }
    }

    /// A fresh worker process, joined; its name.
    async fn worker(&mut self) -> (String, WorkerProcess) {
        self.worker_in_mode("normal").await
    }

    /// A fresh worker process in `mode` (see [`WORKER_MODE_ENV`]), joined; its name.
    async fn worker_in_mode(&mut self, mode: &str) -> (String, WorkerProcess) {
        self.workers += 1;
        let name = format!("worker-{}", self.workers);
        let process = self
            .worker_process(&name, worker::free_port(), mode, false)
            .await;
        (name, process)
    }

    /// The command line of a worker process named `name` listening on `port`.
    fn worker_command(&self, name: &str, port: u16, mode: &str) -> std::process::Command {
        let args = WorkerArgs {
            name: name.to_owned(),
            port,
            owner: "owner".into(),
            owner_addr: format!("127.0.0.1:{}", self.port).parse().unwrap(),
            lease_ms: LEASE_MS,
            grace_ms: GRACE_MS,
        };
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["--ignored", "--exact", "worker_node", "--nocapture"])
            .env(WORKER_ENV, args.to_args().join(" "))
            .env(WORKER_MODE_ENV, mode);
        command
    }

    /// A worker process named `name` on `port`: joined (and awaited), or, `deferred`,
    /// started and waiting to be told to join.
    async fn worker_process(
        &self,
        name: &str,
        port: u16,
        mode: &str,
        deferred: bool,
    ) -> WorkerProcess {
        let command = self.worker_command(name, port, mode);
        let process = tokio::task::spawn_blocking(move || {
            if deferred {
                WorkerProcess::start_deferred(command)
            } else {
                WorkerProcess::start(command)
            }
        })
        .await
        .unwrap();
        if !deferred {
            self.node.await_peer(name).await.expect("the worker joined");
        }
        process
    }

    /// An owner tree placing `runner` (and `lead`'s children) on `worker`.
    async fn tree(&self, worker: &str, runner: AgentDefinition) -> Tree {
        let lead = AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["runner"]));
        let model = ScriptedModel::new().script(
            "lead",
            Script::new([
                Turn::spawn("runner", "delegate 2 50"),
                Turn::answer("the lead is done"),
            ]),
        );
        Tree::builder()
            .catalog(Catalog::new([runner.on_node(worker), lead]).unwrap())
            .model(model)
            .node(&self.node)
            .build()
            .await
            .unwrap()
    }
}

fn runner() -> AgentDefinition {
    AgentDefinition::new("runner", "")
}

fn root_tokens(tree: &Tree) -> u64 {
    tree.record(AgentId::ROOT).unwrap().subtree.total_tokens()
}

/// Waits (at most 10 s) until `what` holds of the worker's stats.
fn worker_until(process: &mut WorkerProcess, what: impl Fn((usize, u64)) -> bool) -> (usize, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = process.stats();
        if what(stats) || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the tree's record of `id` billed some usage (the remote child is running).
async fn first_usage(tree: &Tree, id: AgentId) {
    let mut events = tree.subscribe();
    if tree.record(id).is_some_and(|r| r.own.total_tokens() > 0) {
        return;
    }
    while let Some(event) = events.next().await {
        if event.agent == id && event.kind.name() == "usage_reported" {
            return;
        }
    }
}

/// Waits (at most `within`) until `what` holds; whether it did.
async fn eventually(within: Duration, what: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !what() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// How long until the worker has no live hosted agent (at most 10 s).
fn time_to_no_live_agent(process: &mut WorkerProcess) -> Duration {
    let from = Instant::now();
    let (live, _) = worker_until(process, |(live, _)| live == 0);
    assert_eq!(live, 0, "the worker still hosts live agents");
    from.elapsed()
}

/// Waits (at most 15 s) until the worker hosts no edge and no live agent; its stats then.
fn worker_idle(process: &mut WorkerProcess) -> (usize, u64, usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let stats = process.stats_with_edges();
        if (stats.0 == 0 && stats.2 == 0) || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lead_of(children: &[&str]) -> AgentDefinition {
    AgentDefinition::new("lead", "You lead.")
        .with_allowed_subagents(SubagentAllowance::only(children.iter().copied()))
}

async fn tree_of(
    owner: &Owner,
    definitions: Vec<AgentDefinition>,
    model: impl agent_tree::Model,
    config: agent_tree::TreeConfig,
) -> Tree {
    Tree::builder()
        .catalog(Catalog::new(definitions).unwrap())
        .model(model)
        .config(config)
        .node(&owner.node)
        .build()
        .await
        .unwrap()
}

/// An owner tree of a `lead` that may delegate to `runner`, placed on `worker`, on `model`.
async fn lead_and_runner_tree(
    owner: &Owner,
    worker: &str,
    model: impl agent_tree::Model,
    config: agent_tree::TreeConfig,
) -> Tree {
    tree_of(
        owner,
        vec![runner().on_node(worker), lead_of(&["runner"])],
        model,
        config,
    )
    .await
}

fn records_of(tree: &Tree, agent_type: &str) -> Vec<agent_tree::protocol::AgentRecord> {
    tree.snapshot()
        .records
        .into_iter()
        .filter(|r| r.agent_type == agent_type)
        .map(|r| (*r).clone())
        .collect()
}

/// Waits, in `events` (the owner's stream), for the first usage of a mirrored child of
/// remote child `id`, and returns that child's id in the owner's tree.
pub(crate) async fn mirrored_child_working(
    events: &mut agent_tree::EventStream,
    id: AgentId,
) -> AgentId {
    let mut helper = None;
    while let Some(event) = events.next().await {
        if event.kind.name() == "spawned" && event.parent == Some(id) {
            helper = Some(event.agent);
        }
        if helper == Some(event.agent) && event.kind.name() == "usage_reported" {
            break;
        }
    }
    helper.expect("the helper's spawn in the owner's stream")
}

/// An owner tree with a `runner` placed by each request (`SpawnRequest::on_node`).
async fn two_worker_tree(owner: &Owner, config: agent_tree::TreeConfig) -> Tree {
    tree_of(owner, vec![runner()], ScriptedModel::new(), config).await
}

/// Asserts the owner's node routes `stand_ins` stand-ins again within `secs` s; `what`
/// says what it means if not.
async fn assert_stand_ins_back(owner: &Owner, secs: u64, stand_ins: usize, what: &str) {
    assert!(
        eventually(Duration::from_secs(secs), || owner.node.stats().stand_ins
            == stand_ins)
        .await,
        "{what}: {:?}",
        owner.node.stats()
    );
}

/// Waits (at most 15 s) until the owner's node routes `stand_ins` stand-ins.
async fn owner_stand_ins_back(owner: &Owner, stand_ins: usize) -> bool {
    eventually(Duration::from_secs(15), || {
        owner.node.stats().stand_ins == stand_ins
    })
    .await
}

#[test]
fn nodes_as_child_processes() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(scenarios());
}

async fn scenarios() {
    // The runtime's warnings (a remote child given up, and why), shown with a failure.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_test_writer()
        .try_init();
    let mut owner = Owner::start().await;
    // Each scenario runs to its end (a panic or a hang past its bound is recorded, not
    // propagated), so every failing one is observed; the test fails at the end with all.
    let mut failed = Vec::new();
    // `AGENT_TREE_CLUSTER_ONLY=a,b` runs only the scenarios whose names contain one of them.
    let only: Vec<String> = std::env::var("AGENT_TREE_CLUSTER_ONLY")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    // `observe!(scenario, n)` runs a lifecycle race n times: which message arrives first
    // (an abort, a kill, a shutdown, a restart, a question against the remote run) varies
    // between runs on this multi-thread runtime and across two processes.
    macro_rules! observe {
        ($name:ident) => {
            observe!($name, 1)
        };
        ($name:ident, $times:expr) => {
            let name = stringify!($name);
            if only.is_empty() || only.iter().any(|o| name.contains(o.as_str())) {
                for _ in 0..$times {
                    if let Err(why) = observed(name, $name(&mut owner)).await {
                        failed.push(why);
                        break;
                    }
                }
            }
        };
    }
    observe!(a_remote_childs_result_comes_back_and_its_usage_counts_once);
    observe!(a_steer_reaches_the_remote_agent_mid_run);
    observe!(a_local_agent_delegates_to_a_remote_subtree);
    observe!(a_remote_child_inherits_its_owners_context);
    observe!(
        a_remote_childs_inherited_context_names_its_owners_agents_apart_from_its_own,
        3
    );
    observe!(a_remote_failure_is_restarted_by_its_owner, 10);
    observe!(a_killed_node_fails_its_stand_ins_and_the_restart_policy_applies);
    observe!(a_killed_node_settles_its_mirrored_descendants_killed);
    observe!(
        a_shutdown_settles_mirrored_descendants_as_their_node_reports,
        5
    );
    observe!(a_short_disconnect_is_replayed_and_invisible);
    observe!(a_tls_worker_serves_and_is_reconnected_with_tls, 3);
    observe!(a_freeze_within_the_lease_is_invisible);
    observe!(a_freeze_beyond_the_lease_stops_the_subtree_and_the_owner_declares_it);
    observe!(
        a_shutdown_reaches_the_remote_subtree_within_its_deadline,
        10
    );
    observe!(a_shutdown_counts_a_frozen_node_killed_by_its_deadline);
    observe!(
        a_remote_question_reaches_its_owner_and_the_answer_comes_back,
        10
    );
    observe!(a_spawn_that_cannot_go_down_is_refused_at_once);
    observe!(
        aborting_a_remote_child_aborts_its_hosted_agent_as_a_local_abort,
        10
    );
    observe!(killing_a_remote_child_removes_its_stand_in, 10);
    observe!(
        killing_a_remote_child_stops_its_hosted_agent_before_the_lease,
        10
    );
    observe!(a_spawn_the_worker_cannot_run_fails_with_its_cause);
    observe!(a_worker_whose_tree_does_not_build_fails_the_spawn_with_that_cause);
    observe!(placement_on_the_owners_own_node_runs_locally);
    observe!(
        shutting_down_a_local_owner_stops_its_remote_child_gracefully,
        10
    );
    observe!(a_remote_child_that_always_fails_exhausts_its_owners_intensity_and_escalates);
    observe!(a_permanent_remote_child_exhausts_its_owners_intensity_and_escalates);
    observe!(one_for_all_over_a_remote_and_a_local_child_restarts_both);
    observe!(rest_for_one_restarts_a_remote_child_started_after_the_failed_local_one);
    observe!(fail_fast_over_a_remote_and_a_local_child_aborts_the_other);
    observe!(twenty_remote_children_at_once_complete_and_leave_nothing_behind);
    observe!(twenty_remote_children_of_one_owner_agent_complete_and_count_once);
    observe!(
        steers_before_a_remote_agent_starts_are_queued_and_a_settled_one_refuses,
        5
    );
    observe!(max_subtree_tokens_counts_remote_usage);
    observe!(a_steer_to_a_remote_agent_whose_run_is_over_is_refused_as_a_local_one);
    observe!(a_steer_racing_a_remote_agents_end_is_delivered_only_if_a_turn_reads_it);
    observe!(a_remote_transient_child_is_restarted_once_per_failure_and_usage_matches);
    observe!(a_spawn_requests_settle_policy_applies_to_a_remote_child);
    observe!(children_on_two_workers_at_once_complete_and_count_per_worker);
    observe!(a_shutdown_with_one_worker_frozen_and_one_fine_holds_the_one_deadline);
    observe!(killing_one_worker_does_not_disturb_the_other_workers_children);
    observe!(a_worker_restarted_under_its_name_fails_the_old_stand_in_and_serves_new_spawns);
    observe!(a_worker_back_under_its_name_within_the_window_fails_the_old_stand_in_as_node_down);
    observe!(two_owner_trees_on_one_node_share_a_worker_without_mixing);
    observe!(two_hundred_sequential_remote_spawns_leave_nothing_behind);
    observe!(a_remote_answer_over_the_frame_limit_comes_up_in_parts);
    observe!(a_remote_question_over_the_frame_limit_does_not_hang_the_edge);
    observe!(a_graceful_shutdown_mid_run_counts_every_delta_the_worker_billed);
    observe!(a_remote_questions_answer_over_the_frame_limit_does_not_hang_the_edge);
    observe!(shutdowns_racing_spawns_on_two_workers_hold_deadline_and_usage);
    observe!(a_recovered_remote_child_is_interrupted_with_its_usage_and_resumes_on_its_node);
    observe!(a_recovered_remote_child_resumed_with_an_empty_prompt_continues);
    observe!(a_recovered_remote_child_is_still_remote_with_its_mirror_gone);
    observe!(a_recovered_tree_keeps_a_settled_remote_childs_mirror);
    observe!(a_recovered_tree_keeps_its_mirrored_records);
    observe!(a_settled_remote_child_of_a_journaled_tree_resumes);
    observe!(
        a_settled_remote_child_resumed_with_an_empty_prompt_continues,
        5
    );
    observe!(a_killed_journaled_owner_process_orphans_stop_by_lease_and_recovery_resumes);
    observe!(hosted_trees_with_a_journal_per_edge_serve_spawns);
    observe!(hosted_trees_journaling_to_one_file_refuse_a_second_spawn);
    observe!(a_detached_remote_child_asking_its_ended_owner_is_answered);
    observe!(a_detached_remote_child_outlives_its_owner_and_counts_once);
    observe!(pooled_background_remote_spawns_queue_and_count_once);
    observe!(an_empty_resume_of_a_resumed_remote_run_continues_again);
    observe!(an_aborted_remote_child_resumed_with_an_empty_prompt_continues);
    observe!(a_restarted_remote_child_resumed_with_an_empty_prompt_continues);
    observe!(
        an_owner_agent_resumes_its_remote_child_with_an_empty_prompt,
        5
    );
    observe!(a_recovered_tree_continues_a_completed_remote_childs_conversation);
    observe!(an_empty_resume_continues_a_conversation_over_the_frame_limit_in_parts);
    observe!(an_empty_resume_after_the_remote_childs_node_was_killed_continues_there_back);
    observe!(a_hosted_journal_that_dropped_the_conversation_still_resumes_it);
    observe!(a_resume_that_never_reached_its_node_keeps_the_conversation);
    observe!(a_remote_childs_kept_conversation_is_a_local_agents);
    observe!(
        a_delegating_remote_childs_kept_conversation_is_a_local_agents,
        3
    );
    observe!(
        a_resumed_remote_run_reads_an_earlier_helper_as_a_local_one,
        3
    );
    observe!(a_steer_then_an_abort_is_kept_for_the_resume_as_locally);
    observe!(a_recovered_owner_keeps_every_remote_run_as_a_local_tree);
    observe!(a_node_killed_mid_resumed_run_keeps_the_whole_conversation);
    observe!(a_restarted_remote_child_keeps_only_its_new_incarnation);
    observe!(a_shutdown_mid_turn_keeps_what_a_local_shutdown_keeps);
    observe!(a_killed_remote_child_keeps_its_last_boundary_as_locally);
    observe!(an_abort_right_after_a_spawn_or_a_resume_keeps_what_a_local_one_keeps);
    observe!(a_crash_mid_run_recovers_a_boundary_that_came_up);
    observe!(an_earlier_output_the_owner_released_is_read_as_locally);
    observe!(an_earlier_helpers_big_output_is_read_as_locally);
    observe!(an_earlier_helper_is_refused_control_at_once_by_its_owner_id);
    observe!(resumes_seed_no_second_record_and_no_second_usage);
    observe!(a_background_helper_at_the_runs_end_is_kept_as_locally);
    observe!(a_recovered_owner_resumes_with_its_earlier_helpers);
    observe!(an_aborted_resumed_run_resumed_again_reads_its_earlier_helpers);
    observe!(a_fan_of_helpers_in_one_turn_is_kept_as_locally, 2);
    observe!(a_refused_fifth_helper_names_the_lead_as_locally, 2);
    observe!(
        a_burst_of_helpers_across_turns_names_only_mirrored_records,
        3
    );
    observe!(steered_and_aborted_helpers_are_kept_as_locally, 2);
    observe!(
        a_helpers_question_to_a_remote_lead_names_it_by_the_owners_id,
        2
    );
    observe!(concurrent_remote_leads_name_only_their_own_helpers, 3);
    observe!(a_resumed_run_that_inherited_a_context_reads_as_a_local_one);
    observe!(a_padded_id_in_an_inherited_context_is_kept_as_the_owner_wrote_it);
    observe!(a_steer_of_an_earlier_helper_is_refused_as_a_settled_agents);
    if !failed.is_empty() {
        // Last in the output, without a backtrace after it, so that a log cut in the middle
        // still shows which scenarios failed and why.
        eprintln!("failing scenarios:\n{}", failed.join("\n"));
        std::panic::resume_unwind(Box::new(format!("{} failing scenarios", failed.len())));
    }
}

/// Polls `future`, turning a panic into an error (a scenario's assertion failing).
struct CatchUnwind<F: std::future::Future>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(value)) => std::task::Poll::Ready(Ok(value)),
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                std::task::Poll::Ready(Err(text))
            }
        }
    }
}

/// Runs one scenario (at most 90 s): `Err` with what went wrong.
async fn observed(
    name: &str,
    scenario: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let started = Instant::now();
    let result =
        tokio::time::timeout(Duration::from_secs(90), CatchUnwind(Box::pin(scenario))).await;
    let took = started.elapsed();
    match result {
        Ok(Ok(())) => {
            eprintln!("scenario ok: {name} ({took:?})");
            Ok(())
        }
        Ok(Err(why)) => {
            eprintln!("scenario FAILED: {name}: {why}");
            Err(format!("{name}: {why}"))
        }
        Err(_) => {
            eprintln!("scenario FAILED: {name}: hung for 90 s");
            Err(format!("{name}: hung for 90 s"))
        }
    }
}
