//! The tool calls of one model turn: the call table, keyed by each call's place in the turn
//! (never by the model's call id alone, which need not be unique), and user tools run as
//! tasks.

use crate::util::IdMap;

use agent_tree_protocol::{AgentId, Message, Outcome, ToolCall, WaitPolicy};
use ractor::ActorRef;
use tokio::task::AbortHandle;

use super::AgentState;
use super::lifecycle::Phase;
use super::orchestration;
use crate::msg::AgentMsg;
use crate::policy::capability::NameMatch;
use crate::policy::wait as wait_policy;
use crate::tool::ToolContext;
use crate::util::CatchUnwind;

/// The calls of one turn, in call order, with the count of open calls and, in a turn of more
/// than [`INDEX_FROM`] calls, an index of which open calls wait on which agent, so a child's
/// end finds its waiters without a scan and a turn of N calls stays linear in N (a scan of a
/// few calls is cheaper than the map). Every change goes through these methods, which keep
/// the index and the count in step.
#[derive(Debug)]
pub(super) struct Calls {
    calls: Vec<PendingCall>,
    /// Open calls waiting on each agent (a call waiting on a set is under each agent of it);
    /// only in a turn of more than [`INDEX_FROM`] calls. Boxed so the table, inline in every
    /// agent's lifecycle phase, stays a pointer wide without it.
    #[allow(clippy::box_collection)]
    waiters: Option<Box<IdMap<AgentId, Vec<usize>>>>,
    /// Calls without a result yet.
    open: usize,
}

/// How many calls a turn has before its waits are indexed.
const INDEX_FROM: usize = 16;

/// One call of the turn.
#[derive(Debug)]
pub(super) struct PendingCall {
    /// The model's id for it, echoed in its result message.
    call_id: String,
    /// The result text and whether it is an error, once known.
    result: Option<(String, bool)>,
    /// The task answering it (a user tool, a timed or non-child wait, a question watch).
    task: Option<AbortHandle>,
    /// What it waits for, if it is not answered at once.
    pub(super) waiting: Waiting,
}

/// What an unanswered call waits for.
#[derive(Debug, Default)]
pub(super) enum Waiting {
    /// Nothing (answered at once, or by its task).
    #[default]
    Nothing,
    /// The final outcome of these agents (one, or a set). With `set`, the agents are this
    /// agent's children and the call is answered from the child table as each ends (under
    /// the policy); without, by the call's task (or, for one child, from the table too).
    Agents {
        agents: Vec<AgentId>,
        set: Option<(WaitPolicy, Vec<Option<Outcome>>)>,
    },
    /// The owner's answer to an `ask_owner` question (its next steer).
    Owner,
}

impl Calls {
    pub(super) fn new(calls: &[ToolCall]) -> Self {
        Calls {
            calls: calls
                .iter()
                .map(|c| PendingCall {
                    call_id: c.id.clone(),
                    result: None,
                    task: None,
                    waiting: Waiting::Nothing,
                })
                .collect(),
            waiters: (calls.len() > INDEX_FROM).then(Box::default),
            open: calls.len(),
        }
    }

    /// The unanswered call at `index`.
    pub(super) fn open(&mut self, index: usize) -> Option<&mut PendingCall> {
        self.calls.get_mut(index).filter(|c| c.result.is_none())
    }

    /// The unanswered call at `index` is answered by `task` (aborted when it is answered
    /// another way) and waits for `waiting`.
    pub(super) fn wait(&mut self, index: usize, task: Option<AbortHandle>, waiting: Waiting) {
        let Some(call) = self.calls.get_mut(index).filter(|c| c.result.is_none()) else {
            return;
        };
        if let (Waiting::Agents { agents, .. }, Some(index_of)) = (&waiting, &mut self.waiters) {
            for &agent in agents {
                let waiters = index_of.entry(agent).or_default();
                if !waiters.contains(&index) {
                    waiters.push(index);
                }
            }
        }
        call.task = task;
        call.waiting = waiting;
    }

