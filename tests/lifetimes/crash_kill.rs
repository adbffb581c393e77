//! Crashes for real: a child process (this test binary, running an ignored child test)
//! writes a journal and is killed with SIGKILL; this process recovers from what it left.
//!
//! The storage-engine test: 50 trials, each killed at a seeded moment, then recovered,
//! resumed to completion and checked: no part spawned twice, no outcome reported before the
//! kill lost, no journal refused, every question open at the kill put again and answered
//! once, every agent killed before its first turn resumed with its task (the scenario is
//! the `crash_recovery` example's). Then
//! crashes at one chosen moment (the child says `ready` when it has come, and is killed
//! there): what each kind of journaled work comes back as.

#[path = "../../examples/crash_recovery/scenario.rs"]
mod scenario;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{CallLog, ScriptedModel, Turn};
use agent_tree::{Durability, JournalConfig, TreeConfig};

use crate::support::journal::TempDir;
use crate::support::lifetimes::spawned;
use crate::support::{catalog, leaf, spawn_admitted, user_texts};

const JOURNAL: &str = "AGENT_TREE_CRASH_JOURNAL";
const SEED: &str = "AGENT_TREE_CRASH_SEED";
const MOMENT: &str = "AGENT_TREE_CRASH_MOMENT";

/// The child's side: runs only when the parent test starts this binary for it.
#[test]
#[ignore = "the child process of fifty_kills_recover_without_duplicates_or_losses"]
fn crash_child() {
    let (Ok(journal), Ok(seed)) = (std::env::var(JOURNAL), std::env::var(SEED)) else {
        return;
    };
    crate::support::races::runtime_on(2)
        .block_on(scenario::run_child(journal.as_ref(), seed.parse().unwrap()));
}

