//! A model a test drives turn by turn, after tower-test's `mock::pair()`: [`pair`] gives a
//! [`DrivenModel`] for the tree and a [`ModelHandle`] for the test, which awaits each model
//! call as a [`PendingTurn`], inspects it and answers it.
//!
//! # Invariants
//!
//! * Every call reaches the handle, in the order the calls were made, and is answered at most
//!   once; a call whose [`PendingTurn`] is dropped unanswered fails the test (outside a
//!   panic) with a message naming the agent and the turn, and the agent's call fails.
//! * A [`ModelHandle`] dropped with calls it never took fails the test, naming each; a
//!   model call made after the handle is gone fails with a clear model error.
//! * Waiting works under paused tokio time: [`ModelHandle::expect_turn`] waits at most
//!   [`ModelHandle::EXPECT_WITHIN`] of virtual time, which a paused clock reaches only when
//!   nothing else can run, so it never races the tree.

use std::fmt;
use std::time::Duration;

use agent_tree_protocol::{AgentId, Message, ToolCall, Usage};
use tokio::sync::{mpsc, oneshot};

use crate::error::ModelError;
use crate::model::{Model, ModelRequest, ModelResponse};
use crate::util::BoxFuture;

use super::log::CallLog;

/// A model and the handle that drives it.
///
/// ```
/// use agent_tree_actors::testkit;
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest, Usage};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let (model, mut handle) = testkit::pair();
/// let catalog = Catalog::new([AgentDefinition::new("writer", "You write.")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let mut writer = tree.spawn(SpawnRequest::new("writer", "a haiku")).await.unwrap();
///
/// let turn = handle.expect_turn().await;
/// assert_eq!((turn.agent_type(), turn.turn()), ("writer", 1));
/// assert_eq!(turn.last_message().unwrap().content, "a haiku");
/// turn.answer_text("old pond / a frog leaps in", Usage::tokens(12, 9));
///
/// assert_eq!(writer.outcome().await.text.as_deref(), Some("old pond / a frog leaps in"));
/// # });
/// ```
pub fn pair() -> (DrivenModel, ModelHandle) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let log = CallLog::default();
    (
        DrivenModel {
            sender,
            log: log.clone(),
        },
        ModelHandle {
            receiver,
            taken: 0,
            log,
        },
    )
}

/// The model half of a [`pair`]: every call goes to the [`ModelHandle`] and waits there for
/// its answer.
#[derive(Clone)]
pub struct DrivenModel {
    sender: mpsc::UnboundedSender<PendingTurn>,
    log: CallLog,
}

impl fmt::Debug for DrivenModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrivenModel")
            .field("handle_alive", &!self.sender.is_closed())
            .finish()
    }
}

/// What the test said to do with one call.
enum Reply {
    Respond(ModelResponse),
    After(Duration, ModelResponse),
    Fail(ModelError),
    Hang,
    Panic(String),
}

impl Model for DrivenModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let logged = self.log.record(&request);
            let result = self.ask(request).await;
            logged.finish(&result);
            result
        })
    }
}

impl DrivenModel {
    async fn ask(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        {
            let (reply, answer) = oneshot::channel();
            let pending = PendingTurn {
                request,
                reply: Some(reply),
            };
            if self.sender.send(pending).is_err() {
                return Err(ModelError::new(
                    "the test's ModelHandle is gone: nobody answers this model call",
                ));
            }
            match answer.await {
                Ok(Reply::Respond(response)) => Ok(response),
                Ok(Reply::After(delay, response)) => {
                    tokio::time::sleep(delay).await;
                    Ok(response)
                }
                Ok(Reply::Fail(error)) => Err(error),
                Ok(Reply::Hang) => std::future::pending().await,
                Ok(Reply::Panic(message)) => panic!("{message}"),
                Err(_) => Err(ModelError::new(
                    "the test dropped this model call without answering it",
                )),
            }
        }
    }
}

