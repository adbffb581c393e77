//! The `Model` trait: one language-model turn, for any LLM client.
//!
//! A turn gets the agent's conversation and the tools it is offered, and returns text and/or
//! tool calls plus the turn's usage. The agent's actor holds the turn's future and polls it
//! between its messages (no task of its own), so the agent keeps handling steers, child
//! results and aborts while a call is in flight; an abort drops the turn's future at its
//! next await point.

use std::fmt;
use std::sync::Arc;

use agent_tree_protocol::{
    AgentDefinition, AgentId, EventKind, FinishReason, Message, Sampling, ToolCall, ToolSpec, Usage,
};
use parking_lot::Mutex;

use crate::error::ModelError;
use crate::shared::SharedRef;
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
    /// Which incarnation of the agent (1 for the first): a supervisor's restart counts up,
    /// an owner's resume keeps it (it continues the same conversation).
    pub incarnation: u32,
    /// Which run of the agent (1 for the first): each restart and each resume counts up.
    pub run: u32,
    /// The turn's number within this run, from 1.
    pub turn: u32,
    /// The conversation so far (task, assistant turns, tool results, steers).
    pub messages: Arc<[Message]>,
    /// The tools the agent is offered.
    pub tools: Arc<[ToolSpec]>,
    /// Where a streaming model reports text as it arrives and usage as it learns it.
    pub sink: TurnSink,
    /// How to sample: the definition's sampling laid over the tree's
    /// ([`TreeConfig::sampling`](crate::TreeConfig::sampling)). An adapter sends each field
    /// set under its API's own name, and its own builder settings only where this leaves
    /// a field unset. Shared: every request of an agent whose definition sets no sampling
    /// holds the tree's one copy.
    pub sampling: Arc<Sampling>,
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
            run: 1,
            turn: 1,
            messages: Arc::from([]),
            tools: Arc::from([]),
            sink: TurnSink::default(),
            sampling: Arc::default(),
        }
    }

    /// The same request at `depth`.
    pub fn with_depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// The same request as turn `turn` of incarnation `incarnation`, in its run of the same
    /// number (a run no resume made; [`ModelRequest::with_run`] sets another).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agent_tree_actors::ModelRequest;
    /// # use agent_tree_protocol::{AgentDefinition, AgentId, Message};
    /// let request = ModelRequest::new(AgentId::new(3), Arc::new(AgentDefinition::new("w", "")))
    ///     .with_depth(2)
    ///     .with_turn(2, 4)
    ///     .with_messages(vec![Message::user("go")]);
    /// assert_eq!((request.depth, request.incarnation, request.run, request.turn), (2, 2, 2, 4));
    /// assert_eq!(request.messages.len(), 1);
    /// ```
    pub fn with_turn(mut self, incarnation: u32, turn: u32) -> Self {
        self.incarnation = incarnation;
        self.run = incarnation;
        self.turn = turn;
        self
    }

    /// The same request in run `run` (a resume counts a run up, not the incarnation).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agent_tree_actors::ModelRequest;
    /// # use agent_tree_protocol::{AgentDefinition, AgentId};
    /// // Resumed once after its first incarnation.
    /// let request = ModelRequest::new(AgentId::new(3), Arc::new(AgentDefinition::new("w", "")))
    ///     .with_run(2);
    /// assert_eq!((request.incarnation, request.run), (1, 2));
    /// ```
    pub fn with_run(mut self, run: u32) -> Self {
        self.run = run;
        self
    }

    /// The same request reporting to `sink` (for a test of a streaming adapter: see
    /// [`TurnSink::recording`]).
    pub fn with_sink(mut self, sink: TurnSink) -> Self {
        self.sink = sink;
        self
    }

    /// The same request with `messages`.
    pub fn with_messages(mut self, messages: impl Into<Arc<[Message]>>) -> Self {
        self.messages = messages.into();
        self
    }

    /// The same request with `sampling`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agent_tree_actors::ModelRequest;
    /// # use agent_tree_protocol::{AgentDefinition, AgentId, Sampling};
    /// let request = ModelRequest::new(AgentId::new(1), Arc::new(AgentDefinition::new("w", "")))
    ///     .with_sampling(Sampling::default().with_seed(42));
    /// assert_eq!(request.sampling.seed, Some(42));
    /// ```
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = Arc::new(sampling);
        self
    }

    /// The same request with `tools`.
    pub fn with_tools(mut self, tools: impl Into<Arc<[ToolSpec]>>) -> Self {
        self.tools = tools.into();
        self
    }
}