#[test]
fn fifty_kills_recover_without_duplicates_or_losses() {
    let dir = std::env::temp_dir().join(format!("agent-tree-crash-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut mid_work, mut released) = (0, 0);
    for n in 0..50u32 {
        let seed = 0xc0ffee + u64::from(n);
        let kill_after = Duration::from_millis(5 + (seed.wrapping_mul(2_654_435_761) >> 9) % 150);
        let found = kill_and_recover(&dir, n, seed, kill_after);
        mid_work += usize::from(found.interrupted > 0);
        released += found.released;
    }
    // A loaded machine starts the child slowly: its outputs may all come after the seeded
    // kills. Later kills, checked the same way, until one finds an output released.
    let mut n = 50;
    while released == 0 && n < 70 {
        let kill_after = Duration::from_millis(200 + 100 * u64::from(n - 50));
        let found = kill_and_recover(&dir, n, 0xc0ffee + u64::from(n), kill_after);
        mid_work += usize::from(found.interrupted > 0);
        released += found.released;
        n += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The kills must have cut into work somewhere, or this tested nothing.
    assert!(mid_work > 0, "no kill came while agents were live");
    // And released outputs must have been read back from the journal somewhere.
    assert!(released > 0, "no trial recovered a released output");
}

/// One trial: this binary's child runs the scenario on a journal of its own in `dir`, is
/// killed `kill_after` after it starts, and is recovered: nothing duplicated, lost or
/// refused, every question and task kept.
fn kill_and_recover(dir: &Path, n: u32, seed: u64, kill_after: Duration) -> scenario::Found {
    let journal = scenario::journal_path(dir, n);
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--ignored",
            "--exact",
            "crash_kill::crash_child",
            "--nocapture",
        ])
        .env(JOURNAL, &journal)
        .env(SEED, seed.to_string());
    let found = scenario::trial(child, &journal, seed, kill_after);
    assert_eq!(
        (found.duplicates, found.lost_results, found.corrupt),
        (0, 0, 0),
        "trial {n} (seed {seed}, killed after {kill_after:?})"
    );
    assert_eq!(
        (found.questions_kept, found.tasks_kept),
        (found.questions, found.tasks),
        "trial {n}: questions and tasks kept (seed {seed}, killed after {kill_after:?})"
    );
    found
}

/// The child's side of the crashes at one moment: runs only when a parent test starts this
/// binary for it. It brings its tree to the moment `AGENT_TREE_CRASH_MOMENT` names, prints
/// `ready`, and waits for the kill.
#[test]
#[ignore = "the child process of the tests that kill a tree at one moment"]
fn crash_at_moment_child() {
    let (Ok(journal), Ok(moment)) = (std::env::var(JOURNAL), std::env::var(MOMENT)) else {
        return;
    };
    crate::support::races::runtime_on(2).block_on(async move {
        let path = Path::new(&journal);
        // Kept alive until the kill.
        let _tree = match moment.as_str() {
            "admitted" => admitted(path).await,
            "steered" => steered(path).await,
            "asking" => asking(path, false).await,
            "answered" => asking(path, true).await,
            other => panic!("no moment {other}"),
        };
        println!("ready");
        std::future::pending::<()>().await;
    });
}

/// This binary's child process, brought to a moment.
struct AtMoment {
    child: std::process::Child,
    moment: String,
}

impl AtMoment {
    /// Starts this binary's child for `moment` on `journal` and waits until it is there.
    fn start(moment: &str, journal: &Path) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "crash_kill::crash_at_moment_child",
                "--nocapture",
            ])
            .env(JOURNAL, journal)
            .env(MOMENT, moment)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let ready = stdout
            .lines()
            .map_while(Result::ok)
            .any(|line| line == "ready");
        let at = AtMoment {
            child,
            moment: moment.to_owned(),
        };
        if !ready {
            at.kill_and_fail();
        }
        at
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL: no destructor, no flush, no shutdown.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn kill_and_fail(mut self) -> ! {
        let _ = self.child.kill();
        let output = self.child.wait_with_output().unwrap();
        panic!(
            "the child never got to {}:\n{}",
            self.moment,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Starts this binary's child for `moment` on `journal`, waits until it is there, and kills
/// it with SIGKILL.
fn kill_at(moment: &str, journal: &Path) {
    AtMoment::start(moment, journal).kill();
}

fn writer_catalog() -> Catalog {
    catalog([leaf("writer")])
}

/// A journal in a fresh directory `dir`, left by a process killed at `moment`, and a
/// model whose writer answers `answer`, with its call log.
fn killed_at(dir: &str, moment: &str, answer: &str) -> (TempDir, PathBuf, ScriptedModel, CallLog) {
    let dir = TempDir::new(dir);
    let journal = dir.file("tree.journal");
    kill_at(moment, &journal);
    let model = ScriptedModel::new().script("writer", [Turn::answer(answer)]);
    let log = model.call_log();
    (dir, journal, model, log)
}

/// The writer's tree recovered from `journal`, on `model`.
async fn recovered(journal: &Path, model: ScriptedModel) -> Tree {
    Tree::builder()
        .catalog(writer_catalog())
        .model(model)
        .journal(JournalConfig::new(journal))
        .build()
        .await
        .unwrap()
}

/// A tree on `journal`, synced per entry, whose agents' start hooks never finish, with
/// `writer "the task"` admitted and its request durable.
async fn admitted(journal: &Path) -> Tree {
    let tree = Tree::builder()
        .catalog(writer_catalog())
        .model(ScriptedModel::new())
        .on_start(|_: agent_tree::HookContext| std::future::pending())
        .journal(JournalConfig::new(journal).durability(Durability::EveryEntry))
        .build()
        .await
        .unwrap();
    spawn_admitted(&tree, SpawnRequest::new("writer", "the task")).await;
    tree.flush_journal().await;
    tree
}

/// A process killed after an agent was admitted (its request, prompt included, journaled)
/// but before its first turn boundary (its start hook still running): recovered, the agent
/// is interrupted, and a resume with no prompt sends the model its task, as its first run
/// would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_before_its_first_turn_resumes_with_its_task() {
    let (_dir, journal, model, log) = killed_at("crash-task", "admitted", "written");
    let tree = recovered(&journal, model).await;
    let writer = AgentId::new(1);
    assert_eq!(tree.interrupted(), [writer]);
    let mut handle = tree.resume(writer, "").await.unwrap();
    assert_eq!(handle.outcome().await.text.as_deref(), Some("written"));
    assert_eq!(user_texts(&log.of(writer)[0].messages), ["the task"]);
    tree.shutdown().await;
}

/// One tree per journal, across processes: a tree on a journal a live process holds is
/// refused naming that process; once the process is killed (its lock file left behind),
/// the journal opens, since an OS advisory lock dies with its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_is_refused_while_a_process_holds_it_and_opens_once_it_is_killed() {
    let dir = TempDir::new("crash-lock");
    let journal = dir.file("tree.journal");
    let open = || {
        Tree::builder()
            .catalog(writer_catalog())
            .model(ScriptedModel::new())
            .journal(JournalConfig::new(&journal))
            .build()
    };
    let holder = AtMoment::start("admitted", &journal);
    match open().await {
        Err(agent_tree::TreeError::JournalInUse(in_use)) => {
            assert_eq!(in_use.holder, Some(holder.pid()));
            assert_eq!(in_use.path, journal);
        }
        other => panic!("a journal a live process holds was opened: {other:?}"),
    }
    holder.kill();
    assert!(
        dir.file("tree.journal.lock").exists(),
        "the killed process left its lock file"
    );
    let tree = open().await.expect("a killed holder is no obstacle");
    assert_eq!(tree.interrupted(), [AgentId::new(1)]);
    tree.shutdown().await;
}

