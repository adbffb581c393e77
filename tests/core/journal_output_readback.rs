//! Read outputs released to the journal and read back exactly: with every durability
//! policy, after a recovery cut a torn tail, behind a slow writer with many resumes and
//! reads at once, after the tree and its runtime are gone, and within the retention budget
//! across a resume (docs/semantics.md, "Journal and recovery", "Output retention").

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{FnModel, ScriptedModel, Turn};
use agent_tree::{Durability, JournalConfig, ModelRequest, ModelResponse, read_journal};
use parking_lot::Mutex;

use crate::journal_steps::{LIMIT, bounded, fixed, run_go, step_answer, steps_tree};
use crate::support::harness::lead_and_worker;
use crate::support::journal::{TempDir, crash_copy, journaled_tree, stored_tree};
use crate::support::scripts::reads_its_worker_back;
use crate::support::{catalog, leaf, spawn_admitted};

/// Rule: with `Durability::EveryEntry` too, read outputs are released once the journal has
/// written them (at the latest at `Tree::flush_journal`) and read back exactly, by the
/// application and by an owner's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_durability_releases_and_reads_back() {
    let dir = TempDir::new("journal-every-entry");
    let answer = |i: usize| format!("w{i}:{}", "e".repeat(700));
    let model = ScriptedModel::new()
        .script("lead", reads_its_worker_back("one", "lead done"))
        .script("worker", [Turn::answer(answer(2))]);
    let log = model.call_log();
    let journal = JournalConfig::new(dir.file("j"))
        .durability(Durability::EveryEntry)
        .keep_read_outputs(0);
    let tree = journaled_tree(model, lead_and_worker(), journal).await;
    let outcome = run_go(&tree, "lead").await;
    assert_eq!(outcome.text.as_deref(), Some("lead done"));
    bounded("flush", tree.flush_journal()).await;
    let snapshot = tree.snapshot();
    for id in [1u64, 2] {
        let held = snapshot
            .record(AgentId::new(id))
            .unwrap()
            .outcome
            .clone()
            .unwrap();
        assert!(held.released, "a{id} released: {held:?}");
    }
    let calls = log.of(AgentId::new(1));
    let second = &calls[2].results[0].content;
    assert!(
        second.contains(&answer(2)),
        "the owner's re-read is whole: {second}"
    );
    let back = bounded("read", tree.read_outcome(AgentId::new(2)))
        .await
        .unwrap();
    assert_eq!(back.text, Some(answer(2)));
    bounded("shutdown", tree.shutdown()).await;
}

/// Rule: outputs whose lines the previous process wrote are read back exactly after a
/// recovery that cut a torn tail off the file (the replay's index of outputs), and the new
/// process's own lines (appended after the cut) read back too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_of_the_previous_process_read_back_after_a_torn_tail_was_cut() {
    let dir = TempDir::new("journal-torn");
    let live = dir.file("live");
    let crashed = dir.file("crashed");
    let answer = |n: u64| format!("a{n}:{}", "t".repeat(900));
    fn by_id() -> FnModel {
        FnModel::new(move |request: ModelRequest| {
            let text = format!("{}:{}", request.agent, "t".repeat(900));
            Box::pin(async move { Ok(ModelResponse::text(text)) })
        })
    }
    let build = |path: std::path::PathBuf| async move {
        journaled_tree(
            by_id(),
            catalog([leaf("worker")]),
            JournalConfig::new(path).keep_read_outputs(0),
        )
        .await
    };
    let tree = build(live.clone()).await;
    for _ in 0..3 {
        run_go(&tree, "worker").await;
    }
    // Released, some before the crash, one left read only in memory... all flushed.
    crash_copy(&tree, &live, &crashed).await;
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // A write cut off by the crash.
    let mut bytes = std::fs::read(&crashed).unwrap();
    bytes.extend_from_slice(b"0badc0de {\"entry\":\"event\",\"event\":{\"seq\":");
    std::fs::write(&crashed, &bytes).unwrap();
    let tree = build(crashed.clone()).await;
    for n in 1..=3u64 {
        let back = bounded("read back", tree.read_outcome(AgentId::new(n)))
            .await
            .unwrap();
        assert_eq!(back.text, Some(answer(n)), "a{n} after the cut");
    }
    for _ in 0..2 {
        run_go(&tree, "worker").await;
    }
    bounded("flush", tree.flush_journal()).await;
    for n in 1..=5u64 {
        assert!(
            tree.outcome(AgentId::new(n)).unwrap().released,
            "a{n} released"
        );
        let back = bounded("read back", tree.read_outcome(AgentId::new(n)))
            .await
            .unwrap();
        assert_eq!(back.text, Some(answer(n)), "a{n} in process 2");
    }
    bounded("shutdown", tree.shutdown()).await;
    drop(tree);
    // And the file as process 2 left it recovers whole.
    let replay = read_journal(&crashed, None).unwrap();
    assert_eq!(replay.torn, None);
    assert_eq!(replay.outcomes().filter(|(id, _)| !id.is_root()).count(), 5);
}