    /// The index of the unanswered call waiting for its owner's answer, if there is one.
    pub(super) fn asking_index(&self) -> Option<usize> {
        self.calls
            .iter()
            .position(|c| c.result.is_none() && matches!(c.waiting, Waiting::Owner))
    }

    /// Whether an `ask_owner` of this turn waits for its answer.
    pub(super) fn asking(&self) -> bool {
        self.asking_index().is_some()
    }

    /// The unanswered calls waiting on `agent`, in call order.
    pub(super) fn waiting_on(&self, agent: AgentId) -> Vec<usize> {
        match &self.waiters {
            Some(index_of) => {
                let mut out = index_of.get(&agent).cloned().unwrap_or_default();
                out.sort_unstable();
                out
            }
            None => self
                .calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.result.is_none() && c.waits_on(agent))
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// Whether any unanswered call waits on `agent`.
    pub(super) fn waits_on(&self, agent: AgentId) -> bool {
        match &self.waiters {
            Some(index_of) => index_of.get(&agent).is_some_and(|w| !w.is_empty()),
            None => self
                .calls
                .iter()
                .any(|c| c.result.is_none() && c.waits_on(agent)),
        }
    }

    fn all_answered(&self) -> bool {
        self.open == 0
    }

    /// Records the result of the unanswered call at `index` and stops its task. Returns the
    /// agents it waited on (`None` when it was answered already).
    pub(super) fn answer(
        &mut self,
        index: usize,
        text: String,
        is_error: bool,
    ) -> Option<Vec<AgentId>> {
        let call = self.calls.get_mut(index).filter(|c| c.result.is_none())?;
        call.result = Some((text, is_error));
        self.open -= 1;
        if let Some(task) = call.task.take() {
            task.abort();
        }
        let agents = match std::mem::take(&mut call.waiting) {
            Waiting::Agents { agents, .. } => agents,
            _ => Vec::new(),
        };
        if let Some(index_of) = &mut self.waiters {
            for agent in &agents {
                if let Some(waiters) = index_of.get_mut(agent) {
                    waiters.retain(|&i| i != index);
                }
            }
        }
        Some(agents)
    }

    /// Stops every call's task.
    pub(super) fn abort_tasks(&mut self) {
        for task in self.calls.iter_mut().filter_map(|c| c.task.take()) {
            task.abort();
        }
    }

    /// The results in call order, as tool messages.
    fn into_messages(self) -> impl Iterator<Item = Message> {
        self.calls.into_iter().map(|call| {
            let (text, is_error) = call.result.unwrap_or_default();
            Message::tool_result(call.call_id, text, is_error)
        })
    }

    /// The results in call order, an unanswered call's as an error saying the run ended
    /// before it returned.
    fn into_closed_messages(self) -> impl Iterator<Item = Message> {
        self.calls.into_iter().map(|call| {
            let (text, is_error) = call
                .result
                .unwrap_or_else(|| (NOT_ANSWERED.to_owned(), true));
            Message::tool_result(call.call_id, text, is_error)
        })
    }
}

/// The result a call gets in the kept conversation when its run ends before it returned.
pub(crate) const NOT_ANSWERED: &str =
    "{\"error\":\"not answered: the run ended before this call returned\"}";

/// The error result of a call whose arguments the model wrote as text that is not JSON (an
/// adapter passes it as `{"_raw": ...}`), or `None` for a call that may run. Such a call is
/// never run: the model is told plainly what happened and how to go on, a call its turn's
/// output limit cut off (`cut_off`) as such.
fn unreadable_arguments(call: &ToolCall, cut_off: bool) -> Option<String> {
    call.input.raw_arguments()?;
    let mut tool = call.name.clone();
    crate::error::cut_to(&mut tool, 64);
    let error = if cut_off {
        format!(
            "your call to `{tool}` was cut off at the output length limit before its arguments \
             were complete, so nothing was run: call it again with shorter arguments (or say \
             it in fewer words)"
        )
    } else {
        format!(
            "the arguments of your call to `{tool}` were not valid JSON, so nothing was run: \
             call it again with its arguments as a JSON object"
        )
    };
    Some(serde_json::json!({ "error": error }).to_string())
}

impl PendingCall {
    /// Whether it waits on `agent`.
    fn waits_on(&self, agent: AgentId) -> bool {
        matches!(&self.waiting, Waiting::Agents { agents, .. } if agents.contains(&agent))
    }
}

impl AgentState {
    /// A run ending with its turn's calls not all answered closes them in its conversation:
    /// each gets the result it had, or [`NOT_ANSWERED`]. The conversation a resume continues
    /// then has a result for every call, as providers require (one with a call left without
    /// its result is refused).
    pub(super) fn close_calls(&mut self) {
        if !matches!(self.phase, Phase::Acting { .. }) {
            return;
        }
        let Phase::Acting { calls, .. } = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        self.conversation.extend(calls.into_closed_messages());
    }