/// A tree on `journal`, synced per entry, with one pool slot: `writer "first task"` runs
/// (its model turn never returns) and was steered `use blue` (receipted `delivered`);
/// `writer "second task"` waits for the slot and was steered `use red` (receipted
/// `queued`).
async fn steered(journal: &Path) -> Tree {
    let tree = Tree::builder()
        .config(TreeConfig::default().with_max_concurrent(1))
        .catalog(writer_catalog())
        .model(ScriptedModel::new().script("writer", [Turn::hang()]))
        .journal(JournalConfig::new(journal).durability(Durability::EveryEntry))
        .build()
        .await
        .unwrap();
    let running = spawn_admitted(
        &tree,
        SpawnRequest::new("writer", "first task").background(),
    )
    .await
    .id();
    let queued = spawn_admitted(
        &tree,
        SpawnRequest::new("writer", "second task").background(),
    )
    .await
    .id();
    assert_eq!(
        tree.steer(running, "use blue").await,
        Ok(agent_tree::SteerReceipt::Delivered)
    );
    assert_eq!(
        tree.steer(queued, "use red").await,
        Ok(agent_tree::SteerReceipt::Queued)
    );
    tree.flush_journal().await;
    tree
}

/// Steers receipted before a kill, `delivered` to a running agent (not yet read by a
/// turn) and `queued` for one waiting for a pool slot, survive it: each agent's resumed run
/// reads its steer once, after its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steers_receipted_before_a_kill_are_read_once_by_the_resumed_runs() {
    let (_dir, journal, model, log) = killed_at("crash-steers", "steered", "done");
    let tree = recovered(&journal, model).await;
    let (running, queued) = (AgentId::new(1), AgentId::new(2));
    assert_eq!(tree.interrupted(), [running, queued]);
    for (agent, task, steer) in [
        (running, "first task", "use blue"),
        (queued, "second task", "use red"),
    ] {
        let mut handle = tree.resume(agent, "").await.unwrap();
        assert!(handle.outcome().await.is_completed());
        assert_eq!(
            user_texts(&log.of(agent)[0].messages),
            [task, steer],
            "{agent}"
        );
    }
    tree.shutdown().await;
}

