//! Subscriptions to a tree's lifecycle events.

use agent_tree_protocol::Event;
use tokio::sync::mpsc;

/// A subscription to every lifecycle event of a tree from the moment it was made.
///
/// Nothing is ever dropped: each subscription has its own unbounded queue, so a slow reader
/// costs memory, never events. Drop the stream to unsubscribe.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<Event>,
}

impl EventStream {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Event>) -> Self {
        EventStream { rx }
    }

    /// The next event; `None` once the tree is gone and every event was read.
    pub async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next event if one is queued.
    pub fn try_next(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }

    /// Every event queued now.
    pub fn drain(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.try_next()).collect()
    }
}
