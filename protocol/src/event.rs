//! Lifecycle events: what happened to which agent, in one total order per tree.
//!
//! # Invariants
//!
//! * Every event carries the agent's id, its parent's id (`None` only for the root), its
//!   depth and a sequence number; sequence numbers of one tree are dense and increasing in
//!   the order events are delivered to every subscriber.
//! * A usage event reports one model turn's delta exactly once: summing the deltas of all
//!   `usage_reported` events gives the tree's total usage.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::definition::AgentDefinition;
use crate::ids::AgentId;
use crate::ids::RequestId;
use crate::message::ModelErrorKind;
use crate::outcome::{EndReason, Outcome};
use crate::status::AgentStatus;
use crate::usage::Usage;

/// One lifecycle event.
///
/// In JSON the kind's fields sit beside the envelope's, tagged by `event`:
/// `{"seq":3,"agent":"a2","parent":"a1","depth":2,"at_ms":40,"event":"completed"}`.
/// Decoding is strict: unknown fields and non-string kinds are errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Position in the tree's event order, from 1.
    pub seq: u64,
    /// The agent it is about.
    pub agent: AgentId,
    /// That agent's owner (`None` for the root).
    pub parent: Option<AgentId>,
    /// That agent's depth (root 0).
    pub depth: u32,
    /// Milliseconds since the tree started (tokio time, so virtual under paused tests).
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum EventKind {
    /// Admitted: the record exists, status `starting`; its actor is being started.
    Spawned {
        /// The agent's type.
        agent_type: String,
        /// The spawn's idempotency key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<RequestId>,
        /// Whether it is detached from ordinary abort cascades.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        detached: bool,
    },
    /// Admitted and waiting for a pool slot: the record exists, status `queued`.
    Queued {
        /// The agent's type.
        agent_type: String,
        /// The spawn's idempotency key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<RequestId>,
        /// Whether it is detached from ordinary abort cascades.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        detached: bool,
    },
    /// A queued agent took a pool slot: status `starting`.
    Dequeued,
    /// The actor of a run exists and its first model turn may begin: status `running`.
    /// Emitted for every run (first start, restart, resume).
    Started {
        /// The agent's type.
        agent_type: String,
        /// Which incarnation of this agent (1 for the first; restarts count up).
        incarnation: u32,
    },
    /// One model turn's usage, recorded once on the agent.
    UsageReported {
        /// The turn's delta.
        delta: Usage,
    },
    /// A model turn failed with a transient error and will be tried again after `delay_ms`
    /// (the tree's retry policy). Everything of the failed attempt came before: its usage,
    /// if any, and the text it streamed (`text_delta` events of its `attempt`); nothing of
    /// it comes after. That text is not the turn's: a view showing streamed text starts the
    /// turn's text afresh here, with the next attempt's (`attempt + 1`).
    Retrying {
        /// The turn being retried.
        turn: u32,
        /// The attempt that failed, from 1.
        attempt: u32,
        /// What kind of failure it was.
        error_kind: ModelErrorKind,
        /// How long the runtime waits before the next attempt.
        delay_ms: u64,
    },
    /// Text the model streamed during a turn (only when the tree's config enables
    /// `stream_events`; several deltas may be joined into one event). A failed attempt's text
    /// comes too, all of it before that attempt's `retrying` event, and then the next
    /// attempt's.
    ///
    /// ```
    /// use agent_tree_protocol::EventKind;
    /// let delta = EventKind::TextDelta { turn: 2, attempt: 1, text: "Hel".into() };
    /// let json = serde_json::to_value(&delta).unwrap();
    /// assert_eq!(json, serde_json::json!({"event": "text_delta", "turn": 2, "attempt": 1, "text": "Hel"}));
    /// // Written before attempts were numbered: the first attempt.
    /// let old: EventKind =
    ///     serde_json::from_str(r#"{"event": "text_delta", "turn": 2, "text": "Hel"}"#).unwrap();
    /// assert_eq!(old, delta);
    /// ```
    TextDelta {
        /// The turn streaming.
        turn: u32,
        /// The attempt of the turn streaming, from 1: a retried turn (see `retrying`)
        /// streams its next attempt's text under the next number. 1 when read from a
        /// journal written before attempts were numbered.
        #[serde(default = "first_attempt")]
        attempt: u32,
        /// The text since the last delta.
        text: String,
    },
    /// A tool the agent called reported how far it is (an MCP server's progress
    /// notification): `progress` of `total` when the tool knows the whole, with what it is
    /// doing. Changes no record; a view shows it beside the call.
    ///
    /// ```
    /// use agent_tree_protocol::EventKind;
    /// let progress = EventKind::ToolProgress {
    ///     call_id: "call_1".into(),
    ///     tool: "mcp__files__copy".into(),
    ///     progress: 3.into(),
    ///     total: Some(10.into()),
    ///     message: None,
    /// };
    /// let json = serde_json::to_value(&progress).unwrap();
    /// assert_eq!(json, serde_json::json!({"event": "tool_progress", "call_id": "call_1",
    ///     "tool": "mcp__files__copy", "progress": 3, "total": 10}));
    /// ```
    ToolProgress {
        /// The model's id of the call.
        call_id: String,
        /// The tool, by the name the model called it.
        tool: String,
        /// How far it is: increasing with each report of one call.
        progress: serde_json::Number,
        /// The whole, when the tool knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<serde_json::Number>,
        /// What it is doing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A steer reached the agent's conversation at a turn boundary.
    Steered,
    /// The agent asked its owner a question (`ask_owner`) and waits for the answer.
    Asked {
        /// The question.
        question: String,
    },
    /// The agent's own run ended and it holds its outcome while its children drain (status
    /// `completing`); for the root, the tree stopped admitting agents (a shutdown began).
    Completing,
    /// A settled agent was resumed by its owner for another run: status `starting`.
    Resumed,
    /// A context the definition asked to inherit was dropped (too deep).
    ContextDropped,
    /// The agent was restarted by its supervisor: status `starting`.
    Restarted {
        /// The new incarnation.
        incarnation: u32,
    },
    /// Terminal: the agent completed.
    Completed {
        /// Its outcome (status `completed`).
        outcome: Outcome,
    },
    /// Terminal: the agent failed.
    Failed {
        /// Its outcome (status `failed`): reason and error.
        outcome: Outcome,
    },
    /// Terminal: the agent was aborted.
    Aborted {
        /// Its outcome (status `aborted`): reason and any partial output.
        outcome: Outcome,
    },
    /// Terminal: the agent's actor was killed.
    Killed {
        /// Its outcome (status `killed`).
        outcome: Outcome,
    },
    /// A settled agent's output (its outcome's `text` and `partial`) was released from
    /// memory under the journal's retention policy, after it was read: the record keeps
    /// status, reason and error, and the journal the output, read back on demand.
    Released {
        /// The bytes released.
        bytes: u64,
    },
}

/// The attempt a `text_delta` without one belongs to: the first.
fn first_attempt() -> u32 {
    1
}

impl<'de> Deserialize<'de> for Event {
    // serde cannot combine `flatten` with `deny_unknown_fields`, so the envelope is taken
    // off by hand and the rest must be exactly one kind's fields.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut fields = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        fn take<T: serde::de::DeserializeOwned, E: Error>(
            fields: &mut serde_json::Map<String, serde_json::Value>,
            name: &'static str,
        ) -> Result<T, E> {
            let value = fields.remove(name).ok_or_else(|| E::missing_field(name))?;
            serde_json::from_value(value)
                .map_err(|e| E::custom(format_args!("field `{name}`: {e}")))
        }
        let seq = take(&mut fields, "seq")?;
        let agent = take(&mut fields, "agent")?;
        let parent = take(&mut fields, "parent")?;
        let depth = take(&mut fields, "depth")?;
        let at_ms = take(&mut fields, "at_ms")?;
        if !fields
            .get("event")
            .is_some_and(serde_json::Value::is_string)
        {
            return Err(D::Error::custom("field `event` must name the event kind"));
        }
        let kind = EventKind::deserialize(serde_json::Value::Object(fields.clone()))
            .map_err(D::Error::custom)?;
        // Unit kinds ignore extra fields even with `deny_unknown_fields`: compare with what the
        // kind itself writes.
        if let Ok(serde_json::Value::Object(known)) = serde_json::to_value(&kind) {
            if let Some(extra) = fields.keys().find(|k| !known.contains_key(*k)) {
                return Err(D::Error::custom(format_args!("unknown field `{extra}`")));
            }
        }
        if let (Some(outcome), Some(status)) = (kind.outcome(), kind.terminal_status()) {
            if outcome.status != status {
                return Err(D::Error::custom(format_args!(
                    "outcome status `{}` does not match event `{}`",
                    outcome.status,
                    kind.name()
                )));
            }
        }
        Ok(Event {
            seq,
            agent,
            parent,
            depth,
            at_ms,
            kind,
        })
    }
}

