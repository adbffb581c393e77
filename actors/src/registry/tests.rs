use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, RestartPolicy, SettlePolicy};

use super::*;
use crate::catalog::Catalog;
use crate::config::TreeConfig;
use crate::shared::Branch;

/// A start spec of type `w` with restart type `restart` (review tests elsewhere use it).
pub(crate) fn spec(restart: RestartPolicy) -> PendingStart {
    PendingStart {
        definition: Arc::new(AgentDefinition::new("w", "").with_restart(restart)),
        branch: Arc::new(Branch {
            catalog: Catalog::default(),
            max_depth: 5,
        }),
        prompt: String::new(),
        settle: SettlePolicy::AbortChildren,
        context: Vec::new(),
        resumed: false,
        node: None,
        detached: false,
        owner_capabilities: None,
        parent_span: crate::util::SpanSlot::default(),
    }
}

fn admit(registry: &Registry, restart: RestartPolicy) -> AgentId {
    let config = TreeConfig::default();
    match registry.admit(Admission {
        owner: AgentId::ROOT,
        agent_type: "w",
        request_id: None,
        detached: false,
        max_depth: 5,
        config: &config,
        spec: spec(restart),
        pooled: false,
        inherited: &[],
        journaled: None,
        earlier: None,
    }) {
        Ok(Admitted::New(ticket)) => ticket.id,
        other => panic!("not admitted: {other:?}"),
    }
}

fn failed() -> Outcome {
    Outcome::failed(EndReason::ModelError, "boom")
}

fn registry() -> Registry {
    Registry::new(SessionId::new("s"), CancellationToken::new(), 10)
}

#[tokio::test(start_paused = true)]
async fn a_restartable_exit_awaits_its_owner_and_is_no_outcome_yet() {
    let registry = registry();
    let id = admit(&registry, RestartPolicy::Transient);
    let settled = registry
        .settle_run(id, 1, failed(), Vec::new())
        .expect("settles");
    assert!(settled.deferred);
    assert!(registry.awaiting_supervisor(id));
    assert_eq!(registry.outcome(id), None, "not final while awaiting");
    assert_eq!(registry.live(), 1, "keeps its slot");
    let ticket = registry.restart(id).expect("restartable");
    assert_eq!((ticket.incarnation, ticket.run), (2, 2));
    assert_eq!(registry.record(id).unwrap().incarnation, 2);
    assert!(
        registry.settle_run(id, 1, failed(), Vec::new()).is_none(),
        "the earlier run's settle is stale"
    );
}

/// A journal store in memory.
#[derive(Clone, Default)]
struct Memory(Arc<Mutex<Vec<u8>>>);

impl crate::journal::JournalStore for Memory {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        *self.0.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.lock().len() as u64
    }
    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.0.lock().clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_conversation_lives_in_the_journal_only_when_not_retained() {
    for retain in [true, false] {
        let registry = registry();
        let config = crate::journal::JournalConfig::new("memory").retain_conversations(retain);
        let session = agent_tree_protocol::SessionId::new("s");
        let tap = crate::journal::JournalTap::start(
            &config,
            Box::new(Memory::default()),
            &session,
            Default::default(),
            None,
        )
        .unwrap();
        registry.set_journal(tap.clone());
        let id = admit(&registry, RestartPolicy::Temporary);
        let conversation = vec![Message::user("go"), Message::assistant("done", vec![])];
        registry
            .settle_run(id, 1, Outcome::completed("done"), conversation.clone())
            .expect("settles");
        let held = registry
            .lock()
            .entry(id)
            .unwrap()
            .conversation
            .lock()
            .messages
            .len();
        assert_eq!(held, if retain { 2 } else { 0 }, "retain {retain}");
        assert_eq!(registry.conversation_journaled(id).is_some(), !retain);
        // Either way the journal has its last state, and reads it back.
        let read = tap.read_conversation(id).await.expect("journaled");
        assert_eq!(&read[..], &conversation[..]);
    }
}

