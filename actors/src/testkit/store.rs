//! A journal store in memory, with faults on command: for tests of what the tree does when
//! its disk is slow, full or unreadable, without a file.

use std::io;
use std::sync::Arc;

use agent_tree_protocol::Replay;
use parking_lot::{Condvar, Mutex};

use crate::JournalStore;

/// A [`JournalStore`] in memory, shared (clones are handles on one store, so a test keeps
/// one and gives the tree another) and failing on command: appends that fail (from now on,
/// past a size, or those carrying a marker), syncs that fail, appends held back until the
/// test releases them (a slow disk), one-line reads that fail (a bad sector under an old
/// line). It counts its appends, syncs and compactions, and shows what it holds.
///
/// Its state sits under one lock, a leaf: a held append waits on a condition variable, which
/// releases it. A held append blocks the journal's writer thread, never the runtime.
///
/// ```
/// use agent_tree_actors::testkit::{MemoryJournal, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, JournalConfig, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest};
///
/// # tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(async {
/// let store = MemoryJournal::new();
/// let model = ScriptedModel::new()
///     .script("w", Script::new([Turn::answer("ok")]))
///     .script("x", Script::new([Turn::answer("ok")]));
/// let catalog = Catalog::new([AgentDefinition::new("w", ""), AgentDefinition::new("x", "")]).unwrap();
/// let tree = Tree::builder()
///     .catalog(catalog)
///     .model(model)
///     .journal_store(JournalConfig::new("in-memory"), store.clone())
///     .build()
///     .await
///     .unwrap();
/// tree.run(SpawnRequest::new("w", "go")).await.unwrap();
/// tree.flush_journal().await;
/// let written = store.replay().records.len();
/// assert!(written > 0 && store.syncs() > 0);
///
/// // The disk fills up: the journal stops, the tree goes on.
/// store.fail_writes();
/// let x = tree.run(SpawnRequest::new("x", "go")).await.unwrap();
/// assert_eq!(x.text.as_deref(), Some("ok"));
/// tree.flush_journal().await;
/// assert!(tree.journal_error().is_some());
/// assert_eq!(store.replay().records.len(), written);
/// tree.shutdown().await;
/// # });
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryJournal(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled on every change of `held` or `waiting`.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    bytes: Vec<u8>,
    appends: usize,
    syncs: usize,
    compactions: usize,
    /// Every append waits while this holds.
    held: bool,
    /// Appends carrying one of these wait while `held_markers_open` is false.
    held_markers: Vec<Vec<u8>>,
    held_markers_open: bool,
    /// An append is waiting on a hold.
    waiting: bool,
    /// The next sync sets `held`.
    hold_after_sync: bool,
    fail_writes: bool,
    fail_writes_past: Option<u64>,
    fail_markers: Vec<Vec<u8>>,
    fail_syncs: bool,
    fail_line_reads: bool,
}

impl State {
    fn held_for(&self, bytes: &[u8]) -> bool {
        self.held
            || (!self.held_markers_open && self.held_markers.iter().any(|m| contains(bytes, m)))
    }

    fn write_error(&self, bytes: &[u8]) -> Option<io::Error> {
        let past = self
            .fail_writes_past
            .is_some_and(|limit| (self.bytes.len() + bytes.len()) as u64 > limit);
        let marked = self.fail_markers.iter().any(|m| contains(bytes, m));
        (self.fail_writes || past || marked).then(|| io::Error::other("disk full"))
    }
}

fn contains(bytes: &[u8], marker: &[u8]) -> bool {
    !marker.is_empty() && bytes.windows(marker.len()).any(|w| w == marker)
}

impl MemoryJournal {
    /// An empty store, with no fault.
    pub fn new() -> Self {
        MemoryJournal::default()
    }

    /// A store that already holds `bytes` (a journal written before, to recover from).
    pub fn with_content(bytes: impl Into<Vec<u8>>) -> Self {
        let store = MemoryJournal::default();
        store.0.state.lock().bytes = bytes.into();
        store
    }

