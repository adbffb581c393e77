//! Trees across nodes, on ractor_cluster (feature `cluster`): a node, its host actor, and
//! the owner edges between an owner's node and the nodes hosting its remote children.
//!
//! An agent placed on another node (by its definition's [`node`] or the application's
//! [`SpawnRequest::node`]) is, on its owner's node, a **stand-in**: an actor linked under its
//! owner like any child, with a record in the owner's registry, so restart policies, wait
//! policies, control scope and shutdown work unchanged. On the other node, the node's
//! **host** starts a tree of its own for it (the *hosted tree*, built by the application's
//! [`Node::host`] factory, whose root `a0` stands for the remote owner) and forwards every
//! event of that tree up the edge; the commands the stand-in is given (steer, abort,
//! shutdown) go down. The edge is this crate's protocol (`agent_tree_protocol::edge`,
//! carried out by the pure machines of `edge`), never ractor's supervision, which
//! does not cross nodes: sequence numbers and replay make every event count once, a lease
//! bounds how long a hosted subtree outlives an owner it cannot reach, and the owner's side
//! gives the subtree up when its node is down. `docs/cluster.md` states the semantics.
//!
//! [`node`]: agent_tree_protocol::AgentDefinition::node
//! [`SpawnRequest::node`]: agent_tree_protocol::SpawnRequest::node
//!
//! Two processes (one node per process):
//!
//! ```no_run
//! use agent_tree_actors::cluster::{Node, NodeConfig};
//! use agent_tree_actors::testkit::{Script, ScriptedModel, Turn};
//! use agent_tree_actors::{Catalog, Tree};
//! use agent_tree_protocol::{AgentDefinition, SpawnRequest};
//!
//! /// The worker's process: hosts the subtrees placed on it, each in a tree of its own,
//! /// with this node's catalog and model, until the process ends.
//! async fn worker() -> Result<(), Box<dyn std::error::Error>> {
//!     let worker = Node::start(NodeConfig::new("worker", "builds", "s3cret").port(4101)).await?;
//!     worker.host(|| {
//!         Tree::builder()
//!             .catalog(Catalog::new([AgentDefinition::new("runner", "You run builds.")]).unwrap())
//!             .model(ScriptedModel::new().script("runner", Script::new([Turn::answer("built")])))
//!     });
//!     std::future::pending::<()>().await;
//!     Ok(())
//! }
//!
//! /// The owner's process: its tree places `runner` agents on the worker.
//! async fn owner() -> Result<(), Box<dyn std::error::Error>> {
//!     let owner = Node::start(NodeConfig::new("owner", "builds", "s3cret").port(4100)).await?;
//!     owner.join("127.0.0.1:4101".parse()?, "worker").await?;
//!     let tree = Tree::builder()
//!         .catalog(Catalog::new([AgentDefinition::new("runner", "").on_node("worker")]).unwrap())
//!         .model(ScriptedModel::new())
//!         .node(&owner)
//!         .build()
//!         .await?;
//!     let outcome = tree.run(SpawnRequest::new("runner", "build it")).await?;
//!     assert_eq!(outcome.text.as_deref(), Some("built"));
//!     tree.shutdown().await;
//!     Ok(())
//! }
//! ```
//!
//! # What ractor's `cluster` feature asks of a build
//!
//! Turning this feature on turns on ractor's `cluster` feature for the whole build, and that
//! takes away ractor's blanket `impl Message for T`: **every actor message type in the build
//! needs `impl ractor::Message for T {}`** (this crate's own have theirs). Only the host's
//! message crosses nodes; agents and their messages stay local.
//!
//! # Security
//!
//! Nodes authenticate with the cookie (required, never empty), by ractor_cluster's
//! challenge; no frame of a node that did not authenticate reaches a host. ractor_cluster
//! calls its TLS and authentication experimental. For TLS, start the accepting node with
//! [`NodeConfig::encryption`] (`IncomingEncryptionMode::Tls` with a [`tls::TlsAcceptor`])
//! and join it with [`Node::join_tls`]; the [`tls`] module re-exports the TLS crates, so an
//! application needs none of its own.
//!
//! # Locks
//!
//! A node's routing table (`NodeInner::routes`), its joined peers and its host factory are
//! leaf `parking_lot` mutexes: under them only their maps are read or changed (the factory
//! is cloned out, never called under its lock); messages are sent after they are released.

