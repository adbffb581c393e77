//! Review 26: agent-file frontmatter preprocessing, the application's steer errors, and the
//! size of a refusal a model is shown. Each test quotes the claim it checks; the failing
//! ones are defects, the three marked GUARD pass and hold claims next to them.

use std::path::Path;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{CatalogError, ControlError, parse_agent_file};

use crate::support::harness::{a, results, tree};
use crate::support::{catalog, delegator, delegator_of_all, leaf};

/// Claim (actors/src/catalog/frontmatter.rs:76, the `parse_agent_file` field table):
/// "`description` | | a string, trimmed"; and "Values are never coerced" (:108). A YAML
/// block scalar is a string taken verbatim.
///
/// Defect: `quote_huge_integers` (actors/src/catalog/frontmatter.rs) rewrites every text
/// line of the form `key: <integer past u64>` before YAML parsing, without knowing whether
/// the line is a `key: value` pair or a line inside a block scalar. A description line
/// `limit: 123456789012345678901234567890` comes back as `limit: "1234..."`: the file's
/// text is changed, and the description (shown to every model choosing a type) says
/// something the file does not.
#[test]
fn a_block_scalar_line_holding_a_huge_integer_is_kept_as_written() {
    let text = "---\ndescription: |\n  limit: 123456789012345678901234567890\n---\nYou work.\n";
    let definition = parse_agent_file(Path::new("w.md"), text).unwrap();
    assert_eq!(
        definition.description,
        "limit: 123456789012345678901234567890"
    );
}

/// Claim (docs/semantics.md:211-212): "every error names the file and the field, and every
/// file's errors are reported together"; frontmatter.rs:155-158: "[`CatalogError::Field`]
/// for a malformed field ..., every one of them (several come as one
/// [`CatalogError::Many`])". The private `quote_huge_integers` exists so that an integer no
/// YAML value holds is "its field's error ... beside the file's other field errors".
///
/// Defect: the rewrite only matches a line whose whole value is digits, so the same huge
/// integer followed by a YAML comment (`max_turns: 1234... # many`) reaches the YAML parser
/// and the whole file is refused as invalid YAML (`CatalogError::Yaml`): the field is not
/// reported as a field, and the file's other field error (`isolated: maybe`) is not
/// reported at all.
#[test]
fn a_huge_integer_followed_by_a_comment_is_a_field_error_beside_the_others() {
    let text =
        "---\nmax_turns: 123456789012345678901234567890 # many\nisolated: maybe\n---\nYou work.\n";
    let err = parse_agent_file(Path::new("w.md"), text).unwrap_err();
    let CatalogError::Many(problems) = &err else {
        panic!("both field errors should be reported, got {err:?}: {err}");
    };
    let fields: Vec<&str> = problems
        .iter()
        .filter_map(|p| match p {
            CatalogError::Field { field, .. } => Some(field.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fields, ["max_turns", "isolated"], "{err}");
}

/// Claim (actors/src/tree.rs:701-704, `Tree::steer`): "# Errors [`ControlError::NotYours`]
/// for an unknown id or the root, [`ControlError::WrongStatus`] for a settled agent."
///
/// Defect: `Registry::route_steer` (actors/src/registry/read.rs) checks the text (blank,
/// over `max_steer_bytes`) before it looks the agent up, so a steer to an id the tree never
/// gave answers `EmptySteer` (or `SteerTooLarge`) as if the agent existed; likewise a
/// settled agent answers `SteerTooLarge` instead of `WrongStatus`.
#[tokio::test(start_paused = true)]
async fn a_steer_to_an_unknown_id_is_not_yours_whatever_its_text() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let config = TreeConfig::default().with_steer_limits(100, 16);
    let tree = tree(model, catalog([leaf("w")]), config).await;
    let blank = tree.steer(a(99), "  ").await.unwrap_err();
    let large = tree.steer(a(99), "x".repeat(17)).await.unwrap_err();
    tree.shutdown().await;
    assert!(
        matches!(blank, ControlError::NotYours(id) if id == a(99)),
        "blank steer to unknown a99: {blank:?}"
    );
    assert!(
        matches!(large, ControlError::NotYours(id) if id == a(99)),
        "oversize steer to unknown a99: {large:?}"
    );
}

/// Claim (docs/semantics.md:298): "Refusals are short JSON, `{"error": "..."}`, cut to 512
/// bytes"; actors/src/agent/orchestration.rs:98-99 ("The longest refusal text a model is
/// shown, in bytes").
///
/// Defect: `refused` cuts with `error::cut_to`, which truncates to 512 bytes and then
/// appends `...`, so a long refusal (an unknown type, whose error lists every type the
/// caller may reach) is 515 bytes, over the documented bound.
#[tokio::test(start_paused = true)]
async fn a_refusal_a_model_is_shown_is_at_most_512_bytes() {
    let mut definitions = vec![delegator_of_all("lead")];
    for i in 0..12 {
        definitions.push(leaf(&format!(
            "worker-with-a-rather-long-type-name-number-{i:02}"
        )));
    }
    let model = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::calls([Call::spawn("no-such-type", "x")]),
            Turn::answer("done"),
        ]),
    );
    let tree = tree(model.clone(), catalog(definitions), TreeConfig::default()).await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.shutdown().await;
    let result = results(&model, a(1), 1);
    let refusal = &result[0];
    assert!(refusal.is_error, "{}", refusal.content);
    let value: serde_json::Value = serde_json::from_str(&refusal.content).unwrap();
    let text = value["error"].as_str().unwrap();
    assert!(text.starts_with("unknown agent type"), "{text}");
    assert!(
        text.len() <= 512,
        "refusal text is {} bytes: {text:?}",
        text.len()
    );
}

