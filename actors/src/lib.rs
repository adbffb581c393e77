//! The runtime of `agent-tree`: every agent is a ractor actor linked under the actor that
//! spawned it, and the supervision links are the ownership tree.
//!
//! Most users want the facade crate `agent-tree`, which re-exports this crate and
//! `agent-tree-protocol` with a prelude. See `docs/semantics.md` for the guarantees.
#![forbid(unsafe_code)]

mod agent;
mod catalog;
#[cfg(feature = "cluster")]
pub mod cluster;
mod config;
#[cfg(test)]
mod cost_tests;
mod error;
mod events;
mod hooks;
mod journal;
mod model;
mod msg;
mod permits;
mod placement;
mod policy;
mod registry;
mod root;
mod shared;
mod shutdown;
mod spawn;
mod supervision;
#[cfg(any(test, feature = "testkit"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;
mod tool;
mod tree;
mod util;
mod wait;

pub use catalog::{
    Catalog, CatalogError, FileNote, LoadedCatalog, MAX_AGENT_DIR_DEPTH, MAX_AGENT_FILE_BYTES,
    MAX_FRONTMATTER_EXPANDED_BYTES, MAX_FRONTMATTER_NODES, NoteKind, SkipReason, Skipped,
    ToolProblem, parse_agent_file, parse_agent_file_with_notes,
};
pub use config::{
    ConfigError, ControlScope, DEFAULT_LENGTH_CONTINUATIONS, DEFAULT_MAX_CHILDREN_PER_AGENT,
    DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_DEPTH, DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MAX_SPAWNS_PER_AGENT, DEFAULT_MAX_SPAWNS_PER_TREE, DEFAULT_MAX_STEER_BYTES,
    DEFAULT_MAX_STEERS_PER_RUN, DEFAULT_MAX_TOOL_CALLS_PER_TURN, DEFAULT_MAX_TOTAL_AGENTS,
    DEFAULT_SHUTDOWN_GRACE, INHERIT_CONTEXT_MAX_DEPTH, RetryPolicy, SHUTDOWN_KILL_WAIT, TreeConfig,
};
pub use error::{ControlError, ModelError, SpawnError, ToolError, TreeError};
pub use events::EventStream;
pub use hooks::{Hook, HookContext, HookError, Question, QuestionHandler};
pub use journal::{
    Durability, FileJournal, JournalConfig, JournalError, JournalInUseError, JournalReader,
    JournalStore, read_journal,
};
pub use model::{Model, ModelRequest, ModelResponse, TurnSink};
pub use msg::SteerReceipt;
pub use policy::restart::{Intensity, RestartBudget};
pub use shutdown::ShutdownReport;
pub use tool::{
    ABORT_TOOL, AGENT_TOOL, ASK_OWNER_TOOL, FnTool, GET_RESULT_TOOL, ORCHESTRATION_TOOLS,
    RESERVED_TOOLS, STEER_TOOL, Tool, ToolContext, ToolNameError, ToolSource, Toolbox, WAIT_TOOL,
};
pub use tree::{AgentHandle, Tree, TreeBuilder};
pub use util::BoxFuture;
