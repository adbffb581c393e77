//! Agent directories: the agent files of one directory or several, read into a [`Catalog`].
//!
//! [`Catalog::load_dir`] reads one directory and [`Catalog::load_dirs`] several, a later one
//! overriding an earlier one by name; both load every valid file and report the others in a
//! [`LoadedCatalog`]. [`Catalog::load_dir_strict`] and [`Catalog::load_dirs_strict`] fail
//! instead when any file has a problem. This module lists each directory's agent files, reads
//! each one safely (see below) as UTF-8 text, skips markdown files that have no frontmatter,
//! and hands the text to [`parse_agent_file`], which documents the format; it gathers the
//! definitions, the problems and the skipped files, then builds the catalog with
//! [`Catalog::new`].
//!
//! It never parses a file's text or reads a field (that is the `frontmatter` module's and the
//! field table's), and never judges a definition itself: the catalog's one definition check
//! does, in [`parse_agent_file`] and again in [`Catalog::new`].
//!
//! # Invariants
//!
//! * A directory is read deterministically: its `*.md` entries and its subdirectories'
//!   (read recursively, as Claude Code reads `.claude/agents`), hidden entries excluded, the
//!   entries of each directory sorted by name and a subdirectory's files read where the
//!   subdirectory sorts. Links to directories are followed, but each directory is read once
//!   (by its canonical path) and no deeper than [`MAX_AGENT_DIR_DEPTH`] levels, so a link back
//!   into the tree cannot loop; a directory not read for either reason is listed in
//!   [`LoadedCatalog::skipped`].
//! * Files are untrusted. A file is refused, naming it, in bounded time and memory, when it is
//!   not a regular file ([`CatalogError::NotAFile`]: a FIFO, socket or device, checked with
//!   `fs::metadata` before it is opened, so a FIFO never blocks the loader; a symbolic link is
//!   followed to what it points at, so a link to a regular file loads and a link to
//!   `/dev/zero` is refused), when it is larger than [`MAX_AGENT_FILE_BYTES`]
//!   ([`CatalogError::TooLarge`], checked before opening and again while reading, which never
//!   reads more than the limit and one byte), when it cannot be read
//!   ([`CatalogError::ReadFile`]) or is not UTF-8 ([`CatalogError::Utf8`]), and when its
//!   frontmatter is too big once expanded (see [`parse_agent_file`]).
//! * A markdown file that does not start with a `---` line (a `README.md`, an empty file) is
//!   no agent file: it is skipped, listed in [`LoadedCatalog::skipped`] and logged at debug
//!   level, never a problem, in the strict forms too.
//! * Every problem is reported: every problem of every file in every directory, flat (never a
//!   [`CatalogError::Many`]), in directory order, then reading order, then the order of the
//!   fields in the file, and each is logged as a `tracing` warning. One bad file never hides
//!   another, and never keeps the valid files out of the catalog.
//! * Two files of one directory defining the same name, in one subdirectory or in two, are a
//!   problem naming both files (the first in reading order is loaded): a collection's
//!   category folders are one namespace, as in Claude Code, whose types are named by their
//!   `name` and never by their folder. Across the directories given to
//!   [`Catalog::load_dirs`], a later directory overrides an earlier one by name. A file with a
//!   problem defines nothing, so it overrides nothing.
//! * What a file says that is loaded but read differently from its letter is a [`FileNote`]
//!   (in [`LoadedCatalog::notes`], each logged as a `tracing` warning), never a problem: a
//!   re-quoted value, pi's words agent-tree reads its own way, and two loaded types whose
//!   names differ only in case.
//! * A loaded catalog is built by [`Catalog::new`], so it holds the same checks as one built in
//!   code.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use agent_tree_protocol::AgentDefinition;

#[cfg(doc)]
use super::frontmatter::parse_agent_file;
use super::frontmatter::{has_frontmatter, parse_agent_file_with_notes};
use super::notes::{FileNote, NoteKind};
use super::{Catalog, CatalogError, combine};

