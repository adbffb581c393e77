//! Agent files: markdown with YAML frontmatter, as in `.pi/agents/*.md` and
//! `.claude/agents/*.md`, read into [`AgentDefinition`]s.
//!
//! [`parse_agent_file`] reads one file's text: it splits the frontmatter from the prompt,
//! parses the YAML into its fields, has the field table (the `fields` module) read each field
//! into a definition, then runs the catalog's one definition check on it. The format (fields,
//! defaults, the words `all`/`none`/`true`/`false`) is documented on [`parse_agent_file`],
//! which is public, as this module is not.
//!
//! It is pure: it never touches the file system (the `dirs` module reads files and
//! directories). It never reads a field's value itself, which is the field table's, and never
//! judges a value, which is the definition check's.
//!
//! # Invariants
//!
//! * Parsing never panics, whatever the input: every problem is a [`CatalogError`] naming the
//!   file. [`CatalogError::Field`] names the field as spelled in the file, and says what was
//!   expected and what was found. A frontmatter that is not valid YAML is
//!   [`CatalogError::Yaml`] (the parser's error gives the line and column in the file),
//!   keeping the parser's error as its source; a frontmatter missing, unterminated or not a
//!   mapping is [`CatalogError::File`]. A frontmatter leaving more than 1000 `[` or `{` open is
//!   refused before parsing, so no file makes the parser crawl.
//! * A frontmatter YAML refuses is parsed once more with its top-level plain single-line
//!   values holding `: ` (`description: Triggers on: review`) quoted, as pi and Claude Code
//!   load them; if that parses, the file loads with a note per re-quoted line
//!   ([`NoteKind::Requoted`]), else the file's own error is reported, with a hint to quote the
//!   value where it is one. Re-quoting keeps the lines one for one, and parses at most twice,
//!   each within the budget below.
//! * A file with CRLF line ends reads as if it had LF ones: no carriage return of a CRLF pair
//!   reaches a value or the prompt.
//! * Parsing takes time and memory bounded by the text's size: YAML aliases are expanded
//!   within a budget for the whole document ([`MAX_FRONTMATTER_NODES`] nodes and
//!   [`MAX_FRONTMATTER_EXPANDED_BYTES`] bytes of scalars), spent while the parser replays
//!   them and each node before it is built (the build stops at the first node beyond the
//!   budget), so an alias bomb ("billion laughs") is refused in microseconds instead of
//!   exhausting memory.
//! * Reading and judging are apart. The field table reads each value (its type, trimming, and
//!   the protocol's words rule, `agent_tree_protocol::runtime::ListValue`, for the list
//!   fields); the values are then judged by the catalog's one definition check, the same that
//!   [`Catalog::new`] runs, whose refusals are reported as field errors of the file in the
//!   same order as the rest.
//! * Every field error of a file is reported. One problem is returned as itself, several as one
//!   flat [`CatalogError::Many`] (never nested), in the order of the fields in the file. What
//!   a loaded file says that is read differently from its letter is a [`FileNote`], in the
//!   same order.
//! * Names are trimmed and must not be blank; a file that gives no name is named by its stem.
//! * Keys are case-sensitive; a field given in two spellings is an error. Other keys (`color`,
//!   `permissionMode`, ...) are ignored with a `tracing` warning naming the file and the key.
//!
//! [`Catalog::new`]: super::Catalog::new

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;

