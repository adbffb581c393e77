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
//! * Model turns, user tools and waits run as tasks that select on the agent's cancellation
//!   token, so an abort cancels them at once, at every depth (children's tokens are
//!   children of the owner's).
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

use crate::config::SHUTDOWN_KILL_WAIT;
use crate::error::ControlError;
use crate::hooks::{self, HookContext};
use crate::model::ModelRequest;
use crate::msg::{AgentMsg, SteerReceipt, TurnResult};
use crate::policy::capability::{self, Capabilities};
use crate::shared::{Branch, SharedRef};
use crate::spawn::PendingStart;
use crate::supervision::{self, ChildSupervisor, Verdict};
use crate::tool::ToolContext;
use crate::util::{CatchUnwind, OffWorker};

/// The ractor actor behind every agent.
#[derive(Debug)]
pub(crate) struct AgentActor;

/// What an agent is started with.
#[derive(Debug)]
pub(crate) struct AgentArgs {
    pub(crate) id: AgentId,
    pub(crate) depth: u32,
    pub(crate) owner: ActorRef<AgentMsg>,
    pub(crate) start: PendingStart,
    pub(crate) token: CancellationToken,
    pub(crate) shared: SharedRef,
}

/// An agent's state.
#[derive(Debug)]
pub(crate) struct AgentState {
    /// Identity and place: fixed for the agent's life.
    id: AgentId,
    owner_id: AgentId,
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
    /// Text for the conversation at the next turn boundary, in arrival order: steers (which
    /// emit `steered`) and notices (questions from children, background completions).
    inbox: VecDeque<Inbound>,
    /// The last text the model produced, kept as partial output.
    last_text: String,
    /// The task that turns a cancelled token into [`AgentMsg::Cancelled`].
    watcher: Option<AbortHandle>,
    /// Which run of the agent this is (1 for the first; restarts count up).
    incarnation: u32,
    /// Which run of the agent this is: 1 for the first, +1 for each restart or resume.
    run: u32,
    /// The model turn whose task has not reported back yet, with its cancellation token.
    turn_in_flight: Option<(u32, CancellationToken)>,
    /// Restart decisions for its children.
    supervisor: ChildSupervisor,
    /// Children whose `ask_owner` question has not been answered by a steer yet.
    open_questions: std::collections::BTreeSet<AgentId>,
}

#[derive(Debug)]
enum Inbound {
    Steer(String),
    Notice(String),
}

#[derive(Debug)]
enum Phase {
    /// Constructed; the first turn starts in `post_start`.
    Idle,
    /// The start hooks run; the first model call waits for them.
    Starting { task: AbortHandle },
    /// A shutdown reached the agent: its shutdown hooks run (bounded by the deadline), then
    /// the run ends as aborted, or with `held`, the outcome its run had already ended with.
    Stopping {
        task: AbortHandle,
        held: Option<Outcome>,
    },
    /// A model turn task runs.
    Thinking { turn: u32 },
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
    /// The task answering it (a user tool or a wait for an agent to settle).
    task: Option<AbortHandle>,
    /// The agents a wait is on (one child, or a set): their outcomes count as read once the
    /// wait returns them; a wait on one child is answered early if it asks a question.
    waits_on: Vec<AgentId>,
    /// An `ask_owner` call: the next steer from the owner answers it.
    asks_owner: bool,
}

impl PendingCall {
    fn new(call_id: String) -> Self {
        PendingCall {
            call_id,
            result: None,
            task: None,
            waits_on: Vec::new(),
            asks_owner: false,
        }
    }
}

