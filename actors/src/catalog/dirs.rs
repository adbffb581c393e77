//! Agent directories: the agent files of one directory or several, read into a [`Catalog`].
//!
//! [`Catalog::load_dir`] reads one directory and [`Catalog::load_dirs`] several, a later one
//! overriding an earlier one by name. This module lists each directory's agent files, reads
//! each file's bytes as UTF-8 text, and hands the text to [`parse_agent_file`], which documents
//! the format; it gathers the definitions and every problem, then builds the catalog with
//! [`Catalog::new`].
//!
//! It never parses a file's text or reads a field (that is the `frontmatter` module's and the
//! field table's), and never judges a definition itself: the catalog's one definition check
//! does, in [`parse_agent_file`] and again in [`Catalog::new`].
//!
//! # Invariants
//!
//! * A directory is read deterministically: only the `*.md` files directly in it (no
//!   subdirectories, no hidden files), sorted by file name.
//! * A directory that cannot be read is [`CatalogError::ReadDir`] (a missing one too, except
//!   in [`Catalog::load_dirs`], which skips it). A file that cannot be read is
//!   [`CatalogError::ReadFile`], one that is not UTF-8 [`CatalogError::Utf8`], each keeping the
//!   underlying error as its source.
//! * Every problem is reported: the errors of every file in every directory; one bad file
//!   never hides another. One problem is returned as itself, several as one flat
//!   [`CatalogError::Many`] (never nested), in directory order, then file-name order, then the
//!   order of the fields in the file.
//! * Two files of one directory defining the same name are an error naming both files; across
//!   the directories given to [`Catalog::load_dirs`], a later directory overrides an earlier
//!   one by name.
//! * A loaded catalog is built by [`Catalog::new`], so it holds the same checks as one built in
//!   code.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use agent_tree_protocol::AgentDefinition;

use super::frontmatter::parse_agent_file;
use super::{Catalog, CatalogError, combine};

impl Catalog {
    /// Loads every agent file (`*.md`) directly in `dir`, in file-name order.
    ///
    /// Other files, hidden files and subdirectories are ignored. Each file is parsed as by
    /// [`parse_agent_file`], which describes the format: YAML frontmatter between `---` lines,
    /// then the prompt.
    ///
    /// ```
    /// use agent_tree_actors::Catalog;
    ///
    /// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-load-dir-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// std::fs::write(dir.join("writer.md"), "---\ndescription: Writes.\n---\nYou write.\n")?;
    /// std::fs::write(dir.join("notes.txt"), "not an agent file")?;
    ///
    /// let catalog = Catalog::load_dir(&dir)?;
    /// assert_eq!(catalog.len(), 1);
    /// assert_eq!(catalog.resolve("writer")?.prompt, "You write.");
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Every problem of every file: [`CatalogError::ReadDir`] for a directory that cannot be
    /// read (a missing `dir` included), [`CatalogError::ReadFile`], [`CatalogError::Utf8`],
    /// [`CatalogError::Yaml`] and [`CatalogError::File`] for a file that cannot be read or has
    /// malformed frontmatter, [`CatalogError::Field`] for a malformed or refused field or a
    /// name two files define (the error names both files). Several problems come as one
    /// [`CatalogError::Many`].
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Catalog, CatalogError> {
        let mut loader = Loader::default();
        loader.add_dir(dir.as_ref(), IfMissing::Fail);
        loader.finish()
    }