    /// Records the result of call `index` of turn `turn`. The children it waited on whose
    /// outcome is final now count as read (a wait cut short by its timeout reads nothing).
    pub(super) fn answer_call(&mut self, turn: u32, index: usize, text: String, is_error: bool) {
        let Some(calls) = self.phase.calls_mut(turn) else {
            return;
        };
        for agent in calls.answer(index, text, is_error).unwrap_or_default() {
            self.mark_read(agent);
        }
    }

    /// A tool task finished.
    pub(super) fn on_tool_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        index: usize,
        result: Result<String, String>,
    ) {
        let (text, is_error) = match result {
            Ok(text) => (text, false),
            Err(error) => (error, true),
        };
        self.answer_call(turn, index, text, is_error);
        self.after_answer(myself);
    }

    /// When every call of the turn is answered, adds the results in call order and starts the
    /// next turn.
    pub(super) fn after_answer(&mut self, myself: &ActorRef<AgentMsg>) {
        if self.token.is_cancelled() {
            self.abort(myself);
            return;
        }
        if !matches!(&self.phase, Phase::Acting { calls, .. } if calls.all_answered()) {
            return;
        }
        let Phase::Acting { calls, .. } = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        self.conversation.extend(calls.into_messages());
        self.next_turn(myself);
    }

    /// The final outcome of child `child` is known: answers every call of the turn waiting
    /// for it (a set under its policy). Returns whether any call was answered.
    pub(super) fn answer_waits_on(&mut self, child: AgentId, outcome: &Outcome) -> bool {
        let mut answered = Vec::new();
        let mut aborts = Vec::new();
        let Some(calls) = self.phase.current_calls() else {
            return false;
        };
        for index in calls.waiting_on(child) {
            let Some(call) = calls.open(index) else {
                continue;
            };
            let Waiting::Agents { agents, set } = &mut call.waiting else {
                continue;
            };
            match set {
                Some((policy, outcomes)) => {
                    // A set may name the same agent twice: every place of it is answered.
                    for (slot, _) in outcomes
                        .iter_mut()
                        .zip(agents.iter())
                        .filter(|(_, a)| **a == child)
                    {
                        *slot = Some(outcome.clone());
                    }
                    for i in wait_policy::to_abort(*policy, outcomes) {
                        aborts.push(agents[i]);
                    }
                    if outcomes.iter().all(Option::is_some) {
                        let list: Vec<(AgentId, Outcome)> = agents
                            .iter()
                            .copied()
                            .zip(outcomes.iter().flatten().cloned())
                            .collect();
                        let text = orchestration::set_result(*policy, &list);
                        answered.push((index, text));
                    }
                }
                None if agents.len() == 1 => {
                    answered.push((index, orchestration::result_text(child, Some(outcome))));
                }
                // A set with agents outside this agent's children: its task answers.
                None => {}
            }
        }
        for agent in aborts {
            let _ = self
                .shared
                .registry
                .abort(agent, agent_tree_protocol::EndReason::Aborted);
        }
        let any = !answered.is_empty();
        for (index, text) in answered {
            let agents = self
                .phase
                .current_calls()
                .and_then(|c| c.answer(index, text, false));
            for agent in agents.unwrap_or_default() {
                self.mark_read(agent);
            }
        }
        any
    }