impl EventKind {
    /// The snake_case name of the kind, as in JSON and the tally.
    pub const fn name(&self) -> &'static str {
        match self {
            EventKind::Spawned { .. } => "spawned",
            EventKind::Queued { .. } => "queued",
            EventKind::Dequeued => "dequeued",
            EventKind::Started { .. } => "started",
            EventKind::UsageReported { .. } => "usage_reported",
            EventKind::Retrying { .. } => "retrying",
            EventKind::TextDelta { .. } => "text_delta",
            EventKind::ToolProgress { .. } => "tool_progress",
            EventKind::Steered => "steered",
            EventKind::Asked { .. } => "asked",
            EventKind::Completing => "completing",
            EventKind::Resumed => "resumed",
            EventKind::ContextDropped => "context_dropped",
            EventKind::Restarted { .. } => "restarted",
            EventKind::Completed { .. } => "completed",
            EventKind::Failed { .. } => "failed",
            EventKind::Aborted { .. } => "aborted",
            EventKind::Killed { .. } => "killed",
            EventKind::Released { .. } => "released",
        }
    }

    /// The terminal event announcing `outcome`: its kind follows the outcome's status.
    /// A non-terminal status (which no outcome should carry) is announced as `aborted`.
    ///
    /// ```
    /// use agent_tree_protocol::{EventKind, Outcome};
    /// let kind = EventKind::settled(Outcome::completed("42"));
    /// assert_eq!(kind.name(), "completed");
    /// assert_eq!(kind.outcome().and_then(|o| o.text.as_deref()), Some("42"));
    /// ```
    pub fn settled(outcome: Outcome) -> Self {
        match outcome.status {
            AgentStatus::Completed => EventKind::Completed { outcome },
            AgentStatus::Failed => EventKind::Failed { outcome },
            AgentStatus::Killed => EventKind::Killed { outcome },
            _ => EventKind::Aborted { outcome },
        }
    }

    /// The outcome a terminal event announces.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            EventKind::Completed { outcome }
            | EventKind::Failed { outcome }
            | EventKind::Aborted { outcome }
            | EventKind::Killed { outcome } => Some(outcome),
            _ => None,
        }
    }

    /// The terminal status this event announces, if any.
    pub fn terminal_status(&self) -> Option<AgentStatus> {
        match self {
            EventKind::Completed { .. } => Some(AgentStatus::Completed),
            EventKind::Failed { .. } => Some(AgentStatus::Failed),
            EventKind::Aborted { .. } => Some(AgentStatus::Aborted),
            EventKind::Killed { .. } => Some(AgentStatus::Killed),
            _ => None,
        }
    }

    /// The reason of a terminal event's outcome.
    pub fn reason(&self) -> Option<EndReason> {
        self.outcome().map(|o| o.reason)
    }

    /// A `started` event for a definition's first incarnation.
    pub fn started(definition: &AgentDefinition) -> Self {
        EventKind::Started {
            agent_type: definition.name.clone(),
            incarnation: 1,
        }
    }
}