pub(crate) mod edge;
#[cfg(test)]
mod edge_tests;
mod hosted;
mod stand_in;
mod wire;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use ractor_cluster::node::NodeServerSessionInformation;
use ractor_cluster::{NodeServer, NodeServerMessage};
use tokio::sync::{broadcast, mpsc};

pub use ractor_cluster::IncomingEncryptionMode;

/// The TLS crates ractor_cluster's encryption is built on, for [`NodeConfig::encryption`]
/// and [`Node::join_tls`]: tokio-rustls's acceptor and connector, and rustls itself (its
/// configs, `pki_types` for certificates, keys and server names).
///
/// Name the crypto provider (as below): a build with more than one has no process
/// default, and this crate's `openai` / `anthropic` model adapters bring in ring (and
/// install it as the default when they build a client) beside the aws-lc-rs the cluster's
/// TLS brings.
///
/// ```no_run
/// use std::path::Path;
/// use std::sync::Arc;
/// use agent_tree_actors::cluster::tls::rustls::pki_types::pem::PemObject as _;
/// use agent_tree_actors::cluster::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
/// use agent_tree_actors::cluster::tls::{rustls, TlsAcceptor, TlsConnector};
/// use agent_tree_actors::cluster::{IncomingEncryptionMode, NodeConfig};
///
/// fn provider() -> Arc<rustls::crypto::CryptoProvider> {
///     Arc::new(rustls::crypto::aws_lc_rs::default_provider())
/// }
///
/// // The accepting node: its certificate chain and key, from PEM files.
/// fn acceptor(dir: &Path) -> Result<TlsAcceptor, Box<dyn std::error::Error>> {
///     let chain = CertificateDer::pem_file_iter(dir.join("node.pem"))?
///         .collect::<Result<Vec<_>, _>>()?;
///     let key = PrivateKeyDer::from_pem_file(dir.join("node.key"))?;
///     let config = rustls::ServerConfig::builder_with_provider(provider())
///         .with_safe_default_protocol_versions()?
///         .with_no_client_auth()
///         .with_single_cert(chain, key)?;
///     Ok(TlsAcceptor::from(Arc::new(config)))
/// }
///
/// // The joining node: trusting the CA that signed the other's certificate.
/// fn connector(dir: &Path) -> Result<TlsConnector, Box<dyn std::error::Error>> {
///     let mut roots = rustls::RootCertStore::empty();
///     for ca in CertificateDer::pem_file_iter(dir.join("ca.pem"))? {
///         roots.add(ca?)?;
///     }
///     let config = rustls::ClientConfig::builder_with_provider(provider())
///         .with_safe_default_protocol_versions()?
///         .with_root_certificates(roots)
///         .with_no_client_auth();
///     Ok(TlsConnector::from(Arc::new(config)))
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = Path::new("certs");
/// let config = NodeConfig::new("worker-1", "my-cluster", "a long shared cookie")
///     .encryption(IncomingEncryptionMode::Tls(acceptor(dir)?));
/// // The owner's node: `node.join_tls(addr, "worker-1", connector(dir)?,
/// // rustls::pki_types::ServerName::try_from("worker-1.example.org")?).await?`.
/// # let _ = (config, connector(dir)?);
/// # Ok(())
/// # }
/// ```
pub mod tls {
    pub use tokio_rustls::{TlsAcceptor, TlsConnector, rustls};
}

use agent_tree_protocol::Usage;

use crate::msg::AgentMsg;
use crate::tree::TreeBuilder;
use edge::lease::LeaseTerms;
use wire::{Directed, Envelope, HostMsg};

pub(crate) use stand_in::start as start_stand_in;

/// What a stand-in is told besides its own messages.
#[derive(Debug)]
pub(crate) enum EdgeInput {
    /// A frame of its edge, from a process with this boot id.
    Frame {
        frame: agent_tree_protocol::Frame<agent_tree_protocol::Up>,
        boot: u64,
    },
    /// Its timer: retransmission, the lease, the reconnect window, the shutdown deadline.
    Tick,
    /// The session to its child's node closed.
    PeerDown,
    /// A session to its child's node is ready (again).
    PeerUp,
    /// The records of its mirror, for [`Tree::remote_records`](crate::Tree::remote_records).
    Records(tokio::sync::oneshot::Sender<Vec<agent_tree_protocol::AgentRecord>>),
}

