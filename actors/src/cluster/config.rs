//! How a node joins a tree across nodes: [`NodeConfig`], and what [`Node::start`](super::Node::start) refuses.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::edge::lease::LeaseTerms;
use super::{ClusterError, IncomingEncryptionMode, TICK};

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
    pub(super) name: String,
    pub(super) cluster: String,
    pub(super) cookie: String,
    pub(super) port: u16,
    pub(super) listen: IpAddr,
    pub(super) encryption: Option<IncomingEncryptionMode>,
    pub(super) lease: Duration,
    pub(super) grace: Duration,
    pub(super) reconnect_window: Duration,
    pub(super) connect_timeout: Duration,
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

    /// How long [`Node::join`](super::Node::join) and
    /// [`Node::await_peer`](super::Node::await_peer) wait for a peer's session to be
    /// ready.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub(super) fn terms(&self) -> LeaseTerms {
        LeaseTerms {
            lease: self.lease,
            grace: self.grace,
        }
    }

    /// What [`Node::start`](super::Node::start) refuses: an empty cookie, an empty name or
    /// cluster name, a node name with `@` (ractor_cluster names a peer `name@host`), a
    /// lease under [`MIN_LEASE`] (renewals every third of it must outpace the edges' 100 ms
    /// timer), a grace or a reconnect window under one timer tick (100 ms), a zero connect
    /// timeout.
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

/// A `NodeConfig` that cannot work is refused by `Node::start` with a
/// `ClusterError::Config` naming the setting, as an empty cookie or a zero lease is.
#[cfg(test)]
mod configs_that_cannot_work_are_refused {
    use super::*;
    use crate::cluster::Node;

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
