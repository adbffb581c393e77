//! Snapshots: the authoritative record of every agent of a tree, and its renderings.
//!
//! # Invariants
//!
//! * A snapshot holds every agent the tree ever admitted, live or finished, in id order, the
//!   root (`a0`, depth 0) first. Records are never removed.
//! * `children` lists are in start order and agree with every child's `parent`.
//! * At quiescence, for every record, `subtree == own + Σ children.subtree`
//!   ([`TreeSnapshot::check_usage`]).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::EventTally;
use crate::ids::{AgentId, RequestId, SessionId};
use crate::outcome::Outcome;
use crate::status::AgentStatus;
use crate::usage::Usage;

/// The registry's record of one agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRecord {
    /// The agent's id.
    pub id: AgentId,
    /// Its type (`root` for the tree itself).
    pub agent_type: String,
    /// Depth: root 0, top-level 1.
    pub depth: u32,
    /// Its owner (`None` for the root).
    pub parent: Option<AgentId>,
    /// Its children in start order.
    #[serde(default)]
    pub children: Vec<AgentId>,
    /// Its status.
    pub status: AgentStatus,
    /// Usage of its own model turns.
    pub own: Usage,
    /// `own` plus every descendant's `own`.
    pub subtree: Usage,
    /// How many times it has been started (1 for the first run).
    pub incarnation: u32,
    /// The spawn's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
    /// Whether it is detached from ordinary abort cascades.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detached: bool,
    /// When it was admitted, in ms since the tree started.
    pub created_ms: u64,
    /// When its actor started, in ms since the tree started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// When it became terminal, in ms since the tree started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// Its outcome, once terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl AgentRecord {
    /// The root's record as every tree (and every [`Fold`](crate::Fold)) starts: `a0`, type
    /// `root`, depth 0, running since 0 ms.
    ///
    /// ```
    /// use agent_tree_protocol::{AgentId, AgentRecord};
    /// assert_eq!(AgentRecord::root().id, AgentId::ROOT);
    /// ```
    pub fn root() -> Self {
        AgentRecord {
            id: AgentId::ROOT,
            agent_type: "root".into(),
            depth: 0,
            parent: None,
            children: Vec::new(),
            status: AgentStatus::Running,
            own: Usage::ZERO,
            subtree: Usage::ZERO,
            incarnation: 1,
            request_id: None,
            detached: false,
            created_ms: 0,
            started_ms: Some(0),
            ended_ms: None,
            outcome: None,
        }
    }
}

/// Every record of a tree at one moment, plus its event tally.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeSnapshot {
    /// The tree's session.
    pub session: SessionId,
    /// When the snapshot was taken, in ms since the tree started.
    pub taken_ms: u64,
    /// Every record, in id order, the root first. Shared with the registry that took the
    /// snapshot (a snapshot costs a reference per record, not a copy); the registry copies a
    /// record only when it changes while a snapshot still holds it.
    pub records: Vec<Arc<AgentRecord>>,
    /// Events emitted so far, by kind.
    pub tally: EventTally,
    /// The most agents (depth ≥ 1) that were live at once.
    pub peak_live: usize,
}

/// A record whose usage does not add up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("usage of {agent} does not add up: subtree {subtree} != own {own} + children {children}")]
pub struct UsageMismatch {
    /// The record.
    pub agent: AgentId,
    /// Its subtree usage.
    pub subtree: Usage,
    /// Its own usage.
    pub own: Usage,
    /// The sum of its children's subtree usage.
    pub children: Usage,
}