/// How a node joins a tree across nodes.
///
/// ```
/// use agent_tree_actors::cluster::NodeConfig;
/// use std::time::Duration;
/// let config = NodeConfig::new("worker-1", "builds", "s3cret")
///     .port(4101)
///     .lease(Duration::from_secs(3), Duration::from_secs(1));
/// assert_eq!(config.name(), "worker-1");
/// ```
#[derive(Clone, Debug)]
pub struct NodeConfig {
    name: String,
    cluster: String,
    cookie: String,
    port: u16,
    listen: IpAddr,
    encryption: Option<IncomingEncryptionMode>,
    lease: Duration,
    grace: Duration,
    reconnect_window: Duration,
    connect_timeout: Duration,
}

impl NodeConfig {
    /// A node named `name` (unique in the cluster) of the cluster `cluster` (the name its
    /// hosts' process groups share), authenticating with `cookie`. It listens on
    /// 127.0.0.1, port 4370 unless set; the lease is 10 s with a 2 s grace, the reconnect
    /// window 2 s, the connect timeout (of `join`, `join_tls` and `await_peer`) 5 s.
    pub fn new(
        name: impl Into<String>,
        cluster: impl Into<String>,
        cookie: impl Into<String>,
    ) -> Self {
        NodeConfig {
            name: name.into(),
            cluster: cluster.into(),
            cookie: cookie.into(),
            port: 4370,
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
            encryption: None,
            lease: Duration::from_secs(10),
            grace: Duration::from_secs(2),
            reconnect_window: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port to listen on.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The address to listen on (127.0.0.1 unless set).
    pub fn listen(mut self, addr: IpAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Accept connections with TLS (ractor_cluster's, which it calls experimental).
    pub fn encryption(mut self, mode: IncomingEncryptionMode) -> Self {
        self.encryption = Some(mode);
        self
    }

    /// The lease a hosted subtree holds from its owner's node, and the grace after it
    /// before the owner's node declares the subtree killed. Both nodes of an edge should
    /// use the same terms: the owner's node grants its own lease length.
    pub fn lease(mut self, lease: Duration, grace: Duration) -> Self {
        self.lease = lease;
        self.grace = grace;
        self
    }

    /// How long a node whose session closed may take to come back (same process, replayed,
    /// invisible to agents) before the owner's node gives its subtrees up as down.
    pub fn reconnect_window(mut self, window: Duration) -> Self {
        self.reconnect_window = window;
        self
    }

    /// How long [`Node::join`] and [`Node::await_peer`] wait for a peer's session to be
    /// ready.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    fn terms(&self) -> LeaseTerms {
        LeaseTerms {
            lease: self.lease,
            grace: self.grace,
        }
    }

    /// What [`Node::start`] refuses: an empty cookie, an empty name or cluster name, a
    /// node name with `@` (ractor_cluster names a peer `name@host`), a lease under
    /// [`MIN_LEASE`] (renewals every third of it must outpace the edges' 100 ms timer), a
    /// grace or a reconnect window under one timer tick (100 ms), a zero connect timeout.
    ///
    /// ```
    /// use agent_tree_actors::cluster::NodeConfig;
    /// use std::time::Duration;
    /// assert!(NodeConfig::new("w", "c", "cookie").check().is_ok());
    /// assert!(NodeConfig::new("w", "c", "").check().is_err());
    /// assert!(NodeConfig::new("w@h", "c", "cookie").check().is_err());
    /// let short = NodeConfig::new("w", "c", "cookie").lease(Duration::from_millis(50), Duration::from_secs(1));
    /// assert!(short.check().is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClusterError::Config`] naming the setting.
    pub fn check(&self) -> Result<(), ClusterError> {
        let refuse = |why: String| Err(ClusterError::Config(why));
        if self.cookie.is_empty() {
            return refuse("the cookie is required".into());
        }
        if self.name.trim().is_empty() || self.cluster.trim().is_empty() {
            return refuse("the node and cluster names must not be empty".into());
        }
        if self.name.contains('@') {
            return refuse(format!(
                "node name {:?} contains '@' (ractor_cluster names a peer `name@host`)",
                self.name
            ));
        }
        if self.lease < MIN_LEASE {
            return refuse(format!(
                "the lease ({:?}) is under {MIN_LEASE:?}: renewals every third of it must outpace the 100 ms timer",
                self.lease
            ));
        }
        if self.grace < TICK {
            return refuse(format!(
                "the grace ({:?}) is under one 100 ms tick",
                self.grace
            ));
        }
        if self.reconnect_window < TICK {
            return refuse(format!(
                "the reconnect window ({:?}) is under one 100 ms tick: no reconnect could ever come back in time",
                self.reconnect_window
            ));
        }
        if self.connect_timeout.is_zero() {
            return refuse("the connect timeout must not be zero".into());
        }
        Ok(())
    }
}

/// The shortest lease a node accepts.
pub const MIN_LEASE: Duration = Duration::from_millis(500);

/// The edges' timer (stand-ins and hosted edges tick this often).
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// An edge's retransmission runs every this many ticks.
pub(crate) const RETRANSMIT_EVERY: u32 = 4;

/// Why a node could not start or reach a peer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The configuration cannot work (an empty cookie or name, a zero lease).
    #[error("invalid node config: {0}")]
    Config(String),
    /// ractor_cluster's node server or this node's host did not start.
    #[error("node did not start: {0}")]
    Startup(String),
    /// The connection to a peer failed.
    #[error("could not connect to {addr}: {error}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        error: String,
    },
    /// The peer's session was not ready (authenticated, its hosts visible) in time.
    #[error(
        "node {peer} not reachable within {timeout:?}: is it running, under that name, with \
         the same cookie and cluster name, and does it accept TLS only (join it with \
         `Node::join_tls`)? (a wrong cookie or a plain connection to a TLS node fails \
         silently here; the peer logs it through `tracing`)"
    )]
    Timeout {
        /// The peer's name.
        peer: String,
        /// How long it waited.
        timeout: Duration,
    },
}

