//! Limits from settings: `TreeConfig::from_json_file` reads a JSON settings file (absent
//! fields keep their defaults) and its validation errors name the file and the field; the
//! lifetime spawn budget `max_spawns_per_agent` refuses with a message naming it; the default
//! `max_turns` is `max(6, 30 − 5·(depth − 1))`, after which an agent that never answers fails
//! with reason `max_turns`; and `inherit_context` is honoured at depth 2 and dropped (with a
//! `context_dropped` event) at depth 3.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::catalog;
use crate::support::harness::{a, depth_capped_tree, idle, outcome_of, results, tree};
use crate::support::journal::TempDir;
use crate::support::resume_call;
use crate::support::run_admitted;
use crate::support::scripts::delegates;
use crate::support::{RecordingModel, build_tree};
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{ControlScope, TreeError};
use serde_json::json;

/// A settings file in a temp dir of its own, which is removed (file and all) on drop.
struct TempSettings {
    path: PathBuf,
    _dir: TempDir,
}

impl TempSettings {
    fn new(text: &str) -> Self {
        let dir = TempDir::new("limits");
        let path = dir.file("settings.json");
        std::fs::write(&path, text).expect("the temp dir is writable");
        TempSettings { path, _dir: dir }
    }
}

/// A settings file sets every limit it names, and the fields it leaves out keep their
/// defaults.
#[test]
fn a_settings_file_sets_every_limit_and_keeps_defaults_for_the_rest() {
    let file = TempSettings::new(
        r#"{
            "max_depth": 3,
            "max_children_per_agent": 2,
            "max_total_agents": 7,
            "max_concurrent": 3,
            "max_spawns_per_agent": 2,
            "max_subtree_tokens": 1000,
            "control_scope": "descendants",
            "attenuate_tools": true,
            "shutdown_grace_ms": 250
        }"#,
    );
    let config = TreeConfig::from_json_file(&file.path).unwrap();
    assert_eq!(config.max_depth, 3);
    assert_eq!(config.max_children_per_agent, 2);
    assert_eq!(config.max_total_agents, 7);
    assert_eq!(config.max_concurrent, 3);
    assert_eq!(config.max_spawns_per_agent, Some(2));
    assert_eq!(config.max_subtree_tokens, Some(1000));
    assert_eq!(config.control_scope, ControlScope::Descendants);
    assert!(config.attenuate_tools);
    assert_eq!(config.shutdown_grace, Duration::from_millis(250));

    let partial = TempSettings::new(r#"{"max_depth": 2}"#);
    let config = TreeConfig::from_json_file(&partial.path).unwrap();
    assert_eq!(config, TreeConfig::default().with_max_depth(2));
}

/// An invalid value in a settings file is refused with an error naming the file and the
/// field.
#[test]
fn settings_file_errors_name_the_file_and_the_field() {
    for (text, field) in [
        (r#"{"max_total_agents": 0}"#, "max_total_agents"),
        (r#"{"max_children_per_agent": 0}"#, "max_children_per_agent"),
        (r#"{"max_concurrent": 0}"#, "max_concurrent"),
        (r#"{"shutdown_grace_ms": 0}"#, "shutdown_grace_ms"),
    ] {
        let file = TempSettings::new(text);
        let err = TreeConfig::from_json_file(&file.path)
            .unwrap_err()
            .to_string();
        let path = file.path.display().to_string();
        assert!(err.starts_with(&path), "{err} does not name {path}");
        assert!(err.contains(&format!("field `{field}`")), "{err}");
    }
    let file = TempSettings::new(r#"{"max_dept": 2}"#);
    let err = TreeConfig::from_json_file(&file.path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `max_dept`"), "{err}");
    let file = TempSettings::new(r#"{"max_depth": "deep"}"#);
    let err = TreeConfig::from_json_file(&file.path)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with(&file.path.display().to_string()), "{err}");
    let missing = std::env::temp_dir().join(format!(
        "agent-tree-limits-{}-missing.json",
        std::process::id()
    ));
    let err = TreeConfig::from_json_file(&missing)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with(&missing.display().to_string()), "{err}");
}

/// A config built in code is validated too: the tree builder refuses an invalid one with an
/// error naming the field.
#[tokio::test]
async fn an_invalid_config_built_in_code_is_refused_by_the_builder() {
    let err = Tree::builder()
        .config(TreeConfig::default().with_max_children_per_agent(0))
        .model(ScriptedModel::new())
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, TreeError::Config(_)));
    assert_eq!(
        err.to_string(),
        "config: field `max_children_per_agent`: must be at least 1"
    );
}

/// `max_spawns_per_agent` is a lifetime budget: a spawn past it is refused with a message
/// naming the limit even when earlier children are gone, and a resume does not count as a
/// spawn.
#[tokio::test(start_paused = true)]
async fn the_lifetime_spawn_budget_refuses_with_a_message_naming_it() {
    let file = TempSettings::new(r#"{"max_spawns_per_agent": 2}"#);
    let config = TreeConfig::from_json_file(&file.path).unwrap();
    // Three sequential foreground spawns: the children are gone before each next spawn, so
    // only the lifetime budget can refuse the third. A resume is not a new spawn.
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("worker", "one"),
                Turn::spawn("worker", "two"),
                Turn::spawn("worker", "three"),
                Turn::calls([resume_call("a2", "more")]),
                Turn::answer("done"),
            ],
        )
        .script("worker", [Turn::answer("worked")]);
    model.script_agent(
        a(2),
        Script::new([Turn::answer("worked"), Turn::answer("worked again")]),
    );
    let catalog = catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("worker", ""),
    ]);
    let tree = tree(model.clone(), catalog, config).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    for n in [1, 2] {
        let r = results(&model, a(1), n);
        assert!(!r[0].is_error, "spawn {n}: {}", r[0].content);
    }
    let third = results(&model, a(1), 3);
    assert!(third[0].is_error);
    assert_eq!(
        crate::support::error_text(&third[0].content),
        "max_spawns_per_agent 2 reached for a1"
    );
    let resumed = results(&model, a(1), 4);
    assert!(!resumed[0].is_error, "{}", resumed[0].content);
    assert!(resumed[0].content.contains("worked again"));
    assert_eq!(tree.record(a(1)).unwrap().children, [a(2), a(3)]);
    tree.shutdown().await;
}

