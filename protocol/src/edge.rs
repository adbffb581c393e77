//! The owner edge across nodes: the frames that cross one owner edge between the owner's
//! node and the node hosting the owner's remote child.
//!
//! An edge has two directions. **Down** (owner's node → child's node) carries
//! [`Command`]s, lease [`LeaseGrant`]s and acknowledgements; **up** (child's node → owner's
//! node) carries the hosted subtree's lifecycle [`Event`]s, refusals of commands,
//! [`TerminalReport`]s, lease renewal requests and acknowledgements. Every frame is a
//! [`Frame`]: a per-direction sequence number, the cumulative acknowledgement of the other
//! direction, and a body ([`Down`] or [`Up`]).
//!
//! What the numbers mean and how the two ends use them (outbox, inbox, lease, mirror) is
//! behaviour, in `agent-tree-actors` (`cluster::edge`, feature `cluster`); `docs/cluster.md`
//! states the failure semantics. This module is only the data.
//!
//! # Invariants
//!
//! * **Sequenced bodies** ([`Down::is_sequenced`], [`Up::is_sequenced`]: commands, events,
//!   refusals, terminal reports) are numbered `1, 2, 3, …` per direction, kept by the sender
//!   until acknowledged, replayed in order after a reconnect, and applied by the receiver
//!   exactly once. **Control bodies** (lease grants and renewals, acknowledgements) are not
//!   numbered: they carry the sender's last assigned number as `seq` (so the receiver sees
//!   what it has not received yet), are never replayed and never acknowledged.
//! * `ack` is cumulative: every sequenced frame of the other direction up to and including
//!   `ack` has been applied. An `ack` never decreases on one edge.
//! * Agent ids in [`Up::Event`] and [`TerminalReport`] are those of the hosted tree: the
//!   child's node hosts the edge's subtree as a tree of its own, whose root `a0` stands for
//!   the remote owner, so the owner's node folds its events with the same
//!   [`apply`](crate::apply) as a journal replay. Commands name agents by the owner's ids;
//!   a spawn's `request_id` ties the two (the hosted `spawned` event carries it).
//! * Times never cross the edge as instants: the two nodes' clocks are unrelated. A lease is
//!   a length, measured by the child's node from when it asked ([`Up::Renew`]); a shutdown's
//!   deadline is the time left when the command was sent.
//! * Decoding is strict (unknown fields and kinds are errors) and never panics; a frame
//!   encodes to at most [`DEFAULT_MAX_FRAME_BYTES`] unless the edge is configured otherwise
//!   (ractor_cluster drops the whole connection at 16 MiB).
//!
//! ```
//! use agent_tree_protocol::{Command, Down, Frame, Wire};
//! let frame = Frame { seq: 1, ack: 0, body: Down::Command { command: Command::Abort { agent: "a3".parse().unwrap() } } };
//! let text = frame.to_json();
//! assert_eq!(Frame::<Down>::from_json(&text).unwrap(), frame);
//! assert!(Frame::<Down>::from_json(r#"{"seq":1,"ack":0,"body":{"kind":"ack"},"x":1}"#).is_err());
//! ```

use serde::{Deserialize, Serialize};

use crate::Wire;
use crate::definition::SettlePolicy;
use crate::event::Event;
use crate::ids::{AgentId, RequestId};
use crate::status::AgentStatus;
use crate::usage::Usage;

/// The largest encoded frame an edge sends by default: 8 MiB, half of ractor_cluster's
/// 16 MiB frame limit (past which it drops the whole connection), so an envelope and the
/// transport's own framing always fit.
///
/// ```
/// use agent_tree_protocol::DEFAULT_MAX_FRAME_BYTES;
/// assert!(DEFAULT_MAX_FRAME_BYTES < 16 * 1024 * 1024);
/// ```
pub const DEFAULT_MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// The largest body an edge sends, encoded, by default: 24 MiB. A body over the frame limit
/// and within this goes in [`Part`]s, each a frame under the limit; one over this is refused
/// before it is queued (an event is shrunk to fit, saying so). The parts of the largest
/// body, even all quotes (escaped, twice its size), fit in an empty outbox.
///
/// ```
/// use agent_tree_protocol::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_FRAME_BYTES};
/// assert!(DEFAULT_MAX_BODY_BYTES > DEFAULT_MAX_FRAME_BYTES);
/// ```
pub const DEFAULT_MAX_BODY_BYTES: usize = 24 * 1024 * 1024;

