//! Catalogs: the immutable set of agent types a branch resolves names in.
//!
//! Agent files reach a catalog through three private modules, one concept each: `dirs` reads
//! directories of agent files, `frontmatter` parses one file's text (markdown with YAML
//! frontmatter), and `fields` reads each frontmatter field into a definition.
//!
//! # Invariants
//!
//! * A catalog never changes after it is built; a branch keeps the catalog (an `Arc`) it
//!   started with, so a child resolves types where its owner did, never in a process-global
//!   table.
//! * Every definition in it passed the one definition check (`check`), whatever its origin:
//!   built in code or decoded from JSON ([`Catalog::new`]) or loaded from an agent file (the
//!   loader runs the same check, then builds the catalog with [`Catalog::new`]). So a catalog
//!   built in code refuses exactly what a file would, and names are unique.
//! * Resolution is strict ([`Catalog::resolve`]): an exact name wins, else exactly one
//!   ASCII-case-insensitive match (never Unicode folding, so confusables such as the Kelvin sign do not match); blank, unknown, disabled and ambiguous names are refused, and no
//!   fallback type is ever substituted. The entries of an allowlist (`allowed_subagents`)
//!   name types by the same rule ([`Catalog::resolve_for`]).

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use agent_tree_protocol::{
    AgentDefinition, ExtensionSelector, ListField, SubagentAllowance, ToolSet,
};

use crate::error::SpawnError;
use crate::policy::capability::{ToolMatch, deny_names, match_tool_name};

mod dirs;
mod fields;
mod frontmatter;
mod notes;
pub use dirs::{LoadedCatalog, MAX_AGENT_DIR_DEPTH, MAX_AGENT_FILE_BYTES, SkipReason, Skipped};
pub use frontmatter::{
    MAX_FRONTMATTER_EXPANDED_BYTES, MAX_FRONTMATTER_NODES, parse_agent_file,
    parse_agent_file_with_notes,
};
pub use notes::{FileNote, NoteKind};

