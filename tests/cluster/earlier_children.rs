//! A resumed remote run's earlier children (`Command::Spawn`'s `earlier`, seeded in the
//! hosted tree under the ids its conversation names them by) behave as a LOCAL resumed
//! run's (the spec: the worker's model and tools in a local tree on the owner's process):
//! read, big or released outputs included, refused control as settled agents or an earlier
//! run's children, never recorded or billed twice, recovered with their owner.

use super::support::spawn_runner;
use super::support::{each_side_in_rounds, local_and_remote_rounds};
use super::support::{finish_idle, journaled_side, no_failures, side_tree};
use agent_tree::protocol::{AgentId, AgentStatus, Role};
use agent_tree::{JournalConfig, Tree};

use super::support::{Dir, kept, others_first, render, resumed, settled};
use super::{Owner, root_tokens, worker_idle};

/// Spawns `runner` with `task`, then each resume of `resumes`: the top's id and each run's
/// answer.
async fn answers(tree: &Tree, task: &str, resumes: &[&str]) -> (AgentId, Vec<Option<String>>) {
    let mut handle = spawn_runner(tree, task).await;
    let id = handle.id();
    let mut out = vec![settled(&mut handle, "the first run").await.text];
    for prompt in resumes {
        out.push(resumed(tree, id, prompt).await.text);
    }
    (id, out)
}

/// An earlier helper's output that the owner's tree released from memory once it was read
/// (its journal's retention: `keep_read_outputs(0)`; the application read it) is still in
/// the owner's journal: a local resumed run's `get_subagent_result` reads it back from
/// there (`JournalConfig::keep_read_outputs`: "read back from the journal on demand (...
/// an owner's `get_subagent_result`)"). A resumed remote run reads it as well
/// (`docs/semantics.md`: "its model reads an earlier child's result as a local resumed
/// run's does"): the stand-in reads the released output back from the owner's journal
/// before the spawn, rather than send the record's outcome as it is in memory, released.
pub(crate) async fn an_earlier_output_the_owner_released_is_read_as_locally(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let dir = Dir::new("released-earlier");
        let path = dir.file("tree.journal");
        let config = JournalConfig::new(&path).keep_read_outputs(0);
        let side = remote.then_some((&owner.node, name.as_str()));
        let tree = side_tree(side, config).await;
        let mut handle = spawn_runner(&tree, "recall").await;
        let id = handle.id();
        let first = settled(&mut handle, "the first run").await;
        let helper = tree.record(id).unwrap().children[0];
        let read = tree.read_outcome(helper).await.and_then(|o| o.text);
        tree.flush_journal().await;
        let released = tree.outcome(helper).is_some_and(|o| o.released);
        let again = resumed(&tree, id, "").await;
        sides.push((remote, first.text, read, released, again.text));
        tree.shutdown().await;
    }
    finish_idle(process);
    let want = Some("recalled completed done 1, new helper another".to_owned());
    assert!(
        sides.iter().all(|s| s.4 == want),
        "(remote, first answer, the app's read, released in memory, the resume's answer): \
         {sides:#?}"
    );
}

/// An earlier helper whose output is over 64 KiB (`recall-big 70000`): a local resumed run
/// reads its 70 000 bytes by the id its history gives it, and a remote resumed run must
/// too (`docs/semantics.md`: it "reads an earlier child's result as a local resumed run's
/// does"): earlier outputs go down whole, up to 8 MiB together.
// regression: a seed over 64 KiB once went released, and the hosted tree, with no journal
// to read it back from, showed the model an empty output of a "completed" helper.
pub(crate) async fn an_earlier_helpers_big_output_is_read_as_locally(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut got = Vec::new();
    for remote in [false, true] {
        let (_dir, _path, tree) = journaled_side(&owner.node, &name, remote, "big-earlier").await;
        let (_, texts) = answers(&tree, "recall-big 70000", &[""]).await;
        got.push(texts);
        tree.shutdown().await;
    }
    finish_idle(process);
    assert_eq!(
        got[1][1].as_deref(),
        Some("recalled completed 70000 bytes, new helper another"),
        "local, then remote: {got:#?}"
    );
    assert_eq!(got[0], got[1], "the remote runs answer as the local ones");
}

