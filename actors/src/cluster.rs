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
//! # Layout
//!
//! * This file: the public types beside [`Node`] and [`NodeConfig`] ([`ClusterError`],
//!   [`NodeStats`], [`tls`]), what a stand-in is told (`EdgeInput`), and the edges'
//!   timer.
//! * `config.rs`: [`NodeConfig`], and what [`Node::start`] refuses.
//! * `node.rs`: [`Node`]: ractor_cluster's node server, session events, joins and
//!   reconnects, the host actor; the node's shared state (`NodeInner`).
//! * `routes.rs`: the routing table: which stand-in or hosted edge a frame is for, the
//!   hosted trees, the node's counts; frames sent to a peer's host.
//! * `placed.rs`: how the cluster plugs into a tree:
//!   [`TreeBuilder::node`](crate::TreeBuilder::node) attaches a node as the tree's
//!   placement (the core's one seam), [`Tree::remote_records`](crate::Tree::remote_records).
//! * `stand_in.rs`: a remote child on its owner's node (the owner's end of its edge).
//! * `hosted.rs`: the child's side of one edge: its hosted tree, as one task.
//! * `wire.rs`: the one message that crosses nodes, and its envelope.
//! * `edge.rs` + `edge/`: the edge's pure machines (delivery, lease, mirror, presence,
//!   shutdown across nodes, frame size, id rewriting), with `now` passed in; nothing there
//!   knows tokio, ractor or the registry. `edge_tests.rs` (tests only): their wiring
//!   tests, against the agent's writers and the registry.
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
//! A node's routing table (`NodeInner::routes`, `routes.rs`), its joined peers and its host
//! factory are leaf `parking_lot` mutexes: under them only their maps are read or changed
//! (the factory is cloned out, never called under its lock); messages are sent after they
//! are released.

mod config;
pub(crate) mod edge;
#[cfg(test)]
mod edge_tests;
mod hosted;
mod node;
mod placed;
mod routes;
mod stand_in;
mod wire;

use std::net::SocketAddr;
use std::time::Duration;

use agent_tree_protocol::Usage;

pub use config::{MIN_LEASE, NodeConfig};
pub use node::Node;
pub use ractor_cluster::IncomingEncryptionMode;

pub(crate) use node::{NodeInner, PeerEvent};

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
