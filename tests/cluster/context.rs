//! A remote child inheriting its owner's context gets it on its node, before its task, as a
//! local child does. The context names the owner's other children by the owner tree's ids;
//! the child's hosted tree gives its own children ids of its own. They go down as foreign
//! ids (the owner's plus 1,000,000,000), so the child's model, acting on that history,
//! reaches no agent of its own where it meant one of its owner's ("no subagent … of yours",
//! as a local child reaching past its subtree is told), and coming up (only the ids the
//! stand-in sent) they are the owner's again: the owner keeps the conversation as a local
//! child's, the context as the owner wrote it, run after run.

use super::support::finish_idle;
use super::support::{lead_done, record_of_type};
use std::path::Path;

use agent_tree::protocol::{
    AgentDefinition, AgentId, Message, Role, SpawnRequest, SubagentAllowance,
};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{
    BoxFuture, Catalog, JournalConfig, Model, ModelError, ModelRequest, ModelResponse, Tree,
};

use super::support::shut_down_and_finish;
use super::support::{Dir, kept};
use super::worker;
use super::{Owner, runner, worker_idle};

/// The owner's `a<n>` as the child's node names it.
fn foreign(id: AgentId) -> String {
    format!("a{}", 1_000_000_000 + id.get())
}

/// A remote child whose definition inherits its owner's context gets it on its node,
/// before its task, as a local child does: the worker's model reads the first user
/// message as its task, which is then the lead's own prompt (`work 1 1`, answered
/// `done 1`), not the runner's (`delegate 2 50`, answered `lead done`); it shows every
/// later user message as a steer, here the runner's own task, after the context.
pub(crate) async fn a_remote_child_inherits_its_owners_context(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let tree = owner.tree(&name, runner().with_inherit_context(true)).await;
    let snapshot = lead_done(&tree, "work 1 1").await;
    let remote = record_of_type(&snapshot, "runner");
    let text = remote.outcome.as_ref().and_then(|o| o.text.clone());
    assert_eq!(
        text.as_deref(),
        Some("done 1 | steered: delegate 2 50"),
        "{remote:?}"
    );
    shut_down_and_finish(&tree, process).await;
}

/// `lead` (local) runs two local helpers to their end, then a `runner` on the worker that
/// inherits its context; the runner (the worker's `reach` task) starts a helper of its own
/// in the background and steers the first agent its context's delegation results name: the
/// lead's first helper, which is not its own to steer.
pub(crate) async fn a_remote_childs_inherited_context_names_its_owners_agents_apart_from_its_own(
    owner: &mut Owner,
) {
    let dir = Dir::new("context");
    let path = dir.file("owner.jsonl");
    let (name, mut process) = owner.worker().await;
    let lead = AgentDefinition::new("lead", "You lead.")
        .with_allowed_subagents(SubagentAllowance::only(["helper", "runner"]));
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([Call::spawn("helper", "one"), Call::spawn("helper", "two")]),
                Turn::spawn("runner", "go"),
                Turn::answer("the lead is done"),
            ]),
        )
        .script("helper", Script::new([Turn::answer("helped")]));
    let catalog = Catalog::new([
        lead,
        AgentDefinition::new("helper", ""),
        runner().with_inherit_context(true).on_node(&name),
    ])
    .unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .node(&owner.node)
        .journal(JournalConfig::new(&path))
        .build()
        .await
        .unwrap();
    let snapshot = lead_done(&tree, "reach").await;
    let lead_id = record_of_type(&snapshot, "lead").id;
    let first_helper = snapshot
        .records
        .iter()
        .filter(|r| r.agent_type == "helper" && r.parent == Some(lead_id))
        .map(|r| r.id)
        .min()
        .expect("the lead's helpers");
    let runner = record_of_type(&snapshot, "runner");
    // Its own helper took no number the context names: the steer reached no agent of its.
    let on_its_node = foreign(first_helper);
    let text = runner.outcome.as_ref().and_then(|o| o.text.clone());
    assert_eq!(
        text,
        Some(format!(
            r#"reached {on_its_node}: {{"error":"no subagent {on_its_node} of yours"}}"#
        )),
        "{runner:?}"
    );
    let mirrored_helper = snapshot
        .records
        .iter()
        .find(|r| r.parent == Some(runner.id))
        .expect("the runner's own helper, mirrored");
    let helper_text = mirrored_helper
        .outcome
        .as_ref()
        .and_then(|o| o.text.clone());
    assert!(
        !helper_text.unwrap_or_default().contains("steered"),
        "the runner's own helper was steered: {mirrored_helper:?}"
    );
    // The owner keeps it as a local child's: the context as the lead had it, and the steer
    // and its refusal naming the lead's helper by the owner's id.
    let runner_kept = kept(&tree, &path, runner.id).await;
    let lead_kept = kept(&tree, &path, lead_id).await;
    let task = runner_kept
        .iter()
        .position(|m| m.role == Role::User && m.content == "go")
        .expect("the runner's task after its context");
    assert!(task > 0, "the runner inherited a context");
    assert_inherited(&runner_kept[..task], &lead_kept, "the context kept");
    let steer = runner_kept
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|c| c.id == "reach-steer")
        .expect("the steer call");
    assert_eq!(
        steer.input.to_value()["agent_id"],
        serde_json::json!(first_helper.to_string())
    );
    let refusal = runner_kept
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("reach-steer"))
        .expect("the steer's result");
    assert_eq!(
        refusal.content,
        format!(r#"{{"error":"no subagent {first_helper} of yours"}}"#)
    );
    tree.shutdown().await;
    assert_eq!(
        worker_idle(&mut process).0,
        0,
        "the worker hosts nothing after"
    );
    process.finish();
}

/// Checks that `inherited` (a child's kept conversation before its task) is `owner`'s kept
/// conversation as it was when the child was spawned: the owner's messages through the turn
/// that spawned it, then each call of that turn as still running (its result not in yet).
fn assert_inherited(inherited: &[Message], owner: &[Message], what: &str) {
    let turn = inherited
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .expect("the owner's spawning turn");
    assert_eq!(inherited[..=turn], owner[..=turn], "{what}");
    let calls = &inherited[turn].tool_calls;
    let pending = &inherited[turn + 1..];
    assert_eq!(pending.len(), calls.len(), "{what}: {pending:?}");
    for (result, call) in pending.iter().zip(calls) {
        assert_eq!(
            (result.role, result.tool_call_id.as_deref()),
            (Role::Tool, Some(call.id.as_str())),
            "{what}"
        );
        assert!(
            result.content.contains("\"status\":\"running\""),
            "{what}: {result:?}"
        );
    }
}

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
pub(crate) async fn a_resumed_run_that_inherited_a_context_reads_as_a_local_one(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
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
    finish_idle(process);
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
/// keeps it as the owner wrote it too ("Coming up, those ids (only those the stand-in sent)
/// are the owner's again, so the owner keeps the context as it wrote it"), as a local
/// runner does.
pub(crate) async fn a_padded_id_in_an_inherited_context_is_kept_as_the_owner_wrote_it(
    owner: &mut Owner,
) {
    let (name, process) = owner.worker().await;
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
    finish_idle(process);
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