/// What runs through a node, and what it has counted ([`Node::stats`]).
///
/// ```
/// let stats = agent_tree_actors::cluster::NodeStats::default();
/// assert_eq!(stats.hosted_live, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// Hosted edges (remote children's subtrees on this node) now.
    pub hosted_edges: usize,
    /// Live agents in the trees this node hosts.
    pub hosted_live: usize,
    /// Usage billed by every tree this node hosted, ended ones included.
    pub hosted_usage: Usage,
    /// Stand-ins of remote children on this node now.
    pub stand_ins: usize,
    /// Hosted usage deltas this node's stand-ins applied (and so acknowledged).
    pub acknowledged_deltas: u64,
    /// Their sum.
    pub acknowledged_usage: Usage,
}

/// A peer's session came or went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerEvent {
    Up(String),
    Down(String),
}

/// Where a node's hosts deliver frames: stand-ins by edge on the owner's side, hosted
/// edges by edge on the child's side.
#[derive(Debug, Default)]
struct Routes {
    /// Owner's side: each edge's stand-in and the node it talks to.
    stand_ins: HashMap<String, (String, ActorRef<AgentMsg>)>,
    /// Child's side: each hosted edge's inbox.
    hosted: HashMap<String, mpsc::UnboundedSender<hosted::Input>>,
    /// Child's side: each hosted edge's tree, once built.
    trees: HashMap<String, Weak<crate::Tree>>,
    /// Child's side: the usage of hosted trees whose edges ended.
    ended_usage: Usage,
    /// Owner's side: usage deltas stand-ins applied (and so acknowledged), and their sum.
    acknowledged: (u64, Usage),
}

/// Builds the tree a node hosts one remote child's subtree in.
type HostFactory = Arc<dyn Fn() -> TreeBuilder + Send + Sync>;

/// A node's state, shared by its host actor, its stand-ins and its hosted edges.
pub(crate) struct NodeInner {
    config: NodeConfig,
    /// This process's boot id.
    boot: u64,
    server: ActorRef<NodeServerMessage>,
    host: ActorRef<HostMsg>,
    /// A leaf lock (see the module docs).
    routes: Mutex<Routes>,
    hosting: Mutex<Option<HostFactory>>,
    peers: broadcast::Sender<PeerEvent>,
    /// Peers this node joined, by name: it reconnects to them when their session closes.
    /// A leaf lock.
    joined: Mutex<HashMap<String, Joined>>,
    edges: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for NodeInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeInner")
            .field("name", &self.config.name)
            .field("boot", &self.boot)
            .finish_non_exhaustive()
    }
}

