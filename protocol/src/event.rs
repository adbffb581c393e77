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
use crate::outcome::EndReason;
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
    /// Admitted and waiting for a pool slot.
    Queued {
        /// The agent's type.
        agent_type: String,
    },
    /// The actor exists and its first model turn may begin.
    Started {
        /// The agent's type.
        agent_type: String,
        /// Which run of this agent (1 for the first).
        incarnation: u32,
    },
    /// One model turn's usage, recorded once on the agent.
    UsageReported {
        /// The turn's delta.
        delta: Usage,
    },
    /// A steer reached the agent's conversation at a turn boundary.
    Steered,
    /// The agent asked its owner a question (`ask_owner`) and waits for the answer.
    Asked {
        /// The question.
        question: String,
    },
    /// A settled agent was resumed by its owner for another run.
    Resumed,
    /// A context the definition asked to inherit was dropped (too deep).
    ContextDropped,
    /// The agent was restarted by its supervisor.
    Restarted {
        /// The new incarnation.
        incarnation: u32,
    },
    /// Terminal: the agent completed.
    Completed,
    /// Terminal: the agent failed.
    Failed {
        /// Why.
        reason: EndReason,
        /// The error text.
        error: String,
    },
    /// Terminal: the agent was aborted.
    Aborted {
        /// Why.
        reason: EndReason,
    },
    /// Terminal: the agent's actor was killed.
    Killed,
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
            EventKind::Queued { .. } => "queued",
            EventKind::Started { .. } => "started",
            EventKind::UsageReported { .. } => "usage_reported",
            EventKind::Steered => "steered",
            EventKind::Asked { .. } => "asked",
            EventKind::Resumed => "resumed",
            EventKind::ContextDropped => "context_dropped",
            EventKind::Restarted { .. } => "restarted",
            EventKind::Completed => "completed",
            EventKind::Failed { .. } => "failed",
            EventKind::Aborted { .. } => "aborted",
            EventKind::Killed => "killed",
        }
    }

    /// The terminal status this event announces, if any.
    pub fn terminal_status(&self) -> Option<AgentStatus> {
        match self {
            EventKind::Completed => Some(AgentStatus::Completed),
            EventKind::Failed { .. } => Some(AgentStatus::Failed),
            EventKind::Aborted { .. } => Some(AgentStatus::Aborted),
            EventKind::Killed => Some(AgentStatus::Killed),
            _ => None,
        }
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
    /// `queued` events.
    pub queued: u64,
    /// `started` events.
    pub started: u64,
    /// `usage_reported` events.
    pub usage_reported: u64,
    /// `steered` events.
    pub steered: u64,
    /// `asked` events.
    pub asked: u64,
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
}

impl EventTally {
    /// Counts one event of `kind`.
    pub fn count(&mut self, kind: &EventKind) {
        let slot = match kind {
            EventKind::Queued { .. } => &mut self.queued,
            EventKind::Started { .. } => &mut self.started,
            EventKind::UsageReported { .. } => &mut self.usage_reported,
            EventKind::Steered => &mut self.steered,
            EventKind::Asked { .. } => &mut self.asked,
            EventKind::Resumed => &mut self.resumed,
            EventKind::ContextDropped => &mut self.context_dropped,
            EventKind::Restarted { .. } => &mut self.restarted,
            EventKind::Completed => &mut self.completed,
            EventKind::Failed { .. } => &mut self.failed,
            EventKind::Aborted { .. } => &mut self.aborted,
            EventKind::Killed => &mut self.killed,
        };
        *slot += 1;
    }

    /// Events counted in all.
    pub fn total(&self) -> u64 {
        [
            self.queued,
            self.started,
            self.usage_reported,
            self.steered,
            self.asked,
            self.resumed,
            self.context_dropped,
            self.restarted,
            self.completed,
            self.failed,
            self.aborted,
            self.killed,
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }
}

impl fmt::Display for EventTally {
    /// `started=.. completed=.. failed=.. aborted=.. killed=.. restarted=.. queued=..
    /// usage_reported=.. steered=.. context_dropped=..`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "started={} completed={} failed={} aborted={} killed={} restarted={} queued={} \
             resumed={} usage_reported={} steered={} asked={} context_dropped={}",
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
            self.context_dropped
        )
    }
}
