//! One server's connection, owned by a supervisor task the OTP way: the task starts the
//! server, watches it (its process, its connection, its answers to pings), restarts it when
//! it exits or stops answering, within the server's restart intensity, and past it keeps it
//! down so its tools fail at once, saying why. An HTTP server, not a process of the tree's,
//! is tried again with backoff instead, and at once when a call asks. Calls find the live connection through
//! [`Server::link`]; the tree's shutdown ends the server through [`Server::stop`], dropping
//! the tree through [`Server::kill`].
//!
//! The task owns the connection and the process; everyone else reads the
//! [`State`] it publishes (a watch channel) and tells it what they saw (a call cut off by a
//! closed connection) through its mailbox.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_tree_actors::ToolContext;
use parking_lot::Mutex;
use rmcp::model::{ClientCapabilities, ClientConfig, ClientRequest, Implementation, ProgressToken};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{PING_TIMEOUT, ServerConfig, Transport};
use crate::process::ServerProcess;

/// What a server's connection is, as its supervisor last published it.
#[derive(Clone, Debug)]
pub(crate) enum State {
    /// Starting for the first time, or again after an exit.
    Starting,
    /// Up: calls go to `peer`. `generation` counts the starts.
    Up {
        peer: Peer<RoleClient>,
        generation: u64,
    },
    /// Down for good: restarted too often, or it never came up. Calls fail with the reason.
    Failed(String),
    /// An HTTP server that cannot be reached: tried again with backoff, and at once when a
    /// call asks. Calls fail with the reason if that attempt fails too.
    Unreachable(String),
    /// Ended by the tree.
    Stopped,
}

/// What the supervisor is told.
enum Control {
    /// A call saw connection `generation` close under it.
    Lost { generation: u64, why: String },
    /// A call wants an unreachable HTTP server tried again now.
    Retry,
    /// End the server by `deadline`, then answer.
    Stop {
        deadline: Instant,
        done: oneshot::Sender<()>,
    },
}

/// A server, shared by its tools and its supervisor.
pub(crate) struct Server {
    pub(crate) name: Arc<str>,
    pub(crate) config: ServerConfig,
    state: watch::Receiver<State>,
    control: mpsc::UnboundedSender<Control>,
    /// Cancelled to end the server at once (the tree was dropped).
    killed: CancellationToken,
    /// The process groups this server started, for the kill and the count of what is
    /// left. A leaf lock: never held across an await.
    groups: Mutex<Vec<u32>>,
    /// Where the progress notifications of the calls out go, by progress token. A leaf lock.
    pub(crate) progress: Progress,
    /// Calls out now: a server busy with one is not pinged.
    pub(crate) calls_out: std::sync::atomic::AtomicUsize,
    /// Calls made, and how many of them failed (a server's `isError` included).
    pub(crate) calls: AtomicU64,
    pub(crate) errors: AtomicU64,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The calls out, by the progress token their requests carry, for their progress
/// notifications. A leaf lock, never held across an await.
#[derive(Clone, Default)]
pub(crate) struct Progress(Arc<Mutex<HashMap<ProgressToken, Route>>>);

/// Where one call's progress goes, and when the call was answered.
struct Route {
    call: ToolContext,
    answered: Option<Instant>,
}

/// How long an answered call's route stays: rmcp hands each notification to a task of its
/// own, so one the server sent just before its answer may be handled just after.
const PROGRESS_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Progress {
    /// Routes `token`'s progress to `call`, forgetting routes answered a while ago.
    pub(crate) fn route(&self, token: ProgressToken, call: ToolContext) {
        let now = Instant::now();
        let mut routes = self.0.lock();
        routes.retain(|_, r| {
            r.answered
                .is_none_or(|at| now.duration_since(at) < PROGRESS_GRACE)
        });
        routes.insert(
            token,
            Route {
                call,
                answered: None,
            },
        );
    }

    /// Ends `token`'s route: at once for a call cancelled, after a grace for one answered.
    pub(crate) fn unroute(&self, token: &ProgressToken, answered: bool) {
        let mut routes = self.0.lock();
        if answered {
            if let Some(route) = routes.get_mut(token) {
                route.answered = Some(Instant::now());
            }
        } else {
            routes.remove(token);
        }
    }

    /// The call `token`'s progress goes to.
    fn call(&self, token: &ProgressToken) -> Option<ToolContext> {
        self.0.lock().get(token).map(|r| r.call.clone())
    }
}

/// The client side of a connection: it routes progress notifications to the calls that
/// asked for them.
#[derive(Clone)]
struct Handler {
    progress: Progress,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agent-tree", env!("CARGO_PKG_VERSION")),
        )
    }

    fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        let call = self.progress.call(&params.progress_token);
        if let Some(call) = call {
            call.report_progress(params.progress, params.total, params.message);
        }
        std::future::ready(())
    }
}