/// The test's half of a [`pair`]: the model calls, in the order they were made.
pub struct ModelHandle {
    receiver: mpsc::UnboundedReceiver<PendingTurn>,
    taken: usize,
    log: CallLog,
}

impl fmt::Debug for ModelHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelHandle")
            .field("taken", &self.taken)
            .finish_non_exhaustive()
    }
}

impl ModelHandle {
    /// Every call the model was asked, and how each ended (returned, failed, dropped by an
    /// abort): the same log a [`ScriptedModel`](super::ScriptedModel) keeps.
    pub fn log(&self) -> CallLog {
        self.log.clone()
    }

    /// How long [`ModelHandle::expect_turn`] waits (virtual time under a paused clock).
    pub const EXPECT_WITHIN: Duration = Duration::from_secs(3600);

    /// The next model call, or `None` once every [`DrivenModel`] is dropped (the tree is
    /// gone) and no call is left.
    #[doc(alias = "next_request")]
    pub async fn next_turn(&mut self) -> Option<PendingTurn> {
        let turn = self.receiver.recv().await;
        self.taken += usize::from(turn.is_some());
        turn
    }

    /// The next model call; fails the test when none comes within
    /// [`ModelHandle::EXPECT_WITHIN`], or the tree is gone.
    ///
    /// # Panics
    ///
    /// When no call comes, saying how many calls came before.
    #[doc(alias = "expect_request")]
    pub async fn expect_turn(&mut self) -> PendingTurn {
        match tokio::time::timeout(Self::EXPECT_WITHIN, self.next_turn()).await {
            Ok(Some(turn)) => turn,
            Ok(None) => panic!(
                "expected a model call, but the tree is gone (after {} calls)",
                self.taken
            ),
            Err(_) => panic!(
                "expected a model call within {:?}, none came (after {} calls)",
                Self::EXPECT_WITHIN,
                self.taken
            ),
        }
    }

    /// The next model call, which must be `agent`'s.
    ///
    /// # Panics
    ///
    /// As [`ModelHandle::expect_turn`], and when the call is another agent's (naming it).
    pub async fn expect_turn_of(&mut self, agent: AgentId) -> PendingTurn {
        let turn = self.expect_turn().await;
        assert_eq!(
            turn.agent(),
            agent,
            "expected a model call of {agent}, got {}",
            turn.describe()
        );
        turn
    }

    /// Asserts no model call is waiting now (one already made and not yet taken).
    ///
    /// # Panics
    ///
    /// Naming the call that is waiting.
    pub fn expect_no_turn(&mut self) {
        if let Ok(turn) = self.receiver.try_recv() {
            let what = turn.describe();
            turn.answer(ModelResponse::text(""));
            panic!("expected no model call, got {what}");
        }
    }
}

impl Drop for ModelHandle {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let mut unexpected = Vec::new();
        while let Ok(mut turn) = self.receiver.try_recv() {
            unexpected.push(turn.describe());
            // Answered, so its own drop does not fail the test a second time.
            turn.reply.take();
        }
        if !unexpected.is_empty() {
            panic!("model calls the test never took: {}", unexpected.join("; "));
        }
    }
}

/// One model call, waiting for the test's answer.
///
/// Inspect it ([`agent`](Self::agent), [`agent_type`](Self::agent_type),
/// [`depth`](Self::depth), [`incarnation`](Self::incarnation), [`run`](Self::run),
/// [`turn`](Self::turn), [`messages`](Self::messages), [`tool_names`](Self::tool_names), or
/// the whole [`request`](Self::request)), then answer it once: text, tool calls, an error of
/// any kind, a hang, a panic. Dropping it unanswered fails the test.
pub struct PendingTurn {
    request: ModelRequest,
    reply: Option<oneshot::Sender<Reply>>,
}

impl fmt::Debug for PendingTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl PendingTurn {
    /// The agent calling.
    pub fn agent(&self) -> AgentId {
        self.request.agent
    }

