//! How the cluster plugs into a tree: [`TreeBuilder::node`] attaches a node as the tree's
//! [`Placement`] (the core's one seam, `placement.rs`), which starts a stand-in for every
//! agent placed on another node and keeps each settled remote child's last mirror; and
//! what the tree reads of its remote children ([`Tree::remote_records`]).

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, AgentId, AgentRecord, Replay, RestartPolicy};
use parking_lot::Mutex;
use ractor::{ActorCell, ActorRef};

use super::{EdgeInput, Node, NodeInner};
use crate::agent::AgentArgs;
use crate::msg::{AgentMsg, Placed};
use crate::placement::{Placement, Started};
use crate::shared::SharedRef;
use crate::spawn;
use crate::tree::{Tree, TreeBuilder};

// With ractor's `cluster` feature on, ractor has no blanket `Message` impl. Never sent
// across nodes: only the host's own message is.
impl ractor::Message for AgentMsg {}

/// A tree's placement on a cluster node: the node its remote children are reached through,
/// and their kept mirrors.
#[derive(Debug)]
pub(crate) struct NodePlacement {
    pub(crate) node: Arc<NodeInner>,
    /// Each settled remote child's last mirror (its latest run's): the hosted subtree's
    /// records, kept when its stand-in stops. A leaf lock: only the map is touched.
    mirrors: Mutex<HashMap<AgentId, Arc<[AgentRecord]>>>,
}

impl NodePlacement {
    /// The placement on `node`, with no mirror kept yet.
    pub(crate) fn new(node: Arc<NodeInner>) -> NodePlacement {
        NodePlacement {
            node,
            mirrors: Mutex::default(),
        }
    }

    /// The cluster's placement of the tree `shared` is, if it has one.
    pub(crate) fn of(shared: &SharedRef) -> Option<&NodePlacement> {
        let placement: &dyn Any = shared.placement.as_deref()?;
        placement.downcast_ref()
    }

    /// Keeps `records` as remote child `id`'s last mirror.
    pub(crate) fn keep_mirror(&self, id: AgentId, records: Arc<[AgentRecord]>) {
        self.mirrors.lock().insert(id, records);
    }
}

impl Placement for NodePlacement {
    fn is_here(&self, node: &str) -> bool {
        self.node.name() == node
    }

    fn reaches(&self, node: &str) -> bool {
        self.node.reaches(node)
    }

    fn start(&self, args: AgentArgs, node: Arc<str>, supervisor: ActorCell) -> Started<'_> {
        Box::pin(super::stand_in::start(
            args,
            Arc::clone(&self.node),
            node,
            supervisor,
        ))
    }

    fn recovered(&self, replay: &Replay) {
        self.mirrors.lock().extend(
            replay
                .mirrors
                .iter()
                .map(|(&id, records)| (id, records.as_slice().into())),
        );
    }
}

/// `input` as the message a stand-in reads.
pub(crate) fn edge_msg(input: EdgeInput) -> AgentMsg {
    AgentMsg::Placed(Placed(Box::new(input)))
}

/// What a stand-in is told in `msg`, if it is for one.
pub(crate) fn edge_input(msg: Placed) -> Option<EdgeInput> {
    msg.0.downcast().ok().map(|input| *input)
}

/// A hosted tree's remote-owned copies of its definitions (temporary here, inheriting what
/// its owner sends), by the catalog definition's address and whether it inherits: made
/// once, so every remote spawn of a type shares one definition, as local spawns do (the
/// offer caches key on its address, and keep what they key on alive). The original is kept
/// with its copy, so its address is never reused. A leaf lock.
#[derive(Debug, Default)]
pub(crate) struct RemoteOwned {
    copies: Mutex<HashMap<(usize, bool), OwnedCopy>>,
}

/// A catalog definition (kept, so its address is not reused) and its remote-owned copy.
type OwnedCopy = (Arc<AgentDefinition>, Arc<AgentDefinition>);

impl RemoteOwned {
    /// The definition a remote owner's child of `definition` runs from here: never
    /// restarted by this tree (its owner's node decides), and inheriting the conversation
    /// its owner sends (`inherits`) whatever this tree's definition says.
    pub(crate) fn of(
        &self,
        definition: &Arc<AgentDefinition>,
        inherits: bool,
    ) -> Arc<AgentDefinition> {
        let inherits = inherits && !definition.inherit_context;
        if definition.restart == RestartPolicy::Temporary && !inherits {
            return Arc::clone(definition);
        }
        let key = (Arc::as_ptr(definition) as usize, inherits);
        let mut copies = self.copies.lock();
        let (_, owned) = copies.entry(key).or_insert_with(|| {
            let mut owned = (**definition).clone();
            owned.restart = RestartPolicy::Temporary;
            owned.inherit_context |= inherits;
            (Arc::clone(definition), Arc::new(owned))
        });
        Arc::clone(owned)
    }
}

