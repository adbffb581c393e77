//! Model adapters for agent-tree: OpenAI-compatible Chat Completions and Anthropic Messages.
//!
//! Each adapter implements [`agent_tree_actors::Model`] over a thin layer on `reqwest`
//! (rustls, HTTP/1.1), so a tree can run on a real provider:
//!
//! * [`OpenAiCompat`] (feature `openai`) speaks Chat Completions: OpenAI itself, and by base
//!   URL Ollama, vLLM, llama.cpp server, LM Studio, OpenRouter and other compatible servers.
//! * [`Anthropic`] (feature `anthropic`) speaks the Anthropic Messages API.
//!
//! Both are built with a builder (base URL, API key, default model, max output tokens,
//! timeouts for connecting, a whole call, a stream's first byte and the gaps between its
//! pieces, the context window, extra headers, streaming on or off; Anthropic's prompt
//! caching), send each agent's sampling under the API's own names, convert the provider's
//! usage to the [`Usage`](agent_tree_protocol::Usage) contract, and map failures to
//! [`ModelError`](agent_tree_actors::ModelError) kinds the tree's retry policy acts on. They
//! never retry themselves. `docs/models.md` in the repository has the rules in full.
//!
//! An application depends on `agent-tree` with the feature it needs (`openai`,
//! `anthropic`) and writes `agent_tree::models::OpenAiCompat`, `agent_tree::Tree` and
//! `agent_tree::protocol::SpawnRequest` (or `agent_tree::prelude::*`) where this crate's own
//! example below, compiled against the crates it is built with, names
//! `agent_tree_models`, `agent_tree_actors` and `agent_tree_protocol`.
//!
//! ```no_run
//! use agent_tree_actors::{Catalog, Tree};
//! use agent_tree_models::OpenAiCompat;
//! use agent_tree_protocol::{AgentDefinition, SpawnRequest};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let model = OpenAiCompat::builder()
//!     .base_url("http://127.0.0.1:11434/v1") // a local Ollama
//!     .model("qwen2.5:7b")
//!     .build()?;
//! let tree = Tree::builder()
//!     .catalog(Catalog::new(vec![AgentDefinition::new("writer", "You write haiku.")])?)
//!     .model(model)
//!     .build()
//!     .await?;
//! let outcome = tree.run(SpawnRequest::new("writer", "A haiku about actors")).await?;
//! println!("{}", outcome.summary());
//! # Ok(()) }
//! ```

#[cfg(any(feature = "openai", feature = "anthropic"))]
mod http;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod settings;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod sse;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod tools;

#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(feature = "openai")]
mod openai;

#[cfg(feature = "anthropic")]
pub use anthropic::{Anthropic, AnthropicBuilder};
#[cfg(feature = "openai")]
pub use openai::{OpenAiCompat, OpenAiCompatBuilder};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use settings::{
    BuildError, DEFAULT_CHUNK_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT,
};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use tools::RAW_ARGUMENTS_KEY;
