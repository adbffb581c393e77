//! [`McpServers`]: the servers a tree is given, started and supervised, offering their
//! tools to the tree as a [`ToolSource`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_tree_actors::{BoxFuture, Tool, ToolSource};
use agent_tree_protocol::ToolSpec;
use tokio::time::Instant;

use crate::config::{McpConfig, StartFailure};
use crate::error::McpError;
use crate::names::tool_name;
use crate::server::Server;
use crate::tool::McpTool;

/// The most bytes of a tool's description offered to the model.
const MAX_DESCRIPTION_BYTES: usize = 8_000;

/// A tree's MCP servers, each connection supervised by a task of its own (restarted within
/// its intensity, see [`ServerConfig`](crate::ServerConfig)), their tools offered as
/// `mcp__<server>__<tool>`. Give them to the tree with
/// [`TreeBuilder::tool_source`](agent_tree_actors::TreeBuilder::tool_source); the tree ends
/// them with itself, within its shutdown's one deadline, and kills them when it is dropped.
/// Dropping the last clone without a tree kills them too.
///
/// ```no_run
/// use agent_tree_actors::Tree;
/// use agent_tree_actors::testkit::ScriptedModel;
/// use agent_tree_mcp::{McpConfig, McpServers};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let servers = McpServers::start(McpConfig::from_mcp_json(".mcp.json")?).await?;
/// let tree = Tree::builder()
///     .model(ScriptedModel::new())
///     .tool_source(servers.clone())?
///     .build()
///     .await?;
/// // ... agents whose definitions name `mcp__fs__read_file` may call it ...
/// tree.shutdown().await;
/// assert_eq!(servers.live_processes(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct McpServers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    servers: Vec<Arc<Server>>,
    tools: Vec<Arc<McpTool>>,
    failed: Vec<FailedServer>,
}

/// A server that did not come up (under [`StartFailure::Report`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedServer {
    /// Its name.
    pub server: String,
    /// Why.
    pub reason: String,
}

/// What the servers have done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpStats {
    /// Servers that came up at the start (one down for good later still counts).
    pub servers: usize,
    /// Tool calls made.
    pub calls: u64,
    /// Of those, the ones that failed (a result the server marked `isError` included).
    pub errors: u64,
}

impl McpServers {
    /// Starts every server of `config`, each under its own supervisor, and lists their
    /// tools. Servers start concurrently, each within its start timeout.
    ///
    /// # Errors
    ///
    /// [`McpError::Start`] for the first server (by name) that did not come up, under
    /// [`StartFailure::Fail`]; every server started is ended then.
    pub async fn start(config: McpConfig) -> Result<McpServers, McpError> {
        let started: Vec<_> = config
            .servers()
            .map(|(name, server)| Server::start(name, server.clone()))
            .collect();
        // A start given up on (its future dropped) kills what it started.
        let mut starting = Starting(started.iter().map(|(s, _)| s.clone()).collect());
        let mut servers = Vec::new();
        let mut tools = Vec::new();
        let mut failed = Vec::new();
        let mut error = None;
        for (server, first) in started {
            let listed = first
                .await
                .unwrap_or_else(|_| Err("its supervisor ended".to_owned()));
            match listed {
                Ok(listed) => {
                    tools.extend(offered(&server, listed, &tools));
                    servers.push(server);
                }
                Err(reason) => {
                    tracing::warn!(server = %server.name, "MCP server did not start: {reason}");
                    if config.start_failure() == StartFailure::Fail && error.is_none() {
                        error = Some(McpError::Start {
                            server: server.name.to_string(),
                            reason: reason.clone(),
                        });
                    }
                    failed.push(FailedServer {
                        server: server.name.to_string(),
                        reason,
                    });
                    servers.push(server);
                }
            }
        }
        starting.0.clear();
        let started = McpServers {
            inner: Arc::new(Inner {
                servers,
                tools,
                failed,
            }),
        };
        match error {
            Some(error) => Err(error),
            None => Ok(started),
        }
    }

