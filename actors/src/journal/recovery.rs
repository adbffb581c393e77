//! A tree's journal opened: a file locked (one tree per journal) before a byte of it is
//! read, what a crash left of it mended (a torn header started afresh, a torn last line cut
//! off), read back as a stream and replayed (the index first, then the conversations the
//! tree keeps in memory), and the writer started on it. The registry is seeded from the
//! replay by `registry/recover.rs`; the builder calls both.

use agent_tree_protocol::{AgentId, Replay, SessionId};

use super::{
    FileJournal, Index, JournalConfig, JournalError, JournalLock, JournalStore, JournalTap,
    read_conversations, replay_file,
};
use crate::error::TreeError;

/// What [`open`] gives: the tree's session, the tap, and a replay to recover from.
pub(crate) type Opened = (SessionId, JournalTap, Option<Replay>);

/// Opens a tree's journal: the tree's session (the journal's, for an existing one; else
/// `session`; else a `new_session`), the tap the registry and the agents write to, and the
/// replay of an existing journal holding a tree, to recover from. A file (no `store` of the
/// application's own) is locked first.
///
/// # Errors
///
/// [`TreeError::JournalInUse`] for a file another tree holds; [`TreeError::Journal`] for a
/// journal that cannot be read, mended or written.
pub(crate) fn open(
    config: JournalConfig,
    store: Option<Box<dyn JournalStore>>,
    session: Option<SessionId>,
    new_session: fn() -> SessionId,
) -> Result<Opened, TreeError> {
    let (store, recovered, lock) = match store {
        Some(store) => (store, None, None),
        None => {
            let path = config.path();
            // Before a byte of it is read: a file another tree writes is not this tree's.
            let lock = JournalLock::acquire(path)?;
            let io = |what: &str, e: &std::io::Error| JournalError::io(path, what, e);
            // Read as a stream, never whole: the index first (records, requests, where
            // each conversation is), then the conversations this tree keeps in memory, one
            // agent's lines at a time.
            let file = match std::fs::File::open(path) {
                Ok(file) => Some(file),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io("cannot read", &e).into()),
            };
            let mut reader = file.map(|f| std::io::BufReader::with_capacity(1 << 16, f));
            if let Some(file) = reader.as_mut() {
                use std::io::{BufRead as _, Seek as _};
                let mut first = Vec::new();
                file.read_until(b'\n', &mut first)
                    .and_then(|_| file.rewind())
                    .map_err(|e| io("cannot read", &e))?;
                if first.is_empty() {
                    reader = None;
                } else if !first.ends_with(b"\n")
                    && agent_tree_protocol::runtime::torn_header(&first)
                {
                    // Not one whole line: a crash cut off the header itself. Nothing was
                    // journaled; start afresh.
                    tracing::warn!(path = %path.display(), "journal holds only a torn header; started afresh");
                    std::fs::File::create(path)
                        .map_err(|e| io("cannot truncate a torn header", &e))?;
                    reader = None;
                }
            }
            let replay = match reader {
                None => None,
                Some(mut reader) => {
                    let mut replay = replay_file(path, &mut reader, session.as_ref())?;
                    // The conversations a recovery holds in memory: the unfinished agents'
                    // (it resumes them), and the settled ones' only where they are kept in
                    // memory anyway; the others are read back on a resume.
                    let keep: Vec<AgentId> = if config.keeps_conversations() {
                        replay.records.iter().skip(1).map(|r| r.id).collect()
                    } else {
                        replay.unfinished().map(|r| r.id).collect()
                    };
                    read_conversations(path, &mut replay, &mut reader, keep)?;
                    if replay.torn.is_some() {
                        // Cut the torn tail off: what this tree appends must follow whole
                        // lines.
                        std::fs::OpenOptions::new()
                            .write(true)
                            .open(path)
                            .and_then(|f| {
                                f.set_len(replay.bytes as u64).and_then(|()| f.sync_all())
                            })
                            .map_err(|e| io("cannot cut off its torn last line", &e))?;
                    }
                    Some(replay)
                }
            };
            let store = FileJournal::open(path).map_err(|e| io("cannot open for appending", &e))?;
            (Box::new(store) as Box<dyn JournalStore>, replay, lock)
        }
    };
    // An existing journal's session is the tree's (a header-only one is taken over too).
    let session = recovered
        .as_ref()
        .and_then(|r| r.session.clone())
        .or(session)
        .unwrap_or_else(new_session);
    let recovered = recovered.filter(|r| r.last_seq > 0 || r.records.len() > 1);
    let index = recovered.as_ref().map(Index::of).unwrap_or_default();
    let tap = JournalTap::start(&config, store, &session, index, lock)?;
    Ok((session, tap, recovered))
}
