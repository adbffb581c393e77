//! Probe children: sub-agents whose answers the test gives, so a test scripts what a child
//! "returns" without a model behind it.
//!
//! [`probe_children`] wraps the tree's model: calls of agents of the probed types go to the
//! test's [`ChildProbe`], every other call to the wrapped model. A probed child is still a
//! real agent (spawned, linked under its owner, recorded, billed, aborted and shut down like
//! any other), so the agent under test meets the real orchestration; only its turns are the
//! test's.
//!
//! # Invariants
//!
//! * As for [`pair`](super::pair): every probed call reaches the probe in the order made and
//!   is answered at most once; one dropped unanswered or never taken fails the test, naming
//!   the child and its turn.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use agent_tree_protocol::{AgentId, Role, ToolCall, Usage};

use super::driven::{DrivenModel, ModelHandle, PendingTurn, pair};
use crate::error::ModelError;
use crate::model::{Model, ModelRequest, ModelResponse};
use crate::tool::ASK_OWNER_TOOL;
use crate::util::BoxFuture;

/// A model for the tree, and the probe that answers the probed types' calls.
///
/// ```
/// use agent_tree_actors::testkit::{probe_children, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest, SubagentAllowance, Usage};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let lead = ScriptedModel::new().script("lead", Script::new([
///     Turn::spawn("checker", "is 2 + 2 = 4?"),
///     Turn::answer("verified"),
/// ]));
/// let (model, mut checkers) = probe_children(lead, ["checker"]);
/// let catalog = Catalog::new([
///     AgentDefinition::new("lead", "").with_allowed_subagents(SubagentAllowance::only(["checker"])),
///     AgentDefinition::new("checker", ""),
/// ]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
///
/// let checker = checkers.expect_spawn().await;
/// assert_eq!(checker.prompt(), "is 2 + 2 = 4?");
/// checker.returns("yes", Usage::tokens(5, 1));
/// assert_eq!(lead.outcome().await.text.as_deref(), Some("verified"));
/// # });
/// ```
pub fn probe_children<'a>(
    inner: impl Model,
    types: impl IntoIterator<Item = &'a str>,
) -> (ProbedModel, ChildProbe) {
    let (driven, handle) = pair();
    (
        ProbedModel {
            inner: Arc::new(inner),
            driven,
            types: Arc::new(types.into_iter().map(str::to_owned).collect()),
        },
        ChildProbe {
            handle,
            started: HashSet::new(),
        },
    )
}

/// The model half of [`probe_children`]: probed types' calls go to the [`ChildProbe`], the
/// rest to the wrapped model.
#[derive(Clone)]
pub struct ProbedModel {
    inner: Arc<dyn Model>,
    driven: DrivenModel,
    types: Arc<HashSet<String>>,
}

impl fmt::Debug for ProbedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbedModel")
            .field("types", &self.types)
            .finish_non_exhaustive()
    }
}

impl Model for ProbedModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if self.types.contains(request.agent_type()) {
            self.driven.turn(request)
        } else {
            self.inner.turn(request)
        }
    }
}

/// The test's half of [`probe_children`]: the probed children's model calls, in order.
#[derive(Debug)]
pub struct ChildProbe {
    handle: ModelHandle,
    /// The runs whose first turn was taken: a call of one again is a retry, not a start.
    started: HashSet<(AgentId, u32)>,
}

impl ChildProbe {
    /// The next probed call, which must be a child's first turn of a run (a new child, or a
    /// restarted one), at its first attempt.
    ///
    /// # Panics
    ///
    /// When no call comes within [`ModelHandle::EXPECT_WITHIN`], or the call is a later
    /// turn or a retry of a first turn (naming it).
    pub async fn expect_spawn(&mut self) -> SpawnedChild {
        let turn = self.handle.expect_turn().await;
        let first = turn.turn() == 1;
        if !first || !self.started.insert((turn.agent(), turn.run())) {
            let what = turn.describe();
            turn.answer(ModelResponse::text(""));
            let retry = if first { "a retry of " } else { "" };
            panic!("expected a probed child to start, got {retry}{what}");
        }
        SpawnedChild { turn }
    }

    /// The next probed call, of any turn: for children that ask, call tools or are steered.
    ///
    /// # Panics
    ///
    /// As [`ModelHandle::expect_turn`].
    pub async fn expect_turn(&mut self) -> PendingTurn {
        let turn = self.handle.expect_turn().await;
        if turn.turn() == 1 {
            self.started.insert((turn.agent(), turn.run()));
        }
        turn
    }

    /// Asserts no probed call is waiting now.
    ///
    /// # Panics
    ///
    /// Naming the call that is waiting.
    pub fn expect_no_spawn(&mut self) {
        self.handle.expect_no_turn();
    }

    /// The probed children's calls, and how each ended.
    pub fn log(&self) -> super::CallLog {
        self.handle.log()
    }
}

/// A probed child at its first turn: what it was asked, and what it "returns".
#[derive(Debug)]
pub struct SpawnedChild {
    turn: PendingTurn,
}

impl SpawnedChild {
    /// The child's id.
    pub fn id(&self) -> AgentId {
        self.turn.agent()
    }

    /// Its type.
    pub fn agent_type(&self) -> &str {
        self.turn.agent_type()
    }

    /// Its depth.
    pub fn depth(&self) -> u32 {
        self.turn.depth()
    }

    /// Which incarnation (1 for a new child; a restart counts up).
    pub fn incarnation(&self) -> u32 {
        self.turn.incarnation()
    }

    /// Which run (1 for a new child; a restart or a resume counts up).
    pub fn run(&self) -> u32 {
        self.turn.run()
    }

    /// The task it was given. The conversation of a first turn is an inherited context or a
    /// resumed conversation, if any (each ends with an assistant turn), then the task, then
    /// any steers that waited for the start: the task is the first user message after the
    /// last message that is not one.
    pub fn prompt(&self) -> &str {
        let messages = self.turn.messages();
        let start = messages
            .iter()
            .rposition(|m| m.role != Role::User)
            .map_or(0, |i| i + 1);
        messages.get(start).map_or("", |m| m.content.as_str())
    }

    /// The first turn itself, to inspect or answer in any other way.
    pub fn into_turn(self) -> PendingTurn {
        self.turn
    }

    /// Ends the child with `text` as its result, billing `usage`.
    pub fn returns(self, text: impl Into<String>, usage: Usage) {
        self.turn.answer_text(text, usage);
    }

    /// Fails the child's turn with `error` (retried by the tree when it is transient).
    pub fn fails(self, error: ModelError) {
        self.turn.fail(error);
    }

    /// The child's turn never ends (until it is aborted).
    pub fn hangs(self) {
        self.turn.hang();
    }

    /// The child asks its owner `question`; its next turn (from [`ChildProbe::expect_turn`])
    /// carries the answer as its last message.
    pub fn asks(self, question: impl Into<String>, usage: Usage) {
        let call = ToolCall::new(
            "probe_ask",
            ASK_OWNER_TOOL,
            serde_json::json!({ "question": question.into() }),
        );
        self.turn.call_tools(vec![call], usage);
    }
}
