//! Journal-test helpers: a temporary directory removed when dropped, and the in-process
//! stand-in for a crash (the journal as a kill right now would leave it).

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_tree::Tree;

/// A fresh directory under the system's temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new directory whose name starts with `name`.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "agent-tree-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The path of `name` inside it.
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The journal as a crash right now would leave it: everything handed to the writer is
/// flushed, then the file at `from` is copied to `to`.
pub async fn crash_copy(tree: &Tree, from: &Path, to: &Path) {
    tree.flush_journal().await;
    std::fs::copy(from, to).unwrap();
}