impl TreeSnapshot {
    /// The record of `id`.
    pub fn record(&self, id: AgentId) -> Option<&AgentRecord> {
        // Ids are dense from a0 in the registry, so the index is the id; fall back to a search
        // for snapshots assembled by hand.
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.records.get(i))
            .filter(|r| r.id == id)
            .or_else(|| self.records.iter().find(|r| r.id == id))
            .map(|r| &**r)
    }

    /// The root record.
    pub fn root(&self) -> Option<&AgentRecord> {
        self.record(AgentId::ROOT)
    }

    /// Records of agents (depth ≥ 1): every record but the root's ([`root`](Self::root)).
    pub fn agents(&self) -> impl Iterator<Item = &AgentRecord> {
        self.records.iter().map(|r| &**r).filter(|r| r.depth > 0)
    }

    /// Agents not yet terminal.
    pub fn live(&self) -> usize {
        self.agents().filter(|r| r.status.is_live()).count()
    }

    /// How many agents sit at each depth ≥ 1.
    pub fn depth_histogram(&self) -> BTreeMap<u32, usize> {
        let mut histogram = BTreeMap::new();
        for record in self.agents() {
            *histogram.entry(record.depth).or_insert(0) += 1;
        }
        histogram
    }

    /// The histogram as text: `d1=1 d2=1 d3=2 d4=7`.
    pub fn depth_histogram_line(&self) -> String {
        let mut line = String::new();
        for (depth, count) in self.depth_histogram() {
            if !line.is_empty() {
                line.push(' ');
            }
            let _ = write!(line, "d{depth}={count}");
        }
        line
    }

    /// Sum of every record's own usage.
    pub fn total_own(&self) -> Usage {
        self.records.iter().map(|r| r.own).sum()
    }

    /// Checks `subtree == own + Σ children.subtree` for every record, that children lists
    /// agree with parents, and that the root's subtree equals the sum of all own usage.
    ///
    /// # Errors
    ///
    /// The first [`UsageMismatch`] found (boxed: it carries three usages).
    pub fn check_usage(&self) -> Result<(), Box<UsageMismatch>> {
        let mismatch = |r: &AgentRecord, children: Usage| {
            Box::new(UsageMismatch {
                agent: r.id,
                subtree: r.subtree,
                own: r.own,
                children,
            })
        };
        for record in &self.records {
            let mut children = Usage::ZERO;
            for &child in &record.children {
                match self.record(child) {
                    Some(c) if c.parent == Some(record.id) => children += c.subtree,
                    _ => return Err(mismatch(record, children)),
                }
            }
            if record.subtree != record.own + children {
                return Err(mismatch(record, children));
            }
        }
        match self.root() {
            Some(root) if root.subtree != self.total_own() => Err(mismatch(root, self.total_own())),
            _ => Ok(()),
        }
    }

    /// Records in depth-first start order (the order of the text rendering). Each record
    /// appears at most once, even in a (malformed) snapshot whose children lists loop.
    pub fn depth_first(&self) -> Vec<&AgentRecord> {
        let mut out = Vec::with_capacity(self.records.len());
        // Records are visited by their place in `records` (a registry's ids are dense from
        // a0, so the place is the id; a hand-made snapshot falls back to a map), and a bitmap
        // of places marks the ones seen: linear, whatever the order of the ids.
        let dense = self
            .records
            .iter()
            .enumerate()
            .all(|(i, r)| usize::try_from(r.id.get()).is_ok_and(|id| id == i));
        let places: std::collections::HashMap<AgentId, usize> = if dense {
            std::collections::HashMap::new()
        } else {
            self.records
                .iter()
                .enumerate()
                .rev()
                .map(|(i, r)| (r.id, i))
                .collect()
        };
        let place = |id: AgentId| -> Option<usize> {
            if dense {
                usize::try_from(id.get())
                    .ok()
                    .filter(|&i| i < self.records.len())
            } else {
                places.get(&id).copied()
            }
        };
        let mut seen = vec![false; self.records.len()];
        let mut stack: Vec<usize> = self
            .records
            .iter()
            .filter(|r| r.parent.is_none())
            .filter_map(|r| place(r.id))
            .rev()
            .collect();
        while let Some(at) = stack.pop() {
            if std::mem::replace(&mut seen[at], true) {
                continue;
            }
            let record = &*self.records[at];
            out.push(record);
            stack.extend(record.children.iter().rev().filter_map(|&c| place(c)));
        }
        out
    }

    /// The text rendering: a header, one line per agent indented by depth, the depth
    /// histogram, the event tally and the peak of live agents.
    ///
    /// ```text
    /// tree agents=2 live=0 usage=0/300
    /// - [d1] planner #a1 parent=a0 status=completed usage=120/300
    ///   - [d2] analyst #a2 parent=a1 status=completed usage=180/180
    /// depth histogram: d1=1 d2=1
    /// event tally: started=2 completed=2 ...
    /// max concurrent agents: 2
    /// ```
    ///
    /// `usage=own/subtree` counts every token ([`Usage::total_tokens`]): input, cache read,
    /// cache write and output, so an agent whose prompts are served from a cache shows the
    /// prompt it was sent, as the provider counted it.
    ///
    /// ```
    /// use agent_tree_protocol::{AgentRecord, EventTally, SessionId, TreeSnapshot, Usage};
    /// let mut root = AgentRecord::root();
    /// root.subtree = Usage::tokens(10, 5).with_cache_read(80).with_cache_write(5);
    /// let snapshot = TreeSnapshot {
    ///     session: SessionId::new("s"),
    ///     taken_ms: 0,
    ///     records: vec![root.into()],
    ///     tally: EventTally::default(),
    ///     peak_live: 0,
    /// };
    /// assert!(snapshot.render_text().starts_with("tree agents=0 live=0 usage=0/100\n"));
    /// ```
    ///
    /// The rendering is deterministic: it holds only what the tree did, never the session id
    /// (random unless set) or the time the snapshot was taken, so two identical runs render
    /// the same text and a rendering can be compared with a golden file. Both stay in the
    /// snapshot itself (and its JSON).
    ///
    /// ```
    /// use agent_tree_protocol::{SessionId, TreeSnapshot, Wire};
    /// let json = r#"{"session": "s-one", "taken_ms": 5, "records": [], "tally": {}, "peak_live": 0}"#;
    /// let one = TreeSnapshot::from_json(json)?;
    /// let other = TreeSnapshot { session: SessionId::new("s-other"), taken_ms: 9, ..one.clone() };
    /// assert_eq!(one.render_text(), other.render_text());
    /// assert!(one.render_text().starts_with("tree agents=0 live=0 usage=0/0\n"));
    /// # Ok::<(), agent_tree_protocol::ProtocolError>(())
    /// ```
    pub fn render_text(&self) -> String {
        self.to_string()
    }

    /// A Graphviz DOT rendering of the tree; `own=` and `subtree=` count every token, as the
    /// text rendering does.
    pub fn to_dot(&self) -> String {
        let mut dot = String::from("digraph agent_tree {\n  node [shape=box];\n");
        for r in &self.records {
            let label = format!(
                "{} {}\\n{} d{}\\nown={} subtree={}",
                r.agent_type,
                r.id,
                r.status,
                r.depth,
                tokens(&r.own),
                tokens(&r.subtree)
            );
            let _ = writeln!(dot, "  {} [label=\"{}\"];", r.id, escape_dot(&label));
        }
        for r in &self.records {
            for child in &r.children {
                let _ = writeln!(dot, "  {} -> {};", r.id, child);
            }
        }
        dot.push_str("}\n");
        dot
    }
}

