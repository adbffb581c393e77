//! The snapshot's text rendering (one indented line per agent, depth histogram, event tally,
//! peak of live agents) and its Graphviz DOT export, checked line for line on a small
//! finished tree, plus the rendering of a tree with a live agent and DOT escaping of quotes.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::SessionId;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};

use crate::support::scripts::answers_after_billing;
use crate::support::{build_tree, catalog, delegator, leaf, run_admitted, spawn_admitted, within};

async fn small_tree() -> Tree {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([Call::spawn("worker", "work"), Call::spawn("failer", "fail")])
                    .usage(Usage::tokens(10, 2)),
                Turn::answer("lead done").usage(Usage::tokens(30, 5)),
            ],
        )
        .script(
            "worker",
            answers_after_billing("worked", Usage::tokens(100, 20), Duration::from_millis(40)),
        )
        .script("failer", [Turn::fail("no luck")])
        .script("hanger", [Turn::hang()]);
    Tree::builder()
        .catalog(catalog([
            delegator("lead", &["worker", "failer"]),
            leaf("worker"),
            leaf("failer"),
            leaf("hanger"),
        ]))
        .model(model)
        .session(SessionId::new("s-render"))
        .build()
        .await
        .expect("tree builds")
}

/// A finished tree's snapshot renders, line for line, as one indented line per agent with
/// its own and subtree usage, the depth histogram, the event tally and the peak of live
/// agents, and exports as Graphviz DOT.
#[tokio::test(start_paused = true)]
async fn text_rendering_and_dot_export_of_a_small_tree() {
    let tree = small_tree().await;
    let outcome = within("lead", run_admitted(&tree, SpawnRequest::new("lead", "go"))).await;
    assert!(outcome.is_completed());
    within("idle", tree.idle()).await;
    let snapshot = tree.snapshot();

    let expected_text = "\
tree agents=3 live=0 usage=0/167
- [d1] lead #a1 parent=a0 status=completed usage=47/167
  - [d2] worker #a2 parent=a1 status=completed usage=120/120
  - [d2] failer #a3 parent=a1 status=failed usage=0/0
depth histogram: d1=1 d2=2
event tally: started=3 completed=2 failed=1 aborted=0 killed=0 restarted=0 queued=0 \
resumed=0 usage_reported=3 steered=0 asked=0 context_dropped=0 spawned=3 dequeued=0 completing=0 retrying=0 text_delta=0 released=0
max concurrent agents: 3
";
    assert_eq!(snapshot.render_text(), expected_text);
    assert_eq!(snapshot.to_string(), expected_text);
    assert_eq!(snapshot.depth_histogram_line(), "d1=1 d2=2");

    let expected_dot = r#"digraph agent_tree {
  node [shape=box];
  a0 [label="root a0\nrunning d0\nown=0 subtree=167"];
  a1 [label="lead a1\ncompleted d1\nown=47 subtree=167"];
  a2 [label="worker a2\ncompleted d2\nown=120 subtree=120"];
  a3 [label="failer a3\nfailed d2\nown=0 subtree=0"];
  a0 -> a1;
  a1 -> a2;
  a1 -> a3;
}
"#;
    assert_eq!(snapshot.to_dot(), expected_dot);

    // Edges are exactly the children lists.
    let dot = snapshot.to_dot();
    let edges: Vec<&str> = dot.lines().filter(|l| l.contains("->")).collect();
    let children: usize = snapshot.records.iter().map(|r| r.children.len()).sum();
    assert_eq!(edges.len(), children);
    for r in &snapshot.records {
        for child in &r.children {
            assert!(edges.contains(&format!("  {} -> {};", r.id, child).as_str()));
        }
    }

    within("shutdown", tree.shutdown()).await;
}

/// The rendering of a tree with a live agent shows it `running`, in the text and in the DOT
/// export.
#[tokio::test(start_paused = true)]
async fn rendering_shows_live_agents() {
    let tree = small_tree().await;
    let hanger = spawn_admitted(&tree, SpawnRequest::new("hanger", "wait")).await;
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "tree agents=1 live=1 usage=0/0", "{text}");
    assert_eq!(
        lines[1],
        format!(
            "- [d1] hanger #{} parent=a0 status=running usage=0/0",
            hanger.id()
        )
    );
    assert_eq!(lines[2], "depth histogram: d1=1");
    assert!(
        lines[3].starts_with("event tally: started=1 completed=0"),
        "{text}"
    );
    assert_eq!(lines[4], "max concurrent agents: 1");
    assert!(snapshot.to_dot().contains("hanger a1\\nrunning d1"));
    within("shutdown", tree.shutdown()).await;
}

/// The DOT export escapes quotes in agent type names.
#[tokio::test(start_paused = true)]
async fn dot_escapes_quotes_in_type_names() {
    let tree = build_tree(
        catalog([leaf("say \"hi\"")]),
        ScriptedModel::new().script("say \"hi\"", Script::new([Turn::answer("hi")])),
    )
    .await;
    within(
        "agent",
        run_admitted(&tree, SpawnRequest::new("say \"hi\"", "go")),
    )
    .await;
    let dot = tree.snapshot().to_dot();
    let line = dot
        .lines()
        .find(|l| l.starts_with("  a1 ["))
        .expect("a node line for a1");
    assert_eq!(
        line,
        r#"  a1 [label="say \"hi\" a1\ncompleted d1\nown=0 subtree=0"];"#
    );
    within("shutdown", tree.shutdown()).await;
}
