//! Rewind: a journal's events scrubbed through, the tree as it was at any event (the fold
//! up to it), served read-only.

mod support;

use std::path::PathBuf;

use agent_tree_actors::testkit::{ScriptedModel, Turn};
use agent_tree_actors::{Catalog, JournalConfig, Tree};
use agent_tree_inspector::{Inspector, InspectorConfig, Timeline};
use agent_tree_protocol::{AgentDefinition, AgentStatus, SpawnRequest, SubagentAllowance};
use support::{bearer, request};

fn journal_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-tree-rewind-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tree.journal")
}

/// A journal of a lead and its worker, written by a tree that ran them.
async fn journal(name: &str) -> (PathBuf, usize) {
    let path = journal_path(name);
    let model = ScriptedModel::new()
        .script("lead", [Turn::spawn("worker", "dig"), Turn::answer("done")])
        .script("worker", [Turn::answer("dug")]);
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("worker", ""),
    ])
    .unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .journal(JournalConfig::new(&path))
        .build()
        .await
        .unwrap();
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.idle().await;
    tree.shutdown().await;
    let events = tree.snapshot().tally.total() as usize;
    (path, events)
}

/// The tree at event 0 is the root alone; at the end, what the tree ended as; in between,
/// each event's fold: the worker running before it completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_at_an_event_is_the_fold_up_to_it() {
    let (path, events) = journal("fold").await;
    let timeline = Timeline::read(&path).unwrap();
    assert_eq!(timeline.len(), events);
    assert_eq!(timeline.at(0).unwrap().0.len(), 1, "the root alone");
    let (end, tally) = timeline.at(timeline.len()).unwrap();
    assert_eq!(end.len(), 3);
    assert!(end[1..].iter().all(|r| r.status == AgentStatus::Completed));
    assert_eq!(tally.total() as usize, events);
    let running = (0..=timeline.len()).find(|&n| {
        let (records, _) = timeline.at(n).unwrap();
        records.len() == 3 && records[2].status == AgentStatus::Running
    });
    assert!(running.is_some(), "some event shows the worker running");
}

/// A rewind is served read-only: the page scrubs with `/api/rewind/<n>`, there is no live
/// stream and no control route, and the token is required as for a live tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_is_served_read_only() {
    let (path, events) = journal("served").await;
    let inspector = Inspector::rewind(Timeline::read(&path).unwrap(), InspectorConfig::default())
        .await
        .unwrap();
    assert!(inspector.read_only());
    let addr = inspector.addr();
    let (name, token) = bearer(inspector.token());
    let at = request(addr, "GET", "/api/rewind/0", &[(name, &token)], None).await;
    let at: serde_json::Value = serde_json::from_str(&at.body).unwrap();
    assert_eq!(at["whole"]["rows"].as_array().unwrap().len(), 1);
    assert_eq!(at["whole"]["rewind"], events);
    let end = request(
        addr,
        "GET",
        &format!("/api/rewind/{events}"),
        &[(name, &token)],
        None,
    )
    .await;
    let end: serde_json::Value = serde_json::from_str(&end.body).unwrap();
    assert_eq!(end["whole"]["rows"][2]["status"], "completed");
    assert_eq!(end["events"].as_array().unwrap().len(), events.min(200));
    for (method, path) in [
        ("GET", "/api/events"),
        ("POST", "/api/shutdown"),
        ("POST", "/api/agents/a1/abort"),
    ] {
        assert_eq!(
            request(addr, method, path, &[(name, &token)], None)
                .await
                .status,
            404,
            "{path}"
        );
    }
    assert_eq!(
        request(addr, "GET", "/api/rewind/1", &[], None)
            .await
            .status,
        401
    );
}

/// A journal that is not one is refused naming the file and line; a torn last line (a
/// crash mid-write) is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_journal_is_refused_naming_its_line() {
    let (path, events) = journal("bad").await;
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("0000 {\"entry\":\"ev");
    std::fs::write(&path, &text).unwrap();
    assert_eq!(
        Timeline::read(&path).unwrap().len(),
        events,
        "a torn tail is left out"
    );
    text.push_str("\nmore\n");
    std::fs::write(&path, &text).unwrap();
    let error = Timeline::read(&path).unwrap_err().to_string();
    let torn_line = text.lines().count() - 1;
    assert!(
        error.contains(&format!("tree.journal:{torn_line}:")),
        "{error}"
    );
}

