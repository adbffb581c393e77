//! The journal as a tree writes it: every event, the requests and conversations recovery
//! needs, read back by the same fold as the registry's; the durability policies' syncs; a
//! slow disk holding new work back instead of losing entries; a failing disk; compaction.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{MemoryJournal, ScriptedModel, Turn};
use agent_tree::{Durability, FileJournal, JournalConfig, read_journal};

use crate::support::harness::lead_and_worker;
use crate::support::journal::{
    TempDir, answering_twice, assert_resumed_on_its_whole_conversation, journaled_tree,
    open_journal, records_now, stored_tree,
};
use crate::support::{catalog, leaf, run_admitted, spawn_admitted};

fn team() -> (ScriptedModel, Catalog) {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn("worker", "part one").usage(Usage::tokens(5, 1)),
                Turn::spawn("worker", "part two"),
                Turn::answer("both parts done").usage(Usage::tokens(2, 2)),
            ],
        )
        .script(
            "worker",
            [Turn::answer("part done").usage(Usage::tokens(3, 1))],
        );
    (model, lead_and_worker())
}

/// The journal's fold is the tree's own records; it holds each agent's request and
/// definition (each definition once) and each conversation, written a turn's addition at a
/// time, not whole again at every turn.
#[tokio::test(start_paused = true)]
async fn the_journal_folds_to_the_trees_own_records() {
    let dir = TempDir::new("fold");
    let path = dir.file("tree.journal");
    let (model, catalog) = team();
    let journal = JournalConfig::new(&path).durability(Durability::EveryEntry);
    let tree = journaled_tree(model, catalog, journal).await;
    let outcome = run_admitted(&tree, SpawnRequest::new("lead", "build it")).await;
    assert_eq!(outcome.text.as_deref(), Some("both parts done"));
    tree.shutdown().await;
    let snapshot = tree.snapshot();

    let replay = read_journal(&path, Some(tree.session())).unwrap();
    let records: Vec<_> = snapshot.records.iter().map(|r| (**r).clone()).collect();
    assert_eq!(
        replay.records, records,
        "the journal's fold is the tree's records"
    );
    assert_eq!(replay.torn, None);
    assert_eq!(replay.records[0].subtree, Usage::tokens(13, 5));
    // Each agent's request and definition, and the lead's conversation to its last turn.
    assert_eq!(replay.spawns.len(), 3);
    let (hash, request) = &replay.spawns[&AgentId::new(2)];
    assert_eq!(request.prompt, "part one");
    assert_eq!(replay.definitions[hash].name, "worker");
    assert_eq!(replay.definitions.len(), 2, "each definition once");
    // Settled agents' conversations stay in the journal: each is read back by its lines.
    assert!(replay.conversations.is_empty());
    let mut file = std::fs::File::open(&path).unwrap();
    let (run, messages) = replay
        .read_conversation(&mut file, AgentId::new(1))
        .unwrap()
        .expect("the lead's conversation is journaled");
    assert_eq!(run, 1);
    assert_eq!(messages[0].content, "build it");
    assert!(messages.iter().any(|m| m.content.contains("part done")));
    // Each turn journals what it added, not the whole conversation again: the task is
    // written in the request, at the first boundary and in the run's final conversation.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("\"build it\"").count(), 3, "{text}");
    assert_eq!(tree.journal_error(), None);
}

async fn run_team_on(store: MemoryJournal, config: JournalConfig) -> Tree {
    let (model, catalog) = team();
    let tree = stored_tree(model, catalog, config, store).await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.shutdown().await;
    tree
}

/// Each durability policy syncs as it says: `EveryEntry` once per entry, `Group` once per
/// batch of entries, `None` only for the header and the shutdown's flush; all of them
/// journal the same records.
#[tokio::test(start_paused = true)]
async fn each_policy_syncs_as_it_says() {
    let every = MemoryJournal::new();
    run_team_on(
        every.clone(),
        JournalConfig::new("every").durability(Durability::EveryEntry),
    )
    .await;
    let lines = every.lines();
    assert!(lines > 20, "{lines} lines");
    // The header, then one sync per entry.
    assert_eq!(every.syncs(), lines);

    let group = MemoryJournal::new();
    let policy = Durability::Group {
        max_entries: 10,
        max_delay: Duration::from_secs(3600),
    };
    run_team_on(
        group.clone(),
        JournalConfig::new("group").durability(policy),
    )
    .await;
    let syncs = group.syncs();
    assert!(
        syncs >= 2 && syncs <= group.lines() / 10 + 2,
        "{syncs} syncs of {} lines",
        group.lines()
    );

    let none = MemoryJournal::new();
    run_team_on(
        none.clone(),
        JournalConfig::new("none").durability(Durability::None),
    )
    .await;
    // The header's, and the shutdown's flush.
    assert_eq!(none.syncs(), 2);
    assert_eq!(none.replay().records, every.replay().records);
}