/// The deepest subdirectory the directory loaders read, in levels below the agent directory
/// given (a collection's category folders are level 1). A deeper one is skipped and listed
/// ([`SkipReason::TooDeep`]).
///
/// ```
/// assert_eq!(agent_tree_actors::MAX_AGENT_DIR_DEPTH, 8);
/// ```
pub const MAX_AGENT_DIR_DEPTH: usize = 8;

/// The largest agent file the directory loaders read, in bytes (256 KiB). A larger file is
/// refused ([`CatalogError::TooLarge`]) without reading more than this and one byte.
///
/// ```
/// assert_eq!(agent_tree_actors::MAX_AGENT_FILE_BYTES, 256 * 1024);
/// ```
pub const MAX_AGENT_FILE_BYTES: u64 = 256 * 1024;

/// What a directory loader found: the catalog of every valid agent file, every problem of the
/// others, the notes on what it loaded, and the markdown files it skipped because they are no
/// agent files.
///
/// Returned by [`Catalog::load_dir`] and [`Catalog::load_dirs`]. The catalog is usable
/// whatever the problems; [`LoadedCatalog::into_strict`] turns any problem into an error, as
/// [`Catalog::load_dir_strict`] does. Notes are not problems.
///
/// ```
/// use agent_tree_actors::{Catalog, CatalogError};
///
/// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-loaded-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("writer.md"), "---\ndescription: Writes.\n---\nYou write.\n")?;
/// std::fs::write(dir.join("broken.md"), "---\nmax_turns: ten\n---\nYou break.\n")?;
/// std::fs::write(dir.join("README.md"), "# Our agents\n")?;
/// std::fs::write(dir.join("critic.md"), "---\ndescription: Use when: asked\n---\nYou judge.\n")?;
///
/// let loaded = Catalog::load_dir(&dir);
/// assert_eq!(loaded.catalog.len(), 2);
/// assert!(matches!(&loaded.problems[..], [CatalogError::Field { field, .. }] if field == "max_turns"));
/// assert_eq!(loaded.catalog.resolve("critic")?.description, "Use when: asked");
/// assert!(matches!(&loaded.notes[..], [note] if note.field == "description"));
/// assert!(loaded.skipped[0].file.ends_with("README.md"));
/// assert!(loaded.into_strict().is_err());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a loaded catalog's problems are for someone to see"]
pub struct LoadedCatalog {
    /// Every valid definition found.
    pub catalog: Catalog,
    /// Every problem of every file that could not be loaded (and of a directory that could
    /// not be read), flat, in directory, reading and field order. Each names its file.
    pub problems: Vec<CatalogError>,
    /// What was read differently from the letter of a loaded file, in directory, reading and
    /// field order, then the names that differ only in case
    /// ([`NoteKind::CaseTwin`](crate::NoteKind::CaseTwin)). Each names its file and field.
    pub notes: Vec<FileNote>,
    /// The markdown files skipped as no agent files, and the subdirectories not read (see
    /// [`SkipReason`]), in the same order.
    pub skipped: Vec<Skipped>,
}

impl LoadedCatalog {
    /// Whether every agent file loaded (skipped files and notes aside). It says nothing of the tools
    /// the files name, which only the application's registered tools can judge: ask
    /// [`Catalog::tool_problems`] for those once the tools are known (a tree also logs them
    /// when it is built).
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-clean-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// std::fs::write(dir.join("README.md"), "Not an agent.")?;
    /// assert!(agent_tree_actors::Catalog::load_dir(&dir).is_clean());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The catalog if there was no problem, else every problem: one as itself, several as one
    /// [`CatalogError::Many`]. Skipped files and notes are not problems (the notes were
    /// logged as warnings; read [`LoadedCatalog::notes`] before this to act on them).
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-strict-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// std::fs::write(dir.join("bad.md"), "---\nisolated: maybe\n---\n")?;
    /// let err = agent_tree_actors::Catalog::load_dir(&dir).into_strict().unwrap_err();
    /// assert!(err.to_string().ends_with("bad.md: field `isolated`: expected true or false, found \"maybe\""));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Every problem in [`LoadedCatalog::problems`].
    pub fn into_strict(self) -> Result<Catalog, CatalogError> {
        match combine(self.problems) {
            Some(error) => Err(error),
            None => Ok(self.catalog),
        }
    }
}

