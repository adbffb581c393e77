//! A remote child supervised by its owner as a local one: restarted by its owner's policy
//! (once per failure, never again on its node), an owner's intensity spent and escalated,
//! the strategies (`one_for_all`, `rest_for_one`) and a `fail_fast` wait across a remote and
//! a local sibling; the usage counted is what the worker billed.

use super::support::flaky_restarted_once;
use super::support::shut_down_and_finish;
use super::support::{lead_completes, lead_settles};
use super::support::{spawn_runner, within};
use std::time::Duration;

use agent_tree::Tree;
use agent_tree::protocol::{
    AgentDefinition, AgentId, AgentStatus, EndReason, RestartPolicy, SpawnRequest,
};
use agent_tree::testkit::{Script, ScriptedModel, Turn};

use super::{
    LEASE_MS, Owner, first_usage, lead_of, records_of, root_tokens, runner, time_to_no_live_agent,
    tree_of, worker_idle,
};

/// A transient remote child that fails is restarted by its owner: a new spawn, the next
/// incarnation, which recovers.
pub(crate) async fn a_remote_failure_is_restarted_by_its_owner(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner
        .tree(&name, runner().with_restart(RestartPolicy::Transient))
        .await;
    let handle = spawn_runner(&tree, "fail-first").await;
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
    shut_down_and_finish(&tree, process).await;
}

/// A transient remote child whose definition is transient on its node too (one catalog
/// shared by the nodes): a failure is restarted once, by its owner, and the owner counts
/// what the worker billed. The hosted tree must not restart it as well.
pub(crate) async fn a_remote_transient_child_is_restarted_once_per_failure_and_usage_matches(
    owner: &mut Owner,
) {
    let (mut process, tree, _) = flaky_restarted_once(owner).await;
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    assert_eq!(
        tokens,
        root_tokens(&tree),
        "the worker billed {tokens} tokens, the owner counted {}: the failed run was run \
         again on the worker besides the owner's restart",
        root_tokens(&tree)
    );
    shut_down_and_finish(&tree, process).await;
}

/// A transient remote child that fails at every run, under a local lead allowing 2 restarts:
/// the third failure exhausts the lead's intensity and the lead escalates, as with a local
/// child (`docs/semantics.md`, "Supervision restarts").
pub(crate) async fn a_remote_child_that_always_fails_exhausts_its_owners_intensity_and_escalates(
    owner: &mut Owner,
) {
    let (_, tokens) =
        escalates_after_two_restarts(owner, RestartPolicy::Transient, "fail-always").await;
    assert_eq!(tokens, 0, "a failed turn bills nothing");
}

/// A permanent remote child restarts after every exit, a completion included: under a lead
/// allowing 2 restarts its third completion escalates.
pub(crate) async fn a_permanent_remote_child_exhausts_its_owners_intensity_and_escalates(
    owner: &mut Owner,
) {
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
    let outcome = lead_settles(&tree, 20).await;
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
    shut_down_and_finish(&tree, process).await;
    (root, tokens)
}

/// one_for_all over a remote child (started first, running) and a local one that fails
/// once: the remote child is stopped and both restart; everything completes, and the usage
/// the owner counts is exactly what the worker billed.
pub(crate) async fn one_for_all_over_a_remote_and_a_local_child_restarts_both(owner: &mut Owner) {
    strategy_over_remote_and_local(owner, agent_tree::protocol::Strategy::OneForAll, true).await;
}

/// rest_for_one with the local child started first and the remote one after it: the local
/// failure stops and restarts the remote child.
pub(crate) async fn rest_for_one_restarts_a_remote_child_started_after_the_failed_local_one(
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
    lead_completes(&tree, 20).await;
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
    shut_down_and_finish(&tree, process).await;
}

/// `Tree::wait` with fail_fast over a remote and a local child: whichever fails first, the
/// other is aborted (promptly on the worker), reason `aborted`.
pub(crate) async fn fail_fast_over_a_remote_and_a_local_child_aborts_the_other(owner: &mut Owner) {
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
    let remote = spawn_runner(&tree, "work 100 100").await.id();
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
    let remote = spawn_runner(&tree, "fail-always").await.id();
    second_fails_first_aborted(&tree, hanger, remote).await;
    shut_down_and_finish(&tree, process).await;
}

/// A fail_fast wait on `[first, second]` where `second` fails: it returns, with `first`
/// aborted (reason `aborted`).
async fn second_fails_first_aborted(tree: &Tree, first: AgentId, second: AgentId) {
    let outcomes = within(
        10,
        "fail_fast returns",
        tree.wait(&[first, second], agent_tree::protocol::WaitPolicy::FailFast),
    )
    .await;
    assert_eq!(outcomes[1].status, AgentStatus::Failed, "{outcomes:?}");
    assert_eq!(
        (outcomes[0].status, outcomes[0].reason),
        (AgentStatus::Aborted, EndReason::Aborted),
        "{outcomes:?}"
    );
}