use agent_tree_protocol::AgentDefinition;
use serde::de::{self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use serde_yaml_ng::{Mapping, Value};

use super::fields::{Field, apply, describe, drop_selectors_if_isolated};
use super::notes::{FileNote, NoteKind};
use super::{CatalogError, check, combine};

/// Parses the text of one agent file; `path` names the file in errors and gives the default
/// name (its stem).
///
/// Pure: it touches no file system. Unknown fields are ignored with a `tracing` warning, and
/// so is each note on what was read differently from the file's letter
/// ([`parse_agent_file_with_notes`] returns them).
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
/// | `tools` | | `all`, `*`, `none`, or tool names (Claude Code's `Agent(...)` entries: see below) | `all` |
/// | `disallowed_tools` | `disallowedTools`, `disallowed-tools` | tool names | no tool |
/// | `allowed_subagents` | `allowedSubagents`, `allowed-subagents`, `spawns` (pi) | `all`, `*`, `true`, `none`, `false`, or type names | `none` |
/// | `isolated` | | `true` or `false` | `false` |
/// | `model` | | a string; blank or `inherit` means the tree's default; a comma list (pi's fallbacks) is its first | the tree's default |
/// | `max_turns` | `maxTurns`, `max-turns` | a positive integer; `0` (pi's "no limit") is the default, with a note | the depth-scaled default |
/// | `inherit_context` | `inheritContext`, `inherit-context` | `true` or `false` | `false` |
/// | `run_in_background` | `runInBackground`, `run-in-background`, `background` (Claude Code) | `true` or `false` | `false` |
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
///   definitions follow too: names are written as a comma-separated string (`read, grep`)
///   or a YAML list (`[read, grep]`); items are trimmed and blank items dropped. The keywords `all`, `*`, `none`, `true` and `false` ignore case,
///   are never names and must stand alone: `tools: [All]` is `all`, `tools: read, all` is an
///   error. An empty string or list means none (`tools: ""` is no tool at all).
///   `allowed_subagents` also takes `true` and `false` (YAML booleans or words); `tools` does
///   not.
/// * Claude Code grants delegation in `tools`: `Agent` (or its older name `Task`) alone lets
///   the agent start any subagent type, `Agent(writer, reviewer)` those types (a comma inside
///   the parentheses splits nothing). Such entries name no tool: without an
///   `allowed_subagents` field they are the agent's (`tools: Agent(analyst), Read` grants
///   `analyst`); beside one, a bare `Agent` defers to it, and entries naming other types are
///   an error of `tools` (`AgentDefinition::apply_delegation_entries`).
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
///   byte-order mark is accepted, and CRLF line ends are read as LF ones (the prompt keeps no
///   carriage return). A frontmatter may expand, aliases
///   included, to at most [`MAX_FRONTMATTER_NODES`] YAML nodes and
///   [`MAX_FRONTMATTER_EXPANDED_BYTES`] bytes of scalars; beyond that it is refused
///   ([`CatalogError::File`]) at the first node beyond it, nothing more built.
/// * An unquoted value holding `: ` is invalid YAML (`description: Use when: asked`), but pi
///   and Claude Code load it as text, and so does this: a top-level plain value on one line
///   holding `: ` is quoted and the frontmatter parsed again, with a note
///   ([`NoteKind::Requoted`], logged as a warning). A value that cannot be re-quoted (it goes
///   on over the next line) is an error saying to quote it.
/// * pi's words: `tools: *, ext:...` is every tool, with a note
///   ([`NoteKind::SelectorsWidened`]); beside `isolated: true`, extension selectors among tool
///   names are dropped, as pi drops them, with a note ([`NoteKind::SelectorsDropped`]).
///   `isolated` keeps its meaning here (the agent never delegates), which pi's has too: pi's
///   delegation tools come from an extension, which an isolated pi agent does not load.
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
///
/// [`Catalog::new`]: super::Catalog::new
pub fn parse_agent_file(path: &Path, text: &str) -> Result<AgentDefinition, CatalogError> {
    let (definition, notes) = parse_agent_file_with_notes(path, text)?;
    for note in &notes {
        tracing::warn!("agent file read with a note: {note}");
    }
    Ok(definition)
}

/// [`parse_agent_file`], also returning what was read differently from the letter of the
/// file ([`FileNote`]s, in field order), instead of only logging it.
///
/// The notes: a plain single-line value holding `: ` that was re-quoted so the frontmatter
/// parses ([`NoteKind::Requoted`]), pi's `max_turns: 0` read as no limit of the file's own
/// ([`NoteKind::UnlimitedTurns`]), pi's `*, ext:...` read as every tool
/// ([`NoteKind::SelectorsWidened`]) and extension selectors dropped beside `isolated: true`
/// ([`NoteKind::SelectorsDropped`]). Unknown fields are logged as warnings, as by
/// [`parse_agent_file`]; notes are not logged (the caller has them).
///
/// ```
/// use std::path::Path;
/// use agent_tree_actors::{NoteKind, parse_agent_file_with_notes};
///
/// let text = "---\nmax_turns: 0\ntools: \"*, ext:pi-web-access/web_search\"\n---\nYou research.\n";
/// let (researcher, notes) = parse_agent_file_with_notes(Path::new("researcher.md"), text)?;
/// assert_eq!(researcher.max_turns, None, "the tree's depth-scaled default");
/// let kinds: Vec<_> = notes.iter().map(|n| (n.field.as_str(), &n.kind)).collect();
/// assert_eq!(kinds[0], ("max_turns", &NoteKind::UnlimitedTurns));
/// assert!(matches!(kinds[1], ("tools", NoteKind::SelectorsWidened { .. })));
/// # Ok::<(), agent_tree_actors::CatalogError>(())
/// ```
///
/// # Errors
///
/// As [`parse_agent_file`].
pub fn parse_agent_file_with_notes(
    path: &Path,
    text: &str,
) -> Result<(AgentDefinition, Vec<FileNote>), CatalogError> {
    let parsed = parse(path, text)?;
    for field in &parsed.ignored {
        tracing::warn!(
            file = %path.display(),
            field = %field,
            "unknown field in agent file ignored"
        );
    }
    Ok((parsed.definition, parsed.notes))
}

/// A parsed file: its definition, the frontmatter keys it ignored (for the warnings) and its
/// notes.
#[derive(Debug)]
struct Parsed {
    definition: AgentDefinition,
    ignored: Vec<String>,
    notes: Vec<FileNote>,
}

/// [`parse_agent_file_with_notes`] without the logging, so tests can see what was ignored.
fn parse(path: &Path, text: &str) -> Result<Parsed, CatalogError> {
    let file_error = |message| CatalogError::File {
        file: path.to_owned(),
        message,
    };
    // A file saved with CRLF line ends is read as if saved with LF: the prompt a model gets,
    // and every value, carry no carriage return the author never typed. (A lone CR is kept.)
    let text: Cow<'_, str> = if text.contains("\r\n") {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(text)
    };
    let (yaml, body) = split_frontmatter(&text).map_err(file_error)?;
    let (fields, requoted) = frontmatter_fields(path, yaml)?;
    // Each note with the position of its key, sorted with the rest below. A re-quoted line's
    // key is found in the fields by its spelling.
    let positions: HashMap<&str, usize> = if requoted.is_empty() {
        HashMap::new()
    } else {
        fields
            .keys()
            .enumerate()
            .filter_map(|(i, k)| Some((k.as_str()?, i)))
            .collect()
    };
    let mut notes: Vec<(usize, FileNote)> = requoted
        .into_iter()
        .map(|Requoted { key, line }| {
            let position = positions.get(key.as_str()).copied().unwrap_or(usize::MAX);
            (
                position,
                FileNote::new(path, key, NoteKind::Requoted { line }),
            )
        })
        .collect();

    let mut definition = AgentDefinition::default();
    definition.prompt = body.trim().to_owned();
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
    // Whether `allowed_subagents` has a value (`none` written is not `none` left out).
    let mut allowed_written = false;
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
        allowed_written |= field == Field::AllowedSubagents;
        match apply(&mut definition, field, value) {
            Ok(Some(kind)) => notes.push((position, FileNote::new(path, key, kind))),
            Ok(None) => {}
            Err(message) => {
                unread.push(field);
                errors.push((position, field_error(path, key, message)));
            }
        }
    }
    // pi gives an isolated agent no extension tool: its selectors among names go.
    if let Some(kind) = drop_selectors_if_isolated(&mut definition) {
        let (key, position) = seen.get(&Field::Tools).copied().unwrap_or(("tools", 0));
        notes.push((position, FileNote::new(path, key, kind)));
    }
    // Claude Code's `Agent(...)` entries in `tools` are the subagent allowance: an error of
    // theirs (their types, or an `allowed_subagents` granting others) is `tools`'s.
    // (An `allowed_subagents` that could not be read is its own error: nothing to agree with.)
    let entries = if unread.contains(&Field::AllowedSubagents) {
        Ok(())
    } else {
        definition.apply_delegation_entries_beside(allowed_written)
    };
    if let Err(e) = entries {
        let (key, position) = seen.get(&Field::Tools).copied().unwrap_or(("tools", 0));
        unread.push(Field::Tools);
        errors.push((position, field_error(path, key, e.to_string())));
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
    notes.sort_by_key(|(position, _)| *position);
    match combine(errors.into_iter().map(|(_, e)| e).collect()) {
        Some(error) => Err(error),
        None => Ok(Parsed {
            definition,
            ignored,
            notes: notes.into_iter().map(|(_, n)| n).collect(),
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

/// Whether `text` starts with a frontmatter fence (`---` as its first line, after a
/// byte-order mark): whether it means to be an agent file at all. A markdown file without one
/// (a `README.md`) is no agent file, and a directory loader skips it.
pub(super) fn has_frontmatter(text: &str) -> bool {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.split_inclusive('\n')
        .next()
        .is_some_and(|first| first.trim_end() == "---")
}

/// Parses the frontmatter of `path` into its fields; an empty frontmatter has none. Also
/// returns the lines re-quoted so it parses (see [`requote`]).
fn frontmatter_fields(path: &Path, yaml: &str) -> Result<(Mapping, Vec<Requoted>), CatalogError> {
    let file_error = |message| CatalogError::File {
        file: path.to_owned(),
        message,
    };
    if opens_too_deep(yaml) {
        return Err(file_error(format!(
            "frontmatter opens more than {MAX_OPEN_BRACKETS} `[` or `{{` without closing them"
        )));
    }
    let (value, requoted) = match yaml_value(path, yaml) {
        Ok(value) => (value, Vec::new()),
        // pi and Claude Code load a plain value holding `: ` as text, which YAML refuses: such
        // values are quoted and the frontmatter parsed once more. If that fails too, the
        // file's own error (with its hint) is the one worth reading.
        Err(original @ CatalogError::Yaml { .. }) => match requote(yaml) {
            Some((text, requoted)) => match yaml_value(path, &text) {
                Ok(value) => (value, requoted),
                Err(_) => return Err(original),
            },
            None => return Err(original),
        },
        Err(other) => return Err(other),
    };
    match value {
        Value::Mapping(fields) => Ok((fields, requoted)),
        Value::Null => Ok((Mapping::new(), requoted)),
        other => Err(file_error(format!(
            "frontmatter must be a mapping of `field: value` lines, found {}",
            describe(&other)
        ))),
    }
}

/// The YAML value of the frontmatter `yaml`, merge keys applied and tags dropped, built within
/// the expansion budget.
fn yaml_value(path: &Path, yaml: &str) -> Result<Value, CatalogError> {
    let yaml_error = |e: serde_yaml_ng::Error| CatalogError::Yaml {
        file: path.to_owned(),
        hint: quote_hint(yaml, &e),
        source: Box::new(e),
    };
    // The newline stands for the opening `---` line, so the line numbers in the parser's
    // errors are the file's.
    let text = format!("\n{yaml}");
    // Built within the budget: the build stops at the first node beyond it, so no more than
    // the budget is ever built.
    let budget = Budget::default();
    let mut value = budget.build(&text).map_err(|e| match budget.exceeded() {
        Some(what) => CatalogError::File {
            file: path.to_owned(),
            message: format!(
                "frontmatter expands to more than {what} through YAML aliases (`*name`); \
                 agent files need no aliases"
            ),
        },
        None => yaml_error(e),
    })?;
    value.apply_merge().map_err(yaml_error)?;
    while let Value::Tagged(tagged) = value {
        value = tagged.value;
    }
    Ok(value)
}

/// A line [`requote`] quoted: its key as written, and its line in the file (from 1).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requoted {
    key: String,
    line: usize,
}

/// The frontmatter `yaml` with every top-level plain single-line value holding `: ` quoted, or
/// `None` when no line has one.
///
/// A line qualifies when it is not indented, its key is simple (ASCII letters, digits, `_`,
/// `-`) and followed by `: `, its value is a plain scalar (it does not start with a quote, a
/// bracket, `|`, `>`, `&`, `*`, `!` or another YAML indicator), holds `: ` (or a colon before
/// a tab, or ends with a colon), and does not go on over the next lines (the next line that is
/// neither blank nor a comment is not indented), and no flow collection (`[`, `{`) opened on
/// an earlier line is still open. The value becomes a YAML double-quoted string with `\` and
/// `"` escaped, so it reads back as written; a `#` comment after it stays a comment, as YAML
/// reads it. Lines are kept one for one, so the parser's line numbers stay the file's.
fn requote(yaml: &str) -> Option<(String, Vec<Requoted>)> {
    let lines: Vec<&str> = yaml.split_inclusive('\n').collect();
    let mut out = String::with_capacity(yaml.len() + 16);
    let mut requoted = Vec::new();
    // Flow brackets opened by earlier lines and not closed yet (counted only from a line
    // whose value opens one: brackets in plain text open nothing).
    let mut open = 0usize;
    // Whether the value of each line goes on: the next line that is neither blank nor a
    // comment is indented. Found in one pass from the end, so the scan stays linear.
    let mut continues = vec![false; lines.len()];
    let mut next_indented = false;
    for (i, line) in lines.iter().enumerate().rev() {
        continues[i] = next_indented;
        let trimmed = line.trim();
        if !trimmed.is_empty() && !trimmed.starts_with('#') {
            next_indented = line.starts_with([' ', '\t']);
        }
    }
    for (i, raw) in lines.iter().enumerate() {
        let (line, end) = match raw.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (*raw, ""),
        };
        if open == 0 && !continues[i] {
            if let Some((key, quoted)) = requote_line(line) {
                // The parser's line 1 is the opening `---` line.
                requoted.push(Requoted { key, line: i + 2 });
                out.push_str(&quoted);
                out.push_str(end);
                continue;
            }
        }
        let opens_flow = line
            .split_once(": ")
            .is_some_and(|(_, value)| value.trim_start().starts_with(['[', '{']));
        if open > 0 || opens_flow {
            for byte in line.bytes() {
                match byte {
                    b'[' | b'{' => open += 1,
                    b']' | b'}' => open = open.saturating_sub(1),
                    _ => {}
                }
            }
        }
        out.push_str(raw);
    }
    (!requoted.is_empty()).then_some((out, requoted))
}

/// `key: "value"` (a trailing comment kept) for a line [`requote`] quotes, with its key.
fn requote_line(line: &str) -> Option<(String, String)> {
    if line.starts_with([' ', '\t']) {
        return None;
    }
    let (key, rest) = line.split_once(':')?;
    let simple_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !simple_key || !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.trim_start_matches([' ', '\t']);
    // A `#` after white space starts a comment, in a plain value as anywhere.
    let comment_at = rest
        .char_indices()
        .find(|&(i, c)| c == '#' && i > 0 && rest[..i].ends_with([' ', '\t']))
        .map_or(rest.len(), |(i, _)| i);
    let (value, comment) = rest.split_at(comment_at);
    let value = value.trim_end_matches([' ', '\t']);
    let mut chars = value.chars();
    let plain = match (chars.next(), chars.next()) {
        (None, _) => false,
        (Some(c), _) if ",[]{}#&*!|>'\"%@`".contains(c) => false,
        // `-`, `?` and `:` start a plain value only before a character that is not a space.
        (Some('-' | '?' | ':'), next) => next.is_some_and(|n| n != ' ' && n != '\t'),
        (Some(_), _) => true,
    };
    let holds_colon = value.contains(": ") || value.contains(":\t") || value.ends_with(':');
    if !plain || !holds_colon {
        return None;
    }
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    let gap = if comment.is_empty() { "" } else { " " };
    Some((
        key.to_owned(),
        format!("{key}: \"{escaped}\"{gap}{comment}"),
    ))
}

/// The hint for a YAML error a person commonly makes, if `error` is one: an unquoted value
/// holding `: ` (`description: Use when: asked`), which YAML reads as a mapping inside a
/// value, or one starting with `*` or `&` (pi's `tools: *, ext:search`), which YAML reads as
/// an alias or an anchor. The frontmatter `yaml` is the text the parser saw after its first
/// line.
fn quote_hint(yaml: &str, error: &serde_yaml_ng::Error) -> Option<String> {
    let message = error.to_string();
    let general = if message.starts_with("mapping values are not allowed in this context") {
        "a value holding `: ` must be quoted"
    } else if message.contains("scanning an alias") || message.contains("scanning an anchor") {
        "a value starting with `*` or `&` must be quoted"
    } else {
        return None;
    };
    let hint = |line: Option<&str>| quoted_line(line).unwrap_or_else(|| general.to_owned());
    // The parser's line 1 stands for the `---` line (see `frontmatter_fields`).
    let line = error
        .location()
        .and_then(|l| l.line().checked_sub(2))
        .and_then(|i| yaml.lines().nth(i));
    Some(hint(line))
}

/// `quote the value: key: "value"` for a `key: value` line with a simple key and an
/// unquoted value.
fn quoted_line(line: Option<&str>) -> Option<String> {
    let (key, value) = line?.split_once(": ")?;
    let value = value.trim();
    let simple_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !simple_key || value.starts_with(['"', '\'']) {
        return None;
    }
    /// Longest value shown whole, in characters.
    const SHOWN: usize = 40;
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    let shown = match escaped.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", escaped[..cut].trim_end()),
        None => escaped,
    };
    Some(format!("quote the value: {key}: \"{shown}\""))
}

/// Most YAML nodes a frontmatter may expand to, aliases included, counted over the whole
/// document. Agent files need a few dozen; no alias is ever needed.
///
/// ```
/// use std::path::Path;
/// use agent_tree_actors::{MAX_FRONTMATTER_NODES, parse_agent_file};
/// let mut bomb = String::from("---\na: &a [x, x, x, x, x, x, x, x, x, x]\n");
/// for (name, prev) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
///     bomb.push_str(&format!("{name}: &{name} [{}]\n", vec![format!("*{prev}"); 10].join(", ")));
/// }
/// bomb.push_str("---\n");
/// let err = parse_agent_file(Path::new("bomb.md"), &bomb).unwrap_err();
/// assert!(err.to_string().contains(&format!("more than {MAX_FRONTMATTER_NODES} YAML nodes")));
/// ```
pub const MAX_FRONTMATTER_NODES: usize = 10_000;

/// Most bytes of scalars (strings, numbers, keys) a frontmatter may expand to, aliases
/// included, counted over the whole document: four times the largest agent file
/// ([`MAX_AGENT_FILE_BYTES`](crate::MAX_AGENT_FILE_BYTES)), so only aliases can exceed it.
///
/// ```
/// assert_eq!(agent_tree_actors::MAX_FRONTMATTER_EXPANDED_BYTES, 1024 * 1024);
/// ```
pub const MAX_FRONTMATTER_EXPANDED_BYTES: usize = 4 * crate::catalog::MAX_AGENT_FILE_BYTES as usize;

/// What is left of the expansion budget while a document is counted.
#[derive(Debug)]
struct Budget {
    nodes: Cell<usize>,
    bytes: Cell<usize>,
    /// What ran out, once something did.
    exceeded: Cell<Option<&'static str>>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            nodes: Cell::new(MAX_FRONTMATTER_NODES),
            bytes: Cell::new(MAX_FRONTMATTER_EXPANDED_BYTES),
            exceeded: Cell::new(None),
        }
    }
}

