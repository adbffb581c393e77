//! The `Model` trait: one language-model turn, for any LLM client.
//!
//! A turn gets the agent's conversation and the tools it is offered, and returns text and/or
//! tool calls plus the turn's usage. The runtime runs every turn as its own cancellable task,
//! so the agent keeps handling steers, child results and aborts while a call is in flight;
//! an abort drops the turn's future at its next await point.

use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, AgentId, Message, ToolCall, ToolSpec, Usage};

use crate::error::ModelError;
use crate::util::BoxFuture;

/// What a model turn is given.
///
/// Everything in it is shared, never copied per turn: the agent's definition, the
/// conversation as of this turn (the same `Arc` the runtime keeps for a resume) and the tool
/// specs, built once per distinct tool set of the tree.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The agent taking the turn.
    pub agent: AgentId,
    /// Its definition: type, system prompt, model name and the rest.
    pub definition: Arc<AgentDefinition>,
    /// Its depth.
    pub depth: u32,
    /// Which run of the agent (1 for the first).
    pub incarnation: u32,
    /// The turn's number within this run, from 1.
    pub turn: u32,
    /// The conversation so far (task, assistant turns, tool results, steers).
    pub messages: Arc<[Message]>,
    /// The tools the agent is offered.
    pub tools: Arc<[ToolSpec]>,
}

impl ModelRequest {
    /// The agent's type.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agent_tree_actors::ModelRequest;
    /// # use agent_tree_protocol::{AgentDefinition, AgentId};
    /// let request = ModelRequest::new(AgentId::new(1), Arc::new(AgentDefinition::new("writer", "Write.")));
    /// assert_eq!(request.agent_type(), "writer");
    /// assert_eq!(request.system(), "Write.");
    /// assert_eq!(request.model(), None);
    /// ```
    pub fn agent_type(&self) -> &str {
        &self.definition.name
    }

    /// The system prompt.
    pub fn system(&self) -> &str {
        &self.definition.prompt
    }

    /// The model name the definition asks for, if any.
    pub fn model(&self) -> Option<&str> {
        self.definition.model.as_deref()
    }

    /// A first-turn request of `agent` with `definition`, no messages and no tools: for
    /// calling a [`Model`] directly (in tests of an adapter).
    pub fn new(agent: AgentId, definition: Arc<AgentDefinition>) -> Self {
        ModelRequest {
            agent,
            definition,
            depth: 1,
            incarnation: 1,
            turn: 1,
            messages: Arc::from([]),
            tools: Arc::from([]),
        }
    }

    /// The same request with `messages`.
    pub fn with_messages(mut self, messages: impl Into<Arc<[Message]>>) -> Self {
        self.messages = messages.into();
        self
    }

    /// The same request with `tools`.
    pub fn with_tools(mut self, tools: impl Into<Arc<[ToolSpec]>>) -> Self {
        self.tools = tools.into();
        self
    }
}

/// What a model turn returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelResponse {
    /// The model's text. With no tool calls, this is the agent's final answer.
    pub text: String,
    /// Tool calls to run before the next turn; they run concurrently.
    pub tool_calls: Vec<ToolCall>,
    /// What the turn consumed.
    pub usage: Usage,
}

impl ModelResponse {
    /// A final answer.
    pub fn text(text: impl Into<String>) -> Self {
        ModelResponse {
            text: text.into(),
            ..ModelResponse::default()
        }
    }

    /// A turn that calls tools.
    pub fn calls(tool_calls: Vec<ToolCall>) -> Self {
        ModelResponse {
            tool_calls,
            ..ModelResponse::default()
        }
    }

    /// The same response with `usage`.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }
}

/// A language model, as the tree sees it.
///
/// Implement it for any LLM client. The future may borrow `self`; the runtime keeps the model
/// alive (in an `Arc`) for as long as the turn runs, and drops the future when the agent is
/// aborted.
///
/// ```
/// use agent_tree_actors::{BoxFuture, Model, ModelError, ModelRequest, ModelResponse};
/// use agent_tree_protocol::Usage;
///
/// struct Echo;
/// impl Model for Echo {
///     fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
///         Box::pin(async move {
///             let last = request.messages.last().map(|m| m.content.clone()).unwrap_or_default();
///             Ok(ModelResponse::text(last).with_usage(Usage::tokens(1, 1)))
///         })
///     }
/// }
/// ```
pub trait Model: Send + Sync + 'static {
    /// Takes one turn.
    ///
    /// # Errors
    ///
    /// A [`ModelError`] fails the agent with reason `model_error`.
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>>;
}
