//! Trees across nodes with real nodes: each worker node is this test binary re-run as a
//! child process (`worker_node`, told what to be by `AGENT_TREE_CLUSTER_WORKER`), joined to
//! the owner's node on 127.0.0.1. One node server per process, so every scenario runs in
//! the one test, serially, against the one owner node.
//!
//! Built only with the `cluster` feature (`cargo test --features cluster --test cluster`).

mod context;
mod review4;
mod review5;
mod review6;
mod review7;
mod review8;
mod review9;
mod tls;
#[path = "../../examples/cluster/worker.rs"]
mod worker;
use context::*;
#[allow(clippy::wildcard_imports, reason = "the fourth review's scenarios")]
use review4::*;
#[allow(clippy::wildcard_imports, reason = "the fifth review's scenarios")]
use review5::*;
#[allow(clippy::wildcard_imports, reason = "the sixth review's scenarios")]
use review6::*;
#[allow(clippy::wildcard_imports, reason = "the seventh review's scenarios")]
use review7::*;
#[allow(clippy::wildcard_imports, reason = "the eighth review's scenarios")]
use review8::*;
#[allow(clippy::wildcard_imports, reason = "the ninth review's scenarios")]
use review9::*;
use tls::*;

use std::time::{Duration, Instant};

use agent_tree::cluster::Node;
use agent_tree::protocol::{
    AgentDefinition, AgentId, AgentStatus, EndReason, RestartPolicy, SpawnRequest,
    SubagentAllowance,
};
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
            review4::run_journaled_worker(args, mode == "journaled-unique"),
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
    observe!(spawn_result_and_usage);
    observe!(steer_reaches_the_remote_agent);
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
    observe!(placement_is_refused_without_a_session);
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
    observe!(
        review4_a_recovered_remote_child_is_interrupted_with_its_usage_and_resumes_on_its_node
    );
    observe!(review4_a_recovered_remote_child_resumed_with_an_empty_prompt_continues);
    observe!(review4_a_recovered_remote_child_is_still_remote_with_its_mirror_gone);
    observe!(a_recovered_tree_keeps_a_settled_remote_childs_mirror);
    observe!(a_recovered_tree_keeps_its_mirrored_records);
    observe!(review4_a_settled_remote_child_of_a_journaled_tree_resumes);
    observe!(
        a_settled_remote_child_resumed_with_an_empty_prompt_continues,
        5
    );
    observe!(review4_a_killed_journaled_owner_process_orphans_stop_by_lease_and_recovery_resumes);
    observe!(review4_hosted_trees_with_a_journal_per_edge_serve_spawns);
    observe!(review4_hosted_trees_journaling_to_one_file_refuse_a_second_spawn);
    observe!(review4_a_detached_remote_child_asking_its_ended_owner_is_answered);
    observe!(review4_a_detached_remote_child_outlives_its_owner_and_counts_once);
    observe!(review4_pooled_background_remote_spawns_queue_and_count_once);
    observe!(review5_an_empty_resume_of_a_resumed_remote_run_continues_again);
    observe!(review5_an_aborted_remote_child_resumed_with_an_empty_prompt_continues);
    observe!(review5_a_restarted_remote_child_resumed_with_an_empty_prompt_continues);
    observe!(
        review5_an_owner_agent_resumes_its_remote_child_with_an_empty_prompt,
        5
    );
    observe!(review5_a_recovered_tree_continues_a_completed_remote_childs_conversation);
    observe!(review5_an_empty_resume_continues_a_conversation_over_the_frame_limit_in_parts);
    observe!(review5_an_empty_resume_after_the_remote_childs_node_was_killed_continues_there_back);
    observe!(review5_a_hosted_journal_that_dropped_the_conversation_still_resumes_it);
    observe!(review5_a_resume_that_never_reached_its_node_keeps_the_conversation);
    observe!(review6_a_remote_childs_kept_conversation_is_a_local_agents);
    observe!(
        review6_a_delegating_remote_childs_kept_conversation_is_a_local_agents,
        3
    );
    observe!(
        review6_a_resumed_remote_run_reads_an_earlier_helper_as_a_local_one,
        3
    );
    observe!(review6_a_steer_then_an_abort_is_kept_for_the_resume_as_locally);
    observe!(review6_a_recovered_owner_keeps_every_remote_run_as_a_local_tree);
    observe!(review6_a_node_killed_mid_resumed_run_keeps_the_whole_conversation);
    observe!(review6_a_restarted_remote_child_keeps_only_its_new_incarnation);
    observe!(review6_a_shutdown_mid_turn_keeps_what_a_local_shutdown_keeps);
    observe!(review6_a_killed_remote_child_keeps_its_last_boundary_as_locally);
    observe!(review6_an_abort_right_after_a_spawn_or_a_resume_keeps_what_a_local_one_keeps);
    observe!(review6_a_crash_mid_run_recovers_a_boundary_that_came_up);
    observe!(review7_an_earlier_output_the_owner_released_is_read_as_locally);
    observe!(review7_an_earlier_helpers_big_output_is_read_as_locally);
    observe!(review7_an_earlier_helper_is_refused_control_at_once_by_its_owner_id);
    observe!(review7_resumes_seed_no_second_record_and_no_second_usage);
    observe!(review7_a_background_helper_at_the_runs_end_is_kept_as_locally);
    observe!(review7_a_recovered_owner_resumes_with_its_earlier_helpers);
    observe!(review7_an_aborted_resumed_run_resumed_again_reads_its_earlier_helpers);
    observe!(review8_a_fan_of_helpers_in_one_turn_is_kept_as_locally, 2);
    observe!(review8_a_refused_fifth_helper_names_the_lead_as_locally, 2);
    observe!(
        review8_a_burst_of_helpers_across_turns_names_only_mirrored_records,
        3
    );
    observe!(review8_steered_and_aborted_helpers_are_kept_as_locally, 2);
    observe!(
        review8_a_helpers_question_to_a_remote_lead_names_it_by_the_owners_id,
        2
    );
    observe!(
        review8_concurrent_remote_leads_name_only_their_own_helpers,
        3
    );
    observe!(review9_a_resumed_run_that_inherited_a_context_reads_as_a_local_one);
    observe!(review9_a_padded_id_in_an_inherited_context_is_kept_as_the_owner_wrote_it);
    observe!(review9_a_steer_of_an_earlier_helper_is_refused_as_a_settled_agents);
    if !failed.is_empty() {
        // Last in the output, without a backtrace after it, so that a log cut in the middle
        // still shows which scenarios failed and why.
        eprintln!("failing scenarios:\n{}", failed.join("\n"));
        std::panic::resume_unwind(Box::new(format!("{} failing scenarios", failed.len())));
    }
}

async fn spawn_result_and_usage(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = tree
        .run(SpawnRequest::new("runner", "work 3 20"))
        .await
        .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.text.as_deref(), Some("done 3"));
    // Three turns of 12 tokens each, billed on the worker, counted once at the root.
    assert_eq!(root_tokens(&tree), 36);
    let (live, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!((live, tokens), (0, 36));
    tree.shutdown().await;
    process.finish();
}

async fn steer_reaches_the_remote_agent(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 4 150"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    tree.steer(handle.id(), "use the fast path").await.unwrap();
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 4 | steered: use the fast path"),
        "{outcome:?}"
    );
    assert_eq!(root_tokens(&tree), 48);
    tree.shutdown().await;
    process.finish();
}

async fn a_local_agent_delegates_to_a_remote_subtree(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("the lead is done"),
        "{outcome:?}"
    );
    // The remote runner is the lead's child in the owner's tree.
    let snapshot = tree.snapshot();
    let remote = snapshot
        .records
        .iter()
        .find(|r| r.agent_type == "runner")
        .expect("the runner's record");
    assert_eq!(remote.status, AgentStatus::Completed);
    assert_eq!(
        snapshot.records[remote.parent.unwrap().get() as usize].agent_type,
        "lead"
    );
    // The runner's two turns and its hosted helper's two, counted once.
    let (_, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(tokens, 48);
    assert_eq!(remote.subtree.total_tokens(), 48);
    assert_eq!(root_tokens(&tree), 48);
    // The hosted subtree as the stand-in mirrored it: the runner and its helper.
    let mirror = tree
        .remote_records(remote.id)
        .await
        .expect("a remote child's mirror");
    let hosted: Vec<(&str, AgentStatus, u64)> = mirror
        .iter()
        .skip(1)
        .map(|r| (r.agent_type.as_str(), r.status, r.own.total_tokens()))
        .collect();
    assert_eq!(
        hosted,
        [
            ("runner", AgentStatus::Completed, 24),
            ("helper", AgentStatus::Completed, 24)
        ]
    );
    assert_eq!(mirror[1].subtree.total_tokens(), 48);
    assert!(
        tree.remote_records(AgentId::new(1)).await.is_none(),
        "the lead is local"
    );
    // The hosted helper is in the owner's own records too: a mirrored record under the
    // runner, with an id of the owner's tree, its own usage split from the runner's.
    let helper = snapshot
        .records
        .iter()
        .find(|r| r.agent_type == "helper")
        .expect("the helper's mirrored record in the owner's snapshot");
    assert_eq!(helper.parent, Some(remote.id));
    assert_eq!(remote.children, [helper.id]);
    assert_eq!(helper.depth, remote.depth + 1);
    assert!(helper.id > remote.id, "{helper:?}");
    assert_eq!(helper.status, AgentStatus::Completed);
    assert_eq!(helper.own.total_tokens(), 24);
    assert_eq!(remote.own.total_tokens(), 24);
    snapshot
        .check_usage()
        .expect("own and subtree agree across the edge");
    assert!(snapshot.render_text().contains("helper"));
    // It is controlled on its own node, not from here.
    assert_eq!(
        tree.steer(helper.id, "hello").await,
        Err(agent_tree::ControlError::Remote(helper.id))
    );
    assert_eq!(
        tree.abort(helper.id),
        Err(agent_tree::ControlError::Remote(helper.id))
    );
    assert_eq!(
        tree.kill(helper.id),
        Err(agent_tree::ControlError::Remote(helper.id))
    );
    assert!(
        tree.shutdown_agent(helper.id).await.is_err(),
        "a mirrored record is shut down through its remote owner"
    );
    tree.shutdown().await;
    process.finish();
}