/// One part of a body too large for one frame: the body's JSON, cut at character
/// boundaries, its parts numbered frames one after another (nothing comes between them).
/// The receiver joins them and applies the body when the last part comes, exactly once, as
/// if it had come in one frame.
///
/// ```
/// use agent_tree_protocol::{Part, Up};
/// let part = Up::Part { part: Part { index: 0, of: 2, text: r#"{"kind":"#.into() } };
/// assert!(part.is_sequenced());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// Which part, from 0.
    pub index: u32,
    /// How many parts the body is in.
    pub of: u32,
    /// This part of the body's JSON.
    pub text: String,
}

/// One frame on an owner edge: a sequence number, the cumulative acknowledgement of the
/// other direction, and a body ([`Down`] or [`Up`]).
///
/// For a sequenced body `seq` is its number (from 1); for a control body it is the sender's
/// last assigned number (0 before the first).
///
/// ```
/// use agent_tree_protocol::{Frame, Up, Wire};
/// let ack = Frame { seq: 4, ack: 2, body: Up::Ack { resend: false } };
/// assert_eq!(ack.to_json(), r#"{"seq":4,"ack":2,"body":{"kind":"ack"}}"#);
/// assert!(!ack.body.is_sequenced());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame<B> {
    /// The sender's sequence number (see the type's docs).
    pub seq: u64,
    /// Every sequenced frame of the other direction up to this one has been applied.
    pub ack: u64,
    /// What the frame carries.
    pub body: B,
}

/// What travels down an edge, from the owner's node to the child's node.
///
/// ```
/// use agent_tree_protocol::{Down, LeaseGrant};
/// assert!(!Down::Grant { grant: LeaseGrant { ticket: 1, lease_ms: 3_000 } }.is_sequenced());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Down {
    /// A command for the hosted subtree (sequenced).
    Command {
        /// The command.
        command: Command,
    },
    /// A lease answering a renewal request (control).
    Grant {
        /// The grant.
        grant: LeaseGrant,
    },
    /// One part of a body too large for one frame (sequenced).
    Part {
        /// The part.
        part: Part,
    },
    /// An acknowledgement only (control); `resend` asks the child's node to replay every
    /// frame after the envelope's `ack` (the owner's node saw a gap).
    Ack {
        /// Replay everything unacknowledged.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resend: bool,
    },
}

impl Down {
    /// Whether the body is numbered, kept until acknowledged and replayed (a command), or a
    /// control body (a grant, an acknowledgement).
    ///
    /// ```
    /// use agent_tree_protocol::{Command, Down};
    /// assert!(Down::Command { command: Command::Shutdown { within_ms: 3_000 } }.is_sequenced());
    /// assert!(!Down::Ack { resend: true }.is_sequenced());
    /// ```
    pub const fn is_sequenced(&self) -> bool {
        matches!(self, Down::Command { .. } | Down::Part { .. })
    }
}

/// A child of an earlier run of a remote agent being resumed, as the owner's node keeps it
/// ([`Command::Spawn`]'s `earlier`).
///
/// ```
/// use agent_tree_protocol::{EarlierChild, Outcome, Wire};
/// let child = EarlierChild {
///     agent: "a7".parse().unwrap(),
///     agent_type: "helper".into(),
///     outcome: Outcome::completed("done 1"),
/// };
/// let json = child.to_json();
/// assert_eq!(EarlierChild::from_json(&json).unwrap(), child);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlierChild {
    /// The owner's id of it: what the resumed conversation names it by.
    pub agent: AgentId,
    /// Its type.
    pub agent_type: String,
    /// How it ended.
    pub outcome: crate::Outcome,
}

impl EarlierChild {
    /// What a request id of an earlier child's seed starts with.
    const SEED: &'static str = "earlier:";