/// A resumed remote run steers, aborts and resumes an earlier helper by the id its history
/// gives it: each is refused as a settled or an earlier run's child, never as a remote one
/// (`docs/cluster.md`: "An earlier child can be read there, not steered, aborted or
/// resumed"), at once (no hang); the refusals the owner keeps name the helper by the owner
/// tree's id (the runtime's text, rewritten as it comes up), never by a hosted id; and the
/// steer and abort are refused as a local run's are.
pub(crate) async fn an_earlier_helper_is_refused_control_at_once_by_its_owner_id(
    owner: &mut Owner,
) {
    let (name, process) = owner.worker().await;
    let mut texts = Vec::new();
    let mut failures = Vec::new();
    for remote in [false, true] {
        let (_dir, path, tree) = journaled_side(&owner.node, &name, remote, "poke").await;
        // Another agent first: the runner's ids differ between the owner and its node.
        others_first(&tree, 1).await;
        let (id, answered) = answers(&tree, "poke", &[""]).await;
        let first = tree.record(id).unwrap().children[0];
        let conversation = kept(&tree, &path, id).await;
        if remote {
            for stage in ["steer", "abort", "resume"] {
                let refusal = conversation
                    .iter()
                    .find(|m| {
                        m.role == Role::Tool
                            && m.tool_call_id
                                .as_deref()
                                .is_some_and(|c| c.starts_with(&format!("poke-{stage}-")))
                    })
                    .map(|m| m.content.clone())
                    .unwrap_or_default();
                let names_first = refusal
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|w| w == first.to_string());
                if refusal.contains("runs under a remote child") {
                    failures.push(format!(
                        "the {stage} refusal calls the earlier helper remote, not an earlier \
                         run's child: {refusal:?}"
                    ));
                }
                if !names_first {
                    failures.push(format!(
                        "the {stage} refusal kept does not name the earlier helper {first}: \
                         {refusal:?}"
                    ));
                }
            }
        }
        texts.push(answered);
        tree.shutdown().await;
    }
    finish_idle(process);
    assert_eq!(
        texts[1][1].as_deref(),
        Some("poked steer:refused abort:refused resume:refused"),
        "local, then remote: {texts:#?}"
    );
    let local = texts[0][1].clone().unwrap_or_default();
    assert!(
        local.starts_with("poked steer:refused abort:refused"),
        "the local run refuses the steer and the abort of a settled helper too: {local}"
    );
    no_failures(&failures);
}

