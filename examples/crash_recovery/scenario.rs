//! The crash-recovery scenario, shared by `examples/crash_recovery` and the suite's kill test
//! (`tests/lifetimes/crash_kill.rs`, through `#[path]`).
//!
//! A child process runs [`LEADS`] leads, each delegating [`PARTS`] parts one after another
//! to workers that take a few milliseconds of real time, beside [`ASKERS`] agents that ask
//! the application a question a slow human answers, and [`STARTERS`] agents whose start
//! hook takes a while, with a journal synced per entry. It prints `settled <agent> <status>
//! <text>` for each agent that settles, once the journal holds it. The parent kills it with
//! SIGKILL at a random moment, recovers the tree from the journal, resumes the interrupted
//! top-level agents (the leads resume their interrupted workers) to completion, and
//! checks: no part spawned twice for one lead, every outcome printed before the kill read
//! back the same, no journal refused; every question open at the kill put again and
//! answered once without its turn re-run; every agent killed before its first turn
//! resumed with its task.
#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::ToolCall;
use agent_tree::protocol::{EndReason, Role};
use agent_tree::{BoxFuture, Durability, JournalConfig, read_journal};

/// Top-level leads per trial.
pub const LEADS: usize = 3;
/// Parts each lead delegates, one after another.
pub const PARTS: usize = 4;
/// Top-level agents per trial that ask the application a question in their first turn.
pub const ASKERS: usize = 2;
/// Top-level agents per trial whose start hook takes a while before their first turn.
pub const STARTERS: usize = 2;

/// A model that decides from the conversation alone, so a turn re-run after a crash is the
/// same turn: a lead resumes the worker its last result says was interrupted, or delegates
/// its next part, or answers once every part is done; a worker answers after a few ms.
pub struct Team {
    seed: u64,
    /// Turns that asked a question, by agent: one after a recovery means a re-run.
    asked: Arc<parking_lot::Mutex<HashMap<AgentId, usize>>>,
}

impl Model for Team {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let task = request
                .messages
                .iter()
                .find(|m| m.role == Role::User)
                .map(|m| m.content.clone())
                .unwrap_or_default();
            if matches!(request.agent_type(), "worker" | "starter") {
                let ms = 2 + mix(self.seed ^ request.agent.get()) % 10;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                return Ok(
                    ModelResponse::text(format!("{task}: done")).with_usage(Usage::tokens(10, 2))
                );
            }
            if request.agent_type() == "asker" {
                // Asks, then answers with what it was told.
                let told = request.messages.iter().find(|m| m.role == Role::Tool);
                return Ok(match told {
                    Some(told) => ModelResponse::text(format!("{task}: told {}", told.content)),
                    None => {
                        *self.asked.lock().entry(request.agent).or_default() += 1;
                        let question = serde_json::json!({ "question": question_of(&task) });
                        ModelResponse::calls(vec![ToolCall::new("q", "ask_owner", question)])
                    }
                }
                .with_usage(Usage::tokens(5, 1)));
            }
            let results: Vec<serde_json::Value> = request
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .filter_map(|m| serde_json::from_str(&m.content).ok())
                .collect();
            let call = |input: serde_json::Value| {
                let calls = vec![ToolCall::new("c", "Agent", input)];
                Ok(ModelResponse::calls(calls).with_usage(Usage::tokens(3, 1)))
            };
            if let Some(last) = results.last() {
                if last["reason"] == "interrupted" {
                    return call(serde_json::json!({ "resume": last["agent_id"], "prompt": "" }));
                }
            }
            let done = results
                .iter()
                .filter(|r| r["status"] == "completed")
                .count();
            if done < PARTS {
                return call(serde_json::json!({
                    "agent_type": "worker",
                    "prompt": format!("part {done} of {task}"),
                }));
            }
            Ok(ModelResponse::text(format!(
                "{task}: all {PARTS} parts done"
            )))
        })
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The question an asker with `task` asks.
fn question_of(task: &str) -> String {
    format!("may I {task}?")
}