    /// The request id of its seed's `spawned` event in the resumed run's hosted tree: it
    /// names the owner's id of it, so the owner's node knows the record the seed stands for.
    ///
    /// ```
    /// use agent_tree_protocol::{EarlierChild, Outcome};
    /// let child = EarlierChild {
    ///     agent: "a7".parse().unwrap(),
    ///     agent_type: "helper".into(),
    ///     outcome: Outcome::completed("done 1"),
    /// };
    /// let request = child.seed_request();
    /// assert_eq!(request.as_str(), "earlier:a7");
    /// assert_eq!(EarlierChild::seeded_from(&request), Some(child.agent));
    /// ```
    pub fn seed_request(&self) -> RequestId {
        RequestId::new(format!("{}{}", Self::SEED, self.agent))
    }

    /// The owner's id a seed's request id ([`EarlierChild::seed_request`]) names; `None`
    /// for any other request id.
    pub fn seeded_from(request: &RequestId) -> Option<AgentId> {
        request.as_str().strip_prefix(Self::SEED)?.parse().ok()
    }
}

impl Wire for EarlierChild {
    const WHAT: &'static str = "earlier child";
}

/// A command the owner's node sends for the hosted subtree. Agents are named by the
/// owner's ids.
///
/// ```
/// use agent_tree_protocol::{Command, RequestId};
/// let spawn = Command::Spawn {
///     agent: "a4".parse().unwrap(),
///     incarnation: 1,
///     definition: "worker".into(),
///     prompt: "count the files".into(),
///     request_id: RequestId::new("a1/1/m2c0"),
///     settle: None,
///     context: Vec::new(),
///     resume: false,
///     earlier: Vec::new(),
/// };
/// assert_eq!(spawn.agent().map(|a| a.to_string()).as_deref(), Some("a4"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Command {
    /// Start the remote child `agent` (the owner's id for it) of definition `definition`
    /// with task `prompt`. A restart is a new spawn with the same id and the next
    /// incarnation; a second spawn with the same `request_id` and incarnation finds the
    /// first.
    Spawn {
        /// The owner's id of the child.
        agent: AgentId,
        /// Which run: 1 for the first, restarts count up.
        incarnation: u32,
        /// The definition's name, resolved in the child's node's catalog.
        definition: String,
        /// The task.
        prompt: String,
        /// The spawn's idempotency key; the hosted `spawned` event carries it.
        request_id: RequestId,
        /// The settle policy the application's request set for the run; absent, the child's
        /// node's definition decides.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settle: Option<SettlePolicy>,
        /// The conversation the child inherits from its owner (its owner's node's definition
        /// has `inherit_context`): it comes before the task, as for a local child. Empty
        /// when it inherits nothing. The agent ids the runtime wrote into it are the owner
        /// tree's plus 1,000,000,000 (`a2` goes as `a1000000002`), ids no hosted tree
        /// gives, so the child's own children never take a number it names; an id of an
        /// `earlier` child goes as the owner's, for the hosted admission to rename.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        context: Vec<crate::Message>,
        /// A resumed run: `context` is the agent's own conversation as its last run ended
        /// (from [`Up::Conversation`]), continued; `prompt` is the next user message, and an
        /// empty one adds none (the run continues as it was).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resume: bool,
        /// A resumed run: the children of the agent's earlier runs, which `context` names
        /// (by the owner's ids). The run's hosted tree holds a settled record of each
        /// under the agent, so an earlier child is still there to read, and the new
        /// children never take the numbers the conversation gives the earlier ones.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        earlier: Vec<EarlierChild>,
    },
    /// Steer `agent` at its next turn boundary.
    Steer {
        /// The agent (owner's id).
        agent: AgentId,
        /// The steering message.
        message: String,
    },
    /// Abort `agent` and its subtree.
    Abort {
        /// The agent (owner's id).
        agent: AgentId,
    },
    /// Answer the question `agent` asked its owner (`ask_owner`), or refuse it.
    Answer {
        /// The agent (owner's id).
        agent: AgentId,
        /// The answer, or why the owner cannot answer.
        answer: String,
        /// The owner cannot answer: `answer` is the reason, an error result for the agent.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// Shut the hosted subtree down: hooks run, whatever is alive after `within_ms` is
    /// killed. `within_ms` is what was left of the owner's deadline when the command was
    /// sent; the owner's node counts a node that has not reported by its own deadline as
    /// killed, whatever the child's node does later.
    Shutdown {
        /// Milliseconds left to the deadline at sending.
        within_ms: u64,
    },
}