#[tokio::test(start_paused = true)]
async fn an_abort_makes_an_awaiting_exit_final() {
    let registry = registry();
    let id = admit(&registry, RestartPolicy::Permanent);
    registry.settle_run(id, 1, failed(), Vec::new());
    registry.abort(id, EndReason::Aborted).unwrap();
    assert!(!registry.awaiting_supervisor(id));
    assert_eq!(registry.outcome(id), Some(failed()));
    assert_eq!(registry.live(), 0);
    assert!(
        registry.restart(id).is_none(),
        "an abort is never restarted"
    );
}

#[tokio::test(start_paused = true)]
async fn temporary_exits_are_final_at_once() {
    let registry = registry();
    let id = admit(&registry, RestartPolicy::Temporary);
    let settled = registry
        .settle_run(id, 1, failed(), Vec::new())
        .expect("settles");
    assert!(!settled.deferred);
    assert_eq!(registry.outcome(id), Some(failed()));
    assert!(
        registry
            .settle_run(id, 1, Outcome::completed("late"), Vec::new())
            .is_none(),
        "terminal is sticky"
    );
}

#[tokio::test(start_paused = true)]
async fn zero_usage_records_nothing_and_a_settled_agent_is_not_charged() {
    let registry = registry();
    let id = admit(&registry, RestartPolicy::Temporary);
    let seq = registry.lock().seq;
    let before = registry.lock_acquisitions();
    registry.bill_turn(id, 1, &crate::model::TurnSink::recording(), None);
    assert_eq!(
        registry.lock_acquisitions(),
        before,
        "no lock for zero usage"
    );
    registry
        .charge(id, agent_tree_protocol::Usage::tokens(2, 3))
        .expect("live");
    assert_eq!(registry.lock().seq, seq + 1, "one usage event");
    let root = registry.record(AgentId::ROOT).expect("root");
    assert_eq!(root.subtree, agent_tree_protocol::Usage::tokens(2, 3));
    registry.settle_run(id, 1, failed(), Vec::new());
    assert!(matches!(
        registry.charge(id, agent_tree_protocol::Usage::tokens(1, 1)),
        Err(crate::error::ControlError::WrongStatus(..))
    ));
}

#[tokio::test(start_paused = true)]
async fn every_operation_is_one_lock_acquisition() {
    let registry = registry();
    let before = registry.lock_acquisitions();
    let id = admit(&registry, RestartPolicy::Temporary);
    let sink = crate::model::TurnSink::recording();
    sink.usage(agent_tree_protocol::Usage::tokens(1, 1));
    registry.bill_turn(id, 1, &sink, None);
    registry.settle_run(id, 1, failed(), Vec::new());
    assert_eq!(registry.lock_acquisitions() - before, 3);
}

/// Mirrored records (`registry/mirror.rs`): a remote child's descendants folded into
/// the owner's records.
mod mirrored {
    use agent_tree_protocol::{Message, Usage};

    use super::*;
    use crate::error::ControlError;

    fn spawned(agent_type: &str, detached: bool) -> EventKind {
        EventKind::Spawned {
            agent_type: agent_type.into(),
            request_id: None,
            detached,
        }
    }

    fn started(agent_type: &str) -> EventKind {
        EventKind::Started {
            agent_type: agent_type.into(),
            incarnation: 1,
        }
    }

    /// Renames every quoted id `"aN"` in `messages`' contents that `map` maps: the
    /// placement's renaming, as far as these tests need it.
    fn rename_quoted_ids(messages: &mut [Message], map: &dyn Fn(AgentId) -> Option<AgentId>) {
        for message in messages {
            for n in 0..100 {
                if let Some(to) = map(AgentId::new(n)) {
                    message.content = message
                        .content
                        .replace(&format!("\"a{n}\""), &format!("\"{to}\""));
                }
            }
        }
    }