/// A disk slower than the tree holds new admissions back once the writer's backlog reaches
/// its bound, and loses no entry: when the disk answers again everything is written.
#[tokio::test(start_paused = true)]
async fn a_slow_disk_holds_new_work_back_and_loses_nothing() {
    let store = MemoryJournal::new();
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let journal = JournalConfig::new("slow").max_queue(8);
    let tree = stored_tree(model, catalog([leaf("w")]), journal, store.clone()).await;
    // The header is written; from now on the disk does not answer.
    store.hold();
    // The writer is stuck: spawn until a spawn waits for it (a whole virtual hour passes
    // without it being admitted), which must happen once the backlog reaches the bound.
    let mut handles = Vec::new();
    loop {
        let spawn = tree.spawn(SpawnRequest::new("w", format!("task {}", handles.len())));
        match tokio::time::timeout(Duration::from_secs(3600), spawn).await {
            Ok(handle) => handles.push(handle.unwrap()),
            Err(_) => break,
        }
        assert!(handles.len() < 8, "never held back");
    }
    assert!(tree.journal_backlog() >= 8, "{}", tree.journal_backlog());
    store.release();
    let late = tree.spawn(SpawnRequest::new("w", "late")).await.unwrap();
    handles.push(late);
    for handle in &mut handles {
        assert!(handle.outcome().await.is_completed());
    }
    tree.shutdown().await;
    assert_eq!(tree.journal_backlog(), 0);
    assert_eq!(
        store.replay().records,
        records_now(&tree),
        "nothing was lost"
    );
}

/// A flush that the writer answers in the middle of a batch counts what it wrote out of the
/// backlog before it answers, not at the batch's end (which may wait on the disk for the
/// entries after the flush): once the flush returns, the backlog is exactly what is still
/// unwritten, and a tree just shut down has none.
#[tokio::test(start_paused = true)]
async fn a_flush_takes_what_it_wrote_out_of_the_backlog_before_it_returns() {
    let store = MemoryJournal::new();
    let model = ScriptedModel::new().script("w", [Turn::hang(), Turn::hang(), Turn::hang()]);
    let journal = JournalConfig::new("mid-batch");
    let tree = stored_tree(model, catalog([leaf("w")]), journal, store.clone()).await;
    // The writer is stuck in an append of the first agent's entries.
    store.hold();
    let _a = tree.spawn(SpawnRequest::new("w", "a")).await.unwrap();
    let blocked = store.clone();
    tokio::task::spawn_blocking(move || blocked.wait_until_held())
        .await
        .unwrap();
    // Entries queue, a flush is asked for, and more entries queue behind it: the writer
    // takes them all in one batch once the disk answers.
    let _c = tree.spawn(SpawnRequest::new("w", "c")).await.unwrap();
    let flush = tree.flush_journal();
    tokio::pin!(flush);
    tokio::select! {
        biased;
        () = &mut flush => panic!("the flush returned while the disk was held"),
        () = std::future::ready(()) => {}
    }
    let _b = tree.spawn(SpawnRequest::new("w", "b")).await.unwrap();
    for _ in 0..8 {
        // The second agent's first turn starts (and hangs), journaling its conversation.
        tokio::task::yield_now().await;
    }
    // The disk answers, and holds again right after the flush's sync: the entries after the
    // flush stay unwritten.
    store.hold_after_next_sync();
    store.release();
    flush.await;
    let (written, backlog) = (store.lines(), tree.journal_backlog());
    store.release();
    tree.flush_journal().await;
    assert!(backlog > 0, "nothing queued after the flush");
    assert_eq!(
        backlog,
        store.lines() - written,
        "the backlog after the flush is exactly what it had not written"
    );
    tree.shutdown().await;
    assert_eq!(tree.journal_backlog(), 0);
}

/// A disk that cannot take the header fails the build; one that fails later stops the
/// journal, with its error kept in `journal_error`, while the tree goes on.
#[tokio::test(start_paused = true)]
async fn a_failing_disk_stops_the_journal_not_the_tree() {
    // A disk that fails at once fails the build (the header cannot be written).
    let store = MemoryJournal::new();
    store.fail_writes();
    let (model, catalog) = team();
    let error = Tree::builder()
        .catalog(catalog.clone())
        .model(model.clone())
        .journal_store(JournalConfig::new("full"), store)
        .build()
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "journal full: cannot write the header: disk full"
    );
    // One that fails later stops the journal, and the tree goes on.
    let store = MemoryJournal::new();
    let tree = stored_tree(model, catalog, JournalConfig::new("full"), store.clone()).await;
    store.fail_writes();
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.shutdown().await;
    let error = tree.journal_error().expect("the writer stopped");
    assert!(error.contains("disk full"), "{error}");
    assert_eq!(tree.snapshot().agents().count(), 3);
}