impl Command {
    /// The agent the command is about (`None` for a shutdown, which is about the whole
    /// hosted subtree).
    ///
    /// ```
    /// use agent_tree_protocol::Command;
    /// assert_eq!(Command::Shutdown { within_ms: 10 }.agent(), None);
    /// ```
    pub const fn agent(&self) -> Option<AgentId> {
        match self {
            Command::Spawn { agent, .. }
            | Command::Steer { agent, .. }
            | Command::Abort { agent }
            | Command::Answer { agent, .. } => Some(*agent),
            Command::Shutdown { .. } => None,
        }
    }
}

/// A lease the owner's node grants in answer to the renewal request `ticket`: the child's
/// node may keep its subtree running until `lease_ms` after it *sent* that request (by its
/// own clock), never longer.
///
/// ```
/// use agent_tree_protocol::{Down, Frame, LeaseGrant, Wire};
/// let frame = Frame { seq: 0, ack: 3, body: Down::Grant { grant: LeaseGrant { ticket: 7, lease_ms: 3_000 } } };
/// assert_eq!(Frame::<Down>::from_json(&frame.to_json()).unwrap(), frame);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseGrant {
    /// The [`Up::Renew`] ticket it answers.
    pub ticket: u64,
    /// How long the lease lasts, from the request's sending.
    pub lease_ms: u64,
}

/// What travels up an edge, from the child's node to the owner's node.
///
/// ```
/// use agent_tree_protocol::Up;
/// assert!(!Up::Renew { ticket: 1 }.is_sequenced());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Up {
    /// A lifecycle event of the hosted tree, in its own order (sequenced).
    Event {
        /// The event, with the hosted tree's ids and sequence number.
        event: Event,
    },
    /// One part of a body too large for one frame (sequenced).
    Part {
        /// The part.
        part: Part,
    },
    /// Hosted agent `agent` (the hosted tree's id; a top agent) asked its owner a
    /// question (`ask_owner`); a [`Command::Answer`] answers it (sequenced).
    Asked {
        /// The hosted agent.
        agent: AgentId,
        /// The question.
        question: String,
    },
    /// A steer (downward command `command`) was taken by the hosted agent: `queued` when
    /// its session did not exist yet, else it is in its inbox for a coming turn. A steer
    /// that cannot be taken is [`Up::Refused`] (sequenced).
    Steered {
        /// The steer's downward sequence number.
        command: u64,
        /// It waits for the agent's session.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        queued: bool,
    },
    /// A downward command that could not be carried out (sequenced).
    Refused {
        /// The command's downward sequence number (its last part's, when it came in
        /// [`Part`]s).
        command: u64,
        /// Why.
        error: String,
    },
    /// Hosted top agent `agent`'s (the hosted tree's id) conversation as it grows, messages
    /// `from..from + messages.len()`: what it published at each turn boundary and, just
    /// before the run's terminal event, the conversation the run ended with (its final
    /// answer included). The owner's node keeps it, and journals it, as an agent's own turn
    /// boundaries are kept, so a resume continues the run as it was, also after the node
    /// died mid-run. A run's conversation only grows: `from` is what the owner's node holds
    /// already (0: the whole, from the edge's first turn boundary, a resumed conversation
    /// included). `cut`: a message of it is over the frame limit, so it cannot come up
    /// (`messages` is empty, and nothing of this agent's conversation follows) (sequenced).
    Conversation {
        /// The hosted top agent.
        agent: AgentId,
        /// Where `messages` start in its conversation.
        #[serde(default, skip_serializing_if = "is_zero")]
        from: u64,
        /// The messages from `from` on (the system prompt is not part of the conversation).
        messages: Vec<crate::Message>,
        /// The conversation cannot come up whole: the owner's node keeps none of it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cut: bool,
    },
    /// A run of a hosted agent settled, or (for `a0`) the whole hosted tree (sequenced).
    Report {
        /// The report.
        report: TerminalReport,
    },
    /// A lease renewal request (control); the grant names the ticket.
    Renew {
        /// The request's number, increasing.
        ticket: u64,
    },
    /// The child's node has no such edge (control): it ended there, or the node is another
    /// process now. The answer to any frame of an edge a node does not have.
    Gone,
    /// An acknowledgement only (control); `resend` asks the owner's node to replay every
    /// frame after the envelope's `ack`.
    Ack {
        /// Replay everything unacknowledged.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resend: bool,
    },
}