    /// The names the tools are offered under, `mcp__<server>__<tool>`, server by server.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.inner.tools.iter().map(|tool| tool.spec.name.as_str())
    }

    /// The servers that did not come up (under [`StartFailure::Report`]).
    pub fn failed(&self) -> &[FailedServer] {
        &self.inner.failed
    }

    /// The calls made so far, and how many failed.
    pub fn stats(&self) -> McpStats {
        let up = self.inner.servers.len() - self.inner.failed.len();
        self.inner.servers.iter().fold(
            McpStats {
                servers: up,
                ..McpStats::default()
            },
            |mut stats, server| {
                stats.calls += server.calls.load(Ordering::Relaxed);
                stats.errors += server.errors.load(Ordering::Relaxed);
                stats
            },
        )
    }

    /// The pid of server `name`'s process while it is up (stdio servers only). A restart
    /// gives it a new one.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.inner
            .servers
            .iter()
            .find(|server| &*server.name == name)
            .and_then(|server| server.pid())
    }

    /// How many processes of every process group the servers ever started are alive:
    /// 0 once the tree has ended them (the check by pid, zombies not counted).
    pub fn live_processes(&self) -> usize {
        self.inner
            .servers
            .iter()
            .map(|server| server.live_processes())
            .sum()
    }

    /// Ends every server by `deadline`: stdin closed, SIGTERM to its process group halfway
    /// there, SIGKILL at it. [`Tree::shutdown`](agent_tree_actors::Tree::shutdown) does
    /// this for the servers given to the tree.
    pub async fn shutdown(&self, deadline: Instant) {
        let mut ending = tokio::task::JoinSet::new();
        for server in &self.inner.servers {
            let server = server.clone();
            ending.spawn(async move { server.stop(deadline).await });
        }
        while ending.join_next().await.is_some() {}
    }

    /// Kills every server's processes now.
    pub fn kill(&self) {
        for server in &self.inner.servers {
            server.kill();
        }
    }
}

/// The servers of a start in progress, killed if the start is dropped.
struct Starting(Vec<Arc<Server>>);

impl Drop for Starting {
    fn drop(&mut self) {
        for server in &self.0 {
            server.kill();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for server in &self.servers {
            server.kill();
        }
    }
}

impl ToolSource for McpServers {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.inner
            .tools
            .iter()
            .map(|tool| tool.clone() as Arc<dyn Tool>)
            .collect()
    }

    fn shutdown(&self, deadline: Instant) -> BoxFuture<'_, ()> {
        Box::pin(McpServers::shutdown(self, deadline))
    }

    fn kill(&self) {
        McpServers::kill(self);
    }
}

/// The tools `server` lists, as offered: those whose name is too long for providers, or
/// the same as one offered already once made provider-safe, are left out with a warning.
fn offered(
    server: &Arc<Server>,
    listed: Vec<rmcp::model::Tool>,
    taken: &[Arc<McpTool>],
) -> Vec<Arc<McpTool>> {
    let mut tools: Vec<Arc<McpTool>> = Vec::new();
    for tool in listed {
        let Some(name) = tool_name(&server.name, &tool.name) else {
            tracing::warn!(server = %server.name, tool = %tool.name, "MCP tool left out: `mcp__<server>__<tool>` is longer than the 64 characters providers take");
            continue;
        };
        if taken.iter().chain(&tools).any(|t| t.spec.name == name) {
            tracing::warn!(server = %server.name, tool = %tool.name, "MCP tool left out: another tool of the server is offered as `{name}` already");
            continue;
        }
        let description = tool.description.as_deref().unwrap_or_default().to_owned();
        let description = crate::content::shortened(description, MAX_DESCRIPTION_BYTES);
        let schema = serde_json::Value::Object((*tool.input_schema).clone());
        tools.push(Arc::new(McpTool {
            server: server.clone(),
            remote: tool.name.to_string(),
            spec: ToolSpec::new(name, description, schema),
        }));
    }
    tools
}