/// `docs/semantics.md`: in a resumed remote run an earlier child is read-only, "steering or
/// aborting it is refused as a settled agent's, resuming it with `ControlError::EarlierRun`",
/// as in a local run. The `poke` runner's resumed run steers, aborts and resumes its first
/// helper: the steer's and the abort's refusals the owner keeps are a local run's (the
/// helper named by the same owner id: "aN cannot take this now: it is completed").
pub(crate) async fn a_steer_of_an_earlier_helper_is_refused_as_a_settled_agents(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let (_dir, path, tree) = journaled_side(&owner.node, &name, remote, "poke9").await;
        let mut handle = spawn_runner(&tree, "poke").await;
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
    finish_idle(process);
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

/// What a tree holds after a `recall` runner's first run and three resumes: every record
/// but the root, as (type, depth, status, answer, own tokens, children), in id order.
fn shape(tree: &Tree) -> Vec<(String, u32, AgentStatus, Option<String>, u64, usize)> {
    tree.snapshot()
        .records
        .iter()
        .filter(|r| r.id != AgentId::ROOT)
        .map(|r| {
            (
                r.agent_type.clone(),
                r.depth,
                r.status,
                r.outcome.as_ref().and_then(|o| o.text.clone()),
                r.own.total_tokens(),
                r.children.len(),
            )
        })
        .collect()
}

/// Three resumes of a `recall` runner, each seeding the earlier helpers on its node: the
/// owner's tree holds one record per helper (no seed mirrored again, no record with an
/// `earlier:` request id), each with its own usage, the same records a local tree holds,
/// usage counted once (the owner's root total is the local one's and the worker's), and
/// the remote agent's last mirror (`Tree::remote_records`) has nothing live.
pub(crate) async fn resumes_seed_no_second_record_and_no_second_usage(owner: &mut Owner) {
    let (name, mut process) = owner.worker().await;
    let mut shapes = Vec::new();
    let mut totals = Vec::new();
    let mut failures = Vec::new();
    for remote in [false, true] {
        let (_dir, _path, tree) = journaled_side(&owner.node, &name, remote, "stacked").await;
        let (id, texts) = answers(&tree, "recall", &["", "more", ""]).await;
        let recalled = Some("recalled completed done 1, new helper another".to_owned());
        if texts[1..].iter().any(|t| *t != recalled) {
            failures.push(format!("remote {remote}: answered {texts:?}"));
        }
        let earlier: Vec<_> = tree
            .snapshot()
            .records
            .iter()
            .filter(|r| {
                r.request_id
                    .as_ref()
                    .is_some_and(|q| q.as_str().starts_with("earlier:"))
            })
            .map(|r| r.id)
            .collect();
        if !earlier.is_empty() {
            failures.push(format!("remote {remote}: seed records {earlier:?}"));
        }
        if remote {
            let records = tree.remote_records(id).await.unwrap_or_default();
            let live: Vec<_> = records
                .iter()
                .filter(|r| r.id != AgentId::ROOT && r.status.is_live())
                .map(|r| (r.id, r.status))
                .collect();
            if !live.is_empty() {
                failures.push(format!("the last mirror holds live records {live:?}"));
            }
        }
        shapes.push(shape(&tree));
        totals.push(root_tokens(&tree));
        tree.shutdown().await;
    }
    let (live, worker_tokens, edges) = worker_idle(&mut process);
    assert_eq!((live, edges), (0, 0));
    process.finish();
    assert_eq!(shapes[0], shapes[1], "the records, local then remote");
    assert_eq!(totals[0], totals[1], "the root's usage, local then remote");
    assert_eq!(
        worker_tokens, totals[1],
        "the worker's usage is the owner's"
    );
    no_failures(&failures);
}

/// A `delegate-bg` runner (its background helper still running when the run answers), run
/// and resumed: what the owner keeps of it, run after run, and each run's answer and the
/// records, are a local tree's.
pub(crate) async fn a_background_helper_at_the_runs_end_is_kept_as_locally(owner: &mut Owner) {
    local_and_remote_rounds(owner, 2, "background", |tree, path| {
        Box::pin(async move {
            let mut handle = spawn_runner(tree, "delegate-bg 2 200").await;
            let id = handle.id();
            let mut runs = vec![(
                settled(&mut handle, "the first run").await.text,
                render(&kept(tree, path, id).await),
            )];
            for prompt in ["", "more"] {
                let text = resumed(tree, id, prompt).await.text;
                runs.push((text, render(&kept(tree, path, id).await)));
            }
            let children: Vec<_> = tree
                .record(id)
                .unwrap()
                .children
                .iter()
                .filter_map(|&c| tree.record(c))
                .map(|r| (r.agent_type.clone(), r.status))
                .collect();
            (runs, children)
        })
    })
    .await;
}

/// A journaled owner tree (a `recall` runner, its first run and an empty resume) built
/// again from its journal: the recovered tree's resumes read the first helper and start
/// another, as a local tree recovered the same way does (the earlier children come from
/// the recovered records).
pub(crate) async fn a_recovered_owner_resumes_with_its_earlier_helpers(owner: &mut Owner) {
    let (name, process) = owner.worker().await;
    let mut sides = Vec::new();
    for remote in [false, true] {
        let (_dir, path, tree) =
            journaled_side(&owner.node, &name, remote, "recovered-recall").await;
        others_first(&tree, 1).await;
        let (id, mut texts) = answers(&tree, "recall", &[""]).await;
        tree.shutdown().await;
        drop(tree);
        let tree = side_tree(
            remote.then_some((&owner.node, name.as_str())),
            JournalConfig::new(&path),
        )
        .await;
        for prompt in ["", "again"] {
            texts.push(resumed(&tree, id, prompt).await.text);
        }
        let conversation = render(&kept(&tree, &path, id).await);
        let children = tree.record(id).map_or(0, |r| r.children.len());
        sides.push((texts, conversation, children));
        tree.shutdown().await;
    }
    finish_idle(process);
    let recalled = Some("recalled completed done 1, new helper another".to_owned());
    assert_eq!(
        sides[1].0[1..],
        [recalled.clone(), recalled.clone(), recalled],
        "the remote runs' answers: {:#?}",
        sides[1]
    );
    assert_eq!(sides[0], sides[1], "local, then remote");
}

/// A resumed `recall` run aborted right after it started (where the abort lands varies; it
/// may come after the run completed), then resumed again, twice: each later run reads the
/// first helper and starts another, as a local tree's does; the owner holds one record per
/// helper started.
pub(crate) async fn an_aborted_resumed_run_resumed_again_reads_its_earlier_helpers(
    owner: &mut Owner,
) {
    each_side_in_rounds(owner, 3, "aborted-recall", |tree, path| {
        Box::pin(async move {
            let (id, _) = answers(tree, "recall", &[]).await;
            let mut handle = tree.resume(id, "go").await.unwrap();
            let _ = tree.abort(id);
            let aborted = settled(&mut handle, "the aborted resume").await;
            let later = [resumed(tree, id, "").await, resumed(tree, id, "").await];
            let children: Vec<_> = tree
                .record(id)
                .unwrap()
                .children
                .iter()
                .filter_map(|&c| tree.record(c))
                .map(|r| (r.status, r.outcome.and_then(|o| o.text)))
                .collect();
            let recalled = Some("recalled completed done 1, new helper another".to_owned());
            // The abort may land after the instant run completed (a local one's, mostly).
            let fine = matches!(
                aborted.status,
                AgentStatus::Aborted | AgentStatus::Completed
            ) && later.iter().all(|o| o.text == recalled)
                && children.len() >= 3
                && children[0].1.as_deref() == Some("done 1");
            if fine {
                return None;
            }
            Some(format!(
                "{:?}, then {:?}; children {children:?}; kept {:#?}",
                aborted.status,
                later.iter().map(|o| o.text.clone()).collect::<Vec<_>>(),
                render(&kept(tree, path, id).await)
            ))
        })
    })
    .await;
}
