//! User tools: what an agent can call besides the orchestration tools the tree injects.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use agent_tree_protocol::{AgentId, ToolSpec};

use crate::error::ToolError;
use crate::util::BoxFuture;

mod source;
pub use source::ToolSource;
pub(crate) use source::ToolSources;

/// Names of the delegation tools the tree injects into agents that may delegate.
pub const ORCHESTRATION_TOOLS: [&str; 5] = [
    AGENT_TOOL,
    GET_RESULT_TOOL,
    STEER_TOOL,
    ABORT_TOOL,
    WAIT_TOOL,
];
/// Names user tools may not take.
pub const RESERVED_TOOLS: [&str; 6] = [
    AGENT_TOOL,
    GET_RESULT_TOOL,
    STEER_TOOL,
    ABORT_TOOL,
    WAIT_TOOL,
    ASK_OWNER_TOOL,
];
/// Spawns (or resumes) a child.
pub const AGENT_TOOL: &str = "Agent";
/// Reads a child's result, optionally waiting.
pub const GET_RESULT_TOOL: &str = "get_subagent_result";
/// Steers a child at its next turn boundary (or answers its pending question).
pub const STEER_TOOL: &str = "steer_subagent";
/// Waits for a set of children under a wait policy (`all_settled` or `fail_fast`).
pub const WAIT_TOOL: &str = "wait_subagents";
/// Aborts a child and its subtree.
pub const ABORT_TOOL: &str = "abort_subagent";
/// Asks the agent's direct owner a question and waits for the answer. Offered to every
/// agent below depth 1 unless its definition denies it, and to top-level agents when the
/// application has a question handler (`TreeBuilder::on_question`).
pub const ASK_OWNER_TOOL: &str = "ask_owner";

/// Who is calling a tool.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolContext {
    /// The calling agent.
    pub agent: AgentId,
    /// Its type.
    pub agent_type: String,
    /// Its depth.
    pub depth: u32,
    /// The model's id for this call.
    pub call_id: String,
    /// Where [`ToolContext::report_progress`] goes: the calling run, while it runs.
    progress: Option<ProgressSink>,
}

/// The run a tool call belongs to, for its progress events. Holds the tree weakly: a
/// context a tool keeps past its call keeps nothing of the tree alive.
#[derive(Clone)]
pub(crate) struct ProgressSink {
    pub(crate) shared: std::sync::Weak<crate::shared::Shared>,
    pub(crate) run: u32,
    /// The tool, by the name the model called it.
    pub(crate) tool: String,
}

impl fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressSink")
            .field("run", &self.run)
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The context of call `call_id` by `agent` of `agent_type` at `depth`: for calling a
    /// [`Tool`] directly (in a test of the tool).
    ///
    /// ```
    /// use agent_tree_actors::{FnTool, Tool, ToolContext};
    /// use agent_tree_protocol::AgentId;
    /// # tokio_test_block_on(async {
    /// let echo = FnTool::new("echo", "echoes", |ctx: ToolContext, input| async move {
    ///     Ok(format!("{} says {input}", ctx.agent))
    /// });
    /// let context = ToolContext::new(AgentId::new(7), "writer", 1, "call_1");
    /// let out = echo.call(context, serde_json::json!("hi")).await.unwrap();
    /// assert_eq!(out, "a7 says \"hi\"");
    /// # });
    /// # fn tokio_test_block_on(f: impl std::future::Future<Output = ()>) {
    /// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    /// # }
    /// ```
    pub fn new(
        agent: AgentId,
        agent_type: impl Into<String>,
        depth: u32,
        call_id: impl Into<String>,
    ) -> Self {
        ToolContext {
            agent,
            agent_type: agent_type.into(),
            depth,
            call_id: call_id.into(),
            progress: None,
        }
    }

    /// The context of an agent's call, whose progress reports reach its tree's events.
    pub(crate) fn for_run(
        agent: AgentId,
        agent_type: String,
        depth: u32,
        call_id: String,
        progress: ProgressSink,
    ) -> Self {
        ToolContext {
            agent,
            agent_type,
            depth,
            call_id,
            progress: Some(progress),
        }
    }

    /// Reports how far the call is: a `tool_progress` event of the calling agent, with
    /// `progress` of `total` (when known) and what it is doing. Dropped once the calling
    /// run has ended, for a context made with [`ToolContext::new`], and for a value that
    /// is not a finite number.
    ///
    /// ```
    /// use agent_tree_actors::{FnTool, ToolContext};
    /// let slow = FnTool::new("slow", "counts to three", |ctx: ToolContext, _input| async move {
    ///     for step in 1..=3 {
    ///         ctx.report_progress(f64::from(step), Some(3.0), Some(format!("step {step}")));
    ///     }
    ///     Ok("done".to_owned())
    /// });
    /// # let _ = slow;
    /// ```
    pub fn report_progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some(sink) = &self.progress else {
            return;
        };
        let Some(progress) = number(progress) else {
            return;
        };
        let total = total.and_then(number);
        let Some(shared) = sink.shared.upgrade() else {
            return;
        };
        let kind = agent_tree_protocol::EventKind::ToolProgress {
            call_id: self.call_id.clone(),
            tool: sink.tool.clone(),
            progress,
            total,
            message,
        };
        shared.registry.announce_run(self.agent, sink.run, kind);
    }
}

