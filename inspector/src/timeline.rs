//! Rewind: a journal's events, and the tree as it was at any of them: the fold of the
//! events up to it, from the journal's start or its last compaction point.
//!
//! The journal is read once, as a stream; the tree at an event is folded from the nearest
//! kept mark before it (one every [`MARK_EVERY`] events), so scrubbing costs at most that
//! many events' fold.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use agent_tree_protocol::{AgentRecord, Event, EventTally, JournalEntry, apply};

/// How many events apart the kept marks are.
pub const MARK_EVERY: usize = 2_000;

/// A journal that cannot be rewound: unreadable, or a line that is not a journal's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewindError {
    /// The file cannot be read.
    #[error("{path}: cannot be read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line (not the last, which a crash may have torn) that is no journal line, or an
    /// event the fold refuses.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// A journal's events, and the tree at any of them.
#[derive(Debug)]
pub struct Timeline {
    session: String,
    /// The records the events start from: the root alone, or a compaction point's.
    base: (Vec<AgentRecord>, EventTally),
    events: Vec<Event>,
    /// The records after `MARK_EVERY * (i + 1)` events, for each `i`.
    marks: Vec<(Vec<AgentRecord>, EventTally)>,
}

impl Timeline {
    /// Reads the journal at `path` (of a live tree, or one that crashed: a torn last line
    /// is left out).
    ///
    /// # Errors
    ///
    /// [`RewindError`] naming the file, and the line for a bad one.
    pub fn read(path: &Path) -> Result<Timeline, RewindError> {
        let file = std::fs::File::open(path).map_err(|source| RewindError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut reader = std::io::BufReader::new(file);
        let mut timeline = Timeline {
            session: String::new(),
            base: (vec![AgentRecord::root()], EventTally::default()),
            events: Vec::new(),
            marks: Vec::new(),
        };
        let bad = |line: usize, message: String| RewindError::Line {
            path: path.to_owned(),
            line,
            message,
        };
        let read = |reader: &mut std::io::BufReader<std::fs::File>, line: &mut Vec<u8>| {
            line.clear();
            reader
                .read_until(b'\n', line)
                .map_err(|source| RewindError::Read {
                    path: path.to_owned(),
                    source,
                })
        };
        // Lines as bytes: a crash may tear the last one anywhere, inside a character too.
        let (mut line, mut next) = (Vec::new(), Vec::new());
        read(&mut reader, &mut line)?;
        let mut number = 0;
        while !line.is_empty() {
            number += 1;
            read(&mut reader, &mut next)?;
            let last = next.is_empty();
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let entry = match JournalEntry::from_line_bytes(text) {
                Ok(entry) => entry,
                Err(_) if last => break,
                Err(error) => return Err(bad(number, error.to_string())),
            };
            match entry {
                JournalEntry::Header { session, .. } => timeline.session = session.to_string(),
                JournalEntry::Checkpoint { records, tally, .. } => {
                    timeline.base = (records, tally);
                    timeline.events.clear();
                    timeline.marks.clear();
                }
                JournalEntry::Event { event } => {
                    timeline.events.push(event);
                    if timeline.events.len().is_multiple_of(MARK_EVERY) {
                        let n = timeline.events.len();
                        let mark = timeline.fold(n).map_err(|m| bad(number, m))?;
                        timeline.marks.push(mark);
                    }
                }
                _ => {}
            }
            std::mem::swap(&mut line, &mut next);
        }
        Ok(timeline)
    }

    /// The journal's session.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// How many events it holds (after its last compaction point).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether it holds no event.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events from `from` (at most `max` of them).
    pub fn events(&self, from: usize, max: usize) -> &[Event] {
        let from = from.min(self.events.len());
        &self.events[from..(from + max).min(self.events.len())]
    }

    /// The tree after the first `n` events (all of them past the end): its records and
    /// the events counted by kind.
    ///
    /// # Errors
    ///
    /// The fold's refusal of an event, as text (a journal's events always fold).
    pub fn at(&self, n: usize) -> Result<(Vec<AgentRecord>, EventTally), String> {
        self.fold(n.min(self.events.len()))
    }

    /// Folds the first `n` events from the nearest mark before them.
    fn fold(&self, n: usize) -> Result<(Vec<AgentRecord>, EventTally), String> {
        let kept = (n / MARK_EVERY).min(self.marks.len());
        let (mut records, mut tally) = match kept {
            0 => self.base.clone(),
            k => self.marks[k - 1].clone(),
        };
        for event in &self.events[kept * MARK_EVERY..n] {
            apply(&mut records, event).map_err(|e| format!("event {}: {e}", event.seq))?;
            tally.count(&event.kind);
        }
        Ok((records, tally))
    }
}
