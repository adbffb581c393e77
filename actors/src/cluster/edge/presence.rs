//! Whether the child's node of an edge is still the process the edge was made with, and
//! still there: the owner's side's view of a crash, as opposed to a short disconnect.
//!
//! ractor_cluster reports a closed session the same way for a crash and for a network blip,
//! and a reconnect is a new session. So the owner's side gives a node whose session closed
//! a **reconnect window**: back within it (as the same process) the edge replays and the
//! agents see nothing; not back, the node is down. A node that comes back as another
//! process (its **boot id** differs from the one its first frame carried) is down at once:
//! its hosted subtrees went with the old process.

use std::time::Duration;

/// Why the child's node is taken for down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Down {
    /// Its session closed and it was not back within the window.
    NotBack {
        /// The window.
        window: Duration,
    },
    /// A frame came from another process of it.
    Restarted,
}

/// The owner's side's view of one edge's child's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Presence {
    window: Duration,
    /// The node's process, from its first frame.
    boot: Option<u64>,
    /// Since when its session is closed.
    down_since: Option<Duration>,
}

impl Presence {
    /// A node whose session is ready (`connected`) or not, at `now`.
    pub(crate) fn new(window: Duration, connected: bool, now: Duration) -> Self {
        Presence {
            window,
            boot: None,
            down_since: (!connected).then_some(now),
        }
    }

    /// Whether frames can go now (a session is ready).
    pub(crate) fn connected(&self) -> bool {
        self.down_since.is_none()
    }

    /// The session closed at `now` (a second close keeps the first time).
    pub(crate) fn closed(&mut self, now: Duration) {
        self.down_since.get_or_insert(now);
    }

    /// A session is ready again: `true` when it had been closed (the edge replays).
    pub(crate) fn opened(&mut self) -> bool {
        self.down_since.take().is_some()
    }

    /// A frame came from process `boot`. `Err` when that is another process than the first
    /// frame's; otherwise the frame proves a session is up (`Ok(true)` when it had been
    /// taken for closed: the edge replays).
    pub(crate) fn frame(&mut self, boot: u64) -> Result<bool, Down> {
        match self.boot {
            Some(known) if known != boot => Err(Down::Restarted),
            _ => {
                self.boot = Some(boot);
                Ok(self.opened())
            }
        }
    }

    /// At `now`: down, when its session has been closed for the whole window.
    pub(crate) fn check(&self, now: Duration) -> Option<Down> {
        let since = self.down_since?;
        (now.saturating_sub(since) >= self.window).then_some(Down::NotBack {
            window: self.window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_node_back_within_the_window_is_not_down_and_replays() {
        let mut presence = Presence::new(ms(300), true, ms(0));
        assert_eq!(presence.frame(7), Ok(false));
        presence.closed(ms(100));
        assert!(!presence.connected());
        assert_eq!(presence.check(ms(399)), None);
        assert!(presence.opened(), "it had been closed: replay");
        assert_eq!(presence.check(ms(10_000)), None);
        assert_eq!(presence.frame(7), Ok(false));
    }

    #[test]
    fn a_node_not_back_within_the_window_is_down_from_its_first_close() {
        let mut presence = Presence::new(ms(300), true, ms(0));
        presence.closed(ms(100));
        presence.closed(ms(350));
        assert_eq!(
            presence.check(ms(400)),
            Some(Down::NotBack { window: ms(300) })
        );
    }

    #[test]
    fn a_node_never_connected_counts_its_window_from_the_start() {
        let presence = Presence::new(ms(300), false, ms(50));
        assert_eq!(presence.check(ms(349)), None);
        assert!(presence.check(ms(350)).is_some());
    }

    #[test]
    fn a_frame_from_another_process_is_a_restart_and_a_frame_proves_a_session() {
        let mut presence = Presence::new(ms(300), true, ms(0));
        presence.closed(ms(10));
        assert_eq!(
            presence.frame(1),
            Ok(true),
            "a frame proves a session is up"
        );
        assert_eq!(presence.frame(2), Err(Down::Restarted));
        assert_eq!(presence.frame(1), Ok(false));
    }
}
