//! The journal's line format: one checksummed JSON entry per line, and the pure replay of a
//! journal's bytes into records, outcomes, definitions, spawn requests and conversations.
//!
//! A journal is replayed as a stream ([`replay_index`]): the fold keeps each agent's
//! conversation only as the places of its lines, and reads one back alone when it is
//! needed ([`Replay::read_conversation`]), so a replay's memory grows with what the tree
//! keeps, not with the file.
//!
//! A line is `<CRC-32 of the JSON, 8 lower-case hex digits> <JSON>\n`, the JSON one
//! [`JournalEntry`] tagged by `entry` (`header`, `event`, `definition`, `spawn`,
//! `conversation`, `steer`, `question`, `answer`, `decided`, `checkpoint`, `output`,
//! `mirror`).
//!
//! # Invariants
//!
//! * A journal starts with one header line naming its format version and its tree's session.
//! * Event lines carry dense sequence numbers from 1 (or from a checkpoint's): a missing or
//!   repeated line is detected, not folded over.
//! * Only the last line may be incomplete: a process killed mid-write leaves at most a partial
//!   last line (no newline, or a tail of zero bytes), which replay drops and reports. Any
//!   other line that fails its checksum or does not parse is an error naming its line.
//! * Replay never panics, whatever the bytes.
//! * A steer line stands for a steer receipted and not yet in a journaled conversation
//!   until the next conversation line of its agent: a conversation is journaled at a turn
//!   boundary, after the steers before it entered it ([`Replay::steers`]).
//! * A question line likewise stands for a question its agent waits on, and an answer line
//!   after it for the answer given to it, until the next conversation line of its agent or
//!   the start of its next run ([`Replay::questions`]).
//!
//! # Layout
//!
//! | part | what it is |
//! | --- | --- |
//! | `entry.rs` | [`JournalEntry`], what each line holds, and [`definition_hash`] |
//! | `line.rs` | the line format: checksum, encoding and decoding, the nesting bound, a torn header told from another file |
//! | `replay.rs` | the replay: [`replay_index`] folds a stream line by line into a [`Replay`], [`replay`] of bytes in memory |
//! | `read_back.rs` | one agent's conversation read back alone, by the places of its lines ([`Replay::read_conversation`]) |

mod entry;
mod line;
mod read_back;
mod replay;

pub use entry::{JOURNAL_VERSION, JournalEntry, definition_hash};
pub use line::{LineError, torn_header};
pub use read_back::{LineSpan, assemble_conversation};
pub use replay::{OpenQuestion, Replay, ReplayError, replay, replay_index};