/// What a model turn returns.
///
/// ```
/// use agent_tree_actors::ModelResponse;
/// use agent_tree_protocol::{FinishReason, Usage};
/// let cut = ModelResponse::text("The first half")
///     .with_finish_reason(FinishReason::Length)
///     .with_usage(Usage::tokens(10, 4096));
/// assert_eq!(cut.finish_reason, FinishReason::Length);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ModelResponse {
    /// The model's text. With no tool calls, this is the agent's final answer.
    pub text: String,
    /// Tool calls to run before the next turn; they run concurrently.
    pub tool_calls: Vec<ToolCall>,
    /// What the turn consumed.
    pub usage: Usage,
    /// Why the model stopped. A turn cut off at [`FinishReason::Length`] without tool calls
    /// is not a final answer: the tree's `length_cutoff` setting continues or fails it.
    pub finish_reason: FinishReason,
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

    /// A turn with both text and tool calls.
    pub fn text_and_calls(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        ModelResponse {
            text: text.into(),
            tool_calls,
            ..ModelResponse::default()
        }
    }

    /// The same response with `usage`.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The same response with `finish_reason`.
    pub fn with_finish_reason(mut self, finish_reason: FinishReason) -> Self {
        self.finish_reason = finish_reason;
        self
    }
}

/// Where a model reports what it learns during a call: the text as it streams, and the usage
/// so far. Every [`ModelRequest`] carries one ([`ModelRequest::sink`]).
///
/// A model that does not stream ignores it. A streaming model calls [`TurnSink::text`] with
/// each text delta and [`TurnSink::usage`] whenever the provider reports usage. What that
/// buys:
///
/// * An agent aborted mid-turn keeps the text streamed so far as its partial output, and a
///   turn that fails keeps it too: of a retried turn, the text of its last attempt that
///   streamed any (a server that died after 6 KB, and refused the retries, leaves those
///   6 KB).
/// * A call that is aborted, or fails without usage of its own, is billed the usage last
///   reported here (the provider billed it). A call that returns is billed its response's
///   usage; a call that fails with usage in its [`ModelError`] is billed that.
/// * With the tree's `stream_events` setting on, deltas reach event subscribers as
///   `text_delta` events, joined into pieces of at least [`TurnSink::EVENT_BYTES`] bytes so
///   a busy stream stays a few events. Each names the attempt of the turn it belongs to;
///   all of a failed attempt's text is announced before its `retrying` event.
///
/// Cheap to clone: clones report to the same turn. A sink made with `default()` records
/// nothing.
///
/// ```
/// use agent_tree_actors::TurnSink;
/// use agent_tree_protocol::Usage;
/// let sink = TurnSink::recording();
/// sink.text("Hel");
/// sink.text("lo");
/// sink.usage(Usage::tokens(5, 2));
/// assert_eq!(sink.streamed_text(), "Hello");
/// assert_eq!(sink.reported_usage(), Usage::tokens(5, 2));
/// assert_eq!(TurnSink::default().streamed_text(), "");
/// ```
#[derive(Clone, Default)]
pub struct TurnSink {
    inner: Option<Arc<SinkInner>>,
}

/// One turn's streamed state. The lock is a leaf: only these fields are touched under it,
/// never an await, and an event is announced after it is released.
struct SinkInner {
    state: Mutex<SinkState>,
    /// Where `text_delta` events go, when the tree streams events (boxed: most trees
    /// don't, and every turn of every agent has a sink).
    events: Option<Box<SinkEvents>>,
}

