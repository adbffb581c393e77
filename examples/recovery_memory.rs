//! Recovery and compaction in bounded memory: writes a journal of many settled agents with
//! long conversations (1 GiB by default), then, in a fresh child process, recovers a tree
//! from it and compacts it, printing each step's wall time and the process's peak resident
//! memory (`VmHWM`).
//!
//! ```text
//! cargo run --release --example recovery_memory                     # 100,000 agents, ~1 GiB
//! cargo run --release --example recovery_memory -- 10000 100000     # agents, bytes of text per conversation
//! ```
//!
//! The journal is written directly with the protocol's line writer (what a tree writes for
//! an agent that ran four turns: its request, its events, a conversation line per turn
//! boundary each adding what the turn added), under the system's temp dir, and deleted at
//! the end.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use agent_tree::prelude::*;
use agent_tree::protocol::{
    Event, EventKind, JOURNAL_VERSION, JournalEntry, Message, SessionId, definition_hash,
};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{JournalConfig, Tree};

/// Turns per agent: one conversation line each, the first the whole conversation so far.
const TURNS: usize = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--recover") {
        let path = PathBuf::from(&args[2]);
        measure(&path);
        return;
    }
    let agents: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let per_agent: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8_650);
    let path = std::env::temp_dir().join(format!("recovery-memory-{}.journal", std::process::id()));
    let started = Instant::now();
    let bytes = write_journal(&path, agents, per_agent).expect("the journal is written");
    println!(
        "wrote {agents} settled agents, {:.2} GiB, in {:.1} s (writer's peak RSS {} MiB)",
        bytes as f64 / (1u64 << 30) as f64,
        started.elapsed().as_secs_f64(),
        peak_kib() / 1024
    );
    // A fresh process, so its peak is recovery's and compaction's alone.
    let status = Command::new(std::env::current_exe().expect("this program"))
        .arg("--recover")
        .arg(&path)
        .status();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(lock_path(&path));
    assert!(status.is_ok_and(|s| s.success()), "the measurement ran");
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Writes the journal: a header, the definition, then each agent's request, events and
/// conversation lines. Returns its size.
fn write_journal(path: &Path, agents: u64, per_agent: usize) -> std::io::Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut written = 0u64;
    let mut line = |out: &mut std::io::BufWriter<std::fs::File>, entry: JournalEntry| {
        let text = entry.to_line();
        written += text.len() as u64;
        out.write_all(text.as_bytes())
    };
    line(
        &mut out,
        JournalEntry::Header {
            version: JOURNAL_VERSION,
            session: SessionId::new("recovery-memory"),
        },
    )?;
    let definition = AgentDefinition::new("writer", "You write.");
    let hash = definition_hash(&definition);
    line(
        &mut out,
        JournalEntry::Definition {
            hash: hash.clone(),
            definition,
        },
    )?;
    // Each turn adds an assistant message and a tool result of about this many bytes.
    let chunk = (per_agent / (TURNS * 2)).max(1);
    let mut seq = 0u64;
    let mut event = |agent: AgentId, kind: EventKind| {
        seq += 1;
        JournalEntry::Event {
            event: Event {
                seq,
                agent,
                parent: Some(AgentId::ROOT),
                depth: 1,
                at_ms: seq,
                kind,
            },
        }
    };
    for i in 1..=agents {
        let agent = AgentId::new(i);
        let task = format!("write part {i} of the report");
        line(
            &mut out,
            JournalEntry::Spawn {
                agent,
                definition: hash.clone(),
                request: SpawnRequest::new("writer", task.clone()),
                context: Vec::new().into(),
            },
        )?;
        line(
            &mut out,
            event(
                agent,
                EventKind::Spawned {
                    agent_type: "writer".into(),
                    request_id: None,
                    detached: false,
                },
            ),
        )?;
        line(
            &mut out,
            event(
                agent,
                EventKind::Started {
                    agent_type: "writer".into(),
                    incarnation: 1,
                },
            ),
        )?;
        let mut length = 0;
        for turn in 0..TURNS {
            let mut messages = Vec::with_capacity(3);
            if turn == 0 {
                messages.push(Message::user(task.clone()));
            }
            let call = agent_tree::protocol::ToolCall::new(
                format!("c{turn}"),
                "read",
                serde_json::json!({ "part": i, "turn": turn }),
            );
            messages.push(Message::assistant(filler(i, turn, chunk), vec![call]));
            messages.push(Message::tool_result(
                format!("c{turn}"),
                filler(i + 1, turn, chunk),
                false,
            ));
            let added = messages.len();
            line(
                &mut out,
                JournalEntry::Conversation {
                    agent,
                    run: 1,
                    from: length,
                    messages: messages.into(),
                },
            )?;
            length += added;
        }
        line(
            &mut out,
            event(
                agent,
                EventKind::UsageReported {
                    delta: Usage::tokens(1200, 300),
                },
            ),
        )?;
        line(
            &mut out,
            event(
                agent,
                EventKind::settled(Outcome::completed(format!(
                    "part {i} written: {}",
                    filler(i, 9, 160)
                ))),
            ),
        )?;
    }
    out.flush()?;
    Ok(written)
}