/// A remote child whose definition inherits its owner's context gets it on its node,
/// before its task, as a local child does: the worker's model reads the first user
/// message as its task, which is then the lead's own prompt (`work 1 1`, answered
/// `done 1`), not the runner's (`delegate 2 50`, answered `lead done`); it shows every
/// later user message as a steer, here the runner's own task, after the context.
async fn a_remote_child_inherits_its_owners_context(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner().with_inherit_context(true)).await;
    let outcome = tree
        .run(SpawnRequest::new("lead", "work 1 1"))
        .await
        .unwrap();
    assert_eq!(
        outcome.text.as_deref(),
        Some("the lead is done"),
        "{outcome:?}"
    );
    let snapshot = tree.snapshot();
    let remote = snapshot
        .records
        .iter()
        .find(|r| r.agent_type == "runner")
        .expect("the runner's record");
    let text = remote.outcome.as_ref().and_then(|o| o.text.clone());
    assert_eq!(
        text.as_deref(),
        Some("done 1 | steered: delegate 2 50"),
        "{remote:?}"
    );
    tree.shutdown().await;
    process.finish();
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

/// A shutdown reaching a remote child that delegates on its node: the helper's mirrored
/// record settles as its node reports it (aborted by the shutdown), within the deadline,
/// and nothing of the owner's records is left live.
async fn a_shutdown_settles_mirrored_descendants_as_their_node_reports(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut events = tree.subscribe();
    let handle = tree
        .spawn(SpawnRequest::new("runner", "delegate 100 100"))
        .await
        .unwrap();
    let helper = mirrored_child_working(&mut events, handle.id()).await;
    let started = Instant::now();
    tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < tree.config().shutdown_grace + Duration::from_millis(500),
        "took {took:?}"
    );
    let record = tree.record(helper).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Shutdown),
        "{record:?}"
    );
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.live(), 0, "{}", snapshot.render_text());
    snapshot.check_usage().expect("own and subtree agree");
    let (live, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0);
    assert_eq!(
        tokens,
        root_tokens(&tree),
        "every delta the worker billed, once"
    );
    process.finish();
}

/// A remote child delegating to a helper on its node, and the node killed while the helper
/// works: the helper's mirrored record settles `killed` with the node-down cause, before
/// the stand-in's own failure, and the usage it billed stays in the owner's totals. Its
/// events are in the owner's stream like any agent's.
async fn a_killed_node_settles_its_mirrored_descendants_killed(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut events = tree.subscribe();
    let handle = tree
        .spawn(SpawnRequest::new("runner", "delegate 50 100"))
        .await
        .unwrap();
    let id = handle.id();
    let helper = mirrored_child_working(&mut events, id).await;
    process.kill9();
    let outcome = tree
        .wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled)
        .await;
    assert_eq!(outcome[0].status, AgentStatus::Failed, "{outcome:?}");
    let record = tree.record(helper).unwrap();
    assert_eq!(record.status, AgentStatus::Killed, "{record:?}");
    let error = record.outcome.as_ref().and_then(|o| o.error.clone());
    assert!(
        error.as_deref().unwrap_or_default().contains("node down"),
        "{record:?}"
    );
    assert!(record.own.total_tokens() >= 12, "{record:?}");
    // Its end came before its stand-in's, in the owner's stream.
    let mut ended = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        if event.kind.terminal_status().is_some() {
            ended.push(event.agent);
        }
    }
    let at = |a: AgentId| ended.iter().position(|&e| e == a);
    assert!(at(helper) < at(id) && at(helper).is_some(), "{ended:?}");
    let snapshot = tree.snapshot();
    snapshot.check_usage().expect("own and subtree agree");
    assert_eq!(
        snapshot
            .records
            .iter()
            .map(|r| r.own.total_tokens())
            .sum::<u64>(),
        root_tokens(&tree)
    );
    tree.shutdown().await;
}

async fn a_remote_failure_is_restarted_by_its_owner(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner
        .tree(&name, runner().with_restart(RestartPolicy::Transient))
        .await;
    let handle = tree
        .spawn(SpawnRequest::new("runner", "fail-first"))
        .await
        .unwrap();
    let id = handle.id();
    let outcome = tree
        .wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled)
        .await;
    let record = tree.record(id).unwrap();
    assert_eq!(outcome[0].text.as_deref(), Some("recovered"), "{outcome:?}");
    assert_eq!(
        record.incarnation, 2,
        "a restart is a new spawn, the next incarnation"
    );
    tree.shutdown().await;
    process.finish();
}

async fn a_killed_node_fails_its_stand_ins_and_the_restart_policy_applies(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner
        .tree(&name, runner().with_restart(RestartPolicy::Transient))
        .await;
    let handle = tree
        .spawn(SpawnRequest::new("runner", "work 50 100"))
        .await
        .unwrap();
    let id = handle.id();
    first_usage(&tree, id).await;
    let killed_at = Instant::now();
    process.kill9();
    let outcome = tree
        .wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled)
        .await;
    let noticed = killed_at.elapsed();
    let outcome = &outcome[0];
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(error.contains("node down"), "{outcome:?}");
    // Transient: restarted once (the node is still down, so it fails again), then the
    // intensity (1 restart) is spent.
    assert_eq!(tree.record(id).unwrap().incarnation, 2);
    // Noticed within the reconnect windows, long before a lease would.
    assert!(
        noticed < Duration::from_millis(LEASE_MS),
        "noticed after {noticed:?}"
    );
    // Usage billed before the kill stays counted.
    assert!(root_tokens(&tree) >= 12);
    tree.shutdown().await;
}

async fn a_short_disconnect_is_replayed_and_invisible(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    // The worker joined: it reconnects.
    a_run_goes_on_across_a_closed_session(owner, &name, &mut process).await;
    process.finish();
}

/// A remote run (`work 10 60`) whose session the owner's side closes after its first
/// usage: the node that joined reconnects within the reconnect window, both ends replay
/// what was not acknowledged, and the run completes with every delta counted once.
async fn a_run_goes_on_across_a_closed_session(
    owner: &Owner,
    name: &str,
    process: &mut WorkerProcess,
) {
    let tree = owner.tree(name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 10 60"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    assert_eq!(owner.node.disconnect(name).await, 1);
    let outcome = handle.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("done 10"), "{outcome:?}");
    let (_, tokens) = worker_until(process, |(live, _)| live == 0);
    assert_eq!(tokens, 120);
    assert_eq!(
        root_tokens(&tree),
        120,
        "every delta counted once across the reconnect"
    );
    assert!(owner.node.reaches(name), "the worker is back");
    tree.shutdown().await;
}

async fn a_freeze_within_the_lease_is_invisible(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 6 60"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    process.freeze();
    tokio::time::sleep(Duration::from_millis(LEASE_MS / 3)).await;
    process.thaw();
    let outcome = handle.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("done 6"), "{outcome:?}");
    let (_, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(tokens, 72);
    assert_eq!(
        root_tokens(&tree),
        72,
        "every delta of the frozen worker's turns counted"
    );
    tree.shutdown().await;
    process.finish();
}

async fn a_freeze_beyond_the_lease_stops_the_subtree_and_the_owner_declares_it(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    let frozen_at = Instant::now();
    process.freeze();
    let outcome = handle.outcome().await;
    let declared = frozen_at.elapsed();
    assert_eq!(outcome.status, AgentStatus::Killed, "{outcome:?}");
    assert_eq!(outcome.reason, EndReason::Killed);
    assert_eq!(
        outcome.error.as_deref(),
        Some("node unreachable: lease expired")
    );
    assert!(
        declared >= Duration::from_millis(LEASE_MS),
        "declared after {declared:?}, before a lease"
    );
    let billed = root_tokens(&tree);
    process.thaw();
    // The worker wakes past its lease: it stops its subtree before any turn.
    let (live, tokens) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0, "no agent outlives its lease on the worker");
    assert!(tokens >= billed);
    assert_eq!(
        root_tokens(&tree),
        billed,
        "nothing is added after the declaration"
    );
    tree.shutdown().await;
    process.finish();
}

