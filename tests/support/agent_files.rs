//! Shared helpers of the agent-file and definition tests: a file around a frontmatter, its
//! parse, a JSON definition's read, and the fields a catalog error names.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;

use agent_tree::prelude::*;
use agent_tree::{CatalogError, parse_agent_file};

/// An agent file with `frontmatter` and the prompt `You work.`.
pub fn file(frontmatter: &str) -> String {
    format!("---\n{frontmatter}\n---\nYou work.\n")
}

/// [`file`] parsed as `agents/lead.md`.
pub fn parse(frontmatter: &str) -> Result<AgentDefinition, CatalogError> {
    parse_agent_file(Path::new("agents/lead.md"), &file(frontmatter))
}

/// A definition read from JSON through serde, its error as text.
pub fn json(text: &str) -> Result<AgentDefinition, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// The fields a (possibly combined) catalog error names.
pub fn fields_of(err: &CatalogError) -> Vec<String> {
    match err {
        CatalogError::Many(all) => all.iter().flat_map(fields_of).collect(),
        CatalogError::Field { field, .. } => vec![field.clone()],
        _ => vec![],
    }
}
