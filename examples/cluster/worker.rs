//! The worker node of `examples/cluster.rs` and of the cluster tests: a child process that
//! starts a node, hosts the subtrees an owner's node places on it, and answers `stats` on
//! its standard input with what it hosts.
//!
//! Its agents run on [`WorkerModel`] (`worker/model.rs`, whose docs list the tasks it
//! reads); the owner's side drives a worker process through [`WorkerProcess`]
//! (`worker/process.rs`).

#![allow(dead_code, reason = "the example and the tests use different parts")]

#[path = "worker/model.rs"]
mod model;
#[path = "worker/process.rs"]
mod process;

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::time::Duration;

use agent_tree::cluster::tls::rustls::pki_types::pem::PemObject as _;
use agent_tree::cluster::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use agent_tree::cluster::tls::{TlsAcceptor, TlsConnector, rustls};
use agent_tree::cluster::{IncomingEncryptionMode, Node, NodeConfig};
use agent_tree::protocol::{AgentDefinition, SubagentAllowance};
use agent_tree::{Catalog, FnTool, Tree};

pub(crate) use model::WorkerModel;
pub(crate) use process::WorkerProcess;

/// The cookie every node of the example and tests shares.
pub(crate) const COOKIE: &str = "agent-tree-example-cookie";

/// What one worker process is told on its command line.
#[derive(Clone, Debug)]
pub(crate) struct WorkerArgs {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) owner: String,
    pub(crate) owner_addr: SocketAddr,
    pub(crate) lease_ms: u64,
    pub(crate) grace_ms: u64,
}

impl WorkerArgs {
    /// The arguments, as the worker's command line takes them.
    pub(crate) fn to_args(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.port.to_string(),
            self.owner.clone(),
            self.owner_addr.to_string(),
            self.lease_ms.to_string(),
            self.grace_ms.to_string(),
        ]
    }

    /// Reads what [`WorkerArgs::to_args`] wrote.
    pub(crate) fn parse(args: &[String]) -> Option<WorkerArgs> {
        let [name, port, owner, owner_addr, lease_ms, grace_ms] = args else {
            return None;
        };
        Some(WorkerArgs {
            name: name.clone(),
            port: port.parse().ok()?,
            owner: owner.clone(),
            owner_addr: owner_addr.parse().ok()?,
            lease_ms: lease_ms.parse().ok()?,
            grace_ms: grace_ms.parse().ok()?,
        })
    }
}

/// The node config both sides of the example and tests use.
pub(crate) fn node_config(name: &str, port: u16, lease_ms: u64, grace_ms: u64) -> NodeConfig {
    NodeConfig::new(name, "cluster-example", COOKIE)
        .port(port)
        .lease(
            Duration::from_millis(lease_ms),
            Duration::from_millis(grace_ms),
        )
        .reconnect_window(Duration::from_millis(300))
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The worker's catalog: `runner` (may delegate to `helper`), `helper`, `flaky` (a
/// transient runner, as a catalog shared by every node would declare it) and `drainer` (a
/// runner that drains its children when its run ends).
pub(crate) fn worker_catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("runner", "You run tasks.")
            .with_allowed_subagents(SubagentAllowance::only(["helper"])),
        AgentDefinition::new("helper", "You help."),
        AgentDefinition::new("flaky", "You run tasks.")
            .with_restart(agent_tree::protocol::RestartPolicy::Transient),
        AgentDefinition::new("drainer", "You run tasks.")
            .with_allowed_subagents(SubagentAllowance::only(["helper"]))
            .with_settle(agent_tree::protocol::SettlePolicy::Drain),
    ])
    .expect("the worker's catalog is valid")
}
/// Builds the tree the worker hosts one remote child's subtree in.
pub(crate) fn hosted_tree() -> agent_tree::TreeBuilder {
    let pause = FnTool::new("pause", "waits a while", |_ctx, input| async move {
        let ms = input.get("ms").and_then(|v| v.as_u64()).unwrap_or(50);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok("paused".to_owned())
    });
    Tree::builder()
        .catalog(worker_catalog())
        .model(WorkerModel::default())
        .tool(pause)
        .expect("the pause tool's name is free")
}