/// A definition or agent file that could not enter a catalog.
///
/// ```
/// use agent_tree_actors::{Catalog, CatalogError};
/// use agent_tree_protocol::AgentDefinition;
/// let err = Catalog::new([AgentDefinition::new("writer", "").with_max_turns(0)]).unwrap_err();
/// assert!(matches!(err, CatalogError::Definition { field: "max_turns", .. }));
/// assert_eq!(
///     err.to_string(),
///     "agent definition \"writer\": field `max_turns`: expected a positive integer, found 0"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// A definition given to [`Catalog::new`] has a field the definition check refuses.
    #[error("agent definition {name:?}: field `{field}`: {message}")]
    Definition {
        /// The definition's name, as given (perhaps blank).
        name: String,
        /// The field, by its snake_case name.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// Two definitions given to [`Catalog::new`] have the same name.
    #[error("agent type {0:?} is defined twice")]
    Duplicate(String),
    /// A field of an agent file is malformed, or refused by the definition check.
    #[error("{}: field `{field}`: {message}", .file.display())]
    Field {
        /// The file.
        file: PathBuf,
        /// The frontmatter field, as spelled in the file.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// An agent file's frontmatter is missing, unterminated, too deeply nested, not a mapping,
    /// or expands beyond its budget through YAML aliases
    /// ([`MAX_FRONTMATTER_NODES`](crate::MAX_FRONTMATTER_NODES)).
    #[error("{}: {message}", .file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An agent directory could not be read (a missing one included).
    #[error("{}: cannot read agent directory: {source}", .dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An agent file could not be read.
    #[error("{}: cannot read file: {source}", .file.display())]
    ReadFile {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An agent file is not UTF-8.
    #[error("{}: not valid UTF-8: {source}", .file.display())]
    Utf8 {
        /// The file.
        file: PathBuf,
        /// Where the first invalid byte is.
        #[source]
        source: std::str::Utf8Error,
    },
    /// An agent file's frontmatter is not valid YAML, even once its plain single-line values
    /// holding `: ` are re-quoted (see [`NoteKind::Requoted`]); the error is the file's own.
    ///
    /// ```
    /// use std::path::Path;
    /// use agent_tree_actors::{CatalogError, parse_agent_file};
    /// // The value goes on over the next line: it is not re-quoted, and gets a hint instead.
    /// let text = "---\ndescription: a: b\n  and more\n---\n";
    /// let err = parse_agent_file(Path::new("a.md"), text).unwrap_err();
    /// assert!(matches!(err, CatalogError::Yaml { hint: Some(_), .. }));
    /// assert!(err.to_string().ends_with("(quote the value: description: \"a: b\")"));
    /// ```
    #[error("{}: invalid YAML in frontmatter: {source}{}", .file.display(), parenthesized(.hint))]
    Yaml {
        /// The file.
        file: PathBuf,
        /// The YAML parser's error, with the line and column in the file.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// How to fix a common mistake, when the error is one: an unquoted value holding
        /// `: ` gives `quote the value: description: "a: b"`.
        hint: Option<String>,
    },
    /// An agent file is not a regular file (or a link to one): a FIFO, a socket, a device, a
    /// directory. It is refused without being opened.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-not-a-file-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// # #[cfg(unix)] {
    /// use agent_tree_actors::{Catalog, CatalogError};
    /// std::os::unix::fs::symlink("/dev/zero", dir.join("zero.md"))?;
    /// let loaded = Catalog::load_dir(&dir);
    /// assert!(matches!(&loaded.problems[..], [CatalogError::NotAFile { kind: "character device", .. }]));
    /// # }
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[error("{}: not a regular file ({kind}); agent files are regular files or links to them", .file.display())]
    NotAFile {
        /// The file.
        file: PathBuf,
        /// What it is: `FIFO`, `socket`, `character device`, `block device`, `directory`.
        kind: &'static str,
    },
    /// An agent file is larger than [`MAX_AGENT_FILE_BYTES`](crate::MAX_AGENT_FILE_BYTES).
    /// It is refused without reading more than the limit.
    ///
    /// ```
    /// use agent_tree_actors::{Catalog, CatalogError, MAX_AGENT_FILE_BYTES};
    /// # let dir = std::env::temp_dir().join(format!("agent-tree-doc-too-large-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let body = "x".repeat(MAX_AGENT_FILE_BYTES as usize);
    /// std::fs::write(dir.join("huge.md"), format!("---\n---\n{body}"))?;
    /// let loaded = Catalog::load_dir(&dir);
    /// assert!(matches!(&loaded.problems[..], [CatalogError::TooLarge { .. }]));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[error("{}: larger than the {limit} bytes an agent file may have", .file.display())]
    TooLarge {
        /// The file.
        file: PathBuf,
        /// The limit, in bytes.
        limit: u64,
    },
    /// Several problems; every one is kept, flat (never nested).
    #[error("{} problems in agent definitions:\n{}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Many(Vec<CatalogError>),
}

/// A tool name of a definition that gives the agent no tool: it names no registered user
/// tool, or several ignoring case and none exactly.
///
/// Found by [`Catalog::tool_problems`], and logged as a warning for every definition of the
/// catalog when a tree is built ([`TreeBuilder::build`](crate::TreeBuilder::build)). Not an
/// error: agent files name tools an application may not have (Claude Code's `WebFetch`), and
/// such an agent runs with the tools that do match. Names match by the rule documented on
/// [`ToolSet`]: the exact name, else the one ASCII-case-insensitive match.
///
/// ```
/// use agent_tree_actors::{Catalog, ToolProblem};
/// use agent_tree_protocol::{AgentDefinition, ToolSet};
/// let catalog = Catalog::new([AgentDefinition::new("reviewer", "")
///     .with_tools(ToolSet::only(["Read", "WebFetch"]))])?;
/// let problems = catalog.tool_problems(["read", "bash"]);
/// assert_eq!(problems.len(), 1, "`Read` is the tool `read`");
/// assert!(matches!(&problems[0], ToolProblem::Unknown { tool, .. } if tool == "WebFetch"));
/// assert_eq!(
///     problems[0].to_string(),
///     "agent type \"reviewer\": field `tools` names \"WebFetch\", which is no registered \
///      tool (registered: read, bash)"
/// );
/// # Ok::<(), agent_tree_actors::CatalogError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolProblem {
    /// The name matches no registered user tool (nor an orchestration tool).
    #[error(
        "agent type {agent_type:?}: field `{field}` names {tool:?}, which is no registered tool \
         (registered: {}){}",
        list(registered),
        if ExtensionSelector::parse(tool).is_some_and(|s| s.tool.is_none()) {
            "; agent-tree has no extensions: name the tools"
        } else {
            ""
        }
    )]
    Unknown {
        /// The definition.
        agent_type: String,
        /// `tools` or `disallowed_tools`.
        field: ListField,
        /// The name as written.
        tool: String,
        /// Every registered user tool, in the order given.
        registered: Vec<String>,
    },
    /// The name equals several registered tools ignoring ASCII case and none exactly; the
    /// agent gets none of them.
    #[error(
        "agent type {agent_type:?}: field `{field}` names {tool:?}, which matches several \
         registered tools ignoring case ({}), so none is given; write one exactly",
        list(candidates)
    )]
    Ambiguous {
        /// The definition.
        agent_type: String,
        /// `tools` (a deny denies all of them, so it is never ambiguous).
        field: ListField,
        /// The name as written.
        tool: String,
        /// The registered tools it equals ignoring case, in the order given.
        candidates: Vec<String>,
    },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The tool problems of `definition` against the registered user tools `registered`.
