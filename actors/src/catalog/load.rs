//! Agent files: markdown with YAML frontmatter, as in `.pi/agents/*.md` and
//! `.claude/agents/*.md`, read into [`AgentDefinition`]s and [`Catalog`]s.
//!
//! [`parse_agent_file`] reads one file's text (pure, no file system); [`Catalog::load_dir`] and
//! [`Catalog::load_dirs`] read directories of them. The format (fields, defaults, the words
//! `all`/`none`/`true`/`false`) is documented on [`parse_agent_file`], which is public, as this
//! module is not.
//!
//! Every field has its snake_case name; the multi-word fields also accept the kebab-case and
//! camelCase spellings Claude Code and Pi write: `disallowedTools`/`disallowed-tools`,
//! `allowedSubagents`/`allowed-subagents`, `maxTurns`/`max-turns`,
//! `inheritContext`/`inherit-context`, `runInBackground`/`run-in-background`,
//! `maxRestarts`/`max-restarts` and `restartPeriodMs`/`restart-period-ms`. Keys are
//! case-sensitive; a field given in two spellings is an error. Other keys (`color`,
//! `permissionMode`, ...) are ignored with a `tracing` warning naming the file and the key.
//!
//! # Invariants
//!
//! * Parsing never panics, whatever the input: every problem is a [`CatalogError`] naming the
//!   file. [`CatalogError::Field`] names the field as spelled in the file, and says what was
//!   expected and what was found. A file that cannot be read is [`CatalogError::ReadFile`],
//!   one that is not UTF-8 [`CatalogError::Utf8`], one whose frontmatter is not valid YAML
//!   [`CatalogError::Yaml`] (the parser's error gives the line and column in the file), each
//!   keeping the underlying error as its source; a frontmatter missing, unterminated or not a
//!   mapping is [`CatalogError::File`]. A frontmatter leaving more than 1000 `[` or `{` open is
//!   refused before parsing, so no file makes the parser crawl.
//! * Reading and judging are apart. The loader reads each value (its type, trimming, and the
//!   words rule of `agent_tree_protocol::Written` for the list fields); the values are then
//!   judged by the catalog's one definition check, the same that [`Catalog::new`] runs, whose
//!   refusals are reported as field errors of the file in the same order as the rest.
//! * Every problem is reported: all the field errors of a file, and the errors of every file in
//!   every directory; one bad file never hides another. One problem is returned as itself,
//!   several as one flat [`CatalogError::Many`] (never nested), in directory order, then
//!   file-name order, then the order of the fields in the file.
//! * A directory is read deterministically: only the `*.md` files directly in it (no
//!   subdirectories, no hidden files), sorted by file name.
//! * Names are trimmed and must not be blank. Two files of one directory defining the same name are an
//!   error naming both files; across the directories given to [`Catalog::load_dirs`], a later
//!   directory overrides an earlier one by name.
//! * A loaded catalog is built by [`Catalog::new`], so it holds the same checks as one built in
//!   code.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use agent_tree_protocol::{
    AgentDefinition, ListField, RestartPolicy, SettlePolicy, Strategy, WordsError, Written,
};
use serde_yaml_ng::{Mapping, Value};

use super::{Catalog, CatalogError, check, combine};

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

/// Parses the text of one agent file; `path` names the file in errors and gives the default
/// name (its stem).
///
/// Pure: it touches no file system. Unknown fields are ignored with a `tracing` warning.
///
/// # Format
///
/// A file starts with a `---` line. The YAML up to the next `---` line is the frontmatter, and
/// everything after that line, trimmed, is the system prompt:
///
/// ```text
/// ---
/// name: reviewer
/// description: Reviews a change for bugs.
/// tools: read, grep
/// allowed_subagents: [analyst]
/// max_turns: 12
/// ---
/// You review code. Report every bug with its file and line.
/// ```
///
/// | Field | Also spelled | Value | When absent |
/// |---|---|---|---|
/// | `name` | | a non-blank string, trimmed | the file stem |
/// | `description` | | a string, trimmed | empty |
/// | `tools` | | `all`, `*`, `none`, or tool names | `all` |
/// | `disallowed_tools` | `disallowedTools`, `disallowed-tools` | tool names | no tool |
/// | `allowed_subagents` | `allowedSubagents`, `allowed-subagents` | `all`, `*`, `true`, `none`, `false`, or type names | `none` |
/// | `isolated` | | `true` or `false` | `false` |
/// | `model` | | a string; blank or `inherit` means the tree's default | the tree's default |
/// | `max_turns` | `maxTurns`, `max-turns` | a positive integer | the depth-scaled default |
/// | `inherit_context` | `inheritContext`, `inherit-context` | `true` or `false` | `false` |
/// | `run_in_background` | `runInBackground`, `run-in-background` | `true` or `false` | `false` |
/// | `enabled` | | `true` or `false` | `true` |
/// | `restart` | | `permanent`, `transient` or `temporary` | `temporary` |
/// | `strategy` | | `one_for_one`, `one_for_all` or `rest_for_one` | `one_for_one` |
/// | `max_restarts` | `maxRestarts`, `max-restarts` | an integer ≥ 0 | 1 |
/// | `restart_period_ms` | `restartPeriodMs`, `restart-period-ms` | a positive integer | 5000 |
/// | `settle` | | `abort_children` or `drain` | `abort_children` |
///
/// Reading the table:
///
/// * `tools`, `disallowed_tools` and `allowed_subagents` are read by the words rule that JSON
///   definitions follow too (`agent_tree_protocol::Written`): names are written as a
///   comma-separated string (`read, grep`) or a YAML list (`[read, grep]`); items are trimmed
///   and blank items dropped. The keywords `all`, `*`, `none`, `true` and `false` ignore case,
///   are never names and must stand alone: `tools: [All]` is `all`, `tools: read, all` is an
///   error. An empty string or list means none (`tools: ""` is no tool at all).
///   `allowed_subagents` also takes `true` and `false` (YAML booleans or words); `tools` does
///   not.
/// * `disallowed_tools` takes tool names only: every keyword is refused, because a deny list
///   must name what it denies.
/// * The words of `restart`, `strategy` and `settle` ignore case and accept `-` for `_`
///   (`one-for-one`).
/// * A field with no value (`model:` or `model: ~`) is the same as the field left out.
/// * Values are never coerced: `max_turns: "10"` and `isolated: yes` (a string in YAML 1.2)
///   are errors.
/// * Keys are case-sensitive, and a field given in two spellings (`max_turns` and `maxTurns`)
///   is an error. Unknown keys (`color`, `permissionMode`, ...) are ignored with a `tracing`
///   warning naming the file and the key.
/// * YAML anchors and merge keys (`<<`) work and YAML tags are ignored (`!custom 3` is `3`); a
///   byte-order mark and CRLF line ends are accepted.
///
/// # Example
///
/// ```
/// use std::path::Path;
/// use agent_tree_actors::parse_agent_file;
/// use agent_tree_protocol::{SubagentAllowance, ToolSet};
///
/// let text = "\
/// ---
/// description: Plans the work.
/// tools: read, grep
/// allowedSubagents: [writer]
/// maxTurns: 8
/// color: blue
/// ---
/// You plan.
/// ";
/// let planner = parse_agent_file(Path::new(".claude/agents/planner.md"), text)?;
/// assert_eq!(planner.name, "planner");
/// assert_eq!(planner.tools, ToolSet::only(["read", "grep"]));
/// assert_eq!(planner.allowed_subagents, SubagentAllowance::only(["writer"]));
/// assert_eq!(planner.max_turns, Some(8));
/// assert_eq!(planner.prompt, "You plan.");
///
/// let err = parse_agent_file(Path::new("bad.md"), "---\nmax_turns: ten\n---\n").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "bad.md: field `max_turns`: expected a positive integer, found \"ten\""
/// );
/// # Ok::<(), agent_tree_actors::CatalogError>(())
/// ```
///
/// # Errors
///
/// [`CatalogError::File`] when the frontmatter is missing, unterminated or not a mapping,
/// [`CatalogError::Yaml`] when it is not valid YAML; [`CatalogError::Field`] for a malformed
/// field or one the definition check refuses (as [`Catalog::new`] would), every one of them
/// (several come as one [`CatalogError::Many`]).
pub fn parse_agent_file(path: &Path, text: &str) -> Result<AgentDefinition, CatalogError> {
    let parsed = parse(path, text)?;
    for field in &parsed.ignored {
        tracing::warn!(
            file = %path.display(),
            field = %field,
            "unknown field in agent file ignored"
        );
    }
    Ok(parsed.definition)
}

