//! The tool calls of one model turn: the call table, keyed by each call's place in the turn
//! (never by the model's call id alone, which need not be unique), and user tools run as
//! tasks.

use agent_tree_protocol::{AgentId, Message, Outcome, ToolCall, WaitPolicy};
use ractor::ActorRef;
use tokio::task::AbortHandle;

use super::AgentState;
use super::lifecycle::Phase;
use super::orchestration;
use crate::msg::AgentMsg;
use crate::policy::wait as wait_policy;
use crate::tool::ToolContext;
use crate::util::CatchUnwind;

/// The calls of one turn, in call order.
#[derive(Debug)]
pub(super) struct Calls {
    calls: Vec<PendingCall>,
}

/// One call of the turn.
#[derive(Debug)]
pub(super) struct PendingCall {
    /// The model's id for it, echoed in its result message.
    call_id: String,
    /// The result text and whether it is an error, once known.
    result: Option<(String, bool)>,
    /// The task answering it (a user tool, a timed or non-child wait, a question watch).
    pub(super) task: Option<AbortHandle>,
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
        }
    }

    /// The unanswered call at `index`.
    pub(super) fn open(&mut self, index: usize) -> Option<&mut PendingCall> {
        self.calls.get_mut(index).filter(|c| c.result.is_none())
    }

    /// Every unanswered call.
    pub(super) fn open_calls(&mut self) -> impl Iterator<Item = (usize, &mut PendingCall)> {
        self.calls
            .iter_mut()
            .enumerate()
            .filter(|(_, c)| c.result.is_none())
    }

    /// Whether an `ask_owner` of this turn waits for its answer.
    pub(super) fn asking(&self) -> bool {
        self.calls
            .iter()
            .any(|c| c.result.is_none() && matches!(c.waiting, Waiting::Owner))
    }

    /// Whether any unanswered call waits on `agent`.
    pub(super) fn waits_on(&self, agent: AgentId) -> bool {
        self.calls.iter().any(|c| {
            c.result.is_none()
                && matches!(&c.waiting, Waiting::Agents { agents, .. } if agents.contains(&agent))
        })
    }

    fn all_answered(&self) -> bool {
        self.calls.iter().all(|c| c.result.is_some())
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
}

impl PendingCall {
    /// Records the result and stops the call's task. Returns the agents it waited on.
    pub(super) fn answer(&mut self, text: String, is_error: bool) -> Vec<AgentId> {
        self.result = Some((text, is_error));
        if let Some(task) = self.task.take() {
            task.abort();
        }
        match std::mem::take(&mut self.waiting) {
            Waiting::Agents { agents, .. } => agents,
            _ => Vec::new(),
        }
    }
}

impl AgentState {
    /// Records the result of call `index` of turn `turn`. The children it waited on whose
    /// outcome is final now count as read (a wait cut short by its timeout reads nothing).
    pub(super) fn answer_call(&mut self, turn: u32, index: usize, text: String, is_error: bool) {
        let Some(call) = self.phase.calls_mut(turn).and_then(|c| c.open(index)) else {
            return;
        };
        for agent in call.answer(text, is_error) {
            self.children.mark_read(agent);
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
        for (index, call) in calls.open_calls() {
            let Waiting::Agents { agents, set } = &mut call.waiting else {
                continue;
            };
            if !agents.contains(&child) {
                continue;
            }
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
            if let Some(call) = self.phase.current_calls().and_then(|c| c.open(index)) {
                for agent in call.answer(text, false) {
                    self.children.mark_read(agent);
                }
            }
        }
        any
    }

    /// Starts one tool call. Orchestration tools are answered by [`orchestration`]; user
    /// tools run as tasks.
    pub(super) async fn dispatch(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        turn: u32,
        index: usize,
        call: ToolCall,
    ) {
        if let Some(tool) = orchestration::Orchestration::named(&call.name) {
            if self.capabilities.holds(&call.name) {
                orchestration::dispatch(self, myself, turn, index, tool, call).await;
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
        let task = self.shared.spawn(async move {
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
        if let Some(call) = self.phase.calls_mut(turn).and_then(|c| c.open(index)) {
            call.task = Some(task.abort_handle());
        }
    }
}
