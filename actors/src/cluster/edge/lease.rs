//! The lease a child's node holds from the owner's node: how long a hosted subtree may run
//! without hearing from its owner, and when the owner's node gives it up for killed.
//!
//! ractor_cluster notices a crashed node at once but never a frozen or partitioned one, so
//! the bound is ours. The child's node asks for a lease (a renewal ticket) every
//! [`LeaseTerms::renew_every`]; the owner's node answers each request it hears with a
//! [`LeaseGrant`] of [`LeaseTerms::lease`]. The child's node holds the lease until `lease`
//! after it *sent* the request answered (its own clock: no instant crosses the edge), and
//! stops its subtree when that passes ([`ChildLease::check`]). The owner's node, which
//! grants only in answer to what it hears, declares the subtree killed when it has heard
//! nothing for `lease + grace` ([`OwnerLease::declare`]).
//!
//! # Invariants
//!
//! * Safety: the child's lease ends at most `lease` after the last request the owner heard,
//!   so by the owner's declaration the child's side has stopped for at least `grace`
//!   (assuming the clocks' rates differ by less than `grace / lease`, and the child stops
//!   its subtree within `grace`).
//! * Both sides are sticky: once the child's lease has lapsed no grant revives it, and once
//!   the owner has declared no request is granted; a new edge is a new lease.
//! * A node never granted runs nothing, and lapses one `first_wait` after its first
//!   request, so what it admitted does not wait for an owner forever.
//! * A grant names the request it answers; one the child's node never made (or forgot) is
//!   an error, never an extension.
//! * Times are [`Duration`]s since an epoch each side picks; they must not go backwards.

use std::collections::VecDeque;
use std::time::Duration;

use agent_tree_protocol::LeaseGrant;

/// The lease's terms, the owner's node's to set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseTerms {
    /// How long a grant lasts, from the request's sending.
    pub(crate) lease: Duration,
    /// How much longer the owner's node waits before it declares the subtree killed.
    pub(crate) grace: Duration,
}

/// A renewal is requested every `lease / RENEW_DIVISOR`: two requests may be lost before
/// the lease is at risk.
pub(crate) const RENEW_DIVISOR: u32 = 3;

/// Requests remembered by the child's node; a grant of an older one is not taken.
const KEPT_TICKETS: usize = 16;

impl Default for LeaseTerms {
    /// A 10 s lease and a 2 s grace.
    fn default() -> Self {
        LeaseTerms {
            lease: Duration::from_secs(10),
            grace: Duration::from_secs(2),
        }
    }
}

impl LeaseTerms {
    /// How often the child's node asks for a renewal.
    pub(crate) fn renew_every(&self) -> Duration {
        self.lease / RENEW_DIVISOR
    }

    /// The grant answering `ticket`.
    pub(crate) fn grant(&self, ticket: u64) -> LeaseGrant {
        LeaseGrant {
            ticket,
            lease_ms: u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// What the owner's node does about the edge at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Heard from recently enough: declare at `declare_at` unless heard from before.
    Live {
        /// When it will be declared.
        declare_at: Duration,
    },
    /// Declare now (returned once): the mirrored subtree is settled killed with the usage
    /// last reported.
    Declare {
        /// When the child's node was last heard from.
        last_heard: Duration,
    },
    /// Declared before.
    Declared,
}

/// A renewal request the owner's node will not grant: the edge was declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("lease of a node declared unreachable at {at:?}")]
pub(crate) struct Declared {
    /// When it was declared.
    pub(crate) at: Duration,
}

/// The owner's side of the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OwnerLease {
    terms: LeaseTerms,
    last_heard: Duration,
    declared: Option<Duration>,
}

impl OwnerLease {
    /// The lease of an edge opened at `now` (which counts as hearing from the child's node).
    pub(crate) fn new(terms: LeaseTerms, now: Duration) -> Self {
        OwnerLease {
            terms,
            last_heard: now,
            declared: None,
        }
    }

    /// The terms.
    #[cfg(test)]
    pub(crate) fn terms(&self) -> &LeaseTerms {
        &self.terms
    }