    /// The name of the offered tool `name` means: itself, else the one offered tool equal
    /// to it ignoring ASCII case (none when several are).
    fn offered_name(&self, name: &str) -> Option<&str> {
        let offered = self.offer.specs.iter().map(|spec| spec.name.as_str());
        match crate::policy::capability::match_name(name, offered) {
            NameMatch::Exact(tool) | NameMatch::Folded(tool) => Some(tool),
            NameMatch::Ambiguous(_) | NameMatch::None => None,
        }
    }

    /// The error result of a call of a tool this agent is not offered: short JSON naming
    /// the tools it is offered, so the model can correct itself.
    fn not_available(&self, name: &str) -> String {
        let mut shown = name.to_owned();
        crate::error::cut_to(&mut shown, 64);
        let offered: Vec<&str> = self.offer.specs.iter().map(|s| s.name.as_str()).collect();
        serde_json::json!({
            "error": format!("tool {shown:?} is not available to this agent"),
            "available": offered,
        })
        .to_string()
    }

    /// Starts one tool call. Orchestration tools are answered by [`orchestration`]; user
    /// tools run as tasks. A call of an offered tool whose arguments were not JSON (an
    /// adapter's `{"_raw": ...}`) runs neither: it is answered with an error saying what
    /// happened, a cut-off one (`cut_off`: its turn stopped at the length limit) as such.
    pub(super) async fn dispatch(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        index: usize,
        mut call: ToolCall,
        cut_off: bool,
    ) {
        // A model that writes a tool's name in another case (`Grep` for `grep`, as the
        // prompts of agent files do) means the one offered tool of that name.
        if let Some(name) = self.offered_name(&call.name) {
            if name != call.name {
                call.name = name.to_owned();
            }
        }
        if let Some(tool) = orchestration::Orchestration::named(&call.name) {
            if !self.offer.capabilities.holds(&call.name) {
                let text = self.not_available(&call.name);
                self.answer_call(turn, index, text, true);
            } else if let Some(text) = unreadable_arguments(&call, cut_off) {
                self.answer_call(turn, index, text, true);
            } else {
                orchestration::dispatch(self, myself, turn, index, tool, call).await;
            }
            return;
        }
        let tool = self
            .offer
            .capabilities
            .user_tools
            .iter()
            .any(|t| t == &call.name)
            .then(|| self.shared.toolbox.get(&call.name).cloned())
            .flatten();
        let Some(tool) = tool else {
            let text = self.not_available(&call.name);
            self.answer_call(turn, index, text, true);
            return;
        };
        if let Some(text) = unreadable_arguments(&call, cut_off) {
            self.answer_call(turn, index, text, true);
            return;
        }
        let context = ToolContext::for_run(
            self.id,
            self.definition.name.clone(),
            self.depth,
            call.id.clone(),
            crate::tool::ProgressSink {
                shared: std::sync::Arc::downgrade(&self.shared),
                run: self.run,
                tool: call.name.clone(),
            },
        );
        let token = self.token.clone();
        let reply_to = myself.clone();
        let span = tracing::info_span!(
            parent: self.span.id(),
            "execute_tool",
            "gen_ai.operation.name" = "execute_tool",
            "gen_ai.tool.name" = %call.name,
            "gen_ai.tool.call.id" = %call.id,
            server = tool.server(),
        );
        let task = self.shared.spawn_in(span, async move {
            let result = tokio::select! {
                biased;
                () = token.cancelled() => return,
                r = CatchUnwind::new(tool.call(context, call.input.to_value())) => match r {
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
        if let Some(calls) = self.phase.calls_mut(turn) {
            calls.wait(index, Some(task.abort_handle()), Waiting::Nothing);
        }
    }
}
