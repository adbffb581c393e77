//! What the MCP tests share: the servers (npm's reference servers, which `.ci/mcp-servers`
//! installs, and the hostile fixture servers beside this file), and trees around them.

use std::path::PathBuf;

use agent_tree::mcp::{McpConfig, McpServers, ServerConfig};
use agent_tree::protocol::{AgentDefinition, Message, ToolSet};
use agent_tree::testkit::ScriptedModel;
use agent_tree::{Catalog, Tree};

/// How to get the servers, for every failure that lacks them.
const INSTALL: &str = "the MCP tests need node and the npm reference servers: run \
    `eval \"$(.ci/mcp-servers env)\"` (it installs @modelcontextprotocol/server-everything \
    and server-filesystem into ~/.cache/agent-tree and sets AGENT_TREE_MCP_SERVERS), then \
    `cargo test --features mcp --test mcp`";

/// The directory `.ci/mcp-servers` installed the npm servers into.
fn installed() -> PathBuf {
    let dir = std::env::var_os("AGENT_TREE_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("AGENT_TREE_MCP_SERVERS is not set: {INSTALL}"));
    assert!(
        dir.join("node_modules/.bin").is_dir(),
        "{} holds no servers: {INSTALL}",
        dir.display()
    );
    dir
}

/// An npm server's program.
fn bin(name: &str) -> String {
    let path = installed().join("node_modules/.bin").join(name);
    assert!(path.exists(), "{} is missing: {INSTALL}", path.display());
    path.display().to_string()
}

/// `@modelcontextprotocol/server-everything`'s program.
pub(crate) fn everything_bin() -> String {
    bin("mcp-server-everything")
}

/// `@modelcontextprotocol/server-everything` over stdio.
pub(crate) fn everything() -> ServerConfig {
    ServerConfig::stdio(everything_bin(), ["stdio"])
}

/// `@modelcontextprotocol/server-everything` over streamable HTTP on `port`, as a command
/// (its standard error piped: it says there when it listens).
pub(crate) fn everything_http_command(port: u16) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(bin("mcp-server-everything"));
    command
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

/// `@modelcontextprotocol/server-filesystem` on `dir`.
pub(crate) fn filesystem(dir: &std::path::Path) -> ServerConfig {
    ServerConfig::stdio(bin("mcp-server-filesystem"), [dir.display().to_string()])
}

/// The hostile fixture server in `mode` (`well`, `stubborn`, `flood`, `garbage`, `mute`,
/// `crash`, `odd`), run by node.
pub(crate) fn hostile(mode: &str) -> ServerConfig {
    installed();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixtures/hostile.js");
    ServerConfig::stdio("node", [script.display().to_string(), mode.to_owned()])
}

/// A fresh directory of its own under the system's temporary one.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "agent-tree-mcp-{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts `servers` (each `(name, config)`), failing the test if one does not come up.
pub(crate) async fn start(
    servers: impl IntoIterator<Item = (&'static str, ServerConfig)>,
) -> McpServers {
    let mut config = McpConfig::new();
    for (name, server) in servers {
        config = config.server(name, server).unwrap();
    }
    McpServers::start(config)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// An agent type `agent_type` holding `tools`.
pub(crate) fn agent(agent_type: &str, tools: &[&str]) -> AgentDefinition {
    AgentDefinition::new(agent_type, "").with_tools(ToolSet::only(tools.iter().copied()))
}

/// A tree of `definitions` on `model`, with `servers`' tools.
pub(crate) async fn tree(
    servers: &McpServers,
    model: &ScriptedModel,
    definitions: Vec<AgentDefinition>,
) -> Tree {
    Tree::builder()
        .catalog(Catalog::new(definitions).unwrap())
        .model(model.clone())
        .tool_source(servers.clone())
        .unwrap()
        .build()
        .await
        .unwrap()
}

/// Every tool result the model was shown, in order (each once).
pub(crate) fn tool_results(model: &ScriptedModel) -> Vec<Message> {
    let mut seen = Vec::new();
    let mut results = Vec::new();
    for call in model.log() {
        for (_, result) in call.answered_calls() {
            let key = (call.agent, result.tool_call_id.clone());
            if !seen.contains(&key) {
                seen.push(key);
                results.push(result);
            }
        }
    }
    results
}

/// The text of the only tool result `model` was shown.
pub(crate) fn only_result(model: &ScriptedModel) -> String {
    let results = tool_results(model);
    assert_eq!(results.len(), 1, "{results:?}");
    results[0].content.clone()
}

/// Whether process `pid` is alive (a zombie is not).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// A mark of its own, to find the processes started with it in their environment
/// ([`marked`]).
pub(crate) fn mark(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The environment variable [`marked`] looks for.
pub(crate) const MARK: &str = "AGENT_TREE_TEST_MARK";

/// The live processes whose environment holds `MARK=mark` (zombies are not).
pub(crate) fn marked(mark: &str) -> Vec<u32> {
    let needle = format!("{MARK}={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// Waits (within a bound) until no process marked `mark` is alive: nothing tells a
/// process that isn't their parent when killed processes are gone.
pub(crate) async fn all_gone(mark: &str) {
    let gone = async {
        while !marked(mark).is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(5), gone)
        .await
        .is_err()
    {
        panic!("processes {:?} were left behind", marked(mark));
    }
}