/// The answer to `question`.
fn answer_to(question: &str) -> String {
    format!("yes to {question}")
}

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", "You work."),
        AgentDefinition::new("asker", "You ask first."),
        AgentDefinition::new("starter", "You start slowly."),
    ])
    .expect("valid definitions")
}

/// Who answers the askers: the child's human takes a while (a kill may come first); the
/// recovered tree's answers at once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Human {
    Slow,
    Prompt,
}

/// A trial's tree, with the questions its handler was asked and the turns that asked.
struct Built {
    tree: Tree,
    questions: Arc<parking_lot::Mutex<Vec<String>>>,
    asked: Arc<parking_lot::Mutex<HashMap<AgentId, usize>>>,
}

async fn tree(journal: &Path, seed: u64, human: Human) -> Result<Built, agent_tree::TreeError> {
    let questions = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let asked = Arc::new(parking_lot::Mutex::new(HashMap::new()));
    let heard = questions.clone();
    let tree = Tree::builder()
        .catalog(catalog())
        .model(Team {
            seed,
            asked: asked.clone(),
        })
        .on_question(move |q: agent_tree::Question| {
            heard.lock().push(q.question.clone());
            async move {
                if human == Human::Slow {
                    let ms = 5 + mix(seed ^ q.agent.get()) % 40;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                Ok(answer_to(&q.question))
            }
        })
        .on_start(move |ctx: agent_tree::HookContext| async move {
            if ctx.agent_type == "starter" {
                let ms = 5 + mix(seed ^ ctx.agent.get() ^ 0x5a) % 50;
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(())
        })
        // Every output is released from memory once read (the leads read their workers'),
        // so what recovery checks is read back from the journal.
        .journal(
            JournalConfig::new(journal)
                .durability(Durability::EveryEntry)
                .keep_read_outputs(0),
        )
        .build()
        .await?;
    Ok(Built {
        tree,
        questions,
        asked,
    })
}

/// The top-level agents of a trial besides the leads: `(type, task)`.
fn others() -> Vec<(&'static str, String)> {
    (0..ASKERS)
        .map(|i| ("asker", format!("ship change {i}")))
        .chain((0..STARTERS).map(|i| ("starter", format!("index shard {i}"))))
        .collect()
}

/// The child process's work: runs the leads and the other top-level agents and reports each
/// settle once it is durable. Returns when every top-level agent is done (a trial's kill
/// normally comes first).
pub async fn run_child(journal: &Path, seed: u64) {
    let tree = tree(journal, seed, Human::Slow)
        .await
        .expect("the child's tree builds")
        .tree;
    let mut events = tree.subscribe();
    // Every top-level agent, not only the leads: the shutdown at the end would abort an
    // asker still waiting on its slow human, and recovery would find it aborted, not
    // interrupted (on a fast machine the leads finish before the kill).
    let mut top = HashSet::new();
    for i in 0..LEADS {
        let lead = tree
            .spawn(SpawnRequest::new("lead", format!("task {i}")))
            .await
            .expect("admitted");
        top.insert(lead.id());
    }
    for (agent_type, task) in others() {
        let other = tree
            .spawn(SpawnRequest::new(agent_type, task).background())
            .await
            .expect("admitted");
        top.insert(other.id());
    }
    let mut settled = 0;
    while let Some(event) = events.next().await {
        let Some(outcome) = event.kind.outcome().cloned() else {
            continue;
        };
        // Seen, then flushed: the journal was handed the event before this stream saw it,
        // so once the flush returns it is durable and may be reported.
        tree.flush_journal().await;
        let text = outcome.text.clone().unwrap_or_default();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "settled {} {} {text}", event.agent, outcome.status);
        let _ = out.flush();
        if top.contains(&event.agent) {
            settled += 1;
            if settled == top.len() {
                break;
            }
        }
    }
    tree.shutdown().await;
}

/// What one trial found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub duplicates: usize,
    pub lost_results: usize,
    pub corrupt: usize,
    /// Agents recovery found interrupted (the kill came mid-work).
    pub interrupted: usize,
    /// Outcomes the child reported before the kill.
    pub reported: usize,
    /// Of those, the ones recovery held released (read back from the journal to check).
    pub released: usize,
    /// Agents the kill found waiting on a question (open, or answered and not yet read).
    pub questions: usize,
    /// Of those, the ones that came back waiting, not interrupted, and completed with the
    /// answer read once, their asking turn not re-run (and the handler asked again only
    /// for a question not answered before the kill).
    pub questions_kept: usize,
    /// Agents the kill found admitted but before their first turn (no conversation).
    pub tasks: usize,
    /// Of those, the ones that completed their own task once resumed.
    pub tasks_kept: usize,
}