// ---- Directories ----------------------------------------------------------------------------

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

// ---- One file -------------------------------------------------------------------------------

/// A parsed file: its definition, and the frontmatter keys it ignored (for the warnings).
#[derive(Debug)]
struct Parsed {
    definition: AgentDefinition,
    ignored: Vec<String>,
}

/// [`parse_agent_file`] without the logging, so tests can see what was ignored.
fn parse(path: &Path, text: &str) -> Result<Parsed, CatalogError> {
    let file_error = |message| CatalogError::File {
        file: path.to_owned(),
        message,
    };
    let (yaml, body) = split_frontmatter(text).map_err(file_error)?;
    let fields = frontmatter_fields(path, yaml)?;

    let mut definition = AgentDefinition {
        prompt: body.trim().to_owned(),
        ..AgentDefinition::default()
    };
    // Each error with the position of its key in the frontmatter, so the definition check's
    // refusals, found after reading, are reported in file order with the rest.
    let mut errors: Vec<(usize, CatalogError)> = Vec::new();
    let mut ignored = Vec::new();
    // Field → the spelling it was first given in and its position, to refuse `max_turns` and
    // `maxTurns` both and to name the field as the file does.
    let mut seen: HashMap<Field, (&str, usize)> = HashMap::new();
    // Fields whose value could not be read: they kept their default, which the definition
    // check must not be asked to judge (a blank default name would be reported twice).
    let mut unread: Vec<Field> = Vec::new();
    let mut name_given = false;
    for (position, (key, value)) in fields.iter().enumerate() {
        let Some(key) = key.as_str() else {
            ignored.push(describe(key));
            continue;
        };
        let Some(field) = Field::from_key(key) else {
            ignored.push(key.to_owned());
            continue;
        };
        if let Some((first, _)) = seen.get(&field) {
            errors.push((
                position,
                field_error(path, key, format!("given twice, also as `{first}`")),
            ));
            continue;
        }
        seen.insert(field, (key, position));
        let value = untag(value);
        if value.is_null() {
            continue;
        }
        name_given |= field == Field::Name;
        if let Err(message) = apply(&mut definition, field, value) {
            unread.push(field);
            errors.push((position, field_error(path, key, message)));
        }
    }
    if !name_given {
        let stem = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().trim().to_owned())
            .unwrap_or_default();
        if stem.is_empty() {
            unread.push(Field::Name);
            errors.push((
                usize::MAX,
                field_error(
                    path,
                    "name",
                    "expected a non-blank name, found none (and the file name gives none)".into(),
                ),
            ));
        }
        definition.name = stem;
    }
    for refusal in check(&definition) {
        let field = Field::from_key(refusal.field);
        if field.is_some_and(|f| unread.contains(&f)) {
            continue;
        }
        let (key, position) = field
            .and_then(|f| seen.get(&f).copied())
            .unwrap_or((refusal.field, usize::MAX));
        errors.push((position, field_error(path, key, refusal.message)));
    }
    // Stable: errors of one position keep the order they were found in.
    errors.sort_by_key(|(position, _)| *position);
    match combine(errors.into_iter().map(|(_, e)| e).collect()) {
        Some(error) => Err(error),
        None => Ok(Parsed {
            definition,
            ignored,
        }),
    }
}

fn field_error(path: &Path, field: &str, message: String) -> CatalogError {
    CatalogError::Field {
        file: path.to_owned(),
        field: field.to_owned(),
        message,
    }
}