impl Up {
    /// Whether the body is numbered, kept until acknowledged and replayed (an event, a
    /// refusal, a report), or a control body (a renewal request, an acknowledgement).
    ///
    /// ```
    /// use agent_tree_protocol::Up;
    /// assert!(Up::Refused { command: 2, error: "unknown type".into() }.is_sequenced());
    /// assert!(Up::Asked { agent: "a1".parse().unwrap(), question: "which?".into() }.is_sequenced());
    /// assert!(!Up::Ack { resend: false }.is_sequenced());
    /// ```
    pub const fn is_sequenced(&self) -> bool {
        matches!(
            self,
            Up::Event { .. }
                | Up::Part { .. }
                | Up::Conversation { .. }
                | Up::Asked { .. }
                | Up::Steered { .. }
                | Up::Refused { .. }
                | Up::Report { .. }
        )
    }
}

/// The child's node's account of a settled run (or, for `a0`, of the whole hosted tree):
/// its status, its cumulative subtree usage and the last hosted event before it, which the
/// owner's mirror checks against what it folded.
///
/// ```
/// use agent_tree_protocol::{AgentStatus, TerminalReport, Usage};
/// let report = TerminalReport {
///     agent: "a1".parse().unwrap(),
///     incarnation: 1,
///     status: AgentStatus::Completed,
///     usage: Usage::tokens(120, 30),
///     last_event: 9,
/// };
/// assert_eq!(report.usage.total_tokens(), 150);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalReport {
    /// The hosted agent (hosted tree's id; `a0` for the whole tree).
    pub agent: AgentId,
    /// Its run.
    pub incarnation: u32,
    /// Its terminal status (`running` for `a0`, which stands for the owner).
    pub status: AgentStatus,
    /// Its subtree's usage, every run so far.
    pub usage: Usage,
    /// The hosted tree's last event sequence number before the report.
    pub last_event: u64,
}

impl Wire for Frame<Down> {
    const WHAT: &'static str = "down frame";
}

impl Wire for Frame<Up> {
    const WHAT: &'static str = "up frame";
}

impl Wire for TerminalReport {
    const WHAT: &'static str = "terminal report";
}

