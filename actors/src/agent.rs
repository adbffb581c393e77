//! The agent actor: one ractor actor per agent, linked under its owner's actor.
//!
//! An agent's run is a loop of phases, each ended by a message, never by awaiting inside a
//! handler:
//!
//! ```text
//! Thinking (model turn task) ──► Acting (tool calls, children) ──► Thinking ...
//!        │ final answer / failure / abort                 │
//!        ▼                                                ▼
//!      Ending (live children abort or drain) ──► settled: registry, owner told, actor stops
//! ```
//!
//! # Invariants
//!
//! * Model turns and user tools run as tasks that select on the agent's cancellation token,
//!   so an abort cancels them at once, at every depth (children's tokens are children of the
//!   owner's).
//! * The first model call happens only after the actor has checked its token, so an agent
//!   aborted before or while it was constructed never calls the model and never spawns.
//! * An agent settles only when every non-detached child is terminal: subtrees settle bottom
//!   up, and ractor's own kill cascade (which skips `post_stop`) never meets a live child.
//! * The registry is written before the owner is told: usage, then the terminal status, then
//!   [`AgentMsg::ChildSettled`].

mod orchestration;

use std::collections::VecDeque;
use std::sync::Arc;

use agent_tree_protocol::{
    AgentDefinition, AgentId, AgentStatus, EndReason, EventKind, Message, Outcome, SettlePolicy,
    ToolCall, ToolSpec,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::capability::{self, Capabilities};
use crate::model::ModelRequest;
use crate::msg::{AgentMsg, SteerReceipt, TurnResult};
use crate::shared::{Branch, SharedRef};
use crate::supervision;
use crate::tool::ToolContext;
use crate::util::CatchUnwind;

/// The ractor actor behind every agent.
#[derive(Debug)]
pub(crate) struct AgentActor;

/// What an agent is started with.
#[derive(Debug)]
pub(crate) struct AgentArgs {
    pub(crate) id: AgentId,
    pub(crate) depth: u32,
    pub(crate) owner: ActorRef<AgentMsg>,
    pub(crate) definition: Arc<AgentDefinition>,
    pub(crate) branch: Arc<Branch>,
    pub(crate) prompt: String,
    pub(crate) token: CancellationToken,
    pub(crate) settle: SettlePolicy,
    pub(crate) owner_capabilities: Option<Capabilities>,
    pub(crate) shared: SharedRef,
}

/// An agent's state.
#[derive(Debug)]
pub(crate) struct AgentState {
    /// Identity and place: fixed for the agent's life.
    id: AgentId,
    depth: u32,
    owner: ActorRef<AgentMsg>,
    definition: Arc<AgentDefinition>,
    branch: Arc<Branch>,
    shared: SharedRef,
    /// Cancelled when the agent (or an ancestor, unless detached) is aborted.
    token: CancellationToken,
    settle: SettlePolicy,
    capabilities: Capabilities,
    /// Tool specs offered to the model, computed once from `capabilities`.
    offered: Arc<[ToolSpec]>,
    max_turns: u32,
    /// The conversation (the system prompt is sent separately).
    conversation: Vec<Message>,
    /// Model turns taken in this run.
    turns: u32,
    phase: Phase,
    /// Owned children, in start order.
    children: Vec<Child>,
    /// Steers waiting for the next turn boundary.
    steers: VecDeque<String>,
    /// The last text the model produced, kept as partial output.
    last_text: String,
    /// The task that turns a cancelled token into [`AgentMsg::Cancelled`].
    watcher: Option<AbortHandle>,
}

#[derive(Debug)]
enum Phase {
    /// Constructed; the first turn starts in `post_start`.
    Idle,
    /// A model turn task runs.
    Thinking { turn: u32, task: AbortHandle },
    /// The tool calls of turn `turn` are being answered, in call order.
    Acting { turn: u32, calls: Vec<PendingCall> },
    /// The run ended with `outcome`; waiting for live children before settling.
    Ending { outcome: Outcome },
    /// Settled; the actor is stopping.
    Done,
}

#[derive(Debug)]
struct PendingCall {
    call_id: String,
    /// The result text and whether it is an error, once known.
    result: Option<(String, bool)>,
    /// A child whose settling answers this call (foreground spawn, waiting result read).
    waits_on: Option<AgentId>,
    /// A user tool's task.
    task: Option<AbortHandle>,
}

#[derive(Debug)]
struct Child {
    id: AgentId,
    actor: ActorRef<AgentMsg>,
    detached: bool,
    settled: bool,
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<AgentMsg>,
        args: AgentArgs,
    ) -> Result<AgentState, ActorProcessingErr> {
        let AgentArgs {
            id,
            depth,
            owner,
            definition,
            branch,
            prompt,
            token,
            settle,
            owner_capabilities,
            shared,
        } = args;
        let capabilities = capability::capabilities(
            &definition,
            depth,
            branch.max_depth,
            shared.toolbox.names(),
            owner_capabilities.as_ref(),
        );
        let mut offered: Vec<ToolSpec> = capabilities
            .user_tools
            .iter()
            .filter_map(|name| shared.toolbox.get(name).map(|t| t.spec()))
            .collect();
        offered.extend(
            capabilities
                .orchestration
                .iter()
                .map(|t| orchestration::spec(t)),
        );
        let max_turns = definition
            .max_turns
            .unwrap_or_else(|| capability::default_max_turns(depth));
        shared.registry.started(id, myself.get_cell());
        let watcher = {
            let token = token.clone();
            let myself = myself.clone();
            tokio::spawn(async move {
                token.cancelled().await;
                let _ = myself.cast(AgentMsg::Cancelled);
            })
            .abort_handle()
        };
        Ok(AgentState {
            id,
            depth,
            owner,
            definition,
            branch,
            shared,
            token,
            settle,
            capabilities,
            offered: offered.into(),
            max_turns,
            conversation: vec![Message::user(prompt)],
            turns: 0,
            phase: Phase::Idle,
            children: Vec::new(),
            steers: VecDeque::new(),
            last_text: String::new(),
            watcher: Some(watcher),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.next_turn(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        if matches!(state.phase, Phase::Done) {
            // Settled: only a steer's reply port still deserves an answer (dropping it tells
            // the sender the agent is gone).
            return Ok(());
        }
        match message {
            AgentMsg::TurnFinished { turn, result } => {
                state.on_turn_finished(&myself, turn, result).await
            }
            AgentMsg::ToolFinished {
                turn,
                call_id,
                result,
            } => {
                let (text, is_error) = match result {
                    Ok(text) => (text, false),
                    Err(error) => (error, true),
                };
                state.answer_call(turn, &call_id, text, is_error);
                state.after_answer(&myself);
            }
            AgentMsg::Cancelled => state.abort(&myself),
            AgentMsg::Steer { text, reply } => {
                state.steers.push_back(text);
                if let Some(reply) = reply {
                    let _ = reply.send(SteerReceipt::Delivered);
                }
            }
            AgentMsg::ChildSettled { child } => state.on_child_settled(&myself, child),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<AgentMsg>,
        event: SupervisionEvent,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop because a child ended (ractor's default): settle the child if it died
        // without settling itself, and carry on.
        if let Some(child) = supervision::settle_lost_child(&state.shared.registry, &event) {
            state.on_child_settled(&myself, child);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(watcher) = state.watcher.take() {
            watcher.abort();
        }
        if !matches!(state.phase, Phase::Done) {
            // Stopped from outside without settling: end the tasks, and record that the
            // children ractor is about to kill were killed.
            state.token.cancel();
            state.cancel_tasks();
            let outcome = Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown)
                .with_partial(state.last_text.clone());
            state.shared.registry.kill_descendants(state.id);
            if state.shared.registry.settle(state.id, outcome) {
                let _ = state.owner.cast(AgentMsg::ChildSettled { child: state.id });
            }
        }
        Ok(())
    }
}

impl AgentState {
    /// Starts the next model turn, or ends the run when the token is cancelled or the turns
    /// are used up.
    fn next_turn(&mut self, myself: &ActorRef<AgentMsg>) {
        if self.token.is_cancelled() {
            self.abort(myself);
            return;
        }
        if self.turns >= self.max_turns {
            let outcome = Outcome::failed(
                EndReason::MaxTurns,
                format!("no final answer within max_turns {}", self.max_turns),
            )
            .with_partial(self.last_text.clone());
            self.end_run(myself, outcome);
            return;
        }
        while let Some(text) = self.steers.pop_front() {
            self.conversation.push(Message::user(text));
            self.shared.registry.announce(self.id, EventKind::Steered);
        }
        self.turns += 1;
        let turn = self.turns;
        let request = ModelRequest {
            agent: self.id,
            agent_type: self.definition.name.clone(),
            depth: self.depth,
            incarnation: 1,
            turn,
            model: self.definition.model.clone(),
            system: self.definition.prompt.clone(),
            messages: self.conversation.clone(),
            tools: self.offered.to_vec(),
        };
        let model = self.shared.model.clone();
        let shared = self.shared.clone();
        let token = self.token.clone();
        let myself = myself.clone();
        let id = self.id;
        let task = tokio::spawn(async move {
            let result = tokio::select! {
                biased;
                () = token.cancelled() => TurnResult::Cancelled,
                r = CatchUnwind::new(model.turn(request)) => match r {
                    Ok(Ok(response)) => TurnResult::Response(response),
                    Ok(Err(error)) => TurnResult::Failed(error),
                    Err(panic) => TurnResult::Panicked(panic),
                },
            };
            // Usage is recorded here, once, before the agent hears of the turn: nothing the
            // agent does afterwards (abort, settle) can lose it or count it twice.
            if let TurnResult::Response(response) = &result {
                shared.registry.add_usage(id, response.usage);
            }
            let _ = myself.cast(AgentMsg::TurnFinished { turn, result });
        });
        self.phase = Phase::Thinking {
            turn,
            task: task.abort_handle(),
        };
    }

    async fn on_turn_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        result: TurnResult,
    ) {
        if !matches!(self.phase, Phase::Thinking { turn: t, .. } if t == turn) {
            return;
        }
        match result {
            TurnResult::Cancelled => self.abort(myself),
            TurnResult::Failed(error) => {
                let outcome = Outcome::failed(EndReason::ModelError, error.message)
                    .with_partial(self.last_text.clone());
                self.end_run(myself, outcome);
            }
            TurnResult::Panicked(panic) => {
                let outcome =
                    Outcome::failed(EndReason::Panicked, format!("model panicked: {panic}"))
                        .with_partial(self.last_text.clone());
                self.end_run(myself, outcome);
            }
            TurnResult::Response(response) => {
                if self.token.is_cancelled() {
                    self.abort(myself);
                    return;
                }
                if !response.text.is_empty() {
                    self.last_text.clone_from(&response.text);
                }
                let calls = response.tool_calls;
                self.conversation
                    .push(Message::assistant(response.text.clone(), calls.clone()));
                if calls.is_empty() {
                    self.end_run(myself, Outcome::completed(response.text));
                    return;
                }
                self.phase = Phase::Acting {
                    turn,
                    calls: calls
                        .iter()
                        .map(|c| PendingCall {
                            call_id: c.id.clone(),
                            result: None,
                            waits_on: None,
                            task: None,
                        })
                        .collect(),
                };
                for call in calls {
                    self.dispatch(myself, turn, call).await;
                }
                self.after_answer(myself);
            }
        }
    }

    /// Starts one tool call. Orchestration tools are answered here or when a child settles;
    /// user tools run as tasks.
    async fn dispatch(&mut self, myself: &ActorRef<AgentMsg>, turn: u32, call: ToolCall) {
        if orchestration::is_orchestration(&call.name) && self.capabilities.holds(&call.name) {
            orchestration::dispatch(self, myself, turn, call).await;
            return;
        }
        if !self.capabilities.user_tools.iter().any(|t| t == &call.name) {
            let text = format!("tool {:?} is not available to this agent", call.name);
            self.answer_call(turn, &call.id, text, true);
            return;
        }
        let Some(tool) = self.shared.toolbox.get(&call.name).cloned() else {
            self.answer_call(
                turn,
                &call.id,
                format!("tool {:?} is not available", call.name),
                true,
            );
            return;
        };
        let context = ToolContext {
            agent: self.id,
            agent_type: self.definition.name.clone(),
            depth: self.depth,
            call_id: call.id.clone(),
        };
        let token = self.token.clone();
        let reply_to = myself.clone();
        let call_id = call.id.clone();
        let task = tokio::spawn(async move {
            let result = tokio::select! {
                biased;
                () = token.cancelled() => return,
                r = CatchUnwind::new(tool.call(context, call.input)) => match r {
                    Ok(Ok(text)) => Ok(text),
                    Ok(Err(error)) => Err(error.message),
                    Err(panic) => Err(format!("tool panicked: {panic}")),
                },
            };
            let _ = reply_to.cast(AgentMsg::ToolFinished {
                turn,
                call_id,
                result,
            });
        });
        if let Some(pending) = self.pending_call(turn, &call.id) {
            pending.task = Some(task.abort_handle());
        }
    }

    fn pending_call(&mut self, turn: u32, call_id: &str) -> Option<&mut PendingCall> {
        match &mut self.phase {
            Phase::Acting { turn: t, calls } if *t == turn => calls
                .iter_mut()
                .find(|c| c.call_id == call_id && c.result.is_none()),
            _ => None,
        }
    }

    /// Records the result of one call of turn `turn`.
    fn answer_call(&mut self, turn: u32, call_id: &str, text: String, is_error: bool) {
        if let Some(pending) = self.pending_call(turn, call_id) {
            pending.result = Some((text, is_error));
            pending.waits_on = None;
            pending.task = None;
        }
    }

    /// When every call of the turn is answered, adds the results in call order and starts the
    /// next turn.
    fn after_answer(&mut self, myself: &ActorRef<AgentMsg>) {
        if self.token.is_cancelled() {
            self.abort(myself);
            return;
        }
        let Phase::Acting { calls, .. } = &mut self.phase else {
            return;
        };
        if calls.iter().any(|c| c.result.is_none()) {
            return;
        }
        for call in calls.drain(..) {
            let (text, is_error) = call.result.unwrap_or_default();
            self.conversation
                .push(Message::tool_result(call.call_id, text, is_error));
        }
        self.next_turn(myself);
    }

    fn on_child_settled(&mut self, myself: &ActorRef<AgentMsg>, child: AgentId) {
        let Some(entry) = self.children.iter_mut().find(|c| c.id == child) else {
            return;
        };
        if entry.settled {
            return;
        }
        entry.settled = true;
        let outcome = self.shared.registry.outcome(child);
        if let Phase::Acting { calls, .. } = &mut self.phase {
            for call in calls.iter_mut().filter(|c| c.waits_on == Some(child)) {
                call.result = Some(orchestration::result_text(child, outcome.as_ref()));
                call.waits_on = None;
            }
        }
        match self.phase {
            Phase::Acting { .. } => self.after_answer(myself),
            Phase::Ending { .. } => self.try_settle(myself),
            _ => {}
        }
    }

    /// The agent's own run ended with `outcome`: deal with live children per the settle
    /// policy, then settle once they are terminal.
    fn end_run(&mut self, myself: &ActorRef<AgentMsg>, outcome: Outcome) {
        self.cancel_tasks();
        let aborting =
            outcome.status != AgentStatus::Completed || self.settle == SettlePolicy::AbortChildren;
        if aborting {
            for child in self.children.iter().filter(|c| !c.settled && !c.detached) {
                let _ = self.shared.registry.abort(child.id, EndReason::OwnerEnded);
            }
        } else if self.children.iter().any(|c| !c.settled && !c.detached) {
            self.shared.registry.completing(self.id);
        }
        self.phase = Phase::Ending { outcome };
        self.try_settle(myself);
    }

    /// Aborted (the token fired): cancel in-flight work and end the run as aborted, keeping
    /// partial output. Children were cancelled with the token.
    fn abort(&mut self, myself: &ActorRef<AgentMsg>) {
        let reason = self
            .shared
            .registry
            .abort_reason(self.id)
            .unwrap_or(EndReason::OwnerEnded);
        match &self.phase {
            Phase::Done => {}
            Phase::Ending { outcome } if outcome.status == AgentStatus::Aborted => {}
            _ => {
                let outcome = Outcome::ended(AgentStatus::Aborted, reason)
                    .with_partial(self.last_text.clone());
                self.end_run(myself, outcome);
            }
        }
    }

    fn cancel_tasks(&mut self) {
        match &mut self.phase {
            Phase::Thinking { task, .. } => task.abort(),
            Phase::Acting { calls, .. } => {
                for task in calls.iter_mut().filter_map(|c| c.task.take()) {
                    task.abort();
                }
            }
            _ => {}
        }
    }

    /// Settles once every non-detached child is terminal: registry first, then the owner,
    /// then the actor stops.
    fn try_settle(&mut self, myself: &ActorRef<AgentMsg>) {
        if self.children.iter().any(|c| !c.settled && !c.detached) {
            return;
        }
        let Phase::Ending { outcome } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return;
        };
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        tracing::debug!(agent = %self.id, status = %outcome.status, "agent settled");
        if self.shared.registry.settle(self.id, outcome) {
            let _ = self.owner.cast(AgentMsg::ChildSettled { child: self.id });
        }
        myself.stop(None);
    }
}