/// Splits a file into its frontmatter (between the first line `---` and the next `---` line)
/// and its body.
fn split_frontmatter(text: &str) -> Result<(&str, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_fence = |line: &str| line.trim_end() == "---";
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        None => return Err("missing frontmatter: the file is empty".into()),
        Some(first) if !is_fence(first) => {
            return Err("missing frontmatter: the first line must be `---`".into());
        }
        Some(_) => {}
    }
    let start = text.find('\n').map_or(text.len(), |i| i + 1);
    let mut end = start;
    for line in lines {
        if is_fence(line) {
            return Ok((&text[start..end], &text[end + line.len()..]));
        }
        end += line.len();
    }
    Err("unterminated frontmatter: no closing `---` line".into())
}

/// Parses the frontmatter of `path` into its fields; an empty frontmatter has none.
fn frontmatter_fields(path: &Path, yaml: &str) -> Result<Mapping, CatalogError> {
    let file_error = |message| CatalogError::File {
        file: path.to_owned(),
        message,
    };
    let yaml_error = |e: serde_yaml_ng::Error| CatalogError::Yaml {
        file: path.to_owned(),
        source: Box::new(e),
    };
    if opens_too_deep(yaml) {
        return Err(file_error(format!(
            "frontmatter opens more than {MAX_OPEN_BRACKETS} `[` or `{{` without closing them"
        )));
    }
    // The newline stands for the opening `---` line, so the line numbers in the parser's
    // errors are the file's.
    let mut value: Value = serde_yaml_ng::from_str(&format!("\n{yaml}")).map_err(yaml_error)?;
    value.apply_merge().map_err(yaml_error)?;
    while let Value::Tagged(tagged) = value {
        value = tagged.value;
    }
    match value {
        Value::Mapping(fields) => Ok(fields),
        Value::Null => Ok(Mapping::new()),
        other => Err(file_error(format!(
            "frontmatter must be a mapping of `field: value` lines, found {}",
            describe(&other)
        ))),
    }
}

/// Most `[` and `{` a frontmatter may have open at once.
///
/// YAML nesting deeper than 128 levels is refused by the parser anyway, but libyaml's scanner
/// takes time quadratic in the open depth before it gets there (a minute for 100 000 `[` in a
/// debug build), so such a file is refused before parsing. Brackets in strings count too,
/// which can only matter to a file leaving a thousand of them open.
const MAX_OPEN_BRACKETS: usize = 1_000;

/// Whether `yaml` ever has more than [`MAX_OPEN_BRACKETS`] flow brackets open.
fn opens_too_deep(yaml: &str) -> bool {
    let mut open = 0usize;
    for byte in yaml.bytes() {
        match byte {
            b'[' | b'{' => {
                open += 1;
                if open > MAX_OPEN_BRACKETS {
                    return true;
                }
            }
            b']' | b'}' => open = open.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// `value` without its YAML tags (`!custom 3` is read as `3`), as `serde_yaml_ng`'s own
/// accessors read it.
fn untag(value: &Value) -> &Value {
    let mut value = value;
    while let Value::Tagged(tagged) = value {
        value = &tagged.value;
    }
    value
}

/// The fields of the format; see the module documentation for their spellings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Field {
    Name,
    Description,
    Tools,
    DisallowedTools,
    AllowedSubagents,
    Isolated,
    Model,
    MaxTurns,
    InheritContext,
    RunInBackground,
    Enabled,
    Restart,
    Strategy,
    MaxRestarts,
    RestartPeriodMs,
    Settle,
}

impl Field {
    /// The field a key names: its snake_case name, or the kebab-case or camelCase spelling of
    /// a multi-word field. Keys are case-sensitive.
    fn from_key(key: &str) -> Option<Field> {
        Some(match key {
            "name" => Field::Name,
            "description" => Field::Description,
            "tools" => Field::Tools,
            "disallowed_tools" | "disallowedTools" | "disallowed-tools" => Field::DisallowedTools,
            "allowed_subagents" | "allowedSubagents" | "allowed-subagents" => {
                Field::AllowedSubagents
            }
            "isolated" => Field::Isolated,
            "model" => Field::Model,
            "max_turns" | "maxTurns" | "max-turns" => Field::MaxTurns,
            "inherit_context" | "inheritContext" | "inherit-context" => Field::InheritContext,
            "run_in_background" | "runInBackground" | "run-in-background" => Field::RunInBackground,
            "enabled" => Field::Enabled,
            "restart" => Field::Restart,
            "strategy" => Field::Strategy,
            "max_restarts" | "maxRestarts" | "max-restarts" => Field::MaxRestarts,
            "restart_period_ms" | "restartPeriodMs" | "restart-period-ms" => Field::RestartPeriodMs,
            "settle" => Field::Settle,
            _ => return None,
        })
    }
}

/// Sets `field` of `definition` from a non-null `value`, or says why it cannot be read.
///
/// Only reading happens here: types, trimming and the words rule. Whether a value is in range
/// (`max_turns: 0`, a blank name) is for the definition check, which runs afterwards.
fn apply(definition: &mut AgentDefinition, field: Field, value: &Value) -> Result<(), String> {
    match field {
        Field::Name => {
            let name = string(value)?;
            // A blank name is kept as written, so the check's refusal shows it.
            let trimmed = name.trim();
            definition.name = if trimmed.is_empty() { name } else { trimmed }.to_owned();
        }
        Field::Description => definition.description = string(value)?.trim().to_owned(),
        Field::Tools => definition.tools = words(value, ListField::Tools, Written::tool_set)?,
        Field::DisallowedTools => {
            definition.disallowed_tools =
                words(value, ListField::DisallowedTools, Written::tool_names)?;
        }
        Field::AllowedSubagents => {
            definition.allowed_subagents = words(
                value,
                ListField::AllowedSubagents,
                Written::subagent_allowance,
            )?;
        }
        Field::Isolated => definition.isolated = boolean(value)?,
        Field::Model => {
            let model = string(value)?.trim();
            // Claude Code's `inherit` means "the main conversation's model": the default.
            let default = model.is_empty() || model.eq_ignore_ascii_case("inherit");
            definition.model = (!default).then(|| model.to_owned());
        }
        Field::MaxTurns => definition.max_turns = Some(integer(value, "a positive integer")?),
        Field::InheritContext => definition.inherit_context = boolean(value)?,
        Field::RunInBackground => definition.run_in_background = boolean(value)?,
        Field::Enabled => definition.enabled = boolean(value)?,
        Field::Restart => {
            definition.restart = word(
                value,
                &[
                    ("permanent", RestartPolicy::Permanent),
                    ("transient", RestartPolicy::Transient),
                    ("temporary", RestartPolicy::Temporary),
                ],
            )?;
        }
        Field::Strategy => {
            definition.strategy = word(
                value,
                &[
                    ("one_for_one", Strategy::OneForOne),
                    ("one_for_all", Strategy::OneForAll),
                    ("rest_for_one", Strategy::RestForOne),
                ],
            )?;
        }
        Field::MaxRestarts => {
            definition.max_restarts = integer(value, "a non-negative integer")?;
        }
        Field::RestartPeriodMs => {
            definition.restart_period_ms = integer(value, "a positive integer")?;
        }
        Field::Settle => {
            definition.settle = word(
                value,
                &[
                    ("abort_children", SettlePolicy::AbortChildren),
                    ("drain", SettlePolicy::Drain),
                ],
            )?;
        }
    }
    Ok(())
}

/// `expected {what}, found {value}`.
fn expected(what: &str, found: &Value) -> String {
    format!("expected {what}, found {}", describe(found))
}

/// A value as an error message shows it: scalars as written (strings quoted, long ones cut),
/// collections by kind.
fn describe(value: &Value) -> String {
    /// Longest string shown whole, in characters.
    const SHOWN: usize = 60;
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => match s.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{:?}...", &s[..cut]),
            None => format!("{s:?}"),
        },
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(tagged) => describe(&tagged.value),
    }
}

