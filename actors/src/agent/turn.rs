//! Model turns: the start hooks before the first, one task per turn, and what a turn's
//! result does to the run.

use agent_tree_protocol::{EndReason, EventKind, Message, Outcome};
use ractor::ActorRef;
use std::sync::Arc;

use super::calls::Calls;
use super::lifecycle::Phase;
use super::{AgentState, Inbound};
use crate::hooks;
use crate::model::ModelRequest;
use crate::msg::{AgentMsg, TurnResult};
use crate::util::CatchUnwind;

impl AgentState {
    /// Runs the start hooks (as a task, cancelled by an abort), then the first turn.
    pub(super) fn start(&mut self, myself: &ActorRef<AgentMsg>) {
        let start_hooks = self.shared.hooks.on_start.clone();
        if start_hooks.is_empty() || self.token.is_cancelled() {
            return self.next_turn(myself);
        }
        let context = self.hook_context(None);
        let token = self.token.clone();
        let reply_to = myself.clone();
        let task = self.shared.spawn(async move {
            let failures = tokio::select! {
                biased;
                () = token.cancelled() => return,
                failures = hooks::run_all(&start_hooks, &context, true) => failures,
            };
            let result = match failures.into_iter().next() {
                Some(error) => Err(error),
                None => Ok(()),
            };
            let _ = reply_to.cast(AgentMsg::StartHooksFinished { result });
        });
        self.phase = Phase::Starting {
            task: task.abort_handle(),
        };
    }

    /// The start hooks finished: the first turn, or a failed run.
    pub(super) fn on_start_hooks_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        result: Result<(), String>,
    ) {
        if !matches!(self.phase, Phase::Starting { .. }) {
            return;
        }
        match result {
            Ok(()) => self.next_turn(myself),
            Err(error) => {
                let outcome =
                    Outcome::failed(EndReason::HookFailed, format!("start hook failed: {error}"));
                self.end_run(myself, outcome);
            }
        }
    }

    /// Starts the next model turn, or ends the run when the token is cancelled or the turns
    /// are used up.
    pub(super) fn next_turn(&mut self, myself: &ActorRef<AgentMsg>) {
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
        while let Some(inbound) = self.inbox.pop_front() {
            match inbound {
                Inbound::Steer(text) => {
                    self.conversation.push(Message::user(text));
                    self.shared.registry.announce(self.id, EventKind::Steered);
                }
                Inbound::Notice(text) => self.conversation.push(Message::user(text)),
            }
        }
        // Published at every turn boundary (not under the registry lock), so a resume after
        // a kill (which keeps nothing) still continues this run's conversation.
        let messages: Arc<[Message]> = self.conversation.as_slice().into();
        *self.conversation_cell.lock() = messages.clone();
        self.turns += 1;
        let turn = self.turns;
        let request = ModelRequest {
            agent: self.id,
            definition: self.definition.clone(),
            depth: self.depth,
            incarnation: self.incarnation,
            turn,
            messages,
            tools: self.offer.specs.clone(),
        };
        let model = self.shared.model.clone();
        let shared = self.shared.clone();
        // The turn ends with the agent's token, or alone (aborted) when the run ends for
        // another reason (an escalation). Either way the task reports back exactly once (an
        // aborted one from its drop guard, which cannot run between the usage and the report:
        // there is no await between them), so the agent never settles while a turn could
        // still record usage. No token of its own: an abort handle costs nothing to keep.
        let token = self.token.clone();
        let report = TurnReport {
            myself: Some(myself.clone()),
            turn,
        };
        let (id, run) = (self.id, self.run);
        let task = self.shared.spawn(async move {
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
            report.send(result);
        });
        self.turn_in_flight = Some((turn, task.abort_handle()));
        self.phase = Phase::Thinking { turn };
    }

    /// A turn task reported back.
    pub(super) async fn on_turn_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        result: TurnResult,
    ) {
        if self
            .turn_in_flight
            .as_ref()
            .is_some_and(|(t, _)| *t == turn)
        {
            self.turn_in_flight = None;
        }
        if !self.phase.thinking(turn) {
            // The run ended while the turn was in flight: it may settle now.
            if matches!(self.phase, Phase::Ending { .. }) {
                self.try_settle(myself);
            }
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
            calls: Calls::new(&calls),
        };
        for (index, call) in calls.into_iter().enumerate() {
            self.dispatch(myself, turn, index, call).await;
        }
        self.after_answer(myself);
    }
}

/// A turn task's report: sent once, with the turn's result, or (when the task is aborted or
/// dropped before it has one) as `Cancelled` when the guard is dropped.
struct TurnReport {
    myself: Option<ActorRef<AgentMsg>>,
    turn: u32,
}

impl TurnReport {
    fn send(mut self, result: TurnResult) {
        if let Some(myself) = self.myself.take() {
            let turn = self.turn;
            let _ = myself.cast(AgentMsg::TurnFinished { turn, result });
        }
    }
}

impl Drop for TurnReport {
    fn drop(&mut self) {
        if let Some(myself) = self.myself.take() {
            let result = TurnResult::Cancelled;
            let _ = myself.cast(AgentMsg::TurnFinished {
                turn: self.turn,
                result,
            });
        }
    }
}
