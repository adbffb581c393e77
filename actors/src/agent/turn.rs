//! Model turns: the start hooks before the first, one task per turn, and what a turn's
//! result does to the run.

use agent_tree_protocol::{AgentId, EndReason, EventKind, FinishReason, Message, Outcome};
use ractor::ActorRef;
use std::sync::Arc;

use super::calls::Calls;
use super::lifecycle::Phase;
use super::{AgentState, InFlight, Inbound};
use crate::hooks;
use crate::model::{ModelRequest, TurnSink};
use crate::msg::{AgentMsg, TurnResult};
use crate::policy::retry;
use crate::shared::SharedRef;
use crate::util::CatchUnwind;
use tracing::Instrument;

/// What the model is told when its reply was cut off at the length limit and the run
/// continues it.
pub(crate) const CONTINUE_NOTICE: &str = "[runtime] Your reply was cut off at the output \
    length limit. Continue exactly where it stopped, without repeating anything.";

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
        let task = self.shared.spawn_in(self.span.span(), async move {
            let failures = tokio::select! {
                biased;
                () = token.cancelled() => return,
                failures = hooks::run_all(&start_hooks, &context, true)
                    .instrument(tracing::info_span!("start_hooks")) => failures,
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
        if let Some(journal) = &self.shared.journal {
            // Only what this run added since its last boundary.
            journal.conversation(self.id, self.run, self.journaled, &messages);
            self.journaled = messages.len();
        }
        self.turns += 1;
        let turn = self.turns;
        let (id, run) = (self.id, self.run);
        let events = self
            .shared
            .config
            .stream_events
            .then(|| (self.shared.clone(), id, turn));
        let sink = TurnSink::for_turn(events);
        let request = ModelRequest {
            agent: id,
            definition: self.definition.clone(),
            depth: self.depth,
            incarnation: self.incarnation,
            turn,
            messages,
            tools: self.offer.specs.clone(),
            sink: sink.clone(),
        };
        let model = self.shared.model.clone();
        let shared = self.shared.clone();
        // The turn ends with the agent's token, or alone (aborted) when the run ends for
        // another reason (an escalation). Either way the task reports back exactly once (an
        // aborted one from its drop guard, which bills what the sink was told first: there
        // is no await between the usage and the report), so the agent never settles while
        // a turn could still record usage. No token of its own: an abort handle costs
        // nothing to keep.
        let token = self.token.clone();
        let report = TurnReport {
            myself: Some(myself.clone()),
            turn,
            bill: (shared.clone(), id, run, sink.clone()),
        };
        let span = tracing::info_span!(
            parent: self.span.id(),
            "chat",
            "gen_ai.operation.name" = "chat",
            "gen_ai.request.model" = self.definition.model.as_deref().unwrap_or(""),
            turn,
            "gen_ai.usage.input_tokens" = tracing::field::Empty,
            "gen_ai.usage.output_tokens" = tracing::field::Empty,
            "gen_ai.response.finish_reasons" = tracing::field::Empty,
        );
        let task = self.shared.spawn_in(span, async move {
            // The model is called only when this future is first polled, after the token
            // was checked: a cancelled agent never calls it.
            let call = async {
                // Backpressure: no new model turn while the journal is too far behind.
                if let Some(journal) = &shared.journal {
                    journal.room().await;
                }
                call_with_retries(&*model, request, &shared, id, run, turn).await
            };
            let result = tokio::select! {
                biased;
                () = token.cancelled() => TurnResult::Cancelled,
                r = call => r,
            };
            // Usage is recorded here, once, before the agent hears of the turn: nothing the
            // agent does afterwards (abort, settle) can lose it or count it twice. A failed
            // attempt was billed when it failed; anything else not returned is billed what
            // the model last reported to the sink.
            let (sink, billed) = (&report.bill.3, sink_usage_or(&report.bill.3, &result));
            shared.registry.add_usage(id, run, billed);
            let current = tracing::Span::current();
            current.record("gen_ai.usage.input_tokens", billed.input_tokens);
            current.record("gen_ai.usage.output_tokens", billed.output_tokens);
            if let (false, TurnResult::Response(response)) = (current.is_disabled(), &result) {
                let reason = serde_json::to_value(response.finish_reason).unwrap_or_default();
                current.record(
                    "gen_ai.response.finish_reasons",
                    reason.as_str().unwrap_or_default(),
                );
            }
            sink.flush();
            report.send(result);
        });
        self.turn_in_flight = Some(InFlight {
            turn,
            abort: task.abort_handle(),
            sink,
        });
        self.phase = Phase::Thinking { turn };
    }

    /// The output to keep as partial if the run ends now: the text the turn in flight has
    /// streamed, else the model's last text.
    /// Either after the pieces of cut-off turns it continued.
    pub(super) fn partial(&self) -> String {
        let streamed = self
            .turn_in_flight
            .as_ref()
            .map(|in_flight| in_flight.sink.streamed_text())
            .unwrap_or_default();
        let text = if streamed.is_empty() {
            &self.last_text
        } else {
            &streamed
        };
        format!("{}{text}", self.cut_text)
    }

    /// A turn task reported back.
    pub(super) async fn on_turn_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        result: TurnResult,
    ) {
        if let Some(in_flight) = self.turn_in_flight.take_if(|f| f.turn == turn) {
            // A turn that did not return keeps what it streamed as the last text: the run's
            // partial output, whichever arrives first, this report or the abort.
            if !matches!(result, TurnResult::Response(_)) {
                let streamed = in_flight.sink.streamed_text();
                if !streamed.is_empty() {
                    self.last_text = streamed;
                }
            }
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
                tracing::warn!(agent = %self.id, turn, error = %error, "model call failed");
                let outcome = Outcome::failed(EndReason::ModelError, error.describe())
                    .with_partial(self.partial());
                return self.end_run(myself, outcome);
            }
            TurnResult::Panicked(panic) => {
                let outcome =
                    Outcome::failed(EndReason::Panicked, format!("model panicked: {panic}"))
                        .with_partial(self.partial());
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
        if calls.is_empty() && response.finish_reason == FinishReason::Length {
            // Cut off: not an answer. Continue it while the policy and the turns allow, and
            // join the pieces; else fail with the text so far as partial output.
            // The piece is kept once, in `cut_text`; the last text is what comes after it.
            self.cut_text.push_str(&response.text);
            self.last_text.clear();
            let allowed = self.shared.config.length_continuations;
            if self.continuations < allowed && self.turns < self.max_turns {
                self.continuations += 1;
                self.conversation.push(Message::user(CONTINUE_NOTICE));
                return self.next_turn(myself);
            }
            let outcome = Outcome::failed(
                EndReason::LengthLimit,
                format!(
                    "the model's output was cut off at its length limit ({} continuation(s) \
                     allowed)",
                    allowed
                ),
            )
            .with_partial(std::mem::take(&mut self.cut_text));
            return self.end_run(myself, outcome);
        }
        if calls.is_empty() {
            // A steer accepted during this turn, or a child's completion or question that
            // arrived during it, must still be read: the model answers it in one more turn
            // (while turns remain) instead of the run ending over it, which would drop a
            // background child's result the model meant to read, or refuse a child's
            // question the model never saw.
            if !self.inbox.is_empty() && self.turns < self.max_turns {
                return self.next_turn(myself);
            }
            let answer = if self.cut_text.is_empty() {
                response.text
            } else {
                let mut joined = std::mem::take(&mut self.cut_text);
                joined.push_str(&response.text);
                joined
            };
            return self.end_run(myself, Outcome::completed(answer));
        }
        self.phase = Phase::Acting {
            turn,
            calls: Calls::new(&calls),
        };
        let most = self.shared.config.max_tool_calls_per_turn;
        for (index, call) in calls.into_iter().enumerate() {
            if index >= most {
                let text = format!(
                    "{{\"error\":\"too many tool calls in one turn: at most {most} run; this one \
                     did not\"}}"
                );
                self.answer_call(turn, index, text, true);
                continue;
            }
            self.dispatch(myself, turn, index, call).await;
        }
        self.after_answer(myself);
    }
}

/// Calls the model for one turn, retrying retryable failures by the tree's retry policy.
/// The first attempt is inline; the retry loop (its backoff timer, the error it holds) is
/// boxed, so the turn task of every agent is not the size of a retrying one.
async fn call_with_retries(
    model: &dyn crate::model::Model,
    request: ModelRequest,
    shared: &SharedRef,
    id: AgentId,
    run: u32,
    turn: u32,
) -> TurnResult {
    match CatchUnwind::new(model.turn(request.clone())).await {
        Ok(Ok(response)) => TurnResult::Response(response),
        Ok(Err(error)) => Box::pin(retry_after(model, request, shared, id, run, turn, error)).await,
        Err(panic) => TurnResult::Panicked(panic),
    }
}

/// After attempt 1 failed with `error`: bills each failed attempt (its error's usage, else
/// what it reported to the sink), announces each retry as a `retrying` event, waits and
/// tries again while the policy allows.
async fn retry_after(
    model: &dyn crate::model::Model,
    request: ModelRequest,
    shared: &SharedRef,
    id: AgentId,
    run: u32,
    turn: u32,
    mut error: crate::error::ModelError,
) -> TurnResult {
    let policy = shared.config.retry;
    let seed = retry::seed(id.get(), run, turn);
    let mut attempt = 1;
    loop {
        let reported = request.sink.take_usage();
        let usage = if error.usage.is_zero() {
            reported
        } else {
            error.usage
        };
        shared.registry.add_usage(id, run, usage);
        let Some(wait) = retry::delay(&policy, attempt, error.kind, error.retry_after, seed) else {
            return TurnResult::Failed(Box::new(error));
        };
        let delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(
            agent = %id, turn, attempt, error = %error, delay_ms,
            "model call failed; retrying"
        );
        shared.registry.announce(
            id,
            EventKind::Retrying {
                turn,
                attempt,
                error_kind: error.kind,
                delay_ms,
            },
        );
        request.sink.flush();
        request.sink.reset();
        tokio::time::sleep(wait).await;
        attempt += 1;
        error = match CatchUnwind::new(model.turn(request.clone())).await {
            Ok(Ok(response)) => return TurnResult::Response(response),
            Ok(Err(error)) => error,
            Err(panic) => return TurnResult::Panicked(panic),
        };
    }
}

/// The usage to bill when a turn task ends with `result`: a response's own usage (what the
/// sink was told is superseded), else what the sink was told last (a failed attempt took
/// its own already, so the sink is empty then).
fn sink_usage_or(sink: &TurnSink, result: &TurnResult) -> agent_tree_protocol::Usage {
    let reported = sink.take_usage();
    match result {
        TurnResult::Response(response) => response.usage,
        TurnResult::Failed(_) | TurnResult::Panicked(_) | TurnResult::Cancelled => reported,
    }
}

/// A turn task's report: sent once, with the turn's result, or (when the task is aborted or
/// dropped before it has one) as `Cancelled` when the guard is dropped, after billing what
/// the model reported to the sink.
struct TurnReport {
    myself: Option<ActorRef<AgentMsg>>,
    turn: u32,
    bill: (SharedRef, AgentId, u32, TurnSink),
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
            let (shared, id, run, sink) = &self.bill;
            shared.registry.add_usage(*id, *run, sink.take_usage());
            let result = TurnResult::Cancelled;
            let _ = myself.cast(AgentMsg::TurnFinished {
                turn: self.turn,
                result,
            });
        }
    }
}