    /// A resumed remote run's hosted admission seeds the earlier children its
    /// conversation names: settled records under it with the next ids, in order,
    /// taking no counter and refusing control, and its conversation names them so.
    #[tokio::test(start_paused = true)]
    async fn a_resumed_admission_seeds_its_earlier_children_with_the_next_ids() {
        use agent_tree_protocol::{EarlierChild, ToolCall};
        let registry = registry();
        let config = TreeConfig::default();
        let mut spec = spec(RestartPolicy::Temporary);
        spec.resumed = true;
        spec.definition = Arc::new(AgentDefinition::new("w", "").with_inherit_context(true));
        let earlier = [
            EarlierChild {
                agent: AgentId::new(7),
                agent_type: "helper".into(),
                outcome: Outcome::completed("done 1"),
            },
            EarlierChild {
                agent: AgentId::new(9),
                agent_type: "helper".into(),
                outcome: failed(),
            },
        ];
        let call = ToolCall::new("c1", "Agent", serde_json::json!({ "prompt": "p" }));
        let mut result = Message::user(r#"{"agent_id":"a9","status":"failed"}"#);
        result.role = agent_tree_protocol::Role::Tool;
        result.tool_call_id = Some("c1".into());
        let inherited = [Message::assistant("", vec![call]), result];
        let ticket = match registry.admit(Admission {
            owner: AgentId::ROOT,
            agent_type: "w",
            request_id: None,
            detached: false,
            max_depth: 5,
            config: &config,
            spec,
            pooled: false,
            inherited: &inherited,
            journaled: None,
            earlier: Some(crate::registry::Earlier {
                children: &earlier,
                rename: rename_quoted_ids,
            }),
        }) {
            Ok(Admitted::New(ticket)) => ticket,
            other => panic!("not admitted: {other:?}"),
        };
        let top = ticket.id;
        assert_eq!(
            ticket.start.context[1].content,
            format!(r#"{{"agent_id":"a{}","status":"failed"}}"#, top.get() + 2),
            "the second earlier child is the second seed"
        );
        for (i, child) in earlier.iter().enumerate() {
            let seed = AgentId::new(top.get() + 1 + i as u64);
            let record = registry.record(seed).expect("seeded");
            assert_eq!(record.parent, Some(top));
            assert_eq!(record.outcome.as_ref(), Some(&child.outcome));
            assert_eq!(
                record.request_id.as_ref().map(|r| r.as_str().to_owned()),
                Some(format!("earlier:{}", child.agent))
            );
            assert_eq!(
                registry.refuse_mirrored(seed),
                Err(ControlError::WrongStatus(seed, record.status)),
                "an earlier child is settled, and refused as one"
            );
        }
        assert_eq!(registry.live(), 1, "only the agent itself is live");
    }

    #[tokio::test(start_paused = true)]
    async fn a_mirrored_record_folds_its_events_and_bills_every_ancestor() {
        let registry = registry();
        let stand_in = admit(&registry, RestartPolicy::Temporary);
        let live = registry.live();
        let helper = registry
            .mirror_spawn(stand_in, stand_in, spawned("helper", false))
            .expect("mirrored under its stand-in");
        assert_eq!(
            helper,
            AgentId::new(stand_in.get() + 1),
            "an id of this tree"
        );
        let leaf = registry
            .mirror_spawn(stand_in, helper, spawned("leaf", false))
            .expect("mirrored under a mirrored record");
        assert_eq!(registry.live(), live, "its own node admitted it");
        assert_eq!(registry.record(leaf).unwrap().depth, 3);
        registry.mirror_event(helper, started("helper")).unwrap();
        registry.mirror_event(leaf, started("leaf")).unwrap();
        let delta = Usage::tokens(3, 1);
        registry
            .mirror_event(leaf, EventKind::UsageReported { delta })
            .unwrap();
        let snapshot = registry.snapshot();
        snapshot.check_usage().expect("own and subtree agree");
        assert_eq!(snapshot.records[leaf.get() as usize].own, delta);
        assert_eq!(snapshot.records[stand_in.get() as usize].own, Usage::ZERO);
        assert_eq!(snapshot.records[stand_in.get() as usize].subtree, delta);
        assert_eq!(snapshot.records[0].subtree, delta);
        let done = Outcome::completed("done");
        registry
            .mirror_event(leaf, EventKind::settled(done.clone()))
            .unwrap();
        assert_eq!(registry.outcome(leaf), Some(done), "final at once");
        // After its terminal event nothing more is folded in, and nothing is sent.
        let seq = registry.lock().seq;
        assert!(
            registry
                .mirror_event(leaf, EventKind::UsageReported { delta })
                .is_err()
        );
        assert!(registry.mirror_event(leaf, EventKind::Steered).is_err());
        assert_eq!(registry.lock().seq, seq);
        assert_eq!(registry.record(AgentId::ROOT).unwrap().subtree, delta);
        // Only under a stand-in or a mirrored record, and only by the stand-in.
        let local = admit(&registry, RestartPolicy::Temporary);
        assert!(
            registry
                .mirror_spawn(stand_in, local, spawned("x", false))
                .is_none()
        );
        assert!(
            registry
                .mirror_spawn(helper, helper, spawned("x", false))
                .is_none()
        );
        assert!(
            registry.mirror_event(local, EventKind::Steered).is_err(),
            "a local agent's record is not mirrored"
        );
        assert!(
            registry
                .mirror_spawn(stand_in, stand_in, started("x"))
                .is_none()
        );
        assert_eq!(registry.snapshot().records.len(), local.get() as usize + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_settling_stand_in_settles_its_live_mirrored_records_killed_first() {
        let registry = registry();
        let stand_in = admit(&registry, RestartPolicy::Temporary);
        let lead = registry
            .mirror_spawn(stand_in, stand_in, spawned("lead", false))
            .unwrap();
        let worker = registry
            .mirror_spawn(stand_in, lead, spawned("worker", false))
            .unwrap();
        let detached = registry
            .mirror_spawn(stand_in, lead, spawned("watcher", true))
            .unwrap();
        let mut events = registry.subscribe();
        // A mirrored record that ends takes its non-detached descendants with it.
        let aborted = Outcome::ended(AgentStatus::Aborted, EndReason::Aborted);
        registry
            .mirror_event(lead, EventKind::settled(aborted))
            .unwrap();
        assert_eq!(registry.status(worker), Some(AgentStatus::Killed));
        assert_eq!(registry.status(detached), Some(AgentStatus::Starting));
        // The stand-in's end settles the rest, with its cause, before its own event.
        let down = Outcome::failed(EndReason::ActorFailed, "node down: w restarted");
        registry
            .settle_run(stand_in, 1, down, Vec::new())
            .expect("settles");
        let watcher = registry.record(detached).unwrap();
        assert_eq!(watcher.status, AgentStatus::Killed);
        assert_eq!(
            watcher.outcome.and_then(|o| o.error).as_deref(),
            Some("node down: w restarted")
        );
        let ended: Vec<AgentId> = events
            .drain()
            .into_iter()
            .filter(|e| e.kind.terminal_status().is_some())
            .map(|e| e.agent)
            .collect();
        assert_eq!(ended, [worker, lead, detached, stand_in]);
        assert_eq!(registry.live(), 0, "only the stand-in was counted");
    }

    #[tokio::test(start_paused = true)]
    async fn control_of_a_mirrored_record_is_refused_as_remote() {
        let registry = registry();
        let stand_in = admit(&registry, RestartPolicy::Temporary);
        let helper = registry
            .mirror_spawn(stand_in, stand_in, spawned("helper", false))
            .unwrap();
        registry.mirror_event(helper, started("helper")).unwrap();
        let config = TreeConfig::default();
        assert_eq!(
            registry.abort(helper, EndReason::Aborted),
            Err(ControlError::Remote(helper))
        );
        assert!(matches!(
            registry.route_steer(helper, "hi".into(), &config),
            Err(ControlError::Remote(id)) if id == helper
        ));
        assert_eq!(registry.kill(helper), Err(ControlError::Remote(helper)));
        assert_eq!(registry.status(helper), Some(AgentStatus::Running));
        assert_eq!(registry.abort(stand_in, EndReason::Aborted), Ok(()));
    }
}
