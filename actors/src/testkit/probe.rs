//! Reading a tree's event stream with expectations whose failures say what was expected and
//! everything that was seen instead.
//!
//! # Invariants
//!
//! * Every wait is bounded in virtual time: under a paused clock a bound is reached only
//!   when nothing else can run, so an expectation never races the tree, and a missing event
//!   fails the test instead of hanging it.
//! * Every event read is kept ([`EventProbe::seen`]) and shown in a failure's text.

use std::fmt::Write as _;
use std::time::Duration;

use agent_tree_protocol::{AgentId, Event, Outcome};

use crate::events::EventStream;
use crate::tree::Tree;

/// A subscription to a tree's events with expectations.
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::testkit::{EventProbe, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, EventKind, SpawnRequest};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
/// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let mut probe = EventProbe::new(&tree);
/// let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
/// probe.expect_event("w started", |e| matches!(e.kind, EventKind::Started { .. })).await;
/// let outcome = probe.expect_terminated(w.id()).await;
/// assert_eq!(outcome.text.as_deref(), Some("ok"));
/// probe.expect_no_event(Duration::from_secs(5), |_| true).await;
/// # });
/// ```
pub struct EventProbe {
    stream: EventStream,
    /// The tree, held weakly, for agents' final outcomes.
    tree: std::sync::Weak<crate::shared::Shared>,
    seen: Vec<Event>,
    /// How many of `seen` an expectation has consumed.
    read: usize,
}