/// Whether a conversation's offset is the default, its start (not written).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, Outcome};
    use proptest::prelude::*;

    fn event() -> Event {
        Event {
            seq: 3,
            agent: AgentId::new(1),
            parent: Some(AgentId::ROOT),
            depth: 1,
            at_ms: 40,
            kind: EventKind::settled(Outcome::completed("done")),
        }
    }

    fn samples() -> (Vec<Frame<Down>>, Vec<Frame<Up>>) {
        let a = AgentId::new(4);
        let down = [
            Down::Command {
                command: Command::Spawn {
                    agent: a,
                    incarnation: 2,
                    definition: "worker".into(),
                    prompt: "p".into(),
                    request_id: RequestId::new("a1/1/m2c0"),
                    settle: Some(crate::SettlePolicy::Drain),
                    context: vec![crate::Message::user("the owner's task")],
                    resume: false,
                    earlier: Vec::new(),
                },
            },
            Down::Command {
                command: Command::Spawn {
                    agent: a,
                    incarnation: 1,
                    definition: "worker".into(),
                    prompt: String::new(),
                    request_id: RequestId::new("a1/2/m4c0"),
                    settle: None,
                    context: vec![crate::Message::user("the task a7 was given")],
                    resume: true,
                    earlier: vec![EarlierChild {
                        agent: AgentId::new(7),
                        agent_type: "helper".into(),
                        outcome: crate::Outcome::completed("done 1"),
                    }],
                },
            },
            Down::Command {
                command: Command::Steer {
                    agent: a,
                    message: "hurry".into(),
                },
            },
            Down::Command {
                command: Command::Abort { agent: a },
            },
            Down::Command {
                command: Command::Answer {
                    agent: a,
                    answer: "yes".into(),
                    refused: false,
                },
            },
            Down::Command {
                command: Command::Answer {
                    agent: a,
                    answer: "cannot say".into(),
                    refused: true,
                },
            },
            Down::Command {
                command: Command::Shutdown { within_ms: 3_000 },
            },
            Down::Part {
                part: Part {
                    index: 1,
                    of: 3,
                    text: r#""prompt":"a \"quoted\" é"#.into(),
                },
            },
            Down::Grant {
                grant: LeaseGrant {
                    ticket: 9,
                    lease_ms: 3_000,
                },
            },
            Down::Ack { resend: true },
            Down::Ack { resend: false },
        ];
        let up = [
            Up::Event { event: event() },
            Up::Part {
                part: Part {
                    index: 0,
                    of: 2,
                    text: r#"{"kind":"event","#.into(),
                },
            },
            Up::Conversation {
                agent: AgentId::new(1),
                from: 0,
                messages: vec![
                    crate::Message::user("go"),
                    crate::Message::assistant("done", vec![]),
                ],
                cut: false,
            },
            Up::Conversation {
                agent: AgentId::new(1),
                from: 2,
                messages: vec![crate::Message::user("more")],
                cut: false,
            },
            Up::Conversation {
                agent: AgentId::new(1),
                from: 3,
                messages: vec![],
                cut: true,
            },
            Up::Asked {
                agent: AgentId::new(1),
                question: "which branch?".into(),
            },
            Up::Steered {
                command: 2,
                queued: true,
            },
            Up::Gone,
            Up::Refused {
                command: 3,
                error: "unknown type".into(),
            },
            Up::Report {
                report: TerminalReport {
                    agent: AgentId::new(1),
                    incarnation: 1,
                    status: AgentStatus::Completed,
                    usage: Usage::tokens(5, 6),
                    last_event: 3,
                },
            },
            Up::Renew { ticket: 2 },
            Up::Ack { resend: true },
        ];
        (numbered(down), numbered(up))
    }

    /// Frame `i` of `bodies` numbered `i + 1`, acknowledging `i`.
    fn numbered<B>(bodies: impl IntoIterator<Item = B>) -> Vec<Frame<B>> {
        bodies
            .into_iter()
            .zip(0u64..)
            .map(|(body, i)| Frame {
                seq: i + 1,
                ack: i,
                body,
            })
            .collect()
    }

    #[test]
    fn every_body_round_trips() {
        let (down, up) = samples();
        for frame in down {
            assert_eq!(Frame::<Down>::from_json(&frame.to_json()).unwrap(), frame);
        }
        for frame in up {
            assert_eq!(Frame::<Up>::from_json(&frame.to_json()).unwrap(), frame);
        }
    }

    #[test]
    fn the_wire_form_is_stable() {
        let frame = Frame {
            seq: 2,
            ack: 5,
            body: Down::Command {
                command: Command::Steer {
                    agent: AgentId::new(3),
                    message: "m".into(),
                },
            },
        };
        assert_eq!(
            frame.to_json(),
            r#"{"seq":2,"ack":5,"body":{"kind":"command","command":{"command":"steer","agent":"a3","message":"m"}}}"#
        );
        let renew = Frame {
            seq: 0,
            ack: 0,
            body: Up::Renew { ticket: 1 },
        };
        assert_eq!(
            renew.to_json(),
            r#"{"seq":0,"ack":0,"body":{"kind":"renew","ticket":1}}"#
        );
    }

    #[test]
    fn decoding_is_strict() {
        for text in [
            // unknown envelope field
            r#"{"seq":1,"ack":0,"body":{"kind":"ack"},"extra":1}"#,
            // unknown body field, also on a body whose fields are all optional
            r#"{"seq":1,"ack":0,"body":{"kind":"ack","resend":false,"x":1}}"#,
            r#"{"seq":1,"ack":0,"body":{"kind":"ack","x":1}}"#,
            // unknown kind, missing kind
            r#"{"seq":1,"ack":0,"body":{"kind":"ping"}}"#,
            r#"{"seq":1,"ack":0,"body":{}}"#,
            // a body of the other direction
            r#"{"seq":1,"ack":0,"body":{"kind":"renew","ticket":1}}"#,
            // negative and fractional numbers, missing fields
            r#"{"seq":-1,"ack":0,"body":{"kind":"ack"}}"#,
            r#"{"seq":1.5,"ack":0,"body":{"kind":"ack"}}"#,
            r#"{"ack":0,"body":{"kind":"ack"}}"#,
            r#"{"seq":1,"ack":0,"body":{"kind":"grant","grant":{"ticket":1}}}"#,
            // an unknown command, a command's unknown field, a bad agent id
            r#"{"seq":1,"ack":0,"body":{"kind":"command","command":{"command":"reboot"}}}"#,
            r#"{"seq":1,"ack":0,"body":{"kind":"command","command":{"command":"abort","agent":"a1","why":"x"}}}"#,
            r#"{"seq":1,"ack":0,"body":{"kind":"command","command":{"command":"abort","agent":"a01"}}}"#,
            "",
            "null",
            "[]",
        ] {
            assert!(Frame::<Down>::from_json(text).is_err(), "{text}");
        }
        for text in [
            r#"{"seq":1,"ack":0,"body":{"kind":"ack"},"extra":1}"#,
            r#"{"seq":1,"ack":0,"body":{"kind":"command","command":{"command":"abort","agent":"a1"}}}"#,
            // an event whose outcome does not match its kind (the event's own strictness)
            r#"{"seq":1,"ack":0,"body":{"kind":"event","event":{"seq":1,"agent":"a1","parent":"a0","depth":1,"at_ms":0,"event":"completed","outcome":{"status":"failed","reason":"final_answer"}}}}"#,
            r#"{"seq":1,"ack":0,"body":{"kind":"report","report":{"agent":"a1","incarnation":1,"status":"done","usage":{},"last_event":1}}}"#,
        ] {
            assert!(Frame::<Up>::from_json(text).is_err(), "{text}");
        }
    }

    #[test]
    fn only_content_is_sequenced() {
        let (down, up) = samples();
        let d: Vec<bool> = down.iter().map(|f| f.body.is_sequenced()).collect();
        assert_eq!(
            d,
            [
                true, true, true, true, true, true, true, true, false, false, false
            ]
        );
        let u: Vec<bool> = up.iter().map(|f| f.body.is_sequenced()).collect();
        assert_eq!(
            u,
            [
                true, true, true, true, true, true, true, false, true, true, false, false
            ]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// No text panics the decoder, and whatever decodes re-encodes to the same frame.
        #[test]
        fn no_text_panics(text in ".{0,200}") {
            if let Ok(frame) = Frame::<Down>::from_json(&text) {
                prop_assert_eq!(Frame::<Down>::from_json(&frame.to_json()).unwrap(), frame);
            }
            if let Ok(frame) = Frame::<Up>::from_json(&text) {
                prop_assert_eq!(Frame::<Up>::from_json(&frame.to_json()).unwrap(), frame);
            }
        }

        /// Cutting a valid frame anywhere never panics and never decodes to something else.
        #[test]
        fn cuts_never_panic(pick in 0usize..18, cut in 0usize..400) {
            let (down, up) = samples();
            let texts: Vec<String> = down.iter().map(Wire::to_json)
                .chain(up.iter().map(Wire::to_json)).collect();
            let text = &texts[pick % texts.len()];
            // At a character's boundary (a sample holds multi-byte text).
            let cut = (0..=cut.min(text.len()))
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            let head = &text[..cut];
            if cut < text.len() {
                prop_assert!(Frame::<Down>::from_json(head).is_err());
                prop_assert!(Frame::<Up>::from_json(head).is_err());
            }
        }
    }
}