/// A markdown file a directory loader skipped because it is no agent file, or a subdirectory
/// it did not read.
///
/// ```
/// use agent_tree_actors::SkipReason;
/// assert_eq!(
///     SkipReason::NoFrontmatter.to_string(),
///     "no frontmatter: the first line is not `---`"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The file (or the subdirectory).
    pub file: PathBuf,
    /// Why it was skipped.
    pub reason: SkipReason,
}

/// Why a markdown file is no agent file, or a subdirectory was not read.
///
/// ```
/// use agent_tree_actors::SkipReason;
/// assert_ne!(SkipReason::NoFrontmatter.to_string(), "");
/// assert!(SkipReason::TooDeep.to_string().contains("8 levels"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// It does not start with a `---` line (a `README.md`, notes, an empty file).
    NoFrontmatter,
    /// A subdirectory already read under another path: a link back into the tree, or a
    /// second link to one directory.
    AlreadyRead,
    /// A subdirectory more than [`MAX_AGENT_DIR_DEPTH`] levels below the agent directory.
    TooDeep,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::NoFrontmatter => f.write_str("no frontmatter: the first line is not `---`"),
            SkipReason::AlreadyRead => {
                f.write_str("a directory already read (a link back into the agent directory)")
            }
            SkipReason::TooDeep => write!(
                f,
                "more than {MAX_AGENT_DIR_DEPTH} levels below the agent directory"
            ),
        }
    }
}

impl Catalog {
    /// Loads every valid agent file (`*.md`) in `dir` and its subdirectories, in reading
    /// order, and reports the others.
    ///
    /// Subdirectories are read recursively, as Claude Code reads them (a collection of
    /// category folders loads whole): each directory's entries in name order, a
    /// subdirectory's files where it sorts; links to directories are followed, each directory
    /// read once and at most [`MAX_AGENT_DIR_DEPTH`] levels down. The whole tree is one
    /// namespace: two files naming one type, in one folder or two, are a problem naming both
    /// (the first read is loaded). Other files and hidden entries are ignored; markdown files
    /// without frontmatter (a `README.md`) are skipped and listed. Each file is parsed as by
    /// [`parse_agent_file`], which describes the format: YAML frontmatter between `---` lines,
    /// then the prompt; what it reads differently from the file's letter, and names that
    /// differ only in case, are [`LoadedCatalog::notes`], each logged as a `tracing` warning.
    /// Files are read as untrusted input: anything but a regular file or a
    /// link to one (a FIFO, a socket, a device) is refused without being opened
    /// ([`CatalogError::NotAFile`]), a file over [`MAX_AGENT_FILE_BYTES`] without reading
    /// more than the limit ([`CatalogError::TooLarge`]), and a frontmatter expanding beyond
    /// its budget through YAML aliases before it is built (see [`parse_agent_file`]). Each
    /// problem is logged as a `tracing` warning.
    ///
    /// ```
    /// use agent_tree_actors::Catalog;
    ///
    /// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-load-dir-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// std::fs::write(dir.join("writer.md"), "---\ndescription: Writes.\n---\nYou write.\n")?;
    /// std::fs::write(dir.join("notes.txt"), "not an agent file")?;
    ///
    /// let loaded = Catalog::load_dir(&dir);
    /// assert!(loaded.is_clean());
    /// assert_eq!(loaded.catalog.len(), 1);
    /// assert_eq!(loaded.catalog.resolve("writer")?.prompt, "You write.");
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The problems ([`LoadedCatalog::problems`]): [`CatalogError::ReadDir`] for a directory
    /// that cannot be read (a missing `dir` included; the catalog is then empty),
    /// [`CatalogError::NotAFile`], [`CatalogError::TooLarge`], [`CatalogError::ReadFile`] and
    /// [`CatalogError::Utf8`] for a file that cannot be read as an agent file,
    /// [`CatalogError::Yaml`] and [`CatalogError::File`] for malformed frontmatter,
    /// [`CatalogError::Field`] for a malformed or refused field or a name two files define
    /// (the error names both files); [`CatalogError::ReadDir`] for a subdirectory that cannot
    /// be read.
    pub fn load_dir(dir: impl AsRef<Path>) -> LoadedCatalog {
        let mut loader = Loader::default();
        loader.add_dir(dir.as_ref(), IfMissing::Fail);
        loader.finish()
    }