/// A store that takes its time for each append: the writer is behind.
#[derive(Clone, Default)]
struct Slow {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl Slow {
    fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(3));
        self.bytes.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn replace(&self, bytes: &[u8]) -> std::io::Result<()> {
        *self.bytes.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.bytes.lock().clone())
    }
}

impl agent_tree::JournalStore for Slow {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        Slow::append(self, bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        *self.bytes.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.bytes.lock().clone())
    }
}

/// Rule: many resumes and reads at once on two worker threads, with a writer that is
/// behind (a slow store, a small queue: backpressure) and compactions: each resumed run
/// continues its own whole conversation, and every read returns the exact output of the
/// run it reads. Twenty iterations, to catch ordering races.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resumes_and_reads_behind_a_slow_writer() {
    for iteration in 0..20 {
        let pad = 200;
        let tree = Arc::new(
            steps_tree(pad)
                .journal_store(
                    JournalConfig::new("memory")
                        .max_queue(4)
                        .keep_read_outputs(0)
                        .rotate_at(16 * 1024),
                    Slow::default(),
                )
                .build()
                .await
                .unwrap(),
        );
        let mut ids = Vec::new();
        for _ in 0..3 {
            let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
            bounded("run 1", handle.outcome()).await;
            ids.push(handle.id());
        }
        let mut tasks = Vec::new();
        for &id in &ids {
            let resumer = tree.clone();
            tasks.push(tokio::spawn(async move {
                let tree = resumer;
                for run in 2..=4 {
                    let mut handle = bounded("resume", tree.resume(id, "more"))
                        .await
                        .unwrap_or_else(|e| panic!("iteration {iteration}: {id} resume: {e}"));
                    let outcome = bounded("resumed", handle.outcome()).await;
                    assert_eq!(
                        outcome.text,
                        Some(step_answer(id.get(), run, pad)),
                        "iteration {iteration}: {id} run {run}"
                    );
                    let back = bounded("read", tree.read_outcome(id)).await.unwrap();
                    assert_eq!(
                        back.text,
                        Some(step_answer(id.get(), run, pad)),
                        "iteration {iteration}: {id} read back after run {run}"
                    );
                }
            }));
            let reader = tree.clone();
            let others = ids.clone();
            tasks.push(tokio::spawn(async move {
                let tree = reader;
                for _ in 0..10 {
                    for &other in &others {
                        if let Some(outcome) = tree.read_outcome(other).await {
                            if let Some(text) = outcome.text {
                                assert!(
                                    text.starts_with(&format!("{other}-run")),
                                    "iteration {iteration}: {other} read {text}"
                                );
                            }
                        }
                    }
                    tokio::task::yield_now().await;
                }
            }));
        }
        for task in tasks {
            bounded("a task", task).await.unwrap();
        }
        bounded("flush", tree.flush_journal()).await;
        for &id in &ids {
            let back = bounded("read", tree.read_outcome(id)).await.unwrap();
            assert_eq!(back.text, Some(step_answer(id.get(), 4, pad)));
        }
        let tree = Arc::try_unwrap(tree).expect("one tree");
        bounded("shutdown", tree.shutdown()).await;
    }
}

/// A slow store in memory that says when the writer thread has let it go (it ends).
#[derive(Clone, Default)]
struct Watched {
    slow: Slow,
    gone: Arc<std::sync::atomic::AtomicBool>,
}

struct WatchedStore(Watched);

impl Drop for WatchedStore {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::SeqCst);
    }
}

impl agent_tree::JournalStore for WatchedStore {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.slow.append(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.slow.replace(bytes)
    }
    fn size(&self) -> u64 {
        self.0.slow.size()
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        self.0.slow.read()
    }
}