#[derive(Debug)]
struct Child {
    id: AgentId,
    detached: bool,
    /// Spawned in the background: its completion is noticed in the conversation unless its
    /// result was read.
    background: bool,
    settled: bool,
    /// Its current outcome was returned by a tool (foreground result or a read).
    read: bool,
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
            start,
            token,
            shared,
        } = args;
        let PendingStart {
            definition,
            branch,
            prompt,
            mut settle,
            mut context,
            resumed,
            detached: _,
            owner_capabilities,
        } = start;
        if resumed {
            // Children spawned during a resumed run never outlive it.
            settle = SettlePolicy::AbortChildren;
        }
        let capabilities = capability::capabilities(
            &definition,
            depth,
            branch.max_depth,
            shared.toolbox.names(),
            owner_capabilities.as_ref(),
        );
        let offered: Vec<ToolSpec> = capabilities
            .user_tools
            .iter()
            .filter_map(|name| shared.toolbox.get(name).map(|t| t.spec()))
            .chain(
                capabilities
                    .orchestration
                    .iter()
                    .map(|t| orchestration::spec(t)),
            )
            .chain(
                capabilities
                    .ask_owner
                    .then(|| orchestration::spec(crate::tool::ASK_OWNER_TOOL)),
            )
            .collect();
        let max_turns = definition
            .max_turns
            .unwrap_or_else(|| capability::default_max_turns(depth));
        // Steers sent before the session existed come first, in order.
        let early = shared
            .registry
            .started(id, myself.get_cell())
            .ok_or_else(|| ActorProcessingErr::from(format!("{id} settled before it started")))?;
        let watcher = {
            let token = token.clone();
            let myself = myself.clone();
            tokio::spawn(async move {
                token.cancelled().await;
                let _ = myself.cast(AgentMsg::Cancelled);
            })
            .abort_handle()
        };
        context.push(Message::user(prompt));
        let record = shared.registry.record(id);
        let incarnation = record.as_ref().map_or(1, |r| r.incarnation);
        let owner_id = record.and_then(|r| r.parent).unwrap_or(AgentId::ROOT);
        let run = shared.registry.run_of(id);
        let supervisor = ChildSupervisor::new(
            definition.strategy,
            definition.max_restarts,
            std::time::Duration::from_millis(definition.restart_period_ms),
        );
        Ok(AgentState {
            id,
            owner_id,
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
            conversation: context,
            turns: 0,
            phase: Phase::Idle,
            children: Vec::new(),
            inbox: early.into_iter().map(Inbound::Steer).collect(),
            last_text: String::new(),
            watcher: Some(watcher),
            incarnation,
            run,
            turn_in_flight: None,
            supervisor,
            open_questions: std::collections::BTreeSet::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.start(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        if matches!(state.phase, Phase::Done) {
            // Settled and stopping: a steer's reply port is dropped, which tells the sender;
            // a question gets its refusal.
            if let AgentMsg::Asked { child, .. } = message {
                state.refuse_question(child);
            }
            return Ok(());
        }
        match message {
            AgentMsg::TurnFinished { turn, result } => {
                if state
                    .turn_in_flight
                    .as_ref()
                    .is_some_and(|(t, _)| *t == turn)
                {
                    state.turn_in_flight = None;
                }
                if matches!(state.phase, Phase::Ending { .. }) {
                    state.try_settle(&myself);
                } else {
                    state.on_turn_finished(&myself, turn, result).await;
                }
            }
            AgentMsg::ToolFinished {
                turn,
                index,
                result,
            } => {
                let (text, is_error) = match result {
                    Ok(text) => (text, false),
                    Err(error) => (error, true),
                };
                state.answer_call(turn, index, text, is_error);
                state.after_answer(&myself);
            }
            AgentMsg::Cancelled => state.abort(&myself),
            AgentMsg::Steer { text, reply } => {
                let receipt = if state.run_over() {
                    // A steer that crossed the end of the run: no turn will read it.
                    let status = state
                        .shared
                        .registry
                        .status(state.id)
                        .unwrap_or(AgentStatus::Completing);
                    Err(ControlError::WrongStatus(state.id, status))
                } else {
                    state.on_steer(&myself, text)
                };
                if let Some(reply) = reply {
                    let _ = reply.send(receipt);
                }
            }
            AgentMsg::ChildSettled { child } => state.on_child_ended(&myself, child).await,
            AgentMsg::Asked { child, question } => state.on_asked(&myself, child, question),
            AgentMsg::AskRefused { reason } => state.on_ask_refused(&myself, reason),
            AgentMsg::StartDone { result } => {
                if !matches!(state.phase, Phase::Starting { .. }) {
                    return Ok(());
                }
                match result {
                    Ok(()) => state.next_turn(&myself),
                    Err(error) => {
                        let outcome = Outcome::failed(
                            EndReason::HookFailed,
                            format!("start hook failed: {error}"),
                        );
                        state.end_run(&myself, outcome);
                    }
                }
            }
            AgentMsg::HooksDone { failures } => {
                let Phase::Stopping { held, .. } = &mut state.phase else {
                    return Ok(());
                };
                let held = held.take();
                state.shared.registry.add_hook_failures(state.id, failures);
                match held {
                    // The run had ended before the shutdown: its children were dealt with
                    // then; settle with its outcome once they are terminal.
                    Some(outcome) => {
                        state.phase = Phase::Ending { outcome };
                        state.try_settle(&myself);
                    }
                    None => {
                        let outcome = Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown)
                            .with_partial(state.last_text.clone());
                        state.end_run(&myself, outcome);
                    }
                }
            }
            AgentMsg::PoolChanged => {}
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
        if let Some(child) = supervision::lost_actor(&state.shared.registry, &event) {
            state.on_child_ended(&myself, child).await;
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
            state
                .shared
                .registry
                .keep_conversation(state.id, state.conversation.clone());
            if state.shared.registry.settle(state.id, outcome) {
                state.notify_owner();
            }
        }
        Ok(())
    }
}

impl AgentState {
    fn hook_context(&self, deadline: Option<tokio::time::Instant>) -> HookContext {
        HookContext {
            agent: self.id,
            agent_type: self.definition.name.clone(),
            depth: self.depth,
            deadline,
        }
    }

    /// Runs the start hooks (as a task, cancelled by an abort), then the first turn.
    fn start(&mut self, myself: &ActorRef<AgentMsg>) {
        let start_hooks = self.shared.hooks.on_start.clone();
        if start_hooks.is_empty() || self.token.is_cancelled() {
            return self.next_turn(myself);
        }
        let context = self.hook_context(None);
        let token = self.token.clone();
        let reply_to = myself.clone();
        let task = tokio::spawn(async move {
            let failures = tokio::select! {
                biased;
                () = token.cancelled() => return,
                failures = hooks::run_all(&start_hooks, &context, true) => failures,
            };
            let result = match failures.into_iter().next() {
                Some(error) => Err(error),
                None => Ok(()),
            };
            let _ = reply_to.cast(AgentMsg::StartDone { result });
        });
        self.phase = Phase::Starting {
            task: task.abort_handle(),
        };
    }

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
        // Kept at every turn boundary, so a resume after a kill (which keeps nothing) still
        // continues this run's conversation.
        self.shared
            .registry
            .keep_conversation(self.id, self.conversation.clone());
        while let Some(inbound) = self.inbox.pop_front() {
            match inbound {
                Inbound::Steer(text) => {
                    self.conversation.push(Message::user(text));
                    self.shared.registry.announce(self.id, EventKind::Steered);
                }
                Inbound::Notice(text) => self.conversation.push(Message::user(text)),
            }
        }
        self.turns += 1;
        let turn = self.turns;
        let request = ModelRequest {
            agent: self.id,
            agent_type: self.definition.name.clone(),
            depth: self.depth,
            incarnation: self.incarnation,
            turn,
            model: self.definition.model.clone(),
            system: self.definition.prompt.clone(),
            messages: self.conversation.clone(),
            tools: self.offered.to_vec(),
        };
        let model = self.shared.model.clone();
        let shared = self.shared.clone();
        // The turn's own token: cancelled with the agent's, or alone when the run ends for
        // another reason (an escalation). The task always reports back, so the agent never
        // settles while a turn could still record usage.
        let token = self.token.child_token();
        self.turn_in_flight = Some((turn, token.clone()));
        let myself = myself.clone();
        let (id, run) = (self.id, self.run);
        tokio::spawn(async move {
            // The model is called only when this future is first polled, after the token
            // was checked: a cancelled agent never calls it.
            let call = async { CatchUnwind::new(model.turn(request)).await };
            let result = tokio::select! {
                biased;
                () = token.cancelled() => TurnResult::Cancelled,
                r = call => match r {
                    Ok(Ok(response)) => TurnResult::Response(response),
                    Ok(Err(error)) => TurnResult::Failed(error),
                    Err(panic) => TurnResult::Panicked(panic),
                },
            };
            // Usage is recorded here, once, before the agent hears of the turn: nothing the
            // agent does afterwards (abort, settle) can lose it or count it twice.
            if let TurnResult::Response(response) = &result {
                shared.registry.add_usage(id, run, response.usage);
            }
            let _ = myself.cast(AgentMsg::TurnFinished { turn, result });
        });
        self.phase = Phase::Thinking { turn };
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
        let response = match result {
            TurnResult::Cancelled => return self.abort(myself),
            TurnResult::Failed(error) => {
                let outcome = Outcome::failed(EndReason::ModelError, error.message)
                    .with_partial(self.last_text.clone());
                return self.end_run(myself, outcome);
            }
            TurnResult::Panicked(panic) => {
                let outcome =
                    Outcome::failed(EndReason::Panicked, format!("model panicked: {panic}"))
                        .with_partial(self.last_text.clone());
                return self.end_run(myself, outcome);
            }
            TurnResult::Response(response) => response,
        };
        if self.token.is_cancelled() {
            return self.abort(myself);
        }
        if !response.text.is_empty() {
            self.last_text.clone_from(&response.text);
        }
        let calls = response.tool_calls;
        self.conversation
            .push(Message::assistant(response.text.clone(), calls.clone()));
        if calls.is_empty() {
            // A steer accepted during this turn must still be read: the model answers it in
            // one more turn (while turns remain) instead of the run ending over it.
            let steered = self.inbox.iter().any(|i| matches!(i, Inbound::Steer(_)));
            if steered && self.turns < self.max_turns {
                return self.next_turn(myself);
            }
            return self.end_run(myself, Outcome::completed(response.text));
        }
        self.phase = Phase::Acting {
            turn,
            calls: calls
                .iter()
                .map(|c| PendingCall::new(c.id.clone()))
                .collect(),
        };
        for (index, call) in calls.into_iter().enumerate() {
            self.dispatch(myself, turn, index, call).await;
        }
        self.after_answer(myself);
    }

    /// Starts one tool call. Orchestration tools are answered here or by a wait task; user
    /// tools run as tasks.
    async fn dispatch(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        index: usize,
        call: ToolCall,
    ) {
        if orchestration::is_orchestration(&call.name) {
            if self.capabilities.holds(&call.name) {
                orchestration::dispatch(self, myself, turn, index, call).await;
            } else {
                let text = format!("tool {:?} is not available to this agent", call.name);
                self.answer_call(turn, index, text, true);
            }
            return;
        }
        let tool = self
            .capabilities
            .user_tools
            .iter()
            .any(|t| t == &call.name)
            .then(|| self.shared.toolbox.get(&call.name).cloned())
            .flatten();
        let Some(tool) = tool else {
            let text = format!("tool {:?} is not available to this agent", call.name);
            self.answer_call(turn, index, text, true);
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
                index,
                result,
            });
        });
        if let Some(pending) = self.pending_call(turn, index) {
            pending.task = Some(task.abort_handle());
        }
    }

    /// The unanswered call at `index` of turn `turn`.
    fn pending_call(&mut self, turn: u32, index: usize) -> Option<&mut PendingCall> {
        match &mut self.phase {
            Phase::Acting { turn: t, calls } if *t == turn => {
                calls.get_mut(index).filter(|c| c.result.is_none())
            }
            _ => None,
        }
    }

    /// Records the result of one call of turn `turn`. A wait's agents whose outcome is final
    /// now count as read (a wait cut short by its timeout reads nothing).
    fn answer_call(&mut self, turn: u32, index: usize, text: String, is_error: bool) {
        let Some(pending) = self.pending_call(turn, index) else {
            return;
        };
        pending.result = Some((text, is_error));
        pending.asks_owner = false;
        if let Some(task) = pending.task.take() {
            task.abort();
        }
        let waited = std::mem::take(&mut pending.waits_on);
        for agent in waited {
            let final_ = self.shared.registry.outcome(agent).is_some()
                && !self.shared.registry.awaiting_supervisor(agent);
            if final_ {
                if let Some(child) = self.children.iter_mut().find(|c| c.id == agent) {
                    child.read = true;
                }
            }
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

    /// Answers the pending `ask_owner` call with `text`, or hands `text` back when there is
    /// none.
    fn answer_question(&mut self, text: String, is_error: bool) -> Result<(), String> {
        let Phase::Acting { calls, .. } = &mut self.phase else {
            return Err(text);
        };
        let Some(ask) = calls
            .iter_mut()
            .find(|c| c.asks_owner && c.result.is_none())
        else {
            return Err(text);
        };
        ask.result = Some((text, is_error));
        ask.asks_owner = false;
        if let Some(task) = ask.task.take() {
            task.abort();
        }
        Ok(())
    }

    /// The owner cannot answer the pending `ask_owner` call: it gets an error result.
    fn on_ask_refused(&mut self, myself: &ActorRef<AgentMsg>, reason: String) {
        if self.answer_question(reason, true).is_ok() {
            self.after_answer(myself);
        }
    }

    /// A steer answers a pending `ask_owner` call if there is one; otherwise it waits for the
    /// next turn boundary.
    ///
    /// A steer is receipted `delivered` only if a turn will read it: during the last turn
    /// `max_turns` allows (no later turn can read it) it is refused instead.
    fn on_steer(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        text: String,
    ) -> Result<SteerReceipt, ControlError> {
        match self.answer_question(text, false) {
            Ok(()) => {
                self.shared.registry.announce(self.id, EventKind::Steered);
                self.after_answer(myself);
            }
            Err(_) if self.turns >= self.max_turns => {
                return Err(ControlError::NoTurnsLeft(self.id));
            }
            Err(text) => self.inbox.push_back(Inbound::Steer(text)),
        }
        Ok(SteerReceipt::Delivered)
    }

    /// A child asked a question: it enters the conversation at the next turn boundary, and a
    /// wait on that child is answered now with the question, so the turn can end and the
    /// model can answer (a foreground wait would otherwise deadlock).
    fn on_asked(&mut self, myself: &ActorRef<AgentMsg>, child: AgentId, question: String) {
        if !self.children.iter().any(|c| c.id == child) {
            return;
        }
        if self.run_over() {
            // No model turn will ever read the question: say so rather than leave the child
            // (and a draining owner) waiting forever.
            self.refuse_question(child);
            return;
        }
        self.open_questions.insert(child);
        self.inbox.push_back(Inbound::Notice(format!(
            "[question from subagent {child}; answer with steer_subagent] {question}"
        )));
        // Any wait that includes the asker (one child or a set) is answered now, so the turn
        // can end and the model can answer; the child's completion will then be noticed like
        // a background child's.
        if let Some(entry) = self.children.iter_mut().find(|c| c.id == child) {
            entry.background = true;
        }
        if let Phase::Acting { calls, .. } = &mut self.phase {
            for call in calls
                .iter_mut()
                .filter(|c| c.waits_on.contains(&child) && c.result.is_none())
            {
                let text = serde_json::json!({ "agent_id": child, "status": "asking", "question": question });
                call.result = Some((text.to_string(), false));
                call.waits_on.clear();
                if let Some(task) = call.task.take() {
                    task.abort();
                }
            }
        }
        self.after_answer(myself);
    }

    /// Tells the owner this agent settled: its owner's current actor (an owner restarted or
    /// resumed since the spawn has a new one), else the one it was spawned under.
    fn notify_owner(&self) {
        let settled = AgentMsg::ChildSettled { child: self.id };
        match self.shared.registry.actors_of(&[self.owner_id]).first() {
            Some((_, actor)) => {
                let _ = actor.send_message(settled);
            }
            None => {
                let _ = self.owner.cast(settled);
            }
        }
    }

    /// Whether this agent's run is over (it takes no more model turns).
    fn run_over(&self) -> bool {
        matches!(
            self.phase,
            Phase::Ending { .. } | Phase::Done | Phase::Stopping { .. }
        )
    }

    /// Tells `child` its question will not be answered.
    fn refuse_question(&self, child: AgentId) {
        let refusal = AgentMsg::AskRefused {
            reason: format!("{} has finished its run and cannot answer", self.id),
        };
        if let Some((_, actor)) = self.shared.registry.actors_of(&[child]).first() {
            let _ = actor.send_message(refusal);
        }
    }

    /// A child's end was noticed (its own message or a supervision event, whichever comes
    /// first; the second is ignored). Its owner decides on a restart; then the children's
    /// settled flags are read back from the registry.
    async fn on_child_ended(&mut self, myself: &ActorRef<AgentMsg>, child: AgentId) {
        if !self.children.iter().any(|c| c.id == child) {
            return;
        }
        if self
            .shared
            .registry
            .status(child)
            .is_some_and(AgentStatus::is_live)
        {
            // A stale notice from an earlier incarnation: the child runs again.
            return;
        }
        let closing = matches!(
            self.phase,
            Phase::Ending { .. } | Phase::Done | Phase::Stopping { .. }
        ) || self.token.is_cancelled();
        let verdict = self
            .supervisor
            .child_ended(&self.shared, self.id, myself, child, closing)
            .await;
        if let Verdict::Escalate(cause) = verdict {
            self.refresh_children();
            let outcome =
                Outcome::failed(EndReason::Escalated, cause).with_partial(self.last_text.clone());
            return self.end_run(myself, outcome);
        }
        self.refresh_children();
        if matches!(self.phase, Phase::Ending { .. }) {
            self.try_settle(myself);
        }
    }

    /// Reads each child's state back from the registry: final ones are settled (a
    /// background one's completion is noticed in the conversation unless its result was
    /// read or awaited), restarted ones run again.
    fn refresh_children(&mut self) {
        let registry = &self.shared.registry;
        for index in 0..self.children.len() {
            let child = self.children[index].id;
            let final_ = registry.status(child).is_some_and(AgentStatus::is_terminal)
                && !registry.awaiting_supervisor(child);
            let entry = &mut self.children[index];
            if !final_ {
                // Live, or live again after a restart: its next outcome is unread.
                entry.settled = false;
                entry.read = false;
                continue;
            }
            if entry.settled {
                continue;
            }
            entry.settled = true;
            let (background, read) = (entry.background, entry.read);
            let waited_on = matches!(&self.phase, Phase::Acting { calls, .. }
                if calls.iter().any(|c| c.waits_on.contains(&child) && c.result.is_none()));
            if background && !read && !waited_on {
                let outcome = registry.outcome(child);
                let summary = outcome.as_ref().map(|o| o.summary()).unwrap_or_default();
                let status = outcome.map(|o| o.status.as_str()).unwrap_or("settled");
                self.inbox.push_back(Inbound::Notice(format!(
                    "[subagent {child} {status}] {summary}"
                )));
            }
        }
    }

    /// The agent's own run ended with `outcome`: deal with live children per the settle
    /// policy, then settle once they are terminal.
    fn end_run(&mut self, myself: &ActorRef<AgentMsg>, outcome: Outcome) {
        self.cancel_tasks();
        // Steers receipted `delivered` that no turn will read stay in the conversation kept
        // for a resume: a delivered steer is never lost.
        for inbound in std::mem::take(&mut self.inbox) {
            if let Inbound::Steer(text) = inbound {
                self.conversation.push(Message::user(text));
            }
        }
        // Steers can no longer reach a turn, and open questions no longer an answer.
        self.shared.registry.run_ended(self.id);
        for child in std::mem::take(&mut self.open_questions) {
            self.refuse_question(child);
        }
        // Nothing restarts under an owner whose run has ended.
        for child in &self.children {
            self.shared.registry.release(child.id);
        }
        self.refresh_children();
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
    ///
    /// An outcome already decided (the run ended and the agent holds it while its children
    /// drain or settle) stays: an abort only cuts what is still running, so the children
    /// (cancelled with the token) settle and the agent settles with the outcome it held. A
    /// shutdown's hooks still run first.
    fn abort(&mut self, myself: &ActorRef<AgentMsg>) {
        let reason = self
            .shared
            .registry
            .abort_reason(self.id)
            .unwrap_or(EndReason::OwnerEnded);
        match &self.phase {
            Phase::Done | Phase::Stopping { .. } => return,
            Phase::Ending { outcome } => {
                let held = outcome.clone();
                self.run_shutdown_hooks(myself, Some(held));
                return;
            }
            _ => {}
        }
        if self.run_shutdown_hooks(myself, None) {
            return;
        }
        let outcome =
            Outcome::ended(AgentStatus::Aborted, reason).with_partial(self.last_text.clone());
        self.end_run(myself, outcome);
    }

    /// When a shutdown reached the agent and shutdown hooks are registered, runs them as a
    /// task bounded by the shutdown's deadline and returns `true`; the run ends when they
    /// finish ([`AgentMsg::HooksDone`]), with `held` if the run had already ended with it.
    fn run_shutdown_hooks(&mut self, myself: &ActorRef<AgentMsg>, held: Option<Outcome>) -> bool {
        let Some(deadline) = self.shared.registry.shutdown_deadline(self.id) else {
            return false;
        };
        let shutdown_hooks = self.shared.hooks.on_shutdown.clone();
        if shutdown_hooks.is_empty() {
            return false;
        }
        self.cancel_tasks();
        let context = self.hook_context(Some(deadline));
        let reply_to = myself.clone();
        // At the deadline the shutdown kills this agent if its hooks are still running and
        // aborts this task; its own cut-off a little later is only a backstop.
        let cut_off = deadline + SHUTDOWN_KILL_WAIT;
        let task = tokio::spawn(async move {
            // Off the worker: a hook that blocks its thread cannot hold up the deadline.
            let run = OffWorker::new(hooks::run_all(&shutdown_hooks, &context, false));
            let failures = match tokio::time::timeout_at(cut_off, run).await {
                Ok(failures) => failures,
                Err(_) => vec!["shutdown hook did not finish before the deadline".to_owned()],
            };
            let _ = reply_to.cast(AgentMsg::HooksDone { failures });
        });
        self.shared
            .registry
            .hooks_started(self.id, task.abort_handle());
        self.phase = Phase::Stopping {
            task: task.abort_handle(),
            held,
        };
        true
    }

    fn cancel_tasks(&mut self) {
        match &mut self.phase {
            Phase::Starting { task } | Phase::Stopping { task, .. } => task.abort(),
            Phase::Thinking { .. } => {
                if let Some((_, token)) = &self.turn_in_flight {
                    token.cancel();
                }
            }
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
        // A cancelled turn still reports back (promptly: it was cancelled); until it has,
        // it might record usage, which must precede the settle.
        if self.turn_in_flight.is_some() || self.children.iter().any(|c| !c.settled && !c.detached)
        {
            return;
        }
        let Phase::Ending { outcome } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return;
        };
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        tracing::debug!(agent = %self.id, status = %outcome.status, "agent settled");
        self.shared
            .registry
            .keep_conversation(self.id, std::mem::take(&mut self.conversation));
        if self.shared.registry.settle(self.id, outcome) {
            self.notify_owner();
        }
        myself.stop(None);
    }
}