async fn a_shutdown_reaches_the_remote_subtree_within_its_deadline(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    let started = Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    let grace = tree.config().shutdown_grace;
    assert!(took < grace + Duration::from_millis(500), "took {took:?}");
    assert!(report.unreachable_nodes.is_empty(), "{report:?}");
    let record = tree.record(handle.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0);
    process.finish();
}

async fn a_shutdown_counts_a_frozen_node_killed_by_its_deadline(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let grace = Duration::from_millis(800);
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
        .model(ScriptedModel::new())
        .config(agent_tree::TreeConfig::default().with_shutdown_grace(grace))
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    process.freeze();
    let started = Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < grace + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(100),
        "the shutdown took {took:?} with a frozen node"
    );
    let record = tree.record(handle.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Killed, "{record:?} {report:?}");
    assert_eq!(
        report.unreachable_nodes,
        std::slice::from_ref(&name),
        "{report:?}"
    );
    process.thaw();
    // Woken, the worker gets no more grants: its lease stops the subtree.
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0, "the frozen node's subtree outlived its lease");
    process.finish();
}

async fn a_remote_question_reaches_its_owner_and_the_answer_comes_back(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
        .model(ScriptedModel::new())
        .on_question(|q: agent_tree::Question| async move {
            Ok(format!("yes, {} may {}", q.agent_type, q.question))
        })
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let outcome = tree
        .run(SpawnRequest::new("runner", "ask deploy"))
        .await
        .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let text = outcome.text.unwrap_or_default();
    assert!(text.starts_with("answered: "), "{text}");
    assert!(text.contains("yes, runner may deploy"), "{text}");
    tree.shutdown().await;
    // No handler on the owner's side: the question is refused, as a local one would be.
    let tree = owner.tree(&name, runner()).await;
    let outcome = tree
        .run(SpawnRequest::new("runner", "ask deploy"))
        .await
        .unwrap();
    let text = outcome.text.unwrap_or_default();
    assert!(text.contains("no one answers questions"), "{text}");
    tree.shutdown().await;
    process.finish();
}

async fn placement_is_refused_without_a_session(owner: &mut Owner) {
    // A task too large even in parts never reaches the wire: the spawn fails, at once.
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let huge = "x".repeat(agent_tree::protocol::DEFAULT_MAX_BODY_BYTES + 1);
    let outcome = tree.run(SpawnRequest::new("runner", huge)).await.unwrap();
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    assert!(
        outcome
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("body limit"),
        "{outcome:?}"
    );
    tree.shutdown().await;
    process.finish();

    let tree = owner.tree("nowhere", runner()).await;
    let error = tree
        .spawn(SpawnRequest::new("runner", "work 1 1"))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no session to that node"),
        "{error}"
    );
    let error = tree
        .spawn(SpawnRequest::new("runner", "work 1 1").on_node("elsewhere"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("elsewhere"), "{error}");
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Review scenarios.

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

/// The outcome of a local agent aborted mid-turn: what a remote child's abort must match.
async fn local_abort() -> agent_tree::protocol::Outcome {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let tree = Tree::builder()
        .catalog(Catalog::new([AgentDefinition::new("w", "")]).unwrap())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("w", "hang")).await.unwrap();
    tree.abort(handle.id()).unwrap();
    let outcome = handle.outcome().await;
    tree.shutdown().await;
    outcome
}

/// `Tree::abort` of a remote child: the hosted agent is aborted (promptly, by the abort
/// command, not by a lease), and the owner's outcome says what a local abort says.
async fn aborting_a_remote_child_aborts_its_hosted_agent_as_a_local_abort(owner: &mut Owner) {
    let local = local_abort().await;
    let stand_ins = owner.node.stats().stand_ins;
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    let id = handle.id();
    first_usage(&tree, id).await;
    tree.abort(id).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), handle.outcome())
        .await
        .expect("an aborted remote child settles");
    assert_eq!(
        (outcome.status, outcome.reason),
        (local.status, local.reason),
        "{outcome:?} vs the local {local:?}"
    );
    let took = time_to_no_live_agent(&mut process);
    assert!(
        took < Duration::from_millis(LEASE_MS / 2),
        "the hosted agent stopped only after {took:?}"
    );
    // A steer to the settled remote child is refused like a local one's.
    assert!(matches!(
        tree.steer(id, "too late").await,
        Err(agent_tree::ControlError::WrongStatus(..))
    ));
    assert!(
        eventually(Duration::from_secs(2), || owner.node.stats().stand_ins
            == stand_ins)
        .await,
        "the stand-in of a settled child is still routed: {:?}",
        owner.node.stats()
    );
    tree.shutdown().await;
    process.finish();
}

/// `Tree::kill` of a remote child settles its record killed and removes its stand-in from
/// the node (`Node::stats().stand_ins` back to what it was).
async fn killing_a_remote_child_removes_its_stand_in(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    assert_eq!(owner.node.stats().stand_ins, stand_ins + 1);
    tree.kill(handle.id()).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), handle.outcome())
        .await
        .expect("a killed remote child settles");
    assert_eq!(outcome.status, AgentStatus::Killed, "{outcome:?}");
    assert!(
        eventually(Duration::from_secs(3), || owner.node.stats().stand_ins
            == stand_ins)
        .await,
        "the killed stand-in is still routed: {:?}",
        owner.node.stats()
    );
    tree.shutdown().await;
    process.finish();
}

/// `Tree::kill` of a remote child stops its hosted agent at once (the stand-in's end tells
/// the hosted side), not only when the hosted side's lease lapses (up to a lease later,
/// billing turns nobody counts meanwhile).
async fn killing_a_remote_child_stops_its_hosted_agent_before_the_lease(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    tree.kill(handle.id()).unwrap();
    let killed_at = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(5), handle.outcome())
        .await
        .expect("a killed remote child settles");
    assert_eq!(outcome.status, AgentStatus::Killed, "{outcome:?}");
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    let took = killed_at.elapsed();
    assert_eq!(live, 0);
    assert!(
        took < Duration::from_millis(LEASE_MS / 2),
        "the hosted agent ran on for {took:?} after its owner's kill (the lease is {LEASE_MS} ms)"
    );
    tree.shutdown().await;
    process.finish();
}

/// A definition the worker does not have: the stand-in fails at once, saying the worker
/// refused the spawn; it never hangs; the worker's edge ends.
async fn a_spawn_the_worker_cannot_run_fails_with_its_cause(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, AgentDefinition::new("ghost", "")).await;
    // A spawn in one frame, and one in parts (a 9 MiB task: review 13 found its refusal
    // named its last part, which the stand-in did not take as its spawn's, and hung).
    for task in ["haunt".to_owned(), "h".repeat(9 << 20)] {
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            tree.run(SpawnRequest::new("ghost", task)),
        )
        .await
        .expect("a refused remote spawn settles")
        .unwrap();
        assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
        let error = outcome.error.as_deref().unwrap_or_default();
        assert!(error.contains("refused the spawn"), "{outcome:?}");
        assert!(error.contains("ghost"), "{outcome:?}");
    }
    assert!(
        eventually(Duration::from_secs(2), || owner.node.stats().stand_ins
            == stand_ins)
        .await,
        "{:?}",
        owner.node.stats()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let edges = loop {
        let (_, _, edges) = process.stats_with_edges();
        if edges == 0 || Instant::now() > deadline {
            break edges;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(edges, 0, "the refused spawn's hosted edge never ended");
    tree.shutdown().await;
    process.finish();
}

/// A worker whose factory's tree does not build: the spawn fails with that cause, at once.
async fn a_worker_whose_tree_does_not_build_fails_the_spawn_with_that_cause(owner: &mut Owner) {
    let (name, process) = owner.worker_in_mode("broken").await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        tree.run(SpawnRequest::new("runner", "work 1 1")),
    )
    .await
    .expect("a remote spawn on a broken worker settles")
    .unwrap();
    assert_eq!(outcome.status, AgentStatus::Failed, "{outcome:?}");
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(error.contains("did not build"), "{outcome:?}");
    tree.shutdown().await;
    process.finish();
}

/// A definition placed on the owner's own node runs as a local agent: no stand-in, no edge.
async fn placement_on_the_owners_own_node_runs_locally(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let model = ScriptedModel::new().script("runner", Script::new([Turn::answer("ran here")]));
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node("owner")]).unwrap())
        .model(model)
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let mut handle = tree.spawn(SpawnRequest::new("runner", "go")).await.unwrap();
    assert_eq!(owner.node.stats().stand_ins, stand_ins);
    let outcome = tokio::time::timeout(Duration::from_secs(5), handle.outcome())
        .await
        .expect("settles");
    assert_eq!(outcome.text.as_deref(), Some("ran here"), "{outcome:?}");
    let outcome = tree
        .run(SpawnRequest::new("runner", "go").on_node("owner"))
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    tree.shutdown().await;
}