fn tool_problems_of(definition: &AgentDefinition, registered: &[&str]) -> Vec<ToolProblem> {
    let owned = || registered.iter().map(|t| (*t).to_owned()).collect();
    let mut problems = Vec::new();
    if let ToolSet::Only(names) = &definition.tools {
        for name in names {
            match match_tool_name(name, registered) {
                ToolMatch::Tool(_) | ToolMatch::Orchestration | ToolMatch::Server(_) => {}
                ToolMatch::Unknown => problems.push(ToolProblem::Unknown {
                    agent_type: definition.name.clone(),
                    field: ListField::Tools,
                    tool: name.clone(),
                    registered: owned(),
                }),
                ToolMatch::Ambiguous(candidates) => problems.push(ToolProblem::Ambiguous {
                    agent_type: definition.name.clone(),
                    field: ListField::Tools,
                    tool: name.clone(),
                    candidates: candidates.into_iter().map(str::to_owned).collect(),
                }),
            }
        }
    }
    for name in &definition.disallowed_tools {
        let names_something = agent_tree_protocol::runtime::is_delegation_entry(name)
            || registered
                .iter()
                .chain(crate::tool::RESERVED_TOOLS.iter())
                .any(|t| deny_names(name, t));
        if !names_something {
            problems.push(ToolProblem::Unknown {
                agent_type: definition.name.clone(),
                field: ListField::DisallowedTools,
                tool: name.clone(),
                registered: owned(),
            });
        }
    }
    problems
}

/// Logs a warning for each tool problem of `catalog` against `registered` (a tree's build).
pub(crate) fn warn_tool_problems<'a>(
    catalog: &Catalog,
    registered: impl IntoIterator<Item = &'a str>,
) {
    for problem in catalog.tool_problems(registered) {
        tracing::warn!("{problem}");
    }
}

/// ` (hint)`, or nothing.
fn parenthesized(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

/// One refusal of the definition check: the field (by its snake_case name) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The field.
    pub(crate) field: &'static str,
    /// `expected ..., found ...`.
    pub(crate) message: String,
}