#[derive(Default)]
struct SinkState {
    /// The text the current attempt streamed.
    text: String,
    /// Text not yet announced as an event (only when the sink has `events`).
    pending: String,
    /// The usage last reported; boxed, as most models report none until they return.
    usage: Option<Box<Usage>>,
    /// Attempts of the turn before the current one (the current is `retries + 1`).
    retries: u32,
    /// The text of the last earlier attempt that streamed any: the turn's partial output
    /// while the current attempt has streamed nothing.
    kept: String,
}

impl SinkState {
    /// The current attempt's number, from 1.
    fn attempt(&self) -> u32 {
        self.retries.saturating_add(1)
    }
}

/// Where a sink's `text_delta` events go: its agent's run `run`, turn `turn` (refused once
/// that run settled: nothing of an agent follows its terminal event).
struct SinkEvents {
    shared: SharedRef,
    agent: AgentId,
    run: u32,
    turn: u32,
}

impl fmt::Debug for TurnSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnSink")
            .field("recording", &self.inner.is_some())
            .finish_non_exhaustive()
    }
}

impl TurnSink {
    /// The fewest bytes of text one `text_delta` event carries (the last of a turn may be
    /// shorter).
    pub const EVENT_BYTES: usize = 256;

    /// A sink that keeps what it is told, for tests of a streaming adapter.
    pub fn recording() -> Self {
        TurnSink {
            inner: Some(Arc::new(SinkInner {
                state: Mutex::new(SinkState::default()),
                events: None,
            })),
        }
    }

    /// The runtime's sink for one turn; `events` when the tree streams events.
    pub(crate) fn for_turn(events: Option<(SharedRef, AgentId, u32, u32)>) -> Self {
        TurnSink {
            inner: Some(Arc::new(SinkInner {
                state: Mutex::new(SinkState::default()),
                events: events.map(|(shared, agent, run, turn)| {
                    Box::new(SinkEvents {
                        shared,
                        agent,
                        run,
                        turn,
                    })
                }),
            })),
        }
    }

    /// Reports text the model streamed.
    pub fn text(&self, delta: &str) {
        let Some(inner) = &self.inner else { return };
        let ready = {
            let mut state = inner.state.lock();
            state.text.push_str(delta);
            if inner.events.is_some() {
                state.pending.push_str(delta);
            }
            (state.pending.len() >= TurnSink::EVENT_BYTES)
                .then(|| (state.attempt(), std::mem::take(&mut state.pending)))
        };
        if let Some((attempt, text)) = ready {
            inner.announce(attempt, text);
        }
    }

    /// Reports the usage of the call so far (it replaces what was reported before).
    pub fn usage(&self, usage: Usage) {
        if let Some(inner) = &self.inner {
            inner.state.lock().usage = Some(Box::new(usage));
        }
    }

    /// The text streamed so far (by the current attempt, when the runtime retries the
    /// turn).
    pub fn streamed_text(&self) -> String {
        self.inner
            .as_ref()
            .map(|inner| inner.state.lock().text.clone())
            .unwrap_or_default()
    }

    /// The usage last reported.
    pub fn reported_usage(&self) -> Usage {
        self.inner
            .as_ref()
            .and_then(|inner| inner.state.lock().usage.as_deref().copied())
            .unwrap_or_default()
    }

    /// Starts the next attempt of the same turn: the text and usage of a failed attempt are
    /// not the next one's (its text was announced: [`flush`](Self::flush) comes first). Its
    /// text, if it streamed any, is kept as the turn's partial output until a later attempt
    /// streams some.
    pub(crate) fn next_attempt(&self) {
        if let Some(inner) = &self.inner {
            let mut state = inner.state.lock();
            let text = std::mem::take(&mut state.text);
            if !text.is_empty() {
                state.kept = text;
            }
            state.pending.clear();
            state.usage = None;
            state.retries = state.retries.saturating_add(1);
        }
    }

    /// The text to keep as the turn's partial output: the current attempt's, else (it
    /// streamed nothing) the last earlier attempt's that streamed any.
    pub(crate) fn partial_text(&self) -> String {
        let Some(inner) = &self.inner else {
            return String::new();
        };
        let state = inner.state.lock();
        if state.text.is_empty() {
            state.kept.clone()
        } else {
            state.text.clone()
        }
    }

