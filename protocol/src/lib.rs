//! The wire data of `agent-tree`: ids, agent definitions, spawn requests, conversations,
//! usage, statuses, outcomes, lifecycle events and tree snapshots.
//!
//! Everything here is plain serde data with no runtime attached, so it can cross process and
//! machine boundaries (a JSON journal, a remote node, a tool written in another language).
//! Behaviour lives in `agent-tree-actors`.
//!
//! Decoding never panics: malformed or unknown JSON is a [`ProtocolError`].
//!
//! ```
//! use agent_tree_protocol::{Event, Wire};
//! assert!(Event::from_json("{\"seq\": 1}").is_err());
//! ```
#![forbid(unsafe_code)]

mod definition;
mod edge;
mod error;
mod event;
mod fold;
mod ids;
mod journal;
mod message;
mod outcome;
mod request;
#[doc(hidden)]
pub mod runtime;
mod sampling;
mod snapshot;
mod status;
mod usage;
mod words;

pub use definition::{
    AgentDefinition, DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_PERIOD_MS, RestartPolicy, SettlePolicy,
    Strategy, SubagentAllowance, ToolSet,
};
pub use edge::{
    Command, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_FRAME_BYTES, Down, EarlierChild, Frame,
    LeaseGrant, Part, TerminalReport, Up,
};
pub use error::ProtocolError;
pub use event::{Event, EventKind, EventTally};
pub use fold::{Fold, FoldError, apply, apply_owned};
pub use ids::{AgentId, RequestId, SessionId};
pub use journal::{
    JOURNAL_VERSION, JournalEntry, LineError, OpenQuestion, Replay, ReplayError,
    assemble_conversation, definition_hash, replay, replay_index,
};
pub use message::{
    FinishReason, Message, ModelErrorKind, RAW_ARGUMENTS_KEY, Role, ToolCall, ToolInput, ToolSpec,
};
pub use outcome::{EndReason, Outcome};
pub use request::{SpawnRequest, WaitPolicy};
pub use sampling::{Sampling, SamplingError, ToolChoice};
pub use snapshot::{AgentRecord, TreeSnapshot, UsageMismatch};
pub use status::{AgentStatus, StatusTransitionError};
pub use usage::Usage;
pub use words::{ExtensionSelector, Keyword, ListField, WordsError};

/// JSON encoding and decoding of protocol types, with errors that name the type.
pub trait Wire: serde::Serialize + serde::de::DeserializeOwned {
    /// The type's name in error messages.
    const WHAT: &'static str;

    /// Decodes one value from JSON text.
    ///
    /// # Errors
    ///
    /// [`ProtocolError::Json`] naming the type, for malformed JSON or a wrong shape.
    fn from_json(text: &str) -> Result<Self, ProtocolError> {
        serde_json::from_str(text).map_err(|source| ProtocolError::Json {
            what: Self::WHAT,
            source,
        })
    }

    /// Encodes the value as compact JSON.
    fn to_json(&self) -> String {
        // Protocol types hold only strings, numbers, maps with string keys and JSON values,
        // which serde_json always encodes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

macro_rules! wire {
    ($($ty:ty => $what:literal),* $(,)?) => {
        $(impl Wire for $ty { const WHAT: &'static str = $what; })*
    };
}

wire! {
    AgentDefinition => "agent definition",
    SpawnRequest => "spawn request",
    Usage => "usage",
    Outcome => "outcome",
    Event => "event",
    EventTally => "event tally",
    AgentRecord => "agent record",
    TreeSnapshot => "tree snapshot",
    Message => "message",
    ToolCall => "tool call",
    ToolSpec => "tool spec",
    AgentStatus => "agent status",
    AgentId => "agent id",
}