/// The definition check: every refusal of `definition`, in field order.
///
/// This is the one place a definition's values are judged; the agent-file loader only reads
/// a file's values into a definition (types, trimming, the words rule) and then calls this,
/// so a file and code can never disagree about what is valid. It refuses what no file can
/// express, too: an untrimmed or blank name, a keyword or an untrimmed name in a list, a blank
/// model. The checks:
///
/// * `name`: non-blank, with no white space around it;
/// * `tools`, `disallowed_tools`, `allowed_subagents`: every listed name trimmed, non-blank
///   and not a keyword ([`ListField::check_names`]);
/// * `model`: when set, non-blank with no white space around it, and not `inherit` (a file's
///   word for the tree's default: leave the model out);
/// * `max_turns`: when set, at least 1;
/// * `restart_period_ms`: at least 1;
/// * `node`: when set, non-blank with no white space around it and no `@`
///   (ractor_cluster's `name@host`).
pub(crate) fn check(definition: &AgentDefinition) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    let mut refuse = |field: &'static str, message: String| {
        refusals.push(Refusal { field, message });
    };
    let name = &definition.name;
    if name.trim().is_empty() {
        refuse("name", format!("expected a non-blank name, found {name:?}"));
    } else if name.trim() != name {
        refuse(
            "name",
            format!("expected a name without white space around it, found {name:?}"),
        );
    } else if name.chars().any(char::is_control) {
        // A line break or a NUL in a name breaks every prompt and log line it is written in.
        refuse(
            "name",
            format!("expected a name without control characters, found {name:?}"),
        );
    }
    let lists: [(ListField, &[String]); 3] = [
        (
            ListField::Tools,
            match &definition.tools {
                ToolSet::Only(names) => names,
                ToolSet::All | ToolSet::None => &[],
            },
        ),
        (ListField::DisallowedTools, &definition.disallowed_tools),
        (
            ListField::AllowedSubagents,
            match &definition.allowed_subagents {
                SubagentAllowance::Only(names) => names,
                SubagentAllowance::All | SubagentAllowance::None => &[],
            },
        ),
    ];
    for (field, names) in lists {
        if let Err(e) = field.check_names(names) {
            refuse(field.name(), e.to_string());
        }
    }
    if let Some(model) = &definition.model {
        if model.trim().is_empty() || model.trim() != model {
            refuse(
                "model",
                format!(
                    "expected a model name without white space around it, found {model:?} \
                     (leave the model out for the tree's default)"
                ),
            );
        } else if model.eq_ignore_ascii_case("inherit") {
            // A file's `model: inherit` is the tree's default; the same word from JSON or code
            // must not reach a provider as a model name.
            refuse(
                "model",
                format!(
                    "expected a model name, found {model:?}, which means the tree's default \
                     (leave the model out)"
                ),
            );
        }
    }
    if definition.max_turns == Some(0) {
        refuse("max_turns", "expected a positive integer, found 0".into());
    }
    if let Err(e) = definition.sampling.check() {
        refuse(e.field, e.problem);
    }
    if definition.restart_period_ms == 0 {
        refuse(
            "restart_period_ms",
            "expected a positive integer, found 0".into(),
        );
    }
    if let Some(node) = &definition.node {
        if node.trim().is_empty() || node.trim() != node || node.contains('@') {
            refuse(
                "node",
                format!("expected a node name (no white space around it, no '@'), found {node:?}"),
            );
        }
    }
    refusals
}

/// One problem as itself, several as one [`CatalogError::Many`], none as `None`.
fn combine(mut errors: Vec<CatalogError>) -> Option<CatalogError> {
    match errors.len() {
        0 => None,
        1 => errors.pop(),
        _ => Some(CatalogError::Many(errors)),
    }
}