    /// Loads the agent files of several directories into one catalog; a later directory
    /// overrides an earlier one by name.
    ///
    /// Give the most general directory first: the user's `~/.claude/agents`, then the
    /// project's `.claude/agents` and `.pi/agents`, so a project's `writer.md` replaces the
    /// user's `writer`. An overridden definition is dropped; the catalog lists the remaining
    /// definitions in directory order, then file-name order. Each directory is read as by
    /// [`Catalog::load_dir`], except that a directory which does not exist is skipped, since
    /// most projects have only some of the conventional directories.
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
    /// let catalog = Catalog::load_dirs([&user, &project, &root.join("absent")])?;
    /// let names: Vec<_> = catalog.definitions().map(|d| d.name.as_str()).collect();
    /// assert_eq!(names, ["critic", "writer"]);
    /// assert_eq!(catalog.resolve("writer")?.model.as_deref(), Some("large"));
    /// # std::fs::remove_dir_all(&root)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Catalog::load_dir`], for every directory; a missing directory is not an error.
    /// Two files of the *same* directory defining one name are still an error.
    pub fn load_dirs<I>(dirs: I) -> Result<Catalog, CatalogError>
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
}

/// What [`Loader::add_dir`] does with a directory that does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IfMissing {
    /// Report it ([`Catalog::load_dir`]).
    Fail,
    /// Skip it ([`Catalog::load_dirs`]).
    Skip,
}

/// Definitions and problems gathered from directories, in the order they were read.
#[derive(Debug, Default)]
struct Loader {
    /// Every definition loaded, with its file, in load order; `None` once a later directory
    /// overrode it (kept as a hole so the indices in `by_name` stay valid).
    loaded: Vec<Option<(PathBuf, AgentDefinition)>>,
    /// Name → index in `loaded` of the definition holding that name now.
    by_name: HashMap<String, usize>,
    /// Every problem found, flat, in the order found.
    errors: Vec<CatalogError>,
}

impl Loader {
    /// Reads the agent files of `dir`; a definition overrides one of the same name from an
    /// earlier directory.
    fn add_dir(&mut self, dir: &Path, if_missing: IfMissing) {
        let files = match agent_files(dir) {
            Ok(files) => files,
            Err(e) if e.kind() == io::ErrorKind::NotFound && if_missing == IfMissing::Skip => {
                tracing::debug!(dir = %dir.display(), "agent directory does not exist, skipped");
                return;
            }
            Err(e) => {
                self.errors.push(CatalogError::ReadDir {
                    dir: dir.to_owned(),
                    source: e,
                });
                return;
            }
        };
        // Names this directory defined so far, with their files: the same name twice in one
        // directory is an error, while across directories it is an override.
        let mut here: HashMap<String, PathBuf> = HashMap::new();
        for file in files {
            let definition = match read_agent_file(&file) {
                Ok(definition) => definition,
                Err(e) => {
                    self.push_error(e);
                    continue;
                }
            };
            if let Some(first) = here.get(&definition.name) {
                self.errors.push(CatalogError::Field {
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

    /// Records `error`, flattening a [`CatalogError::Many`] so errors never nest.
    fn push_error(&mut self, error: CatalogError) {
        match error {
            CatalogError::Many(errors) => self.errors.extend(errors),
            other => self.errors.push(other),
        }
    }

    /// The catalog of the surviving definitions, or every problem found.
    fn finish(self) -> Result<Catalog, CatalogError> {
        match combine(self.errors) {
            Some(error) => Err(error),
            None => Catalog::new(self.loaded.into_iter().flatten().map(|(_, d)| d)),
        }
    }
}

/// The `*.md` files directly in `dir`, hidden files excluded, sorted by file name.
///
/// Anything that is not a directory counts as a file, so a dangling link named `x.md` is
/// listed and its read error reported rather than skipped silently.
fn agent_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<(OsString, PathBuf)> = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        let hidden = name.as_encoded_bytes().starts_with(b".");
        if !hidden && path.extension().is_some_and(|ext| ext == "md") && !path.is_dir() {
            files.push((name, path));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

/// Reads and parses one agent file.
fn read_agent_file(path: &Path) -> Result<AgentDefinition, CatalogError> {
    let bytes = fs::read(path).map_err(|e| CatalogError::ReadFile {
        file: path.to_owned(),
        source: e,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| CatalogError::Utf8 {
        file: path.to_owned(),
        source: e.utf8_error(),
    })?;
    parse_agent_file(path, &text)
}
