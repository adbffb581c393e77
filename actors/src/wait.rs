//! Waits over a set of agents: `all_settled` and `fail_fast`. Which agents a policy aborts is
//! decided in [`crate::policy::wait`]; this module only watches and carries it out.
//!
//! # Invariants
//!
//! * A wait never touches agents outside its set, nor the waiter; `fail_fast` aborts only
//!   the set's agents still live when the first non-completed outcome arrives.
//! * Outcomes are returned in the order the set was given, whatever order they arrive in.
//! * Cancelling a wait (dropping its future) leaves every agent of the set running.

use agent_tree_protocol::{AgentId, EndReason, Outcome, WaitPolicy};
use tokio::task::JoinSet;

use crate::policy::wait::to_abort;
use crate::registry::Registry;

/// Waits for every agent of `ids` to settle under `policy`; returns their outcomes in order.
/// An id the registry does not know yields a `killed` outcome.
pub(crate) async fn wait_set(
    registry: &Registry,
    ids: &[AgentId],
    policy: WaitPolicy,
) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = vec![None; ids.len()];
    let mut waits = JoinSet::new();
    for (index, &id) in ids.iter().enumerate() {
        let Some(mut settled) = registry.watch(id) else {
            outcomes[index] = Some(Outcome::ended(
                agent_tree_protocol::AgentStatus::Killed,
                EndReason::Killed,
            ));
            continue;
        };
        waits.spawn(async move {
            let outcome = match settled.wait_for(Option::is_some).await {
                Ok(outcome) => outcome.clone(),
                Err(_) => None,
            };
            (index, outcome)
        });
    }
    let mut aborted = vec![false; ids.len()];
    loop {
        for index in to_abort(policy, &outcomes) {
            // The root is no agent a wait aborts (as `Tree::abort` refuses it): its token
            // is every agent's.
            if !std::mem::replace(&mut aborted[index], true) && !ids[index].is_root() {
                let _ = registry.abort(ids[index], EndReason::Aborted);
            }
        }
        let Some(joined) = waits.join_next().await else {
            break;
        };
        if let Ok((index, outcome)) = joined {
            outcomes[index] = Some(outcome.unwrap_or_else(|| {
                Outcome::ended(agent_tree_protocol::AgentStatus::Killed, EndReason::Killed)
            }));
        }
    }
    outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                Outcome::ended(agent_tree_protocol::AgentStatus::Killed, EndReason::Killed)
            })
        })
        .collect()
}