/// An immutable, checked set of agent definitions. Cheap to clone.
///
/// ```
/// use agent_tree_actors::Catalog;
/// use agent_tree_protocol::AgentDefinition;
/// let catalog = Catalog::new([
///     AgentDefinition::new("writer", "You write."),
///     AgentDefinition::new("Reviewer", "You review."),
/// ]).unwrap();
/// assert_eq!(catalog.resolve("reviewer").unwrap().name, "Reviewer");
/// assert!(catalog.resolve("wrtier").is_err());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    inner: Arc<CatalogInner>,
}

#[derive(Debug, Default)]
struct CatalogInner {
    /// Definitions in the order they were given.
    definitions: Vec<Arc<AgentDefinition>>,
    /// Exact name → index.
    by_name: HashMap<String, usize>,
}

impl Catalog {
    /// Checks and collects `definitions`.
    ///
    /// Every definition passes the same check an agent file's does: a non-blank name without
    /// white space around it, unique in the catalog; `max_turns` and `restart_period_ms` at
    /// least 1; listed tool and type names trimmed, non-blank and never a keyword (`all`,
    /// `*`, `none`, `true`, `false`, in any case); a set `model` non-blank and not `inherit`.
    ///
    /// ```
    /// use agent_tree_actors::{Catalog, CatalogError};
    /// use agent_tree_protocol::{AgentDefinition, Strategy};
    /// let catalog = Catalog::new([AgentDefinition::new("writer", "You write.")])?;
    /// assert_eq!(catalog.len(), 1);
    ///
    /// let err = Catalog::new([
    ///     AgentDefinition::new(" ", ""),
    ///     AgentDefinition::new("critic", "").with_supervision(Strategy::OneForOne, 3, 0),
    /// ])
    /// .unwrap_err();
    /// let CatalogError::Many(problems) = err else { panic!("two problems") };
    /// assert!(matches!(problems[0], CatalogError::Definition { field: "name", .. }));
    /// assert!(matches!(problems[1], CatalogError::Definition { field: "restart_period_ms", .. }));
    /// # Ok::<(), CatalogError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`CatalogError::Definition`] for each refused field of each definition, naming the
    /// definition and the field; [`CatalogError::Duplicate`] for a name given twice. Several
    /// problems come as one [`CatalogError::Many`], in the order of the definitions.
    pub fn new(
        definitions: impl IntoIterator<Item = AgentDefinition>,
    ) -> Result<Self, CatalogError> {
        let mut inner = CatalogInner::default();
        let mut errors = Vec::new();
        for mut definition in definitions {
            // Claude Code's `Agent(...)` entries in `tools` against the allowance as it
            // stands: the readers (files, serde) made them the allowance where none was
            // written, so this only checks, and never undoes a written `none`; a definition
            // built in code writes its own.
            let entries = definition.apply_delegation_entries_beside(true);
            if let Err(e) = &entries {
                errors.push(CatalogError::Definition {
                    name: definition.name.clone(),
                    field: "tools",
                    message: e.to_string(),
                });
            }
            let refusals = check(&definition);
            if entries.is_err() || !refusals.is_empty() {
                errors.extend(refusals.into_iter().map(|r| CatalogError::Definition {
                    name: definition.name.clone(),
                    field: r.field,
                    message: r.message,
                }));
                continue;
            }
            if inner.by_name.contains_key(&definition.name) {
                errors.push(CatalogError::Duplicate(definition.name));
                continue;
            }
            inner
                .by_name
                .insert(definition.name.clone(), inner.definitions.len());
            inner.definitions.push(Arc::new(definition));
        }
        match combine(errors) {
            Some(error) => Err(error),
            None => Ok(Catalog {
                inner: Arc::new(inner),
            }),
        }
    }

    /// Every definition, in the order given.
    pub fn definitions(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.inner.definitions.iter().map(|d| d.as_ref())
    }

