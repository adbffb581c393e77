//! Model-call retries: whether a failed call is tried again, and after how long.
//!
//! It never sleeps or calls anything: the model turn asks [`delay`] after each failed
//! attempt and waits what it answers.
//!
//! # Invariants
//!
//! * Only retryable kinds (`rate_limited`, `transient`) are retried, and at most
//!   `max_attempts` calls are made per turn in all.
//! * A provider's retry-after is honoured exactly (never waited less); one longer than
//!   `max_wait` is not waited at all: the call fails at once, so a quota reset hours away
//!   does not hold an agent.
//! * Without a retry-after, the wait grows exponentially from `initial_backoff`, capped at
//!   `max_backoff`, with "equal jitter" (half fixed, half spread) drawn from `seed`, so
//!   many agents failing at once spread out, and the same seed gives the same waits.

use std::time::Duration;

use agent_tree_protocol::ModelErrorKind;

use crate::config::RetryPolicy;

/// How long to wait before attempt `failed + 1`, after attempt `failed` (from 1) failed with
/// `kind` and the provider's `retry_after`; `None` when the call is not retried.
pub(crate) fn delay(
    policy: &RetryPolicy,
    failed: u32,
    kind: ModelErrorKind,
    retry_after: Option<Duration>,
    seed: u64,
) -> Option<Duration> {
    if !kind.is_retryable() || failed >= policy.max_attempts {
        return None;
    }
    if let Some(wait) = retry_after {
        return (wait <= policy.max_wait).then_some(wait);
    }
    let doublings = failed.saturating_sub(1).min(32);
    let backoff = policy
        .initial_backoff
        .saturating_mul(1u32 << doublings.min(31))
        .min(policy.max_backoff);
    let half = backoff / 2;
    let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    let jitter = if spread == 0 {
        0
    } else {
        splitmix64(seed ^ u64::from(failed)) % spread.saturating_add(1)
    };
    Some(half.saturating_add(Duration::from_nanos(jitter)))
}

/// Why a retryable failure is not tried again ([`delay`] said `None`), for its error: the
/// attempts ran out, or the provider asked for a wait over `max_wait`. `None` for a kind
/// that is never retried (its own message says enough).
pub(crate) fn given_up(
    policy: &RetryPolicy,
    failed: u32,
    kind: ModelErrorKind,
    retry_after: Option<Duration>,
) -> Option<String> {
    if !kind.is_retryable() {
        return None;
    }
    if failed >= policy.max_attempts {
        return Some(format!(
            "gave up after {failed} attempt{} (the retry policy's max_attempts)",
            if failed == 1 { "" } else { "s" }
        ));
    }
    retry_after
        .filter(|wait| *wait > policy.max_wait)
        .map(|wait| {
            format!(
                "not retried: the provider asked to wait {wait:?}, over the retry policy's max_wait of {:?}",
                policy.max_wait
            )
        })
}

/// A seed for one turn's retries: the same agent, run and turn always draw the same waits.
pub(crate) fn seed(agent: u64, run: u32, turn: u32) -> u64 {
    splitmix64(agent ^ (u64::from(run) << 32) ^ u64::from(turn).rotate_left(17))
}

/// Steele, Lea and Flood's SplitMix64 step: a well-mixed 64-bit hash.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
            .with_max_attempts(4)
            .with_backoff(Duration::from_millis(100), Duration::from_millis(350))
    }

    #[test]
    fn a_retryable_failure_given_up_says_why_exactly_when_it_is_not_retried() {
        let p = policy().with_max_wait(Duration::from_secs(60));
        let kind = ModelErrorKind::RateLimited;
        let long = Some(Duration::from_secs(3600));
        // Attempts left and a retry-after within max_wait: retried, nothing to say.
        assert!(delay(&p, 1, kind, Some(Duration::from_secs(1)), 7).is_some());
        assert_eq!(given_up(&p, 1, kind, Some(Duration::from_secs(1))), None);
        // A retry-after over max_wait: not retried, and said so with both lengths.
        assert_eq!(delay(&p, 1, kind, long, 7), None);
        let why = given_up(&p, 1, kind, long).unwrap();
        assert!(why.contains("3600s") && why.contains("60s"), "{why}");
        // The attempts ran out: said so with the count.
        assert_eq!(delay(&p, 4, ModelErrorKind::Transient, None, 7), None);
        let why = given_up(&p, 4, ModelErrorKind::Transient, None).unwrap();
        assert!(why.contains("after 4 attempts"), "{why}");
        // A kind never retried needs no reason.
        assert_eq!(given_up(&p, 1, ModelErrorKind::InvalidRequest, long), None);
    }

    #[test]
    fn only_retryable_kinds_are_retried() {
        for kind in [
            ModelErrorKind::ContextLength,
            ModelErrorKind::Auth,
            ModelErrorKind::InvalidRequest,
            ModelErrorKind::Provider,
        ] {
            assert_eq!(delay(&policy(), 1, kind, None, 7), None, "{kind}");
        }
        assert!(delay(&policy(), 1, ModelErrorKind::Transient, None, 7).is_some());
        assert!(delay(&policy(), 1, ModelErrorKind::RateLimited, None, 7).is_some());
    }

    #[test]
    fn at_most_max_attempts_calls_are_made() {
        let p = policy();
        assert!(delay(&p, 3, ModelErrorKind::Transient, None, 1).is_some());
        assert_eq!(delay(&p, 4, ModelErrorKind::Transient, None, 1), None);
        let once = RetryPolicy::default().with_max_attempts(1);
        assert_eq!(delay(&once, 1, ModelErrorKind::Transient, None, 1), None);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_equal_jitter() {
        let p = policy();
        for seed in 0..200 {
            let waits: Vec<Duration> = (1..=3)
                .map(|n| delay(&p, n, ModelErrorKind::Transient, None, seed).unwrap())
                .collect();
            // 100 ms, 200 ms, then capped at 350 ms: each in [half, whole].
            for (wait, whole) in waits.iter().zip([100u64, 200, 350]) {
                let whole = Duration::from_millis(whole);
                assert!(
                    *wait >= whole / 2 && *wait <= whole,
                    "{wait:?} vs {whole:?}"
                );
            }
        }
        // The same seed, the same waits; different seeds spread.
        let a = delay(&p, 2, ModelErrorKind::Transient, None, 42);
        assert_eq!(a, delay(&p, 2, ModelErrorKind::Transient, None, 42));
        let spread: std::collections::HashSet<_> = (0..50)
            .map(|s| delay(&p, 2, ModelErrorKind::Transient, None, s))
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
    }

    #[test]
    fn retry_after_is_honoured_exactly_and_a_long_one_fails_at_once() {
        let p = policy().with_max_wait(Duration::from_secs(60));
        let wait = Duration::from_secs(7);
        assert_eq!(
            delay(&p, 1, ModelErrorKind::RateLimited, Some(wait), 3),
            Some(wait)
        );
        assert_eq!(
            delay(
                &p,
                1,
                ModelErrorKind::RateLimited,
                Some(Duration::from_secs(61)),
                3
            ),
            None
        );
        // A retry-after on a kind that is not retried changes nothing.
        assert_eq!(delay(&p, 1, ModelErrorKind::Auth, Some(wait), 3), None);
    }

    #[test]
    fn huge_attempt_numbers_and_backoffs_do_not_overflow() {
        let p = RetryPolicy::default()
            .with_max_attempts(u32::MAX)
            .with_backoff(Duration::from_secs(u64::MAX / 4), Duration::MAX);
        assert!(delay(&p, 1_000, ModelErrorKind::Transient, None, 9).is_some());
    }
}
