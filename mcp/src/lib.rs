//! Tools from MCP servers for agent-tree: the servers people already run, reached with the
//! official Rust SDK (`rmcp`) and supervised like everything else in the tree.
//!
//! A tree is given servers by name ([`McpConfig`], by code or from Claude Code's
//! `.mcp.json`); [`McpServers::start`] starts each under a supervisor task of its own and
//! lists its tools, offered as `mcp__<server>__<tool>` so agent files' `tools:` lists work
//! unchanged (`mcp__<server>` names every tool of a server). The tree owns them through its
//! one seam for such plug-ins, [`ToolSource`](agent_tree_actors::ToolSource):
//!
//! * **Supervised.** A stdio server that exits, closes its connection or stops answering
//!   pings (never pinged while a call is out) is restarted within its restart intensity;
//!   past it, its tools fail at once saying why. An HTTP server that cannot be reached is
//!   tried again with backoff, and at once when a call asks. A server that never comes up
//!   fails the start or is reported ([`StartFailure`]).
//! * **Never left behind.** A stdio server runs in a process group of its own.
//!   `Tree::shutdown` ends every server within its one deadline (stdin closed, SIGTERM to
//!   the group halfway, SIGKILL at the deadline); dropping the tree kills them.
//! * **Calls** have a timeout per server and per tool; an agent aborted, killed or shut down
//!   mid-call cancels its request (`notifications/cancelled`) and never waits for the reply.
//!   Results are text the model reads: text as it is, structured content as JSON, images,
//!   audio and blobs described, cut to a size cap; `isError` is a tool error; progress
//!   notifications are the calling agent's `tool_progress` events. Each call runs in the
//!   agent's `execute_tool` span, with `server` set to the server's name.
//! * **Capabilities.** An agent holds an MCP tool only when its definition names it (or its
//!   server); attenuation covers MCP tools like any other; orchestration tools' names cannot
//!   be taken.

#![forbid(unsafe_code)]

mod config;
mod content;
mod error;
mod http;
mod names;
mod process;
mod server;
mod servers;
mod tool;

pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_RESTARTS, DEFAULT_PING_INTERVAL,
    DEFAULT_RESTART_PERIOD, DEFAULT_START_TIMEOUT, McpConfig, PING_TIMEOUT, ServerConfig,
    StartFailure, Transport,
};
pub use error::McpError;
pub use names::{PREFIX, tool_name};
pub use servers::{FailedServer, McpServers, McpStats};
