//! A probe standing in as the owner of one agent under test: it records every message the
//! agent sends up its ownership edge and answers its questions.
//!
//! The agent runs as a top-level agent of a real tree, so its spawn, its link, its record and
//! its billing are the real ones; the probe takes the owner's side of the edge:
//!
//! * **usage**: every delta billed to the agent's subtree (its own turns and its descendants'),
//!   read from the tree's `usage_reported` events, in order;
//! * **questions**: the agent's `ask_owner` calls, taken from the tree's question handler,
//!   which the test answers or refuses ([`OwnerQuestion`]);
//! * **ends and restarts**: the outcome of each run, and each restart that follows one.
//!
//! # Invariants
//!
//! * One total order: messages come in the order of the tree's events (a question at its
//!   `asked` event), so a test's sequence of expectations is the sequence the owner would see.
//! * Every wait is bounded in virtual time ([`OwnerProbe::EXPECT_WITHIN`]) and a failure lists
//!   every message seen.
//! * A question the test passes over or drops unanswered is refused, with a reason saying so:
//!   the agent never waits forever on a probe.

use std::collections::HashSet;
use std::fmt::{self, Write as _};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agent_tree_protocol::{AgentId, EventKind, Outcome, SpawnRequest, Usage};
use tokio::sync::{mpsc, oneshot};

use crate::events::EventStream;
use crate::hooks::Question;
use crate::tree::{Tree, TreeBuilder};

/// What the agent under test sent its owner.
#[derive(Debug)]
#[non_exhaustive]
pub enum OwnerMessage {
    /// A model turn's usage, billed up the edge: the turn of `from`, the agent or one of its
    /// descendants.
    Usage {
        /// Whose turn it was.
        from: AgentId,
        /// The turn's usage.
        delta: Usage,
    },
    /// An `ask_owner` question, waiting for the test's answer.
    Question(OwnerQuestion),
    /// The agent's supervisor restarted it as run `run` (after the [`OwnerMessage::Ended`]
    /// of the run before).
    Restarted {
        /// The new run's number.
        run: u32,
    },
    /// A run of the agent ended with this outcome: its last, unless a
    /// [`OwnerMessage::Restarted`] follows.
    Ended(Outcome),
}

impl OwnerMessage {
    /// `usage 48 tokens from a2`, `question "publish?"`, `ended completed: done`,
    /// `ended failed (model_error): crash`.
    pub fn describe(&self) -> String {
        match self {
            OwnerMessage::Usage { from, delta } => {
                format!("usage {} tokens from {from}", delta.total_tokens())
            }
            OwnerMessage::Question(question) => format!("question {:?}", question.text()),
            OwnerMessage::Restarted { run } => format!("restarted as run {run}"),
            OwnerMessage::Ended(outcome) if outcome.is_completed() => {
                format!("ended completed: {}", outcome.summary())
            }
            OwnerMessage::Ended(outcome) => format!("ended {}", outcome.summary()),
        }
    }
}

/// A question the agent under test asked its owner. Answer it or refuse it once; dropped
/// unanswered, it is refused.
pub struct OwnerQuestion {
    question: Question,
    reply: Option<oneshot::Sender<Result<String, String>>>,
}

impl fmt::Debug for OwnerQuestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerQuestion")
            .field("agent", &self.question.agent)
            .field("question", &self.question.question)
            .finish()
    }
}

impl OwnerQuestion {
    /// The question's text.
    pub fn text(&self) -> &str {
        &self.question.question
    }

    /// The agent asking.
    pub fn agent(&self) -> AgentId {
        self.question.agent
    }

    /// Answers it: the text is the agent's `ask_owner` result.
    pub fn answer(mut self, answer: impl Into<String>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Ok(answer.into()));
        }
    }

    /// Refuses it: the agent's model reads `reason` as an error result.
    pub fn refuse(mut self, reason: impl Into<String>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(reason.into()));
        }
    }
}

impl Drop for OwnerQuestion {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(
                "the test's owner probe passed over this question without answering it".into(),
            ));
        }
    }
}

type Asked = (Question, oneshot::Sender<Result<String, String>>);

