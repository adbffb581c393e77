//! A node's routing table: which stand-in (owner's side) or hosted edge (child's side) a
//! frame is for, the hosted trees and the node's counts; and the frames a node sends to a
//! peer's host.
//!
//! # Locks
//!
//! The table (`NodeInner::routes`) is a leaf `parking_lot` mutex: under it only its maps
//! are read or changed; a frame is handed to its stand-in or hosted edge after it is
//! released.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use agent_tree_protocol::Usage;
use ractor::ActorRef;
use tokio::sync::mpsc;

use super::EdgeInput;
use super::hosted;
use super::node::NodeInner;
use super::wire::{Directed, Envelope, HostMsg};
use crate::msg::AgentMsg;

/// Where a node's hosts deliver frames: stand-ins by edge on the owner's side, hosted
/// edges by edge on the child's side.
#[derive(Debug, Default)]
pub(super) struct Routes {
    /// Owner's side: each edge's stand-in and the node it talks to.
    pub(super) stand_ins: HashMap<String, (String, ActorRef<AgentMsg>)>,
    /// Child's side: each hosted edge's inbox.
    pub(super) hosted: HashMap<String, mpsc::UnboundedSender<hosted::Input>>,
    /// Child's side: each hosted edge's tree, once built.
    pub(super) trees: HashMap<String, Weak<crate::Tree>>,
    /// Child's side: the usage of hosted trees whose edges ended.
    pub(super) ended_usage: Usage,
    /// Owner's side: usage deltas stand-ins applied (and so acknowledged), and their sum.
    pub(super) acknowledged: (u64, Usage),
}

/// The process group of the host of node `node` in cluster `cluster`.
pub(super) fn host_group(cluster: &str, node: &str) -> String {
    format!("agent-tree/{cluster}/{node}")
}

impl NodeInner {
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

    /// Delivers one envelope that arrived at this node's host.
    pub(super) fn deliver(self: &Arc<Self>, envelope: Envelope) {
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
                        let _ = actor.send_message(super::placed::edge_msg(EdgeInput::Frame {
                            frame,
                            boot,
                        }));
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
        builder.placement = Some(Arc::new(super::placed::NodePlacement::new(Arc::clone(
            self,
        ))));
        tokio::spawn(hosted::run(edge, builder, rx));
        Some(tx)
    }
}