/// A tool an agent may call.
///
/// Calls run as tasks, concurrently with the agent's other calls of the same turn, and are
/// cancelled when the agent is aborted. A panic inside a tool is an error result, not a crash.
pub trait Tool: Send + Sync + 'static {
    /// The tool as offered to the model.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool.
    ///
    /// # Errors
    ///
    /// A [`ToolError`] is returned to the model as an error result.
    fn call(
        &self,
        context: ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'_, Result<String, ToolError>>;

    /// The server that runs the tool, for a tool that calls one (an MCP tool's server):
    /// recorded as `server` on the call's `execute_tool` span. `None` by default.
    fn server(&self) -> Option<&str> {
        None
    }
}

/// A tool made from a closure.
///
/// ```
/// use agent_tree_actors::{FnTool, Tool};
/// let read = FnTool::new("read", "reads a file", |_ctx, input| async move {
///     Ok(format!("contents of {input}"))
/// });
/// assert_eq!(read.spec().name, "read");
/// ```
pub struct FnTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F> fmt::Debug for FnTool<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl<F, Fut> FnTool<F>
where
    F: Fn(ToolContext, serde_json::Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
{
    /// A tool named `name` that runs `f`, taking any JSON input.
    pub fn new(name: impl Into<String>, description: impl Into<String>, f: F) -> Self {
        FnTool {
            spec: ToolSpec::new(name, description, serde_json::json!({ "type": "object" })),
            f,
        }
    }

    /// The same tool with an input schema.
    pub fn with_schema(mut self, schema: serde_json::Value) -> Self {
        self.spec.input_schema = schema;
        self
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(ToolContext, serde_json::Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
{
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(
        &self,
        context: ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin((self.f)(context, input))
    }
}

/// The user tools of a tree, by name.
#[derive(Clone, Default)]
pub struct Toolbox {
    /// Each tool with its spec, asked of it once, when it was added.
    tools: BTreeMap<String, (Arc<dyn Tool>, ToolSpec)>,
}

impl fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}

/// A tool name a toolbox refuses: reserved for an orchestration tool (or `Task`, which agent
/// files use as Claude Code does, to grant subagents), already taken, or one
/// the providers refuse (they accept 1 to 64 of `A-Z a-z 0-9 _ -`: OpenAI's and Anthropic's
/// rule, so a name such as `web.search` would fail every model turn that offers it).
///
/// ```
/// use agent_tree_actors::{FnTool, Toolbox};
/// let tool = |name: &str| FnTool::new(name, "Searches.", |_ctx, _input| async { Ok(String::new()) });
/// let mut tools = Toolbox::new();
/// tools.insert(tool("web_search"))?;
/// let err = tools.insert(tool("web.search")).unwrap_err();
/// assert_eq!(err.name, "web.search");
/// assert!(err.to_string().contains("A-Z a-z 0-9 _ -"), "{err}");
/// assert!(tools.insert(tool("web_search")).is_err());
/// # Ok::<(), agent_tree_actors::ToolNameError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool name {name:?} {reason}")]
#[non_exhaustive]
pub struct ToolNameError {
    /// The name refused.
    pub name: String,
    /// Why, in words.
    pub reason: &'static str,
}

/// Whether providers accept `name` as a tool's name: 1 to 64 ASCII letters, digits, `_`
/// and `-`.
fn provider_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Toolbox {
    /// An empty toolbox.
    pub fn new() -> Self {
        Toolbox::default()
    }

    /// Adds a tool.
    ///
    /// # Errors
    ///
    /// [`ToolNameError`] if the name is an orchestration tool's, already taken, or not one
    /// the providers accept (1 to 64 of `A-Z a-z 0-9 _ -`).
    pub fn insert(&mut self, tool: impl Tool) -> Result<(), ToolNameError> {
        self.insert_shared(Arc::new(tool))
    }

    /// As [`Toolbox::insert`], for a tool already shared (a [`ToolSource`]'s).
    pub(crate) fn insert_shared(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolNameError> {
        let spec = tool.spec();
        let reason = if RESERVED_TOOLS.contains(&spec.name.as_str()) {
            "is an orchestration tool's"
        } else if agent_tree_protocol::runtime::is_delegation_entry(&spec.name) {
            "is Claude Code's delegation entry (`Task`), which agent files use to grant subagents"
        } else if self.tools.contains_key(&spec.name) {
            "is already taken"
        } else if !provider_name(&spec.name) {
            "is not one providers accept: 1 to 64 of A-Z a-z 0-9 _ -"
        } else {
            ""
        };
        if !reason.is_empty() {
            return Err(ToolNameError {
                name: spec.name,
                reason,
            });
        }
        self.tools.insert(spec.name.clone(), (tool, spec));
        Ok(())
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|(tool, _)| tool)
    }

    /// The spec of the tool named `name`, as it gave it when it was added.
    pub(crate) fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|(_, spec)| spec)
    }

    /// Every tool name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

/// `value` as a JSON number: a whole one as an integer (`3`, not `3.0`); `None` when it is
/// not finite.
fn number(value: f64) -> Option<serde_json::Number> {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        // Exact: a whole number below 2^53 converts without loss.
        #[allow(clippy::cast_possible_truncation, reason = "whole and within 2^53")]
        return Some(serde_json::Number::from(value as i64));
    }
    serde_json::Number::from_f64(value)
}

#[cfg(test)]
mod tests;
