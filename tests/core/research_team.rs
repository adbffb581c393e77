//! A small research team as a first-time user writes one: a `lead` that delegates to a
//! `searcher` and a `summarizer`, loaded from Claude Code style agent files, and the scripts
//! and calls the test kit's tests drive it with.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_tree::Catalog;
use agent_tree::protocol::{ToolCall, Usage};
use agent_tree::testkit::{ScriptedModel, Turn};

const LEAD: &str = "\
---
name: lead
description: Leads a research task.
allowed_subagents: [searcher, summarizer]
strategy: one_for_one
max_restarts: 2
restart_period_ms: 5000
---
You lead research. Delegate searching to `searcher` and summarizing to `summarizer`.
";

const SUMMARIZER: &str = "\
---
name: summarizer
description: Summarizes sources.
---
You summarize what you are given in three sentences.
";

fn searcher(restart: &str) -> String {
    format!(
        "---\nname: searcher\ndescription: Finds sources.\nrestart: {restart}\n---\nYou find sources.\n"
    )
}

static DIRS: AtomicU32 = AtomicU32::new(0);

/// The team's catalog, loaded from a fresh directory of agent files.
pub(crate) fn team(searcher_restart: &str) -> Catalog {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "research-team-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lead.md"), LEAD).unwrap();
    std::fs::write(dir.join("searcher.md"), searcher(searcher_restart)).unwrap();
    std::fs::write(dir.join("summarizer.md"), SUMMARIZER).unwrap();
    std::fs::write(dir.join("README.md"), "# the research team\n").unwrap();
    let loaded = Catalog::load_dir(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert_eq!(loaded.catalog.len(), 3);
    loaded.catalog
}

/// A raw `Agent` tool call spawning `agent_type` with `prompt`, as a driven lead makes it.
pub(crate) fn agent_call(id: &str, agent_type: &str, prompt: &str) -> ToolCall {
    ToolCall::new(
        id,
        "Agent",
        serde_json::json!({"agent_type": agent_type, "prompt": prompt}),
    )
}

/// The lead spawns the searcher (foreground) and answers `led`; the searcher answers
/// `found` (5 + 1 tokens).
pub(crate) fn team_script() -> ScriptedModel {
    crate::support::lead_spawning_a_searcher().script(
        "searcher",
        [Turn::answer("found").usage(Usage::tokens(5, 1))],
    )
}
