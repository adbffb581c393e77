//! The adapters and the tree against a real model server: llama.cpp's `llama-server`
//! serving Gemma 3 270M, started by each test as a child process on 127.0.0.1.
//!
//! Behind the `real-server` feature, so the offline `cargo test --workspace` neither builds
//! nor runs it. `.ci/run` builds the server (`.ci/llama-server`) and runs:
//!
//! ```text
//! eval "$(.ci/llama-server env)"
//! cargo test -p agent-tree-models --features real-server --test real_server
//! ```
//!
//! Without the server's environment every test fails, saying how to start it.
//!
//! Every scenario runs through both adapters (llama-server answers Chat Completions at
//! `/v1/chat/completions` and Anthropic's Messages at `/v1/messages`), and each checks the
//! tree's usage against the server's own counters (`/metrics`).

mod rig;
mod scenarios;
mod server;