/// A live connection: the MCP service and, for a stdio server, its process.
struct Link {
    service: RunningService<RoleClient, Handler>,
    process: Option<ServerProcess>,
}

impl Server {
    /// Starts `name`'s supervisor, which brings the server up: the answer is its tools, or
    /// why it did not come up (it is then down for good).
    pub(crate) fn start(
        name: &str,
        config: ServerConfig,
    ) -> (
        Arc<Server>,
        oneshot::Receiver<Result<Vec<rmcp::model::Tool>, String>>,
    ) {
        let (state_tx, state) = watch::channel(State::Starting);
        let (control, mailbox) = mpsc::unbounded_channel();
        let server = Arc::new(Server {
            name: name.into(),
            config,
            state,
            control,
            killed: CancellationToken::new(),
            groups: Mutex::new(Vec::new()),
            progress: Progress::default(),
            calls_out: std::sync::atomic::AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let (first, started) = oneshot::channel();
        let supervisor = Supervisor {
            server: server.clone(),
            state: state_tx,
            mailbox,
        };
        tokio::spawn(supervisor.run(first));
        (server, started)
    }

    /// The connection to call on, waiting (until `deadline`) while the server is starting.
    pub(crate) async fn link(&self, deadline: Instant) -> Result<(Peer<RoleClient>, u64), String> {
        let mut state = self.state.clone();
        let mut asked = false;
        loop {
            match &*state.borrow_and_update() {
                State::Up { peer, generation } => return Ok((peer.clone(), *generation)),
                State::Failed(why) => return Err(why.clone()),
                State::Unreachable(why) if asked => return Err(why.clone()),
                State::Unreachable(_) => {
                    asked = true;
                    let _ = self.control.send(Control::Retry);
                }
                State::Stopped => {
                    return Err(format!("MCP server `{}` has been shut down", self.name));
                }
                State::Starting => {}
            }
            match tokio::time::timeout_at(deadline, state.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(format!("MCP server `{}` has been shut down", self.name)),
                Err(_) => {
                    return Err(format!(
                        "MCP server `{}` was restarting and did not come back in time",
                        self.name
                    ));
                }
            }
        }
    }

    /// Tells the supervisor a call saw connection `generation` close, and waits (until
    /// `deadline`) for it to have taken that connection down: the next call then finds the
    /// restarted server, or the reason it stays down, never the dead connection.
    pub(crate) async fn lost(&self, generation: u64, why: String, deadline: Instant) {
        let _ = self.control.send(Control::Lost { generation, why });
        let mut state = self.state.clone();
        let moved_on = state.wait_for(
            |state| !matches!(state, State::Up { generation: g, .. } if *g == generation),
        );
        let _ = tokio::time::timeout_at(deadline, moved_on).await;
    }

    /// Ends the server by `deadline` and waits until it has (or the supervisor is gone).
    pub(crate) async fn stop(&self, deadline: Instant) {
        let (done, ended) = oneshot::channel();
        if self.control.send(Control::Stop { deadline, done }).is_ok() {
            let _ = ended.await;
        }
    }

    /// Ends the server now: its process groups are killed, its supervisor stops.
    pub(crate) fn kill(&self) {
        self.killed.cancel();
        for &group in self.groups.lock().iter() {
            crate::process::signal_group(group, crate::process::Signal::Kill);
        }
    }

    /// How many processes of the groups this server started are alive.
    pub(crate) fn live_processes(&self) -> usize {
        let groups = self.groups.lock().clone();
        groups.into_iter().map(crate::process::live_in_group).sum()
    }

    /// Adds a new process's group, forgetting those of earlier processes that are empty
    /// now (so a server restarted for days keeps a short list).
    fn add_group(&self, group: u32) {
        let known = self.groups.lock().clone();
        let empty: Vec<u32> = known
            .into_iter()
            .filter(|&g| crate::process::live_in_group(g) == 0)
            .collect();
        let mut groups = self.groups.lock();
        groups.retain(|g| !empty.contains(g));
        groups.push(group);
    }

    /// Whether the server's current process has exited (before its supervisor may have
    /// seen it go): a request written now would be lost. `false` for an HTTP server.
    pub(crate) fn process_gone(&self) -> bool {
        let leader = self.groups.lock().last().copied();
        leader.is_some_and(|pid| !crate::process::alive(pid))
    }

    /// The pid of the server's current process (its group's leader), if it runs one.
    pub(crate) fn pid(&self) -> Option<u32> {
        matches!(&*self.state.borrow(), State::Up { .. })
            .then(|| self.groups.lock().last().copied())
            .flatten()
    }

    pub(crate) fn count_call(&self, failed: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The task that owns a server's connection.
struct Supervisor {
    server: Arc<Server>,
    state: watch::Sender<State>,
    mailbox: mpsc::UnboundedReceiver<Control>,
}

/// How a connection ended.
enum Ended {
    /// It went down by itself: restart, within the intensity.
    Down(String),
    /// The tree ended it.
    Stopped,
}

impl Supervisor {
    async fn run(mut self, first: oneshot::Sender<Result<Vec<rmcp::model::Tool>, String>>) {
        let name = self.server.name.clone();
        let epoch = Instant::now();
        let mut budget = agent_tree_actors::RestartBudget::new(
            self.server.config.max_restarts,
            self.server.config.restart_period,
        );
        let mut first = Some(first);
        let mut generation = 0u64;
        let http = matches!(self.server.config.transport, Transport::Http { .. });
        let mut backoff = FIRST_BACKOFF;
        loop {
            generation += 1;
            let _ = self.state.send(State::Starting);
            let server = self.server.clone();
            // The process being started, owned here so a stop meanwhile ends it by its
            // deadline (a kill, or dropping it, kills its group).
            let mut spawned = None;
            let starting = tokio::select! {
                biased;
                () = server.killed.cancelled() => None,
                stop = next_stop(&mut self.mailbox) => Some(Err(stop)),
                connected = connect(&server, first.is_some(), &mut spawned) => Some(Ok(connected)),
            };
            let connected = match starting {
                None => return self.ended(),
                Some(Err(stop)) => {
                    let _ = self.state.send(State::Stopped);
                    if let Some((deadline, done)) = stop {
                        if let Some(process) = spawned {
                            process.end(deadline).await;
                        }
                        let _ = done.send(());
                    }
                    return;
                }
                Some(Ok(connected)) => connected,
            };
            let why = match connected {
                Ok((link, tools)) => {
                    backoff = FIRST_BACKOFF;
                    tracing::info!(server = %name, generation, "MCP server up");
                    let _ = self.state.send(State::Up {
                        peer: link.service.peer().clone(),
                        generation,
                    });
                    // Up before the start returns: its first caller finds it so.
                    if let Some(first) = first.take() {
                        let _ = first.send(Ok(tools));
                    }
                    match self.watch(link, generation).await {
                        Ended::Down(why) => why,
                        Ended::Stopped => return,
                    }
                }
                Err(why) => {
                    if let Some(first) = first.take() {
                        let _ = self.state.send(State::Failed(format!(
                            "MCP server `{name}` did not start: {why}"
                        )));
                        let _ = first.send(Err(why));
                        return self.down_for_good().await;
                    }
                    why
                }
            };
            if http {
                // Not a process of ours to restart: reached again when it is back.
                let message =
                    format!("MCP server `{name}` cannot be reached (trying again): {why}");
                tracing::warn!(server = %name, "{message}");
                let _ = self.state.send(State::Unreachable(message));
                if self.wait_to_retry(backoff).await.is_break() {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            let now = Instant::now().saturating_duration_since(epoch);
            if budget.try_add(now) == agent_tree_actors::Intensity::Exceeded {
                let message = format!(
                    "MCP server `{name}` is down: it failed {} time(s) within {:?} and is not restarted again (last: {why})",
                    self.server.config.max_restarts + 1,
                    self.server.config.restart_period,
                );
                tracing::error!(server = %name, "{message}");
                let _ = self.state.send(State::Failed(message));
                return self.down_for_good().await;
            }
            tracing::warn!(server = %name, "MCP server down, restarting: {why}");
        }
    }

    /// Waits `backoff` before trying an unreachable server again, or less if a call asks;
    /// `Break` when the tree ended it meanwhile.
    async fn wait_to_retry(&mut self, backoff: std::time::Duration) -> std::ops::ControlFlow<()> {
        let until = Instant::now() + backoff;
        loop {
            tokio::select! {
                biased;
                () = self.server.killed.cancelled() => {
                    self.ended();
                    return std::ops::ControlFlow::Break(());
                }
                control = self.mailbox.recv() => match control {
                    Some(Control::Stop { done, .. }) => {
                        let _ = self.state.send(State::Stopped);
                        let _ = done.send(());
                        return std::ops::ControlFlow::Break(());
                    }
                    Some(Control::Retry) => return std::ops::ControlFlow::Continue(()),
                    Some(Control::Lost { .. }) => {}
                    None => return std::ops::ControlFlow::Break(()),
                },
                () = tokio::time::sleep_until(until) => return std::ops::ControlFlow::Continue(()),
            }
        }
    }

    /// Down for good: answers the stop (or the kill) when it comes.
    async fn down_for_good(mut self) {
        tokio::select! {
            () = self.server.killed.cancelled() => {}
            stop = next_stop(&mut self.mailbox) => {
                if let Some((_, done)) = stop { let _ = done.send(()); }
            }
        }
    }

    /// Marks the server stopped after a kill.
    fn ended(&self) {
        let _ = self.state.send(State::Stopped);
    }

    /// Watches a live connection until it goes down or the tree ends it.
    async fn watch(&mut self, link: Link, generation: u64) -> Ended {
        let Link {
            service,
            mut process,
        } = link;
        let peer = service.peer().clone();
        let cancel = service.cancellation_token();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        let ping_every = self.server.config.ping_interval;
        let mut next_ping = ping_every.map(|every| Instant::now() + every);
        // A ping out: answered (with anything) or not within its timeout. Polled beside the
        // mailbox, so a stop or a kill is never held up by it.
        let mut ping: Option<std::pin::Pin<Box<dyn Future<Output = bool> + Send>>> = None;
        let ended = loop {
            let pinging = ping.is_some();
            let ping_due = async {
                match next_ping {
                    Some(at) if !pinging => tokio::time::sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            let ping_answered = async {
                match &mut ping {
                    Some(ping) => ping.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = self.server.killed.cancelled() => {
                    cancel.cancel();
                    if let Some(process) = &mut process { process.kill(); }
                    self.ended();
                    return Ended::Stopped;
                }
                control = self.mailbox.recv() => match control {
                    Some(Control::Stop { deadline, done }) => {
                        let _ = self.state.send(State::Stopped);
                        cancel.cancel();
                        let _ = tokio::time::timeout_at(deadline, &mut waiting).await;
                        if let Some(process) = process { process.end(deadline).await; }
                        let _ = done.send(());
                        return Ended::Stopped;
                    }
                    Some(Control::Lost { generation: lost, why }) if lost == generation => break why,
                    Some(Control::Lost { .. } | Control::Retry) => {}
                    None => {
                        cancel.cancel();
                        if let Some(process) = &mut process { process.kill(); }
                        return Ended::Stopped;
                    }
                },
                quit = &mut waiting => break format!("the connection closed ({quit:?})"),
                answered = ping_answered => {
                    ping = None;
                    // A server busy with a call is judged by the call's timeout, not a ping.
                    let busy = self.server.calls_out.load(Ordering::Relaxed) > 0;
                    if !answered && !busy {
                        break format!("it did not answer a ping within {PING_TIMEOUT:?}");
                    }
                }
                () = ping_due => {
                    next_ping = ping_every.map(|every| Instant::now() + every);
                    if self.server.calls_out.load(Ordering::Relaxed) == 0 {
                        let peer = peer.clone();
                        ping = Some(Box::pin(async move {
                            let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
                            tokio::time::timeout(PING_TIMEOUT, ping).await.is_ok()
                        }));
                    }
                }
            }
        };
        // Down: whatever is left of it is killed before the restart.
        cancel.cancel();
        let mut why = ended;
        if let Some(mut process) = process {
            if let Some(status) = process.exited() {
                why = format!("{why}; the process exited: {status}");
            }
            why.push_str(&process.last_words());
            process.kill();
        }
        Ended::Down(why)
    }
}

/// Starts the server and lists its tools, within its start timeout; a stdio server's
/// process is kept in `process` while it starts.
async fn connect(
    server: &Server,
    first: bool,
    process: &mut Option<ServerProcess>,
) -> Result<(Link, Vec<rmcp::model::Tool>), String> {
    let config = &server.config;
    let handler = Handler {
        progress: server.progress.clone(),
    };
    let started = tokio::time::timeout(config.start_timeout, async {
        let service = match &config.transport {
            Transport::Stdio { .. } => {
                let (spawned, pipes) = ServerProcess::spawn(&server.name, &config.transport)?;
                if let Some(group) = spawned.group() {
                    server.add_group(group);
                }
                *process = Some(spawned);
                handler.serve(pipes).await.map_err(|e| e.to_string())?
            }
            Transport::Http { url, headers } => {
                let transport = crate::http::transport(url, headers)?;
                handler.serve(transport).await.map_err(|e| e.to_string())?
            }
        };
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((service, tools))
    })
    .await;
    let result = match started {
        Ok(Ok((service, tools))) => {
            let process = process.take();
            return Ok((Link { service, process }, tools));
        }
        Ok(Err(why)) => why,
        Err(_) => format!("it did not come up within {:?}", config.start_timeout),
    };
    let mut why = result;
    if let Some(mut process) = process.take() {
        if let Some(status) = process.exited() {
            why = format!("{why} (the process exited: {status})");
        }
        why.push_str(&process.last_words());
        process.kill();
    }
    if !first {
        tracing::warn!(server = %server.name, "MCP server restart failed: {why}");
    }
    Err(why)
}

/// The first wait before an unreachable HTTP server is tried again.
const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest.
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

/// The next stop in `mailbox` (`None` when the mailbox closed), skipping other messages.
async fn next_stop(
    mailbox: &mut mpsc::UnboundedReceiver<Control>,
) -> Option<(Instant, oneshot::Sender<()>)> {
    loop {
        match mailbox.recv().await? {
            Control::Stop { deadline, done } => return Some((deadline, done)),
            Control::Lost { .. } | Control::Retry => {}
        }
    }
}
