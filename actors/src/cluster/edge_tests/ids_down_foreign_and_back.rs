//! A remote child's context goes down with the owner tree's ids [`foreign`]
//! (`ids::into_hosted`, on the stand-in), and comes back up with exactly those the stand-in
//! sent mapped back (`StandIn::on_conversation`'s map, reproduced by [`up`]); a resumed
//! run's earlier children go down as the owner's ids, for the hosted admission to rename to
//! their seeds (reproduced by [`admit_seeds`]), and a seed refuses control.
//!
//! The documented promise (`docs/cluster.md`, the stand-in): "Coming up, those ids (only
//! those the stand-in sent) are the owner's again, so the owner keeps the context as it
//! wrote it"; `ids.rs`: "an id its model made up stays as written". And
//! (`docs/semantics.md`): an earlier child is read-only there, "steering or aborting it is
//! refused as a settled agent's, resuming it with `ControlError::EarlierRun`".
//!
//! The runtime's texts are built with the runtime's own writers (`result_text`,
//! `set_result`, `ControlError`), so each test reads what the runtime really writes.

use std::collections::{HashMap, HashSet};

use agent_tree_protocol::{
    AgentId, AgentStatus, EarlierChild, EndReason, Message, Outcome, RestartPolicy, SessionId,
    ToolCall, WaitPolicy,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::ids_the_runtime_wrote::{id, refusal, tool};
use crate::agent::orchestration::{result_text, result_value, set_result};
use crate::cluster::edge::ids::{FOREIGN_BASE, foreign, into_hosted, owner_of_foreign, translate};
use crate::config::TreeConfig;
use crate::error::ControlError;
use crate::registry::{Admission, Admitted, Registry};
use crate::spawn::PendingStart;

fn notice_ended(agent: AgentId, outcome: &Outcome) -> Message {
    let mut notice = result_value(agent, Some(outcome));
    notice["notice"] = json!("subagent_ended");
    Message::user(notice.to_string())
}

fn notice_question(agent: AgentId, question: &str) -> Message {
    Message::user(
        json!({
            "notice": "question",
            "agent_id": agent,
            "question": question,
            "answer_with": "steer_subagent",
        })
        .to_string(),
    )
}

/// The stand-in's map for a conversation coming up (`StandIn::on_conversation`): its top's
/// hosted id to its own, a mirrored (or seeded) hosted id to the owner's, and a foreign id
/// it sent back to the owner's.
fn up(
    messages: &mut [Message],
    earlier: &[Message],
    top: Option<(AgentId, AgentId)>,
    mirrored: &HashMap<AgentId, AgentId>,
    sent: &HashSet<AgentId>,
) -> usize {
    translate(messages, earlier, |hosted| {
        if top.is_some_and(|(hosted_top, _)| hosted_top == hosted) {
            top.map(|(_, own)| own)
        } else {
            mirrored
                .get(&hosted)
                .copied()
                .or_else(|| owner_of_foreign(hosted).filter(|owner| sent.contains(owner)))
        }
    })
}

/// The hosted admission's rename of a resumed run's earlier children (`registry/admit.rs`):
/// the owner's id of the i-th earlier child is the seed `top + 1 + i`.
fn admit_seeds(
    context: &mut [Message],
    top: AgentId,
    earlier: &[AgentId],
) -> HashMap<AgentId, AgentId> {
    let seeds: HashMap<AgentId, AgentId> = earlier
        .iter()
        .zip(top.get() + 1..)
        .map(|(&owner, seed)| (owner, id(seed)))
        .collect();
    translate(context, &[], |owner| seeds.get(&owner).copied());
    // The stand-in's `mirrored` holds each seed as the record it stands for.
    seeds
        .into_iter()
        .map(|(owner, seed)| (seed, owner))
        .collect()
}

/// Every id in the runtime's positions of `messages` (what `translate` would offer its map).
fn runtime_ids(messages: &[Message]) -> Vec<AgentId> {
    let seen = std::cell::RefCell::new(Vec::new());
    let mut copy = messages.to_vec();
    translate(&mut copy, &[], |id| {
        seen.borrow_mut().push(id);
        None
    });
    seen.into_inner()
}

/// An owner's conversation naming its agents every way the runtime writes them, beside ids
/// its model made up (in prose, in a user tool, large and past the foreign base).
fn owner_context() -> Vec<Message> {
    let completed = Outcome::completed("a3 said: ask a1000000002");
    let failed = Outcome::failed(EndReason::ModelError, "tool_use a2 has no result")
        .with_partial("half of a3");
    let calls = vec![
        ToolCall::new(
            "s1",
            "Agent",
            json!({ "subagent_type": "helper", "prompt": "talk to a2" }),
        ),
        ToolCall::new(
            "s2",
            "Agent",
            json!({ "subagent_type": "helper", "prompt": "p", "background": true }),
        ),
        ToolCall::new(
            "w1",
            "wait_subagents",
            json!({ "agent_ids": ["a2", "a3", "a1000000002"], "policy": "all_settled" }),
        ),
        ToolCall::new(
            "g1",
            "get_subagent_result",
            json!({ "agent_id": "a3", "wait": true }),
        ),
        ToolCall::new(
            "t1",
            "steer_subagent",
            json!({ "agent_id": "a3", "message": "look at a2" }),
        ),
        ToolCall::new("x1", "abort_subagent", json!({ "agent_id": "a2" })),
        ToolCall::new(
            "r1",
            "Agent",
            json!({ "resume": "a2", "prompt": "again, a3" }),
        ),
        ToolCall::new("u1", "lookup", json!({ "agent_id": "a2" })),
        ToolCall::new(
            "m1",
            "steer_subagent",
            json!({ "agent_id": "a1000000002", "message": "made up" }),
        ),
        ToolCall::new(
            "m2",
            "get_subagent_result",
            json!({ "agent_id": "a999999999999" }),
        ),
    ];
    vec![
        Message::system("You lead; a2 is not a thing here."),
        Message::user("lead the team: a2 and a3"),
        Message::assistant("I will start a2, then a3", calls),
        tool("s1", result_text(id(2), Some(&completed))),
        tool("s2", result_text(id(3), None)),
        tool(
            "w1",
            set_result(
                WaitPolicy::AllSettled,
                &[(id(2), completed.clone()), (id(3), failed.clone())],
            ),
        ),
        tool("g1", result_text(id(3), Some(&failed))),
        tool(
            "t1",
            json!({ "agent_id": id(3), "receipt": "delivered" }).to_string(),
        ),
        refusal(
            "x1",
            ControlError::WrongStatus(id(2), AgentStatus::Completed),
        ),
        refusal("r1", ControlError::NotYours(id(2))),
        tool("u1", json!({ "agent_id": "a2", "found": true }).to_string()),
        refusal("m1", ControlError::NotYours(id(1_000_000_002))),
        refusal("m2", ControlError::NotYours(id(999_999_999_999))),
        notice_ended(id(3), &failed),
        notice_question(id(2), "shall a3 go on?"),
        Message::user("steered: a2 and a3 are done"),
    ]
}

// ---------------------------------------------------------------------------------------
// The round trip, byte for byte.
// ---------------------------------------------------------------------------------------

/// Every id the runtime wrote goes down past any hosted id; the model's words (prose, a
/// user tool's input and result, a child's text, error and partial) go down as written;
/// and up again the context is the owner's, byte for byte.
#[test]
fn every_kind_of_runtime_id_goes_down_foreign_and_comes_back_byte_for_byte() {
    let context = owner_context();
    let mut down = context.clone();
    let sent = into_hosted(&mut down, &[]);
    for hosted in runtime_ids(&down) {
        assert!(
            hosted.get() >= FOREIGN_BASE,
            "{hosted} went down as an id a hosted tree may give"
        );
    }
    assert_eq!(
        sent,
        HashSet::from([id(2), id(3), id(1_000_000_002), id(999_999_999_999)])
    );
    // The model's words are not the runtime's.
    assert_eq!(down[0], context[0]);
    assert_eq!(down[1], context[1]);
    assert_eq!(down[2].content, context[2].content);
    assert_eq!(down[2].tool_calls[0], context[2].tool_calls[0]);
    assert_eq!(
        down[2].tool_calls[7], context[2].tool_calls[7],
        "a user tool's input"
    );
    assert_eq!(down[10], context[10], "a user tool's result");
    assert_eq!(down[15], context[15], "a steer");
    let child = serde_json::from_str::<serde_json::Value>(&down[5].content).unwrap();
    assert_eq!(
        child["outcomes"][0]["text"],
        json!("a3 said: ask a1000000002")
    );
    assert_eq!(child["outcomes"][1]["partial"], json!("half of a3"));
    assert_eq!(
        down[8].content,
        json!({ "error": "a1000000002 cannot take this now: it is completed" }).to_string()
    );
    let mut back = down;
    up(&mut back, &[], Some((id(1), id(4))), &HashMap::new(), &sent);
    assert_eq!(back, context, "the owner keeps the context as it wrote it");
}

/// The child's own turns come up after the context (a later `from`, its calls found in the
/// messages kept): the foreign ids it names are the owner's, its own children the mirrored
/// ones, and an id its model made up (small, or large and not one the stand-in sent) stays.
#[test]
fn the_childs_own_turns_map_foreign_ids_back_and_keep_made_up_ones() {
    let context = owner_context();
    let mut down = context.clone();
    let sent = into_hosted(&mut down, &[]);
    let mut kept = down.clone();
    up(&mut kept, &[], Some((id(1), id(4))), &HashMap::new(), &sent);
    // Hosted: a1 the child itself, a2 its own helper (the owner's a9).
    let mirrored = HashMap::from([(id(2), id(9))]);
    let calls = vec![
        ToolCall::new(
            "c1",
            "Agent",
            json!({ "subagent_type": "helper", "prompt": "p" }),
        ),
        ToolCall::new(
            "c2",
            "steer_subagent",
            json!({ "agent_id": "a1000000002", "message": "hi" }),
        ),
        ToolCall::new(
            "c3",
            "get_subagent_result",
            json!({ "agent_id": "a1000000005" }),
        ),
        ToolCall::new(
            "c4",
            "wait_subagents",
            json!({ "agent_ids": ["a2", "a1000000003", "a7"] }),
        ),
        ToolCall::new(
            "c5",
            "Agent",
            json!({ "resume": "a2000000002", "prompt": "p" }),
        ),
    ];
    let mut turns = vec![
        Message::user("go"),
        Message::assistant("a1000000002 is my owner's", calls),
        tool("c1", result_text(id(2), None)),
        refusal("c2", ControlError::NotYours(id(1_000_000_002))),
        refusal("c3", ControlError::NotYours(id(1_000_000_005))),
        refusal("c4", ControlError::NotYours(id(1_000_000_003))),
        refusal("c5", ControlError::NotYours(id(2_000_000_002))),
    ];
    up(&mut turns, &kept, Some((id(1), id(4))), &mirrored, &sent);
    assert_eq!(turns[1].content, "a1000000002 is my owner's");
    let inputs: Vec<_> = turns[1]
        .tool_calls
        .iter()
        .map(|c| c.input.as_str())
        .collect();
    assert_eq!(
        inputs,
        [
            r#"{"prompt":"p","subagent_type":"helper"}"#,
            r#"{"agent_id":"a2","message":"hi"}"#,
            r#"{"agent_id":"a1000000005"}"#,
            r#"{"agent_ids":["a9","a3","a7"]}"#,
            r#"{"prompt":"p","resume":"a1000000002"}"#,
        ]
    );
    assert_eq!(turns[2].content, result_text(id(9), None));
    assert_eq!(
        turns[3].content,
        json!({ "error": "no subagent a2 of yours" }).to_string()
    );
    assert_eq!(
        turns[4].content,
        json!({ "error": "no subagent a1000000005 of yours" }).to_string(),
        "a5 was never sent: its foreign spelling is the model's own"
    );
    assert_eq!(
        turns[5].content,
        json!({ "error": "no subagent a3 of yours" }).to_string()
    );
    assert_eq!(
        turns[6].content,
        json!({ "error": "no subagent a1000000002 of yours" }).to_string(),
        "the owner's made-up a1000000002 went down as a2000000002"
    );
}

/// A resumed run whose first run inherited its owner's context: the conversation names
/// the owner's other children (foreign) and the agent's own earlier children (seeded by
/// the hosted admission). Down, admitted and back up, it is the owner's, byte for byte,
/// and no id in it is one the hosted tree gives a new child.
#[test]
fn a_resumed_inherited_conversation_seeds_its_own_and_sends_its_owners_foreign() {
    let mut conversation = owner_context();
    // The first run (the owner's a4), after its inherited context: its own helpers a7, a8.
    let calls = vec![
        ToolCall::new(
            "h1",
            "Agent",
            json!({ "subagent_type": "helper", "prompt": "p" }),
        ),
        ToolCall::new(
            "h2",
            "Agent",
            json!({ "subagent_type": "helper", "prompt": "q", "background": true }),
        ),
        ToolCall::new(
            "h3",
            "steer_subagent",
            json!({ "agent_id": "a2", "message": "hi" }),
        ),
        ToolCall::new("h4", "wait_subagents", json!({ "agent_ids": ["a8", "a3"] })),
    ];
    conversation.extend([
        Message::user("go"),
        Message::assistant("", calls),
        tool(
            "h1",
            result_text(id(7), Some(&Outcome::completed("done 1"))),
        ),
        tool("h2", result_text(id(8), None)),
        refusal("h3", ControlError::NotYours(id(2))),
        refusal("h4", ControlError::NotYours(id(3))),
        notice_ended(id(8), &Outcome::completed("done 2")),
        Message::assistant("first helper", Vec::new()),
    ]);
    let earlier = [id(7), id(8)];
    let mut down = conversation.clone();
    let sent = into_hosted(&mut down, &earlier);
    assert_eq!(
        sent,
        HashSet::from([id(2), id(3), id(1_000_000_002), id(999_999_999_999)]),
        "the earlier children are left for the admission"
    );
    // Hosted: a0 the root, a1 the resumed agent, a2 and a3 its seeds; new children a4, …
    let top = id(1);
    let mirrored = admit_seeds(&mut down, top, &earlier);
    for hosted in runtime_ids(&down) {
        assert!(
            hosted.get() >= FOREIGN_BASE || [id(2), id(3)].contains(&hosted),
            "{hosted} is neither foreign nor a seed: a new child may take it"
        );
    }
    let mut back = down;
    up(&mut back, &[], Some((top, id(4))), &mirrored, &sent);
    assert_eq!(back, conversation);
}

/// A node two edges down (the child's own child inherits its context there): the owner's
/// foreign ids are foreign again, its node's own ids foreign once, and both come back.
#[test]
fn a_context_sent_two_edges_down_comes_back_twice() {
    let context = owner_context();
    let mut first = context.clone();
    let sent_first = into_hosted(&mut first, &[]);
    // On the first node, the child (a1) spawned a helper (a2) and steered the owner's a2.
    first.extend([
        Message::user("go"),
        Message::assistant(
            "",
            vec![
                ToolCall::new(
                    "n1",
                    "Agent",
                    json!({ "subagent_type": "helper", "prompt": "p" }),
                ),
                ToolCall::new(
                    "n2",
                    "steer_subagent",
                    json!({ "agent_id": "a1000000002", "message": "m" }),
                ),
            ],
        ),
        tool("n1", result_text(id(2), Some(&Outcome::completed("x")))),
        refusal("n2", ControlError::NotYours(id(1_000_000_002))),
    ]);
    let on_first = first.clone();
    let mut second = first;
    let sent_second = into_hosted(&mut second, &[]);
    for hosted in runtime_ids(&second) {
        assert!(hosted.get() >= FOREIGN_BASE, "{hosted}");
    }
    assert!(sent_second.contains(&id(2)) && sent_second.contains(&id(1_000_000_002)));
    let mut back = second;
    up(&mut back, &[], None, &HashMap::new(), &sent_second);
    assert_eq!(back, on_first, "up one edge: the first node's");
    let mut owner = back[..context.len()].to_vec();
    up(
        &mut owner,
        &[],
        Some((id(1), id(4))),
        &HashMap::new(),
        &sent_first,
    );
    assert_eq!(owner, context, "up two edges: the owner's");
}

// ---------------------------------------------------------------------------------------
// What the owner's model wrote comes back as written.
// ---------------------------------------------------------------------------------------

/// The runtime reads an id trimmed (`parse_id`), so an owner's model that wrote a padded
/// id reached its agent, and its conversation keeps the padding as written. Down it goes
/// foreign; up it comes back as the owner wrote it, padding and all ("the owner keeps the
/// context as it wrote it"): the kept copy of a remote child's context is the owner's, as
/// a local child's is.
// regression: the padded id once came back trimmed.
#[test]
fn a_padded_owner_id_in_an_inherited_call_comes_back_as_the_owner_wrote_it() {
    let context = vec![
        Message::user("lead"),
        Message::assistant(
            "",
            vec![
                ToolCall::new(
                    "c1",
                    "steer_subagent",
                    json!({ "agent_id": " a2\n", "message": "hi" }),
                ),
                ToolCall::new("c2", "wait_subagents", json!({ "agent_ids": ["\ta3 "] })),
            ],
        ),
        tool(
            "c1",
            json!({ "agent_id": id(2), "receipt": "delivered" }).to_string(),
        ),
        refusal("c2", ControlError::NotYours(id(3))),
    ];
    let mut down = context.clone();
    let sent = into_hosted(&mut down, &[]);
    let mut back = down;
    up(&mut back, &[], None, &HashMap::new(), &sent);
    assert_eq!(
        back[1].tool_calls[0].input.as_str(),
        context[1].tool_calls[0].input.as_str(),
        "the steer's input the owner's model wrote"
    );
    assert_eq!(
        back[1].tool_calls[1].input.as_str(),
        context[1].tool_calls[1].input.as_str(),
        "the wait's input the owner's model wrote"
    );
}

/// An id past `u64::MAX - FOREIGN_BASE` has no foreign spelling and goes down as written
/// (`foreign` is `None`), though it is also the foreign spelling of the id `FOREIGN_BASE`
/// below it. With both made up in an owner's context, each comes up as the model wrote it
/// ("an id its model made up stays as written"): only the ids the stand-in sent are mapped
/// back.
// regression: both once came up as the lower id, the model's `a18446744073709551615`
// rewritten to an id it never wrote.
#[test]
fn a_made_up_id_with_no_foreign_spelling_is_kept_beside_the_one_whose_spelling_it_is() {
    let max = u64::MAX;
    let below = u64::MAX - FOREIGN_BASE;
    assert_eq!(foreign(id(max)), None);
    assert_eq!(foreign(id(below)), Some(id(max)));
    let context = vec![
        Message::user("lead"),
        Message::assistant(
            "",
            vec![
                ToolCall::new(
                    "c1",
                    "get_subagent_result",
                    json!({ "agent_id": format!("a{max}") }),
                ),
                ToolCall::new(
                    "c2",
                    "get_subagent_result",
                    json!({ "agent_id": format!("a{below}") }),
                ),
            ],
        ),
        refusal("c1", ControlError::NotYours(id(max))),
        refusal("c2", ControlError::NotYours(id(below))),
    ];
    let mut down = context.clone();
    let sent = into_hosted(&mut down, &[]);
    let mut back = down;
    up(&mut back, &[], None, &HashMap::new(), &sent);
    assert_eq!(
        back[1].tool_calls[0].input.as_str(),
        context[1].tool_calls[0].input.as_str(),
        "a made-up id with no foreign spelling"
    );
    assert_eq!(back[2].content, context[2].content, "its refusal");
    assert_eq!(back, context);
}

// ---------------------------------------------------------------------------------------
// The earlier-run refusal, in the hosted registry.
// ---------------------------------------------------------------------------------------

/// A resumed run's start spec, of a temporary type (the registry tests' own, resumed).
fn spec() -> PendingStart {
    PendingStart {
        resumed: true,
        ..crate::registry::tests::spec(RestartPolicy::Temporary)
    }
}

/// A resumed run's hosted tree: the agent and one seeded earlier child (the owner's a7,
/// completed). Returns the registry, the agent and the seed.
fn seeded() -> (Registry, AgentId, AgentId) {
    let registry = Registry::new(SessionId::new("s"), CancellationToken::new(), 10);
    let config = TreeConfig::default();
    let earlier = [EarlierChild {
        agent: id(7),
        agent_type: "helper".into(),
        outcome: Outcome::completed("done 1"),
    }];
    let ticket = match registry.admit(Admission {
        owner: AgentId::ROOT,
        agent_type: "w",
        request_id: None,
        detached: false,
        max_depth: 5,
        config: &config,
        spec: spec(),
        pooled: false,
        inherited: &[],
        journaled: None,
        earlier: Some(crate::registry::Earlier {
            children: &earlier,
            rename: crate::cluster::edge::ids::rename,
        }),
    }) {
        Ok(Admitted::New(ticket)) => ticket,
        other => panic!("not admitted: {other:?}"),
    };
    let top = ticket.id;
    (registry, top, id(top.get() + 1))
}

/// A seed is read-only, and its resume is refused as an earlier run's child.
#[tokio::test(start_paused = true)]
async fn a_seed_is_readable_and_its_resume_is_refused_as_an_earlier_runs_child() {
    let (registry, top, seed) = seeded();
    assert_eq!(registry.record(seed).map(|r| r.parent), Some(Some(top)));
    assert_eq!(
        registry.outcome(seed),
        Some(Outcome::completed("done 1")),
        "its result can be read"
    );
    let config = TreeConfig::default();
    assert!(matches!(
        registry.reopen(seed, top, &config, "again".into(), None, None),
        Err(crate::error::SpawnError::Control(ControlError::EarlierRun(s))) if s == seed
    ));
}

/// `docs/semantics.md`: an earlier child "is read-only there (steering or aborting it is
/// refused as a settled agent's, resuming it with `ControlError::EarlierRun`)", as in a
/// local run. A model's `steer_subagent` goes through `Registry::route_steer` (after
/// `authorize`, which the seed, a child of the agent, passes): the seed is refused there
/// with `WrongStatus` ("a7 cannot take this now: it is completed"), as a settled local
/// child is.
// regression: the seed was once refused with `EarlierRun`, `route_steer` asking
// `refuse_mirrored` before the status.
#[tokio::test(start_paused = true)]
async fn a_steer_of_a_seed_is_refused_as_a_settled_agents() {
    let (registry, top, seed) = seeded();
    let config = TreeConfig::default();
    assert!(
        registry.authorize(top, seed, config.control_scope).is_ok(),
        "the seed is the agent's child"
    );
    let refused = registry
        .route_steer(seed, "hi".into(), &config)
        .expect_err("refused");
    assert_eq!(
        refused,
        ControlError::WrongStatus(seed, AgentStatus::Completed),
        "refused: {refused}"
    );
}