impl Budget {
    /// Builds the YAML document `text` ([`Build`]) as the parser replays it (each alias
    /// expanded where it is used), spending one node per node and the bytes of every
    /// scalar; stops with an error at the first node beyond the budget.
    fn build(&self, text: &str) -> Result<Value, serde_yaml_ng::Error> {
        Build(self).deserialize(serde_yaml_ng::Deserializer::from_str(text))
    }

    /// What ran out (for the message), if anything did.
    fn exceeded(&self) -> Option<String> {
        self.exceeded.get().map(|what| match what {
            "nodes" => format!("{MAX_FRONTMATTER_NODES} YAML nodes"),
            _ => format!("{MAX_FRONTMATTER_EXPANDED_BYTES} bytes"),
        })
    }

    fn spend<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let nodes = self.nodes.get();
        let left = self.bytes.get();
        if nodes == 0 {
            self.exceeded.set(Some("nodes"));
        } else if bytes > left {
            self.exceeded.set(Some("bytes"));
        } else {
            self.nodes.set(nodes - 1);
            self.bytes.set(left - bytes);
            return Ok(());
        }
        Err(E::custom("the frontmatter's expansion budget is spent"))
    }
}

/// The visitor that builds a frontmatter's YAML value: `serde_yaml_ng::Value`'s own, except
/// that an integer no such value holds (past `u64`, below `i64`, within 128 bits) is the
/// float YAML reads a longer one as, rather than an error of the whole document: a number,
/// so it is its field's error ("expected a positive integer, found 1.2345678901234568e29")
/// beside the file's other field errors, and never a string.
/// Tags are dropped (they are ignored); a key given twice is an error, as in `serde_yaml_ng`.
/// Every node spends from the [`Budget`] before it is built.
#[derive(Clone, Copy)]
struct Build<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.spend(1)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.spend(8)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.0.spend(16)?;
        // Past `i64`: the float YAML gives an integer past 128 bits (never a string).
        #[allow(clippy::cast_precision_loss)]
        Ok(Value::Number((v as f64).into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.spend(8)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.0.spend(16)?;
        // Past `u64`: as `visit_i128`.
        #[allow(clippy::cast_precision_loss)]
        Ok(Value::Number((v as f64).into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.spend(8)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.spend(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.spend(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.spend(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.0.spend(0)?;
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.spend(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.spend(0)?;
        let mut mapping = Mapping::new();
        while let Some(key) = map.next_key_seed(self)? {
            if mapping.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate entry {}",
                    match &key {
                        Value::String(key) => format!("with key {key:?}"),
                        Value::Null => "with null key".to_owned(),
                        Value::Bool(key) => format!("with key `{key}`"),
                        Value::Number(key) => format!("with key {key}"),
                        _ => "in YAML map".to_owned(),
                    }
                )));
            }
            let value = map.next_value_seed(self)?;
            mapping.insert(key, value);
        }
        Ok(Value::Mapping(mapping))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        // A tagged value (`!tag value`): the tag (spent from the budget as a string), then
        // the value, which is kept alone (tags are ignored).
        let (_tag, variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
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
pub(super) fn untag(value: &Value) -> &Value {
    let mut value = value;
    while let Value::Tagged(tagged) = value {
        value = &tagged.value;
    }
    value
}

#[cfg(test)]
pub(super) mod tests;