    /// [`Catalog::load_dir`], failing on any problem instead of reporting it. Skipped files
    /// (no frontmatter) are not problems.
    ///
    /// ```
    /// use agent_tree_actors::{Catalog, CatalogError};
    /// let missing = std::env::temp_dir().join("agent-tree-doc-no-such-directory");
    /// assert!(matches!(Catalog::load_dir_strict(&missing), Err(CatalogError::ReadDir { .. })));
    /// ```
    ///
    /// # Errors
    ///
    /// Every problem [`Catalog::load_dir`] reports: one as itself, several as one
    /// [`CatalogError::Many`].
    pub fn load_dir_strict(dir: impl AsRef<Path>) -> Result<Catalog, CatalogError> {
        Catalog::load_dir(dir).into_strict()
    }

    /// Loads the valid agent files of several directories into one catalog, a later directory
    /// overriding an earlier one by name, and reports the others.
    ///
    /// Give the most general directory first: the user's `~/.claude/agents`, then the
    /// project's `.claude/agents` and `.pi/agents`, so a project's `writer.md` replaces the
    /// user's `writer`. An overridden definition is dropped; the catalog lists the remaining
    /// definitions in directory order, then file-name order. Each directory is read as by
    /// [`Catalog::load_dir`], except that a directory which does not exist is skipped (not a
    /// problem), since most projects have only some of the conventional directories.
    ///
    /// ```
    /// use agent_tree_actors::Catalog;
    ///
    /// # let root = std::env::temp_dir().join(format!("agent-tree-doc-load-dirs-{}", std::process::id()));
    /// let (user, project) = (root.join("user"), root.join("project"));
    /// # std::fs::create_dir_all(&user)?;
    /// # std::fs::create_dir_all(&project)?;
    /// std::fs::write(user.join("writer.md"), "---\nmodel: small\n---\nYou write.")?;
    /// std::fs::write(user.join("critic.md"), "---\n---\nYou criticise.")?;
    /// std::fs::write(project.join("writer.md"), "---\nmodel: large\n---\nYou write well.")?;
    ///
    /// let catalog = Catalog::load_dirs([&user, &project, &root.join("absent")]).into_strict()?;
    /// let names: Vec<_> = catalog.definitions().map(|d| d.name.as_str()).collect();
    /// assert_eq!(names, ["critic", "writer"]);
    /// assert_eq!(catalog.resolve("writer")?.model.as_deref(), Some("large"));
    /// # std::fs::remove_dir_all(&root)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The problems are those of [`Catalog::load_dir`], for every directory; a missing
    /// directory is not one. Two files of the *same* directory defining one name still are.
    pub fn load_dirs<I>(dirs: I) -> LoadedCatalog
    where
        I: IntoIterator,
        I::Item: AsRef<Path>,
    {
        let mut loader = Loader::default();
        for dir in dirs {
            loader.add_dir(dir.as_ref(), IfMissing::Skip);
        }
        loader.finish()
    }

    /// [`Catalog::load_dirs`], failing on any problem instead of reporting it.
    ///
    /// ```
    /// use agent_tree_actors::Catalog;
    /// let none: [&str; 0] = [];
    /// assert!(Catalog::load_dirs_strict(none)?.is_empty());
    /// # Ok::<(), agent_tree_actors::CatalogError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Every problem [`Catalog::load_dirs`] reports: one as itself, several as one
    /// [`CatalogError::Many`].
    pub fn load_dirs_strict<I>(dirs: I) -> Result<Catalog, CatalogError>
    where
        I: IntoIterator,
        I::Item: AsRef<Path>,
    {
        Catalog::load_dirs(dirs).into_strict()
    }
}

