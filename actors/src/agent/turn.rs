//! Model turns: the start hooks before the first, each turn a future the agent's actor
//! polls, and what a turn's result does to the run.

use agent_tree_protocol::{
    AgentId, EndReason, EventKind, FinishReason, Message, OpenQuestion, Outcome, ToolInput, Usage,
};
use ractor::ActorRef;
use std::sync::Arc;

use super::calls::Calls;
use super::lifecycle::Phase;
use super::orchestration;
use super::{AgentState, InFlight, Inbound};
use crate::hooks;
use crate::model::{ModelRequest, TurnSink};
use crate::msg::{AgentMsg, TurnResult};
use crate::policy::continuation::{self, WouldNotFit};
use crate::policy::retry;
use crate::shared::SharedRef;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use tracing::Instrument;

/// The result of a call made in the turn that asked a question a crash cut off, other than
/// the question: it may or may not have run before the crash.
const CUT_OFF_CALL: &str = "{\"error\":\"the process restarted while this turn waited on its question; \
    this call may or may not have run before: check, and call it again if it is still needed\"}";

/// What the model is told when its reply was cut off at the length limit and the run
/// continues it.
pub(crate) const CONTINUE_NOTICE: &str = "[runtime] Your reply was cut off at the output \
    length limit. Continue exactly where it stopped, without repeating anything.";

impl AgentState {
    /// Runs the start hooks (as a task, cancelled by an abort), then the first turn. Without
    /// start hooks (run from `post_start`, before any message), the first turn is polled
    /// here ([`FirstPoll::Here`]).
    pub(super) fn start(&mut self, myself: &ActorRef<AgentMsg>) {
        let start_hooks = self.shared.hooks.on_start.clone();
        if start_hooks.is_empty() || self.token.is_cancelled() {
            return self.first_turn(myself, FirstPoll::Here);
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
            Ok(()) => self.first_turn(myself, FirstPoll::Message),
            Err(error) => {
                let outcome =
                    Outcome::failed(EndReason::HookFailed, format!("start hook failed: {error}"));
                self.end_run(myself, outcome);
            }
        }
    }

    /// The run's first turn: a model turn, or, for a run that continues a question a crash
    /// cut off, that question's turn again (its answer journaled, or the question put
    /// again), without calling the model.
    fn first_turn(&mut self, myself: &ActorRef<AgentMsg>, first: FirstPoll) {
        match self.question.take() {
            Some(open) if !self.token.is_cancelled() => self.resume_question(myself, *open),
            _ => self.begin_turn(myself, first),
        }
    }

    /// Acts on the turn that asked `open` again: its other calls are answered with an error
    /// saying the process restarted before they returned (they ran, or not, before the
    /// crash), and the question's call with its journaled answer, or it waits for the
    /// answer to the question put again.
    fn resume_question(&mut self, myself: &ActorRef<AgentMsg>, open: OpenQuestion) {
        let OpenQuestion {
            call,
            question,
            asking,
            answer,
            ..
        } = open;
        let calls = asking.tool_calls.clone();
        if call >= calls.len() {
            // Not a question this message asked (a journal written by hand): a turn.
            return self.begin_turn(myself, FirstPoll::Message);
        }
        self.conversation.push(asking);
        self.turns += 1;
        let turn = self.turns;
        self.phase = Phase::Acting {
            turn,
            calls: Calls::new(&calls),
        };
        for index in (0..calls.len()).filter(|&i| i != call) {
            self.answer_call(turn, index, CUT_OFF_CALL.to_owned(), true);
        }
        match answer {
            Some((text, is_error)) => self.answer_call(turn, call, text, is_error),
            None => orchestration::ask_again(self, myself, turn, call, question),
        }
        self.after_answer(myself);
    }

    /// Starts the next model turn, or ends the run when the token is cancelled or the turns
    /// are used up.
    pub(super) fn next_turn(&mut self, myself: &ActorRef<AgentMsg>) {
        self.begin_turn(myself, FirstPoll::Message);
    }

