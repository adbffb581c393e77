//! The adapters against a local server speaking the providers' wire formats: one test
//! binary, one module per adapter, and the tests that run them inside a real tree.

mod anthropic;
mod common;
mod openai;
mod openai_streamed_tool_calls;
mod provider_error_kinds;
mod review23;
mod review29;
mod routed;
mod server;
mod tree;
mod trial2;
mod trial3;