/// Rule: the writer's call back onto the tree's runtime (a release waiting for its line)
/// after the tree and its runtime are gone neither panics nor hangs: the writer writes
/// everything it was handed, then ends, and what it wrote replays whole.
#[test]
fn the_writers_call_back_after_the_tree_and_its_runtime_are_gone_is_harmless() {
    let watched = Watched::default();
    let mut spawned = 0;
    {
        let runtime = crate::support::races::runtime_on(2);
        let store = WatchedStore(watched.clone());
        runtime.block_on(async {
            let journal = JournalConfig::new("memory")
                .keep_read_outputs(0)
                .durability(Durability::EveryEntry);
            let tree = stored_tree(
                fixed("x".repeat(5000)),
                catalog([leaf("worker")]),
                journal,
                store,
            )
            .await;
            // Read at settle, while the slow writer is behind: each release waits for its
            // line, and the writer calls back once it is written, after the tree is gone.
            // How far behind it is depends on the machine: workers run until it is.
            let mut behind = false;
            while !behind && spawned < 50 {
                let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
                spawned += 1;
                let _ = handle.outcome().await;
                behind = spawned >= 5 && tree.journal_backlog() > 0;
            }
            assert!(behind, "the writer is behind");
            drop(tree);
        });
        drop(runtime);
    }
    let deadline = std::time::Instant::now() + LIMIT;
    while !watched.gone.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer thread never ended after its tree and runtime were dropped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let bytes = watched.slow.read().unwrap();
    let replay = agent_tree::protocol::replay(&bytes, None).unwrap();
    assert_eq!(replay.torn, None);
    let settled: Vec<_> = replay
        .outcomes()
        .filter(|(id, _)| !id.is_root())
        .map(|(id, outcome)| (id, outcome.status))
        .collect();
    assert_eq!(
        settled.len(),
        spawned,
        "the writer wrote everything it was handed (a panic in its call back would stop \
         it): {settled:?}\n{replay}"
    );
}

/// Rule: "Read outputs stay up to `JournalConfig::keep_read_outputs(bytes)` ...; past
/// either, the oldest read go first". A resumed agent's earlier output is no longer in
/// memory (the `resumed` fold clears its outcome), so it takes none of the budget: two
/// outputs that fit the budget stay, whichever runs they come from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_agents_earlier_output_takes_none_of_the_budget() {
    let dir = TempDir::new("journal-budget");
    let text = "b".repeat(1000);
    let journal = JournalConfig::new(dir.file("j")).keep_read_outputs(2100);
    let tree = journaled_tree(fixed(text.clone()), catalog([leaf("worker")]), journal).await;
    let mut a1 = spawn_admitted(&tree, SpawnRequest::new("worker", "one")).await;
    let mut a2 = spawn_admitted(&tree, SpawnRequest::new("worker", "two")).await;
    bounded("idle", tree.idle()).await;
    // Read a2 first, then a1: both fit (2000 of 2100 bytes).
    assert_eq!(bounded("a2", a2.outcome()).await.text, Some(text.clone()));
    assert_eq!(bounded("a1", a1.outcome()).await.text, Some(text.clone()));
    bounded("flush", tree.flush_journal()).await;
    assert!(
        !tree
            .snapshot()
            .record(a2.id())
            .unwrap()
            .outcome
            .clone()
            .unwrap()
            .released
    );
    // a1 runs again: its first output leaves memory with the resume; its second is read.
    let mut again = bounded("resume", tree.resume(a1.id(), "again"))
        .await
        .unwrap();
    assert_eq!(
        bounded("a1 run 2", again.outcome()).await.text,
        Some(text.clone())
    );
    bounded("flush", tree.flush_journal()).await;
    let snapshot = tree.snapshot();
    let held: usize = snapshot
        .agents()
        .filter_map(|r| r.outcome.as_ref())
        .filter(|o| !o.released)
        .map(|o| o.text.as_ref().map_or(0, String::len))
        .sum();
    let a2_now = snapshot.record(a2.id()).unwrap().outcome.clone().unwrap();
    assert!(
        !a2_now.released,
        "a2 was released with only {held} bytes of read outputs in memory after it (budget \
         2100): the resumed a1's first output is still counted"
    );
    bounded("shutdown", tree.shutdown()).await;
}
