//! A node: ractor_cluster's node server, its session events, joins and reconnects, and
//! the host actor that hands each frame another node sends to its edge; [`Node`] is the
//! application's handle on it, `NodeInner` the state its host, stand-ins and hosted edges
//! share.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use agent_tree_protocol::Usage;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use ractor_cluster::node::NodeServerSessionInformation;
use ractor_cluster::{NodeServer, NodeServerMessage};
use tokio::sync::{broadcast, mpsc};

use super::edge::lease::LeaseTerms;
use super::routes::{Routes, host_group};
use super::wire::{Envelope, HostMsg};
use super::{ClusterError, EdgeInput, NodeConfig, NodeStats, tls};
use crate::msg::AgentMsg;
use crate::tree::TreeBuilder;

/// A peer's session came or went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerEvent {
    Up(String),
    Down(String),
}

/// Builds the tree a node hosts one remote child's subtree in.
type HostFactory = Arc<dyn Fn() -> TreeBuilder + Send + Sync>;

/// A node's state, shared by its host actor, its stand-ins and its hosted edges.
pub(crate) struct NodeInner {
    pub(super) config: NodeConfig,
    /// This process's boot id.
    pub(super) boot: u64,
    server: ActorRef<NodeServerMessage>,
    host: ActorRef<HostMsg>,
    /// A leaf lock (see the module docs).
    pub(super) routes: Mutex<Routes>,
    pub(super) hosting: Mutex<Option<HostFactory>>,
    peers: broadcast::Sender<PeerEvent>,
    /// Peers this node joined, by name: it reconnects to them when their session closes.
    /// A leaf lock.
    joined: Mutex<HashMap<String, Joined>>,
    pub(super) edges: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for NodeInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeInner")
            .field("name", &self.config.name)
            .field("boot", &self.boot)
            .finish_non_exhaustive()
    }
}

impl NodeInner {
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    pub(crate) fn terms(&self) -> LeaseTerms {
        self.config.terms()
    }

    pub(crate) fn reconnect_window(&self) -> Duration {
        self.config.reconnect_window
    }

    pub(crate) fn subscribe_peers(&self) -> broadcast::Receiver<PeerEvent> {
        self.peers.subscribe()
    }

    /// A peer's session came or went: tell its stand-ins and hosted edges, and reconnect
    /// to a peer this node joined.
    fn on_peer(self: &Arc<Self>, event: PeerEvent) {
        let peer = match &event {
            PeerEvent::Up(peer) | PeerEvent::Down(peer) => peer.clone(),
        };
        let stand_ins: Vec<ActorRef<AgentMsg>> = self
            .routes
            .lock()
            .stand_ins
            .values()
            .filter(|(p, _)| *p == peer)
            .map(|(_, a)| a.clone())
            .collect();
        for actor in stand_ins {
            let input = match event {
                PeerEvent::Up(_) => EdgeInput::PeerUp,
                PeerEvent::Down(_) => EdgeInput::PeerDown,
            };
            let _ = actor.send_message(super::placed::edge_msg(input));
        }
        let _ = self.peers.send(event.clone());
        if let PeerEvent::Down(_) = event {
            // One reconnect loop per peer at a time: a session that fails again (a wrong
            // cookie) closes again, and must not start another loop.
            let how = {
                let mut joined = self.joined.lock();
                match joined.get_mut(&peer) {
                    Some(entry) if !entry.reconnecting => {
                        entry.reconnecting = true;
                        Some((entry.addr, entry.tls.clone()))
                    }
                    _ => None,
                }
            };
            if let Some((addr, tls)) = how {
                tokio::spawn(reconnect(Arc::downgrade(self), peer, addr, tls));
            }
        }
    }
}

/// Where a joined peer is, how to connect to it, and whether a reconnect loop runs for it.
#[derive(Clone, Debug)]
struct Joined {
    addr: SocketAddr,
    tls: Option<Tls>,
    reconnecting: bool,
}