impl std::fmt::Debug for EventProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProbe")
            .field("seen", &self.seen.len())
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl EventProbe {
    /// How long an expectation waits for its event (virtual time under a paused clock).
    pub const EXPECT_WITHIN: Duration = Duration::from_secs(3600);

    /// A probe of `tree`'s events from now on.
    pub fn new(tree: &Tree) -> Self {
        EventProbe {
            stream: tree.subscribe(),
            tree: std::sync::Arc::downgrade(&tree.shared),
            seen: Vec::new(),
            read: 0,
        }
    }

    /// Every event read so far, in order.
    pub fn seen(&self) -> &[Event] {
        &self.seen
    }

    /// Every event not yet consumed that has already arrived (none is waited for), now
    /// consumed: "what happened so far".
    pub fn drain(&mut self) -> Vec<Event> {
        self.seen.extend(self.stream.drain());
        let fresh = self.seen[self.read..].to_vec();
        self.read = self.seen.len();
        fresh
    }

    /// The next event not yet consumed, waiting at most `within`.
    async fn next_within(&mut self, within: Duration) -> Option<Event> {
        if self.read < self.seen.len() {
            self.read += 1;
            return Some(self.seen[self.read - 1].clone());
        }
        let event = tokio::time::timeout(within, self.stream.next())
            .await
            .ok()??;
        self.seen.push(event.clone());
        self.read += 1;
        Some(event)
    }

    /// The next event matching `matcher` (events before it are consumed), within
    /// [`EventProbe::EXPECT_WITHIN`].
    ///
    /// # Panics
    ///
    /// When none comes: the message names `what` and lists every event seen.
    pub async fn expect_event(
        &mut self,
        what: &str,
        mut matcher: impl FnMut(&Event) -> bool,
    ) -> Event {
        self.expect_event_within(what, Self::EXPECT_WITHIN, &mut matcher)
            .await
    }

    /// The next event matching `matcher` (events before it are consumed), which must come
    /// within `within`.
    ///
    /// # Panics
    ///
    /// When none comes in time, naming `what` and listing every event seen.
    pub async fn expect_event_within(
        &mut self,
        what: &str,
        within: Duration,
        mut matcher: impl FnMut(&Event) -> bool,
    ) -> Event {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await {
                Some(event) if matcher(&event) => return event,
                Some(_) => {}
                None => self.fail(&format!("expected {what}")),
            }
        }
    }

    /// The next `n` events matching `matcher`, in order.
    ///
    /// # Panics
    ///
    /// When fewer come, as [`EventProbe::expect_event`].
    pub async fn receive_n(
        &mut self,
        n: usize,
        what: &str,
        mut matcher: impl FnMut(&Event) -> bool,
    ) -> Vec<Event> {
        let mut found = Vec::with_capacity(n);
        while found.len() < n {
            let label = format!("{what} ({} of {n})", found.len() + 1);
            found.push(self.expect_event(&label, &mut matcher).await);
        }
        found
    }

    /// Asserts no event matching `matcher` comes within `within` (the events read meanwhile
    /// are kept and consumed).
    ///
    /// # Panics
    ///
    /// Naming the event that came.
    pub async fn expect_no_event(
        &mut self,
        within: Duration,
        mut matcher: impl FnMut(&Event) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match self.next_within(left).await {
                Some(event) if matcher(&event) => self.fail(&format!(
                    "expected no such event within {within:?}, got {}",
                    line(&event)
                )),
                Some(_) => {}
                None => return,
            }
        }
    }

    /// Reads events until `fish` catches one (returns [`Fish::Catch`]), skipping those it
    /// skips and failing on one it fails, within [`EventProbe::EXPECT_WITHIN`]: Akka's
    /// `fishForMessage`.
    ///
    /// # Panics
    ///
    /// When `fish` fails an event (with its reason), or nothing is caught in time.
    ///
    /// ```
    /// use agent_tree_actors::testkit::{EventProbe, Fish, Script, ScriptedModel, Turn};
    /// use agent_tree_actors::{Catalog, Tree};
    /// use agent_tree_protocol::{AgentDefinition, EventKind, SpawnRequest, Usage};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// let model = ScriptedModel::new()
    ///     .script("w", Script::new([Turn::answer("ok").usage(Usage::tokens(3, 1))]));
    /// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
    /// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
    /// let mut probe = EventProbe::new(&tree);
    /// tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    /// let billed = probe
    ///     .fish("the usage", |e| match &e.kind {
    ///         EventKind::UsageReported { delta } => Fish::Catch(delta.total_tokens()),
    ///         EventKind::Failed { .. } => Fish::Fail("failed before billing".into()),
    ///         _ => Fish::Skip,
    ///     })
    ///     .await;
    /// assert_eq!(billed, 4);
    /// # });
    /// ```
    pub async fn fish<T>(&mut self, what: &str, mut fish: impl FnMut(&Event) -> Fish<T>) -> T {
        let deadline = tokio::time::Instant::now() + Self::EXPECT_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(event) = self.next_within(left).await else {
                self.fail(&format!("expected to catch {what}"))
            };
            match fish(&event) {
                Fish::Catch(caught) => return caught,
                Fish::Skip => {}
                Fish::Fail(reason) => {
                    self.fail(&format!("fishing for {what}: {reason} at {}", line(&event)))
                }
            }
        }
    }

    /// `agent`'s final outcome (after any restarts), within [`EventProbe::EXPECT_WITHIN`];
    /// the events up to its final terminal event are consumed.
    ///
    /// # Panics
    ///
    /// When it does not end in time.
    pub async fn expect_terminated(&mut self, agent: AgentId) -> Outcome {
        self.expect_terminated_within(agent, Self::EXPECT_WITHIN)
            .await
    }

    /// `agent`'s final outcome (after any restarts; of its resumed run, after a resume), which
    /// must come within `within`: the outcome the tree records once it is final. Every event
    /// up to the agent's last terminal event is consumed (a run its supervisor restarted has
    /// a terminal event too). Without the tree (dropped), the agent's next terminal event.
    ///
    /// # Panics
    ///
    /// When it does not end in time, listing every event seen.
    pub async fn expect_terminated_within(&mut self, agent: AgentId, within: Duration) -> Outcome {
        let what = format!("{agent} to end within {within:?}");
        let deadline = tokio::time::Instant::now() + within;
        let settled = self
            .tree
            .upgrade()
            .and_then(|shared| shared.registry.watch(agent));
        if let Some(mut settled) = settled {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let ended = tokio::time::timeout(left, settled.wait_for(Option::is_some)).await;
            let outcome = match ended {
                Ok(Ok(outcome)) => outcome.clone(),
                _ => None,
            };
            // Every event up to the final terminal one was sent before the outcome was
            // final: read in what has come, consumed or not.
            self.seen.extend(self.stream.drain());
            let Some(outcome) = outcome else {
                self.fail(&format!("expected {what}"))
            };
            let terminal = |e: &Event| e.agent == agent && e.kind.outcome().is_some();
            if let Some(at) = self.seen[self.read..].iter().rposition(terminal) {
                self.read += at + 1;
            }
            return outcome;
        }
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(event) = self.next_within(left).await else {
                self.fail(&format!("expected {what}"))
            };
            if event.agent != agent {
                continue;
            }
            if let Some(outcome) = event.kind.outcome() {
                return outcome.clone();
            }
        }
    }

    fn fail(&self, expected: &str) -> ! {
        let mut text = format!("{expected}; seen {} events:", self.seen.len());
        for event in &self.seen {
            let _ = write!(text, "\n  {}", line(event));
        }
        panic!("{text}")
    }
}

/// What [`EventProbe::fish`] does with one event.
#[derive(Debug)]
pub enum Fish<T> {
    /// This is the one: return it.
    Catch(T),
    /// Not this one: read on.
    Skip,
    /// This event should not have come: fail the test with this reason.
    Fail(String),
}

/// `#7 a2 (depth 2, parent a1) at 120 ms: started`.
fn line(event: &Event) -> String {
    let parent = event
        .parent
        .map_or_else(|| "none".to_owned(), |p| p.to_string());
    let mut text = format!(
        "#{} {} (depth {}, parent {parent}) at {} ms: {}",
        event.seq,
        event.agent,
        event.depth,
        event.at_ms,
        event.kind.name()
    );
    if let Some(outcome) = event.kind.outcome() {
        let _ = write!(text, " {}", outcome.summary());
    }
    text
}
