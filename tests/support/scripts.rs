//! Turns and scripts of the scripted model that many tests write the same way: one model
//! message that spawns several children, all in the background or all in the foreground;
//! the lead and worker of the recovery tests, before and after the crash; and a scripted
//! `boss` run to its completion.

#![allow(dead_code, unreachable_pub)]

use agent_tree::testkit::{Call, ScriptedModel, Turn};

/// A turn whose one message spawns each `(agent type, prompt)` of `children` in the
/// background, in order (the ids come back at once).
pub fn background_spawns<'a>(children: impl IntoIterator<Item = (&'a str, &'a str)>) -> Turn {
    Turn::calls(
        children
            .into_iter()
            .map(|(agent_type, prompt)| Call::spawn_background(agent_type, prompt)),
    )
}

/// A turn whose one message spawns each `(agent type, prompt)` of `children` in the
/// foreground, in order (the turn's results are their outcomes).
pub fn foreground_spawns<'a>(children: impl IntoIterator<Item = (&'a str, &'a str)>) -> Turn {
    Turn::calls(
        children
            .into_iter()
            .map(|(agent_type, prompt)| Call::spawn(agent_type, prompt)),
    )
}

/// Before a crash: a `lead` that spawns a `worker` ("dig") in the foreground, and a worker
/// whose turn hangs (the crash comes while it runs).
pub fn lead_waiting_on_a_hung_worker() -> ScriptedModel {
    ScriptedModel::new()
        .script("lead", [Turn::spawn("worker", "dig")])
        .script("worker", [Turn::hang()])
}

/// After that crash, the `lead` only: its lost turn re-run (the same spawn at the same place,
/// which gets the existing worker `a2`), then it resumes that interrupted worker where it was,
/// then answers `answer`.
pub fn lead_resuming_its_worker(answer: &str) -> ScriptedModel {
    ScriptedModel::new().script(
        "lead",
        [
            Turn::spawn("worker", "dig"),
            Turn::calls([super::resume_call("a2", "")]),
            Turn::answer(answer),
        ],
    )
}

/// A script that spawns `agent_type` with `prompt` in the foreground, then (its result read)
/// answers `answer`.
pub fn delegates(agent_type: &str, prompt: &str, answer: &str) -> [Turn; 2] {
    [Turn::spawn(agent_type, prompt), Turn::answer(answer)]
}

/// A script that answers `text` once `delay` of model time has passed.
pub fn answers_after(text: impl Into<String>, delay: std::time::Duration) -> [Turn; 1] {
    [Turn::answer(text).after(delay)]
}

/// A lead's script: it spawns a `worker` with `prompt` in the foreground, reads that
/// worker's result back by its id (`a2`, the lead being `a1`), then answers `answer`.
pub fn reads_its_worker_back(prompt: &str, answer: &str) -> [Turn; 3] {
    [
        Turn::spawn("worker", prompt),
        Turn::calls([super::read_result_call("a2")]),
        Turn::answer(answer),
    ]
}

/// A script that answers `text`, billing `usage`, once `delay` of model time has passed.
pub fn answers_after_billing(
    text: impl Into<String>,
    usage: agent_tree::protocol::Usage,
    delay: std::time::Duration,
) -> [Turn; 1] {
    [Turn::answer(text).usage(usage).after(delay)]
}

/// One turn whose message spawns a `agent_type` in the foreground for each of `tasks`, in
/// order.
pub fn foreground_spawns_of<const N: usize>(agent_type: &str, tasks: [&str; N]) -> Turn {
    Turn::calls(tasks.map(|task| Call::spawn(agent_type, task)))
}

/// One turn whose message spawns `n` `agent_type`s in the background, the `i`-th (from 0)
/// with the task `<task><i>`.
pub fn spawns_n_in_background(agent_type: &str, task: &str, n: usize) -> Turn {
    Turn::calls((0..n).map(|i| Call::spawn_background(agent_type, format!("{task}{i}"))))
}

/// A tree of `catalog` on a clone of `model` (the default configuration) where `boss` ran
/// with the task `go` and completed (checked, with its summary): the tree.
pub async fn boss_completed(
    model: &(impl agent_tree::Model + Clone),
    catalog: agent_tree::Catalog,
) -> agent_tree::Tree {
    let tree =
        super::harness::tree(model.clone(), catalog, agent_tree::TreeConfig::default()).await;
    let outcome =
        super::run_admitted(&tree, agent_tree::protocol::SpawnRequest::new("boss", "go")).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    tree
}
