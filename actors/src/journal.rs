//! The journal: an append-only file of the tree's event stream, plus what the fold needs
//! that events do not carry (definitions by hash, spawn requests, conversations), one
//! checksummed JSON line per entry (the format is `agent_tree_protocol::JournalEntry`).
//!
//! # Writing
//!
//! The registry hands each event to the journal in the same transaction that folds it into
//! the records, and admissions hand over their definition and request just before their
//! admission event; agents hand over their conversation at each turn boundary, and each
//! steer they receipt before the receipt is sent (a steer queued for an agent's start, by
//! the registry as it queues it), each `ask_owner` question with the turn that asked it,
//! and each answer before the agent reads it. All of it goes
//! onto an unbounded channel (sending never blocks, so no actor and no registry transaction
//! ever waits on the disk) to one writer thread, which encodes, writes and syncs by the
//! [`Durability`] policy, and rotates the file by compacting it when it grows past
//! [`JournalConfig::rotate_at`] (reading the file back as a stream and replaying it, then
//! copying the lines it keeps: the writer keeps no state of the tree in memory).
//!
//! **Backpressure, not loss.** The channel counts what it holds. When the writer falls
//! more than [`JournalConfig::max_queue`] entries behind (a disk slower than the tree), new
//! work waits: a model turn does not start, and [`Tree::spawn`](crate::Tree::spawn) does not
//! admit, until the writer has caught up below the bound. Entries already on their way are
//! never dropped; the queue can exceed its bound by what turns already in flight emit.
//!
//! # One tree per journal
//!
//! A tree that opens a journal file holds an advisory lock on a file beside it,
//! `<journal>.lock` ([`JournalLock`], `std`'s [`File::try_lock`](std::fs::File::try_lock)), in which it writes its
//! process id, and holds it while its writer may write: until [`Tree::shutdown`](crate::Tree::shutdown)
//! returns or the tree is dropped. A second tree on the file is refused with
//! [`JournalInUseError`], naming the file and that process, before it reads or writes a
//! byte of it. The lock is the operating system's, so it dies with its process: a process
//! killed while it held it leaves the lock file behind, and that is no obstacle (the file
//! is never removed: removing it would let two processes lock two different files). The
//! lock is beside the journal, not on it, because a compaction renames a new file over the
//! journal. A store of the application's own ([`TreeBuilder::journal_store`](crate::TreeBuilder::journal_store))
//! is not locked.
//!
//! # Reading back
//!
//! What memory does not keep (settled conversations by default, read outputs past the
//! retention policy) is read back on demand. The writer indexes, as it writes, where each
//! settled outcome's line is and which lines make up each agent's latest conversation (a
//! recovery starts it from the replay, a compaction rebuilds it), so a read-back reads
//! those lines only, through [`JournalStore::read_range`], after everything queued is
//! written. It publishes the last event it has appended; the registry releases an output
//! only once that covers it.
//!
//! # What each policy can lose
//!
//! | policy | process killed (SIGKILL, OOM, panic) | machine crash or power loss |
//! | --- | --- | --- |
//! | [`Durability::EveryEntry`] | the entries queued, not yet written | the same: each entry is synced before the next is written |
//! | [`Durability::Group`] | the entries queued, not yet written | also what was written since the last sync: at most `max_entries` entries or `max_delay` of them |
//! | [`Durability::None`] | the entries queued, not yet written | whatever the OS had not flushed |
//!
//! In every case a crash leaves at most a partial last line, which recovery drops (and
//! reports); nothing before it is lost or changed. And under every policy nothing the
//! application had seen when it asked for a [`Tree::flush_journal`](crate::Tree::flush_journal)
//! that returned is lost: the registry hands each event to the journal before any
//! subscriber or waiter sees it (the registry's invariant 8), and the writer takes commands
//! in order. With [`Durability::EveryEntry`] an outcome is synced before
//! [`AgentHandle::outcome`](crate::AgentHandle::outcome), [`Tree::wait`](crate::Tree::wait)
//! or [`Tree::run`](crate::Tree::run) returns it.
//!
//! # Layout
//!
//! | part | what it is |
//! | --- | --- |
//! | `config.rs` | [`JournalConfig`] and [`Durability`]: the file, the sync policy, the backlog bound, rotation, what stays in memory |
//! | `error.rs` | [`JournalError`] and [`JournalInUseError`] |
//! | `store.rs` | the storage: the [`JournalStore`] trait and [`FileJournal`] |
//! | `lock.rs` | the file's lock, `<journal>.lock`: one tree per journal |
//! | `tap.rs` | the tree's side: what the registry and the agents hand over, backpressure, syncs waited for, read-back requests |
//! | `writer.rs` | the writer thread: encode, write, sync by policy, rotate; what it is told and the backlog it shares with the tap |
//! | `index.rs` | where each settled outcome and each agent's latest conversation is in the store |
//! | `compaction.rs` | the compacted content of a journal, copied from its replay and its old lines |
//! | `read.rs` | a journal file read back as a stream and replayed ([`read_journal`]) |
//! | `recovery.rs` | a tree's journal opened: the file locked, what a crash left mended, replayed, the writer started |

mod compaction;
mod config;
mod error;
mod index;
mod lock;
mod read;
mod recovery;
mod store;
mod tap;
mod writer;

pub use config::{Durability, JournalConfig};
pub use error::{JournalError, JournalInUseError};
use index::Index;
use lock::JournalLock;
pub use read::read_journal;
use read::{read_conversations, replay_file};
pub(crate) use recovery::open;
pub use store::{FileJournal, JournalReader, JournalStore};
pub(crate) use tap::{JournalTap, JournaledDefinitions};