/// A journal past `rotate_at` is compacted to a checkpoint whose fold is the same records,
/// with every agent's request kept.
#[tokio::test(start_paused = true)]
async fn rotation_compacts_to_a_checkpoint_that_folds_the_same() {
    let dir = TempDir::new("rotate");
    let path = dir.file("tree.journal");
    let model = ScriptedModel::new().script("w", [Turn::answer("ok").usage(Usage::tokens(1, 1))]);
    let journal = JournalConfig::new(&path).rotate_at(4096);
    let tree = journaled_tree(model, catalog([leaf("w")]), journal).await;
    for i in 0..40 {
        run_admitted(&tree, SpawnRequest::new("w", format!("task {i}"))).await;
    }
    tree.shutdown().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"entry\":\"checkpoint\""), "compacted");
    let events = text.matches("\"entry\":\"event\"").count();
    assert!(events < 40 * 4, "{events} events left after compaction");
    let replay = read_journal(&path, None).unwrap();
    assert_eq!(replay.records, records_now(&tree));
    assert_eq!(replay.spawns.len(), 40);
}

/// A tree built on an existing journal recovers from it, one on a header-only journal takes
/// over its session, and a path that cannot be opened is refused naming the file.
#[tokio::test(start_paused = true)]
async fn an_existing_journal_is_taken_over_and_a_bad_path_refused_naming_the_file() {
    let dir = TempDir::new("existing");
    let path = dir.file("tree.journal");
    let (model, catalog) = team();
    let tree = journaled_tree(model.clone(), catalog.clone(), JournalConfig::new(&path)).await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.shutdown().await;
    drop(tree);
    // Opened again, it is recovered from (tests/core/journal_recovery.rs has the rest).
    let again = journaled_tree(model.clone(), catalog.clone(), JournalConfig::new(&path)).await;
    assert_eq!(again.snapshot().agents().count(), 3);
    drop(again);

    // A header-only journal is taken over, with its session.
    let fresh = dir.file("fresh.journal");
    std::fs::write(
        &fresh,
        agent_tree::protocol::JournalEntry::Header {
            version: agent_tree::protocol::JOURNAL_VERSION,
            session: agent_tree::protocol::SessionId::new("kept"),
        }
        .to_line(),
    )
    .unwrap();
    let tree = journaled_tree(model.clone(), catalog.clone(), JournalConfig::new(&fresh)).await;
    assert_eq!(tree.session().to_string(), "kept");
    drop(tree);

    let missing = dir.file("no/such/dir/tree.journal");
    let error = open_journal(model, catalog, &missing).await.unwrap_err();
    assert!(
        error.contains("no/such/dir/tree.journal") && error.contains("cannot open"),
        "{error}"
    );
    // The file journal itself, directly.
    assert!(FileJournal::open(&missing).is_err());
}

/// Part of bounded memory: with `retain_conversations(false)`, a settled agent's
/// conversation is dropped from memory and read back from the journal when it is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_reads_a_dropped_conversation_back_from_the_journal() {
    let dir = TempDir::new("retention");
    let path = dir.file("tree.journal");
    let model = answering_twice();
    let log = model.call_log();
    let journal = JournalConfig::new(&path).retain_conversations(false);
    let tree = journaled_tree(model, catalog([leaf("w")]), journal).await;
    let first = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(first.text.as_deref(), Some("first answer"));
    assert_resumed_on_its_whole_conversation(&tree, &log).await;
    tree.shutdown().await;
}