/// One trial: `child` starts the child process writing `journal`; it is killed after
/// `kill_after`; then the tree is recovered, resumed to completion and checked.
///
/// # Panics
///
/// When the recovered tree does not complete (every lead with every part), naming what.
pub fn trial(mut child: Command, journal: &Path, seed: u64, kill_after: Duration) -> Found {
    let _ = std::fs::remove_file(journal);
    let mut process = child
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child starts");
    std::thread::sleep(kill_after);
    // SIGKILL: no destructor, no flush, no shutdown.
    let _ = process.kill();
    let _ = process.wait();
    let reported: Vec<(AgentId, String, String)> =
        std::io::BufReader::new(process.stdout.take().expect("piped"))
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| {
                let rest = line.strip_prefix("settled ")?;
                let mut parts = rest.splitn(3, ' ');
                let agent = parts.next()?.parse().ok()?;
                let status = parts.next()?.to_owned();
                Some((agent, status, parts.next().unwrap_or("").to_owned()))
            })
            .collect();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(recover_and_check(journal, seed, &reported))
}

async fn recover_and_check(
    journal: &Path,
    seed: u64,
    reported: &[(AgentId, String, String)],
) -> Found {
    let mut found = Found::default();
    // What the kill cut off, from the journal as it left it: the questions agents waited
    // on, and the agents before their first turn.
    // (A kill before the header was whole leaves none: the tree starts afresh.)
    let before = read_journal(journal, None).unwrap_or_default();
    let unfinished: Vec<AgentId> = before.unfinished().map(|r| r.id).collect();
    let waiting: HashMap<AgentId, agent_tree::protocol::OpenQuestion> = unfinished
        .iter()
        .filter_map(|id| Some((*id, before.questions.get(id)?.clone())))
        .collect();
    let unstarted: Vec<AgentId> = unfinished
        .iter()
        .copied()
        .filter(|id| !before.conversations.contains_key(id) && before.spawns.contains_key(id))
        .collect();
    found.questions = waiting.len();
    found.tasks = unstarted.len();
    let Built {
        tree,
        questions,
        asked,
    } = match tree(journal, seed, Human::Prompt).await {
        Ok(built) => built,
        Err(error) => {
            eprintln!("recovery refused the journal: {error}");
            found.corrupt = 1;
            return found;
        }
    };
    let interrupted = tree.interrupted();
    found.interrupted = interrupted.len();
    // Recovered waiting: not interrupted.
    let came_back_waiting: HashSet<AgentId> = waiting
        .keys()
        .copied()
        .filter(|id| !interrupted.contains(id))
        .collect();
    found.reported = reported.len();
    // Every outcome reported before the kill reads back the same (a released one from the
    // journal).
    for (agent, status, text) in reported {
        found.released += usize::from(tree.outcome(*agent).is_some_and(|o| o.released));
        let recovered = tree.read_outcome(*agent).await;
        let ok = recovered.as_ref().is_some_and(|o| {
            o.status.to_string() == *status && o.text.clone().unwrap_or_default() == *text
        });
        if !ok {
            eprintln!("lost: {agent} {status} {text:?}, recovered {recovered:?}");
            found.lost_results += 1;
        }
    }
    // Resume the interrupted top-level agents; the leads resume their workers. Agents the
    // kill came before are started now.
    let mut leads: Vec<AgentHandle> = Vec::new();
    let snapshot = tree.snapshot();
    let top: Vec<(AgentId, String)> = snapshot
        .agents()
        .filter(|r| r.depth == 1)
        .map(|r| (r.id, r.agent_type.clone()))
        .collect();
    for (id, _) in &top {
        let interrupted = tree
            .outcome(*id)
            .is_some_and(|o| o.reason == EndReason::Interrupted);
        if interrupted {
            leads.push(tree.resume(*id, "").await.expect("resumable"));
        } else {
            leads.push(tree.handle(*id).expect("a record"));
        }
    }
    let lead_count = top.iter().filter(|(_, t)| t == "lead").count();
    for i in lead_count..LEADS {
        leads.push(
            tree.spawn(SpawnRequest::new("lead", format!("task {i}")))
                .await
                .expect("admitted"),
        );
    }
    for (agent_type, task) in others().into_iter().skip(top.len() - lead_count) {
        leads.push(
            tree.spawn(SpawnRequest::new(agent_type, task))
                .await
                .expect("admitted"),
        );
    }
    for lead in &mut leads {
        let outcome = tokio::time::timeout(Duration::from_secs(20), lead.outcome())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} never completed:\n{}",
                    lead.id(),
                    tree.snapshot().render_text()
                )
            });
        assert!(
            outcome.is_completed(),
            "{} did not complete: {outcome:?}\n{}",
            lead.id(),
            tree.snapshot().render_text()
        );
    }
    // Each question open at the kill: back waiting, answered once (by the handler again
    // unless its answer was journaled), its asking turn not re-run.
    let heard = questions.lock().clone();
    for (id, open) in &waiting {
        let again = heard.iter().filter(|q| **q == open.question).count();
        let expected_again = usize::from(open.answer.is_none());
        let answer = open
            .answer
            .as_ref()
            .map_or_else(|| answer_to(&open.question), |(text, _)| text.clone());
        let text = tree
            .read_outcome(*id)
            .await
            .and_then(|o| o.text)
            .unwrap_or_default();
        let kept = came_back_waiting.contains(id)
            && again == expected_again
            && !asked.lock().contains_key(id)
            && text.matches(&answer).count() == 1;
        if !kept {
            eprintln!(
                "question lost: {id} {:?} (asked again {again}, turns re-run {:?}, text {text:?})",
                open.question,
                asked.lock().get(id)
            );
        }
        found.questions_kept += usize::from(kept);
    }
    // Each agent killed before its first turn: resumed, it did its own task.
    for id in &unstarted {
        let task = &before.spawns[id].1.prompt;
        let text = tree
            .read_outcome(*id)
            .await
            .and_then(|o| o.text)
            .unwrap_or_default();
        let kept = text.starts_with(&format!("{task}:"));
        if !kept {
            eprintln!("task lost: {id} {task:?}, completed with {text:?}");
        }
        found.tasks_kept += usize::from(kept);
    }
    tree.shutdown().await;
    // No part spawned twice for one lead: by the journal's requests.
    let replay = read_journal(journal, None).expect("the journal reads back");
    let mut parts: HashMap<(AgentId, String), usize> = HashMap::new();
    for record in replay.records.iter().skip(1).filter(|r| r.depth == 2) {
        let prompt = replay.spawns[&record.id].1.prompt.clone();
        *parts
            .entry((record.parent.expect("a child"), prompt))
            .or_default() += 1;
    }
    found.duplicates = parts.values().map(|n| n - 1).sum();
    let leads_seen: HashSet<AgentId> = parts.keys().map(|(lead, _)| *lead).collect();
    assert_eq!(
        parts.len(),
        leads_seen.len() * PARTS,
        "every lead has all its parts"
    );
    found
}

/// The journal path of trial `n` under `dir`.
pub fn journal_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("trial-{n}.journal"))
}