/// `Tree::shutdown_agent` of a local lead whose child is remote: the remote child is shut
/// down by the one deadline, gracefully (its hosted agent settles, nothing is killed), with
/// the reason a local child's shutdown has, and the worker runs nothing after.
async fn shutting_down_a_local_owner_stops_its_remote_child_gracefully(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let lead = AgentDefinition::new("lead", "You lead.")
        .with_allowed_subagents(SubagentAllowance::only(["runner"]));
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("runner", "work 100 100"),
            Turn::answer("the lead is done"),
        ]),
    );
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name), lead]).unwrap())
        .model(model)
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    let mut events = tree.subscribe();
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let remote = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the remote runner bills a turn")
            .expect("events");
        if event.kind.name() == "usage_reported"
            && event.agent != lead.id()
            && tree
                .record(event.agent)
                .is_some_and(|r| r.agent_type == "runner")
        {
            break event.agent;
        }
    };
    let started = Instant::now();
    let report = tree.shutdown_agent(lead.id()).await.unwrap();
    let took = started.elapsed();
    let grace = tree.config().shutdown_grace;
    assert!(took < grace + Duration::from_millis(500), "took {took:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    assert!(report.graceful.contains(&remote), "{report:?}");
    let record = tree.record(remote).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted, "{record:?}");
    assert_eq!(
        record.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Shutdown),
        "{record:?}"
    );
    let (live, _) = worker_until(&mut process, |(live, _)| live == 0);
    assert_eq!(live, 0);
    tree.shutdown().await;
    process.finish();
}

// ---------------------------------------------------------------------------------------
// Second review scenarios.

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

fn records_of(tree: &Tree, agent_type: &str) -> Vec<agent_tree::protocol::AgentRecord> {
    tree.snapshot()
        .records
        .into_iter()
        .filter(|r| r.agent_type == agent_type)
        .map(|r| (*r).clone())
        .collect()
}

/// A transient remote child that fails at every run, under a local lead allowing 2 restarts:
/// the third failure exhausts the lead's intensity and the lead escalates, as with a local
/// child (`docs/semantics.md`, "Supervision restarts").
async fn a_remote_child_that_always_fails_exhausts_its_owners_intensity_and_escalates(
    owner: &mut Owner,
) {
    let (_, tokens) =
        escalates_after_two_restarts(owner, RestartPolicy::Transient, "fail-always").await;
    assert_eq!(tokens, 0, "a failed turn bills nothing");
}

/// A permanent remote child restarts after every exit, a completion included: under a lead
/// allowing 2 restarts its third completion escalates.
async fn a_permanent_remote_child_exhausts_its_owners_intensity_and_escalates(owner: &mut Owner) {
    let (root, tokens) =
        escalates_after_two_restarts(owner, RestartPolicy::Permanent, "work 1 10").await;
    assert_eq!(tokens, 36, "three runs of one turn each on the worker");
    assert_eq!(root, 36, "each run's usage counted once");
}

/// A remote runner of restart type `restart` doing `task` under a lead allowing 2 restarts:
/// three runs (incarnation 3), then the lead escalates. The root's and the worker's tokens.
async fn escalates_after_two_restarts(
    owner: &mut Owner,
    restart: RestartPolicy,
    task: &str,
) -> (u64, u64) {
    let (name, mut process) = owner.worker().await;
    let lead =
        lead_of(&["runner"]).with_supervision(agent_tree::protocol::Strategy::OneForOne, 2, 60_000);
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("runner", task),
            Turn::answer("the lead is done"),
        ]),
    );
    let tree = tree_of(
        owner,
        vec![runner().with_restart(restart).on_node(&name), lead],
        model,
        agent_tree::TreeConfig::default(),
    )
    .await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        tree.run(SpawnRequest::new("lead", "go")),
    )
    .await
    .expect("the lead settles")
    .unwrap();
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Failed, EndReason::Escalated),
        "{outcome:?}"
    );
    let error = outcome.error.clone().unwrap_or_default();
    assert!(error.contains("runner"), "{outcome:?}");
    let remote = records_of(&tree, "runner");
    assert_eq!(remote.len(), 1, "{remote:?}");
    assert_eq!(
        remote[0].incarnation, 3,
        "two restarts, then escalation: {remote:?}"
    );
    assert!(remote[0].status.is_terminal(), "{remote:?}");
    let (live, tokens, _) = worker_idle(&mut process);
    assert_eq!(live, 0);
    let root = root_tokens(&tree);
    tree.shutdown().await;
    process.finish();
    (root, tokens)
}

/// one_for_all over a remote child (started first, running) and a local one that fails
/// once: the remote child is stopped and both restart; everything completes, and the usage
/// the owner counts is exactly what the worker billed.
async fn one_for_all_over_a_remote_and_a_local_child_restarts_both(owner: &mut Owner) {
    strategy_over_remote_and_local(owner, agent_tree::protocol::Strategy::OneForAll, true).await;
}

/// rest_for_one with the local child started first and the remote one after it: the local
/// failure stops and restarts the remote child.
async fn rest_for_one_restarts_a_remote_child_started_after_the_failed_local_one(
    owner: &mut Owner,
) {
    strategy_over_remote_and_local(owner, agent_tree::protocol::Strategy::RestForOne, false).await;
}

async fn strategy_over_remote_and_local(
    owner: &mut Owner,
    strategy: agent_tree::protocol::Strategy,
    remote_first: bool,
) {
    use agent_tree::testkit::{Call, FaultyModel, Target};
    let (name, mut process) = owner.worker().await;
    let lead = lead_of(&["runner", "local"]).with_supervision(strategy, 3, 60_000);
    let (first, second) = if remote_first {
        (
            Turn::spawn_background("runner", "work 10 200"),
            Turn::spawn_background("local", "go"),
        )
    } else {
        (
            Turn::spawn_background("local", "go"),
            Turn::spawn_background("runner", "work 10 200"),
        )
    };
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                first,
                second,
                Turn::calls([Call::wait(
                    [Target::Spawned(0), Target::Spawned(1)],
                    agent_tree::protocol::WaitPolicy::AllSettled,
                )]),
                Turn::answer("the lead is done"),
            ]),
        )
        .script("local", Script::new([Turn::answer("local ok")]));
    // The local child's first run fails at its first turn, 600 ms in (its remote sibling
    // runs then); its restart completes.
    let failing = FaultyModel::new(scripted)
        .fail_at_turn(1, agent_tree::ModelError::new("local boom"))
        .only_for("local")
        .only_in_run(1);
    let model = FaultyModel::new(failing)
        .slow(Duration::from_millis(600))
        .only_for("local")
        .only_in_run(1);
    let tree = tree_of(
        owner,
        vec![
            runner()
                .with_restart(RestartPolicy::Transient)
                .on_node(&name),
            AgentDefinition::new("local", "").with_restart(RestartPolicy::Transient),
            lead,
        ],
        model,
        agent_tree::TreeConfig::default(),
    )
    .await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        tree.run(SpawnRequest::new("lead", "go")),
    )
    .await
    .expect("the lead settles")
    .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let remote = records_of(&tree, "runner");
    let local = records_of(&tree, "local");
    assert_eq!(local[0].incarnation, 2, "{local:?}");
    assert_eq!(local[0].status, AgentStatus::Completed, "{local:?}");
    assert_eq!(
        remote[0].incarnation, 2,
        "the strategy restarts the remote sibling: {remote:?}"
    );
    assert_eq!(remote[0].status, AgentStatus::Completed, "{remote:?}");
    assert_eq!(
        remote[0].outcome.as_ref().and_then(|o| o.text.as_deref()),
        Some("done 10"),
        "{remote:?}"
    );
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(
        remote[0].subtree.total_tokens(),
        tokens,
        "the owner's record of the remote child bills exactly what the worker billed"
    );
    tree.shutdown().await;
    process.finish();
}

/// `Tree::wait` with fail_fast over a remote and a local child: whichever fails first, the
/// other is aborted (promptly on the worker), reason `aborted`.
async fn fail_fast_over_a_remote_and_a_local_child_aborts_the_other(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let model = ScriptedModel::new()
        .script(
            "local",
            Script::new([Turn::fail("local boom").after(Duration::from_millis(300))]),
        )
        .script("hanger", Script::new([Turn::hang()]));
    let tree = tree_of(
        owner,
        vec![
            runner().on_node(&name),
            AgentDefinition::new("local", ""),
            AgentDefinition::new("hanger", ""),
        ],
        model,
        agent_tree::TreeConfig::default(),
    )
    .await;
    // The local child fails first: the remote one is aborted.
    let remote = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap()
        .id();
    first_usage(&tree, remote).await;
    let local = tree
        .spawn(SpawnRequest::new("local", "go"))
        .await
        .unwrap()
        .id();
    second_fails_first_aborted(&tree, remote, local).await;
    let took = time_to_no_live_agent(&mut process);
    assert!(took < Duration::from_millis(LEASE_MS / 2), "{took:?}");
    // The remote child fails first: the local one is aborted.
    let hanger = tree
        .spawn(SpawnRequest::new("hanger", "go"))
        .await
        .unwrap()
        .id();
    let remote = tree
        .spawn(SpawnRequest::new("runner", "fail-always"))
        .await
        .unwrap()
        .id();
    second_fails_first_aborted(&tree, hanger, remote).await;
    tree.shutdown().await;
    process.finish();
}

