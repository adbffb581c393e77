//! Questions and steers: a child's `ask_owner` arriving here, this agent's own pending
//! question answered by its owner's next steer, and steers in general.

use agent_tree_protocol::{AgentId, AgentStatus, EventKind};
use ractor::{ActorRef, RpcReplyPort};

use super::{AgentState, Inbound};
use crate::error::ControlError;
use crate::msg::{AgentMsg, SteerReceipt};

impl AgentState {
    /// A steer arrived. From the owner (the one a question goes to), it answers a pending
    /// `ask_owner` call if there is one; otherwise, and from anyone else, it waits for the
    /// next turn boundary (the owner, which keeps the question open, hears no answer it did
    /// not give). The receipt is honest: `delivered` only if a turn will read it, so a steer
    /// that crossed the end of the run, or arrives during the last turn `max_turns` allows,
    /// is refused.
    pub(super) fn on_steer(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        text: String,
        from: AgentId,
        reply: Option<RpcReplyPort<Result<SteerReceipt, ControlError>>>,
    ) {
        let receipt = if self.phase.run_over() {
            let status = self
                .shared
                .registry
                .status(self.id)
                .unwrap_or(AgentStatus::Completing);
            Err(ControlError::WrongStatus(self.id, status))
        } else {
            let answers = from == self.owner_id
                && self
                    .phase
                    .current_calls()
                    .is_some_and(|calls| calls.asking());
            if !answers && self.turns >= self.max_turns {
                Err(ControlError::NoTurnsLeft(self.id))
            } else {
                // Journaled before it is receipted: as the question's answer (read once,
                // also after a crash), or as a steer for the next turn boundary.
                if answers {
                    self.journal_answer(&text, false);
                    let _ = self.answer_question(text, false);
                    self.shared
                        .registry
                        .announce_run(self.id, self.run, EventKind::Steered);
                    self.after_answer(myself);
                } else {
                    self.journal_steer(&text);
                    self.inbox.push_back(Inbound::Steer(text));
                }
                Ok(SteerReceipt::Delivered)
            }
        };
        if let Some(reply) = reply {
            let _ = reply.send(receipt);
        }
    }

    /// Journals a steer this run receipts `delivered`, before the receipt is sent: a crash
    /// before the turn boundary that reads it keeps it for the run a resume starts (its
    /// boundary's conversation line, after it, says it was read).
    fn journal_steer(&self, text: &str) {
        if let Some(journal) = &self.shared.journal {
            journal.steer(self.id, text);
        }
    }

    /// Journals the answer to this run's open question before the run reads it: a crash
    /// before the turn boundary after it hands it to the run a recovery starts, without
    /// asking again.
    fn journal_answer(&self, text: &str, is_error: bool) {
        if let Some(journal) = &self.shared.journal {
            journal.answer(self.id, self.run, text, is_error);
        }
    }

    /// Answers the pending `ask_owner` call with `text`, or hands `text` back when there is
    /// none.
    fn answer_question(&mut self, text: String, is_error: bool) -> Result<(), String> {
        let Some(calls) = self.phase.current_calls() else {
            return Err(text);
        };
        let Some(index) = calls.asking_index() else {
            return Err(text);
        };
        calls.answer(index, text, is_error);
        Ok(())
    }

    /// The application's handler answered the question this run asked at turn `asked.1`;
    /// an answer to a question already answered (by a steer), or to an earlier run's or
    /// turn's question, is dropped, never read as a steer or as another question's answer.
    pub(super) fn on_question_answered(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        answer: String,
        asked: (u32, u32),
    ) {
        let (run, turn) = asked;
        let pending = run == self.run
            && self
                .phase
                .calls_mut(turn)
                .is_some_and(|calls| calls.asking());
        if pending {
            self.journal_answer(&answer, false);
            if self.answer_question(answer, false).is_ok() {
                self.after_answer(myself);
            }
        }
    }

    /// The owner cannot answer the pending `ask_owner` call: it gets an error result.
    pub(super) fn on_question_refused(&mut self, myself: &ActorRef<AgentMsg>, reason: String) {
        if self
            .phase
            .current_calls()
            .is_some_and(|calls| calls.asking())
        {
            self.journal_answer(&reason, true);
        }
        if self.answer_question(reason, true).is_ok() {
            self.after_answer(myself);
        }
    }

    /// A child asked a question: it enters the conversation at the next turn boundary, and
    /// any wait that includes that child is answered now with the question, so the turn can
    /// end and the model can answer (a foreground wait would otherwise deadlock). The child's
    /// end is then noticed like a background child's.
    ///
    /// A question of a run whose end this agent already handled (a kill's supervision event
    /// can overtake the question in the mailbox) is nobody's: it is dropped, so no wait is
    /// answered with it.
    pub(super) fn on_asked(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        child: AgentId,
        question: String,
        run: u32,
    ) {
        if !self.children.is_running_run(child, run) {
            return;
        }
        if self.phase.run_over() {
            // No model turn will ever read the question: say so rather than leave the child
            // (and a draining owner) waiting forever.
            self.refuse_question(child);
            return;
        }
        self.open_questions.insert(child, question.clone());
        let notice = serde_json::json!({
            "notice": "question",
            "agent_id": child,
            "question": question,
            "answer_with": "steer_subagent",
        });
        self.inbox.push_back(Inbound::Notice(notice.to_string()));
        self.children.asked(child);
        if let Some(calls) = self.phase.current_calls() {
            for index in calls.waiting_on(child) {
                calls.answer(index, asking(child, &question), false);
            }
        }
        self.after_answer(myself);
    }

    /// The open question of one of `agents`, as the answer of a wait that includes it.
    pub(super) fn asking_among(&self, agents: &[AgentId]) -> Option<String> {
        agents.iter().find_map(|agent| {
            self.open_questions
                .get(agent)
                .map(|question| asking(*agent, question))
        })
    }

    /// Tells `child` its question will not be answered.
    pub(super) fn refuse_question(&self, child: AgentId) {
        let refusal = AgentMsg::QuestionRefused {
            reason: format!("{} has finished its run and cannot answer", self.id),
        };
        if let Some((_, actor)) = self.shared.registry.actors_of(&[child]).first() {
            let _ = actor.send_message(refusal);
        }
    }
}

/// A wait's answer when an agent it waits on asks a question: the owner's model must answer
/// it (a wait would otherwise never end).
fn asking(child: AgentId, question: &str) -> String {
    serde_json::json!({ "agent_id": child, "status": "asking", "question": question }).to_string()
}
