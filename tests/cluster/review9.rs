//! The ninth cluster review: the owner tree's ids in a remote child's context going down
//! foreign (`ids::into_hosted`) and coming back up, and the earlier-run refusal of a seeded
//! child, compared with what a LOCAL tree does in the same place (the spec): the worker's
//! model in a local tree on the owner's process.

use std::path::Path;

use agent_tree::protocol::{
    AgentDefinition, AgentId, Message, Role, SpawnRequest, SubagentAllowance,
};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{
    BoxFuture, Catalog, JournalConfig, Model, ModelError, ModelRequest, ModelResponse, Tree,
};

use super::context::assert_inherited;
use super::review4::Dir;
use super::review6::{kept, resumed, settled};
use super::worker;
use super::{Owner, runner, worker_idle};

/// The lead's turns scripted, every other agent's the worker's model's.
struct LeadAndWorker {
    lead: ScriptedModel,
    worker: worker::WorkerModel,
}

impl Model for LeadAndWorker {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.definition.name == "lead" {
            self.lead.turn(request)
        } else {
            self.worker.turn(request)
        }
    }
}

/// A tree whose `lead` (scripted by `lead`) runs `helper`s locally and a `runner` that
/// inherits its context: placed on `worker` when given, else local (the spec).
async fn lead_tree(
    node: &agent_tree::cluster::Node,
    worker: Option<&str>,
    lead: Script,
    journal: &Path,
) -> Tree {
    let runner = AgentDefinition::new("runner", "You run tasks.")
        .with_allowed_subagents(SubagentAllowance::only(["helper"]))
        .with_inherit_context(true);
    let runner = match worker {
        Some(name) => runner.on_node(name),
        None => runner,
    };
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["helper", "runner"])),
        AgentDefinition::new("helper", "You help."),
        runner,
    ])
    .unwrap();
    let builder = Tree::builder()
        .catalog(catalog)
        .model(LeadAndWorker {
            lead: ScriptedModel::new().script("lead", lead),
            worker: worker::WorkerModel::default(),
        })
        .journal(JournalConfig::new(journal));
    let builder = if worker.is_some() {
        builder.node(node)
    } else {
        builder
    };
    builder.build().await.expect("the tree builds")
}

/// The ids of the lead and of the runner.
fn lead_and_runner(tree: &Tree) -> (AgentId, AgentId) {
    let snapshot = tree.snapshot();
    let of = |t: &str| {
        snapshot
            .records
            .iter()
            .find(|r| r.agent_type == t)
            .unwrap_or_else(|| panic!("a {t}"))
            .id
    };
    (of("lead"), of("runner"))
}

/// The index of the runner's own task (`go`) in its kept conversation: what is before it is
/// the context it inherited.
fn task_at(messages: &[Message]) -> usize {
    messages
        .iter()
        .position(|m| m.role == Role::User && m.content == "go")
        .expect("the runner's task after its context")
}

/// A resumed remote run whose first run inherited its owner's context: its conversation
/// names the owner's helper (foreign on its node) and its own first helper (seeded there).
/// The lead runs a helper, the runner (`relay`) spawns its own, and the lead resumes the
/// runner, which reads its own first helper and the lead's: as a local runner does (its
/// own read, the lead's refused "no subagent … of yours"), with the same conversation kept,
/// byte for byte, and the same records.
pub(crate) async fn review9_a_resumed_run_that_inherited_a_context_reads_as_a_local_one(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let dir = Dir::new("relay");
        let path = dir.file("tree.journal");
        // a1 the lead, a2 its helper, a3 the runner, a4 the runner's first helper.
        let lead = Script::new([
            Turn::spawn("helper", "work 1 0"),
            Turn::spawn("runner", "go"),
            Turn::calls([Call::tool(
                "Agent",
                serde_json::json!({ "resume": "a3", "prompt": "again" }),
            )]),
            Turn::answer("the lead is done"),
        ]);
        let worker = remote.then_some(name.as_str());
        let tree = lead_tree(&owner.node, worker, lead, &path).await;
        let outcome = tree.run(SpawnRequest::new("lead", "relay")).await.unwrap();
        let (lead, runner) = lead_and_runner(&tree);
        let runner_kept = kept(&tree, &path, runner).await;
        let lead_kept = kept(&tree, &path, lead).await;
        let records: Vec<_> = tree
            .snapshot()
            .records
            .iter()
            .map(|r| {
                (
                    r.id,
                    r.parent,
                    r.agent_type.clone(),
                    r.status,
                    r.outcome.as_ref().and_then(|o| o.text.clone()),
                )
            })
            .collect();
        sides.push((outcome.text, runner_kept, lead_kept, records));
        tree.shutdown().await;
    }
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
    let (local, remote) = (&sides[0], &sides[1]);
    assert_eq!(local.0.as_deref(), Some("the lead is done"), "{local:#?}");
    let relayed = |s: &(Option<String>, Vec<Message>, Vec<Message>, _)| {
        s.2.iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| m.content.clone())
            .collect::<Vec<_>>()
    };
    assert!(
        relayed(local)
            .iter()
            .any(|c| c.contains("relayed own:completed theirs:refused")),
        "the spec: the local runner reads its own and is refused the lead's: {:#?}",
        relayed(local)
    );
    let task = task_at(&remote.1);
    assert_inherited(
        &remote.1[..task],
        &remote.2,
        "the remote runner's inherited context kept as the lead wrote it",
    );
    assert_eq!(remote.1, local.1, "the runner's kept conversation");
    assert_eq!(remote.2, local.2, "the lead's kept conversation");
    assert_eq!(remote.3, local.3, "the records");
}

