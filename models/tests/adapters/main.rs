//! The adapters against a local server speaking the providers' wire formats: one test
//! binary, one module per adapter, and the tests that run them inside a real tree.

mod agent_files_on_disk;
mod anthropic;
mod common;
mod coordinator_and_workers;
mod desk;
mod openai;
mod openai_streamed_tool_calls;
mod provider_error_kinds;
mod research_desk;
mod routed;
mod server;
mod streams_as_servers_send_them;
mod tree;
