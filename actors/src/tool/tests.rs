//! A tool's progress reports (events of the calling agent while its run is on), and tool
//! sources: their tools offered, what serves them ended with the tree.

use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, EventKind, SpawnRequest};

use crate::testkit::{Call, Script, ScriptedModel, Turn};
use crate::{Catalog, FnTool, ToolContext, Tree};

/// A tool's `report_progress` is a `tool_progress` event of the calling agent, naming the
/// call and the tool; non-finite values are dropped, and a report after the run ended is
/// dropped too (nothing of an agent follows its terminal event).
#[tokio::test(start_paused = true)]
async fn a_tools_progress_reports_are_events_of_the_calling_run() {
    let kept: Arc<parking_lot::Mutex<Option<ToolContext>>> = Arc::default();
    let keep = Arc::clone(&kept);
    let tool = FnTool::new("copy", "copies", move |ctx: ToolContext, _input| {
        let keep = Arc::clone(&keep);
        async move {
            ctx.report_progress(1.0, Some(4.0), Some("started".into()));
            ctx.report_progress(f64::NAN, None, None);
            ctx.report_progress(2.5, None, None);
            *keep.lock() = Some(ctx);
            Ok("copied".to_owned())
        }
    });
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::calls([Call::tool("copy", serde_json::json!({}))]),
            Turn::answer("done"),
        ]),
    );
    let tree = Tree::builder()
        .catalog(Catalog::new([AgentDefinition::new("w", "")]).unwrap())
        .model(model)
        .tool(tool)
        .unwrap()
        .build()
        .await
        .unwrap();
    let mut events = tree.subscribe();
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let late = kept.lock().take().expect("the tool ran");
    late.report_progress(3.0, Some(4.0), None);
    let mut ended = false;
    let mut progress = Vec::new();
    for event in events.drain() {
        ended |= event.kind.terminal_status().is_some() && event.agent.get() == 1;
        if let EventKind::ToolProgress {
            call_id,
            tool,
            progress: p,
            total,
            message,
        } = event.kind
        {
            assert!(!ended, "a report after the terminal event");
            assert_eq!((event.agent.get(), tool.as_str()), (1, "copy"));
            assert_eq!(call_id, late.call_id);
            progress.push((p.to_string(), total.map(|t| t.to_string()), message));
        }
    }
    assert_eq!(
        progress,
        [
            (
                "1".to_owned(),
                Some("4".to_owned()),
                Some("started".to_owned())
            ),
            ("2.5".to_owned(), None, None),
        ]
    );
    tree.shutdown().await;
}

/// On worker threads, a tool reporting progress as fast as it can while its agent is
/// killed: no `tool_progress` event of the agent follows its terminal event, whichever
/// thread gets there first. Forty rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_progress_report_follows_a_kill_on_worker_threads() {
    for round in 0..40 {
        let tool = FnTool::new(
            "spin",
            "reports forever",
            |ctx: ToolContext, _input| async move {
                for step in 0u32.. {
                    ctx.report_progress(f64::from(step), None, None);
                    tokio::task::yield_now().await;
                }
                Ok("never".to_owned())
            },
        );
        let model = ScriptedModel::new().script(
            "w",
            Script::new([Turn::calls([Call::tool("spin", serde_json::json!({}))])]),
        );
        let tree = Tree::builder()
            .catalog(Catalog::new([AgentDefinition::new("w", "")]).unwrap())
            .model(model)
            .tool(tool)
            .unwrap()
            .build()
            .await
            .unwrap();
        let mut events = tree.subscribe();
        let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
        let id = handle.id();
        // Killed once the tool has reported at least once.
        loop {
            let event = tokio::time::timeout(std::time::Duration::from_secs(30), events.next())
                .await
                .expect("the tool reports")
                .expect("the stream is open");
            if matches!(event.kind, EventKind::ToolProgress { .. }) {
                break;
            }
        }
        tree.kill(id).unwrap();
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), handle.outcome())
            .await
            .expect("the kill settles the agent");
        assert!(outcome.status.is_terminal(), "round {round}: {outcome:?}");
        tree.shutdown().await;
        let mut ended = false;
        for event in events.drain().into_iter().filter(|e| e.agent == id) {
            assert!(
                !(ended && matches!(event.kind, EventKind::ToolProgress { .. })),
                "round {round}: a progress report after the terminal event"
            );
            ended |= event.kind.terminal_status().is_some();
        }
        assert!(
            ended,
            "round {round}: the agent's terminal event was streamed"
        );
    }
}

/// A tool source that records what the tree asks of it.
#[derive(Default)]
struct Recorder {
    name: &'static str,
    asked: parking_lot::Mutex<Vec<String>>,
}

impl crate::ToolSource for Recorder {
    fn tools(&self) -> Vec<Arc<dyn crate::Tool>> {
        let tool = FnTool::new(self.name, "served", |_ctx, _input| async {
            Ok("served".to_owned())
        });
        vec![Arc::new(tool)]
    }

    fn shutdown(&self, deadline: tokio::time::Instant) -> crate::BoxFuture<'_, ()> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.asked.lock().push(format!("shutdown within {left:?}"));
        Box::pin(async {})
    }

    fn kill(&self) {
        self.asked.lock().push("kill".to_owned());
    }
}

/// A source's tools are offered like user tools; the tree's shutdown ends the source under
/// its one deadline (the config's grace), and dropping a tree that was not shut down kills
/// it.
#[tokio::test(start_paused = true)]
async fn a_tool_source_is_offered_and_ended_with_the_tree() {
    let source = Arc::new(Recorder {
        name: "served_tool",
        ..Recorder::default()
    });
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::calls([Call::tool("served_tool", serde_json::json!({}))]),
            Turn::answer("done"),
        ]),
    );
    let build = || {
        Tree::builder()
            .catalog(Catalog::new([AgentDefinition::new("w", "")]).unwrap())
            .model(model.clone())
            .tool_source(source.clone())
            .unwrap()
    };
    let tree = build().build().await.unwrap();
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let answered = model.log()[1].answered_calls();
    assert_eq!(answered[0].1.content, "served");
    tree.shutdown().await;
    assert_eq!(*source.asked.lock(), ["shutdown within 3s"]);
    drop(tree);
    assert_eq!(
        source.asked.lock().len(),
        1,
        "a tree shut down has nothing to kill"
    );
    let dropped = build().build().await.unwrap();
    drop(dropped);
    assert_eq!(source.asked.lock().last().map(String::as_str), Some("kill"));
}

/// A source whose tool takes an orchestration tool's name is refused, and killed: nothing
/// it started outlives the refusal.
#[test]
fn a_tool_source_cannot_take_a_reserved_name() {
    let source = Arc::new(Recorder {
        name: crate::AGENT_TOOL,
        ..Recorder::default()
    });
    let refused = Tree::builder().tool_source(source.clone());
    assert!(refused.is_err());
    assert_eq!(*source.asked.lock(), ["kill"]);
}