/// An owner's model that wrote a padded id (`" a2 "`: the runtime reads it trimmed, and the
/// steer reached its helper) keeps it as written; a remote runner inheriting that context
/// should keep it as the owner wrote it too ("Coming up, those ids (only those the
/// stand-in sent) are the owner's again, so the owner keeps the context as it wrote it"),
/// as a local runner does.
pub(crate) async fn review9_a_padded_id_in_an_inherited_context_is_kept_as_the_owner_wrote_it(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let dir = Dir::new("padded");
        let path = dir.file("tree.journal");
        let lead = Script::new([
            Turn::spawn("helper", "work 1 0"),
            Turn::calls([Call::tool(
                "steer_subagent",
                serde_json::json!({ "agent_id": " a2 ", "message": "hi" }),
            )]),
            Turn::spawn("runner", "go"),
            Turn::answer("the lead is done"),
        ]);
        let worker = remote.then_some(name.as_str());
        let tree = lead_tree(&owner.node, worker, lead, &path).await;
        let outcome = tree.run(SpawnRequest::new("lead", "count")).await.unwrap();
        let (lead, runner) = lead_and_runner(&tree);
        let runner_kept = kept(&tree, &path, runner).await;
        let lead_kept = kept(&tree, &path, lead).await;
        sides.push((outcome.text, runner_kept, lead_kept));
        tree.shutdown().await;
    }
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
    for (side, (text, runner, lead)) in ["local", "remote"].iter().zip(&sides) {
        assert_eq!(text.as_deref(), Some("the lead is done"), "{side}");
        let task = task_at(runner);
        let steer = |m: &[Message]| {
            m.iter()
                .flat_map(|m| &m.tool_calls)
                .find(|c| c.name == "steer_subagent")
                .map(|c| c.input.as_str().to_owned())
        };
        assert_eq!(
            steer(&lead[..task]).as_deref(),
            Some(r#"{"agent_id":" a2 ","message":"hi"}"#),
            "{side}: the lead's steer as its model wrote it"
        );
        assert_eq!(
            steer(&runner[..task]),
            steer(&lead[..task]),
            "{side}: the steer in the runner's inherited context"
        );
        assert_inherited(
            &runner[..task],
            lead,
            &format!("{side}: the inherited context"),
        );
    }
}

/// `docs/semantics.md`: in a resumed remote run an earlier child is read-only, "steering or
/// aborting it is refused as a settled agent's, resuming it with `ControlError::EarlierRun`"
/// (the commit: "a steer or abort of one is still refused as a settled agent's, as in a
/// local run"). The `poke` runner's resumed run steers, aborts and resumes its first helper:
/// the steer's and the abort's refusals the owner keeps are to be a local run's (the helper
/// named by the same owner id: "aN cannot take this now: it is completed").
pub(crate) async fn review9_a_steer_of_an_earlier_helper_is_refused_as_a_settled_agents(
    owner: &mut Owner,
) {
    let (name, mut process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let dir = Dir::new("poke9");
        let path = dir.file("tree.journal");
        let tree = if remote {
            Tree::builder()
                .catalog(Catalog::new(vec![runner().on_node(&name)]).unwrap())
                .model(ScriptedModel::new())
                .node(&owner.node)
                .journal(JournalConfig::new(&path))
                .build()
                .await
                .unwrap()
        } else {
            worker::hosted_tree()
                .journal(JournalConfig::new(&path))
                .build()
                .await
                .unwrap()
        };
        let mut handle = tree
            .spawn(SpawnRequest::new("runner", "poke"))
            .await
            .unwrap();
        let id = handle.id();
        settled(&mut handle, "the first run").await;
        let again = resumed(&tree, id, "").await;
        let first = tree.record(id).unwrap().children[0];
        let conversation = kept(&tree, &path, id).await;
        let refusal = |stage: &str| {
            conversation
                .iter()
                .find(|m| {
                    m.tool_call_id
                        .as_deref()
                        .is_some_and(|c| c.starts_with(&format!("poke-{stage}-")))
                })
                .map(|m| m.content.replace(&first.to_string(), "<first>"))
                .unwrap_or_default()
        };
        sides.push((again.text, refusal("steer"), refusal("abort")));
        tree.shutdown().await;
    }
    let (live, _, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
    assert_eq!(
        sides[0].1, r#"{"error":"<first> cannot take this now: it is completed"}"#,
        "the spec: {sides:#?}"
    );
    assert_eq!(
        sides[1].2, sides[0].2,
        "the abort's refusal, remote vs local"
    );
    assert_eq!(
        sides[1].1, sides[0].1,
        "the steer's refusal, remote vs local"
    );
}
