//! Token and cost accounting for model turns.
//!
//! # Invariants
//!
//! * Every field is a whole number, so sums are exact and order-independent: the tree's
//!   `subtree == own + Σ children.subtree` check is an equality, not an approximation.
//!   Cost is kept in micro-dollars for the same reason.
//! * Addition saturates instead of overflowing (a model reporting absurd numbers cannot panic
//!   the tree).
//!
//! # What the fields count (the contract adapters convert to)
//!
//! Providers disagree on what "input tokens" means: OpenAI and Gemini count cached prompt
//! tokens inside their input figure, Anthropic reports them apart. Here the four prompt-side
//! and output-side fields are **disjoint**, so [`Usage::total_tokens`] never counts a token
//! twice:
//!
//! * `input_tokens` are prompt tokens *not* served from or written to a cache. An adapter for
//!   OpenAI subtracts `prompt_tokens_details.cached_tokens` from `prompt_tokens`.
//! * `cache_read_tokens` and `cache_write_tokens` are the cached prompt tokens.
//! * `output_tokens` are every token the model produced, reasoning included.
//! * `reasoning_tokens` is the part of `output_tokens` spent on hidden reasoning
//!   (OpenAI's `completion_tokens_details.reasoning_tokens`): informational, already inside
//!   `output_tokens`, never added to the total.

use std::fmt;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// What one or more model turns consumed.
///
/// ```
/// use agent_tree_protocol::Usage;
/// let a = Usage::tokens(100, 20);
/// let b = Usage::tokens(1, 2).with_cache_read(5).with_reasoning(2);
/// assert_eq!((a + b).input_tokens, 101);
/// assert_eq!((a + b).total_tokens(), 128); // 101 + 22 + 5 cache read; reasoning is in the 22
/// assert_eq!((a + b).reasoning_tokens, 2);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt tokens sent to the model, cached ones excluded (see the module docs).
    pub input_tokens: u64,
    /// Tokens the model produced, reasoning included.
    pub output_tokens: u64,
    /// The part of `output_tokens` spent on reasoning; not added again to the total.
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: u64,
    /// Cost in millionths of a US dollar.
    pub cost_micros: u64,
}

impl Usage {
    /// No usage.
    pub const ZERO: Usage = Usage {
        input_tokens: 0,
        output_tokens: 0,
        reasoning_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_micros: 0,
    };

    /// Usage of `input` prompt tokens and `output` produced tokens, nothing else.
    pub const fn tokens(input: u64, output: u64) -> Self {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::ZERO
        }
    }

    /// The same usage with `tokens` prompt tokens read from the provider's cache.
    pub const fn with_cache_read(mut self, tokens: u64) -> Self {
        self.cache_read_tokens = tokens;
        self
    }

    /// The same usage with `tokens` prompt tokens written to the provider's cache.
    pub const fn with_cache_write(mut self, tokens: u64) -> Self {
        self.cache_write_tokens = tokens;
        self
    }

    /// The same usage with `tokens` of its output spent on reasoning.
    ///
    /// ```
    /// use agent_tree_protocol::Usage;
    /// let u = Usage::tokens(10, 50).with_reasoning(40);
    /// assert_eq!(u.total_tokens(), 60);
    /// ```
    pub const fn with_reasoning(mut self, tokens: u64) -> Self {
        self.reasoning_tokens = tokens;
        self
    }

    /// The same usage with a cost in micro-dollars.
    pub const fn with_cost_micros(mut self, cost_micros: u64) -> Self {
        self.cost_micros = cost_micros;
        self
    }

    /// Every token counted: input, output and both cache kinds.
    pub const fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Whether nothing was used.
    pub fn is_zero(&self) -> bool {
        *self == Usage::ZERO
    }
}

impl Add for Usage {
    type Output = Usage;

    fn add(self, rhs: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(rhs.input_tokens),
            output_tokens: self.output_tokens.saturating_add(rhs.output_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(rhs.reasoning_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_add(rhs.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_add(rhs.cache_write_tokens),
            cost_micros: self.cost_micros.saturating_add(rhs.cost_micros),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::ZERO, Add::add)
    }
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in={} out={} cache_r={} cache_w={} cost_micros={}",
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cost_micros
        )?;
        if self.reasoning_tokens > 0 {
            write!(f, " reasoning={}", self.reasoning_tokens)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addition_saturates() {
        let big = Usage::tokens(u64::MAX, 1);
        assert_eq!((big + big).input_tokens, u64::MAX);
        assert_eq!(big.total_tokens(), u64::MAX);
    }

    #[test]
    fn sum_of_nothing_is_zero() {
        assert!(std::iter::empty::<Usage>().sum::<Usage>().is_zero());
    }
}