/// A fail_fast wait on `[first, second]` where `second` fails: it returns, with `first`
/// aborted (reason `aborted`).
async fn second_fails_first_aborted(tree: &Tree, first: AgentId, second: AgentId) {
    let outcomes = tokio::time::timeout(
        Duration::from_secs(10),
        tree.wait(&[first, second], agent_tree::protocol::WaitPolicy::FailFast),
    )
    .await
    .expect("fail_fast returns");
    assert_eq!(outcomes[1].status, AgentStatus::Failed, "{outcomes:?}");
    assert_eq!(
        (outcomes[0].status, outcomes[0].reason),
        (AgentStatus::Aborted, EndReason::Aborted),
        "{outcomes:?}"
    );
}

/// Twenty remote children of the application at once on one worker (half of them queued by
/// the pool first): all complete, the usage is exactly the sum, and after the linger
/// neither node holds a stand-in, an edge or a live agent.
async fn twenty_remote_children_at_once_complete_and_leave_nothing_behind(owner: &mut Owner) {
    let before = owner.node.stats();
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(
            tree.spawn(SpawnRequest::new("runner", "work 2 50").background())
                .await
                .unwrap()
                .id(),
        );
    }
    let outcomes = tokio::time::timeout(
        Duration::from_secs(30),
        tree.wait(&ids, agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("twenty remote children settle");
    for outcome in &outcomes {
        assert_eq!(outcome.text.as_deref(), Some("done 2"), "{outcome:?}");
    }
    assert_eq!(root_tokens(&tree), 20 * 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0), "the worker still hosts edges");
    assert_eq!(tokens, 20 * 24);
    assert!(
        eventually(Duration::from_secs(3), || owner.node.stats().stand_ins
            == before.stand_ins)
        .await,
        "{:?}",
        owner.node.stats()
    );
    let after = owner.node.stats();
    assert_eq!(after.acknowledged_deltas - before.acknowledged_deltas, 40);
    assert_eq!(
        after.acknowledged_usage.total_tokens() - before.acknowledged_usage.total_tokens(),
        20 * 24
    );
    assert_eq!(root_tokens(&tree), 20 * 24, "nothing counted after the end");
    tree.shutdown().await;
    process.finish();
}

/// Twenty remote children of one local agent, spawned in one turn in the background and
/// waited for: all complete, counted once in the lead's and the root's totals.
async fn twenty_remote_children_of_one_owner_agent_complete_and_count_once(owner: &mut Owner) {
    use agent_tree::testkit::{Call, Target};
    let before = owner.node.stats();
    let (name, mut process) = owner.worker().await;
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::calls((0..20).map(|_| Call::spawn_background("runner", "work 2 50"))),
            Turn::calls([Call::wait(
                (0..20).map(Target::Spawned),
                agent_tree::protocol::WaitPolicy::AllSettled,
            )]),
            Turn::answer("the lead is done"),
        ]),
    );
    let tree = tree_of(
        owner,
        vec![runner().on_node(&name), lead_of(&["runner"])],
        model,
        agent_tree::TreeConfig::default().with_max_children_per_agent(20),
    )
    .await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        tree.run(SpawnRequest::new("lead", "go")),
    )
    .await
    .expect("the lead settles")
    .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let runners = records_of(&tree, "runner");
    assert_eq!(runners.len(), 20);
    assert!(
        runners.iter().all(|r| r.status == AgentStatus::Completed),
        "{runners:?}"
    );
    assert_eq!(root_tokens(&tree), 20 * 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges, tokens), (0, 0, 20 * 24));
    assert!(
        eventually(Duration::from_secs(3), || owner.node.stats().stand_ins
            == before.stand_ins)
        .await,
        "{:?}",
        owner.node.stats()
    );
    tree.shutdown().await;
    process.finish();
}

/// A steer to a remote child the pool has not started yet is receipted `queued` and reaches
/// the remote agent once it runs; a steer to a settled remote child is refused at once.
async fn steers_before_a_remote_agent_starts_are_queued_and_a_settled_one_refuses(
    owner: &mut Owner,
) {
    let (name, process) = owner.worker().await;
    let tree = tree_of(
        owner,
        vec![runner().on_node(&name)],
        ScriptedModel::new(),
        agent_tree::TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut first = tree
        .spawn(SpawnRequest::new("runner", "work 3 100").background())
        .await
        .unwrap();
    let mut second = tree
        .spawn(SpawnRequest::new("runner", "work 2 50").background())
        .await
        .unwrap();
    assert_eq!(
        tree.record(second.id()).unwrap().status,
        AgentStatus::Queued
    );
    let receipt = tree.steer(second.id(), "early").await;
    assert!(
        matches!(receipt, Ok(agent_tree::SteerReceipt::Queued)),
        "{receipt:?}"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), first.outcome())
        .await
        .expect("settles");
    assert_eq!(outcome.text.as_deref(), Some("done 3"), "{outcome:?}");
    let outcome = tokio::time::timeout(Duration::from_secs(10), second.outcome())
        .await
        .expect("settles");
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 2 | steered: early"),
        "{outcome:?}"
    );
    let refused = tokio::time::timeout(Duration::from_secs(2), tree.steer(first.id(), "late"))
        .await
        .expect("a steer to a settled remote child returns");
    assert!(
        matches!(refused, Err(agent_tree::ControlError::WrongStatus(..))),
        "{refused:?}"
    );
    tree.shutdown().await;
    process.finish();
}

/// `max_subtree_tokens` counts a remote child's usage: a lead whose remote child used more
/// than the budget may spawn no more.
async fn max_subtree_tokens_counts_remote_usage(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("runner", "work 3 20"),
            Turn::spawn("runner", "work 1 1"),
            Turn::answer("the lead is done"),
        ]),
    );
    let tree = tree_of(
        owner,
        vec![runner().on_node(&name), lead_of(&["runner"])],
        model.clone(),
        agent_tree::TreeConfig::default().with_max_subtree_tokens(30),
    )
    .await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        tree.run(SpawnRequest::new("lead", "go")),
    )
    .await
    .expect("the lead settles")
    .unwrap();
    assert_eq!(outcome.status, AgentStatus::Completed, "{outcome:?}");
    let runners = records_of(&tree, "runner");
    assert_eq!(
        runners.len(),
        1,
        "the second spawn is over the budget the first remote child used: {runners:?}"
    );
    let lead = records_of(&tree, "lead");
    assert_eq!(lead[0].subtree.total_tokens(), 36, "{lead:?}");
    let (_, tokens, _) = worker_idle(&mut process);
    assert_eq!(tokens, 36);
    tree.shutdown().await;
    process.finish();
}

/// A steer to an agent whose run is over (here: completing, draining a background child) is
/// refused, `WrongStatus` (a receipt is `delivered` only if a turn will read it). Checked
/// on a local agent first, then on the same agent run remotely.
async fn a_steer_to_a_remote_agent_whose_run_is_over_is_refused_as_a_local_one(owner: &mut Owner) {
    // Local: the drainer answers at once and waits for its helper.
    let model = ScriptedModel::new()
        .script(
            "drainer",
            Script::new([
                Turn::spawn_background("helper", "help"),
                Turn::answer("lead done"),
            ]),
        )
        .script(
            "helper",
            Script::new([Turn::answer("helped").after(Duration::from_millis(1500))]),
        );
    let local = Tree::builder()
        .catalog(
            Catalog::new([
                AgentDefinition::new("drainer", "")
                    .with_allowed_subagents(SubagentAllowance::only(["helper"]))
                    .with_settle(agent_tree::protocol::SettlePolicy::Drain),
                AgentDefinition::new("helper", ""),
            ])
            .unwrap(),
        )
        .model(model)
        .build()
        .await
        .unwrap();
    let id = local
        .spawn(SpawnRequest::new("drainer", "go"))
        .await
        .unwrap()
        .id();
    assert!(
        eventually(Duration::from_secs(3), || local
            .record(id)
            .is_some_and(|r| r.status == AgentStatus::Completing))
        .await
    );
    let receipt = local.steer(id, "too late").await;
    assert!(
        matches!(receipt, Err(agent_tree::ControlError::WrongStatus(..))),
        "local: {receipt:?}"
    );
    local.shutdown().await;

    // Remote: the worker's `drainer` drains the same way.
    let (name, process) = owner.worker().await;
    let tree = tree_of(
        owner,
        vec![AgentDefinition::new("drainer", "").on_node(&name)],
        ScriptedModel::new(),
        agent_tree::TreeConfig::default(),
    )
    .await;
    let mut handle = tree
        .spawn(SpawnRequest::new("drainer", "delegate-bg 4 300"))
        .await
        .unwrap();
    let id = handle.id();
    // Until the mirror shows the hosted drainer completing (its run over).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let completing = tree.remote_records(id).await.is_some_and(|records| {
            records
                .get(1)
                .is_some_and(|r| r.status == AgentStatus::Completing)
        });
        assert!(
            Instant::now() < deadline,
            "the remote drainer never completed its run"
        );
        if completing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receipt = tree.steer(id, "too late").await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome())
        .await
        .expect("settles");
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    assert!(
        matches!(receipt, Err(agent_tree::ControlError::WrongStatus(..))),
        "remote: a steer no turn will read was receipted {receipt:?} (the local agent refuses it)"
    );
    tree.shutdown().await;
    process.finish();
}

