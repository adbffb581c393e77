//! Turns of the scripted model that many tests write the same way: one model message that
//! spawns several children, all in the background or all in the foreground.

#![allow(dead_code, unreachable_pub)]

use agent_tree::testkit::{Call, Turn};

/// A turn whose one message spawns each `(agent type, prompt)` of `children` in the
/// background, in order (the ids come back at once).
pub fn background_spawns<'a>(children: impl IntoIterator<Item = (&'a str, &'a str)>) -> Turn {
    Turn::calls(
        children
            .into_iter()
            .map(|(agent_type, prompt)| Call::spawn_background(agent_type, prompt)),
    )
}

/// A turn whose one message spawns each `(agent type, prompt)` of `children` in the
/// foreground, in order (the turn's results are their outcomes).
pub fn foreground_spawns<'a>(children: impl IntoIterator<Item = (&'a str, &'a str)>) -> Turn {
    Turn::calls(
        children
            .into_iter()
            .map(|(agent_type, prompt)| Call::spawn(agent_type, prompt)),
    )
}
