//! Type resolution is strict, for nested spawns through the `Agent` tool and for top-level
//! spawns: an exact name wins, else one unambiguous case-insensitive match; unknown,
//! disabled, blank and case-ambiguous names are rejected with precise errors; the fallback
//! type `general-purpose` is never substituted; the caller's allowlist is checked again after
//! resolution; and error messages list only the types the caller may reach.

use crate::support::harness::{a, idle, results, spawned_id, tree};
use crate::support::{build_tree, catalog};
use agent_tree::prelude::*;
use agent_tree::protocol::Message;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};

/// writer / Writer differ only in case; `old` is disabled; `general-purpose` is the
/// project's fallback type; `secret` exists but is outside `lead`'s allowlist.
fn similar_names() -> Catalog {
    catalog([
        AgentDefinition::new("writer", ""),
        AgentDefinition::new("Writer", ""),
        AgentDefinition::new("Reviewer", ""),
        AgentDefinition::new("old", "").with_enabled(false),
        AgentDefinition::new("general-purpose", "The fallback type."),
        AgentDefinition::new("secret", ""),
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["writer", "Reviewer"])),
    ])
}

fn model(caller: &str, requests: &[&str]) -> ScriptedModel {
    let answer = Script::new([Turn::answer("ok")]);
    ScriptedModel::new()
        .script(
            caller,
            Script::new([
                Turn::calls(requests.iter().map(|t| Call::spawn_background(*t, "task"))),
                Turn::answer("done"),
            ]),
        )
        .script("writer", answer.clone())
        .script("Writer", answer.clone())
        .script("Reviewer", answer.clone())
        .script("general-purpose", answer.clone())
        .script("secret", answer)
}