fn string(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| expected("a string", value))
}

fn boolean(value: &Value) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| expected("true or false", value))
}

/// A non-negative integer that fits `T`; `what` is what the field takes (the definition
/// check judges its range).
fn integer<T: TryFrom<u64>>(value: &Value, what: &str) -> Result<T, String> {
    match value.as_u64() {
        Some(n) => {
            T::try_from(n).map_err(|_| format!("expected {what}, found {n}, which is too large"))
        }
        None => Err(expected(what, value)),
    }
}

/// One of `choices`, ignoring case and taking `-` for `_`.
fn word<T: Copy>(value: &Value, choices: &[(&str, T)]) -> Result<T, String> {
    let normalized = value
        .as_str()
        .map(|s| s.trim().to_lowercase().replace('-', "_"));
    normalized
        .and_then(|w| choices.iter().find(|(name, _)| *name == w))
        .map(|&(_, choice)| choice)
        .ok_or_else(|| {
            let names: Vec<String> = choices
                .iter()
                .map(|(name, _)| format!("`{name}`"))
                .collect();
            expected(&format!("one of {}", names.join(", ")), value)
        })
}

/// A list field read by the words rule: the YAML value as [`Written`], then `read`.
fn words<T>(
    value: &Value,
    field: ListField,
    read: fn(Written) -> Result<T, WordsError>,
) -> Result<T, String> {
    written(value, field)
        .and_then(read)
        .map_err(|e| e.to_string())
}