/// How many events of each kind a tree has emitted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventTally {
    /// `spawned` events.
    pub spawned: u64,
    /// `queued` events.
    pub queued: u64,
    /// `dequeued` events.
    pub dequeued: u64,
    /// `started` events.
    pub started: u64,
    /// `usage_reported` events.
    pub usage_reported: u64,
    /// `retrying` events.
    pub retrying: u64,
    /// `text_delta` events.
    pub text_delta: u64,
    /// `tool_progress` events.
    #[serde(default)]
    pub tool_progress: u64,
    /// `steered` events.
    pub steered: u64,
    /// `asked` events.
    pub asked: u64,
    /// `completing` events.
    pub completing: u64,
    /// `resumed` events.
    pub resumed: u64,
    /// `context_dropped` events.
    pub context_dropped: u64,
    /// `restarted` events.
    pub restarted: u64,
    /// `completed` events.
    pub completed: u64,
    /// `failed` events.
    pub failed: u64,
    /// `aborted` events.
    pub aborted: u64,
    /// `killed` events.
    pub killed: u64,
    /// `released` events.
    #[serde(default)]
    pub released: u64,
}

impl EventTally {
    /// Counts one event of `kind`.
    pub fn count(&mut self, kind: &EventKind) {
        let slot = match kind {
            EventKind::Spawned { .. } => &mut self.spawned,
            EventKind::Queued { .. } => &mut self.queued,
            EventKind::Dequeued => &mut self.dequeued,
            EventKind::Started { .. } => &mut self.started,
            EventKind::UsageReported { .. } => &mut self.usage_reported,
            EventKind::Retrying { .. } => &mut self.retrying,
            EventKind::TextDelta { .. } => &mut self.text_delta,
            EventKind::ToolProgress { .. } => &mut self.tool_progress,
            EventKind::Steered => &mut self.steered,
            EventKind::Asked { .. } => &mut self.asked,
            EventKind::Completing => &mut self.completing,
            EventKind::Resumed => &mut self.resumed,
            EventKind::ContextDropped => &mut self.context_dropped,
            EventKind::Restarted { .. } => &mut self.restarted,
            EventKind::Completed { .. } => &mut self.completed,
            EventKind::Failed { .. } => &mut self.failed,
            EventKind::Aborted { .. } => &mut self.aborted,
            EventKind::Killed { .. } => &mut self.killed,
            EventKind::Released { .. } => &mut self.released,
        };
        *slot += 1;
    }

