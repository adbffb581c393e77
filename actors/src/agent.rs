//! The agent actor: one ractor actor per agent, linked under its owner's actor. This file is
//! the `Actor` impl only; each handler is a line into the modules below.
//!
//! # Layout
//!
//! * [`lifecycle`]: the agent's lifecycle, the one state enum ([`Phase`]), owned here;
//! * [`turn`]: model turns (a future each, polled by the actor), their results;
//! * [`calls`]: the turn's call table, keyed by position, and user tools (a task each);
//! * [`children`]: the one child table; a child's end arrives once, by one path;
//! * [`questions`]: `ask_owner` both ways, and steers;
//! * [`ending`]: ending a run (settle policy), aborts, shutdown hooks, settling;
//! * [`orchestration`]: the orchestration tools as the agent runs them.
//!
//! # Invariants
//!
//! * A model turn is a future the actor polls when it is woken ([`AgentMsg::PollTurn`]),
//!   and a run's first turn once in `post_start` (a result it returns then is acted on at a
//!   `PollTurn`, after what was sent to the agent while it started), never a task: an agent is one task. User tools and hooks run as tasks that select on
//!   the agent's cancellation token. The registry tells each actor a cancellation reaches
//!   ([`AgentMsg::Cancel`]), which drops its turn and aborts its tasks at once, at every
//!   depth (children's tokens are children of the owner's); no task exists only to watch
//!   the token.
//! * The first model call happens only after the actor has checked its token, so an agent
//!   aborted before or while it was constructed never calls the model and never spawns.
//! * An agent settles only when every non-detached child's outcome is final and no turn of
//!   it can still record usage: subtrees settle bottom up, and ractor's own kill cascade
//!   (which skips `post_stop`) never meets a live child.
//! * The registry is written before the owner is told: usage, then the terminal status, then
//!   [`AgentMsg::ChildEnded`].
//! * The actor is started with everything it needs (a [`StartTicket`]) and reads nothing of
//!   its own back from the registry.

mod calls;
mod children;
mod conversation;
mod ending;
mod lifecycle;
pub(crate) mod orchestration;
mod questions;
mod turn;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, AgentId, Message, SettlePolicy};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio_util::sync::CancellationToken;

use crate::msg::{AgentMsg, ShutdownOrder};
use crate::policy::capability::{self, Capabilities};
use crate::registry::{ConversationCell, StartTicket};
use crate::shared::{Branch, SharedRef};
use crate::spawn::PendingStart;
use crate::supervision::ChildSupervisor;

use children::Children;
use lifecycle::Phase;

/// The ractor actor behind every agent.
#[derive(Debug)]
pub(crate) struct AgentActor;

/// What an agent is started with.
#[derive(Debug)]
pub(crate) struct AgentArgs {
    pub(crate) ticket: StartTicket,
    /// The actor it is started under (its owner's, at the time).
    pub(crate) owner: ActorRef<AgentMsg>,
    pub(crate) shared: SharedRef,
}

/// An agent's state.
#[derive(Debug)]
pub(crate) struct AgentState {
    /// Identity and place: fixed for the run.
    id: AgentId,
    owner_id: AgentId,
    depth: u32,
    incarnation: u32,
    /// Which run of the agent this is: 1 for the first, +1 for each restart or resume.
    run: u32,
    /// The actor it was started under; [`AgentMsg::ChildEnded`] goes to the owner's current
    /// actor (the registry says which at settle), this one only when there is none.
    owner: ActorRef<AgentMsg>,
    definition: Arc<AgentDefinition>,
    branch: Arc<Branch>,
    shared: SharedRef,
    /// Cancelled when the agent (or an ancestor, unless detached) is aborted.
    token: CancellationToken,
    settle: SettlePolicy,
    /// What it holds and the specs offered to the model (shared by every agent holding the
    /// same): computed in `post_start` (off the spawner's path), before any handler runs.
    offer: Arc<orchestration::Offer>,
    /// The owner's tools in attenuation mode, until `post_start` computes `offer`.
    owner_capabilities: Option<Box<Capabilities>>,
    max_turns: u32,
    /// The conversation: what the last turn boundary published, and what was added since.
    conversation: conversation::Conversation,
    /// Where the conversation is published at each turn boundary, for a resume after a
    /// kill.
    conversation_cell: ConversationCell,
    /// How much of the conversation this run has journaled (with a journal on).
    journaled: usize,
    /// Model turns taken in this run.
    turns: u32,
    /// The lifecycle.
    phase: Phase,
    /// The model turn in flight: a future this actor polls (no task of its own). Dropping
    /// it (a cancellation, the actor's end) bills what it reported and had not billed, so a
    /// turn that left here never records usage afterwards: the settle may follow at once.
    turn_in_flight: Option<InFlight>,
    /// Owned children, in start order.
    children: Children,
    /// Text for the conversation at the next turn boundary, in arrival order.
    inbox: VecDeque<Inbound>,
    /// The last text the model produced, kept as partial output.
    last_text: String,
    /// The text of turns cut off at the length limit and continued, joined: the answer's
    /// first part, once the model finishes it.
    cut_text: String,
    /// How many cut-off turns of this run were continued.
    continuations: u32,
    /// Restart decisions for its children: made when a child's end first needs one (most
    /// agents never have a child end, and the machine is a few hundred bytes).
    supervisor: Option<Box<ChildSupervisor>>,
    /// Children whose `ask_owner` question has not been answered by a steer yet, with it.
    open_questions: BTreeMap<AgentId, String>,
    /// The question a crash cut the last run off waiting on, recovered from the journal:
    /// this run starts by putting it again (or reading its journaled answer), not by a turn.
    question: Option<Box<agent_tree_protocol::OpenQuestion>>,
    /// The shutdown that reached this run, if one did (one pointer: the order is shared).
    shutdown: Option<ShutdownOrder>,
    /// This run's span (see `docs/architecture.md`, tracing), if enabled.
    pub(crate) span: crate::util::SpanSlot,
}

