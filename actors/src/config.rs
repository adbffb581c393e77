//! Tree-wide limits and switches, with their defaults named in one place.

use std::time::Duration;

/// Default cap on depth: root 0, top-level 1, at most depth 5.
pub const DEFAULT_MAX_DEPTH: u32 = 5;
/// Default cap on live children of one agent.
pub const DEFAULT_MAX_CHILDREN_PER_AGENT: usize = 4;
/// Default cap on live agents in the whole tree.
pub const DEFAULT_MAX_TOTAL_AGENTS: usize = 32;
/// Default number of top-level background agents running at once.
pub const DEFAULT_MAX_CONCURRENT: usize = 10;
/// Default grace period of a shutdown: one deadline for the whole subtree.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Limits and switches of one tree.
///
/// ```
/// use agent_tree::TreeConfig;
/// let config = TreeConfig::default().with_max_depth(3);
/// assert_eq!(config.max_depth, 3);
/// assert_eq!(config.max_children_per_agent, 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TreeConfig {
    /// Deepest depth an agent may have (0 or 1 disables nesting).
    pub max_depth: u32,
    /// Live children one agent may have at once.
    pub max_children_per_agent: usize,
    /// Live agents the tree may have at once.
    pub max_total_agents: usize,
    /// Top-level background agents running at once (the rest wait, FIFO).
    pub max_concurrent: usize,
    /// The one deadline a shutdown gives a whole subtree.
    pub shutdown_grace: Duration,
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig {
            max_depth: DEFAULT_MAX_DEPTH,
            max_children_per_agent: DEFAULT_MAX_CHILDREN_PER_AGENT,
            max_total_agents: DEFAULT_MAX_TOTAL_AGENTS,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

impl TreeConfig {
    /// Sets the depth cap.
    pub fn with_max_depth(mut self, max_depth: u32) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// Sets the cap on live children per agent.
    pub fn with_max_children_per_agent(mut self, max: usize) -> Self {
        self.max_children_per_agent = max;
        self
    }

    /// Sets the cap on live agents in the tree.
    pub fn with_max_total_agents(mut self, max: usize) -> Self {
        self.max_total_agents = max;
        self
    }

    /// Sets the pool size for top-level background agents.
    pub fn with_max_concurrent(mut self, max: usize) -> Self {
        self.max_concurrent = max;
        self
    }

    /// Sets the shutdown grace period.
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}