    /// [`next_turn`](Self::next_turn), its first poll as `first` says.
    fn begin_turn(&mut self, myself: &ActorRef<AgentMsg>, first: FirstPoll) {
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
        let mut steered = 0;
        while let Some(inbound) = self.inbox.pop_front() {
            match inbound {
                Inbound::Steer(text) => {
                    self.conversation.push(Message::user(text));
                    steered += 1;
                }
                Inbound::Kept(text) | Inbound::Notice(text) | Inbound::Ended { text, .. } => {
                    self.conversation.push(Message::user(text));
                }
            }
        }
        self.turns += 1;
        let turn = self.turns;
        let (id, run) = (self.id, self.run);
        let events = self
            .shared
            .config
            .stream_events
            .then(|| (self.shared.clone(), id, run, turn));
        let sink = TurnSink::for_turn(events);
        // Published at every turn boundary (not under the registry lock), so a resume after
        // a kill (which keeps nothing) still continues this run's conversation, and a settle
        // while this turn is cut off (a kill) bills what its model reported.
        let messages = self.conversation.publish();
        {
            let mut boundary = self.conversation_cell.lock();
            boundary.messages = messages.clone();
            boundary.turn = Some(sink.clone());
        }
        self.shared
            .registry
            .tap_conversation(self.id, self.depth, &messages);
        if let Some(journal) = &self.shared.journal {
            // Only what this run added since its last boundary. After the steers it read
            // were journaled (as they were receipted), so it says they were read.
            journal.conversation(self.id, self.run, self.journaled, &messages);
            self.journaled = messages.len();
        }
        // Announced once the conversation holding them is journaled, and only while the
        // run is on (a kill may have settled it meanwhile: nothing follows a terminal event).
        for _ in 0..steered {
            self.shared
                .registry
                .announce_run(self.id, self.run, EventKind::Steered);
        }
        let request = self.request(turn, messages, sink.clone());
        let model = self.shared.model.clone();
        let bill = TurnBill {
            unbilled: true,
            shared: self.shared.clone(),
            id,
            run,
            sink: sink.clone(),
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
        // The turn is a future this actor polls, not a task: nothing runs until the first
        // poll, which checks the token first, so a cancelled agent never calls the model.
        // It ends here (polled to its result) or is dropped here (a cancellation, the
        // actor's end); either way it bills exactly once, with no await between its usage
        // and its result.
        let future = async move {
            let mut bill = bill;
            // Backpressure: no new model turn while the journal is too far behind.
            if let Some(journal) = &bill.shared.journal {
                journal.room().await;
            }
            let result = call_with_retries(&*model, request, &bill.shared, id, run, turn).await;
            // Usage is recorded here, once, before the agent acts on the turn: nothing the
            // agent does afterwards (abort, settle) can lose it or count it twice. A failed
            // attempt was billed when it failed; a response bills its own usage.
            let own = match &result {
                TurnResult::Response(response) => Some(response.usage),
                TurnResult::Failed(_) | TurnResult::Panicked(_) | TurnResult::Cancelled => None,
            };
            bill.unbilled = false;
            let billed = bill.shared.registry.bill_turn(id, run, &bill.sink, own);
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
            bill.sink.flush();
            result
        };
        let future: TurnFuture = if span.is_disabled() {
            Box::pin(future)
        } else {
            Box::pin(future.instrument(span))
        };
        let waker = Arc::new(TurnWaker {
            actor: myself.clone(),
            turn,
            scheduled: AtomicBool::new(true),
        });
        self.turn_in_flight = Some(InFlight {
            turn,
            future,
            waker,
            sink,
            ready: None,
        });
        self.phase = Phase::Thinking { turn };
        match first {
            // The first poll, as a message: it comes after what the actor is doing now (the
            // children this turn's owner just started run first, as a turn's own task would
            // have let them).
            FirstPoll::Message => {
                let _ = myself.cast(AgentMsg::PollTurn { turn });
            }
            FirstPoll::Here => self.first_poll(myself, turn),
        }
    }

    /// The request of this run's turn `turn`, with `messages`, reporting to `sink`.
    fn request(&self, turn: u32, messages: Arc<[Message]>, sink: TurnSink) -> ModelRequest {
        ModelRequest {
            agent: self.id,
            definition: self.definition.clone(),
            depth: self.depth,
            incarnation: self.incarnation,
            run: self.run,
            turn,
            messages,
            tools: self.offer.specs.clone(),
            sink,
            sampling: if self.definition.sampling.is_unset() {
                self.shared.sampling.clone()
            } else {
                Arc::new(self.definition.sampling.or(&self.shared.sampling))
            },
        }
    }

    /// Whether continuing turn `turn`, cut off with `usage`, fits the model's context
    /// window: the model is asked the window of the request the continuation would send
    /// (unknown, or a panic asking, counts as fitting).
    fn continuation_fits(&self, turn: u32, usage: &Usage) -> Result<(), WouldNotFit> {
        let mut messages = self.conversation.to_vec();
        messages.push(Message::user(CONTINUE_NOTICE));
        let next = self.request(turn + 1, messages.into(), TurnSink::default());
        let asked =
            std::panic::catch_unwind(AssertUnwindSafe(|| self.shared.model.context_window(&next)));
        let window = asked.unwrap_or_else(|_| {
            tracing::warn!(agent = %self.id, "Model::context_window panicked; taken as unknown");
            None
        });
        match window {
            Some(window) => continuation::fits(window, usage, next.sampling.max_output_tokens),
            None => Ok(()),
        }
    }

    /// The first poll of a run's first turn, in `post_start` (no message was handled yet).
    /// A turn that is pending asks for its next poll when woken, as any turn does; one that
    /// finished keeps its result, acted on when a `PollTurn` message asks for it, so what was
    /// sent to the agent while it started (a steer, an abort, a question) is handled first,
    /// exactly as with a first poll on that message. Its response's text is the last text at
    /// once: an abort handled before it keeps that text as partial output.
    fn first_poll(&mut self, myself: &ActorRef<AgentMsg>, turn: u32) {
        let Some(in_flight) = self.turn_in_flight.as_mut().filter(|f| f.turn == turn) else {
            return;
        };
        if self.token.is_cancelled() {
            // Never polled after a cancellation: the message's poll leaves as `Cancelled`.
            let _ = myself.cast(AgentMsg::PollTurn { turn });
            return;
        }
        let Some(result) = poll_once(in_flight) else {
            return;
        };
        if let TurnResult::Response(response) = &result {
            keep_text(&mut self.last_text, &response.text);
        }
        in_flight.ready = Some(Box::new(result));
        in_flight.waker.scheduled.store(true, Ordering::Release);
        let _ = myself.cast(AgentMsg::PollTurn { turn });
    }

    /// Polls the model turn `turn` (its waker asked): its result once it has one. A turn the
    /// token has cancelled is not polled again (its model is never called after the
    /// cancellation): it leaves as `Cancelled`.
    ///
    /// A result the first poll got ([`first_poll`](Self::first_poll)) leaves now, whatever
    /// the token: the model had returned before the agent could see the cancellation, which
    /// the agent then acts on as it does on a response on its way.
    pub(super) fn poll_turn(&mut self, turn: u32) -> Option<TurnResult> {
        let in_flight = self.turn_in_flight.as_mut().filter(|f| f.turn == turn)?;
        let result = match in_flight.ready.take() {
            Some(ready) => *ready,
            None if self.token.is_cancelled() => {
                let in_flight = self.turn_in_flight.take()?;
                self.land(in_flight, false);
                return Some(TurnResult::Cancelled);
            }
            None => poll_once(in_flight)?,
        };
        let in_flight = self.turn_in_flight.take()?;
        self.land(in_flight, matches!(result, TurnResult::Response(_)));
        Some(result)
    }

    /// The turn in flight leaves: its future is dropped (billing, if it did not finish, what
    /// the model reported to the sink) and the text it held back is announced. A turn that
    /// did not return a response keeps what it streamed as the last text: the run's partial
    /// output (of a retried turn, its last attempt's that streamed any).
    pub(super) fn land(&mut self, in_flight: InFlight, responded: bool) {
        let InFlight { future, sink, .. } = in_flight;
        drop(future);
        // What it streamed and held back for a fuller `text_delta` event is announced now,
        // before anything of the run's end (a returned turn flushed its own).
        sink.flush();
        if !responded {
            let streamed = sink.partial_text();
            if !streamed.is_empty() {
                self.last_text = streamed;
            }
        }
    }

    /// The output to keep as partial if the run ends now: the text the turn in flight has
    /// streamed, else the model's last text.
    /// Either after the pieces of cut-off turns it continued.
    pub(super) fn partial(&self) -> String {
        let streamed = self
            .turn_in_flight
            .as_ref()
            .map(|in_flight| in_flight.sink.partial_text())
            .unwrap_or_default();
        let text = if streamed.is_empty() {
            &self.last_text
        } else {
            &streamed
        };
        format!("{}{text}", self.cut_text)
    }

    /// Model turn `turn` ended with `result` (it has left flight and billed).
    pub(super) async fn on_turn_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        result: TurnResult,
    ) {
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
                    .with_error_kind(error.kind)
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
        keep_text(&mut self.last_text, &response.text);
        if self.token.is_cancelled() {
            return self.abort(myself);
        }
        let mut calls = response.tool_calls;
        // An input nested past what JSON parsers read back is not kept (nor run): the
        // conversation goes to providers and into the journal, which must read it again.
        // (No allocation unless one is: this is every delegating turn's path.)
        let mut too_deep = Vec::new();
        for (index, call) in calls.iter_mut().enumerate() {
            if call.input.is_deep() {
                call.input = ToolInput::from(serde_json::json!({ "dropped": too_deep_text() }));
                too_deep.push(index);
            }
        }
        self.conversation
            .push(Message::assistant(response.text.clone(), calls.clone()));
        if calls.is_empty() && response.finish_reason == FinishReason::Length {
            // Cut off: not an answer. Continue it while the policy and the turns allow, and
            // join the pieces; else fail with the text so far as partial output.
            // The piece is kept once, in `cut_text`; the last text is what comes after it.
            self.cut_text.push_str(&response.text);
            self.last_text.clear();
            let allowed = self.shared.config.length_continuations;
            let turns_left = self.turns < self.max_turns;
            if !continuation::spent(self.continuations, allowed, turns_left) {
                // Never a request that cannot fit: the server would refuse it, or cut the
                // prompt and answer something else.
                if let Err(would_not_fit) = self.continuation_fits(turn, &response.usage) {
                    let outcome =
                        Outcome::failed(EndReason::LengthLimit, would_not_fit.to_string())
                            .with_partial(std::mem::take(&mut self.cut_text));
                    return self.end_run(myself, outcome);
                }
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
                // This answer (whole, or the end of a continued one: its pieces are in the
                // conversation) is not the run's: the next turn's is, never joined to it.
                self.cut_text.clear();
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
        // A call cut off by the output limit reaches here with its text as written (an
        // adapter's `{"_raw": ...}`): `dispatch` tells the model so instead of running it.
        let cut_off = response.finish_reason == FinishReason::Length;
        for (index, call) in calls.into_iter().enumerate() {
            if too_deep.contains(&index) {
                let text = serde_json::json!({ "error": too_deep_text() }).to_string();
                self.answer_call(turn, index, text, true);
                continue;
            }
            if index >= most {
                let text = format!(
                    "{{\"error\":\"too many tool calls in one turn: at most {most} run; this one \
                     did not\"}}"
                );
                self.answer_call(turn, index, text, true);
                continue;
            }
            self.dispatch(myself, turn, index, call, cut_off).await;
        }
        self.after_answer(myself);
    }
}

/// A response's text, kept as the run's last text before the agent acts on it: a run
/// aborted before then (the token was cancelled while the response was on its way) keeps it
/// as partial output. An empty text keeps the one before.
fn keep_text(last_text: &mut String, text: &str) {
    if !text.is_empty() {
        last_text.clear();
        last_text.push_str(text);
    }
}

/// Why a call whose input nests deeper than [`ToolInput::MAX_TEXT_DEPTH`] is not run.
fn too_deep_text() -> String {
    format!(
        "the input nests more than {} arrays and objects deep: not run",
        ToolInput::MAX_TEXT_DEPTH
    )
}

/// Calls the model for one turn, retrying retryable failures by the tree's retry policy.
/// The first attempt is inline; the retry loop (its backoff timer, the error it holds) is
/// boxed, so the turn future of every agent is not the size of a retrying one.
async fn call_with_retries(
    model: &dyn crate::model::Model,
    request: ModelRequest,
    shared: &SharedRef,
    id: AgentId,
    run: u32,
    turn: u32,
) -> TurnResult {
    // A panic here is caught where the turn is polled (`AgentState::poll_turn`).
    match one_attempt(model, &request, shared).await {
        Ok(response) => TurnResult::Response(response),
        Err(error) => Box::pin(retry_after(model, request, shared, id, run, turn, error)).await,
    }
}

/// One attempt of a turn: waits for a place among the model's calls in flight (the tree's
/// `max_model_calls`), then calls the model, holding the place until the call returns.
async fn one_attempt(
    model: &dyn crate::model::Model,
    request: &ModelRequest,
    shared: &SharedRef,
) -> Result<crate::model::ModelResponse, crate::error::ModelError> {
    let _place = shared.model_permits.acquire(request.model()).await;
    model.turn(request.clone()).await
}

/// After attempt 1 failed with `error`: bills each failed attempt (its error's usage, else
/// what it reported to the sink), announces the text it held back and then the retry as a
/// `retrying` event, waits and tries again while the policy allows.
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
        let own = (!error.usage.is_zero()).then_some(error.usage);
        shared.registry.bill_turn(id, run, &request.sink, own);
        let Some(wait) = retry::delay(&policy, attempt, error.kind, error.retry_after, seed) else {
            if let Some(why) = retry::given_up(&policy, attempt, error.kind, error.retry_after) {
                error.message = format!("{}; {why}", error.message);
            }
            return TurnResult::Failed(Box::new(error));
        };
        let delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(
            agent = %id, turn, attempt, error = %error, delay_ms,
            "model call failed; retrying"
        );
        // Everything of the failed attempt goes out before its `retrying` event (its usage
        // was billed above), so nothing of it comes after: the next attempt's text follows.
        request.sink.flush();
        shared.registry.announce_run(
            id,
            run,
            EventKind::Retrying {
                turn,
                attempt,
                error_kind: error.kind,
                delay_ms,
            },
        );
        request.sink.next_attempt();
        tokio::time::sleep(wait).await;
        attempt += 1;
        error = match one_attempt(model, &request, shared).await {
            Ok(response) => return TurnResult::Response(response),
            Err(error) => error,
        };
    }
}