    /// Any frame from the child's node came at `now`.
    pub(crate) fn heard(&mut self, now: Duration) {
        if self.declared.is_none() {
            self.last_heard = self.last_heard.max(now);
        }
    }

    /// A renewal request `ticket` came at `now`: the grant to send back, unless declared.
    pub(crate) fn grant(&mut self, ticket: u64, now: Duration) -> Result<LeaseGrant, Declared> {
        if let Some(at) = self.declared {
            return Err(Declared { at });
        }
        self.heard(now);
        Ok(self.terms.grant(ticket))
    }

    /// When the edge is declared if nothing more is heard.
    pub(crate) fn declare_at(&self) -> Duration {
        self.last_heard
            .saturating_add(self.terms.lease)
            .saturating_add(self.terms.grace)
    }

    /// Whether the subtree is declared killed at `now`: [`Verdict::Declare`] the first time
    /// `lease + grace` has passed since the child's node was last heard from.
    pub(crate) fn declare(&mut self, now: Duration) -> Verdict {
        if self.declared.is_some() {
            return Verdict::Declared;
        }
        let declare_at = self.declare_at();
        if now >= declare_at {
            self.declared = Some(now);
            Verdict::Declare {
                last_heard: self.last_heard,
            }
        } else {
            Verdict::Live { declare_at }
        }
    }

    /// Gives the lease up at `now`, whatever was heard: the node is known gone (its
    /// process exited) or was counted killed at a shutdown's deadline. Nothing is granted
    /// after, so the child's side stops within one lease. Returns whether it was live.
    pub(crate) fn give_up(&mut self, now: Duration) -> bool {
        if self.declared.is_some() {
            return false;
        }
        self.declared = Some(now);
        true
    }

    /// When it was declared (or given up).
    #[cfg(test)]
    pub(crate) fn declared(&self) -> Option<Duration> {
        self.declared
    }
}

/// Whether the child's node may run its subtree at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// No lease granted yet: run nothing (what was admitted waits).
    Awaiting,
    /// Held until `until`.
    Held {
        /// When it lapses unless renewed.
        until: Duration,
    },
    /// Lapsed: the subtree must stop now, before anything else runs; sticky.
    Expired {
        /// When it lapsed.
        at: Duration,
    },
}

/// A grant the child's node does not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LeaseError {
    /// It answers no request this node has outstanding.
    #[error("lease grant for unknown ticket {ticket}")]
    UnknownTicket {
        /// The ticket it names.
        ticket: u64,
    },
    /// The lease lapsed before it came.
    #[error("lease grant after the lease lapsed")]
    Lapsed,
}

/// The child's side of the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChildLease {
    renew_every: Duration,
    /// How long after its first request a node never granted gives up.
    first_wait: Duration,
    first_request: Option<Duration>,
    /// Outstanding requests: ticket and when it was sent, oldest first.
    tickets: VecDeque<(u64, Duration)>,
    next_ticket: u64,
    last_request: Option<Duration>,
    until: Option<Duration>,
    lapsed: Option<Duration>,
}

impl ChildLease {
    /// A lease not yet granted, asked for every `renew_every`; a node never granted within
    /// `first_wait` of its first request lapses (it has run nothing, but what it admitted
    /// must not wait for an owner forever).
    pub(crate) fn new(renew_every: Duration, first_wait: Duration) -> Self {
        ChildLease {
            renew_every,
            first_wait,
            first_request: None,
            tickets: VecDeque::new(),
            next_ticket: 1,
            last_request: None,
            until: None,
            lapsed: None,
        }
    }

