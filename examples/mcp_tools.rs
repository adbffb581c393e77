//! Agents of a two-level tree read and write files through MCP servers: two instances of
//! the reference filesystem server (`@modelcontextprotocol/server-filesystem`), one on a
//! directory of notes, one on an output directory, each a child process the tree owns.
//!
//! ```text
//! editor (d1): mcp__docs (every tool of the notes server), may delegate to the writer
//! └── writer (d2): mcp__out__write_file, mcp__out__read_text_file
//! ```
//!
//! The models are scripted; the servers and the files are real. The example checks each
//! claim (what the editor read, what the writer wrote, which tools each was offered, that
//! no server process is left after the shutdown, by pid) and only then prints
//! `mcp: servers=<n> calls=<n> errors=0 processes_left=0`.
//!
//! `eval "$(.ci/mcp-servers env)"; cargo run --features mcp --example mcp_tools` (without
//! `AGENT_TREE_MCP_SERVERS` it runs the server with `npx`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_tree::mcp::{McpConfig, McpServers, ServerConfig};
use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

/// The filesystem server on `dir`: the one `.ci/mcp-servers` installed, else npx's.
fn filesystem(dir: &Path) -> ServerConfig {
    let dir = dir.display().to_string();
    match std::env::var_os("AGENT_TREE_MCP_SERVERS") {
        Some(installed) => {
            let bin = PathBuf::from(installed).join("node_modules/.bin/mcp-server-filesystem");
            ServerConfig::stdio(bin.display().to_string(), [dir])
        }
        None => ServerConfig::stdio(
            "npx",
            [
                "-y".to_owned(),
                "@modelcontextprotocol/server-filesystem".to_owned(),
                dir,
            ],
        ),
    }
}

fn definitions() -> Vec<AgentDefinition> {
    vec![
        AgentDefinition::new("editor", "You summarise the notes.")
            .with_tools(ToolSet::only(["mcp__docs"]))
            .with_allowed_subagents(SubagentAllowance::only(["writer"])),
        AgentDefinition::new("writer", "You write what you are given.").with_tools(ToolSet::only(
            ["mcp__out__write_file", "mcp__out__read_text_file"],
        )),
    ]
}

fn model(notes: &Path, out: &Path) -> ScriptedModel {
    let summary = out.join("summary.txt").display().to_string();
    ScriptedModel::new()
        .script(
            "editor",
            [
                Turn::calls([
                    Call::tool(
                        "mcp__docs__list_directory",
                        json!({"path": notes.display().to_string()}),
                    ),
                    Call::tool(
                        "mcp__docs__read_text_file",
                        json!({"path": notes.join("notes.txt").display().to_string()}),
                    ),
                ]),
                Turn::spawn("writer", "Write the summary: three points, all fixed."),
                Turn::answer("summary written"),
            ],
        )
        .script(
            "writer",
            [
                Turn::calls([Call::tool(
                    "mcp__out__write_file",
                    json!({"path": summary, "content": "three points, all fixed\n"}),
                )]),
                Turn::calls([Call::tool(
                    "mcp__out__read_text_file",
                    json!({"path": summary}),
                )]),
                Turn::answer("written"),
            ],
        )
}

/// The text of the result of `agent_type`'s call of `tool`.
fn result_of(model: &ScriptedModel, agent_type: &str, tool: &str) -> Option<String> {
    model
        .log()
        .into_iter()
        .filter(|call| call.agent_type == agent_type)
        .flat_map(|call| call.answered_calls())
        .find(|(call, _)| call.name == tool)
        .map(|(_, result)| result.content)
}

/// Whether process `pid` is alive: it exists and is not a zombie (where there is no
/// `/proc`, the process groups' count, `McpServers::live_processes`, is the check).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with(['Z', 'X']))
}

/// A fresh directory under the system's temporary one.
fn fresh_dir(name: &str) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "agent-tree-mcp-tools-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    // The server compares paths after resolving links (macOS's /tmp is one).
    dir.canonicalize()
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("mcp_tools: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<String, Box<dyn std::error::Error>> {
    let notes = fresh_dir("notes")?;
    let out = fresh_dir("out")?;
    std::fs::write(
        notes.join("notes.txt"),
        "1. the login bug\n2. the slow page\n3. the typo\n",
    )?;
    let config = McpConfig::new()
        .server("docs", filesystem(&notes))?
        .server("out", filesystem(&out))?;
    let servers = McpServers::start(config).await?;
    let pids: Vec<u32> = ["docs", "out"]
        .iter()
        .filter_map(|s| servers.pid(s))
        .collect();
    let model = model(&notes, &out);
    let tree = Tree::builder()
        .catalog(Catalog::new(definitions())?)
        .model(model.clone())
        .tool_source(servers.clone())?
        .build()
        .await?;
    let outcome = tree
        .run(SpawnRequest::new("editor", "Summarise the notes."))
        .await?;
    tree.idle().await;

    let check = |claim: bool, what: &str| {
        if claim {
            Ok(())
        } else {
            Err(format!("claim failed: {what}"))
        }
    };
    check(
        outcome.text.as_deref() == Some("summary written"),
        "the editor completes",
    )?;
    let listing = result_of(&model, "editor", "mcp__docs__list_directory").unwrap_or_default();
    check(
        listing.contains("[FILE] notes.txt"),
        "the editor lists the notes directory",
    )?;
    let read = result_of(&model, "editor", "mcp__docs__read_text_file").unwrap_or_default();
    check(
        read.starts_with("1. the login bug"),
        "the editor reads the notes through the server",
    )?;
    let on_disk = std::fs::read_to_string(out.join("summary.txt")).unwrap_or_default();
    check(
        on_disk == "three points, all fixed\n",
        "the writer's file is on disk",
    )?;
    let reread = result_of(&model, "writer", "mcp__out__read_text_file").unwrap_or_default();
    check(reread == on_disk, "the writer reads back what it wrote")?;
    let offered = |agent_type: &str| -> Vec<String> {
        let call = model.log().into_iter().find(|c| c.agent_type == agent_type);
        call.map(|c| {
            c.tools
                .into_iter()
                .filter(|t| t.starts_with("mcp__"))
                .collect()
        })
        .unwrap_or_default()
    };
    check(
        offered("editor")
            .iter()
            .all(|t| t.starts_with("mcp__docs__")),
        "the editor holds only the notes server's tools",
    )?;
    check(
        offered("writer") == ["mcp__out__read_text_file", "mcp__out__write_file"],
        "the writer holds exactly the two tools it names",
    )?;
    check(pids.len() == 2, "each server runs as a process of its own")?;

    let report = tree.shutdown().await;
    check(report.killed.is_empty(), "the shutdown is graceful")?;
    check(
        pids.iter().all(|&pid| !alive(pid)),
        "no server pid is alive",
    )?;
    let left = servers.live_processes();
    let stats = servers.stats();
    Ok(format!(
        "mcp: servers={} calls={} errors={} processes_left={left}",
        stats.servers, stats.calls, stats.errors
    ))
}
