//! Tools from MCP servers, against real servers: npm's reference servers
//! (`@modelcontextprotocol/server-everything`, `server-filesystem`), which `.ci/mcp-servers`
//! installs, and hostile fixture servers (`fixtures/hostile.js`, run by node). Every test
//! starts its own server processes; they fail, saying how to install the servers, when
//! those are missing.
//!
//! `eval "$(.ci/mcp-servers env)"; cargo test --features mcp --test mcp`

mod calls;
mod capabilities;
mod lifetimes;
mod supervision;
mod support;
mod transports;
