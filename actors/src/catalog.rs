//! Catalogs: the immutable set of agent types a branch resolves names in.
//!
//! # Invariants
//!
//! * A catalog never changes after it is built; a branch keeps the catalog (an `Arc`) it
//!   started with, so a child resolves types where its owner did, never in a process-global
//!   table.
//! * Every definition in it was checked once ([`Catalog::new`]): non-blank, unique names.
//! * Resolution is strict ([`Catalog::resolve`]): an exact name wins, else exactly one
//!   case-insensitive match; blank, unknown, disabled and ambiguous names are refused, and no
//!   fallback type is ever substituted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use agent_tree_protocol::AgentDefinition;

use crate::error::SpawnError;

mod load;
pub use load::parse_agent_file;

/// A definition that could not enter a catalog.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// A definition has a blank name.
    #[error("agent definition has a blank name")]
    BlankName,
    /// Two definitions have the same name.
    #[error("agent type {0:?} is defined twice")]
    Duplicate(String),
    /// A field of an agent file is malformed.
    #[error("{}: field `{field}`: {message}", .file.display())]
    Field {
        /// The file.
        file: PathBuf,
        /// The frontmatter field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// An agent file could not be read or has no frontmatter.
    #[error("{}: {message}", .file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Several files were malformed; every error is kept.
    #[error("{} problems in agent files:\n{}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Many(Vec<CatalogError>),
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
    /// # Errors
    ///
    /// [`CatalogError::BlankName`] or [`CatalogError::Duplicate`].
    pub fn new(
        definitions: impl IntoIterator<Item = AgentDefinition>,
    ) -> Result<Self, CatalogError> {
        let mut inner = CatalogInner::default();
        for definition in definitions {
            let name = definition.name.trim();
            if name.is_empty() {
                return Err(CatalogError::BlankName);
            }
            if name != definition.name {
                return Err(CatalogError::Field {
                    file: PathBuf::from(format!("<definition {:?}>", definition.name)),
                    field: "name".into(),
                    message: "leading or trailing white space".into(),
                });
            }
            if inner.by_name.contains_key(name) {
                return Err(CatalogError::Duplicate(definition.name));
            }
            inner
                .by_name
                .insert(definition.name.clone(), inner.definitions.len());
            inner.definitions.push(Arc::new(definition));
        }
        Ok(Catalog {
            inner: Arc::new(inner),
        })
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

    /// Resolves `requested` strictly: exact name, else one case-insensitive match.
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
    /// # Errors
    ///
    /// As [`Catalog::resolve`], plus [`SpawnError::NotAllowed`] and
    /// [`SpawnError::NoDelegation`] when the caller may not delegate to the resolved type.
    pub fn resolve_for(
        &self,
        caller: &AgentDefinition,
        requested: &str,
    ) -> Result<&Arc<AgentDefinition>, SpawnError> {
        let allowance = &caller.allowed_subagents;
        let definition = self.resolve_among(requested, |d| allowance.permits(&d.name))?;
        if !allowance.permits(&definition.name) {
            return Err(SpawnError::NotAllowed {
                requested: definition.name.clone(),
                allowed: self.reachable(|d| allowance.permits(&d.name)),
            });
        }
        Ok(definition)
    }

    fn reachable(&self, reachable: impl Fn(&AgentDefinition) -> bool) -> Vec<String> {
        self.definitions()
            .filter(|d| d.enabled && reachable(d))
            .map(|d| d.name.clone())
            .collect()
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
        let found = match self.get(requested) {
            Some(exact) => exact,
            None => {
                let lower = requested.to_lowercase();
                let mut matches = self
                    .inner
                    .definitions
                    .iter()
                    .filter(|d| d.name.to_lowercase() == lower);
                match (matches.next(), matches.next()) {
                    (Some(one), None) => one,
                    (Some(first), Some(second)) => {
                        // Name only the candidates the caller may reach.
                        let candidates: Vec<String> = [first, second]
                            .into_iter()
                            .chain(matches)
                            .filter(|d| reachable(d))
                            .map(|d| d.name.clone())
                            .collect();
                        if candidates.is_empty() {
                            return Err(SpawnError::UnknownType {
                                requested: requested.to_owned(),
                                available: self.reachable(&reachable),
                            });
                        }
                        return Err(SpawnError::AmbiguousType {
                            requested: requested.to_owned(),
                            candidates,
                        });
                    }
                    (None, _) => {
                        return Err(SpawnError::UnknownType {
                            requested: requested.to_owned(),
                            available: self.reachable(&reachable),
                        });
                    }
                }
            }
        };
        if !found.enabled {
            // A disabled type the caller could not reach anyway is reported as unknown, so
            // errors never reveal types outside the caller's reach.
            if !reachable(found) {
                return Err(SpawnError::UnknownType {
                    requested: requested.to_owned(),
                    available: self.reachable(&reachable),
                });
            }
            return Err(SpawnError::DisabledType(found.name.clone()));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::SubagentAllowance;

    use super::*;

    fn catalog() -> Catalog {
        Catalog::new([
            AgentDefinition::new("writer", ""),
            AgentDefinition::new("Writer", ""),
            AgentDefinition::new("Reviewer", ""),
            AgentDefinition::new("old", "").with_enabled(false),
            AgentDefinition::new("general-purpose", ""),
        ])
        .unwrap()
    }

    #[test]
    fn exact_wins_then_unique_case_insensitive() {
        let c = catalog();
        assert_eq!(c.resolve("Writer").unwrap().name, "Writer");
        assert_eq!(c.resolve("writer").unwrap().name, "writer");
        assert_eq!(c.resolve("REVIEWER").unwrap().name, "Reviewer");
    }

    #[test]
    fn blank_unknown_disabled_and_ambiguous_are_refused() {
        let c = catalog();
        assert_eq!(c.resolve("  "), Err(SpawnError::BlankType));
        assert!(matches!(
            c.resolve("WRITER"),
            Err(SpawnError::AmbiguousType { .. })
        ));
        assert!(matches!(c.resolve("old"), Err(SpawnError::DisabledType(_))));
        // No fallback: an unknown name never resolves to general-purpose.
        assert!(matches!(
            c.resolve("wrtier"),
            Err(SpawnError::UnknownType { .. })
        ));
    }

    #[test]
    fn errors_list_only_reachable_types() {
        let c = catalog();
        let caller = AgentDefinition::new("boss", "")
            .with_allowed_subagents(SubagentAllowance::only(["Reviewer"]));
        let err = c.resolve_for(&caller, "nobody").unwrap_err();
        assert_eq!(
            err,
            SpawnError::UnknownType {
                requested: "nobody".into(),
                available: vec!["Reviewer".into()]
            }
        );
        let err = c.resolve_for(&caller, "writer").unwrap_err();
        assert!(
            matches!(err, SpawnError::NotAllowed { ref allowed, .. } if allowed == &["Reviewer"])
        );
        assert!(matches!(
            c.resolve_for(&caller, "old"),
            Err(SpawnError::UnknownType { .. })
        ));
    }

    #[test]
    fn duplicates_and_blank_names_are_refused() {
        assert_eq!(
            Catalog::new([AgentDefinition::new("a", ""), AgentDefinition::new("a", "")])
                .unwrap_err(),
            CatalogError::Duplicate("a".into())
        );
        assert_eq!(
            Catalog::new([AgentDefinition::new(" ", "")]).unwrap_err(),
            CatalogError::BlankName
        );
    }
}