/// Steers racing a one-turn remote agent's end (several times, on the multi-thread
/// runtime): every steer returns, and one receipted `delivered` or `queued` is read by a
/// turn (the agent takes another turn for it), as a local agent's is.
async fn a_steer_racing_a_remote_agents_end_is_delivered_only_if_a_turn_reads_it(
    owner: &mut Owner,
) {
    // Local control: the worker's own tree and model, in this process.
    let local = worker::hosted_tree().build().await.unwrap();
    let lost = steers_racing_the_end(&local).await;
    assert!(
        lost.is_empty(),
        "local: steers receipted but never read: {lost:?}"
    );
    local.shutdown().await;
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let lost = steers_racing_the_end(&tree).await;
    assert!(
        lost.is_empty(),
        "remote: steers receipted but never read by a turn ({} of 30): {lost:?}",
        lost.len()
    );
    tree.shutdown().await;
    process.finish();
}

/// 30 one-turn `runner`s, each steered a few ms after its spawn: the steers receipted
/// (`delivered` or `queued`) whose text the agent's answer does not carry.
async fn steers_racing_the_end(tree: &Tree) -> Vec<String> {
    let mut lost = Vec::new();
    for i in 0..30u64 {
        let mut handle = tree
            .spawn(SpawnRequest::new("runner", "work 1 0"))
            .await
            .unwrap();
        let id = handle.id();
        tokio::time::sleep(Duration::from_millis(i % 6)).await;
        let text = format!("race {i}");
        let receipt = tokio::time::timeout(Duration::from_secs(2), tree.steer(id, text.clone()))
            .await
            .expect("a steer racing the agent's end returns");
        let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome())
            .await
            .expect("settles");
        let read = outcome.text.as_deref().unwrap_or_default().contains(&text);
        if receipt.is_ok() && !read {
            lost.push(format!("{i}: {receipt:?} -> {:?}", outcome.text));
        }
    }
    lost
}

/// A transient remote child whose definition is transient on its node too (one catalog
/// shared by the nodes): a failure is restarted once, by its owner, and the owner counts
/// what the worker billed. The hosted tree must not restart it as well.
async fn a_remote_transient_child_is_restarted_once_per_failure_and_usage_matches(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let tree = tree_of(
        owner,
        vec![
            AgentDefinition::new("flaky", "")
                .with_restart(RestartPolicy::Transient)
                .on_node(&name),
        ],
        ScriptedModel::new(),
        agent_tree::TreeConfig::default(),
    )
    .await;
    let id = tree
        .spawn(SpawnRequest::new("flaky", "fail-first"))
        .await
        .unwrap()
        .id();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        tree.wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("settles");
    assert_eq!(outcome[0].text.as_deref(), Some("recovered"), "{outcome:?}");
    assert_eq!(tree.record(id).unwrap().incarnation, 2);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(
        tokens,
        root_tokens(&tree),
        "the worker billed {tokens} tokens, the owner counted {}: the failed run was run \
         again on the worker besides the owner's restart",
        root_tokens(&tree)
    );
    tree.shutdown().await;
    process.finish();
}

