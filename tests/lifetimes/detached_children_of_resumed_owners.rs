//! A detached child outlives its owner's run and stays its owner's: the owner's current
//! incarnation (a resumed run) hears of the child's end, and the child's `ask_owner` reaches
//! that run, whose steer answers it.
//!
//! docs/semantics.md, Lifetimes: "Ownership stays with the spawner: records, control,
//! billing, and its owner (its current incarnation) hears when it ends".

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};

use crate::support::{build_tree, catalog, leaf};

const U: Usage = Usage::tokens(7, 3);

/// `boss` (a1, may start `kid`) starts a detached background `kid` (a2) in its first run and
/// answers; `kid` follows `kid_script`. Returns the tree once `boss`'s first run completed.
async fn boss_with_detached_kid(
    boss_later: Vec<Turn>,
    kid_script: Script,
) -> (Tree, ScriptedModel) {
    let boss = std::iter::once(Turn::spawn_background("kid", "detached work").usage(U))
        .chain(std::iter::once(Turn::answer("boss run 1 done").usage(U)))
        .chain(boss_later);
    let model = ScriptedModel::new()
        .script("boss", Script::new(boss))
        .script("kid", kid_script);
    let tree = build_tree(
        catalog([
            crate::support::delegator("boss", &["kid"]),
            leaf("kid").detached(),
        ]),
        model.clone(),
    )
    .await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let first = boss.outcome().await;
    assert!(first.is_completed(), "{first:?}");
    assert_eq!(boss.id(), AgentId::new(1));
    let kid = tree.record(AgentId::new(2)).expect("the kid");
    assert!(kid.status.is_live() && kid.detached, "{kid:?}");
    (tree, model)
}

/// A detached child that outlives its owner's run is heard of by the owner's resumed run:
/// the kid ends while the resumed `boss` is in a model turn that answers without tool calls,
/// and the notice of its end reaches the boss's conversation and gives it one more turn (the
/// resumed run's child table knows the children of its earlier runs).
///
/// docs/semantics.md, Control: "A background child's completion reaches its owner's
/// conversation as a JSON notice ... at the owner's next turn boundary, unless the owner read
/// or awaited that result"; An agent's run: "A turn without tool calls ends the run, unless
/// something arrived during it that the model has not read: ... a child's completion notice".
#[tokio::test(start_paused = true)]
async fn a_resumed_owner_hears_of_its_detached_child_ending() {
    let (tree, model) = boss_with_detached_kid(
        vec![
            Turn::answer("boss run 2, first answer")
                .usage(U)
                .after(Duration::from_secs(2)),
            Turn::answer("boss run 2, after the notice").usage(U),
        ],
        Script::new([Turn::answer("kid done")
            .usage(U)
            .after(Duration::from_secs(1))]),
    )
    .await;
    let (boss, kid) = (AgentId::new(1), AgentId::new(2));
    let mut resumed = tree.resume(boss, "carry on").await.expect("resumes");
    let outcome = resumed.outcome().await;
    let kid_outcome = tree.outcome(kid).expect("the kid settled");
    assert_eq!(kid_outcome.text.as_deref(), Some("kid done"));
    let run2: Vec<_> = model
        .log_of(boss)
        .into_iter()
        .skip(2)
        .map(|c| c.messages)
        .collect();
    let noticed = run2.iter().any(|messages| {
        messages
            .iter()
            .any(|m| m.content.contains("subagent_ended") && m.content.contains("a2"))
    });
    tree.shutdown().await;
    assert!(
        noticed,
        "the resumed boss never heard that its detached kid ended (it made {} call(s) in its \
         resumed run and ended {:?})",
        run2.len(),
        outcome
    );
}

/// A detached child's `ask_owner` while its owner's resumed run waits on it reaches that run
/// (not the stopped actor of the run that started it): the wait is answered `asking`, and the
/// boss's steer is the answer the kid's call returns.
///
/// docs/semantics.md, Control: "`ask_owner {question}`: the child waits; the question
/// reaches its direct owner (an `asked` event, and a notice in an agent owner's conversation
/// at its next turn boundary) ... If the owner is waiting on that child, the wait is answered
/// at once with `{"status": "asking", "question": ...}`".
#[tokio::test(start_paused = true)]
async fn a_detached_childs_question_reaches_its_owners_resumed_run() {
    use agent_tree::testkit::{Call, Target};
    let (tree, model) = boss_with_detached_kid(
        vec![
            Turn::calls([Call::result(Target::Id(AgentId::new(2)))]).usage(U),
            Turn::calls([Call::steer(Target::Id(AgentId::new(2)), "blue")]).usage(U),
            Turn::answer("boss run 2 done").usage(U),
        ],
        Script::new([
            Turn::calls([crate::support::ask("which colour?")])
                .usage(U)
                .after(Duration::from_secs(1)),
            Turn::answer("kid done").usage(U),
        ]),
    )
    .await;
    let (boss, kid) = (AgentId::new(1), AgentId::new(2));
    let mut resumed = tree
        .resume(boss, "wait for your kid")
        .await
        .expect("resumes");
    let outcome = crate::races_mt::bounded("the resumed boss", resumed.outcome()).await;
    let kid_calls = model.log_of(kid);
    let answer = kid_calls
        .get(1)
        .and_then(|call| call.results.first().cloned())
        .expect("the kid's second call has its question's result");
    let boss_calls = model.log_of(boss);
    tree.shutdown().await;
    assert!(
        !answer.is_error && answer.content.contains("blue"),
        "the kid's question never reached its owner's resumed run: it got {:?}; the boss's \
         wait got {:?}; the boss ended {outcome:?}",
        answer.content,
        boss_calls.get(3).map(|c| c.results.clone()),
    );
}