/// GUARD. Claim (actors/src/tree.rs:690-691, `Tree::kill`): "[`ControlError::WrongStatus`]
/// for an agent without a running actor (settled, queued or still starting)".
#[tokio::test(start_paused = true)]
async fn guard_killing_a_queued_agent_is_wrong_status() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let config = TreeConfig::default().with_max_concurrent(1);
    let tree = tree(model, catalog([leaf("w")]), config).await;
    let _first = tree
        .spawn(SpawnRequest::new("w", "one").background())
        .await
        .unwrap();
    let second = tree
        .spawn(SpawnRequest::new("w", "two").background())
        .await
        .unwrap();
    assert_eq!(
        tree.record(second.id()).unwrap().status,
        AgentStatus::Queued
    );
    let err = tree.kill(second.id()).unwrap_err();
    assert!(matches!(err, ControlError::WrongStatus(..)), "{err:?}");
    tree.shutdown().await;
}

/// GUARD. Claim (actors/src/tree.rs:552-553, `Tree::resume`): "[`SpawnError::Control`] when
/// the agent is not top-level or is still live".
#[tokio::test(start_paused = true)]
async fn guard_resuming_a_nested_agent_is_a_control_error() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::calls([Call::spawn("w", "x")]), Turn::answer("done")]),
        )
        .script("w", Script::new([Turn::answer("ok")]));
    let tree = tree(
        model,
        catalog([delegator("lead", &["w"]), leaf("w")]),
        TreeConfig::default(),
    )
    .await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.idle().await;
    let err = tree.resume(a(2), "again").await.unwrap_err();
    assert!(matches!(err, SpawnError::Control(_)), "{err:?}");
    tree.shutdown().await;
}

/// GUARD. Claim (actors/src/events.rs:20): "The next event; `None` once the tree is gone
/// and every event was read", and (actors/src/tree.rs:372) "a dropped tree ends every
/// wait": with an agent still in its model call when the tree is dropped.
#[tokio::test(start_paused = true)]
async fn guard_a_dropped_tree_ends_its_event_stream() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let tree = tree(model, catalog([leaf("w")]), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    drop(tree);
    let ended = tokio::time::timeout(Duration::from_secs(3600), async {
        while events.next().await.is_some() {}
        handle.outcome().await
    })
    .await;
    assert!(ended.is_ok(), "the stream or the wait never ended");
}