/// A script that never gives a final answer: every turn calls a tool nobody has (an error
/// result, which the agent carries on from).
fn never_answers() -> Script {
    Script::new((0..40).map(|_| Turn::calls([Call::tool("noop", json!({}))])))
}

/// The default `max_turns` is `max(6, 30 − 5·(depth − 1))`; an agent that never answers
/// within it fails with reason `max_turns`, which is a result for its owner, not the
/// owner's failure.
#[tokio::test(start_paused = true)]
async fn default_max_turns_shrinks_with_depth_and_ends_in_max_turns() {
    // spinner at depth 1 (30 turns); boss → spinner at depth 2 (25); boss → mid → spinner at
    // depth 3 (20).
    let model = ScriptedModel::new()
        .script("spinner", never_answers())
        .script("boss", delegates("spinner", "spin", "boss done"))
        .script("mid", delegates("spinner", "spin", "mid done"))
        .script("top", delegates("mid", "go", "top done"));
    let delegator =
        |name: &str| AgentDefinition::new(name, "").with_allowed_subagents(SubagentAllowance::All);
    let catalog = catalog([
        AgentDefinition::new("spinner", ""),
        delegator("boss"),
        delegator("mid"),
        delegator("top"),
    ]);
    let tree = build_tree(catalog, model.clone()).await;
    for (top_type, depth, expected) in [("spinner", 1, 30), ("boss", 2, 25), ("top", 3, 20)] {
        let top = tree.run(SpawnRequest::new(top_type, "go")).await.unwrap();
        idle(&tree).await;
        let spinner = tree
            .snapshot()
            .agents()
            .find(|r| r.agent_type == "spinner" && r.depth == depth)
            .map(|r| r.id)
            .expect("the spinner ran");
        let outcome = outcome_of(&tree, spinner).await;
        assert_eq!(outcome.status, AgentStatus::Failed, "depth {depth}");
        assert_eq!(outcome.reason, EndReason::MaxTurns, "depth {depth}");
        assert_eq!(
            outcome.error.as_deref(),
            Some(format!("no final answer within max_turns {expected}").as_str())
        );
        assert_eq!(model.calls_by(spinner), expected, "depth {depth}");
        if depth > 1 {
            // A failed child is a result for its owner, not a failure of the owner.
            assert!(top.is_completed(), "{}", top.summary());
        }
    }
    tree.shutdown().await;
}

/// `inherit_context` gives a depth-2 child its owner's conversation before its own task; at
/// depth 3 it is dropped, announced by a `context_dropped` event, and the child sees its
/// task alone.
#[tokio::test(start_paused = true)]
async fn inherit_context_is_honoured_at_depth_two_and_dropped_at_depth_three() {
    let scripted = ScriptedModel::new()
        .script("boss", delegates("heir", "inherit me", "boss done"))
        .script("heir", delegates("heir", "deeper", "heir done"));
    let model = RecordingModel::new(scripted);
    let catalog = catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("heir", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_inherit_context(true),
    ]);
    let tree = depth_capped_tree(model.clone(), catalog, 3).await;
    let mut events = tree.subscribe();
    let outcome = run_admitted(&tree, SpawnRequest::new("boss", "the boss's secret plan")).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    assert_eq!(
        (
            tree.record(a(2)).unwrap().depth,
            tree.record(a(3)).unwrap().depth
        ),
        (2, 3)
    );

    // Depth 2: the owner's conversation (its task, its Agent call and that call's result as
    // still running), then its own task.
    let heir = &model.calls_of(a(2))[0].messages;
    assert_eq!(heir.len(), 4, "{heir:?}");
    assert_eq!(
        (heir[0].role, heir[0].content.as_str()),
        (Role::User, "the boss's secret plan")
    );
    assert_eq!(heir[1].role, Role::Assistant);
    assert_eq!(heir[1].tool_calls[0].name, "Agent");
    assert_eq!(heir[2].role, Role::Tool);
    assert_eq!(heir[2].tool_call_id, Some(heir[1].tool_calls[0].id.clone()));
    assert_eq!(heir[3].content, "inherit me");

    // Depth 3: only its own task.
    let deep = &model.calls_of(a(3))[0].messages;
    assert_eq!(deep.len(), 1, "{deep:?}");
    assert_eq!(deep[0].content, "deeper");

    let dropped: Vec<_> = events
        .drain()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::ContextDropped))
        .collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!((dropped[0].agent, dropped[0].depth), (a(3), 3));
    assert_eq!(dropped[0].parent, Some(a(2)));
    assert_eq!(tree.snapshot().tally.context_dropped, 1);
    tree.shutdown().await;
}
