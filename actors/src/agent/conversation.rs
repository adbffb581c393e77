//! An agent's conversation, in two parts: what it published at its last turn boundary
//! (shared, unchanged, with that turn's request and the conversation cell) and what was added
//! since. A run's conversation only grows, so publishing moves the added messages behind a
//! copy of the published ones, and a boundary with nothing added shares the last copy.

use std::sync::Arc;

use agent_tree_protocol::{Message, Role};

/// The result an inherited context gives each call its owner's turn had not had answered
/// when the child was spawned.
pub(crate) const STILL_RUNNING: &str = "{\"status\":\"running\",\"note\":\"not returned yet when this conversation was handed to a subagent\"}";

/// The conversation of a run (the system prompt is sent separately).
#[derive(Debug)]
pub(super) struct Conversation {
    /// Up to the last turn boundary (before the first: the run's start), shared.
    published: Arc<[Message]>,
    /// Added since, in order.
    added: Vec<Message>,
}

impl Conversation {
    /// A run's start: `context` (inherited, or a resumed conversation), then `task` if any.
    /// One allocation: the messages are moved into the shared part, which the first turn
    /// boundary publishes as it is.
    pub(super) fn new(context: Vec<Message>, task: Option<Message>) -> Self {
        Conversation {
            published: context.into_iter().chain(task).collect(),
            added: Vec::new(),
        }
    }

    /// Appends `message`.
    pub(super) fn push(&mut self, message: Message) {
        self.added.push(message);
    }

    /// Appends `messages`, in order.
    pub(super) fn extend(&mut self, messages: impl IntoIterator<Item = Message>) {
        self.added.extend(messages);
    }

    /// How many messages it holds.
    pub(super) fn len(&self) -> usize {
        self.published.len() + self.added.len()
    }

    /// Its last message, if any.
    pub(super) fn last(&self) -> Option<&Message> {
        self.added.last().or_else(|| self.published.last())
    }

    /// The position of its last assistant message, if any.
    pub(super) fn last_assistant(&self) -> Option<usize> {
        let is_assistant = |m: &Message| m.role == Role::Assistant;
        match self.added.iter().rposition(is_assistant) {
            Some(at) => Some(self.published.len() + at),
            None => self.published.iter().rposition(is_assistant),
        }
    }

    /// The whole conversation, copied.
    pub(super) fn to_vec(&self) -> Vec<Message> {
        let mut all = Vec::with_capacity(self.len());
        all.extend_from_slice(&self.published);
        all.extend_from_slice(&self.added);
        all
    }

    /// The conversation a child inheriting its owner's context is given: all of it, with
    /// the calls of the turn being acted on (the child's own spawn among them), which have
    /// no results yet, each given [`STILL_RUNNING`] as its result. Providers refuse a
    /// conversation with a call left without its result, and the child sees what its owner
    /// set going beside it.
    pub(super) fn inheritable(&self) -> Vec<Message> {
        let mut all = self.to_vec();
        let pending: Vec<Message> = match all.last() {
            Some(last) if last.role == Role::Assistant => last
                .tool_calls
                .iter()
                .map(|call| Message::tool_result(call.id.clone(), STILL_RUNNING, false))
                .collect(),
            _ => Vec::new(),
        };
        all.extend(pending);
        all
    }

    /// The whole conversation, shared: the published part when nothing was added since it
    /// was published (no copy), else a new shared copy with the added messages moved in
    /// (one allocation), which is the published part from now on.
    pub(super) fn publish(&mut self) -> Arc<[Message]> {
        if !self.added.is_empty() {
            self.published = self
                .published
                .iter()
                .cloned()
                .chain(self.added.drain(..))
                .collect();
        }
        self.published.clone()
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{Message, ToolCall};
    use serde_json::json;

    use super::{Conversation, STILL_RUNNING};

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "Agent", json!({ "agent_type": "w", "prompt": id }))
    }

    /// The turn being acted on gives an inheriting child no call without its result: each
    /// of its calls gets the "still running" result, in call order; calls answered earlier
    /// keep their results, and a conversation not acting on calls is given whole.
    #[test]
    fn an_inherited_context_has_no_call_without_its_result() {
        let answered = [
            Message::assistant("", vec![call("c1")]),
            Message::tool_result("c1", "done", false),
        ];
        let acting = Message::assistant("delegating", vec![call("c2"), call("c3")]);
        let mut conversation = Conversation::new(vec![Message::user("task")], None);
        conversation.extend(answered.clone());
        conversation.publish();
        conversation.push(acting.clone());
        let mut expected = vec![Message::user("task")];
        expected.extend(answered);
        expected.push(acting);
        expected.push(Message::tool_result("c2", STILL_RUNNING, false));
        expected.push(Message::tool_result("c3", STILL_RUNNING, false));
        assert_eq!(conversation.inheritable(), expected);

        // Nothing being acted on: all of it.
        let mut idle = Conversation::new(vec![Message::user("task")], None);
        idle.push(Message::assistant("thinking aloud", Vec::new()));
        assert_eq!(idle.inheritable(), idle.to_vec());
    }
}
