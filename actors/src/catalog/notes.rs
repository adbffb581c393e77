//! Notes: what a loader read differently from the letter of an agent file, and loaded anyway.
//!
//! A file people keep is written for the tool that reads it (Claude Code, pi), and some of what
//! those tools accept agent-tree reads a little differently or not at all: an unquoted value
//! holding `: `, pi's `max_turns: 0`, pi's extension selectors. Refusing such a file would
//! refuse a collection people already use; loading it silently would hide a difference. So the
//! file is loaded and a [`FileNote`] says what was done, naming the file and the field. Notes
//! are not problems: a strict load does not fail on them
//! ([`LoadedCatalog::into_strict`](crate::LoadedCatalog::into_strict)).
//!
//! # Invariants
//!
//! * A note never changes what was loaded; it only tells it. Every note names its file and the
//!   field as spelled in the file, and is logged as a `tracing` warning by whoever found it.
//! * Notes are plain data: building one touches no file system.

use std::fmt;
use std::path::PathBuf;

/// Something an agent file says that was read differently from its letter, and loaded anyway.
///
/// Returned by the directory loaders ([`LoadedCatalog::notes`](crate::LoadedCatalog::notes))
/// and by [`parse_agent_file_with_notes`](crate::parse_agent_file_with_notes), and logged as a
/// `tracing` warning. Shown as `{file}: field `{field}`: {what}`.
///
/// ```
/// use std::path::Path;
/// use agent_tree_actors::{NoteKind, parse_agent_file_with_notes};
///
/// let text = "---\ndescription: Reviews code. Triggers on: review, PR\n---\nYou review.\n";
/// let (reviewer, notes) = parse_agent_file_with_notes(Path::new("reviewer.md"), text)?;
/// assert_eq!(reviewer.description, "Reviews code. Triggers on: review, PR");
/// assert_eq!(notes[0].field, "description");
/// assert_eq!(notes[0].kind, NoteKind::Requoted { line: 2 });
/// assert!(notes[0].to_string().starts_with("reviewer.md: field `description`: re-quoted"));
/// # Ok::<(), agent_tree_actors::CatalogError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileNote {
    /// The file.
    pub file: PathBuf,
    /// The frontmatter field, as spelled in the file (`name` for a note about the type's
    /// name, even when the file stem gave it).
    pub field: String,
    /// What was read differently, and how.
    pub kind: NoteKind,
}

impl FileNote {
    /// A note about `field` of `file`.
    pub(crate) fn new(file: impl Into<PathBuf>, field: impl Into<String>, kind: NoteKind) -> Self {
        FileNote {
            file: file.into(),
            field: field.into(),
            kind,
        }
    }
}

impl fmt::Display for FileNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: field `{}`: {}",
            self.file.display(),
            self.field,
            self.kind
        )
    }
}

/// What a [`FileNote`] tells.
///
/// ```
/// use agent_tree_actors::NoteKind;
/// assert!(NoteKind::UnlimitedTurns.to_string().starts_with("`0` is pi's \"no turn limit\""));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoteKind {
    /// The line's value was a plain (unquoted) single-line YAML value holding `: `, which YAML
    /// refuses (`description: Triggers on: review`); pi and Claude Code load such a value as
    /// text, so it was quoted as a YAML double-quoted string and the frontmatter parsed again.
    /// The value is the text as written (a `#` comment after it excepted).
    Requoted {
        /// The line of the file, from 1.
        line: usize,
    },
    /// `max_turns: 0`, pi's "no turn limit": read as no limit of the file's own, so the
    /// tree's depth-scaled default applies, as when the field is left out (agent-tree never
    /// runs an agent without a turn limit).
    UnlimitedTurns,
    /// pi's `*` followed by extension selectors (`*, ext:mcp/search`) is every registered
    /// tool: agent-tree has no extensions, so the selectors cannot narrow anything, where pi
    /// would hide the tools of the extensions they do not name.
    SelectorsWidened {
        /// The selectors, as written.
        selectors: Vec<String>,
    },
    /// The agent is `isolated`, and pi gives an isolated agent no extension tool: its
    /// extension selectors among tool names were dropped, as pi drops them.
    SelectorsDropped {
        /// The selectors dropped, as written.
        selectors: Vec<String>,
    },
    /// The type's name differs only in ASCII case from another type's: a request naming
    /// either exactly gets it, and any other spelling (`REVIEWER`) is refused as ambiguous.
    CaseTwin {
        /// This file's type.
        name: String,
        /// The other type.
        other: String,
        /// The other type's file.
        other_file: PathBuf,
    },
}

impl fmt::Display for NoteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoteKind::Requoted { line } => write!(
                f,
                "re-quoted the value on line {line}, which holds `: ` (unquoted, YAML reads it \
                 as a mapping and refuses it; pi and Claude Code read it as text): quote it to \
                 silence this note"
            ),
            NoteKind::UnlimitedTurns => f.write_str(
                "`0` is pi's \"no turn limit\"; read as no limit of the file's own, so the \
                 tree's depth-scaled default applies (30 turns at depth 1): write a number to \
                 allow more",
            ),
            NoteKind::SelectorsWidened { selectors } => write!(
                f,
                "`*` followed by extension selectors ({}) gives every registered tool: \
                 agent-tree has no extensions, so the selectors narrow nothing (pi would hide \
                 the tools of other extensions); name the tools to narrow",
                selectors.join(", ")
            ),
            NoteKind::SelectorsDropped { selectors } => write!(
                f,
                "dropped the extension selectors {} because the agent is isolated, as pi \
                 does (an isolated agent has no extension tools)",
                selectors.join(", ")
            ),
            NoteKind::CaseTwin {
                name,
                other,
                other_file,
            } => write!(
                f,
                "agent type {name:?} differs only in case from {other:?} (in {}): a request \
                 naming either exactly gets it, any other spelling is refused as ambiguous",
                other_file.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_names_its_file_and_field() {
        let note = FileNote::new(
            "agents/b.md",
            "name",
            NoteKind::CaseTwin {
                name: "reviewer".into(),
                other: "Reviewer".into(),
                other_file: "agents/a.md".into(),
            },
        );
        assert_eq!(
            note.to_string(),
            "agents/b.md: field `name`: agent type \"reviewer\" differs only in case from \
             \"Reviewer\" (in agents/a.md): a request naming either exactly gets it, any other \
             spelling is refused as ambiguous"
        );
        let widened = NoteKind::SelectorsWidened {
            selectors: vec!["ext:mcp/search".into(), "ext:web".into()],
        };
        assert!(
            widened
                .to_string()
                .starts_with("`*` followed by extension selectors (ext:mcp/search, ext:web)")
        );
    }
}