/// `len` bytes of text that differ by agent and turn.
fn filler(i: u64, turn: usize, len: usize) -> String {
    const WORDS: [&str; 8] = [
        "tokens ", "ledger ", "journal ", "settled ", "subtree ", "resume ", "owner ", "steer ",
    ];
    let mut text = String::with_capacity(len + 8);
    let mut k = i.wrapping_mul(0x9e37_79b9) ^ turn as u64;
    while text.len() < len {
        k = k.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        text.push_str(WORDS[(k >> 61) as usize]);
    }
    text.truncate(len);
    text
}

/// The child: recovers a tree from `path`, then compacts it (a tree with a rotation
/// threshold compacts at its first flush), each timed and its peak taken, then resumes one
/// settled agent.
fn measure(path: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let before = peak_kib();
        let started = Instant::now();
        // Rotation past 1 MiB: the file is compacted at the first flush (recovery itself
        // appends nothing here: the root is running and no agent is unfinished).
        let tree = tree(path, Some(1 << 20)).await;
        let recovered = started.elapsed();
        let agents = tree.snapshot().agents().count();
        let peak = peak_kib();
        let untouched = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == size;
        println!(
            "recovery: {agents} agents from {:.2} GiB in {:.1} s; peak RSS {} MiB ({} MiB before it){}",
            size as f64 / (1u64 << 30) as f64,
            recovered.as_secs_f64(),
            peak / 1024,
            before / 1024,
            if untouched { "" } else { " (the file changed: a compaction ran with it)" }
        );

        let rss = reset_peak();
        let started = Instant::now();
        tree.flush_journal().await;
        let compacted = started.elapsed();
        let after = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let peak = peak_kib();
        println!(
            "compaction: {:.2} GiB to {:.2} GiB in {:.1} s; peak RSS {} MiB ({} MiB before it){}",
            size as f64 / (1u64 << 30) as f64,
            after as f64 / (1u64 << 30) as f64,
            compacted.as_secs_f64(),
            peak / 1024,
            rss / 1024,
            match tree.journal_error() {
                Some(error) => format!(" (the journal failed: {error})"),
                None => String::new(),
            }
        );

        // A settled agent's conversation is read back on demand, alone, from the
        // compacted file.
        let id = AgentId::new(agents as u64 / 2);
        let started = Instant::now();
        let mut handle = tree.resume(id, "one more line").await.expect("resumes");
        let outcome = handle.outcome().await;
        println!(
            "resume of {id} (its conversation read back): {:?} in {:.1} ms",
            outcome.status,
            started.elapsed().as_secs_f64() * 1000.0
        );
        tree.shutdown().await;
    });
}

async fn tree(path: &Path, rotate_at: Option<u64>) -> Tree {
    let mut config = JournalConfig::new(path);
    if let Some(limit) = rotate_at {
        config = config.rotate_at(limit);
    }
    Tree::builder()
        .catalog(Catalog::new([AgentDefinition::new("writer", "You write.")]).expect("valid"))
        .model(ScriptedModel::new().script("writer", Script::new([Turn::answer("done")])))
        .journal(config)
        .build()
        .await
        .expect("the tree recovers")
}

/// The process's peak resident memory so far, in KiB (`VmHWM`; 0 where there is none).
fn peak_kib() -> u64 {
    status_kib("VmHWM:")
}

/// Resets the peak to the current resident memory (Linux: `clear_refs`), returning that.
fn reset_peak() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kib("VmRSS:")
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