    /// The definition named exactly `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<AgentDefinition>> {
        self.inner
            .by_name
            .get(name)
            .map(|&i| &self.inner.definitions[i])
    }

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.inner.definitions.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.definitions.is_empty()
    }

    /// Every tool name of every definition (in `tools` and `disallowed_tools`) that gives no
    /// tool against the registered user tools `registered`: names matching no tool, and names
    /// matching several ignoring case and none exactly. In definition order, then field order.
    ///
    /// Orchestration tool names (`Agent`, `ask_owner`, ...) are never problems: the tree adds
    /// those tools by its own rule. A tree logs these problems as warnings when it is built;
    /// call this to act on them (refuse to start, show them to a user).
    ///
    /// ```
    /// use agent_tree_actors::{Catalog, ToolProblem};
    /// use agent_tree_protocol::{AgentDefinition, ToolSet};
    /// let catalog = Catalog::new([
    ///     AgentDefinition::new("a", "").with_tools(ToolSet::only(["Read", "Agent"])),
    ///     AgentDefinition::new("b", "").with_tools(ToolSet::only(["Bash"])),
    /// ])?;
    /// assert!(catalog.tool_problems(["read", "bash"]).is_empty());
    /// let problems = catalog.tool_problems(["bash", "BASH", "read"]);
    /// assert!(matches!(&problems[..], [ToolProblem::Ambiguous { agent_type, .. }] if agent_type == "b"));
    /// # Ok::<(), agent_tree_actors::CatalogError>(())
    /// ```
    pub fn tool_problems<'a>(
        &self,
        registered: impl IntoIterator<Item = &'a str>,
    ) -> Vec<ToolProblem> {
        let registered: Vec<&str> = registered.into_iter().collect();
        self.definitions()
            .flat_map(|d| tool_problems_of(d, &registered))
            .collect()
    }

    /// Resolves `requested` strictly: exact name, else one ASCII-case-insensitive match.
    ///
    /// # Errors
    ///
    /// Blank, unknown (listing every enabled type), ambiguous or disabled names.
    pub fn resolve(&self, requested: &str) -> Result<&Arc<AgentDefinition>, SpawnError> {
        self.resolve_among(requested, |_| true)
    }

    /// Resolves `requested` for a caller whose `allowed_subagents` is given by `caller`;
    /// errors list only the types the caller may reach, and the allowlist is checked again
    /// on the resolved name.
    ///
    /// Each allowlist entry names a type by the rule requested names follow: the exact name,
    /// else the one case-insensitive match in this catalog. So `[Reviewer]` permits a type
    /// `reviewer`; an entry matching several types case-insensitively, and none exactly,
    /// permits none of them.
    ///
    /// ```
    /// use agent_tree_actors::Catalog;
    /// use agent_tree_protocol::{AgentDefinition, SubagentAllowance};
    /// let catalog = Catalog::new([
    ///     AgentDefinition::new("reviewer", "You review."),
    ///     AgentDefinition::new("writer", "You write."),
    /// ])?;
    /// let lead = AgentDefinition::new("lead", "You lead.")
    ///     .with_allowed_subagents(SubagentAllowance::only(["Reviewer"]));
    /// assert_eq!(catalog.resolve_for(&lead, "reviewer")?.name, "reviewer");
    /// assert!(catalog.resolve_for(&lead, "writer").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Catalog::resolve`], plus [`SpawnError::NotAllowed`] when the caller's allowlist
    /// does not name the resolved type.
    pub fn resolve_for(
        &self,
        caller: &AgentDefinition,
        requested: &str,
    ) -> Result<&Arc<AgentDefinition>, SpawnError> {
        let allowance = &caller.allowed_subagents;
        let definition = self.resolve_among(requested, |d| self.permits(allowance, d))?;
        if !self.permits(allowance, definition) {
            return Err(SpawnError::NotAllowed {
                requested: definition.name.clone(),
                allowed: self.reachable(|d| self.permits(allowance, d)),
            });
        }
        Ok(definition)
    }

    /// Whether `allowance` names `definition`, each entry resolved in this catalog.
    fn permits(&self, allowance: &SubagentAllowance, definition: &AgentDefinition) -> bool {
        match allowance {
            SubagentAllowance::None => false,
            SubagentAllowance::All => true,
            SubagentAllowance::Only(entries) => entries.iter().any(|entry| {
                matches!(self.lookup(entry.trim()), Lookup::Found(d) if d.name == definition.name)
            }),
        }
    }

    /// The enabled types `caller` may spawn, in catalog order: what its `Agent` tool lists.
    pub(crate) fn reachable_for(&self, caller: &AgentDefinition) -> Vec<&Arc<AgentDefinition>> {
        let allowance = &caller.allowed_subagents;
        self.reachable_definitions(|d| self.permits(allowance, d))
    }

    /// The address of the catalog's shared contents: equal for clones of one catalog.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// The enabled definitions `reachable` admits, in catalog order.
    fn reachable_definitions(
        &self,
        reachable: impl Fn(&AgentDefinition) -> bool,
    ) -> Vec<&Arc<AgentDefinition>> {
        self.inner
            .definitions
            .iter()
            .filter(|d| d.enabled && reachable(d))
            .collect()
    }

    /// Their names, for error messages.
    fn reachable(&self, reachable: impl Fn(&AgentDefinition) -> bool) -> Vec<String> {
        self.reachable_definitions(reachable)
            .into_iter()
            .map(|d| d.name.clone())
            .collect()
    }

    /// The definition `name` denotes: the exact name, else the one case-insensitive match.
    /// Enabled or not.
    fn lookup(&self, name: &str) -> Lookup<'_> {
        if let Some(exact) = self.get(name) {
            return Lookup::Found(exact);
        }
        // ASCII case only: Unicode folding would let confusables (the Kelvin sign `K`
        // lower-cases to `k`) resolve to a type whose name the model never wrote.
        let mut matches = self
            .inner
            .definitions
            .iter()
            .filter(|d| d.name.eq_ignore_ascii_case(name));
        match (matches.next(), matches.next()) {
            (Some(one), None) => Lookup::Found(one),
            (Some(first), Some(second)) => {
                Lookup::Ambiguous([first, second].into_iter().chain(matches).collect())
            }
            (None, _) => Lookup::Missing,
        }
    }

    fn resolve_among(
        &self,
        requested: &str,
        reachable: impl Fn(&AgentDefinition) -> bool,
    ) -> Result<&Arc<AgentDefinition>, SpawnError> {
        let requested = requested.trim();
        if requested.is_empty() {
            return Err(SpawnError::BlankType);
        }
        let unknown = || SpawnError::UnknownType {
            requested: requested.to_owned(),
            available: self.reachable(&reachable),
        };
        let found = match self.lookup(requested) {
            Lookup::Found(found) => found,
            Lookup::Ambiguous(all) => {
                // Name only the candidates the caller may reach.
                let candidates: Vec<String> = all
                    .into_iter()
                    .filter(|d| reachable(d))
                    .map(|d| d.name.clone())
                    .collect();
                if candidates.is_empty() {
                    return Err(unknown());
                }
                return Err(SpawnError::AmbiguousType {
                    requested: requested.to_owned(),
                    candidates,
                });
            }
            Lookup::Missing => return Err(unknown()),
        };
        if !found.enabled {
            // A disabled type the caller could not reach anyway is reported as unknown, so
            // errors never reveal types outside the caller's reach.
            if !reachable(found) {
                return Err(unknown());
            }
            return Err(SpawnError::DisabledType(found.name.clone()));
        }
        Ok(found)
    }
}

/// What a name denotes in a catalog.
enum Lookup<'a> {
    /// One definition: the exact name, or the only case-insensitive match.
    Found(&'a Arc<AgentDefinition>),
    /// Several case-insensitive matches and no exact one.
    Ambiguous(Vec<&'a Arc<AgentDefinition>>),
    /// No match.
    Missing,
}

#[cfg(test)]
mod tests;