/// How a peer joined with TLS is connected to: the connector and the name its certificate
/// must carry.
#[derive(Clone)]
struct Tls {
    connector: tls::TlsConnector,
    domain: tls::rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

/// Opens a session to `addr`, with TLS when `tls` says how.
async fn connect(
    node: &NodeInner,
    addr: SocketAddr,
    tls: Option<&Tls>,
) -> Result<(), ractor_cluster::ClientConnectErr> {
    match tls {
        None => ractor_cluster::client_connect(&node.server, addr).await,
        Some(tls) => {
            ractor_cluster::client_connect_enc(
                &node.server,
                addr,
                tls.connector.clone(),
                tls.domain.clone(),
            )
            .await
        }
    }
}

/// The first wait of a reconnect loop; it doubles after each failed attempt, up to
/// [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// Reconnects to a joined peer whose session closed (with TLS if it joined with TLS), after
/// 100 ms and then backing off to one attempt every 5 s, until a session to it is ready
/// again or the node is gone.
async fn reconnect(node: Weak<NodeInner>, peer: String, addr: SocketAddr, tls: Option<Tls>) {
    let mut wait = RECONNECT_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RECONNECT_MAX);
        let Some(node) = node.upgrade() else { return };
        let ready = node.reaches(&peer)
            || match connect(&node, addr, tls.as_ref()).await {
                Ok(()) => wait_ready(&node, &peer, node.config.connect_timeout).await,
                Err(error) => {
                    tracing::debug!(%peer, error = %connect_error(&error), "reconnect failed; retrying");
                    false
                }
            };
        if ready {
            if let Some(entry) = node.joined.lock().get_mut(&peer) {
                entry.reconnecting = false;
            }
            return;
        }
    }
}

/// ractor_cluster's connect error as text (its `Display` is its `Debug`).
fn connect_error(error: &ractor_cluster::ClientConnectErr) -> String {
    match error {
        ractor_cluster::ClientConnectErr::Socket(io)
        | ractor_cluster::ClientConnectErr::Encryption(io) => io.to_string(),
        other => format!("{other:?}"),
    }
}