    /// Its type.
    pub fn agent_type(&self) -> &str {
        self.request.agent_type()
    }

    /// Its depth.
    pub fn depth(&self) -> u32 {
        self.request.depth
    }

    /// Which incarnation of the agent (1 for the first; restarts count up, a resume keeps
    /// it).
    pub fn incarnation(&self) -> u32 {
        self.request.incarnation
    }

    /// Which run of the agent (1 for the first; restarts and resumes count up).
    pub fn run(&self) -> u32 {
        self.request.run
    }

    /// The turn within the run, from 1.
    pub fn turn(&self) -> u32 {
        self.request.turn
    }

    /// The conversation sent.
    pub fn messages(&self) -> &[Message] {
        &self.request.messages
    }

    /// The last message of the conversation (the task, a tool result, a notice).
    pub fn last_message(&self) -> Option<&Message> {
        self.request.messages.last()
    }

    /// The names of the tools offered, in the order offered.
    pub fn tool_names(&self) -> Vec<&str> {
        self.request.tools.iter().map(|t| t.name.as_str()).collect()
    }

    /// The whole request.
    pub fn request(&self) -> &ModelRequest {
        &self.request
    }

    /// `a3 (worker) turn 2`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}) run {} turn {}",
            self.agent(),
            self.agent_type(),
            self.run(),
            self.turn()
        )
    }

    fn send(mut self, reply: Reply) {
        if let Some(sender) = self.reply.take() {
            let _ = sender.send(reply);
        }
    }

    /// Answers with `response`.
    pub fn answer(self, response: ModelResponse) {
        self.send(Reply::Respond(response));
    }

    /// Answers with `response` after `delay` of model time (virtual under a paused clock):
    /// a slow model, without holding up the test.
    pub fn answer_after(self, delay: Duration, response: ModelResponse) {
        self.send(Reply::After(delay, response));
    }

    /// Answers with a final text and its usage.
    pub fn answer_text(self, text: impl Into<String>, usage: Usage) {
        self.answer(ModelResponse::text(text).with_usage(usage));
    }

    /// Answers with tool calls and their usage.
    pub fn call_tools(self, calls: Vec<ToolCall>, usage: Usage) {
        self.answer(ModelResponse::calls(calls).with_usage(usage));
    }

    /// Answers with the scripted model's [`Call`](super::Call)s (a spawn, a steer, a read,
    /// a wait, any tool), written as the scripted model writes them: `Target::Spawned(n)`
    /// resolves from this call's conversation.
    ///
    /// ```
    /// # use agent_tree_actors::testkit::{Call, PendingTurn, Target};
    /// # use agent_tree_protocol::Usage;
    /// # fn answer(turn: PendingTurn) {
    /// turn.calls([Call::steer(Target::Spawned(0), "use the logs")], Usage::tokens(20, 4));
    /// # }
    /// ```
    pub fn calls(self, calls: impl IntoIterator<Item = super::Call>, usage: Usage) {
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| super::to_tool_call(&self.request, i, call))
            .collect();
        self.call_tools(tool_calls, usage);
    }

    /// Fails the call with `error` (any kind: a rate limit is retried by the tree).
    pub fn fail(self, error: ModelError) {
        self.send(Reply::Fail(error));
    }

    /// Never answers: the call hangs until the agent is aborted (its future dropped).
    pub fn hang(self) {
        self.send(Reply::Hang);
    }

    /// Makes the model panic with `message` (the agent fails with reason `panicked`).
    pub fn panic(self, message: impl Into<String>) {
        self.send(Reply::Panic(message.into()));
    }
}

impl Drop for PendingTurn {
    fn drop(&mut self) {
        if self.reply.is_some() && !std::thread::panicking() {
            let what = self.describe();
            self.reply.take();
            panic!("the model call of {what} was dropped without an answer");
        }
    }
}
