//! Many at once: twenty remote children of the application or of one agent, children on two
//! workers, two owner trees sharing a worker, two hundred spawns in a row. All complete, the
//! usage is counted once and per tree, and nothing is left behind (no stand-in, no edge, no
//! live agent, no growing worker).

use super::assert_stand_ins_back;
use super::lead_and_runner_tree;
use super::support::lead_completes;
use super::support::shut_down_and_finish;
use super::support::spawn_runner_on;
use super::support::{spawn_runner, within};
use std::time::Duration;

use agent_tree::protocol::{AgentId, AgentStatus, SpawnRequest};
use agent_tree::testkit::{Script, ScriptedModel, Turn};

use super::{
    Owner, first_usage, owner_stand_ins_back, records_of, root_tokens, runner, two_worker_tree,
    worker_idle,
};

/// Twenty remote children of the application at once on one worker (half of them queued by
/// the pool first): all complete, the usage is exactly the sum, and after the linger
/// neither node holds a stand-in, an edge or a live agent.
pub(crate) async fn twenty_remote_children_at_once_complete_and_leave_nothing_behind(
    owner: &mut Owner,
) {
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
    let outcomes = within(
        30,
        "twenty remote children settle",
        tree.wait(&ids, agent_tree::protocol::WaitPolicy::AllSettled),
    )
    .await;
    for outcome in &outcomes {
        assert_eq!(outcome.text.as_deref(), Some("done 2"), "{outcome:?}");
    }
    assert_eq!(root_tokens(&tree), 20 * 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0), "the worker still hosts edges");
    assert_eq!(tokens, 20 * 24);
    assert_stand_ins_back(owner, 3, before.stand_ins, "a stand-in is still routed").await;
    let after = owner.node.stats();
    assert_eq!(after.acknowledged_deltas - before.acknowledged_deltas, 40);
    assert_eq!(
        after.acknowledged_usage.total_tokens() - before.acknowledged_usage.total_tokens(),
        20 * 24
    );
    assert_eq!(root_tokens(&tree), 20 * 24, "nothing counted after the end");
    shut_down_and_finish(&tree, process).await;
}

/// Twenty remote children of one local agent, spawned in one turn in the background and
/// waited for: all complete, counted once in the lead's and the root's totals.
pub(crate) async fn twenty_remote_children_of_one_owner_agent_complete_and_count_once(
    owner: &mut Owner,
) {
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
    let tree = lead_and_runner_tree(
        owner,
        &name,
        model,
        agent_tree::TreeConfig::default().with_max_children_per_agent(20),
    )
    .await;
    lead_completes(&tree, 30).await;
    let runners = records_of(&tree, "runner");
    assert_eq!(runners.len(), 20);
    assert!(
        runners.iter().all(|r| r.status == AgentStatus::Completed),
        "{runners:?}"
    );
    assert_eq!(root_tokens(&tree), 20 * 24);
    let (live, tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges, tokens), (0, 0, 20 * 24));
    assert_stand_ins_back(owner, 3, before.stand_ins, "a stand-in is still routed").await;
    shut_down_and_finish(&tree, process).await;
}

/// One owner tree with children on two workers at once: both complete, each worker bills
/// its own child's turns, the root counts the sum once, and nothing stays routed.
pub(crate) async fn children_on_two_workers_at_once_complete_and_count_per_worker(
    owner: &mut Owner,
) {
    let stand_ins = owner.node.stats().stand_ins;
    let (a, mut pa) = owner.worker().await;
    let (b, mut pb) = owner.worker().await;
    let tree = two_worker_tree(owner, agent_tree::TreeConfig::default()).await;
    for round in 0..3 {
        let before = root_tokens(&tree);
        let ha = spawn_runner_on(&tree, "work 4 40", &a).await;
        let hb = spawn_runner_on(&tree, "work 6 30", &b).await;
        let outcomes = within(
            10,
            "both remote children settle",
            tree.wait(
                &[ha.id(), hb.id()],
                agent_tree::protocol::WaitPolicy::AllSettled,
            ),
        )
        .await;
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

/// Two owner trees on one owner node, both with an agent `a1` on the same worker, at once:
/// outcomes, steers, usage and mirrors stay each tree's own.
pub(crate) async fn two_owner_trees_on_one_node_share_a_worker_without_mixing(owner: &mut Owner) {
    let stand_ins = owner.node.stats().stand_ins;
    let (name, mut process) = owner.worker().await;
    let mut billed = 0;
    for round in 0..3 {
        let t1 = owner.tree(&name, runner()).await;
        let t2 = owner.tree(&name, runner()).await;
        let h1 = spawn_runner(&t1, "work 3 80").await;
        let h2 = spawn_runner(&t2, "work 5 60").await;
        assert_eq!((h1.id(), h2.id()), (AgentId::new(1), AgentId::new(1)));
        first_usage(&t1, h1.id()).await;
        t1.steer(h1.id(), "one").await.unwrap();
        let o1 = within(
            10,
            "t1 settles",
            t1.wait(&[h1.id()], agent_tree::protocol::WaitPolicy::AllSettled),
        )
        .await;
        let o2 = within(
            10,
            "t2 settles",
            t2.wait(&[h2.id()], agent_tree::protocol::WaitPolicy::AllSettled),
        )
        .await;
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
pub(crate) async fn two_hundred_sequential_remote_spawns_leave_nothing_behind(owner: &mut Owner) {
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