/// `SpawnRequest::with_settle` overrides the definition's settle policy for that run
/// (`PendingStart::settle`): a remote runner asked to drain keeps its background helper
/// until it completes, as a local one would, instead of aborting it at its run's end.
async fn a_spawn_requests_settle_policy_applies_to_a_remote_child(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let id = tree
        .spawn(
            SpawnRequest::new("runner", "delegate-bg 3 100")
                .with_settle(agent_tree::protocol::SettlePolicy::Drain),
        )
        .await
        .unwrap()
        .id();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        tree.wait(&[id], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("settles");
    assert_eq!(outcome[0].text.as_deref(), Some("lead done"), "{outcome:?}");
    let mirror = tree
        .remote_records(id)
        .await
        .expect("a remote child's mirror");
    let helper = mirror
        .iter()
        .find(|r| r.agent_type == "helper")
        .expect("the hosted helper");
    assert_eq!(
        helper.status,
        AgentStatus::Completed,
        "the drained helper was {:?} ({:?}): the request's settle policy did not cross the edge",
        helper.status,
        helper.outcome.as_ref().map(|o| o.reason)
    );
    tree.shutdown().await;
    process.finish();
}

// ---------------------------------------------------------------------------------------
// Third review scenarios: several workers, restarts under one name, several owner trees on
// one node, long runs, oversized frames.

/// An owner tree with a `runner` placed by each request (`SpawnRequest::on_node`).
async fn two_worker_tree(owner: &Owner, config: agent_tree::TreeConfig) -> Tree {
    tree_of(owner, vec![runner()], ScriptedModel::new(), config).await
}

/// Waits (at most 15 s) until the owner's node routes `stand_ins` stand-ins.
async fn owner_stand_ins_back(owner: &Owner, stand_ins: usize) -> bool {
    eventually(Duration::from_secs(15), || {
        owner.node.stats().stand_ins == stand_ins
    })
    .await
}

/// One owner tree with children on two workers at once: both complete, each worker bills
/// its own child's turns, the root counts the sum once, and nothing stays routed.
async fn children_on_two_workers_at_once_complete_and_count_per_worker(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let tree = two_worker_tree(owner, agent_tree::TreeConfig::default()).await;
    for round in 0..3 {
        let before = root_tokens(&tree);
        let ha = tree
            .spawn(SpawnRequest::new("runner", "work 4 40").on_node(&a))
            .await
            .unwrap();
        let hb = tree
            .spawn(SpawnRequest::new("runner", "work 6 30").on_node(&b))
            .await
            .unwrap();
        let outcomes = tokio::time::timeout(
            Duration::from_secs(10),
            tree.wait(
                &[ha.id(), hb.id()],
                agent_tree::protocol::WaitPolicy::AllSettled,
            ),
        )
        .await
        .expect("both remote children settle");
        assert_eq!(
            outcomes[0].text.as_deref(),
            Some("done 4"),
            "round {round}: {outcomes:?}"
        );
        assert_eq!(
            outcomes[1].text.as_deref(),
            Some("done 6"),
            "round {round}: {outcomes:?}"
        );
        assert_eq!(tree.record(ha.id()).unwrap().subtree.total_tokens(), 48);
        assert_eq!(tree.record(hb.id()).unwrap().subtree.total_tokens(), 72);
        assert_eq!(root_tokens(&tree) - before, 120, "round {round}");
    }
    let (la, ta, ea) = worker_idle(&mut pa);
    let (lb, tb, eb) = worker_idle(&mut pb);
    assert_eq!((la, ea, ta), (0, 0, 3 * 48), "worker a");
    assert_eq!((lb, eb, tb), (0, 0, 3 * 72), "worker b");
    assert!(
        owner_stand_ins_back(owner, stand_ins).await,
        "{:?}",
        owner.node.stats()
    );
    tree.shutdown().await;
    pa.finish();
    pb.finish();
}

/// A tree shutdown while one worker is frozen and the other is fine: the one deadline
/// holds for both; the fine worker's child settles gracefully (aborted for the shutdown),
/// the frozen one's is counted killed.
async fn a_shutdown_with_one_worker_frozen_and_one_fine_holds_the_one_deadline(owner: &mut Owner) {
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let grace = Duration::from_millis(800);
    let tree = two_worker_tree(
        owner,
        agent_tree::TreeConfig::default().with_shutdown_grace(grace),
    )
    .await;
    let ha = tree
        .spawn(SpawnRequest::new("runner", "work 100 100").on_node(&a))
        .await
        .unwrap();
    let hb = tree
        .spawn(SpawnRequest::new("runner", "work 100 100").on_node(&b))
        .await
        .unwrap();
    first_usage(&tree, ha.id()).await;
    first_usage(&tree, hb.id()).await;
    pa.freeze();
    let started = Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    pa.thaw();
    assert!(
        took < grace + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(150),
        "the shutdown took {took:?} with one frozen node: {report:?}"
    );
    let ra = tree.record(ha.id()).unwrap();
    let rb = tree.record(hb.id()).unwrap();
    assert_eq!(ra.status, AgentStatus::Killed, "frozen: {ra:?} {report:?}");
    assert!(report.killed.contains(&ha.id()), "{report:?}");
    assert_eq!(rb.status, AgentStatus::Aborted, "fine: {rb:?} {report:?}");
    assert_eq!(
        rb.outcome.as_ref().map(|o| o.reason),
        Some(EndReason::Shutdown),
        "{rb:?}"
    );
    assert!(report.graceful.contains(&hb.id()), "{report:?}");
    assert_eq!(
        report.unreachable_nodes,
        std::slice::from_ref(&a),
        "the frozen node did not report by the deadline, the fine one did: {report:?}"
    );
    let (lb, tb, _) = worker_idle(&mut pb);
    assert_eq!(lb, 0);
    assert_eq!(
        tb,
        rb.subtree.total_tokens(),
        "the fine worker billed {tb}, its owner counted {}",
        rb.subtree.total_tokens()
    );
    let (la, _, _) = worker_idle(&mut pa);
    assert_eq!(la, 0, "the frozen node's subtree outlived its lease");
    pa.finish();
    pb.finish();
}

/// `kill -9` of one worker fails only its own stand-ins: the other worker's child runs to
/// its end, steered, and is counted exactly as that worker billed it.
async fn killing_one_worker_does_not_disturb_the_other_workers_children(owner: &mut Owner) {
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let tree = two_worker_tree(owner, agent_tree::TreeConfig::default()).await;
    let ha = tree
        .spawn(SpawnRequest::new("runner", "work 50 100").on_node(&a))
        .await
        .unwrap();
    let mut hb = tree
        .spawn(SpawnRequest::new("runner", "work 10 80").on_node(&b))
        .await
        .unwrap();
    first_usage(&tree, ha.id()).await;
    first_usage(&tree, hb.id()).await;
    pa.kill9();
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        tree.wait(&[ha.id()], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("the killed worker's child settles");
    assert_eq!(outcome[0].status, AgentStatus::Failed, "{outcome:?}");
    assert!(
        outcome[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains(&format!("node down: {a}")),
        "{outcome:?}"
    );
    tree.steer(hb.id(), "still here").await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), hb.outcome())
        .await
        .expect("the other worker's child settles");
    assert_eq!(
        outcome.text.as_deref(),
        Some("done 10 | steered: still here"),
        "{outcome:?}"
    );
    let (lb, tb, eb) = worker_idle(&mut pb);
    assert_eq!((lb, eb), (0, 0));
    assert_eq!(tb, 120);
    assert_eq!(tree.record(hb.id()).unwrap().subtree.total_tokens(), 120);
    tree.shutdown().await;
    pb.finish();
}

/// A worker `kill -9`ed and started again under the same name (new process, same port),
/// back 800 ms later, after the reconnect window (300 ms): the old stand-in fails with a node-down cause (not the
/// lease), and a new spawn runs on the new process, which runs nothing of the old edge.
async fn a_worker_restarted_under_its_name_fails_the_old_stand_in_and_serves_new_spawns(
    owner: &mut Owner,
) {
    owner.workers += 1;
    let name = format!("phoenix-{}", owner.workers);
    let port = worker::free_port();
    let mut old = owner.worker_process(&name, port, "normal", false).await;
    let tree = owner.tree(&name, runner()).await;
    let handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    let killed_at = Instant::now();
    old.kill9();
    // Back only after the reconnect window (300 ms).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut new = owner.worker_process(&name, port, "normal", false).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        tree.wait(&[handle.id()], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("the old stand-in settles");
    let took = killed_at.elapsed();
    assert_eq!(
        outcome[0].status,
        AgentStatus::Failed,
        "{outcome:?} after {took:?}"
    );
    assert!(
        outcome[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("node down"),
        "{outcome:?}"
    );
    let fresh = tokio::time::timeout(
        Duration::from_secs(10),
        tree.run(SpawnRequest::new("runner", "work 2 20")),
    )
    .await
    .expect("a new spawn settles")
    .unwrap();
    assert_eq!(fresh.text.as_deref(), Some("done 2"), "{fresh:?}");
    let (live, tokens, edges) = worker_idle(&mut new);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(tokens, 24, "the new process ran something of the old edge");
    tree.shutdown().await;
    new.finish();
}

/// A worker `kill -9`ed and back under the same name within the reconnect window (its
/// node was up already, it only had to join): the old stand-in must fail with a node-down
/// cause (the new process has another boot id), within about the window, not wait for its
/// lease; a new spawn then runs on the new process.
async fn a_worker_back_under_its_name_within_the_window_fails_the_old_stand_in_as_node_down(
    owner: &mut Owner,
) {
    owner.workers += 1;
    let name = format!("phoenix-{}", owner.workers);
    let mut old = owner
        .worker_process(&name, worker::free_port(), "normal", false)
        .await;
    // The replacement's node is up, not joined yet.
    let mut new = owner
        .worker_process(&name, worker::free_port(), "normal", true)
        .await;
    let tree = owner.tree(&name, runner()).await;
    let handle = tree
        .spawn(SpawnRequest::new("runner", "work 100 100"))
        .await
        .unwrap();
    first_usage(&tree, handle.id()).await;
    let killed_at = Instant::now();
    old.kill9();
    let new = tokio::task::spawn_blocking(move || {
        new.join();
        new
    })
    .await
    .unwrap();
    let mut new = new;
    let back = killed_at.elapsed();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        tree.wait(&[handle.id()], agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await
    .expect("the old stand-in settles");
    let took = killed_at.elapsed();
    let fresh = tokio::time::timeout(
        Duration::from_secs(10),
        tree.run(SpawnRequest::new("runner", "work 2 20")),
    )
    .await
    .expect("a new spawn settles")
    .unwrap();
    assert_eq!(fresh.text.as_deref(), Some("done 2"), "{fresh:?}");
    let (live, tokens, edges) = worker_idle(&mut new);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(tokens, 24, "the new process ran something of the old edge");
    tree.shutdown().await;
    new.finish();
    assert!(
        outcome[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("node down")
            && took < Duration::from_millis(LEASE_MS),
        "the new process was back after {back:?}; the old stand-in settled after {took:?} \
         with {:?} / {:?} (the lease is {LEASE_MS} ms + {GRACE_MS} ms)",
        outcome[0].status,
        outcome[0].error
    );
}

/// Two owner trees on one owner node, both with an agent `a1` on the same worker, at once:
/// outcomes, steers, usage and mirrors stay each tree's own.
async fn two_owner_trees_on_one_node_share_a_worker_without_mixing(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (name, mut process) = owner.worker().await;
    let mut billed = 0;
    for round in 0..3 {
        let t1 = owner.tree(&name, runner()).await;
        let t2 = owner.tree(&name, runner()).await;
        let h1 = t1
            .spawn(SpawnRequest::new("runner", "work 3 80"))
            .await
            .unwrap();
        let h2 = t2
            .spawn(SpawnRequest::new("runner", "work 5 60"))
            .await
            .unwrap();
        assert_eq!((h1.id(), h2.id()), (AgentId::new(1), AgentId::new(1)));
        first_usage(&t1, h1.id()).await;
        t1.steer(h1.id(), "one").await.unwrap();
        let o1 = tokio::time::timeout(
            Duration::from_secs(10),
            t1.wait(&[h1.id()], agent_tree::protocol::WaitPolicy::AllSettled),
        )
        .await
        .expect("t1 settles");
        let o2 = tokio::time::timeout(
            Duration::from_secs(10),
            t2.wait(&[h2.id()], agent_tree::protocol::WaitPolicy::AllSettled),
        )
        .await
        .expect("t2 settles");
        assert_eq!(
            o1[0].text.as_deref(),
            Some("done 3 | steered: one"),
            "round {round}"
        );
        assert_eq!(o2[0].text.as_deref(), Some("done 5"), "round {round}");
        assert_eq!(
            (root_tokens(&t1), root_tokens(&t2)),
            (36, 60),
            "round {round}"
        );
        let m1 = t1.remote_records(h1.id()).await.unwrap();
        let m2 = t2.remote_records(h2.id()).await.unwrap();
        assert_eq!(m1[1].own.total_tokens(), 36);
        assert_eq!(m2[1].own.total_tokens(), 60);
        billed += 96;
        t1.shutdown().await;
        t2.shutdown().await;
    }
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges, tokens), (0, 0, billed));
    assert!(
        owner_stand_ins_back(owner, stand_ins).await,
        "{:?}",
        owner.node.stats()
    );
    process.finish();
}

/// 200 sequential remote spawns on one worker: each completes, and afterwards (past the
/// linger) the owner routes no stand-in and the worker hosts no edge and no live agent;
/// the worker's memory does not grow with the number of edges it hosted.
async fn two_hundred_sequential_remote_spawns_leave_nothing_behind(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let acknowledged = owner.node.stats().acknowledged_deltas;
    let (name, mut process) = owner.worker().await;
    let mut rss = Vec::new();
    let mut counted = 0;
    for batch in 0..10 {
        let tree = owner.tree(&name, runner()).await;
        for i in 0..20 {
            let outcome = tokio::time::timeout(
                Duration::from_secs(10),
                tree.run(SpawnRequest::new("runner", "work 1 1")),
            )
            .await
            .unwrap_or_else(|_| panic!("spawn {} hung", batch * 20 + i))
            .unwrap();
            assert_eq!(outcome.text.as_deref(), Some("done 1"), "{outcome:?}");
        }
        counted += root_tokens(&tree);
        tree.shutdown().await;
        if batch == 4 || batch == 9 {
            let (live, _, edges) = worker_idle(&mut process);
            assert_eq!((live, edges), (0, 0), "after batch {batch}");
            rss.push(process.rss_kib());
        }
    }
    assert_eq!(counted, 200 * 12);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges, tokens), (0, 0, 200 * 12));
    assert!(
        owner_stand_ins_back(owner, stand_ins).await,
        "{:?}",
        owner.node.stats()
    );
    assert_eq!(owner.node.stats().acknowledged_deltas - acknowledged, 200);
    let grown = rss[1].saturating_sub(rss[0]);
    eprintln!(
        "worker rss after 100 edges {} KiB, after 200 {} KiB",
        rss[0], rss[1]
    );
    assert!(
        grown < 4 * 1024,
        "the worker grew {grown} KiB over 100 edges ({} KiB -> {} KiB)",
        rss[0],
        rss[1]
    );
    process.finish();
}

