//! The crash-recovery scenario, shared by `examples/crash_recovery` and the suite's kill test
//! (`tests/lifetimes/crash_kill.rs`, through `#[path]`).
//!
//! A child process runs [`LEADS`] leads, each delegating [`PARTS`] parts one after another
//! to workers that take a few milliseconds of real time, with a journal synced per entry. It
//! prints `settled <agent> <status> <text>` for each agent that settles, once the journal
//! holds it. The parent kills it with SIGKILL at a random moment, recovers the tree from the
//! journal, resumes the interrupted leads (which resume their interrupted workers) to
//! completion, and checks: no part spawned twice for one lead, every outcome printed before
//! the kill read back the same, no journal refused.
#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::ToolCall;
use agent_tree::protocol::{EndReason, Role};
use agent_tree::{BoxFuture, Durability, JournalConfig, read_journal};

/// Top-level leads per trial.
pub const LEADS: usize = 3;
/// Parts each lead delegates, one after another.
pub const PARTS: usize = 4;

/// A model that decides from the conversation alone, so a turn re-run after a crash is the
/// same turn: a lead resumes the worker its last result says was interrupted, or delegates
/// its next part, or answers once every part is done; a worker answers after a few ms.
pub struct Team {
    seed: u64,
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
            if request.agent_type() == "worker" {
                let ms = 2 + mix(self.seed ^ request.agent.get()) % 10;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                return Ok(
                    ModelResponse::text(format!("{task}: done")).with_usage(Usage::tokens(10, 2))
                );
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

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", "You work."),
    ])
    .expect("valid definitions")
}

async fn tree(journal: &Path, seed: u64) -> Result<Tree, agent_tree::TreeError> {
    Tree::builder()
        .catalog(catalog())
        .model(Team { seed })
        // Every output is released from memory once read (the leads read their workers'),
        // so what recovery checks is read back from the journal.
        .journal(
            JournalConfig::new(journal)
                .durability(Durability::EveryEntry)
                .keep_read_outputs(0),
        )
        .build()
        .await
}

/// The child process's work: runs the leads and reports each settle once it is durable.
/// Returns when every lead is done (a trial's kill normally comes first).
pub async fn run_child(journal: &Path, seed: u64) {
    let tree = tree(journal, seed).await.expect("the child's tree builds");
    let mut events = tree.subscribe();
    for i in 0..LEADS {
        tree.spawn(SpawnRequest::new("lead", format!("task {i}")))
            .await
            .expect("admitted");
    }
    let mut settled = 0;
    while let Some(event) = events.next().await {
        let Some(outcome) = event.kind.outcome().cloned() else {
            continue;
        };
        // Only what the journal holds is reported.
        tree.flush_journal().await;
        let text = outcome.text.clone().unwrap_or_default();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "settled {} {} {text}", event.agent, outcome.status);
        let _ = out.flush();
        if event.depth == 1 {
            settled += 1;
            if settled == LEADS {
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
    let tree = match tree(journal, seed).await {
        Ok(tree) => tree,
        Err(error) => {
            eprintln!("recovery refused the journal: {error}");
            found.corrupt = 1;
            return found;
        }
    };
    found.interrupted = tree.interrupted().len();
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
    // Resume the interrupted leads; they resume their workers. Leads the kill came before
    // are started now.
    let mut leads: Vec<AgentHandle> = Vec::new();
    let snapshot = tree.snapshot();
    let top: Vec<_> = snapshot
        .agents()
        .filter(|r| r.depth == 1)
        .map(|r| r.id)
        .collect();
    for id in &top {
        let interrupted = tree
            .outcome(*id)
            .is_some_and(|o| o.reason == EndReason::Interrupted);
        if interrupted {
            leads.push(tree.resume(*id, "").await.expect("resumable"));
        } else {
            leads.push(tree.handle(*id).expect("a record"));
        }
    }
    for i in top.len()..LEADS {
        leads.push(
            tree.spawn(SpawnRequest::new("lead", format!("task {i}")))
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