    /// Events counted in all.
    pub fn total(&self) -> u64 {
        [
            self.spawned,
            self.queued,
            self.dequeued,
            self.started,
            self.usage_reported,
            self.retrying,
            self.text_delta,
            self.tool_progress,
            self.steered,
            self.asked,
            self.completing,
            self.resumed,
            self.context_dropped,
            self.restarted,
            self.completed,
            self.failed,
            self.aborted,
            self.killed,
            self.released,
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }
}

impl fmt::Display for EventTally {
    /// `started=.. completed=.. failed=.. aborted=.. killed=.. restarted=.. queued=..
    /// resumed=.. usage_reported=.. steered=.. asked=.. context_dropped=.. spawned=..
    /// dequeued=.. completing=.. retrying=.. text_delta=.. released=..` (the kinds added later
    /// come last, so older readers of the line keep their fields in place).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "started={} completed={} failed={} aborted={} killed={} restarted={} queued={} \
             resumed={} usage_reported={} steered={} asked={} context_dropped={} spawned={} \
             dequeued={} completing={} retrying={} text_delta={} released={}",
            self.started,
            self.completed,
            self.failed,
            self.aborted,
            self.killed,
            self.restarted,
            self.queued,
            self.resumed,
            self.usage_reported,
            self.steered,
            self.asked,
            self.context_dropped,
            self.spawned,
            self.dequeued,
            self.completing,
            self.retrying,
            self.text_delta,
            self.released
        )
    }
}