    /// Changes its state under the lock (a leaf: `change` only sets fields).
    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.0.state.lock());
    }

    /// Everything it holds.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.state.lock().bytes.clone()
    }

    /// How many lines it holds.
    pub fn lines(&self) -> usize {
        self.0
            .state
            .lock()
            .bytes
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }

    /// What it holds, replayed (see [`agent_tree_protocol::replay`]).
    ///
    /// # Panics
    ///
    /// When what it holds is no journal.
    pub fn replay(&self) -> Replay {
        agent_tree_protocol::replay(&self.bytes(), None)
            .unwrap_or_else(|e| panic!("the memory journal does not replay: {e}"))
    }

    /// How many appends it took (failed ones not counted).
    pub fn appends(&self) -> usize {
        self.0.state.lock().appends
    }

    /// How many syncs it was asked for.
    pub fn syncs(&self) -> usize {
        self.0.state.lock().syncs
    }

    /// How many times its whole content was replaced (compactions).
    pub fn compactions(&self) -> usize {
        self.0.state.lock().compactions
    }

    /// From now on every append fails, as on a full disk; what it holds stays readable.
    pub fn fail_writes(&self) {
        self.update(|state| state.fail_writes = true);
    }

    /// Every append that would take the content past `bytes` fails (a disk of that size).
    pub fn fail_writes_past(&self, bytes: u64) {
        self.update(|state| state.fail_writes_past = Some(bytes));
    }

    /// Every append carrying `marker` fails (a disk that fills up while that line is on its
    /// way); the others go through.
    pub fn fail_writes_containing(&self, marker: impl AsRef<[u8]>) {
        self.update(|state| state.fail_markers.push(marker.as_ref().to_vec()));
    }

    /// From now on every sync fails.
    pub fn fail_syncs(&self) {
        self.update(|state| state.fail_syncs = true);
    }

    /// From now on every one-line read ([`JournalStore::read_range`], the read-back of a
    /// released output or a settled conversation) fails; whole reads still work.
    pub fn fail_line_reads(&self) {
        self.update(|state| state.fail_line_reads = true);
    }

    /// Holds every append until [`release`](MemoryJournal::release): a slow disk.
    pub fn hold(&self) {
        self.update(|state| state.held = true);
    }

    /// Holds the appends carrying `marker` until [`release`](MemoryJournal::release); the
    /// others go through.
    pub fn hold_writes_containing(&self, marker: impl AsRef<[u8]>) {
        self.update(|state| state.held_markers.push(marker.as_ref().to_vec()));
    }

    /// Holds the appends after the next sync (the next batch's), until
    /// [`release`](MemoryJournal::release).
    pub fn hold_after_next_sync(&self) {
        self.update(|state| state.hold_after_sync = true);
    }

    /// Lets every held append go on (and no append is held any more, until the next hold).
    pub fn release(&self) {
        let mut state = self.0.state.lock();
        state.held = false;
        state.held_markers_open = true;
        drop(state);
        self.0.changed.notify_all();
    }

    /// Blocks the calling thread until an append waits on a hold (from a test on a runtime,
    /// call it through `tokio::task::spawn_blocking`).
    pub fn wait_until_held(&self) {
        let mut state = self.0.state.lock();
        while !state.waiting {
            self.0.changed.wait(&mut state);
        }
    }
}

impl JournalStore for MemoryJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.0.state.lock();
        while state.held_for(bytes) {
            state.waiting = true;
            self.0.changed.notify_all();
            self.0.changed.wait(&mut state);
        }
        state.waiting = false;
        if let Some(error) = state.write_error(bytes) {
            return Err(error);
        }
        state.appends += 1;
        state.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut state = self.0.state.lock();
        state.syncs += 1;
        if std::mem::take(&mut state.hold_after_sync) {
            state.held = true;
        }
        if state.fail_syncs {
            return Err(io::Error::other("sync failed: input/output error"));
        }
        Ok(())
    }

    fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.0.state.lock();
        state.bytes = bytes.to_vec();
        state.compactions += 1;
        Ok(())
    }

    fn size(&self) -> u64 {
        self.0.state.lock().bytes.len() as u64
    }

    fn read(&self) -> io::Result<Vec<u8>> {
        Ok(self.bytes())
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let state = self.0.state.lock();
        if state.fail_line_reads {
            return Err(io::Error::other("input/output error"));
        }
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(usize::try_from(len).map_err(io::Error::other)?)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        state
            .bytes
            .get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_past_the_size_fail_and_what_it_holds_stays() {
        let mut store = MemoryJournal::new();
        store.fail_writes_past(8);
        store.append(b"line 1\n").unwrap();
        assert!(store.append(b"line 2\n").is_err());
        assert_eq!((store.bytes(), store.appends()), (b"line 1\n".to_vec(), 1));
        assert_eq!(store.read_range(0, 4).unwrap(), b"line");
    }

    #[test]
    fn faults_on_command_fail_what_they_name_only() {
        let mut store = MemoryJournal::with_content(b"old\n".to_vec());
        store.fail_writes_containing("bad");
        assert!(store.append(b"bad line\n").is_err());
        store.append(b"good line\n").unwrap();
        store.fail_syncs();
        assert!(store.sync().is_err());
        store.fail_line_reads();
        assert!(store.read_range(0, 3).is_err());
        assert_eq!(store.read().unwrap(), b"old\ngood line\n");
        store.replace(b"new\n").unwrap();
        assert_eq!(
            (store.lines(), store.compactions(), store.syncs()),
            (1, 1, 1)
        );
    }

    #[test]
    fn a_held_append_waits_for_the_release() {
        let store = MemoryJournal::new();
        store.hold_writes_containing("slow");
        let mut writer = store.clone();
        let thread = std::thread::spawn(move || writer.append(b"slow line\n"));
        store.wait_until_held();
        assert!(store.bytes().is_empty());
        store.release();
        thread.join().unwrap().unwrap();
        assert_eq!(store.bytes(), b"slow line\n");
    }
}
