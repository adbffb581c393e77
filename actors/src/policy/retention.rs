//! Output retention: which read outputs a journaled tree releases from memory, and when.
//!
//! A settled agent's output (its outcome's `text` and `partial`) is held in memory while it
//! is unread, always. Once read (by its owner's tools, or by the application), it joins a
//! queue in read order; [`due`] says how many of the queue's oldest to release now: enough
//! that the read outputs still held take at most `max_bytes`, and every one read at least
//! `max_age` ago. The registry emits a `released` event for each and the journal keeps the
//! output, read back on demand.
//!
//! # Invariants
//!
//! * Only read outputs are released, oldest read first; an unread one is never in the queue.
//! * Only outputs the journal has written are released.
//! * After the released ones are gone, the held bytes are at most `max_bytes`, and none is
//!   older than `max_age` at `now`, unless the journal has not written it yet.
//! * Nothing here reads a clock: `now` is the caller's (the registry's milliseconds).

use std::time::Duration;

/// How long read outputs stay in memory (see [`JournalConfig::keep_read_outputs`](crate::JournalConfig::keep_read_outputs)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutputRetention {
    /// The most bytes of read outputs held.
    pub(crate) max_bytes: usize,
    /// The longest a read output is held.
    pub(crate) max_age: Option<Duration>,
}

/// One read output in the queue: its bytes, when it was read (ms on the caller's clock),
/// and the event sequence number by which the journal holds it (the tree's last event when
/// it was read: its terminal event came before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) bytes: usize,
    pub(crate) at_ms: u64,
    pub(crate) seq: u64,
}

/// What is due: how many of the queue's front to release now, and whether one after them
/// is due too but waits for its line to be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) now: usize,
    pub(crate) waits: bool,
}

