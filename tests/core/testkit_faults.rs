//! Fault injection: a model failing at turn n or by a seeded probability, panicking, hanging
//! or slow; tools and hooks that fail, panic or hang.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EndReason;
use agent_tree::testkit::{
    FaultyModel, FaultyTool, Script, ScriptedModel, Turn, failing_hook, hanging_hook,
};

fn catalog() -> Catalog {
    Catalog::new([AgentDefinition::new("w", ""), AgentDefinition::new("v", "")]).unwrap()
}

fn answers() -> ScriptedModel {
    ScriptedModel::new()
        .script("w", Script::new([Turn::answer("ok")]))
        .script("v", Script::new([Turn::answer("ok")]))
}

async fn run(model: impl Model, agent_type: &str) -> Outcome {
    let tree = Tree::builder()
        .catalog(catalog())
        .model(model)
        .build()
        .await
        .unwrap();
    tree.run(SpawnRequest::new(agent_type, "go")).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_model_fails_panics_hangs_or_is_slow_by_its_plan() {
    let failing = FaultyModel::new(answers())
        .fail_at_turn(1, ModelError::new("injected"))
        .only_for("w");
    let tree = Tree::builder()
        .catalog(catalog())
        .model(failing)
        .build()
        .await
        .unwrap();
    let w = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(w.error.as_deref(), Some("injected"));
    let v = tree.run(SpawnRequest::new("v", "go")).await.unwrap();
    assert!(v.is_completed(), "only `w` fails");

    let outcome = run(FaultyModel::new(answers()).panic_at_turn(1), "w").await;
    assert_eq!(outcome.reason, EndReason::Panicked);

    let started = tokio::time::Instant::now();
    let outcome = run(
        FaultyModel::new(answers()).slow(Duration::from_secs(3)),
        "w",
    )
    .await;
    assert!(outcome.is_completed());
    assert_eq!(started.elapsed(), Duration::from_secs(3));

    let tree = Tree::builder()
        .catalog(catalog())
        .model(FaultyModel::new(answers()).hang_at_turn(1))
        .build()
        .await
        .unwrap();
    let mut hung = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    tree.abort(hung.id()).unwrap();
    assert_eq!(hung.outcome().await.status, AgentStatus::Aborted);
}

#[tokio::test(start_paused = true)]
async fn a_seeded_probability_fails_about_that_share_and_the_same_calls_every_time() {
    let fails = |seed: u64| async move {
        let model =
            FaultyModel::new(answers()).fail_with_probability(0.3, seed, ModelError::new("x"));
        !run(model, "w").await.is_completed()
    };
    let mut failed = 0;
    for seed in 0..200u64 {
        failed += usize::from(fails(seed).await);
    }
    assert!(
        (40..=80).contains(&failed),
        "{failed} of 200 failed at p = 0.3"
    );
    for seed in [3u64, 7, 11, 19] {
        assert_eq!(fails(seed).await, fails(seed).await, "seed {seed}");
    }
}

#[tokio::test(start_paused = true)]
async fn tools_and_hooks_fail_by_plan() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::calls([agent_tree::testkit::Call::tool(
                "read",
                serde_json::json!({}),
            )]),
            Turn::answer("ok"),
        ]),
    );
    let read = FnTool::new("read", "reads", |_, _| async { Ok("text".to_owned()) });
    let tree = Tree::builder()
        .catalog(catalog())
        .model(model.clone())
        .tool(FaultyTool::failing(read, "disk on fire"))
        .unwrap()
        .build()
        .await
        .unwrap();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let result = &model.log_of(AgentId::new(1))[1].results[0];
    assert!(result.is_error);
    assert_eq!(result.content, "disk on fire");

    let tree = Tree::builder()
        .catalog(catalog())
        .model(answers())
        .on_start(failing_hook("no workspace"))
        .build()
        .await
        .unwrap();
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::HookFailed);

    let tree = Tree::builder()
        .catalog(catalog())
        .model(ScriptedModel::new().script("w", Script::new([Turn::hang()])))
        .on_shutdown(hanging_hook())
        .build()
        .await
        .unwrap();
    let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = tree.shutdown().await;
    assert!(report.killed.contains(&w.id()), "{report:?}");
}