/// A tree on `journal`, synced per entry, whose `writer "the task"` asked the application
/// `tabs or spaces?` (in a turn that also called `lint`, which never returns) and waits:
/// the question handler never answers. With `answered`, the application answered `tabs`
/// with a steer (receipted once the answer was journaled), and the turn still waits on
/// `lint`.
async fn asking(journal: &Path, answered: bool) -> Tree {
    let tree = Tree::builder()
        .catalog(writer_catalog())
        .model(ScriptedModel::new().script(
            "writer",
            [Turn::calls([
                agent_tree::testkit::Call::ask_owner("tabs or spaces?"),
                agent_tree::testkit::Call::tool("lint", serde_json::json!({})),
            ])],
        ))
        .tool(agent_tree::FnTool::new("lint", "lints", |_, _| {
            std::future::pending::<Result<String, agent_tree::ToolError>>()
        }))
        .unwrap()
        .on_question(|_: agent_tree::Question| std::future::pending())
        .journal(JournalConfig::new(journal).durability(Durability::EveryEntry))
        .build()
        .await
        .unwrap();
    let mut events = tree.subscribe();
    let writer = spawned(&tree, "writer", "the task").await;
    while let Some(event) = events.next().await {
        if event.agent == writer && event.kind.name() == "asked" {
            break;
        }
    }
    if answered {
        assert_eq!(
            tree.steer(writer, "tabs").await,
            Ok(agent_tree::SteerReceipt::Delivered)
        );
    }
    tree.flush_journal().await;
    tree
}

/// A tree recovered from `journal` whose question handler answers `spaces`, and the
/// questions it was asked.
async fn recovered_asker(
    journal: &Path,
    model: ScriptedModel,
) -> (Tree, std::sync::Arc<parking_lot::Mutex<Vec<String>>>) {
    let asked = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let tree = Tree::builder()
        .catalog(writer_catalog())
        .model(model)
        .tool(agent_tree::FnTool::new("lint", "lints", |_, _| async {
            Ok("clean".to_owned())
        }))
        .unwrap()
        .on_question(move |q: agent_tree::Question| {
            seen.lock().push(q.question);
            async { Ok("spaces".to_owned()) }
        })
        .journal(JournalConfig::new(journal))
        .build()
        .await
        .unwrap();
    (tree, asked)
}

/// The tool results of `messages`, as (text, is_error).
fn tool_results(messages: &[agent_tree::protocol::Message]) -> Vec<(String, bool)> {
    messages
        .iter()
        .filter(|m| m.role == agent_tree::protocol::Role::Tool)
        .map(|m| (m.content.clone(), m.is_error))
        .collect()
}

/// A process killed while an agent waits on the application's answer: the recovered tree
/// puts the question to its handler again; the agent was never interrupted and its asking
/// turn is not re-run: its one model call reads the handler's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_open_at_a_kill_is_put_to_the_handler_again() {
    let (_dir, journal, model, log) = killed_at("crash-asking", "asking", "done");
    let (tree, asked) = recovered_asker(&journal, model).await;
    let writer = AgentId::new(1);
    assert!(tree.interrupted().is_empty(), "it waits again");
    let mut handle = tree.handle(writer).unwrap();
    assert!(handle.outcome().await.is_completed());
    assert_eq!(*asked.lock(), ["tabs or spaces?"]);
    let calls = log.of(writer);
    assert_eq!(calls.len(), 1, "the asking turn is not re-run");
    let results = tool_results(&calls[0].messages);
    assert_eq!(results[0], ("spaces".to_owned(), false));
    assert!(results[1].1, "the lint call was cut off: {results:?}");
    tree.shutdown().await;
}

/// A process killed after the application answered (the answer journaled, the turn still
/// waiting on another call): the answer is delivered once after recovery, and the handler
/// is not asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_before_a_kill_is_delivered_once() {
    let (_dir, journal, model, log) = killed_at("crash-answered", "answered", "done");
    let (tree, asked) = recovered_asker(&journal, model).await;
    let writer = AgentId::new(1);
    let mut handle = tree.handle(writer).unwrap();
    assert!(handle.outcome().await.is_completed());
    assert!(asked.lock().is_empty(), "answered once, never asked again");
    let calls = log.of(writer);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        tool_results(&calls[0].messages)[0],
        ("tabs".to_owned(), false)
    );
    tree.shutdown().await;
}