/// Runs a worker node until its standard input closes: starts the node, hosts, joins the
/// owner's node, prints `worker ready`, and answers each `stats` line with
/// `stats live=<hosted live agents> tokens=<hosted usage, total tokens>`.
pub(crate) async fn run_worker(args: WorkerArgs) {
    // One model for every hosted tree: `fail-first` fails once per process.
    let model = std::sync::Arc::new(WorkerModel::default());
    run_worker_hosting(args, move || hosted_tree().shared_model(model.clone())).await;
}

/// As [`run_worker`], hosting the trees `factory` builds.
pub(crate) async fn run_worker_hosting(
    args: WorkerArgs,
    factory: impl Fn() -> agent_tree::TreeBuilder + Send + Sync + 'static,
) {
    let mut config = node_config(&args.name, args.port, args.lease_ms, args.grace_ms);
    // TLS (`AGENT_TREE_CLUSTER_TLS`: the directory of `worker.pem` and `worker.key`): the
    // node accepts TLS sessions only, and its owner joins it (`Node::join_tls`).
    let tls = std::env::var_os(TLS_ENV).map(std::path::PathBuf::from);
    if let Some(dir) = &tls {
        config = config.encryption(IncomingEncryptionMode::Tls(tls_acceptor(dir)));
    }
    let node = Node::start(config).await.expect("the worker's node starts");
    node.host(factory);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Deferred join (`AGENT_TREE_CLUSTER_DEFER_JOIN` set): the node is up but joins its
    // owner only when told `join` on its standard input.
    if std::env::var_os("AGENT_TREE_CLUSTER_DEFER_JOIN").is_some() {
        println!("worker started");
        while let Some(line) = rx.recv().await {
            if line.trim() == "join" {
                break;
            }
        }
    }
    let mut tries = 0;
    while tls.is_none()
        && let Err(error) = node.join(args.owner_addr, &args.owner).await
    {
        tries += 1;
        assert!(tries < 50, "the worker could not join its owner: {error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("worker ready");
    while let Some(line) = rx.recv().await {
        if line.trim() == "stats" {
            let stats = node.stats();
            println!(
                "stats live={} tokens={} edges={}",
                stats.hosted_live,
                stats.hosted_usage.total_tokens(),
                stats.hosted_edges
            );
        }
    }
}

/// The worker runs a TLS acceptor with the certificate and key in this directory.
pub(crate) const TLS_ENV: &str = "AGENT_TREE_CLUSTER_TLS";

/// The name the test certificate (`tests/fixtures/tls/worker.pem`) is valid for.
pub(crate) const TLS_NAME: &str = "worker.agent-tree.test";

/// The crypto provider, named: a build with more than one has no process default.
fn tls_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// An acceptor serving `dir`'s `worker.pem` with `worker.key`.
pub(crate) fn tls_acceptor(dir: &std::path::Path) -> TlsAcceptor {
    let certs = CertificateDer::pem_file_iter(dir.join("worker.pem"))
        .expect("the certificate file")
        .collect::<Result<Vec<_>, _>>()
        .expect("the certificates");
    let key = PrivateKeyDer::from_pem_file(dir.join("worker.key")).expect("the key");
    let config = rustls::ServerConfig::builder_with_provider(tls_provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("the certificate and key match");
    TlsAcceptor::from(std::sync::Arc::new(config))
}

/// A connector trusting `dir`'s `ca.pem` alone.
pub(crate) fn tls_connector(dir: &std::path::Path) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).expect("the CA file") {
        roots.add(cert.expect("the CA certificate")).expect("a CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(tls_provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(std::sync::Arc::new(config))
}