/// Waits until `peer`'s host is visible (its session ready), at most `timeout`.
async fn wait_ready(node: &NodeInner, peer: &str, timeout: Duration) -> bool {
    let mut events = node.subscribe_peers();
    let ready = async {
        loop {
            if node.reaches(peer) {
                return;
            }
            match events.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    };
    tokio::time::timeout(timeout, ready).await.is_ok()
}

/// A node of a tree across machines: ractor_cluster's node server, this node's host actor
/// (in the process group `agent-tree/<cluster>/<name>`), and the edges through it. One per
/// process (ractor_cluster can give two node servers in one process colliding ids).
///
/// Dropping it stops its server and host; the stand-ins and hosted edges through it then
/// settle by their leases.
#[derive(Debug)]
pub struct Node {
    inner: Arc<NodeInner>,
}

/// ractor_cluster's session events, as [`PeerEvent`]s for the node's task.
struct Sessions(mpsc::UnboundedSender<PeerEvent>);

impl Sessions {
    /// The peer's node name: ractor_cluster names a session's peer `name@host`.
    fn name(session: &NodeServerSessionInformation) -> Option<String> {
        let full = &session.peer_name.as_ref()?.name;
        Some(
            full.split_once('@')
                .map_or(full.as_str(), |(name, _)| name)
                .to_owned(),
        )
    }
}

impl ractor_cluster::NodeEventSubscription for Sessions {
    fn node_session_opened(&self, _: NodeServerSessionInformation) {}

    fn node_session_disconnected(&self, session: NodeServerSessionInformation) {
        if let Some(name) = Self::name(&session) {
            let _ = self.0.send(PeerEvent::Down(name));
        }
    }

    fn node_session_authenticated(&self, _: NodeServerSessionInformation) {}

    fn node_session_ready(&self, session: NodeServerSessionInformation) {
        if let Some(name) = Self::name(&session) {
            let _ = self.0.send(PeerEvent::Up(name));
        }
    }
}

/// The host actor: decodes the envelopes other nodes send and hands each to its edge.
struct Host;

/// Where the host finds its node, set once both exist.
type HostSlot = Arc<std::sync::OnceLock<Weak<NodeInner>>>;

impl Actor for Host {
    type Msg = HostMsg;
    type State = HostSlot;
    type Arguments = HostSlot;

    async fn pre_start(
        &self,
        _: ActorRef<HostMsg>,
        slot: HostSlot,
    ) -> Result<HostSlot, ActorProcessingErr> {
        Ok(slot)
    }

    async fn handle(
        &self,
        _: ActorRef<HostMsg>,
        message: HostMsg,
        slot: &mut HostSlot,
    ) -> Result<(), ActorProcessingErr> {
        let Some(node) = slot.get().and_then(Weak::upgrade) else {
            return Ok(());
        };
        match Envelope::decode(&message) {
            Ok(envelope) => node.deliver(envelope),
            Err(error) => {
                tracing::warn!(%error, "dropped a host message that is not an edge frame")
            }
        }
        Ok(())
    }
}

impl Node {
    /// Starts the node: ractor_cluster's node server on the configured address, and this
    /// node's host actor.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Config`] for a config [`NodeConfig::check`] refuses;
    /// [`ClusterError::Startup`] when an actor does not start (the port is taken, say).
    pub async fn start(config: NodeConfig) -> Result<Node, ClusterError> {
        config.check()?;
        let server = NodeServer::new(
            config.port,
            config.cookie.clone(),
            config.name.clone(),
            config.listen.to_string(),
            config.encryption.clone(),
            Some(ractor_cluster::node::NodeConnectionMode::Isolated),
        )
        .with_listen_addr(config.listen);
        let (listen, port) = (config.listen, config.port);
        let (server, _) = Actor::spawn(None, server, ())
            .await
            .map_err(|e| ClusterError::Startup(format!("listening on {listen}:{port}: {e}")))?;
        let (events_tx, mut events_rx) = mpsc::unbounded_channel();
        let _ = server.cast(NodeServerMessage::SubscribeToEvents {
            id: "agent-tree".into(),
            subscription: Box::new(Sessions(events_tx)),
        });
        // The host needs the node, and the node its host: the host learns its node once
        // both exist (it drops what arrives before, which nothing sends).
        let slot: HostSlot = Arc::default();
        let (host, _) = Actor::spawn(None, Host, Arc::clone(&slot))
            .await
            .map_err(|e| ClusterError::Startup(e.to_string()))?;
        let group = host_group(&config.cluster, &config.name);
        let inner = Arc::new(NodeInner {
            boot: boot_id(),
            server,
            host: host.clone(),
            routes: Mutex::default(),
            hosting: Mutex::default(),
            peers: broadcast::channel(64).0,
            joined: Mutex::default(),
            edges: std::sync::atomic::AtomicU64::new(1),
            config,
        });
        let _ = slot.set(Arc::downgrade(&inner));
        ractor::pg::join(group, vec![host.get_cell()]);
        // ractor_cluster's session events, turned into the node's own.
        let node = Arc::downgrade(&inner);
        tokio::spawn(async move {
            while let Some(event) = events_rx.recv().await {
                let Some(node) = node.upgrade() else { return };
                node.on_peer(event);
            }
        });
        Ok(Node { inner })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// ractor_cluster's node server, for connections this API does not make (then
    /// [`Node::await_peer`]); such sessions are not reconnected by this node.
    pub fn server(&self) -> &ActorRef<NodeServerMessage> {
        &self.inner.server
    }

    /// Connects to the node named `peer` at `addr` and waits until its session is ready
    /// (authenticated, its host visible). Once joined, if the session closes later, this
    /// node reconnects by itself (after 100 ms, backing off to every 5 s) for as long as it
    /// runs. A join that fails is not retried: call it again (a peer not started yet
    /// refuses the connection). Sessions opened another way ([`Node::server`]) are not
    /// reconnected by this node.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Connect`] when the connection fails, [`ClusterError::Timeout`] when
    /// the session is not ready within the connect timeout (a wrong cookie or cluster
    /// name, say: the peer logs the authentication failure).
    pub async fn join(&self, addr: SocketAddr, peer: &str) -> Result<(), ClusterError> {
        self.join_with(addr, peer, None).await
    }

    /// As [`Node::join`], over TLS (ractor_cluster's, which it calls experimental): the
    /// peer accepts with `IncomingEncryptionMode::Tls` ([`NodeConfig::encryption`]), and its
    /// certificate must be valid for `domain` under `connector`'s config. A closed session
    /// is reconnected with TLS too.
    ///
    /// # Errors
    ///
    /// As [`Node::join`]; a TLS handshake that fails (an untrusted certificate, a wrong
    /// name, a peer without TLS) is [`ClusterError::Connect`].
    pub async fn join_tls(
        &self,
        addr: SocketAddr,
        peer: &str,
        connector: tls::TlsConnector,
        domain: tls::rustls::pki_types::ServerName<'static>,
    ) -> Result<(), ClusterError> {
        self.join_with(addr, peer, Some(Tls { connector, domain }))
            .await
    }

    async fn join_with(
        &self,
        addr: SocketAddr,
        peer: &str,
        tls: Option<Tls>,
    ) -> Result<(), ClusterError> {
        connect(&self.inner, addr, tls.as_ref())
            .await
            .map_err(|error| ClusterError::Connect {
                addr,
                error: connect_error(&error),
            })?;
        self.await_peer(peer).await?;
        let entry = Joined {
            addr,
            tls,
            reconnecting: false,
        };
        self.inner.joined.lock().insert(peer.to_owned(), entry);
        Ok(())
    }

    /// Waits until a session to the node named `peer` is ready, at most the connect
    /// timeout.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Timeout`] when it is not.
    pub async fn await_peer(&self, peer: &str) -> Result<(), ClusterError> {
        let timeout = self.inner.config.connect_timeout;
        if wait_ready(&self.inner, peer, timeout).await {
            Ok(())
        } else {
            Err(ClusterError::Timeout {
                peer: peer.to_owned(),
                timeout,
            })
        }
    }

    /// Closes every session to the node named `peer` (at most the connect timeout is spent
    /// asking the node server for them); how many it closed. A peer that joined this node,
    /// or that this node joined, reconnects; edges to it replay on the new session, and
    /// one not back within the reconnect window is down. For operators evicting a node, and
    /// for tests of a short disconnect.
    pub async fn disconnect(&self, peer: &str) -> usize {
        let timeout = self.inner.config.connect_timeout;
        let asked = ractor::call_t!(
            self.inner.server,
            NodeServerMessage::GetSessions,
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
        );
        let Ok(sessions) = asked else { return 0 };
        let mut closed = 0;
        for session in sessions.values() {
            if Sessions::name(session).as_deref() == Some(peer) {
                session.actor.stop(Some("agent-tree: disconnected".into()));
                closed += 1;
            }
        }
        closed
    }

    /// Whether a session to the node named `peer` is ready now.
    pub fn reaches(&self, peer: &str) -> bool {
        self.inner.reaches(peer)
    }

    /// Makes this node host the subtrees other nodes place on it: each remote child gets a
    /// tree of its own, built by `factory` (its catalog, models, tools and hooks are this
    /// node's), whose root stands for the remote owner.
    ///
    /// Each run of a remote child (a first run, a restart, a resume) is a fresh hosted tree
    /// in which the remote agent is `a1`: a model shared across the trees `factory` builds
    /// sees every remote top agent as `a1` (the test kit's `ScriptedModel` keeps one place
    /// in a script per agent id, so share one only where runs follow each other, and build
    /// one per tree where remote agents run side by side).
    pub fn host(&self, factory: impl Fn() -> TreeBuilder + Send + Sync + 'static) {
        *self.inner.hosting.lock() = Some(Arc::new(factory));
    }

    /// What runs through this node now, and what it has counted.
    pub fn stats(&self) -> NodeStats {
        let (edges, trees, ended, acknowledged, stand_ins) = {
            let routes = self.inner.routes.lock();
            let trees: Vec<Arc<crate::Tree>> =
                routes.trees.values().filter_map(Weak::upgrade).collect();
            (
                routes.hosted.len(),
                trees,
                routes.ended_usage,
                routes.acknowledged,
                routes.stand_ins.len(),
            )
        };
        // Read after the lock: a tree's own reads take its registry's lock.
        let root = |t: &Arc<crate::Tree>| {
            t.record(agent_tree_protocol::AgentId::ROOT)
                .map_or(Usage::ZERO, |r| r.subtree)
        };
        NodeStats {
            hosted_edges: edges,
            hosted_live: trees.iter().map(|t| t.live()).sum(),
            hosted_usage: ended + trees.iter().map(root).sum::<Usage>(),
            stand_ins,
            acknowledged_deltas: acknowledged.0,
            acknowledged_usage: acknowledged.1,
        }
    }

    pub(crate) fn inner(&self) -> &Arc<NodeInner> {
        &self.inner
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.inner.host.stop(None);
        self.inner.server.stop(None);
    }
}

/// A boot id: distinct for every node process (time and process id mixed).
fn boot_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}
