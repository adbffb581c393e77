//! An agent's conversation, in two parts: what it published at its last turn boundary
//! (shared, unchanged, with that turn's request and the conversation cell) and what was added
//! since. A run's conversation only grows, so publishing moves the added messages behind a
//! copy of the published ones, and a boundary with nothing added shares the last copy.

use std::sync::Arc;

use agent_tree_protocol::{Message, Role};

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