/// What [`Loader::add_dir`] does with a directory that does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IfMissing {
    /// Report it ([`Catalog::load_dir`]).
    Fail,
    /// Skip it ([`Catalog::load_dirs`]).
    Skip,
}

/// Definitions, problems and skipped files gathered from directories, in the order read.
#[derive(Debug, Default)]
struct Loader {
    /// Every definition loaded, with its file, in load order; `None` once a later directory
    /// overrode it (kept as a hole so the indices in `by_name` stay valid).
    loaded: Vec<Option<(PathBuf, AgentDefinition)>>,
    /// Name → index in `loaded` of the definition holding that name now.
    by_name: HashMap<String, usize>,
    /// Every problem found, flat, in the order found.
    problems: Vec<CatalogError>,
    /// Every note of a loaded file, in the order found.
    notes: Vec<FileNote>,
    /// Files skipped as no agent files, and subdirectories not read.
    skipped: Vec<Skipped>,
}

impl Loader {
    /// Reads the agent files of `dir`; a definition overrides one of the same name from an
    /// earlier directory.
    fn add_dir(&mut self, dir: &Path, if_missing: IfMissing) {
        let listing = match agent_files(dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == io::ErrorKind::NotFound && if_missing == IfMissing::Skip => {
                tracing::debug!(dir = %dir.display(), "agent directory does not exist, skipped");
                return;
            }
            Err(e) => {
                self.problem(CatalogError::ReadDir {
                    dir: dir.to_owned(),
                    source: e,
                });
                return;
            }
        };
        for problem in listing.problems {
            self.problem(problem);
        }
        self.skipped.extend(listing.skipped);
        // Names this directory (its subdirectories included) defined so far, with their
        // files: the same name twice in one directory is an error, while across directories
        // it is an override.
        let mut here: HashMap<String, PathBuf> = HashMap::new();
        for file in listing.files {
            let (definition, notes) = match read_agent_file(&file) {
                Ok(Entry::Agent(definition, notes)) => (*definition, notes),
                Ok(Entry::Skipped(reason)) => {
                    tracing::debug!(file = %file.display(), %reason, "markdown file skipped");
                    self.skipped.push(Skipped { file, reason });
                    continue;
                }
                Err(e) => {
                    self.problem(e);
                    continue;
                }
            };
            if let Some(first) = here.get(&definition.name) {
                self.problem(CatalogError::Field {
                    message: format!(
                        "agent type {:?} is already defined in {}",
                        definition.name,
                        first.display()
                    ),
                    file,
                    field: "name".into(),
                });
                continue;
            }
            for note in notes {
                self.note(note);
            }
            here.insert(definition.name.clone(), file.clone());
            if let Some(&earlier) = self.by_name.get(&definition.name) {
                if let Some((earlier_file, _)) = self.loaded.get_mut(earlier).and_then(Option::take)
                {
                    tracing::debug!(
                        name = %definition.name,
                        file = %file.display(),
                        overridden = %earlier_file.display(),
                        "agent definition overrides an earlier directory's"
                    );
                }
            }
            self.by_name
                .insert(definition.name.clone(), self.loaded.len());
            self.loaded.push(Some((file, definition)));
        }
    }

    /// Records and logs `note`.
    fn note(&mut self, note: FileNote) {
        tracing::warn!("agent file read with a note: {note}");
        self.notes.push(note);
    }

    /// Records and logs `error`, flattening a [`CatalogError::Many`] so problems never nest.
    fn problem(&mut self, error: CatalogError) {
        let errors = match error {
            CatalogError::Many(errors) => errors,
            other => vec![other],
        };
        for error in errors {
            tracing::warn!("agent file refused: {error}");
            self.problems.push(error);
        }
    }