/// A YAML value in the shapes the words rule reads, or the rule's refusal of its shape.
fn written(value: &Value, field: ListField) -> Result<Written, WordsError> {
    match value {
        Value::Bool(b) => Ok(Written::Bool(*b)),
        Value::String(s) => Ok(Written::Text(s.clone())),
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match untag(item) {
                Value::String(s) => Ok(s.clone()),
                other => Err(WordsError::Item {
                    field,
                    index: i + 1,
                    found: describe(other),
                }),
            })
            .collect::<Result<_, _>>()
            .map(Written::List),
        other => Err(WordsError::Shape {
            field,
            found: describe(other),
        }),
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{
        DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_PERIOD_MS, SubagentAllowance, ToolSet,
    };
    use proptest::prelude::{
        Just, any, prop, prop_assert, prop_assert_eq, prop_assume, prop_oneof,
    };
    use proptest::proptest;
    use proptest::strategy::Strategy as PropStrategy;

    use super::*;

    const FILE: &str = "agents/tester.md";

    fn parse_ok(text: &str) -> AgentDefinition {
        match parse_agent_file(Path::new(FILE), text) {
            Ok(definition) => definition,
            Err(e) => panic!("{text:?} should parse: {e}"),
        }
    }

    /// Parses `---\n{frontmatter}\n---\nbody`.
    fn with_fields(frontmatter: &str) -> Result<AgentDefinition, CatalogError> {
        parse_agent_file(Path::new(FILE), &format!("---\n{frontmatter}\n---\nbody\n"))
    }

    fn field_ok(frontmatter: &str) -> AgentDefinition {
        with_fields(frontmatter).unwrap_or_else(|e| panic!("{frontmatter:?} should parse: {e}"))
    }

    /// The (field, message) of a single field error.
    fn field_err(frontmatter: &str) -> (String, String) {
        match with_fields(frontmatter) {
            Err(CatalogError::Field {
                file,
                field,
                message,
            }) => {
                assert_eq!(file, Path::new(FILE));
                (field, message)
            }
            other => panic!("{frontmatter:?}: expected one field error, got {other:?}"),
        }
    }

    /// The message of a single error about the whole file, without the file's name.
    fn file_err(text: &str) -> String {
        match parse_agent_file(Path::new(FILE), text) {
            Err(CatalogError::File { file, message }) => {
                assert_eq!(file, Path::new(FILE));
                message
            }
            Err(e @ CatalogError::Yaml { .. }) => {
                let CatalogError::Yaml { file, source } = &e else {
                    unreachable!()
                };
                assert_eq!(file, Path::new(FILE));
                assert_eq!(
                    std::error::Error::source(&e).map(ToString::to_string),
                    Some(source.to_string()),
                    "the YAML error is kept as the source"
                );
                e.to_string()
                    .strip_prefix(&format!("{FILE}: "))
                    .unwrap()
                    .to_owned()
            }
            other => panic!("{text:?}: expected a file error, got {other:?}"),
        }
    }

    #[test]
    fn model_inherit_means_the_default() {
        for text in [
            "---\nmodel: inherit\n---\n",
            "---\nmodel: Inherit\n---\n",
            "---\nmodel: ''\n---\n",
        ] {
            assert_eq!(parse_ok(text).model, None, "{text:?}");
        }
        assert_eq!(
            parse_ok("---\nmodel: opus\n---\n").model.as_deref(),
            Some("opus")
        );
    }

    #[test]
    fn every_field_in_snake_case() {
        let text = "---
name: reviewer
description: Reviews changes.
tools: read, grep
disallowed_tools: [bash]
allowed_subagents: analyst, writer
isolated: true
model: large
max_turns: 12
inherit_context: true
run_in_background: true
enabled: false
restart: permanent
strategy: rest_for_one
max_restarts: 0
restart_period_ms: 250
settle: drain
---

You review.

Twice.
";
        let expected = AgentDefinition {
            name: "reviewer".into(),
            description: "Reviews changes.".into(),
            prompt: "You review.\n\nTwice.".into(),
            tools: ToolSet::only(["read", "grep"]),
            disallowed_tools: vec!["bash".into()],
            allowed_subagents: SubagentAllowance::only(["analyst", "writer"]),
            isolated: true,
            model: Some("large".into()),
            max_turns: Some(12),
            inherit_context: true,
            run_in_background: true,
            enabled: false,
            restart: RestartPolicy::Permanent,
            strategy: Strategy::RestForOne,
            max_restarts: 0,
            restart_period_ms: 250,
            settle: SettlePolicy::Drain,
        };
        assert_eq!(parse_ok(text), expected);
    }

    #[test]
    fn defaults_and_name_from_the_file_stem() {
        let definition = parse_ok("---\n---\n  You test.  \n");
        assert_eq!(
            definition,
            AgentDefinition::new("tester", "You test."),
            "every omitted field takes the definition's default"
        );
        assert_eq!(definition.max_restarts, DEFAULT_MAX_RESTARTS);
        assert_eq!(definition.restart_period_ms, DEFAULT_RESTART_PERIOD_MS);
        assert_eq!(parse_ok("---\nname: '  spaced  '\n---\n").name, "spaced");
    }

    #[test]
    fn aliases_of_claude_code_and_pi() {
        for (spelling, check) in [
            ("disallowedTools: bash", "disallowed"),
            ("disallowed-tools: bash", "disallowed"),
            ("allowedSubagents: all", "allowed"),
            ("allowed-subagents: all", "allowed"),
            ("maxTurns: 3", "turns"),
            ("max-turns: 3", "turns"),
            ("inheritContext: true", "context"),
            ("inherit-context: true", "context"),
            ("runInBackground: true", "background"),
            ("run-in-background: true", "background"),
            ("maxRestarts: 7", "restarts"),
            ("max-restarts: 7", "restarts"),
            ("restartPeriodMs: 9", "period"),
            ("restart-period-ms: 9", "period"),
        ] {
            let d = field_ok(spelling);
            let applied = match check {
                "disallowed" => d.disallowed_tools == ["bash"],
                "allowed" => d.allowed_subagents == SubagentAllowance::All,
                "turns" => d.max_turns == Some(3),
                "context" => d.inherit_context,
                "background" => d.run_in_background,
                "restarts" => d.max_restarts == 7,
                "period" => d.restart_period_ms == 9,
                _ => unreachable!(),
            };
            assert!(applied, "{spelling} was not applied: {d:?}");
        }
    }

    #[test]
    fn a_field_given_in_two_spellings_is_refused() {
        let (field, message) = field_err("max_turns: 3\nmaxTurns: 4");
        assert_eq!(field, "maxTurns");
        assert_eq!(message, "given twice, also as `max_turns`");
    }

    #[test]
    fn tool_sets() {
        for (value, tools) in [
            ("read, write", ToolSet::only(["read", "write"])),
            ("' read ,, write '", ToolSet::only(["read", "write"])),
            (
                "[Read, 'Bash(git:*)']",
                ToolSet::only(["Read", "Bash(git:*)"]),
            ),
            ("all", ToolSet::All),
            ("ALL", ToolSet::All),
            ("'*'", ToolSet::All),
            ("[all]", ToolSet::All),
            ("none", ToolSet::None),
            ("''", ToolSet::None),
            ("[]", ToolSet::None),
            ("~", ToolSet::All),
        ] {
            assert_eq!(field_ok(&format!("tools: {value}")).tools, tools, "{value}");
        }
        assert_eq!(field_ok("").tools, ToolSet::All, "omitted means every tool");
    }

    #[test]
    fn tool_set_errors() {
        assert_eq!(
            field_err("tools: true"),
            (
                "tools".into(),
                "expected `all`, `none` or tool names (a comma-separated string or a list), \
                 found true"
                    .into()
            )
        );
        assert_eq!(
            field_err("tools: read, all").1,
            "`all` must stand alone, found it among names: read, all"
        );
        assert_eq!(
            field_err("tools: [read, 3]").1,
            "expected a tool name in list item 2, found 3"
        );
        assert!(field_err("tools: {a: b}").1.ends_with("found a mapping"));
    }

    #[test]
    fn disallowed_tools_take_names_only() {
        assert_eq!(
            field_ok("disallowed_tools: bash, write").disallowed_tools,
            ["bash", "write"]
        );
        assert!(field_ok("disallowed_tools: ''").disallowed_tools.is_empty());
        for word in ["all", "'*'", "none", "[read, None]"] {
            let (field, message) = field_err(&format!("disallowedTools: {word}"));
            assert_eq!(field, "disallowedTools");
            assert!(
                message.starts_with("expected tool names, found `"),
                "{message}"
            );
        }
    }

    #[test]
    fn subagent_allowances() {
        for value in ["~", "''", "none", "None", "false", "'false'", "[]", "[' ']"] {
            assert_eq!(
                field_ok(&format!("allowed_subagents: {value}")).allowed_subagents,
                SubagentAllowance::None,
                "{value}"
            );
        }
        for value in ["all", "'*'", "true", "'true'", "True", "[all]"] {
            assert_eq!(
                field_ok(&format!("allowed_subagents: {value}")).allowed_subagents,
                SubagentAllowance::All,
                "{value}"
            );
        }
        assert_eq!(
            field_ok("allowed_subagents: writer, reviewer").allowed_subagents,
            SubagentAllowance::only(["writer", "reviewer"])
        );
        assert_eq!(
            field_ok("allowed_subagents: [writer]").allowed_subagents,
            SubagentAllowance::only(["writer"])
        );
        assert_eq!(field_ok("").allowed_subagents, SubagentAllowance::None);
        assert_eq!(
            field_err("allowed_subagents: 3").1,
            "expected `all`, `none`, true, false or agent type names (a comma-separated string \
             or a list), found 3"
        );
        assert_eq!(
            field_err("allowed_subagents: writer, true").1,
            "`true` must stand alone, found it among names: writer, true"
        );
    }

    #[test]
    fn every_keyword_in_every_list_field() {
        for (written, tools) in [
            ("all", Some(ToolSet::All)),
            ("All", Some(ToolSet::All)),
            ("'*'", Some(ToolSet::All)),
            ("[All]", Some(ToolSet::All)),
            ("none", Some(ToolSet::None)),
            ("NONE", Some(ToolSet::None)),
            ("[None]", Some(ToolSet::None)),
            ("'true'", None),
            ("'False'", None),
            ("true", None),
            ("false", None),
        ] {
            let read = with_fields(&format!("tools: {written}")).map(|d| d.tools);
            match tools {
                Some(tools) => assert_eq!(read.unwrap(), tools, "{written}"),
                None => assert!(read.is_err(), "{written}: {read:?}"),
            }
        }
        assert_eq!(
            field_err("tools: 'True'").1,
            "expected `all`, `none` or tool names, found `true`"
        );
        for written in [
            "all", "ALL", "'*'", "none", "None", "'true'", "'FALSE'", "true", "false",
        ] {
            let (field, message) = field_err(&format!("disallowed_tools: {written}"));
            assert_eq!(field, "disallowed_tools");
            assert!(
                message.starts_with("expected tool names"),
                "{written}: {message}"
            );
        }
        for (written, allowed) in [
            ("all", SubagentAllowance::All),
            ("ALL", SubagentAllowance::All),
            ("'*'", SubagentAllowance::All),
            ("true", SubagentAllowance::All),
            ("'TRUE'", SubagentAllowance::All),
            ("['True']", SubagentAllowance::All),
            ("none", SubagentAllowance::None),
            ("NONE", SubagentAllowance::None),
            ("false", SubagentAllowance::None),
            ("'False'", SubagentAllowance::None),
            ("['false']", SubagentAllowance::None),
            ("[Reviewer]", SubagentAllowance::only(["Reviewer"])),
        ] {
            assert_eq!(
                field_ok(&format!("allowed_subagents: {written}")).allowed_subagents,
                allowed,
                "{written}"
            );
        }
        assert_eq!(
            field_err("allowed_subagents: [writer, '*']").1,
            "`*` must stand alone, found it among names: writer, *"
        );
        // A YAML boolean is a value, not a list item (as `[true]` in JSON).
        assert_eq!(
            field_err("allowed_subagents: [true]").1,
            "expected an agent type name in list item 1, found true"
        );
        assert_eq!(
            field_err("allowed_subagents: [writer, ~]").1,
            "expected an agent type name in list item 2, found nothing"
        );
    }

    #[test]
    fn refusals_of_the_definition_check_come_in_file_order_with_the_file_spelling() {
        let err = with_fields("maxTurns: 0\nisolated: maybe\nrestart-period-ms: 0\nname: ' '")
            .unwrap_err();
        let CatalogError::Many(errors) = err else {
            panic!("expected several errors, got {err:?}");
        };
        let found: Vec<_> = errors
            .iter()
            .map(|e| match e {
                CatalogError::Field { field, message, .. } => (field.as_str(), message.as_str()),
                other => panic!("not a field error: {other:?}"),
            })
            .collect();
        assert_eq!(
            found,
            [
                ("maxTurns", "expected a positive integer, found 0"),
                ("isolated", "expected true or false, found \"maybe\""),
                ("restart-period-ms", "expected a positive integer, found 0"),
                ("name", "expected a non-blank name, found \" \""),
            ]
        );
    }

    #[test]
    fn a_field_that_cannot_be_read_is_not_judged_again() {
        // `name: 42` leaves the name blank; only the reading error is reported.
        let (field, message) = field_err("name: 42");
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("name", "expected a string, found 42")
        );
    }

    #[test]
    fn the_loader_and_catalog_new_refuse_the_same_definitions() {
        for frontmatter in [
            "max_turns: 0",
            "restart_period_ms: 0",
            "name: '  '",
            "max_turns: 1",
            "restart_period_ms: 1",
            "tools: [read, grep]",
        ] {
            let parsed = parse(Path::new(FILE), &format!("---\n{frontmatter}\n---\n"));
            match parsed {
                Ok(parsed) => assert!(
                    Catalog::new([parsed.definition]).is_ok(),
                    "{frontmatter}: a file's definition enters a catalog"
                ),
                Err(_) => {
                    // The same values, built in code, are refused too.
                    let mut d = AgentDefinition::new("tester", "");
                    match frontmatter {
                        "max_turns: 0" => d.max_turns = Some(0),
                        "restart_period_ms: 0" => d.restart_period_ms = 0,
                        "name: '  '" => d.name = "  ".into(),
                        other => panic!("{other} should parse"),
                    }
                    assert!(Catalog::new([d]).is_err(), "{frontmatter}");
                }
            }
        }
    }

    #[test]
    fn integers() {
        for (value, found) in [
            ("ten", "\"ten\""),
            ("'10'", "\"10\""),
            ("0", "0"),
            ("-3", "-3"),
            ("1.5", "1.5"),
            ("[1]", "a list"),
        ] {
            assert_eq!(
                field_err(&format!("max_turns: {value}")),
                (
                    "max_turns".into(),
                    format!("expected a positive integer, found {found}")
                ),
                "{value}"
            );
        }
        assert_eq!(
            field_err("max_turns: 4294967296").1,
            "expected a positive integer, found 4294967296, which is too large"
        );
        assert_eq!(field_ok("max_turns: 4294967295").max_turns, Some(u32::MAX));
        assert_eq!(field_ok("max_restarts: 0").max_restarts, 0);
        assert_eq!(
            field_err("max_restarts: -1").1,
            "expected a non-negative integer, found -1"
        );
        assert_eq!(
            field_err("restart_period_ms: 0").1,
            "expected a positive integer, found 0"
        );
        assert_eq!(
            field_ok("restart_period_ms: 18446744073709551615").restart_period_ms,
            u64::MAX
        );
    }

    #[test]
    fn booleans_and_strings_are_not_coerced() {
        assert_eq!(
            field_err("isolated: yes"),
            (
                "isolated".into(),
                "expected true or false, found \"yes\"".into()
            )
        );
        assert_eq!(field_err("enabled: 1").1, "expected true or false, found 1");
        assert_eq!(
            field_err("description: 42"),
            ("description".into(), "expected a string, found 42".into())
        );
        assert_eq!(field_ok("model: !custom big").model.as_deref(), Some("big"));
        assert_eq!(
            field_err("max_turns: !custom big").1,
            "expected a positive integer, found \"big\""
        );
        assert_eq!(
            field_err("name: '  '").1,
            "expected a non-blank name, found \"  \""
        );
        assert_eq!(
            field_ok("model: '  '").model,
            None,
            "blank model means the default"
        );
        assert!(!field_ok("enabled: false").enabled);
    }

    #[test]
    fn words_of_enums() {
        assert_eq!(
            field_ok("strategy: one-for-all").strategy,
            Strategy::OneForAll
        );
        assert_eq!(
            field_ok("strategy: One_For_One").strategy,
            Strategy::OneForOne
        );
        assert_eq!(
            field_ok("restart: transient").restart,
            RestartPolicy::Transient
        );
        assert_eq!(
            field_ok("restart: Temporary").restart,
            RestartPolicy::Temporary
        );
        assert_eq!(
            field_ok("settle: abort-children").settle,
            SettlePolicy::AbortChildren
        );
        assert_eq!(
            field_err("restart: always"),
            (
                "restart".into(),
                "expected one of `permanent`, `transient`, `temporary`, found \"always\"".into()
            )
        );
        assert_eq!(
            field_err("strategy: 1").1,
            "expected one of `one_for_one`, `one_for_all`, `rest_for_one`, found 1"
        );
        assert_eq!(
            field_err("settle: wait").1,
            "expected one of `abort_children`, `drain`, found \"wait\""
        );
    }

    #[test]
    fn null_is_the_same_as_omitted() {
        let d = field_ok("name:\nmodel: ~\nmax_turns:\nenabled:\ntools:\nrestart:");
        assert_eq!(d, AgentDefinition::new("tester", "body"));
    }

    #[test]
    fn unknown_fields_are_collected_not_errors() {
        let parsed = parse(
            Path::new(FILE),
            "---\ncolor: blue\nname: x\npermissionMode: ask\nMaxTurns: 3\n1: one\n---\n",
        )
        .unwrap();
        assert_eq!(parsed.definition.name, "x");
        assert_eq!(parsed.definition.max_turns, None, "keys are case-sensitive");
        assert_eq!(parsed.ignored, ["color", "permissionMode", "MaxTurns", "1"]);
    }

    #[test]
    fn every_field_error_of_a_file_is_reported_in_order() {
        let err =
            with_fields("max_turns: ten\ncolor: red\nisolated: maybe\nrestart: never").unwrap_err();
        let CatalogError::Many(errors) = err else {
            panic!("expected several errors, got {err:?}");
        };
        let fields: Vec<_> = errors
            .iter()
            .map(|e| match e {
                CatalogError::Field { field, .. } => field.as_str(),
                other => panic!("not a field error: {other:?}"),
            })
            .collect();
        assert_eq!(fields, ["max_turns", "isolated", "restart"]);
    }

    #[test]
    fn frontmatter_errors_are_file_errors() {
        assert_eq!(file_err(""), "missing frontmatter: the file is empty");
        assert_eq!(
            file_err("You review.\n---\nname: x\n---\n"),
            "missing frontmatter: the first line must be `---`"
        );
        assert_eq!(
            file_err(" ---\nname: x\n---\n"),
            "missing frontmatter: the first line must be `---`"
        );
        assert_eq!(
            file_err("---\nname: x\nbody"),
            "unterminated frontmatter: no closing `---` line"
        );
        assert_eq!(
            file_err("---"),
            "unterminated frontmatter: no closing `---` line"
        );
        assert_eq!(
            file_err("---\n- a\n- b\n---\n"),
            "frontmatter must be a mapping of `field: value` lines, found a list"
        );
        assert_eq!(
            file_err("---\njust words\n---\n"),
            "frontmatter must be a mapping of `field: value` lines, found \"just words\""
        );
    }

    #[test]
    fn yaml_errors_give_the_line_in_the_file() {
        let message = file_err("---\nname: x\ntools: [read, write\nmodel: m\n---\n");
        assert!(
            message.starts_with("invalid YAML in frontmatter: "),
            "{message}"
        );
        // The flow sequence opens on line 3 of the file; line 4 cannot continue it.
        assert!(message.contains("at line 4 column 6"), "{message}");
        assert!(message.contains("at line 3 column 8"), "{message}");
        let message = file_err("---\nname: x\n\nname: y\n---\n");
        assert!(
            message.contains("duplicate entry with key \"name\""),
            "{message}"
        );
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn bom_crlf_and_fence_spaces_are_accepted() {
        let d = parse_ok("\u{feff}---\r\nname: x\r\nmax_turns: 2\r\n---  \r\nYou test.\r\n");
        assert_eq!((d.name.as_str(), d.max_turns), ("x", Some(2)));
        assert_eq!(d.prompt, "You test.");
    }

    #[test]
    fn the_body_starts_after_the_first_closing_fence() {
        let d = parse_ok("---\nname: x\n---\nPart one.\n---\nPart two.\n");
        assert_eq!(d.prompt, "Part one.\n---\nPart two.");
    }

    #[test]
    fn anchors_and_merge_keys() {
        let d = field_ok("base: &base {max_turns: 4, isolated: true}\n<<: *base\nmodel: m");
        assert_eq!(d.max_turns, Some(4));
        assert!(d.isolated);
    }

    #[test]
    fn a_blank_file_stem_without_a_name_is_refused() {
        let err = parse_agent_file(Path::new(" .md"), "---\n---\n").unwrap_err();
        assert!(
            matches!(err, CatalogError::Field { ref field, .. } if field == "name"),
            "{err:?}"
        );
        assert_eq!(
            parse_agent_file(Path::new(" .md"), "---\nname: ok\n---\n")
                .unwrap()
                .name,
            "ok"
        );
    }

    #[test]
    fn hostile_yaml_is_an_error_not_a_crash() {
        let deep = format!("---\nname: {}\n---\n", "[".repeat(100_000));
        assert_eq!(
            file_err(&deep),
            "frontmatter opens more than 1000 `[` or `{` without closing them"
        );
        let deep = format!("---\nname: {}\n---\n", "{".repeat(500));
        assert!(file_err(&deep).contains("recursion limit exceeded"));
        let balanced = format!("---\ndescription: '{}'\n---\n", "[]".repeat(5_000));
        assert_eq!(parse_ok(&balanced).description.len(), 10_000);
        let mut bomb = String::from("---\na: &a [x,x,x,x,x,x,x,x,x]\n");
        for (name, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            let refs = vec![format!("*{prev}"); 9].join(",");
            bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        bomb.push_str("---\n");
        assert!(file_err(&bomb).contains("repetition limit exceeded"));
    }

    #[test]
    fn long_strings_are_cut_in_messages() {
        let long = "x".repeat(500);
        let message = field_err(&format!("max_turns: {long}")).1;
        assert!(message.len() < 120, "{message}");
        assert!(message.ends_with("\"..."), "{message}");
        // Cutting respects character boundaries.
        let wide = "é".repeat(100);
        assert!(field_err(&format!("max_turns: {wide}")).1.contains('é'));
    }

    /// Every leaf error names `FILE` and is a field or file error.
    fn assert_leaves_name_the_file(error: &CatalogError) {
        match error {
            CatalogError::Field { file, field, .. } => {
                assert_eq!(file, Path::new(FILE));
                assert!(!field.is_empty());
            }
            CatalogError::File { file, .. } | CatalogError::Yaml { file, .. } => {
                assert_eq!(file, Path::new(FILE));
            }
            CatalogError::Many(errors) => {
                assert!(errors.len() > 1);
                for e in errors {
                    assert!(!matches!(e, CatalogError::Many(_)), "nested Many");
                    assert_leaves_name_the_file(e);
                }
            }
            other => panic!("unexpected error {other:?}"),
        }
    }

    fn yamlish_value() -> impl PropStrategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("~".to_owned()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|n| n.to_string()),
            "[a-z*_, -]{0,20}",
            "\\[[a-z0-9*, ]{0,20}\\]",
            "\\{[a-z0-9:, ]{0,20}\\}",
            "'[^'\n]{0,20}'",
            "[!&*|>%@`\"'#:\\[\\]{}, a-z0-9\t-]{0,20}",
        ]
    }

    fn any_key() -> impl PropStrategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "name",
                "description",
                "tools",
                "disallowed_tools",
                "disallowedTools",
                "allowed_subagents",
                "allowed-subagents",
                "isolated",
                "model",
                "max_turns",
                "maxTurns",
                "inherit_context",
                "run_in_background",
                "enabled",
                "restart",
                "strategy",
                "max_restarts",
                "restart_period_ms",
                "settle",
                "color",
                "<<",
            ])
            .prop_map(str::to_owned),
            "[a-zA-Z_-]{1,12}",
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            if let Err(e) = parse_agent_file(Path::new(FILE), &text) {
                assert_leaves_name_the_file(&e);
            }
        }

        #[test]
        fn arbitrary_frontmatter_never_panics(
            yaml in any::<String>(),
            fence in prop::sample::select(vec!["---\n", "---\r\n", "\u{feff}---\n"]),
        ) {
            let text = format!("{fence}{yaml}\n---\nbody");
            if let Err(e) = parse_agent_file(Path::new(FILE), &text) {
                assert_leaves_name_the_file(&e);
            }
        }

        #[test]
        fn arbitrary_fields_never_panic(
            fields in prop::collection::vec((any_key(), yamlish_value()), 0..8),
        ) {
            let yaml: String =
                fields.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
            let text = format!("---\n{yaml}---\nbody");
            match parse_agent_file(Path::new(FILE), &text) {
                Ok(definition) => prop_assert!(!definition.name.trim().is_empty()),
                Err(e) => assert_leaves_name_the_file(&e),
            }
        }

        #[test]
        fn written_definitions_read_back(
            name in "[a-zA-Z][a-zA-Z0-9_-]{0,12}",
            tools in prop::collection::vec("[A-Za-z][A-Za-z0-9_]{0,8}", 1..4),
            subagents in prop::collection::vec("[a-z][a-z0-9-]{0,8}", 0..4),
            max_turns in 1u32..,
            restart in prop::sample::select(vec![
                RestartPolicy::Permanent, RestartPolicy::Transient, RestartPolicy::Temporary,
            ]),
            isolated in any::<bool>(),
            prompt in "[a-zA-Z .]{0,40}",
        ) {
            // Words YAML or the format read as something other than a name.
            let words = ["all", "none", "true", "false", "null"];
            prop_assume!(tools.iter().all(|t| !words.contains(&t.to_lowercase().as_str())));
            prop_assume!(subagents.iter().all(|s| !words.contains(&s.as_str())));
            let restart_word = match restart {
                RestartPolicy::Permanent => "permanent",
                RestartPolicy::Transient => "transient",
                RestartPolicy::Temporary => "temporary",
            };
            let text = format!(
                "---\nname: '{name}'\ntools: {}\nallowedSubagents: [{}]\nmaxTurns: {max_turns}\n\
                 restart: {restart_word}\nisolated: {isolated}\n---\n{prompt}\n",
                tools.join(", "),
                subagents.join(", "),
            );
            let expected = AgentDefinition {
                name: name.clone(),
                prompt: prompt.trim().to_owned(),
                tools: ToolSet::only(tools.clone()),
                allowed_subagents: SubagentAllowance::only(subagents.clone()),
                max_turns: Some(max_turns),
                restart,
                isolated,
                ..AgentDefinition::default()
            };
            prop_assert_eq!(parse_agent_file(Path::new(FILE), &text).unwrap(), expected);
        }
    }
}
