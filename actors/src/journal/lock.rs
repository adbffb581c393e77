//! The journal file's lock: one tree per journal, through `<journal>.lock` beside it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{JournalError, JournalInUseError};

/// The advisory lock a tree holds on its journal file while its writer may write (see
/// "One tree per journal" in the journal's module docs): released when dropped, or by the OS when its process
/// ends, however it ends.
#[derive(Debug)]
pub(crate) struct JournalLock {
    /// Locked (`File::try_lock`); closing it unlocks.
    _file: File,
}

impl JournalLock {
    /// Locks the journal at `journal`, through `<journal>.lock`, and writes this process's
    /// id into it.
    ///
    /// # Errors
    ///
    /// [`JournalInUseError`] when another tree holds it; a [`JournalError`] when the lock
    /// file cannot be opened or locked. A file system that has no locks is used unlocked,
    /// with a warning.
    pub(crate) fn acquire(journal: &Path) -> Result<Option<Self>, crate::TreeError> {
        use std::io::{Read as _, Seek as _};
        let lock_file = lock_path(journal);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_file)
            .map_err(|e| JournalError::io(journal, "cannot open its lock file", &e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                // Unreadable (a platform whose locks bar reads) says no holder.
                let _ = file.read_to_string(&mut text);
                let holder = text
                    .split_whitespace()
                    .find_map(|word| word.parse::<u32>().ok());
                return Err(JournalInUseError {
                    path: journal.to_owned(),
                    lock_file,
                    holder,
                }
                .into());
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                tracing::warn!(
                    path = %journal.display(),
                    "the file system has no file locks: the journal is opened unlocked"
                );
                return Ok(None);
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(JournalError::io(journal, "cannot lock", &e).into());
            }
        }
        // Ours: say who holds it, for the error another tree gets.
        file.set_len(0)
            .and_then(|()| file.seek(io::SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "pid {}", std::process::id()))
            .map_err(|e| JournalError::io(journal, "cannot write its lock file", &e))?;
        Ok(Some(JournalLock { _file: file }))
    }
}

/// The lock file of the journal at `journal`: `<journal>.lock`, beside it.
fn lock_path(journal: &Path) -> PathBuf {
    let mut name = journal.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}