/// The owner of one agent under test: the agent runs as a top-level agent of a real tree,
/// and the probe takes the owner's side of the edge. It reads usage billed to the agent's
/// subtree, the agent's `ask_owner` questions, and each run's end and restart, as
/// [`OwnerMessage`]s in the order of the tree's events; every wait is bounded
/// ([`OwnerProbe::EXPECT_WITHIN`]) and a failure lists every message seen. A question the
/// test passes over or drops unanswered is refused, so the agent never waits on a probe.
///
/// ```
/// use agent_tree_actors::testkit::{Call, OwnerProbe, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest, Usage};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let model = ScriptedModel::new().script("w", Script::new([
///     Turn::calls([Call::ask_owner("tabs or spaces?")]).usage(Usage::tokens(10, 2)),
///     Turn::answer("spaces it is"),
/// ]));
/// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
/// let (tree, mut owner) = OwnerProbe::build(Tree::builder().catalog(catalog).model(model)).await.unwrap();
/// let w = owner.spawn(&tree, SpawnRequest::new("w", "format the file")).await;
///
/// assert_eq!(owner.expect_usage().await, (w, Usage::tokens(10, 2)));
/// let question = owner.expect_question().await;
/// assert_eq!(question.text(), "tabs or spaces?");
/// question.answer("spaces");
/// assert_eq!(owner.expect_result().await.text.as_deref(), Some("spaces it is"));
/// # });
/// ```
pub struct OwnerProbe {
    events: EventStream,
    questions: mpsc::UnboundedReceiver<Asked>,
    /// The agent under test, shared with the question handler, which refuses every other
    /// agent's question.
    owned: Arc<OnceLock<AgentId>>,
    agent: Option<AgentId>,
    /// The agent under test and its descendants seen so far.
    subtree: HashSet<AgentId>,
    /// Every message delivered, described.
    seen: Vec<String>,
    /// The agent's current run as the events tell it (1, +1 for each restart or resume).
    run: u32,
}

