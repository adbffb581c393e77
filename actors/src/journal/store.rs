//! The storage a journal writes to: the [`JournalStore`] trait and the file,
//! [`FileJournal`] (compaction by writing beside and renaming; one line read by its span).

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, Write};
use std::path::{Path, PathBuf};

/// The storage a journal writes to: appends, syncs, and a compaction that replaces the whole
/// content at once. [`FileJournal`] is the file implementation; tests wrap it to be slow.
pub trait JournalStore: Send + 'static {
    /// Appends `bytes` (whole lines).
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes everything appended durable.
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn sync(&mut self) -> io::Result<()>;
    /// Replaces the whole content with `bytes`, atomically: after a crash either the old
    /// content or the new one is there, never a mix.
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn replace(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// The content's size in bytes.
    fn size(&self) -> u64;
    /// The whole content: what the default [`reader`](JournalStore::reader) and
    /// [`read_range`](JournalStore::read_range) read from (a store that implements both
    /// never needs to hold it).
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn read(&self) -> io::Result<Vec<u8>>;
    /// The content as a stream, for a compaction to replay it line by line and copy the
    /// lines it keeps, never holding it whole. The default reads the whole content into
    /// memory; [`FileJournal`] reads the file.
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn reader(&self) -> io::Result<Box<dyn JournalReader>> {
        Ok(Box::new(io::Cursor::new(self.read()?)))
    }
    /// Replaces the whole content with what `write` writes, atomically, as
    /// [`replace`](JournalStore::replace) does: a compaction writes its new content as it
    /// goes. The default gathers it in memory and calls `replace`; [`FileJournal`] writes
    /// it to the new file directly.
    ///
    /// # Errors
    ///
    /// The I/O error, or `write`'s.
    fn replace_with(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut bytes = Vec::new();
        write(&mut bytes)?;
        self.replace(&bytes)
    }
    /// `len` bytes from `offset`: one line, for reading one released output back. The
    /// default reads the whole content; [`FileJournal`] reads only the range.
    ///
    /// # Errors
    ///
    /// The I/O error, or `UnexpectedEof` when the range is past the end.
    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let all = self.read()?;
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(start, len)| Some(start..start.checked_add(len)?))
            .filter(|range| range.end <= all.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        Ok(all[range].to_vec())
    }
}

/// What a [`JournalStore`] is read through as a stream: buffered lines, and a seek to the
/// lines read back alone.
pub trait JournalReader: io::BufRead + io::Seek {}

impl<T: io::BufRead + io::Seek> JournalReader for T {}

/// A journal file, appended to; compaction writes a new file beside it, syncs it and renames
/// it over the old one.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    file: File,
    size: u64,
}

impl FileJournal {
    /// Opens (or creates) the file at `path` for appending.
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(FileJournal {
            path: path.to_owned(),
            file,
            size,
        })
    }
}

impl JournalStore for FileJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.replace_with(&mut |out| out.write_all(bytes))
    }

    fn replace_with(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".compacting");
        let tmp = PathBuf::from(tmp);
        let written = File::create(&tmp).and_then(|file| {
            let mut out = io::BufWriter::with_capacity(1 << 16, file);
            write(&mut out)?;
            let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            file.sync_all()
        });
        if let Err(error) = written {
            // The old file stays as it was; a half-written new one is no use to anyone.
            let _ = std::fs::remove_file(&tmp);
            return Err(error);
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename is durable once the directory is synced (where a directory can be
            // opened: not on every platform).
            if let Ok(dir) = File::open(dir) {
                let _ = dir.sync_all();
            }
        }
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.size = self.file.metadata()?.len();
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self) -> io::Result<Vec<u8>> {
        std::fs::read(&self.path)
    }

    fn reader(&self) -> io::Result<Box<dyn JournalReader>> {
        Ok(Box::new(io::BufReader::with_capacity(
            1 << 16,
            File::open(&self.path)?,
        )))
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut file = File::open(&self.path)?;
        file.seek(io::SeekFrom::Start(offset))?;
        let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
        file.read_exact(&mut bytes)?;
        Ok(bytes)
    }
}
