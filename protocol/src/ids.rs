//! Identifiers: agents, spawn requests and tree sessions.
//!
//! # Invariants
//!
//! * An [`AgentId`] is assigned once by the tree's registry and never reused within a
//!   session; it survives restarts (the incarnation counts those).
//! * [`AgentId::ROOT`] (`a0`) is the tree itself, at depth 0.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ProtocolError;

/// The stable identity of one agent in a tree, written `a<n>` (`a0` is the root).
///
/// This is the crate's own id, not ractor's `ActorId`: it is kept across restarts and is
/// what records, events, tools and the journal refer to.
///
/// ```
/// use agent_tree_protocol::AgentId;
/// let id: AgentId = "a7".parse().unwrap();
/// assert_eq!(id.to_string(), "a7");
/// assert!("7".parse::<AgentId>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(u64);

impl AgentId {
    /// The tree's root (depth 0).
    pub const ROOT: AgentId = AgentId(0);

    /// The id with sequence number `n`.
    pub const fn new(n: u64) -> Self {
        AgentId(n)
    }

    /// The sequence number behind the id.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Whether this is [`AgentId::ROOT`].
    pub const fn is_root(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a{}", self.0)
    }
}

impl FromStr for AgentId {
    type Err = ProtocolError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix('a')
            // One spelling per id: no sign, no leading zeros.
            .filter(|digits| {
                !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits.len() == 1 || !digits.starts_with('0'))
            })
            .and_then(|digits| digits.parse::<u64>().ok())
            .map(AgentId)
            .ok_or_else(|| ProtocolError::InvalidId {
                kind: "agent id",
                value: s.chars().take(64).collect(),
            })
    }
}

impl Serialize for AgentId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The idempotency key of a spawn: a second spawn by the same owner with the same request id
/// finds the first child instead of starting another.
///
/// By default the runtime derives it from the owner and the model's tool-call id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(String);

impl RequestId {
    /// A request id from any text.
    pub fn new(id: impl Into<String>) -> Self {
        RequestId(id.into())
    }

    /// The id derived from an owner, which incarnation of the owner (1 for its first;
    /// restarts count up) and the place of the tool call that asked for the spawn
    /// (`m4c0`: the first call of the conversation's message 4): `a3/1/m4c0`. A replayed
    /// call at the same place finds its child (a run resumed after a crash, continuing its
    /// journaled conversation); a restart's calls never do, nor a later turn's, even when a
    /// model reuses its call ids.
    ///
    /// `place` is anything displayed (a `&str`, or `format_args!("m{m}c{c}")` to write the
    /// id into its one buffer without a string of the place first).
    pub fn derived(owner: AgentId, incarnation: u32, place: impl fmt::Display) -> Self {
        use fmt::Write as _;
        let mut text = String::with_capacity(32);
        let _ = write!(text, "{owner}/{incarnation}/{place}");
        RequestId(text)
    }

    /// The id [`derived`](Self::derived) for the tool call `call` of the conversation's
    /// message `message` (`m{message}c{call}`), written digit by digit: the same text, without
    /// the formatting machinery (an owner derives one for every child it starts).
    ///
    /// ```
    /// # use agent_tree_protocol::{AgentId, RequestId};
    /// assert_eq!(
    ///     RequestId::at_call(AgentId::new(3), 2, 14, 0),
    ///     RequestId::derived(AgentId::new(3), 2, "m14c0")
    /// );
    /// assert_eq!(RequestId::at_call(AgentId::ROOT, 1, 0, 7).as_str(), "a0/1/m0c7");
    /// ```
    pub fn at_call(owner: AgentId, incarnation: u32, message: usize, call: usize) -> Self {
        let mut text = String::with_capacity(32);
        text.push('a');
        push_decimal(&mut text, owner.get());
        text.push('/');
        push_decimal(&mut text, u64::from(incarnation));
        text.push_str("/m");
        push_decimal(&mut text, message as u64);
        text.push('c');
        push_decimal(&mut text, call as u64);
        RequestId(text)
    }

    /// The text of the id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Appends `n` in decimal.
fn push_decimal(text: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        text.push(char::from(digit));
    }
}

/// The identity of one tree (the root session): every record and event of a tree belongs to it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// A session id from any text.
    pub fn new(id: impl Into<String>) -> Self {
        SessionId(id.into())
    }

    /// The text of the id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_id_parses_only_its_own_form() {
        assert_eq!("a0".parse::<AgentId>().unwrap(), AgentId::ROOT);
        assert_eq!("a42".parse::<AgentId>().unwrap(), AgentId::new(42));
        for bad in [
            "",
            "a",
            "b1",
            "a-1",
            "a1x",
            "A1",
            "a01",
            "a00",
            "a99999999999999999999999",
        ] {
            assert!(bad.parse::<AgentId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn derived_request_id_names_owner_and_call() {
        assert_eq!(
            RequestId::derived(AgentId::new(3), 1, "call_1").as_str(),
            "a3/1/call_1"
        );
        let (message, call) = (4, 0);
        assert_eq!(
            RequestId::derived(AgentId::new(3), 2, format_args!("m{message}c{call}")),
            RequestId::derived(AgentId::new(3), 2, "m4c0")
        );
        for (owner, incarnation, message, call) in [
            (0, 1, 0, 0),
            (9, 10, 99, 100),
            (123_456_789, u32::MAX, usize::MAX, 64),
        ] {
            assert_eq!(
                RequestId::at_call(AgentId::new(owner), incarnation, message, call),
                RequestId::derived(
                    AgentId::new(owner),
                    incarnation,
                    format_args!("m{message}c{call}")
                )
            );
        }
    }
}