    /// Announces the text not yet announced (at the end of a call).
    pub(crate) fn flush(&self) {
        let Some(inner) = &self.inner else { return };
        let (attempt, text) = {
            let mut state = inner.state.lock();
            (state.attempt(), std::mem::take(&mut state.pending))
        };
        if !text.is_empty() {
            inner.announce(attempt, text);
        }
    }

    /// Whether usage was reported and not yet taken.
    pub(crate) fn has_usage(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|inner| inner.state.lock().usage.is_some())
    }

    /// Takes the text not yet announced, as the `text_delta` announcing it, for a settle
    /// that announces it itself (under the registry lock, before the terminal event).
    pub(crate) fn take_pending(&self) -> Option<EventKind> {
        let inner = self.inner.as_ref()?;
        let events = inner.events.as_ref()?;
        let (attempt, text) = {
            let mut state = inner.state.lock();
            (state.attempt(), std::mem::take(&mut state.pending))
        };
        (!text.is_empty()).then_some(EventKind::TextDelta {
            turn: events.turn,
            attempt,
            text,
        })
    }

    /// Takes the usage last reported, so it is billed once.
    pub(crate) fn take_usage(&self) -> Usage {
        self.inner
            .as_ref()
            .and_then(|inner| inner.state.lock().usage.take())
            .map(|usage| *usage)
            .unwrap_or_default()
    }
}

impl SinkInner {
    fn announce(&self, attempt: u32, text: String) {
        if let Some(events) = &self.events {
            events.shared.registry.announce_run(
                events.agent,
                events.run,
                EventKind::TextDelta {
                    turn: events.turn,
                    attempt,
                    text,
                },
            );
        }
    }
}

/// A language model, as the tree sees it.
///
/// Implement it for any LLM client; the `agent-tree-models` crate has adapters for
/// OpenAI-compatible servers and Anthropic. This is the contract between a model and the
/// runtime, in the manner of tower's `Service`:
///
/// * **Concurrency.** `turn` takes `&self` and is called concurrently, by every agent of the
///   tree at once (one call per agent at a time). Share connection pools inside; keep no
///   per-agent state in the model, the request carries everything.
/// * **Cancellation.** The returned future is dropped when the agent is aborted, shut down or
///   escalated. Dropping it must cancel the call (an HTTP client's request future does: the
///   connection is closed). Nothing after the last await point is guaranteed to run.
/// * **Usage.** Report the provider's usage in [`ModelResponse::usage`], converted to the
///   [`Usage`] contract: `input_tokens` excludes cached prompt tokens (subtract them for
///   OpenAI and Gemini), `reasoning_tokens` is the part of `output_tokens` spent reasoning.
///   For a failed call, put what the provider reported in [`ModelError::usage`]; a streaming
///   model reports usage to [`ModelRequest::sink`] as it learns it, so an aborted call is
///   billed too.
/// * **Failures.** Return a [`ModelError`] of the right kind: `RateLimited` (with the
///   provider's retry-after) and `Transient` are retried by the tree's retry policy
///   (`TreeConfig::retry`), with backoff, under the same turn number; `ContextLength`,
///   `Auth`, `InvalidRequest` and `Provider` fail the agent with reason `model_error`. Do not
///   retry inside the model as well.
/// * **Finish reason.** Set [`ModelResponse::finish_reason`]. `Length` without tool calls is
///   continued or failed by the tree's `length_cutoff` setting, never taken as an answer.
/// * **Panics.** A panic in `turn` or its future is caught: the agent fails with reason
///   `panicked`, the rest of the tree carries on.
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
    /// A [`ModelError`]: retried by the tree's retry policy when its kind is retryable,
    /// else the agent fails with reason `model_error`.
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>>;

    /// The context window, in tokens, of the model `request` would be sent to, when known:
    /// the runtime then never continues a cut-off answer with a request that cannot fit
    /// (the prompt it last reported plus the output limit). `None` (the default) when
    /// unknown.
    fn context_window(&self, request: &ModelRequest) -> Option<u32> {
        let _ = request;
        None
    }
}
