//! Small catalogs several behaviour modules share: a triage desk (`triage` delegating to
//! `billing` and `tech`) and a lone worker; and a tool result read as JSON.

use crate::support::catalog;
use agent_tree::prelude::*;
use serde_json::Value;

/// A triage desk: `triage` may spawn `billing` and `tech`.
pub(crate) fn triage_catalog() -> Catalog {
    catalog([
        AgentDefinition::new("triage", "You route support tickets.")
            .with_allowed_subagents(SubagentAllowance::only(["billing", "tech"])),
        AgentDefinition::new("billing", "You handle billing."),
        AgentDefinition::new("tech", "You handle technical issues."),
    ])
}

/// A tool result's content read as JSON, failing the test with the content if it is not.
pub(crate) fn tool_json(content: &str) -> Value {
    serde_json::from_str(content).unwrap_or_else(|e| panic!("not JSON ({e}): {content}"))
}

/// A catalog of one plain agent type, `w`.
pub(crate) fn one_worker() -> Catalog {
    catalog([AgentDefinition::new("w", "")])
}