/// Where a turn's first poll happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstPoll {
    /// On a `PollTurn` message the actor sends itself: after what it is doing now.
    Message,
    /// At once: a run's first turn, from `post_start`.
    Here,
}

/// Polls `in_flight`'s future once: its result if it finished.
fn poll_once(in_flight: &mut InFlight) -> Option<TurnResult> {
    // Reset before the poll: a wake during it asks for one more.
    in_flight.waker.scheduled.store(false, Ordering::Release);
    let waker = Waker::from(in_flight.waker.clone());
    let mut cx = Context::from_waker(&waker);
    let future = in_flight.future.as_mut();
    match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(&mut cx))) {
        Ok(Poll::Pending) => None,
        Ok(Poll::Ready(result)) => Some(result),
        // A panic in the model (or anywhere in the turn) ends the turn; the future is
        // dropped unpolled since, and its guard bills what the sink was told.
        Err(payload) => Some(TurnResult::Panicked(crate::util::panic_message(
            payload.as_ref(),
        ))),
    }
}

/// A model turn: the future an agent's actor polls (boxed once per turn: its size is the
/// model call's, which the agent's state should not carry when it is not in a turn).
pub(crate) type TurnFuture = Pin<Box<dyn Future<Output = TurnResult> + Send>>;

/// The waker of a model turn: asks its actor to poll the turn, with at most one
/// [`AgentMsg::PollTurn`] outstanding between polls however often the turn is woken (a
/// streaming model wakes it per chunk).
pub(crate) struct TurnWaker {
    actor: ActorRef<AgentMsg>,
    turn: u32,
    /// A poll is asked for and not yet begun.
    scheduled: AtomicBool,
}

impl Wake for TurnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            // Refused only once the actor is gone, whose turn went with it.
            let _ = self.actor.cast(AgentMsg::PollTurn { turn: self.turn });
        }
    }
}

/// The billing guard of a model turn: dropped before the turn billed (cancelled, the actor
/// killed, a panic), it bills what the model reported to the sink, so a turn that leaves
/// never records usage afterwards and never records it twice.
struct TurnBill {
    unbilled: bool,
    shared: SharedRef,
    id: AgentId,
    run: u32,
    sink: TurnSink,
}

impl Drop for TurnBill {
    fn drop(&mut self) {
        if self.unbilled {
            self.shared
                .registry
                .bill_turn(self.id, self.run, &self.sink, None);
        }
    }
}