/// The deepest indentation the text rendering uses.
const MAX_INDENT: u32 = 64;

/// The tokens a rendering shows for `usage`: every one of them.
fn tokens(usage: &Usage) -> u64 {
    usage.total_tokens()
}

fn escape_dot(s: &str) -> String {
    // Keep the `\n` line breaks we put in ourselves; escape quotes a type name might hold.
    s.replace('"', "\\\"")
}

impl fmt::Display for TreeSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let agents = self.agents().count();
        let (root_own, root_subtree) = self
            .root()
            .map(|r| (tokens(&r.own), tokens(&r.subtree)))
            .unwrap_or_default();
        // No session id and no time: the text must be the same for two identical runs.
        writeln!(
            f,
            "tree agents={agents} live={} usage={root_own}/{root_subtree}",
            self.live()
        )?;
        for r in self.depth_first().into_iter().filter(|r| r.depth > 0) {
            // Capped so a decoded snapshot with an absurd depth cannot exhaust memory.
            let indent = "  ".repeat(r.depth.saturating_sub(1).min(MAX_INDENT) as usize);
            write!(
                f,
                "{indent}- [d{}] {} #{} parent={} status={} usage={}/{}",
                r.depth,
                r.agent_type,
                r.id,
                r.parent
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "-".into()),
                r.status,
                tokens(&r.own),
                tokens(&r.subtree)
            )?;
            if r.incarnation > 1 {
                write!(f, " incarnation={}", r.incarnation)?;
            }
            if r.detached {
                f.write_str(" detached")?;
            }
            f.write_str("\n")?;
        }
        writeln!(f, "depth histogram: {}", self.depth_histogram_line())?;
        writeln!(f, "event tally: {}", self.tally)?;
        writeln!(f, "max concurrent agents: {}", self.peak_live)
    }
}
