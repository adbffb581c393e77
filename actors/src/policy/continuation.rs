//! Length continuations: whether a turn cut off at the output limit (without tool calls) is
//! continued, asking the model to go on.
//!
//! It never builds a request or calls a model: the turn asks [`spent`] first, then, when the
//! model knows its context window, [`fits`], and carries the answer out.
//!
//! # Invariants
//!
//! * At most `allowed` continuations per run, and never past the run's `max_turns`.
//! * A continuation is never sent when the model's context window is known and the request
//!   cannot fit it: the prompt the model last reported (every token of the cut turn: input,
//!   cache read, cache write and output, which the next prompt repeats) plus the next
//!   request's output limit must fit the window. Without a known window, or without an
//!   output limit, only what is known is counted.

use std::fmt;

use agent_tree_protocol::Usage;

/// Whether the continuations a run may make are spent: `continued` of `allowed` were made,
/// and `turns_left` says whether the run may take another turn.
pub(crate) fn spent(continued: u32, allowed: u32, turns_left: bool) -> bool {
    continued >= allowed || !turns_left
}

/// A continuation that cannot fit the model's context window: what it would need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WouldNotFit {
    /// The prompt the model last reported, in tokens.
    pub(crate) prompt: u64,
    /// The next request's output limit, in tokens.
    pub(crate) output: u64,
    /// The model's context window, in tokens.
    pub(crate) window: u32,
}

impl fmt::Display for WouldNotFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the model's output was cut off at its length limit, and continuing would not fit \
             the {}-token context: the prompt reached {} tokens and the reply may take {}",
            self.window, self.prompt, self.output
        )
    }
}

/// Whether continuing a turn cut off with usage `cut` fits a context of `window` tokens when
/// the next request may produce `max_output` tokens (`None`: no limit is set, and none is
/// counted).
pub(crate) fn fits(window: u32, cut: &Usage, max_output: Option<u32>) -> Result<(), WouldNotFit> {
    let prompt = cut.total_tokens();
    let output = u64::from(max_output.unwrap_or(0));
    if prompt.saturating_add(output) <= u64::from(window) {
        Ok(())
    } else {
        Err(WouldNotFit {
            prompt,
            output,
            window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_are_spent_by_the_policy_or_the_turns() {
        assert!(!spent(0, 2, true));
        assert!(!spent(1, 2, true));
        assert!(spent(2, 2, true));
        assert!(spent(0, 0, true), "0 allowed fails at the first cut-off");
        assert!(spent(0, 2, false), "no turn left");
    }

    #[test]
    fn a_continuation_fits_when_the_last_prompt_and_the_output_limit_do() {
        let cut = Usage::tokens(1_000, 400);
        // 1 400 + 600 = 2 000: exactly the window.
        assert_eq!(fits(2_000, &cut, Some(600)), Ok(()));
        let past = fits(2_000, &cut, Some(601)).unwrap_err();
        assert_eq!(
            past,
            WouldNotFit {
                prompt: 1_400,
                output: 601,
                window: 2_000
            }
        );
        assert!(
            past.to_string()
                .contains("continuing would not fit the 2000-token context"),
            "{past}"
        );
        // Without an output limit only the prompt is counted.
        assert_eq!(fits(1_400, &cut, None), Ok(()));
        assert!(fits(1_399, &cut, None).is_err());
    }

    #[test]
    fn cached_prompt_tokens_count_toward_the_window() {
        // 2 675 tokens not cached, 6 769 read from the cache: the server saw 9 444.
        let cut = Usage::tokens(2_475, 200).with_cache_read(6_769);
        let over = fits(8_192, &cut, Some(512)).unwrap_err();
        assert_eq!(over.prompt, 9_444);
        let cut = Usage::tokens(100, 50).with_cache_write(1_000);
        assert!(fits(1_150, &cut, Some(1)).is_err());
        assert!(fits(1_151, &cut, Some(1)).is_ok());
    }

    #[test]
    fn absurd_figures_do_not_overflow() {
        let cut = Usage::tokens(u64::MAX, u64::MAX);
        assert!(fits(u32::MAX, &cut, Some(u32::MAX)).is_err());
        assert_eq!(fits(u32::MAX, &Usage::ZERO, Some(u32::MAX)), Ok(()));
    }
}
