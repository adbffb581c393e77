//! Allowlist entries name catalog types by the rule requested type names follow (the exact
//! name, else one case-insensitive match), in a running tree: `allowed_subagents: [Reviewer]`
//! with a catalog type `reviewer` offers the `Agent` tool, and the spawn it offers succeeds
//! (a tool offered is never one that refuses every spawn with "allowed: none").

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use crate::support::build_tree;
use crate::support::catalog;
use crate::support::run_admitted;
use agent_tree::protocol::{AgentId, AgentStatus, SpawnRequest};
use agent_tree::testkit::{ScriptedModel, Turn};
use agent_tree::{AGENT_TOOL, Catalog, Tree, parse_agent_file};

/// Under a paused clock this fires only once nothing else can run: a bound, never a race.
async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3600), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish"))
}

fn lead_allowing(lead_allows: &str) -> Catalog {
    let lead = parse_agent_file(
        Path::new(".claude/agents/lead.md"),
        &format!("---\nallowed_subagents: {lead_allows}\n---\nYou lead."),
    )
    .expect("lead.md is valid");
    let reviewer = parse_agent_file(
        Path::new(".claude/agents/reviewer.md"),
        "---\ndescription: Reviews.\n---\nYou review.",
    )
    .expect("reviewer.md is valid");
    catalog([lead, reviewer])
}

/// Runs `lead` (which spawns `requested` in the foreground) to its end; returns the result
/// of its `Agent` call and the tree.
async fn lead_spawns(lead_allows: &str, requested: &str) -> (Tree, ScriptedModel, String, bool) {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [Turn::spawn(requested, "review this"), Turn::answer("done")],
        )
        .script("reviewer", [Turn::answer("looks fine")]);
    let tree = build_tree(lead_allowing(lead_allows), model.clone()).await;
    let outcome = within("lead", run_admitted(&tree, SpawnRequest::new("lead", "go"))).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    let log = model.log_of(AgentId::new(1));
    assert!(
        log[0].tools.iter().any(|t| t == AGENT_TOOL),
        "lead is offered `Agent`: {:?}",
        log[0].tools
    );
    let result = log[1].results.first().expect("the Agent call has a result");
    (tree, model, result.content.clone(), result.is_error)
}

/// An allowlist entry resolves to a catalog type as a requested name does,
/// case-insensitively when unambiguous: the `Agent` tool it offers spawns that type.
#[tokio::test(start_paused = true)]
async fn an_allowlist_entry_in_another_case_permits_the_type() {
    for (allows, requested) in [
        ("[Reviewer]", "reviewer"),
        ("[Reviewer]", "Reviewer"),
        ("REVIEWER", "reviewer"),
        ("[reviewer]", "REVIEWER"),
    ] {
        let (tree, model, result, is_error) = lead_spawns(allows, requested).await;
        assert!(!is_error, "{allows} / {requested}: refused: {result}");
        let snapshot = tree.snapshot();
        let child = snapshot.record(AgentId::new(2)).expect("the child exists");
        assert_eq!(child.agent_type, "reviewer");
        assert_eq!(child.parent, Some(AgentId::new(1)));
        assert_eq!(child.status, AgentStatus::Completed);
        assert_eq!(model.calls_by(AgentId::new(2)), 1);
        within("shutdown", tree.shutdown()).await;
    }
}

/// An allowlist entry that names no catalog type permits nothing: the spawn is refused with
/// "allowed: none" and no child is made.
#[tokio::test(start_paused = true)]
async fn an_entry_naming_no_type_still_permits_none() {
    let (tree, _model, result, is_error) = lead_spawns("[Reviewr]", "reviewer").await;
    assert!(is_error, "{result}");
    assert!(
        result.contains("not allowed here; allowed: none"),
        "{result}"
    );
    assert!(tree.snapshot().record(AgentId::new(2)).is_none());
    within("shutdown", tree.shutdown()).await;
}
