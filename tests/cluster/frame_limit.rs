//! Bodies over the edge's frame limit (8 MiB): an answer comes up in parts and is whole at
//! its owner; one over the body limit (25 MiB) settles saying where its output stays; a
//! question, or an answer to one, over the frame limit never hangs the edge.

use super::support::runner_within;
use super::support::shut_down_and_finish;
use super::support::spawn_runner;
use std::time::Duration;

use agent_tree::protocol::AgentStatus;
use agent_tree::testkit::ScriptedModel;
use agent_tree::{Catalog, Tree};

use super::{Owner, root_tokens, runner, worker_idle};

/// A remote child's 9 MiB answer is over the edge's frame limit (8 MiB): its terminal event
/// goes up in parts, each a frame under the limit, and its outcome is whole at its owner;
/// one over the body limit (25 MiB) settles without its output, saying where it stays. The
/// edge goes on either way.
pub(crate) async fn a_remote_answer_over_the_frame_limit_comes_up_in_parts(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let tree = owner.tree(&name, runner()).await;
    let outcome = runner_within(
        &tree,
        20,
        "the remote child with a 9 MiB answer settles",
        "big 9437184",
    )
    .await;
    assert_eq!(
        outcome.status,
        AgentStatus::Completed,
        "{:?}",
        outcome.error
    );
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.text.as_ref().map(String::len), Some(9_437_184));
    assert_eq!(root_tokens(&tree), 12);
    let huge = runner_within(
        &tree,
        30,
        "the remote child with a 25 MiB answer settles",
        "big 26214400",
    )
    .await;
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
    let next = runner_within(&tree, 10, "the next spawn settles", "work 1 1").await;
    assert_eq!(next.text.as_deref(), Some("done 1"));
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    shut_down_and_finish(&tree, process).await;
}

/// A remote agent asking its owner a question over the frame limit (9 MiB): the edge must
/// not hang. The owner hears of it (the ask refused with an error, and the agent goes on),
/// or the remote child settles with a cause saying so; either way it settles promptly.
pub(crate) async fn a_remote_question_over_the_frame_limit_does_not_hang_the_edge(
    owner: &mut Owner,
) {
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

/// The owner's answer to a remote agent's question over the frame limit (9 MiB): the edge
/// must not hang. The asking agent gets an error result (or the remote child settles with
/// a cause saying so), promptly.
pub(crate) async fn a_remote_questions_answer_over_the_frame_limit_does_not_hang_the_edge(
    owner: &mut Owner,
) {
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
    let mut handle = spawn_runner(tree, task).await;
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
