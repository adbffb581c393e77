//! A tree's shutdown keeps one deadline for the whole subtree, whatever hangs.

use std::time::Duration;

use agent_tree::Tree;
use agent_tree::protocol::SpawnRequest;
use agent_tree::testkit::{CallEnd, ScriptedModel, Turn, hanging_hook};

use crate::research_team::team;

/// A shutdown with a hanging shutdown hook, a lead and its background child both in a hanging
/// turn, kills both within one deadline for the whole subtree (3 s, not one per level): the
/// hanging calls are dropped, the finished one returned.
#[tokio::test(start_paused = true)]
async fn shutdown_cuts_a_hanging_hook_off_at_one_deadline() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [Turn::spawn_background("searcher", "find X"), Turn::hang()],
        )
        .script("searcher", [Turn::hang()]);
    let log = model.call_log();
    let tree = Tree::builder()
        .catalog(team("temporary"))
        .model(model)
        .on_shutdown(hanging_hook())
        .build()
        .await
        .unwrap();
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    // Both are in their hanging turn.
    log.until("both hang", |calls| calls.len() == 3).await;
    let searcher = log
        .calls()
        .iter()
        .find(|c| c.agent_type == "searcher")
        .unwrap()
        .agent;

    let started = tokio::time::Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    println!("{report:?}");
    assert!(report.killed.contains(&lead.id()), "{report:?}");
    assert!(report.killed.contains(&searcher), "{report:?}");
    // ONE deadline for the whole subtree, not one per level.
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let ends: Vec<_> = log
        .calls()
        .iter()
        .map(|c| (c.agent_type.clone(), c.turn, c.end))
        .collect();
    assert_eq!(
        ends,
        [
            ("lead".to_owned(), 1, CallEnd::Returned),
            ("lead".to_owned(), 2, CallEnd::Dropped),
            ("searcher".to_owned(), 1, CallEnd::Dropped),
        ],
    );
}
