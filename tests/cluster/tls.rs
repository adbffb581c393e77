//! TLS between nodes: a worker that accepts TLS sessions only, joined by the owner's node
//! with `Node::join_tls` (certificates in `tests/fixtures/tls`: a test CA and a worker
//! certificate for `worker.agent-tree.test`, both valid until 2126), built with the TLS
//! crates `agent_tree::cluster::tls` re-exports.

use std::net::SocketAddr;
use std::path::PathBuf;

use agent_tree::cluster::ClusterError;
use agent_tree::cluster::tls::rustls::pki_types::ServerName;

use super::Owner;
use super::node_failures::a_run_goes_on_across_a_closed_session;
use super::worker::{self, WorkerProcess};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls")
}

/// A TLS worker refuses a handshake for a name its certificate does not carry; joined with
/// TLS, it runs a remote child; a session closed mid-run is reconnected by the owner's node
/// with TLS within the reconnect window, and the run goes on, every delta counted once. A
/// reconnect without TLS would be refused by the worker, and the child would fail as its
/// node down.
pub(crate) async fn a_tls_worker_serves_and_is_reconnected_with_tls(owner: &mut Owner) {
    owner.workers += 1;
    let name = format!("worker-{}", owner.workers);
    let port = worker::free_port();
    let mut command = owner.worker_command(&name, port, "normal");
    command.env(worker::TLS_ENV, fixtures());
    let mut process = tokio::task::spawn_blocking(move || WorkerProcess::start(command))
        .await
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let other = ServerName::try_from("other.agent-tree.test").unwrap();
    let wrong = owner
        .node
        .join_tls(addr, &name, worker::tls_connector(&fixtures()), other)
        .await;
    assert!(
        matches!(wrong, Err(ClusterError::Connect { .. })),
        "a certificate for another name: {wrong:?}"
    );
    assert!(!owner.node.reaches(&name));
    owner
        .node
        .join_tls(
            addr,
            &name,
            worker::tls_connector(&fixtures()),
            ServerName::try_from(worker::TLS_NAME).unwrap(),
        )
        .await
        .expect("joined with TLS");
    // The owner's node joined, with TLS: it reconnects, with TLS.
    a_run_goes_on_across_a_closed_session(owner, &name, &mut process).await;
    process.finish();
}