    /// A renewal request sent at `now` (a [`Up::Renew`](agent_tree_protocol::Up::Renew)
    /// with the ticket returned), whether or not one is due: after a reconnect, say.
    pub(crate) fn request(&mut self, now: Duration) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        if self.tickets.len() == KEPT_TICKETS {
            self.tickets.pop_front();
        }
        self.tickets.push_back((ticket, now));
        self.last_request = Some(now);
        self.first_request.get_or_insert(now);
        ticket
    }

    /// A renewal request if one is due at `now` (none after the lease lapsed).
    pub(crate) fn renew(&mut self, now: Duration) -> Option<u64> {
        if self.lapsed.is_some() {
            return None;
        }
        let due = self
            .last_request
            .is_none_or(|last| now.saturating_sub(last) >= self.renew_every);
        due.then(|| self.request(now))
    }

    /// Takes a grant: the lease is held until `lease_ms` after its request was sent, if
    /// that is later than it already is. Returns when the lease now ends.
    pub(crate) fn on_grant(&mut self, grant: LeaseGrant) -> Result<Duration, LeaseError> {
        if self.lapsed.is_some() {
            return Err(LeaseError::Lapsed);
        }
        let Some(&(_, sent)) = self.tickets.iter().find(|(t, _)| *t == grant.ticket) else {
            return Err(LeaseError::UnknownTicket {
                ticket: grant.ticket,
            });
        };
        self.tickets.retain(|(t, _)| *t > grant.ticket);
        let until = sent.saturating_add(Duration::from_millis(grant.lease_ms));
        let until = self.until.map_or(until, |held| held.max(until));
        self.until = Some(until);
        Ok(until)
    }

    /// Whether the lease is held at `now`; the first check at or past its end lapses it.
    pub(crate) fn check(&mut self, now: Duration) -> LeaseState {
        if let Some(at) = self.lapsed {
            return LeaseState::Expired { at };
        }
        match self.until {
            None => match self.first_request {
                Some(first) if now >= first.saturating_add(self.first_wait) => {
                    let at = first.saturating_add(self.first_wait);
                    self.lapsed = Some(at);
                    LeaseState::Expired { at }
                }
                _ => LeaseState::Awaiting,
            },
            Some(until) if now < until => LeaseState::Held { until },
            Some(until) => {
                self.lapsed = Some(until);
                LeaseState::Expired { at: until }
            }
        }
    }

    /// When the lease ends (or ended), once granted.
    #[cfg(test)]
    pub(crate) fn until(&self) -> Option<Duration> {
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn terms() -> LeaseTerms {
        LeaseTerms {
            lease: ms(3_000),
            grace: ms(1_000),
        }
    }

    #[test]
    fn the_owner_declares_once_after_lease_plus_grace_of_silence() {
        let mut owner = OwnerLease::new(terms(), ms(0));
        assert_eq!(
            owner.grant(1, ms(100)),
            Ok(LeaseGrant {
                ticket: 1,
                lease_ms: 3_000
            })
        );
        assert_eq!(
            owner.declare(ms(4_099)),
            Verdict::Live {
                declare_at: ms(4_100)
            }
        );
        owner.heard(ms(2_000));
        owner.heard(ms(1_000)); // late delivery of an older frame: no step back
        assert_eq!(owner.declare_at(), ms(6_000));
        assert_eq!(
            owner.declare(ms(6_000)),
            Verdict::Declare {
                last_heard: ms(2_000)
            }
        );
        assert_eq!(owner.declare(ms(6_001)), Verdict::Declared);
        assert_eq!(owner.grant(2, ms(6_002)), Err(Declared { at: ms(6_000) }));
        owner.heard(ms(7_000));
        assert_eq!(owner.declared(), Some(ms(6_000)));
        assert_eq!(owner.terms().renew_every(), ms(1_000));
        // Given up early (a node known gone, a shutdown's deadline): nothing granted after.
        let mut owner = OwnerLease::new(terms(), ms(0));
        assert!(owner.give_up(ms(10)));
        assert!(!owner.give_up(ms(11)));
        assert_eq!(owner.grant(1, ms(12)), Err(Declared { at: ms(10) }));
        assert_eq!(owner.declare(ms(10_000)), Verdict::Declared);
    }

    #[test]
    fn the_child_holds_from_its_request_and_lapses_for_good() {
        let mut child = ChildLease::new(ms(1_000), ms(3_000));
        assert_eq!(child.check(ms(0)), LeaseState::Awaiting);
        let t1 = child.renew(ms(10)).unwrap();
        assert_eq!(child.renew(ms(500)), None, "not due yet");
        // The grant comes late; the lease runs from the request, not the grant.
        assert_eq!(child.on_grant(terms().grant(t1)), Ok(ms(3_010)));
        assert_eq!(
            child.check(ms(3_009)),
            LeaseState::Held { until: ms(3_010) }
        );
        let t2 = child.renew(ms(1_010)).unwrap();
        let t3 = child.renew(ms(2_010)).unwrap();
        // The newer grant first, then the older one: the lease never shrinks.
        assert_eq!(child.on_grant(terms().grant(t3)), Ok(ms(5_010)));
        assert_eq!(
            child.on_grant(terms().grant(t2)),
            Err(LeaseError::UnknownTicket { ticket: t2 }),
            "answered requests before t3 are forgotten"
        );
        assert_eq!(child.until(), Some(ms(5_010)));
        assert_eq!(
            child.check(ms(5_010)),
            LeaseState::Expired { at: ms(5_010) }
        );
        // Sticky: no renewal, no grant revives it.
        assert_eq!(child.renew(ms(6_000)), None);
        let t = child.request(ms(6_000));
        assert_eq!(child.on_grant(terms().grant(t)), Err(LeaseError::Lapsed));
        assert_eq!(child.check(ms(0)), LeaseState::Expired { at: ms(5_010) });
    }

    #[test]
    fn a_node_never_granted_gives_up_after_the_first_wait() {
        let mut child = ChildLease::new(ms(1_000), ms(3_000));
        assert_eq!(
            child.check(ms(50_000)),
            LeaseState::Awaiting,
            "nothing asked yet"
        );
        let first = child.renew(ms(100)).unwrap();
        assert_eq!(child.renew(ms(1_100)).map(|t| t > first), Some(true));
        assert_eq!(child.check(ms(3_099)), LeaseState::Awaiting);
        assert_eq!(
            child.check(ms(3_100)),
            LeaseState::Expired { at: ms(3_100) }
        );
        assert_eq!(
            child.on_grant(terms().grant(first)),
            Err(LeaseError::Lapsed)
        );
    }

    #[test]
    fn a_grant_the_child_never_asked_for_is_refused() {
        let mut child = ChildLease::new(ms(1_000), ms(3_000));
        assert_eq!(
            child.on_grant(LeaseGrant {
                ticket: 7,
                lease_ms: u64::MAX
            }),
            Err(LeaseError::UnknownTicket { ticket: 7 })
        );
        assert_eq!(child.check(ms(0)), LeaseState::Awaiting);
        // An absurd length saturates instead of overflowing.
        let t = child.request(ms(5));
        assert_eq!(
            child.on_grant(LeaseGrant {
                ticket: t,
                lease_ms: u64::MAX
            }),
            Ok(ms(5).saturating_add(Duration::from_millis(u64::MAX)))
        );
        // Only the last KEPT_TICKETS requests are remembered.
        let mut child = ChildLease::new(ms(1), ms(3_000));
        let first = child.request(ms(0));
        for i in 0..KEPT_TICKETS as u64 {
            child.request(ms(i));
        }
        assert!(child.on_grant(terms().grant(first)).is_err());
    }

    #[test]
    fn the_child_stops_before_the_owner_declares_whatever_the_delays() {
        // Requests every second; each one's trip up, and its grant's trip down, take a
        // delay from a fixed pattern; some requests are lost. The child's lease never
        // outlasts the owner's declaration minus the grace.
        for pattern in [[5u64, 900, 20, 2_500], [0, 0, 0, 0], [2_999, 1, 1_500, 40]] {
            let mut owner = OwnerLease::new(terms(), ms(0));
            let mut child = ChildLease::new(terms().renew_every(), terms().lease);
            for (i, request_at) in (0..20u64).map(|i| (i, i * 1_000)) {
                let delay = pattern[(i % 4) as usize];
                if i % 5 == 4 {
                    child.request(ms(request_at)); // lost on the way
                    continue;
                }
                let ticket = child.request(ms(request_at));
                let heard = request_at + delay;
                let grant = owner.grant(ticket, ms(heard)).unwrap();
                let _ = child.on_grant(grant);
                let until = child.until().unwrap();
                assert!(
                    until + terms().grace <= owner.declare_at(),
                    "{pattern:?} {i}"
                );
            }
        }
    }
}
