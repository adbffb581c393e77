//! The journal's errors: a journal that cannot be read or written, and one another tree
//! holds.

use std::io;
use std::path::{Path, PathBuf};

/// A journal file another tree holds: a second tree on it is refused
/// ([`TreeError::JournalInUse`](crate::TreeError::JournalInUse)), before anything of it is
/// read or written. The holder is the process id the holding tree wrote into the lock file
/// (its own process's, for another tree in this process).
///
/// ```
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// use agent_tree_actors::testkit::ScriptedModel;
/// use agent_tree_actors::{JournalConfig, Tree, TreeError};
/// # let path = std::env::temp_dir().join(format!("agent-tree-doc-in-use-{}", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let open = || Tree::builder().model(ScriptedModel::new()).journal(JournalConfig::new(&path)).build();
/// let first = open().await?;
/// match open().await {
///     Err(TreeError::JournalInUse(in_use)) => {
///         assert_eq!(in_use.path, path);
///         assert_eq!(in_use.holder, Some(std::process::id()));
///     }
///     other => panic!("a second tree opened a journal in use: {other:?}"),
/// }
/// // Released when the tree shuts down (or is dropped).
/// first.shutdown().await;
/// let again = open().await?;
/// # again.shutdown().await;
/// # let _ = std::fs::remove_file(&path);
/// # let _ = std::fs::remove_file(path.with_extension("lock"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "journal {} is in use by {} (it holds the lock {}): one tree per journal",
    path.display(),
    holder_text(*holder),
    lock_file.display()
)]
#[non_exhaustive]
pub struct JournalInUseError {
    /// The journal.
    pub path: PathBuf,
    /// The lock file beside it (`<journal>.lock`).
    pub lock_file: PathBuf,
    /// The process holding it, as its lock file says (`None` when it does not say yet).
    pub holder: Option<u32>,
}

fn holder_text(holder: Option<u32>) -> String {
    match holder {
        Some(pid) if pid == std::process::id() => format!("another tree of this process {pid}"),
        Some(pid) => format!("process {pid}"),
        None => "another process".to_owned(),
    }
}

/// A journal that cannot be read or written: the file, the line (0 when none), and why.
#[derive(Debug, thiserror::Error)]
#[error("journal {}{}: {what}", path.display(), line.map_or_else(String::new, |l| format!(":{l}")))]
pub struct JournalError {
    /// The file.
    pub path: PathBuf,
    /// The line, for a line that does not decode or fold.
    pub line: Option<usize>,
    /// What is wrong.
    pub what: String,
}

impl JournalError {
    pub(crate) fn io(path: &Path, what: &str, error: &io::Error) -> Self {
        JournalError {
            path: path.to_owned(),
            line: None,
            what: format!("{what}: {error}"),
        }
    }
}