/// The process group of the host of node `node` in cluster `cluster`.
fn host_group(cluster: &str, node: &str) -> String {
    format!("agent-tree/{cluster}/{node}")
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

    /// The host of `peer`, if a session to it is ready.
    fn peer_host(&self, peer: &str) -> Option<ActorRef<HostMsg>> {
        ractor::pg::get_members(&host_group(&self.config.cluster, peer))
            .into_iter()
            .find(|cell| !cell.get_id().is_local())
            .map(ActorRef::from)
    }

    /// Whether a session to `peer` is ready.
    pub(crate) fn reaches(&self, peer: &str) -> bool {
        self.peer_host(peer).is_some()
    }

    /// Sends `frame` of `edge` to `peer`'s host; `false` when no session to it is ready.
    pub(crate) fn send(&self, peer: &str, edge: &str, frame: Directed) -> bool {
        let Some(host) = self.peer_host(peer) else {
            return false;
        };
        let envelope = Envelope {
            edge: edge.to_owned(),
            from: self.config.name.clone(),
            boot: self.boot,
            frame,
        };
        host.send_message(envelope.encode()).is_ok()
    }

    /// A fresh edge id for a stand-in of `agent`'s run `run`.
    pub(crate) fn new_edge(&self, agent: agent_tree_protocol::AgentId, run: u32) -> String {
        let n = self
            .edges
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}:{:x}:{agent}:{run}:{n}", self.config.name, self.boot)
    }

    pub(crate) fn route_stand_in(&self, edge: &str, peer: &str, actor: ActorRef<AgentMsg>) {
        self.routes
            .lock()
            .stand_ins
            .insert(edge.to_owned(), (peer.to_owned(), actor));
    }

    pub(crate) fn unroute_stand_in(&self, edge: &str) {
        self.routes.lock().stand_ins.remove(edge);
    }

    /// The hosted edge `edge` built its tree.
    pub(crate) fn hosted_tree(&self, edge: &str, tree: &Arc<crate::Tree>) {
        self.routes
            .lock()
            .trees
            .insert(edge.to_owned(), Arc::downgrade(tree));
    }

    /// The hosted edge `edge` ended, its tree having billed `usage`.
    pub(crate) fn unroute_hosted(&self, edge: &str, usage: Usage) {
        let mut routes = self.routes.lock();
        routes.hosted.remove(edge);
        routes.trees.remove(edge);
        routes.ended_usage += usage;
    }

    /// A stand-in applied a hosted usage delta.
    pub(crate) fn acknowledged(&self, delta: Usage) {
        let mut routes = self.routes.lock();
        routes.acknowledged.0 += 1;
        routes.acknowledged.1 += delta;
    }

    pub(crate) fn subscribe_peers(&self) -> broadcast::Receiver<PeerEvent> {
        self.peers.subscribe()
    }

    /// Delivers one envelope that arrived at this node's host.
    fn deliver(self: &Arc<Self>, envelope: Envelope) {
        let Envelope {
            edge,
            from,
            boot,
            frame,
        } = envelope;
        match frame {
            Directed::Up(frame) => {
                let stand_in = self
                    .routes
                    .lock()
                    .stand_ins
                    .get(&edge)
                    .map(|(_, a)| a.clone());
                match stand_in {
                    Some(actor) => {
                        let _ =
                            actor.send_message(AgentMsg::Edge(EdgeInput::Frame { frame, boot }));
                    }
                    // The edge has ended here (its stand-in settled): nothing will apply its
                    // frames any more, so each is acknowledged as it comes, and the hosted
                    // side ends without waiting out its linger.
                    None if frame.body.is_sequenced() => {
                        let done = agent_tree_protocol::Frame {
                            seq: 0,
                            ack: frame.seq,
                            body: agent_tree_protocol::Down::Ack { resend: false },
                        };
                        self.send(&from, &edge, Directed::Down(done));
                    }
                    None => tracing::debug!(%edge, %from, "frame for an edge that has ended"),
                }
            }
            Directed::Down(frame) => {
                let inbox = self.routes.lock().hosted.get(&edge).cloned();
                // Only a spawn opens an edge (whole, or the first part of one too large for
                // a frame: an edge's first frame is its spawn); anything else for an edge
                // this process does not have (a new process under an old one's name, an
                // edge that ended) is answered with this process's boot id, so the owner's
                // side can tell.
                let opens = match &frame.body {
                    agent_tree_protocol::Down::Command {
                        command: agent_tree_protocol::Command::Spawn { .. },
                    } => true,
                    agent_tree_protocol::Down::Part { part } => part.index == 0 && frame.seq == 1,
                    _ => false,
                };
                let inbox = match inbox {
                    Some(inbox) => inbox,
                    None if opens => match self.open_hosted(&edge, &from) {
                        Some(inbox) => inbox,
                        None => return,
                    },
                    None => {
                        let unknown = agent_tree_protocol::Frame {
                            seq: 0,
                            ack: 0,
                            body: agent_tree_protocol::Up::Gone,
                        };
                        self.send(&from, &edge, Directed::Up(unknown));
                        return;
                    }
                };
                let _ = inbox.send(hosted::Input::Frame(frame));
            }
        }
    }

    /// Opens the hosted side of a new edge from `owner`, if this node hosts subtrees.
    fn open_hosted(
        self: &Arc<Self>,
        edge: &str,
        owner: &str,
    ) -> Option<mpsc::UnboundedSender<hosted::Input>> {
        let Some(factory) = self.hosting.lock().clone() else {
            tracing::warn!(%edge, %owner, "a node that hosts nothing was sent an edge's frame");
            return None;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut routes = self.routes.lock();
            if let Some(existing) = routes.hosted.get(edge) {
                return Some(existing.clone());
            }
            routes.hosted.insert(edge.to_owned(), tx.clone());
        }
        let edge = hosted::Edge {
            node: Arc::clone(self),
            id: edge.to_owned(),
            owner: owner.to_owned(),
        };
        // The hosted tree is on this node: a definition placed here (the same agent files
        // loaded on both nodes) runs locally in it, and one placed elsewhere is reached.
        let mut builder = factory();
        builder.node = Some(Arc::clone(self));
        tokio::spawn(hosted::run(edge, builder, rx));
        Some(tx)
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
            let _ = actor.send_message(AgentMsg::Edge(input));
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

/// A `NodeConfig` that cannot work is refused by `Node::start` with a
/// `ClusterError::Config` naming the setting, as an empty cookie or a zero lease is.
#[cfg(test)]
mod configs_that_cannot_work_are_refused {
    use super::*;

    /// Each nonsense config, started one after the other (at most one node server at a
    /// time in this process); what was accepted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn node_start_refuses_configs_that_cannot_work() {
        let base = || NodeConfig::new("config-check", "config-check-cluster", "cookie").port(0);
        let nonsense = [
            // A node whose session blips once is down at once: no reconnect can ever win.
            (
                "a zero reconnect window",
                base().reconnect_window(Duration::ZERO),
            ),
            // The owner declares exactly when the child's lease ends: the docs' "the child
            // stopped at least `grace` before the owner declares" cannot hold.
            (
                "a zero grace",
                base().lease(Duration::from_secs(10), Duration::ZERO),
            ),
            // Both sides tick every 100 ms: a lease shorter than one tick lapses between
            // two renewals, every time.
            (
                "a lease shorter than a renewal tick",
                base().lease(Duration::from_millis(50), Duration::from_millis(10)),
            ),
            // `join` and `await_peer` can never succeed.
            (
                "a zero connect timeout",
                base().connect_timeout(Duration::ZERO),
            ),
        ];
        let mut accepted = Vec::new();
        for (what, config) in nonsense {
            match Node::start(config).await {
                Err(ClusterError::Config(_)) => {}
                Ok(node) => {
                    accepted.push(what);
                    drop(node);
                    // The server's stop is asynchronous: let it go before the next.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(other) => panic!("{what}: not a config error: {other}"),
            }
        }
        assert!(
            accepted.is_empty(),
            "Node::start accepted, without complaint: {accepted:?}"
        );
    }
}