/// Runs `caller` once with one background spawn per name in `requests`; returns the tree and
/// the spawn results in call order.
async fn attempt(caller: &str, requests: &[&str]) -> (Tree, ScriptedModel, Vec<Message>) {
    let model = model(caller, requests);
    let config = TreeConfig::default().with_max_children_per_agent(8);
    let tree = tree(model.clone(), similar_names(), config).await;
    let outcome = tree.run(SpawnRequest::new(caller, "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    let results = results(&model, a(1), 1);
    assert_eq!(results.len(), requests.len());
    (tree, model, results)
}

fn type_of(tree: &Tree, result: &Message) -> String {
    tree.record(spawned_id(result)).unwrap().agent_type
}

fn refusal(result: &Message) -> String {
    assert!(result.is_error, "not refused: {}", result.content);
    crate::support::error_text(&result.content)
}

fn no_fallback(tree: &Tree, model: &ScriptedModel) {
    let snapshot = tree.snapshot();
    assert!(
        snapshot.agents().all(|r| r.agent_type != "general-purpose"),
        "the fallback type was substituted"
    );
    assert!(
        model
            .log()
            .iter()
            .all(|c| c.agent_type != "general-purpose")
    );
}

/// A requested type name resolves to the type of exactly that name, else to the one type it
/// matches case-insensitively.
#[tokio::test(start_paused = true)]
async fn exact_names_win_and_a_unique_case_insensitive_match_resolves() {
    let (tree, _, r) = attempt("boss", &["Writer", "writer", "reviewer", "SECRET"]).await;
    assert_eq!(type_of(&tree, &r[0]), "Writer");
    assert_eq!(type_of(&tree, &r[1]), "writer");
    assert_eq!(type_of(&tree, &r[2]), "Reviewer");
    assert_eq!(type_of(&tree, &r[3]), "secret");
    tree.shutdown().await;
}

/// Unknown, disabled, blank and case-ambiguous type names are refused, each with its own
/// precise error, and `general-purpose` is never substituted.
#[tokio::test(start_paused = true)]
async fn unknown_disabled_blank_and_ambiguous_names_are_rejected_without_fallback() {
    let (tree, model, r) = attempt("boss", &["wrtier", "old", "  ", "", "WRITER"]).await;
    assert_eq!(
        refusal(&r[0]),
        "unknown agent type \"wrtier\"; available: writer, Writer, Reviewer, \
         general-purpose, secret, boss, lead"
    );
    assert_eq!(refusal(&r[1]), "agent type \"old\" is disabled");
    assert_eq!(refusal(&r[2]), "agent type is blank");
    assert_eq!(refusal(&r[3]), "agent type is blank");
    assert_eq!(
        refusal(&r[4]),
        "agent type \"WRITER\" is ambiguous: writer, Writer"
    );
    assert!(tree.record(a(1)).unwrap().children.is_empty());
    no_fallback(&tree, &model);
    tree.shutdown().await;
}

/// The caller's allowlist is checked against the resolved type: a name that resolves
/// case-insensitively to a type outside it is refused, listing only the types the caller
/// may reach.
#[tokio::test(start_paused = true)]
async fn the_allowlist_is_checked_again_after_resolution() {
    // `lead` may spawn writer and Reviewer only. "REVIEWER" resolves to Reviewer (allowed);
    // "SECRET" and "General-Purpose" resolve case-insensitively to types outside the
    // allowlist and are refused; the refusal lists only the types lead may reach.
    let (tree, model, r) = attempt(
        "lead",
        &["REVIEWER", "SECRET", "General-Purpose", "general-purpose"],
    )
    .await;
    assert_eq!(type_of(&tree, &r[0]), "Reviewer");
    assert_eq!(
        refusal(&r[1]),
        "agent type \"secret\" is not allowed here; allowed: writer, Reviewer"
    );
    assert_eq!(
        refusal(&r[2]),
        "agent type \"general-purpose\" is not allowed here; allowed: writer, Reviewer"
    );
    assert_eq!(refusal(&r[3]), refusal(&r[2]));
    assert_eq!(tree.record(a(1)).unwrap().children.len(), 1);
    no_fallback(&tree, &model);
    tree.shutdown().await;
}

/// A refusal of an unknown name, or of a disabled type the caller may not reach, lists only
/// the types the caller may reach and reveals no other.
#[tokio::test(start_paused = true)]
async fn unknown_and_unreachable_disabled_names_list_only_reachable_types() {
    let (tree, model, r) = attempt("lead", &["nobody", "old"]).await;
    for result in &r {
        let text = refusal(result);
        assert!(text.ends_with("; available: writer, Reviewer"), "{text}");
        for hidden in [
            "secret",
            "general-purpose",
            "Writer",
            "boss",
            "old\" is disabled",
        ] {
            assert!(!text.contains(hidden), "{text} reveals {hidden}");
        }
    }
    assert_eq!(
        refusal(&r[1]),
        "unknown agent type \"old\"; available: writer, Reviewer"
    );
    no_fallback(&tree, &model);
    tree.shutdown().await;
}

/// A name ambiguous across types is refused without naming the candidates the caller may
/// not reach.
#[tokio::test(start_paused = true)]
async fn an_ambiguous_refusal_lists_only_reachable_types() {
    // lead may reach `writer` but not `Writer`; "WRITER" must be refused without naming the
    // unreachable `Writer`.
    let (tree, _, r) = attempt("lead", &["WRITER"]).await;
    let text = refusal(&r[0]);
    assert!(
        !text.contains("Writer"),
        "{text} reveals an unreachable type"
    );
    tree.shutdown().await;
}

/// Top-level spawns resolve type names by the same strict rule, with the same errors, and a
/// refused spawn leaves no record.
#[tokio::test(start_paused = true)]
async fn top_level_spawns_resolve_strictly_too() {
    let model = model("boss", &[]);
    let tree = build_tree(similar_names(), model.clone()).await;
    let ok = tree.run(SpawnRequest::new("REVIEWER", "go")).await.unwrap();
    assert!(ok.is_completed());
    assert_eq!(tree.record(a(1)).unwrap().agent_type, "Reviewer");
    let err = |name: &str| {
        let tree = &tree;
        let name = name.to_owned();
        async move {
            tree.spawn(SpawnRequest::new(name, "go"))
                .await
                .expect_err("refused")
                .to_string()
        }
    };
    assert!(
        err("wrtier")
            .await
            .starts_with("unknown agent type \"wrtier\"")
    );
    assert_eq!(err("old").await, "agent type \"old\" is disabled");
    assert_eq!(err(" ").await, "agent type is blank");
    assert_eq!(
        err("WRITER").await,
        "agent type \"WRITER\" is ambiguous: writer, Writer"
    );
    assert_eq!(
        tree.snapshot().agents().count(),
        1,
        "refusals leave no record"
    );
    no_fallback(&tree, &model);
    tree.shutdown().await;
}
