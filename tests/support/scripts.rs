//! Script helpers the control and lifetime tests share: one scripted turn that starts
//! several children at once, in the background or in the foreground.

#![allow(dead_code, unreachable_pub)]

use agent_tree::testkit::{Call, Turn};

/// One turn whose message spawns each `(agent_type, task)` of `children` in the background,
/// in order.
pub fn spawns_in_background<const N: usize>(children: [(&str, &str); N]) -> Turn {
    Turn::calls(children.map(|(agent_type, task)| Call::spawn_background(agent_type, task)))
}

/// One turn whose message spawns a `agent_type` in the foreground for each of `tasks`, in
/// order.
pub fn spawns_in_foreground<const N: usize>(agent_type: &str, tasks: [&str; N]) -> Turn {
    Turn::calls(tasks.map(|task| Call::spawn(agent_type, task)))
}

/// One turn whose message spawns `n` `agent_type`s in the background, the `i`-th (from 0)
/// with the task `<task><i>`.
pub fn spawns_n_in_background(agent_type: &str, task: &str, n: usize) -> Turn {
    Turn::calls((0..n).map(|i| Call::spawn_background(agent_type, format!("{task}{i}"))))
}