    /// The catalog of the surviving definitions, with every problem, note and skipped file.
    fn finish(mut self) -> LoadedCatalog {
        let loaded: Vec<(PathBuf, AgentDefinition)> = std::mem::take(&mut self.loaded)
            .into_iter()
            .flatten()
            .collect();
        // Names that differ only in case are two types, and resolve only by their exact
        // spellings: legal, but likely a mistake (one file copied from two collections).
        let mut first_by_folded: HashMap<String, usize> = HashMap::new();
        let mut twins = Vec::new();
        for (i, (file, definition)) in loaded.iter().enumerate() {
            let folded = definition.name.to_ascii_lowercase();
            match first_by_folded.get(&folded) {
                Some(&first) => {
                    let (other_file, other) = &loaded[first];
                    twins.push(FileNote::new(
                        file,
                        "name",
                        NoteKind::CaseTwin {
                            name: definition.name.clone(),
                            other: other.name.clone(),
                            other_file: other_file.clone(),
                        },
                    ));
                }
                None => {
                    first_by_folded.insert(folded, i);
                }
            }
        }
        for note in twins {
            self.note(note);
        }
        let definitions = loaded.into_iter().map(|(_, d)| d);
        // Every definition passed the check when its file was parsed and names are unique
        // by construction, so this cannot fail; if it ever did, nothing is lost silently.
        let catalog = match Catalog::new(definitions) {
            Ok(catalog) => catalog,
            Err(error) => {
                let errors = match error {
                    CatalogError::Many(errors) => errors,
                    other => vec![other],
                };
                for error in errors {
                    tracing::warn!("agent definition refused: {error}");
                    self.problems.push(error);
                }
                Catalog::default()
            }
        };
        LoadedCatalog {
            catalog,
            problems: self.problems,
            notes: self.notes,
            skipped: self.skipped,
        }
    }
}

/// What [`agent_files`] found under an agent directory.
#[derive(Debug, Default)]
struct Listing {
    /// The agent files, in reading order.
    files: Vec<PathBuf>,
    /// Subdirectories not read again (a link back into the tree) or too deep.
    skipped: Vec<Skipped>,
    /// Subdirectories that could not be read.
    problems: Vec<CatalogError>,
}

/// The `*.md` files under `dir`, its subdirectories read recursively, hidden entries
/// excluded, in reading order: the entries of each directory sorted by name, a subdirectory's
/// files where the subdirectory sorts.
///
/// Anything that is not a directory counts as a file, so a dangling link or a FIFO named
/// `x.md` is listed and refused by [`read_agent_file`] rather than skipped silently. Links to
/// directories are followed, but a directory is read once (by its canonical path), so a link
/// back into the tree ends there, and no deeper than [`MAX_AGENT_DIR_DEPTH`] below `dir`.
///
/// # Errors
///
/// Only `dir` itself not being readable; a subdirectory that cannot be read is a problem of
/// the listing.
fn agent_files(dir: &Path) -> io::Result<Listing> {
    let mut listing = Listing::default();
    let entries = sorted_entries(dir)?;
    let mut visited = HashSet::new();
    // A directory whose canonical path cannot be found is still read; only loops need it.
    if let Ok(canonical) = fs::canonicalize(dir) {
        visited.insert(canonical);
    }
    list_entries(entries, 0, &mut visited, &mut listing);
    Ok(listing)
}

/// The non-hidden entries of `dir` (path, and whether it is a directory, links followed),
/// sorted by name.
fn sorted_entries(dir: &Path) -> io::Result<Vec<(PathBuf, bool)>> {
    let mut entries: Vec<(OsString, PathBuf, bool)> = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // `Path::is_dir` follows links and reads metadata only: it never opens the entry.
        let is_dir = path.is_dir();
        entries.push((name, path, is_dir));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries
        .into_iter()
        .map(|(_, path, is_dir)| (path, is_dir))
        .collect())
}