impl fmt::Debug for OwnerProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerProbe")
            .field("agent", &self.agent)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl OwnerProbe {
    /// How long an expectation waits (virtual time under a paused clock).
    pub const EXPECT_WITHIN: Duration = Duration::from_secs(3600);

    /// Builds the tree with the probe as the application's question handler (replacing any
    /// other) and subscribed to its events. Questions of other top-level agents than the
    /// one under test are refused.
    ///
    /// # Errors
    ///
    /// As [`TreeBuilder::build`].
    pub async fn build(builder: TreeBuilder) -> Result<(Tree, OwnerProbe), crate::TreeError> {
        let (sender, questions) = mpsc::unbounded_channel::<Asked>();
        let owned: Arc<OnceLock<AgentId>> = Arc::new(OnceLock::new());
        let handler_owned = owned.clone();
        let tree = builder
            .on_question(move |question: Question| {
                let (reply, answer) = oneshot::channel();
                // Before the spawn has returned the owned agent is not known yet: the probe
                // itself refuses strangers' questions then, as it reads them.
                let mine = handler_owned.get().is_none_or(|a| *a == question.agent);
                let asker = question.agent;
                let sent = if mine {
                    sender.send((question, reply)).map_err(|_| ())
                } else {
                    Err(())
                };
                async move {
                    if !mine {
                        return Err(format!(
                            "the test's owner probe owns another agent, not {asker}"
                        ));
                    }
                    sent.map_err(|_| "the test's owner probe is gone".to_owned())?;
                    answer
                        .await
                        .unwrap_or_else(|_| Err("the test's owner probe is gone".to_owned()))
                }
            })
            .build()
            .await?;
        let events = tree.subscribe();
        Ok((
            tree,
            OwnerProbe {
                events,
                questions,
                owned,
                agent: None,
                run: 1,
                subtree: HashSet::new(),
                seen: Vec::new(),
            },
        ))
    }

    /// Spawns the agent under test as a top-level agent, owned by the probe.
    ///
    /// # Panics
    ///
    /// When the probe already has an agent, or the spawn is refused (with the error).
    pub async fn spawn(&mut self, tree: &Tree, request: SpawnRequest) -> AgentId {
        assert!(
            self.agent.is_none(),
            "an owner probe owns one agent under test"
        );
        let what = request.agent_type.clone();
        let handle = tree
            .spawn(request)
            .await
            .unwrap_or_else(|e| panic!("the owner probe could not spawn a {what}: {e}"));
        self.agent = Some(handle.id());
        let _ = self.owned.set(handle.id());
        self.subtree.insert(handle.id());
        handle.id()
    }

    /// The agent under test.
    ///
    /// # Panics
    ///
    /// Before [`OwnerProbe::spawn`].
    pub fn agent(&self) -> AgentId {
        self.agent.expect("the owner probe has spawned its agent")
    }

    /// Every message delivered so far, described, in order.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// The next message within `within`, or `None`.
    async fn next_within(&mut self, within: Duration) -> Option<OwnerMessage> {
        let agent = self.agent();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = tokio::time::timeout(left, self.events.next())
                .await
                .ok()??;
            if event.parent.is_some_and(|p| self.subtree.contains(&p)) {
                self.subtree.insert(event.agent);
            }
            let message = match event.kind {
                EventKind::UsageReported { delta } if self.subtree.contains(&event.agent) => {
                    OwnerMessage::Usage {
                        from: event.agent,
                        delta,
                    }
                }
                EventKind::Asked { question } if event.agent == agent => {
                    OwnerMessage::Question(self.question(question, deadline).await)
                }
                // A resume is a run too (a restart's number counts it), with no message.
                EventKind::Resumed if event.agent == agent => {
                    self.run += 1;
                    continue;
                }
                EventKind::Restarted { .. } if event.agent == agent => {
                    self.run += 1;
                    OwnerMessage::Restarted { run: self.run }
                }
                ref kind if event.agent == agent && kind.outcome().is_some() => match event.kind {
                    EventKind::Completed { outcome }
                    | EventKind::Failed { outcome }
                    | EventKind::Aborted { outcome }
                    | EventKind::Killed { outcome } => OwnerMessage::Ended(outcome),
                    _ => unreachable!("an event with an outcome is terminal"),
                },
                _ => continue,
            };
            self.seen.push(message.describe());
            return Some(message);
        }
    }

    /// The question an `asked` event announced: the tree's handler hands it over right after
    /// the event; a stranger's question read meanwhile is refused. Should it not
    /// come (the root drops a question whose asker settled first), the question comes
    /// without a reply, and answering it does nothing.
    async fn question(&mut self, text: String, deadline: tokio::time::Instant) -> OwnerQuestion {
        let agent = self.agent();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.questions.recv()).await {
                Ok(Some((question, reply))) if question.agent == agent => {
                    return OwnerQuestion {
                        question,
                        reply: Some(reply),
                    };
                }
                Ok(Some((stranger, reply))) => {
                    let _ = reply.send(Err(format!(
                        "the test's owner probe owns {agent}, not {}",
                        stranger.agent
                    )));
                }
                _ => break,
            }
        }
        OwnerQuestion {
            question: Question {
                agent,
                agent_type: String::new(),
                question: text,
            },
            reply: None,
        }
    }

    /// The next message, which must match `matcher` (Akka's `expectMsgPF`).
    ///
    /// # Panics
    ///
    /// When no message comes within [`OwnerProbe::EXPECT_WITHIN`] or the next one does not
    /// match, listing every message seen.
    pub async fn expect_message(
        &mut self,
        what: &str,
        matcher: impl FnOnce(&OwnerMessage) -> bool,
    ) -> OwnerMessage {
        match self.next_within(Self::EXPECT_WITHIN).await {
            Some(message) if matcher(&message) => message,
            Some(_) => self.fail(&format!("expected {what} as the next message")),
            None => self.fail(&format!("expected {what}")),
        }
    }

    /// The next message, which must be usage: whose turn it was and its delta.
    ///
    /// # Panics
    ///
    /// As [`OwnerProbe::expect_message`].
    pub async fn expect_usage(&mut self) -> (AgentId, Usage) {
        match self
            .expect_message("usage", |m| matches!(m, OwnerMessage::Usage { .. }))
            .await
        {
            OwnerMessage::Usage { from, delta } => (from, delta),
            _ => unreachable!("matched usage"),
        }
    }

    /// The next message, which must be a question.
    ///
    /// # Panics
    ///
    /// As [`OwnerProbe::expect_message`].
    pub async fn expect_question(&mut self) -> OwnerQuestion {
        match self
            .expect_message("a question", |m| matches!(m, OwnerMessage::Question(_)))
            .await
        {
            OwnerMessage::Question(question) => question,
            _ => unreachable!("matched a question"),
        }
    }

    /// The next message, which must be the end of a run: its outcome.
    ///
    /// # Panics
    ///
    /// As [`OwnerProbe::expect_message`].
    pub async fn expect_result(&mut self) -> Outcome {
        match self
            .expect_message("the result", |m| matches!(m, OwnerMessage::Ended(_)))
            .await
        {
            OwnerMessage::Ended(outcome) => outcome,
            _ => unreachable!("matched the end"),
        }
    }

    /// Asserts no message comes within `within`.
    ///
    /// # Panics
    ///
    /// Naming the message that came.
    pub async fn expect_no_message(&mut self, within: Duration) {
        if let Some(message) = self.next_within(within).await {
            self.fail(&format!(
                "expected no message within {within:?}, got {}",
                message.describe()
            ));
        }
    }

    /// Reads messages until `fish` catches one, skipping what it skips (skipped questions
    /// are refused) and failing on what it fails.
    ///
    /// # Panics
    ///
    /// When `fish` fails a message, or nothing is caught within
    /// [`OwnerProbe::EXPECT_WITHIN`].
    pub async fn fish<T>(
        &mut self,
        what: &str,
        mut fish: impl FnMut(OwnerMessage) -> super::Fish<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + Self::EXPECT_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(message) = self.next_within(left).await else {
                self.fail(&format!("expected to catch {what}"))
            };
            match fish(message) {
                super::Fish::Catch(caught) => return caught,
                super::Fish::Skip => {}
                super::Fish::Fail(reason) => self.fail(&format!("fishing for {what}: {reason}")),
            }
        }
    }

    fn fail(&self, expected: &str) -> ! {
        let agent = self.agent.map_or_else(|| "-".to_owned(), |a| a.to_string());
        let mut text = format!(
            "owner probe of {agent}: {expected}; seen {} message{}:",
            self.seen.len(),
            if self.seen.len() == 1 { "" } else { "s" }
        );
        for message in &self.seen {
            let _ = write!(text, "\n  {message}");
        }
        panic!("{text}")
    }
}