/// A crash can tear the last line inside a character (text is written as UTF-8): that
/// torn line is left out like any other, not a reason to refuse the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_line_torn_inside_a_character_is_left_out() {
    let (path, events) = journal("torn-utf8").await;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"0000 {\"entry\":\"event\",\"text\":\"caf\xc3");
    std::fs::write(&path, &bytes).unwrap();
    let timeline = Timeline::read(&path);
    assert!(timeline.is_ok(), "{:?}", timeline.err());
    assert_eq!(timeline.unwrap().len(), events);
}

/// An empty journal (no line, or a header alone) rewinds to the root alone, at any event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_journal_rewinds_to_the_root_alone() {
    let path = journal_path("empty");
    std::fs::write(&path, "").unwrap();
    let timeline = Timeline::read(&path).unwrap();
    assert!(timeline.is_empty());
    assert_eq!(timeline.at(7).unwrap().0.len(), 1);
    let inspector = Inspector::rewind(timeline, InspectorConfig::default())
        .await
        .unwrap();
    let (name, token) = bearer(inspector.token());
    for path in ["/api/snapshot", "/api/rewind/0", "/api/rewind/3"] {
        let at = request(inspector.addr(), "GET", path, &[(name, &token)], None).await;
        assert_eq!(at.status, 200, "{path}: {}", at.body);
        let at: serde_json::Value = serde_json::from_str(&at.body).unwrap();
        assert_eq!(at["at"], 0, "{path}");
        assert_eq!(at["whole"]["rows"].as_array().unwrap().len(), 1, "{path}");
    }
}

/// A rewind past the end is the end; a moment that is no number is a client error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_past_the_end_is_the_end() {
    let (path, events) = journal("past").await;
    let inspector = Inspector::rewind(Timeline::read(&path).unwrap(), InspectorConfig::default())
        .await
        .unwrap();
    let (addr, (name, token)) = (inspector.addr(), bearer(inspector.token()));
    let past = request(addr, "GET", "/api/rewind/999999", &[(name, &token)], None).await;
    let past: serde_json::Value = serde_json::from_str(&past.body).unwrap();
    assert_eq!(past["at"], events);
    assert_eq!(past["whole"]["rows"].as_array().unwrap().len(), 3);
    for path in [
        "/api/rewind/-1",
        "/api/rewind/x",
        "/api/rewind/99999999999999999999999",
    ] {
        let refused = request(addr, "GET", path, &[(name, &token)], None).await;
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
    }
}

/// A compacted journal rewinds from its checkpoint: at its first event the tree is the
/// checkpoint's, at its end the tree the journal's tree ended as, its tally counting
/// every event the tree saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_journal_rewinds_from_its_checkpoint() {
    let path = journal_path("compacted");
    let model = ScriptedModel::new().script("worker", [Turn::answer("dug")]);
    let catalog = Catalog::new([AgentDefinition::new("worker", "")]).unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .journal(JournalConfig::new(&path).rotate_at(2_000))
        .build()
        .await
        .unwrap();
    for _ in 0..20 {
        tree.run(SpawnRequest::new("worker", "dig")).await.unwrap();
    }
    tree.idle().await;
    tree.shutdown().await;
    let snapshot = tree.snapshot();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("checkpoint"), "the journal was compacted");
    let timeline = Timeline::read(&path).unwrap();
    assert!(
        timeline.at(0).unwrap().0.len() > 1,
        "the checkpoint's records"
    );
    let (end, tally) = timeline.at(timeline.len()).unwrap();
    assert_eq!(end.len(), snapshot.records.len());
    for (rewound, live) in end.iter().zip(&snapshot.records) {
        assert_eq!((rewound.id, rewound.status), (live.id, live.status));
    }
    assert_eq!(tally.total(), snapshot.tally.total());
    let inspector = Inspector::rewind(timeline, InspectorConfig::default())
        .await
        .unwrap();
    let (name, token) = bearer(inspector.token());
    let whole = request(
        inspector.addr(),
        "GET",
        "/api/snapshot",
        &[(name, &token)],
        None,
    )
    .await;
    let whole: serde_json::Value = serde_json::from_str(&whole.body).unwrap();
    assert_eq!(
        whole["whole"]["rows"].as_array().unwrap().len(),
        snapshot.records.len()
    );
}