/// The model turn in flight: its number, its future (the model's call, its billing; a drop
/// guard inside bills what the sink was told when it is dropped unfinished), the waker that
/// asks this actor to poll it, and the sink it streams to (whose text is the partial output
/// if the run ends now).
struct InFlight {
    turn: u32,
    future: turn::TurnFuture,
    waker: Arc<turn::TurnWaker>,
    sink: crate::model::TurnSink,
    /// The result a run's first turn returned at its first poll (in `post_start`), until a
    /// `PollTurn` message takes it (boxed: most turns never hold one).
    ready: Option<Box<crate::msg::TurnResult>>,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("turn", &self.turn)
            .field("sink", &self.sink)
            .finish_non_exhaustive()
    }
}

/// Text waiting for the next turn boundary.
#[derive(Debug)]
enum Inbound {
    /// From a steer (announced as `steered` when it enters the conversation).
    Steer(String),
    /// A steer an earlier run receipted `delivered`, kept unread when it ended (announced
    /// then): a restart's first turn reads it.
    Kept(String),
    /// A runtime notice: a child's question.
    Notice(String),
    /// A background child's end (of its run `run`), noticed because nothing had read its
    /// result: taken back if a tool reads or awaits that run's result before the notice
    /// enters the conversation (the result reaches the model once; another run's result
    /// read does not take it).
    Ended {
        child: AgentId,
        run: u32,
        text: String,
    },
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
        AgentState::new(myself, args)
    }

    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.compute_capabilities();
        state.start(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        if state.phase.is_done() {
            // Settled and stopping: a steer's reply port is dropped, which tells the sender;
            // a question gets its refusal.
            if let AgentMsg::ChildAsked { child, .. } = message {
                state.refuse_question(child);
            }
            return Ok(());
        }
        match message {
            // The paths that await (a turn's calls spawn children; a child's end may restart
            // one) are boxed: inlined, their futures would make every agent's processing loop
            // several kilobytes larger, whatever it is doing.
            AgentMsg::PollTurn { turn } => {
                if let Some(result) = state.poll_turn(turn) {
                    Box::pin(async {
                        // What the turn's billing woke (an event's subscribers, the children
                        // this agent started) runs before the agent acts on the result, as
                        // it did when a turn was a task of its own that reported back.
                        tokio::task::yield_now().await;
                        state.on_turn_finished(&myself, turn, result).await;
                    })
                    .await;
                }
            }
            AgentMsg::ToolFinished {
                turn,
                index,
                result,
            } => state.on_tool_finished(&myself, turn, index, result),
            AgentMsg::StartHooksFinished { result } => {
                state.on_start_hooks_finished(&myself, result)
            }
            AgentMsg::ShutdownHooksFinished { failures } => {
                state.on_shutdown_hooks_finished(&myself, failures)
            }
            AgentMsg::Cancel => state.abort(&myself),
            AgentMsg::Shutdown(order) => state.on_shutdown(&myself, order),
            AgentMsg::Steer { text, from, reply } => state.on_steer(&myself, text, from, reply),
            AgentMsg::ChildEnded {
                child,
                run,
                outcome,
                deferred,
            } => {
                Box::pin(state.on_child_ended(&myself, child, run, outcome, deferred)).await;
            }
            AgentMsg::OutputRead { child, outcome } => {
                state.on_output_read(&myself, child, outcome)
            }
            AgentMsg::ChildAsked {
                child,
                question,
                asked: (run, _),
            } => state.on_asked(&myself, child, question, run),
            AgentMsg::QuestionRefused { reason } => state.on_question_refused(&myself, reason),
            AgentMsg::QuestionAnswered { answer, asked } => {
                state.on_question_answered(&myself, answer, asked)
            }
            AgentMsg::PoolChanged | AgentMsg::Placed(_) => {}
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<AgentMsg>,
        event: SupervisionEvent,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop because a child ended (ractor's default): a child that settled is
        // heard of by its own notice; one that died without settling is settled here.
        // The lost child's handling is boxed before the await, so this handler's future
        // holds a pointer, not the outcome.
        let lost = state
            .on_supervision_event(&event)
            .map(|(child, run, outcome, deferred)| {
                Box::pin(state.on_child_ended(&myself, child, run, outcome, deferred))
            });
        if let Some(handling) = lost {
            handling.await;
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.on_stopped_from_outside();
        Ok(())
    }
}

impl AgentState {
    /// The restart machine for this run's children, made on first use.
    fn supervisor(&mut self) -> &mut ChildSupervisor {
        let definition = &self.definition;
        self.supervisor.get_or_insert_with(|| {
            Box::new(ChildSupervisor::new(
                definition.strategy,
                definition.max_restarts,
                std::time::Duration::from_millis(definition.restart_period_ms),
            ))
        })
    }

    /// The tools this run holds and the specs it is offered. Run in `post_start`: the
    /// spawner's `spawn_linked` waits for `pre_start` only, and no handler runs before
    /// `post_start` has.
    fn compute_capabilities(&mut self) {
        let owner = self.owner_capabilities.take();
        let caller = orchestration::Caller {
            catalog: &self.branch.catalog,
            definition: &self.definition,
            depth: self.depth,
            max_depth: self.branch.max_depth,
        };
        let capabilities = || {
            capability::capabilities(
                &self.definition,
                self.depth,
                self.branch.max_depth,
                self.shared.toolbox.names(),
                owner.as_deref(),
                self.shared.hooks.questions.is_some(),
            )
        };
        self.offer = match owner.as_deref() {
            // Attenuated: the owner's tools are part of what it holds.
            Some(_) => orchestration::offered(&self.shared, capabilities(), &caller),
            None => orchestration::offered_at(&self.shared, &caller, capabilities),
        };
    }

    /// The state of a new run, from its ticket. Registers the actor (one registry
    /// transaction, which also hands over steers sent before the session existed).
    fn new(myself: ActorRef<AgentMsg>, args: AgentArgs) -> Result<Self, ActorProcessingErr> {
        let AgentArgs {
            ticket,
            owner,
            shared,
        } = args;
        let StartTicket {
            id,
            owner: owner_id,
            depth,
            incarnation,
            run,
            token,
            conversation: conversation_cell,
            start,
            question,
        } = ticket;
        let PendingStart {
            definition,
            branch,
            prompt,
            mut settle,
            context,
            resumed,
            detached: _,
            owner_capabilities,
            parent_span,
            node: _,
        } = start;
        // One span per run, a child of its owner's: everything its turns, tools and hooks
        // log names the agent. Field names follow OpenTelemetry's GenAI conventions.
        let span = tracing::info_span!(
            parent: parent_span.id(),
            "invoke_agent",
            "gen_ai.operation.name" = "invoke_agent",
            "gen_ai.agent.id" = %id,
            "gen_ai.agent.name" = %definition.name,
            depth,
            parent = %owner_id,
            run,
        );
        // Children spawned during a resumed run never outlive it.
        settle = crate::policy::settle::effective(settle, resumed);
        let max_turns = definition
            .max_turns
            .unwrap_or_else(|| capability::default_max_turns(depth));
        // Steers sent before the session existed come first, in order.
        let registered = shared
            .registry
            .started(id, run, myself.get_cell())
            .ok_or_else(|| ActorProcessingErr::from(format!("{id} settled before it started")))?;
        // A later run owns the detached children of the earlier ones still running: it hears
        // when they end (noticed as a background child's end is) and answers their questions.
        let mut children = Children::default();
        for (child, run, actor) in registered.earlier {
            children.started(child, run, actor, true, true);
        }
        // A resume with no prompt continues the conversation as it is (a run a crash
        // interrupted re-runs its lost turn, at the same places).
        let task = (!(resumed && prompt.is_empty())).then(|| Message::user(prompt));
        Ok(AgentState {
            id,
            owner_id,
            depth,
            incarnation,
            run,
            owner,
            definition,
            branch,
            shared,
            token,
            settle,
            offer: orchestration::Offer::none(),
            owner_capabilities,
            max_turns,
            conversation: conversation::Conversation::new(context, task),
            conversation_cell,
            journaled: 0,
            turns: 0,
            phase: Phase::Idle,
            turn_in_flight: None,
            children,
            inbox: registered
                .steers
                .into_iter()
                .enumerate()
                .map(|(i, text)| {
                    if i < registered.kept as usize {
                        Inbound::Kept(text)
                    } else {
                        Inbound::Steer(text)
                    }
                })
                .collect(),
            last_text: String::new(),
            cut_text: String::new(),
            continuations: 0,
            supervisor: None,
            open_questions: BTreeMap::new(),
            question,
            shutdown: registered.shutdown,
            span: crate::util::SpanSlot::new(span),
        })
    }
}