/// A remote child's 9 MiB answer is over the edge's frame limit (8 MiB): its terminal event
/// goes up in parts, each a frame under the limit, and its outcome is whole at its owner;
/// one over the body limit (25 MiB) settles without its output, saying where it stays. The
/// edge goes on either way.
async fn a_remote_answer_over_the_frame_limit_comes_up_in_parts(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        tree.run(SpawnRequest::new("runner", "big 9437184")),
    )
    .await
    .expect("the remote child with a 9 MiB answer settles")
    .unwrap();
    assert_eq!(
        outcome.status,
        AgentStatus::Completed,
        "{:?}",
        outcome.error
    );
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.text.as_ref().map(String::len), Some(9_437_184));
    assert_eq!(root_tokens(&tree), 12);
    let huge = tokio::time::timeout(
        Duration::from_secs(30),
        tree.run(SpawnRequest::new("runner", "big 26214400")),
    )
    .await
    .expect("the remote child with a 25 MiB answer settles")
    .unwrap();
    assert_eq!(huge.status, AgentStatus::Completed, "{:?}", huge.error);
    assert_eq!(huge.text, None);
    assert!(
        huge.error
            .as_deref()
            .unwrap_or_default()
            .contains("body limit"),
        "{:?}",
        huge.error
    );
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        tree.run(SpawnRequest::new("runner", "work 1 1")),
    )
    .await
    .expect("the next spawn settles")
    .unwrap();
    assert_eq!(next.text.as_deref(), Some("done 1"));
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    tree.shutdown().await;
    process.finish();
}

/// A remote agent asking its owner a question over the frame limit (9 MiB): the edge must
/// not hang. The owner hears of it (the ask refused with an error, and the agent goes on),
/// or the remote child settles with a cause saying so; either way it settles promptly.
async fn a_remote_question_over_the_frame_limit_does_not_hang_the_edge(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
        .model(ScriptedModel::new())
        .on_question(|_q: agent_tree::Question| async move { Ok("yes".to_owned()) })
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    settles_without_the_lease(&tree, "ask-big 9437184", "asking a 9 MiB question").await;
    process.finish();
}

/// After a graceful shutdown mid-run the root holds exactly what the worker billed (the
/// example checks this per trial too, since this review).
async fn a_graceful_shutdown_mid_run_counts_every_delta_the_worker_billed(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let mut mismatches = Vec::new();
    let mut before = 0;
    for i in 0..4u64 {
        let tree = owner.tree(&name, runner()).await;
        let handle = tree
            .spawn(SpawnRequest::new("runner", "work 8 60"))
            .await
            .unwrap();
        first_usage(&tree, handle.id()).await;
        tokio::time::sleep(Duration::from_millis(37 * i)).await;
        tree.shutdown().await;
        let (live, billed, _) = worker_idle(&mut process);
        assert_eq!(live, 0);
        let counted = root_tokens(&tree);
        if billed - before != counted {
            mismatches.push(format!("{i}: worker {} root {counted}", billed - before));
        }
        before = billed;
    }
    assert!(mismatches.is_empty(), "{mismatches:?}");
    process.finish();
}

/// The owner's answer to a remote agent's question over the frame limit (9 MiB): the edge
/// must not hang. The asking agent gets an error result (or the remote child settles with
/// a cause saying so), promptly.
async fn a_remote_questions_answer_over_the_frame_limit_does_not_hang_the_edge(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = Tree::builder()
        .catalog(Catalog::new([runner().on_node(&name)]).unwrap())
        .model(ScriptedModel::new())
        .on_question(|_q: agent_tree::Question| async move { Ok("y".repeat(9 << 20)) })
        .node(&owner.node)
        .build()
        .await
        .unwrap();
    settles_without_the_lease(&tree, "ask deploy", "whose question got a 9 MiB answer").await;
    process.finish();
}

/// Spawns the remote runner on `task`: it settles within 15 s, not by its lease; then the
/// tree shuts down.
async fn settles_without_the_lease(tree: &Tree, task: &str, what: &str) {
    let mut handle = tree.spawn(SpawnRequest::new("runner", task)).await.unwrap();
    let id = handle.id();
    let outcome = tokio::time::timeout(Duration::from_secs(15), handle.outcome()).await;
    let mirror = tree.remote_records(id).await.unwrap_or_default();
    let outcome = outcome.unwrap_or_else(|_| {
        let hosted: Vec<_> = mirror
            .iter()
            .map(|r| (r.agent_type.clone(), r.status))
            .collect();
        panic!("a remote agent {what} never settled in 15 s (its mirror: {hosted:?})")
    });
    assert_ne!(
        outcome.error.as_deref(),
        Some("node unreachable: lease expired"),
        "the edge was given up by its lease: {outcome:?}"
    );
    tree.shutdown().await;
}

/// Shutdowns racing spawns on two workers (multi-thread runtime, several rounds, random
/// small delays): each returns by its deadline, every remote child settles, the workers
/// end with nothing live, and each worker billed exactly what the owner counted.
async fn shutdowns_racing_spawns_on_two_workers_hold_deadline_and_usage(owner: &mut Owner) {
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let grace = Duration::from_millis(1000);
    let mut problems = Vec::new();
    let (mut billed_a, mut billed_b) = (0, 0);
    for round in 0..6u64 {
        let tree = two_worker_tree(
            owner,
            agent_tree::TreeConfig::default().with_shutdown_grace(grace),
        )
        .await;
        let ha = tree
            .spawn(SpawnRequest::new("runner", "work 6 30").on_node(&a))
            .await
            .unwrap();
        let hb = tree
            .spawn(SpawnRequest::new("runner", "work 6 30").on_node(&b))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis((round * 17) % 120)).await;
        let started = Instant::now();
        let report = tree.shutdown().await;
        let took = started.elapsed();
        if took > grace + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(150) {
            problems.push(format!("{round}: the shutdown took {took:?}"));
        }
        let (ra, rb) = (tree.record(ha.id()).unwrap(), tree.record(hb.id()).unwrap());
        if !ra.status.is_terminal() || !rb.status.is_terminal() {
            problems.push(format!(
                "{round}: not settled {:?} {:?}",
                ra.status, rb.status
            ));
        }
        if !report.killed.is_empty() {
            problems.push(format!("{round}: killed {report:?}"));
        }
        let (la, ta, ea) = worker_idle(&mut pa);
        let (lb, tb, eb) = worker_idle(&mut pb);
        if (la, ea, lb, eb) != (0, 0, 0, 0) {
            problems.push(format!("{round}: workers not idle {la} {ea} {lb} {eb}"));
        }
        let (ca, cb) = (ra.subtree.total_tokens(), rb.subtree.total_tokens());
        if (ta - billed_a, tb - billed_b) != (ca, cb) {
            problems.push(format!(
                "{round}: worker a billed {} (owner {ca}, {:?}), worker b billed {} (owner {cb}, {:?})",
                ta - billed_a,
                ra.status,
                tb - billed_b,
                rb.status
            ));
        }
        (billed_a, billed_b) = (ta, tb);
    }
    assert!(problems.is_empty(), "{problems:#?}");
    pa.finish();
    pb.finish();
}

/// A settled remote child's mirror of its hosted subtree is journaled when its edge ends: a
/// tree rebuilt from the journal, compacted or not, reads the `remote_records` the tree
/// that ran it read.
async fn a_recovered_tree_keeps_a_settled_remote_childs_mirror(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    for rotate in [None, Some(1)] {
        let dir = review4::Dir::new("mirror-journaled");
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
        let mut handle = tree
            .spawn(SpawnRequest::new("runner", "delegate 1 0"))
            .await
            .unwrap();
        let id = handle.id();
        let outcome = handle.outcome().await;
        assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
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
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
}