impl TreeBuilder {
    /// Attaches the tree to a cluster node (feature `cluster`): agents placed on other
    /// nodes (a definition's or a request's `node`) are reached through it.
    ///
    /// ```no_run
    /// # use agent_tree_actors::{Tree, cluster::{Node, NodeConfig}};
    /// # use agent_tree_actors::testkit::ScriptedModel;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let node = Node::start(NodeConfig::new("owner", "builds", "s3cret")).await?;
    /// let tree = Tree::builder().model(ScriptedModel::new()).node(&node).build().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn node(mut self, node: &Node) -> Self {
        self.placement = Some(Arc::new(NodePlacement::new(Arc::clone(node.inner()))));
        self
    }
}

/// # Nodes (feature `cluster`)
///
/// What the tree knows of the agents it placed on other nodes.
impl Tree {
    /// The records of remote child `id`'s hosted subtree (feature `cluster`), as its
    /// stand-in mirrors them from the forwarded events: the hosted tree's own ids, `a0`
    /// standing for this tree's `id`'s owner and `a1` for the remote agent itself (of its
    /// latest run; `a0`'s record stays `running`, as the hosted tree's root was while the
    /// run went on). Fresh as the edge while it runs, the last mirror once it settled (kept
    /// in the journal too: a tree recovered from it, with a node attached, has it), empty
    /// when there is none (its edge never ended before a crash); `None` for an agent that
    /// is not remote.
    pub async fn remote_records(&self, id: AgentId) -> Option<Vec<AgentRecord>> {
        let live = self.shared.registry.actors_of(&[id]).pop();
        if let Some((_, cell)) = live {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let asked = ActorRef::<AgentMsg>::from(cell)
                .send_message(edge_msg(EdgeInput::Records(tx)))
                .is_ok();
            if let (true, Ok(records)) = (asked, rx.await) {
                return Some(records);
            }
        }
        let kept = NodePlacement::of(&self.shared)
            .and_then(|p| p.mirrors.lock().get(&id).map(|r| r.to_vec()));
        // Remote, its mirror gone with the process that held it (a tree recovered from its
        // journal): empty, never `None`, which says "not remote".
        kept.or_else(|| spawn::remote_placement(&self.shared, id).map(|_| Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::SpawnRequest;

    use super::*;
    use crate::Catalog;
    use crate::testkit::{Script, ScriptedModel, Turn};
    use crate::tree::TopSpawn;

    /// A hosted tree (the child's side of a remote edge) runs its types as temporary, so it
    /// spawns them with a copy of their definition: one copy per type, shared by every spawn,
    /// so the offer caches (keyed by a definition's address, keeping it alive) hold one entry a
    /// type however many remote spawns a long-lived node serves.
    #[tokio::test(start_paused = true)]
    async fn remote_spawns_of_one_type_share_one_definition_and_one_offer() {
        let model = ScriptedModel::new().script("w", Script::new([Turn::answer("done")]));
        let catalog = Catalog::new([AgentDefinition::new("w", "")
            .with_restart(agent_tree_protocol::RestartPolicy::Permanent)])
        .expect("valid");
        let tree = Tree::builder()
            .catalog(catalog)
            .model(model)
            .build()
            .await
            .expect("builds");
        let owned = RemoteOwned::default();
        let mut definitions = Vec::new();
        for _ in 0..20 {
            let top = TopSpawn {
                adapt: Some(&|definition, inherits| owned.of(definition, inherits)),
                ..TopSpawn::default()
            };
            let mut handle = tree
                .spawn_top(SpawnRequest::new("w", "go"), top)
                .await
                .expect("admitted");
            let outcome = handle.outcome().await;
            assert!(outcome.is_completed(), "{outcome:?}");
            let record = tree.shared.registry.record(handle.id()).expect("recorded");
            assert_eq!(
                record.incarnation, 1,
                "a remote-owned spawn is never restarted here"
            );
            definitions.push(tree.shared.placed_offers.lock().len());
        }
        assert_eq!(
            definitions,
            vec![1; 20],
            "one offer entry for every spawn of the type"
        );
        tree.shutdown().await;
    }
}