/// What of `queue`'s front (oldest read first) to release at `now_ms`, where `held` is the
/// sum of the queue's bytes and the journal has written every event up to `written`: an
/// output whose line may not be written yet is never released (the journal is the only
/// place it would be left), nor is any read after it; it `waits`.
pub(crate) fn due(
    queue: impl IntoIterator<Item = Read>,
    held: usize,
    policy: &OutputRetention,
    now_ms: u64,
    written: u64,
) -> Due {
    let max_age_ms = policy
        .max_age
        .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
    let mut left = held;
    let mut release = 0;
    for read in queue {
        let too_much = left > policy.max_bytes;
        let too_old = max_age_ms.is_some_and(|age| now_ms.saturating_sub(read.at_ms) >= age);
        if !too_much && !too_old {
            break;
        }
        if read.seq > written {
            return Due {
                now: release,
                waits: true,
            };
        }
        left = left.saturating_sub(read.bytes);
        release += 1;
    }
    Due {
        now: release,
        waits: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_bytes: usize, max_age_ms: Option<u64>) -> OutputRetention {
        OutputRetention {
            max_bytes,
            max_age: max_age_ms.map(Duration::from_millis),
        }
    }

    fn reads(list: &[(usize, u64)]) -> Vec<Read> {
        list.iter()
            .map(|&(bytes, at_ms)| Read {
                bytes,
                at_ms,
                seq: at_ms,
            })
            .collect()
    }

    const ALL: u64 = u64::MAX;

    /// How many [`due`] releases now.
    fn released(
        queue: Vec<Read>,
        held: usize,
        policy: &OutputRetention,
        now_ms: u64,
        written: u64,
    ) -> usize {
        due(queue, held, policy, now_ms, written).now
    }

    fn held(queue: &[Read]) -> usize {
        queue.iter().map(|r| r.bytes).sum()
    }

    #[test]
    fn within_the_budget_nothing_is_released() {
        let queue = reads(&[(10, 0), (20, 5)]);
        assert_eq!(
            released(queue.clone(), held(&queue), &policy(30, None), 1_000, ALL),
            0
        );
        assert_eq!(released(Vec::new(), 0, &policy(0, Some(0)), 1_000, ALL), 0);
    }

    #[test]
    fn over_the_budget_the_oldest_read_go_first_until_it_fits() {
        let queue = reads(&[(10, 0), (20, 5), (30, 6)]);
        // 60 held, 35 allowed: the first two go (30 left).
        assert_eq!(
            released(queue.clone(), held(&queue), &policy(35, None), 7, ALL),
            2
        );
        // 60 allowed: none; 0 allowed: all.
        assert_eq!(
            released(queue.clone(), held(&queue), &policy(60, None), 7, ALL),
            0
        );
        assert_eq!(
            released(queue.clone(), held(&queue), &policy(0, None), 7, ALL),
            3
        );
    }

    #[test]
    fn an_output_read_max_age_ago_goes_whatever_the_budget() {
        let queue = reads(&[(10, 0), (20, 50), (30, 100)]);
        let keep = policy(usize::MAX, Some(100));
        assert_eq!(released(queue.clone(), held(&queue), &keep, 99, ALL), 0);
        assert_eq!(
            released(queue.clone(), held(&queue), &keep, 100, ALL),
            1,
            "exactly max_age"
        );
        assert_eq!(released(queue.clone(), held(&queue), &keep, 150, ALL), 2);
        assert_eq!(released(queue.clone(), held(&queue), &keep, 10_000, ALL), 3);
    }

    #[test]
    fn size_and_age_together_release_the_longer_prefix() {
        let queue = reads(&[(10, 0), (20, 50), (30, 100)]);
        // Age releases the first; size (40 allowed of 60) the first two.
        assert_eq!(
            released(
                queue.clone(),
                held(&queue),
                &policy(40, Some(100)),
                100,
                ALL
            ),
            2
        );
        // Size releases none; age the first two.
        assert_eq!(
            released(
                queue.clone(),
                held(&queue),
                &policy(60, Some(100)),
                150,
                ALL
            ),
            2
        );
    }

    #[test]
    fn nothing_the_journal_has_not_written_is_released() {
        // Read at seq 0, 50, 100; nothing allowed in memory.
        let queue = reads(&[(10, 0), (20, 50), (30, 100)]);
        let none = policy(0, Some(0));
        assert_eq!(released(queue.clone(), held(&queue), &none, 200, 49), 1);
        assert_eq!(released(queue.clone(), held(&queue), &none, 200, 99), 2);
        assert_eq!(released(queue.clone(), held(&queue), &none, 200, 100), 3);
        // Nothing written yet: nothing goes, however far over the budget.
        assert_eq!(
            released(queue.clone(), held(&queue), &none, 200, 0),
            1,
            "seq 0 is written"
        );
        let later = reads(&[(10, 5), (20, 50)]);
        assert_eq!(released(later.clone(), held(&later), &none, 200, 4), 0);
        // What waits for its line says so; what is not due does not.
        assert_eq!(
            due(later.clone(), held(&later), &none, 200, 4),
            Due {
                now: 0,
                waits: true
            }
        );
        assert_eq!(
            due(later.clone(), held(&later), &none, 200, 50),
            Due {
                now: 2,
                waits: false
            }
        );
        let keep = policy(usize::MAX, None);
        assert_eq!(
            due(later.clone(), held(&later), &keep, 200, 0),
            Due {
                now: 0,
                waits: false
            }
        );
    }

    #[test]
    fn what_is_left_fits_the_budget_for_any_queue() {
        // Invariant over many queues: after the release, held ≤ max_bytes and none too old.
        let mut seed = 7u64;
        for _ in 0..500 {
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let n = (next() % 8) as usize;
            let mut at = 0;
            let queue: Vec<Read> = (0..n)
                .map(|_| {
                    at += next() % 50;
                    Read {
                        bytes: (next() % 100) as usize,
                        at_ms: at,
                        seq: at,
                    }
                })
                .collect();
            let p = policy((next() % 300) as usize, Some(next() % 200));
            let now = at + next() % 100;
            let released = released(queue.clone(), held(&queue), &p, now, ALL);
            let rest = &queue[released..];
            assert!(held(rest) <= p.max_bytes, "{queue:?} {p:?}");
            let age = p.max_age.unwrap().as_millis() as u64;
            assert!(
                rest.iter().all(|r| now - r.at_ms < age),
                "{queue:?} {p:?} {now}"
            );
            // Minimal: keeping one more would break a bound.
            if released > 0 {
                let one_more = &queue[released - 1..];
                assert!(
                    held(one_more) > p.max_bytes || now - one_more[0].at_ms >= age,
                    "{queue:?} {p:?} {now}"
                );
            }
        }
    }
}