/// Adds the agent files among `entries` (of a directory `depth` levels below the agent
/// directory) to `listing`, reading subdirectories not yet `visited`.
fn list_entries(
    entries: Vec<(PathBuf, bool)>,
    depth: usize,
    visited: &mut HashSet<PathBuf>,
    listing: &mut Listing,
) {
    for (path, is_dir) in entries {
        if !is_dir {
            if path.extension().is_some_and(|ext| ext == "md") {
                listing.files.push(path);
            }
            continue;
        }
        let skip = |reason| {
            tracing::debug!(dir = %path.display(), %reason, "agent subdirectory skipped");
            Skipped {
                file: path.clone(),
                reason,
            }
        };
        if depth + 1 > MAX_AGENT_DIR_DEPTH {
            listing.skipped.push(skip(SkipReason::TooDeep));
            continue;
        }
        if let Ok(canonical) = fs::canonicalize(&path) {
            if !visited.insert(canonical) {
                listing.skipped.push(skip(SkipReason::AlreadyRead));
                continue;
            }
        }
        match sorted_entries(&path) {
            Ok(entries) => list_entries(entries, depth + 1, visited, listing),
            Err(source) => listing
                .problems
                .push(CatalogError::ReadDir { dir: path, source }),
        }
    }
}

/// What one markdown file of a directory turned out to be.
enum Entry {
    /// Boxed: a definition is a few hundred bytes, a skip none.
    Agent(Box<AgentDefinition>, Vec<FileNote>),
    Skipped(SkipReason),
}

/// Reads and parses one agent file, or says why it is skipped.
fn read_agent_file(path: &Path) -> Result<Entry, CatalogError> {
    let text = read_text(path)?;
    if !has_frontmatter(&text) {
        return Ok(Entry::Skipped(SkipReason::NoFrontmatter));
    }
    parse_agent_file_with_notes(path, &text).map(|(d, notes)| Entry::Agent(Box::new(d), notes))
}

/// The text of the regular file at `path` (a link followed), at most
/// [`MAX_AGENT_FILE_BYTES`] long, read without ever opening anything but a regular file.
fn read_text(path: &Path) -> Result<String, CatalogError> {
    let read_error = |source| CatalogError::ReadFile {
        file: path.to_owned(),
        source,
    };
    let too_large = || CatalogError::TooLarge {
        file: path.to_owned(),
        limit: MAX_AGENT_FILE_BYTES,
    };
    // Metadata first, following links: a FIFO is never opened (opening one blocks until a
    // writer comes), a device never read.
    let metadata = fs::metadata(path).map_err(read_error)?;
    if let Some(kind) = not_a_file(&metadata) {
        return Err(CatalogError::NotAFile {
            file: path.to_owned(),
            kind,
        });
    }
    if metadata.len() > MAX_AGENT_FILE_BYTES {
        return Err(too_large());
    }
    let file = File::open(path).map_err(read_error)?;
    // What was opened is checked again (the entry may have been replaced meanwhile), and
    // the read is bounded whatever the metadata said.
    if let Some(kind) = file.metadata().ok().as_ref().and_then(not_a_file) {
        return Err(CatalogError::NotAFile {
            file: path.to_owned(),
            kind,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_AGENT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_AGENT_FILE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| CatalogError::Utf8 {
        file: path.to_owned(),
        source: e.utf8_error(),
    })
}

/// What `metadata` describes when it is not a regular file, as an error names it.
fn not_a_file(metadata: &fs::Metadata) -> Option<&'static str> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("FIFO");
        }
        if kind.is_socket() {
            return Some("socket");
        }
        if kind.is_char_device() {
            return Some("character device");
        }
        if kind.is_block_device() {
            return Some("block device");
        }
    }
    Some("unknown kind")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_decides_what_is_an_agent_file() {
        for agent in ["---\n---\n", "\u{feff}---\r\nname: x\n---\n", "---  \n"] {
            assert!(has_frontmatter(agent), "{agent:?}");
        }
        for not in ["", "# Agents\n", " ---\n", "----\n", "text\n---\n"] {
            assert!(!has_frontmatter(not), "{not:?}");
        }
    }

    #[test]
    fn a_kind_is_named_for_everything_but_a_regular_file() {
        let dir = std::env::temp_dir();
        assert_eq!(not_a_file(&fs::metadata(&dir).unwrap()), Some("directory"));
        #[cfg(target_os = "linux")]
        assert_eq!(
            not_a_file(&fs::metadata("/dev/null").unwrap()),
            Some("character device")
        );
    }
}