/// The journal is handed every event before any subscriber or waiter can see it, so a
/// flush asked for after the application saw an event makes that event durable. Here the
/// application flushes at each `completed` it reads and checks the store holds it; more
/// subscribers after its own widen the window in which it could have seen an event the
/// journal was not handed yet. On worker threads, many times.
#[test]
fn a_flush_after_an_event_was_seen_makes_that_event_durable() {
    use crate::support::journal::Recorded;
    use crate::support::races::{REAL_GUARD, bounded, on_worker_threads};
    const AGENTS: usize = 40;
    on_worker_threads(30, Duration::from_secs(60), || async {
        let store = Recorded::default();
        let model = ScriptedModel::new().script("w", [Turn::answer("done")]);
        let tree = Tree::builder()
            .config(TreeConfig::default().with_max_total_agents(AGENTS))
            .catalog(catalog([leaf("w")]))
            .model(model)
            .journal_store(
                JournalConfig::new("seen").durability(Durability::None),
                store.clone(),
            )
            .build()
            .await
            .unwrap();
        let mut events = tree.subscribe();
        let _others: Vec<_> = (0..256).map(|_| tree.subscribe()).collect();
        for i in 0..AGENTS {
            spawn_admitted(&tree, SpawnRequest::new("w", format!("task {i}"))).await;
        }
        let mut completed = 0;
        while completed < AGENTS {
            // Polled without parking, so the event is seen the moment it is sent.
            let event = bounded(REAL_GUARD, "the next event", async {
                loop {
                    match events.try_next() {
                        Some(event) => break event,
                        None => tokio::task::yield_now().await,
                    }
                }
            })
            .await;
            if event.kind.terminal_status() != Some(AgentStatus::Completed) {
                continue;
            }
            completed += 1;
            tree.flush_journal().await;
            assert!(
                store.synced(event.seq),
                "event {} ({} completed) was seen and flushed, and the flush did not sync it",
                event.seq,
                event.agent
            );
        }
        tree.shutdown().await;
    });
}

/// With `Durability::EveryEntry`, an outcome is synced to the store before `Tree::run`,
/// `AgentHandle::outcome` or `Tree::wait` returns it (a store whose syncs take a while
/// keeps the writer behind the tree). On worker threads, many times.
#[test]
fn every_entry_syncs_an_outcome_before_it_is_returned() {
    use crate::support::journal::Recorded;
    use crate::support::races::on_worker_threads;
    on_worker_threads(10, Duration::from_secs(60), || async {
        let store = Recorded::syncing_in(Duration::from_micros(300));
        let model = ScriptedModel::new().script("w", [Turn::answer("done")]);
        let journal = JournalConfig::new("every").durability(Durability::EveryEntry);
        let tree = stored_tree(model, catalog([leaf("w")]), journal, store.clone()).await;
        let mut handle = tree.spawn(SpawnRequest::new("w", "a")).await.unwrap();
        assert!(handle.outcome().await.is_completed());
        assert!(
            store.settle_synced(handle.id()),
            "a handle returned an outcome not synced"
        );
        let outcome = tree.run(SpawnRequest::new("w", "b")).await.unwrap();
        assert!(outcome.is_completed());
        assert!(
            store.settle_synced(AgentId::new(2)),
            "run returned an outcome not synced"
        );
        let a = tree.spawn(SpawnRequest::new("w", "c")).await.unwrap().id();
        let b = tree.spawn(SpawnRequest::new("w", "d")).await.unwrap().id();
        let outcomes = tree.wait(&[a, b], WaitPolicy::AllSettled).await;
        assert!(outcomes.iter().all(Outcome::is_completed));
        for agent in [a, b] {
            assert!(
                store.settle_synced(agent),
                "a wait returned {agent}'s outcome not synced"
            );
        }
        tree.shutdown().await;
    });
}

/// One tree per journal file: a second tree on a journal a tree has open is refused, with
/// an error naming the file and the process holding it; once the first tree has shut down,
/// or been dropped, a new one opens it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_in_use_is_refused_naming_the_file_and_its_holder() {
    let dir = TempDir::new("in-use");
    let path = dir.file("tree.journal");
    let (model, catalog) = team();
    let open = || {
        Tree::builder()
            .catalog(catalog.clone())
            .model(model.clone())
            .journal(JournalConfig::new(&path))
            .build()
    };
    let first = open().await.unwrap();
    first.run(SpawnRequest::new("lead", "go")).await.unwrap();
    let error = open().await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&path.display().to_string())
            && text.contains(&format!("process {}", std::process::id())),
        "{text}"
    );
    assert!(
        matches!(&error, agent_tree::TreeError::JournalInUse(in_use)
            if in_use.path == path && in_use.holder == Some(std::process::id())),
        "{error:?}"
    );
    // Refused before anything was read or written: the first tree's journal goes on.
    first.run(SpawnRequest::new("lead", "again")).await.unwrap();
    first.shutdown().await;
    let second = open()
        .await
        .expect("opens once the first tree has shut down");
    assert_eq!(second.snapshot().agents().count(), 6);
    second.run(SpawnRequest::new("lead", "more")).await.unwrap();
    drop(second);
    let third = open()
        .await
        .expect("opens once the second tree was dropped");
    assert_eq!(third.snapshot().agents().count(), 9);
    third.shutdown().await;
    // The first tree still reads what it holds after its shutdown.
    assert!(first.read_outcome(AgentId::new(1)).await.is_some());
}
